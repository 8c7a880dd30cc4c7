"""Host-side numba code of star clustering (OClustR's cover and improvement, DClustR's cover lists).

Each function here is a compiled loop over a symmetric CSR graph (indptr int64 (n+1,), indices
int32, rows sorted); the stages that call them are gputext.cluster.star (OClustR) and
gputext.cluster.dclus.cover (DClustR).  Parallel loops say what one prange iteration does; the
sequential ones are inherently ordered (a visit in a fixed order, as the paper defines it).
The device kernels of the family (relevance, graph assembly) are in gputext.kernels.star.
"""
from __future__ import annotations

import numba
from numba import prange
import numpy as np
from ..kernels.jit import cpu_jit


# ----------------------------------------------------------------------------- cover (OClustR stage 2)

@cpu_jit
def _mark_covered(indptr, indices, v, covered):
    covered[v] = True
    for p in range(indptr[v], indptr[v + 1]):
        covered[indices[p]] = True


@cpu_jit
def _needs_center(indptr, indices, v, covered):
    if not covered[v]:
        return True
    for p in range(indptr[v], indptr[v + 1]):
        if not covered[indices[p]]:
            return True
    return False


@cpu_jit(parallel=True)
def _still_open(indptr, indices, candidates, lo, hi, is_center, covered, open_):
    """open_[k] = candidates[k] is not a center and it or a neighbour is uncovered, for k in
    [lo, hi): one candidate per prange iteration, reading is_center and covered only."""
    for k in prange(lo, hi):
        v = candidates[k]
        open_[k] = (not is_center[v]) and _needs_center(indptr, indices, v, covered)


@cpu_jit
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


# ----------------------------------------------------------------------------- improvement (OClustR stage 3)

@cpu_jit
def _fold(part, t, u, r, take_max):
    if not take_max:
        part[t, u] += r
    elif r > part[t, u]:
        part[t, u] = r


@cpu_jit(parallel=True)
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


@cpu_jit
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


@cpu_jit
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


# ----------------------------------------------------------------------------- membership

@cpu_jit
def membership_csr(indptr, indices, centers, linked_to, cluster_of_center):
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


# ----------------------------------------------------------------------------- DClustR's cover lists

@cpu_jit(parallel=True)
def dclustr_scan(indptr, indices, relevance, is_center, in_list, best):
    """gputext.cluster.dclus.cover.dclustr_lists after best[]: the V+ scan, the activations and
    the C' scan (see there)."""
    n = indptr.shape[0] - 1
    active = np.zeros(n, np.bool_)
    for v in prange(n):  # one pass over every row: activation of v, V+ scan of v, v as a more relevant neighbour
        rv = relevance[v]
        in_vplus = (not is_center[v]) and rv > 0.0
        take = in_vplus and best[v] < 0.0  # (a)
        top = -1.0  # largest relevance of a V+ neighbour of v
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            ru = relevance[u]
            if is_center[u]:
                if rv > ru:  # u is a weak center of C' and v its more relevant neighbour
                    take = True
            elif ru > top and ru > 0.0:
                top = ru
            if in_vplus and best[u] < rv:  # (b) or (c)
                take = True
        active[v] = top > best[v]
        in_list[v] = take
    leave = np.zeros(n, np.bool_)
    for v in prange(n):  # C' scan (rows of centers only): weak, or an activated neighbour
        if is_center[v]:
            rv = relevance[v]
            for p in range(indptr[v], indptr[v + 1]):
                u = indices[p]
                if relevance[u] > rv or active[u]:
                    leave[v] = True
                    break
    removed = 0
    n_active = 0
    for v in range(n):
        if active[v]:
            n_active += 1
        if leave[v]:
            if relevance[v] > 0.0:
                in_list[v] = True
            is_center[v] = False
            removed += 1
    return removed, n_active


@cpu_jit(parallel=True)
def covered_by(indptr, indices, is_center, covered):
    """covered[v] = v is a center or adjacent to one (one vertex per prange iteration, a gather)."""
    for v in prange(indptr.shape[0] - 1):
        c = is_center[v]
        p = indptr[v]
        while not c and p < indptr[v + 1]:
            c = is_center[indices[p]]
            p += 1
        covered[v] = c
