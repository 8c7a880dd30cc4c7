"""`knn search` in fresh processes three ways, measured from outside: each command in its own
process (GPUTEXT_DAEMON=0), through the warm server forking a process for it (GPUTEXT_RESIDENT=0)
and through the warm server's resident (the default); on the GPU and on the CPU, the kernel
cache filled first. Every output is compared with the own-process one (the same neighbours and
scores). Prints one line per run and writes a JSON report.

    python -m benchmarks.server_modes --train train.h5 --test test.h5 --runs 5 --out modes.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import h5py
import numpy as np

from . import fresh, records
from .run import resolve_device

MODES = {"own": {"GPUTEXT_DAEMON": "0"}, "server-fork": {"GPUTEXT_DAEMON": "1", "GPUTEXT_RESIDENT": "0"},
         "server": {"GPUTEXT_DAEMON": "1"}}
GPUTEXT = [sys.executable, "-m", "gputext"]


def same(a: str, b: str) -> bool:
    with h5py.File(a) as x, h5py.File(b) as y:
        return all(np.array_equal(x[n][()], y[n][()]) for n in ("obsm/knn_indices", "obsm/knn_scores"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.server_modes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--devices", default="cuda,cpu")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between commands")
    p.add_argument("--work", help="folder for the outputs (default: a temporary one)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    report = {"date": records.utc_now(), "commit": records.git_commit(), "device": resolve_device("auto")[1],
              "cpu": records.cpu_device(), "runs": a.runs, "results": []}
    import tempfile
    work = a.work or tempfile.mkdtemp(prefix="server-modes-")
    os.makedirs(work, exist_ok=True)
    for device in a.devices.split(","):
        ref = os.path.join(work, f"ref_{device}.h5")
        args = ["knn", "search", "--index", a.train, "--queries", a.test, "-k", "30", "--device", device, "-q"]
        fresh.run_once([*GPUTEXT, *args, "-o", ref], dict(os.environ, **MODES["own"]))  # fills the kernel cache
        for mode, extra in MODES.items():
            env = dict(os.environ, **extra)
            if mode != "own":
                fresh.run_once([*GPUTEXT, "daemon", "start"], env)
                time.sleep(a.pause)
            walls, identical = [], True
            out = os.path.join(work, f"out_{device}_{mode.replace('+', '_')}.h5")
            for i in range(a.runs + 1):
                r = fresh.run_once([*GPUTEXT, *args, "-o", out], env)
                if r.rc != 0:
                    raise SystemExit(f"{mode} {device}: exit {r.rc}: {r.stderr.strip()[-400:]}")
                identical = identical and same(out, ref)
                if i:  # the first is a warm-up of the mode (the server's first child)
                    walls.append(r.wall)
                print(f"{device} {mode} run {i}: {r.wall:.3f} s", flush=True)
                time.sleep(a.pause)
            if mode != "own":
                fresh.run_once([*GPUTEXT, "daemon", "stop"], env)
            row = {"device_option": device, "mode": mode, "median_s": round(statistics.median(walls), 4),
                   "runs_s": [round(w, 4) for w in walls], "identical_to_own_process": identical,
                   "command": " ".join(GPUTEXT + args + ["-o", out])}
            report["results"].append(row)
            print(json.dumps(row), flush=True)
            with open(a.out, "w") as f:
                json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
