#!/usr/bin/env python
"""RankSVM on a Dask cluster: its parts shipped from the client against read by the workers from the
training file (gputext.distributed.rank.FilePart), on CPU workers of this machine.

    python scripts/rank_parts_io.py [--queries 2000] [--workers 2] [--data-dir /tmp/rank-parts] [--out DIR]

An MSLR-WEB30K-shaped set (gputext.rank.bench.preset_params) of --queries queries is written once
to --data-dir (uncompressed); then, alternating, DistributedRankOps is built with and without the
file and its first evaluate (each worker builds its part's ops) and one Hessian product are timed,
3 times each after one untimed round (the workers' imports and cache loads), in fresh parts (a new
token each time). Prints one line a run and the medians; with --out, also rank_parts_io.json there.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data-dir", default="/tmp/rank-parts")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    from gputext.datasets.ltr import make_ltr
    from gputext.distributed.client import connect
    from gputext.distributed.rank import DistributedRankOps
    from gputext.io.corpus import read_corpus, write_corpus
    from gputext.rank.bench import preset_params
    from gputext.rank.data import from_corpus
    os.makedirs(a.data_dir, exist_ok=True)
    path = os.path.join(a.data_dir, f"rank_{a.queries}.h5")
    if not os.path.exists(path):
        corpus = make_ltr(**{**preset_params("mslr-web30k", a.queries), "seed": 0, "model_seed": 0})
        write_corpus(corpus, path + ".tmp.h5", compression=None)
        os.replace(path + ".tmp.h5", path)
    data = from_corpus(read_corpus(path), path)
    print(f"{data.n_docs:,} rows x {data.n_features}, {data.X.nnz:,} stored ({os.path.getsize(path) / 1e6:.0f} MB file), "
          f"{data.n_queries:,} queries; {a.workers} CPU workers")
    times = {"shipped": [], "from the file": []}
    w = np.zeros(data.n_features)
    with connect(f"local:{a.workers}", quiet=True) as client:
        for run in range(4):
            for label, source in (("shipped", None), ("from the file", path)):
                t = time.perf_counter()
                ops = DistributedRankOps(client, data, "cpu", source=source)
                ops.evaluate(w)
                ops.accept()
                ops.xt_hess(np.ones(data.n_features))
                dt = time.perf_counter() - t
                assert ops.from_file == (source is not None)
                ops.close()
                if run:
                    times[label].append(dt)
                print(f"{label:14s} parts + first evaluate + one Hessian product: {dt:.3f} s{'' if run else ' (warm-up)'}")
    for label, v in times.items():
        print(f"median {label}: {statistics.median(v):.3f} s")
    if a.out:
        import json
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "rank_parts_io.json"), "w") as f:
            json.dump({"rows": data.n_docs, "features": data.n_features, "stored": int(data.X.nnz),
                       "file_bytes": os.path.getsize(path), "workers": a.workers, "seconds": times,
                       "median_s": {k: statistics.median(v) for k, v in times.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
