"""Dense kNN kernels (the CNAE paper's matrix-vector product, a batched register-tiled form,
candidate selection, exact rescoring and a per-query sort), each with an ``@numba.njit`` CPU twin.

The documents are a dense row-major matrix ``X`` (n_docs, n_terms) float32; the queries a dense
row-major batch ``Q`` (n_rows, n_terms) float32. A search runs in two stages:

1. **Approximate keys** (float32, fast): ``make_matvec_kernel`` (the paper's block-strided
   matrix-vector product with a shared-memory tree reduction, for a few queries at a time) or
   ``make_gemm_kernel`` (register-tiled, for many queries) write one float32 *key* per
   (query, document); a larger key is a better document for every metric:

       cosine  key = (q.d) * (1/|q|) * (1/|d|)      (0 when either norm is 0)
       dot     key = q.d
       l2      key = q.d - |d|^2 / 2                 (monotone in -|q - d| for a fixed q)
       l1      key = -sum_j |q_j - d_j|

2. **Exact answer** (float64, deterministic): ``make_select_kernel`` keeps, per query and per
   slice of the documents, the k' documents of largest key (ties: lower index) and the k'-th key;
   ``make_rescore_kernel`` recomputes those candidates' scores in float64 in the *canonical
   order* below; ``make_sort_kernel`` sorts them (best first, ties -> lower index) and writes the
   top k. The host (gputext.knn.dense) proves from the float32 error bound that no document
   outside the candidates can enter the top k, and repeats with a larger k' (or scores every
   document exactly) for the few queries where it cannot.

Canonical float64 order (``EXACT_LANES`` = 32, part of the numeric definition, not a tuning knob):
a cross term sum_j f(q_j, d_j) is accumulated in 32 partial sums, lane l taking
j = l, l+32, l+64, ... in increasing order, then combined by the fixed tree
p[l] += p[l+16] (l < 16), p[l] += p[l+8] (l < 8), ..., p[0] += p[1]. Products of two float32 values
are exact in float64, so a fused multiply-add gives the same result as multiply-then-add and the
CUDA kernels and the CPU twins produce bit-identical float64 values. Final scores:

       cosine  dot / (sqrt(qq) * sqrt(dd))   (0.0 when qq or dd is 0)
       dot     dot
       l2      sqrt(max(qq + dd - 2 dot, 0))  (qq, dd: canonical sums of squares)
       l1      sum_j |q_j - d_j|
and the reported score is float32(final). Lists are ordered by the float64 final score, equal
float64 scores by lower document index (as the engine orders its keys), so two documents whose
scores round to the same float32 keep the order of their exact values.

Launch geometry (threads per block, rows per block, tile sizes, copies of the histogram, ...) is a
factory parameter everywhere; tests shrink it for the CUDA simulator. No warp intrinsics.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numba
import numpy as np
from numba import cuda, float32, float64, int32, int64, uint32, uint64

EXACT_LANES = 32
METRICS = ("cosine", "dot", "l2", "l1")
METRIC_CODE = {"cosine": 0, "dot": 1, "l2": 2, "l1": 3}
LARGER_IS_BETTER = {"cosine": True, "dot": True, "l2": False, "l1": False}

_SIGN = 2147483648  # 2**31
_ALL32 = 4294967295  # 2**32 - 1


# ----------------------------------------------------------------------------- shared scalar code
# Plain Python functions compiled twice: for the CPU twins (njit) and as CUDA device functions.


def _ordered_py(bits):
    """float32 bit pattern (as an integer 0..2**32-1) -> integer with the same order as the float."""
    u = int64(bits)
    if u >= _SIGN:
        return int64(_ALL32) - u
    return u + int64(_SIGN)


def _final_score_py(metric, cross, qq, dd):
    """float64 final score from the canonical cross term and sums of squares (see module doc)."""
    if metric == 0:
        if qq == 0.0 or dd == 0.0:
            return 0.0
        return cross / (math.sqrt(qq) * math.sqrt(dd))
    if metric == 2:
        v = qq + dd - 2.0 * cross
        if v < 0.0:
            v = 0.0
        return math.sqrt(v)
    return cross


def _before_py(sa, ia, sb, ib, larger):
    """True when (score sa, index ia) ranks before (sb, ib): better score, then lower index."""
    if larger:
        if sa > sb:
            return True
    elif sa < sb:
        return True
    return sa == sb and ia < ib


_ordered_cpu = numba.njit(inline="always", cache=True)(_ordered_py)
_final_cpu = numba.njit(inline="always", cache=True)(_final_score_py)
_before_cpu = numba.njit(inline="always", cache=True)(_before_py)
_ordered_dev = cuda.jit(device=True, inline=True)(_ordered_py)
_final_dev = cuda.jit(device=True, inline=True)(_final_score_py)
_before_dev = cuda.jit(device=True, inline=True)(_before_py)


def ordered_to_float32(ordered: np.ndarray) -> np.ndarray:
    """Host helper: invert ``_ordered_py`` (int64 array) back to float32 values."""
    o = np.asarray(ordered, dtype=np.int64)
    bits = np.where(o >= _SIGN, o - _SIGN, _ALL32 - o).astype(np.uint32)
    return bits.view(np.float32)


# ----------------------------------------------------------------------------- canonical sums (CPU)


@numba.njit(cache=True, inline="always")
def _canonical_cross(x, q, is_l1, p):
    """Canonical float64 cross term of two float32 rows: dot (is_l1 False) or sum |q - x|.
    p: float64 scratch (EXACT_LANES,), overwritten."""
    p[:] = 0.0
    n = x.shape[0]
    full = n - n % EXACT_LANES
    if is_l1:
        for base in range(0, full, EXACT_LANES):
            for lane in range(EXACT_LANES):
                p[lane] += abs(np.float64(q[base + lane]) - np.float64(x[base + lane]))
        for j in range(full, n):
            p[j - full] += abs(np.float64(q[j]) - np.float64(x[j]))
    else:
        for base in range(0, full, EXACT_LANES):
            for lane in range(EXACT_LANES):
                p[lane] += np.float64(x[base + lane]) * np.float64(q[base + lane])
        for j in range(full, n):
            p[j - full] += np.float64(x[j]) * np.float64(q[j])
    s = EXACT_LANES // 2
    while s > 0:
        for lane in range(s):
            p[lane] += p[lane + s]
        s //= 2
    return p[0]


@numba.njit(parallel=True, cache=True)
def canonical_sumsq_cpu(X, out):
    """out[i] = canonical float64 sum of X[i, j]**2. X (n, n_terms) float32 C; out (n,) float64."""
    for i in numba.prange(X.shape[0]):
        p = np.empty(EXACT_LANES, dtype=np.float64)
        out[i] = _canonical_cross(X[i], X[i], False, p)


@numba.njit(cache=True)
def query_norms_serial(Q, n, qq, rq):
    """Host staging of a small query batch without a parallel-region launch (which cost more than
    the work for one query): qq[i] = canonical float64 sum of Q[i, j]**2 (bit-identical to
    canonical_sumsq_cpu) and rq[i] = float32(1 / sqrt(qq[i])) (0 for a zero row), i < n; rows
    n .. Q.shape[0]-1 get qq = 0, rq = 0. Q (n_alloc, n_terms) f32 C; qq (n_alloc,) f64;
    rq (n_alloc,) f32."""
    p = np.empty(EXACT_LANES, dtype=np.float64)
    for i in range(Q.shape[0]):
        if i < n:
            v = _canonical_cross(Q[i], Q[i], False, p)
        else:
            v = 0.0
        qq[i] = v
        if v > 0.0:
            rq[i] = np.float32(1.0 / np.sqrt(v))
        else:
            rq[i] = np.float32(0.0)


@numba.njit(parallel=True, cache=True)
def row_abs_sums_cpu(X, out):
    """out[i] = float64 sum_j |X[i, j]| (used only for error bounds). X float32 C; out float64."""
    for i in numba.prange(X.shape[0]):
        s = 0.0
        for j in range(X.shape[1]):
            s += abs(np.float64(X[i, j]))
        out[i] = s


# ----------------------------------------------------------------------------- stage 1: approximate keys


@numba.njit(inline="always", cache=True)
def _finish_key_cpu(acc, metric, rq, rd, half_sqd):
    if metric == 0:
        key = acc * rq * rd
    elif metric == 2:
        key = acc - half_sqd
    elif metric == 3:
        key = -acc
    else:
        key = acc
    return key + np.float32(0.0)  # -0.0 -> +0.0


@numba.njit(parallel=True, cache=True)
def approx_keys_cpu(X, Q, n_queries, rq, rd, half_sqd, metric, keys):
    """CPU twin of the matvec and GEMM kernels: float32 keys (module doc), any summation order.

    X (n_docs, n_terms) f32 C; Q (>= n_queries, n_terms) f32 C; rq (>= n_queries,) f32 = 1/|q|
    (0 for a zero query); rd (n_docs,) f32 = 1/|d|; half_sqd (n_docs,) f32 = |d|^2/2;
    metric 0 cosine, 1 dot, 2 l2, 3 l1; keys (>= n_queries, n_docs) f32, rows < n_queries written.
    """
    n_docs, n_terms = X.shape
    for q in numba.prange(n_queries):
        for r in range(n_docs):
            acc = np.float32(0.0)
            if metric == 3:
                for j in range(n_terms):
                    acc += abs(Q[q, j] - X[r, j])
            else:
                for j in range(n_terms):
                    acc += X[r, j] * Q[q, j]
            keys[q, r] = _finish_key_cpu(acc, metric, rq[q], rd[r], half_sqd[r])


matvec_keys_cpu = approx_keys_cpu  # twin of make_matvec_kernel(...)
gemm_keys_cpu = approx_keys_cpu  # twin of make_gemm_kernel(...)


def _finish_key_py(acc, metric, rq, rd, half_sqd):
    if metric == 0:
        key = acc * rq * rd
    elif metric == 2:
        key = acc - half_sqd
    elif metric == 3:
        key = -acc
    else:
        key = acc
    return key + float32(0.0)


_finish_key_dev = cuda.jit(device=True, inline=True)(_finish_key_py)


@lru_cache(maxsize=None)
def make_matvec_kernel(threads_per_block: int, threads_per_row: int, queries_per_pass: int,
                       unroll: int, is_l1: bool, rows_per_thread: int = 1, warp_sync: bool = False):
    """The paper's kernel: block-strided matrix-vector product + shared-memory tree reduction.

    Launch: 1-d grid (any number of blocks), ``threads_per_block`` threads.
    Work: a block owns rows_per_block = (threads_per_block // threads_per_row) * rows_per_thread
    documents at a time: slot = tid // threads_per_row takes rows row0 + slot + s * (TPB // TPR),
    s < rows_per_thread (row0 = blockIdx.x * rows_per_block, then strided by
    gridDim.x * rows_per_block); the ``threads_per_row`` lanes of a row walk its terms
    j = lane, lane + threads_per_row, ... (``unroll`` loads per row issued before use, so
    unroll * rows_per_thread loads in flight), each multiplying by ``queries_per_pass`` queries at
    once (X is read once per pass). Lanes then sum their partials by a tree reduction in shared
    memory (float32 (queries_per_pass * rows_per_thread, threads_per_block)); one tree serves all
    rows_per_thread rows, so a block synchronises rows_per_thread times less often per document.
    Lane 0 applies the metric's finish (divides by the norms for cosine) and writes keys[q, row].
    Synchronisation: syncthreads after the partials are stored, after each tree level, and before
    the shared array is reused for the next rows. ``warp_sync`` (needs threads_per_row <= 32: a
    row's lanes and their shared slots then lie in one warp) uses syncwarp for the same three
    points, so warps do not wait for each other (the simulator has no syncwarp and uses
    syncthreads there).
    Arguments: X (n_docs, n_terms) f32 C; Q (n_alloc, n_terms) f32 C with n_alloc a multiple of
    queries_per_pass (rows >= n_queries are zero padding); n_queries int64; rq (n_alloc,) f32;
    rd, half_sqd (n_docs,) f32; metric int64; keys (n_alloc, n_docs) f32 (rows < n_queries written).
    ``is_l1`` (compile time) swaps the product for |q - x|.
    Float32 error: each key sums ceil(n_terms / threads_per_row) terms per lane sequentially, then
    log2(threads_per_row) tree levels (``chain_length`` gives the bound the host uses), whatever
    rows_per_thread is.
    """
    TPB, TPR, QPP, UNROLL, L1 = int(threads_per_block), int(threads_per_row), int(queries_per_pass), int(unroll), bool(is_l1)
    RPT = int(rows_per_thread)
    assert TPB % TPR == 0 and TPR & (TPR - 1) == 0 and QPP >= 1 and UNROLL >= 1 and RPT >= 1
    SLOTS = TPB // TPR
    ROWS = SLOTS * RPT
    NACC = QPP * RPT
    assert not warp_sync or TPR <= 32
    WARP = bool(warp_sync) and not numba.config.ENABLE_CUDASIM  # the simulator has no syncwarp

    @cuda.jit
    def dense_matvec_keys(X, Q, n_queries, rq, rd, half_sqd, metric, keys):
        partial = cuda.shared.array((NACC, TPB), float32)
        acc = cuda.local.array(NACC, float32)
        xs = cuda.local.array((RPT, UNROLL), float32)
        tid = cuda.threadIdx.x
        lane = tid % TPR
        slot = tid // TPR
        n_docs = X.shape[0]
        n_terms = X.shape[1]
        step = TPR * UNROLL
        for q0 in range(0, n_queries, QPP):
            for row0 in range(cuda.blockIdx.x * ROWS, n_docs, cuda.gridDim.x * ROWS):
                for a in range(NACC):
                    acc[a] = 0
                r_last = row0 + slot + (RPT - 1) * SLOTS
                if r_last < n_docs:
                    # every row of this thread exists: RPT x UNROLL loads before use
                    j = lane
                    while j + (UNROLL - 1) * TPR < n_terms:
                        for s in range(RPT):
                            for u in range(UNROLL):
                                xs[s, u] = X[row0 + slot + s * SLOTS, j + u * TPR]
                        for u in range(UNROLL):
                            for t in range(QPP):
                                qv = Q[q0 + t, j + u * TPR]
                                for s in range(RPT):
                                    if L1:
                                        acc[t * RPT + s] += abs(qv - xs[s, u])
                                    else:
                                        acc[t * RPT + s] += xs[s, u] * qv
                        j += step
                    while j < n_terms:
                        for s in range(RPT):
                            x = X[row0 + slot + s * SLOTS, j]
                            for t in range(QPP):
                                if L1:
                                    acc[t * RPT + s] += abs(Q[q0 + t, j] - x)
                                else:
                                    acc[t * RPT + s] += x * Q[q0 + t, j]
                        j += TPR
                else:
                    # the last rows of the matrix: row by row, missing rows stay 0
                    for s in range(RPT):
                        r = row0 + slot + s * SLOTS
                        if r < n_docs:
                            j = lane
                            while j < n_terms:
                                x = X[r, j]
                                for t in range(QPP):
                                    if L1:
                                        acc[t * RPT + s] += abs(Q[q0 + t, j] - x)
                                    else:
                                        acc[t * RPT + s] += x * Q[q0 + t, j]
                                j += TPR
                for a in range(NACC):
                    partial[a, tid] = acc[a]
                if WARP:  # every lane's partial is in shared memory
                    cuda.syncwarp()
                else:
                    cuda.syncthreads()
                h = TPR // 2
                while h > 0:
                    if lane < h:
                        for a in range(NACC):
                            partial[a, tid] += partial[a, tid + h]
                    if WARP:  # this tree level is complete before the next reads it
                        cuda.syncwarp()
                    else:
                        cuda.syncthreads()
                    h //= 2
                if lane == 0:
                    for s in range(RPT):
                        r = row0 + slot + s * SLOTS
                        if r < n_docs:
                            for t in range(QPP):
                                q = q0 + t
                                if q < n_queries:
                                    keys[q, r] = _finish_key_dev(partial[t * RPT + s, tid], metric, rq[q], rd[r],
                                                                 half_sqd[r])
                if WARP:  # lane 0 has read the sums before the next rows overwrite them
                    cuda.syncwarp()
                else:
                    cuda.syncthreads()

    return dense_matvec_keys


@lru_cache(maxsize=None)
def make_gemm_kernel(block_queries: int, block_docs: int, block_terms: int,
                     thread_queries: int, thread_docs: int, is_l1: bool,
                     pipelined: bool = True, max_registers: int = 0, warp_docs: int = 0):
    """Batched keys: a register-tiled float32 GEMM keys = finish(Q @ X.T).

    Launch: ``gemm_launch`` gives the 1-d grid (one block per block_queries x block_docs tile of
    keys, the query tiles of one document tile consecutive, so blocks sharing a tile of X run
    together and X is read from memory about once) and the threads per block,
    (block_queries // thread_queries) * (block_docs // thread_docs).
    Work: per slice of ``block_terms`` terms the block stages Q and X sub-tiles, transposed
    (term-major) and padded, in shared memory (float32 (block_terms, block_queries + pad) and
    (block_terms, block_docs + pad)); each thread then accumulates thread_queries x thread_docs keys
    in scalar registers (the source is generated: one variable per accumulator and the term loop of
    a slice unrolled, since numba keeps a local array in local memory): query rows
    ty*thread_queries + i (contiguous, broadcast within a warp) and document columns
    tx + (block_docs // thread_docs) * j (strided, conflict-free). When both thread tile sides are
    multiples of 4 the thread owns runs of 4 rows/columns instead (rows ty*4 + r + 4*TY*h, columns
    tx*4 + c + 4*TX*h) and the tile rows are padded to 16 bytes (+4 floats), so the shared loads
    compile to 128-bit ld.shared.v4 (checked in tests/test_dense_knn.py). Staging: thread t loads
    term t % block_terms of rows t // block_terms + (threads / block_terms) * i (a warp reads
    runs of block_terms consecutive floats of a row); rows past the end are clamped to the last
    row (their products are never written), terms past the end load 0. Index arithmetic is
    unsigned 64-bit, so numba emits no negative-index wraparound.
    ``pipelined`` (default): the next slice's global loads are issued into registers before the
    current slice's products and stored into the other half of a double-buffered shared tile
    after them: one syncthreads per slice, global latency hidden behind the FMAs. Otherwise one
    buffer: stage, syncthreads, products, syncthreads.
    ``max_registers`` > 0 caps registers per thread (ptxas spills the rest; see ``_jit_kernel``).
    ``warp_docs`` > 0 arranges each warp's 32 threads as (32 / warp_docs) x warp_docs (tx, ty) in
    a 2-d patch of the thread grid (fewer distinct shared addresses per 128-bit load: warp_docs
    document runs and 32 / warp_docs query runs) instead of consecutive tx (0: tid = ty * TX + tx).
    The finish (norms, |d|^2/2) is applied in the epilogue; documents and queries past the end are
    never written.
    Arguments as make_matvec_kernel (Q rows >= n_queries may be anything).
    Float32 error: each key is a sequential sum over the terms in increasing order (one fma per
    term; ``chain_length``).
    """
    BM, BN, BK, TM, TN, L1 = (int(block_queries), int(block_docs), int(block_terms), int(thread_queries),
                              int(thread_docs), bool(is_l1))
    TX, TY = BN // TN, BM // TM
    NT = TX * TY
    assert BM % TM == 0 and BN % TN == 0 and NT % BK == 0 and (BM * BK) % NT == 0 and (BN * BK) % NT == 0, \
        "gemm tile: threads must divide the staged tiles and be a multiple of block_terms"
    VEC = TM % 4 == 0 and TN % 4 == 0
    PAD = 4 if VEC else 1
    SQ, SX = BM + PAD, BN + PAD  # shared row lengths (floats)
    WX = int(warp_docs) if 0 < int(warp_docs) < TX else 0
    if WX:
        assert 32 % WX == 0 and TX % WX == 0 and TY % (32 // WX) == 0, "warp_docs: a warp must tile the thread grid"
    ty_tx = (f"(tid // U(32)) // U({TX // WX}) * U({32 // WX}) + (tid % U(32)) // U({WX})",
             f"(tid // U(32)) % U({TX // WX}) * U({WX}) + tid % U({WX})") if WX else (f"tid // U({TX})", f"tid % U({TX})")
    RS = NT // BK  # staging: rows per pass of the block
    LQ, LX = BM * BK // NT, BN * BK // NT  # staging: floats per thread and slice
    NBUF = 2 if pipelined else 1

    def qrow(i):  # the thread's i-th query row relative to ty * (4 or TM)
        return (i // 4) * TY * 4 + i % 4 if VEC else i

    def dcol(j):  # the thread's j-th document column relative to tx * (4 or 1)
        return (j // 4) * TX * 4 + j % 4 if VEC else TX * j

    I, I2, I3 = " " * 4, " " * 8, " " * 12
    # (the CUDA simulator does not take an alignment, which changes no result)
    align = ", alignment=16" if VEC and not numba.config.ENABLE_CUDASIM else ""
    src = [
        "def dense_gemm_keys(X, Q, n_queries, rq, rd, half_sqd, metric, keys):",
        f"{I}sQ = cuda.shared.array({NBUF * BK * SQ}, float32{align})",
        f"{I}sX = cuda.shared.array({NBUF * BK * SX}, float32{align})",
        f"{I}tid = U(cuda.threadIdx.x)",
        f"{I}nq = U(n_queries)",
        f"{I}nd = U(X.shape[0])",
        f"{I}nt = U(X.shape[1])",
        f"{I}n_qb = (nq + U({BM - 1})) // U({BM})",
        f"{I}blk = U(cuda.blockIdx.x)",
        f"{I}q0 = (blk % n_qb) * U({BM})",
        f"{I}d0 = (blk // n_qb) * U({BN})",
        f"{I}ty = {ty_tx[0]}",
        f"{I}tx = {ty_tx[1]}",
        f"{I}abase = ty * U({4 if VEC else TM})",
        f"{I}bbase = tx * U({4 if VEC else 1})",
        f"{I}lk = tid % U({BK})",
        f"{I}lm = tid // U({BK})",
        f"{I}wq = lk * U({SQ}) + lm",
        f"{I}wx = lk * U({SX}) + lm",
    ]
    src += [f"{I}rq_{i} = min(q0 + lm + U({RS * i}), nq - U(1))" for i in range(LQ)]
    src += [f"{I}rx_{i} = min(d0 + lm + U({RS * i}), nd - U(1))" for i in range(LX)]
    src += [f"{I}c_{i}_{j} = float32(0.0)" for i in range(TM) for j in range(TN)]
    src += [f"{I}n_slices = (nt + U({BK - 1})) // U({BK})"]

    def loads(ind, term):  # global -> registers
        out = [f"{ind}kn = {term}", f"{ind}ok = kn < nt"]
        out += [f"{ind}pq_{i} = Q[rq_{i}, kn] if ok else float32(0.0)" for i in range(LQ)]
        out += [f"{ind}px_{i} = X[rx_{i}, kn] if ok else float32(0.0)" for i in range(LX)]
        return out

    def stores(ind, off_q, off_x):  # registers -> shared (transposed)
        out = [f"{ind}sQ[{off_q}wq + U({RS * i})] = pq_{i}" for i in range(LQ)]
        out += [f"{ind}sX[{off_x}wx + U({RS * i})] = px_{i}" for i in range(LX)]
        return out

    def products(ind, off_q, off_x):  # the slice's block_terms steps, unrolled
        op = "abs(a_{i} - b_{j})" if L1 else "a_{i} * b_{j}"
        out = []
        for kk in range(BK):
            out += [f"{ind}a_{i} = sQ[{off_q}abase + U({kk * SQ + qrow(i)})]" for i in range(TM)]
            out += [f"{ind}b_{j} = sX[{off_x}bbase + U({kk * SX + dcol(j)})]" for j in range(TN)]
            out += [f"{ind}c_{i}_{j} += " + op.format(i=i, j=j) for i in range(TM) for j in range(TN)]
        return out

    if pipelined:
        src += loads(I, "lk") + stores(I, "", "") + [f"{I}cuda.syncthreads()  # slice 0 staged"]
        src += [f"{I}for sl in range(n_slices):",
                f"{I2}cq = (sl & U(1)) * U({BK * SQ})",
                f"{I2}cx = (sl & U(1)) * U({BK * SX})",
                f"{I2}more = sl + U(1) < n_slices",
                f"{I2}if more:  # next slice's loads in flight during the products"]
        src += loads(I3, f"(sl + U(1)) * U({BK}) + lk")
        src += products(I2, "cq + ", "cx + ")
        src += [f"{I2}if more:"]
        src += stores(I3, f"U({BK * SQ}) - cq + ", f"U({BK * SX}) - cx + ")
        src += [f"{I2}cuda.syncthreads()  # next slice staged; this buffer consumed before it is restaged"]
    else:
        src += [f"{I}for sl in range(n_slices):"]
        src += loads(I2, f"sl * U({BK}) + lk") + stores(I2, "", "")
        src += [f"{I2}cuda.syncthreads()  # both tiles staged"]
        src += products(I2, "", "")
        src += [f"{I2}cuda.syncthreads()  # tiles consumed before the next staging overwrites them"]
    for j in range(TN):
        src += [f"{I}d_{j} = d0 + bbase + U({dcol(j)})",
                f"{I}rd_{j} = rd[min(d_{j}, nd - U(1))]",
                f"{I}hd_{j} = half_sqd[min(d_{j}, nd - U(1))]"]
    for i in range(TM):
        src += [f"{I}q = q0 + abase + U({qrow(i)})", f"{I}if q < nq:", f"{I2}rq_q = rq[q]"]
        for j in range(TN):
            src += [f"{I2}if d_{j} < nd:",
                    f"{I3}keys[q, d_{j}] = _finish_key_dev(c_{i}_{j}, metric, rq_q, rd_{j}, hd_{j})"]
    namespace = {"cuda": cuda, "float32": float32, "U": uint64, "min": min, "abs": abs,
                 "_finish_key_dev": _finish_key_dev}
    name = f"<dense_gemm_keys {BM}x{BN}x{BK}/{TM}x{TN}{' l1' if L1 else ''}{' pipelined' if pipelined else ''} w{WX}>"
    exec(compile("\n".join(src) + "\n", name, "exec"), namespace)
    return _jit_kernel(max_registers)(namespace["dense_gemm_keys"])


def gemm_launch(block_queries: int, block_docs: int, thread_queries: int, thread_docs: int,
                n_queries: int, n_docs: int) -> tuple[int, int]:
    """(blocks, threads per block) of a make_gemm_kernel launch: one block per tile of keys."""
    blocks = -(-int(n_queries) // block_queries) * -(-int(n_docs) // block_docs)
    return blocks, (block_queries // thread_queries) * (block_docs // thread_docs)


def chain_length(kind: str, n_terms: int, threads_per_row: int = 1) -> int:
    """Longest chain of float32 roundings in one key's accumulation (for the host's error bound)."""
    if kind == "matvec":
        return -(-n_terms // threads_per_row) + int(math.log2(threads_per_row)) + 1
    return n_terms + 1


# ----------------------------------------------------------------------------- stage 2a: candidate selection
# A candidate list row holds n_slices * kprime entries: slice sl owns entries sl*kprime .. sl*kprime+kprime-1.

_LOW = 4294967295  # 2**32 - 1


@numba.njit(parallel=True, cache=True)
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
                    cand_key[r, base + c] = _ordered_cpu(key_bits[row, j])
                    c += 1
            cand_count[r, sl] = c
            cand_complete[r, sl] = 1
            cand_thr[r, sl] = 0
            continue
        vals = np.empty(n_avail, dtype=np.int64)
        c = 0
        for j in range(lo, hi):
            if j != selfcol:
                vals[c] = _ordered_cpu(key_bits[row, j])
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
            u = _ordered_cpu(key_bits[row, j])
            if u > kth or (u == kth and eq_taken < need_eq):
                if u == kth:
                    eq_taken += 1
                cand_idx[r, base + c] = j
                cand_key[r, base + c] = u
                c += 1
        cand_count[r, sl] = c
        cand_complete[r, sl] = 0
        cand_thr[r, sl] = kth


def _elem_py(keys, kidx, use_kidx, ordered_in, p, selfcol):
    """Combined 64-bit sort key of list entry p: (ordered key << 32) | (2**32 - 1 - document), so a
    larger value is a larger key, then a lower document; 0 for an entry to skip (padding, self).
    The loads come first and unconditionally, so that unrolled callers keep several in flight."""
    raw = keys[p]
    d = int64(p)
    if use_kidx:
        d = int64(kidx[p])
    u = int64(raw)
    if not ordered_in:
        u = _ordered_dev(raw)
    skip = d < 0 or d == selfcol
    if d < 0:
        d = 0
    c = (uint64(u) << uint64(32)) | (uint64(_LOW) - uint64(d))
    if skip:
        c = uint64(0)
    return c


_elem_dev = cuda.jit(device=True, inline=True)(_elem_py)


@lru_cache(maxsize=None)
def _make_block_select(threads_per_block: int, buffer_size: int, max_candidates: int):
    """Device function: the kprime best entries (largest key, then lowest document) of one list.

    ``block_select(keys, kidx, use_kidx, ordered_in, lo, hi, selfcol, kprime, tid, gmax, buf, hist,
    st, sp, win) -> (n, complete, thr)``, called by every thread of a block (threads_per_block, a
    power of two). List entries p in [lo, hi): key ``keys[p]`` (uint32: float32 bits, or already
    ordered when ``ordered_in``), document ``kidx[p]`` when ``use_kidx`` (negative: padding) else p;
    the document ``selfcol`` is skipped. Entries are compared by the combined 64-bit key
    ``_elem_py``, so all are distinct and ties go to the lower document.
    Work: (A) each thread takes the maximum key of its strided entries p = lo + tid + i*TPB; the
    maxima are merged (shared atomic max) into G groups (group = tid % G, G >= kprime a power of two
    <= TPB); every group holds distinct entries, so the smallest group maximum L0 is <= the
    kprime-th largest key (A and B load 4 entries per thread before using any). (B) the entries with key >= L0 (typically a few hundred) are compacted
    into shared memory ``buf`` (uint64 (buffer_size,), shared atomic counter; when they do not fit,
    the passes below read the list again from global memory instead). (C) radix select of the
    kprime-th largest combined key, 8 bits per pass from the top (256-bin shared histogram
    ``hist``; thread 0 walks the bins; it stops as soon as the chosen bin holds exactly the rank
    still sought, usually after 2-3 passes). (D) the winners' documents go to ``win`` (int32
    (max_candidates,)) and are sorted ascending by a bitonic network.
    Returns n (listed winners: kprime, or every valid entry when there are at most kprime),
    complete (1 when every valid entry is listed) and thr (ordered kprime-th largest key; 0 when
    complete). Shared scratch: gmax int64 (TPB,), st int64 (8,), sp uint64 (2,).
    Synchronisation: after each phase's shared writes (init, maxima, compaction, each histogram
    clear/fill/walk, winner collection, each sorting step); returns after a final syncthreads.
    """
    TPB, CAP, MAXC = int(threads_per_block), int(buffer_size), int(max_candidates)
    assert TPB & (TPB - 1) == 0 and MAXC & (MAXC - 1) == 0
    G0 = min(TPB, 64)
    UNR = 4  # list entries loaded per thread before any is used (phases A and B)

    @cuda.jit(device=True, inline=True)
    def block_select(keys, kidx, use_kidx, ordered_in, lo, hi, selfcol, kprime, tid, gmax, buf, hist, st, sp, win):
        vv = cuda.local.array(UNR, uint64)
        G = G0
        while G < kprime and G < TPB:
            G *= 2
        if G < kprime:
            G = 0  # no bound: every entry goes through the passes
        gmax[tid] = -1
        if tid == 0:
            st[0] = 0  # valid entries
            st[1] = 0  # entries compacted into buf
            st[2] = 0  # L0
            st[3] = kprime  # rank still sought
            st[4] = 0  # radix select finished
            st[5] = 0  # winners listed
            st[6] = 4294967296  # smallest winner key
            sp[0] = uint64(0)  # prefix of the kprime-th combined key
            sp[1] = uint64(0)  # mask of the bits fixed so far
        cuda.syncthreads()  # scratch initialised
        m = int64(-1)
        cnt = int64(0)
        p = lo + tid
        while p < hi:
            # UNR entries per round: loads issued before any is used
            for h in range(UNR):
                q_ = p + h * TPB
                vv[h] = _elem_dev(keys, kidx, use_kidx, ordered_in, q_ if q_ < hi else lo, selfcol)
                if q_ >= hi:
                    vv[h] = uint64(0)
            for h in range(UNR):
                v = vv[h]
                if v != uint64(0):
                    cnt += 1
                    kk = int64(v >> uint64(32))
                    if kk > m:
                        m = kk
            p += UNR * TPB
        if G > 0:
            cuda.atomic.max(gmax, tid % G, m)
        cuda.atomic.add(st, 0, cnt)
        cuda.syncthreads()  # group maxima and the count complete
        nvalid = st[0]
        complete = nvalid <= kprime
        over = True
        L0c = uint64(1)  # complete: every valid entry (combined keys are >= 2**31)
        nb = int64(0)
        if not complete:
            if tid == 0:
                L0 = int64(0)
                if G > 0:
                    L0 = gmax[0]
                    for g in range(1, G):
                        if gmax[g] < L0:
                            L0 = gmax[g]
                    if L0 < 0:
                        L0 = 0
                st[2] = L0
            cuda.syncthreads()  # L0 visible
            L0c = uint64(st[2]) << uint64(32)
            p = lo + tid
            while p < hi:
                for h in range(UNR):
                    q_ = p + h * TPB
                    vv[h] = _elem_dev(keys, kidx, use_kidx, ordered_in, q_ if q_ < hi else lo, selfcol)
                    if q_ >= hi:
                        vv[h] = uint64(0)
                for h in range(UNR):
                    v = vv[h]
                    if v != uint64(0) and v >= L0c:
                        pos = cuda.atomic.add(st, 1, 1)
                        if pos < CAP:
                            buf[pos] = v
                p += UNR * TPB
            cuda.syncthreads()  # compaction complete
            nb = st[1]
            over = nb > CAP
            for ps in range(8):
                if st[4] != 0:
                    break
                shift = uint64(56 - 8 * ps)
                for b in range(tid, 256, TPB):
                    hist[b] = 0
                cuda.syncthreads()  # histogram cleared
                prefix = sp[0]
                mask = sp[1]
                if over:
                    for p in range(lo + tid, hi, TPB):
                        v = _elem_dev(keys, kidx, use_kidx, ordered_in, p, selfcol)
                        if v != uint64(0) and v >= L0c and (v & mask) == prefix:
                            cuda.atomic.add(hist, int64((v >> shift) & uint64(255)), 1)
                else:
                    for p in range(tid, nb, TPB):
                        v = buf[p]
                        if (v & mask) == prefix:
                            cuda.atomic.add(hist, int64((v >> shift) & uint64(255)), 1)
                cuda.syncthreads()  # histogram complete
                if tid == 0:
                    rem = st[3]
                    cum = int64(0)
                    for bb in range(256):
                        b = 255 - bb
                        h = int64(hist[b])
                        if cum + h >= rem:
                            sp[0] = prefix | (uint64(b) << shift)
                            sp[1] = mask | (uint64(255) << shift)
                            st[3] = rem - cum
                            if h == rem - cum:
                                st[4] = 1
                            break
                        cum += h
                cuda.syncthreads()  # next byte fixed
            if sp[0] > L0c:
                L0c = sp[0]
        # winners: valid entries >= L0c (the kprime-th combined key's prefix, or 1 when complete)
        if over:
            for p in range(lo + tid, hi, TPB):
                v = _elem_dev(keys, kidx, use_kidx, ordered_in, p, selfcol)
                if v != uint64(0) and v >= L0c:
                    pos = cuda.atomic.add(st, 5, 1)
                    win[pos] = int32(int64(uint64(_LOW) - (v & uint64(_LOW))))
                    cuda.atomic.min(st, 6, int64(v >> uint64(32)))
        else:
            for p in range(tid, nb, TPB):
                v = buf[p]
                if v >= L0c:
                    pos = cuda.atomic.add(st, 5, 1)
                    win[pos] = int32(int64(uint64(_LOW) - (v & uint64(_LOW))))
                    cuda.atomic.min(st, 6, int64(v >> uint64(32)))
        cuda.syncthreads()  # winners listed
        n = st[5]
        size = 1
        while size < n:
            size *= 2
        for p in range(n + tid, size, TPB):
            win[p] = 2147483647
        cuda.syncthreads()  # padding written
        width = 2
        while width <= size:
            step = width // 2
            while step > 0:
                for p in range(tid, size, TPB):
                    partner = p ^ step
                    if partner > p:
                        a = win[p]
                        b = win[partner]
                        if (a > b) == ((p & width) == 0):
                            win[p] = b
                            win[partner] = a
                cuda.syncthreads()  # compare-exchange step complete
                step //= 2
            width *= 2
        thr = int64(0)
        done = int64(1)
        if not complete:
            thr = st[6]
            done = 0
        cuda.syncthreads()  # results read before the caller reuses the scratch
        return n, done, thr

    return block_select


def _jit_kernel(max_registers: int):
    """cuda.jit, with a per-thread register cap when ``max_registers`` > 0 (ptxas spills the rest
    to local memory). Without a cap the select and finish kernels take ~230-250 registers at 256
    threads (ptxas, sm_90), i.e. one block per multiprocessor; 128 allows two. The simulator has
    no registers: the cap is left out there."""
    if int(max_registers) > 0 and not numba.config.ENABLE_CUDASIM:
        return cuda.jit(max_registers=int(max_registers))
    return cuda.jit


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
    ``max_registers`` > 0 caps the registers per thread (occupancy; see ``_jit_kernel``).
    """
    TPB, CAP, MAXC = int(threads_per_block), int(buffer_size), int(max_candidates)
    block_select = _make_block_select(TPB, CAP, MAXC)

    @_jit_kernel(max_registers)
    def dense_select_candidates(key_bits, row_ids, kprime, self_doc,
                                cand_idx, cand_key, cand_count, cand_complete, cand_thr):
        gmax = cuda.shared.array(TPB, int64)
        buf = cuda.shared.array(CAP, uint64)
        hist = cuda.shared.array(256, int32)
        st = cuda.shared.array(8, int64)
        sp = cuda.shared.array(2, uint64)
        win = cuda.shared.array(MAXC, int32)
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
                    cand_key[r, base + i] = uint32(_ordered_dev(key_bits[row, d]))
                else:
                    cand_idx[r, base + i] = -1
                    cand_key[r, base + i] = uint32(0)
            if tid == 0:
                cand_count[r, sl] = n
                cand_complete[r, sl] = done
                cand_thr[r, sl] = thr
            cuda.syncthreads()  # row written before the scratch is reused

    return dense_select_candidates


