"""One-vs-rest L2-loss linear SVM (LIBLINEAR -s 2) on many weight columns at once: products,
squared-hinge terms and TRON's column algebra, device kernels and CPU twins.

Shapes (k = number of weight columns, one per (class, fold group) pair; ``cols`` int64 lists the
columns a call touches, the others are neither read nor written):

    X      dense (n, m) float32 row-major, or CSR indptr int64 / indices int32 / data float32
    W, V   (m, k) float64 row-major (a column = one class's weight vector)
    Z      (n, k) float64 = X W
    labels (n,) int32 class code of each row (-1: unlabelled, trains nothing)
    folds  (n,) int32 fold of each row;  cls, group (k,) int32: column j is class cls[j] vs rest,
           trained on the rows with folds != group[j] (group -1: every row)

Per element (row i, column j), ``_hinge_terms``: y = +1 if labels[i] == cls[j] else -1; the row
trains the column when labels[i] >= 0 and folds[i] != group[j]; it is *active* when it trains
and y z < 1 (LIBLINEAR's I set); then the loss term is (1 - y z)^2 and the gradient residual
z - y (d/dz of the loss is 2 (z - y)), else 0.

Sums are in a fixed order on both backends (no atomics): a GEMM output sums its inner dimension
in order (split in ``splits`` consecutive chunks whose partials are added in chunk order); a CSR
product sums a row's entries in order (X^T U through a CSC copy); column reductions sum rows in
fixed chunks, then the chunks in order. The CPU twins (``*_cpu``) use the same formulas; device
and twin may differ in the last bits (the device fuses multiply-adds), never in structure.

=====================  =======================================================================
gemm                   partial[z, r, cols] = A[r, Kz] @ B[Kz, cols] (A float32, B float64);
                       a 64 x 64 output tile per block of 16 x 16 threads, 4 x 4 per thread
split_reduce           out[r, cols] = sum_z partial[z, r, cols]
spmm                   out[r, cols] = CSR row r @ B[:, cols]; 32 columns x 8 rows per block
hinge_loss             partial[b, cols] = loss over the rows of row block b (shared-memory tree)
hinge_residual         U[:, cols] = z - y where active, else 0
hinge_mask             U[:, cols] = V where active, else 0   (Hessian: X_I^T X_I)
col_dots               partial[b, j] = sum over row block b of A[:, j] * B[:, j], all columns
column_sum             out[j] = sum_b partial[b, j]
column_combine, scaled_add   TRON's column algebra (out = a X + b Y per column; w + 2C X^T r)
=====================  =======================================================================
"""
from __future__ import annotations

import numba
import numpy as np
from numba import cuda, prange

from ._factory import kernel_cache

GEMM_TILE = 64  # output rows and columns per block (16 x 16 threads, 4 x 4 each)
GEMM_SLAB = 16  # inner-dimension slab staged in shared memory
CPU_ROW_BLOCK = 32  # output rows per task of the CPU twin's dense product


# ----------------------------------------------------------------------------- shared per-element logic
def _hinge_terms(z, label, fold, c, grp):
    """(loss term, residual) of one row for one column: ((1 - y z)^2, z - y) when active, else (0, 0)."""
    if label < 0 or fold == grp:
        return 0.0, 0.0
    y = 1.0 if label == c else -1.0
    m = y * z
    if m < 1.0:
        d = 1.0 - m
        return d * d, z - y
    return 0.0, 0.0


def _is_active(z, label, fold, c, grp):
    """Whether the row is in the column's generalised-Hessian set I."""
    if label < 0 or fold == grp:
        return False
    y = 1.0 if label == c else -1.0
    return y * z < 1.0


_hinge_terms_cpu = numba.njit(cache=True, inline="always")(_hinge_terms)
_is_active_cpu = numba.njit(cache=True, inline="always")(_is_active)


