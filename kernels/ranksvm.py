"""Linear RankSVM (L2 loss): per-query pair statistics and matrix-vector products, device and CPU twin.

Notation (the paper's eq. 9-13). Rows are grouped by query: query t owns rows
``starts[t] <= r < starts[t+1]`` (``n = n_t`` of them) and the arrays below are indexed by these
grouped rows. ``scores = X w`` (float64). Within a query, sorted position p = 0..n-1 orders the
documents by (score, local row) ascending; ``order[st + p]`` is the local row at position p.

A pair (i, j) of one query with y_i > y_j is *active* (a support pair) when
``1 - (s_i - s_j) > 0``, evaluated in float64 exactly as the brute-force definition does
(``fl(s_i - s_j) < 1``; float subtraction is monotone, so binary searches over sorted scores give
the same sets). Per document i:

* M_i (the paper's SV_i^-): j with y_j < y_i and fl(s_i - s_j) < 1: the sorted positions
  [lo_i, n) restricted to labels below y_i;
* P_i (SV_i^+): j with y_j > y_i and fl(s_j - s_i) < 1: positions [0, hi_i) restricted to labels
  above y_i;
* beta-/+ = |M_i|, |P_i|; gamma-/+ = sums of (shifted) scores over them; alpha-/+ = sums of
  a = X v over them; delta- = sum of squared shifted scores over M_i (for the loss).

The "labels below y_i within a position range" sums are answered without enumerating pairs by a
wavelet matrix over the label ranks in sorted-position order: ``n_levels = ceil(log2 K)`` levels
(K distinct relevance values), each a stable partition by one bit of the rank (MSB first) with
prefix counts of zero bits (``rank0``) and, per weight channel, prefix sums of the weights of the
zero-bit and one-bit elements (W0, W1). A query "labels < v in positions [a, e)" walks the levels
in O(n_levels). Per query this is O(n log n) for the sort and binary searches plus
O(n log K) for the statistics, whatever the number of relevance levels (prefix sums over
relevance levels, one bit of the level at a time). Counts are exact integers; the sums are
differences of float64 prefix sums, exact up to rounding of the prefix sums.

Scores are shifted by a per-query reference (the score at sorted position n // 2) before they are
summed: margins are unchanged, cancellation in the loss is smaller. The gradient coefficient
z_i = (beta+ + beta-) s_i - (gamma+ + gamma-) - (beta- - beta+) does not depend on the shift.

Kernels (all take C-contiguous arrays of fixed dtypes, outputs allocated by the caller; launch
geometry comes from the host, block sizes are kernel-factory parameters):

=====================  =======================================================================
dense_matvec           out = X v for dense X (rows, cols) float32, tiles staged in shared memory
dense_rmatvec_partial  partial[c, b] = sum over the rows of chunk b of X[r, c] u[r] (chunks of at
                       most rows_per_block rows, cut at query-block boundaries)
segment_reduce         out[g, c] = sum of values[c, seg[g]:seg[g+1]]   (block per (g, c), tree)
csr_matvec             out = X v, CSR, a group of ``group`` threads per row, shared-memory tree
csc_rmatvec_blocks     out[g, c] = X^T u of query block g through a CSC copy: block per (g, c), tree
rank_structure         one block per query: sort, binary searches, wavelet levels, beta+/-
wavelet_sums           one block per query: per channel, W0/W1 prefix sums, then sums over M_i, P_i
eval_rows              z and each row's loss term (segment_reduce then sums them per query block)
rows_in_order          out[c] = sum of the blocks' rows in block order (sum_rows_in_order's arithmetic)
hess_finish            u = (beta- + beta+) a - (alpha- + alpha+)
=====================  =======================================================================

The kernels live in ranksvm_cuda.py, imported only where a CUDA path runs: this module (shared
per-item logic and CPU twins) does not import numba.cuda, which would cost a CPU-only process such
as ``gputext rank train --device cpu`` ~0.3 s of start-up.

Query blocks. The loss and X^T u are sums over documents. Both backends compute them per *query
block* (runs of whole queries fixed by the data alone: gputext.rank.geometry.query_blocks), each
block's sum in a fixed order that depends only on the block's own rows, and the host adds the
blocks in block order (sum_rows_in_order). A Dask run whose parts are unions of whole blocks
(gputext.distributed.rank) therefore gets the same block sums and adds them in the same order:
its weights equal the single process's bit for bit, for any number of parts. No atomics; every
output is a fixed-order sum (dense: per chunk of rows, then a tree over a block's chunks; sparse:
per column over the block's part of a CSC copy on the device, in row order per column over the
block's CSR rows on the CPU, csr_rmatvec_cpu). The CPU twins (``*_cpu``,
numba.njit(parallel=True)) take the same arrays; their sums are sequential, so float sums can
differ from the device's in the last bits, counts never. The CPU twins of the products X v and,
through the CSC copy, X^T u are the linear learners' shared ones (kernels/products.py:
csr_matvec_cpu, dense_matvec_cpu), also the SVM's one-column case.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange
from .jit import cpu_jit

# ----------------------------------------------------------------------------- shared logic
# Plain Python functions compiled twice: numba.njit here for the CPU twins, cuda.jit(device=True) in
# ranksvm_cuda.py's kernel factories.


def _first_lower_active(ss, st, p, sp):
    """Smallest q in [0, p] with fl(sp - ss[st+q]) < 1 (q = p always qualifies)."""
    a = 0
    b = p
    while a < b:
        mid = (a + b) // 2
        if sp - ss[st + mid] < 1.0:
            b = mid
        else:
            a = mid + 1
    return a


def _first_upper_inactive(ss, st, p, n, sp):
    """Smallest q in [p+1, n] with fl(ss[st+q] - sp) >= 1, or n."""
    a = p + 1
    b = n
    while a < b:
        mid = (a + b) // 2
        if ss[st + mid] - sp >= 1.0:
            b = mid
        else:
            a = mid + 1
    return a


def _count_amount(W, b, base, a, e, ra, re, zero_side):
    """Elements of positions [a, e) on one side of level b: zero bits (re - ra) or one bits."""
    if zero_side:
        return re - ra
    return (e - a) - (re - ra)


def _sum_amount(W, b, base, a, e, ra, re, zero_side):
    """Weight of the same elements: W (W0 for the zero side, W1 for the one side) prefix sums."""
    return W[b, base + e] - W[b, base + a]


def _query_rows(starts, t):
    """Query t's first grouped row st, its row count n (int32) and base = st + t, where its n + 1
    prefix-count entries start in rank0 / W0 / W1; n = -1 for t past the last query."""
    if t >= starts.shape[0] - 1:
        return numba.int64(0), numba.int32(-1), numba.int64(0)
    st = starts[t]
    return st, numba.int32(starts[t + 1] - st), st + t


def _make_wavelet_walk(below, amount):
    """The walk "labels < v (below) or > v (not below) among sorted positions [a, e) of one query":
    from the top level down, the elements whose level bit differs from v's on the wanted side are
    all below / above v whatever their lower bits (``amount`` counts or sums them); the others are
    followed to the next level. O(n_levels). ``below`` is a compile-time constant."""
    def walk(rank0, W, base, n, n_levels, v, a, e):
        total = 0
        for b in range(n_levels):
            if a >= e:
                break
            ra = rank0[b, base + a]
            re = rank0[b, base + e]
            if (v >> (n_levels - 1 - b)) & 1:
                if below:
                    total += amount(W, b, base, a, e, ra, re, True)
                nz = rank0[b, base + n]
                a = nz + a - ra
                e = nz + e - re
            else:
                if not below:
                    total += amount(W, b, base, a, e, ra, re, False)
                a = ra
                e = re
        return total
    return walk


def make_items(jit):
    """The per-item functions of rank_structure / wavelet_sums, compiled by ``jit`` (the CUDA
    device decorator or numba.njit): the kernels and their CPU twins run the same code per sorted
    position, per level entry and per row; only the loops over items (threads vs. a serial loop)
    and the sort and scans differ."""
    first_lower = jit(_first_lower_active)
    first_upper = jit(_first_upper_inactive)
    count_amount = jit(_count_amount)
    sum_amount = jit(_sum_amount)
    count_less = jit(_make_wavelet_walk(True, count_amount))
    count_greater = jit(_make_wavelet_walk(False, count_amount))
    sum_less = jit(_make_wavelet_walk(True, sum_amount))
    sum_greater = jit(_make_wavelet_walk(False, sum_amount))

    def position(p, st, n, ref, scores, lrank, order, ssorted, vsorted, sweights, lo, hi):
        """Sorted position p: its label rank, the shifted score of its row and the square, and
        lo/hi by binary search (the float64 predicates of the brute-force definition)."""
        row = order[st + p]
        vsorted[st + p] = lrank[st + row]
        x = scores[st + row] - ref
        sweights[0, st + row] = x
        sweights[1, st + row] = x * x
        sp = ssorted[st + p]
        lo[st + p] = first_lower(ssorted, st, p, sp)
        hi[st + p] = first_upper(ssorted, st, p, n, sp)

    def level_entry(b, q, st, shift, vsorted, order, vbuf, rbuf, seqrow):
        """Position q of level b: records its row in seqrow[b]; returns 1 when its level bit is 0."""
        if b == 0:
            val = vsorted[st + q]
            row = order[st + q]
        else:
            val = vbuf[(b - 1) & 1, st + q]
            row = rbuf[(b - 1) & 1, st + q]
        seqrow[b, st + q] = row
        if ((val >> shift) & 1) == 0:
            return 1
        return 0

    def level_scatter(b, q, st, base, shift, nz, vsorted, vbuf, rbuf, seqrow, rank0):
        """Position q of level b goes to its place in level b + 1 (stable partition by the bit)."""
        if b == 0:
            val = vsorted[st + q]
        else:
            val = vbuf[(b - 1) & 1, st + q]
        row = seqrow[b, st + q]
        r0 = rank0[b, base + q]
        if ((val >> shift) & 1) == 0:
            dst = r0
        else:
            dst = nz + q - r0
        vbuf[b & 1, st + dst] = val
        rbuf[b & 1, st + dst] = row

    def betas(p, st, base, n, n_levels, vsorted, order, lo, hi, rank0, beta_minus, beta_plus):
        """beta-/+ of the row at sorted position p."""
        v = vsorted[st + p]
        row = order[st + p]
        beta_minus[st + row] = count_less(rank0, rank0, base, n, n_levels, v, lo[st + p], n)
        beta_plus[st + row] = count_greater(rank0, rank0, base, n, n_levels, v, 0, hi[st + p])

    def channel_split(c, b, q, st, base, weights, seqrow, rank0):
        """Channel c's weight of the row at position q of level b, as (zero-bit part, one-bit part)."""
        x = weights[c, st + seqrow[b, st + q]]
        if rank0[b, base + q + 1] != rank0[b, base + q]:
            return x, 0.0
        return 0.0, x

    def pair_sums(c, p, st, base, n, n_levels, n_plus, vsorted, order, lo, hi, rank0, W0, W1, out_minus, out_plus):
        """Channel c's sums over M and P of the row at sorted position p."""
        v = vsorted[st + p]
        row = order[st + p]
        out_minus[c, st + row] = sum_less(rank0, W0, base, n, n_levels, v, lo[st + p], n)
        if c < n_plus:
            out_plus[c, st + row] = sum_greater(rank0, W1, base, n, n_levels, v, 0, hi[st + p])

    return (jit(_query_rows), jit(position), jit(level_entry), jit(level_scatter), jit(betas), jit(channel_split),
            jit(pair_sums))