# ----------------------------------------------------------------------------- exact rescoring of listed candidates (the exact fallback)


@numba.njit(parallel=True, cache=True)
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
            cross = _canonical_cross(X[d], Q[row], is_l1, p)
            cand_score[r, sl, i] = _final_cpu(metric, cross, qq[row], dd[d])


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

    @cuda.jit
    def dense_rescore(X, Q, row_ids, cand_idx, cand_count, qq, dd, metric, cand_score):
        part = cuda.shared.array(TPB, float64)
        tid = cuda.threadIdx.x
        g = tid // EXACT_LANES
        lane = tid % EXACT_LANES
        n_rows = cand_idx.shape[0]
        n_slices = cand_idx.shape[1]
        kprime = cand_idx.shape[2]
        n_terms = X.shape[1]
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
                    for j in range(lane, n_terms, EXACT_LANES):
                        acc += abs(float64(Q[row, j]) - float64(X[d, j]))
                else:
                    for j in range(lane, n_terms, EXACT_LANES):
                        acc += float64(X[d, j]) * float64(Q[row, j])
            part[tid] = acc
            cuda.syncthreads()  # partials stored
            s = EXACT_LANES // 2
            while s > 0:
                if lane < s:
                    part[tid] += part[tid + s]
                cuda.syncthreads()  # tree level complete
                s //= 2
            if active and lane == 0:
                cand_score[r, sl, i] = _final_dev(metric, part[tid], qq[row], dd[d])
            cuda.syncthreads()  # sums read before the next round overwrites them

    return dense_rescore


