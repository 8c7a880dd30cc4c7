"""RankSVM's CUDA kernels (the notation, the pair structure and the CPU twins: ranksvm.py).

Each kernel runs the per-item functions of ranksvm.py (``make_items``, ``eval_row``) compiled
as CUDA device functions; the table of kernels is in ranksvm.py's docstring. Imported only where
a CUDA path runs (gputext/rank/cuda_ops.py, tests, scripts), so that the CPU twin's process never
imports numba.cuda.
"""
from __future__ import annotations

import math

import numba
from numba import cuda

from ._factory import kernel_cache
from .linear_svm import rows_column_sum_dev
from .primitives import (block_inclusive_scan2_dev, block_inclusive_scan_dev, block_tree_sum_dev,
                         lower_bound_dev, sort_pairs_ascending_dev)
from .ranksvm import eval_row, make_items
from .jit import cuda_kernel, device_function

_eval_row_dev = device_function(eval_row)


@cuda_kernel
def dense_rmatvec_partial(Xd, u, chunk_rows, partial):
    """partial[c, b] = sum_{r in chunk b's rows} float64(Xd[r, c]) * u[r].

    Block b takes rows [chunk_rows[b], chunk_rows[b+1]) (the host cuts each query block into
    chunks of at most rows_per_block rows from the block's first row, so a chunk's rows depend on
    its query block only); thread tid takes columns tid, tid + blockDim, ... and sums its rows in
    order (linear_svm.rows_column_sum_dev, the item the SVM's active-pair X_I^T u shares: four loads
    in flight, the sum still in row order). A warp reads 32 consecutive columns of one row:
    coalesced. No shared memory, no synchronisation. Xd (rows, cols) float32, u (rows,) float64,
    chunk_rows (n_chunks+1,) int64, partial (cols, n_chunks) float64.
    """
    b = cuda.blockIdx.x
    n_cols = Xd.shape[1]
    r0 = chunk_rows[b]
    r1 = chunk_rows[b + 1]
    for c in range(cuda.threadIdx.x, n_cols, cuda.blockDim.x):
        partial[c, b] = rows_column_sum_dev(Xd, u, u, r0, r1, c)


@cuda_kernel
def rows_in_order(partial, out):
    """out[c] = ((0 + partial[0, c]) + partial[1, c]) + ...: the rows of partial (G, cols) float64
    added in row order, one thread a column (grid-stride): ranksvm.sum_rows_in_order's arithmetic,
    so the same bits as the host's sum of the same blocks. No shared memory."""
    for c in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        acc = 0.0
        for g in range(partial.shape[0]):
            acc += partial[g, c]
        out[c] = acc


