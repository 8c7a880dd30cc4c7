"""The first GPU command on an empty kernel cache: its fixed-signature functions compiled beside it.

A command compiles what it needs one function after another, in one process (numba compiles
under one lock per process). On an empty cache that is most of its time (2026-11-28, one H100,
20 Newsgroups' ``knn search -k 30``: 11.6 s, of which 6.9 s compiling 9 kernels and 5.1 s 13 CPU
functions; benchmarks/compile_probe_*.json). Some of those functions are called with the same
argument types whatever the data: the host functions of the GPU's search (its queries' scales and
tiles, the index's term maxima) and the kernels of the device's posting build. A GPU ``knn``
command whose cache lacks them starts, beside itself, one helper process per target
(``python -m gputext.compile_ahead cpu|cuda``) that compiles its list (AHEAD) into the kernel
cache, in the reverse of the order the command needs them; the device helper then compiles the
kernels the command hands it (``submit``): the search's select, whose geometry the command's
plan decides, while the command compiles its accumulation. Where the command reaches a function that a helper is compiling it
waits for it and loads it, and one that no helper has reached yet it compiles itself
(kernels/jit.py: an entry is compiled by one process at a time). A helper that has finished its
list leaves ``ahead-<target>.done`` in the cache folder, so later commands start none.

The signatures are written here, as the command's calls type them (C-contiguous arrays, Python
ints as int64); a signature that stops matching costs only the helper's time, never a result:
tests/test_compile_ahead.py checks that a search after the CPU helper compiles none of them.
``GPUTEXT_AHEAD=0`` turns the helpers off.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

ENV = "GPUTEXT_AHEAD"
TRACE = "GPUTEXT_AHEAD_TRACE"  # a file: each helper appends "helper-<target> <function> <start> <end>" (epoch seconds)

# target -> (module, function, argument types), in the reverse of the order a search first calls
# them: the helper starts with what the command needs last, so that the two meet in the middle.
_TILE_ARGS = ("int64[::1], int32[::1], float32[::1], int64[::1], int64, boolean, float64[::1], float64[::1], "
              "int64[::1], int64, int64, int64[::1], int32[:, ::1], float32[::1], float64[:, ::1]")
AHEAD = {
    "cpu": [
        ("gputext.kernels.scoring", "tile_inputs", _TILE_ARGS + ", int64[::1]"),  # compiles tile_one inside
        ("gputext.kernels.scoring", "tile_one", "int64, " + _TILE_ARGS),
        ("gputext.kernels.scoring", "query_stats", "int64[::1], int32[::1], float32[::1], float32[::1], int64"),
        ("gputext.kernels.postings", "term_maxabs_cpu", "int32[::1], float32[::1], int64"),
    ],
    "cuda": [
        ("gputext.kernels.postings", "doc_norms", "int64[::1], float32[::1], float64[::1], float64[::1]"),
        ("gputext.kernels.postings", "scatter_chunk_rows",
         "int64[::1], int32[::1], float32[::1], int64[::1], int64[::1], int32[:, ::1], int32[::1], float32[::1]"),
        ("gputext.kernels.postings", "chunk_cursors", "int32[:, ::1], int32[::1]"),
        ("gputext.kernels.postings", "count_chunk_terms", "int64[::1], int32[::1], int64[::1], int32[:, ::1]"),
    ],
}
SERVES = ("cuda",)  # the helpers that take submit()'s kernels (in turn, were there several)
COMMANDS = (["knn", "search"], ["knn", "classify"])  # the commands that start the helpers


def _marker(folder, target: str):
    return folder / f"ahead-{target}.done"


def _hold(folder, target: str):
    """The descriptor of ``ahead-<target>.lock`` in the cache folder, locked (exclusive) for this
    helper's life; None when another helper of the target holds it (or no lock can be had)."""
    from .daemon.key import try_lock
    try:
        return try_lock(str(folder / f"ahead-{target}.lock"))
    except OSError:
        return None


def _running(folder, target: str) -> bool:
    """Whether a helper of ``target`` is at work on this cache folder (it holds its lock)."""
    from .daemon.key import lock_held
    return lock_held(str(folder / f"ahead-{target}.lock"))


def targets_needed(argv: list[str]) -> list[str]:
    """The helpers a command line ``argv`` (after ``gputext``) should start: none for another
    command, for ``--device cpu``, with GPUTEXT_AHEAD=0, without a writable cache, or where a
    helper has already finished or is running (started by an earlier command); else "cpu", and
    "cuda" unless in the simulator."""
    if os.environ.get(ENV, "1") == "0" or argv[:2] not in COMMANDS or "--help" in argv:
        return []
    from .backend import asks_for_cpu, driver_library_present, simulator_enabled
    if asks_for_cpu(argv):
        return []
    from .kernels.jit import cache_folder
    folder = cache_folder()
    if folder is None:
        return []
    wanted = ["cpu"] if simulator_enabled() else (["cpu", *SERVES] if driver_library_present() else [])
    return [t for t in wanted if not _marker(folder, t).exists() and not _running(folder, t)]


_requests: dict = {"pipes": [], "next": 0}  # the SERVES helpers' stdins, in the process that started them


def describe(folder) -> str:
    """gputext doctor's line on the helpers for the cache folder ``folder``."""
    if os.environ.get(ENV, "1") == "0":
        return "off (GPUTEXT_AHEAD=0): a first GPU knn command compiles everything itself"
    state = {t: "done" if _marker(folder, t).exists() else ("at work" if _running(folder, t) else "to start")
             for t in AHEAD}
    return ("on: on an empty cache a GPU knn command starts helpers that compile part of its kernels beside it; "
            + ", ".join(f"{t} {v}" for t, v in state.items()))


