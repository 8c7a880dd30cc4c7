"""The weighted thresholded similarity graph of OClustR (paper section 2.1), built by the engine.

G_beta has an edge (u, v), u != v, when cos(u, v) >= beta, labelled with that cosine.  Every pair
is scored once: the corpus is cut into ``shards`` row ranges and the queries of shard s are scored
(gputext.engine.search_threshold, the threshold selector) against an index of the documents from
shard s on, keeping only the pairs (i, j) with j > i: the strict upper triangle, computed from
the lower-numbered document's side (the paper's Suc_v).  Queries go to the engine in batches of
``batch_size`` rows, so 10^5-10^6 documents never need an n x n matrix on the host (the engine
batches the device work itself).  As the edges of a batch arrive, every endpoint's degree and
fixed-point weight sum are updated (gputext.kernels.star.accumulate_upper): the approximate
intra-cluster similarity AIS(v) of each star needs nothing else.  At the end the upper-triangle
edges become a symmetric CSR adjacency (indptr int64, indices int32 sorted within rows, weights
float32).  That is the CPU path.  On a CUDA device the same shards and the same engine scores
are used, but edges, sums, the symmetric CSR and the relevance are made on the device and come
to the host once (gputext.cluster.graph_cuda); the result is identical.

Edge weights are the engine's float32 scores.  The engine's fixed-point scores are deterministic
and identical on cpu and cuda; the score of a pair is computed with the lower-numbered document
as the query (full builds) or with the added document as the query (DClustR additions), and the
query's fixed-point scale depends on the index it is scored against, so the float64 key of the
same pair may differ between those two computations in its last few bits (about 2**-60
relative).  That changes an edge only if its cosine lies within that distance of beta or of a
float32 rounding boundary; tests check that the graph after additions equals the graph of the
union built from scratch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..backend import Backend, as_backend
from ..errors import InputError
from ..io.corpus import canonical_csr, csr_arrays
from ..kernels import star as kstar
from ..progress import progress

MIN_BETA = 1e-4  # weights >= 2**-17 keep the fixed-point AIS sums exact (kernels/star.py)


def check_beta(beta) -> float:
    try:
        value = float(beta)
    except (TypeError, ValueError):
        raise InputError(f"beta must be a number in [{MIN_BETA}, 1], got {beta!r}") from None
    if not (MIN_BETA <= value <= 1.0):
        raise InputError(f"beta must be in [{MIN_BETA}, 1] (cosine similarity threshold), got {value}")
    return value


@dataclass
class StarGraph:
    """Symmetric weighted adjacency of G_beta.

    indptr int64 (n+1,), indices int32 (2E,) sorted within rows, weights float32 (2E,);
    degree int32 (n,); weight_sum int64 (n,) fixed-point sums of each row's weights (2**40 units).
    relevance_count / relevance: the relevance numerators and values when the graph was built on
    a CUDA device (computed there before the graph came to the host), else None.
    """

    n: int
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    degree: np.ndarray
    weight_sum: np.ndarray
    stats: dict = field(default_factory=dict)
    relevance_count: np.ndarray | None = None  # int32 (n,), when the device build computed it
    relevance: np.ndarray | None = None  # float64 (n,), idem (gputext.kernels.star.relevance_kernel)

    @property
    def n_edges(self) -> int:
        """Undirected edges."""
        return int(self.indptr[-1]) // 2

    @property
    def ais(self) -> np.ndarray:
        """float64 (n,): approximate intra-cluster similarity of each vertex's star."""
        return kstar.ais_from_sums(self.degree, self.weight_sum)

    def to_scipy(self) -> sp.csr_matrix:
        return sp.csr_matrix((self.weights, self.indices, self.indptr), shape=(self.n, self.n))

    def neighbours(self, v: int) -> np.ndarray:
        return self.indices[self.indptr[v]:self.indptr[v + 1]]

    @property
    def weights_on_host(self) -> bool:
        """False while the weights are still on the device (see ``weights``)."""
        return not hasattr(self.__dict__.get("_weights"), "fetch")


def _get_weights(self) -> np.ndarray:
    w = self.__dict__.get("_weights")
    if hasattr(w, "fetch"):  # still on the device: one copy, then kept on the host
        w = w.fetch()
        self.__dict__["_weights"] = w
    return w


