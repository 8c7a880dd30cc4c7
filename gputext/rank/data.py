"""Learning-to-rank data checked once at the boundary and grouped by query.

``prepare(X, qid, relevance)`` returns a :class:`RankingData`: rows regrouped so that every query
is contiguous (a stable sort by qid: queries in increasing qid order, documents of a query in
their file order), relevance mapped to dense ranks 0..K-1, and the number of preference pairs.
Rows of a query need not be contiguous in the input.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from ..io.corpus import Corpus, DocTermShape, canonical_csr, csr_arrays


@dataclass
class RankingData(DocTermShape):
    """Training data grouped by query (all arrays in grouped row order).

    X            csr_matrix (n_docs, n_features) float32, rows grouped by query
    starts       int64 (n_queries + 1,): query t owns rows starts[t]:starts[t+1]
    query_ids    int64 (n_queries,): the qid of each query, increasing
    label_rank   int32 (n_docs,): rank of each row's relevance among the distinct values
    levels       float64 (K,): the distinct relevance values, increasing
    perm         int64 (n_docs,): grouped row -> row of the input
    n_pairs      int: preference pairs (same query, different relevance)
    """

    X: sp.csr_matrix
    starts: np.ndarray
    query_ids: np.ndarray
    label_rank: np.ndarray
    levels: np.ndarray
    perm: np.ndarray
    n_pairs: int

    @property
    def n_features(self) -> int:
        return self.n_terms

    @property
    def n_queries(self) -> int:
        return len(self.starts) - 1

    @property
    def max_query_docs(self) -> int:
        return int(np.diff(self.starts).max()) if self.n_queries else 0

    @property
    def is_dense(self) -> bool:
        """True when every row stores every feature (dense features kept as CSR): the device
        then reads X as a row-major (n_docs, n_features) float32 matrix, indices unused."""
        n, m = self.X.shape
        return n > 0 and m > 0 and self.X.nnz == n * m

    def dense_matrix(self) -> np.ndarray:
        """(n_docs, n_features) float32 C-contiguous view of the CSR data (only when is_dense)."""
        return np.ascontiguousarray(self.X.data, dtype=np.float32).reshape(self.X.shape)

    def csr(self):
        return csr_arrays(self.X)

    def csc(self):
        """(colptr int64, rows int32, data float32) of X^T's rows (a CSC copy of X)."""
        Xc = sp.csc_matrix(self.X)
        Xc.sort_indices()
        return (np.ascontiguousarray(Xc.indptr, dtype=np.int64), np.ascontiguousarray(Xc.indices, dtype=np.int32),
                np.ascontiguousarray(Xc.data, dtype=np.float32))


def count_pairs(starts: np.ndarray, label_rank: np.ndarray) -> int:
    """Preference pairs: per query (n^2 - sum over levels of count^2) / 2."""
    total = 0
    q_of_row = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    if len(q_of_row) == 0:
        return 0
    n_levels = int(label_rank.max()) + 1
    key = q_of_row.astype(np.int64) * n_levels + label_rank
    _, counts = np.unique(key, return_counts=True)
    sizes = np.diff(starts).astype(np.int64)
    total = (int(np.sum(sizes * sizes)) - int(np.sum(counts.astype(np.int64) ** 2))) // 2
    return total


def corpus_columns(corpus: Corpus, name: str, need_relevance: bool = True):
    """(qid int64, relevance float64 or None) of a corpus, with errors naming the file and key."""
    if "qid" not in corpus.obs:
        raise InputError(f"{name}: /obs/qid is missing: ranking needs a query id per document "
                         "(build the corpus from svmlight with qid:, or with --query-groups)")
    qid = np.asarray(corpus.obs["qid"])
    if qid.dtype.kind == "f":
        if not np.all(np.isfinite(qid)) or np.any(qid != np.round(qid)):
            raise InputError(f"{name}: /obs/qid must hold integer query ids, found non-integer values")
    elif qid.dtype.kind not in "iu":
        raise InputError(f"{name}: /obs/qid must hold integer query ids, found dtype {qid.dtype}")
    qid = qid.astype(np.int64)
    relevance = None
    if "relevance" in corpus.obs:
        relevance = np.asarray(corpus.obs["relevance"])
        if relevance.dtype.kind not in "fiu":
            raise InputError(f"{name}: /obs/relevance must be numeric, found dtype {relevance.dtype}")
        relevance = relevance.astype(np.float64)
        bad = ~np.isfinite(relevance)
        if bad.any():
            raise InputError(f"{name}: /obs/relevance has {int(bad.sum())} NaN or infinite values "
                             f"(first at row {int(np.argmax(bad))})")
    elif need_relevance:
        raise InputError(f"{name}: /obs/relevance is missing: training and evaluation need a relevance "
                         "label per document (svmlight's first column)")
    return qid, relevance


def group_by_query(qid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(perm, starts, query_ids): a stable sort by qid; query t is perm[starts[t]:starts[t+1]]."""
    qid = np.asarray(qid, dtype=np.int64)
    perm = np.argsort(qid, kind="stable").astype(np.int64)
    sorted_q = qid[perm]
    if len(sorted_q) == 0:
        return perm, np.zeros(1, np.int64), np.zeros(0, np.int64)
    boundary = np.flatnonzero(np.diff(sorted_q)) + 1
    starts = np.concatenate([[0], boundary, [len(sorted_q)]]).astype(np.int64)
    return perm, starts, sorted_q[starts[:-1]]


def prepare(X, qid, relevance, name: str = "training data") -> RankingData:
    """Check and group training data. X: (n_docs, n_features) CSR or dense; qid, relevance:
    (n_docs,). Errors name ``name`` and say what was expected and what was found."""
    X = canonical_csr(X)
    n_docs, n_features = X.shape
    if n_docs == 0:
        raise InputError(f"{name}: has zero documents")
    if n_features == 0:
        raise InputError(f"{name}: has zero features: expected at least one feature column")
    if X.nnz and not np.all(np.isfinite(X.data)):
        raise InputError(f"{name}: /X/data contains NaN or infinite feature values")
    qid = np.asarray(qid)
    if relevance is None:
        raise InputError(f"{name}: relevance labels are missing")
    relevance = np.asarray(relevance, dtype=np.float64)
    if qid.shape != (n_docs,) or relevance.shape != (n_docs,):
        raise InputError(f"{name}: expected qid and relevance of length n_docs = {n_docs}, "
                         f"got {qid.shape} and {relevance.shape}")
    bad = ~np.isfinite(relevance)
    if bad.any():
        raise InputError(f"{name}: relevance has {int(bad.sum())} NaN or infinite values (first at row {int(np.argmax(bad))})")
    perm, starts, query_ids = group_by_query(qid)
    levels, label_rank = np.unique(relevance[perm], return_inverse=True)
    label_rank = np.ascontiguousarray(label_rank, dtype=np.int32)
    n_pairs = count_pairs(starts, label_rank)
    if n_pairs == 0:
        raise InputError(f"{name}: no preference pairs: within every query all documents have the same "
                         f"relevance ({len(query_ids)} queries, relevance values {levels[:5].tolist()}); "
                         "RankSVM needs documents of different relevance in at least one query")
    Xg = X[perm] if not np.array_equal(perm, np.arange(n_docs)) else X
    Xg = canonical_csr(Xg)
    return RankingData(Xg, starts, query_ids, label_rank, levels.astype(np.float64), perm, n_pairs)


def from_corpus(corpus: Corpus, name: str) -> RankingData:
    qid, relevance = corpus_columns(corpus, name)
    return prepare(corpus.X, qid, relevance, name)
