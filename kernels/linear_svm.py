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
and twin may differ in the last bits (the device fuses multiply-adds), never in structure. The
products' CPU twins are shared with RankSVM (kernels/products.py: csr_matmat_cpu,
dense_matmat_cpu).

=====================  =======================================================================
gemm                   partial[z, r, cols] = A[r, Kz] @ B[Kz, cols] (A float32, B float64);
                       a 64 x 64 output tile per block of 16 x 16 threads, 4 x 4 per thread
split_reduce           out[r, cols] = sum_z partial[z, r, cols]
spmm                   out[r, cols] = CSR row r @ B[:, cols]; 32 columns x 8 rows per block
hinge_loss             partial[b, cols] = loss over the rows of row block b (shared-memory tree)
hinge_rows             mode 0: U[:, cols] = z - y where active, else 0 (gradient);
                       mode 1: U[:, cols] = 0 where not active (Hessian: X_I^T X_I)
active_pairs           per column the active rows, ascending (count, then fill): the pair structure
dense_pairs_forward    vals[p] = X[row p] . D[:, column of p]   (X_I d, 8 lanes per pair)
dense_pairs_backward   out[f, c] = sum over c's pairs of vals[p] X[row p, f]   (X_I^T u)
pair_residual          vals[p] = z - y on the pairs (the gradient's X_I^T r)
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
from .primitives import block_inclusive_scan_dev
from .jit import cpu_jit, cuda_kernel, device_function

# empty stand-ins for the arguments a shared CPU loop does not read on its other path
_NO_ROWS = np.zeros(0, np.int32)
_NO_PTR = np.zeros(0, np.int64)
_NO_DATA = np.zeros(0, np.float32)
_NO_X = np.zeros((0, 0), np.float32)

GEMM_TILE = 64  # output rows and columns per block (16 x 16 threads, 4 x 4 each)
GEMM_SLAB = 16  # inner-dimension slab staged in shared memory


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


_hinge_terms_cpu = cpu_jit(inline="always")(_hinge_terms)

def _make_rows_column_sum(gathered: bool):
    """The per-item function of X_R^T w on the device, shared by RankSVM's dense X^T u
    (kernels.ranksvm.dense_rmatvec_partial, rows p0..p1 themselves) and the SVM's active-pair
    X_I^T u (dense_pairs_backward, rows[p] for p in p0..p1): sum over p in [p0, p1), in order, of
    float64(X[r, f]) * w[p] with r = rows[p] (``gathered``) or p; four loads in flight, the sum
    still in p order. ``rows`` is not read when not gathered."""

    def rows_column_sum(X, rows, w, p0, p1, f):
        acc = 0.0
        p = p0
        while p + 4 <= p1:
            if gathered:
                x0 = numba.float64(X[rows[p], f])
                x1 = numba.float64(X[rows[p + 1], f])
                x2 = numba.float64(X[rows[p + 2], f])
                x3 = numba.float64(X[rows[p + 3], f])
            else:
                x0 = numba.float64(X[p, f])
                x1 = numba.float64(X[p + 1, f])
                x2 = numba.float64(X[p + 2, f])
                x3 = numba.float64(X[p + 3, f])
            acc += x0 * w[p]
            acc += x1 * w[p + 1]
            acc += x2 * w[p + 2]
            acc += x3 * w[p + 3]
            p += 4
        while p < p1:
            if gathered:
                x = numba.float64(X[rows[p], f])
            else:
                x = numba.float64(X[p, f])
            acc += x * w[p]
            p += 1
        return acc

    return rows_column_sum


rows_column_sum_dev = device_function(_make_rows_column_sum(False))
gathered_column_sum_dev = device_function(_make_rows_column_sum(True))
_is_active_cpu = cpu_jit(inline="always")(_is_active)


# ----------------------------------------------------------------------------- CPU twins
@cpu_jit(parallel=True)
def _chunked_column_sums(A, B, labels, folds, cls, group, loss, partial, out):
    """out[j] = sum over rows i of A (n, N) of term(i, j): the hinge loss term of A[i, j] (loss
    true; labels, folds, cls, group as hinge_loss) or A[i, j] * B[i, j]. Rows in
    partial.shape[0] consecutive chunks (partial (parts, N) float64), each chunk summed in row
    order and the chunks added in order: the fixed order of the CPU twin's column sums."""
    n, N = A.shape
    parts = partial.shape[0]
    chunk = (n + parts - 1) // parts
    for b in prange(parts):
        for j in range(N):
            partial[b, j] = 0.0
        for i in range(b * chunk, min(n, (b + 1) * chunk)):
            for j in range(N):
                if loss:
                    term, _r = _hinge_terms_cpu(A[i, j], labels[i], folds[i], cls[j], group[j])
                else:
                    term = A[i, j] * B[i, j]
                partial[b, j] += term
    for j in prange(N):
        total = 0.0
        for b in range(parts):
            total += partial[b, j]
        out[j] = total


def hinge_loss_cpu(Z, labels, folds, cls, group, partial, out):
    """out[j] = sum over rows of the loss terms of column j of Z (n, N) (_chunked_column_sums)."""
    _chunked_column_sums(Z, Z, labels, folds, cls, group, True, partial, out)


@cpu_jit(parallel=True)
def hinge_residual_cpu(Z, labels, folds, cls, group, U):
    """U (n, N) = z - y where the row is active for the column, else 0."""
    n, N = Z.shape
    for i in prange(n):
        for j in range(N):
            _l, res = _hinge_terms_cpu(Z[i, j], labels[i], folds[i], cls[j], group[j])
            U[i, j] = res


@cpu_jit(parallel=True)
def hinge_mask_cpu(Z, labels, folds, cls, group, V):
    """V (n, N) *= [row active for the column] (in place): X_I V of the generalised Hessian."""
    n, N = Z.shape
    for i in prange(n):
        for j in range(N):
            if not _is_active_cpu(Z[i, j], labels[i], folds[i], cls[j], group[j]):
                V[i, j] = 0.0


@cpu_jit(parallel=True)
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


@cpu_jit(parallel=True)
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


@cpu_jit(parallel=True)
def _pairs_backward(X, indptr, indices, data, ptr, rows, vals, GT):
    """GT[j, :] = sum over column j's pairs p (rows ascending) of vals[p] times row rows[p]: of
    the dense X (n, m) float32 when indptr is empty, else of the CSR arrays. X_I^T u."""
    N, m = GT.shape
    dense = indptr.shape[0] == 0
    for j in prange(N):
        for c in range(m):
            GT[j, c] = 0.0
        for p in range(ptr[j], ptr[j + 1]):
            r = rows[p]
            u = vals[p]
            if dense:
                for c in range(m):
                    GT[j, c] += numba.float64(X[r, c]) * u
            else:
                for q in range(indptr[r], indptr[r + 1]):
                    GT[j, indices[q]] += numba.float64(data[q]) * u


def dense_pairs_backward_cpu(X, ptr, rows, vals, GT):
    """GT[j, :] = sum over column j's pairs p (rows ascending) of vals[p] X[rows[p], :]: X_I^T u."""
    _pairs_backward(X, _NO_PTR, _NO_ROWS, _NO_DATA, ptr, rows, vals, GT)


@cpu_jit(parallel=True)
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


def csr_pairs_backward_cpu(indptr, indices, data, ptr, rows, vals, GT):
    """GT[j, :] = sum over column j's pairs p (rows ascending) of vals[p] * CSR row rows[p]."""
    _pairs_backward(_NO_X, indptr, indices, data, ptr, rows, vals, GT)




def col_dots_cpu(A, B, partial, out):
    """out[j] = sum_i A[i, j] B[i, j] for every column (_chunked_column_sums)."""
    _chunked_column_sums(A, B, _NO_ROWS, _NO_ROWS, _NO_ROWS, _NO_ROWS, False, partial, out)


@cpu_jit(parallel=True)
def masked_combine_cpu(a, X, b, Y, mask, out):
    """out[:, j] = a[j] X[:, j] + b[j] Y[:, j] for the columns with mask[j] != 0 (twin of
    column_combine; out may be X or Y)."""
    n, N = out.shape
    for i in prange(n):
        for j in range(N):
            if mask[j]:
                out[i, j] = a[j] * X[i, j] + b[j] * Y[i, j]


@cpu_jit(parallel=True)
def scaled_add_cpu(A, scale, B, out):
    """out[:, j] = A[:, j] + scale[j] B[:, j] (gradient w + 2C X^T r, Hessian d + 2C X^T u)."""
    n, N = out.shape
    for i in prange(n):
        for j in range(N):
            out[i, j] = A[i, j] + scale[j] * B[i, j]


# ----------------------------------------------------------------------------- CUDA kernels
@cuda_kernel
def gemm(A, B, cols, partial):
    """partial[z, r, cols[jj]] = sum over k in chunk z of float64(A[r, k]) * B[k, cols[jj]].

    Grid (ceil(M / 64), ceil(len(cols) / 64), splits), block (16, 16): thread (tx, ty) owns rows
    ty + 16 a and columns tx + 16 b (a, b < 4) of the block's 64 x 64 tile; chunk z of the
    gridDim.z = splits chunks covers inner indices [z ceil(K / splits), ...) (the split count is
    the grid's, not compiled in: one kernel for every shape). Per slab of 16 inner indices the
    block stages A (converted to float64) and B in shared memory (16 KiB), a syncthreads after
    staging and after use. Every output is summed over its chunk in order: deterministic.
    """
    As = cuda.shared.array((GEMM_SLAB, GEMM_TILE), numba.float64)
    Bs = cuda.shared.array((GEMM_SLAB, GEMM_TILE), numba.float64)
    acc = cuda.local.array((4, 4), numba.float64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    tid = ty * 16 + tx
    M = A.shape[0]
    K = A.shape[1]
    nc = cols.shape[0]
    r0 = cuda.blockIdx.x * GEMM_TILE
    c0 = cuda.blockIdx.y * GEMM_TILE
    z = cuda.blockIdx.z
    splits = cuda.gridDim.z
    chunk = (K + splits - 1) // splits
    k_begin = z * chunk
    k_end = min(K, k_begin + chunk)
    for a in range(4):
        for b in range(4):
            acc[a, b] = 0.0
    for k0 in range(k_begin, k_end, GEMM_SLAB):
        for e in range(tid, GEMM_SLAB * GEMM_TILE, 256):
            rr = e // GEMM_SLAB
            kk = e % GEMM_SLAB
            v = 0.0
            if r0 + rr < M and k0 + kk < k_end:
                v = numba.float64(A[r0 + rr, k0 + kk])
            As[kk, rr] = v
            kk2 = e // GEMM_TILE
            jj = e % GEMM_TILE
            w = 0.0
            if c0 + jj < nc and k0 + kk2 < k_end:
                w = B[k0 + kk2, cols[c0 + jj]]
            Bs[kk2, jj] = w
        cuda.syncthreads()  # slab staged
        for kk in range(GEMM_SLAB):
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


@cuda_kernel
def split_reduce(partial, cols, out):
    """out[r, cols[jj]] = sum_z partial[z, r, cols[jj]] in z order; thread per (r, jj), 2-d grid."""
    jj, r = cuda.grid(2)
    if r < out.shape[0] and jj < cols.shape[0]:
        c = cols[jj]
        total = 0.0
        for z in range(partial.shape[0]):
            total += partial[z, r, c]
        out[r, c] = total


@cuda_kernel
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


def _column_tree(buf, acc, tx, ty):
    """The column reductions' block step (block (32, 8), lane x = a column, y = 8 row groups,
    buf a shared (8, 32) float64): each thread's row-group sum ``acc`` into buf, then a tree over
    y, a syncthreads per round (taken by every thread); returns the column's block total to the
    threads with ty == 0 (hinge_loss, col_dots)."""
    buf[ty, tx] = acc
    cuda.syncthreads()  # row sums written
    half = 4
    while half > 0:
        if ty < half:
            buf[ty, tx] += buf[ty + half, tx]
        cuda.syncthreads()  # round complete
        half //= 2
    return buf[0, tx]


column_tree_dev = device_function(_column_tree)


@device_function
def column_lane():
    """(x, y, column) of a column-reduction thread: block (32, 8), lane x on column
    blockIdx.y * 32 + x of its grid row (hinge_loss, col_dots)."""
    tx = cuda.threadIdx.x
    return tx, cuda.threadIdx.y, cuda.blockIdx.y * 32 + tx


def _device_functions():
    return device_function(_hinge_terms), device_function(_is_active)


@kernel_cache
def hinge_loss_kernel():
    """partial[blockIdx.x, cols[jj]] = loss terms of column cols[jj] over the rows this block
    visits (rows blockIdx.x * 8 + y, stride gridDim.x * 8); block (32, 8), a shared 8 x 32 tree
    over y (a syncthreads per round, taken by every thread)."""
    terms, _active = _device_functions()

    @cuda_kernel
    def hinge_loss(Z, labels, folds, cls, group, cols, partial):
        buf = cuda.shared.array((8, 32), numba.float64)
        tx, ty, jj = column_lane()
        acc = 0.0
        if jj < cols.shape[0]:
            c = cols[jj]
            for i in range(cuda.blockIdx.x * 8 + ty, Z.shape[0], cuda.gridDim.x * 8):
                loss, _r = terms(Z[i, c], labels[i], folds[i], cls[c], group[c])
                acc += loss
        total = column_tree_dev(buf, acc, tx, ty)
        if ty == 0 and jj < cols.shape[0]:
            partial[cuda.blockIdx.x, cols[jj]] = total

    return hinge_loss


@kernel_cache
def hinge_rows_kernel():
    """Per element (row i, column c = cols[jj]) of the active set: ``mode`` 0 writes the gradient
    residual V[i, c] = z - y where active, else 0; ``mode`` 1 zeroes V[i, c] in place where the row
    is not active (the Hessian's X_I V). Thread per (jj, i), 2-d grid (x: jj), rows grid-stride."""
    terms, active = _device_functions()

    @cuda_kernel
    def hinge_rows(Z, labels, folds, cls, group, cols, V, mode):
        jj, i0 = cuda.grid(2)
        if jj < cols.shape[0]:
            c = cols[jj]
            for i in range(i0, Z.shape[0], cuda.gridsize(2)[1]):
                if mode == 0:
                    _l, res = terms(Z[i, c], labels[i], folds[i], cls[c], group[c])
                    V[i, c] = res
                elif not active(Z[i, c], labels[i], folds[i], cls[c], group[c]):
                    V[i, c] = 0.0

    return hinge_rows


ACTIVE_THREADS = 128  # threads per column of the pair-structure kernels


@kernel_cache
def active_pairs_kernels():
    """(count, fill): the active (row, column) pairs of every column of Z, as active_pairs_cpu.
    Block per column j (grid k), ACTIVE_THREADS threads over the rows in chunks of that many.
    count: counts[j + 1] = rows active for column j (per-thread counts, one block scan for the
    total); fill: rows[ptr[j] ...] = those rows ascending (per chunk a block inclusive scan of the
    active flags gives each active row its place; kernels.primitives.block_inclusive_scan_dev,
    its syncthreads reached by every thread). Shared: ACTIVE_THREADS int64."""
    _terms, active = _device_functions()
    T = ACTIVE_THREADS

    @cuda_kernel
    def active_count(Z, labels, folds, cls, group, counts):
        buf = cuda.shared.array(T, numba.int64)
        j = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        c = 0
        for i in range(tid, Z.shape[0], T):
            if active(Z[i, j], labels[i], folds[i], cls[j], group[j]):
                c += 1
        _mine, total = block_inclusive_scan_dev(buf, c, tid, T)
        if tid == 0:
            counts[j + 1] = total

    @cuda_kernel
    def active_fill(Z, labels, folds, cls, group, ptr, rows):
        buf = cuda.shared.array(T, numba.int64)
        j = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        base = ptr[j]
        for i0 in range(0, Z.shape[0], T):
            i = i0 + tid
            flag = 0
            if i < Z.shape[0]:
                if active(Z[i, j], labels[i], folds[i], cls[j], group[j]):
                    flag = 1
            mine, total = block_inclusive_scan_dev(buf, flag, tid, T)
            if flag:
                rows[base + mine - 1] = i
            base += total

    return active_count, active_fill


PAIR_LANES = 8  # lanes per pair of dense_pairs_forward: lane t sums the features c = t mod 8
PAIRS_PER_BLOCK = 32
PAIR_THREADS = PAIR_LANES * PAIRS_PER_BLOCK  # 256 threads per block of dense_pairs_forward


@cuda_kernel
def dense_pairs_forward(X, D, ptr, rows, cols, vals):
    """vals[p] = X[rows[p], :] . D[:, c] for the pairs p of column c = cols[blockIdx.y]: X_I d.

    The structure of dense_pairs_forward_cpu, bit for bit but for fused multiply-adds: eight lanes
    per pair, lane t sums the features c0 + t (c0 = 0, 8, ..) in order into shared memory (2 KiB),
    one syncthreads (reached by every thread), then lane 0 adds the eight sums
    ((0+1)+(2+3))+((4+5)+(6+7)) and the last m % 8 features in order. Block of 256 threads: 32
    pairs (pair blockIdx.x * 32 + tid // 8 of the column). X (n, m) float32, D (m, k) float64, ptr (k + 1,) int64, rows int32,
    vals float64 (one per pair of the whole structure)."""
    buf = cuda.shared.array(PAIR_THREADS, numba.float64)
    c = cols[cuda.blockIdx.y]
    tid = cuda.threadIdx.x
    lane = tid % PAIR_LANES
    p = ptr[c] + cuda.blockIdx.x * PAIRS_PER_BLOCK + tid // PAIR_LANES
    end = ptr[c + 1]
    m = X.shape[1]
    m8 = m - m % PAIR_LANES
    acc = 0.0
    r = 0
    if p < end:
        r = rows[p]
        for c0 in range(0, m8, PAIR_LANES):
            acc += numba.float64(X[r, c0 + lane]) * D[c0 + lane, c]
    buf[tid] = acc
    cuda.syncthreads()  # the eight lane sums of every pair written
    if lane == 0 and p < end:
        acc = (((buf[tid] + buf[tid + 1]) + (buf[tid + 2] + buf[tid + 3]))
               + ((buf[tid + 4] + buf[tid + 5]) + (buf[tid + 6] + buf[tid + 7])))
        for f in range(m8, m):
            acc += numba.float64(X[r, f]) * D[f, c]
        vals[p] = acc


@cuda_kernel
def dense_pairs_backward(X, ptr, rows, vals, cols, out):
    """out[f, c] = sum over the pairs p of column c = cols[blockIdx.y], in order, of
    vals[p] * X[rows[p], f]: X_I^T u (dense_pairs_backward_cpu's order). Thread per feature f
    (grid x over features; a warp reads 32 consecutive features of one row: coalesced); the sum
    is gathered_column_sum_dev, RankSVM's X^T u item (four loads in flight, pair order)."""
    f = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    c = cols[cuda.blockIdx.y]
    if f < X.shape[1]:
        out[f, c] = gathered_column_sum_dev(X, rows, vals, ptr[c], ptr[c + 1], f)


@cuda_kernel
def pair_residual(Z, labels, cls, ptr, rows, cols, vals):
    """vals[p] = z - y for the pairs p of column c = cols[blockIdx.y] (all active: the gradient's
    residual); thread per pair, 256 pairs per block along x."""
    c = cols[cuda.blockIdx.y]
    p = ptr[c] + cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if p < ptr[c + 1]:
        r = rows[p]
        y = 1.0 if labels[r] == cls[c] else -1.0
        vals[p] = Z[r, c] - y


@cuda_kernel
def col_dots(A, B, partial):
    """partial[blockIdx.x, j] = sum over rows blockIdx.x * 8 + y (stride gridDim.x * 8) of
    A[i, j] B[i, j]; block (32, 8) with lane x on column blockIdx.y * 32 + x, then a shared tree
    over y (syncthreads per round)."""
    buf = cuda.shared.array((8, 32), numba.float64)
    tx, ty, j = column_lane()
    acc = 0.0
    if j < A.shape[1]:
        for i in range(cuda.blockIdx.x * 8 + ty, A.shape[0], cuda.gridDim.x * 8):
            acc += A[i, j] * B[i, j]
    total = column_tree_dev(buf, acc, tx, ty)
    if ty == 0 and j < A.shape[1]:
        partial[cuda.blockIdx.x, j] = total


@cuda_kernel
def column_sum(partial, out):
    """out[j] = sum_b partial[b, j] in b order; thread per column."""
    j = cuda.grid(1)
    if j < out.shape[0]:
        total = 0.0
        for b in range(partial.shape[0]):
            total += partial[b, j]
        out[j] = total


@cuda_kernel
def column_combine(coef, X, Y, out):
    """out[i, j] = a[j] X[i, j] + b[j] Y[i, j] on the columns with mask[j] != 0, where coef (3, k)
    float64 holds the rows a, b, mask (one small upload per update); a side whose coefficient is 0
    is not read (so uninitialised memory never enters a result). TRON's column algebra: axpy
    (a = alpha, b = 1, out = Y), xpby (a = 1, b = beta, out = Y), select and copy (a = 1, b = 0),
    negation (a = -1), zero-fill (a = b = 0), sum (a = b = 1). Thread per (j, i), 2-d grid (x: j),
    rows grid-stride."""
    j, i0 = cuda.grid(2)
    if j < out.shape[1] and coef[2, j] != 0.0:
        aj = coef[0, j]
        bj = coef[1, j]
        for i in range(i0, out.shape[0], cuda.gridsize(2)[1]):
            v = 0.0
            if aj != 0.0:
                v = aj * X[i, j]
            if bj != 0.0:
                v = v + bj * Y[i, j]
            out[i, j] = v


@cuda_kernel
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
        ("gemm", gemm, f"void(float32[:, ::1], {f64_2}, {i64}, float64[:, :, ::1])"),
        ("split_reduce", split_reduce, f"void(float64[:, :, ::1], {i64}, {f64_2})"),
        ("spmm", spmm, f"void({i64}, {i32}, float32[::1], {f64_2}, {i64}, {f64_2})"),
        ("hinge_loss", hinge_loss_kernel(), f"void{hinge}"),
        ("hinge_rows", hinge_rows_kernel(), f"void({f64_2}, {i32}, {i32}, {i32}, {i32}, {i64}, {f64_2}, int64)"),
        ("active_count", active_pairs_kernels()[0], f"void({f64_2}, {i32}, {i32}, {i32}, {i32}, int64[::1])"),
        ("active_fill", active_pairs_kernels()[1], f"void({f64_2}, {i32}, {i32}, {i32}, {i32}, {i64}, {i32})"),
        ("dense_pairs_forward", dense_pairs_forward,
         f"void(float32[:, ::1], {f64_2}, {i64}, {i32}, {i64}, float64[::1])"),
        ("dense_pairs_backward", dense_pairs_backward,
         f"void(float32[:, ::1], {i64}, {i32}, float64[::1], {i64}, {f64_2})"),
        ("pair_residual", pair_residual, f"void({f64_2}, {i32}, {i32}, {i64}, {i32}, {i64}, float64[::1])"),
        ("col_dots", col_dots, f"void({f64_2}, {f64_2}, {f64_2})"),
        ("column_sum", column_sum, f"void({f64_2}, float64[::1])"),
        ("column_combine", column_combine, f"void({f64_2}, {f64_2}, {f64_2}, {f64_2})"),
        ("scaled_add", scaled_add, f"void({f64_2}, float64[::1], {f64_2}, {i64}, {f64_2})"),
    ]
