#!/usr/bin/env python3
"""GPU round for issue 18: the whole 20NG classification pipeline on the GPU, the linear SVM
trained by our TRON (gputext.linear), LinearSVC (LIBLINEAR) in the same run.

Sections (20NG train / test, tf-idf, k = 30, C grid 0.0625..16, C by stratified 5-fold CV):

  warmup      every kernel compiled on 300 evenly spaced documents (meta, bow, both); its seconds.
  classify    `knn classify --model svm --features meta|both|bow` in process (svm_classify:
              meta-features, 5-fold choice of C with every fold and C trained together, final fit,
              prediction): wall seconds end to end and per stage, micro/macro-F1, chosen C.
              Goals (H100): meta <= 5 s, both <= 10 s.
  cli         the same through the command line in a fresh process (imports, reading the files and
              compiling every kernel included): `gputext knn classify ... --features meta`.
  folds       `--folds 5 --features both` (the paper's protocol: per outer fold meta-features,
              inner 5-fold choice of C, fit, test). Goal <= 60 s.
  liblinear   scikit-learn's LinearSVC on the same matrices in the same run: one primal fit at the
              chosen C (meta) with its wall time, and our TRON's single fit on the device.
  exactness   the primal objective per class of our W (device, tol 1e-10) against LinearSVC's
              (dual=False, tol=1e-10) for C in {0.25, 1, 4, 16}: the reference objectives come
              from --reference (benchmarks/svm_20ng_reference.json, computed on the CPU with
              scripts/svm_exactness.py), plus the certificate f(W) - f* <= |grad f(W)|^2 / 2.

  python scripts/gpu_svm.py --device cpu --quick       # smoke test without a GPU
  python scripts/gpu_svm.py --datasets .data           # full (about 3 minutes on an H100)
  python scripts/gpu_svm.py --device cuda --datasets .data --sections warmup,classify,exactness \
      --exact-kinds meta --out $OUT/svm                # meta / both / bow end to end + meta exactness

Prints a markdown table last and writes gpu_svm.json and gpu_svm.log (the progress lines) into\n--out (default $OUT or out/).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402
from svm_exactness import compare, corpora, features_of, objectives  # noqa: E402  (20NG corpora and features, the objectives)

warnings.filterwarnings("ignore")

REPORT = harness.Report("out", {"sections": {}})
RESULTS = REPORT.results
log, row = harness.log, REPORT.row
EXACT_C = (0.25, 1.0, 4.0, 16.0)
# today's LinearSVC path on 20NG (benchmarks/RESULTS.md "SVM on 20NG", H200 host 2026-11-25, same
# C grid and folds): micro-F1, C. Goal: ours within 0.003.
LIBLINEAR_20NG = {"bow": (0.8422, 1.0), "meta": (0.8221, 4.0), "both": (0.8381, 0.25)}


def _spread(n: int, m: int) -> np.ndarray:
    """m row indices spread evenly over [0, n) (all of them when n <= m)."""
    return np.unique(np.linspace(0, n - 1, min(n, m)).astype(np.int64))


def warmup(train, test, backend):
    """Compile every kernel the timed runs use: the SVM paths on 300 documents, and the
    meta-features' grouped search on the whole training set with 100 queries. The search's kernels
    are specialised on the class sizes (block, items and merge width follow the largest class)
    and ``method auto`` takes the dense method for 300 documents but the inverted one for 20NG, so
    the small corpus alone leaves them to the first timed run (17 s on the H100, 15:14)."""
    from gputext.knn.metafeatures import compute_metafeatures
    from gputext.knn.svm import _labelled, svm_classify
    t0 = time.perf_counter()
    # evenly spaced rows: the .tab files are sorted by class, so a leading slice holds one class only
    small_tr, small_te = train.take(_spread(train.n_docs, 300)), test.take(_spread(test.n_docs, 100))
    for features in ("meta", "bow", "both"):
        svm_classify(small_tr, small_te, features, 30, C_grid=(0.25, 1.0), device=backend)
    t1 = time.perf_counter()
    y, cats = _labelled(train, "training")
    rows = np.flatnonzero(y >= 0)
    compute_metafeatures(train.X[rows], y[rows], len(cats), small_te.X, k=30, device=backend, train_rows=False)
    return {"seconds": time.perf_counter() - t0, "grouped_search_seconds": time.perf_counter() - t1}


def classify(train, test, backend, quick):
    from gputext.knn.metafeatures import compute_metafeatures  # noqa: F401  (import time kept out)
    from gputext.knn.svm import svm_classify
    out = {}
    goals = {"meta": 5.0, "both": 10.0, "bow": None}
    for features in ("meta", "both", "bow"):
        t0 = time.perf_counter()
        res = svm_classify(train, test, features, 30, device=backend)
        wall = time.perf_counter() - t0
        out[features] = {"seconds": wall, "stages": res.seconds, "C": res.info["C"], **res.metrics,
                         "cv_accuracy": res.info["cv_accuracy"], "tron": res.info.get("tron")}
        tron = res.info.get("tron") or {}
        if "hess_products" in tron:
            row("classify", f"--features {features}: Hessian products / device launches / read-backs",
                f"{tron['hess_products']} / {tron.get('device_launches', '-')} / {tron.get('device_read_backs', '-')}")
        goal = goals[features]
        row("classify", f"--features {features}: end to end (s)", f"{wall:.2f}",
            (f"goal <= {goal:g} s; " if goal and not quick else "") +
            f"meta-features {res.seconds['metafeatures']:.2f}, SVM {res.seconds['svm_train']:.2f}, "
            f"predict {res.seconds['svm_predict']:.3f}")
        ref_f1, ref_C = LIBLINEAR_20NG[features]
        row("classify", f"--features {features}: micro / macro-F1", f"{res.metrics['micro_f1']:.4f} / "
            f"{res.metrics['macro_f1']:.4f}", f"C = {res.info['C']:g}" + ("" if quick else
            f"; LinearSVC path (RESULTS.md) {ref_f1:.4f} at C = {ref_C:g}, goal within 0.003"))
    return out


def cli(args, tr_path, te_path, device):
    out = {}
    for features in ("meta",):
        cmd = [sys.executable, "-m", "gputext", "knn", "classify", "--train", tr_path, "--test", te_path, "-k", "30",
               "--model", "svm", "--features", features, "--device", device, "-q"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=os.getcwd())
        wall = time.perf_counter() - t0
        out[features] = {"seconds": wall, "rc": proc.returncode, "output": (proc.stdout + proc.stderr)[-400:]}
        row("cli", f"gputext knn classify --features {features}, fresh process (s)", f"{wall:.2f}",
            "imports, reading, compiling every kernel included" + ("" if proc.returncode == 0 else " FAILED"))
    return out


def folds(train, test, backend, quick):
    from gputext.knn.svm import cross_validation_protocol
    t0 = time.perf_counter()
    rep = cross_validation_protocol(train, test, 5, "svm", "both", 30, device=backend)
    wall = time.perf_counter() - t0
    row("folds", "--folds 5 --features both (s)", f"{wall:.1f}", "" if quick else "goal <= 60 s")
    row("folds", "micro / macro-F1 (mean +- std)", f"{rep['micro_f1_mean']:.4f} +- {rep['micro_f1_std']:.4f} / "
        f"{rep['macro_f1_mean']:.4f} +- {rep['macro_f1_std']:.4f}")
    return {"seconds": wall, **{k: v for k, v in rep.items() if k != "folds"}, "folds": rep["folds"]}


def liblinear(train, test, backend, C):
    from sklearn.svm import LinearSVC as SkLinearSVC

    from gputext.knn.multilabel import single_label_f1
    from gputext.knn.svm import PRIMAL_TOL
    from gputext.estimators.svm import LinearSVC
    F, Ft, y, yt, nc = features_of(train, test, backend, "meta")
    t0 = time.perf_counter()
    ref = SkLinearSVC(C=C, dual=False, tol=PRIMAL_TOL, max_iter=5000).fit(F, y)
    t_ref = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = LinearSVC(C=C, tol=PRIMAL_TOL, device=backend).fit(F, y)
    t_ours = time.perf_counter() - t0
    f_ref = single_label_f1(yt, ref.predict(Ft), nc)
    f_ours = single_label_f1(yt, ours.predict(Ft), nc)
    row("liblinear", f"meta, one fit at C = {C:g}: LinearSVC / ours (s)", f"{t_ref:.2f} / {t_ours:.3f}",
        f"{t_ref / t_ours:.1f}x; micro-F1 {f_ref[0]:.4f} / {f_ours[0]:.4f}")
    return {"C": C, "liblinear_seconds": t_ref, "tron_seconds": t_ours, "liblinear_f1": f_ref, "tron_f1": f_ours}


def exactness(train, test, backend, reference_path, kinds=("meta", "bow", "both")):
    ref = {"objectives": {}, "predictions": {}}
    if reference_path and os.path.exists(reference_path):
        with open(reference_path) as fh:
            ref = json.load(fh)
    out = {}
    for kind in kinds:
        F, Ft, y, _yt, nc = features_of(train, test, backend, kind)
        for C in EXACT_C:
            mine = objectives(F, y, nc, C, backend, Ft)
            key = f"{kind}@{C:g}"
            entry = {"ours": mine["f"], "bound": mine["bound"], "seconds": mine["seconds"]}
            if key in ref["objectives"]:
                entry.update(compare(mine, ref["predictions"].get(key, {}), ref["objectives"][key]))
            out[key] = entry
            note = (f"certificate max (f - f*) / f <= {max(mine['bound']):.1e}; fit {mine['seconds']:.2f} s"
                    + (f"; test predictions differ {entry['pred_differ']} of {entry['pred_compared']} without a tie"
                       if "pred_compared" in entry else ""))
            value = f"{entry['max_rel']:.1e}" if "max_rel" in entry else "no reference"
            row("exactness", f"{key}: max relative objective difference vs LinearSVC(tol 1e-10)", value,
                note + "; goal <= 1e-6")
    return out


class _Tee:
    """stderr also written to a file (the run's log under --out)."""

    def __init__(self, stream, fh):
        self.stream, self.fh = stream, fh

    def write(self, text):
        self.fh.write(text)
        self.fh.flush()
        return self.stream.write(text)

    def flush(self):
        self.fh.flush()
        self.stream.flush()


def main():
    p = harness.parser(__doc__)
    p.add_argument("--datasets", help="folder with 20newsgroups/ (default .data, $GPUTEXT_DATASETS, ../shared/datasets)")
    p.add_argument("--sections", default="warmup,classify,cli,folds,liblinear,exactness")
    p.add_argument("--exact-kinds", default="meta,bow,both", help="feature sets of the exactness section")
    p.add_argument("--reference", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks",
                                                       "svm_20ng_reference.json"))
    args = p.parse_args()
    if args.datasets is None and os.path.isdir(".data"):
        args.datasets = ".data"
    REPORT.out = args.out
    os.makedirs(args.out, exist_ok=True)
    sys.stderr = _Tee(sys.stderr, open(os.path.join(args.out, "gpu_svm.log"), "a"))  # the progress lines, kept
    from gputext.backend import resolve
    from gputext.io import read_corpus
    backend = resolve(args.device)
    RESULTS["env"] = harness.probe(backend)
    tr_path, te_path = corpora(args)
    train, test = read_corpus(tr_path), read_corpus(te_path)
    sections = args.sections.split(",")
    S = RESULTS["sections"]
    for name, fn, fargs in (("warmup", warmup, (train, test, backend)),
                            ("classify", classify, (train, test, backend, args.quick)),
                            ("cli", cli, (args, tr_path, te_path, backend.name)),
                            ("folds", folds, (train, test, backend, args.quick))):
        if name in sections:
            REPORT.section(name, fn, *fargs, key="sections", timed=True)
    if "liblinear" in sections:
        C = S.get("classify", {}).get("meta", {}).get("C", 1.0)
        REPORT.section("liblinear", liblinear, train, test, backend, C, key="sections", timed=True)
    if "exactness" in sections:
        REPORT.section("exactness", exactness, train, test, backend, args.reference, args.exact_kinds.split(","),
                       key="sections", timed=True)
    REPORT.write("gpu_svm.json", f"# gpu_svm ({RESULTS['env'].get('device', backend.name)})\n\n" + REPORT.rows_md())


if __name__ == "__main__":
    main()
