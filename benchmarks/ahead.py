"""Record the compile manifests of gputext.compile_ahead: each documented command (the registry's
command-line families) run once on an empty kernel cache with GPUTEXT_AHEAD_RECORD set, on the
synthetic corpora of benchmarks.datagen (not on the data the commands are measured on), and what
it compiled written to ``gputext/data/ahead/<family>.<device>.json`` in the order it first needed
each function.

    python -m benchmarks.ahead --devices cuda,cpu [--out gputext/data/ahead] [--work /tmp/ahead]

On the GPU host (a cuda manifest needs a GPU); prints each command's wall time and what it compiled.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import datagen
from .registry import _CLI

ROOT = Path(__file__).resolve().parents[1]
# family -> the datasets it is recorded on, merged in this order; the others read synth-20ng. rank
# train's synthetic set has dense features (dense_matvec) and the LETOR sample sparse ones
# (csr_matvec): both, the sample where the real datasets are present
DATA = {"rank-train": ("synth-ltr", "letor-sample")}


def datasets_of(family: str) -> tuple[str, ...]:
    return DATA.get(family, ("synth-20ng",))


def run_recorded(argv: list[str], cache: str, log: Path, before: list[str] | None = None,
                 **env_extra: str) -> tuple[float, list[dict]]:
    """Run ``argv`` (after ``before``, e.g. a helper) on the kernel cache ``cache`` with every compile
    recorded to ``log``; (its wall seconds, the compiles in order of start)."""
    log.unlink(missing_ok=True)
    env = dict(os.environ, GPUTEXT_CACHE_DIR=cache, GPUTEXT_AHEAD="0", GPUTEXT_DAEMON="0", **env_extra)
    if before:
        subprocess.run(before, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=900)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=dict(env, GPUTEXT_AHEAD_RECORD=str(log)), capture_output=True, text=True,
                          timeout=900)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed: {done.stderr[-800:]}")
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
    return wall, sorted(lines, key=lambda e: e["start"])


def command(family: str, device: str, files: dict, work: Path) -> list[str]:
    args, *_ = _CLI[family]
    out = work / "runs" / f"{family}.{device}"
    out.mkdir(parents=True, exist_ok=True)
    argv = [a.format(out=str(out), **{k: str(v) for k, v in files.items()}) for a in args]
    return [sys.executable, "-m", "gputext", *argv, "--device", device, "-q"]


def record(family: str, device: str, data: dict, work: Path) -> dict:
    """Run ``family``'s command on ``device`` in a fresh process on an empty cache, once for each
    dataset of ``data`` ({name: files}); its manifest: the first run's compiles in order, then each
    later run's that the runs before did not make (the same function and argument types)."""
    args, *_ = _CLI[family]
    entries, seen, walls = [], set(), []
    for files in data.values():
        with tempfile.TemporaryDirectory(dir=work) as cache:
            wall, lines = run_recorded(command(family, device, files, work), cache, work / f"{family}.{device}.jsonl")
        walls.append(round(wall, 2))
        for e in lines:
            del e["start"]
            key = (e["target"], e["name"], e["request"])
            if key not in seen:
                seen.add(key)
                entries.append(e)
    return {"recorded": {"command": shlex.join(["gputext", *args, "--device", device, "-q"]), "dataset": " + ".join(data),
                         "device": device_name(device), "date": datetime.datetime.now(datetime.timezone.utc)
                         .strftime("%Y-%m-%d %H:%M UTC"), "commit": os.environ.get("GPUTEXT_BENCH_COMMIT") or commit(),
                         "wall_s": walls[0] if len(walls) == 1 else walls},
            "entries": entries}


def check(family: str, device: str, files: dict, work: Path, folder: Path) -> tuple[float, list[dict]]:
    """The manifest's helper, all of it in one part, on an empty cache, then the command: (its wall
    seconds, what it still compiled). Nothing, when every key the helper made is the command's."""
    with tempfile.TemporaryDirectory(dir=work) as cache:
        helper = [sys.executable, "-c", "import sys; from gputext.compile_ahead import run_part; "
                  "sys.exit(run_part(sys.argv[1], 0, 1))", f"{family}.{device}"]
        return run_recorded(command(family, device, files, work), cache, work / f"{family}.{device}.check.jsonl",
                            before=helper, GPUTEXT_AHEAD_MANIFESTS=str(folder))


def device_name(device: str) -> str:
    if device == "cpu":
        from .records import cpu_device
        return cpu_device()
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.splitlines()
        return name[0].strip() if name else "cuda"
    except (OSError, subprocess.SubprocessError):
        return "cuda"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=30).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="cuda,cpu")
    p.add_argument("--families", default=",".join(_CLI))
    p.add_argument("--out", default=str(ROOT / "gputext" / "data" / "ahead"))
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "gputext-ahead"))
    p.add_argument("--datasets", help="the real datasets' folder (default .data, $GPUTEXT_DATASETS, ../shared/datasets)")
    p.add_argument("--check", action="store_true", help="then run each manifest's helper on an empty cache and the "
                   "command after it: what does the command still compile?")
    a = p.parse_args(argv)
    work, out = Path(a.work), Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    for family in a.families.split(","):
        made = {name: datagen.make(name, work / "data", datasets=a.datasets) for name in datasets_of(family)}
        data = {name: files for name, files in made.items() if files}  # a real dataset that is absent: left out
        files = next(iter(data.values()))
        for device in a.devices.split(","):
            found = record(family, device, data, work)
            (out / f"{family}.{device}.json").write_text(json.dumps(found, indent=1) + "\n")
            secs = sum(e["seconds"] for e in found["entries"])
            named = sum(1 for e in found["entries"] if e["request"])
            print(f"{family}.{device}: {found['recorded']['wall_s']} s, {len(found['entries'])} compiles "
                  f"({named} named) {secs:.1f} s", flush=True)
            if a.check:
                wall, left = check(family, device, files, work, out)
                print(f"  after its helper: {wall:.2f} s, {len(left)} compiles "
                      f"{sorted(e['name'] for e in left)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
