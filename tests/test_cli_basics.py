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
