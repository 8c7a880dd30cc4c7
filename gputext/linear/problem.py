"""The training problem of the one-vs-rest squared-hinge SVM: feature blocks, rows and columns.

A feature matrix is one or two column blocks, [sparse | dense] (bag of words, meta-features, or
both side by side), plus an optional bias column of constant value ``bias`` appended to the last
block (LIBLINEAR's -B: instance x becomes [x; bias], the bias weight is regularised like any
other, which is what scikit-learn's LinearSVC does with fit_intercept=True and
intercept_scaling = bias). The weight matrix W is (n_features, k), rows in block order.

Columns: column j is class ``cls[j]`` against the rest, trained on the rows whose fold differs
from ``group[j]`` (group -1: all rows). A plain fit has k = n_classes columns of group -1 (one
column for two classes, as LIBLINEAR: +1 is the second class); cross-validation adds a group per
fold, so every fold and the final fit share the products.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass
class Blocks:
    """Feature blocks in kernel dtypes. sparse: canonical CSR float32 (n, ms) or None; dense:
    (n, md) float32 C-contiguous or None. The bias column is already appended."""

    sparse: sp.csr_matrix | None
    dense: np.ndarray | None

    @property
    def n_rows(self) -> int:
        return (self.sparse if self.sparse is not None else self.dense).shape[0]

    @property
    def n_sparse(self) -> int:
        return 0 if self.sparse is None else self.sparse.shape[1]

    @property
    def n_features(self) -> int:
        return self.n_sparse + (0 if self.dense is None else self.dense.shape[1])


def make_blocks(X, bias: float = 1.0) -> Blocks:
    """Blocks of X: a scipy sparse matrix, a dense array, or a pair (sparse, dense) meaning
    hstack([sparse, dense]). ``bias`` > 0 appends a column of that value to the last block."""
    if isinstance(X, Blocks):
        return X
    if isinstance(X, (tuple, list)):
        sparse, dense = X
    elif sp.issparse(X):
        sparse, dense = X, None
    else:
        sparse, dense = None, X
    if sparse is not None:
        sparse = sp.csr_matrix(sparse, dtype=np.float32)
        sparse.sum_duplicates()
        sparse.sort_indices()
    if dense is not None:
        dense = np.asarray(dense, dtype=np.float32)
        if dense.ndim != 2:
            raise ValueError(f"dense features must be 2-d, got shape {dense.shape}")
    if sparse is not None and dense is not None and sparse.shape[0] != dense.shape[0]:
        raise ValueError(f"sparse and dense blocks have {sparse.shape[0]} and {dense.shape[0]} rows")
    if bias > 0:
        if dense is not None:
            dense = np.hstack([dense, np.full((dense.shape[0], 1), bias, np.float32)])
        else:
            col = sp.csr_matrix(np.full((sparse.shape[0], 1), bias, np.float32))
            sparse = sp.hstack([sparse, col], format="csr", dtype=np.float32)
    if dense is not None:
        dense = np.ascontiguousarray(dense)
    return Blocks(sparse, dense)


@dataclass
class Columns:
    """Per-column class and fold group (int32, (k,)), per-row labels and folds (int32, (n,))."""

    cls: np.ndarray
    group: np.ndarray
    labels: np.ndarray
    folds: np.ndarray

    @property
    def k(self) -> int:
        return self.cls.shape[0]

    def train_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(positives, training rows) per column."""
        lab, fold = self.labels, self.folds
        pos = np.empty(self.k, np.int64)
        tot = np.empty(self.k, np.int64)
        for j, (c, g) in enumerate(zip(self.cls, self.group)):
            rows = (lab >= 0) & (fold != g)
            tot[j] = rows.sum()
            pos[j] = (rows & (lab == c)).sum()
        return pos, tot


def one_vs_rest_classes(n_classes: int) -> np.ndarray:
    """Classes that get a column: all of them, or only class 1 for a two-class problem (LIBLINEAR)."""
    return np.array([1], np.int32) if n_classes == 2 else np.arange(n_classes, dtype=np.int32)


def make_columns(labels: np.ndarray, n_classes: int, folds: np.ndarray | None = None,
                 groups=(-1,)) -> Columns:
    """Columns for every (group, class) pair, group-major: group g's columns are
    [g_index * n_cols, (g_index + 1) * n_cols)."""
    per = one_vs_rest_classes(n_classes)
    groups = np.asarray(groups, np.int32)
    cls = np.tile(per, groups.size).astype(np.int32)
    group = np.repeat(groups, per.size).astype(np.int32)
    labels = np.ascontiguousarray(labels, dtype=np.int32)
    folds = np.full(labels.shape[0], -2, np.int32) if folds is None else np.ascontiguousarray(folds, dtype=np.int32)
    return Columns(cls, group, labels, folds)


def stopping_eps(tol: float, columns: Columns) -> np.ndarray:
    """LIBLINEAR's -s 2 tolerance per column: tol * max(min(pos, neg), 1) / l, relative to |grad f(0)|."""
    pos, tot = columns.train_counts()
    return tol * np.maximum(np.minimum(pos, tot - pos), 1) / np.maximum(tot, 1)


def decide(scores: np.ndarray, n_classes: int) -> np.ndarray:
    """Class codes from one group's column scores (n, n_cols): argmax (ties: the lower class), or
    for two classes class 1 where the score is > 0 (as LIBLINEAR and LinearSVC)."""
    if n_classes == 2:
        return (scores[:, 0] > 0).astype(np.int32)
    return np.argmax(scores, axis=1).astype(np.int32)


def decision_scores(X, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    """X coef^T + intercept (n, n_cols) float64; X dense, sparse, or a (sparse, dense) pair."""
    parts = X if isinstance(X, (tuple, list)) else (X,)
    out = np.zeros((parts[0].shape[0], coef.shape[0]))
    off = 0
    for P in parts:
        block = coef[:, off:off + P.shape[1]].T
        out += np.asarray(P @ block) if sp.issparse(P) else np.asarray(P, np.float64) @ block
        off += P.shape[1]
    if off != coef.shape[1]:
        raise ValueError(f"X has {off} features, the model {coef.shape[1]}")
    return out + intercept
