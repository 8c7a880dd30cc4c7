"""OClustR / CUDA-OClus: overlapping star clustering (paper section 2.1 and 3.1).

Stages
------
1. Graph: G_beta from the scoring engine (gputext.cluster.graph), with each vertex's degree and
   AIS accumulated as the edges arrive.
2. Relevance on the device (gputext.kernels.star.relevance_kernel) or its CPU twin:
   relevance(v) = (relative density + relative compactness) / 2.
3. Cover (initial clusters): isolated vertices are centers of their own (degenerate) clusters;
   the candidate list L holds the vertices with relevance > 0 in decreasing relevance, ties by
   lower vertex id first; each v in L becomes a center if v is not covered yet or has an
   uncovered neighbour.  A vertex is covered when it is a center or adjacent to one.
4. Improvement (final clusters): centers are visited in decreasing degree, ties by lower id.
   Visiting v examines the centers u in Adj(v) (ascending id) that are still centers and have not
   been visited: u's ws-graph {u} U Adj(u) is non-useful when more of its vertices are shared with
   other ws-graphs (count > 1) than belong only to it; then u stops being a center and the
   vertices only u covered are "linked" to v.  After its examination v, Adj(v) and v.Linked
   form a final cluster.
   Where the paper is silent we decided: a center that has already been visited has formed its
   final cluster and is never removed afterwards (so a vertex is linked at most once); the
   counts ("shared with other ws-graphs") are kept current as ws-graphs are removed.

Every rule depends only on a vertex's neighbourhood and on global orders restricted to it, so
the result decomposes over connected components: the clusters of a component do not depend on
the rest of the graph.  DClustR (gputext.cluster.dclus) relies on that.

Output: clusters in ascending order of their center's id; membership CSR (n_docs, n_clusters)
float32 ones (a document is in every cluster that contains it), centers int32.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numba
from numba import prange
import numpy as np
import scipy.sparse as sp

from ..backend import Backend, resolve
from ..errors import InputError
from ..kernels import star as kstar
from .graph import StarGraph, build_graph, check_beta


@dataclass
class RelevanceGeometry:
    """Launch geometry of the relevance kernel: ``lanes`` threads per vertex (power of two),
    ``vertices`` per block, at most ``max_blocks`` blocks (grid-stride beyond that)."""

    lanes: int = 32
    vertices: int = 8
    max_blocks: int = 65536


@dataclass
class StarResult:
    """Overlapping clusters of n_docs documents.

    centers int32 (k,) ascending; membership CSR float32 (n_docs, k), ones; relevance float64
    (n_docs,); linked_to int32 (n_docs,): the center a vertex was linked to by the improvement
    (-1 for none); graph: the StarGraph (None when not kept); stats: counts and seconds.
    """

    n_docs: int
    centers: np.ndarray
    membership: sp.csr_matrix
    relevance: np.ndarray
    linked_to: np.ndarray
    graph: StarGraph | None = None
    stats: dict = field(default_factory=dict)

    @property
    def n_clusters(self) -> int:
        return int(len(self.centers))

    def clusters(self) -> list[np.ndarray]:
        """Member document ids of each cluster (ascending), in the order of ``centers``."""
        csc = self.membership.tocsc()
        return [np.sort(csc.indices[csc.indptr[k]:csc.indptr[k + 1]]).astype(np.int64) for k in range(self.n_clusters)]

    def cluster_sets(self) -> dict[int, frozenset]:
        """{center: frozenset(members)} (for tests and comparisons)."""
        return {int(c): frozenset(int(x) for x in m) for c, m in zip(self.centers, self.clusters())}


# ----------------------------------------------------------------------------- relevance

def compute_relevance(graph: StarGraph, device: str | Backend = "cpu",
                      geometry: RelevanceGeometry | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(count int32 (n,), relevance float64 (n,)) of every vertex; see gputext.kernels.star."""
    backend = device if isinstance(device, Backend) else resolve(device)
    ais = graph.ais
    if backend.is_cuda:
        g = geometry or RelevanceGeometry()
        return kstar.relevance_device(graph.indptr, graph.indices, graph.degree, ais, g.lanes, g.vertices, g.max_blocks)
    count = np.zeros(graph.n, np.int32)
    rel = np.zeros(graph.n, np.float64)
    if graph.n:
        kstar.relevance_cpu(graph.indptr, graph.indices, graph.degree, ais, count, rel)
    return count, rel


