"""Overlapping star clustering (OClustR / CUDA-OClus): the device kernel and its CPU twins.

What runs where (as in the paper, section 3.1): the thresholded similarity graph comes from the
scoring engine (gputext.engine.search_threshold); the relevance of every vertex is computed on
the device (``relevance_kernel``) or by its parallel CPU twin (``relevance_cpu``); the
sequential cover, improvement and partial-connected-component steps are host code
(gputext.cluster.star / dclus), because they are inherently ordered.

Exactness
---------
Edge weights are float32 cosines >= beta.  The approximate intra-cluster similarity of the star
of v, AIS(v) = (sum of v's edge weights) / deg(v), is accumulated in fixed point: every weight is
turned into the int64 ``w * 2**FIX_BITS``, which is exact for float32 weights >= 2**-17 (their
last bit is >= 2**-40), and int64 sums are exact, so the sum does not depend on the order in
which edges arrive (batches, GPU, DClustR additions that append edges later).  Weights <= 1 and
degrees < 2**22 keep the sum below 2**62.  AIS = float64(sum) * 2**-FIX_BITS / deg is then one
correctly rounded conversion and one correctly rounded division, identical on host and device.

Relevance(v) = (relative density + relative compactness) / 2
             = (#{u in Adj(v): deg(u) <= deg(v)} + #{u in Adj(v): AIS(u) <= AIS(v)}) / (2 deg(v)),
0 for isolated vertices.  The kernel writes the integer numerator (``count``) and the float64
quotient; the quotient orders exactly like the rational number for degrees < 2**25.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import cuda, prange

from ._factory import kernel_cache
from .postings import term_stats_cpu
from .primitives import block_exclusive_scan_dev, block_tree_sum_dev, column_offsets_cpu, last_le_dev, lower_bound_cpu
from .jit import cpu_jit, cuda_kernel, device_function

FIX_BITS = 40
FIX_SCALE = float(2 ** FIX_BITS)
FIX_INV = 1.0 / FIX_SCALE
MIN_WEIGHT = 2.0 ** -17  # smallest weight whose fixed-point image is exact


# ----------------------------------------------------------------------------- host helpers (njit)

def _fixed_weight(w):
    """float32 weight -> int64 w * 2**40 (exact for w >= 2**-17)."""
    return numba.int64(numba.float64(w) * FIX_SCALE)


def _neighbour_count(indptr, indices, degree, ais, v, dv, av, start, step):
    """#{u: deg(u) <= dv} + #{u: ais(u) <= av} over the adjacency positions indptr[v] + start,
    + start + step, ... of v (all of them for start 0, step 1)."""
    s = 0
    p = indptr[v] + start
    end = indptr[v + 1]
    while p < end:
        u = indices[p]
        if degree[u] <= dv:
            s += 1
        if ais[u] <= av:
            s += 1
        p += step
    return s


def _relevance_value(count, dv):
    """count / (2 deg(v)) as float64, 0 for an isolated vertex."""
    if dv > 0:
        return numba.float64(count) / (2.0 * numba.float64(dv))
    return 0.0


fixed_weight = cpu_jit(_fixed_weight)
_fixed_weight_dev = device_function(_fixed_weight)
_neighbour_count_cpu = numba.njit(inline="always")(_neighbour_count)
_neighbour_count_dev = device_function(_neighbour_count)
_relevance_value_cpu = numba.njit(inline="always")(_relevance_value)
_relevance_value_dev = device_function(_relevance_value)


@cpu_jit
def accumulate_edges(rows, cols, weights, degree, weight_sum):
    """Add a batch of undirected edges (rows[e], cols[e], weights[e]) to both endpoints' stats.

    rows, cols int32 (E,), weights float32 (E,); degree int32 (n,), weight_sum int64 (n,) updated
    in place (fixed-point sums, so the arrival order of batches does not matter).  Sequential:
    every edge scatters to two vertices.
    """
    for e in range(rows.shape[0]):
        i = rows[e]
        j = cols[e]
        f = fixed_weight(weights[e])
        degree[i] += 1
        degree[j] += 1
        weight_sum[i] += f
        weight_sum[j] += f


@cpu_jit(parallel=True)
def batch_segments(indptr, indices, lo, hi, df):
    """The engine's segments of a batch of query rows [lo, hi) (gputext.engine.cuda_backend._Batch):
    seg int32 (L, 2) = (term, query - lo) of each stored entry, seg_off int64 (L+1,) = exclusive
    prefix sum of the terms' posting lengths df int64 (n_terms,).  Rows in parallel, then one
    sequential prefix sum."""
    base = indptr[lo]
    n_seg = indptr[hi] - base
    seg = np.empty((n_seg, 2), np.int32)
    lens = np.empty(n_seg, np.int64)
    for r in prange(lo, hi):
        for p in range(indptr[r], indptr[r + 1]):
            seg[p - base, 0] = indices[p]
            seg[p - base, 1] = r - lo
            lens[p - base] = df[indices[p]]
    seg_off = np.zeros(n_seg + 1, np.int64)
    for k in range(n_seg):
        seg_off[k + 1] = seg_off[k] + lens[k]
    return seg_off, seg


def term_stats_ranges(indices, data, starts, n_terms, chunks):
    """(maxabs float32 (R, n_terms), counts int64 (R, n_terms)) of the entries [starts[r],
    starts[r+1]) of each row shard: gputext.kernels.postings.term_stats_cpu with counts."""
    maxabs, counts, _ = term_stats_cpu(indices, data, np.ascontiguousarray(starts, np.int64), n_terms, chunks, True)
    return maxabs, counts


@cpu_jit(parallel=True)
def addition_owner_rows(ptr, cols, weights, n_new, n_old):
    """Upper-triangle rows of the stacked corpus [new; old] (see split_addition_rows) as the
    new vertices' DClustR owner rows in global ids: row i = its old neighbours (columns >=
    n_new, minus n_new) then its later new neighbours (columns < n_new, plus n_old): ascending.
    Returns (ptr int64 (n_new+1,) = the input's, idx int32, w float32).  One row per prange
    iteration (binary search for the split, two copies)."""
    out_idx = np.empty(ptr[n_new] - ptr[0], np.int32)
    out_w = np.empty(ptr[n_new] - ptr[0], np.float32)
    base = ptr[0]
    for i in prange(n_new):
        lo = lower_bound_cpu(cols, ptr[i], ptr[i + 1], n_new)  # first old document
        d = ptr[i] - base
        for p in range(lo, ptr[i + 1]):
            out_idx[d] = cols[p] - n_new
            out_w[d] = weights[p]
            d += 1
        for p in range(ptr[i], lo):
            out_idx[d] = n_old + cols[p]
            out_w[d] = weights[p]
            d += 1
    return ptr - base, out_idx, out_w


@cpu_jit(parallel=True)
def split_addition_rows(ptr, cols, weights, n_new, n_old):
    """Upper-triangle rows of the stacked corpus [new; old] (DClustR additions) as global edges.

    ptr int64 (n_new+1,), cols int32 (ascending within a row, > the row), weights float32:
    row i is new document i (global id n_old + i); a column c < n_new is new document c, a
    column c >= n_new is old document c - n_new.  Returns ((old, new, w), (a, b, w)): the
    new-old edges and the new-new edges (a < b) as int32 global ids, by row, then column.
    One row per prange iteration (binary search for the split, two copies).
    """
    split = np.empty(n_new, np.int64)
    for i in prange(n_new):
        split[i] = lower_bound_cpu(cols, ptr[i], ptr[i + 1], n_new)  # first old document
    off_new = np.zeros(n_new + 1, np.int64)
    off_old = np.zeros(n_new + 1, np.int64)
    for i in range(n_new):
        off_new[i + 1] = off_new[i] + split[i] - ptr[i]
        off_old[i + 1] = off_old[i] + ptr[i + 1] - split[i]
    o_old = np.empty(off_old[n_new], np.int32)
    o_new = np.empty(off_old[n_new], np.int32)
    o_w = np.empty(off_old[n_new], np.float32)
    a = np.empty(off_new[n_new], np.int32)
    b = np.empty(off_new[n_new], np.int32)
    ab_w = np.empty(off_new[n_new], np.float32)
    for i in prange(n_new):
        d = off_new[i]
        for p in range(ptr[i], split[i]):
            a[d] = n_old + i
            b[d] = n_old + cols[p]
            ab_w[d] = weights[p]
            d += 1
        d = off_old[i]
        for p in range(split[i], ptr[i + 1]):
            o_old[d] = cols[p] - n_new
            o_new[d] = n_old + i
            o_w[d] = weights[p]
            d += 1
    return (o_old, o_new, o_w), (a, b, ab_w)


@cpu_jit(parallel=True)
def upper_rows(indptr, indices, data, row_offset, col_offset):
    """Keep the strict upper triangle of a block of engine results, as CSR rows.

    indptr int64 (Q+1,), indices int32 (sorted within rows), data float32: row q is global vertex
    row_offset + q, entry p is global vertex col_offset + indices[p].  Returns (ptr int64 (Q+1,),
    cols int32, weights float32): for each row its entries with column > row, ascending.
    One row per prange iteration (count, exclusive sum, copy).
    """
    n_q = indptr.shape[0] - 1
    first = np.empty(n_q, np.int64)
    for q in prange(n_q):
        r = row_offset + q
        lo = indptr[q]
        hi = indptr[q + 1]
        while lo < hi and col_offset + indices[lo] <= r:  # sorted: skip the lower part
            lo += 1
        first[q] = lo
    ptr = np.zeros(n_q + 1, np.int64)
    for q in range(n_q):
        ptr[q + 1] = ptr[q] + indptr[q + 1] - first[q]
    cols = np.empty(ptr[n_q], np.int32)
    weights = np.empty(ptr[n_q], np.float32)
    for q in prange(n_q):
        d = ptr[q]
        for p in range(first[q], indptr[q + 1]):
            cols[d] = col_offset + indices[p]
            weights[d] = data[p]
            d += 1
    return ptr, cols, weights


@cpu_jit(parallel=True)
def _accumulate_row_side(ptr, weights, row_offset, degree, weight_sum):
    for q in prange(ptr.shape[0] - 1):
        s = numba.int64(0)
        for p in range(ptr[q], ptr[q + 1]):
            s += fixed_weight(weights[p])
        degree[row_offset + q] += ptr[q + 1] - ptr[q]
        weight_sum[row_offset + q] += s


@cpu_jit
def _accumulate_col_side(cols, weights, degree, weight_sum):
    for p in range(cols.shape[0]):
        j = cols[p]
        degree[j] += 1
        weight_sum[j] += fixed_weight(weights[p])


def accumulate_upper(ptr, cols, weights, row_offset, degree, weight_sum):
    """Add a batch of upper-triangle rows (upper_rows) to both endpoints' degree and fixed-point
    weight sum: the rows' own side in parallel (one row per prange iteration), the columns' side
    sequentially (a scatter).  Exact int64 sums: arrival order does not matter."""
    _accumulate_row_side(ptr, weights, row_offset, degree, weight_sum)
    _accumulate_col_side(cols, weights, degree, weight_sum)


@cpu_jit(parallel=True)
def chunk_offsets(cnt, totals):
    """A counting sort's offsets, in place: cnt int32 (n_chunks, n), the count of each target j in
    each chunk t, becomes chunk t's offset within target j (the exclusive prefix over chunks, in
    chunk order); totals int64 (n,) gets each target's count. One target per prange iteration.
    Shared by symmetric_csr and gputext.cluster.dclus.host.symmetric_from_owner."""
    for j in prange(cnt.shape[1]):
        column_offsets_cpu(cnt, totals, j)


@cpu_jit(parallel=True)
def symmetric_csr(up_ptr, up_cols, up_weights, degree, n_chunks):
    """Upper-triangle CSR (row v: its neighbours u > v, ascending) -> symmetric CSR, rows sorted.

    up_ptr int64 (n+1,), up_cols int32, up_weights float32; degree int32 (n,) the full row
    lengths (accumulate_upper).  Returns indptr int64 (n+1,), indices int32 (2E,), weights
    float32 (2E,).  Row v is its lower neighbours (edges (i, v), i ascending) followed by its
    upper ones.  Parallel: the upper parts are copied one row per prange iteration; the lower
    parts are a counting sort by column over ``n_chunks`` contiguous row ranges (per-chunk column
    counts, per-column offsets, then each chunk scatters its edges in row order), so every lower
    part comes out ascending.  Scratch: int32 (n_chunks, n).
    """
    n = up_ptr.shape[0] - 1
    indptr = np.zeros(n + 1, np.int64)
    for v in range(n):
        indptr[v + 1] = indptr[v] + degree[v]
    out_idx = np.empty(indptr[n], np.int32)
    out_w = np.empty(indptr[n], np.float32)
    for v in prange(n):
        a = up_ptr[v]
        m = up_ptr[v + 1] - a
        d = indptr[v + 1] - m
        for k in range(m):
            out_idx[d + k] = up_cols[a + k]
            out_w[d + k] = up_weights[a + k]
    n_chunks = max(1, min(n_chunks, up_ptr[n] // 4096 + 1))
    step = (n + n_chunks - 1) // n_chunks
    cnt = np.zeros((n_chunks, n), np.int32)
    for t in prange(n_chunks):
        for v in range(t * step, min(n, (t + 1) * step)):
            for p in range(up_ptr[v], up_ptr[v + 1]):
                cnt[t, up_cols[p]] += 1
    chunk_offsets(cnt, np.empty(n, np.int64))
    for t in prange(n_chunks):
        for v in range(t * step, min(n, (t + 1) * step)):
            for p in range(up_ptr[v], up_ptr[v + 1]):
                j = up_cols[p]
                pos = indptr[j] + cnt[t, j]
                out_idx[pos] = v
                out_w[pos] = up_weights[p]
                cnt[t, j] += 1
    return indptr, out_idx, out_w


@cpu_jit(parallel=True)
def row_stats(indptr, weights):
    """Degree int32 (n,) and fixed-point weight sums int64 (n,) of a CSR adjacency (one row per
    prange iteration)."""
    n = indptr.shape[0] - 1
    degree = np.empty(n, np.int32)
    weight_sum = np.empty(n, np.int64)
    for v in prange(n):
        s = numba.int64(0)
        for p in range(indptr[v], indptr[v + 1]):
            s += fixed_weight(weights[p])
        degree[v] = indptr[v + 1] - indptr[v]
        weight_sum[v] = s
    return degree, weight_sum


@cpu_jit(parallel=True)
def ais_from_sums(degree, weight_sum):
    """AIS float64 (n,) = float64(weight_sum) * 2**-40 / degree; 0 for isolated vertices."""
    n = degree.shape[0]
    out = np.zeros(n, np.float64)
    for v in prange(n):
        if degree[v] > 0:
            out[v] = (numba.float64(weight_sum[v]) * FIX_INV) / numba.float64(degree[v])
    return out


# ----------------------------------------------------------------------------- relevance: CPU twin

@cpu_jit(parallel=True)
def relevance_cpu(indptr, indices, degree, ais, count, relevance):
    """Twin of ``relevance_kernel``: one vertex per prange iteration.

    indptr int64 (n+1,), indices int32 (nnz,) symmetric adjacency; degree int32 (n,); ais float64
    (n,).  Writes count int32 (n,) = #{u: deg(u) <= deg(v)} + #{u: ais(u) <= ais(v)} over
    u in Adj(v), and relevance float64 (n,) = count / (2 deg(v)) (0 when deg(v) = 0).
    """
    n = indptr.shape[0] - 1
    for v in prange(n):
        s = _neighbour_count_cpu(indptr, indices, degree, ais, v, degree[v], ais[v], 0, 1)
        count[v] = s
        relevance[v] = _relevance_value_cpu(s, degree[v])


# ----------------------------------------------------------------------------- relevance: device

@kernel_cache
def relevance_kernel(lanes: int, vertices: int):
    """CUDA-OClus Algorithm 2: the relevance of ``vertices`` vertices per block.

    Block shape (lanes, vertices): threadIdx.y picks the vertex v = block_vertex0 + threadIdx.y,
    threadIdx.x the lane; lane x visits adjacency positions x, x + lanes, ... of v (tiling), so
    consecutive threads read consecutive entries of v's row, and counts how many neighbours u have
    deg(u) <= deg(v) plus how many have ais(u) <= ais(v).  Shared memory: int32
    partial[vertices][lanes]; after ``syncthreads`` a tree reduction over the lanes (``lanes`` a
    power of two, one ``syncthreads`` per halving) leaves the sum in partial[y][0], which lane 0
    writes to count[v] and, divided by 2 deg(v), to relevance[v].  Blocks stride over vertex
    groups (grid-stride loop), so any grid size covers all n vertices.
    Arrays: indptr int64 (n+1,), indices int32 (nnz,), degree int32 (n,), ais float64 (n,),
    count int32 (n,) and relevance float64 (n,) written.  Integer counts: no ties to break.
    """
    if lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"lanes must be a power of two, got {lanes}")

    @cuda_kernel
    def relevance(indptr, indices, degree, ais, count, out):
        partial = cuda.shared.array((vertices, lanes), numba.int32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        n = indptr.shape[0] - 1
        group = cuda.blockIdx.x
        n_groups = (n + vertices - 1) // vertices
        while group < n_groups:  # uniform across the block: every thread reaches each syncthreads
            v = group * vertices + ty
            s = 0
            dv = 0
            if v < n:
                dv = degree[v]
                s = _neighbour_count_dev(indptr, indices, degree, ais, v, dv, ais[v], tx, lanes)
            block_tree_sum_dev(partial[ty], s, tx, tx, lanes)  # lanes' counts summed in partial[ty, 0]
            if tx == 0 and v < n:
                total = partial[ty, 0]
                count[v] = total
                out[v] = _relevance_value_dev(total, dv)
            cuda.syncthreads()  # partial is reused by the next vertex group
            group += cuda.gridDim.x

    return relevance


class RelevanceLaunch:
    """Default launch geometry of ``relevance_kernel`` (gputext.cluster.star.RelevanceGeometry
    is the public one): ``lanes`` threads per vertex, ``vertices`` per block, ``max_blocks``."""

    lanes = 32
    vertices = 8
    max_blocks = 65536


def relevance_device(indptr, indices, degree, ais, lanes: int = 32, vertices: int = 8, max_blocks: int = 65536):
    """Host wrapper: copy the graph to the device, run ``relevance_kernel``, copy back.

    Returns (count int32 (n,), relevance float64 (n,)).  Geometry: ``lanes`` threads per vertex
    (power of two), ``vertices`` vertices per block, at most ``max_blocks`` blocks.
    """
    n = indptr.shape[0] - 1
    count = np.zeros(n, np.int32)
    rel = np.zeros(n, np.float64)
    if n == 0:
        return count, rel
    kernel = relevance_kernel(int(lanes), int(vertices))
    d_indptr = cuda.to_device(np.ascontiguousarray(indptr, np.int64))
    d_indices = cuda.to_device(np.ascontiguousarray(indices, np.int32) if len(indices) else np.zeros(1, np.int32))
    d_degree = cuda.to_device(np.ascontiguousarray(degree, np.int32))
    d_ais = cuda.to_device(np.ascontiguousarray(ais, np.float64))
    d_count = cuda.device_array(n, np.int32)
    d_rel = cuda.device_array(n, np.float64)
    blocks = max(1, min(int(max_blocks), (n + vertices - 1) // vertices))
    kernel[blocks, (lanes, vertices)](d_indptr, d_indices, d_degree, d_ais, d_count, d_rel)
    d_count.copy_to_host(count)
    d_rel.copy_to_host(rel)
    return count, rel


# ----------------------------------------------------------------------------- graph on the device
# The device graph build (gputext.cluster.graph_cuda) keeps every edge on the device:
#   1. the engine scores a batch of queries into dense fixed-point rows (gputext.engine);
#      the engine's ``count_threshold`` counts each (segment, query) block's upper-triangle hits;
#      ``exclusive_scan_device`` turns the counts into write offsets;
#   2. ``edge_write_kernel`` writes the hits (int32 column, float32 weight) at those offsets in
#      the device edge buffer, in (query, document) order, and adds both endpoints' degree and
#      fixed-point weight to the AIS sums by atomics (exact int64 sums: order-free);
#      ``row_lengths`` records each query's number of upper-triangle edges;
#   3. ``split_upper`` copies every upper edge (i, j) into row i of the symmetric CSR and
#      scatters (i, w) into a scratch area of row j (atomic cursor: arbitrary order);
#      ``lower_sort_kernel`` writes each row's scratch entries into place in ascending order
#      (ranks: the entries are distinct vertex ids, so a rank is a count, never a tie);
#   4. ``ais_kernel`` and ``relevance_kernel`` on the device arrays.
# Every step is deterministic: positions never depend on the order of atomics.



@kernel_cache
def edge_write_kernel(block: int, items: int):
    """Write a batch's upper-triangle edges into the device edge buffer; AIS sums by atomics.

    Launch (n_seg, n_queries) blocks of ``block`` threads (a power of two), n_seg =
    ceil(n_docs / (block * items)), the geometry of the engine's ``count_threshold`` whose counts
    (scanned) give ``offsets`` int64 (n_queries * n_seg + 1,).  Block (s, q) covers documents
    d = s*block*items + i*block + tid (i < items) of query q's score row acc[q * n_docs + d]
    (int64 fixed point, kernels/scoring.py): a hit is d != qinfo[q, 2], d > qinfo[q, 3] with
    key = score_key(...) >= min_key.  Hits are written in document order (a block scan over hit
    flags per round of ``block`` documents) at base + offsets[q * n_seg + s] (a block whose
    count is 0 only re-zeroes its entries: no keys, no scans):
    out_col int32 = col0 + d, out_w float32 = float32(key).  Every acc entry of the block is set
    back to 0 (the engine's rows stay clean for the next batch).  degree int32 (n,) and
    weight_sum int64 (n,) receive, for the column side, one atomic add per hit, and for the row
    side (vertex row0 + q) one atomic add per block of the block's totals (shared int64 sums,
    filled by shared atomics after the last round).  Shared: int32 flags[block], int64 sums[2].
    Synchronisation: the block scan's, one syncthreads after each round (flags reused) and one
    before thread 0 reads the block totals.
    """
    seg_len = block * items
    from .scoring import threshold_hit_dev

    @cuda_kernel
    def write_edges(acc, n_docs, qinfo, dn, metric, min_key, offsets, base, row0, col0,
                    out_col, out_w, degree, weight_sum):
        flags = cuda.shared.array(block, numba.int32)
        sums = cuda.shared.array(2, numba.int64)
        tid = cuda.threadIdx.x
        seg = cuda.blockIdx.x
        q = cuda.blockIdx.y
        n_seg = cuda.gridDim.x
        if tid == 0:
            sums[0] = 0
            sums[1] = 0
        row = numba.int64(q) * n_docs
        slot = numba.int64(q) * n_seg + seg
        at = base + offsets[slot]
        if offsets[slot + 1] == offsets[slot]:  # no edge in this block (uniform): only re-zero the rows
            for i in range(items):
                d = numba.int64(seg) * seg_len + i * block + tid
                if d < n_docs:
                    acc[row + d] = 0
            return
        my_count = numba.int64(0)
        my_sum = numba.int64(0)
        for i in range(items):
            d = numba.int64(seg) * seg_len + i * block + tid
            hit = 0
            w = numba.float32(0.0)
            if d < n_docs:
                found, key = threshold_hit_dev(acc, row, d, q, qinfo, dn, metric, min_key)
                if found:
                    hit = 1
                    w = numba.float32(key)
                acc[row + d] = 0  # leave the rows zeroed for the next batch
            flags[tid] = hit
            total = block_exclusive_scan_dev(flags, tid, block)
            if hit:
                pos = at + flags[tid]
                col = col0 + d
                out_col[pos] = numba.int32(col)
                out_w[pos] = w
                f = _fixed_weight_dev(w)
                cuda.atomic.add(degree, col, 1)
                cuda.atomic.add(weight_sum, col, f)
                my_count += 1
                my_sum += f
            at += total
            cuda.syncthreads()  # flags reused next round
        if my_count > 0:
            cuda.atomic.add(sums, 0, my_count)
            cuda.atomic.add(sums, 1, my_sum)
        cuda.syncthreads()  # every thread's totals are in sums
        if tid == 0 and sums[0] > 0:
            cuda.atomic.add(degree, row0 + q, numba.int32(sums[0]))
            cuda.atomic.add(weight_sum, row0 + q, sums[1])

    return write_edges


@cuda_kernel
def row_lengths(offsets, n_seg, n_queries, row0, up_len):
    """Thread q < n_queries: up_len[row0 + q] = offsets[(q+1) n_seg] - offsets[q n_seg] (int64):
    query q's number of upper-triangle edges (its n_seg counts, scanned)."""
    q = cuda.grid(1)
    if q < n_queries:
        up_len[row0 + q] = offsets[(q + 1) * n_seg] - offsets[q * n_seg]


