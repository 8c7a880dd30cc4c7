"""External evaluation of (overlapping) clusterings: FBcubed, overlapping NMI, purity, NMI.

Python API (all take memberships: a CSR (n_items, n_clusters) whose nonzeros say "item i is in
cluster k", a 1-d int array of hard labels with -1 = none, a Categorical, or a list of member
lists with ``n``):

    fbcubed(pred, truth)            -> {"precision", "recall", "f"}   extended BCubed (Amigo et al. 2009)
    onmi(pred, truth)               -> {"lfk", "max"}                  overlapping NMI: Lancichinetti,
                                                                        Fortunato & Kertesz 2009 ("lfk", the
                                                                        paper's [15]) and McDaid, Greene &
                                                                        Hurley 2011 ("max", NMI_max)
    nmi(pred_labels, truth_labels)  -> float   standard NMI of two hard partitions, arithmetic-mean
                                               normalisation (scikit-learn's default)
    purity(pred_labels, truth_labels) -> float
    size_histogram(pred)            -> [(lo, hi, n_clusters)] over power-of-two size bins
    evaluate(pred, truth, ...)      -> all of the above that apply
    load_clustering(path, key)      -> Clustering read from a result or corpus file

Decisions (the definitions leave them open):
- Items without any truth category cannot be judged and are left out of every measure.
- FBcubed: an item in no predicted cluster counts as a singleton cluster of its own (so it is
  neither rewarded nor punished for company it does not have); for overlapping NMI such an item
  is simply in no cluster.
- FBcubed follows Amigo et al.: for items e, e' sharing a cluster,
  multiplicity precision = min(|C(e) & C(e')|, |L(e) & L(e')|) / |C(e) & C(e')|, averaged over
  the e' sharing a cluster with e (e itself included), then over e; recall the same with the
  roles swapped; F = harmonic mean.  It is computed over groups of items with identical
  (cluster set, category set), exactly, in time proportional to sum over clusters of (number of
  such groups in the cluster)^2.
- Overlapping NMI: a cluster of probability 0 or 1 (H = 0) adds 0 to the LFK averages; NMI_max
  is 1 when both clusterings have zero entropy.  LFK's acceptance rule
  h(P11) + h(P00) > h(P01) + h(P10) is applied to every pair of clusters, including disjoint ones
  (handled by cluster-size classes, so no K x L loop).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import FormatError, InputError
from .metrics_host import bcubed_groups, conditional_entropies, same_rows, sort_rows


# ----------------------------------------------------------------------------- inputs

def as_membership(x, n: int | None = None) -> sp.csr_matrix:
    """CSR int8 (n_items, n_clusters) of 0/1 from any accepted membership form."""
    from ..io.corpus import Categorical

    if isinstance(x, Categorical):
        x = x.codes
    if sp.issparse(x):
        M = sp.csr_matrix(x)
        M.eliminate_zeros()
        M = sp.csr_matrix((np.ones(M.nnz, np.int8), M.indices, M.indptr), shape=M.shape)
        M.sum_duplicates()
        M.sort_indices()
        return M
    if isinstance(x, np.ndarray) and x.ndim == 1 or (isinstance(x, (list, tuple)) and n is None):
        labels = np.asarray(x)
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise InputError(f"hard labels must be a 1-d integer array (-1 = none), got {labels.dtype} shape {labels.shape}")
        labels = labels.astype(np.int64)
        ok = labels >= 0
        k = int(labels.max()) + 1 if ok.any() else 0
        rows = np.flatnonzero(ok)
        return sp.csr_matrix((np.ones(len(rows), np.int8), (rows, labels[ok])), shape=(len(labels), k))
    if isinstance(x, (list, tuple)):
        rows = np.concatenate([np.asarray(list(m), np.int64) for m in x]) if x else np.empty(0, np.int64)
        cols = np.concatenate([np.full(len(m), k, np.int64) for k, m in enumerate(x)]) if x else np.empty(0, np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise InputError(f"cluster members must be item indices in [0, {n})")
        M = sp.csr_matrix((np.ones(len(rows), np.int8), (rows, cols)), shape=(n, len(x)))
        M.sum_duplicates()
        M.data[:] = 1
        return M
    raise InputError(f"cannot read a clustering from {type(x).__name__}")


def _pair(pred, truth):
    P = as_membership(pred)
    T = as_membership(truth)
    if P.shape[0] != T.shape[0]:
        raise InputError(f"the clusterings cover different numbers of items: {P.shape[0]} and {T.shape[0]}")
    judged = np.diff(T.indptr) > 0
    if not judged.all():
        P, T = P[judged], T[judged]
    return P, T


def _drop_empty_columns(M: sp.csr_matrix) -> sp.csr_matrix:
    used = np.flatnonzero(np.bincount(M.indices, minlength=M.shape[1]) > 0)
    if len(used) == M.shape[1]:
        return M
    return M[:, used]


# ----------------------------------------------------------------------------- FBcubed

def _groups(P: sp.csr_matrix, T: sp.csr_matrix):
    """Groups of items with identical (cluster set, category set)."""
    n, k = P.shape
    S = sp.hstack([P, T], format="csr")
    S.sort_indices()
    ptr = S.indptr.astype(np.int64)
    idx = S.indices.astype(np.int64)
    order = sort_rows(ptr, idx)
    if n == 0:
        return np.zeros(0, np.int64), order
    # boundaries where consecutive rows differ
    a, b = order[:-1], order[1:]
    same = _same_rows(ptr, idx, a, b)
    starts = np.concatenate([[0], np.flatnonzero(~same) + 1])
    return starts, order


def _same_rows(ptr, idx, a, b):
    out = np.empty(len(a), np.bool_)
    same_rows(ptr, idx, a, b, out)
    return out


def fbcubed(pred, truth) -> dict:
    """Extended BCubed for overlapping clusterings: {"precision", "recall", "f"} in [0, 1]."""
    P, T = _pair(pred, truth)
    n = P.shape[0]
    if n == 0:
        raise InputError("no item has a truth category: nothing to evaluate")
    lonely = np.flatnonzero(np.diff(P.indptr) == 0)
    if len(lonely):  # unclustered items: singleton clusters
        extra = sp.csr_matrix((np.ones(len(lonely), np.int8), (lonely, np.arange(len(lonely)))), shape=(n, len(lonely)))
        P = sp.hstack([P, extra], format="csr")
    P = _drop_empty_columns(P)
    T = _drop_empty_columns(T)
    starts, order = _groups(P, T)
    reps = order[starts]
    weight = np.diff(np.concatenate([starts, [n]])).astype(np.int64)
    Pg, Tg = P[reps], T[reps]
    Pg.sort_indices()
    Tg.sort_indices()
    Cg = Pg.tocsc()
    Lg = Tg.tocsc()
    Cg.sort_indices()
    Lg.sort_indices()
    prec, rec = bcubed_groups(weight, Pg.indptr.astype(np.int64), Pg.indices.astype(np.int64),
                               Tg.indptr.astype(np.int64), Tg.indices.astype(np.int64),
                               Cg.indptr.astype(np.int64), Cg.indices.astype(np.int64),
                               Lg.indptr.astype(np.int64), Lg.indices.astype(np.int64))
    precision = float(np.dot(weight, prec) / n)
    recall = float(np.dot(weight, rec) / n)
    f = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return {"precision": precision, "recall": recall, "f": f}


# ----------------------------------------------------------------------------- overlapping NMI

def _entropies(sizes: np.ndarray, n: int) -> np.ndarray:
    p = sizes / n
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1)), 0.0) + np.where(p < 1, -(1 - p) * np.log2(np.where(p < 1, 1 - p, 1)), 0.0)
    return h


def _cond_all(n, X: sp.csc_matrix, Y: sp.csc_matrix) -> np.ndarray:
    size_x = np.diff(X.indptr).astype(np.int64)
    size_y = np.diff(Y.indptr).astype(np.int64)
    O = (X.T.tocsr().astype(np.int64) @ Y.tocsr().astype(np.int64)).tocsr()
    O.sort_indices()
    sizes, cls, counts = np.unique(size_y, return_inverse=True, return_counts=True)
    return conditional_entropies(n, size_x, size_y, O.indptr.astype(np.int64), O.indices.astype(np.int64),
                                  O.data.astype(np.int64), sizes.astype(np.int64), counts.astype(np.int64),
                                  cls.astype(np.int64))


def onmi(pred, truth) -> dict:
    """Overlapping NMI of two covers: {"lfk": LFK 2009, "max": McDaid et al. 2011 NMI_max}."""
    P, T = _pair(pred, truth)
    n = P.shape[0]
    if n == 0:
        raise InputError("no item has a truth category: nothing to evaluate")
    X = _drop_empty_columns(P).tocsc()
    Y = _drop_empty_columns(T).tocsc()
    hx = _entropies(np.diff(X.indptr), n)
    hy = _entropies(np.diff(Y.indptr), n)
    hx_y = _cond_all(n, X, Y)
    hy_x = _cond_all(n, Y, X)
    with np.errstate(divide="ignore", invalid="ignore"):
        rx = np.where(hx > 0, hx_y / np.where(hx > 0, hx, 1), 0.0)
        ry = np.where(hy > 0, hy_x / np.where(hy > 0, hy, 1), 0.0)
    lfk = 1.0 - 0.5 * ((rx.mean() if len(rx) else 0.0) + (ry.mean() if len(ry) else 0.0))
    HX, HY = float(hx.sum()), float(hy.sum())
    mutual = 0.5 * (HX - float(hx_y.sum()) + HY - float(hy_x.sum()))
    nmi_max = 1.0 if max(HX, HY) == 0 else mutual / max(HX, HY)
    return {"lfk": float(lfk), "max": float(nmi_max)}


# ----------------------------------------------------------------------------- hard partitions

def _hard_pair(pred_labels, truth_labels):
    a = np.asarray(pred_labels, np.int64)
    b = np.asarray(truth_labels, np.int64)
    if a.shape != b.shape or a.ndim != 1:
        raise InputError(f"hard labels must be two 1-d arrays of one length, got {a.shape} and {b.shape}")
    ok = (a >= 0) & (b >= 0)
    return a[ok], b[ok]


def contingency(pred_labels, truth_labels) -> sp.csr_matrix:
    a, b = _hard_pair(pred_labels, truth_labels)
    if len(a) == 0:
        raise InputError("no item has both a cluster and a truth label")
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    C = sp.csr_matrix((np.ones(len(a), np.int64), (ai, bi)))
    C.sum_duplicates()
    return C


def purity(pred_labels, truth_labels) -> float:
    """Fraction of items whose cluster's majority truth label is their own (items with -1 left out)."""
    C = contingency(pred_labels, truth_labels)
    return float(C.max(axis=1).toarray().sum() / C.sum())


