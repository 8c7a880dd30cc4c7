"""The squared-hinge SVM's operations on a CUDA device (gputext.kernels.linear_svm for the kernels),
on gputext's device runtime (gputext/device/).

Imported only when the backend is cuda (ops.make_ops). Everything runs on the default stream, in
order; the host waits only where TRON needs numbers (dots, losses: one read-back each).

- Memory: X and every training-run buffer come from the ops object's ``Workspace`` (X, its
  transpose / CSC copy, labels, folds, per-column class and group go up in one
  ``upload_packed``); TRON's vectors come from a pool of workspace buffers that a vector returns
  to when TRON drops it (``CudaColumnSpace``), so after the first Newton step the training loop
  allocates nothing.
- Small inputs: every column update's coefficients (a, b, mask) and the per-column scale of a
  product travel as one (3, k) float64 slot of a pinned ring, copied asynchronously into the
  slot's device twin; the ring restarts at every read-back (the stream is then idle, so no copy
  is pending) and forces one wait when it wraps. Column lists are uploaded once per distinct set.
- Launches: the device runtime's ``LaunchSet``: one ``Launch`` per kernel (raw ``cuLaunchKernel``
  on a GPU, numba's dispatcher in the simulator); a call rewrites only the arguments that
  changed, arrays by address.
- Products: X W for the loss and the scores by GEMM (dense) and CSR rows (sparse) over every row.
  A dense block alone (the meta-features) takes the gradient and Hessian products over the
  active (row, column) pairs only, as the CPU twin does: the pair structure is rebuilt once per
  accepted point (count, one read-back for the offsets, ordered fill), then X_I d is one
  ``dense_pairs_forward`` and X_I^T u one ``dense_pairs_backward`` launch (20NG: 11% of rows x
  columns are active, and the dense GEMMs also filled a 64-column tile for ~16 running columns).
  Blocks with a sparse part keep the dense-row products (their goals are met; the pair kernels
  for CSR rows are the next step).

On the device for the whole training run: X (sparse block as CSR and a CSC copy; dense block
row-major and transposed, float32), labels, folds, per-column class and group, the margins Z of
the current and trial point (n x k float64 each), and TRON's vectors (n_features x k float64).
Every sum has a fixed order (kernels/linear_svm.py): deterministic.

Memory: X as stored twice (sparse 16 nnz bytes, dense 8 n md bytes) + 4 n k (Z, trial, U,
partials: 8 bytes each, partials times the split count) + about 10 n_features k float64 (W, G, H,
TRON's s, r, d, trial W, scratch) + 12 n k bytes of pair rows and values (dense block alone).
"""
from __future__ import annotations

import sys

import numpy as np

from ..device.launch import ArrayRef, LaunchSet, item, rows
from ..device.memory import Workspace
from ..io.corpus import csr_arrays
from ..kernels import linear_svm as K
from .problem import Blocks, Columns

ELEMENT_BLOCK = (32, 8)
MAX_ROW_BLOCKS = 2048  # grid rows of elementwise kernels (grid-stride beyond)
REDUCE_BLOCKS = 256  # row blocks of column reductions (fixed: the sums' order does not depend on k)
TARGET_BLOCKS = 264  # about two waves of an H100's 132 SMs: the split-K count aims at this many blocks
RING_SLOTS = 64  # coefficient slots between two waits (TRON reads back every few updates)


