#!/usr/bin/env python3
"""Issue 18's exactness check on 20NG: the primal objective per class of our one-vs-rest SVM
(TRON, tol 1e-10) against scikit-learn's LinearSVC(dual=False, tol=1e-10) on the same matrix
(meta-features, bag of words, both; C in {0.25, 1, 4, 16}; bias as fit_intercept).

Objectives are evaluated in float64 on the host from the weights (independent of our kernels):
f_c(w) = w.w / 2 + C sum_i max(0, 1 - y_i w.[x_i, 1])^2, y_i = +1 for class c. The certificate
f(W) - f* <= |grad f(W)|^2 / 2 (f is 1-strongly convex) bounds our distance to the optimum
without any reference.

  python scripts/svm_exactness.py --device cpu --out out/          # ours (CPU twin) + LinearSVC
  python scripts/svm_exactness.py --device cpu --liblinear-only --write-reference benchmarks/svm_20ng_reference.json

LinearSVC at tol 1e-10 takes minutes per fit on 20NG's meta-features: the reference objectives
are computed once on the CPU and stored; scripts/gpu_svm.py compares the device's against them.
"""
from __future__ import annotations

import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

warnings.filterwarnings("ignore")
EXACT_C = (0.25, 1.0, 4.0, 16.0)


def corpora(args):
    """(train path, test path): 20NG built (tf-idf, min_df 6, as make table-metafeatures) and cached."""
    from pathlib import Path

    from table_metafeatures import build, datasets_dir
    ddir = datasets_dir(args.datasets)
    cache = Path(os.environ.get("TMPDIR", "/tmp")) / "gputext-svm-corpora"  # not under --out: kept out of the results
    return build("20ng", ddir, cache, args.quick)


def features_of(train, test, backend, kind):
    """(F_train, F_test, y_train codes, y_test codes, n_classes) as svm_classify builds them."""
    from gputext.knn.classify import align_codes
    from gputext.knn.metafeatures import compute_metafeatures
    from gputext.knn.svm import MinMax, _labelled, feature_matrix
    y, cats = _labelled(train, "training")
    mf = compute_metafeatures(train.X, y, len(cats), test.X, k=30, device=backend, categories=cats)
    scaler = MinMax.fit(mf.train)
    yt = align_codes(test.labels, cats)
    return (feature_matrix(kind, train.X, mf.train, scaler), feature_matrix(kind, test.X, mf.queries, scaler),
            y, yt, len(cats))


def with_bias(F):
    parts = F if isinstance(F, tuple) else (F,)
    blocks = [sp.csr_matrix(P, dtype=np.float64) for P in parts] + [sp.csr_matrix(np.ones((parts[0].shape[0], 1)))]
    return sp.hstack(blocks, format="csr")


def primal(Xb, y, W, C):
    """(f per column, |grad f| per column), float64; W (m + 1, n_cols), column j = class j (or
    class 1 for two classes)."""
    n_cols = W.shape[1]
    cls = np.array([1]) if n_cols == 1 else np.arange(n_cols)
    Y = np.where(y[:, None] == cls[None, :], 1.0, -1.0)
    Z = np.asarray(Xb @ W)
    d = np.maximum(0.0, 1.0 - Y * Z)
    f = 0.5 * np.sum(W * W, axis=0) + C * np.sum(d * d, axis=0)
    R = np.where(d > 0, Z - Y, 0.0)
    G = W + 2 * C * np.asarray(Xb.T @ R)
    return f, np.sqrt(np.sum(G * G, axis=0))


def test_predictions(W, Ft):
    """(class per test row, gap between its two best margins), float64 from the weights."""
    Z = np.asarray(with_bias(Ft) @ W)
    if Z.shape[1] == 1:
        return (Z[:, 0] > 0).astype(int), np.abs(Z[:, 0])
    top = np.sort(Z, axis=1)
    return np.argmax(Z, axis=1), top[:, -1] - top[:, -2]


def objectives(F, y, n_classes, C, backend, Ft=None) -> dict:
    """Our W at tol 1e-10 on ``backend``: per-class f, the certificate bound / f, seconds; with the
    test rows ``Ft`` also their predictions and top-two margin gaps."""
    from gputext.linear.solver import train_path
    t0 = time.perf_counter()
    W = train_path(F, y, n_classes, [C], tol=1e-10, device=backend).weights[C]
    seconds = time.perf_counter() - t0
    f, g = primal(with_bias(F), y, W, C)
    out = {"f": f.tolist(), "bound": (0.5 * g * g / f).tolist(), "seconds": seconds}
    if Ft is not None:
        pred, gap = test_predictions(W, Ft)
        out.update(pred=pred.tolist(), gap=gap.tolist())
    return out


