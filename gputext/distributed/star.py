"""The star-clustering graph G_beta on a Dask cluster (gputext.cluster.star.cluster_star with client=).

The same row shards as gputext.cluster.graph.build_graph (shard_bounds): the queries of graph
shard s are rows [b_s, b_{s+1}), scored with the term maxima of rows >= b_s (as the single-process
build's Index of X[b_s:] scores them) against every worker's document range, keeping pairs
(i, j > i). The workers return their edges; this process assembles the graph
(gputext.cluster.graph.graph_from_edges) and runs the cover and the improvement as today.
The graph is identical to the single-process one.
"""
from __future__ import annotations

import time

import numpy as np

from ..errors import InputError
from .search import DistributedIndex

DEFAULT_BATCH = 8192  # query rows per task, as build_graph's CPU path


def build_graph_distributed(X, beta: float, client, device: str = "auto", batch_size: int | None = None,
                            shards: int | None = None, quiet: bool = True):
    """G_beta of a corpus file's rows (a path every worker can read) or of a CSR matrix (scattered
    to the workers); returns gputext.cluster.graph.StarGraph with ``stats``."""
    from ..cluster.graph import check_beta, default_shards, graph_from_edges, shard_bounds
    from ..io.corpus import canonical_csr, corpus_shape

    beta = check_beta(beta)
    if batch_size is not None and int(batch_size) < 1:
        raise InputError(f"batch_size must be a positive integer, got {batch_size}")
    n = corpus_shape(X)[0] if isinstance(X, str) else canonical_csr(X).shape[0]
    bounds = shard_bounds(n, shards if shards is not None else default_shards(n))
    t0 = time.perf_counter()
    make = DistributedIndex.from_path if isinstance(X, str) else DistributedIndex.from_csr
    rows, cols, weights = [], [], []
    with make(X, client, cuts=tuple(int(b) for b in bounds[:-1]), quiet=quiet) as index:
        t1 = time.perf_counter()
        for s in range(len(bounds) - 1):
            start, stop = int(bounds[s]), int(bounds[s + 1])
            S = index.search_threshold(("rows", start, stop), beta, "cosine", device,
                                       batch_size=batch_size or DEFAULT_BATCH, quiet=quiet,
                                       after=np.arange(start, stop), term_maxabs_from=start)
            rows.append(np.repeat(np.arange(start, stop, dtype=np.int64), np.diff(S.indptr)))
            cols.append(S.indices.astype(np.int64))
            weights.append(S.data)
        n_shards = len(index.shards)
    t2 = time.perf_counter()
    graph = graph_from_edges(n, np.concatenate(rows), np.concatenate(cols), np.concatenate(weights))
    graph.stats = {"n_edges": graph.n_edges, "shards": len(bounds) - 1, "dask_shards": n_shards,
                   "batch_size": batch_size or DEFAULT_BATCH, "device_graph": False, "assembly": "client",
                   "seconds_index": t1 - t0, "seconds_scoring": t2 - t1,
                   "seconds_assembly": time.perf_counter() - t2}
    return graph