def start(argv: list[str]) -> list[subprocess.Popen]:
    """Start the helpers ``argv`` needs (targets_needed), detached: they outlive the command if it
    ends first, and print nothing. The device helpers (SERVES) keep reading kernels to compile from
    their stdin (``submit``) until this process ends. Returns them (tests wait for them)."""
    procs = []
    for target in targets_needed(argv):
        env = dict(os.environ, **{ENV: "0"}, GPUTEXT_DAEMON="0")
        try:
            procs.append(subprocess.Popen([sys.executable, "-m", "gputext.compile_ahead", target], env=env,
                                          stdin=subprocess.PIPE if target in SERVES else subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        except OSError:  # no process to spare: the command compiles everything itself, as before
            break
        if target in SERVES:
            _requests["pipes"].append(procs[-1].stdin)
    return procs


def submit(kernel, args) -> None:
    """Ask one of this process's device helpers, if it has them (an empty cache), to compile
    ``kernel`` for the types of ``args`` (the arguments of its launch) while this process goes on;
    the launch then loads it, or waits for the helper's compile (kernels/jit.py). Successive calls
    go to the helpers in turn. For a kernel made by a factory (kernels._factory.kernel_cache) or
    defined at module level; otherwise nothing."""
    pipes = _requests["pipes"]
    if not pipes:
        return
    pipe = pipes[_requests["next"] % len(pipes)]
    _requests["next"] += 1
    import base64
    import pickle
    try:
        made = getattr(kernel, "gputext_factory", None)
        if made is None:
            py = kernel.py_func
            made = (py.__module__, py.__qualname__, None, ())
        argtypes = tuple(kernel.typeof_pyval(a) for a in args)
        pipe.write(base64.b64encode(pickle.dumps((made, argtypes))) + b"\n")
        pipe.flush()
    except (OSError, ValueError):  # the helper has gone
        pipes.remove(pipe)
    except Exception:  # a kernel another process cannot make: this one compiles it
        pass


def _requested(lines) -> tuple:
    """(dispatcher, argument types) of a submit() line."""
    import base64
    import importlib
    import pickle
    (module, name, args, kwargs), argtypes = pickle.loads(base64.b64decode(lines))
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return (obj if args is None else obj(*args, **dict(kwargs))), argtypes


def compile_target(target: str) -> tuple[int, int]:
    """Compile (or load) every entry of AHEAD[target] into the kernel cache; the marker once all
    are there. Returns (entries in the cache now, entries that failed)."""
    import importlib

    from numba.core import sigutils

    from .kernels.jit import cache_folder
    trace = os.environ.get(TRACE)
    done = failed = 0
    for module, name, args in AHEAD[target]:
        t0 = time.time()
        try:
            dispatcher = getattr(importlib.import_module(module), name)
            argtypes, _ = sigutils.normalize_signature(f"({args},)")
            dispatcher.compile(tuple(argtypes))  # a tuple of types: the key a call's types make
            done += 1
        except Exception:  # an entry that does not compile here (another numba, no GPU): the command's own
            failed += 1
        if trace:
            with open(trace, "a") as f:
                f.write(f"helper-{target} {name} {t0:.3f} {time.time():.3f}\n")
    folder = cache_folder()
    if folder is not None and not failed:
        _marker(folder, target).touch()
    return done, failed


REQUEST_IDLE_S = 60.0  # a device helper stops after this long without a request (a long-lived
# process such as the warm server's resident keeps its end of the pipe open: no end of input there)


def serve_requests(fd: int, idle_s: float = REQUEST_IDLE_S) -> int:
    """Compile the kernels submit() sends on the file descriptor ``fd`` (lines) until its input
    ends or ``idle_s`` pass without any; returns how many failed (each is the command's to
    compile). Reads with select and os.read: no reader thread left blocked at exit."""
    import select
    trace = os.environ.get(TRACE)
    failed, pending = 0, b""
    while True:
        if not select.select([fd], [], [], idle_s)[0]:
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in filter(None, (x.strip() for x in lines)):
            t0, name, key = time.time(), "?", ""
            try:
                dispatcher, argtypes = _requested(line)
                name = dispatcher.py_func.__name__
                dispatcher.compile(argtypes)
                if trace:
                    name += " " + repr(getattr(dispatcher, "gputext_factory", None)).replace(" ", "")
                    key = _key_digest(dispatcher, argtypes)
            except Exception:
                failed += 1
            if trace:
                with open(trace, "a") as f:
                    f.write(f"helper-request {name} {t0:.3f} {time.time():.3f} {key}\n")
    return failed


def _key_digest(dispatcher, argtypes) -> str:
    """The kernel cache's key of (dispatcher, argtypes), as short digests of its parts (for the
    trace: a command and a helper that make the same entry show the same)."""
    import hashlib
    try:
        key = dispatcher._cache._index_key(tuple(argtypes), dispatcher.targetctx.codegen())
        return ",".join(hashlib.sha256(repr(part).encode()).hexdigest()[:8] for part in key)
    except Exception as exc:
        return f"no-key:{type(exc).__name__}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in AHEAD:
        print(f"usage: python -m gputext.compile_ahead {{{'|'.join(AHEAD)}}}", file=sys.stderr)
        return 2
    from .kernels.jit import cache_folder
    folder = cache_folder()
    held = _hold(folder, argv[0]) if folder is not None else None
    if folder is not None and held is None:
        return 0  # another helper of this target is at work on this cache
    if argv[0] in SERVES:
        from .backend import cuda_status
        if not cuda_status()[0]:
            return 1
    _, failed = compile_target(argv[0])
    if argv[0] in SERVES and not sys.stdin.isatty():
        failed += serve_requests(sys.stdin.fileno())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