def nmi(pred_labels, truth_labels) -> float:
    """Standard NMI, I(X;Y) / ((H(X) + H(Y)) / 2); 1.0 when both partitions are a single cluster."""
    C = contingency(pred_labels, truth_labels).tocoo()
    n = C.data.sum()
    pa = np.asarray(C.tocsr().sum(axis=1)).ravel() / n
    pb = np.asarray(C.tocsc().sum(axis=0)).ravel() / n
    ha = -np.sum(pa * np.log(pa))
    hb = -np.sum(pb * np.log(pb))
    pij = C.data / n
    mi = np.sum(pij * (np.log(pij) - np.log(pa[C.row]) - np.log(pb[C.col])))
    if ha == 0 and hb == 0:
        return 1.0
    return float(max(0.0, mi) / ((ha + hb) / 2))


# ----------------------------------------------------------------------------- summaries

def size_histogram(pred) -> list[tuple[int, int, int]]:
    """[(lo, hi, count)]: clusters with lo <= size <= hi, bins 1, 2, 3-4, 5-8, ... (non-empty only)."""
    M = as_membership(pred)
    sizes = np.bincount(M.indices, minlength=M.shape[1])
    sizes = sizes[sizes > 0]
    out = []
    if len(sizes) == 0:
        return out
    lo, hi = 1, 1
    while lo <= sizes.max():
        count = int(((sizes >= lo) & (sizes <= hi)).sum())
        if count:
            out.append((lo, hi, count))
        lo, hi = hi + 1, 2 * hi
    return out


