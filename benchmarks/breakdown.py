"""Where a fresh process's wall time goes: one gputext command run under cProfile, its time split
into imports, the CUDA context, compiling, loading compiled code from the kernel cache, reading
and writing HDF5, and the rest (the work itself), printed and written as JSON.

    python -m benchmarks.breakdown --out out/breakdown -- knn search --index train.h5 --queries test.h5 -k 30 -o nn.h5
    python -m benchmarks.breakdown --server ...     # the command through the warm server (its forked
                                                    # process profiles itself: GPUTEXT_PROFILE)

The profiler slows Python-heavy parts (imports by roughly a third), so the parts are for finding
what to cut; the figures to publish are the wall times measured outside the process
(benchmarks/fresh.py). A category's time is the cumulative time of the functions it matches;
categories can overlap (an import made while reading a file counts in both).
"""
from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import subprocess
import sys
import tempfile
import time

# category -> a regular expression over "file:line(function)"; a category's time is the cumulative
# time of the functions it matches (cProfile counts a recursive function's outermost call only)
CATEGORIES = {
    "imports": r"<frozen importlib._bootstrap>:\d+\(_find_and_load\)",
    "cuda context": r"cudadrv/devices.py:\d+\(get_or_create_context\)",
    "compile": r"dispatcher.py:\d+\(_compile_core\)",
    "cache load": r"caching.py:\d+\(load_overload\)",
    "cache save": r"caching.py:\d+\(save_overload\)",
    "module load (cubin)": r"codegen.py:\d+\(get_cufunc\)",
    "hdf5 read": r"gputext/io/corpus.py:\d+\(read_corpus\)",
    "index load": r"gputext/engine/index.py:\d+\(load\)",
    "device sync": r"\((synchronize|cuStreamSynchronize|cuCtxSynchronize)\)",
    "copy to host": r"devicearray.py:\d+\(copy_to_host\)",
}


def categorise(stats: pstats.Stats) -> dict:
    """{category: seconds}: the summed cumulative time of the functions each category matches."""
    out = {}
    for cat, pattern in CATEGORIES.items():
        rx = re.compile(pattern)
        out[cat] = round(sum(v[3] for k, v in stats.stats.items() if rx.search(f"{k[0]}:{k[1]}({k[2]})")), 4)
    return out


def top(stats: pstats.Stats, n: int = 30) -> list:
    rows = [(v[3], f"{k[0]}:{k[1]}({k[2]})") for k, v in stats.stats.items()]
    rows.sort(reverse=True)
    return [(round(t, 4), name) for t, name in rows[:n]]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out/breakdown", help="folder for the JSON and the profile")
    ap.add_argument("--name", default="", help="name of the JSON file (default: from the command)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--keep-profile", action="store_true", help="also write the cProfile file (.prof) to --out")
    ap.add_argument("--server", action="store_true", help="run the command through the warm server (started "
                                                         "first) and profile its forked process")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the arguments after `gputext`")
    a = ap.parse_args(argv)
    args = a.command[1:] if a.command[:1] == ["--"] else a.command
    os.makedirs(a.out, exist_ok=True)
    name = a.name or re.sub(r"[^A-Za-z0-9]+", "_", " ".join(args[:2]))[:40]
    with tempfile.TemporaryDirectory() as tmp:
        prof = os.path.join(tmp, "prof")
        if a.server:
            env = dict(os.environ, GPUTEXT_DAEMON="1")
            subprocess.call([sys.executable, "-m", "gputext", "daemon", "start"], env=env)
            t0 = time.perf_counter()
            rc = subprocess.call([sys.executable, "-m", "gputext", *args], env=dict(env, GPUTEXT_PROFILE=prof))
        else:
            t0 = time.perf_counter()
            rc = subprocess.call([sys.executable, "-m", "cProfile", "-o", prof, "-m", "gputext", *args])
        wall = time.perf_counter() - t0
        stats = pstats.Stats(prof)
        report = {"command": "gputext " + " ".join(args), "rc": rc, "server": a.server, "wall_s_profiled": round(wall, 3),
                  "profiled_total_s": round(stats.total_tt, 3), "categories": categorise(stats),
                  "top_cumulative": top(stats, a.top)}
        if a.keep_profile:
            import shutil
            shutil.copy(prof, os.path.join(a.out, f"breakdown_{name}.prof"))
    with open(os.path.join(a.out, f"breakdown_{name}.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"== {report['command']}  (rc {rc}, {wall:.2f} s under the profiler)")
    for cat, s in report["categories"].items():
        print(f"  {cat:<22} {s:7.3f} s")
    for t, fn in report["top_cumulative"]:
        print(f"    {t:7.3f}  {fn}")


if __name__ == "__main__":
    main()
