"""Stage 2 of the dense kNN (kernels/dense_knn.py): candidate selection per document slice
(``make_select_kernel``, on the block selection of kernels/select.py), exact float64 rescoring in
the canonical order (``make_rescore_kernel``), the per-query merge + rescore + sort
(``make_finish_kernel``), with their CPU twins, and the host's certificate (``certify_unpack_cpu``)."""
from __future__ import annotations

from functools import lru_cache

import numba
import numpy as np
from numba import cuda, float64, int64, uint32

from ._factory import jit_kernel
from .dense_common import ALL32, EXACT_LANES, SIGN_BIT, canonical_cross, final_cpu, final_dev
from .primitives import block_tree_sum_dev, ordered_bits_cpu, ordered_bits_dev, sort_pairs_scored_dev
from .select import ORDERED_LOW as _LOW
from .select import block_select_scratch, make_block_select, offer_cpu
from .jit import cpu_jit, cuda_kernel, device_function


@cpu_jit(parallel=True)
def select_candidates_cpu(key_bits, row_ids, kprime, n_slices, self_doc,
                          cand_idx, cand_key, cand_count, cand_complete, cand_thr):
    """CPU twin of make_select_kernel: same outputs, bit for bit.

    key_bits (n_alloc, n_docs) uint32: the float32 keys' bit patterns. row_ids (n_rows,) int32:
    which key rows to process; output row r describes key row row_ids[r]. Documents are split into
    n_slices contiguous slices of ceil(n_docs / n_slices). self_doc (n_alloc,) int64: the document
    key row q leaves out (-1: none). Per (r, slice sl), entries e = sl*kprime + i of a row:
      cand_idx (n_rows, n_slices * kprime) int32: the kprime documents of largest key (ties: lower
          index), listed in increasing document index; -1 padding;
      cand_key (n_rows, n_slices * kprime) uint32: their ordered keys (``_ordered_py``), 0 padding;
      cand_count (n_rows, n_slices) int32: how many are listed;
      cand_complete (n_rows, n_slices) int32: 1 when the slice had <= kprime documents (all listed);
      cand_thr (n_rows, n_slices) int64: ordered form of the kprime-th largest key (0 if complete).
    """
    n_docs = key_bits.shape[1]
    per = (n_docs + n_slices - 1) // n_slices
    n_rows = row_ids.shape[0]
    for task in numba.prange(n_rows * n_slices):
        r = task // n_slices
        sl = task % n_slices
        row = row_ids[r]
        lo = min(sl * per, n_docs)
        hi = min(lo + per, n_docs)
        base = sl * kprime
        selfcol = self_doc[row]
        n_avail = hi - lo
        if lo <= selfcol < hi:
            n_avail -= 1
        for i in range(kprime):
            cand_idx[r, base + i] = -1
            cand_key[r, base + i] = 0
        if n_avail <= kprime:
            c = 0
            for j in range(lo, hi):
                if j != selfcol:
                    cand_idx[r, base + c] = j
                    cand_key[r, base + c] = ordered_bits_cpu(key_bits[row, j])
                    c += 1
            cand_count[r, sl] = c
            cand_complete[r, sl] = 1
            cand_thr[r, sl] = 0
            continue
        vals = np.empty(n_avail, dtype=np.int64)
        c = 0
        for j in range(lo, hi):
            if j != selfcol:
                vals[c] = ordered_bits_cpu(key_bits[row, j])
                c += 1
        vals.sort()
        kth = vals[n_avail - kprime]
        n_gt = 0
        for i in range(n_avail - kprime + 1, n_avail):
            if vals[i] > kth:
                n_gt += 1
        need_eq = kprime - n_gt
        c = 0
        eq_taken = 0
        for j in range(lo, hi):
            if j == selfcol:
                continue
            u = ordered_bits_cpu(key_bits[row, j])
            if u > kth or (u == kth and eq_taken < need_eq):
                if u == kth:
                    eq_taken += 1
                cand_idx[r, base + c] = j
                cand_key[r, base + c] = u
                c += 1
        cand_count[r, sl] = c
        cand_complete[r, sl] = 0
        cand_thr[r, sl] = kth