# ----------------------------------------------------------------------------- CPU twins
@numba.njit(parallel=True, cache=True)
def dense_matmat_cpu(A, B, out):
    """out (M, N) float64 = A (M, K) float32 @ B (K, N) float64, each output summed over K in
    order; tasks of CPU_ROW_BLOCK output rows (an accumulator of CPU_ROW_BLOCK x N)."""
    M, K = A.shape
    N = B.shape[1]
    n_blocks = (M + CPU_ROW_BLOCK - 1) // CPU_ROW_BLOCK
    for b in prange(n_blocks):
        r0 = b * CPU_ROW_BLOCK
        rows = min(M, r0 + CPU_ROW_BLOCK) - r0
        acc = np.zeros((CPU_ROW_BLOCK, N), np.float64)
        for c in range(K):
            for i in range(rows):
                x = numba.float64(A[r0 + i, c])
                for j in range(N):
                    acc[i, j] += x * B[c, j]
        for i in range(rows):
            for j in range(N):
                out[r0 + i, j] = acc[i, j]


@numba.njit(parallel=True, cache=True)
def csr_matmat_cpu(indptr, indices, data, B, out):
    """out (n, N) float64 = CSR (n, K) @ B (K, N) float64; a row's entries summed in order.
    With X's CSC copy (colptr, rows, data) it gives X^T B."""
    n = indptr.shape[0] - 1
    N = B.shape[1]
    for r in prange(n):
        for j in range(N):
            out[r, j] = 0.0
        for p in range(indptr[r], indptr[r + 1]):
            x = numba.float64(data[p])
            c = indices[p]
            for j in range(N):
                out[r, j] += x * B[c, j]


@numba.njit(parallel=True, cache=True)
def hinge_loss_cpu(Z, labels, folds, cls, group, partial, out):
    """out[j] = sum over rows of the loss terms of column j of Z (n, N); rows in partial.shape[0]
    consecutive chunks (partial (parts, N) float64), chunk sums added in order."""
    n, N = Z.shape
    parts = partial.shape[0]
    chunk = (n + parts - 1) // parts
    for b in prange(parts):
        for j in range(N):
            partial[b, j] = 0.0
        for i in range(b * chunk, min(n, (b + 1) * chunk)):
            for j in range(N):
                loss, _r = _hinge_terms_cpu(Z[i, j], labels[i], folds[i], cls[j], group[j])
                partial[b, j] += loss
    for j in prange(N):
        total = 0.0
        for b in range(parts):
            total += partial[b, j]
        out[j] = total


@numba.njit(parallel=True, cache=True)
def hinge_residual_cpu(Z, labels, folds, cls, group, U):
    """U (n, N) = z - y where the row is active for the column, else 0."""
    n, N = Z.shape
    for i in prange(n):
        for j in range(N):
            _l, res = _hinge_terms_cpu(Z[i, j], labels[i], folds[i], cls[j], group[j])
            U[i, j] = res


@numba.njit(parallel=True, cache=True)
def hinge_mask_cpu(Z, labels, folds, cls, group, V):
    """V (n, N) *= [row active for the column] (in place): X_I V of the generalised Hessian."""
    n, N = Z.shape
    for i in prange(n):
        for j in range(N):
            if not _is_active_cpu(Z[i, j], labels[i], folds[i], cls[j], group[j]):
                V[i, j] = 0.0


@numba.njit(parallel=True, cache=True)
def active_pairs_cpu(Z, labels, folds, cls, group):
    """Per column j of Z (n, N): the rows active for it, ascending, as (ptr (N+1,) int64, rows int64):
    the pair structure of the generalised Hessian (LIBLINEAR's I set per class)."""
    n, N = Z.shape
    counts = np.zeros(N + 1, np.int64)
    for j in prange(N):
        c = 0
        for i in range(n):
            if _is_active_cpu(Z[i, j], labels[i], folds[i], cls[j], group[j]):
                c += 1
        counts[j + 1] = c
    ptr = np.cumsum(counts)
    rows = np.empty(ptr[N], np.int64)
    for j in prange(N):
        p = ptr[j]
        for i in range(n):
            if _is_active_cpu(Z[i, j], labels[i], folds[i], cls[j], group[j]):
                rows[p] = i
                p += 1
    return ptr, rows


