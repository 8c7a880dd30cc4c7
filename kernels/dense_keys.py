"""Stage 1 of the dense kNN (kernels/dense_knn.py): approximate float32 keys, the CNAE paper's
matrix-vector product (``make_matvec_kernel``) and a register-tiled GEMM (``make_gemm_kernel``),
with their CPU twin ``approx_keys_cpu``."""
from __future__ import annotations

import math
from functools import lru_cache

import numba
import numpy as np
from numba import cuda, float32, uint64

from ._factory import jit_kernel
from .jit import cpu_jit, cuda_kernel, device_function


def _finish_key(acc, metric, rq, rd, half_sqd):
    """float32 key of a float32 cross term acc (module doc of kernels/dense_knn.py)."""
    if metric == 0:
        key = acc * rq * rd
    elif metric == 2:
        key = acc - half_sqd
    elif metric == 3:
        key = -acc
    else:
        key = acc
    return key + numba.float32(0.0)  # -0.0 -> +0.0


_finish_key_cpu = cpu_jit(inline="always")(_finish_key)
_finish_key_dev = device_function(_finish_key)


def _term(qv, x, is_l1):
    """One term of a float32 cross term: |q - x| (l1) or x * q (an fma once added)."""
    if is_l1:
        return abs(qv - x)
    return x * qv


_term_cpu = cpu_jit(inline="always")(_term)
_term_dev = device_function(_term)


@cpu_jit(parallel=True)
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
            for j in range(n_terms):
                acc += _term_cpu(Q[q, j], X[r, j], metric == 3)
            keys[q, r] = _finish_key_cpu(acc, metric, rq[q], rd[r], half_sqd[r])



matvec_keys_cpu = approx_keys_cpu  # twin of make_matvec_kernel(...)
gemm_keys_cpu = approx_keys_cpu  # twin of make_gemm_kernel(...)


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

    @cuda_kernel
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
                                    acc[t * RPT + s] += _term_dev(qv, xs[s, u], L1)
                        j += step
                    while j < n_terms:
                        for s in range(RPT):
                            x = X[row0 + slot + s * SLOTS, j]
                            for t in range(QPP):
                                acc[t * RPT + s] += _term_dev(Q[q0 + t, j], x, L1)
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
                                    acc[t * RPT + s] += _term_dev(Q[q0 + t, j], x, L1)
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
    ``max_registers`` > 0 caps registers per thread (ptxas spills the rest; see ``jit_kernel``).
    ``warp_docs`` > 0 arranges each warp's 32 threads as (32 / warp_docs) x warp_docs (tx, ty) in
    a 2-d patch of the thread grid (fewer distinct shared addresses per 128-bit load: warp_docs
    document runs and 32 / warp_docs query runs) instead of consecutive tx (0: tid = ty * TX + tx).
    The finish (norms, |d|^2/2) is applied in the epilogue; documents and queries past the end are
    never written.
    Arguments as make_matvec_kernel (Q rows >= n_queries may be anything).
    Float32 error: each key is a sequential sum over the terms in increasing order (one fma per
    term; ``chain_length``).
    Length: it writes the kernel's source, straight-line (every register-tile element a named
    variable, so nothing goes to local memory); that is why it is over 120 lines.
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
    return jit_kernel(max_registers)(namespace["dense_gemm_keys"])


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
