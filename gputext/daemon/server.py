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

from . import key, protocol


def log(message: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {message}\n")
    sys.stderr.flush()


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


def _driver_started() -> bool:
    mod = sys.modules.get("numba.cuda.cudadrv.driver")
    drv = getattr(mod, "driver", None) if mod is not None else None
    return getattr(drv, "pid", None) is not None  # numba-cuda sets it when cuInit succeeds


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
    if _driver_started():
        raise RuntimeError("the CUDA driver was started while preloading")
    return {"modules": modules, "imports_s": round(t1 - t0, 3), "registries_s": round(t2 - t1, 3),
            "cpu_overloads": twins, "cpu_loads_s": round(t3 - t2, 3)}


def _apply(request: dict, fds: list[int]) -> None:
    """Make this (forked) process the client's: descriptors, folder, environment, limits."""
    import resource
    for target, fd in zip((0, 1, 2), fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.umask(int(request["umask"]))
    for name, (soft, hard) in request.get("rlimits", {}).items():
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


def _run_command() -> int:
    """gputext.cli.main in this process; its exit status."""
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
        last = time.monotonic()
        while not self.stop:
            timeout = None if self.children else max(0.0, self.idle - (time.monotonic() - last))
            events = sel.select(min(timeout, 10.0) if timeout is not None else 10.0)
            for item, _ in events:
                if item.data == "accept":
                    self.accept()
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
            if self.children or events:
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
                    protocol.send(conn, {"pid": os.getpid(), "started": self.started, "commands": self.served,
                                         "running": len(self.children), "idle_s": self.idle, "preload": self.took})
                except OSError:
                    pass
            conn.close()
            return
        self.served += 1
        pid = os.fork()
        if pid == 0:
            self.child(conn, request, fds)
        for fd in fds:
            os.close(fd)
        try:
            protocol.send(conn, {"pid": pid})
        except OSError:
            pass
        self.children[pid] = conn
        self.conns[conn] = pid
        self.sel.register(conn, selectors.EVENT_READ, "client")

    def child(self, conn, request, fds) -> None:
        """In the forked process: let go of everything that is the server's, become the client's
        command, run it; never returns."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.sel.close()
            self.listener.close()
            for other in (*self.conns, conn):
                other.close()
            for fd in (*self.wake, self.lock):
                os.close(fd)
            _apply(request, fds)
            code = _run_command()
        except KeyboardInterrupt:
            code = 130
        except BaseException as exc:  # before the command ran: one line on its stderr (the client's, once applied)
            try:
                sys.stderr.write(f"gputext: {type(exc).__name__}: {exc}\n")
                sys.stderr.flush()
            except Exception:
                pass
        os._exit(code)

    def from_client(self, conn) -> None:
        pid = self.conns.get(conn)
        try:
            message, _ = protocol.receive(conn)
        except (OSError, ValueError):
            message = None
        if pid is None:
            return
        if message is None:  # the client is gone: so is the command's reader
            self.sel.unregister(conn)
            self.conns.pop(conn, None)
            self._kill(pid, signal.SIGTERM)
        elif "signal" in message:
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
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            if os.WIFSIGNALED(status):
                message = {"signal": os.WTERMSIG(status)}
            else:
                message = {"exit": os.waitstatus_to_exitcode(status)}
            try:
                protocol.send(conn, message)
            except OSError:
                pass
            if conn in self.conns:
                self.sel.unregister(conn)
                self.conns.pop(conn)
            conn.close()


def serve() -> None:
    """The server's entry point (the client starts it: ``client.start_server``)."""
    server_key = os.environ.pop("GPUTEXT_DAEMON_KEY")
    path = os.environ.pop("GPUTEXT_DAEMON_PATH", "")
    if path:
        sys.path[:] = json.loads(path)
    Server(server_key).run()
