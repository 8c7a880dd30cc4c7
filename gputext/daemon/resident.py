"""The server's resident: one process, forked from the warm server, that runs commands inside itself,
one at a time, and stays.

A command forked from the server still starts the GPU's driver and context (0.2-0.4 s), loads each
kernel it launches from the kernel cache, allocates and pins its buffers, and starts numba's CPU
thread pool: a CUDA context cannot cross a fork, and the server must stay fork-safe (server.py).
The resident is the one process that keeps all of that between commands. The server forks it once
it has preloaded; it starts the driver and the context (when there is a GPU), loads the CPU twins'
parallel code (which starts numba's threads), says it is ready, and from then on takes a command
whenever it is free. The server forks a process per command as before when the resident is busy,
not ready, or cannot take the command's limits (``takes``).

A command in the resident gets what a forked one gets: the client's stdin, stdout and stderr
(``dup2`` onto 0, 1, 2), working folder, environment, umask and file-size limit, ``sys.argv``,
Ctrl-C as KeyboardInterrupt and SIGTERM as the CLI's Terminated (both unwind, so temporary
outputs are removed). Afterwards everything is put back (``_Saved``); the command's young
garbage is collected and device buffers above ``KEEP_DEVICE_BYTES`` are released
(``device.memory.trim``); a full collection waits until the resident is idle. The resident
retires (exits; the server forks a fresh one) after a command that ended other than 0 or 2 (an
interrupted or failed command may have left state behind), that left a thread running, that kept
a descriptor of the client's streams open, or after which it holds more than ``MAX_RSS_BYTES`` of
host memory; and it is killed when its command's client is gone and the command did not stop
within ``KILL_AFTER_S`` of SIGTERM. Other signals a client forwards (SIGHUP, SIGQUIT, ...) kill it
as they would kill a command in its own process, and the server reports that signal to the client.

Messages on the socket pair between server and resident (protocol.py's framing): server ->
resident one request per command with the client's three descriptors; resident -> server
``{"ready": {...}}`` once warm, then per command ``{"exit": code}`` as soon as the command's
outputs are closed and its descriptors given back, and ``{"free": true}`` once tidied (a resident
that retires exits instead)."""
from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
import time
import warnings

from . import protocol
from .command import CLIENT_SIGNALS, log, serve_request
from .key import switched_off

KEEP_DEVICE_BYTES = 1 << 30
MAX_RSS_BYTES = 4 << 30
IDLE_COLLECT_S = 1.0
KILL_AFTER_S = 10.0
_ADJUSTABLE = ("RLIMIT_FSIZE",)  # soft limits a command may lower for its run; the rest must match


def takes(request: dict, own_limits: dict, own_affinity) -> bool:
    """Whether a command's request can run in the resident: not switched off by the client
    (``GPUTEXT_RESIDENT=0``), the same resource limits as the server's (only RLIMIT_FSIZE's soft
    limit may differ: it is set for the command and put back) and the same CPU affinity (numba's
    threads were started with the server's)."""
    if switched_off("GPUTEXT_RESIDENT", request.get("env", {})):
        return False
    for name, limits in request.get("rlimits", {}).items():
        mine = own_limits.get(name)
        if mine is None:
            continue
        soft, hard = limits
        if hard != mine[1] or (soft != mine[0] and name not in _ADJUSTABLE):
            return False
    affinity = request.get("affinity")
    return not affinity or own_affinity is None or sorted(affinity) == sorted(own_affinity)


class Handle:
    """The server's view of its resident: the process, its end of the socket pair, whether it is
    warm, and the client connection of the command it runs (None: free)."""

    def __init__(self, pid: int, sock: socket.socket):
        self.pid = pid
        self.sock = sock
        self.ready = False  # warm, and not running or tidying after a command
        self.warm: dict = {}
        self.client: socket.socket | None = None
        self.kill_at: float | None = None
        self.commands = 0

    def give(self, request: dict, fds: list[int], client: socket.socket) -> None:
        protocol.send(self.sock, request, fds=fds)
        self.ready = False
        self.client = client
        self.commands += 1

    def signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def client_gone(self) -> None:
        """The command's client died: SIGTERM unwinds the command; SIGKILL if it has not ended soon."""
        self.signal(signal.SIGTERM)
        self.kill_at = time.monotonic() + KILL_AFTER_S

    def overdue(self) -> None:
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            self.signal(signal.SIGKILL)
            self.kill_at = None


# ---------------------------------------------------------------------------- in the resident


