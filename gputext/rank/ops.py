"""Backend operations of the RankSVM objective: the CPU twin here, the device in cuda_ops.py.

Both keep the data (X, grouping, label ranks) and every per-document array (scores, sorted
order, wavelet levels, beta+/-, z) in their own memory across TRON's iterations; the host sees
only length-n_features float64 vectors and the loss:

    ops.evaluate(w) -> loss          scores, sort, pair structure, loss and z at w (trial slot)
    ops.accept()                     the trial slot becomes the current one (step accepted)
    ops.xt_z() -> X^T z              (n_features,) at the current w (gradient part)
    ops.xt_hess(v) -> X^T u          u = A^T A X v at the current w (Hessian-vector part)
    ops.scores(w) -> X w             float64, grouped rows
    ops.statistics() -> dict         current per-row beta-, beta+, z (host copies, for tests)

evaluate, xt_z and xt_hess are the query blocks' partial sums (``evaluate_blocks`` (G,),
``xt_z_blocks`` and ``xt_hess_blocks`` (G, n_features)) added in block order
(geometry.RankOpsSizes, geometry.query_blocks): a Dask part returns its blocks' partial sums and
the client adds them the same way (gputext.distributed.rank), so the bits do not depend on how
many parts there are.

Two slots (current, trial) let TRON evaluate a trial point without losing the structure at the
current point when the step is rejected.
"""
from __future__ import annotations

from contextlib import contextmanager

import numba
import numpy as np

from ..backend import Backend
from ..kernels import products as P
from ..kernels import ranksvm as K
from .data import RankingData
from .geometry import RankGeometry, RankOpsSizes, slot_arrays, solver_arrays

__all__ = ["RankGeometry", "CpuRankOps", "make_ops", "matvec", "threads_for", "cpu_threads_limited"]


WORK_PER_THREAD = 1 << 20
"""Stored feature entries per CPU thread below which the CPU twin uses fewer threads: a parallel
region costs tens of microseconds on an idle machine and milliseconds on an oversubscribed one,
more than a small problem's whole product."""