def candidate_order(relevance: np.ndarray, vertex_ids: np.ndarray | None = None) -> np.ndarray:
    """Vertices with relevance > 0 in decreasing relevance, ties by lower (global) id: int64 positions."""
    n = len(relevance)
    ids = np.arange(n) if vertex_ids is None else np.asarray(vertex_ids)
    pos = np.flatnonzero(relevance > 0)
    order = np.lexsort((ids[pos], -relevance[pos]))
    return pos[order].astype(np.int64)


def degree_order(degree: np.ndarray, vertices: np.ndarray, vertex_ids: np.ndarray | None = None) -> np.ndarray:
    """``vertices`` sorted by decreasing degree, ties by lower (global) id: int64."""
    vertices = np.asarray(vertices, np.int64)
    ids = vertices if vertex_ids is None else np.asarray(vertex_ids)[vertices]
    return vertices[np.lexsort((ids, -degree[vertices]))]


# ----------------------------------------------------------------------------- cover (stage 2)

@numba.njit(cache=True)
def _mark_covered(indptr, indices, v, covered):
    covered[v] = True
    for p in range(indptr[v], indptr[v + 1]):
        covered[indices[p]] = True


@numba.njit(cache=True)
def _needs_center(indptr, indices, v, covered):
    if not covered[v]:
        return True
    for p in range(indptr[v], indptr[v + 1]):
        if not covered[indices[p]]:
            return True
    return False


@numba.njit(parallel=True, cache=True)
def _still_open(indptr, indices, candidates, lo, hi, is_center, covered, open_):
    """open_[k] = candidates[k] is not a center and it or a neighbour is uncovered, for k in
    [lo, hi): one candidate per prange iteration, reading is_center and covered only."""
    for k in prange(lo, hi):
        v = candidates[k]
        open_[k] = (not is_center[v]) and _needs_center(indptr, indices, v, covered)


@numba.njit(cache=True)
def _visit_block(indptr, indices, candidates, lo, hi, open_, is_center, covered):
    """The sequential visit of candidates[lo:hi] that were still open at the block's start."""
    added = 0
    for k in range(lo, hi):
        if not open_[k]:
            continue
        v = candidates[k]
        if is_center[v]:
            continue
        if _needs_center(indptr, indices, v, covered):
            is_center[v] = True
            _mark_covered(indptr, indices, v, covered)
            added += 1
    return added


def cover_candidates(indptr, indices, candidates, is_center, covered, block: int = 256,
                     max_block: int = 16384) -> int:
    """Visit ``candidates`` (int64, in order); make v a center when v or a neighbour is uncovered.

    is_center, covered bool (n,) updated in place (they may already hold centers, e.g. isolated
    vertices or DClustR's kept centers).  Returns the number of centers added.
    The visit is sequential, but most late candidates are covered with all their neighbours, and
    deciding that scans their whole row: so the candidates are taken in blocks (``block``
    doubling up to ``max_block``) and a parallel pass first drops those with nothing uncovered
    (``_still_open``).  covered and is_center only ever become True, so a candidate closed at the
    start of its block is still closed at its turn: the survivors are then visited in order and
    re-checked (``_visit_block``), which gives exactly the sequential result.
    """
    candidates = np.asarray(candidates, np.int64)
    open_ = np.zeros(len(candidates), np.bool_)
    added = 0
    lo = 0
    while lo < len(candidates):
        hi = min(len(candidates), lo + block)
        _still_open(indptr, indices, candidates, lo, hi, is_center, covered, open_)
        added += _visit_block(indptr, indices, candidates, lo, hi, open_, is_center, covered)
        lo = hi
        block = min(2 * block, max_block)
    return added


