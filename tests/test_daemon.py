"""The warm server (gputext.daemon): a command through it gives what the command gives in its own
process (bytes, exit code, stderr), with the client's stdin, stdout, stderr, folder, environment
and file-size limit; Ctrl-C reaches the command; a client that dies takes its command along; an
idle server exits; the key changes with the code and the keyed environment.

Every other test runs commands in their own processes (conftest sets GPUTEXT_DAEMON=0); these
switch the server on, with a socket folder of their own (XDG_RUNTIME_DIR)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from gputext.daemon import key

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the warm server needs fork()")

GPUTEXT = [sys.executable, "-m", "gputext"]


def run(args, env, **kw):
    return subprocess.run([*GPUTEXT, *args], env=env, capture_output=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """(environment with the server on, work folder); the server started and, after the module, stopped."""
    base = tmp_path_factory.mktemp("daemon")
    (base / "run").mkdir(mode=0o700)
    env = dict(os.environ, GPUTEXT_DAEMON="1", XDG_RUNTIME_DIR=str(base / "run"))
    started = run(["daemon", "start", "--timeout", "300"], env)
    assert started.returncode == 0, started.stderr.decode()
    yield env, base
    run(["daemon", "stop"], env)


def served(env) -> int:
    out = run(["daemon", "status"], env).stdout.decode()
    assert "running" in out, out
    return int(out.split("pid")[1].split(",")[1].split()[0])


def own(env):
    return dict(env, GPUTEXT_DAEMON="0")


def test_same_output_exit_code_and_stderr(runtime):
    env, base = runtime
    before = served(env)
    for mode, e in (("server", env), ("own", own(env))):
        r = run(["corpus", "synth", "--preset", "demo", "-o", f"c_{mode}.h5"], e, cwd=base)
        assert r.returncode == 0, r.stderr.decode()
        r = run(["knn", "search", "--index", f"c_{mode}.h5", "--queries", f"c_{mode}.h5", "-k", "5",
                 "--device", "cpu", "-q", "-o", f"n_{mode}.h5"], e, cwd=base)
        assert r.returncode == 0, r.stderr.decode()
    assert served(env) == before + 2
    with h5py.File(base / "n_server.h5") as a, h5py.File(base / "n_own.h5") as b:
        for name in ("obsm/knn_indices", "obsm/knn_scores"):
            assert np.array_equal(a[name][()], b[name][()])
    bad = [run(["corpus", "info", "missing.h5"], e, cwd=base) for e in (env, own(env))]
    assert bad[0].returncode == bad[1].returncode == 2
    assert bad[0].stderr == bad[1].stderr and bad[0].stderr.decode().count("\n") == 1
    usage = [run(["knn", "search", "--bogus"], e, cwd=base) for e in (env, own(env))]
    assert usage[0].returncode == usage[1].returncode == 2 and usage[0].stderr == usage[1].stderr


def test_stdin_stdout_pipes_and_environment(runtime):
    env, base = runtime
    run(["corpus", "synth", "--preset", "demo", "-o", "p.h5"], own(env), cwd=base)
    data = (base / "p.h5").read_bytes()
    outs = [run(["corpus", "info", "-"], e, cwd=base, input=data) for e in (env, own(env))]
    assert outs[0].returncode == 0 and outs[0].stdout == outs[1].stdout and b"3,000" in outs[0].stdout
    piped = [run(["corpus", "synth", "--preset", "demo", "-o", "-"], e, cwd=base) for e in (env, own(env))]
    assert piped[0].returncode == 0 and piped[0].stdout[:4] == b"\x89HDF"
    assert len(piped[0].stdout) == len(piped[1].stdout)
    # an unkeyed variable is the client's own when the command runs: click wraps help to COLUMNS
    helps = {(c, m): run(["knn", "search", "--help"], dict(e, COLUMNS=str(c))).stdout
             for c in (40, 120) for m, e in (("server", env), ("own", own(env)))}
    assert helps[40, "server"] == helps[40, "own"] and helps[120, "server"] == helps[120, "own"]
    assert helps[40, "server"] != helps[120, "server"]


def test_file_size_limit_applies_to_the_command(runtime):
    env, base = runtime
    line = f"ulimit -f 64; {' '.join(GPUTEXT)} corpus synth --preset demo -o big.h5"
    r = [subprocess.run(["bash", "-c", line], env=e, cwd=base, capture_output=True, timeout=300) for e in (env, own(env))]
    assert r[0].returncode == r[1].returncode == 2, (r[0].stderr, r[1].stderr)
    assert r[0].stderr == r[1].stderr
    assert not (base / "big.h5").exists() and not list(base.glob("big.h5.*"))


def _dispositions(ignored=()):
    """A child's preexec_fn: the signals a client forwards at their defaults, ``ignored`` ignored
    (whatever this test process inherited: `nohup make test` ignores SIGHUP, a background job SIGINT)."""
    from gputext.daemon.client import FORWARDED

    def preexec():
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
    return preexec


def _blocked_command(env, base, ignored=()):
    """A command through the server that waits on its stdin (a pipe kept open)."""
    p = subprocess.Popen([*GPUTEXT, "corpus", "info", "-"], env=env, cwd=base, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_dispositions(ignored))
    deadline = time.time() + 60
    while _running(env) == 0:
        assert time.time() < deadline, "the command never started in the server"
        time.sleep(0.05)
    return p


def _running(env) -> int:
    out = run(["daemon", "status"], env).stdout.decode()
    return int(out.split("answered, ")[1].split()[0])


def test_ctrl_c_reaches_the_command(runtime):
    env, base = runtime
    p = _blocked_command(env, base)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)  # stdin stays open: the command ends by the signal, not by end of input
    _, err = p.communicate()
    assert p.returncode == 130, err
    assert b"interrupted" in err


def test_a_dead_client_takes_its_command_along(runtime):
    env, base = runtime
    p = _blocked_command(env, base)
    p.kill()
    p.wait()
    deadline = time.time() + 30
    while _running(env):
        assert time.time() < deadline, "the command outlived its client"
        time.sleep(0.05)


def test_idle_server_exits(tmp_path):
    (tmp_path / "run").mkdir(mode=0o700)
    env = dict(os.environ, GPUTEXT_DAEMON="1", GPUTEXT_DAEMON_IDLE="1", XDG_RUNTIME_DIR=str(tmp_path / "run"))
    assert run(["daemon", "start"], env).returncode == 0
    sockets = list((tmp_path / "run" / "gputext").glob("*.sock"))
    assert len(sockets) == 1
    deadline = time.time() + 60
    while sockets[0].exists():
        assert time.time() < deadline, "the idle server did not exit"
        time.sleep(0.2)
    assert b"not running" in run(["daemon", "status"], env).stdout


def test_key_follows_code_and_keyed_environment(tmp_path, monkeypatch):
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(key, "_package_folders", lambda: [str(src)])
    base = dict(os.environ)
    k0 = key.server_key(base)
    assert key.server_key(base) == k0
    assert key.server_key(dict(base, NUMBA_NUM_THREADS="3")) != k0  # read when numba is imported
    assert key.server_key(dict(base, GPUTEXT_DAEMON_IDLE="5", TERM="dumb")) == k0  # read per command
    (src / "a.py").write_text("x = 22\n")
    assert key.server_key(base) != k0


def test_off_switch_and_private_folder(tmp_path):
    assert not key.enabled({"GPUTEXT_DAEMON": "0"})
    assert not key.enabled({"GPUTEXT_DAEMON": "off"})
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "gputext").mkdir(mode=0o777)
    os.chmod(shared / "gputext", 0o777)
    env = dict(os.environ, GPUTEXT_DAEMON="1", XDG_RUNTIME_DIR=str(shared))
    # a folder others can write: no server is used, the command runs in its own process
    r = run(["corpus", "synth", "--preset", "demo", "-o", str(tmp_path / "x.h5")], env)
    assert r.returncode == 0 and (tmp_path / "x.h5").exists()
    assert not list((shared / "gputext").iterdir())


def _resident(env, timeout=120.0) -> tuple[int, int]:
    """(pid, commands answered) of the server's resident, once it is ready."""
    deadline = time.time() + timeout
    while True:
        out = run(["daemon", "status"], env).stdout.decode()
        line = next((ln for ln in out.splitlines() if "resident:" in ln), "")
        if ", ready," in line:
            pid = int(line.split("pid ")[1].split(",")[0])
            return pid, int(line.split("ready, ")[1].split()[0])
        assert time.time() < deadline, out
        time.sleep(0.1)


