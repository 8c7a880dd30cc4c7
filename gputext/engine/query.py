"""Host-side preparation of queries, shared by the engine's CPU and CUDA paths: checks of the
query matrix and of the left-out documents, the queries' fixed-point scales and norm terms, and
the conversion of keys (larger is better) to the scores users see."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from ..io.corpus import canonical_csr, csr_arrays
from ..kernels import scoring
from ..similarity import is_similarity, metric_code
from .index import MAX_ABS_WEIGHT, Index, check_weights


def check_queries(index: Index, Q) -> sp.csr_matrix:
    """Q as canonical CSR with the index's vocabulary and finite weights (InputError otherwise).

    A CSR matrix that already is canonical (float32 data, int32 indices, sorted and unique within
    rows) is used as it is, not copied: a single query's search should not pay two scipy
    constructions (about 0.1 ms)."""
    if not (type(Q) is sp.csr_matrix and Q.data.dtype == np.float32 and Q.indices.dtype == np.int32
            and Q.has_canonical_format):
        Q = canonical_csr(Q)
    if Q.shape[1] != index.n_terms:
        raise InputError(f"queries have {Q.shape[1]} terms but the index has {index.n_terms}: "
                         "build the queries with --vocab-from the indexed corpus")
    # one reduction decides the common case (NaN fails the comparison); check_weights words the error
    if Q.nnz and not float(np.abs(Q.data).max()) < MAX_ABS_WEIGHT:
        check_weights(Q.data, "query matrix")
    return Q


def self_docs(index: Index, n_queries: int, exclude_self) -> np.ndarray:
    """int64 (n_queries,): the document each query leaves out, or -1."""
    return excluded_docs(exclude_self, n_queries, index.n_docs)


def excluded_docs(exclude_self, n_queries: int, n_docs: int, indexed: str = "indexed corpus") -> np.ndarray:
    """int64 (n_queries,) from ``exclude_self``: None/False -> all -1, True -> query i leaves out
    document i (needs n_queries == n_docs), an array -> itself (one entry per query; the entries'
    range is the caller's to check). ``indexed`` names the documents in the error line."""
    if exclude_self is None or exclude_self is False:
        return np.full(n_queries, -1, np.int64)
    if exclude_self is True:
        if n_queries != n_docs:
            raise InputError(f"exclude_self needs the queries to be the {indexed}: expected "
                             f"{n_docs} queries, got {n_queries}")
        return np.arange(n_queries, dtype=np.int64)
    docs = np.asarray(exclude_self, dtype=np.int64)
    if docs.shape != (n_queries,):
        raise InputError(f"exclude_self array must have one entry per query ({n_queries}), got shape {docs.shape}")
    return docs


def check_k(k) -> int:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    return int(k)


def keys_to_scores(keys: np.ndarray, docs: np.ndarray, code: int) -> np.ndarray:
    """float64 keys (larger is better) -> float32 scores (distances positive), NaN where doc < 0."""
    scores = keys if is_similarity(code) else -keys
    scores = scores.astype(np.float32)
    scores[docs < 0] = np.nan
    return scores


def min_key_for(threshold: float, code: int) -> float:
    """Threshold in the user's terms -> key bound (keys are larger-is-better)."""
    if not np.isfinite(threshold):
        raise InputError(f"threshold must be a finite number, got {threshold!r}")
    return float(threshold) if is_similarity(code) else -float(threshold)


def group_ptr(index: Index, groups) -> np.ndarray:
    """groups as int64 offsets (n_groups+1,) from 0 to index.n_docs (InputError otherwise)."""
    g = np.asarray(groups)
    if g.ndim != 1 or g.size < 2 or not np.issubdtype(g.dtype, np.integer):
        raise InputError(f"groups must be an integer array of group offsets (n_groups+1,), got shape {g.shape} "
                         f"and dtype {g.dtype}")
    g = g.astype(np.int64)
    if g[0] != 0 or g[-1] != index.n_docs or np.any(np.diff(g) < 0):
        raise InputError(f"groups must be non-decreasing offsets from 0 to the number of indexed documents "
                         f"({index.n_docs}), got {g[0]} .. {g[-1]}")
    return np.ascontiguousarray(g)


def metric_codes(metrics) -> np.ndarray:
    codes = np.array([metric_code(m) for m in ((metrics,) if isinstance(metrics, str) else metrics)], np.int64)
    if codes.size == 0:
        raise InputError("metrics must name at least one metric")
    return codes


def grouped_query_info(index: Index, Q: sp.csr_matrix, codes: np.ndarray, self_doc: np.ndarray) -> tuple:
    """Host side, shared by both backends: scale float64 (2, Q) (dot and l1 accumulators), qn
    float64 (n_metrics, Q), dn float64 (n_metrics, n_docs)."""
    scale, qn = scoring.query_stats_multi(*csr_arrays(Q), index.term_maxabs, np.asarray(codes, np.int64))
    dn = np.ascontiguousarray(np.stack([index.norm_terms(int(c)) for c in codes]))
    return scale, qn, dn