@numba.njit(parallel=True, cache=True)
def dense_pairs_forward_cpu(X, VT, ptr, rows, vals):
    """vals[p] = X[rows[p], :] . VT[j, :] for the pairs p of column j (X (n, m) float32, VT (N, m)
    float64): X_I v per column. Eight partial sums (feature c goes to c % 8), added in a fixed
    order at the end: deterministic, and a reduction the compiler can vectorise."""
    N = VT.shape[0]
    m = X.shape[1]
    m8 = m - m % 8
    for j in prange(N):
        part = np.zeros(8, np.float64)
        for p in range(ptr[j], ptr[j + 1]):
            r = rows[p]
            for t in range(8):
                part[t] = 0.0
            for c0 in range(0, m8, 8):
                for t in range(8):
                    part[t] += numba.float64(X[r, c0 + t]) * VT[j, c0 + t]
            acc = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]))
            for c in range(m8, m):
                acc += numba.float64(X[r, c]) * VT[j, c]
            vals[p] = acc


@numba.njit(parallel=True, cache=True)
def dense_pairs_backward_cpu(X, ptr, rows, vals, GT):
    """GT[j, :] = sum over column j's pairs p (rows ascending) of vals[p] X[rows[p], :]: X_I^T u."""
    N, m = GT.shape
    for j in prange(N):
        for c in range(m):
            GT[j, c] = 0.0
        for p in range(ptr[j], ptr[j + 1]):
            r = rows[p]
            u = vals[p]
            for c in range(m):
                GT[j, c] += numba.float64(X[r, c]) * u


@numba.njit(parallel=True, cache=True)
def csr_pairs_forward_cpu(indptr, indices, data, VT, ptr, rows, vals):
    """vals[p] = CSR row rows[p] . VT[j, :] (entries in order)."""
    N = VT.shape[0]
    for j in prange(N):
        for p in range(ptr[j], ptr[j + 1]):
            r = rows[p]
            acc = 0.0
            for q in range(indptr[r], indptr[r + 1]):
                acc += numba.float64(data[q]) * VT[j, indices[q]]
            vals[p] = acc


@numba.njit(parallel=True, cache=True)
def csr_pairs_backward_cpu(indptr, indices, data, ptr, rows, vals, GT):
    """GT[j, :] = sum over column j's pairs p (rows ascending) of vals[p] * CSR row rows[p]."""
    N, m = GT.shape
    for j in prange(N):
        for c in range(m):
            GT[j, c] = 0.0
        for p in range(ptr[j], ptr[j + 1]):
            r = rows[p]
            u = vals[p]
            for q in range(indptr[r], indptr[r + 1]):
                GT[j, indices[q]] += numba.float64(data[q]) * u


@numba.njit(parallel=True, cache=True)
def col_dots_cpu(A, B, partial, out):
    """out[j] = sum_i A[i, j] B[i, j] for every column; rows in partial.shape[0] consecutive chunks."""
    n, N = A.shape
    parts = partial.shape[0]
    chunk = (n + parts - 1) // parts
    for b in prange(parts):
        for j in range(N):
            partial[b, j] = 0.0
        for i in range(b * chunk, min(n, (b + 1) * chunk)):
            for j in range(N):
                partial[b, j] += A[i, j] * B[i, j]
    for j in prange(N):
        total = 0.0
        for b in range(parts):
            total += partial[b, j]
        out[j] = total


@numba.njit(parallel=True, cache=True)
def masked_axpy_cpu(alpha, X, Y, mask):
    """Y[:, j] += alpha[j] X[:, j] for the columns with mask[j] != 0."""
    n, N = Y.shape
    for i in prange(n):
        for j in range(N):
            if mask[j]:
                Y[i, j] += alpha[j] * X[i, j]


@numba.njit(parallel=True, cache=True)
def masked_xpby_cpu(X, beta, Y, mask):
    """Y[:, j] = X[:, j] + beta[j] Y[:, j] for the columns with mask[j] != 0."""
    n, N = Y.shape
    for i in prange(n):
        for j in range(N):
            if mask[j]:
                Y[i, j] = X[i, j] + beta[j] * Y[i, j]


