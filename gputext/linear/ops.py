"""Backend operations of the one-vs-rest squared-hinge objective: the CPU twin here, the device in
cuda_ops.py (gputext.kernels.linear_svm for the kernels).

Both keep X (and its transpose: a CSC copy of the sparse block, a transposed copy of the dense
block), the row labels and folds, and the margins Z = X W of the current and the trial point
(per column) in their own memory; TRON's vectors are (n_features, k) float64 arrays of the same
memory, combined through ``space``. The host sees per-column scalars only.

    ops.evaluate(W, cols) -> loss (k,)   Z_trial[:, cols] = X W[:, cols]; squared-hinge sums
    ops.accept(mask)                     Z_current = Z_trial on the masked columns
    ops.grad(W, scale, cols, out)        out[:, cols] = W + scale X^T r  (r = z - y on the active rows)
    ops.hess(D, scale, cols, out)        out[:, cols] = D + scale X^T (X D on the active rows)
    ops.scores(W) -> (n, k) host         X W
"""
from __future__ import annotations

import numpy as np

from ..io.corpus import csr_arrays
from ..kernels import linear_svm as K
from ..kernels import products as P
from ..rank.ops import cpu_threads_limited
from ..rank.tron import HostSpace
from .problem import Blocks, Columns

DOT_PARTS = 64  # row chunks of the CPU twin's column reductions (fixed: results do not depend on threads)


def select_columns(dst: np.ndarray, src: np.ndarray, mask) -> None:
    """dst[:, j] = src[:, j] for the columns with mask[j] (one numpy copy; no arithmetic)."""
    np.copyto(dst, src, where=np.asarray(mask, bool)[None, :])


def _all(cols, k: int) -> np.ndarray:
    return np.arange(k, dtype=np.int64) if cols is None else np.asarray(cols, np.int64)


class CpuColumnSpace(HostSpace):
    """TRON's column algebra on host (n, k) float64 arrays with numba parallel loops: HostSpace
    (gputext.rank.tron) with its dot and masked updates replaced. Each runs with the threads its
    size earns (gputext.rank.ops.cpu_threads_limited): a TRON vector of 20NG's meta-features
    (1,841 x 120) is a fraction of a millisecond of work, and a parallel region on the loaded
    2-core VM cost 13-26 ms per call (cProfile, 2026-11-25: col_dots_cpu 26 ms, masked_axpy_cpu (now masked_combine_cpu)
    13 ms, a third of a meta-features fit). The sums' order does not depend on the threads."""

    def dot(self, a, b) -> np.ndarray:
        out = np.empty(a.shape[1])
        with cpu_threads_limited(a.size):
            K.col_dots_cpu(a, b, np.empty((DOT_PARTS, a.shape[1])), out)
        return out

    def axpy(self, alpha, x, y, mask) -> None:
        """y += alpha x (a x + 1 y: the same bits, 1 y and the sum's order being exact)."""
        with cpu_threads_limited(y.size):
            K.masked_combine_cpu(np.ascontiguousarray(alpha, np.float64), x, self._ones(y), y, mask.astype(np.int8), y)

    def xpby(self, x, beta, y, mask) -> None:
        with cpu_threads_limited(y.size):
            K.masked_combine_cpu(self._ones(y), x, np.ascontiguousarray(beta, np.float64), y, mask.astype(np.int8), y)

    def select(self, dst, src, mask) -> None:
        select_columns(dst, src, mask)

    @staticmethod
    def _ones(y) -> np.ndarray:
        return np.ones(y.shape[1], np.float64)

    def to_host(self, a) -> np.ndarray:
        return a


class HostMatrix:
    """X as the CPU twin's products take it: CSR + CSC copy of the sparse block, the dense block
    and its transpose."""

    def __init__(self, blocks: Blocks):
        self.ms = blocks.n_sparse
        self.m = blocks.n_features
        sparse, dense = blocks.sparse, blocks.dense
        self.n = blocks.n_rows
        self.csr = self.csc = self.dense = self.dense_t = None
        if sparse is not None:
            self.csr = csr_arrays(sparse)
            self.csc = csr_arrays(sparse.T.tocsr())
        if dense is not None:
            self.dense = np.ascontiguousarray(dense)
            self.dense_t = np.ascontiguousarray(dense.T)

    def matmat(self, V: np.ndarray) -> np.ndarray:
        """X V for a compact V (m, kc) -> (n, kc)."""
        out = np.zeros((self.n, V.shape[1]))
        if self.csr is not None:
            P.csr_matmat_cpu(*self.csr, np.ascontiguousarray(V[:self.ms]), out)
        if self.dense is not None:
            part = np.empty_like(out)
            P.dense_matmat_cpu(self.dense, np.ascontiguousarray(V[self.ms:]), part)
            out = out + part if self.csr is not None else part
        return out

    def rmatmat(self, U: np.ndarray) -> np.ndarray:
        """X^T U for a compact U (n, kc) -> (m, kc)."""
        out = np.empty((self.m, U.shape[1]))
        if self.csc is not None:
            P.csr_matmat_cpu(*self.csc, U, out[:self.ms])
        if self.dense_t is not None:
            P.dense_matmat_cpu(self.dense_t, U, out[self.ms:])
        return out

    def pairs_forward(self, VT: np.ndarray, ptr, rows) -> np.ndarray:
        """Per active pair (row, column j): X[row] . V[:, j]; VT (kc, m) compact."""
        vals = np.zeros(rows.size)
        if self.csr is not None:
            K.csr_pairs_forward_cpu(*self.csr, np.ascontiguousarray(VT[:, :self.ms]), ptr, rows, vals)
        if self.dense is not None:
            part = np.empty_like(vals)
            K.dense_pairs_forward_cpu(self.dense, np.ascontiguousarray(VT[:, self.ms:]), ptr, rows, part)
            vals = vals + part if self.csr is not None else part
        return vals

    def pairs_backward(self, ptr, rows, vals) -> np.ndarray:
        """(m, kc): column j = sum over its pairs of vals * X[row]."""
        kc = ptr.size - 1
        GT = np.empty((kc, self.m))
        if self.csr is not None:
            part = np.empty((kc, self.ms))
            K.csr_pairs_backward_cpu(*self.csr, ptr, rows, vals, part)
            GT[:, :self.ms] = part
        if self.dense is not None:
            part = np.empty((kc, self.m - self.ms))
            K.dense_pairs_backward_cpu(self.dense, ptr, rows, vals, part)
            GT[:, self.ms:] = part
        return np.ascontiguousarray(GT.T)


