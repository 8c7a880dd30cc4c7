"""What a command compiles: each kernel and CPU twin a ``gputext`` command compiles or loads from the
kernel cache, with the seconds each took, one command after another in one process (so a second
command shows what the first left compiled, and a corpus of a new size what its size adds).

    python -m benchmarks.compile_probe --out probe.json -- knn search --index a.h5 --queries a.h5 -k 30 \\
        --device cuda -q -o /tmp/x.h5 ';;' knn search --index b.h5 --queries b.h5 -k 30 --device cuda -q -o /tmp/y.h5

Commands are separated by ';;'. Each runs through ``gputext.cli.cli`` in this process (click's
standalone mode off); every ``compile`` of a numba dispatcher (CPU or CUDA) is timed and counted
as a cache hit (loaded) or a miss (compiled), from numba's own counters. Set GPUTEXT_CACHE_DIR to
an empty folder first for the empty-cache figure. The report lists, per command, its wall time,
the compiled and loaded entries and the ten slowest compiles.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import defaultdict


def _instrument(log: list) -> None:
    """Wrap the CPU and CUDA dispatchers' compile to append (target, name, seconds, hit) to ``log``."""
    from numba.core.dispatcher import Dispatcher
    targets = [("cpu", Dispatcher)]
    try:
        from numba.cuda.dispatcher import CUDADispatcher
        targets.append(("cuda", CUDADispatcher))
    except ImportError:
        pass
    for target, cls in targets:
        original = cls.compile

        def compile(self, sig, _original=original, _target=target):
            hits = getattr(self, "_cache_hits", None)
            misses = getattr(self, "_cache_misses", None)
            h0 = sum(hits.values()) if hits is not None else 0
            m0 = sum(misses.values()) if misses is not None else 0
            t0 = time.perf_counter()
            try:
                return _original(self, sig)
            finally:
                dt = time.perf_counter() - t0
                h1 = sum(hits.values()) if hits is not None else 0
                m1 = sum(misses.values()) if misses is not None else 0
                if h1 > h0 or m1 > m0:  # a compile that did something (not an in-memory overload)
                    name = getattr(self.py_func, "__qualname__", str(self.py_func))
                    log.append((_target, name, dt, h1 > h0))
        cls.compile = compile


def _instrument_phases(phases: dict) -> None:
    """Add the seconds of a CUDA compile's back-end steps to ``phases``: "nvvm" (NVVM: LLVM IR to
    PTX), "link" (the driver's linker: PTX to cubin, ptxas's work) and "module load" (cubin into
    the context). A kernel's compile minus these is numba's front end (typing and lowering)."""
    try:
        from numba.cuda.cudadrv import driver, nvvm
    except ImportError:
        return

    def timed(owner, attr, phase):
        original = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - t0
        setattr(owner, attr, wrapper)

    timed(nvvm, "compile_ir", "nvvm")
    timed(driver._Linker, "complete", "link")
    timed(driver.Context, "create_module_image", "module load")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compile_probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    words = a.command[1:] if a.command[:1] == ["--"] else a.command
    commands, current = [], []
    for w in words:
        if w == ";;":
            commands.append(current)
            current = []
        else:
            current.append(w)
    if current:
        commands.append(current)
    t_import = time.perf_counter()
    import click
    from gputext.cli import cli
    from gputext.kernels.jit import cache_folder
    t_import = time.perf_counter() - t_import
    log: list = []
    _instrument(log)
    phases: dict = {}
    _instrument_phases(phases)
    report = {"cache": str(cache_folder()), "import_s": round(t_import, 3), "commands": []}
    for args in commands:
        start = len(log)
        phases.clear()
        t0 = time.perf_counter()
        try:
            cli.main(args=args, prog_name="gputext", standalone_mode=False)
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except click.ClickException as exc:  # a user error: as the command line shows it, then the next command
            exc.show()
            rc = exc.exit_code
        except Exception as exc:  # a failure: reported, next command
            rc = 1
            print(f"{shlex.join(args)}: {type(exc).__name__}: {exc}", file=sys.stderr)
        wall = time.perf_counter() - t0
        mine = log[start:]
        by_kind = defaultdict(lambda: [0, 0.0])
        for target, _name, dt, hit in mine:
            slot = by_kind[f"{target} {'loaded' if hit else 'compiled'}"]
            slot[0] += 1
            slot[1] += dt
        row = {"command": shlex.join(args), "rc": rc, "wall_s": round(wall, 3),
               "entries": {k: {"count": n, "seconds": round(s, 3)} for k, (n, s) in sorted(by_kind.items())},
               "cuda_phases_s": {k: round(v, 3) for k, v in sorted(phases.items())},
               "slowest_compiles": [{"target": t, "name": n, "seconds": round(dt, 3)}
                                    for t, n, dt, hit in sorted(mine, key=lambda x: -x[2]) if not hit][:10]}
        report["commands"].append(row)
        print(json.dumps(row), flush=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
