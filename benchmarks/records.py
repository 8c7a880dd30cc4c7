"""Benchmark records: one JSON object per measurement, one line each, in benchmarks/records/*.jsonl.

Every figure the README and docs/ show is rendered from these records (benchmarks/render.py);
the runner (benchmarks/run.py) appends new ones. A record's fields:

    schema     1 (this layout)
    entry      the registry entry that measured it (benchmarks/registry.py), e.g. "knn-search/20ng/gputext"
    family     "knn search", "knn classify svm", "knn classify vote", "star", "stream", "rank", "startup", ...
    dataset    "20ng", "letor-sample", "synth-20ng", "knn-1e6", "reu-70k", ... (benchmarks/datagen.py)
    peer       "gputext" for our code; else the library measured ("cupy-spmm", "sklearn-brute", "cpu-twin", ...)
    measure    what the seconds are:
                 "kernel"       in process, warm (compiled), the library call alone, median of `runs`
                 "cli-cold"     a fresh process of the CLI command with an empty kernel cache
                                (GPUTEXT_CACHE_DIR and NUMBA_CACHE_DIR set to a new empty folder)
                 "cli-warm"     the median of fresh processes after one run that filled that cache: through
                                the warm server (gputext.daemon, params.server) in records from
                                2026-11-27 19:00 on, each in its own process before (no server then)
                 "cli-warm-own" the same, each command in its own process (GPUTEXT_DAEMON=0)
                 "library-cold" / "library-warm"   a fresh Python process running a library call,
                                imports included, with an empty / filled cache (GPUTEXT_DAEMON=0)
                 "library-server"  the same with a filled cache, answered by the warm server
                                (gputext.daemon.library; the server started first, params.server)
                 "import"       a fresh process that imports the command's modules and exits
                 "in-process"   a script's own timing of a library call in one Python process, not known
                                to be warm (the first call of a process may include compiling): the
                                figures of older studies (their `source` says which script and report)
    seconds    the figure (median where there are several runs); wall time
    cpu_seconds  user + sys CPU time of the child process (os.wait4), fresh-process measures only
    runs       every timing behind `seconds` (optional)
    stages     {stage: seconds} a fresh process reported about itself, where it can (optional)
    workload   one line saying what was computed (sizes, k, metric, ...)
    device     where it ran: the GPU's name ("NVIDIA H100 80GB HBM3"), or "CPU, <n> cores" / "CPU, 2-core VM"
    date       UTC, ISO 8601 ("2026-11-27T12:12:00Z"; a date alone where only the day is known)
    commit     the git commit measured, or null when unknown
    command    the exact command line (a shell string), or null: then `command_note` says why
    command_note  only where `command` is null or approximate
    source     where the figure came from when it was not measured by the runner (a JSON file of an
               older script at a named commit, a RESULTS.md section)
    params     anything else (k, repeats, threads, cache folder state, ...)

A record is never edited after it is written: a new measurement is a new line, and the renderer
shows the newest record of each (entry, measure) on the device class a table asks for.
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
from pathlib import Path

SCHEMA = 1
ROOT = Path(__file__).resolve().parents[1]
RECORDS_DIR = ROOT / "benchmarks" / "records"
MEASURES = ("kernel", "cli-cold", "cli-warm", "cli-warm-own", "library-cold", "library-warm", "library-server", "import",
            "in-process")
REQUIRED = ("schema", "entry", "family", "dataset", "peer", "measure", "seconds", "workload", "device", "date",
            "commit", "command")


def utc_now() -> str:
    """The current time, UTC, to the second (ISO 8601 with Z)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_commit() -> str | None:
    """The checkout's commit (12 hex digits): $GPUTEXT_BENCH_COMMIT where set (the GPU host's copy of
    the checkout has no .git: pass it along), else git's, else None."""
    if os.environ.get("GPUTEXT_BENCH_COMMIT"):
        return os.environ["GPUTEXT_BENCH_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def cpu_device() -> str:
    """The name a CPU run records as its device: "CPU, <n> cores" ($GPUTEXT_BENCH_DEVICE overrides,
    e.g. "CPU, 2-core VM")."""
    return os.environ.get("GPUTEXT_BENCH_DEVICE") or f"CPU, {os.cpu_count()} cores"


def record(entry, measure: str, seconds: float, device: str, command: str | None, **fields) -> dict:
    """A new record of ``entry`` (a registry Entry) measured now at this commit; ``fields`` adds the
    optional ones (cpu_seconds, runs, stages, params, command_note, source)."""
    rec = {"schema": SCHEMA, "entry": entry.name, "family": entry.family, "dataset": entry.dataset,
           "peer": entry.peer, "measure": measure, "seconds": float(seconds), "workload": entry.workload,
           "device": device, "date": utc_now(), "commit": git_commit(), "command": command}
    rec.update({k: v for k, v in fields.items() if v is not None})
    check(rec)
    return rec


def check(rec: dict) -> None:
    """Raise ValueError naming the first problem of a record (missing field, unknown measure, a
    null command without a note, a non-positive time)."""
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        raise ValueError(f"record {rec.get('entry')!r}: missing {', '.join(missing)}")
    if rec["schema"] != SCHEMA:
        raise ValueError(f"record {rec['entry']!r}: schema {rec['schema']!r}, expected {SCHEMA}")
    if rec["measure"] not in MEASURES:
        raise ValueError(f"record {rec['entry']!r}: measure {rec['measure']!r}, expected one of {', '.join(MEASURES)}")
    if rec["command"] is None and not rec.get("command_note"):
        raise ValueError(f"record {rec['entry']!r}: no command and no command_note saying why")
    if not rec["seconds"] > 0:
        raise ValueError(f"record {rec['entry']!r}: seconds = {rec['seconds']!r}, expected > 0")


def append(path: Path, records: list[dict]) -> Path:
    """Append records to a .jsonl file (created with its folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        for rec in records:
            check(rec)
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
    return path


def load_file(path: Path) -> list[dict]:
    """The records of one .jsonl file, checked (an error names the file and line)."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            rec = json.loads(line)
            try:
                check(rec)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: {exc}") from None
            out.append(rec)
    return out


def load(folder: Path = RECORDS_DIR) -> list[dict]:
    """Every record of every .jsonl file under ``folder``, in file then line order."""
    return [rec for path in sorted(Path(folder).rglob("*.jsonl")) for rec in load_file(path)]


def is_gpu(rec: dict) -> bool:
    """True for a record measured on a GPU (its device is not a CPU)."""
    return not rec["device"].startswith("CPU")


def newest(records: list[dict], entry: str, measure: str, gpu: bool | None = None) -> dict | None:
    """The newest record (by date, then by position) of ``entry`` and ``measure``; ``gpu``: only GPU
    (True) or CPU (False) records."""
    best = None
    for rec in records:
        if rec["entry"] == entry and rec["measure"] == measure and (gpu is None or is_gpu(rec) == gpu):
            if best is None or rec["date"] >= best["date"]:
                best = rec
    return best


def newest_pair(records: list[dict], entry_a: str, entry_b: str, measure: str, gpu: bool | None = None):
    """(a, b): the newest records of two entries measured in one run (same commit and device),
    newest by b's date; (None, None) when no run measured both. A ratio of two figures is shown
    only from such a pair."""
    def of(entry):
        return [r for r in records if r["entry"] == entry and r["measure"] == measure
                and (gpu is None or is_gpu(r) == gpu)]
    pairs = [(a, b) for b in of(entry_b) for a in of(entry_a)
             if a.get("commit") == b.get("commit") and a["device"] == b["device"]]
    return max(pairs, key=lambda p: (p[1]["date"], p[0]["date"]), default=(None, None))
