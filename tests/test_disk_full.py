"""A full disk or an I/O error while writing HDF5 (issue 32 items 2 and 4): one line, exit code 2,
the old output kept, no temporary file left; the in-place `cluster star --update X -o X` puts the
file back byte for byte, wherever its writes fail.

The failure is injected at the operating system's boundary: ``os.pwrite`` / ``os.ftruncate`` of
gputext.io.h5file raise OSError(ENOSPC) once N bytes were written (in this process, at many N),
and, in a child process, a real file size limit (RLIMIT_FSIZE, ``ulimit -f``, with SIGXFSZ
ignored) makes the kernel refuse the writes with EFBIG.
"""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gputext.cli import cli
from gputext.io import h5file, write_corpus
from procs import child_env
from test_star_append import assert_same_file, base_file, corpora

HERE = os.path.dirname(os.path.abspath(__file__))


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class FullDisk:
    """os.pwrite / os.ftruncate of gputext.io.h5file as on a disk with ``room`` free bytes: writes
    past the end of a file take room, and fail with ENOSPC when there is none (a short write
    first, as a real disk does); overwrites inside a file need none. ``eio_at``: the write call of
    that number (0, 1, ...) fails once with EIO wherever it writes (a transient I/O error)."""

    def __init__(self, room: float = float("inf"), eio_at: int = -1):
        self.room, self.eio_at, self.calls, self.grown, self.failures = room, eio_at, 0, 0, 0
        self.real_pwrite, self.real_ftruncate = os.pwrite, os.ftruncate

    def fail(self, code: int):
        self.failures += 1
        raise OSError(code, os.strerror(code))

    def pwrite(self, fd, data, offset):
        self.calls += 1
        if self.calls - 1 == self.eio_at:
            self.fail(errno.EIO)
        data = bytes(data)
        grow = max(0, offset + len(data) - max(offset, os.fstat(fd).st_size))
        if grow > self.room - self.grown:
            fits = len(data) - grow + int(max(0, self.room - self.grown))
            if fits <= 0:
                self.fail(errno.ENOSPC)
            data = data[:fits]
            grow = max(0, offset + len(data) - max(offset, os.fstat(fd).st_size))
        n = self.real_pwrite(fd, data, offset)
        self.grown += grow
        return n

    def ftruncate(self, fd, size):
        grow = size - os.fstat(fd).st_size
        if grow > 0 and self.grown + grow > self.room:
            self.fail(errno.ENOSPC)
        self.grown += max(grow, 0)
        return self.real_ftruncate(fd, size)


def install(monkeypatch, disk: FullDisk) -> None:
    monkeypatch.setattr(h5file.os, "pwrite", disk.pwrite)
    monkeypatch.setattr(h5file.os, "ftruncate", disk.ftruncate)


@pytest.fixture(scope="module")
def star_files(tmp_path_factory):
    """A clustering, a batch to add, and the in-place update's result (what a full disk must give
    back, or the old file)."""
    d = tmp_path_factory.mktemp("diskfull")
    old, add, _ = corpora(21, 70, 40, 60)
    base, add_path, new = str(d / "base.h5"), str(d / "add.h5"), str(d / "new.h5")
    base_file(old, 0.3, base)
    write_corpus(add, add_path)
    shutil.copyfile(base, new)
    result = CliRunner().invoke(cli, ["cluster", "star", "--update", new, "--add", add_path, "-o", new, "--device", "cpu",
                                      "--quiet"])
    assert result.exit_code == 0, result.output
    return base, add_path, new


def in_place_update(path: str, add: str):
    return CliRunner().invoke(cli, ["cluster", "star", "--update", path, "--add", add, "-o", path, "--device", "cpu",
                                    "--quiet"])


ROLLED_BACK = "while writing; the update was rolled back, the file is as it was"


