"""Which server a command may use: the socket folder and the key (standard library only: the
client imports this before anything else)."""
from __future__ import annotations

import hashlib
import os
import socket
import stat
import sys

# Environment variables read when modules are imported (numba's configuration, thread pools, the
# CUDA driver, the locale, the cache folder): a server is only used by a client that has the same
# values. Every other variable is read when a command runs, from the client's environment.
KEYED = ("NUMBA_", "CUDA_", "NVIDIA_", "GPUTEXT_", "PYTHON", "OMP_", "MKL_", "OPENBLAS_", "TBB_",
         "NUMEXPR_", "LD_", "HDF5_", "LC_", "LANG", "DASK_", "SLURM_JOB_ID", "HOME", "XDG_CACHE_HOME",
         "TMPDIR")
UNKEYED = ("GPUTEXT_DAEMON", "GPUTEXT_DAEMON_IDLE", "GPUTEXT_RESIDENT", "GPUTEXT_PROFILE", "PYTHONUNBUFFERED")  # read per command


def switched_off(name: str, environ=os.environ) -> bool:
    """Whether the variable ``name`` says 0, off, no or false (unset: on)."""
    return environ.get(name, "1").strip().lower() in ("0", "off", "no", "false")


def enabled(environ=os.environ) -> bool:
    """Whether commands may go through a server (``GPUTEXT_DAEMON`` 0/off/no/false: never)."""
    if switched_off("GPUTEXT_DAEMON", environ):
        return False
    return hasattr(os, "fork") and hasattr(socket, "send_fds")


def idle_seconds(environ=os.environ) -> float:
    try:
        return max(1.0, float(environ.get("GPUTEXT_DAEMON_IDLE", "600")))
    except ValueError:
        return 600.0


def socket_folder() -> str:
    """The user's private folder for server sockets (made with mode 0700 if absent)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = os.path.join(runtime, "gputext") if runtime and os.path.isdir(runtime) else f"/tmp/gputext-{os.getuid()}"
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{base} is not a private folder of this user")
    return base


def search_path(path=None) -> list[str]:
    """sys.path without what the way a process was started put first: the working folder
    (``python -m``, ``python -c``) and the running script's own folder (the ``gputext`` console
    script's ``bin``, a user's script, a notebook kernel's launcher). Neither holds code the server
    imports, so ``gputext``, ``python -m gputext`` and a library call from any script share one
    server, whatever folder they run in. Repeated entries count once."""
    path = list(sys.path if path is None else path)
    drop = {os.getcwd()}
    script = sys.argv[0] if sys.argv else ""
    if path and script and os.path.isfile(script):
        if path[0] and os.path.realpath(path[0]) == os.path.realpath(os.path.dirname(os.path.abspath(script))):
            path = path[1:]
    out: list[str] = []
    for p in path:
        if p and os.path.abspath(p) not in drop and p not in out:
            out.append(p)
    return out


def _package_folders() -> list[str]:
    import importlib.util
    folders = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    spec = importlib.util.find_spec("gputext.kernels")  # a separate folder in a checkout (setup.py maps it)
    if spec is not None and spec.submodule_search_locations:
        folders += [os.path.abspath(p) for p in spec.submodule_search_locations]
    return sorted(set(folders))


def code_stamp(h) -> None:
    """Feed ``h`` the path, size and modification time of every source file of the package and the
    modification time of every search-path folder (an install or upgrade changes one of them)."""
    for folder in _package_folders():
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".txt")):
                    st = os.stat(os.path.join(root, name))
                    h.update(f"{root}/{name}:{st.st_size}:{st.st_mtime_ns}\0".encode())
    for p in search_path():
        try:
            h.update(f"{p}:{os.stat(p).st_mtime_ns}\0".encode())
        except OSError:
            h.update(f"{p}:-\0".encode())


def keyed_environment(environ=os.environ) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(KEYED) and k not in UNKEYED}


def server_key(environ=os.environ) -> str:
    """20 hex digits naming the server this process may use."""
    h = hashlib.sha256()
    h.update(f"{sys.executable}\0{sys.version}\0".encode())
    code_stamp(h)
    for k, v in sorted(keyed_environment(environ).items()):
        h.update(f"{k}={v}\0".encode())
    return h.hexdigest()[:20]


def paths(key: str) -> tuple[str, str]:
    """(socket, lock file) of the server named ``key``."""
    folder = socket_folder()
    return os.path.join(folder, f"{key}.sock"), os.path.join(folder, f"{key}.lock")


def try_lock(path: str, create: bool = True):
    """The descriptor of the lock file ``path`` with its exclusive ``flock`` taken (held until the
    descriptor is closed), or None when another process holds it. OSError when the file cannot
    be opened (FileNotFoundError: missing, with ``create`` False)."""
    import fcntl
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError:
        os.close(fd)
        return None


def lock_held(lock: str) -> bool:
    """Whether a process holds the ``flock`` of the lock file ``lock`` (a server of that key runs)."""
    try:
        fd = try_lock(lock, create=False)
    except FileNotFoundError:
        return False
    if fd is None:
        return True
    os.close(fd)
    return False


def server_state(server_key: str) -> str:
    """"running" (its socket answers), "starting" (it holds its lock, warming up) or "not running"."""
    sock, lock = paths(server_key)
    return "running" if os.path.exists(sock) else "starting" if lock_held(lock) else "not running"
