"""Throughput and peak memory of `gputext corpus synth` (CPU only: the generator is numpy).

Each run is a fresh subprocess (so its peak RSS, ru_maxrss, is its own) that writes a synthetic
corpus with write_synth / write_ltr and reports seconds, documents per second and peak RSS.
The generation-only rate (no HDF5 writing) is measured too, to separate the generator from the
disk. Results: a markdown table on stdout (last) and JSON in --out (default $OUT or out/).

    .venv/bin/python scripts/bench_synth.py --quick            # < 1 minute
    .venv/bin/python scripts/bench_synth.py                    # 10^5 and 10^6 docs, LTR presets
    .venv/bin/python scripts/bench_synth.py --sizes 1e7        # 10^7 docs (~4 GB per weighting written)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)

CHILD = r"""
import json, resource, sys, time
from gputext.datasets.ltr import write_ltr
from gputext.datasets.presets import resolve
from gputext.datasets.synth import TextSpec, _blocks, write_synth
args = json.loads(sys.argv[1])
t0 = time.perf_counter()  # after the imports: generator set-up, generation and writing
cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
if args["what"] == "generate":
    spec = TextSpec(args["n_docs"], args["n_terms"], args["terms_per_doc"], args["n_classes"])
    nnz = 0
    for block in _blocks(spec, args.get("threads")):
        nnz += len(block.indices)
    out = {"nnz": nnz}
elif args["what"] == "text":
    out = write_synth(args["path"], args["n_docs"], args["n_terms"], args["terms_per_doc"], args["n_classes"],
                      weighting=args["weighting"], threads=args.get("threads"))
else:
    _, p = resolve(args["preset"])
    out = write_ltr(args["path"], p.pop("n_queries"), p.pop("docs_per_query"), p.pop("n_features"),
                    p.pop("n_levels"), threads=args.get("threads"), **p)
out["wall_seconds"] = time.perf_counter() - t0
usage = resource.getrusage(resource.RUSAGE_SELF)
out["cpu_seconds"] = usage.ru_utime + usage.ru_stime - cpu0
out["peak_rss_mb"] = usage.ru_maxrss / 1024
print(json.dumps(out))
"""


def run_child(args: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark child failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = harness.parser(__doc__, quick="small sizes only (under a minute)", devices=("cpu",),
                        device_help="the generator runs on the CPU only")
    ap.add_argument("--sizes", default=None, help="comma-separated document counts (default 1e5,1e6; quick: 1e5,3e5)")
    ap.add_argument("--n-terms", type=int, default=200_000)
    ap.add_argument("--terms-per-doc", type=float, default=60)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dir", default=None, help="where the files go (default: a temporary directory, removed)")
    args = ap.parse_args()
    sizes = [int(float(s)) for s in (args.sizes or ("1e5,3e5" if args.quick else "1e5,1e6")).split(",")]
    ltr_presets = ["mq2008", "mq2007"] if args.quick else ["mq2007", "mslr-web10k"]
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "synth.h5")
        for n in sizes:
            base = {"n_docs": n, "n_terms": args.n_terms, "terms_per_doc": args.terms_per_doc, "n_classes": 20,
                    "threads": args.threads, "path": path}
            gen = run_child({**base, "what": "generate"})
            rows.append({"what": "generate only", "docs": n, "nnz": gen["nnz"], "seconds": gen["wall_seconds"],
                         "cpu_seconds": gen["cpu_seconds"],
                         "docs_per_s": n / gen["wall_seconds"], "peak_rss_mb": gen["peak_rss_mb"], "file_mb": 0})
            for weighting in ("tf", "tfidf"):
                res = run_child({**base, "what": "text", "weighting": weighting})
                rows.append({"what": f"write {weighting}" + (" (2 passes)" if weighting == "tfidf" else ""),
                             "docs": n, "nnz": res["nnz"], "seconds": res["wall_seconds"], "cpu_seconds": res["cpu_seconds"],
                             "docs_per_s": n / res["wall_seconds"], "peak_rss_mb": res["peak_rss_mb"],
                             "file_mb": os.path.getsize(path) / 1e6})
                os.unlink(path)
        for preset in ltr_presets:
            res = run_child({"what": "ltr", "preset": preset, "path": path, "threads": args.threads})
            rows.append({"what": f"ltr {preset}", "docs": res["n_docs"], "nnz": res["n_docs"] * res["n_features"],
                         "seconds": res["wall_seconds"], "cpu_seconds": res["cpu_seconds"],
                         "docs_per_s": res["n_docs"] / res["wall_seconds"],
                         "peak_rss_mb": res["peak_rss_mb"], "file_mb": os.path.getsize(path) / 1e6})
            os.unlink(path)
    env = harness.probe()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": env["host"], "cpus": env["cpu_count"],
            "python": env["python"], "n_terms": args.n_terms, "terms_per_doc": args.terms_per_doc,
            "command": " ".join(sys.argv), "env": env}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    table = harness.md_table(["run", "docs", "nnz", "wall s", "docs/s", "CPU s", "peak RSS MB", "file MB"], [
        [r["what"], f"{r['docs']:,}", f"{r['nnz']:,}", f"{r['seconds']:.2f}", f"{r['docs_per_s']:,.0f}",
         f"{r['cpu_seconds']:.2f}", f"{r['peak_rss_mb']:.0f}", f"{r['file_mb']:.0f}"] for r in rows])
    harness.Report(args.out, {"meta": meta, "rows": rows}).write("bench_synth.json", (
        f"corpus synth on {meta['cpus']} CPU cores, {args.n_terms:,} terms, median {args.terms_per_doc:g} terms/doc "
        f"({meta['date']})\n\n(1-minute load average at the end: {load:.1f}; CPU s = user + system time of the run, "
        f"which other processes on the machine do not inflate)\n\n{table}"))


if __name__ == "__main__":
    main()