def _set_weights(self, value) -> None:
    self.__dict__["_weights"] = value


# The weights may stay on the device after a device build (the cover and the improvement read
# only indptr/indices/degree, the relevance came with the graph): ``weights`` then holds an object
# with ``fetch()`` (gputext.cluster.graph_cuda.DeviceWeights) and the first read of
# ``graph.weights`` copies them to the host (float32 (2E,) like any other graph's weights).
StarGraph.weights = property(_get_weights, _set_weights, doc="float32 (2E,): the edge weights (cosines), row-aligned with indices")


def graph_from_edges(n: int, rows, cols, weights) -> StarGraph:
    """A StarGraph from undirected edges given once each (any order, either orientation).

    rows, cols int (E,), weights float (E,), each edge once; self-loops and duplicate pairs are
    errors.  Used by tests (hand-worked examples) and by DClustR to merge edge sets.
    """
    rows = np.asarray(rows, np.int64)
    cols = np.asarray(cols, np.int64)
    weights = np.asarray(weights, np.float32)
    if not (rows.shape == cols.shape == weights.shape) or rows.ndim != 1:
        raise InputError(f"edges need three 1-d arrays of one length, got shapes {rows.shape}, {cols.shape}, {weights.shape}")
    if len(rows) and (min(rows.min(), cols.min()) < 0 or max(rows.max(), cols.max()) >= n):
        raise InputError(f"edge endpoints must be in [0, {n})")
    if np.any(rows == cols):
        raise InputError("edges must join two different vertices (self-loops are not part of G_beta)")
    lo = np.minimum(rows, cols)
    hi = np.maximum(rows, cols)
    order = np.lexsort((hi, lo))
    lo, hi, weights = lo[order], hi[order], weights[order]
    if len(lo) > 1 and np.any((lo[1:] == lo[:-1]) & (hi[1:] == hi[:-1])):
        raise InputError("an edge is given twice")
    up_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(lo, minlength=n), out=up_ptr[1:])
    return _assemble(up_ptr, hi.astype(np.int32), weights)


def _assemble(up_ptr: np.ndarray, up_cols: np.ndarray, up_weights: np.ndarray,
              degree: np.ndarray | None = None, weight_sum: np.ndarray | None = None) -> StarGraph:
    """Upper-triangle CSR -> StarGraph (degree and sums accumulated unless given)."""
    import numba

    n = len(up_ptr) - 1
    if degree is None:
        degree = np.zeros(n, np.int32)
        weight_sum = np.zeros(n, np.int64)
        kstar.accumulate_upper(up_ptr, up_cols, up_weights, 0, degree, weight_sum)
    indptr, indices, w = kstar.symmetric_csr(up_ptr, up_cols, up_weights, degree, numba.get_num_threads())
    return StarGraph(n, indptr, indices, w, degree, weight_sum)


