"""The benchmark runner: measure a suite of registry entries and append one record per measurement.

    python -m benchmarks.run --suite readme --device cuda --records $OUT/records.jsonl   # the README's figures
    python -m benchmarks.run --suite smoke --device cpu --scale 0.02                   # tiny, CPU (CI)
    python -m benchmarks.run --suite papers --out out/papers                           # the paper tables
    python -m benchmarks.run --list                                                    # every entry

For each entry of the suite that runs on this device (benchmarks/registry.py): its dataset is made
once (benchmarks/datagen.py); a command-line entry is timed in fresh processes, cold then warm
(benchmarks/fresh.py), and its library call in process (benchmarks/library.py); a script entry
runs its family script once and reads the figures from its JSON (benchmarks/adapters.py). Entries
for another device are skipped with one line each; one that fails is reported and the others run.
``--budget`` stops starting new work after that many seconds. Afterwards
``python -m benchmarks.render`` rewrites the README's and docs' tables from the records.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from . import datagen, fresh, library, records
from .adapters import ADAPTERS
from .registry import ENTRIES, SCRIPTS, entries, scripts

ROOT = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    """One progress line on stderr, time-stamped."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def resolve_device(asked: str) -> tuple[str, str]:
    """("cpu" or "cuda", the device's name for the records): auto takes a real GPU when there is one."""
    from gputext.backend import resolve
    backend = resolve(asked)
    if backend.is_cuda and not backend.simulator:
        from numba import cuda
        name = cuda.get_current_device().name
        return "cuda", name.decode() if isinstance(name, bytes) else str(name)
    return "cpu", records.cpu_device()


def stages_of(path: Path) -> dict | None:
    """{stage: seconds} a command wrote about itself into its output file's /uns/gputext (keys
    naming seconds), or None when it wrote none."""
    if path.suffix != ".h5" or not path.exists():
        return None
    from gputext.io import read_corpus
    try:
        params = read_corpus(str(path), validate=False, require_docs=False).params
    except Exception:  # noqa: BLE001 - a breakdown is optional
        return None
    out = {}

    def walk(d, prefix):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            elif "seconds" in k and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[prefix + k] = float(v)
    walk(params, "")
    return out or None


