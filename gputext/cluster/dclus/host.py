"""Host-side numba code of DClustR's update (the stages are in the modules of this package).

Compiled loops over owner rows (each edge stored once, in the row of one endpoint; see
gputext.cluster.dclus.store) and over PCC ids: the PCC assignment and its union-find, the
owner rows of new vertices, symmetric rows of a vertex set from its owner rows, degree and
fixed-point weight sums, FNV-1a hashes of document ids.  Parallel loops say what one prange
iteration does; the PCC assignment is sequential (vertices in the order they were added, as
the paper defines it).
"""
from __future__ import annotations

import numba
from numba import prange
import numpy as np

from ...kernels import star as kstar
from ...kernels.jit import cpu_jit


# ----------------------------------------------------------------------------- PCCs (paper section 3.2)

@cpu_jit
def _find(parent, x):
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@cpu_jit
def union_links(parent, links):
    """Apply links (k, 2) to the union-find ``parent``; smaller root wins."""
    for k in range(links.shape[0]):
        a = _find(parent, links[k, 0])
        b = _find(parent, links[k, 1])
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b


@cpu_jit
def components_of_pccs(n_pcc, links):
    """Connected component label (int32, = smallest PCC id in it) of every PCC (union-find)."""
    parent = np.arange(n_pcc).astype(np.int32)
    union_links(parent, links)
    out = np.empty(n_pcc, np.int32)
    for p in range(n_pcc):
        out[p] = _find(parent, p)
    return out