@lru_cache(maxsize=None)
def make_select_kernel(threads_per_block: int, buffer_size: int, max_candidates: int, max_registers: int = 0):
    """Per (query row, document slice): the kprime largest keys (ties: lower document).

    Launch: grid (any number of blocks, n_slices); ``threads_per_block`` threads (a power of two).
    Work: a block handles rows row_ids[blockIdx.x], row_ids[blockIdx.x + gridDim.x], ... for
    slice blockIdx.y (documents [sl*per, min(n_docs, (sl+1)*per)), per = ceil(n_docs / n_slices));
    the selection is ``_make_block_select`` (bound L0 from group maxima, compaction of the few keys
    >= L0 into shared memory, radix select there, winners sorted by document); threads then write
    the row's entries sl*kprime .. sl*kprime + kprime - 1. Keys are read twice from global memory
    (L2 for one query) when the compacted keys fit ``buffer_size``.
    Shared memory: buffer_size * 8 + max_candidates * 4 + threads_per_block * 8 + 1 KiB.
    Synchronisation: inside the selection, and after each row's outputs are written.
    Arguments and outputs exactly as select_candidates_cpu (kprime <= max_candidates).
    ``max_registers`` > 0 caps the registers per thread (occupancy; see ``jit_kernel``).
    """
    TPB, CAP, MAXC = int(threads_per_block), int(buffer_size), int(max_candidates)
    block_select = make_block_select(TPB, CAP, MAXC)
    scratch = block_select_scratch(TPB, CAP, MAXC)

    @jit_kernel(max_registers)
    def dense_select_candidates(key_bits, row_ids, kprime, self_doc,
                                cand_idx, cand_key, cand_count, cand_complete, cand_thr):
        gmax, buf, hist, st, sp, win = scratch()
        tid = cuda.threadIdx.x
        sl = cuda.blockIdx.y
        n_slices = cuda.gridDim.y
        n_docs = key_bits.shape[1]
        per = (n_docs + n_slices - 1) // n_slices
        lo = min(sl * per, n_docs)
        hi = min(lo + per, n_docs)
        base = sl * kprime
        n_rows = row_ids.shape[0]
        for r in range(cuda.blockIdx.x, n_rows, cuda.gridDim.x):
            row = row_ids[r]
            n, done, thr = block_select(key_bits[row], row_ids, False, False, lo, hi, self_doc[row], kprime, tid,
                                        gmax, buf, hist, st, sp, win)
            for i in range(tid, kprime, TPB):
                if i < n:
                    d = win[i]
                    cand_idx[r, base + i] = d
                    cand_key[r, base + i] = uint32(ordered_bits_dev(key_bits[row, d]))
                else:
                    cand_idx[r, base + i] = -1
                    cand_key[r, base + i] = uint32(0)
            if tid == 0:
                cand_count[r, sl] = n
                cand_complete[r, sl] = done
                cand_thr[r, sl] = thr
            cuda.syncthreads()  # row written before the scratch is reused

    return dense_select_candidates


