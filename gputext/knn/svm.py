"""A linear SVM (LIBLINEAR's -s 2 problem) on bag of words, kNN meta-features, or both.

    from gputext.knn.svm import svm_classify, cross_validation_protocol, fit_svm
    result = svm_classify(train, test, features="meta", k=30)     # C by 5-fold CV on the training set
    report = cross_validation_protocol(corpus, n_folds=5, features="both")  # the GT-kNN paper's protocol
    model, C, cv = fit_svm(X, y, C=1.0, solver="tron", device="auto")   # weights: model.coef_, .intercept_

Decisions (also in docs/knn_classify.md):
- Two trainers. ``solver="tron"`` (default): gputext.linear, our TRON on the device or the CPU
  twin, every class, CV fold and the final fit as columns of one W, the C grid walked upwards
  with warm starts; primal tolerance PRIMAL_TOL for every feature set (bag of words included);
  the same folds and the same choice of C as below. ``solver="liblinear"``: scikit-learn's
  LinearSVC as described next (the previous behaviour).
- LinearSVC: L2 penalty, squared hinge loss, one-vs-rest, max_iter 5000. Meta-features and
  "both" are solved in the primal (LIBLINEAR -s 2, dual=False), bag of words in the dual (-s 1):
  measured on 1,200 20NG documents, the dual took 48-156 s per fit on meta/both (hitting the
  iteration limit) and the primal 4-27 s; on bag of words the dual took 0.2-0.4 s, the primal
  2.4-3.5 s.
- Stopping tolerance (``svm_tol``): the dual (bag of words) stops at LIBLINEAR's own default eps
  0.1 for -s 1, the primal (meta, both) at 1e-3 (LIBLINEAR's default for -s 2 is 0.01,
  scikit-learn's LinearSVC default tol is 1e-4 for both). Measured on 20NG (11,293 training
  documents, k = 30 meta-features, one fit, test micro/macro-F1, 2-core VM, 2026-11-25):
  bow C=1 dual: tol 1e-4 0.43 s 0.8415/0.8345, tol 0.1 0.29 s 0.8422/0.8352;
  meta C=1 primal: 1e-4 36.8 s 0.8248/0.8179, 1e-3 0.8260/0.8192, 1e-2 13.7 s 0.8173/0.8102;
  meta C=16 primal: 1e-4 135.4 s (287 iterations) 0.8107/0.8037, 1e-3 38.8 s 0.8229/0.8162,
  1e-2 13.3 s 0.8193/0.8122; both C=0.25 primal: 1e-4 42.3 s 0.8390/0.8324, 1e-3 40.5 s
  0.8386/0.8320, 1e-2 19.3 s 0.8255/0.8188. LIBLINEAR's 0.01 costs the primal 0.008-0.014
  micro-F1, so it is not used there; 1e-3 keeps the micro-F1 within 0.001 (or better) and cuts
  the slow large-C fits of the cross-validation 3.5x.
- C is chosen by stratified 5-fold cross-validation on the training set (shuffled, seeded) from
  ``DEFAULT_C_GRID`` by mean accuracy (= micro-F1); ties -> the smaller C.
- Meta-features are min-max scaled per column to [0, 1] with the training set's range (test
  values may fall outside); bag of words is used as stored (tf-idf rows of unit length);
  "both" is the horizontal concatenation [bag of words | scaled meta-features].
- The folds protocol pools the given corpora (train, plus test when given), splits them into
  n_folds stratified folds, and for each fold computes meta-features with the other folds as
  the training set (leave-one-out for them), selects C by inner 5-fold CV, trains and tests;
  it reports each fold and the mean and sample standard deviation (ddof 1) of micro/macro-F1.
  The stored tf-idf weights are reused in every fold (idf is not recomputed per fold).
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..backend import Backend, as_backend
from ..errors import InputError
from ..io.corpus import Corpus, check_same_vocabulary
from ..linear.folds import fold_splits, stratified_test_folds
from ..linear.problem import decide, decision_scores
from .classify import ClassifyResult, align_codes, single_labels
from .metafeatures import compute_metafeatures
from .multilabel import single_label_f1

FEATURES = ("meta", "bow", "both")
SOLVERS = ("tron", "liblinear")
DEFAULT_C_GRID = (0.0625, 0.25, 1.0, 4.0, 16.0)
DUAL_TOL = 0.1  # LIBLINEAR's default eps for -s 1 (bag of words)
MAX_C = 1e10  # larger C: a hard margin in all but name; at 1e100 TRON runs on, at 1e300 it overflows (check_C)
PRIMAL_TOL = 1e-3  # meta / both (-s 2); LIBLINEAR's 0.01 loses micro-F1 on 20NG (module docstring)


def svm_tol(dual: bool) -> float:
    """LinearSVC's stopping tolerance for the solver (see the module docstring's figures)."""
    return DUAL_TOL if dual else PRIMAL_TOL


@dataclass
class MinMax:
    """Per-column min-max scaling fitted on training rows."""

    low: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, F: np.ndarray) -> "MinMax":
        low = F.min(axis=0) if F.shape[0] else np.zeros(F.shape[1], F.dtype)
        span = (F.max(axis=0) - low) if F.shape[0] else np.ones(F.shape[1], F.dtype)
        return cls(low.astype(np.float64), np.where(span > 0, 1.0 / np.where(span > 0, span, 1), 0.0))

    def transform(self, F: np.ndarray) -> np.ndarray:
        return ((F - self.low) * self.scale).astype(np.float32)


def feature_matrix(kind: str, bow: sp.csr_matrix, meta: np.ndarray | None, scaler: MinMax | None):
    """The SVM's input rows: CSR for bow, dense float32 for meta, the pair (CSR, dense) for both
    (hstack: fit_svm's liblinear solver stacks it, the tron solver keeps the blocks apart)."""
    if kind == "bow":
        return sp.csr_matrix(bow)
    scaled = scaler.transform(meta)
    if kind == "meta":
        return scaled
    return sp.csr_matrix(bow), scaled


def stacked(F):
    """One matrix for scikit-learn: a (sparse, dense) pair of feature_matrix("both") hstacked as CSR;
    anything else as it is."""
    if isinstance(F, tuple):
        return sp.hstack([sp.csr_matrix(F[0]), sp.csr_matrix(F[1])], format="csr")
    return F


def _n_jobs(n_tasks: int, n_jobs: int | None) -> int:
    if n_jobs is not None:
        return max(1, int(n_jobs))
    return max(1, min(n_tasks, os.cpu_count() or 1))


def check_C(C: float, what: str = "C") -> float:
    """C as a float in (0, MAX_C]; nan, infinities and larger values are refused (at C = 1e300 the
    squared hinge overflows and the SVM predicts one class)."""
    C = float(C)
    if not 0 < C <= MAX_C:  # false for nan too
        raise InputError(f"{what} {C:g}: expected a positive number up to {MAX_C:g}")
    return C


def _check_grid(C_grid) -> list:
    grid = sorted(check_C(c, "the C grid's value") for c in C_grid)
    if not grid:
        raise InputError(f"the C grid must hold positive numbers, got {C_grid!r}")
    return grid


def fit_svm(F, y: np.ndarray, C: float | None = None, C_grid=DEFAULT_C_GRID, cv_folds: int = 5, seed: int = 0,
            solver: str = "tron", device: str | Backend = "auto", tol: float | None = None, n_jobs: int | None = None,
            dual: bool = False):
    """(fitted model, chosen C, {C: mean CV accuracy}). With ``C`` given, no CV.

    solver "tron": a TronModel (our TRON, on ``device``; all folds and the final fit
    trained together along the C grid, warm starts), tolerance ``tol`` (default PRIMAL_TOL);
    F may be a (sparse, dense) pair meaning hstack. solver "liblinear": scikit-learn's LinearSVC
    with GridSearchCV on the CPU (``dual`` as chosen by the caller, ``n_jobs`` processes).
    The model has predict / decision_function / coef_ / intercept_ / classes_ either way.
    """
    if solver not in SOLVERS:
        raise InputError(f"--solver {solver!r}: expected one of {', '.join(SOLVERS)}")
    classes = np.unique(y)
    if classes.size < 2:
        raise InputError(f"the SVM needs at least 2 classes in the training set, got {classes.size}")
    if C is not None:
        C = check_C(C)
    if solver == "tron":
        return _fit_tron(F, y, C, C_grid, cv_folds, seed, device, PRIMAL_TOL if tol is None else tol)
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import LinearSVC
    F = stacked(F)
    tol = svm_tol(dual) if tol is None else tol
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning, and classes smaller than the folds
        if C is not None:
            model = LinearSVC(C=float(C), dual=dual, tol=tol, max_iter=5000).fit(F, y)
            return model, float(C), {}
        grid = _check_grid(C_grid)
        search = GridSearchCV(LinearSVC(dual=dual, tol=tol, max_iter=5000), {"C": grid},
                              cv=fold_splits(stratified_test_folds(y, cv_folds, seed), cv_folds),
                              scoring="accuracy", n_jobs=_n_jobs(len(grid) * cv_folds, n_jobs), refit=True,
                              error_score="raise")
        search.fit(F, y)
    scores = dict(zip(grid, (float(s) for s in search.cv_results_["mean_test_score"])))
    return search.best_estimator_, float(search.best_params_["C"]), scores


@dataclass
class TronModel:
    """The TRON solver's one-vs-rest model (scikit-learn's LinearSVC attributes, without importing
    scikit-learn: a command line process saves its import). coef_ (n_cols, n_features) and
    intercept_ (n_cols,) float64, classes_ (n_classes,); info_: TRON's work."""

    classes_: np.ndarray
    coef_: np.ndarray
    intercept_: np.ndarray
    info_: dict

    @property
    def n_features_in_(self) -> int:
        return self.coef_.shape[1]

    def decision_function(self, X) -> np.ndarray:
        """As LinearSVC: (n,) for two classes (positive: classes_[1]), else (n, n_classes)."""
        scores = decision_scores(X, self.coef_, self.intercept_)
        return scores[:, 0] if self.classes_.size == 2 else scores

    def predict(self, X) -> np.ndarray:
        return self.classes_[decide(decision_scores(X, self.coef_, self.intercept_), self.classes_.size)]


def _fit_tron(F, y, C, C_grid, cv_folds: int, seed: int, device, tol: float):
    """fit_svm's tron solver: one train_path over the grid (or the given C) with every CV fold."""
    from ..linear.solver import train_path

    classes, codes = np.unique(y, return_inverse=True)
    codes = codes.astype(np.int32)
    backend = as_backend(device)
    if C is not None:
        grid, folds, n_folds = [float(C)], None, 0
    else:
        grid = _check_grid(C_grid)
        folds = stratified_test_folds(codes, cv_folds, seed)  # StratifiedKFold's folds, without scikit-learn
        n_folds = cv_folds
    res = train_path(F, codes, classes.size, grid, folds, n_folds, tol=tol, device=backend)
    chosen = float(C) if C is not None else res.C
    W = res.weights[chosen]
    model = TronModel(classes, W[:-1].T.copy(), W[-1].copy(), res.info)
    return model, chosen, dict(res.mean_accuracy)


def _labelled(corpus: Corpus, what: str, categories=None) -> tuple[np.ndarray, np.ndarray]:
    """(codes (n,), categories): the corpus's single labels, in ``categories`` numbering if given."""
    cat = single_labels(corpus, what)
    if categories is None:
        return np.asarray(cat.codes, np.int64), np.asarray(cat.categories, dtype=object)
    return align_codes(cat, categories), np.asarray(categories, dtype=object)


def svm_classify(train: Corpus, test: Corpus, features: str = "meta", k: int = 30, C_grid=DEFAULT_C_GRID,
                 C: float | None = None, cv_folds: int = 5, method: str = "auto", device: str | Backend = "auto",
                 seed: int = 0, n_jobs: int | None = None, quiet: bool = True, metafeatures=None,
                 solver: str = "tron") -> ClassifyResult:
    """Train on ``train`` (C by CV) and predict ``test``; metrics when the test set is labelled.

    ``metafeatures``: a MetaFeatures already computed for (the labelled rows of) train and test
    with the same k (e.g. to run "meta" and "both" without computing them twice).
    """
    if features not in FEATURES:
        raise InputError(f"--features {features!r}: expected one of {', '.join(FEATURES)}")
    check_same_vocabulary(train, test, "training", "test")
    backend = as_backend(device)
    y_all, categories = _labelled(train, "training")
    rows = np.nonzero(y_all >= 0)[0]
    if rows.size == 0:
        raise InputError("the training corpus has no labelled document")
    y = y_all[rows]
    res = ClassifyResult(categories=categories)
    t0 = time.perf_counter()
    meta_tr = meta_te = None
    scaler = None
    if features != "bow":
        mf = metafeatures or compute_metafeatures(train.X[rows], y, len(categories), test.X, k=k, method=method,
                                                  device=backend, categories=categories, quiet=quiet)
        if mf.train.shape[0] != rows.size or mf.queries.shape[0] != test.n_docs:
            raise InputError(f"precomputed meta-features have {mf.train.shape[0]} + {mf.queries.shape[0]} rows, "
                             f"expected {rows.size} + {test.n_docs}")
        meta_tr, meta_te = mf.train, mf.queries
        scaler = MinMax.fit(meta_tr)
        res.info.update(metafeatures=mf.info)
    res.seconds["metafeatures"] = time.perf_counter() - t0
    F_tr = feature_matrix(features, train.X[rows], meta_tr, scaler)
    F_te = feature_matrix(features, test.X, meta_te, scaler)
    t1 = time.perf_counter()
    model, chosen_C, cv_scores = fit_svm(F_tr, y, C, C_grid, cv_folds, seed, solver, backend, n_jobs=n_jobs,
                                         dual=features == "bow")
    res.seconds["svm_train"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    res.predicted = model.predict(F_te if solver == "tron" else stacked(F_te)).astype(np.int32)
    res.seconds["svm_predict"] = time.perf_counter() - t2
    res.seconds["total"] = time.perf_counter() - t0
    res.info.update(model="svm", features=features, C=chosen_C, cv_accuracy=cv_scores, k=int(k),
                    backend=backend.name, solver=solver)
    if getattr(model, "info_", None) is not None:
        res.info["tron"] = model.info_  # TRON's work: iterations, CG steps, Hessian products, device counters
    if test.labels is not None:
        truth = align_codes(test.labels, categories)
        micro, macro = single_label_f1(truth, res.predicted, len(categories))
        res.metrics = {"micro_f1": micro, "macro_f1": macro, "documents": int((truth >= 0).sum())}
    return res


def pool(train: Corpus, test: Corpus | None) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """(X, codes, categories) of train (+ test, labels mapped to the training categories)."""
    y, categories = _labelled(train, "training")
    if test is None:
        return train.X, y, categories
    check_same_vocabulary(train, test, "training", "test")
    yt, _ = _labelled(test, "test", categories)
    if (yt >= len(categories)).any():
        extra = sorted({str(test.labels.categories[c]) for c in test.labels.codes if c >= 0} - {str(c) for c in categories})
        categories = np.concatenate([categories, np.asarray(extra, dtype=object)])
        yt, _ = _labelled(test, "test", categories)
    return sp.vstack([train.X, test.X], format="csr"), np.concatenate([y, yt]), categories


def cross_validation_protocol(train: Corpus, test: Corpus | None = None, n_folds: int = 5, model: str = "svm",
                              features: str = "meta", k: int = 30, C_grid=DEFAULT_C_GRID, C: float | None = None,
                              method: str = "auto", device: str | Backend = "auto", seed: int = 0,
                              n_jobs: int | None = None, quiet: bool = True, solver: str = "tron") -> dict:
    """The GT-kNN paper's protocol: n_folds stratified folds over the pooled corpora; per fold the
    model is trained on the other folds and tested on it. Returns per-fold and summary figures."""
    from .classify import find_neighbours, weighted_vote

    if n_folds < 2:
        raise InputError(f"--folds must be at least 2, got {n_folds}")
    X, y_all, categories = pool(train, test)
    keep = np.nonzero(y_all >= 0)[0]
    X, y_all = X[keep], y_all[keep]
    backend = as_backend(device)
    folds = []
    splits = fold_splits(stratified_test_folds(y_all, n_folds, seed), n_folds)  # StratifiedKFold's
    for f, (tr, te) in enumerate(splits):
        t0 = time.perf_counter()
        y_tr = y_all[tr]
        entry = {"fold": f + 1, "n_train": int(tr.size), "n_test": int(te.size)}
        if model == "vote":
            idx, sc = find_neighbours(X[tr], X[te], k, "cosine", method, backend, quiet=True)
            pred = weighted_vote(idx, sc, y_tr, len(categories))
        else:
            meta_tr = meta_te = scaler = None
            if features != "bow":
                mf = compute_metafeatures(X[tr], y_tr, len(categories), X[te], k=k, method=method, device=backend)
                meta_tr, meta_te = mf.train, mf.queries
                scaler = MinMax.fit(meta_tr)
                entry["metafeatures_seconds"] = mf.info["seconds"]
            svm, chosen, _ = fit_svm(feature_matrix(features, X[tr], meta_tr, scaler), y_tr, C, C_grid, 5, seed,
                                     solver, backend, n_jobs=n_jobs, dual=features == "bow")
            pred = svm.predict(feature_matrix(features, X[te], meta_te, scaler))
            entry["C"] = chosen
        entry["micro_f1"], entry["macro_f1"] = single_label_f1(y_all[te], pred, len(categories))
        entry["seconds"] = time.perf_counter() - t0
        folds.append(entry)
        if not quiet:
            from ..progress import info
            info(f"fold {f + 1}/{n_folds}: micro-F1 {entry['micro_f1']:.4f}  macro-F1 {entry['macro_f1']:.4f}  "
                 f"({entry['seconds']:.1f} s)")
    micro = np.array([e["micro_f1"] for e in folds])
    macro = np.array([e["macro_f1"] for e in folds])
    return {"model": model, "features": features if model == "svm" else None, "k": int(k), "n_folds": n_folds,
            "solver": solver if model == "svm" else None,
            "folds": folds, "micro_f1_mean": float(micro.mean()), "micro_f1_std": float(micro.std(ddof=1)),
            "macro_f1_mean": float(macro.mean()), "macro_f1_std": float(macro.std(ddof=1)),
            "seconds": float(sum(e["seconds"] for e in folds))}
