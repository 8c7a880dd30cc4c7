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

The compiled loops of stages 3 and 4 are in gputext.cluster.star_host (host-side numba code of
the family), the relevance kernel and its twin in gputext.kernels.star.

Output: clusters in ascending order of their center's id; membership CSR (n_docs, n_clusters)
float32 ones (a document is in every cluster that contains it), centers int32.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..backend import Backend, as_backend
from ..errors import InputError
from ..kernels import star as kstar
from .graph import StarGraph, build_graph, check_beta
from .star_host import cover_candidates, improve_centers, membership_csr


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
    backend = as_backend(device)
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

def initial_cover(graph: StarGraph, relevance: np.ndarray, vertex_ids: np.ndarray | None = None) -> np.ndarray:
    """OClustR's stage 2: bool (n,) centers of the initial clusters."""
    n = graph.n
    is_center = graph.degree == 0  # isolated vertices: degenerate ws-graphs, their own clusters
    covered = is_center.copy()
    cover_candidates(graph.indptr, graph.indices, candidate_order(relevance, vertex_ids), is_center, covered)
    if not covered.all():  # cannot happen (every neighbour of a relevance-0 vertex has relevance > 0)
        raise AssertionError(f"OClustR cover left {int((~covered).sum())} of {n} vertices uncovered")
    return is_center


# ----------------------------------------------------------------------------- membership

def membership_matrix(graph: StarGraph, centers: np.ndarray, linked_to: np.ndarray) -> sp.csr_matrix:
    """CSR float32 (n, k): cluster k = {centers[k]} U Adj(centers[k]) U linked to it; indices
    sorted within rows."""
    n = graph.n
    centers = np.asarray(centers, np.int64)
    cluster_of_center = np.full(n, -1, np.int64)
    cluster_of_center[centers] = np.arange(len(centers))
    row_ptr, cols = membership_csr(graph.indptr, graph.indices, centers, np.asarray(linked_to, np.int32),
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
    backend = as_backend(device)
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
                 engine_geometry=None, graph_geometry=None, client=None) -> StarResult:
    """OClustR / CUDA-OClus on the rows of X (CSR (n_docs, n_terms), or a gputext Corpus).

    beta: cosine threshold in [1e-4, 1].  device: "auto" | "cpu" | "cuda" or a Backend: the graph
    (engine) and the relevance run there; the cover and the improvement on the host.  On cuda the
    graph's edges, its symmetric CSR and the relevance are made on the device and come to the host
    once (gputext.cluster.graph_cuda; ``graph_geometry`` its launch geometry); seconds_graph then
    includes that transfer and seconds_relevance is ~0 (graph_device_seconds has the stages).
    Returns a StarResult whose stats include the seconds of each stage.
    client: a dask.distributed Client: the graph is scored on its workers (X may then also be the
    path of a corpus file they read; gputext.distributed.star), the relevance, cover and
    improvement run here on the CPU; the same clusters.
    """
    from ..io.corpus import Corpus

    beta = check_beta(beta)
    if client is not None:
        from ..distributed.star import build_graph_distributed
        t0 = time.perf_counter()
        graph = build_graph_distributed(X.X if isinstance(X, Corpus) else X, beta, client, getattr(device, "name", device),
                                        batch_size, shards, quiet)
        t1 = time.perf_counter()
        result = oclustr_graph(graph, "cpu", geometry)
        result.stats.update({"beta": beta, "backend": "dask", "seconds_graph": t1 - t0,
                             "seconds_total": time.perf_counter() - t0,
                             **{f"graph_{k}": v for k, v in graph.stats.items()}})
        return result
    if isinstance(X, Corpus):
        X = X.X
    if not sp.issparse(X):
        raise InputError(f"cluster_star needs a CSR document-term matrix or a Corpus, got {type(X).__name__}")
    backend = as_backend(device)
    t0 = time.perf_counter()
    graph = build_graph(X, beta, backend, batch_size=batch_size, shards=shards, quiet=quiet,
                        engine_geometry=engine_geometry, graph_geometry=graph_geometry,
                        relevance_geometry=geometry or RelevanceGeometry())
    t1 = time.perf_counter()
    result = oclustr_graph(graph, backend, geometry)
    result.stats.update({"beta": beta, "backend": backend.name, "seconds_graph": t1 - t0,
                         "seconds_total": time.perf_counter() - t0, **{f"graph_{k}": v for k, v in graph.stats.items()}})
    return result
