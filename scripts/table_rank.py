#!/usr/bin/env python
"""Reproduce the RankSVM paper's Table 2 (training time), Table 3 (pairwise accuracy) and
Figure 1 (relative objective difference vs training time), GPU vs our CPU twin.

    python scripts/table_rank.py [--out out/rank] [--scale 1.0] [--datasets a,b,...] [--device auto]

Data: synthetic sets with the shapes of the paper's Table 1 (gputext.datasets presets mq2007-list,
mq2008-list, mslr-web10k, mslr-web30k, mq2007, mq2008: rows, features, queries, relevance levels,
largest query), each with a held-out test set from the same hidden model (a fifth of the queries),
and the real letor-sample (LightGBM's lambdarank example: rank.train / rank.test with .query group
files) from ../shared/datasets when present. --scale < 1 keeps that fraction of the queries (for a
machine without a GPU: the CPU twin on the full shapes takes minutes).

Training: C = 1, eps = 1e-5 (the paper's settings), TRON from w = 0, on the GPU when one is usable
and always on the CPU twin (numba, all cores). Times exclude data generation, device upload and
kernel compilation (a warm-up run compiles first); they include every f, gradient and Hessian-vector
product and the host's TRON. f* for Figure 1 is the lowest f reached by a run to eps = --fstar-eps
(default 1e-9) on the fastest backend.

Writes under --out: table2.md, table3.md, figure1.png, table_rank.json; prints both tables.
Without a GPU it runs the CPU twin only and says so in the tables.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

from gputext.backend import cpu_threads, resolve  # noqa: E402
from gputext.rank.bench import TABLE1, letor_sample, preset_params, preset_split, timed_train  # noqa: E402
from gputext.rank.data import from_corpus  # noqa: E402
from gputext.rank.metrics import pairwise_accuracy  # noqa: E402

log = harness.log

# The paper's measurements (Tesla C2050 / 4 x Xeon E5620, real LETOR data), for reference only.
PAPER_TIME = {"mq2007-list": (203.02, 22.46), "mq2008-list": (276.46, 37.17), "mslr-web10k": (2481.35, 276.11),
              "mslr-web30k": (17019.16, 939.38), "mq2007": (10.18, 5.90), "mq2008": (0.48, 1.37)}  # OST, P-SWX (s)
PAPER_PA = {"mq2007-list": (81.11, 81.11), "mq2008-list": (82.11, 80.72), "mslr-web10k": (61.04, 60.43),
            "mslr-web30k": (60.79, 60.45), "mq2007": (70.59, 70.60), "mq2008": (80.24, 80.24)}  # OST, P-SWX (%)


def load(name, scale, seed):
    if name == "letor-sample":
        folder = os.path.join(args_datasets(), "letor-sample")
        return letor_sample(folder)
    n_queries = None
    if scale < 1.0:
        n_queries = max(4, int(round(preset_params(name)["n_queries"] * scale)))
    return preset_split(name, n_queries, seed=seed)


_DATASETS = None


def args_datasets():
    return _DATASETS


def run_dataset(name, train, test, backends, C, eps, fstar_eps):
    data = from_corpus(train, f"{name} train")
    tq = np.asarray(test.obs["qid"])
    tr = np.asarray(test.obs["relevance"])
    Xt = test.X.astype(np.float64)
    row = dict(name=name, n_docs=data.n_docs, n_features=data.n_features, n_queries=data.n_queries,
               levels=len(data.levels), n_pairs=data.n_pairs, max_query_docs=data.max_query_docs, runs={})
    for b in backends:
        # compile (device kernels; CPU twin when its cache is cold) on a slice first: not training time
        k = min(20, data.n_queries)
        part = from_corpus(train.take(np.concatenate([np.flatnonzero(np.asarray(train.obs["qid"]) == q)
                                                      for q in data.query_ids[:k]])), "warm-up")
        timed_train(part, C, 1e-2, max_iter=2, backend=b)
        r = timed_train(data, C, eps, backend=b)
        res = r["result"]
        row["runs"][b.name] = dict(seconds=r["seconds"], iterations=res.iterations, cg=res.cg_iterations, f=res.f,
                                   converged=res.converged, pa_test=pairwise_accuracy(Xt @ res.w, tq, tr)[0],
                                   history=[(h["time"], h["f"]) for h in res.history])
        log(f"{name} {b.name}: {r['seconds']:.2f} s, {res.iterations} Newton, {res.cg_iterations} CG, f={res.f:.10e}, "
            f"PA test {row['runs'][b.name]['pa_test']:.4f}")
    fastest = backends[-1]
    r = timed_train(data, C, fstar_eps, backend=fastest)
    row["fstar"] = min([r["result"].f] + [run["f"] for run in row["runs"].values()])
    return row


def table2(rows, has_gpu, threads):
    out = ["Table 2: training time (s), C = 1, eps = 1e-5. Ours: synthetic data of the paper's Table 1 shapes "
           f"(letor-sample: real); CPU twin on {threads} threads" + ("" if has_gpu else "; NO GPU on this machine: "
                                                                     "CPU twin only") + ".", "",
           "| data set | rows | features | queries | pairs | CPU twin (s) | GPU (s) | speed-up | Newton / CG (GPU) | "
           "paper OST (s) | paper P-SWX (s) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        c = r["runs"].get("cpu")
        g = r["runs"].get("cuda")
        paper = PAPER_TIME.get(r["name"], (None, None))
        out.append(f"| {r['name']} | {r['n_docs']:,} | {r['n_features']} | {r['n_queries']:,} | {r['n_pairs']:,} | "
                   f"{c['seconds']:.2f} | " + (f"{g['seconds']:.2f} | {c['seconds'] / g['seconds']:.1f}x | "
                                                f"{g['iterations']} / {g['cg']} | " if g else
                                                f"- | - | {c['iterations']} / {c['cg']} (CPU) | ")
                   + " | ".join("-" if p is None else f"{p:,.2f}" for p in paper) + " |")
    return "\n".join(out)


def table3(rows, has_gpu):
    out = ["Table 3: pairwise accuracy (%) on the held-out test sets. The paper's columns are on the real LETOR / "
           "MSLR data, ours on synthetic data of the same shapes: compare CPU twin vs GPU, not with the paper.", "",
           "| data set | CPU twin | GPU | |difference| | paper OST | paper P-SWX |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        c = r["runs"]["cpu"]["pa_test"] * 100
        g = r["runs"]["cuda"]["pa_test"] * 100 if "cuda" in r["runs"] else None
        paper = PAPER_PA.get(r["name"], (None, None))
        out.append(f"| {r['name']} | {c:.2f} | " + (f"{g:.2f} | {abs(g - c):.2e} |" if g is not None else "- | - |")
                   + " " + " | ".join("-" if p is None else f"{p:.2f}" for p in paper) + " |")
    if not has_gpu:
        out.append("\nNo GPU on this machine: CPU twin only.")
    return "\n".join(out)


def figure1(rows, path):
    n = len(rows)
    cols = min(3, n)
    nrows = -(-n // cols)
    with harness.figure(path, nrows, cols, (4.2 * cols, 3.2 * nrows)) as (fig, axes):
        for ax, r in zip(axes.ravel(), rows):
            for name, run in r["runs"].items():
                t = np.array([h[0] for h in run["history"]])
                eta = np.abs((np.array([h[1] for h in run["history"]]) - r["fstar"]) / r["fstar"])
                keep = eta > 0
                ax.semilogy(t[keep], eta[keep], marker="o", ms=3, label="GPU" if name == "cuda" else "CPU twin")
            harness.style(ax, r["name"], "training time (s)", "relative difference to f*", logy=True, legend=8,
                          title_size=10)
        for ax in axes.ravel()[n:]:
            ax.axis("off")


def main(argv=None):
    global _DATASETS
    p = harness.parser(__doc__.split("\n\n")[0], quick=None, out=os.path.join("out", "rank"))
    p.add_argument("--scale", type=float, default=1.0, help="fraction of each preset's queries (0 < scale <= 1)")
    p.add_argument("--datasets", default=",".join(TABLE1 + ("letor-sample",)))
    p.add_argument("--C", type=float, default=1.0)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--fstar-eps", type=float, default=1e-9)
    p.add_argument("--shared-datasets", default=os.environ.get("GPUTEXT_DATASETS",
                                                               os.path.join(harness.ROOT, "..", "shared", "datasets")))
    args = p.parse_args(argv)
    if not 0 < args.scale <= 1:
        p.error("--scale must be in (0, 1]")
    _DATASETS = args.shared_datasets
    device = resolve(args.device)
    backends = [resolve("cpu")] + ([device] if device.is_cuda else [])
    has_gpu = device.is_cuda
    if not has_gpu:
        log("no GPU here (or --device cpu): running the CPU twin only")
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        if name == "letor-sample" and not os.path.isdir(os.path.join(args.shared_datasets, "letor-sample")):
            log(f"skipping letor-sample: {args.shared_datasets}/letor-sample is absent")
            continue
        t = time.perf_counter()
        train, test = load(name, args.scale, seed=0)
        log(f"{name}: {train.n_docs:,} train rows, {test.n_docs:,} test rows ({time.perf_counter() - t:.1f} s to make)")
        rows.append(run_dataset(name, train, test, backends, args.C, args.eps, args.fstar_eps))
        del train, test
    t2, t3 = table2(rows, has_gpu, cpu_threads()), table3(rows, has_gpu)
    with open(os.path.join(args.out, "table2.md"), "w") as fh:
        fh.write(t2 + "\n")
    with open(os.path.join(args.out, "table3.md"), "w") as fh:
        fh.write(t3 + "\n")
    harness.write_json(os.path.join(args.out, "table_rank.json"), {
        "device": device.describe(), "cpu_threads": cpu_threads(), "scale": args.scale, "C": args.C, "eps": args.eps,
        "rows": rows, "env": harness.probe(device)})
    if rows:
        figure1(rows, os.path.join(args.out, "figure1.png"))
    print(t2 + "\n\n" + t3 + f"\n\nFigure 1: {os.path.join(args.out, 'figure1.png')}")


if __name__ == "__main__":
    main()