def initial_cover(graph: StarGraph, relevance: np.ndarray, vertex_ids: np.ndarray | None = None) -> np.ndarray:
    """OClustR's stage 2: bool (n,) centers of the initial clusters."""
    n = graph.n
    is_center = graph.degree == 0  # isolated vertices: degenerate ws-graphs, their own clusters
    covered = is_center.copy()
    cover_candidates(graph.indptr, graph.indices, candidate_order(relevance, vertex_ids), is_center, covered)
    if not covered.all():  # cannot happen (every neighbour of a relevance-0 vertex has relevance > 0)
        raise AssertionError(f"OClustR cover left {int((~covered).sum())} of {n} vertices uncovered")
    return is_center


# ----------------------------------------------------------------------------- improvement (stage 3)

@numba.njit(cache=True)
def _fold(part, t, u, r, take_max):
    if not take_max:
        part[t, u] += r
    elif r > part[t, u]:
        part[t, u] = r


@numba.njit(parallel=True, cache=True)
def star_reduce(indptr, indices, centers, values, take_max, chunks):
    """float64 (n,): at each vertex, the max (``take_max``) or the sum of values[k] (float64, one
    per center) over the stars {c} U Adj(c) of ``centers`` (int64) that hold it; -1 (max) or 0
    (sum) where none does.  The centers in ``chunks`` contiguous pieces, one prange task each with
    a private row, then one reduction per vertex: a max is order-free and the sums here are of
    small integers (exact in float64), so the result does not depend on the chunks."""
    n = indptr.shape[0] - 1
    m = centers.shape[0]
    chunks = max(1, min(chunks, m, (1 << 24) // max(n, 1)))
    none = -1.0 if take_max else 0.0
    part = np.full((chunks, n), none)
    for t in prange(chunks):
        for k in range(m * t // chunks, m * (t + 1) // chunks):
            c = centers[k]
            _fold(part, t, c, values[k], take_max)
            for p in range(indptr[c], indptr[c + 1]):
                _fold(part, t, indices[p], values[k], take_max)
    out = np.empty(n)
    for u in prange(n):
        acc = none
        for t in range(chunks):
            x = part[t, u]
            if not take_max:
                acc += x
            elif x > acc:
                acc = x
        out[u] = acc
    return out


@numba.njit(cache=True)
def _non_useful(indptr, indices, u, cnt):
    """u's ws-graph {u} U Adj(u) has more vertices shared with other ws-graphs (cnt > 1) than
    vertices only it holds.  Scans Adj(u) only until the answer is certain: shared > size/2
    already, or can no longer exceed it."""
    size = indptr[u + 1] - indptr[u] + 1
    shared = 1 if cnt[u] > 1 else 0
    own = 1 - shared
    for q in range(indptr[u], indptr[u + 1]):
        if cnt[indices[q]] > 1:
            shared += 1
            if 2 * shared > size:
                return True
        else:
            own += 1
            if 2 * own >= size:
                return False
    return shared > own


def improve_centers(indptr, indices, order, is_center, linked_to) -> int:
    """OClustR's removal of non-useful ws-graphs.

    order int64: the centers, by decreasing degree then lower id.  is_center bool (n,) is updated
    (removed centers become False); linked_to int32 (n,) (all -1 on entry) receives, for each
    vertex linked to a center, that center.  Returns the number of centers removed.
    """
    # current ws-graphs holding each vertex
    cnt = star_reduce(indptr, indices, order, np.ones(len(order)), False, numba.get_num_threads()).astype(np.int32)
    return _improve(indptr, indices, order, is_center, linked_to, cnt)


@numba.njit(cache=True)
def _improve(indptr, indices, order, is_center, linked_to, cnt):
    """improve_centers's sequential visit; cnt int32 (n,) is updated as stars are removed."""
    n = indptr.shape[0] - 1
    visited = np.zeros(n, np.bool_)
    removed = 0
    for k in range(order.shape[0]):
        v = order[k]
        if not is_center[v]:
            continue
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            if not is_center[u] or visited[u]:
                continue
            if _non_useful(indptr, indices, u, cnt):
                is_center[u] = False
                removed += 1
                cnt[u] -= 1  # u is also in v's star, so cnt[u] >= 2 here
                for q in range(indptr[u], indptr[u + 1]):
                    w = indices[q]
                    if cnt[w] == 1:
                        linked_to[w] = v  # only u covered w: w joins v's cluster
                    else:
                        cnt[w] -= 1
        visited[v] = True
    return removed


@numba.njit(cache=True)
def _membership_csr(indptr, indices, centers, linked_to, cluster_of_center):
    """Membership CSR (n, k) by a counting sort on documents: cluster k = {centers[k]} U
    Adj(centers[k]) U {v: linked_to[v] = centers[k]}.  Clusters are visited in ascending k, so
    every row's cluster ids come out ascending.  Returns (row_ptr int64 (n+1,), cols int32) and
    -1 in row_ptr[0] when a document would enter one cluster twice (cannot happen: a vertex is
    linked only when no remaining star holds it)."""
    n = indptr.shape[0] - 1
    k_total = centers.shape[0]
    counts = np.zeros(n + 1, np.int64)
    for k in range(k_total):
        c = centers[k]
        counts[c + 1] += 1
        for p in range(indptr[c], indptr[c + 1]):
            counts[indices[p] + 1] += 1
    for v in range(n):
        if linked_to[v] >= 0:
            counts[v + 1] += 1
    for v in range(n):
        counts[v + 1] += counts[v]
    row_ptr = counts.copy()
    cols = np.empty(counts[n], np.int32)
    cursor = counts[:n].copy()
    # linked vertices: their cluster joins at its center's turn, so walk clusters in order and
    # add each cluster's linked members from a per-cluster list
    link_ptr = np.zeros(k_total + 1, np.int64)
    for v in range(n):
        if linked_to[v] >= 0:
            link_ptr[cluster_of_center[linked_to[v]] + 1] += 1
    for k in range(k_total):
        link_ptr[k + 1] += link_ptr[k]
    link_fill = link_ptr[:k_total].copy()
    linked = np.empty(link_ptr[k_total], np.int64)
    for v in range(n):
        if linked_to[v] >= 0:
            k = cluster_of_center[linked_to[v]]
            linked[link_fill[k]] = v
            link_fill[k] += 1
    for k in range(k_total):
        c = centers[k]
        for t in range(-1, indptr[c + 1] - indptr[c] + link_ptr[k + 1] - link_ptr[k]):
            if t < 0:
                v = c
            elif t < indptr[c + 1] - indptr[c]:
                v = indices[indptr[c] + t]
            else:
                v = linked[link_ptr[k] + t - (indptr[c + 1] - indptr[c])]
            pos = cursor[v]
            if pos > row_ptr[v] and cols[pos - 1] == k:
                row_ptr[0] = -1
                return row_ptr, cols
            cols[pos] = k
            cursor[v] = pos + 1
    return row_ptr, cols


def membership_matrix(graph: StarGraph, centers: np.ndarray, linked_to: np.ndarray) -> sp.csr_matrix:
    """CSR float32 (n, k): cluster k = {centers[k]} U Adj(centers[k]) U linked to it; indices
    sorted within rows."""
    n = graph.n
    centers = np.asarray(centers, np.int64)
    cluster_of_center = np.full(n, -1, np.int64)
    cluster_of_center[centers] = np.arange(len(centers))
    row_ptr, cols = _membership_csr(graph.indptr, graph.indices, centers, np.asarray(linked_to, np.int32),
                                    cluster_of_center)
    if n and row_ptr[0] < 0:
        raise AssertionError("a vertex was counted twice in one cluster")
    M = sp.csr_matrix((np.ones(len(cols), np.float32), cols, row_ptr), shape=(n, len(centers)))
    M.has_sorted_indices = True
    return M


# ----------------------------------------------------------------------------- OClustR

def oclustr_graph(graph: StarGraph, device: str | Backend = "cpu", geometry: RelevanceGeometry | None = None) -> StarResult:
    """OClustR on a given graph (stages 2-4): relevance on ``device``, cover and improvement on
    the host."""
    t0 = time.perf_counter()
    backend = device if isinstance(device, Backend) else resolve(device)
    if backend.is_cuda and graph.relevance is not None:
        rel = graph.relevance  # computed on the device by the graph build, before the transfer
    else:
        _, rel = compute_relevance(graph, backend, geometry)
    t1 = time.perf_counter()
    is_center = initial_cover(graph, rel)
    n_initial = int(is_center.sum())
    linked_to = np.full(graph.n, -1, np.int32)
    order = degree_order(graph.degree, np.flatnonzero(is_center))
    removed = improve_centers(graph.indptr, graph.indices, order, is_center, linked_to)
    centers = np.flatnonzero(is_center).astype(np.int32)
    membership = membership_matrix(graph, centers, linked_to)
    t2 = time.perf_counter()
    stats = {"n_docs": graph.n, "n_edges": graph.n_edges, "n_isolated": int((graph.degree == 0).sum()),
             "n_initial_clusters": n_initial, "n_removed": int(removed), "n_clusters": int(len(centers)),
             "seconds_relevance": t1 - t0, "seconds_cover": t2 - t1}
    return StarResult(graph.n, centers, membership, rel, linked_to, graph, stats)


def cluster_star(X, beta: float = 0.25, device: str | Backend = "auto", batch_size: int | None = None,
                 shards: int | None = None, quiet: bool = True, geometry: RelevanceGeometry | None = None,
                 engine_geometry=None, graph_geometry=None) -> StarResult:
    """OClustR / CUDA-OClus on the rows of X (CSR (n_docs, n_terms), or a gputext Corpus).

    beta: cosine threshold in [1e-4, 1].  device: "auto" | "cpu" | "cuda" or a Backend: the graph
    (engine) and the relevance run there; the cover and the improvement on the host.  On cuda the
    graph's edges, its symmetric CSR and the relevance are made on the device and come to the host
    once (gputext.cluster.graph_cuda; ``graph_geometry`` its launch geometry); seconds_graph then
    includes that transfer and seconds_relevance is ~0 (graph_device_seconds has the stages).
    Returns a StarResult whose stats include the seconds of each stage.
    """
    from ..io.corpus import Corpus

    beta = check_beta(beta)
    if isinstance(X, Corpus):
        X = X.X
    if not sp.issparse(X):
        raise InputError(f"cluster_star needs a CSR document-term matrix or a Corpus, got {type(X).__name__}")
    backend = device if isinstance(device, Backend) else resolve(device)
    t0 = time.perf_counter()
    graph = build_graph(X, beta, backend, batch_size=batch_size, shards=shards, quiet=quiet,
                        engine_geometry=engine_geometry, graph_geometry=graph_geometry,
                        relevance_geometry=geometry or RelevanceGeometry())
    t1 = time.perf_counter()
    result = oclustr_graph(graph, backend, geometry)
    result.stats.update({"beta": beta, "backend": backend.name, "seconds_graph": t1 - t0,
                         "seconds_total": time.perf_counter() - t0, **{f"graph_{k}": v for k, v in graph.stats.items()}})
    return result
