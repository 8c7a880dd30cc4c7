"""Choosing StarClustering's beta or StreamClustering's threshold: a sweep over a grid of values
that reports, per value, the cluster count, the documents alone in a cluster and, with labels,
FBcubed and NMI (docs/python.md, "Choosing beta and the threshold").

    from gputext import StarClustering
    from gputext.estimators.sweep import sweep_clustering, plot_sweep, best_row
    rows = sweep_clustering(StarClustering(device="cpu"), X, [0.05, 0.1, 0.15, 0.25], y=labels)
    best_row(rows, "fbcubed")                  # the value of best FBcubed
    plot_sweep(rows, "sweep.png")              # matplotlib: pip install gputext[plot]

From the shell, on a corpus file (`gputext corpus build` output; its "label" obs column when it has one):

    python -m gputext.estimators.sweep train.h5 --kind star --values 0.05,0.1,0.15,0.25 --plot sweep.png
    python -m gputext.estimators.sweep train.h5 --kind stream --device cpu

Decisions:
- The swept parameter is the estimator's own: "beta" for StarClustering, "threshold" for
  StreamClustering (``param=`` names another). Each value fits a clone (sklearn.base.clone).
- A document is alone when every cluster it belongs to has one member; for the stream, a
  document without terms (label -1) counts as alone too.
- FBcubed (Amigo et al., overlapping: the star's membership_) and NMI (hard: labels_, the
  star's one-cluster-per-document rule) come from gputext.cluster.metrics, the functions
  `gputext cluster eval` reports; y may hold labels of any type (None: no quality columns).
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

SWEPT = {"StarClustering": "beta", "StreamClustering": "threshold"}
DEFAULT_GRID = {"beta": (0.05, 0.07, 0.1, 0.15, 0.2, 0.25), "threshold": (0.05, 0.1, 0.15, 0.2, 0.3, 0.6)}


def memberships(estimator) -> sp.csr_matrix:
    """CSR (n_docs, n_clusters) 0/1 of a fitted clustering: membership_ when it has one, else labels_."""
    from ..cluster.metrics import as_membership
    if hasattr(estimator, "membership_"):
        return as_membership(estimator.membership_)
    return as_membership(np.asarray(estimator.labels_, np.int64))


def alone(membership: sp.csr_matrix) -> int:
    """Documents whose every cluster has one member (a document in no cluster counts as alone)."""
    M = sp.csr_matrix(membership)
    sizes = np.asarray(M.sum(axis=0)).ravel()
    largest = np.zeros(M.shape[0])
    rows = np.repeat(np.arange(M.shape[0]), np.diff(M.indptr))
    np.maximum.at(largest, rows, sizes[M.indices])
    return int((largest <= 1).sum())


def sweep_clustering(estimator, X, values=None, y=None, param: str | None = None) -> list[dict]:
    """One row per value (in the given order): {param: value, n_clusters, alone, alone_fraction,
    seconds, and with y: fbcubed (precision / recall / f), nmi}. values None: DEFAULT_GRID."""
    from sklearn.base import clone

    from ..cluster.metrics import fbcubed, nmi
    param = param or SWEPT.get(type(estimator).__name__)
    if param is None:
        raise ValueError(f"param: name the parameter to sweep (no default for {type(estimator).__name__})")
    codes = None if y is None else np.unique(np.asarray(y).astype(str), return_inverse=True)[1].ravel()
    rows = []
    for value in DEFAULT_GRID[param] if values is None else values:
        t0 = time.perf_counter()
        model = clone(estimator).set_params(**{param: value}).fit(X)
        seconds = time.perf_counter() - t0
        M = memberships(model)
        row = {param: value, "n_clusters": int(model.n_clusters_), "alone": alone(M),
               "alone_fraction": alone(M) / M.shape[0], "seconds": seconds}
        if codes is not None:
            labels = np.asarray(model.labels_, np.int64)
            hard = np.where(labels >= 0, labels, labels.max() + 1 + np.arange(len(labels)))  # -1: each alone
            row.update(fbcubed=fbcubed(M, codes), nmi=nmi(hard, codes))
        rows.append(row)
    return rows


def best_row(rows: list[dict], key: str = "fbcubed") -> dict:
    """The row of the largest FBcubed F ("fbcubed") or NMI ("nmi"); ties -> the first."""
    score = (lambda r: r["fbcubed"]["f"]) if key == "fbcubed" else (lambda r: r[key])
    return max(rows, key=score)


def plot_sweep(rows: list[dict], path: str) -> None:
    """Cluster count and alone fraction (and FBcubed F / NMI with labels) against the swept value, as a PNG."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plot_sweep needs matplotlib: pip install 'gputext[plot]'") from None
    param = next(iter(rows[0]))
    x = [r[param] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6, 6), sharex=True)
    top.plot(x, [r["n_clusters"] for r in rows], "o-")
    top.set_yscale("log")
    top.set_ylabel("clusters")
    bottom.plot(x, [r["alone_fraction"] for r in rows], "o-", label="documents alone")
    if "nmi" in rows[0]:
        bottom.plot(x, [r["fbcubed"]["f"] for r in rows], "s-", label="FBcubed F")
        bottom.plot(x, [r["nmi"] for r in rows], "^-", label="NMI")
    bottom.set_xlabel(param)
    bottom.set_ylim(0, 1)
    bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    """`python -m gputext.estimators.sweep CORPUS [--kind star|stream] [--values a,b,..]
    [--labels OBS] [--device D] [--plot PNG]`: one line per value, then the best ones."""
    import argparse

    from ..io import read_corpus
    from .clustering import StarClustering, StreamClustering
    p = argparse.ArgumentParser(prog="python -m gputext.estimators.sweep", description=main.__doc__)
    p.add_argument("corpus")
    p.add_argument("--kind", choices=("star", "stream"), default="star")
    p.add_argument("--values", help="comma-separated beta (star) or threshold (stream) values; default: DEFAULT_GRID")
    p.add_argument("--labels", default="label", help="obs column of the true classes (absent: no FBcubed / NMI)")
    p.add_argument("--device", default="auto")
    p.add_argument("--plot", help="PNG path (needs matplotlib: pip install 'gputext[plot]')")
    a = p.parse_args(argv)
    corpus = read_corpus(a.corpus)
    y = corpus.obs[a.labels].values() if a.labels in corpus.obs else None
    estimator = StarClustering(device=a.device) if a.kind == "star" else StreamClustering(device=a.device)
    values = None if a.values is None else [float(v) for v in a.values.split(",")]
    rows = sweep_clustering(estimator, corpus.X, values, y=y)
    param = next(iter(rows[0]))
    for r in rows:
        quality = f", FBcubed F {r['fbcubed']['f']:.3f}, NMI {r['nmi']:.3f}" if "nmi" in r else ""
        print(f"{param} {r[param]:g}: {r['n_clusters']} clusters, {r['alone']} alone ({r['alone_fraction']:.1%})"
              f"{quality}, {r['seconds']:.1f} s")
    if y is not None:
        print(f"best FBcubed F at {param} {best_row(rows)[param]:g}, best NMI at {best_row(rows, 'nmi')[param]:g}")
    if a.plot:
        plot_sweep(rows, a.plot)


if __name__ == "__main__":
    main()