(_query_rows_cpu, _position_cpu, _level_entry_cpu, _level_scatter_cpu, _betas_cpu, _channel_split_cpu,
 _pair_sums_cpu) = make_items(numba.njit(cache=False, inline="always"))


def eval_row(i, sweights, beta_minus, beta_plus, sums_minus, sums_plus, z):
    """Row i: z[i] = (b- + b+) s'_i - (g- + g+) - (b- - b+); returns its loss term
    b- (1 - s'_i)^2 + 2 (1 - s'_i) g- + d-."""
    bm = numba.float64(beta_minus[i])
    bp = numba.float64(beta_plus[i])
    sp = sweights[0, i]
    gm = sums_minus[0, i]
    z[i] = (bm + bp) * sp - (gm + sums_plus[0, i]) - (bm - bp)
    c = 1.0 - sp
    return bm * c * c + 2.0 * c * gm + sums_minus[1, i]


_eval_row_cpu = numba.njit(inline="always")(eval_row)


def n_levels_for(n_distinct: int) -> int:
    """Wavelet levels for K distinct relevance values: ceil(log2 K), at least 1."""
    return max(1, int(math.ceil(math.log2(max(n_distinct, 2)))))


# ----------------------------------------------------------------------------- CPU twins


@cpu_jit
def sum_rows_in_order(partial, out):
    """out[c] = ((0 + partial[0, c]) + partial[1, c]) + ...: the rows of partial (G, m) float64
    added in row order (the fixed order of the query blocks' partial sums; the same function on
    the host of a single process and on a Dask client, so both give the same bits)."""
    for c in range(out.shape[0]):
        out[c] = 0.0
    for g in range(partial.shape[0]):
        for c in range(out.shape[0]):
            out[c] += partial[g, c]