def test_resident_runs_commands_in_itself_and_puts_state_back(runtime):
    """Commands one after another run in the resident (one process), each with its own folder,
    environment, umask and soft file-size limit, and give what they give in their own process."""
    env, base = runtime
    for name in ("r1", "r2"):
        (base / name).mkdir(exist_ok=True)
    run(["corpus", "synth", "--preset", "demo", "-o", str(base / "r.h5")], own(env))
    pid, before = _resident(env)
    outs = {}
    for mode, e in (("server", env), ("own", own(env))):
        for folder, columns in (("r1", "50"), ("r2", "100")):
            out = b""
            for line in (f"umask 077; {' '.join(GPUTEXT)} knn search --index ../r.h5 --queries ../r.h5 -k 4 "
                         f"--device cpu -q -o {mode}.h5", f"{' '.join(GPUTEXT)} corpus info --help"):
                if mode == "server":
                    _resident(env)  # ready again (a command that comes while it tidies is forked)
                r = subprocess.run(["bash", "-c", line], env=dict(e, COLUMNS=columns), cwd=base / folder,
                                   capture_output=True, timeout=300)
                assert r.returncode == 0, r.stderr.decode()
                out += r.stdout
            outs[mode, folder] = out
            assert (base / folder / f"{mode}.h5").stat().st_mode & 0o077 == 0
    assert _resident(env) == (pid, before + 4)
    assert outs["server", "r1"] == outs["own", "r1"] != outs["server", "r2"] == outs["own", "r2"]
    with h5py.File(base / "r1" / "server.h5") as a, h5py.File(base / "r2" / "own.h5") as b:
        assert np.array_equal(a["obsm/knn_indices"][()], b["obsm/knn_indices"][()])
    # a soft file-size limit is the command's alone: the next command in the resident writes freely
    _resident(env)
    soft = [subprocess.run(["bash", "-c", f"ulimit -S -f 64; {' '.join(GPUTEXT)} corpus synth --preset demo -o s.h5"],
                           env=e, cwd=base / "r1", capture_output=True, timeout=300) for e in (env, own(env))]
    assert soft[0].returncode == soft[1].returncode == 2 and soft[0].stderr == soft[1].stderr
    _resident(env)
    r = run(["corpus", "synth", "--preset", "demo", "-o", "s.h5"], env, cwd=base / "r1")
    assert r.returncode == 0 and (base / "r1" / "s.h5").stat().st_size > 64 * 1024
    assert _resident(env) == (pid, before + 6)


