"""Fresh-process timing, measured outside the process: wall time from start to exit and the child's
user + sys CPU time (os.wait4), cold (an empty kernel cache), warm in its own process (the
median of repeated runs after one run that filled the same cache, ``GPUTEXT_DAEMON=0``) and warm
through the warm server (gputext.daemon: what a user's second command gets by default; the
server started and waited for first, with the same environment, and stopped after).

The CPU time of a run through the server is the client's alone (the command runs in the
server's child), so it is reported for own-process runs only.

The kernel cache is a folder named by GPUTEXT_CACHE_DIR; numba's own cache (NUMBA_CACHE_DIR) is
pointed at the same folder, so "cold" means nothing compiled is on disk for the command (issue 31
makes GPUTEXT_CACHE_DIR the one knob).
"""
from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Run:
    """One process: wall and CPU seconds, exit code and the tail of its stderr."""

    wall: float
    cpu: float
    rc: int
    stderr: str = ""


@dataclass
class ColdWarm:
    """A command's cold run, warm runs in their own processes (``own_runs``) and through the warm
    server (``server_runs``, empty when not measured); the properties are medians."""

    cold: Run
    own_runs: list = field(default_factory=list)
    server_runs: list = field(default_factory=list)

    @property
    def warm(self) -> float:
        return statistics.median(r.wall for r in self.own_runs)

    @property
    def warm_cpu(self) -> float:
        return statistics.median(r.cpu for r in self.own_runs)

    @property
    def server(self) -> float | None:
        return statistics.median(r.wall for r in self.server_runs) if self.server_runs else None


def cache_env(cache_dir: str, base: dict | None = None) -> dict:
    """The environment of a measured process: ``base`` (default os.environ) with the kernel cache
    folders set to ``cache_dir``."""
    env = dict(os.environ if base is None else base)
    env["GPUTEXT_CACHE_DIR"] = cache_dir
    env["NUMBA_CACHE_DIR"] = cache_dir
    return env


def run_once(argv: list[str], env: dict | None = None, cwd: str | None = None, timeout: float = 600) -> Run:
    """Start ``argv``, wait for it, and return its wall time, user + sys CPU time and exit code (a
    process over ``timeout`` seconds is killed and reported with rc -9)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=cwd)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-2000:]
    return Run(wall, usage.ru_utime + usage.ru_stime, proc.returncode, tail)


def _checked(argv, env, cwd, timeout) -> Run:
    r = run_once(argv, env, cwd, timeout)
    if r.rc != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited with {r.rc}: {r.stderr.strip()[-600:]}")
    return r


def wait_for_compile_helpers(cache: str, timeout: float = 120) -> float:
    """Wait until no gputext.compile_ahead helper works on the kernel cache under ``cache`` (a GPU
    command on an empty cache starts them and they may outlive it by a few seconds; each holds
    its ``ahead-<target>.lock`` while it works); returns the seconds waited."""
    from gputext.daemon.key import lock_held
    t0 = time.monotonic()
    while (time.monotonic() - t0 < timeout
           and any(lock_held(str(p)) for p in Path(cache).glob("*/ahead-*.lock"))):
        time.sleep(0.1)
    return time.monotonic() - t0


def cold_and_warm(argv: list[str], repeats: int = 3, cache_root: str | None = None, cwd: str | None = None,
                  timeout: float = 600, then=None, server: list[str] | None = None) -> ColdWarm:
    """The cold run of ``argv`` in a new empty cache folder (under ``cache_root``, default the
    system's temporary folder), then ``repeats`` warm runs in their own processes with that
    folder; with ``server`` (the argv prefix of ``gputext``, e.g. [python, "-m", "gputext"]), then
    the warm server is started (``daemon start``) and ``repeats`` runs go through it; ``then(env)``,
    when given, runs last with the warm folder's environment (a profiled run). Raises RuntimeError
    with the command's stderr when a run fails."""
    with tempfile.TemporaryDirectory(prefix="gputext-cache-", dir=cache_root) as cache:
        env = cache_env(cache)
        own = dict(env, GPUTEXT_DAEMON="0")
        cold = _checked(argv, own, cwd, timeout)
        wait_for_compile_helpers(cache, timeout)  # the cold run's compile helpers: not beside the warm runs
        timing = ColdWarm(cold, [_checked(argv, own, cwd, timeout) for _ in range(max(1, repeats))])
        if server:
            via = dict(env, GPUTEXT_DAEMON="1")
            _checked([*server, "daemon", "start"], via, cwd, timeout)
            try:
                _checked(argv, via, cwd, timeout)  # the server's first command: its child loads the kernels
                timing.server_runs = [_checked(argv, via, cwd, timeout) for _ in range(max(1, repeats))]
            finally:
                run_once([*server, "daemon", "stop"], via, cwd, 60)
        if then is not None:
            then(own)
    return timing

