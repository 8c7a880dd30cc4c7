#!/usr/bin/env python
"""Reproduce the stream-clustering paper's Figure 3 and Figure 4 (markdown tables + PNG plots).

    python scripts/table_stream.py [--quick] [--device auto|cpu|cuda] [--out out/stream]

Figure 3  latency per document (batch size 1) against the number of clusters M, K = 35,
          T = 0.6: the device chosen (GPU when there is one) and the CPU (inverted index, and the
          ELL-scan twin). The state of M clusters is M PubMed-shaped documents that each started
          a cluster (gputext.datasets.synth, pubmed shape, tf-icf); 1 + latency percentiles.
Figure 4a sensitivity to T (K = 60): a PubMed-shaped stream (gputext.cluster.stream_synth: 36%
          follow-ups of recent stories), clusters at the end and time.
Figure 4b sensitivity to K (T = 0.6): a NYT-shaped stream (median 230 terms a document, as the
          paper's New York Times set), clusters and time.
Real      20 Newsgroups and Reuters R8 (train splits, tf-icf, in file order) for T from 0.1 to
          0.7, K = 35: clusters, purity and NMI against the labels, time, documents/s
          (skipped when ../shared/datasets is absent).

All timings are measured in this run on this machine (the device line says which); nothing is
copied from the paper. Every run's assignments are exact (the tests prove equality with the
sequential reference), so the tables differ between devices only in time.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402
from gpu_stream import state_from_docs  # noqa: E402

from gputext.backend import resolve  # noqa: E402
from gputext.cluster.stream import StreamClusterer  # noqa: E402
from gputext.cluster.stream_synth import pubmed_corpus  # noqa: E402

log, md_table = harness.log, harness.md_table


def latency_rows(backend, sizes, n_query, n_cpu):
    from gputext.datasets.synth import make_corpus
    K, T = 35, 0.6
    base = make_corpus(max(sizes) + n_query, 141_043, 55, 50, seed=3, weighting="tficf").X
    queries = base[max(sizes):]
    rows = []
    for M in sizes:
        state = state_from_docs(base[:M], K, T)
        row = {"clusters": M}
        runs = [("cpu index", "cpu", "index", n_cpu), ("cpu scan", "cpu", "scan", n_cpu)]
        if backend.is_cuda:
            runs.insert(0, ("gpu scan", "cuda", "scan", n_query))
        for label, device, cand, n in runs:
            sc = StreamClusterer(T, K, device=device, batch_size=1, candidates=cand)
            sc.warm_up()
            sc.restore(state)
            r = sc.partial_fit(queries[:n])
            p = np.percentile(r.latency_s, [50, 99]) * 1e3
            row[label] = (float(p[0]), float(p[1]))
        rows.append(row)
        log(f"[fig3] {row}")
    return rows


def sweep(backend, X, K_values, T_values, labels=None):
    from gputext.cluster.metrics import nmi, purity
    rows = []
    for K in K_values:
        for T in T_values:
            sc = StreamClusterer(T, K, device=backend.name, batch_size=32 if backend.is_cuda else 16)
            sc.warm_up()
            t = time.perf_counter()
            r = sc.partial_fit(X)
            seconds = time.perf_counter() - t
            row = {"K": K, "T": T, "clusters": sc.n_clusters, "seconds": seconds,
                   "docs_per_s": X.shape[0] / seconds}
            if labels is not None:
                ok = labels >= 0
                row["purity"] = purity(r.cluster[ok], labels[ok])
                row["nmi"] = nmi(r.cluster[ok], labels[ok])
            rows.append(row)
            log(f"[sweep] {row}")
    return rows


def plot(path, title, xlabel, ylabel, series, logx=False, logy=False, notes=None):
    with harness.figure(path) as (fig, axes):
        ax = axes[0, 0]
        for name, xs, ys in series:
            ax.plot(xs, ys, marker="o", label=name)
        for x, y, text in notes or ():
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        harness.style(ax, title, xlabel, ylabel, logx, logy, legend=10)


def sensitivity(rows, x, heading, title, device, png):
    """Figure 4a / 4b: the markdown section of a sweep over ``x`` ("T" or "K") and its plot
    (seconds against x, each point labelled with its number of clusters)."""
    plot(png, title, x, "seconds", [(device, [r[x] for r in rows], [r["seconds"] for r in rows])],
         notes=[(r[x], r["seconds"], f"{r['clusters']:,}") for r in rows])
    return [f"## {heading}", "", md_table([x, "clusters", "seconds", "docs/s"], [
        [r[x], f"{r['clusters']:,}", f"{r['seconds']:.2f}", f"{r['docs_per_s']:,.0f}"] for r in rows]), "",
        f"![{heading.split(':')[0]}]({os.path.basename(png)})", ""]


def real_corpus(name):
    from gputext.io.ingest import build_corpus
    base = os.environ.get("GPUTEXT_DATASETS") or os.path.join(os.path.dirname(harness.ROOT), "shared", "datasets")
    files = {"20NG": "20newsgroups/20newsgroups-train.tab", "R8": "reuters-r8/reuters-r8-train.tab"}
    path = os.path.join(base, files[name])
    if not os.path.exists(path):
        return None
    corpus = build_corpus([path], weighting="tficf")
    return corpus.X, np.asarray(corpus.labels.codes)


def main(argv=None):
    ap = harness.parser(__doc__, quick="small sizes", out="out/stream")
    args = ap.parse_args(argv)
    backend = resolve(args.device)
    os.makedirs(args.out, exist_ok=True)
    log(f"device: {backend.describe()}")
    q = args.quick
    res = {"device": backend.describe(), "date": time.strftime("%Y-%m-%d %H:%M")}
    md = [f"# Stream clustering: the paper's Figures 3 and 4 (gputext)", "",
          f"Measured {res['date']} on {backend.describe()}; `scripts/table_stream.py{' --quick' if q else ''}`.", ""]

    # Figure 3
    sizes = [2000, 10_000, 30_000] if q else [10_000, 30_000, 100_000, 300_000] + ([1_000_000, 1_600_000] if backend.is_cuda else [])
    fig3 = latency_rows(backend, sizes, n_query=100 if not q else 40, n_cpu=60 if not q else 30)
    res["fig3"] = fig3
    names = [k for k in fig3[0] if k != "clusters"]
    md += ["## Figure 3: latency per document vs number of clusters (K = 35, T = 0.6, batch size 1)", "",
           md_table(["clusters"] + [f"{n} p50 / p99 ms" for n in names],
                    [[f"{r['clusters']:,}"] + [f"{r[n][0]:.3f} / {r[n][1]:.3f}" for n in names] for r in fig3]),
           "", "![Figure 3](fig3_latency.png)", ""]
    plot(os.path.join(args.out, "fig3_latency.png"), "Latency vs clusters (K=35, T=0.6)", "clusters",
         "ms per document (p50)", [(n, [r["clusters"] for r in fig3], [r[n][0] for r in fig3]) for n in names],
         logx=True, logy=True)

    # Figure 4a: T sweep on a PubMed-shaped stream, K = 60
    n4 = 5000 if q else (200_000 if backend.is_cuda else 20_000)
    X, _ = pubmed_corpus(n4, reference_docs=min(n4, 50_000))
    T_values = [0.1, 0.3, 0.5, 0.6, 0.7, 0.9] if q else [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    res["fig4a"] = sweep(backend, X, [60], T_values)
    md += sensitivity(res["fig4a"], "T", f"Figure 4a: sensitivity to T (K = 60, {n4:,} PubMed-shaped documents)",
                      f"Sensitivity to T (K=60, {n4:,} docs)", backend.name, os.path.join(args.out, "fig4a_threshold.png"))

    # Figure 4b: K sweep on a NYT-shaped stream (median 230 terms), T = 0.6
    n4b = 2000 if q else (100_000 if backend.is_cuda else 20_000)
    Xn, _ = pubmed_corpus(n4b, seed=5, terms_per_doc=230, n_terms=102_660, reference_docs=min(n4b, 20_000))
    K_values = [20, 60, 200] if q else [20, 35, 60, 100, 150, 200]
    res["fig4b"] = sweep(backend, Xn, K_values, [0.6])
    md += sensitivity(res["fig4b"], "K", f"Figure 4b: sensitivity to K (T = 0.6, {n4b:,} NYT-shaped documents, median "
                      "230 terms)", f"Sensitivity to K (T=0.6, {n4b:,} docs)", backend.name,
                      os.path.join(args.out, "fig4b_k.png"))

    # Real corpora
    series = []
    for name in ("R8", "20NG"):
        data = real_corpus(name)
        if data is None:
            md += [f"## {name}: skipped (../shared/datasets absent)", ""]
            continue
        Xr, labels = data
        if q:
            Xr, labels = Xr[:2000], labels[:2000]
        rows = sweep(backend, Xr, [35], [0.1, 0.2, 0.3, 0.5, 0.7] if q else [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
                     labels)
        res[name] = rows
        md += [f"## {name} (train split, {Xr.shape[0]:,} documents in file order, tf-icf, K = 35)", "",
               md_table(["T", "clusters", "purity", "NMI", "seconds", "docs/s"],
                        [[r["T"], f"{r['clusters']:,}", f"{r['purity']:.3f}", f"{r['nmi']:.3f}", f"{r['seconds']:.2f}",
                          f"{r['docs_per_s']:,.0f}"] for r in rows]), ""]
        series.append((f"{name} NMI", [r["T"] for r in rows], [r["nmi"] for r in rows]))
        series.append((f"{name} purity", [r["T"] for r in rows], [r["purity"] for r in rows]))
    if series:
        plot(os.path.join(args.out, "real_quality.png"), "Real corpora: quality vs T (K=35)", "T", "score", series)
        md += ["![Real corpora](real_quality.png)", ""]

    harness.Report(args.out, res).write("table_stream.json", "\n".join(md), md_name="table_stream.md")


if __name__ == "__main__":
    main()
