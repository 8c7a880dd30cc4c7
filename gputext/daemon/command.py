"""One command in this process, as the client asked (server.py forks a process per command; the
resident, resident.py, runs commands in itself): the client's descriptors, folder, environment and
limits applied, ``gputext.cli.main`` run, its exit status returned."""
from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time


def log(message: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {message}\n")
    sys.stderr.flush()


# Signals whose disposition a command takes from its client: ignored where the client ignores
# them (nohup: SIGHUP), else the default, whatever the server inherited from the process that
# started it. SIGINT and SIGTERM are set by whoever runs the command (the forked child, the resident).
CLIENT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"))


def apply_request(request: dict, fds: list[int], limits: tuple[str, ...] | None = None) -> None:
    """Make this process the client's: descriptors, folder, environment, limits (``limits``: only
    those named; the resident, resident.py, puts them back afterwards), CLIENT_SIGNALS'
    dispositions."""
    import resource
    ignored = set(request.get("ignored_signals", ()))
    for sig in CLIENT_SIGNALS:
        signal.signal(sig, signal.SIG_IGN if int(sig) in ignored else signal.SIG_DFL)
    for target, fd in zip((0, 1, 2), fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.umask(int(request["umask"]))
    for name, (soft, hard) in request.get("rlimits", {}).items():
        if limits is not None and name not in limits:
            continue
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError, AttributeError):
            pass
    if request.get("affinity") and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, request["affinity"])
        except OSError:
            pass
    sys.argv = list(request["argv"])
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=os.isatty(stream.fileno()))
        except (AttributeError, OSError, ValueError):
            pass
    os.chdir(request["cwd"])


def serve_request(request: dict, fds: list[int], limits: tuple[str, ...] | None = None, at_exit: bool = True) -> int:
    """apply_request, a fresh ``sys.stdin`` on the client's (no bytes another command's stdin left
    in a buffer), then run_command; its exit status. A failure before the command ran is one line
    on the command's stderr (the client's, once applied); Ctrl-C there is 130."""
    try:
        apply_request(request, fds, limits)
        old = sys.stdin
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)),
                                     encoding=old.encoding, errors=old.errors)
        return run_command(at_exit)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        try:
            sys.stderr.write(f"gputext: {type(exc).__name__}: {exc}\n")
            sys.stderr.flush()
        except Exception:
            pass
        return 1


def run_command(at_exit: bool = True) -> int:
    """gputext.cli.main in this process; its exit status. ``at_exit``: then wait for the command's
    threads and run the exit handlers, as the interpreter would (not in the resident, which stays)."""
    import atexit
    import traceback
    code = 0
    profile = None
    if os.environ.get("GPUTEXT_PROFILE"):  # benchmarks/breakdown.py --server: the command under cProfile
        import cProfile
        profile = cProfile.Profile()
        profile.enable()
    try:
        from ..cli import main
        main()
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code & 0xFF
        else:
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.environ["GPUTEXT_PROFILE"])
    try:
        if at_exit:
            threading._shutdown()  # what the interpreter does at exit: wait for non-daemon threads
            atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                if stream is sys.stdout and code == 0:
                    code = 120  # as the interpreter: stdout could not be flushed at exit
    return code
