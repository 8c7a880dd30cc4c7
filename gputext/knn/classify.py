"""kNN classification: similarity-weighted vote (single label) and category ranking (multi-label).

    from gputext.knn.classify import knn_classify
    result = knn_classify(train_corpus, test_corpus, k=30)                       # weighted vote
    result = knn_classify(train_corpus, test_corpus, k=30, multilabel=True, top_r=2)
    result.predicted, result.metrics                                           # codes, {"micro_f1": ...}

Neighbours come from the scoring engine (method "inverted") or the dense kernels ("dense");
"auto" asks gputext.knn.dense.dense_fits. Both give identical neighbours (exact search).

Decisions (also in docs/knn_classify.md):
- Vote: class score = sum of the similarities of the k neighbours in that class, summed in float64
  in neighbour order; the prediction is the class of largest score, ties -> lower label code (so a
  document with no similar training document gets the lowest code).
- Category ranking (the CNAE paper): f(d, c) = the largest similarity between d and its k
  neighbours labelled c; 0 when none of the k neighbours has label c. Top-r output keeps the r
  best labels among those reached by a neighbour (ties -> lower code); threshold output keeps every
  reached label with f(d, c) >= threshold. Without either, r = the mean number of labels per
  training document, rounded (at least 1).
- Training documents without a label are left out of the neighbour search.
- Test labels are matched to the training categories by name; a test label the training set does
  not have counts as a label no prediction can hit (it lowers recall).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..backend import Backend, as_backend
from ..errors import InputError
from ..io.corpus import Categorical, Corpus, check_same_vocabulary
from .method import METHODS, choose_method  # noqa: F401 (METHODS: this module's API)
from .multilabel import codes_to_indicator, multilabel_report, single_label_f1

VOTE_METRICS = ("cosine", "dot")


def find_neighbours(X_train, X_query, k: int, metric: str = "cosine", method: str = "auto",
                    device: str | Backend = "auto", exclude_self=False, quiet: bool = True,
                    info: dict | None = None, client=None) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest training rows of every query row: (indices int32, scores float32) (n_q, k).
    client: a dask.distributed Client: the training rows are scattered over its workers and
    searched there (gputext.distributed; the inverted method, identical results)."""
    if client is not None:
        from ..distributed.knn import neighbours
        if info is not None:
            info.update(method="inverted", method_reason="Dask cluster", backend="dask")
        return neighbours(X_train, X_query, k, metric, device, exclude_self, quiet, client)
    backend = as_backend(device)
    X_train = sp.csr_matrix(X_train)
    chosen, reason = choose_method(method, X_train.shape[0], X_train.shape[1], X_train.nnz, backend, k)
    if info is not None:
        info.update(method=chosen, method_reason=reason, backend=backend.name)
    if chosen == "dense":
        from .dense import search_dense
        return search_dense(X_train, X_query, k, metric, backend, exclude_self=exclude_self, quiet=quiet)
    from ..engine import Index, search_topk
    return search_topk(Index.from_csr(X_train), X_query, k, metric, backend, exclude_self=exclude_self, quiet=quiet)


def class_votes(indices: np.ndarray, scores: np.ndarray, train_codes: np.ndarray, n_classes: int) -> np.ndarray:
    """float64 (n, n_classes): the summed similarity of each row's neighbours in each class (0 where
    no neighbour has the class), summed in neighbour order.

    indices/scores (n, k) as search_topk returns (-1 / NaN padding); train_codes (n_train,) int.
    """
    n, k = indices.shape
    votes = np.zeros((n, n_classes), np.float64)
    ok = indices >= 0
    rows = np.broadcast_to(np.arange(n)[:, None], indices.shape)[ok]
    np.add.at(votes, (rows, np.asarray(train_codes)[indices[ok]]), scores[ok].astype(np.float64))
    return votes


def weighted_vote(indices: np.ndarray, scores: np.ndarray, train_codes: np.ndarray, n_classes: int) -> np.ndarray:
    """int32 (n,): argmax over classes of class_votes (ties -> lower code)."""
    return class_votes(indices, scores, train_codes, n_classes).argmax(axis=1).astype(np.int32)