@cpu_jit(parallel=True)
def dense_rmatvec_cpu(Xd, u, block_rows, partial):
    """partial[g, c] = sum over the rows r of query block g (block_rows[g] <= r < block_rows[g+1]),
    in row order from 0.0, of float64(Xd[r, c]) * u[r]: Xd^T u per query block (sum_rows_in_order
    adds the blocks). Xd (rows, cols) float32, u (rows,) float64, block_rows (G+1,) int64,
    partial (G, cols) float64. One parallel iteration per block."""
    n_cols = Xd.shape[1]
    for g in prange(partial.shape[0]):
        acc = np.zeros(n_cols, dtype=np.float64)
        for r in range(block_rows[g], block_rows[g + 1]):
            ur = u[r]
            for c in range(n_cols):
                acc[c] += numba.float64(Xd[r, c]) * ur
        for c in range(n_cols):
            partial[g, c] = acc[c]


@numba.njit
def _scatter_rows(indptr, indices, data, u, r0, r1, out):
    """out[:] = 0, then the rows r0..r1-1 in order add data * u[row] to the columns of their entries."""
    for c in range(out.shape[0]):
        out[c] = 0.0
    for r in range(r0, r1):
        ur = u[r]
        for p in range(indptr[r], indptr[r + 1]):
            out[indices[p]] += numba.float64(data[p]) * ur


