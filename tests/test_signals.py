"""Signals and kill -9 during a write: the old output survives, temporary files do not.

Real processes (few: each pays the CLI's start-up): `corpus synth` writing over an existing
output is stopped by SIGINT as soon as its temporary file appears, by SIGTERM and by kill -9
once the temporary file has grown (mid-write); the old output must then pass `corpus validate`
byte-for-byte unchanged. The temporary file kill -9 leaves is removed by the next write into
that folder (gputext.io.atomic: stale when its pid is not running).
"""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gputext.cli import cli
from gputext.io import atomic
from gputext.io.atomic import TEMP_MARK, atomic_output, remove_stale_temps, temp_pid

SYNTH = ["corpus", "synth", "--n-docs", "60000", "--n-terms", "3000", "--n-classes", "4", "--weighting", "tf",
         "--threads", "1"]


def _temps(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if TEMP_MARK in p.name]


def _wait_for_temp(proc, folder: Path, min_bytes: int, timeout: float = 120.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for temp in _temps(folder):
            try:
                if temp.stat().st_size >= min_bytes:
                    return temp
            except FileNotFoundError:
                pass
        time.sleep(0.02)
    raise AssertionError("the write never started")


def _sigint_deliverable() -> None:
    """preexec_fn of the child CLI: SIGINT back to its default, so that Python installs its
    KeyboardInterrupt handler even when this test run inherited SIGINT ignored (a job started
    with & from a script: the 2026-11-27 .ci/run started that way failed here, the CLI correctly
    keeping an ignored SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _validate(path: Path) -> None:
    result = CliRunner().invoke(cli, ["corpus", "validate", str(path)])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def old_output(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("signals")
    out = folder / "corpus.h5"
    result = CliRunner().invoke(cli, ["corpus", "synth", "--n-docs", "50", "--n-terms", "200", "--n-classes", "2",
                                      "-q", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
@pytest.mark.parametrize("how,min_bytes,code,line", [
    (signal.SIGINT, 0, 130, "interrupted"),            # as soon as the temporary file exists
    (signal.SIGTERM, 1 << 20, 143, "terminated"),      # mid-write
    (signal.SIGKILL, 0, -9, None),                     # at the start of the write, and ...
    (signal.SIGKILL, 1 << 20, -9, None),               # mid-write: the temporary file stays behind ...
])
def test_signal_during_write_keeps_the_old_output(old_output: Path, how, min_bytes, code, line):
    folder = old_output.parent
    before = _digest(old_output)
    proc = subprocess.Popen([sys.executable, "-m", "gputext", *SYNTH, "-o", str(old_output)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            preexec_fn=_sigint_deliverable)
    temp = _wait_for_temp(proc, folder, min_bytes)
    proc.send_signal(how)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == code, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    if line:
        assert err.rstrip().splitlines()[-1] == line, err
        assert not _temps(folder), "the temporary file was not removed"
    else:
        assert temp.exists() and temp_pid(temp.name) == proc.pid
        # ... and the next write into the folder removes it (its pid is not running any more)
        with atomic_output(str(folder / "other.h5")) as tmp:
            Path(tmp).write_bytes(b"x")
        assert not temp.exists()
    assert _digest(old_output) == before
    _validate(old_output)


def test_stale_temp_rule(tmp_path: Path, monkeypatch):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = tmp_path / f".a.h5{TEMP_MARK}{os.getpid()}-abc123.h5"
    gone = tmp_path / f".b.h5{TEMP_MARK}{dead.pid}-abc123.h5"
    live = tmp_path / f".c.h5{TEMP_MARK}{os.getppid()}-abc123.h5"
    old = tmp_path / f".d.h5{TEMP_MARK}{os.getppid()}-zz9.json"
    other = tmp_path / ".e.h5.tmp"
    for p in (mine, gone, live, old, other):
        p.write_bytes(b"x")
    os.utime(old, (time.time() - atomic.STALE_SECONDS - 10,) * 2)
    removed = remove_stale_temps(str(tmp_path))
    assert sorted(removed) == sorted([str(gone), str(old)])
    assert mine.exists() and live.exists() and other.exists()


def test_deferred_signal_stops_the_write_and_keeps_the_old_file(tmp_path: Path):
    out = tmp_path / "x.h5"
    out.write_bytes(b"old")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # deliverable if this run ignores it
    try:
        with pytest.raises(KeyboardInterrupt):
            with atomic_output(str(out)) as tmp:
                Path(tmp).write_bytes(b"new")
                os.kill(os.getpid(), signal.SIGINT)  # noted, not raised here ...
                Path(tmp).write_bytes(b"newer")      # ... the block goes on to its end, then stops
    finally:
        signal.signal(signal.SIGINT, previous)
    assert out.read_bytes() == b"old" and not _temps(tmp_path)