@lru_cache(maxsize=None)
def _make_lane_cross(unroll: int, l1: bool):
    """Device function lane_cross(X, Q, d, row, lane, xs, qs) -> float64: lane ``lane``'s partial
    of the canonical cross term of document d and query row ``row``: terms j = lane, lane + 32,
    ... in increasing order (sum of X*Q, or of |Q - X| when ``l1``, a compile-time constant so
    that each form is its own straight loop), ``unroll`` loads of each row issued before they are
    used (xs, qs: float64 local arrays of ``unroll`` entries, registers once unrolled); the order
    of the additions does not depend on ``unroll``."""
    UN = int(unroll)
    is_l1 = bool(l1)

    @device_function
    def lane_cross(X, Q, d, row, lane, xs, qs):
        n_terms = X.shape[1]
        acc = 0.0
        j = lane
        while j + (UN - 1) * EXACT_LANES < n_terms:
            for u in range(UN):
                xs[u] = float64(X[d, j + u * EXACT_LANES])
                qs[u] = float64(Q[row, j + u * EXACT_LANES])
            for u in range(UN):
                if is_l1:
                    acc += abs(qs[u] - xs[u])
                else:
                    acc += xs[u] * qs[u]
            j += UN * EXACT_LANES
        while j < n_terms:
            if is_l1:
                acc += abs(float64(Q[row, j]) - float64(X[d, j]))
            else:
                acc += float64(X[d, j]) * float64(Q[row, j])
            j += EXACT_LANES
        return acc

    return lane_cross


@cpu_jit(parallel=True)
def rescore_cpu(X, Q, row_ids, cand_idx, cand_count, qq, dd, metric, cand_score):
    """CPU twin of make_rescore_kernel (bit-identical).

    X (n_docs, n_terms) f32 C; Q (n_alloc, n_terms) f32 C; row_ids (n_rows,) int32 (query row of
    each output row); cand_idx (n_rows, n_slices, kprime) int32; cand_count (n_rows, n_slices)
    int32; qq (n_alloc,) f64 and dd (n_docs,) f64 canonical sums of squares; metric 0..3;
    cand_score (n_rows, n_slices, kprime) f64: the final float64 score of each listed candidate.
    """
    n_rows, n_slices, kprime = cand_idx.shape
    is_l1 = metric == 3
    for task in numba.prange(n_rows * n_slices):
        r = task // n_slices
        sl = task % n_slices
        row = row_ids[r]
        p = np.empty(EXACT_LANES, dtype=np.float64)
        for i in range(cand_count[r, sl]):
            d = cand_idx[r, sl, i]
            cross = canonical_cross(X[d], Q[row], is_l1, p)
            cand_score[r, sl, i] = final_cpu(metric, cross, qq[row], dd[d])