def default_shards(n_docs: int) -> int:
    """Row shards of the upper-triangle build: each halves the redundant lower-triangle scoring of
    its rows; one index is built per shard.  About one shard per 16,384 documents, at most 8."""
    return int(max(1, min(8, n_docs // 16384)))


def shard_bounds(n_docs: int, shards: int) -> np.ndarray:
    """Boundaries b_0 = 0 < ... < b_S = n_docs giving the shards near-equal numbers of *pairs*
    (shard s scores its rows against n - b_s documents), so the last shards hold more rows."""
    shards = max(1, min(int(shards), max(1, n_docs)))
    # rows [0, x) of an n-row upper triangle hold n^2/2 - (n-x)^2/2 pairs: equalise that.
    cuts = [int(round(n_docs * (1.0 - np.sqrt(1.0 - s / shards)))) for s in range(shards + 1)]
    cuts[0], cuts[-1] = 0, n_docs
    return np.unique(np.asarray(cuts, np.int64))


def build_graph(X, beta: float, device: str | Backend = "auto", batch_size: int | None = None,
                shards: int | None = None, quiet: bool = True, engine_geometry=None, graph_geometry=None,
                relevance_geometry=None, edge_capacity: int | None = None, device_graph: bool = True) -> StarGraph:
    """G_beta of the rows of X (CSR (n_docs, n_terms)) under cosine similarity.

    beta in [1e-4, 1].  ``shards`` row shards (default ``default_shards``).  On the CPU,
    ``batch_size`` query rows per engine call (default 8192; bounds the host memory of one call's
    results).  On a CUDA device (``device_graph``, the default) the edges never leave the device
    until the symmetric CSR and the relevance are made (gputext.cluster.graph_cuda; the graph
    then carries ``relevance_count``/``relevance``): ``batch_size`` query rows per device batch
    (default: as many as 30% of the free memory holds), ``graph_geometry`` the launch geometry
    of its kernels (graph_cuda.DeviceGraphGeometry), ``relevance_geometry`` the relevance
    kernel's (lanes, vertices, max_blocks), ``edge_capacity`` the device edge buffer's size in
    edges (default 60% of the free memory; smaller values exercise the host fallback).
    ``device_graph=False`` takes the engine's threshold selector and assembles on the host (the
    path of the CPU twin).  Returns a StarGraph, identical whichever path; ``stats`` has
    n_edges, shards and the seconds of each stage.
    """
    import time

    beta = check_beta(beta)
    X = canonical_csr(X)
    backend = as_backend(device)
    n = X.shape[0]
    if batch_size is not None and int(batch_size) < 1:
        raise InputError(f"batch_size must be a positive integer, got {batch_size}")
    bounds = shard_bounds(n, shards if shards is not None else default_shards(n))
    if backend.is_cuda and device_graph and n >= 2:
        from ..device.memory import free_deferred
        from .graph_cuda import build_graph_cuda

        t0 = time.perf_counter()
        out = build_graph_cuda(X, beta, bounds, batch_size, quiet, engine_geometry, graph_geometry,
                               relevance_geometry, edge_capacity, backend.simulator)
        free_deferred()  # its device arrays are garbage now: free them (numba defers frees)
        if out is not None:
            up_ptr, indptr, indices, weights, degree, weight_sum, count, rel, dstats = out
            if up_ptr is None:
                graph = StarGraph(n, indptr, indices, weights, degree, weight_sum, relevance_count=count,
                                  relevance=rel)
            else:  # host assembly (edges spilled or the CSR does not fit on the device)
                t1 = time.perf_counter()
                graph = _assemble(up_ptr, indices, weights, degree, weight_sum)
                dstats["host_seconds"]["host_assembly"] = time.perf_counter() - t1
            graph.stats = {"n_edges": graph.n_edges, "shards": len(bounds) - 1, "batch_size": batch_size,
                           "seconds_total": time.perf_counter() - t0, **dstats}
            return graph
    return _build_graph_engine(X, beta, backend, bounds, int(batch_size or 8192), quiet, engine_geometry)


def _build_graph_engine(X, beta, backend, bounds, batch, quiet, engine_geometry) -> StarGraph:
    """The engine's threshold selector in batches, edges accumulated and assembled on the host
    (the CPU twin; also the CUDA fallback when the index does not fit on the device)."""
    import time

    from ..engine import Index, search_threshold

    n = X.shape[0]
    degree = np.zeros(n, np.int32)
    weight_sum = np.zeros(n, np.int64)
    up_len = np.zeros(n, np.int64)
    parts_c, parts_w = [], []
    t0 = time.perf_counter()
    with progress(n if n > batch else 0, "similarity graph", quiet) as bar:
        for s in range(len(bounds) - 1):
            start, stop = int(bounds[s]), int(bounds[s + 1])
            index = Index.from_csr(X[start:])
            for lo in range(start, stop, batch):
                hi = min(stop, lo + batch)
                # after = each query's own position in the shard's index: only the upper triangle
                # comes back from the engine (upper_rows then only shifts columns to global ids)
                S = search_threshold(index, X[lo:hi], beta, metric="cosine", device=backend, quiet=True,
                                     geometry=engine_geometry, after=np.arange(lo - start, hi - start))
                ptr, c, w = kstar.upper_rows(*csr_arrays(S), lo, start)
                kstar.accumulate_upper(ptr, c, w, lo, degree, weight_sum)
                up_len[lo:hi] = np.diff(ptr)
                parts_c.append(c)
                parts_w.append(w)
                bar.update(hi - lo)
            del index
    t_score = time.perf_counter() - t0
    cols = np.concatenate(parts_c) if parts_c else np.empty(0, np.int32)
    weights = np.concatenate(parts_w) if parts_w else np.empty(0, np.float32)
    del parts_c, parts_w
    # batches arrive in row order, each row's columns ascending: the upper triangle as CSR
    up_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(up_len, out=up_ptr[1:])
    graph = _assemble(up_ptr, cols, weights, degree, weight_sum)
    graph.stats = {"n_edges": graph.n_edges, "shards": len(bounds) - 1, "batch_size": batch,
                   "device_graph": False, "assembly": "host",
                   "seconds_scoring": t_score, "seconds_assembly": time.perf_counter() - t0 - t_score}
    return graph


def score_additions(old_X, new_X, beta: float, device: str | Backend = "auto", batch_size: int | None = None,
                    quiet: bool = True, engine_geometry=None, graph_geometry=None, device_graph: bool = True):
    """The edges DClustR needs after adding new documents (paper section 3.2): every new document
    against the collection and against the new documents after it (Suc_v U (V \\ M)).

    One index of the stacked corpus X' = [new; old] (new document i is row i, old document j is
    row n_new + j) with the new documents as queries, each keeping only the rows after its own:
    that is exactly the new x old pairs and the new x new upper triangle, every pair scored once
    with the added document as the query.  On a CUDA device the device graph build does it
    (gputext.cluster.graph_cuda, ``upper_only``: the edges come to the host as upper-triangle
    rows, no symmetric CSR); on the CPU, and as the CUDA fallback, the engine's threshold
    selector in batches of ``batch_size`` queries (default 8192).  Both score the same pairs
    against the same index, so they give the same edges and weights bit for bit.

    Returns ((old int32, new int32, w float32) new-old edges, (a int32, b int32, w float32)
    new-new edges with a < b), all as global vertex ids (new documents numbered from n_old);
    ordered by new document, then neighbour ascending.
    """
    n_old, n_new = old_X.shape[0], new_X.shape[0]
    up = addition_rows(old_X, new_X, beta, device, batch_size, quiet, engine_geometry, graph_geometry, device_graph)
    return kstar.split_addition_rows(up[0], up[1], up[2], n_new, n_old)


def addition_rows(old_X, new_X, beta: float, device: str | Backend = "auto", batch_size: int | None = None,
                  quiet: bool = True, engine_geometry=None, graph_geometry=None, device_graph: bool = True):
    """score_additions's edges as upper-triangle rows of [new; old]: (ptr int64 (n_new+1,),
    cols int32 ascending within a row, weights float32); column c < n_new is new document c,
    c >= n_new old document c - n_new (kstar.addition_owner_rows turns them into owner rows)."""
    import scipy.sparse as sp

    from ..engine import Index, search_threshold

    beta = check_beta(beta)
    old_X = canonical_csr(old_X)
    new_X = canonical_csr(new_X)
    backend = as_backend(device)
    n_old, n_new = old_X.shape[0], new_X.shape[0]
    Xp = canonical_csr(sp.vstack([new_X, old_X], format="csr")) if n_old else new_X
    up = None
    if backend.is_cuda and device_graph and n_new:
        from ..device.memory import free_deferred
        from .graph_cuda import build_graph_cuda

        out = build_graph_cuda(Xp, beta, np.array([0, n_new], np.int64), batch_size, quiet, engine_geometry,
                               graph_geometry, None, None, backend.simulator, upper_only=True)
        free_deferred()
        if out is not None:
            up_ptr, _, cols, weights = out[:4]
            up = (up_ptr[:n_new + 1], cols, weights)
    if up is None:
        batch = int(batch_size or 8192)
        index = Index.from_csr(Xp)
        parts = ([np.zeros(1, np.int64)], [], [])
        with progress(n_new if n_new > batch else 0, "scoring additions", quiet) as bar:
            for lo in range(0, n_new, batch):
                hi = min(n_new, lo + batch)
                S = search_threshold(index, new_X[lo:hi], beta, metric="cosine", device=backend, quiet=True,
                                     geometry=engine_geometry, after=np.arange(lo, hi))
                ptr, c, w = kstar.upper_rows(*csr_arrays(S), lo, 0)
                parts[0].append(ptr[1:] + parts[0][-1][-1])
                parts[1].append(c)
                parts[2].append(w)
                bar.update(hi - lo)
        up = (np.concatenate(parts[0]),
              np.concatenate(parts[1]) if parts[1] else np.empty(0, np.int32),
              np.concatenate(parts[2]) if parts[2] else np.empty(0, np.float32))
    return up