# ----------------------------------------------------------------------------- stage 2b: merge, exact rescoring, sort

RES_EXTRA = 3  # result row: k indices, k scores, all-complete flag, thr, candidates rescored


@numba.njit(parallel=True, cache=True)
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
    larger = metric <= 1
    is_l1 = metric == 3
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
        s = np.empty(n, dtype=np.float64)
        ix = np.empty(n, dtype=np.int32)
        p = np.empty(EXACT_LANES, dtype=np.float64)
        for i in range(n):
            d = docs[i]
            ix[i] = d
            s[i] = _final_cpu(metric, _canonical_cross(X[d], Q[row], is_l1, p), qq[row], dd[d])
        for a in range(1, n):  # insertion sort, best first
            sa = s[a]
            ia = ix[a]
            b = a - 1
            while b >= 0 and _before_cpu(sa, ia, s[b], ix[b], larger):
                s[b + 1] = s[b]
                ix[b + 1] = ix[b]
                b -= 1
            s[b + 1] = sa
            ix[b + 1] = ia
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
    per thread (see ``_jit_kernel``).
    """
    TPB, CAP, MAXC, UN = int(threads_per_block), int(buffer_size), int(max_candidates), int(unroll)
    assert TPB % EXACT_LANES == 0 and UN >= 1
    GROUPS = TPB // EXACT_LANES
    block_select = _make_block_select(TPB, CAP, MAXC)

    @_jit_kernel(max_registers)
    def dense_finish(X, Q, row_ids, cand_idx, cand_key, cand_count, cand_complete, cand_thr, kprime, qq, dd, metric, k,
                     res, final_idx):
        gmax = cuda.shared.array(TPB, int64)
        buf = cuda.shared.array(CAP, uint64)
        hist = cuda.shared.array(256, int32)
        st = cuda.shared.array(8, int64)
        sp = cuda.shared.array(2, uint64)
        win = cuda.shared.array(MAXC, int32)
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
        n_terms = X.shape[1]
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
                    j = lane
                    if metric == 3:
                        while j + (UN - 1) * EXACT_LANES < n_terms:
                            for u in range(UN):
                                xs[u] = float64(X[d, j + u * EXACT_LANES])
                                qs[u] = float64(Q[row, j + u * EXACT_LANES])
                            for u in range(UN):
                                acc += abs(qs[u] - xs[u])
                            j += UN * EXACT_LANES
                        while j < n_terms:
                            acc += abs(float64(Q[row, j]) - float64(X[d, j]))
                            j += EXACT_LANES
                    else:
                        while j + (UN - 1) * EXACT_LANES < n_terms:
                            for u in range(UN):
                                xs[u] = float64(X[d, j + u * EXACT_LANES])
                                qs[u] = float64(Q[row, j + u * EXACT_LANES])
                            for u in range(UN):
                                acc += xs[u] * qs[u]
                            j += UN * EXACT_LANES
                        while j < n_terms:
                            acc += float64(X[d, j]) * float64(Q[row, j])
                            j += EXACT_LANES
                part[tid] = acc
                cuda.syncthreads()  # partials stored
                s = EXACT_LANES // 2
                while s > 0:
                    if lane < s:
                        part[tid] += part[tid + s]
                    cuda.syncthreads()  # tree level complete
                    s //= 2
                if lane == 0 and c < n:
                    ss[c] = _final_dev(metric, part[tid], qq[row], dd[d])
                cuda.syncthreads()  # sums read before the next round overwrites them
            size = 1
            while size < n:
                size *= 2
            for p in range(n + tid, size, TPB):
                ss[p] = worst
                win[p] = 2147483647
            cuda.syncthreads()  # padding written
            width2 = 2
            while width2 <= size:
                step = width2 // 2
                while step > 0:
                    for p in range(tid, size, TPB):
                        partner = p ^ step
                        if partner > p:
                            ascending = (p & width2) == 0
                            a_first = _before_dev(ss[p], win[p], ss[partner], win[partner], larger)
                            if ascending != a_first:
                                ts = ss[p]
                                ti = win[p]
                                ss[p] = ss[partner]
                                win[p] = win[partner]
                                ss[partner] = ts
                                win[partner] = ti
                    cuda.syncthreads()  # compare-exchange step complete
                    step //= 2
                width2 *= 2
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


@numba.njit(cache=True)
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
            if o >= _SIGN:
                one[0] = np.uint32(o - _SIGN)
            else:
                one[0] = np.uint32(_ALL32 - o)
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


# ----------------------------------------------------------------------------- CPU exact search


@numba.njit(parallel=True, cache=True)
def exact_topk_cpu(X, Q, n_queries, qq, dd, metric, k, self_doc, out_idx, out_score):
    """The CPU backend of dense search: every document scored exactly (canonical order).

    X (n_docs, n_terms) f32 C; Q (>= n_queries, n_terms) f32 C; qq (>= n_queries,) f64, dd (n_docs,)
    f64 canonical sums of squares; metric 0..3; k; self_doc (>= n_queries,) int64 (-1: none);
    out_idx (>= n_queries, k) int32 (-1 padding), out_score (>= n_queries, k) f32 (NaN padding),
    best first by the float64 score, equal float64 scores -> lower index (the engine's order);
    reported as float32. Identical to the CUDA path's output.
    """
    n_docs = X.shape[0]
    larger = metric <= 1
    is_l1 = metric == 3
    for q in numba.prange(n_queries):
        selfcol = self_doc[q]
        s = np.empty(k, dtype=np.float64)
        ix = np.empty(k, dtype=np.int32)
        p = np.empty(EXACT_LANES, dtype=np.float64)
        n = 0
        for d in range(n_docs):
            if d == selfcol:
                continue
            cross = _canonical_cross(X[d], Q[q], is_l1, p)
            v = _final_cpu(metric, cross, qq[q], dd[d])
            if n == k and not _before_cpu(v, d, s[k - 1], ix[k - 1], larger):
                continue
            b = n - 1 if n < k else k - 2
            while b >= 0 and _before_cpu(v, d, s[b], ix[b], larger):
                s[b + 1] = s[b]
                ix[b + 1] = ix[b]
                b -= 1
            s[b + 1] = v
            ix[b + 1] = d
            if n < k:
                n += 1
        for i in range(k):
            if i < n:
                out_idx[q, i] = ix[i]
                out_score[q, i] = np.float32(s[i])
            else:
                out_idx[q, i] = -1
                out_score[q, i] = np.nan


# ----------------------------------------------------------------------------- compile_ptx coverage

_F2 = "float32[:, ::1]"
_F1 = "float32[::1]"
_KEYS_SIG = f"void({_F2}, {_F2}, int64, {_F1}, {_F1}, {_F1}, int64, {_F2})"
_SELECT_SIG = "void(uint32[:, ::1], int32[::1], int64, int64[::1], int32[:, ::1], uint32[:, ::1], int32[:, ::1], int32[:, ::1], int64[:, ::1])"
_RESCORE_SIG = f"void({_F2}, {_F2}, int32[::1], int32[:, :, ::1], int32[:, ::1], float64[::1], float64[::1], int64, float64[:, :, ::1])"
_FINISH_SIG = (f"void({_F2}, {_F2}, int32[::1], int32[:, ::1], uint32[:, ::1], int32[:, ::1], int32[:, ::1], int64[:, ::1], "
               "int64, float64[::1], float64[::1], int64, int64, float64[:, ::1], int32[:, ::1])")


def ptx_kernels():
    """Every kernel of this module with representative geometry, for tests/test_ptx.py."""
    return [
        ("dense_matvec_keys", make_matvec_kernel(256, 32, 4, 4, False), _KEYS_SIG),
        ("dense_matvec_keys_l1", make_matvec_kernel(256, 32, 4, 4, True), _KEYS_SIG),
        ("dense_matvec_keys_rows4", make_matvec_kernel(256, 32, 1, 4, False, 4), _KEYS_SIG),
        ("dense_matvec_keys_warp", make_matvec_kernel(128, 32, 1, 4, False, 4, True), _KEYS_SIG),
        ("dense_gemm_keys", make_gemm_kernel(128, 128, 8, 8, 8, False), _KEYS_SIG),
        ("dense_gemm_keys_l1", make_gemm_kernel(64, 64, 8, 4, 4, True), _KEYS_SIG),
        ("dense_gemm_keys_one_buffer", make_gemm_kernel(64, 128, 16, 8, 4, False, False, 128), _KEYS_SIG),
        ("dense_select_candidates", make_select_kernel(256, 2048, 2048), _SELECT_SIG),
        ("dense_rescore", make_rescore_kernel(256), _RESCORE_SIG),
        ("dense_finish", make_finish_kernel(256, 2048, 2048, 4), _FINISH_SIG),
    ]