def cluster_sizes(pred) -> np.ndarray:
    M = as_membership(pred)
    return np.bincount(M.indices, minlength=M.shape[1])


def evaluate(pred, truth, pred_labels=None, truth_labels=None) -> dict:
    """FBcubed, overlapping NMI, cluster count and sizes; purity and NMI when both are hard
    partitions (``pred_labels`` and ``truth_labels`` given as 1-d int arrays)."""
    P = as_membership(pred)
    sizes = np.bincount(P.indices, minlength=P.shape[1])
    out = {"n_items": int(P.shape[0]), "n_clusters": int((sizes > 0).sum()),
           "n_judged": int((np.diff(as_membership(truth).indptr) > 0).sum()),
           "mean_memberships": float(P.nnz / max(1, P.shape[0])),
           "fbcubed": fbcubed(P, truth), "onmi": onmi(P, truth), "size_histogram": size_histogram(P)}
    if pred_labels is not None and truth_labels is not None:
        out["purity"] = purity(pred_labels, truth_labels)
        out["nmi"] = nmi(pred_labels, truth_labels)
    return out


# ----------------------------------------------------------------------------- files

@dataclass
class Clustering:
    """One side of an evaluation read from a file: doc_ids (n,), membership CSR (n, k), hard
    labels int64 (n,) (-1 = none) when the file holds a hard partition or a single label, and
    ``source``: the HDF5 key it came from."""

    doc_ids: np.ndarray
    membership: sp.csr_matrix
    labels: np.ndarray | None
    source: str

    def take(self, rows: np.ndarray) -> "Clustering":
        return Clustering(self.doc_ids[rows], self.membership[rows], None if self.labels is None else self.labels[rows],
                          self.source)