@lru_cache(maxsize=None)
def make_rescore_kernel(threads_per_block: int):
    """Exact float64 scores of the candidates, in the canonical order.

    Launch: 1-d grid (any number of blocks), ``threads_per_block`` threads (a multiple of 32).
    Work: a group of EXACT_LANES = 32 consecutive threads scores one candidate (a (row, slot) pair,
    groups strided over the grid): lane l sums terms j = l, l+32, ... in float64 (coalesced loads
    of the document's row), then the 32 partials are combined in shared memory (float64
    (threads_per_block,)) by the canonical tree; lane 0 applies the final formula and writes
    the float64 score. Arguments as rescore_cpu.
    Synchronisation: syncthreads after the partials are stored, after each tree level, and after
    lane 0 has read the sum (all threads of the block take the same number of rounds).
    """
    TPB = int(threads_per_block)
    assert TPB % EXACT_LANES == 0
    GROUPS = TPB // EXACT_LANES
    cross_dot, cross_l1 = _make_lane_cross(1, False), _make_lane_cross(1, True)

    @cuda_kernel
    def dense_rescore(X, Q, row_ids, cand_idx, cand_count, qq, dd, metric, cand_score):
        part = cuda.shared.array(TPB, float64)
        xs = cuda.local.array(1, float64)  # registers: the one-load form of lane_cross
        qs = cuda.local.array(1, float64)
        tid = cuda.threadIdx.x
        g = tid // EXACT_LANES
        lane = tid % EXACT_LANES
        n_rows, n_slices, kprime = cand_idx.shape
        total = n_rows * n_slices * kprime
        stride = cuda.gridDim.x * GROUPS
        # every thread runs the same number of rounds so that the syncthreads are uniform
        n_rounds = (total + stride - 1) // stride
        for rnd in range(n_rounds):
            task = rnd * stride + cuda.blockIdx.x * GROUPS + g
            active = False
            r = 0
            sl = 0
            i = 0
            d = 0
            row = 0
            if task < total:
                r = task // (n_slices * kprime)
                sl = (task // kprime) % n_slices
                i = task % kprime
                if i < cand_count[r, sl]:
                    active = True
                    d = cand_idx[r, sl, i]
                    row = row_ids[r]
            acc = 0.0
            if active:
                if metric == 3:
                    acc = cross_l1(X, Q, d, row, lane, xs, qs)
                else:
                    acc = cross_dot(X, Q, d, row, lane, xs, qs)
            block_tree_sum_dev(part, acc, tid, lane, EXACT_LANES)  # the canonical tree
            if active and lane == 0:
                cand_score[r, sl, i] = final_dev(metric, part[tid], qq[row], dd[d])
            cuda.syncthreads()  # sums read before the next round overwrites them

    return dense_rescore


RES_EXTRA = 3  # result row: k indices, k scores, all-complete flag, thr, candidates rescored


@cpu_jit(inline="always")
def _metric_order(metric):
    """(larger, is_l1) of a metric code: whether a larger score is better, whether it is l1."""
    return metric <= 1, metric == 3


@cpu_jit(inline="always")
def _score_scratch(n):
    """A CPU twin's scratch for n exactly scored candidates: scores float64 (n,), documents int32
    (n,), and the canonical lanes float64 (EXACT_LANES,)."""
    return np.empty(n, np.float64), np.empty(n, np.int32), np.empty(EXACT_LANES, np.float64)


@cpu_jit(parallel=True)
def finish_cpu(X, Q, row_ids, cand_idx, cand_key, cand_count, cand_complete, cand_thr, kprime, qq, dd, metric, k,
               res, final_idx):
    """CPU twin of make_finish_kernel (bit-identical).

    cand_* (n_rows, n_slices * kprime) / (n_rows, n_slices) as select_candidates_cpu writes them;
    X (n_docs, n_terms) f32 C; Q (n_alloc, n_terms) f32 C; row_ids (n_rows,) int32; qq (n_alloc,)
    and dd (n_docs,) f64 canonical sums of squares; metric 0..3; k.
    Per row: with one slice its list is final; else the kprime best listed entries (largest key,
    then lower document) are kept (all when at most kprime are listed). They are rescored in
    float64 (canonical order) and sorted best first (score, then lower document). Outputs:
      res (n_rows, 2k + 3) float64: [0, k) documents (-1 beyond the candidates), [k, 2k) float64
          scores (NaN beyond), 2k: 1.0 when no document was left out (every slice and the merge
          complete), 2k+1: ordered form of the largest key any left-out document can have (0 when
          complete), 2k+2: number of candidates rescored;
      final_idx (n_rows, >= kprime) int32: the rescored candidates best first, -1 padding.
    """
    n_rows = cand_idx.shape[0]
    n_slices = cand_count.shape[1]
    width = cand_idx.shape[1]
    larger, is_l1 = _metric_order(metric)
    for r in numba.prange(n_rows):
        row = row_ids[r]
        docs = np.empty(width, dtype=np.int64)
        keys = np.empty(width, dtype=np.int64)
        n = 0
        for e in range(width):
            if cand_idx[r, e] >= 0:
                docs[n] = cand_idx[r, e]
                keys[n] = cand_key[r, e]
                n += 1
        complete = 1
        thr = np.int64(0)
        if n_slices > 1 and n > kprime:
            # kprime best by (key desc, doc asc): sort by combined key descending
            comb = np.empty(n, dtype=np.uint64)
            for i in range(n):
                comb[i] = (np.uint64(keys[i]) << np.uint64(32)) | (np.uint64(_LOW) - np.uint64(docs[i]))
            comb.sort()
            kth = comb[n - kprime]
            thr = np.int64(kth >> np.uint64(32))
            complete = 0
            m = 0
            for i in range(n):
                c = (np.uint64(keys[i]) << np.uint64(32)) | (np.uint64(_LOW) - np.uint64(docs[i]))
                if c >= kth:
                    docs[m] = docs[i]
                    m += 1
            n = m
        for sl in range(n_slices):
            if cand_complete[r, sl] == 0:
                complete = 0
                if cand_thr[r, sl] > thr:
                    thr = cand_thr[r, sl]
        s, ix, p = _score_scratch(n)
        filled = 0
        for i in range(n):  # rescored and sorted best first
            d = docs[i]
            v = final_cpu(metric, canonical_cross(X[d], Q[row], is_l1, p), qq[row], dd[d])
            filled = offer_cpu(v, d, s, ix, filled, n, larger)
        for i in range(k):
            if i < n:
                res[r, i] = ix[i]
                res[r, k + i] = s[i]
            else:
                res[r, i] = -1.0
                res[r, k + i] = np.nan
        res[r, 2 * k] = complete
        res[r, 2 * k + 1] = thr
        res[r, 2 * k + 2] = n
        for i in range(final_idx.shape[1]):
            final_idx[r, i] = ix[i] if i < n else -1


@lru_cache(maxsize=None)
def make_finish_kernel(threads_per_block: int, buffer_size: int, max_candidates: int, unroll: int = 4,
                       max_registers: int = 0):
    """One block per query row: merge the slices' candidates, rescore them exactly, sort, write.

    Launch: 1-d grid (any number of blocks; rows blockIdx.x, blockIdx.x + gridDim.x, ...),
    ``threads_per_block`` threads (a power of two, a multiple of EXACT_LANES).
    Work per row: (1) merge: with one slice its list is final; else ``_make_block_select`` keeps
    the kprime best listed entries (by their float32 keys, ties -> lower document); the largest key
    a left-out document can have is the merge's kprime-th key (it bounds every slice's threshold)
    or, when the merge keeps all, the largest threshold of an incomplete slice. (2) rescore: a group
    of EXACT_LANES threads per candidate (groups strided over the candidates), lane l summing
    terms l, l+32, ... in float64 with ``unroll`` loads issued before use (same order of additions),
    the 32 partials combined by the canonical tree in shared memory (float64 (threads_per_block,));
    lane 0 applies the final formula. (3) bitonic sort of (score, document) in shared memory
    (float64 and int32 (max_candidates,)), best first, ties -> lower document. (4) write res and
    final_idx (finish_cpu's docstring gives them), so that the host needs one copy per call.
    The slices' complete flags and thresholds are reduced by every thread (slices tid, tid + TPB,
    ..., shared atomic min / max into the scratch ``st``), not walked by each thread in turn.
    Synchronisation: inside the merge, around the slice reduction (seeded, complete, read), after
    each rescoring round's partials and tree level, after each compare-exchange step, and after
    each row's writes.
    Arguments as finish_cpu; kprime <= max_candidates. ``max_registers`` > 0 caps the registers
    per thread (see ``jit_kernel``).
    Length: one kernel rather than a launch per stage, so that the merged list, the scores and the
    sort stay in shared memory for the row; that is why it is over 120 lines.
    """
    TPB, CAP, MAXC, UN = int(threads_per_block), int(buffer_size), int(max_candidates), int(unroll)
    assert TPB % EXACT_LANES == 0 and UN >= 1
    GROUPS = TPB // EXACT_LANES
    block_select = make_block_select(TPB, CAP, MAXC)
    scratch = block_select_scratch(TPB, CAP, MAXC)
    cross_dot, cross_l1 = _make_lane_cross(UN, False), _make_lane_cross(UN, True)

    @jit_kernel(max_registers)
    def dense_finish(X, Q, row_ids, cand_idx, cand_key, cand_count, cand_complete, cand_thr, kprime, qq, dd, metric, k,
                     res, final_idx):
        gmax, buf, hist, st, sp, win = scratch()
        ss = cuda.shared.array(MAXC, float64)
        part = cuda.shared.array(TPB, float64)
        xs = cuda.local.array(UN, float64)
        qs = cuda.local.array(UN, float64)
        tid = cuda.threadIdx.x
        g = tid // EXACT_LANES
        lane = tid % EXACT_LANES
        n_rows = cand_idx.shape[0]
        n_slices = cand_count.shape[1]
        width = cand_idx.shape[1]
        larger = metric <= 1
        worst = -np.inf if larger else np.inf
        for r in range(cuda.blockIdx.x, n_rows, cuda.gridDim.x):
            row = row_ids[r]
            if n_slices == 1:
                n = int64(cand_count[r, 0])
                for i in range(tid, n, TPB):
                    win[i] = cand_idx[r, i]
                complete = int64(cand_complete[r, 0])
                thr = cand_thr[r, 0]
                cuda.syncthreads()  # list staged
            else:
                n, complete, thr = block_select(cand_key[r], cand_idx[r], True, True, 0, width, -1, kprime, tid,
                                                gmax, buf, hist, st, sp, win)
                # the slices' flags and thresholds, reduced by all threads (shared atomics), not one
                # slice after another
                if tid == 0:
                    st[0] = complete
                    st[1] = thr
                cuda.syncthreads()  # reduction seeded
                for sl in range(tid, n_slices, TPB):
                    if cand_complete[r, sl] == 0:
                        cuda.atomic.min(st, 0, 0)
                        cuda.atomic.max(st, 1, cand_thr[r, sl])
                cuda.syncthreads()  # reduction complete
                complete = st[0]
                thr = st[1]
                cuda.syncthreads()  # read before the scratch is reused
            n_rounds = (n + GROUPS - 1) // GROUPS
            for rnd in range(n_rounds):
                c = rnd * GROUPS + g
                acc = 0.0
                d = 0
                if c < n:
                    d = win[c]
                    if metric == 3:
                        acc = cross_l1(X, Q, d, row, lane, xs, qs)
                    else:
                        acc = cross_dot(X, Q, d, row, lane, xs, qs)
                block_tree_sum_dev(part, acc, tid, lane, EXACT_LANES)  # the canonical tree
                if lane == 0 and c < n:
                    ss[c] = final_dev(metric, part[tid], qq[row], dd[d])
                cuda.syncthreads()  # sums read before the next round overwrites them
            size = 1
            while size < n:
                size *= 2
            for p in range(n + tid, size, TPB):
                ss[p] = worst
                win[p] = 2147483647
            cuda.syncthreads()  # padding written
            sort_pairs_scored_dev(ss, win, 0, size, tid, TPB, larger)  # best first, ties -> lower document
            for i in range(tid, k, TPB):
                if i < n:
                    res[r, i] = float64(win[i])
                    res[r, k + i] = ss[i]
                else:
                    res[r, i] = -1.0
                    res[r, k + i] = np.nan
            for i in range(tid, final_idx.shape[1], TPB):
                final_idx[r, i] = win[i] if i < n else -1
            if tid == 0:
                res[r, 2 * k] = float64(complete)
                res[r, 2 * k + 1] = float64(thr)
                res[r, 2 * k + 2] = float64(n)
            cuda.syncthreads()  # row written before the next row reuses shared memory

    return dense_finish


@cpu_jit
def certify_unpack_cpu(res, k, metric, gamma, nonneg, nq, qq, max_norm, max_sq, tiny, rows, out_idx, out_score,
                       status):
    """Host side of a finish round in one call: the certificate of every result row and, for the
    rows it proves, the answer written out (float64 score -> float32).

    res (n_rows, 2k + RES_EXTRA) f64 as make_finish_kernel writes it; metric 0..3; gamma the
    relative float32 error bound of a key; nonneg (n_batch,) bool (query and documents
    non-negative), nq (n_batch,) f64 = |q|, qq (n_batch,) f64 = |q|^2 (canonical), indexed by
    rows (n_rows,) int32 (batch row of each result row); max_norm, max_sq: largest |d|, |d|^2;
    tiny = n_terms 2**-140. out_idx (n_batch, k) int32 and out_score (n_batch, k) f32 get the
    rows whose status is 1. status (n_rows,) int8: 1 certified, 0 not (k' must grow),
    2 only the index rule for zero scores can decide (thr = 0 on non-negative data; the host
    checks it on the final candidate list).
    The arithmetic is gputext.knn.dense._certified's, operation for operation (float64, no
    fastmath). The left-out documents' largest key is the float32 whose ordered form is res[r, 2k+1].
    """
    one = np.empty(1, dtype=np.uint32)
    as_f = one.view(np.float32)
    for r in range(res.shape[0]):
        q = rows[r]
        s_k = res[r, 2 * k - 1]
        ok = res[r, 2 * k] == 1.0
        st = 0
        if ok:
            st = 1
        else:
            o = np.int64(res[r, 2 * k + 1])
            if o >= SIGN_BIT:
                one[0] = np.uint32(o - SIGN_BIT)
            else:
                one[0] = np.uint32(ALL32 - o)
            thr = np.float64(as_f[0])
            if metric <= 1:
                scale = 1.0 if metric == 0 else nq[q] * max_norm
                if nonneg[q] and thr > 0:
                    U = thr / (1 - gamma)
                else:
                    U = thr + gamma * scale
                U = U + tiny
                U = U + abs(U) * 1e-12
                if s_k > U:
                    st = 1
                elif nonneg[q] and thr == 0:
                    st = 2
            elif metric == 2:
                E = gamma * (nq[q] * max_norm + 0.5 * max_sq) + tiny
                slack = 1e-12 * (qq[q] + max_sq + 2 * nq[q] * max_norm)
                L = np.sqrt(max(0.0, qq[q] - 2 * (thr + E) - slack))
                if s_k < L:
                    st = 1
            else:
                L = (-thr) / (1 + gamma)
                L = L - abs(L) * 1e-12 - tiny
                if s_k < L:
                    st = 1
        status[r] = st
        if st == 1:
            for i in range(k):
                out_idx[q, i] = np.int32(res[r, i])
                out_score[q, i] = np.float32(res[r, k + i])


@cpu_jit(parallel=True)
def exact_topk_cpu(X, Q, n_queries, qq, dd, metric, k, self_doc, out_idx, out_score):
    """The CPU backend of dense search: every document scored exactly (canonical order).

    X (n_docs, n_terms) f32 C; Q (>= n_queries, n_terms) f32 C; qq (>= n_queries,) f64, dd (n_docs,)
    f64 canonical sums of squares; metric 0..3; k; self_doc (>= n_queries,) int64 (-1: none);
    out_idx (>= n_queries, k) int32 (-1 padding), out_score (>= n_queries, k) f32 (NaN padding),
    best first by the float64 score, equal float64 scores -> lower index (the engine's order);
    reported as float32. Identical to the CUDA path's output.
    """
    n_docs = X.shape[0]
    larger, is_l1 = _metric_order(metric)
    for q in numba.prange(n_queries):
        selfcol = self_doc[q]
        s, ix, p = _score_scratch(k)
        n = 0
        for d in range(n_docs):
            if d == selfcol:
                continue
            cross = canonical_cross(X[d], Q[q], is_l1, p)
            v = final_cpu(metric, cross, qq[q], dd[d])
            n = offer_cpu(v, d, s, ix, n, k, larger)
        for i in range(k):
            if i < n:
                out_idx[q, i] = ix[i]
                out_score[q, i] = np.float32(s[i])
            else:
                out_idx[q, i] = -1
                out_score[q, i] = np.nan