def test_busy_resident_forks_and_is_replaced_after_ctrl_c_and_dead_client(runtime):
    """A command that comes while the resident is busy is forked; a command interrupted in the
    resident (Ctrl-C, its client killed) unwinds, and the resident retires for a fresh one."""
    env, base = runtime
    pid, _ = _resident(env)
    p = _blocked_command(env, base)  # in the resident, waiting on its stdin
    r = run(["corpus", "synth", "--preset", "demo", "-o", "busy.h5"], env, cwd=base)  # forked meanwhile
    assert r.returncode == 0, r.stderr.decode()
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    assert p.returncode == 130
    second, count = _resident(env)
    assert second != pid and count == 0
    p = _blocked_command(env, base)
    p.kill()
    p.wait()
    third, count = _resident(env)
    assert third not in (pid, second) and count == 0


def test_a_signal_that_kills_the_resident_reaches_the_client_and_a_new_resident_starts(runtime):
    env, base = runtime
    pid, _ = _resident(env)
    p = _blocked_command(env, base)
    p.send_signal(signal.SIGHUP)  # ends a command in its own process; so it ends the resident
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGHUP
    new, count = _resident(env)
    assert new != pid and count == 0


def test_a_signal_the_client_ignores_is_ignored_by_its_command(runtime):
    """A client run under nohup (SIGHUP ignored) neither forwards SIGHUP nor has its command in the
    resident end by it: the command ends when its input does, in the same resident."""
    env, base = runtime
    pid, _ = _resident(env)
    run(["corpus", "synth", "--preset", "demo", "--n-docs", "50", "-o", str(base / "hup.h5")], own(env))
    p = _blocked_command(env, base, ignored=(signal.SIGHUP,))
    p.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert p.poll() is None  # still running
    out, err = p.communicate((base / "hup.h5").read_bytes(), timeout=60)
    assert p.returncode == 0 and b"50" in out, err
    assert _resident(env)[0] == pid