@numba.njit(parallel=True, cache=True)
def masked_select_cpu(dst, src, mask):
    """dst[:, j] = src[:, j] for the columns with mask[j] != 0."""
    n, N = dst.shape
    for i in prange(n):
        for j in range(N):
            if mask[j]:
                dst[i, j] = src[i, j]


@numba.njit(parallel=True, cache=True)
def scaled_add_cpu(A, scale, B, out):
    """out[:, j] = A[:, j] + scale[j] B[:, j] (gradient w + 2C X^T r, Hessian d + 2C X^T u)."""
    n, N = out.shape
    for i in prange(n):
        for j in range(N):
            out[i, j] = A[i, j] + scale[j] * B[i, j]


# ----------------------------------------------------------------------------- CUDA kernels
@kernel_cache
def gemm_kernel(splits: int):
    """partial[z, r, cols[jj]] = sum over k in chunk z of float64(A[r, k]) * B[k, cols[jj]].

    Grid (ceil(M / 64), ceil(len(cols) / 64), splits), block (16, 16): thread (tx, ty) owns rows
    ty + 16 a and columns tx + 16 b (a, b < 4) of the block's 64 x 64 tile; chunk z covers
    inner indices [z ceil(K / splits), ...). Per slab of 16 inner indices the block stages A
    (converted to float64) and B in shared memory (16 KiB), a syncthreads after staging and after
    use. Every output is summed over its chunk in order: deterministic.
    """
    T = GEMM_TILE
    S = GEMM_SLAB

    @cuda.jit
    def gemm(A, B, cols, partial):
        As = cuda.shared.array((S, T), numba.float64)
        Bs = cuda.shared.array((S, T), numba.float64)
        acc = cuda.local.array((4, 4), numba.float64)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * 16 + tx
        M = A.shape[0]
        K = A.shape[1]
        nc = cols.shape[0]
        r0 = cuda.blockIdx.x * T
        c0 = cuda.blockIdx.y * T
        z = cuda.blockIdx.z
        chunk = (K + splits - 1) // splits
        k_begin = z * chunk
        k_end = min(K, k_begin + chunk)
        for a in range(4):
            for b in range(4):
                acc[a, b] = 0.0
        for k0 in range(k_begin, k_end, S):
            for e in range(tid, S * T, 256):
                rr = e // S
                kk = e % S
                v = 0.0
                if r0 + rr < M and k0 + kk < k_end:
                    v = numba.float64(A[r0 + rr, k0 + kk])
                As[kk, rr] = v
                kk2 = e // T
                jj = e % T
                w = 0.0
                if c0 + jj < nc and k0 + kk2 < k_end:
                    w = B[k0 + kk2, cols[c0 + jj]]
                Bs[kk2, jj] = w
            cuda.syncthreads()  # slab staged
            for kk in range(S):
                b0 = Bs[kk, tx]  # the thread's four B values in registers: 8 shared loads per 16 FMAs
                b1 = Bs[kk, tx + 16]
                b2 = Bs[kk, tx + 32]
                b3 = Bs[kk, tx + 48]
                for a in range(4):
                    x = As[kk, ty + 16 * a]
                    acc[a, 0] += x * b0
                    acc[a, 1] += x * b1
                    acc[a, 2] += x * b2
                    acc[a, 3] += x * b3
            cuda.syncthreads()  # slab used before the next one overwrites it
        for a in range(4):
            r = r0 + ty + 16 * a
            if r < M:
                for b in range(4):
                    jj = c0 + tx + 16 * b
                    if jj < nc:
                        partial[z, r, cols[jj]] = acc[a, b]

    return gemm


@cuda.jit
def split_reduce(partial, cols, out):
    """out[r, cols[jj]] = sum_z partial[z, r, cols[jj]] in z order; thread per (r, jj), 2-d grid."""
    jj, r = cuda.grid(2)
    if r < out.shape[0] and jj < cols.shape[0]:
        c = cols[jj]
        total = 0.0
        for z in range(partial.shape[0]):
            total += partial[z, r, c]
        out[r, c] = total


