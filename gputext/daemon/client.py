"""The ``gputext`` console script: hand the command to a warm server (package docstring), or run it
here when there is none, and start one for the next command. Imports only the standard library
until it runs a command itself."""
from __future__ import annotations

import os
import signal
import socket
import sys

from . import key, protocol

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_RLIMITS = ("RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_CPU", "RLIMIT_CORE", "RLIMIT_STACK")


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] != ["daemon"] and key.enabled():
        code = through_server()
        if code is not None:
            _exit_like(code)
    from ..cli import main as run_here
    run_here()


def request(argv: list[str] | None = None) -> dict:
    import resource
    umask = os.umask(0)
    os.umask(umask)
    limits = {}
    for name in _RLIMITS:
        if hasattr(resource, name):
            limits[name] = resource.getrlimit(getattr(resource, name))
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"argv": sys.argv if argv is None else argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask,
            "rlimits": limits, "affinity": affinity, "ignored_signals": ignored_signals()}


def ignored_signals() -> list[int]:
    """The FORWARDED signals this process ignores (``nohup`` ignores SIGHUP, a shell's background
    job SIGINT): the command ignores them too, and they are not forwarded."""
    return [int(sig) for sig in FORWARDED if signal.getsignal(sig) == signal.SIG_IGN]


def connect(server_key: str) -> socket.socket | None:
    """A connection to the server named ``server_key``; None when none listens."""
    path, _ = key.paths(server_key)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    return sock


def through_server(argv: list[str] | None = None, fds=(0, 1, 2), start: bool = True) -> tuple[str, int] | None:
    """Run a command (this process's, or ``argv``) in the server with ``fds`` as its stdin, stdout
    and stderr: ("exit", code) or ("signal", n); None when there is no server (with ``start``, one
    is started for the next command) or it cannot take the command. Signals are forwarded while
    it runs when this is the main thread (only it can set handlers)."""
    try:
        server_key = key.server_key()
        sock = connect(server_key)
    except OSError:  # no private socket folder (permissions), an unreadable source file
        return None
    if sock is None:
        if start:
            try:
                start_server(server_key)
            except OSError:  # no server for the next command either; this one runs here all the same
                pass
        return None
    with sock:
        try:
            protocol.send(sock, request(argv), fds=list(fds))
            first, _ = protocol.receive(sock)
        except (OSError, ValueError):
            return None
        if not first or "pid" not in first:  # a server on its way out: run here
            return None
        def forward(sig, _frame):
            try:
                protocol.send(sock, {"signal": int(sig)})
            except OSError:
                pass

        ignored = ignored_signals()
        import threading
        main_thread = threading.current_thread() is threading.main_thread()
        old = {sig: signal.signal(sig, forward) for sig in FORWARDED if int(sig) not in ignored and main_thread}
        try:
            while True:
                message, _ = protocol.receive(sock)
                if message is None:
                    sys.stderr.write("gputext: the warm server stopped before the command ended\n")
                    return ("exit", 1)
                if "exit" in message:
                    return ("exit", int(message["exit"]))
                if "signal" in message:
                    return ("signal", int(message["signal"]))
        except OSError:
            sys.stderr.write("gputext: lost the warm server before the command ended\n")
            return ("exit", 1)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def _exit_like(code: tuple[str, int]) -> None:
    kind, n = code
    if kind == "signal":
        signal.signal(n, signal.SIG_DFL)
        os.kill(os.getpid(), n)
        n = 128 + n
    sys.stdout.flush()
    os._exit(n)


def start_server(server_key: str) -> bool:
    """Start this key's server in the background, in a session of its own, unless one runs;
    returns whether one was started. Its log is ``<socket folder>/<key>.log``."""
    if key.lock_held(key.paths(server_key)[1]):
        return False
    import json
    import subprocess
    path, _ = key.paths(server_key)
    env = dict(os.environ, GPUTEXT_DAEMON_KEY=server_key, GPUTEXT_DAEMON_PATH=json.dumps(key.search_path()))
    with open(path[:-len(".sock")] + ".log", "ab") as log:
        subprocess.Popen([sys.executable, "-c", "from gputext.daemon.server import serve; serve()"],
                         env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True, close_fds=True)
    return True