def _datasets(path: Path) -> dict:
    out = {}
    with h5py.File(path) as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def test_every_documented_command_gives_the_same_files_in_the_resident(runtime):
    """doctor --compile's steps (every family's documented commands) one after another through the
    resident and in their own processes: the same exit codes, stdout and output datasets, so no
    command leaves state behind that changes the next one's answer."""
    from gputext.warmup import WARMUP_STEPS, step_args
    env, base = runtime
    pid, before = _resident(env)
    results = {}
    for mode, e in (("server", env), ("own", own(env))):
        folder = base / f"steps_{mode}"
        folder.mkdir()
        for label, template in WARMUP_STEPS:
            if label == "knn search dense":
                continue  # GPU only
            if mode == "server":
                _resident(env)  # ready again: a command that comes while it tidies is forked (a loaded machine)
            r = run(step_args(template, str(folder), "cpu"), e, cwd=folder)
            results[mode, label] = (r.returncode, r.stdout)
            assert r.returncode == 0, (mode, label, r.stderr.decode())
    steps = [label for label, _ in WARMUP_STEPS if label != "knn search dense"]
    assert _resident(env) == (pid, before + len(steps))  # all in one resident
    for label in steps:
        assert results["server", label] == results["own", label], label
    files = sorted(p.relative_to(base / "steps_own") for p in (base / "steps_own").rglob("*.h5"))
    assert len(files) >= 12
    for rel in files:
        a, b = _datasets(base / "steps_server" / rel), _datasets(base / "steps_own" / rel)
        assert a.keys() == b.keys(), rel
        for name in a:
            if name.startswith("uns/") and np.ndim(a[name]) == 0 and isinstance(a[name], (float, np.floating)):
                continue  # run facts (seconds, rates, latencies) differ between any two runs
            x = a[name].replace(b"steps_server", b"steps_own") if isinstance(a[name], bytes) else a[name]
            assert np.array_equal(x, b[name]), (rel, name)


def test_the_next_command_in_the_resident_shows_a_warning_again():
    """Python shows a warning once per place and process; what the resident puts back after a
    command makes the next command show it again, as a fresh process would."""
    import warnings

    from gputext.daemon.resident import _Saved
    shown, registry = [], {}

    def emit():
        warnings.warn_explicit("again", RuntimeWarning, "f.py", 1, module="m", registry=registry)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda *a, **k: shown.append(a[0])
        emit()
        emit()
        assert len(shown) == 1
        _Saved().restore()  # what the resident does after each command
        emit()
        assert len(shown) == 2


@pytest.mark.parametrize("leak", [False, True])
def test_a_command_that_keeps_the_clients_stdout_open_retires_the_resident(monkeypatch, tmp_path, leak):
    """A descriptor of the client's stdout left open by a command would keep the client's reader
    waiting for the pipe's end: the resident then retires (its exit closes it); a command that
    closes what it opened leaves the resident in place."""
    from gputext.daemon import command as daemon_command
    from gputext.daemon import resident
    kept = []

    def command(at_exit=True):
        fd = os.open("/dev/stdout", os.O_WRONLY)  # a new descriptor of the client's stdout
        os.write(fd, b"out\n")
        kept.append(fd) if leak else os.close(fd)
        return 0
    monkeypatch.setattr(daemon_command, "run_command", command)
    r, w = os.pipe()
    umask = os.umask(0)
    os.umask(umask)
    request = {"argv": ["gputext"], "cwd": str(tmp_path), "env": dict(os.environ), "umask": umask, "rlimits": {},
               "affinity": None}
    code, retire = resident.run_one(request, [os.open(os.devnull, os.O_RDONLY), w, os.dup(2)])
    assert code == 0 and retire is leak
    assert os.read(r, 100) == b"out\n"
    for fd in kept:
        os.close(fd)
    assert os.read(r, 100) == b""  # every writer gone: the reader sees the end
    os.close(r)
