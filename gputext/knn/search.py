"""Exact kNN search over corpus files: the library call behind `gputext knn search`.

    from gputext.knn.search import search_files, load_index
    result = search_files("train.h5", "test.h5", k=30, metric="cosine")   # -> gputext.io.Corpus
    result.obsm["knn_indices"], result.obsm["knn_scores"]

For arrays, call the engine directly (gputext.engine.search_topk).
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from ..backend import Backend, as_backend
from ..engine import Index, search_topk
from ..errors import InputError
from ..io.corpus import Corpus, check_same_vocabulary, read_corpus
from .method import METHODS, choose_method  # noqa: F401 (METHODS: this module's API)


def load_index(path: str) -> Index:
    """An index file written by `gputext knn index`, or any corpus file."""
    return Index.load(path)


def check_k(k: int, n_docs: int, n_queries: int, exclude_self: bool) -> None:
    """k fits the indexed documents (less the query itself), and --exclude-self has the corpus as queries."""
    available = n_docs - (1 if exclude_self else 0)
    if k > available:
        raise InputError(f"Expected k <= {available} (the number of indexed documents"
                         f"{' other than the query itself' if exclude_self else ''}), got k = {k}")
    if exclude_self and n_queries != n_docs:
        raise InputError(f"--exclude-self needs the queries to be the indexed corpus: expected {n_docs} "
                         f"queries, got {n_queries}")


def search_corpora(index: Index, queries: Corpus, k: int, metric: str = "cosine", method: str = "auto",
                   device: str | Backend = "auto", exclude_self: bool = False, batch_size: int | None = None,
                   quiet: bool = True) -> tuple[np.ndarray, np.ndarray, dict]:
    """Validate and search; returns (indices int32 (n_q, k), scores float32 (n_q, k), run info)."""
    if index.corpus is not None:
        check_same_vocabulary(index.corpus, queries)
    elif queries.n_terms != index.n_terms:
        raise InputError(f"queries have {queries.n_terms} terms, the index {index.n_terms}")
    check_k(k, index.n_docs, queries.n_docs, exclude_self)
    backend = as_backend(device)
    chosen, reason = choose_method(method, index.n_docs, index.n_terms, index.nnz, backend, k, index_built=True)
    stats: dict = {"method": chosen, "method_reason": reason}
    t0 = time.perf_counter()
    if chosen == "dense":
        from .dense import search_dense
        indices, scores = search_dense(index.X, queries.X, k, metric=metric, device=backend, exclude_self=exclude_self)
        stats["backend"] = backend.name
    else:
        indices, scores = search_topk(index, queries.X, k, metric, backend, exclude_self=exclude_self,
                                      batch_size=batch_size, quiet=quiet, stats=stats)
    stats["seconds"] = time.perf_counter() - t0
    return indices, scores, stats


def result_corpus(queries: Corpus, indices: np.ndarray, scores: np.ndarray, params: dict) -> Corpus:
    """A result file: the queries' ids and annotations, an empty X of the queries' shape, and
    obsm/knn_indices, obsm/knn_scores; the run's parameters under uns/gputext/knn."""
    empty = sp.csr_matrix(queries.X.shape, dtype=np.float32)
    obsm = {"knn_indices": np.ascontiguousarray(indices, np.int32), "knn_scores": np.ascontiguousarray(scores, np.float32)}
    uns = {"gputext": {"knn": params}}
    return Corpus(empty, queries.doc_ids, queries.terms, dict(queries.obs), {}, obsm, uns)


def search_files(index_path: str, queries_path: str | None, k: int, metric: str = "cosine", method: str = "auto",
                 device: str | Backend = "auto", exclude_self: bool = False, batch_size: int | None = None,
                 quiet: bool = True, client=None) -> Corpus:
    """Search files and return the result corpus (not yet written). client: a dask.distributed
    Client: the index file's rows are read and indexed by its workers (gputext.distributed; the
    inverted method, identical results); this process reads only the queries."""
    if client is not None:
        from ..distributed.knn import search_files_distributed
        indices, scores, stats, queries, n_docs = search_files_distributed(
            index_path, queries_path, k, metric, method, device, exclude_self, batch_size, quiet, client, check_k)
    else:
        index = load_index(index_path)
        queries = index.corpus if queries_path is None else read_corpus(queries_path)
        indices, scores, stats = search_corpora(index, queries, k, metric, method, device, exclude_self, batch_size,
                                                quiet)
        n_docs = index.n_docs
    params = {"k": int(k), "metric": metric, "index": str(index_path), "index_n_docs": int(n_docs),
              "exclude_self": bool(exclude_self), **{key: v for key, v in stats.items() if isinstance(v, (int, float, str))}}
    return result_corpus(queries, indices, scores, params)