def liblinear_objectives(F, y, C, Ft=None) -> dict:
    from sklearn.svm import LinearSVC
    t0 = time.perf_counter()
    X = sp.hstack([sp.csr_matrix(F[0]), sp.csr_matrix(F[1])], format="csr") if isinstance(F, tuple) else F
    m = LinearSVC(C=C, dual=False, tol=1e-10, max_iter=100000).fit(X, y)
    W = np.vstack([m.coef_.T, m.intercept_[None, :]])
    f, g = primal(with_bias(F), y, W, C)
    out = {"f": f.tolist(), "bound": (0.5 * g * g / f).tolist(), "seconds": time.perf_counter() - t0}
    if Ft is not None:
        pred, gap = test_predictions(W, Ft)
        out.update(pred=pred.tolist(), gap=gap.tolist())
    return out


def compare(ours: dict, ref: dict, ref_f) -> dict:
    """Max relative objective difference; test predictions equal where both gaps exceed 1e-6."""
    theirs = np.asarray(ref_f)
    out = {"max_rel": float(np.max(np.abs(np.asarray(ours["f"]) - theirs) / theirs))}
    if "pred" in ours and ref.get("pred") is not None and len(ref["pred"]) == len(ours["pred"]):
        clear = (np.asarray(ours["gap"]) > 1e-6) & (np.asarray(ref["gap"]) > 1e-6)
        same = np.asarray(ours["pred"])[clear] == np.asarray(ref["pred"])[clear]
        out.update(pred_compared=int(clear.sum()), pred_differ=int((~same).sum()))
    return out


def main():
    p = harness.parser(__doc__, quick=None, devices=("cpu", "auto", "cuda"))
    p.add_argument("--datasets")
    p.add_argument("--features", default="meta,bow,both")
    p.add_argument("--C", default=",".join(f"{c:g}" for c in EXACT_C))
    p.add_argument("--liblinear-only", action="store_true")
    p.add_argument("--write-reference", help="store LinearSVC's objectives (JSON) for scripts/gpu_svm.py")
    args = p.parse_args()
    from gputext.backend import resolve
    from gputext.io import read_corpus
    args.quick = False
    backend = resolve(args.device)
    train, test = (read_corpus(pth) for pth in corpora(args))
    out = {"env": harness.probe(backend), "objectives": {}, "ours": {}, "liblinear": {}}
    stored = {}
    if args.write_reference and os.path.exists(args.write_reference):
        with open(args.write_reference) as fh:
            stored = json.load(fh)
    out["objectives"], preds = stored.get("objectives", {}), stored.get("predictions", {})
    for kind in args.features.split(","):
        F, Ft, y, _yt, nc = features_of(train, test, backend, kind)
        for C in (float(c) for c in args.C.split(",")):
            key = f"{kind}@{C:g}"
            if not args.liblinear_only:
                out["ours"][key] = objectives(F, y, nc, C, backend, Ft)
                harness.log(f"{key}: ours {out['ours'][key]['seconds']:.1f} s, certificate "
                            f"{max(out['ours'][key]['bound']):.1e}")
            if key not in out["objectives"]:
                ref = liblinear_objectives(F, y, C, Ft)
                out["liblinear"][key] = {k: v for k, v in ref.items() if k not in ("pred", "gap")}
                out["objectives"][key] = ref["f"]
                preds[key] = {"pred": ref["pred"], "gap": [round(g, 9) for g in ref["gap"]]}
                harness.log(f"{key}: LinearSVC {ref['seconds']:.1f} s")
            if key in out["ours"]:
                out["ours"][key].update(compare(out["ours"][key], preds.get(key, {}), out["objectives"][key]))
                harness.log(f"{key}: vs LinearSVC {json.dumps({k: out['ours'][key][k] for k in out['ours'][key] if k in ('max_rel', 'pred_compared', 'pred_differ')})}")
            if args.write_reference:
                harness.report.write_json(args.write_reference, {
                    "objectives": out["objectives"], "predictions": preds,
                    "what": "LinearSVC(dual=False, tol=1e-10, max_iter=100000) on 20NG (k = 30 meta-features, "
                            "min-max scaled; tf-idf bag of words; both): primal objective per class, test "
                            "predictions and top-two margin gaps"})
    os.makedirs(args.out, exist_ok=True)
    harness.report.write_json(os.path.join(args.out, "svm_exactness.json"), out)


if __name__ == "__main__":
    main()