class Round:
    """One run of the runner: the device, the work folder, the records made and the budget left."""

    def __init__(self, args):
        self.args = args
        self.device, self.device_name = resolve_device(args.device)
        self.work = Path(args.out)
        self.work.mkdir(parents=True, exist_ok=True)
        self.path = Path(args.records or records.RECORDS_DIR / f"{args.suite}-{records.utc_now()[:10]}.jsonl")
        self.made: list[dict] = []
        self.failed: list[str] = []
        self.t0 = time.perf_counter()
        self.reports: dict = {}

    def left(self) -> float:
        return self.args.budget - (time.perf_counter() - self.t0) if self.args.budget else float("inf")

    def files(self, dataset: str) -> dict | None:
        if dataset == "none":
            return {}
        return datagen.make(dataset, self.work / "data", self.args.scale, self.args.datasets)

    def add(self, entry, measure, seconds, command, device=None, **fields):
        rec = records.record(entry, measure, seconds, device or self.device_name, command, **fields)
        records.append(self.path, [rec])  # at once: a round cut off by its time limit keeps what it measured
        self.made.append(rec)
        log(f"  {entry.name} {measure}: {seconds:.4g} s")

    def cli(self, entry, files):
        device = entry.device_arg or self.device
        out = self.work / "runs" / entry.name.replace("/", "_")
        out.mkdir(parents=True, exist_ok=True)
        fill = {"out": str(out), "device": device, **{k: str(v) for k, v in files.items()}}
        args = [a.format(**fill) for a in entry.cli]
        if entry.family != "startup":
            args += ["--device", device, "-q"]
        argv = [sys.executable, "-m", "gputext", *args]
        profile = {}
        then = (lambda env: profile.update(self.profiled(entry, args, env, out))) if self.args.breakdown else None
        timing = fresh.cold_and_warm(argv, self.args.repeats, timeout=max(30.0, min(600.0, self.left())), then=then,
                                     server=argv[:3])
        output = next((Path(a) for a in args if a.endswith(".h5") and a.startswith(str(out))), None)
        stages = {**((stages_of(output) if output else None) or {}), **profile} or None
        dev = self.device_name if device == self.device else f"{records.cpu_device()} (host of the {self.device_name})"
        params = {"repeats": self.args.repeats, "scale": self.args.scale, "device_option": device,
                  "load1": round(os.getloadavg()[0], 2)}
        self.add(entry, "cli-cold", timing.cold.wall, shlex.join(argv), dev, cpu_seconds=timing.cold.cpu,
                 params={**params, "cache": "empty",
                         "compile_ahead": "off (GPUTEXT_AHEAD=0)" if os.environ.get("GPUTEXT_AHEAD") == "0" else "on"})
        self.add(entry, "cli-warm-own", timing.warm, shlex.join(argv), dev, cpu_seconds=timing.warm_cpu,
                 runs=[r.wall for r in timing.own_runs], stages=stages,
                 params={**params, "cache": "filled by the cold run", "env": "GPUTEXT_DAEMON=0"})
        if timing.server is not None:
            self.add(entry, "cli-warm", timing.server, shlex.join(argv), dev, runs=[r.wall for r in timing.server_runs],
                     params={**params, "cache": "filled by the cold run", "server": "warm server, started first",
                             "resident": True})

    def profiled(self, entry, args, env, out) -> dict:
        """{"profile.<category>": seconds} of one more warm run under cProfile (benchmarks/breakdown.py:
        imports, CUDA context, compiling, cache loads, HDF5 reads, ...); {} when it fails."""
        name = entry.name.replace("/", "_")
        res = subprocess.run([sys.executable, "-m", "benchmarks.breakdown", "--out", str(out), "--name", name, "--",
                              *args], capture_output=True, text=True, env=env, cwd=str(ROOT))
        report = out / f"breakdown_{name}.json"
        if res.returncode != 0 or not report.exists():
            log(f"  {entry.name}: no profile breakdown ({res.stderr.strip()[-200:]})")
            return {}
        cats = json.loads(report.read_text()).get("categories", {})
        return {f"profile.{k}": float(v) for k, v in cats.items()}

    def imports(self, entry):
        """The "import" record: fresh processes that import the command's library module and exit
        (the part of a command's wall time spent before any work), the median of --repeats."""
        argv = [sys.executable, "-c", f"import {entry.imports}"]
        runs = [fresh.run_once(argv, timeout=120) for _ in range(max(1, self.args.repeats))]
        if any(r.rc for r in runs):
            raise RuntimeError(f"{shlex.join(argv)} failed: {runs[0].stderr.strip()[-400:]}")
        walls = sorted(r.wall for r in runs)
        self.add(entry, "import", walls[len(walls) // 2], shlex.join(argv),
                 cpu_seconds=sorted(r.cpu for r in runs)[len(runs) // 2], runs=walls)

    def snippet(self, entry, files):
        argv = [sys.executable, "-c", entry.snippet, str(files["train"]), str(files["test"]), self.device]
        timing = fresh.cold_and_warm(argv, self.args.repeats, timeout=max(30.0, min(600.0, self.left())),
                                     server=[sys.executable, "-m", "gputext"])
        params = {"repeats": self.args.repeats, "scale": self.args.scale, "load1": round(os.getloadavg()[0], 2)}
        self.add(entry, "library-cold", timing.cold.wall, shlex.join(argv), cpu_seconds=timing.cold.cpu,
                 params={**params, "cache": "empty"})
        self.add(entry, "library-warm", timing.warm, shlex.join(argv), cpu_seconds=timing.warm_cpu,
                 runs=[r.wall for r in timing.own_runs], params={**params, "cache": "filled by the cold run",
                                                                 "env": "GPUTEXT_DAEMON=0"})
        if timing.server is not None:
            self.add(entry, "library-server", timing.server, shlex.join(argv), runs=[r.wall for r in timing.server_runs],
                     params={**params, "cache": "filled by the cold run", "server": "warm server, started first"})

    def in_process(self, entry, files):
        device = "cpu" if entry.peer == "cpu-twin" else self.device
        seconds, runs = library.CALLS[entry.library](files, device, self.args.repeats)
        note = f"in process: benchmarks/library.py {entry.library}, device {device}, warm, median of {len(runs)}"
        command = shlex.join(["python", "-m", "benchmarks.run", "--suite", self.args.suite, "--only", entry.name,
                              "--device", self.args.device, "--scale", f"{self.args.scale:g}", "--repeats",
                              str(self.args.repeats)])
        self.add(entry, "kernel", seconds, command, command_note=note, runs=runs,
                 params={"scale": self.args.scale, "device_option": device})

    def script(self, entry):
        spec = SCRIPTS[entry.script]
        if spec.name not in self.reports:
            if self.left() < spec.seconds:
                log(f"skipped {entry.name}: {spec.path} takes about {spec.seconds} s, {self.left():.0f} s of the budget left")
                return
            try:
                self.reports[spec.name] = self.run_script(spec)
            except Exception as exc:  # noqa: BLE001 - kept: the script's other entries fail with it, not run it again
                self.reports[spec.name] = exc
        if isinstance(self.reports[spec.name], Exception):
            raise self.reports[spec.name]
        report, command = self.reports[spec.name]
        figure = ADAPTERS[spec.adapter](report).get(entry.name)
        if figure is None:
            raise RuntimeError(f"{spec.path}'s report has no figure for {entry.name}")
        self.add(entry, "kernel", figure["seconds"], command, figure.get("device") or self.device_name,
                 runs=figure.get("runs"), params=figure.get("params"))

    def run_script(self, spec, extra: tuple = ()):
        out = self.work / "scripts" / spec.name
        out.mkdir(parents=True, exist_ok=True)
        data = str(datagen.real_datasets(self.args.datasets) or "")
        if spec.needs_data and not data:
            raise RuntimeError("the real datasets are not here")
        argv = [sys.executable, str(ROOT / "scripts" / spec.path),
                *[a.format(out=str(out), datasets=data, device=self.device) for a in spec.args], *extra]
        log(f"  running {' '.join(argv[1:])}")
        limit = max(2.0 * spec.seconds, self.left()) if self.args.budget else None
        res = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
        (out / "log.txt").write_text(res.stdout + res.stderr)
        report = out / spec.report
        if res.returncode != 0 or not report.exists():
            raise RuntimeError(f"{spec.path} exited with {res.returncode}: {res.stderr.strip()[-400:]}")
        return json.loads(report.read_text()), shlex.join(argv)

    def measure(self, entry):
        if entry.script:
            return self.script(entry)
        files = self.files(entry.dataset)
        if files is None:
            log(f"skipped {entry.name}: dataset {entry.dataset} cannot be made here (no real data)")
            return
        if entry.cli:
            self.cli(entry, files)
        if entry.imports:
            self.imports(entry)
        if entry.snippet:
            self.snippet(entry, files)
        if entry.library:
            self.in_process(entry, files)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="readme", help="readme, cli, full, papers or smoke (benchmarks/registry.py)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--records", help="the .jsonl file the new records are appended to (default "
                                     "benchmarks/records/<suite>-<date>.jsonl)")
    p.add_argument("--out", default=os.environ.get("OUT", "out") + "/bench", help="work folder (corpora, outputs, script reports)")
    p.add_argument("--datasets", help="the real datasets' folder (default .data, $GPUTEXT_DATASETS, ../shared/datasets)")
    p.add_argument("--repeats", type=int, default=3, help="warm fresh processes and in-process calls per entry")
    p.add_argument("--scale", type=float, default=1.0, help="synthetic corpora's size factor (1 = 20 Newsgroups' shape)")
    p.add_argument("--budget", type=float, default=0, help="seconds after which no new entry starts (0: no limit)")
    p.add_argument("--only", default="", help="comma list: run only entries whose name contains one of these")
    p.add_argument("--breakdown", action="store_true", help="one more warm run of each command under cProfile "
                                                            "(benchmarks/breakdown.py): its parts go to the record's stages")
    p.add_argument("--resume", action="store_true", help="skip the entries that already have records in --records "
                                                         "(a second call finishes a suite the first one's budget cut)")
    p.add_argument("--list", action="store_true", help="list the registry and exit")
    p.add_argument("--script", help="run one registered family script by name (--list shows them), its output in "
                                    "--out/scripts/NAME")
    p.add_argument("--args", default="", help="with --script: more arguments for the script (one shell-quoted string)")
    a = p.parse_args(argv)
    if a.script:
        if a.script not in SCRIPTS:
            p.error(f"no script {a.script!r}: {', '.join(sorted(SCRIPTS))}")
        rnd = Round(a)
        rnd.run_script(SCRIPTS[a.script], tuple(shlex.split(a.args)))
        log(f"{SCRIPTS[a.script].path}: output in {rnd.work / 'scripts' / a.script}")
        return 0
    if a.list:
        for e in ENTRIES:
            how = "script " + e.script if e.script else ", ".join(x for x in ("cli" if e.cli else "", "library" if e.library
                                                                               else "", "snippet" if e.snippet else "") if x)
            print(f"{e.name:45s} {'/'.join(e.devices):9s} {','.join(e.suites):28s} {how}")
        for spec in SCRIPTS.values():
            print(f"script {spec.name:38s} {'/'.join(spec.devices):9s} {','.join(spec.suites):28s} scripts/{spec.path} "
                  + " ".join(spec.args))
        return 0
    # the runner's own commands (datagen's corpus builds) run in their own processes: a timed
    # command chooses its mode itself (benchmarks/fresh.py), and no server is left running
    os.environ["GPUTEXT_DAEMON"] = "0"
    # the runner's own library calls compile into a cache folder of the round (fresh processes get their own)
    for var in ("GPUTEXT_CACHE_DIR", "NUMBA_CACHE_DIR"):
        os.environ.setdefault(var, str(Path(a.out) / "cache"))
    rnd = Round(a)
    chosen, other = entries(a.suite, rnd.device)
    if a.resume and rnd.path.exists():
        done = {r["entry"] for r in records.load_file(rnd.path)}
        chosen = [e for e in chosen if e.name not in done]
    wanted = [w for w in a.only.split(",") if w]
    chosen, other = ([e for e in group if not wanted or any(w in e.name for w in wanted)] for group in (chosen, other))
    for e in other:
        log(f"skipped {e.name}: runs on {' or '.join(e.devices)}, this machine is {rnd.device}")
    log(f"suite {a.suite} on {rnd.device_name}: {len(chosen)} entries")
    for e in chosen:
        if rnd.left() <= 0:
            log(f"skipped {e.name}: over the budget of {a.budget:g} s")
            continue
        log(e.name)
        try:
            rnd.measure(e)
        except Exception as exc:  # noqa: BLE001 - one failed entry is reported, the others run
            rnd.failed.append(e.name)
            log(f"FAILED {e.name}: {type(exc).__name__}: {str(exc).strip()[:600]}")
    for spec in scripts(a.suite, rnd.device):
        try:
            rnd.run_script(spec)
        except Exception as exc:  # noqa: BLE001
            rnd.failed.append(spec.name)
            log(f"FAILED {spec.name}: {exc}")
    if rnd.made:
        log(f"{len(rnd.made)} records appended to {rnd.path}")
    if rnd.failed:
        log(f"failed: {', '.join(rnd.failed)}")
    return 1 if rnd.failed else 0


if __name__ == "__main__":
    sys.exit(main())
