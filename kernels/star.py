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

FIX_BITS = 40
FIX_SCALE = float(2 ** FIX_BITS)
FIX_INV = 1.0 / FIX_SCALE
MIN_WEIGHT = 2.0 ** -17  # smallest weight whose fixed-point image is exact


# ----------------------------------------------------------------------------- host helpers (njit)

@numba.njit(cache=True)
def fixed_weight(w):
    """float32 weight -> int64 w * 2**40 (exact for w >= 2**-17)."""
    return numba.int64(numba.float64(w) * FIX_SCALE)


@numba.njit(cache=True)
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


@numba.njit(parallel=True, cache=True)
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


@numba.njit(parallel=True, cache=True)
def _accumulate_row_side(ptr, weights, row_offset, degree, weight_sum):
    for q in prange(ptr.shape[0] - 1):
        s = numba.int64(0)
        for p in range(ptr[q], ptr[q + 1]):
            s += fixed_weight(weights[p])
        degree[row_offset + q] += ptr[q + 1] - ptr[q]
        weight_sum[row_offset + q] += s


@numba.njit(cache=True)
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


@numba.njit(parallel=True, cache=True)
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
    for j in prange(n):
        running = 0
        for t in range(n_chunks):
            c = cnt[t, j]
            cnt[t, j] = running
            running += c
    for t in prange(n_chunks):
        for v in range(t * step, min(n, (t + 1) * step)):
            for p in range(up_ptr[v], up_ptr[v + 1]):
                j = up_cols[p]
                pos = indptr[j] + cnt[t, j]
                out_idx[pos] = v
                out_w[pos] = up_weights[p]
                cnt[t, j] += 1
    return indptr, out_idx, out_w


@numba.njit(parallel=True, cache=True)
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


@numba.njit(parallel=True, cache=True)
def ais_from_sums(degree, weight_sum):
    """AIS float64 (n,) = float64(weight_sum) * 2**-40 / degree; 0 for isolated vertices."""
    n = degree.shape[0]
    out = np.zeros(n, np.float64)
    for v in prange(n):
        if degree[v] > 0:
            out[v] = (numba.float64(weight_sum[v]) * FIX_INV) / numba.float64(degree[v])
    return out


# ----------------------------------------------------------------------------- relevance: CPU twin

@numba.njit(parallel=True, cache=True)
def relevance_cpu(indptr, indices, degree, ais, count, relevance):
    """Twin of ``relevance_kernel``: one vertex per prange iteration.

    indptr int64 (n+1,), indices int32 (nnz,) symmetric adjacency; degree int32 (n,); ais float64
    (n,).  Writes count int32 (n,) = #{u: deg(u) <= deg(v)} + #{u: ais(u) <= ais(v)} over
    u in Adj(v), and relevance float64 (n,) = count / (2 deg(v)) (0 when deg(v) = 0).
    """
    n = indptr.shape[0] - 1
    for v in prange(n):
        dv = degree[v]
        av = ais[v]
        s = 0
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            if degree[u] <= dv:
                s += 1
            if ais[u] <= av:
                s += 1
        count[v] = s
        if dv > 0:
            relevance[v] = numba.float64(s) / (2.0 * numba.float64(dv))
        else:
            relevance[v] = 0.0


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

    @cuda.jit
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
                av = ais[v]
                p = indptr[v] + tx
                end = indptr[v + 1]
                while p < end:
                    u = indices[p]
                    if degree[u] <= dv:
                        s += 1
                    if ais[u] <= av:
                        s += 1
                    p += lanes
            partial[ty, tx] = s
            cuda.syncthreads()  # every lane's partial count is in shared memory
            half = lanes // 2
            while half > 0:
                if tx < half:
                    partial[ty, tx] += partial[ty, tx + half]
                cuda.syncthreads()  # this halving is complete before the next reads it
                half //= 2
            if tx == 0 and v < n:
                total = partial[ty, 0]
                count[v] = total
                if dv > 0:
                    out[v] = numba.float64(total) / (2.0 * numba.float64(dv))
                else:
                    out[v] = 0.0
            cuda.syncthreads()  # partial is reused by the next vertex group
            group += cuda.gridDim.x

    return relevance


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


def ptx_kernels():
    """Every kernel with a representative geometry, for tests/test_ptx.py."""
    return [
        ("relevance", relevance_kernel(32, 8),
         "void(int64[::1], int32[::1], int32[::1], float64[::1], int32[::1], float64[::1])"),
    ]
