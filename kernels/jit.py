"""The one way gputext compiles: ``cpu_jit`` (numba.njit) and ``cuda_kernel`` (numba.cuda.jit),
both kept on disk in gputext's kernel cache and reused by every later process.

Why numba's own cache, and what we add to it (measured 2026-11-27, docs/ARCHITECTURE.md "Kernel
cache"): numba-cuda's cache serves kernels made inside factories (its index key hashes the
closure's cell values, so each geometry a factory specialises is an entry of its own) and keeps
the cubin, so a later process loads a kernel in about 2 ms instead of compiling it for 0.1-2 s.
Our own PTX/cubin store would repeat that machinery; PTX shipped ahead would still be JIT-compiled
by the driver at every first load (its cache aside) and could not cover the geometry-specialised
kernels, whose constants come from the device at run time. Three things numba's cache lacks are
added here, and only for gputext's functions (the user's own numba functions keep numba's cache):

- **Where.** ``$GPUTEXT_CACHE_DIR``, else ``$XDG_CACHE_HOME/gputext``, else ``~/.cache/gputext``
  (a per-user folder, so a pip-installed, read-only package still caches); a folder that cannot be
  written falls back to one under the system's temporary folder, and then to no disk cache.
- **Keyed by everything that changes the code.** numba keys an entry by the signature, the
  compute capability, the CUDA runtime and numba-cuda versions and the function's bytecode and
  closure, and checks the source file's time stamp. That misses a change in a device function of
  another file. So the cache folder is named by a digest of the sources of compiled code (every
  file of ``kernels/`` and each module of ``gputext/`` that uses numba) and the numba, numba-cuda, NumPy and Python versions: a
  change of compiled code compiles afresh into a new folder (``gputext doctor --clear-cache`` removes the
  others). Each function's index is stamped with its own file's content digest (not its time
  stamp: a reinstall of the same code keeps the cache) and, for the device, the driver version.
- **Safe when several processes fill it at once.** numba writes a new entry's index before its
  data, naming the data file by the index's size: two processes that add different entries
  of one kernel at once can leave the index pointing at the other's code. Here every save holds
  an exclusive lock on the folder's lock file and every load a shared one (``fcntl.flock``), so
  Dask workers and pytest-xdist processes read only whole entries.

Under numba's CUDA simulator there is nothing to compile: ``cuda_kernel`` is plain ``cuda.jit``.

    from .jit import cpu_jit, cuda_kernel

    @cpu_jit(parallel=True)
    def twin(...): ...

    @cuda_kernel                      # or cuda_kernel(max_registers=64)(fn)
    def kernel(...): ...
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import sys
import tempfile
import time
import types as pytypes
import weakref
from pathlib import Path

import numba
import numpy as np

ENV_DIR = "GPUTEXT_CACHE_DIR"
_LOCK_NAME = ".lock"
_state: dict = {}  # "folder", "why_not", "why_not_cpu", "why_not_cuda": found once per process


def cache_root() -> Path:
    """The folder that holds one sub-folder per code version (the environment decides; not created)."""
    env = os.environ.get(ENV_DIR, "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gputext"


def _package_dirs() -> list[Path]:
    """The folders whose sources key the cache: the installed gputext package (kernels/ lies inside
    it), or in a checkout kernels/ and gputext/ side by side."""
    here = Path(__file__).resolve().parent
    pkg = sys.modules.get("gputext")
    if pkg is None or not getattr(pkg, "__file__", None):
        return [here]
    top = Path(pkg.__file__).resolve().parent
    return [top] if here.is_relative_to(top) else [here, top]


_COMPILED_MARKERS = (b"numba", b"cpu_jit", b"cuda_kernel")


def source_digest(dirs: list[Path] | None = None) -> str:
    """sha256 over the sources that compiled code comes from, hex: every .py file of kernels/ and
    every other module of the package that mentions numba (its relative path and bytes, sorted).
    Plain Python compiled for both targets lives in kernels/ (docs/ARCHITECTURE.md), so a change
    of the CLI or the docs keeps the cache."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for d in dirs or _package_dirs():
        for path in sorted(d.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            data = path.read_bytes()
            if path.is_relative_to(here) or any(m in data for m in _COMPILED_MARKERS):
                h.update(str(path.relative_to(d)).encode() + b"\0")
                h.update(data + b"\0")
    return h.hexdigest()


def cache_tag(digest: str, versions: dict[str, str]) -> str:
    """The code-version folder's name: the sources' digest and the compilers' versions, hashed."""
    h = hashlib.sha256(digest.encode())
    for name in sorted(versions):
        h.update(f"{name}={versions[name]}\0".encode())
    return "code-" + h.hexdigest()[:20]


def _versions() -> dict[str, str]:
    import numpy
    versions = {"numba": numba.__version__, "numpy": numpy.__version__,
                "python": sys.version.split()[0]}
    try:
        from importlib.metadata import version
        versions["numba-cuda"] = version("numba-cuda")
    except Exception:
        versions["numba-cuda"] = "none"
    return versions


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except OSError:
        return False


def cache_folder() -> Path | None:
    """This code version's cache folder, created (None: no folder can be written; see ``why_not``)."""
    if "folder" not in _state:
        tag = cache_tag(source_digest(), _versions())
        candidates = [cache_root(), Path(tempfile.gettempdir()) / f"gputext-cache-{os.getuid()}"]
        _state["folder"], _state["why_not"] = None, f"none of {', '.join(map(str, candidates))} can be written"
        for root in candidates:
            if _writable(root / tag):
                _state["folder"], _state["why_not"] = root / tag, ""
                break
    return _state["folder"]


def why_not_cached() -> str:
    """Empty when kernels and twins are cached on disk; otherwise why not (for ``gputext doctor``)."""
    cache_folder()
    return "; ".join(w for w in (_state["why_not"], _state.get("why_not_cpu", ""), _state.get("why_not_cuda", "")) if w)


def clear_other_versions(include_current: bool = False) -> int:
    """Remove the cache root's folders of other code versions (and this one's when asked); returns
    how many. Only folders named like ours (``code-*``) are touched."""
    import shutil
    current = cache_folder()
    removed = 0
    root = current.parent if current is not None else cache_root()
    for folder in root.glob("code-*"):
        if folder.is_dir() and (include_current or folder != current):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    if include_current and current is not None:
        current.mkdir(parents=True, exist_ok=True)
    return removed


@contextlib.contextmanager
def folder_lock(folder: str, exclusive: bool):
    """Hold the folder's lock file: exclusive for a save, shared for a load."""
    fd = os.open(os.path.join(folder, _LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@functools.lru_cache(maxsize=None)
def file_digest(path: str) -> str:
    """sha256 of a source file, hex; once per file and process (every cached function of the file
    stamps its index with it)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class _Locator:
    """numba's cache locator protocol, for functions of this package: one folder, content stamps.

    ``stamp_extra`` is called when an index is first read or written (the driver version for
    the device: asked only once a kernel is compiled, so importing never touches the driver)."""

    stamp_extra = staticmethod(lambda: ())

    def __init__(self, py_func, py_file, folder: Path):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._path = str(folder)

    def ensure_cache_path(self):
        os.makedirs(self._path, exist_ok=True)

    def get_cache_path(self):
        return self._path

    def get_source_stamp(self):
        return _LazyStamp(self._py_file, self.stamp_extra)

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        folder = cache_folder()
        if folder is None or not os.path.exists(py_file):
            return None
        return cls(py_func, py_file, folder)


class _LazyStamp:
    """A source stamp computed at its first use: (file digest, extra), compared by value."""

    def __init__(self, py_file, extra):
        self._py_file, self._extra, self._value = py_file, extra, None

    def value(self):
        if self._value is None:
            self._value = (file_digest(self._py_file),) + tuple(self._extra())
        return self._value


class _LockedIndex:
    """Mixin for numba's IndexDataCacheFile: loads under a shared lock, saves under an exclusive
    one, and the lazy stamp resolved when the index is read or written."""

    @property
    def _source_stamp(self):
        stamp = self.__dict__.get("_stamp")
        return stamp.value() if isinstance(stamp, _LazyStamp) else stamp

    @_source_stamp.setter
    def _source_stamp(self, stamp):
        self.__dict__["_stamp"] = stamp

    def save(self, key, data):
        with folder_lock(self._cache_path, exclusive=True):
            super().save(key, data)

    def load(self, key):
        with folder_lock(self._cache_path, exclusive=False):
            return super().load(key)


def _attach(dispatcher, cache_class):
    """Give ``dispatcher`` our cache (numba's own stays off); without a writable folder, or with a
    numba whose cache classes differ (``cache_class`` None), none."""
    if cache_class is None or cache_folder() is None:
        return dispatcher
    try:
        dispatcher._cache = cache_class(dispatcher.py_func)
        dispatcher._cache._gputext_owner = weakref.ref(dispatcher)  # for _record
    except RuntimeError:  # no locator: a function defined outside a file (REPL, exec)
        pass
    return dispatcher


_classes: dict = {}


def _cache_class(kind: str):
    """The cache class for "cpu" (numba's FunctionCache) or "cuda" (numba-cuda's CUDACache), made
    once; None (and why, for doctor) for a numba whose cache classes are elsewhere."""
    if kind not in _classes:
        try:
            _classes[kind] = _make_cache_class(*_BASES[kind]())
            _classes[kind].target = kind
        except (ImportError, AttributeError) as exc:
            _classes[kind] = None
            _state[f"why_not_{kind}"] = f"this numba's {kind} cache is not the one gputext knows ({exc})"
    return _classes[kind]


def _cpu_bases():
    from numba.core import caching
    return caching.FunctionCache, caching.CompileResultCacheImpl, caching.IndexDataCacheFile, lambda: ()


def _driver_version():
    from numba import cuda
    return tuple(cuda.cudadrv.driver.driver.get_version())


def _cuda_bases():
    from numba.cuda import dispatcher as cuda_dispatcher
    try:
        from numba.cuda.core import caching
    except ImportError:  # numba-cuda before its own copy of numba's caching
        from numba.core import caching
    return (cuda_dispatcher.CUDACache, cuda_dispatcher.CUDACacheImpl, caching.IndexDataCacheFile,
            lambda: ("driver",) + _driver_version())


_BASES = {"cpu": _cpu_bases, "cuda": _cuda_bases}


def _make_cache_class(cache_base, impl_base, index_base, stamp_extra):
    """numba's cache class with our locator (folder, content stamp + ``stamp_extra()``) and the
    locked index."""
    locator = type("Locator", (_Locator,), {"stamp_extra": staticmethod(stamp_extra)})
    impl = type("Impl", (impl_base,), {"_locator_classes": [locator]})
    index = type("Index", (_LockedIndex, index_base), {})

    class KernelCache(_CompileOnce, cache_base):
        _impl_class = impl

        def _index_key(self, sig, codegen):
            """numba's key with its closure part made by closure_digest where that can (numba
            hashes the closure pickled, and a device function's closure pickled differently in
            two processes on the GPU host, 2026-11-28: a helper's entry the command never found)."""
            key = super()._index_key(sig, codegen)
            fn = self._py_func
            try:
                digest = closure_digest(fn) if fn.__closure__ else None
            except Exception:  # anything unforeseen in a closure: numba's own key, as before
                digest = None
            if digest is None:
                return key
            code = hashlib.sha256(fn.__code__.co_code).hexdigest()
            return tuple((code, digest) if isinstance(part, tuple) and len(part) == 2 and part[0] == code else part
                         for part in key)

        def __init__(self, py_func):
            super().__init__(py_func)
            old = self._cache_file
            self._cache_file = index(cache_path=old._cache_path, filename_base=self._impl.filename_base,
                                     source_stamp=self._impl.locator.get_source_stamp())

    return KernelCache


def closure_digest(fn) -> str | None:
    """sha256 (hex) of what a function's closure holds, by value, the same in every process: numbers,
    strings, None, tuples, lists and frozensets of them, classes and numba types by name, NumPy
    scalars and arrays by their bytes, and functions (numba dispatchers by their Python function)
    by their code (bytecode, constants, names) and, in turn, their closures. None when a cell
    holds anything else. Globals are not in it: the cache folder's name covers the sources."""
    h = hashlib.sha256()
    return h.hexdigest() if _cells_into(h, fn, 0) else None


def _cells_into(h, fn, depth: int) -> bool:
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            return False
        if not _digest_into(h, value, depth + 1):
            return False
    return True


def _digest_into(h, obj, depth: int) -> bool:
    if depth > 20:  # a function that holds itself, or deeper than any kernel's
        return False
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
        return True
    if isinstance(obj, (tuple, list, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, frozenset) else obj
        h.update(f"{type(obj).__name__}[".encode())
        ok = all(_digest_into(h, x, depth + 1) for x in items)
        h.update(b"];")
        return ok
    if isinstance(obj, (np.generic, np.ndarray)):
        a = np.asarray(obj)
        h.update(f"ndarray:{a.dtype.str}:{a.shape}:".encode() + np.ascontiguousarray(a).tobytes() + b";")
        return True
    if isinstance(obj, (type, numba.types.Type, np.dtype)):
        h.update(f"type:{obj!r};".encode())
        return True
    fn = getattr(obj, "py_func", obj)  # a numba dispatcher: its Python function
    if isinstance(fn, pytypes.FunctionType):
        h.update(f"function:{fn.__module__}.{fn.__qualname__};".encode())
        return _code_into(h, fn.__code__, depth) and _cells_into(h, fn, depth)
    return False


def _code_into(h, code, depth: int) -> bool:
    h.update(code.co_code + repr(code.co_names).encode() + b";")
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            if not _code_into(h, const, depth + 1):
                return False
        elif not _digest_into(h, const, depth + 1):
            return False
    return True


COMPILE_WAIT_S = 300.0  # the longest a process waits for another's compile of an entry before compiling it too
_held: dict = {}  # lock path -> descriptor: the entries this process is compiling
RECORD_ENV = "GPUTEXT_AHEAD_RECORD"  # a file: each compile of this process appended as a JSON line (_record)
_misses: dict = {}  # (id of cache, signature) -> when its miss was found, while recording


class _CompileOnce:
    """Mixin for numba's Cache: an entry is compiled by one process at a time. A load that misses
    takes the entry's lock file (``<index>-<key digest>.compiling`` beside the index, ``flock``
    exclusive), waiting while another process holds it, and loads again: when the other process
    has saved the entry meanwhile, this one loads it instead of compiling it too. Otherwise the
    miss stands and the lock is held until this process saves the entry (numba's dispatcher
    compiles between the two calls; a compile that fails leaves it held until the next load of
    the entry or the process's end, and the others stop waiting after COMPILE_WAIT_S). So Dask
    workers, pytest-xdist processes and the helpers of gputext.compile_ahead that need one kernel at
    once compile it once. A process that crashes releases its locks (the kernel closes them)."""

    def load_overload(self, sig, target_context):
        data = super().load_overload(sig, target_context)
        if data is not None or not getattr(self, "_enabled", True):
            return data
        try:
            path = self._compiling_path(self._index_key(sig, target_context.codegen()))
        except Exception:  # a numba whose keys differ: no lock, as numba alone
            return None
        if path not in _held and _lock_entry(path):
            data = super().load_overload(sig, target_context)
            if data is not None:
                _unlock_entry(path)
        if data is None and os.environ.get(RECORD_ENV):
            _misses[(id(self), tuple(sig))] = time.time()
        return data

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        finally:
            for path in [p for p in _held if p.startswith(self._compiling_prefix())]:
                _unlock_entry(path)
            started = _misses.pop((id(self), tuple(sig)), None)
            if started is not None:
                _record(self, sig, started)

    def _compiling_prefix(self) -> str:
        return os.path.join(self._cache_path, self._cache_file._index_name.rsplit(".", 1)[0]) + "-"

    def _compiling_path(self, key) -> str:
        return self._compiling_prefix() + hashlib.sha256(repr(key).encode()).hexdigest()[:16] + ".compiling"


def request_line(dispatcher, argtypes) -> bytes | None:
    """How another process makes ``dispatcher`` and compiles it for ``argtypes``: base64 of the
    pickle of ((module, name, factory args, factory kwargs items[, position]), argument types),
    where args is None for a module-level name. A kernel made by a factory names its call
    (kernels._factory.kernel_cache; position: its place in a factory's tuple); None for a
    function no other process can name."""
    import base64
    import pickle
    made = getattr(dispatcher, "gputext_factory", None)
    if made is None:
        py = dispatcher.py_func
        module = sys.modules.get(py.__module__)
        name = py.__qualname__ if getattr(module, py.__qualname__, None) is dispatcher else next(
            (k for k, v in vars(module).items() if v is dispatcher), None) if module is not None else None
        if name is None:  # another twin of the same Python function, a function made inside another
            return None
        made = (py.__module__, name, None, ())
    return base64.b64encode(pickle.dumps((made, tuple(argtypes))))


def _record(cache, sig, started: float) -> None:
    """Append this compile to $GPUTEXT_AHEAD_RECORD: one JSON line {"target", "name", "start",
    "seconds", "request"} (request_line; null when the function cannot be named), for
    gputext.compile_ahead's manifests (benchmarks/ahead.py records them)."""
    import json
    owner = getattr(cache, "_gputext_owner", lambda: None)()
    if owner is None:
        return
    try:
        line = request_line(owner, sig)
    except Exception:  # a factory argument that does not pickle: recorded unnamed
        line = None
    entry = {"target": getattr(cache, "target", "?"), "name": owner.py_func.__qualname__, "start": round(started, 4),
             "seconds": round(time.time() - started, 4), "request": None if line is None else line.decode()}
    try:
        with open(os.environ[RECORD_ENV], "a") as f:
            f.write(json.dumps(entry) + "\n")
    except OSError:
        pass


def _lock_entry(path: str) -> bool:
    """Hold the entry's lock file (kept in _held), waiting up to COMPILE_WAIT_S for another
    process's; False when it could not be opened or the wait ran out."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return False
    deadline = time.monotonic() + COMPILE_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _held[path] = fd
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return False
            time.sleep(0.01)
        except OSError:
            os.close(fd)
            return False


def _unlock_entry(path: str) -> None:
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)  # closing releases the lock; the file stays for the next compile of the entry


_cpu_dispatchers: list = []  # every cpu_jit function, for preload_cpu


def cpu_jit(fn=None, **options):
    """``numba.njit(**options)`` kept in gputext's kernel cache (``cache=`` is not an option here)."""
    def wrap(f):
        dispatcher = _attach(numba.njit(**options)(f), _cache_class("cpu"))
        _cpu_dispatchers.append(dispatcher)
        return dispatcher
    return wrap(fn) if fn is not None else wrap


def preload_cpu(parallel: bool = False) -> int:
    """Load the cached machine code of every serial CPU twin of this code version into this process
    (the warm server does, before it forks a process per command); returns how many overloads.
    Only entries whose key matches this process (signature, CPU, code) are loaded: nothing is
    compiled. Parallel twins only with ``parallel`` (the server's resident, which never forks):
    loading one starts numba's threads, which a fork cannot copy."""
    from numba.core.registry import cpu_target
    codegen = cpu_target.target_context.codegen()
    loaded = 0
    for dispatcher in list(_cpu_dispatchers):
        if dispatcher.targetoptions.get("parallel") and not parallel:
            continue
        cache = getattr(dispatcher, "_cache", None)
        index = getattr(cache, "_cache_file", None)
        if index is None or not hasattr(index, "_load_index"):
            continue
        try:
            keys = list(index._load_index())
        except Exception:  # an index of another numba: skip it, the command loads or compiles
            continue
        for key in keys:
            sig = key[0]
            if sig in dispatcher.overloads or cache._index_key(sig, codegen) != key:
                continue
            try:
                dispatcher.compile(sig)
                loaded += 1
            except Exception:
                pass
    return loaded


def simulator_on() -> bool:
    return bool(numba.config.ENABLE_CUDASIM)


def device_function(fn):
    """``numba.cuda.jit(device=True)`` of fn, inlined by NVVM into each kernel that calls it
    (``forceinline``: LLVM's alwaysinline), not by numba's IR inliner (``inline="always"``), which
    re-types and re-lowers the callee inside every caller. The kernels come out the same size, and
    compile 2.5x faster: numba to PTX for all 77 kernels of tests/test_ptx.py took 115.3 s with
    numba's inliner and 45.6 s with NVVM's (2-core VM, 2026-11-27; ``unit_topk`` 11.0 s -> 1.6 s).
    Under the simulator, which knows no forceinline, a plain device function."""
    from numba import cuda
    if simulator_on():
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, forceinline=True)(fn)


@contextlib.contextmanager
def ptx_target(cc: tuple[int, int]):
    """While open, numba-cuda compiles non-inlined device functions for compute capability cc
    instead of asking the current device (``CUDADispatcher.compile_device`` does), so that
    ``numba.cuda.compile_ptx`` works on a machine without a GPU or driver (tests/test_ptx.py, CI).
    Holds numba's compiler lock: no other thread compiles meanwhile."""
    from numba.cuda import dispatcher
    from numba.cuda.core.compiler_lock import global_compiler_lock
    with global_compiler_lock:
        saved = dispatcher.get_current_device
        dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=tuple(cc))
        try:
            yield
        finally:
            dispatcher.get_current_device = saved


def compile_ptx(fn, signature, cc: tuple[int, int] = (9, 0)) -> str:
    """The PTX of kernel fn (a Python function or a dispatcher) for ``signature`` on compute
    capability cc, with or without a GPU (ptx_target)."""
    from numba import cuda
    with ptx_target(cc):
        ptx, _ = cuda.compile_ptx(getattr(fn, "py_func", fn), signature, cc=tuple(cc))
    return ptx


def cuda_kernel(fn=None, *, max_registers: int = 0, **options):
    """``numba.cuda.jit`` of a kernel, kept in gputext's kernel cache; a per-thread register cap when
    ``max_registers`` > 0 (ptxas spills the rest to local memory; left out in the simulator,
    which has no registers). Device functions are ``device_function``: compiled into the kernels
    that call them."""
    from numba import cuda

    def wrap(f):
        if simulator_on():
            return cuda.jit(**options)(f)
        opts = dict(options, max_registers=int(max_registers)) if int(max_registers) > 0 else options
        return _attach(cuda.jit(**opts)(f), _cache_class("cuda"))
    return wrap(fn) if fn is not None else wrap