@cuda.jit
def spmm(indptr, indices, data, B, cols, out):
    """out[r, cols[jj]] = sum over row r's entries of data * B[indices, cols[jj]], in order.
    Block (32, 8): lane x takes column jj = blockIdx.y * 32 + x (coalesced over B's row), y takes
    rows blockIdx.x * 8 + y, grid-stride."""
    jj = cuda.blockIdx.y * 32 + cuda.threadIdx.x
    n = indptr.shape[0] - 1
    if jj >= cols.shape[0]:
        return
    c = cols[jj]
    for r in range(cuda.blockIdx.x * 8 + cuda.threadIdx.y, n, cuda.gridDim.x * 8):
        acc = 0.0
        for p in range(indptr[r], indptr[r + 1]):
            acc += numba.float64(data[p]) * B[indices[p], c]
        out[r, c] = acc


def _device_functions():
    return cuda.jit(device=True, inline=True)(_hinge_terms), cuda.jit(device=True, inline=True)(_is_active)


@kernel_cache
def hinge_loss_kernel():
    """partial[blockIdx.x, cols[jj]] = loss terms of column cols[jj] over the rows this block
    visits (rows blockIdx.x * 8 + y, stride gridDim.x * 8); block (32, 8), a shared 8 x 32 tree
    over y (a syncthreads per round, taken by every thread)."""
    terms, _active = _device_functions()

    @cuda.jit
    def hinge_loss(Z, labels, folds, cls, group, cols, partial):
        buf = cuda.shared.array((8, 32), numba.float64)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        jj = cuda.blockIdx.y * 32 + tx
        acc = 0.0
        if jj < cols.shape[0]:
            c = cols[jj]
            for i in range(cuda.blockIdx.x * 8 + ty, Z.shape[0], cuda.gridDim.x * 8):
                loss, _r = terms(Z[i, c], labels[i], folds[i], cls[c], group[c])
                acc += loss
        buf[ty, tx] = acc
        cuda.syncthreads()  # row sums written
        half = 4
        while half > 0:
            if ty < half:
                buf[ty, tx] += buf[ty + half, tx]
            cuda.syncthreads()  # round complete
            half //= 2
        if ty == 0 and jj < cols.shape[0]:
            partial[cuda.blockIdx.x, cols[jj]] = buf[0, tx]

    return hinge_loss


@kernel_cache
def hinge_residual_kernel():
    """U[i, cols[jj]] = z - y where active, else 0: thread per (jj, i), 2-d grid (x: jj), rows grid-stride."""
    terms, _active = _device_functions()

    @cuda.jit
    def hinge_residual(Z, labels, folds, cls, group, cols, U):
        jj, i0 = cuda.grid(2)
        if jj < cols.shape[0]:
            c = cols[jj]
            for i in range(i0, Z.shape[0], cuda.gridsize(2)[1]):
                _l, res = terms(Z[i, c], labels[i], folds[i], cls[c], group[c])
                U[i, c] = res

    return hinge_residual


@kernel_cache
def hinge_mask_kernel():
    """V[i, cols[jj]] = 0 where the row is not active for the column (in place)."""
    _terms, active = _device_functions()

    @cuda.jit
    def hinge_mask(Z, labels, folds, cls, group, cols, V):
        jj, i0 = cuda.grid(2)
        if jj < cols.shape[0]:
            c = cols[jj]
            for i in range(i0, Z.shape[0], cuda.gridsize(2)[1]):
                if not active(Z[i, c], labels[i], folds[i], cls[c], group[c]):
                    V[i, c] = 0.0

    return hinge_mask


