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


def objectives(F, y, n_classes, C, backend) -> dict:
    """Our W at tol 1e-10 on ``backend``: per-class f, the certificate bound / f, seconds."""
    from gputext.linear.solver import train_path
    t0 = time.perf_counter()
    W = train_path(F, y, n_classes, [C], tol=1e-10, device=backend).weights[C]
    seconds = time.perf_counter() - t0
    f, g = primal(with_bias(F), y, W, C)
    return {"f": f.tolist(), "bound": (0.5 * g * g / f).tolist(), "seconds": seconds}


def liblinear_objectives(F, y, C) -> dict:
    from sklearn.svm import LinearSVC
    t0 = time.perf_counter()
    X = sp.hstack([sp.csr_matrix(F[0]), sp.csr_matrix(F[1])], format="csr") if isinstance(F, tuple) else F
    m = LinearSVC(C=C, dual=False, tol=1e-10, max_iter=100000).fit(X, y)
    W = np.vstack([m.coef_.T, m.intercept_[None, :]])
    f, g = primal(with_bias(F), y, W, C)
    return {"f": f.tolist(), "bound": (0.5 * g * g / f).tolist(), "seconds": time.perf_counter() - t0}


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
    from gpu_svm import corpora, features_of
    args.quick = False
    backend = resolve(args.device)
    train, test = (read_corpus(pth) for pth in corpora(args))
    out = {"env": harness.probe(backend), "objectives": {}, "ours": {}, "liblinear": {}}
    if args.write_reference and os.path.exists(args.write_reference):
        with open(args.write_reference) as fh:
            out["objectives"] = json.load(fh).get("objectives", {})
    for kind in args.features.split(","):
        F, _Ft, y, _yt, nc = features_of(train, test, backend, kind)
        for C in (float(c) for c in args.C.split(",")):
            key = f"{kind}@{C:g}"
            if not args.liblinear_only:
                out["ours"][key] = objectives(F, y, nc, C, backend)
                harness.log(f"{key}: ours {out['ours'][key]['seconds']:.1f} s, certificate "
                            f"{max(out['ours'][key]['bound']):.1e}")
            if key not in out["objectives"]:
                ref = liblinear_objectives(F, y, C)
                out["liblinear"][key] = ref
                out["objectives"][key] = ref["f"]
            if key in out["ours"]:
                rel = np.abs(np.asarray(out["ours"][key]["f"]) - np.asarray(out["objectives"][key])) / np.asarray(out["objectives"][key])
                out["ours"][key]["max_rel"] = float(rel.max())
                harness.log(f"{key}: max relative objective difference vs LinearSVC {rel.max():.2e}")
            if args.write_reference:
                harness.report.write_json(args.write_reference, {"objectives": out["objectives"],
                                                                 "what": "LinearSVC(dual=False, tol=1e-10) primal "
                                                                 "objective per class, 20NG, k = 30"})
    os.makedirs(args.out, exist_ok=True)
    harness.report.write_json(os.path.join(args.out, "svm_exactness.json"), out)


if __name__ == "__main__":
    main()