@cuda_kernel
def ais_kernel(degree, weight_sum, ais):
    """Thread v: ais[v] = float64(weight_sum[v]) * 2**-40 / degree[v], 0 when isolated (float64;
    one correctly rounded conversion and division: equal to ``ais_from_sums``)."""
    v = cuda.grid(1)
    if v < ais.shape[0]:
        if degree[v] > 0:
            ais[v] = (numba.float64(weight_sum[v]) * FIX_INV) / numba.float64(degree[v])
        else:
            ais[v] = 0.0


@cuda_kernel
def split_upper(up_ptr, up_col, up_w, n_edges, indptr, cursor, out_idx, out_w, tmp_row, tmp_w):
    """Upper-triangle CSR -> the upper parts of the symmetric CSR, and the lower parts unsorted.

    Grid-stride over upper edges e < n_edges: row i by binary search in up_ptr int64 (n+1,)
    (largest i with up_ptr[i] <= e), column j = up_col[e] (> i).  (j, w) goes to row i's upper
    part, out_idx/out_w[e + indptr[i+1] - up_ptr[i+1]] (the upper part ends each row, already
    ascending); (i, w) goes to row j's scratch slot tmp_row/tmp_w[indptr[j] - up_ptr[j] +
    atomic cursor[j]++] (cursor int32 (n,) zero on entry; order within a row arbitrary, fixed by
    ``lower_sort_kernel``).  indptr int64 (n+1,) = exclusive scan of the full degrees.
    """
    start, stride = cuda.grid(1), cuda.gridsize(1)
    n = up_ptr.shape[0] - 1
    for e in range(start, n_edges, stride):
        i = last_le_dev(up_ptr, 0, n, e)
        j = up_col[e]
        w = up_w[e]
        p = e + indptr[i + 1] - up_ptr[i + 1]
        out_idx[p] = j
        out_w[p] = w
        slot = cuda.atomic.add(cursor, j, 1)
        t = indptr[j] - up_ptr[j] + slot
        tmp_row[t] = i
        tmp_w[t] = w