@cpu_jit(parallel=True)
def distinct_old_pccs(indptr, indices, pcc_of, first, n_pcc_old, chunks):
    """For each row r, the distinct PCCs of its neighbours before ``first`` (old vertices: their
    PCCs are fixed during an update), in order of first occurrence along the row: dpcc[indptr[r]:
    indptr[r] + dcnt[r]].  Rows in ``chunks`` contiguous pieces, one prange task each with its own
    stamp array (n_pcc_old,).  Returns (dpcc int32 (nnz,), dcnt int64 (n_rows,), n_before int64
    (n_rows,): the number of neighbours before ``first``, the front of each ascending row)."""
    n_rows = indptr.shape[0] - 1
    dpcc = np.empty(indices.shape[0], np.int32)
    dcnt = np.zeros(n_rows, np.int64)
    n_before = np.zeros(n_rows, np.int64)
    for c in prange(chunks):
        seen = np.full(max(n_pcc_old, 1), -1, np.int32)
        for r in range(n_rows * c // chunks, n_rows * (c + 1) // chunks):
            d = indptr[r]
            p = indptr[r]
            while p < indptr[r + 1] and indices[p] < first:
                q = pcc_of[indices[p]]
                if seen[q] != r:
                    seen[q] = r
                    dpcc[d] = q
                    d += 1
                p += 1
            dcnt[r] = d - indptr[r]
            n_before[r] = p - indptr[r]
    return dpcc, dcnt, n_before


@cpu_jit
def _link(pu, pv, parent, links, k):
    """Record the link (pu, pv) when the two PCCs are not yet connected; union them."""
    a = _find(parent, pu)
    b = _find(parent, pv)
    if a != b:
        if k == links.shape[0]:
            grown = np.empty((2 * k, 2), np.int32)
            for r in range(k):  # element by element: a slice assignment compiles numba's shape-error path (3 s)
                grown[r, 0] = links[r, 0]
                grown[r, 1] = links[r, 1]
            links = grown
        links[k, 0] = min(pu, pv)
        links[k, 1] = max(pu, pv)
        k += 1
        if a < b:
            parent[b] = a
        else:
            parent[a] = b
    return links, k


@cpu_jit
def assign_pcc_rows(indptr, indices, pcc_of, first, next_pcc, parent, dpcc, dcnt, n_before, reduced):
    """Assign vertices first..n-1 (rows 0.. of indptr/indices) to PCCs, in order.

    indptr int64 (n-first+1,), indices int32: the adjacency rows of vertices first, first+1, ...
    (global ids).  pcc_of int32 (n,) (-1 = none yet) is updated in place; the neighbours examined
    from v are its successors (u > v) and the vertices before ``first`` (the old collection in an
    update; none in a full build).  parent int32 (next_pcc + n - first,): union-find over PCC ids,
    holding the components of the existing links on entry.  A link between two PCCs is recorded
    only when they are not yet connected through earlier links (a spanning forest of the link
    relation: the same connected components, at most n_pcc - 1 links).
    Returns (next_pcc, links int32 (k, 2) with p < q).
    """
    n_rows = indptr.shape[0] - 1
    links = np.empty((n_rows + 1, 2), np.int32)
    k = 0
    for r in range(n_rows):
        v = first + r
        if pcc_of[v] < 0:
            pcc_of[v] = next_pcc
            parent[next_pcc] = next_pcc
            next_pcc += 1
        pv = pcc_of[v]
        last = -1
        if reduced:  # the old neighbours (the front of the ascending row) as their distinct PCCs
            for t in range(indptr[r], indptr[r] + dcnt[r]):
                pu = dpcc[t]
                if pu != pv:
                    last = pu
                    links, k = _link(pu, pv, parent, links, k)
        for p in range(indptr[r] + n_before[r] if reduced else indptr[r], indptr[r + 1]):
            u = indices[p]
            if u > v or u < first:
                pu = pcc_of[u]
                if pu < 0:
                    pcc_of[u] = pv
                elif pu != pv and pu != last:
                    last = pu
                    links, k = _link(pu, pv, parent, links, k)
    return next_pcc, links[:k]


# ----------------------------------------------------------------------------- owner rows

@cpu_jit(parallel=True)
def owner_rows_in_order(n_old, n_new, o_old, o_new, o_w, a, b, w):
    """Owner rows from the engine's ordered output, or (False, ...) when it is not in order.

    In order means: new-old edges by ascending new vertex, old ids strictly ascending within one;
    new-new edges (a < b) by ascending a, b strictly ascending within one.  Row v is then its old
    neighbours (a contiguous run of the new-old edges) followed by its later new neighbours (a
    run of the new-new edges); old ids < new ids, so rows are ascending.  The order checks are
    parallel reductions, the run bounds binary searches, then one row per prange iteration
    copies its two runs."""
    n_no = o_new.shape[0]
    n_nn = a.shape[0]
    bad = 0
    for e in prange(n_no):
        if o_new[e] < n_old or o_new[e] >= n_old + n_new or o_old[e] < 0 or o_old[e] >= n_old:
            bad += 1
        elif e > 0 and (o_new[e] < o_new[e - 1] or (o_new[e] == o_new[e - 1] and o_old[e] <= o_old[e - 1])):
            bad += 1
    for e in prange(n_nn):
        if a[e] < n_old or b[e] <= a[e] or b[e] >= n_old + n_new:
            bad += 1
        elif e > 0 and (a[e] < a[e - 1] or (a[e] == a[e - 1] and b[e] <= b[e - 1])):
            bad += 1
    if bad > 0:
        return False, np.zeros(1, np.int64), np.empty(0, np.int32), np.empty(0, np.float32)
    keys = np.arange(n_old, n_old + n_new + 1).astype(o_new.dtype)
    s_no = np.searchsorted(o_new, keys)  # run of row r: [s_no[r], s_no[r+1])
    s_nn = np.searchsorted(a, keys)
    ptr = np.zeros(n_new + 1, np.int64)
    for r in range(n_new):
        ptr[r + 1] = ptr[r] + (s_no[r + 1] - s_no[r]) + (s_nn[r + 1] - s_nn[r])
    idx = np.empty(ptr[n_new], np.int32)
    val = np.empty(ptr[n_new], np.float32)
    for r in prange(n_new):
        d = ptr[r]
        for e in range(s_no[r], s_no[r + 1]):  # old neighbours first ...
            idx[d] = o_old[e]
            val[d] = o_w[e]
            d += 1
        for e in range(s_nn[r], s_nn[r + 1]):  # ... then the later new ones
            idx[d] = b[e]
            val[d] = w[e]
            d += 1
    return True, ptr, idx, val


@cpu_jit(parallel=True)
def upper_owner_rows(indptr, indices, weights, rows):
    """Owner rows of a full build: for each vertex of ``rows`` (int64) its neighbours u > v
    (the suffix of its sorted symmetric row).  Returns (ptr int64 (len+1,), indices, weights)."""
    m = rows.shape[0]
    first = np.empty(m, np.int64)
    for k in prange(m):
        v = rows[k]
        lo = indptr[v]
        hi = indptr[v + 1]
        while lo < hi:  # binary search of the first neighbour > v
            mid = (lo + hi) // 2
            if indices[mid] > v:
                hi = mid
            else:
                lo = mid + 1
        first[k] = lo
    ptr = np.zeros(m + 1, np.int64)
    for k in range(m):
        ptr[k + 1] = ptr[k] + indptr[rows[k] + 1] - first[k]
    out_idx = np.empty(ptr[m], np.int32)
    out_w = np.empty(ptr[m], np.float32)
    for k in prange(m):
        d = ptr[k]
        for p in range(first[k], indptr[rows[k] + 1]):
            out_idx[d] = indices[p]
            out_w[d] = weights[p]
            d += 1
    return ptr, out_idx, out_w


# ----------------------------------------------------------------------------- symmetric rows, degree sums

@cpu_jit(parallel=True)
def symmetric_from_owner(row_start, row_len, idx, w, local_of, n_chunks, with_weights):
    """Symmetric CSR (rows sorted) of a vertex set from its owner rows, in local ids.

    Every edge of the set is stored once, in the owner row of one endpoint.  Local row k's owner
    row is idx[row_start[k]:row_start[k] + row_len[k]] (int64 starts and lengths, (m,)): global
    ids, ascending; w float32 alongside (read only when ``with_weights``).  local_of int32 maps
    a global id to its local row (ascending with the global id, so sorted rows stay sorted).
    Returns indptr int64 (m+1,), indices int32 (2E,), weights float32 (2E, or 0 without weights).
    Row k = merge of its owner row and the rows owning an edge to k ("transposed" part).
    Parallel: the transposed parts are a counting sort by target over ``n_chunks`` contiguous
    ranges of owner rows (per-chunk counts, per-target offsets, then each chunk scatters its
    entries in owner order), so each transposed part comes out ascending; then one row per prange
    iteration merges its two ascending parts.  Scratch: int32 (n_chunks, m) and the transposed
    entries (E).
    """
    m = row_start.shape[0]
    n_chunks = max(1, min(n_chunks, m))
    step = (m + n_chunks - 1) // n_chunks
    cnt = np.zeros((n_chunks, m), np.int32)
    for t in prange(n_chunks):
        for k in range(t * step, min(m, (t + 1) * step)):
            s = row_start[k]
            for p in range(s, s + row_len[k]):
                cnt[t, local_of[idx[p]]] += 1
    tlen = np.zeros(m, np.int64)
    kstar.chunk_offsets(cnt, tlen)
    tptr = np.zeros(m + 1, np.int64)
    indptr = np.zeros(m + 1, np.int64)
    for j in range(m):
        tptr[j + 1] = tptr[j] + tlen[j]
        indptr[j + 1] = indptr[j] + tlen[j] + row_len[j]
    t_idx = np.empty(tptr[m], np.int32)
    t_w = np.empty(tptr[m] if with_weights else 0, np.float32)
    for t in prange(n_chunks):
        for k in range(t * step, min(m, (t + 1) * step)):
            s = row_start[k]
            for p in range(s, s + row_len[k]):
                j = local_of[idx[p]]
                pos = tptr[j] + cnt[t, j]
                t_idx[pos] = k
                if with_weights:
                    t_w[pos] = w[p]
                cnt[t, j] += 1
    out_idx = np.empty(indptr[m], np.int32)
    out_w = np.empty(indptr[m] if with_weights else 0, np.float32)
    for k in prange(m):
        a = row_start[k]
        a_end = a + row_len[k]
        b = tptr[k]
        b_end = tptr[k + 1]
        d = indptr[k]
        la = local_of[idx[a]] if a < a_end else m
        while b < b_end and t_idx[b] < la:  # transposed entries before the owner row (all of them
            out_idx[d] = t_idx[b]           # for rows of a full build: owners hold only u > v)
            if with_weights:
                out_w[d] = t_w[b]
            b += 1
            d += 1
        while a < a_end:
            la = local_of[idx[a]]
            while b < b_end and t_idx[b] < la:
                out_idx[d] = t_idx[b]
                if with_weights:
                    out_w[d] = t_w[b]
                b += 1
                d += 1
            out_idx[d] = la
            if with_weights:
                out_w[d] = w[a]
            a += 1
            d += 1
        while b < b_end:
            out_idx[d] = t_idx[b]
            if with_weights:
                out_w[d] = t_w[b]
            b += 1
            d += 1
    return indptr, out_idx, out_w


@cpu_jit(parallel=True)
def add_owner_stats(ptr, idx, w, first, degree, weight_sum, chunks=16):
    """Add the edges of owner rows (row r = vertex first + r; neighbours idx, weights w) to both
    endpoints' degree (int32) and fixed-point weight sum (int64, 2**FIX_BITS units: exact and
    order-free).  The owners' side one row per prange iteration, the neighbours' side in
    ``chunks`` pieces of the entries with private counters, added up per vertex (after the
    first loop: the loops never write the same entry at once)."""
    for r in prange(ptr.shape[0] - 1):
        s = numba.int64(0)
        for p in range(ptr[r], ptr[r + 1]):
            s += kstar.fixed_weight(w[p])
        degree[first + r] += ptr[r + 1] - ptr[r]
        weight_sum[first + r] += s
    n = degree.shape[0]
    nnz = idx.shape[0]
    # private (chunks, n) counters (integer sums, order-free), at most 2^25 entries in all
    chunks = max(1, min(chunks, nnz // 65536, (1 << 25) // max(n, 1)))
    c_deg = np.zeros((chunks, n), np.int32)
    c_sum = np.zeros((chunks, n), np.int64)
    for c in prange(chunks):
        for p in range(nnz * c // chunks, nnz * (c + 1) // chunks):
            u = idx[p]
            c_deg[c, u] += 1
            c_sum[c, u] += kstar.fixed_weight(w[p])
    for u in prange(n):
        for c in range(chunks):
            degree[u] += c_deg[c, u]
            weight_sum[u] += c_sum[c, u]


# ----------------------------------------------------------------------------- document id hashes

FNV_OFFSET = 0xCBF29CE484222325  # 64-bit FNV-1a
FNV_PRIME = 0x100000001B3


@cpu_jit
def fnv1a64(buf, offsets):
    """64-bit FNV-1a of each byte string buf[offsets[i]:offsets[i+1]] (uint8 buf, int64 offsets
    (n+1,)).  Returns uint64 (n,).  Sequential: 50,000 ids take about 0.1 ms, less than waking a
    thread pool on a loaded host."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        h = np.uint64(FNV_OFFSET)
        for p in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(buf[p])) * np.uint64(FNV_PRIME)
        out[i] = h
    return out
