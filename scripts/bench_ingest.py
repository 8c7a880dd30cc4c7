#!/usr/bin/env python
"""Benchmark `gputext corpus build` on the real datasets (CPU only: ingest has no GPU part).

For each dataset: median over --repeat runs of the library call ``build_corpus`` (read +
tokenise + count + weight), its phases measured separately (read, tokenise+count, weight), the
HDF5 write, and one end-to-end CLI run (`gputext corpus build ... -q`, a fresh process: includes
Python start-up and imports). Prints a markdown table last and writes ingest_bench.json to --out.

    .venv/bin/python scripts/bench_ingest.py                 # all datasets, 3 repeats
    .venv/bin/python scripts/bench_ingest.py --quick         # R8 and letor-sample, 1 repeat
    .venv/bin/python scripts/bench_ingest.py --datasets /path/to/datasets --out out/bench
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

from gputext.io import write_corpus  # noqa: E402
from gputext.io.ingest import build_corpus, read_inputs  # noqa: E402
from gputext.io.tokenize import count_terms, load_stopwords  # noqa: E402
from gputext.io.weighting import Reference, apply_weighting, document_frequency  # noqa: E402

# name, inputs relative to the datasets folder, build options
DATASETS = [
    ("20ng-train", ["20newsgroups/20newsgroups-train.tab"], {}),
    ("20ng-test", ["20newsgroups/20newsgroups-test.tab"], {}),
    ("r8-train", ["reuters-r8/reuters-r8-train.tab"], {}),
    ("r52-train", ["reuters-r52/reuters-r52-train.tab"], {}),
    ("cnae9", ["cnae9/CNAE-9.data"], {}),
    ("letor-train", ["letor-sample/rank.train"], {"query_groups": "letor-sample/rank.train.query"}),
]
QUICK = ("r8-train", "letor-train")


def timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def bench_one(name, inputs, options, repeat, tmp):
    totals, reads, counts, weights, writes = [], [], [], [], []
    corpus = None
    for _ in range(repeat):
        corpus, t = timed(lambda: build_corpus(inputs, **options))
        totals.append(t)
        docs, t = timed(lambda: read_inputs(inputs, "auto", options.get("query_groups")))
        reads.append(t)
        docs = docs[0]
        if hasattr(docs, "texts"):
            stop = load_stopwords("english")
            counted, t = timed(lambda: count_terms(docs.texts, stop))
            counts.append(t)
            matrix = counted.counts
        else:
            matrix = docs.values
            counts.append(0.0)
        scheme = corpus.params["weighting"]
        _, t = timed(lambda: apply_weighting(matrix, scheme, Reference(document_frequency(matrix), matrix.shape[0])))
        weights.append(t)
        path = os.path.join(tmp, f"{name}.h5")
        _, t = timed(lambda: write_corpus(corpus, path))
        writes.append(t)
    exe = shutil.which("gputext", path=str(Path(sys.executable).parent)) or "gputext"
    cmd = [exe, "corpus", "build", *inputs, "-o", os.path.join(tmp, f"{name}-cli.h5"), "-q"]
    if "query_groups" in options:
        cmd += ["--query-groups", options["query_groups"]]
    _, cli = timed(lambda: subprocess.run(cmd, check=True))
    in_bytes = sum(os.path.getsize(p) for p in inputs)
    med = float(np.median(totals))
    return {
        "dataset": name, "n_docs": corpus.n_docs, "n_terms": corpus.n_terms, "nnz": int(corpus.X.nnz),
        "input_mb": in_bytes / 1e6, "build_s": med, "build_runs_s": totals,
        "read_s": float(np.median(reads)), "tokenise_count_s": float(np.median(counts)),
        "weight_s": float(np.median(weights)), "write_s": float(np.median(writes)), "cli_s": cli,
        "docs_per_s": corpus.n_docs / med, "mb_per_s": in_bytes / 1e6 / med,
    }


def main(argv=None) -> int:
    ap = harness.parser(__doc__.split("\n\n")[0], quick="R8 train and letor-sample only, one run",
                        devices=("cpu", "auto"), device_help="ingest always runs on the CPU")
    ap.add_argument("--datasets", type=Path, default=None, help="folder of the shared datasets")
    ap.add_argument("--repeat", type=int, default=None, help="runs per dataset (median reported); default 3, quick 1")
    args = ap.parse_args(argv)
    folder = harness.datasets(args.datasets)
    if folder is None:
        print("no datasets folder: pass --datasets or set GPUTEXT_DATASETS", file=sys.stderr)
        return 2
    repeat = args.repeat or (1 if args.quick else 3)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, rel, opts in DATASETS:
            if args.quick and name not in QUICK:
                continue
            inputs = [str(folder / r) for r in rel]
            if not all(os.path.exists(p) for p in inputs):
                print(f"skip {name}: missing {rel}", file=sys.stderr)
                continue
            opts = {k: str(folder / v) for k, v in opts.items()}
            row = bench_one(name, inputs, opts, repeat, tmp)
            rows.append(row)
            print(f"{name}: {row['build_s']:.2f} s", file=sys.stderr)
    env = harness.probe()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.machine(), "python": env["python"],
            "cpus": env["cpu_count"], "repeat": repeat, "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:])),
            "env": env}
    table = harness.md_table(
        ["dataset", "docs", "terms", "nnz", "input MB", "build s", "read s", "tokenise+count s", "weight s", "write s",
         "cli s", "docs/s"],
        [[r["dataset"], f"{r['n_docs']:,}", f"{r['n_terms']:,}", f"{r['nnz']:,}", f"{r['input_mb']:.1f}",
          f"{r['build_s']:.2f}", f"{r['read_s']:.2f}", f"{r['tokenise_count_s']:.2f}", f"{r['weight_s']:.3f}",
          f"{r['write_s']:.2f}", f"{r['cli_s']:.2f}", f"{r['docs_per_s']:,.0f}"] for r in rows])
    harness.Report(args.out, {"meta": meta, "rows": rows}).write(
        "ingest_bench.json", f"\ningest on the CPU ({meta['cpus']} cores, Python {meta['python']}), median of {repeat}; "
        "build = read + tokenise + weight (library call); cli = fresh process incl. write\n\n" + table, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