def test_in_place_update_survives_a_full_disk_at_every_point(tmp_path, monkeypatch, star_files):
    """The update's writes fail with ENOSPC when the disk has N free bytes, for 14 values of N
    spread over the room it takes, and with a transient EIO at 12 of its write calls spread over
    them all (overwrites of the old file included): each run exits 2 with one line and leaves the
    old file byte for byte, which validates and then updates normally."""
    base, add, new = star_files
    work = str(tmp_path / "c.h5")
    shutil.copyfile(base, work)
    counter = FullDisk()
    install(monkeypatch, counter)
    result = in_place_update(work, add)
    assert result.exit_code == 0, result.output
    room, calls = counter.grown, counter.calls
    monkeypatch.undo()
    assert room > 1000 and calls > 50
    old_digest = digest(base)
    disks = [FullDisk(room=r) for r in sorted({0, 1} | {room * i // 10 for i in range(1, 10)} | {room - 1})]
    disks += [FullDisk(eio_at=c) for c in sorted({0, 1, 2} | {calls * i // 10 for i in range(1, 10)})]
    assert len(disks) >= 20
    for disk in disks:
        shutil.copyfile(base, work)
        install(monkeypatch, disk)
        result = in_place_update(work, add)
        monkeypatch.undo()
        point = (disk.room, disk.eio_at)
        assert disk.failures == 1, point
        assert result.exit_code == 2, (point, result.output)
        reason = "no space left on the device (ENOSPC)" if disk.eio_at < 0 else "input/output error (EIO)"
        assert result.stderr.strip().splitlines() == [f"Error: {work}: {reason} {ROLLED_BACK}"], (point, result.stderr)
        assert digest(work) == old_digest, point
        assert os.listdir(tmp_path) == ["c.h5"]
    check = CliRunner().invoke(cli, ["corpus", "validate", work])
    assert check.exit_code == 0, check.output
    assert in_place_update(work, add).exit_code == 0  # the file updates normally afterwards
    assert_same_file(work, new)


@pytest.mark.parametrize("argv", [
    ["corpus", "synth", "--preset", "demo", "--n-docs", "200", "-o", "{out}"],
    ["corpus", "split", "{base}", "--test-size", "0.3", "-o", "{dir}"],
    ["knn", "search", "--index", "{base}", "--exclude-self", "-k", "3", "-o", "{out}", "--device", "cpu"],
    ["cluster", "star", "{add}", "--beta", "0.3", "-o", "{out}", "--device", "cpu"],
    ["cluster", "star", "--update", "{base}", "--add", "{add}", "-o", "{out}", "--device", "cpu"],
    ["cluster", "stream", "{add}", "-o", "{out}", "--state", "s.h5", "--device", "cpu"],
    ["knn", "metafeatures", "--train", "{base}", "--test", "{add}", "-k", "2", "-o", "{out}", "--device", "cpu"],
], ids=lambda a: " ".join(a[:2]))
def test_every_writer_on_a_full_disk(tmp_path, monkeypatch, star_files, argv):
    """Each HDF5 writer, its writes failing half-way: exit 2, one line, the old output kept, no
    temporary file, inputs unchanged."""
    base, add, _ = star_files
    out = str(tmp_path / "out.h5")
    with open(out, "wb") as f:
        f.write(b"the old output")
    os.mkdir(tmp_path / "split")
    inputs = {p: digest(p) for p in (base, add)}
    argv = [a.format(out=out, base=base, add=add, dir=str(tmp_path / "split")) for a in argv]
    disk = FullDisk(room=1500)
    install(monkeypatch, disk)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, argv + ["--quiet"])
    finally:
        os.chdir(old)
    assert disk.failures
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "no space left on the device (ENOSPC)" in errors[0], result.stderr
    assert open(out, "rb").read() == b"the old output"
    assert sorted(os.listdir(tmp_path)) == ["out.h5", "split"] and not os.listdir(tmp_path / "split")
    assert {p: digest(p) for p in inputs} == inputs


CHILD = r"""
import os, resource, shutil, signal, sys
from click.testing import CliRunner
from gputext.cli import cli
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
base, add, work, limits = sys.argv[1], sys.argv[2], sys.argv[3], [int(v) for v in sys.argv[4:]]
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
for limit in limits:
    shutil.copyfile(base, work)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    r = CliRunner().invoke(cli, ["cluster", "star", "--update", work, "--add", add, "-o", work, "--device", "cpu", "--quiet"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    ok = CliRunner().invoke(cli, ["corpus", "validate", work]).exit_code
    print(limit, r.exit_code, ok, open(work, "rb").read() == open(base, "rb").read(), r.stderr.strip().replace("\n", " | "))
"""


def test_in_place_update_under_a_file_size_limit(tmp_path, star_files):
    """A real EFBIG from the kernel (ulimit -f) at 8 sizes between the old and the new file's:
    exit 2, one line, the old file byte for byte, valid; above the new size the update succeeds."""
    base, add, new = star_files
    work = str(tmp_path / "c.h5")
    old_size, new_size = os.path.getsize(base), os.path.getsize(new)
    limits = [old_size + (new_size - old_size) * i // 8 for i in range(8)] + [new_size + 65536]
    proc = subprocess.run([sys.executable, "-c", CHILD, base, add, work] + [str(v) for v in limits],
                          capture_output=True, text=True, timeout=300, env=child_env(), cwd=HERE)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(" ", 4) for line in proc.stdout.splitlines()]
    assert len(rows) == len(limits)
    for limit, code, valid, same, message in rows[:-1]:
        assert (code, valid, same) == ("2", "0", "True"), (limit, message)
        assert message == f"Error: {work}: file too large (a file size limit, e.g. ulimit -f) (EFBIG) {ROLLED_BACK}"
    assert rows[-1][1:4] == ["0", "0", "False"], rows[-1]


def test_special_outputs_are_streamed_and_symlinks_followed(tmp_path):
    """-o naming a symlink writes its target (the link stays); a FIFO and /dev/stdout get the bytes
    streamed instead of a file renamed over them (issue 32 item 3)."""
    import threading

    argv = ["corpus", "synth", "--preset", "demo", "--n-docs", "12", "--quiet", "-o"]
    os.symlink("target.h5", tmp_path / "link.h5")
    result = CliRunner().invoke(cli, argv + [str(tmp_path / "link.h5")])
    assert result.exit_code == 0, result.output
    assert os.path.islink(tmp_path / "link.h5") and (tmp_path / "target.h5").stat().st_size > 0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    result = CliRunner().invoke(cli, argv + [str(fifo)])
    reader.join(60)
    assert result.exit_code == 0 and got and got[0] == (tmp_path / "target.h5").read_bytes()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    proc = subprocess.run([sys.executable, "-m", "gputext"] + argv + ["/dev/stdout"], capture_output=True,
                          env=child_env(), timeout=120)
    assert proc.returncode == 0 and proc.stdout == (tmp_path / "target.h5").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["fifo", "link.h5", "target.h5"]


def test_stream_output_appears_only_with_its_state(tmp_path, monkeypatch, star_files):
    """`cluster stream IN -o o.h5 --state s.h5` wrote o.h5 and then failed on the state (issue 32
    item 6): now a failed state write leaves neither."""
    real = os.pwrite

    def state_disk_full(fd, data, offset):  # only the state's (temporary) file is on a full disk
        if ".s.h5.gputext-tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, offset)

    monkeypatch.setattr(h5file.os, "pwrite", state_disk_full)
    _, add, _ = star_files
    out, state = str(tmp_path / "o.h5"), str(tmp_path / "s.h5")
    result = CliRunner().invoke(cli, ["cluster", "stream", add, "-o", out, "--state", state, "--device", "cpu", "--quiet"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"Error: {state}: no space left on the device (ENOSPC) while writing; nothing was written"
    assert os.listdir(tmp_path) == []


def test_write_corpus_on_a_full_disk_at_every_point(tmp_path, monkeypatch):
    """write_corpus (every corpus and result writer's last step), its disk full after N bytes for
    12 values of N: DiskError naming the output, the old output kept, no temporary file."""
    from gputext.io.diskerror import DiskError
    from test_bad_inputs import _corpus

    corpus, out = _corpus(n_docs=200, n_terms=50), str(tmp_path / "o.h5")
    counter = FullDisk()
    install(monkeypatch, counter)
    write_corpus(corpus, str(tmp_path / "probe.h5"))
    monkeypatch.undo()
    os.unlink(tmp_path / "probe.h5")
    for room in sorted({0, 1} | {counter.grown * i // 10 for i in range(1, 10)} | {counter.grown - 1}):
        with open(out, "wb") as f:
            f.write(b"old")
        install(monkeypatch, FullDisk(room=room))
        with pytest.raises(DiskError, match=f"^{out}: no space left on the device \\(ENOSPC\\) while writing; the old"):
            write_corpus(corpus, out)
        monkeypatch.undo()
        assert open(out, "rb").read() == b"old" and os.listdir(tmp_path) == ["o.h5"], room


REFUSED_OPEN = r"""
import atexit, gc, sys
atexit.register(gc.freeze)  # as gputext.cli.main does
from gputext.io.append import CorpusAppend
from gputext.errors import InputError
try:
    CorpusAppend(sys.argv[1], 1, ())
except InputError as exc:
    print(exc)
sys.exit(2)
"""


def test_a_refused_in_place_open_does_not_segfault_at_exit(tmp_path):
    """HDF5 refusing a file opened through the guarded file layer left a half-open file that the
    interpreter's exit finalized too late: a segfault (139) after the right message."""
    path = tmp_path / "not.h5"
    path.write_text("not an HDF5 file\n")
    proc = subprocess.run([sys.executable, "-c", REFUSED_OPEN, str(path)], capture_output=True, text=True,
                          timeout=120, env=child_env())
    assert proc.returncode == 2, proc.stderr
    assert "cannot open for writing" in proc.stdout and path.read_text() == "not an HDF5 file\n"