def warm_up() -> dict:
    """Start what a fork cannot carry: the CUDA driver and context (when there is a GPU) and the
    CPU twins' parallel code with numba's threads; returns what it took."""
    t0 = time.perf_counter()
    from ..backend import cuda_status
    usable, what = cuda_status()
    t1 = time.perf_counter()
    from ..kernels.jit import preload_cpu
    loaded = preload_cpu(parallel=True)
    t2 = time.perf_counter()
    import gc
    gc.collect()
    gc.freeze()
    return {"gpu": what if usable else None, "cuda_s": round(t1 - t0, 3), "cpu_overloads": loaded,
            "cpu_loads_s": round(t2 - t1, 3), "rss_bytes": _rss()}


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _Saved:
    """This process's own state that a command changes, to put back after it."""

    def __init__(self):
        import numpy as np
        import resource
        self.fds = [os.dup(fd) for fd in (0, 1, 2)]
        self.stdin = sys.stdin
        self.environ = dict(os.environ)
        self.argv = list(sys.argv)
        self.cwd = os.getcwd()
        self.umask = os.umask(0)
        os.umask(self.umask)
        self.limits = {name: resource.getrlimit(getattr(resource, name)) for name in _ADJUSTABLE}
        self.filters = list(warnings.filters)
        self.showwarning = warnings.showwarning
        self.formatwarning = warnings.formatwarning
        self.numpy_errors = np.geterr()
        self.signals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, *CLIENT_SIGNALS)}
        self.threads = set(threading.enumerate())
        self.line_buffering = [s.line_buffering for s in (sys.stdout, sys.stderr)]

    def restore(self) -> None:
        import numpy as np
        import resource
        for sig, handler in self.signals.items():
            signal.signal(sig, handler)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for target, fd in zip((0, 1, 2), self.fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = self.stdin
        for stream, line in zip((sys.stdout, sys.stderr), self.line_buffering):
            try:
                stream.reconfigure(line_buffering=line)
            except (AttributeError, OSError, ValueError):
                pass
        os.environ.clear()
        os.environ.update(self.environ)
        sys.argv = self.argv
        os.chdir(self.cwd)
        os.umask(self.umask)
        for name, limits in self.limits.items():
            resource.setrlimit(getattr(resource, name), limits)
        warnings.filters[:] = self.filters
        # forget which warnings were shown: the next command shows its own once, as in a fresh process
        getattr(warnings, "_filters_mutated", lambda: None)()
        warnings.showwarning = self.showwarning
        warnings.formatwarning = self.formatwarning
        np.seterr(**self.numpy_errors)


def _left_threads(before: set) -> list[str]:
    """Threads the command started that are still running after a short wait (non-daemon ones are
    waited for as the interpreter would at exit, up to a minute)."""
    deadline = time.monotonic() + 60.0
    left = []
    for t in threading.enumerate():
        if t in before or t is threading.current_thread():
            continue
        t.join(max(0.0, deadline - time.monotonic()) if not t.daemon else 1.0)
        if t.is_alive():
            left.append(t.name)
    return left


def _open_fds() -> set[int]:
    try:
        return {int(name) for name in os.listdir("/proc/self/fd")}
    except OSError:  # no /proc: nothing to compare
        return set()


def _identity(fd: int):
    try:
        st = os.fstat(fd)
        return st.st_dev, st.st_ino
    except OSError:
        return None


def _holds_client_streams(before: set[int], client: set) -> list[int]:
    """Descriptors opened since ``before`` that still refer to one of the client's stdin, stdout
    or stderr (a dup the command kept, an unclosed /dev/stdout): while one is open, a reader of the
    client's pipe never sees its end."""
    return [fd for fd in sorted(_open_fds() - before) if _identity(fd) in client]


def run_one(request: dict, fds: list[int]) -> tuple[int, bool]:
    """Run one command in this process; (exit code, whether to retire afterwards)."""
    client = {ident for ident in map(_identity, fds) if ident is not None}
    before = _open_fds() - set(fds)
    saved = _Saved()
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the CLI makes it raise Terminated
        code = serve_request(request, fds, limits=_ADJUSTABLE, at_exit=False)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a late forwarded Ctrl-C must not end the resident
        saved.restore()
    retire = code not in (0, 2)
    if client and _holds_client_streams(before, client):
        import gc
        gc.collect()  # a file object the command dropped: its finaliser closes it
        if _holds_client_streams(before, client):
            retire = True  # exiting closes it: the client's reader then sees the end of its pipe
            log("resident retires: the command kept a descriptor of the client's streams open")
    left = _left_threads(saved.threads)
    if left:
        retire = True
        log(f"resident retires: the command left threads running ({', '.join(left)})")
    return code, retire


def tidy() -> bool:
    """After a command: its young garbage collected, large device buffers released (milliseconds:
    the resident is free again before a shell can start the next command); whether this process
    is still small enough to stay. The full collection (40-90 ms on the 2-core VM) waits until the
    resident has been idle for IDLE_COLLECT_S (``main``)."""
    from ..device.memory import trim
    trim(KEEP_DEVICE_BYTES)
    return _rss() <= MAX_RSS_BYTES


def main(sock: socket.socket) -> None:
    """The resident's life (in the forked process); never returns."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        protocol.send(sock, {"ready": warm_up()})
        dirty = False  # commands ran since the last full garbage collection
        while True:
            if dirty and not select.select([sock], [], [], IDLE_COLLECT_S)[0]:
                import gc
                gc.collect()
                dirty = False
                continue
            request, fds = protocol.receive(sock, max_fds=3)
            if request is None:
                break
            if len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                continue
            exit_code, retire = run_one(request, fds)
            protocol.send(sock, {"exit": exit_code})
            dirty = True
            if retire or not tidy():
                break
            protocol.send(sock, {"free": True})
    except BaseException as exc:
        log(f"resident stops: {type(exc).__name__}: {exc}")
        code = 1
    os._exit(code)