@cuda_kernel
def hess_finish(beta_minus, beta_plus, a, alpha_minus, alpha_plus, u):
    """Grid-stride over rows i: u[i] = (b- + b+) a[i] - (alpha- + alpha+). No shared memory."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, u.shape[0], stride):
        u[i] = numba.float64(beta_minus[i] + beta_plus[i]) * a[i] - (alpha_minus[i] + alpha_plus[i])


@kernel_cache
def _device_items():
    """The per-item functions as CUDA device functions (made on first use), then ``block_query``:
    (tid, st, n, base) of the calling thread, its block's query as query_rows gives it (n = -1
    past the last query), the prologue of every per-query kernel."""
    items = make_items(lambda fn: device_function(fn))
    query_rows = items[0]

    @device_function
    def block_query(starts):
        st, n, base = query_rows(starts, cuda.blockIdx.x)
        return cuda.threadIdx.x, st, n, base

    return items + (block_query,)


@kernel_cache
def dense_matvec_kernel(threads: int, tile_cols: int):
    """out = Xd v for dense Xd (rows, cols) float32, v (cols,) float64, out (rows,) float64.

    Block b (grid-stride) takes rows [b*threads, (b+1)*threads); for each tile of ``tile_cols``
    columns the block loads the threads x tile_cols tile into shared memory (consecutive threads
    read consecutive columns of a row: coalesced; the tile row is padded by one to avoid bank
    conflicts), syncthreads, then thread tid adds its row's tile products in column order,
    syncthreads before the next tile. Shared: threads * (tile_cols + 1) float32.
    """
    width = tile_cols + 1

    @cuda_kernel
    def dense_matvec(Xd, v, out):
        tile = cuda.shared.array((threads, width), numba.float32)
        tid = cuda.threadIdx.x
        n_rows = Xd.shape[0]
        n_cols = Xd.shape[1]
        row0 = numba.int64(cuda.blockIdx.x) * threads
        step = numba.int64(cuda.gridDim.x) * threads
        while row0 < n_rows:
            acc = 0.0
            for c0 in range(0, n_cols, tile_cols):
                for e in range(tid, threads * tile_cols, threads):
                    r = e // tile_cols
                    c = e - r * tile_cols
                    x = numba.float32(0.0)
                    if row0 + r < n_rows and c0 + c < n_cols:
                        x = Xd[row0 + r, c0 + c]
                    tile[r, c] = x
                cuda.syncthreads()  # tile loaded
                width_here = min(tile_cols, n_cols - c0)
                for c in range(width_here):
                    acc += numba.float64(tile[tid, c]) * v[c0 + c]
                cuda.syncthreads()  # tile consumed before it is overwritten
            if row0 + tid < n_rows:
                out[row0 + tid] = acc
            row0 += step

    return dense_matvec


@kernel_cache
def segment_reduce_kernel(threads: int):
    """out[g, c] = sum of values[c, p] over p in [seg[g], seg[g+1]) (values (cols, items) float64,
    seg (G+1,) int64 ascending, out (G, cols) float64): one block per pair (g, c), grid-stride over
    the G * cols pairs; thread tid sums p = seg[g] + tid, + threads, ... in order, then a
    shared-memory tree (threads a power of two) with a syncthreads per round. The order depends
    only on the segment's length: a query block's sum is the same whichever rows surround it."""

    @cuda_kernel
    def segment_reduce(values, seg, out):
        buf = cuda.shared.array(threads, numba.float64)
        tid = cuda.threadIdx.x
        n_cols = values.shape[0]
        n_pairs = out.shape[0] * n_cols
        for pair in range(cuda.blockIdx.x, n_pairs, cuda.gridDim.x):
            g = pair // n_cols
            c = pair - g * n_cols
            acc = 0.0
            for p in range(seg[g] + tid, seg[g + 1], threads):
                acc += values[c, p]
            block_tree_sum_dev(buf, acc, tid, tid, threads)
            if tid == 0:
                out[g, c] = buf[0]
            cuda.syncthreads()  # buf read before the next pair reuses it

    return segment_reduce


@kernel_cache
def csr_matvec_kernel(threads: int, group: int):
    """out = X v for CSR X (indptr int64, indices int32, data float32), v, out float64.

    A group of ``group`` threads (a power of two dividing ``threads``) per row; block b takes rows
    [b*rows_per_block, ...) grid-stride with rows_per_block = threads // group. Lane l sums the
    row's entries l, l+group, ...; then a shared-memory tree within the group (a syncthreads per
    round, taken by all threads of the block). Fixed order: deterministic.
    """
    rows_per_block = threads // group

    @cuda_kernel
    def csr_matvec(indptr, indices, data, v, out):
        buf = cuda.shared.array(threads, numba.float64)
        tid = cuda.threadIdx.x
        lane = tid % group
        local = tid // group
        n_rows = indptr.shape[0] - 1
        row0 = numba.int64(cuda.blockIdx.x) * rows_per_block
        step = numba.int64(cuda.gridDim.x) * rows_per_block
        while row0 < n_rows:
            row = row0 + local
            acc = 0.0
            if row < n_rows:
                for k in range(indptr[row] + lane, indptr[row + 1], group):
                    acc += numba.float64(data[k]) * v[indices[k]]
            block_tree_sum_dev(buf, acc, tid, lane, group)
            if lane == 0 and row < n_rows:
                out[row] = buf[tid]
            cuda.syncthreads()  # buf read before reuse
            row0 += step

    return csr_matvec


@kernel_cache
def csc_rmatvec_blocks_kernel(threads: int):
    """out[g, c] = sum over the entries of column c whose rows lie in query block g
    (block_rows[g] <= row < block_rows[g+1]) of data * u[row] (CSC colptr int64, rows int32
    ascending within a column, data float32; out (G, cols) float64): one block per pair (g, c),
    grid-stride over the G * cols pairs; every thread finds the block's entries of the column by
    binary search (a contiguous run: rows ascend), takes entries tid, tid+threads, ..., then a
    shared-memory tree (threads a power of two), a syncthreads per round. The order depends only
    on the block's own entries. Deterministic."""

    @cuda_kernel
    def csc_rmatvec_blocks(colptr, rows, data, u, block_rows, out):
        buf = cuda.shared.array(threads, numba.float64)
        tid = cuda.threadIdx.x
        n_cols = colptr.shape[0] - 1
        n_pairs = out.shape[0] * n_cols
        for pair in range(cuda.blockIdx.x, n_pairs, cuda.gridDim.x):
            g = pair // n_cols
            c = pair - g * n_cols
            k0 = lower_bound_dev(rows, colptr[c], colptr[c + 1], block_rows[g])
            k1 = lower_bound_dev(rows, k0, colptr[c + 1], block_rows[g + 1])
            acc = 0.0
            for k in range(k0 + tid, k1, threads):
                acc += numba.float64(data[k]) * u[rows[k]]
            block_tree_sum_dev(buf, acc, tid, tid, threads)
            if tid == 0:
                out[g, c] = buf[0]
            cuda.syncthreads()  # buf read before the next pair reuses it

    return csc_rmatvec_blocks


