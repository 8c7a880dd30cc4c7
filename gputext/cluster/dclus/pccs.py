"""PCCs: the partial connected components of the star graph (paper section 3.2), and the update's
PCC stage.

A partial connected component (PCC) is a connected subgraph induced by a subset of vertices.
They are built as the paper describes: vertices are processed in the order they were added; a
vertex without a PCC starts a new one; each successor u of v (u after v, plus, during an update,
every old vertex) with S(v, u) >= beta joins v's PCC if it has none, and otherwise the two PCCs
are "linked" when they differ.  A PCC together with everything linked to it, transitively, is a
connected component; we keep only the links that join PCCs not yet connected (a spanning forest
of the paper's link relation, which gives the same components).  Old PCCs never gain vertices
(new vertices always start or join new PCCs), only edges.  The compiled loops are in
gputext.cluster.dclus.host.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from ..graph import StarGraph
from .host import add_owner_stats, assign_pcc_rows, components_of_pccs, distinct_old_pccs, union_links


def assign_pcc(indptr, indices, pcc_of, first, next_pcc, parent):
    """Assign vertices first..n-1 (rows 0.. of indptr/indices) to PCCs, in order (see
    ``host.assign_pcc_rows``).  In an update (first > 0) each row's neighbours among the old vertices
    are first reduced, in parallel, to their distinct PCCs in order of first occurrence
    (``host.distinct_old_pccs``): a PCC met again along a row is already connected to the row's PCC
    and never adds a link, so the links are the same as walking every entry."""
    if first > 0 and len(indices):
        dpcc, dcnt, n_before = distinct_old_pccs(indptr, indices, pcc_of, first, int(pcc_of[:first].max()) + 1,
                                                  max(1, min(numba.get_num_threads() * 4, indptr.shape[0] - 1)))
    else:
        dpcc, dcnt, n_before = (np.empty(0, np.int32), np.zeros(indptr.shape[0] - 1, np.int64),
                                np.zeros(indptr.shape[0] - 1, np.int64))
    return assign_pcc_rows(indptr, indices, pcc_of, first, next_pcc, parent, dpcc, dcnt, n_before,
                       first > 0 and len(indices) > 0)


def sort_links(links: np.ndarray) -> np.ndarray:
    links = np.asarray(links, np.int32).reshape(-1, 2)
    if len(links) == 0:
        return np.empty((0, 2), np.int32)
    return links[np.lexsort((links[:, 1], links[:, 0]))]


def pcc_layout(pcc_of: np.ndarray, n_pcc: int) -> tuple[np.ndarray, np.ndarray]:
    """(order int32 (n,), pcc_indptr int64 (n_pcc+1,)): documents grouped by PCC, ascending within."""
    order = np.argsort(pcc_of, kind="stable").astype(np.int32)
    indptr = np.zeros(n_pcc + 1, np.int64)
    np.cumsum(np.bincount(pcc_of, minlength=n_pcc), out=indptr[1:])
    return order, indptr


@dataclass
class PCCs:
    """pcc_of int32 (n,), links int32 (k, 2) (spanning forest), order int32 (n,), pcc_indptr int64 (n_pcc+1,)."""

    pcc_of: np.ndarray
    links: np.ndarray
    order: np.ndarray
    pcc_indptr: np.ndarray

    @property
    def n_pcc(self) -> int:
        return len(self.pcc_indptr) - 1

    def components(self) -> np.ndarray:
        return components_of_pccs(self.n_pcc, self.links)

    def members(self, p: int) -> np.ndarray:
        return self.order[self.pcc_indptr[p]:self.pcc_indptr[p + 1]]


def build_pccs(graph: StarGraph) -> PCCs:
    """The array of PCCs of a whole graph, processing vertices 0..n-1 (paper, Figures 9-12)."""
    pcc_of = np.full(graph.n, -1, np.int32)
    n_pcc, links = assign_pcc(graph.indptr, graph.indices, pcc_of, 0, 0, np.empty(graph.n, np.int32))
    order, pcc_indptr = pcc_layout(pcc_of, n_pcc)
    return PCCs(pcc_of, sort_links(links), order, pcc_indptr)


# ----------------------------------------------------------------------------- the update's PCC stage

@dataclass
class UnionPCCs:
    """The PCCs and per-document sums of the union after an update's PCC stage.

    pcc_of int32 (n_total,); n_pcc; links int32 (k, 2) sorted (old + new); degree int32 and
    weight_sum int64 (n_total,): the union's stored degree and fixed-point weight sums;
    old_affected int64: the old PCCs of the connected components the new vertices touch
    (ascending); components_total / components_touched: connected components of the union."""

    pcc_of: np.ndarray
    n_pcc: int
    links: np.ndarray
    degree: np.ndarray
    weight_sum: np.ndarray
    old_affected: np.ndarray
    components_total: int
    components_touched: int


def pccs_of_additions(meta, rows) -> UnionPCCs:
    """Assign the new vertices (owner rows ``rows``: ptr, idx, w of vertices n_old..) to new PCCs,
    linking them to old ones; add their edges to both endpoints' degree and weight sums; find
    the connected components they touch and the old PCCs in those.  ``meta``: the stored graph's
    small arrays (gputext.cluster.dclus.store.GraphOnDisk)."""
    n_old, n_new = meta.n_docs, len(rows.ptr) - 1
    pcc_of = np.concatenate([meta.pcc_of, np.full(n_new, -1, np.int32)])
    parent = np.empty(meta.n_pcc + n_new, np.int32)
    parent[:meta.n_pcc] = np.arange(meta.n_pcc, dtype=np.int32)
    union_links(parent, meta.links)
    n_pcc, new_links = assign_pcc(rows.ptr, rows.idx, pcc_of, n_old, meta.n_pcc, parent)
    links = sort_links(np.concatenate([meta.links, new_links]))
    # degree and fixed-point weight sums of the union (old vertices gain only the new edges)
    degree = np.concatenate([meta.degree, np.zeros(n_new, np.int32)])
    weight_sum = np.concatenate([meta.weight_sum, np.zeros(n_new, np.int64)])
    add_owner_stats(rows.ptr, rows.idx, rows.w, n_old, degree, weight_sum, max(1, numba.get_num_threads()))
    comp = components_of_pccs(n_pcc, links)
    affected_comp = np.zeros(n_pcc, bool)
    affected_comp[np.unique(comp[meta.n_pcc:])] = True
    old_affected = np.flatnonzero(affected_comp[comp][:meta.n_pcc])
    return UnionPCCs(pcc_of, int(n_pcc), links, degree, weight_sum, old_affected, int(len(np.unique(comp))),
                     int(affected_comp.sum()))
