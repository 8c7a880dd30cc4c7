"""CLI conventions that every command shares."""
import pytest
from click.testing import CliRunner

from gputext.cli import cli


def all_commands(group=cli, prefix=()):
    for name, command in group.commands.items():
        yield prefix + (name,), command
        if hasattr(command, "commands"):
            yield from all_commands(command, prefix + (name,))


@pytest.mark.parametrize("path,command", list(all_commands()), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_command_has_help_with_an_example(path, command):
    result = CliRunner().invoke(cli, list(path) + ["--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output, f"gputext {' '.join(path)} --help has no Example"


def test_doctor_reports_versions_and_device():
    result = CliRunner().invoke(cli, ["doctor"])
    assert result.exit_code == 0, result.output
    for word in ("gputext", "numpy", "numba", "numba-cuda", "auto"):
        assert word in result.output


def test_cuda_without_gpu_is_a_clear_error(monkeypatch):
    from gputext import backend
    from gputext.errors import BackendError
    monkeypatch.setattr(backend, "cuda_status", lambda: (False, "no CUDA driver or GPU found"))
    monkeypatch.setattr(backend, "simulator_enabled", lambda: False)
    with pytest.raises(BackendError, match="--device cuda requested but CUDA is not usable"):
        backend.resolve("cuda")
    assert backend.resolve("auto").name == "cpu"
    assert "auto chose the CPU" in backend.resolve("auto").reason


def test_doctor_compile_in_parallel_jobs(monkeypatch, tmp_path):
    """doctor --compile --jobs 2: the corpora here, the other steps as gputext processes, a step and
    those that follow it in one job; a failing step is one line and exit code 2."""
    from gputext import warmup
    steps = [("corpus synth", "corpus synth --n-docs 300 --n-terms 500 --n-classes 3 --seed 1 -o {d}/corpus.h5"),
             ("corpus split", "corpus split {d}/corpus.h5 --test-size 0.25 --seed 1 -o {d}/split"),
             ("knn search cosine k=30", "knn search --index {d}/split/train.h5 --queries {d}/split/test.h5 -k 30 -o {d}/a.h5"),
             ("knn search cosine k=10", "knn search --index {d}/split/train.h5 --queries {d}/split/test.h5 -k 10 -o {d}/b.h5"),
             ("cluster stream", "cluster stream {d}/split/train.h5 -o {d}/stream.h5")]
    monkeypatch.setattr(warmup, "WARMUP_STEPS", steps)
    result = CliRunner().invoke(cli, ["doctor", "--compile", "--device", "cpu", "--jobs", "2"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0] + " " + line.split()[1]: line for line in result.output.splitlines() if line.startswith("  ")}
    assert all("in a job of its own" in lines[key] for key in ("knn search", "cluster stream")), result.output
    assert "2 processes at once" in result.output
    monkeypatch.setattr(warmup, "WARMUP_STEPS", steps[:2] + [("knn search cosine k=30", "knn search --index "
                                                               "{d}/missing.h5 -k 3 -o {d}/c.h5")])
    result = CliRunner().invoke(cli, ["doctor", "--compile", "--device", "cpu", "--jobs", "2"])
    assert result.exit_code == 2 and "warm-up step 'knn search cosine k=30' exited with 2" in result.output, result.output
