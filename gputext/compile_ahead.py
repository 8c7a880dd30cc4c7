"""The first command on an empty kernel cache: what it will compile, compiled beside it by helper
processes.

A command compiles what it needs one function after another, in one process (numba compiles
under one lock per process). On an empty cache that is most of its time (2026-11-28, one H100,
20 Newsgroups' ``knn search -k 30``: 11.6 s, of which 6.9 s compiling 9 kernels and 5.1 s 13 CPU
functions; benchmarks/compile_probe_*.json; ``cluster star`` 24.3 s, ``cluster stream`` 22.5 s).

**Manifests.** What each documented command compiles is recorded once, on the GPU host, by
running it on an empty cache with ``GPUTEXT_AHEAD_RECORD`` set (kernels/jit.py appends every
compile: the function, how another process makes it, its argument types and its seconds):
``python -m benchmarks.ahead`` writes ``gputext/data/ahead/<command>.<device>.json``, the
entries in the order the command first needed them. The commands are recorded on synthetic
corpora (``benchmarks.datagen``), not on the data they are measured on.

**Helpers.** A command with a manifest (``knn search``, ``knn classify`` vote and SVM,
``cluster star``, ``cluster stream``, ``rank train``; its device's manifest) whose helpers have
not run on this cache starts ``helpers(...)`` processes (``python -m gputext.compile_ahead NAME
PART PARTS``), each with a share of the manifest's compile seconds (``plan``: the longest
entries first, each to the helper with the fewest seconds so far), while the command compiles
from the front. Where the command reaches a function a helper is compiling it waits for it and loads it,
and one that no helper has reached yet it compiles itself (kernels/jit.py: an entry is compiled by
one process at a time). An entry that does not match the command's data (a kernel specialised
for another geometry) costs only a helper's time. Part 0 of a device manifest also compiles the
kernels the command hands it (``submit``: the search's select, whose geometry the plan decides),
before its next manifest entry; it stops REQUEST_IDLE_S after the last. A helper that finishes
its part leaves ``ahead-<name>-<part>of<parts>.done`` in the cache folder and holds
``...lock`` while it works, so later commands (and the warm server's) start none.

``GPUTEXT_AHEAD=0`` turns the helpers off (the test suite does); ``GPUTEXT_AHEAD_TRACE`` (a file)
logs each helper compile.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ENV = "GPUTEXT_AHEAD"
TRACE = "GPUTEXT_AHEAD_TRACE"  # a file: each helper appends "helper-<name>-<part> <function> <start> <end>"
MANIFESTS = Path(__file__).parent / "data" / "ahead"  # GPUTEXT_AHEAD_MANIFESTS: another folder (your own recordings)
MAX_HELPERS = 6
SECONDS_PER_HELPER = 3.0  # a helper costs about a second of start (imports, the GPU's context): one per 3 s of work
REQUEST_IDLE_S = 60.0  # part 0 stops after this long without a request (a long-lived process such as
# the warm server's resident keeps its end of the pipe open: no end of input there)


def command_name(argv: list[str]) -> str | None:
    """The manifest name of a command line (the words after ``gputext``); None for a command without one."""
    words = tuple(argv[:2])
    if words == ("knn", "classify"):
        model = [b for a, b in zip(argv, argv[1:]) if a == "--model"] + [a[8:] for a in argv if a.startswith("--model=")]
        return "knn-classify-svm" if model and model[-1] == "svm" else "knn-classify-vote"
    return {("knn", "search"): "knn-search", ("cluster", "star"): "star", ("cluster", "stream"): "stream",
            ("rank", "train"): "rank-train"}.get(words)


def device_of(argv: list[str]) -> str:
    """The manifest device of a command line: "cpu" when it asks for the CPU or no GPU driver is
    here, else "cuda" (in the simulator: the cuda manifest's CPU entries only, see entries())."""
    from .backend import asks_for_cpu, driver_library_present, simulator_enabled
    if asks_for_cpu(argv) or not (simulator_enabled() or driver_library_present()):
        return "cpu"
    return "cuda"


def manifests() -> Path:
    """The folder of manifests: $GPUTEXT_AHEAD_MANIFESTS, else the package's."""
    return Path(os.environ.get("GPUTEXT_AHEAD_MANIFESTS") or MANIFESTS)


def manifest(name: str) -> dict | None:
    """The manifest ``<name>.json`` (name: "<command>.<device>"); None when there is none."""
    try:
        return json.loads((manifests() / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def entries(found: dict) -> list[dict]:
    """A manifest's entries this process can compile: all of them, but in the simulator (no device
    code to compile) the CPU ones, and only those another process can make (a named request)."""
    from .backend import simulator_enabled
    sim = simulator_enabled()
    return [e for e in found.get("entries", []) if e.get("request") and not (sim and e.get("target") == "cuda")]


def helpers(seconds: float, cpus: int | None = None) -> int:
    """How many helpers for a manifest of ``seconds`` of compiling: one per SECONDS_PER_HELPER, at
    most MAX_HELPERS and one fewer than this process's CPUs (the command compiles too)."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(MAX_HELPERS, cpus - 1, -(-int(seconds * 10) // int(SECONDS_PER_HELPER * 10))))


def plan(items: list[dict], parts: int) -> list[list[int]]:
    """The entries (indices into ``items``, in the order of need) of each of ``parts`` helpers, in the
    order each compiles them: the longest first, each to the helper with the fewest recorded
    seconds so far (the later-needed entry, and the lower part, first on a tie). The command
    compiles from the front, where the short entries mostly are, while the helpers start on the
    long ones; on the twelve manifests, in a model where the command waits for what a helper is
    compiling, this ends sooner than dealing in the reverse of the order of need (svm: 3.1 s
    against 3.9 s of 13.7 s at 4 helpers) and never later."""
    load = [0.0] * parts
    out: list[list[int]] = [[] for _ in range(parts)]
    for i in sorted(range(len(items)), key=lambda i: (-float(items[i].get("seconds", 0.0)), -i)):
        p = min(range(parts), key=lambda j: (load[j], j))
        out[p].append(i)
        load[p] += float(items[i].get("seconds", 0.0))
    return out


def _stem(name: str, part: int, parts: int) -> str:
    return f"ahead-{name}-{part}of{parts}"


def _hold(folder, stem: str):
    """The descriptor of ``<stem>.lock`` in the cache folder, locked (exclusive) for this helper's
    life; None when another helper holds it (or no lock can be had)."""
    from .daemon.key import try_lock
    try:
        return try_lock(str(folder / f"{stem}.lock"))
    except OSError:
        return None


def _running(folder, stem: str) -> bool:
    from .daemon.key import lock_held
    return lock_held(str(folder / f"{stem}.lock"))


def needed(argv: list[str]) -> tuple[str, list[int], int]:
    """(manifest name, the parts to start, how many parts) for a command line: no parts for a
    command without a manifest, with GPUTEXT_AHEAD=0, without a writable cache, or for parts that
    have finished or are running (started by an earlier command)."""
    if os.environ.get(ENV, "1") == "0" or "--help" in argv:
        return "", [], 0
    command = command_name(argv)
    if command is None:
        return "", [], 0
    name = f"{command}.{device_of(argv)}"
    found = manifest(name)
    if found is None:
        return name, [], 0
    from .kernels.jit import cache_folder
    folder = cache_folder()
    if folder is None:
        return name, [], 0
    items = entries(found)
    parts = helpers(sum(float(e.get("seconds", 0.0)) for e in items)) if items else 0
    todo = [p for p in range(parts) if not (folder / f"{_stem(name, p, parts)}.done").exists()
            and not _running(folder, _stem(name, p, parts))]
    return name, todo, parts


_requests: dict = {"pipes": [], "next": 0}  # the device helpers' stdins, in the process that started them


def describe(folder) -> str:
    """gputext doctor's line on the helpers for the cache folder ``folder``."""
    if os.environ.get(ENV, "1") == "0":
        return "off (GPUTEXT_AHEAD=0): a first command compiles everything itself"
    done = sorted({p.name.split("-", 1)[1].rsplit("-", 1)[0] for p in Path(folder).glob("ahead-*.done")})
    known = sorted(p.stem for p in manifests().glob("*.json"))
    return (f"on: on an empty cache a command starts helpers that compile its manifest beside it "
            f"({len(known)} manifests); done here: {', '.join(done) or 'none'}")


def start(argv: list[str]) -> list[subprocess.Popen]:
    """Start the helpers ``argv`` needs (``needed``), detached: they outlive the command if it ends
    first, and print nothing. Part 0 of a device manifest keeps reading kernels to compile from its
    stdin (``submit``). Returns them (tests wait for them)."""
    name, todo, parts = needed(argv)
    if not todo:
        return []
    from .backend import simulator_enabled
    procs = []
    serves = name.endswith(".cuda") and not simulator_enabled()
    env = dict(os.environ, **{ENV: "0"}, GPUTEXT_DAEMON="0")
    for part in todo:
        piped = serves and part == 0
        try:
            procs.append(subprocess.Popen([sys.executable, "-m", "gputext.compile_ahead", name, str(part), str(parts)],
                                          env=env, stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        except OSError:  # no process to spare: the command compiles the rest itself, as before
            break
        if piped:
            _requests["pipes"].append(procs[-1].stdin)
    return procs


def submit(kernel, args) -> None:
    """Ask this process's device helper, if it has one (an empty cache), to compile ``kernel`` for
    the types of ``args`` (the arguments of its launch) while this process goes on; the launch
    then loads it, or waits for the helper's compile (kernels/jit.py). For a kernel made by a
    factory (kernels._factory.kernel_cache) or defined at module level; otherwise nothing."""
    pipes = _requests["pipes"]
    if not pipes:
        return
    pipe = pipes[_requests["next"] % len(pipes)]
    _requests["next"] += 1
    from .kernels.jit import request_line
    try:
        line = request_line(kernel, tuple(kernel.typeof_pyval(a) for a in args))
        if line is not None:
            pipe.write(line + b"\n")
            pipe.flush()
    except (OSError, ValueError):  # the helper has gone
        pipes.remove(pipe)
    except Exception:  # a kernel another process cannot make: this one compiles it
        pass


def _requested(line) -> tuple:
    """(dispatcher, argument types) of a request line (kernels.jit.request_line)."""
    import base64
    import importlib
    import pickle
    (module, name, args, kwargs, *position), argtypes = pickle.loads(base64.b64decode(line))
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    if args is not None:
        obj = obj(*args, **dict(kwargs))
    return (obj[position[0]] if position else obj), tuple(argtypes)


class _Helper:
    """Compiles requests into the kernel cache, starting the GPU's context before its first
    device request; counts what failed (each is then the command's to compile)."""

    def __init__(self, label: str):
        self.label = label
        self.trace = os.environ.get(TRACE)
        self.failed = 0
        self._cuda: bool | None = None

    def compile(self, line) -> None:
        t0, name = time.time(), "?"
        try:
            dispatcher, argtypes = _requested(line)
            name = dispatcher.py_func.__qualname__
            if type(dispatcher).__name__ == "CUDADispatcher":
                if self._cuda is None:
                    from .backend import cuda_status
                    self._cuda = cuda_status()[0]
                if not self._cuda:
                    raise RuntimeError("no GPU here")
            dispatcher.compile(argtypes)
        except Exception:  # an entry that does not compile here (another numba, no GPU): the command's own
            self.failed += 1
        if self.trace:
            with open(self.trace, "a") as f:
                f.write(f"helper-{self.label} {name} {t0:.3f} {time.time():.3f}\n")


def _feed(helper: _Helper, pending: bytes, chunk: bytes) -> bytes:
    """Compile each whole request line of ``pending + chunk``; returns the unfinished rest."""
    *lines, pending = (pending + chunk).split(b"\n")
    for line in filter(None, (x.strip() for x in lines)):
        helper.compile(line)
    return pending


def _ready(fd: int | None, timeout: float) -> bytes | None:
    """What ``fd`` has within ``timeout`` seconds: bytes, b"" at its end, None when nothing came."""
    import select
    if fd is None or not select.select([fd], [], [], timeout)[0]:
        return None
    return os.read(fd, 1 << 16)


def serve_requests(fd: int, idle_s: float = REQUEST_IDLE_S, helper: _Helper | None = None,
                   pending: bytes = b"") -> int:
    """Compile the requests (lines) on the file descriptor ``fd`` until its input ends or ``idle_s``
    pass without any; returns how many failed. Reads with select and os.read: no reader thread
    left blocked at exit."""
    helper = helper or _Helper("request")
    while True:
        chunk = _ready(fd, idle_s)
        if not chunk:
            break
        pending = _feed(helper, pending, chunk)
    return helper.failed


def run_part(name: str, part: int, parts: int, fd: int | None = None) -> int:
    """Compile part ``part`` of ``parts`` of manifest ``name`` (plan) into the kernel cache; with
    ``fd``, the requests that arrive on it first, then serve them until idle. Leaves the part's
    marker when every entry compiled. Returns how many failed."""
    found = manifest(name)
    if found is None:
        return 1
    items = entries(found)
    mine = plan(items, parts)[part] if 0 <= part < parts else []
    helper = _Helper(f"{name}-{part}")
    pending = b""
    for i in mine:
        chunk = _ready(fd, 0.0)
        if chunk == b"":
            fd = None
        elif chunk:
            pending = _feed(helper, pending, chunk)
        helper.compile(items[i]["request"].encode())
    from .kernels.jit import cache_folder
    folder = cache_folder()
    if folder is not None and not helper.failed:
        (folder / f"{_stem(name, part, parts)}.done").touch()
    if fd is not None:
        serve_requests(fd, helper=helper, pending=pending)
    return helper.failed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        name, part, parts = argv[0], int(argv[1]), int(argv[2])
    except (IndexError, ValueError):
        print("usage: python -m gputext.compile_ahead MANIFEST PART PARTS", file=sys.stderr)
        return 2
    from .kernels.jit import cache_folder
    folder = cache_folder()
    held = _hold(folder, _stem(name, part, parts)) if folder is not None else None
    if folder is not None and held is None:
        return 0  # another helper of this part is at work on this cache
    fd = None if sys.stdin is None or sys.stdin.isatty() else sys.stdin.fileno()
    return 1 if run_part(name, part, parts, fd) else 0


if __name__ == "__main__":
    sys.exit(main())