@kernel_cache
def lower_sort_kernel(block: int, words: int):
    """Each row's lower part (neighbours below it) written into place in ascending order.

    One block per row j (grid-stride over rows).  Row j's lower part has
    L = (indptr[j+1] - indptr[j]) - (up_ptr[j+1] - up_ptr[j]) entries, distinct vertex ids < j,
    in tmp_row/tmp_w[indptr[j] - up_ptr[j] ...] (``split_upper``); entry x goes to
    out_idx/out_w[indptr[j] + rank(x)], rank(x) = #{entries < x} (distinct ids: no ties).
    L <= block: thread t loads entry t into shared vals[block], and after a syncthreads counts the
    smaller ones (O(L) per thread).  L > block: the id range [0, j) in tiles of 32*words ids: a
    shared bitmap bits[words] (uint32) is cleared, every entry in the tile sets its bit (shared
    atomic or), the words' popcounts are scanned (each thread owns ceil(words/block) consecutive
    words, a block scan of the thread totals) into shared int32
    prefix[words]; rank = (entries in earlier tiles) + prefix[word] + popc(bits below x).
    Shared: 4*block (vals) + 4*block (flags) + 8*words bytes.  Syncthreads: after the loads, after
    the bitmap is cleared, after it is set, in the scan, after the prefixes, and at the end of every
    tile and row (shared arrays reused); L and j are the same for the whole block, so every
    thread reaches each one.
    """
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    if words < 1:
        raise ValueError(f"words must be positive, got {words}")
    per_thread = (words + block - 1) // block
    tile = 32 * words

    @cuda_kernel
    def lower_sort(indptr, up_ptr, tmp_row, tmp_w, out_idx, out_w):
        vals = cuda.shared.array(block, numba.int32)
        flags = cuda.shared.array(block, numba.int32)
        bits = cuda.shared.array(words, numba.uint32)
        prefix = cuda.shared.array(words, numba.int32)
        tid = cuda.threadIdx.x
        n = indptr.shape[0] - 1
        j = cuda.blockIdx.x
        while j < n:  # uniform across the block
            start = indptr[j]
            tb = indptr[j] - up_ptr[j]
            m = (indptr[j + 1] - indptr[j]) - (up_ptr[j + 1] - up_ptr[j])
            if m <= block:
                v = numba.int32(-1)
                w = numba.float32(0.0)
                if tid < m:
                    v = tmp_row[tb + tid]
                    w = tmp_w[tb + tid]
                vals[tid] = v
                cuda.syncthreads()  # the row's entries are in shared memory
                if tid < m:
                    r = 0
                    for k in range(m):
                        if vals[k] < v:
                            r += 1
                    out_idx[start + r] = v
                    out_w[start + r] = w
                cuda.syncthreads()  # vals reused by the next row
            else:
                done = numba.int64(0)
                t0 = numba.int64(0)
                while t0 < j:
                    for k in range(tid, words, block):
                        bits[k] = numba.uint32(0)
                    cuda.syncthreads()  # bitmap cleared
                    for p in range(tid, m, block):
                        o = numba.int64(tmp_row[tb + p]) - t0
                        if o >= 0 and o < tile:
                            cuda.atomic.or_(bits, o >> 5, numba.uint32(1) << numba.uint32(o & 31))
                    cuda.syncthreads()  # bitmap complete
                    c = 0
                    for k in range(tid * per_thread, min(words, (tid + 1) * per_thread)):
                        c += cuda.popc(bits[k])
                    flags[tid] = c
                    total = block_exclusive_scan_dev(flags, tid, block)
                    run = flags[tid]
                    for k in range(tid * per_thread, min(words, (tid + 1) * per_thread)):
                        prefix[k] = run
                        run += cuda.popc(bits[k])
                    cuda.syncthreads()  # prefixes written
                    for p in range(tid, m, block):
                        x = tmp_row[tb + p]
                        o = numba.int64(x) - t0
                        if o >= 0 and o < tile:
                            wd = o >> 5
                            below = bits[wd] & ((numba.uint32(1) << numba.uint32(o & 31)) - numba.uint32(1))
                            r = done + prefix[wd] + cuda.popc(below)
                            out_idx[start + r] = x
                            out_w[start + r] = tmp_w[tb + p]
                    done += total
                    t0 += tile
                    cuda.syncthreads()  # bits and prefix reused by the next tile
            j += cuda.gridDim.x

    return lower_sort


def ptx_kernels():
    """Every kernel with a representative geometry, for tests/test_ptx.py."""
    return [
        ("relevance", relevance_kernel(32, 8),
         "void(int64[::1], int32[::1], int32[::1], float64[::1], int32[::1], float64[::1])"),
        ("write_edges", edge_write_kernel(256, 16),
         "void(int64[::1], int64, float64[:, ::1], float64[::1], int64, float64, int64[::1], int64, int64, int64, "
         "int32[::1], float32[::1], int32[::1], int64[::1])"),
        ("row_lengths", row_lengths, "void(int64[::1], int64, int64, int64, int64[::1])"),
        ("ais_kernel", ais_kernel, "void(int32[::1], int64[::1], float64[::1])"),
        ("split_upper", split_upper,
         "void(int64[::1], int32[::1], float32[::1], int64, int64[::1], int32[::1], int32[::1], float32[::1], "
         "int32[::1], float32[::1])"),
        ("lower_sort", lower_sort_kernel(256, 2048),
         "void(int64[::1], int64[::1], int32[::1], float32[::1], int32[::1], float32[::1])"),
    ]
