"""The matrix products of the linear learners' CPU twins, written once: RankSVM (one column,
gputext.rank.ops) and the one-vs-rest SVM (a block of columns, gputext.linear.ops) both take
them from here. Every output is a sum in a fixed order (a row's entries, or K, in index order),
so the one-column and the many-column forms agree to the last bit on the same column, and the
results do not depend on the thread count. No numba.cuda: RankSVM's CPU path starts without it.

    csr_matvec_cpu(indptr, indices, data, v, out)    out = X v  (with X's CSC copy: X^T u)
    dense_matvec_cpu(Xd, v, out)                     out = Xd v
    csr_matmat_cpu(indptr, indices, data, B, out)    out = X B  (with the CSC copy: X^T B)
    dense_matmat_cpu(A, B, out)                      out = A B

The device forms are the families' own kernels (kernels/ranksvm_cuda.py, kernels/linear_svm.py):
one thread group per row for one column, a lane per column for a block of columns.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange

from .indices import U64
from .jit import cpu_jit

CPU_ROW_BLOCK = 32  # output rows per task of dense_matmat_cpu (an accumulator of CPU_ROW_BLOCK x N)


@cpu_jit(parallel=True)
def csr_matvec_cpu(indptr, indices, data, v, out):
    """out[r] = sum over row r's entries of data * v[indices]; CSR int64/uint32 (or int32)/float32, v, out float64.

    Also X^T u: called with X's CSC copy (colptr, rows, data) it gives out[c] = sum over column
    c's entries of data * u[rows]. Entries summed in order from 0.0: the value of
    csr_matmat_cpu's one-column case bit for bit (tests/test_rank_kernels.py), with the sum in a
    register instead of the output row.
    """
    for r in prange(indptr.shape[0] - 1):
        acc = 0.0
        for p in range(U64(indptr[r]), U64(indptr[r + 1])):  # unsigned: no index wrap (kernels.indices)
            acc += numba.float64(data[p]) * v[U64(indices[p])]
        out[r] = acc


@cpu_jit(parallel=True)
def dense_matvec_cpu(Xd, v, out):
    """out[r] = sum_c float64(Xd[r, c]) * v[c]; Xd (rows, cols) float32, v (cols,) float64,
    out (rows,) float64. Columns summed in order (as the device kernel does)."""
    n_rows, n_cols = Xd.shape
    for r in prange(n_rows):
        acc = 0.0
        for c in range(n_cols):
            acc += numba.float64(Xd[r, c]) * v[c]
        out[r] = acc


@cpu_jit(parallel=True)
def csr_matmat_cpu(indptr, indices, data, B, out):
    """out (n, N) float64 = CSR (n, K) @ B (K, N) float64; a row's entries summed in order.
    With X's CSC copy (colptr, rows, data) it gives X^T B."""
    n = indptr.shape[0] - 1
    N = B.shape[1]
    for r in prange(n):
        for j in range(N):
            out[r, j] = 0.0
        for p in range(U64(indptr[r]), U64(indptr[r + 1])):
            x = numba.float64(data[p])
            c = U64(indices[p])
            for j in range(N):
                out[r, j] += x * B[c, j]


@cpu_jit(parallel=True)
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
