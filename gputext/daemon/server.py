"""The warm server (package docstring): import everything once, then fork one process per command.

The server itself never starts a thread, never touches the CUDA driver and never runs a parallel
CPU function: a fork copies only the thread that calls it, and a CUDA context does not survive a
fork. ``preload`` checks both before the socket opens; a server that cannot promise them exits
and commands run in their own processes."""
from __future__ import annotations

import fcntl
import gc
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time

from . import key, protocol, resident
from .command import log, serve_request


def _import_commands() -> int:
    """Import every module of the package but this one (the CLI, the families, the kernels and
    their CPU twins); returns how many."""
    import importlib
    import pkgutil

    import gputext
    count = 0
    for info in pkgutil.walk_packages(gputext.__path__, "gputext."):
        name = info.name
        if name.startswith(("gputext.daemon", "gputext.datasets")) or name.endswith("__main__"):
            continue
        try:
            importlib.import_module(name)
            count += 1
        except Exception as exc:  # an optional dependency that is absent (dask, matplotlib)
            log(f"not preloaded: {name}: {type(exc).__name__}: {exc}")
    return count


def _load_registries() -> None:
    """numba's typing and lowering registries for the CPU and the GPU (about 0.27 s each,
    otherwise paid by a command's first cached function of each target)."""
    from numba.core.registry import cpu_target
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()
    from ..kernels.jit import simulator_on
    if simulator_on():
        return
    try:
        from numba.cuda.descriptor import cuda_target
    except ImportError:
        return
    cuda_target.typing_context.refresh()
    cuda_target.target_context.refresh()


def preload() -> dict:
    """Everything a command would import or load before its work; returns what it took."""
    t0 = time.perf_counter()
    import h5py  # noqa: F401
    import numpy  # noqa: F401
    import scipy.sparse  # noqa: F401
    modules = _import_commands()
    t1 = time.perf_counter()
    _load_registries()
    t2 = time.perf_counter()
    from ..kernels.jit import preload_cpu
    twins = preload_cpu()
    t3 = time.perf_counter()
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    if parallel is not None and getattr(parallel, "_is_initialized", False):
        raise RuntimeError("numba's thread pool was started while preloading")
    if threading.active_count() > 1:
        raise RuntimeError("threads started while preloading: " + ", ".join(t.name for t in threading.enumerate()))
    from ..backend import driver_started
    if driver_started():
        raise RuntimeError("the CUDA driver was started while preloading")
    return {"modules": modules, "imports_s": round(t1 - t0, 3), "registries_s": round(t2 - t1, 3),
            "cpu_overloads": twins, "cpu_loads_s": round(t3 - t2, 3)}


def _tidy(folder: str, keep: str, older_than: float = 86400.0) -> None:
    """Remove the lock and log files of servers (other keys) gone for a day."""
    now = time.time()
    for name in os.listdir(folder):
        stem, ext = os.path.splitext(name)
        if ext != ".lock" or stem == keep:
            continue
        path = os.path.join(folder, name)
        try:
            if now - os.stat(path).st_mtime < older_than or key.lock_held(path):
                continue  # recent, or that server still runs
            for ext_ in (".lock", ".log"):
                os.unlink(os.path.join(folder, stem + ext_))
        except OSError:
            pass


