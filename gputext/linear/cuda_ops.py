"""The squared-hinge SVM's operations on a CUDA device (gputext.kernels.linear_svm for the kernels).

Imported only when the backend is cuda (ops.make_ops). Plain numba-cuda device arrays: gputext's
shared device runtime (gputext/device/) was not on main when this was written; moving the
buffers onto it is a change of this module only.

On the device for the whole training run: X (sparse block as CSR and a CSC copy; dense block
row-major and transposed, float32), labels, folds, per-column class and group, the margins Z of
the current and trial point (n x k float64 each), and TRON's vectors (n_features x k float64).
Per product the host sends the column list (int64) and per-column coefficients; per reduction it
receives k float64 values. Every sum has a fixed order (kernels/linear_svm.py): deterministic.

Memory: X as stored twice (sparse 16 nnz bytes, dense 8 n md bytes) + 4 n k (Z, trial, U,
partials: 8 bytes each, partials times the split count) + about 10 n_features k float64 (W, G, H,
TRON's s, r, d, trial W, scratch).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from ..io.corpus import csr_arrays
from ..kernels import linear_svm as K
from .problem import Blocks, Columns

ELEMENT_BLOCK = (32, 8)
MAX_ROW_BLOCKS = 2048  # grid rows of elementwise kernels (grid-stride beyond)
REDUCE_BLOCKS = 256  # row blocks of column reductions (fixed: the sums' order does not depend on k)
TARGET_BLOCKS = 264  # about two waves of an H100's 132 SMs: the split-K count aims at this many blocks


def _grid2(n_cols: int, n_rows: int) -> tuple[int, int]:
    return (max(1, -(-n_cols // 32)), max(1, min(MAX_ROW_BLOCKS, -(-n_rows // 8))))


def _nonempty(a: np.ndarray) -> np.ndarray:
    return a if len(a) else np.zeros(1, a.dtype)


class CudaColumnSpace:
    """TRON's column algebra on device (n, k) float64 arrays (see HostSpace in gputext.rank.tron):
    every update is one ``column_combine`` launch, out = a X + b Y on the masked columns."""

    def __init__(self, k: int):
        self.k = k
        self._partial = {}
        self._const = {}

    def _vec(self, value: float):
        """A device (k,) float64 of ``value`` (cached), or the int8 all-ones mask for value None."""
        if value not in self._const:
            host = np.ones(self.k, np.int8) if value is None else np.full(self.k, value, np.float64)
            self._const[value] = cuda.to_device(host)
        return self._const[value]

    def _combine(self, a, X, b, Y, mask, out) -> None:
        def dev(c):
            return self._vec(float(c)) if np.ndim(c) == 0 else cuda.to_device(np.ascontiguousarray(c, np.float64))
        m = self._vec(None) if mask is None else cuda.to_device(np.asarray(mask, np.int8))
        K.column_combine[_grid2(out.shape[1], out.shape[0]), ELEMENT_BLOCK](dev(a), X, dev(b), Y, m, out)

    def _dot_into(self, a, b, out) -> None:
        rows = max(1, min(REDUCE_BLOCKS, -(-a.shape[0] // 8)))
        partial = self._partial.get(rows)
        if partial is None:
            partial = self._partial[rows] = cuda.device_array((rows, a.shape[1]), np.float64)
        K.col_dots[(rows, -(-a.shape[1] // 32)), ELEMENT_BLOCK](a, b, partial)
        K.column_sum[-(-a.shape[1] // 128), 128](partial, out)

    def dot(self, a, b) -> np.ndarray:
        out = cuda.device_array(a.shape[1], np.float64)
        self._dot_into(a, b, out)
        return out.copy_to_host()

    def dots(self, *pairs) -> list:
        out = cuda.device_array((len(pairs), pairs[0][0].shape[1]), np.float64)
        for p, (a, b) in enumerate(pairs):
            self._dot_into(a, b, out[p])
        host = out.copy_to_host()
        return [host[p] for p in range(len(pairs))]

    def zeros(self, shape):
        a = cuda.device_array(shape, np.float64)
        self._combine(0.0, a, 0.0, a, None, a)
        return a

    def zeros_like(self, a):
        return self.zeros(a.shape)

    def _new(self, a, alpha, b, beta):
        out = cuda.device_array(a.shape, np.float64)
        self._combine(alpha, a, beta, b, None, out)
        return out

    def copy(self, a):
        return self._new(a, 1.0, a, 0.0)

    def neg(self, a):
        return self._new(a, -1.0, a, 0.0)

    def add(self, a, b):
        return self._new(a, 1.0, b, 1.0)

    def axpy(self, alpha, x, y, mask) -> None:
        self._combine(alpha, x, 1.0, y, mask, y)

    def xpby(self, x, beta, y, mask) -> None:
        self._combine(1.0, x, beta, y, mask, y)

    def select(self, dst, src, mask) -> None:
        self._combine(1.0, src, 0.0, src, mask, dst)

    def to_host(self, a) -> np.ndarray:
        return a.copy_to_host()


class CudaSvmOps:
    backend_name = "cuda"

    def __init__(self, blocks: Blocks, columns: Columns):
        self.blocks, self.columns = blocks, columns
        self.n, self.m, self.k = blocks.n_rows, blocks.n_features, columns.k
        self.ms = blocks.n_sparse
        self.space = CudaColumnSpace(self.k)
        self.has_sparse = blocks.sparse is not None
        self.has_dense = blocks.dense is not None
        if self.has_sparse:
            X = blocks.sparse
            T = X.T.tocsr()
            self.d_csr = tuple(cuda.to_device(_nonempty(a)) for a in csr_arrays(X))
            self.d_csc = tuple(cuda.to_device(_nonempty(a)) for a in csr_arrays(T))
        tiles_k = -(-self.k // K.GEMM_TILE)
        if self.has_dense:
            md = blocks.dense.shape[1]
            self.d_dense = cuda.to_device(blocks.dense)
            self.d_dense_t = cuda.to_device(np.ascontiguousarray(blocks.dense.T))
            tiles = -(-md // K.GEMM_TILE) * tiles_k
            self.t_splits = int(max(1, min(16, -(-TARGET_BLOCKS // tiles), self.n // (4 * K.GEMM_SLAB) or 1)))
            self.d_partial_t = cuda.device_array((self.t_splits, md, self.k), np.float64)
        parts = int(self.has_sparse) + int(self.has_dense)
        self.d_partial = cuda.device_array((parts, self.n, self.k), np.float64)
        self.d_labels = cuda.to_device(np.ascontiguousarray(columns.labels, np.int32))
        self.d_folds = cuda.to_device(np.ascontiguousarray(columns.folds, np.int32))
        self.d_cls = cuda.to_device(np.ascontiguousarray(columns.cls, np.int32))
        self.d_group = cuda.to_device(np.ascontiguousarray(columns.group, np.int32))
        self.Z = self.space.zeros((self.n, self.k))
        self.Z_trial = self.space.zeros((self.n, self.k))
        self.U = self.space.zeros((self.n, self.k))
        self.T = self.space.zeros((self.m, self.k))
        self.loss_rows = max(1, min(REDUCE_BLOCKS, -(-self.n // 8)))
        self.d_loss_partial = cuda.device_array((self.loss_rows, self.k), np.float64)
        self.d_loss = cuda.device_array(self.k, np.float64)
        self.k_loss = K.hinge_loss_kernel()
        self.k_residual = K.hinge_residual_kernel()
        self.k_mask = K.hinge_mask_kernel()

    def zeros(self):
        return self.space.zeros((self.m, self.k))

    def _cols(self, cols):
        cols = np.arange(self.k, dtype=np.int64) if cols is None else np.asarray(cols, np.int64)
        return cols, cuda.to_device(cols)

    def _matmat(self, V, d_cols, nc: int, out) -> None:
        """out[:, cols] = X V[:, cols]: each block's product into a slice of the partial buffer,
        then one fixed-order sum of the slices."""
        p = 0
        if self.has_sparse:
            K.spmm[(min(65535, -(-self.n // 8)), -(-nc // 32)), ELEMENT_BLOCK](
                *self.d_csr, V[:self.ms], d_cols, self.d_partial[0])
            p = 1
        if self.has_dense:
            K.gemm_kernel(1)[(-(-self.n // K.GEMM_TILE), -(-nc // K.GEMM_TILE), 1), (16, 16)](
                self.d_dense, V[self.ms:], d_cols, self.d_partial[p:p + 1])
        K.split_reduce[_grid2(nc, self.n), ELEMENT_BLOCK](self.d_partial, d_cols, out)

    def _rmatmat(self, U, d_cols, nc: int, out) -> None:
        """out[:, cols] = X^T U[:, cols] (sparse rows through the CSC copy, dense rows by split-K GEMM)."""
        if self.has_sparse:
            K.spmm[(min(65535, -(-self.ms // 8)), -(-nc // 32)), ELEMENT_BLOCK](
                *self.d_csc, U, d_cols, out[:self.ms])
        if self.has_dense:
            md = self.m - self.ms
            K.gemm_kernel(self.t_splits)[(-(-md // K.GEMM_TILE), -(-nc // K.GEMM_TILE), self.t_splits), (16, 16)](
                self.d_dense_t, U, d_cols, self.d_partial_t)
            K.split_reduce[_grid2(nc, md), ELEMENT_BLOCK](self.d_partial_t, d_cols, out[self.ms:])

    def _hinge_args(self):
        return self.d_labels, self.d_folds, self.d_cls, self.d_group

    def evaluate(self, W, cols) -> np.ndarray:
        cols, d_cols = self._cols(cols)
        self._matmat(W, d_cols, cols.size, self.Z_trial)
        self.k_loss[(self.loss_rows, -(-cols.size // 32)), ELEMENT_BLOCK](
            self.Z_trial, *self._hinge_args(), d_cols, self.d_loss_partial)
        K.column_sum[-(-self.k // 128), 128](self.d_loss_partial, self.d_loss)
        loss = np.full(self.k, np.nan)
        loss[cols] = self.d_loss.copy_to_host()[cols]
        return loss

    def accept(self, mask) -> None:
        self.space.select(self.Z, self.Z_trial, mask)

    def _finish(self, A, scale, d_cols, nc: int, out) -> None:
        K.scaled_add[_grid2(nc, self.m), ELEMENT_BLOCK](A, cuda.to_device(np.ascontiguousarray(scale, np.float64)),
                                                         self.T, d_cols, out)

    def grad(self, W, scale, cols, out) -> None:
        cols, d_cols = self._cols(cols)
        self.k_residual[_grid2(cols.size, self.n), ELEMENT_BLOCK](self.Z, *self._hinge_args(), d_cols, self.U)
        self._rmatmat(self.U, d_cols, cols.size, self.T)
        self._finish(W, scale, d_cols, cols.size, out)

    def hess(self, D, scale, cols, out) -> None:
        cols, d_cols = self._cols(cols)
        self._matmat(D, d_cols, cols.size, self.U)
        self.k_mask[_grid2(cols.size, self.n), ELEMENT_BLOCK](self.Z, *self._hinge_args(), d_cols, self.U)
        self._rmatmat(self.U, d_cols, cols.size, self.T)
        self._finish(D, scale, d_cols, cols.size, out)

    def scores(self, W) -> np.ndarray:
        cols, d_cols = self._cols(None)
        out = cuda.device_array((self.n, self.k), np.float64)
        self._matmat(W, d_cols, cols.size, out)
        return out.copy_to_host()

