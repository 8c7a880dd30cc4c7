"""Classification metrics: F1 (micro, macro) for single- and multi-label output, and the ranking
metrics of multi-label categorisation (one-error, coverage, ranking loss, average precision).

Conventions (decisions, written down here and in docs/knn_classify.md):

- Label sets are boolean indicator matrices (n_docs, n_labels), dense or scipy sparse.
- Rankings: a document's labels are ranked by score, best first, ties broken by the lower label
  code, so every ranking is strict and deterministic; rank 1 is the top label.
- The ranking metrics skip documents with no true label (all four are undefined or trivial
  there); ranking loss and average precision follow Zhang & Zhou (2007) / Schapire & Singer (2000):
    one-error          fraction of documents whose top-ranked label is not a true label
    coverage           mean over documents of (rank of the lowest-ranked true label) - 1
    ranking loss       mean over documents of |{(y, z): y true, z false, rank(y) > rank(z)}| / (|Y| |not Y|)
                       (documents whose labels are all true are skipped)
    average precision  mean over documents of mean over true y of |{y' true: rank(y') <= rank(y)}| / rank(y)
- F1: micro = 2 TP / (2 TP + FP + FN) pooled over all (document, label) pairs; macro = mean over
  labels of 2 tp / (2 tp + fp + fn), taken over the labels that occur in the truth or in the
  predictions (a label in neither is skipped, as scikit-learn does for single-label input).
  For single-label input (every document one true and one predicted label) micro-F1 = accuracy.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import InputError


def _dense_bool(Y, name: str, shape=None) -> np.ndarray:
    A = Y.toarray() if sp.issparse(Y) else np.asarray(Y)
    if A.ndim != 2:
        raise InputError(f"{name} must be a 2-d indicator matrix, got shape {A.shape}")
    if shape is not None and A.shape != shape:
        raise InputError(f"{name} has shape {A.shape}, expected {shape}")
    return A.astype(bool)


def codes_to_indicator(codes: np.ndarray, n_labels: int) -> sp.csr_matrix:
    """int codes (n,) -> CSR bool (n, n_labels); code -1 gives an empty row."""
    codes = np.asarray(codes, dtype=np.int64)
    ok = codes >= 0
    rows = np.nonzero(ok)[0]
    return sp.csr_matrix((np.ones(rows.size, bool), (rows, codes[ok])), shape=(codes.size, n_labels))


def rank_labels(scores: np.ndarray) -> np.ndarray:
    """int32 (n, n_labels): rank (1 = best) of each label; ties -> lower label code first."""
    S = np.asarray(scores, dtype=np.float64)
    n, L = S.shape
    order = np.lexsort((np.broadcast_to(np.arange(L), S.shape), -S), axis=1)
    ranks = np.empty((n, L), np.int32)
    np.put_along_axis(ranks, order, np.arange(1, L + 1, dtype=np.int32)[None, :].repeat(n, 0), axis=1)
    return ranks


def ranking_metrics(scores: np.ndarray, Y_true) -> dict:
    """one_error, coverage, ranking_loss, average_precision (and n_docs used) for label scores
    (n, n_labels) against true label sets; see the module doc for definitions."""
    S = np.asarray(scores)
    Y = _dense_bool(Y_true, "true labels", S.shape)
    keep = Y.any(axis=1)
    out = {"documents": int(keep.sum())}
    if not keep.any():
        return {**out, "one_error": float("nan"), "coverage": float("nan"), "ranking_loss": float("nan"),
                "average_precision": float("nan")}
    R = rank_labels(S[keep])
    Y = Y[keep]
    n, L = Y.shape
    top = R.argmin(axis=1)
    out["one_error"] = float(np.mean(~Y[np.arange(n), top]))
    out["coverage"] = float(np.mean(np.where(Y, R, 0).max(axis=1) - 1))
    n_true = Y.sum(axis=1)
    n_false = L - n_true
    losses = []
    precisions = []
    for i in range(n):
        rt = np.sort(R[i, Y[i]])
        rf = R[i, ~Y[i]]
        if n_false[i]:
            # pairs (true y, false z) with rank(y) > rank(z): for each true label, false labels ranked above it
            wrong = np.searchsorted(np.sort(rf), rt).sum()
            losses.append(wrong / (n_true[i] * n_false[i]))
        precisions.append(np.mean(np.arange(1, rt.size + 1) / rt))
    out["ranking_loss"] = float(np.mean(losses)) if losses else 0.0
    out["average_precision"] = float(np.mean(precisions))
    return out


def f1_scores(Y_true, Y_pred) -> tuple[float, float]:
    """(micro-F1, macro-F1) of predicted label sets; see the module doc."""
    T = _dense_bool(Y_true, "true labels")
    P = _dense_bool(Y_pred, "predicted labels", T.shape)
    tp = (T & P).sum(axis=0).astype(np.float64)
    fp = (~T & P).sum(axis=0).astype(np.float64)
    fn = (T & ~P).sum(axis=0).astype(np.float64)
    den = 2 * tp.sum() + fp.sum() + fn.sum()
    micro = float(2 * tp.sum() / den) if den else 0.0
    used = (tp + fp + fn) > 0
    macro = float(np.mean(2 * tp[used] / (2 * tp[used] + fp[used] + fn[used]))) if used.any() else 0.0
    return micro, macro


def single_label_f1(y_true: np.ndarray, y_pred: np.ndarray, n_labels: int | None = None) -> tuple[float, float]:
    """(micro-F1, macro-F1) for one true and one predicted label code per document.

    Documents whose true code is -1 (unlabelled) are skipped.
    """
    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = np.asarray(y_pred, dtype=np.int64)
    if y_true.shape != y_pred.shape:
        raise InputError(f"{y_true.size} true labels but {y_pred.size} predictions")
    keep = y_true >= 0
    y_true, y_pred = y_true[keep], y_pred[keep]
    if y_true.size == 0:
        return float("nan"), float("nan")
    L = int(max(n_labels or 0, y_true.max() + 1, y_pred.max(initial=-1) + 1))
    return f1_scores(codes_to_indicator(y_true, L), codes_to_indicator(y_pred, L))


def multilabel_report(scores: np.ndarray, Y_true, Y_pred) -> dict:
    """Every multi-label metric at once: ranking metrics + micro/macro-F1 of the predicted sets."""
    out = ranking_metrics(scores, Y_true)
    keep = _dense_bool(Y_true, "true labels").any(axis=1)
    T = _dense_bool(Y_true, "true labels")[keep]
    P = _dense_bool(Y_pred, "predicted labels")[keep]
    out["micro_f1"], out["macro_f1"] = f1_scores(T, P) if keep.any() else (float("nan"), float("nan"))
    return out