KEYS = ("clusters", "cluster", "labels", "label")
KEY_PATHS = {"clusters": "obsm/clusters", "cluster": "obs/cluster", "labels": "obsm/labels", "label": "obs/label"}


def load_clustering(path: str, key: str = "auto", prefer=("clusters", "cluster", "labels", "label")) -> Clustering:
    """Read a clustering or a truth from a result/corpus file without reading /X or the graph.

    key: "auto" takes the first of ``prefer`` present; or one of clusters (/obsm/clusters),
    cluster (/obs/cluster), labels (/obsm/labels), label (/obs/label, categorical).
    """
    from ..io.corpus import Categorical
    from ..io.partial import present_keys, read_elements

    if key != "auto" and key not in KEYS:
        raise InputError(f"unknown clustering key {key!r}: expected auto or one of {', '.join(KEYS)}")
    found = present_keys(path, ["obs", "obs/_index"] + [KEY_PATHS[k] for k in KEYS])
    if "obs" not in found or "obs/_index" not in found:
        raise FormatError(f"{path}: /obs/_index is missing (not a gputext corpus or result file)")
    present = [k for k in KEYS if KEY_PATHS[k] in found]
    if key == "auto":
        chosen = next((k for k in prefer if k in present), None)
        if chosen is None:
            raise InputError(f"{path} has no clustering or labels: expected one of "
                             f"{', '.join('/' + KEY_PATHS[k] for k in prefer)}")
    else:
        if key not in present:
            raise InputError(f"{path}: /{KEY_PATHS[key]} is missing (found: {', '.join(present) or 'none'})")
        chosen = key
    elements = read_elements(path, ["obs/_index", KEY_PATHS[chosen]])
    doc_ids, value = elements["obs/_index"], elements[KEY_PATHS[chosen]]
    n = len(doc_ids)
    labels = None
    if chosen in ("clusters", "labels"):
        if not sp.issparse(value):
            raise FormatError(f"{path}: /{KEY_PATHS[chosen]} should be a CSR matrix")
        M = as_membership(value)
    else:
        codes = value.codes if isinstance(value, Categorical) else np.asarray(value)
        if codes.ndim != 1 or codes.dtype.kind not in "iu":
            raise FormatError(f"{path}: /{KEY_PATHS[chosen]} should hold integer codes, got {codes.dtype}")
        n_categories = len(value.categories) if isinstance(value, Categorical) else None
        if n_categories is not None and len(codes) and not (-1 <= codes.min() and codes.max() < n_categories):
            raise FormatError(f"{path}: /{KEY_PATHS[chosen]}/codes has codes outside the categories "
                              f"(expected -1 .. {n_categories - 1}, found {int(codes.min())} .. {int(codes.max())})")
        labels = codes.astype(np.int64)
        M = as_membership(labels)
    if M.shape[0] != n:
        raise FormatError(f"{path}: /{KEY_PATHS[chosen]} has {M.shape[0]} rows, expected n_docs = {n}")
    return Clustering(doc_ids, M, labels, KEY_PATHS[chosen])


def align(pred: Clustering, truth: Clustering, pred_name: str = "clusters", truth_name: str = "truth") -> tuple[Clustering, Clustering]:
    """Put the truth's rows in the prediction's document order (by doc id)."""
    if len(pred.doc_ids) == len(truth.doc_ids) and np.array_equal(pred.doc_ids, truth.doc_ids):
        return pred, truth
    where = {d: i for i, d in enumerate(truth.doc_ids)}
    if len(where) != len(truth.doc_ids):
        raise InputError(f"the {truth_name} file has duplicate document ids: cannot align by id")
    missing = [d for d in pred.doc_ids if d not in where]
    if missing:
        raise InputError(f"{len(missing)} of the {len(pred.doc_ids)} documents of the {pred_name} file are not in the "
                         f"{truth_name} file (e.g. {missing[0]!r}): expected the same documents")
    rows = np.array([where[d] for d in pred.doc_ids], np.int64)
    return pred, truth.take(rows)