@cuda.jit
def col_dots(A, B, partial):
    """partial[blockIdx.x, j] = sum over rows blockIdx.x * 8 + y (stride gridDim.x * 8) of
    A[i, j] B[i, j]; block (32, 8) with lane x on column blockIdx.y * 32 + x, then a shared tree
    over y (syncthreads per round)."""
    buf = cuda.shared.array((8, 32), numba.float64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j = cuda.blockIdx.y * 32 + tx
    acc = 0.0
    if j < A.shape[1]:
        for i in range(cuda.blockIdx.x * 8 + ty, A.shape[0], cuda.gridDim.x * 8):
            acc += A[i, j] * B[i, j]
    buf[ty, tx] = acc
    cuda.syncthreads()  # row sums written
    half = 4
    while half > 0:
        if ty < half:
            buf[ty, tx] += buf[ty + half, tx]
        cuda.syncthreads()  # round complete
        half //= 2
    if ty == 0 and j < A.shape[1]:
        partial[cuda.blockIdx.x, j] = buf[0, tx]


@cuda.jit
def column_sum(partial, out):
    """out[j] = sum_b partial[b, j] in b order; thread per column."""
    j = cuda.grid(1)
    if j < out.shape[0]:
        total = 0.0
        for b in range(partial.shape[0]):
            total += partial[b, j]
        out[j] = total


@cuda.jit
def column_combine(a, X, b, Y, mask, out):
    """out[i, j] = a[j] X[i, j] + b[j] Y[i, j] on the columns with mask[j] != 0; a side whose
    coefficient is 0 is not read (so uninitialised memory never enters a result). TRON's column
    algebra: axpy (a = alpha, b = 1, out = Y), xpby (a = 1, b = beta, out = Y), select and copy
    (a = 1, b = 0), negation (a = -1), zero-fill (a = b = 0), sum (a = b = 1). Thread per (j, i),
    2-d grid (x: j), rows grid-stride."""
    j, i0 = cuda.grid(2)
    if j < out.shape[1] and mask[j]:
        aj = a[j]
        bj = b[j]
        for i in range(i0, out.shape[0], cuda.gridsize(2)[1]):
            v = 0.0
            if aj != 0.0:
                v = aj * X[i, j]
            if bj != 0.0:
                v = v + bj * Y[i, j]
            out[i, j] = v


@cuda.jit
def scaled_add(A, scale, B, cols, out):
    """out[i, c] = A[i, c] + scale[c] B[i, c] for c = cols[jj] (gradient w + 2C X^T r, Hessian
    d + 2C X^T u); thread per (jj, i), rows grid-stride."""
    jj, i0 = cuda.grid(2)
    if jj < cols.shape[0]:
        c = cols[jj]
        for i in range(i0, out.shape[0], cuda.gridsize(2)[1]):
            out[i, c] = A[i, c] + scale[c] * B[i, c]


def ptx_kernels():
    """Every CUDA kernel of this module with a representative geometry (tests/test_ptx.py)."""
    f64_2 = "float64[:, ::1]"
    i32 = "int32[::1]"
    i64 = "int64[::1]"
    hinge = f"({f64_2}, {i32}, {i32}, {i32}, {i32}, {i64}, {f64_2})"
    return [
        ("gemm", gemm_kernel(4), f"void(float32[:, ::1], {f64_2}, {i64}, float64[:, :, ::1])"),
        ("split_reduce", split_reduce, f"void(float64[:, :, ::1], {i64}, {f64_2})"),
        ("spmm", spmm, f"void({i64}, {i32}, float32[::1], {f64_2}, {i64}, {f64_2})"),
        ("hinge_loss", hinge_loss_kernel(), f"void{hinge}"),
        ("hinge_residual", hinge_residual_kernel(), f"void{hinge}"),
        ("hinge_mask", hinge_mask_kernel(), f"void{hinge}"),
        ("col_dots", col_dots, f"void({f64_2}, {f64_2}, {f64_2})"),
        ("column_sum", column_sum, f"void({f64_2}, float64[::1])"),
        ("column_combine", column_combine,
         f"void(float64[::1], {f64_2}, float64[::1], {f64_2}, int8[::1], {f64_2})"),
        ("scaled_add", scaled_add, f"void({f64_2}, float64[::1], {f64_2}, {i64}, {f64_2})"),
    ]
