"""DClustR's cover update and OClustR's improvement on the graph of the affected components
(the update's cover and improve stages; paper section 2.2).

The cover update, with C' = the old centers of those components: V+ (vertices not in C' with
relevance > 0) is scanned: v enters the candidate list L when (a) v is uncovered, (b) a
neighbour of v is uncovered, or (c) some neighbour u has no center of C' covering it with
relevance >= relevance(v); the u of (c) are marked "active".  Then each c in C' is scanned:
every neighbour with larger relevance enters L and makes c "weak"; a weak c, or one with an
active neighbour, leaves C' (and enters L when its relevance is > 0).  The remaining C' are
centers; L is visited in decreasing relevance (ties: lower id first) and v becomes a center
when v or a neighbour is uncovered.  Linked lists are emptied (the improvement recomputes them).

This always covers the component (checked by an assertion): a vertex left uncovered would have
had all its C' coverers removed; a removed coverer c with relevance > 0 is itself in L and
becomes a center again if its star still has an uncovered vertex when it is visited; a removed c
with relevance 0 was weak, so all its neighbours (relevance > 0, since two adjacent vertices
cannot both have relevance 0) are in L; an initially uncovered vertex enters L by (a) or, with
relevance 0, all its neighbours enter L by (b).

The improvement stage of OClustR (gputext.cluster.star_host.improve_centers) then gives the
final clusters.  The compiled loops are in gputext.cluster.star_host.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numba
import numpy as np

from ...backend import Backend
from ..graph import StarGraph
from ..star import RelevanceGeometry, StarResult, candidate_order, compute_relevance, degree_order, membership_matrix
from ..star_host import covered_by, cover_candidates, dclustr_scan, improve_centers, star_reduce


def dclustr_lists(indptr, indices, relevance, is_center, in_list) -> tuple[int, int]:
    """DClustR's candidate list (paper section 2.2) on a graph whose current centers are C'.

    indptr int64 (n+1,), indices int32: symmetric adjacency; relevance float64 (n,); is_center
    bool (n,): C' on entry; the centers that must leave C' are set False.  in_list bool (n,)
    (all False on entry) receives L.  Returns (centers removed, vertices activated).

    Every rule reads C' as it was on entry and the relevances, so the result does not depend
    on the order in which vertices are visited.  best[] is a scatter over the rows of the centers
    (``star.star_reduce``); then one parallel pass over every row (one vertex per prange iteration, each
    writing only its own entries) and one over the centers' rows:
      best[u]   = largest relevance of a center of C' covering u (u itself or a neighbour), -1 if none;
      V+ scan   : v (not in C', relevance > 0) enters L if best[v] < 0 (a), or some neighbour u has
                  best[u] < relevance(v) ((b): best[u] = -1 < relevance(v); (c) otherwise);
      activated : u is activated when some neighbour v in V+ has relevance(v) > best[u];
      C' scan   : a neighbour u of a center c with relevance(u) > relevance(c) enters L (c is weak);
                  a weak c, or one with an activated neighbour, leaves C' and enters L when its
                  relevance is > 0.
    """
    centers = np.flatnonzero(is_center)
    best = star_reduce(indptr, indices, centers, relevance[centers], True, numba.get_num_threads())
    return dclustr_scan(indptr, indices, relevance, is_center, in_list, best)


def dclustr_cover(graph: StarGraph, relevance: np.ndarray, old_center: np.ndarray,
                  vertex_ids: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """Updated centers (bool (n,)) of the affected components after DClustR's cover update.

    old_center bool (n,): C'.  vertex_ids: global ids (ascending) for the tie rules.
    """
    n = graph.n
    is_center = np.asarray(old_center, bool).copy()
    in_list = np.zeros(n, bool)
    removed, n_active = dclustr_lists(graph.indptr, graph.indices, relevance, is_center, in_list)
    kept = int(is_center.sum())
    is_center |= graph.degree == 0  # isolated vertices are their own clusters
    covered = np.zeros(n, bool)
    covered_by(graph.indptr, graph.indices, is_center, covered)
    order = candidate_order(np.where(in_list, relevance, 0.0), vertex_ids)
    added = cover_candidates(graph.indptr, graph.indices, order, is_center, covered)
    if not covered.all():
        raise AssertionError(f"DClustR cover left {int((~covered).sum())} vertices uncovered")
    stats = {"old_centers": int(np.asarray(old_center, bool).sum()), "old_centers_removed": int(removed),
             "old_centers_kept": kept, "activated": int(n_active), "candidates": int(in_list.sum()),
             "centers_added": int(added)}
    return is_center, stats


@dataclass
class Cover:
    """The cover stage's result: relevance float64 (n,), is_center bool (n,) (the centers of the
    updated initial clusters), stats (counts and seconds)."""

    relevance: np.ndarray
    is_center: np.ndarray
    stats: dict


def cover(graph: StarGraph, old_center: np.ndarray, device: str | Backend = "cpu",
          geometry: RelevanceGeometry | None = None, vertex_ids: np.ndarray | None = None) -> Cover:
    """Relevance of every vertex of ``graph`` (on ``device``) and DClustR's cover update given
    the previous centers C' (bool (n,)); vertex_ids: global ids (ascending) for the tie rules."""
    t0 = time.perf_counter()
    _, rel = compute_relevance(graph, device, geometry)
    t1 = time.perf_counter()
    is_center, stats = dclustr_cover(graph, rel, old_center, vertex_ids)
    stats.update({"seconds_relevance": t1 - t0, "seconds_cover": time.perf_counter() - t1})
    return Cover(rel, is_center, stats)


def improve(graph: StarGraph, c: Cover, vertex_ids: np.ndarray | None = None) -> StarResult:
    """OClustR's improvement after the cover: the final clusters of ``graph`` (local ids)."""
    t2 = time.perf_counter()
    is_center = c.is_center
    n_initial = int(is_center.sum())
    linked_to = np.full(graph.n, -1, np.int32)
    order = degree_order(graph.degree, np.flatnonzero(is_center), vertex_ids)
    removed = improve_centers(graph.indptr, graph.indices, order, is_center, linked_to)
    centers = np.flatnonzero(is_center).astype(np.int32)
    t3 = time.perf_counter()
    membership = membership_matrix(graph, centers, linked_to)
    t4 = time.perf_counter()
    stats = dict(c.stats)
    stats.update({"n_initial_clusters": n_initial, "n_removed": int(removed), "n_clusters": int(len(centers)),
                  "seconds_improve": t3 - t2, "seconds_membership": t4 - t3})
    return StarResult(graph.n, centers, membership, c.relevance, linked_to, graph, stats)


def dclustr_graph(graph: StarGraph, old_center: np.ndarray, device: str | Backend = "cpu",
                  geometry: RelevanceGeometry | None = None, vertex_ids: np.ndarray | None = None) -> StarResult:
    """DClustR's update of the clusters of ``graph`` (all of it taken as affected), given the
    previous centers C' (bool (n,)).  With no previous centers it is OClustR."""
    return improve(graph, cover(graph, old_center, device, geometry, vertex_ids), vertex_ids)
