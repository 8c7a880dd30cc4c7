#!/usr/bin/env python3
"""Issue 33's LinearSVC figures: default fits of gputext.LinearSVC against scikit-learn's
LinearSVC() on 20NG (tf-idf bag of words, sparse; k = 30 meta-features, dense, min-max scaled:
svm_exactness.py's matrices, C = 1), in the same run.

Per feature set: the fit time of scikit-learn's default LinearSVC() and of gputext.LinearSVC() on
``--device`` (the solver its rule picks: on the CPU LIBLINEAR for tf-idf, TRON's CPU twin for the
meta-features; TRON on the GPU), interleaved over ``--repeats`` rounds; once each, TRON forced
(solver="tron", default tol: eps = 1e-6) where the default did not run it, and TRON with the
previous rule (eps = tol = 1e-4, i.e. tol = 1e-2 now);
each fit's primal objective per class relative to the tol-1e-10 optimum stored in
benchmarks/svm_20ng_reference.json (the max over classes).

  python scripts/svm_defaults.py --device cpu --out out/        # the 2-core VM
  python scripts/svm_defaults.py --device cuda --out out/       # the GPU host: TRON's default on the device
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

from svm_exactness import corpora, features_of, primal, with_bias  # noqa: E402

warnings.filterwarnings("ignore")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def max_rel_gap(model, F, y, C, optimum) -> float:
    """max over classes of (f(w) - f*) / f*, f the primal objective in float64 (svm_exactness.primal)."""
    W = np.vstack([model.coef_.T, model.intercept_[None, :]])
    f, _ = primal(with_bias(F), y, W, C)
    return float(np.max((f - np.asarray(optimum)) / np.asarray(optimum)))


def timed_fits(fits: dict, F, y, repeats: int) -> dict:
    """name -> (median seconds, last fitted model); the first two fits interleaved round by round
    (a loaded machine slows them alike), the others once."""
    times, models = {name: [] for name in fits}, {}
    for r in range(repeats):
        for i, (name, make) in enumerate(fits.items()):
            if r and i >= 2:
                continue
            t0 = time.perf_counter()
            models[name] = make().fit(F, y)
            times[name].append(time.perf_counter() - t0)
    return {name: (harness.median(times[name]), models[name]) for name in fits}


def main():
    p = harness.parser(__doc__, quick=None, devices=("cpu", "auto", "cuda"))
    p.add_argument("--datasets")
    p.add_argument("--features", default="bow,meta")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    from sklearn.svm import LinearSVC as SkLinearSVC

    from gputext import LinearSVC
    from gputext.backend import resolve
    from gputext.io import read_corpus
    args.quick = False
    backend = resolve(args.device)
    with open(os.path.join(ROOT, "benchmarks", "svm_20ng_reference.json")) as fh:
        reference = json.load(fh)["objectives"]
    train, test = (read_corpus(pth) for pth in corpora(args))
    out = {"env": harness.probe(backend), "rows": []}
    for kind in args.features.split(","):
        F, _, y, _, _ = features_of(train, test, resolve("cpu"), kind)
        optimum = reference[f"{kind}@1"]
        fits = {"sklearn LinearSVC()": lambda: SkLinearSVC(),
                f"gputext LinearSVC(device={args.device!r})": lambda: LinearSVC(device=args.device),
                "gputext TRON, default tol": lambda: LinearSVC(device=args.device, solver="tron"),
                "gputext TRON, eps = tol (before)": lambda: LinearSVC(device=args.device, solver="tron", tol=1e-2)}
        if LinearSVC(device=args.device)._choose_solver(F.shape[0], F.shape[1])[0] == "tron":
            del fits["gputext TRON, default tol"]  # the default fit is that one
        results = timed_fits(fits, F, y, args.repeats)
        base = results["sklearn LinearSVC()"][0]
        for name, (seconds, model) in results.items():
            row = {"features": kind, "fit": name, "seconds": seconds, "vs_sklearn": seconds / base,
                   "max_rel_objective_gap": max_rel_gap(model, F, y, 1.0, optimum),
                   "solver": getattr(model, "solver_", "liblinear"), "n_iter": int(np.max(model.n_iter_))}
            out["rows"].append(row)
            harness.log(f"{kind} | {name}: {seconds:.2f} s ({row['vs_sklearn']:.2f}x), objective "
                        f"+{row['max_rel_objective_gap']:.1e}, {row['solver']}, {row['n_iter']} iterations")
    os.makedirs(args.out, exist_ok=True)
    harness.report.write_json(os.path.join(args.out, "svm_defaults.json"), out)


if __name__ == "__main__":
    main()