@kernel_cache
def rank_structure_kernel(threads: int, sort_capacity: int):
    """One block per query t (block t; ``threads`` threads, a power of two): the pair structure.

    1. Sort the query's (score, local row) ascending: a bitonic sort in shared memory when
       n <= sort_capacity (padded to a power of two with +inf keys), else the same bitonic sort in
       global scratch gkeys/gidx at offset goff[t] (the host reserves next_pow2(n) slots for each
       long query). Writes order, ssorted.
    2. Thread tid takes sorted positions p = tid, tid+threads, ...: vsorted, the shifted score and
       its square (sweights, per row), and lo/hi by binary search (the float64 predicates of the
       brute-force definition).
    3. Wavelet levels b = 0..n_levels-1 over vsorted: chunks of ``threads`` positions, one int32
       block scan per chunk for the zero-bit prefix counts (rank0), then a stable scatter into the
       next level's buffers (vbuf/rbuf, double-buffered by level parity). seqrow[b] keeps the local
       row at every position of level b.
    4. beta-/+ per row by O(n_levels) walks.
    Shared: sort_capacity float64 + sort_capacity int32 + threads int32. syncthreads between the
    steps and inside the scans and the sort; every thread runs the same loop trip counts.
    Arrays as in ``rank_structure_cpu``, plus goff int64 (Q,), gkeys float64, gidx int32.
    """
    _q, position, level_entry, level_scatter, betas, _cs, _ps, block_query = _device_items()
    inf = math.inf

    @cuda_kernel
    def rank_structure(starts, scores, lrank, n_levels, goff, gkeys, gidx, order, ssorted, sweights,
                       vsorted, lo, hi, seqrow, rank0, vbuf, rbuf, beta_minus, beta_plus):
        skeys = cuda.shared.array(sort_capacity, numba.float64)
        sidx = cuda.shared.array(sort_capacity, numba.int32)
        sbuf = cuda.shared.array(threads, numba.int32)
        tid, st, n, base = block_query(starts)
        if n < 0:
            return  # past the last query: the whole block leaves together
        size = 1
        while size < n:
            size *= 2
        # 1. sort
        if n <= sort_capacity:
            for i in range(tid, size, threads):
                if i < n:
                    skeys[i] = scores[st + i]
                else:
                    skeys[i] = inf
                sidx[i] = i
            cuda.syncthreads()  # keys loaded
            sort_pairs_ascending_dev(skeys, sidx, 0, size, tid, threads)
            for p in range(tid, n, threads):
                order[st + p] = sidx[p]
                ssorted[st + p] = skeys[p]
        else:
            g = goff[cuda.blockIdx.x]
            for i in range(tid, size, threads):
                if i < n:
                    gkeys[g + i] = scores[st + i]
                else:
                    gkeys[g + i] = inf
                gidx[g + i] = i
            cuda.syncthreads()  # keys loaded
            sort_pairs_ascending_dev(gkeys, gidx, g, size, tid, threads)
            for p in range(tid, n, threads):
                order[st + p] = gidx[g + p]
                ssorted[st + p] = gkeys[g + p]
        cuda.syncthreads()  # order and ssorted complete
        # 2. per position: label rank, shifted score, binary searches
        ref = ssorted[st + n // 2]
        for p in range(tid, n, threads):
            position(p, st, n, ref, scores, lrank, order, ssorted, vsorted, sweights, lo, hi)
        cuda.syncthreads()  # vsorted complete
        # 3. wavelet levels
        for b in range(n_levels):
            shift = n_levels - 1 - b
            if tid == 0:
                rank0[b, base] = 0
            carry = numba.int32(0)
            for c0 in range(0, n, threads):
                q = c0 + tid
                zero = numba.int32(0)
                if q < n:
                    zero = numba.int32(level_entry(b, q, st, shift, vsorted, order, vbuf, rbuf, seqrow))
                mine, total = block_inclusive_scan_dev(sbuf, zero, tid, threads)
                if q < n:
                    rank0[b, base + q + 1] = carry + mine
                carry += total
            cuda.syncthreads()  # rank0[b] complete
            if b < n_levels - 1:
                nz = rank0[b, base + n]
                for q in range(tid, n, threads):
                    level_scatter(b, q, st, base, shift, nz, vsorted, vbuf, rbuf, seqrow, rank0)
                cuda.syncthreads()  # next level's buffers complete
        # 4. counts
        for p in range(tid, n, threads):
            betas(p, st, base, n, n_levels, vsorted, order, lo, hi, rank0, beta_minus, beta_plus)

    return rank_structure


@kernel_cache
def wavelet_sums_kernel(threads: int):
    """One block per query t (``threads`` threads, a power of two): weighted pair statistics.

    For each weight channel c (weights (C, L) float64, grouped rows) and level b: chunks of
    ``threads`` level positions, thread tid gathers the weight of the row at position q
    (seqrow), splits it by the level bit (rank0 steps), and two float64 block scans give the
    prefix sums W0[b], W1[b] of the zero-bit and one-bit weights (carried across chunks).
    syncthreads; then thread tid takes sorted positions p = tid, tid+threads, ... and writes
    out_minus[c, row] = sum over M_row (labels below, positions [lo, n)) and, for c < n_plus,
    out_plus[c, row] = sum over P_row (labels above, positions [0, hi)). A syncthreads before the
    next channel reuses W0/W1. Shared: 2 * threads float64.
    """
    _q, _p, _le, _ls, _b, channel_split, pair_sums, block_query = _device_items()

    @cuda_kernel
    def wavelet_sums(starts, order, vsorted, lo, hi, seqrow, rank0, n_levels, weights, n_plus, W0, W1,
                     out_minus, out_plus):
        buf0 = cuda.shared.array(threads, numba.float64)
        buf1 = cuda.shared.array(threads, numba.float64)
        tid, st, n, base = block_query(starts)
        if n < 0:
            return  # past the last query: the whole block leaves together
        for c in range(weights.shape[0]):
            for b in range(n_levels):
                if tid == 0:
                    W0[b, base] = 0.0
                    W1[b, base] = 0.0
                carry0 = 0.0
                carry1 = 0.0
                for c0 in range(0, n, threads):
                    q = c0 + tid
                    x0 = 0.0
                    x1 = 0.0
                    if q < n:
                        x0, x1 = channel_split(c, b, q, st, base, weights, seqrow, rank0)
                    m0, t0, m1, t1 = block_inclusive_scan2_dev(buf0, buf1, x0, x1, tid, threads)
                    if q < n:
                        W0[b, base + q + 1] = carry0 + m0
                        W1[b, base + q + 1] = carry1 + m1
                    carry0 += t0
                    carry1 += t1
            cuda.syncthreads()  # W0, W1 complete for every level
            for p in range(tid, n, threads):
                pair_sums(c, p, st, base, n, n_levels, n_plus, vsorted, order, lo, hi, rank0, W0, W1, out_minus,
                          out_plus)
            cuda.syncthreads()  # all walks done before the next channel overwrites W0, W1

    return wavelet_sums


@cuda_kernel
def eval_rows(sweights, beta_minus, beta_plus, sums_minus, sums_plus, z, loss_rows):
    """Grid-stride over rows i: z[i] and loss_rows[0, i], row i's loss term (as
    ``eval_finish_cpu``; segment_reduce sums the terms per query block). No shared memory."""
    for i in range(cuda.grid(1), z.shape[0], cuda.gridsize(1)):
        loss_rows[0, i] = _eval_row_dev(i, sweights, beta_minus, beta_plus, sums_minus, sums_plus, z)


def ptx_kernels():
    """Every CUDA kernel of this module with a representative geometry (tests/test_ptx.py)."""
    f64 = "float64[::1]"
    i32 = "int32[::1]"
    i64 = "int64[::1]"
    return [
        ("dense_rmatvec_partial", dense_rmatvec_partial,
         f"void(float32[:, ::1], float64[::1], {i64}, float64[:, ::1])"),
        ("hess_finish", hess_finish, f"void({i32}, {i32}, {f64}, {f64}, {f64}, {f64})"),
        ("rows_in_order", rows_in_order, f"void(float64[:, ::1], {f64})"),
        ("dense_matvec", dense_matvec_kernel(128, 32), "void(float32[:, ::1], float64[::1], float64[::1])"),
        ("segment_reduce", segment_reduce_kernel(256), f"void(float64[:, ::1], {i64}, float64[:, ::1])"),
        ("csr_matvec", csr_matvec_kernel(128, 8), f"void({i64}, {i32}, float32[::1], {f64}, {f64})"),
        ("csc_rmatvec_blocks", csc_rmatvec_blocks_kernel(256),
         f"void({i64}, {i32}, float32[::1], {f64}, {i64}, float64[:, ::1])"),
        ("rank_structure", rank_structure_kernel(128, 2048),
         f"void({i64}, {f64}, {i32}, int64, {i64}, {f64}, {i32}, {i32}, {f64}, float64[:, ::1], {i32}, "
         f"{i32}, {i32}, int32[:, ::1], int32[:, ::1], int32[:, ::1], int32[:, ::1], {i32}, {i32})"),
        ("wavelet_sums", wavelet_sums_kernel(128),
         f"void({i64}, {i32}, {i32}, {i32}, {i32}, int32[:, ::1], int32[:, ::1], int64, float64[:, ::1], "
         "int64, float64[:, ::1], float64[:, ::1], float64[:, ::1], float64[:, ::1])"),
        ("eval_rows", eval_rows,
         f"void(float64[:, ::1], {i32}, {i32}, float64[:, ::1], float64[:, ::1], {f64}, float64[:, ::1])"),
    ]