class Server:
    def __init__(self, server_key: str):
        self.key = server_key
        self.sock_path, self.lock_path = key.paths(server_key)
        self.idle = key.idle_seconds()
        self.children: dict[int, socket.socket] = {}
        self.conns: dict[socket.socket, int] = {}
        self.stop = False
        self.served = 0
        self.started = time.time()
        self.took: dict = {}
        self.resident: resident.Handle | None = None
        self.resident_failures = 0  # residents that died before they were ready, in a row
        self.own_limits: dict = {}
        self.own_affinity = None

    def run(self) -> None:
        lock = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another server of this key is starting or serving
        self.lock = lock
        log(f"starting: key {self.key}, python {sys.executable}")
        _tidy(os.path.dirname(self.lock_path), keep=self.key)
        try:
            self.took = preload()
        except Exception as exc:
            log(f"not serving: {type(exc).__name__}: {exc}")
            return
        log("preloaded: " + json.dumps(self.took))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = f"{self.sock_path}.{os.getpid()}"
        listener.bind(tmp)
        os.chmod(tmp, 0o600)
        listener.listen(64)
        os.replace(tmp, self.sock_path)  # the socket appears only once the server is warm
        self.inode = os.stat(self.sock_path).st_ino
        self.listener = listener
        from .client import request as own_request
        mine = own_request()
        self.own_limits, self.own_affinity = mine["rlimits"], mine["affinity"]
        gc.collect()
        gc.freeze()  # children do not copy pages for the collector's sake
        try:
            self.loop()
        finally:
            self.close()

    def ours(self) -> bool:
        try:
            return os.stat(self.sock_path).st_ino == self.inode
        except OSError:
            return False

    def close(self) -> None:
        if self.ours():
            os.unlink(self.sock_path)
        self.listener.close()
        if self.resident is not None and self.resident.sock is not None:
            self.resident.sock.close()  # it exits at the end of its socket (after its command, if any)
        os.close(self.lock)  # "not running" from now on, not only once this process has exited
        log("stopped")

    def loop(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self.wake = (wake_r, wake_w)
        self.sel = sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ, "accept")
        sel.register(wake_r, selectors.EVENT_READ, "wake")
        self.spawn_resident()
        last = time.monotonic()
        while not self.stop:
            busy = self.busy()
            timeout = None if busy else max(0.0, self.idle - (time.monotonic() - last))
            tick = 1.0 if self.resident is not None and self.resident.kill_at is not None else 10.0
            events = sel.select(min(timeout, tick) if timeout is not None else tick)
            for item, _ in events:
                if item.data == "accept":
                    self.accept()
                elif item.data == "resident":
                    self.from_resident()
                elif item.data == "wake":
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                else:
                    self.from_client(item.fileobj)
            self.reap()
            if self.resident is not None:
                self.resident.overdue()
            if self.busy() or events:
                last = time.monotonic()
            elif time.monotonic() - last >= self.idle:
                log(f"idle for {self.idle:.0f} s")
                break
            if not self.ours():
                log("socket removed or replaced")
                break
        sel.close()
        signal.set_wakeup_fd(-1)

    def _stop(self, *_):
        self.stop = True

    def busy(self) -> int:
        """Commands running: forked ones and the resident's."""
        return len(self.children) + (self.resident is not None and self.resident.client is not None)

    # ------------------------------------------------------------------ the resident (resident.py)

    def spawn_resident(self) -> None:
        if self.resident is not None or self.stop or self.resident_failures >= 3:
            return
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            try:
                mine.close()
                self.let_go()
                resident.main(theirs)  # never returns
            finally:
                os._exit(1)
        theirs.close()
        self.resident = resident.Handle(pid, mine)
        self.sel.register(mine, selectors.EVENT_READ, "resident")
        log(f"resident {pid} started")

    def from_resident(self) -> None:
        res = self.resident
        try:
            message, _ = protocol.receive(res.sock)
        except (OSError, ValueError):
            message = None
        if message is None:  # it exits (retires, or dies): reap() reports and replaces it
            self.sel.unregister(res.sock)
            res.sock.close()
            res.sock = None
            return
        if "ready" in message or "free" in message:
            if "ready" in message:
                res.warm = message["ready"]
                self.resident_failures = 0
                log("resident ready: " + json.dumps(res.warm))
            res.ready = True
        elif "exit" in message and res.client is not None:
            self.finish(res.client, {"exit": int(message["exit"])})
            res.client = None
            res.kill_at = None

    def finish(self, conn: socket.socket, message: dict) -> None:
        """Tell a client how its command ended and let go of its connection."""
        try:
            protocol.send(conn, message)
        except OSError:
            pass
        if conn in self.conns:
            self.sel.unregister(conn)
            self.conns.pop(conn)
        conn.close()

    def resident_died(self, status: int) -> None:
        res = self.resident
        self.resident = None
        if res.sock is not None:
            self.sel.unregister(res.sock)
            res.sock.close()
        if not res.warm:
            self.resident_failures += 1
        if res.client is not None:  # killed with its command (a forwarded signal, or overdue)
            if os.WIFSIGNALED(status):
                self.finish(res.client, {"signal": os.WTERMSIG(status)})
            else:
                self.finish(res.client, {"exit": os.waitstatus_to_exitcode(status) or 1})
        log(f"resident {res.pid} ended after {res.commands} commands")
        self.spawn_resident()

    def let_go(self) -> None:
        """In a forked process: close everything that is the server's."""
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.sel.close()
        self.listener.close()
        for other in self.conns:
            other.close()
        if self.resident is not None and self.resident.sock is not None:
            self.resident.sock.close()
        for fd in (*self.wake, self.lock):
            os.close(fd)

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        if hasattr(socket, "SO_PEERCRED"):  # Linux; elsewhere the folder's mode 0700 alone keeps others out
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            if int.from_bytes(creds[4:8], sys.byteorder) != os.getuid():
                conn.close()
                return
        conn.settimeout(10.0)
        try:
            request, fds = protocol.receive(conn, max_fds=3)
        except (OSError, ValueError):
            conn.close()
            return
        if request is None or "argv" not in request or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            if request is not None and request.get("stop"):
                self.stop = True
            if request is not None and request.get("status"):
                try:
                    res = self.resident
                    protocol.send(conn, {"pid": os.getpid(), "started": self.started, "commands": self.served,
                                         "running": self.busy(), "idle_s": self.idle, "preload": self.took,
                                         "resident": None if res is None else {
                                             "pid": res.pid, "commands": res.commands, "warm": res.warm,
                                             "state": "running a command" if res.client is not None
                                             else "ready" if res.ready else "warming up"}})
                except OSError:
                    pass
            conn.close()
            return
        self.served += 1
        res = self.resident
        if res is not None and res.ready and resident.takes(request, self.own_limits, self.own_affinity):
            try:
                res.give(request, fds, conn)
                pid = res.pid
            except OSError:  # the resident is going away: fork as usual
                res.client = None
                pid = None
        else:
            pid = None
        if pid is None:
            pid = os.fork()
            if pid == 0:
                self.child(conn, request, fds)
            self.children[pid] = conn
        for fd in fds:
            os.close(fd)
        try:
            protocol.send(conn, {"pid": pid})
        except OSError:
            pass
        self.conns[conn] = pid
        self.sel.register(conn, selectors.EVENT_READ, "client")

    def child(self, conn, request, fds) -> None:
        """In the forked process: let go of everything that is the server's, become the client's
        command, run it; never returns."""
        code = 1
        try:
            self.let_go()
            conn.close()
            code = serve_request(request, fds)
        finally:
            os._exit(code)

    def from_client(self, conn) -> None:
        pid = self.conns.get(conn)
        try:
            message, _ = protocol.receive(conn)
        except (OSError, ValueError):
            message = None
        if pid is None:
            return
        res = self.resident
        in_resident = res is not None and res.client is conn
        if message is None:  # the client is gone: so is the command's reader
            self.sel.unregister(conn)
            self.conns.pop(conn, None)
            if in_resident:
                res.client_gone()
            else:
                self._kill(pid, signal.SIGTERM)
        elif "signal" in message:
            if in_resident:
                res.signal(int(message["signal"]))
            else:
                self._kill(pid, int(message["signal"]))

    @staticmethod
    def _kill(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.resident is not None and pid == self.resident.pid:
                self.resident_died(status)
                continue
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            if os.WIFSIGNALED(status):
                self.finish(conn, {"signal": os.WTERMSIG(status)})
            else:
                self.finish(conn, {"exit": os.waitstatus_to_exitcode(status)})


def serve() -> None:
    """The server's entry point (the client starts it: ``client.start_server``)."""
    server_key = os.environ.pop("GPUTEXT_DAEMON_KEY")
    path = os.environ.pop("GPUTEXT_DAEMON_PATH", "")
    if path:
        sys.path[:] = json.loads(path)
    Server(server_key).run()
