"""`knn search` on a Dask cluster: the index file's rows go to the workers; this process reads
the queries, merges, and writes the result (gputext.knn.search.search_files with client=)."""
from __future__ import annotations

import time

from ..errors import InputError
from ..io.corpus import read_corpus, terms_digest, vocabulary_error
from .search import DistributedIndex


def _check_vocabulary(index_path: str, n_terms: int, queries) -> None:
    """The queries' terms are the index file's: compared through the stored digest of its terms
    (or its terms, for files without one), without reading its matrix."""
    import h5py

    from ..io.corpus import stored_terms_digest
    if queries.n_terms != n_terms:
        raise vocabulary_error(n_terms, queries.n_terms)
    with h5py.File(index_path, "r") as f:
        digest = stored_terms_digest(f, n_terms)
        if digest is None:
            raw = f["var/_index"][()]
            digest = terms_digest([v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in raw])
    if digest != terms_digest(queries.terms):
        raise vocabulary_error(n_terms, queries.n_terms)


def search_files_distributed(index_path: str, queries_path: str | None, k: int, metric: str, method: str,
                             device, exclude_self: bool, batch_size: int | None, quiet: bool, client, check_k):
    """(indices, scores, stats, queries Corpus, n_docs): search_files's work on the cluster.
    check_k(k, n_docs, n_queries, exclude_self): the caller's checks of k (gputext.knn.search)."""
    if method == "dense":
        raise InputError("--method dense does not run on a Dask cluster: use --method inverted or auto")
    if index_path == "-" or queries_path == "-":
        raise InputError("--scheduler needs files the workers can read, not stdin ('-')")
    t0 = time.perf_counter()
    index = DistributedIndex.from_path(index_path, client, quiet=quiet)
    try:
        queries = read_corpus(index_path if queries_path is None else queries_path)
        _check_vocabulary(index_path, index.n_terms, queries)
        check_k(k, index.n_docs, queries.n_docs, exclude_self)
        t1 = time.perf_counter()
        device = as_device(device)
        indices, scores = index.search_topk(queries.X, k, metric, device, exclude_self, batch_size, quiet)
        stats = {"method": "inverted", "method_reason": "Dask cluster (the inverted index, sharded)",
                 "backend": f"dask ({len(index.shards)} shards, device {device} on the workers)",
                 "shards": len(index.shards), "seconds_index": t1 - t0, "seconds": time.perf_counter() - t1}
        return indices, scores, stats, queries, index.n_docs
    finally:
        index.close()


def neighbours(X_train, X_query, k: int, metric: str, device, exclude_self, quiet: bool, client):
    """find_neighbours on the cluster: (indices int32, scores float32) (n_q, k)."""
    with DistributedIndex.from_csr(X_train, client, quiet=quiet) as index:
        return index.search_topk(X_query, k, metric, as_device(device), exclude_self, None, quiet)


def as_device(device) -> str:
    """A device name for the workers (a Backend object names its kind)."""
    return getattr(device, "name", device)


__all__ = ["search_files_distributed", "neighbours", "as_device"]