def category_ranking(indices: np.ndarray, scores: np.ndarray, Y_train: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """(label_scores float32 (n, n_labels), reached bool (n, n_labels)): f(d, c) = max similarity
    of d's neighbours labelled c (0 where no neighbour has c)."""
    Y_train = sp.csr_matrix(Y_train)
    n, k = indices.shape
    L = Y_train.shape[1]
    best = np.full((n, L), -np.inf, np.float64)
    indptr, labels = Y_train.indptr, Y_train.indices
    ok = indices >= 0
    q = np.broadcast_to(np.arange(n)[:, None], indices.shape)[ok]
    d = indices[ok]
    counts = indptr[d + 1] - indptr[d]
    ends = np.cumsum(counts)
    total = int(ends[-1]) if ends.size else 0
    cols = labels[np.repeat(indptr[d] - (ends - counts), counts) + np.arange(total)]
    np.maximum.at(best, (np.repeat(q, counts), cols), np.repeat(scores[ok].astype(np.float64), counts))
    reached = np.isfinite(best)
    return np.where(reached, best, 0.0).astype(np.float32), reached


def select_labels(label_scores: np.ndarray, reached: np.ndarray, top_r: int | None = None,
                  threshold: float | None = None) -> sp.csr_matrix:
    """Predicted label sets, CSR bool (n, n_labels): the top_r reached labels (ties -> lower code),
    or every reached label with score >= threshold."""
    n, L = label_scores.shape
    if threshold is not None:
        P = reached & (label_scores >= threshold)
        return sp.csr_matrix(P)
    if top_r is None or top_r < 1:
        raise InputError(f"top_r must be a positive integer, got {top_r!r}")
    key = np.where(reached, label_scores.astype(np.float64), -np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(L), key.shape), -key), axis=1)[:, :top_r]
    P = np.zeros((n, L), bool)
    np.put_along_axis(P, order, np.take_along_axis(reached, order, axis=1), axis=1)
    return sp.csr_matrix(P)


# ----------------------------------------------------------------------------- labels of corpora


def label_names(corpus: Corpus) -> np.ndarray | None:
    names = corpus.params.get("label_names")
    return None if names is None else np.asarray(names, dtype=object)


def single_labels(corpus: Corpus, what: str) -> Categorical:
    cat = corpus.labels
    if cat is None:
        if corpus.label_matrix is not None:
            raise InputError(f"the {what} corpus has multi-label targets (/obsm/labels) but no single label "
                             "(/obs/label): use --multilabel")
        raise InputError(f"the {what} corpus has no labels (/obs/label): expected a labelled corpus "
                         "(build it from a labelled source)")
    return cat


def multi_labels(corpus: Corpus, what: str) -> tuple[sp.csr_matrix, np.ndarray]:
    """(Y CSR bool (n_docs, n_labels), names): /obsm/labels, or one-hot single labels."""
    Y = corpus.label_matrix
    if Y is not None:
        names = label_names(corpus)
        if names is None or len(names) != Y.shape[1]:
            names = np.array([str(i) for i in range(Y.shape[1])], dtype=object)
        return sp.csr_matrix(Y, dtype=bool), names
    cat = corpus.labels
    if cat is None:
        raise InputError(f"the {what} corpus has no labels (/obs/label or /obsm/labels)")
    return codes_to_indicator(cat.codes, len(cat.categories)), np.asarray(cat.categories, dtype=object)


def align_codes(test: Categorical, train_categories) -> np.ndarray:
    """Test label codes in the training categories' numbering; unknown names get codes >= n_train
    (one per unknown name), missing stays -1."""
    names = {str(c): i for i, c in enumerate(train_categories)}
    extra: dict[str, int] = {}
    mapping = np.empty(len(test.categories), np.int64)
    for i, c in enumerate(test.categories):
        c = str(c)
        if c not in names:
            extra.setdefault(c, len(names) + len(extra))
        mapping[i] = names.get(c, extra.get(c))
    codes = np.asarray(test.codes, np.int64)
    return np.where(codes >= 0, mapping[np.maximum(codes, 0)], -1)