@cpu_jit(parallel=True)
def csr_rmatvec_cpu(indptr, indices, data, u, block_rows, partial):
    """partial[g, c] = sum over the rows r of query block g holding column c, in row order from
    0.0, of data * u[r]: X^T u per query block from X's CSR rows, bit for bit the sum
    products.csr_matvec_cpu gives over the CSC copy of the block's rows, without the copy
    (sum_rows_in_order adds the blocks). CSR int64/uint32 (or int32)/float32 or float64; u (rows,)
    float64, block_rows (G+1,) int64, partial (G, cols) float64.

    One parallel iteration per block: a row-order scatter over its own rows into its own row of
    partial (the block is its own function because the same loop written inline in the prange
    body ran at the speed of a column walk)."""
    for g in prange(partial.shape[0]):
        _scatter_rows(indptr, indices, data, u, block_rows[g], block_rows[g + 1], partial[g])


@cpu_jit(parallel=True)
def rank_structure_cpu(starts, scores, lrank, n_levels, order, ssorted, sweights, vsorted, lo, hi,
                       seqrow, rank0, vbuf, rbuf, beta_minus, beta_plus):
    """CPU twin of ``rank_structure`` (one query per parallel iteration; same outputs).

    starts int64 (Q+1,); scores float64 (L,) grouped rows; lrank int32 (L,) label ranks;
    outputs: order int32 (L,) local row at each sorted position; ssorted float64 (L,);
    sweights float64 (2, L): shifted score and its square per row; vsorted int32 (L,) label rank
    at each sorted position; lo, hi int32 (L,) per sorted position; seqrow int32 (n_levels, L)
    local row at each position of each wavelet level; rank0 int32 (n_levels, L + Q) prefix
    counts of zero bits (query t's n+1 entries start at starts[t] + t); vbuf, rbuf int32 (2, L)
    scratch; beta_minus, beta_plus int32 (L,) per row.
    """
    n_q = starts.shape[0] - 1
    for t in prange(n_q):
        st, n, base = _query_rows_cpu(starts, t)
        perm = np.argsort(scores[st:st + n], kind="mergesort")  # stable: ties by lower row
        for p in range(n):
            order[st + p] = perm[p]
            ssorted[st + p] = scores[st + perm[p]]
        ref = ssorted[st + n // 2]
        for p in range(n):
            _position_cpu(p, st, n, ref, scores, lrank, order, ssorted, vsorted, sweights, lo, hi)
        for b in range(n_levels):
            shift = n_levels - 1 - b
            zeros = 0
            rank0[b, base] = 0
            for q in range(n):
                zeros += _level_entry_cpu(b, q, st, shift, vsorted, order, vbuf, rbuf, seqrow)
                rank0[b, base + q + 1] = zeros
            if b < n_levels - 1:
                nz = rank0[b, base + n]
                for q in range(n):
                    _level_scatter_cpu(b, q, st, base, shift, nz, vsorted, vbuf, rbuf, seqrow, rank0)
        for p in range(n):
            _betas_cpu(p, st, base, n, n_levels, vsorted, order, lo, hi, rank0, beta_minus, beta_plus)


@cpu_jit(parallel=True)
def wavelet_sums_cpu(starts, order, vsorted, lo, hi, seqrow, rank0, n_levels, weights, n_plus, W0, W1,
                     out_minus, out_plus):
    """CPU twin of ``wavelet_sums``: for each channel c of weights (C, L) (grouped rows),
    out_minus[c, row] = sum of weights over M_row, and for c < n_plus out_plus[c, row] = sum over
    P_row. W0, W1 float64 (n_levels, L + Q) scratch."""
    n_q = starts.shape[0] - 1
    n_ch = weights.shape[0]
    for t in prange(n_q):
        st, n, base = _query_rows_cpu(starts, t)
        for c in range(n_ch):
            for b in range(n_levels):
                acc0 = 0.0
                acc1 = 0.0
                W0[b, base] = 0.0
                W1[b, base] = 0.0
                for q in range(n):
                    x0, x1 = _channel_split_cpu(c, b, q, st, base, weights, seqrow, rank0)
                    acc0 += x0
                    acc1 += x1
                    W0[b, base + q + 1] = acc0
                    W1[b, base + q + 1] = acc1
            for p in range(n):
                _pair_sums_cpu(c, p, st, base, n, n_levels, n_plus, vsorted, order, lo, hi, rank0, W0, W1, out_minus,
                               out_plus)


@cpu_jit(parallel=True)
def eval_finish_cpu(sweights, beta_minus, beta_plus, sums_minus, sums_plus, z, block_rows, loss_blocks):
    """z[i] = (b- + b+) s'_i - (g- + g+) - (b- - b+); loss_blocks[g] = sum over the rows of query
    block g (block_rows[g] <= i < block_rows[g+1]), in row order from 0.0, of
    b- (1 - s'_i)^2 + 2 (1 - s'_i) g- + d- (the squared margins of the active pairs where i is the
    more relevant document). One parallel iteration per block."""
    for g in prange(loss_blocks.shape[0]):
        acc = 0.0
        for i in range(block_rows[g], block_rows[g + 1]):
            acc += _eval_row_cpu(i, sweights, beta_minus, beta_plus, sums_minus, sums_plus, z)
        loss_blocks[g] = acc


@cpu_jit(parallel=True)
def hess_finish_cpu(beta_minus, beta_plus, a, alpha_minus, alpha_plus, u):
    """u[i] = (b- + b+) a[i] - (alpha- + alpha+)."""
    for i in prange(u.shape[0]):
        u[i] = numba.float64(beta_minus[i] + beta_plus[i]) * a[i] - (alpha_minus[i] + alpha_plus[i])