def threads_for(work: int) -> int:
    """Threads for a CPU-twin call touching ``work`` stored entries: all of numba's threads for large
    problems, fewer (down to 1) for small ones."""
    return int(max(1, min(numba.get_num_threads(), work // WORK_PER_THREAD)))


@contextmanager
def cpu_threads_limited(work: int):
    """Run numba parallel loops with threads_for(work) threads, then restore the previous count."""
    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(previous, threads_for(work))))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def unsigned(indices: np.ndarray) -> np.ndarray:
    """int32 column (or row) indices as uint32, for the CPU twin's sparse products: numba indexes
    with an unsigned integer without the negative-index wrap-around test it adds to every signed
    load, which is ~15% of csr_matvec_cpu's time (same values, same bits)."""
    return indices.astype(np.uint32)


class CpuRankOps(RankOpsSizes):
    """The CPU twin: numba parallel loops over rows, columns and queries (all of numba's threads
    for large problems, fewer for small ones: see threads_for)."""

    backend_name = "cpu"

    def __init__(self, data: RankingData, geometry: RankGeometry | None = None, blocks: np.ndarray | None = None,
                 dense: bool | None = None):
        super().__init__(data, geometry, blocks, dense)
        L, Q, m = self.L, self.Q, self.m
        self.dense = data.dense_matrix() if self.is_dense else None
        self.work = max(data.X.nnz, 8 * L)  # entries touched per product (threads_for)
        if self.dense is None:
            # float64 values (exact): the same products as float32 ones, a little faster in the
            # row-order X^T u; no CSC copy, so the memory is what the copy took
            self.indptr, self.indices, self.values = data.csr()
            self.indices, self.values = unsigned(self.indices), self.values.astype(np.float64)
        self.starts = data.starts
        self.lrank = data.label_rank
        alloc = lambda shape, dtype: np.zeros(shape, dtype)  # noqa: E731
        self.slots = [slot_arrays(alloc, L, Q, self.n_levels) for _ in range(2)]
        self.current, self.trial = 0, 1
        self.__dict__.update(solver_arrays(alloc, L, Q, self.n_levels))
        self.loss_blocks = np.zeros(self.G, np.float64)
        self.partial = np.zeros((self.G, m), np.float64)

    # X v and X^T u
    def _matvec(self, v: np.ndarray, out: np.ndarray) -> None:
        v = np.ascontiguousarray(v, dtype=np.float64)
        if self.dense is not None:
            P.dense_matvec_cpu(self.dense, v, out)
        else:
            P.csr_matvec_cpu(self.indptr, self.indices, self.values, v, out)

    def _rmatvec_blocks(self, u: np.ndarray) -> np.ndarray:
        """X^T u per query block, (G, m) float64 (a copy)."""
        if self.dense is not None:
            K.dense_rmatvec_cpu(self.dense, u, self.block_rows, self.partial)
        else:
            K.csr_rmatvec_cpu(self.indptr, self.indices, self.values, u, self.block_rows, self.partial)
        return self.partial.copy()

    def scores(self, w: np.ndarray) -> np.ndarray:
        with cpu_threads_limited(self.work):
            self._matvec(w, self.s)
        return self.s.copy()

    def evaluate_blocks(self, w: np.ndarray) -> np.ndarray:
        with cpu_threads_limited(self.work):
            return self._evaluate(w)

    def _evaluate(self, w: np.ndarray) -> np.ndarray:
        S = self.slots[self.trial]
        self._matvec(w, self.s)
        K.rank_structure_cpu(self.starts, self.s, self.lrank, self.n_levels, S["order"], S["ssorted"], self.sweights,
                             S["vsorted"], S["lo"], S["hi"], S["seqrow"], S["rank0"], self.vbuf, self.rbuf,
                             S["beta_minus"], S["beta_plus"])
        K.wavelet_sums_cpu(self.starts, S["order"], S["vsorted"], S["lo"], S["hi"], S["seqrow"], S["rank0"],
                           self.n_levels, self.sweights, 1, self.W0, self.W1, self.sums_minus, self.sums_plus)
        K.eval_finish_cpu(self.sweights, S["beta_minus"], S["beta_plus"], self.sums_minus, self.sums_plus, S["z"],
                          self.block_rows, self.loss_blocks)
        return self.loss_blocks.copy()

    def accept(self) -> None:
        self.current, self.trial = self.trial, self.current

    def xt_z_blocks(self) -> np.ndarray:
        with cpu_threads_limited(self.work):
            return self._rmatvec_blocks(self.slots[self.current]["z"])

    def xt_hess_blocks(self, v: np.ndarray) -> np.ndarray:
        with cpu_threads_limited(self.work):
            return self._xt_hess(v)

    def _xt_hess(self, v: np.ndarray) -> np.ndarray:
        S = self.slots[self.current]
        self._matvec(v, self.a[0])
        K.wavelet_sums_cpu(self.starts, S["order"], S["vsorted"], S["lo"], S["hi"], S["seqrow"], S["rank0"],
                           self.n_levels, self.a, 1, self.W0, self.W1, self.alpha_minus, self.alpha_plus)
        K.hess_finish_cpu(S["beta_minus"], S["beta_plus"], self.a[0], self.alpha_minus[0], self.alpha_plus[0], self.u)
        return self._rmatvec_blocks(self.u)

    def statistics(self) -> dict:
        S = self.slots[self.current]
        return {k: S[k].copy() for k in ("beta_minus", "beta_plus", "z", "order", "lo", "hi")}


def make_ops(data: RankingData, backend: Backend, geometry: RankGeometry | None = None,
             blocks: np.ndarray | None = None, dense: bool | None = None):
    """The backend's ops for ``data``: CpuRankOps, or CudaRankOps (imported only for cuda).
    blocks, dense: the query blocks and X's layout (geometry.RankOpsSizes; None: those of ``data``)."""
    if backend.is_cuda:
        from .cuda_ops import CudaRankOps
        return CudaRankOps(data, geometry, blocks, dense)
    return CpuRankOps(data, geometry, blocks, dense)


def matvec(X, w: np.ndarray, backend: Backend, geometry: RankGeometry | None = None) -> np.ndarray:
    """X w in float64 on the backend (prediction). X: canonical CSR float32."""
    from ..io.corpus import csr_arrays

    w = np.ascontiguousarray(w, dtype=np.float64)
    n, m = X.shape
    dense = n > 0 and m > 0 and X.nnz == n * m
    if backend.is_cuda:
        from .cuda_ops import device_matvec
        return device_matvec(X, w, dense, geometry or RankGeometry())
    out = np.zeros(n, np.float64)
    with cpu_threads_limited(max(X.nnz, 8 * n)):
        if dense:
            P.dense_matvec_cpu(np.ascontiguousarray(X.data, dtype=np.float32).reshape(n, m), w, out)
        else:
            indptr, indices, data = csr_arrays(X)
            P.csr_matvec_cpu(indptr, unsigned(indices), data, w, out)
    return out