def _grid2(n_cols: int, n_rows: int) -> tuple[int, int]:
    return (max(1, -(-n_cols // 32)), max(1, min(MAX_ROW_BLOCKS, -(-n_rows // 8))))


def _nonempty(a: np.ndarray) -> np.ndarray:
    return a if len(a) else np.zeros(1, a.dtype)


class DeviceRun(LaunchSet):
    """One training run's launches, small uploads and read-backs (module docstring): the device
    runtime's ``LaunchSet`` plus the pinned ring of column coefficients."""

    def __init__(self, k: int):
        super().__init__()
        self.work = Workspace()
        self.k = k
        self.ring = self.work.get("coef_ring", (RING_SLOTS, 3, k), np.float64)
        self.ring_host = self.pinned.get("coef_ring", (RING_SLOTS, 3, k), np.float64)
        self.slot = 0

    def coefficients(self, a, b, mask) -> ArrayRef:
        """A device (3, k) float64 slot holding a, b and mask (scalars or (k,) arrays; mask None:
        every column), copied up asynchronously."""
        if self.slot == RING_SLOTS:
            self.wait()
        s = self.slot
        self.slot += 1
        host = self.ring_host[s]
        host[0] = a
        host[1] = b
        host[2] = 1.0 if mask is None else np.asarray(mask, np.float64)
        slot = item(self.ring, s)
        self.copy_up(slot, host)
        return slot

    def wait(self) -> None:
        """Wait for the stream; the coefficient ring starts over."""
        super().wait()
        self.slot = 0


class CudaColumnSpace:
    """TRON's column algebra on device (n, k) float64 arrays (see HostSpace in gputext.rank.tron):
    every update is one ``column_combine`` launch, out = a X + b Y on the masked columns.

    Vectors come from a pool of workspace buffers: a buffer is free again once no one but the pool
    holds it (its reference count is back to what it was when the pool made it)."""

    def __init__(self, run: DeviceRun, k: int):
        self.run = run
        self.k = k
        self.pool: list = []  # [array, its reference count while only the pool holds it]
        self._partial = {}
        self.allocations = 0

    def _vector(self, shape):
        shape = tuple(int(s) for s in shape)
        for entry in self.pool:
            arr = entry[0]
            if arr.shape == shape and sys.getrefcount(arr) == entry[1] + 1:  # + 1: the name `arr`
                return arr
        arr = self.run.work.get(f"vector{len(self.pool)}", shape, np.float64)
        self.pool.append([arr, 0])
        self.pool[-1][1] = sys.getrefcount(arr) - 1
        self.allocations += 1
        return arr

    def _combine(self, a, X, b, Y, mask, out) -> None:
        coef = self.run.coefficients(a, b, mask)
        self.run.launch(K.column_combine, _grid2(out.shape[1], out.shape[0]), ELEMENT_BLOCK, coef, X, Y, out)

    def _dot_into(self, a, b, out) -> None:
        rows = max(1, min(REDUCE_BLOCKS, -(-a.shape[0] // 8)))
        partial = self.run.work.get("dot_partial", (rows, a.shape[1]), np.float64)
        self.run.launch(K.col_dots, (rows, -(-a.shape[1] // 32)), ELEMENT_BLOCK, a, b, partial)
        self.run.launch(K.column_sum, -(-a.shape[1] // 128), 128, partial, out)

    def dots(self, *pairs) -> list:
        out = self.run.work.get("dots", (3, self.k), np.float64)
        for p, (a, b) in enumerate(pairs):
            self._dot_into(a, b, item(out, p))
        host = self.run.read(out, len(pairs))
        return [host[p] for p in range(len(pairs))]

    def dot(self, a, b) -> np.ndarray:
        return self.dots((a, b))[0]

    def zeros(self, shape):
        a = self._vector(shape)
        self._combine(0.0, a, 0.0, a, None, a)
        return a

    def zeros_like(self, a):
        return self.zeros(a.shape)

    def _new(self, a, alpha, b, beta):
        out = self._vector(a.shape)
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
        return self.run.read(a)


class CudaSvmOps:
    backend_name = "cuda"

    def __init__(self, blocks: Blocks, columns: Columns):
        self.blocks, self.columns = blocks, columns
        self.n, self.m, self.k = blocks.n_rows, blocks.n_features, columns.k
        self.ms = blocks.n_sparse
        self.run = run = DeviceRun(self.k)
        self.space = CudaColumnSpace(run, self.k)
        self.has_sparse = blocks.sparse is not None
        self.has_dense = blocks.dense is not None
        host = [np.ascontiguousarray(a, np.int32) for a in (columns.labels, columns.folds, columns.cls, columns.group)]
        if self.has_sparse:
            host += [_nonempty(a) for a in csr_arrays(blocks.sparse) + csr_arrays(blocks.sparse.T.tocsr())]
        if self.has_dense:
            host += [blocks.dense, np.ascontiguousarray(blocks.dense.T)]
        dev = run.res.upload_packed(host, into=run.work, name="svm_data")
        self.d_labels, self.d_folds, self.d_cls, self.d_group = dev[:4]
        rest = dev[4:]
        if self.has_sparse:
            self.d_csr, self.d_csc, rest = tuple(rest[:3]), tuple(rest[3:6]), rest[6:]
        parts = int(self.has_sparse) + int(self.has_dense)
        self.d_partial = run.work.get("partial", (parts, self.n, self.k), np.float64)
        if self.has_dense:
            self.d_dense, self.d_dense_t = rest
            md = blocks.dense.shape[1]
            tiles = -(-md // K.GEMM_TILE) * -(-self.k // K.GEMM_TILE)
            self.t_splits = int(max(1, min(16, -(-TARGET_BLOCKS // tiles), self.n // (4 * K.GEMM_SLAB) or 1)))
            self.d_partial_t = run.work.get("partial_t", (self.t_splits, md, self.k), np.float64)
            self.p_dense = rows(self.d_partial, parts - 1, parts)
        self.Z = self.space.zeros((self.n, self.k))
        self.Z_trial = self.space.zeros((self.n, self.k))
        self.U = self.space.zeros((self.n, self.k))
        self.T = self.space.zeros((self.m, self.k))
        self.loss_rows = max(1, min(REDUCE_BLOCKS, -(-self.n // 8)))
        self.d_loss_partial = run.work.get("loss_partial", (self.loss_rows, self.k), np.float64)
        self.d_loss = run.work.get("loss", (self.k,), np.float64)
        self.k_loss = K.hinge_loss_kernel()
        self.k_rows = K.hinge_rows_kernel()
        self._col_sets: dict = {}  # column list bytes -> device int64 array (uploaded once)
        self.use_pairs = self.has_dense and not self.has_sparse
        self.generation = 0  # accepted points so far (the pair structure follows it)
        if self.use_pairs:
            self._init_pairs()

    def zeros(self):
        return self.space.zeros((self.m, self.k))

    def _init_pairs(self) -> None:
        """Buffers of the active-pair structure (a dense block alone): counts, ptr (k + 1,) int64,
        rows int32 and vals float64 with room for every (row, column) pair."""
        work = self.run.work
        self.k_count, self.k_fill = K.active_pairs_kernels()
        self.d_counts = work.get("pair_counts", (self.k + 1,), np.int64)
        self.d_counts.copy_to_device(np.zeros(self.k + 1, np.int64))
        self.d_ptr = work.get("pair_ptr", (self.k + 1,), np.int64)
        self.d_rows = work.get("pair_rows", (max(1, self.n * self.k),), np.int32)
        self.d_vals = work.get("pair_vals", (max(1, self.n * self.k),), np.float64)
        self.pair_counts = np.zeros(self.k, np.int64)
        self.pairs_generation = -1
        self.pairs_built = 0

    def _pairs(self) -> None:
        """The active (row, column) pairs of the current point for every column, rebuilt once per
        accepted point: count per column, one read-back for the offsets, fill."""
        if self.pairs_generation == self.generation:
            return
        threads = K.ACTIVE_THREADS
        self.run.launch(self.k_count, self.k, threads, self.Z, *self._hinge_args(), self.d_counts)
        counts = self.run.read(self.d_counts)
        ptr = np.cumsum(counts)
        self.d_ptr.copy_to_device(ptr)
        self.run.launch(self.k_fill, self.k, threads, self.Z, *self._hinge_args(), self.d_ptr, self.d_rows)
        self.pair_counts = counts[1:]
        self.pairs_generation = self.generation
        self.pairs_built += 1

    def _pair_grid(self, cols, per_block: int) -> tuple[int, int]:
        return max(1, -(-int(self.pair_counts[cols].max(initial=0)) // per_block)), cols.size

    def _pairs_backward(self, d_cols, nc: int) -> None:
        """T[:, cols] = X_I^T vals (the pairs' values, column by column)."""
        self.run.launch(K.dense_pairs_backward, (-(-self.m // 128), nc), 128, self.d_dense, self.d_ptr, self.d_rows,
                        self.d_vals, d_cols, self.T)

    def _cols(self, cols):
        """(host int64 columns, their device copy): one upload per distinct set."""
        cols = np.arange(self.k, dtype=np.int64) if cols is None else np.asarray(cols, np.int64)
        key = cols.tobytes()
        d = self._col_sets.get(key)
        if d is None:
            d = self.run.work.get(f"cols{len(self._col_sets)}", (max(1, cols.size),), np.int64)
            d.copy_to_device(_nonempty(cols))
            self._col_sets[key] = d
        return cols, d

    def _matmat(self, V, d_cols, nc: int, out) -> None:
        """out[:, cols] = X V[:, cols]: each block's product into a slice of the partial buffer,
        then one fixed-order sum of the slices."""
        run = self.run
        if self.has_sparse:
            run.launch(K.spmm, (min(65535, -(-self.n // 8)), -(-nc // 32)), ELEMENT_BLOCK,
                       *self.d_csr, rows(V, 0, self.ms), d_cols, item(self.d_partial, 0))
        if self.has_dense:
            run.launch(K.gemm, (-(-self.n // K.GEMM_TILE), -(-nc // K.GEMM_TILE), 1), (16, 16),
                       self.d_dense, rows(V, self.ms, self.m), d_cols, self.p_dense)
        run.launch(K.split_reduce, _grid2(nc, self.n), ELEMENT_BLOCK, self.d_partial, d_cols, out)

    def _rmatmat(self, U, d_cols, nc: int, out) -> None:
        """out[:, cols] = X^T U[:, cols] (sparse rows through the CSC copy, dense rows by split-K GEMM)."""
        run = self.run
        if self.has_sparse:
            run.launch(K.spmm, (min(65535, -(-self.ms // 8)), -(-nc // 32)), ELEMENT_BLOCK,
                       *self.d_csc, U, d_cols, rows(out, 0, self.ms))
        if self.has_dense:
            md = self.m - self.ms
            run.launch(K.gemm, (-(-md // K.GEMM_TILE), -(-nc // K.GEMM_TILE), self.t_splits), (16, 16),
                       self.d_dense_t, U, d_cols, self.d_partial_t)
            run.launch(K.split_reduce, _grid2(nc, md), ELEMENT_BLOCK, self.d_partial_t, d_cols, rows(out, self.ms, self.m))

    def _hinge_args(self):
        return self.d_labels, self.d_folds, self.d_cls, self.d_group

    def evaluate(self, W, cols) -> np.ndarray:
        cols, d_cols = self._cols(cols)
        self._matmat(W, d_cols, cols.size, self.Z_trial)
        self.run.launch(self.k_loss, (self.loss_rows, -(-cols.size // 32)), ELEMENT_BLOCK,
                        self.Z_trial, *self._hinge_args(), d_cols, self.d_loss_partial)
        self.run.launch(K.column_sum, -(-self.k // 128), 128, self.d_loss_partial, self.d_loss)
        loss = np.full(self.k, np.nan)
        loss[cols] = self.run.read(self.d_loss)[cols]
        return loss

    def accept(self, mask) -> None:
        self.space.select(self.Z, self.Z_trial, mask)
        self.generation += 1

    def _finish(self, A, scale, d_cols, nc: int, out) -> None:
        slot = self.run.coefficients(scale, 0.0, None)  # row 0 of the slot: the scale
        self.run.launch(K.scaled_add, _grid2(nc, self.m), ELEMENT_BLOCK, A, ArrayRef(slot.base, slot.start, (self.k,)),
                        self.T, d_cols, out)

    def grad(self, W, scale, cols, out) -> None:
        cols, d_cols = self._cols(cols)
        if self.use_pairs:
            self._pairs()
            self.run.launch(K.pair_residual, self._pair_grid(cols, 256), 256, self.Z, self.d_labels, self.d_cls,
                            self.d_ptr, self.d_rows, d_cols, self.d_vals)
            self._pairs_backward(d_cols, cols.size)
            self._finish(W, scale, d_cols, cols.size, out)
            return
        self.run.launch(self.k_rows, _grid2(cols.size, self.n), ELEMENT_BLOCK, self.Z, *self._hinge_args(), d_cols,
                        self.U, 0)
        self._rmatmat(self.U, d_cols, cols.size, self.T)
        self._finish(W, scale, d_cols, cols.size, out)

    def hess(self, D, scale, cols, out) -> None:
        cols, d_cols = self._cols(cols)
        if self.use_pairs:
            self._pairs()
            self.run.launch(K.dense_pairs_forward, self._pair_grid(cols, K.PAIRS_PER_BLOCK), K.PAIR_THREADS,
                            self.d_dense, D, self.d_ptr, self.d_rows, d_cols, self.d_vals)
            self._pairs_backward(d_cols, cols.size)
            self._finish(D, scale, d_cols, cols.size, out)
            return
        self._matmat(D, d_cols, cols.size, self.U)
        self.run.launch(self.k_rows, _grid2(cols.size, self.n), ELEMENT_BLOCK, self.Z, *self._hinge_args(), d_cols,
                        self.U, 1)
        self._rmatmat(self.U, d_cols, cols.size, self.T)
        self._finish(D, scale, d_cols, cols.size, out)

    def counters(self) -> dict:
        """What the device did for TRON: launches, read-backs (waits), pair-structure builds,
        vector buffers in the pool."""
        return {"device_launches": self.run.n_launches, "device_read_backs": self.run.n_reads,
                "pair_structures": getattr(self, "pairs_built", 0), "vector_buffers": len(self.space.pool)}

    def scores(self, W) -> np.ndarray:
        cols, d_cols = self._cols(None)
        self._matmat(W, d_cols, cols.size, self.U)
        return self.run.read(self.U)