class CpuSvmOps:
    """The CPU twin: numba parallel products on the columns a call touches (copied into a compact
    (rows, len(cols)) array first, so a CG step on a few unconverged columns costs only those).
    Gradient and Hessian products visit only the active (row, column) pairs (inactive pairs add
    exact zeros), like LIBLINEAR's X_I products: the pair lists are built once per (accepted point,
    column set), each column's sums run over its active rows in ascending order."""

    backend_name = "cpu"

    def __init__(self, blocks: Blocks, columns: Columns):
        self.space = CpuColumnSpace()
        self.blocks, self.columns = blocks, columns
        self.n, self.m, self.k = blocks.n_rows, blocks.n_features, columns.k
        self.X = HostMatrix(blocks)
        self.Z = np.zeros((self.n, self.k))  # current point's margins
        self.Z_trial = np.zeros((self.n, self.k))
        self.generation = 0
        self._pairs_key = None
        self._pairs_val = None
        self.active_pairs_seen = []  # (active pairs, rows x columns) per pair structure (diagnostics)

    def zeros(self):
        return np.zeros((self.m, self.k))

    def _col_meta(self, cols):
        return self.columns.cls[cols], self.columns.group[cols]

    def evaluate(self, W, cols) -> np.ndarray:
        cols = _all(cols, self.k)
        Zc = self.X.matmat(np.ascontiguousarray(W[:, cols]))
        self.Z_trial[:, cols] = Zc
        loss = np.full(self.k, np.nan)
        out = np.empty(cols.size)
        K.hinge_loss_cpu(Zc, self.columns.labels, self.columns.folds, *self._col_meta(cols),
                         np.empty((DOT_PARTS, cols.size)), out)
        loss[cols] = out
        return loss

    def accept(self, mask) -> None:
        with cpu_threads_limited(self.Z.size):
            select_columns(self.Z, self.Z_trial, mask)
        self.generation += 1

    def _finish(self, A, scale, cols, T, out) -> None:
        part = np.empty_like(T)
        with cpu_threads_limited(T.size):
            K.scaled_add_cpu(np.ascontiguousarray(A[:, cols]), np.ascontiguousarray(scale[cols]), T, part)
        out[:, cols] = part

    def _pairs(self, cols):
        """Active (row, column) pairs of the current point for the columns ``cols``, cached per
        (accepted point, column set)."""
        key = (self.generation, cols.tobytes())
        if self._pairs_key != key:
            self._pairs_val = K.active_pairs_cpu(np.ascontiguousarray(self.Z[:, cols]), self.columns.labels,
                                                 self.columns.folds, *self._col_meta(cols))
            self._pairs_key = key
            self.active_pairs_seen.append((self._pairs_val[1].size, self.n * cols.size))
        return self._pairs_val

    def grad(self, W, scale, cols, out) -> None:
        cols = _all(cols, self.k)
        ptr, rows = self._pairs(cols)
        Zc = self.Z[:, cols]
        lab = self.columns.labels[rows]
        cls = np.repeat(self.columns.cls[cols], np.diff(ptr))
        z = Zc[rows, np.repeat(np.arange(cols.size), np.diff(ptr))]
        vals = z - np.where(lab == cls, 1.0, -1.0)
        self._finish(W, scale, cols, self.X.pairs_backward(ptr, rows, vals), out)

    def hess(self, D, scale, cols, out) -> None:
        cols = _all(cols, self.k)
        ptr, rows = self._pairs(cols)
        vals = self.X.pairs_forward(np.ascontiguousarray(D[:, cols].T), ptr, rows)
        self._finish(D, scale, cols, self.X.pairs_backward(ptr, rows, vals), out)

    def scores(self, W) -> np.ndarray:
        return self.X.matmat(np.ascontiguousarray(W))


def make_ops(blocks: Blocks, columns: Columns, backend):
    """CpuSvmOps, or CudaSvmOps (imported only for cuda)."""
    if backend.is_cuda:
        from .cuda_ops import CudaSvmOps
        return CudaSvmOps(blocks, columns)
    return CpuSvmOps(blocks, columns)
