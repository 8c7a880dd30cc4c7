#!/usr/bin/env python3
"""Start-up cost of small gputext commands: wall time and CPU time (user + sys) of fresh processes.

    python scripts/startup_times.py --letor train.h5 --runs 5 --out out/startup

Commands (each --runs times, medians reported): ``gputext --help``, ``gputext corpus info FILE``
(--info, default the --letor file) and ``gputext rank train LETOR -o model.h5`` with a warm numba
cache (one untimed run first). On a shared machine the CPU time is the figure that load disturbs
least; the load average is recorded with each run. ``--gputext`` runs another installation (a
command line, e.g. "python -m gputext" under another PYTHONPATH) for a before/after comparison.
Writes startup.json and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s = user + sys of the child) of one run; raises if the command fails."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--letor", required=True, help="a ranking corpus (corpus build rank.train --query-groups ...)")
    p.add_argument("--info", help="the file for corpus info (default: --letor)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--gputext", default=f"{sys.executable} -m gputext", help="how to run gputext")
    p.add_argument("--out", default="out/startup")
    a = p.parse_args()
    base = shlex.split(a.gputext)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = str(Path(tmp) / "model.h5")
        commands = {"help": base + ["--help"], "corpus info": base + ["corpus", "info", a.info or a.letor],
                    "rank train": base + ["rank", "train", a.letor, "-o", model, "-q"]}
        timed(commands["rank train"])  # warm the numba cache
        rows = {}
        for name, cmd in commands.items():
            runs = []
            for _ in range(a.runs):
                wall, cpu = timed(cmd)
                runs.append({"wall_s": wall, "cpu_s": cpu, "load1": os.getloadavg()[0]})
            rows[name] = {"wall_s_median": statistics.median(r["wall_s"] for r in runs),
                          "cpu_s_median": statistics.median(r["cpu_s"] for r in runs), "runs": runs}
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
              "gputext": a.gputext, "commands": rows}
    (out / "startup.json").write_text(json.dumps(report, indent=1))
    print("| command | wall s (median) | CPU s (median) | load average |\n| --- | --- | --- | --- |")
    for name, r in rows.items():
        loads = [x["load1"] for x in r["runs"]]
        print(f"| {name} | {r['wall_s_median']:.2f} | {r['cpu_s_median']:.2f} | {min(loads):.1f}-{max(loads):.1f} |")


if __name__ == "__main__":
    main()