def align_label_matrix(Y: sp.csr_matrix, names, train_names) -> sp.csr_matrix:
    """Columns of Y (named ``names``) mapped to the training label columns; unknown names are
    appended after them."""
    index = {str(c): i for i, c in enumerate(train_names)}
    cols = []
    for c in names:
        c = str(c)
        if c not in index:
            index[c] = len(index)
        cols.append(index[c])
    Y = sp.coo_matrix(Y)
    return sp.csr_matrix((np.ones(Y.nnz, bool), (Y.row, np.asarray(cols, np.int64)[Y.col])),
                         shape=(Y.shape[0], len(index)))


# ----------------------------------------------------------------------------- the whole command


@dataclass
class ClassifyResult:
    predicted: np.ndarray | None = None  # int32 codes into categories (single label)
    categories: np.ndarray | None = None
    label_scores: np.ndarray | None = None  # float32 (n, n_labels) (multi-label)
    predicted_labels: sp.csr_matrix | None = None
    label_names: np.ndarray | None = None
    metrics: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)


def knn_classify(train: Corpus, test: Corpus, k: int = 30, metric: str = "cosine", method: str = "auto",
                 device: str | Backend = "auto", multilabel: bool = False, top_r: int | None = None,
                 threshold: float | None = None, quiet: bool = True, client=None) -> ClassifyResult:
    """kNN vote (or category ranking with ``multilabel``) of every test document; metrics when the
    test corpus is labelled. client: a dask.distributed Client to search on (find_neighbours)."""
    check_same_vocabulary(train, test, "training", "test")
    if metric not in VOTE_METRICS:
        raise InputError(f"--metric {metric!r}: classification weighs neighbours by similarity, expected one of "
                         f"{', '.join(VOTE_METRICS)}")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    if top_r is not None and threshold is not None:
        raise InputError("give either --top-r or --threshold, not both")
    res = ClassifyResult()
    t0 = time.perf_counter()
    if multilabel:
        Y, names = multi_labels(train, "training")
        rows = np.nonzero(np.diff(Y.indptr) > 0)[0]
    else:
        cat = single_labels(train, "training")
        rows = np.nonzero(cat.codes >= 0)[0]
    if rows.size == 0:
        raise InputError("the training corpus has no labelled document")
    if k > rows.size:
        raise InputError(f"Expected k <= {rows.size} (the number of labelled training documents), got k = {k}")
    idx, sc = find_neighbours(train.X[rows], test.X, int(k), metric, method, device, quiet=quiet, info=res.info,
                              client=client)
    res.seconds["neighbours"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    if multilabel:
        Yl = Y[rows]
        res.label_scores, reached = category_ranking(idx, sc, Yl)
        if threshold is None and top_r is None:
            top_r = max(1, int(round(Yl.sum() / max(1, Yl.shape[0]))))
        res.predicted_labels = select_labels(res.label_scores, reached, top_r, threshold)
        res.label_names = names
        res.info.update(top_r=top_r, threshold=threshold)
        if test.label_matrix is not None or test.labels is not None:
            Yt, tnames = multi_labels(test, "test")
            Yt = align_label_matrix(Yt, tnames, names)
            L = Yt.shape[1]
            scores = np.zeros((test.n_docs, L), np.float32)
            scores[:, :len(names)] = res.label_scores
            P = sp.hstack([res.predicted_labels, sp.csr_matrix((test.n_docs, L - len(names)), dtype=bool)]).tocsr()
            res.metrics = multilabel_report(scores, Yt, P)
    else:
        res.categories = np.asarray(cat.categories, dtype=object)
        res.predicted = weighted_vote(idx, sc, cat.codes[rows], len(res.categories))
        if test.labels is not None:
            truth = align_codes(test.labels, res.categories)
            micro, macro = single_label_f1(truth, res.predicted, len(res.categories))
            res.metrics = {"micro_f1": micro, "macro_f1": macro, "documents": int((truth >= 0).sum())}
    res.seconds["vote"] = time.perf_counter() - t1
    res.seconds["total"] = time.perf_counter() - t0
    res.info.update(k=int(k), metric=metric, multilabel=bool(multilabel))
    return res
