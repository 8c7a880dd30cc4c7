"""The RankSVM objective's operations on a CUDA device (gputext.kernels.ranksvm_cuda for the kernels).

Imported only when the backend is cuda (ops.make_ops). X (dense row-major float32, or CSR plus a
CSC copy for X^T u), the grouping, label ranks, scores, the sorted order, the wavelet levels,
beta+/-, z and all scratch stay on the device for the whole training run. Per TRON step the host
sends w (n_features float64) and receives the loss; per CG step it sends v and receives X^T u
(n_features float64 each way): the query blocks' partial sums (geometry.query_blocks, G <= 256)
added in block order on the device by geometry.sum_in_order's arithmetic. A Dask part
(``*_blocks``) receives the G values or G x n_features numbers themselves.

Memory (n = n_docs, Q = queries, B = wavelet levels, m = features): X as stored (dense: 4 n m
bytes; sparse: 8 nnz CSR + 8 nnz CSC), two slots of 36 n + 4 B (2 n + Q) bytes, and
8 (10 n + 2 B (n + Q)) + 16 n bytes of scratch (with the per-row loss terms), plus the sort
scratch of queries longer than ``sort_capacity`` (12 bytes per padded element).
"""
from __future__ import annotations

import itertools

import numpy as np
from numba import cuda

from ..device.launch import ArrayRef, LaunchSet, blocks as grid_blocks, item, next_pow2
from ..device.memory import Workspace

from ..kernels import ranksvm_cuda as KC
from .data import RankingData
from .geometry import RankGeometry, RankOpsSizes, block_chunks, slot_arrays, solver_arrays


class CudaRankOps(RankOpsSizes):
    backend_name = "cuda"

    def __init__(self, data: RankingData, geometry: RankGeometry | None = None, blocks: np.ndarray | None = None,
                 dense: bool | None = None):
        super().__init__(data, geometry, blocks, dense)
        g, L, Q, m = self.g, self.L, self.Q, self.m
        self.run = run = LaunchSet()
        self.work = Workspace()
        self.dense = self.is_dense
        # global sort scratch for queries longer than sort_capacity
        sizes = np.diff(data.starts)
        goff = np.full(Q, -1, np.int64)
        total = 0
        for t in np.flatnonzero(sizes > g.sort_capacity):
            goff[t] = total
            total += next_pow2(int(sizes[t]))
        chunk_rows, self.chunk_of_block = block_chunks(self.block_rows, g.rows_per_block)
        host = [data.starts, data.label_rank, goff, self.block_rows, chunk_rows, self.chunk_of_block]
        if self.dense:
            host.append(data.dense_matrix())
        else:
            host += [_nonempty(a) for a in (*data.csr(), *data.csc())]
        dev = run.res.upload_packed(host, into=self.work, name="rank_data")  # one transfer
        self.d_starts, self.d_lrank, self.d_goff, self.d_block_rows, self.d_chunk_rows, self.d_chunk_of_block = dev[:6]
        self.k_reduce = KC.segment_reduce_kernel(g.reduce_threads)
        if self.dense:
            self.d_X = dev[6]
            self.rm_threads = g.rmatvec_threads or min(1024, max(32, -(-m // 32) * 32))
            self.n_chunks = len(chunk_rows) - 1
            self.d_partial = self.work.get("partial", (m, self.n_chunks), np.float64)
            self.k_matvec = KC.dense_matvec_kernel(g.matvec_threads, g.tile_cols)
        else:
            self.d_indptr, self.d_indices, self.d_values, self.d_colptr, self.d_colrows, self.d_colvalues = dev[6:]
            self.k_csr = KC.csr_matvec_kernel(g.csr_threads, g.csr_group)
            self.k_csc = KC.csc_rmatvec_blocks_kernel(g.reduce_threads)
        self.d_gkeys = self.work.get("gkeys", (max(total, 1),), np.float64)
        self.d_gidx = self.work.get("gidx", (max(total, 1),), np.int32)
        names = itertools.count()
        alloc = lambda shape, dtype: self.work.get(f"a{next(names)}", shape, dtype)  # noqa: E731
        self.slots = [slot_arrays(alloc, L, Q, self.n_levels) for _ in range(2)]
        self.current, self.trial = 0, 1
        self.__dict__.update({"d_" + name: a for name, a in solver_arrays(alloc, L, Q, self.n_levels).items()})
        self.d_a0, self.d_alpha_minus0, self.d_alpha_plus0 = (item(a, 0) for a in (self.d_a, self.d_alpha_minus,
                                                                                     self.d_alpha_plus))
        self.d_v = self.work.get("v", (m,), np.float64)
        self.v_ref = ArrayRef(self.d_v, 0, (m,))
        self.v_host = run.pinned.get("v", (m,), np.float64)
        self.d_out = self.work.get("out", (self.G, m), np.float64)
        self.d_loss_rows = self.work.get("loss_rows", (1, L), np.float64)
        self.d_loss_blocks = self.work.get("loss_blocks", (self.G, 1), np.float64)
        self.d_sum = self.work.get("sum", (m,), np.float64)
        self.d_loss_sum = self.work.get("loss_sum", (1,), np.float64)
        self.k_structure = KC.rank_structure_kernel(g.query_threads, g.sort_capacity)
        self.k_sums = KC.wavelet_sums_kernel(g.query_threads)

    # X v and X^T u
    def _matvec(self, d_v, d_out) -> None:
        g = self.g
        if self.dense:
            self.run.launch(self.k_matvec, grid_blocks(self.L, g.matvec_threads), g.matvec_threads, self.d_X, d_v, d_out)
        else:
            rows = g.csr_threads // g.csr_group
            self.run.launch(self.k_csr, grid_blocks(self.L, rows), g.csr_threads,
                            self.d_indptr, self.d_indices, self.d_values, d_v, d_out)

    def _rmatvec(self, d_u) -> None:
        """X^T u per query block into d_out (G, m) float64."""
        g, run = self.g, self.run
        pairs = min(self.G * self.m, 65535)
        if self.dense:
            run.launch(KC.dense_rmatvec_partial, self.n_chunks, self.rm_threads,
                       self.d_X, d_u, self.d_chunk_rows, self.d_partial)
            run.launch(self.k_reduce, pairs, g.reduce_threads, self.d_partial, self.d_chunk_of_block, self.d_out)
        else:
            run.launch(self.k_csc, pairs, g.reduce_threads,
                       self.d_colptr, self.d_colrows, self.d_colvalues, d_u, self.d_block_rows, self.d_out)

    def _in_order(self, d_blocks, d_sum) -> np.ndarray:
        """The blocks' rows added in block order on the device, read back: geometry.sum_in_order's
        arithmetic (per column, from 0.0, blocks 0, 1, ...: the same bits), n columns back instead
        of G x n (the single process's path; a Dask part reads its blocks)."""
        self.run.launch(KC.rows_in_order, grid_blocks(d_sum.shape[0], 128), 128, d_blocks, d_sum)
        return self.run.read(d_sum)

    def _send(self, w: np.ndarray):
        """w up through the pinned buffer, asynchronously: every caller reads a result back (and
        so waits) before the next send reuses the buffer."""
        self.v_host[:] = w
        self.run.copy_up(self.v_ref, self.v_host)
        return self.d_v

    def scores(self, w: np.ndarray) -> np.ndarray:
        self._matvec(self._send(w), self.d_s)
        return self.run.read(self.d_s)

    def _evaluate(self, w: np.ndarray) -> None:
        """The trial slot's structure, z and the query blocks' losses (d_loss_blocks) at w."""
        g, run = self.g, self.run
        S = self.slots[self.trial]
        self._matvec(self._send(w), self.d_s)
        run.launch(self.k_structure, self.Q, g.query_threads,
                   self.d_starts, self.d_s, self.d_lrank, self.n_levels, self.d_goff, self.d_gkeys, self.d_gidx,
                   S["order"], S["ssorted"], self.d_sweights, S["vsorted"], S["lo"], S["hi"], S["seqrow"], S["rank0"],
                   self.d_vbuf, self.d_rbuf, S["beta_minus"], S["beta_plus"])
        run.launch(self.k_sums, self.Q, g.query_threads,
                   self.d_starts, S["order"], S["vsorted"], S["lo"], S["hi"], S["seqrow"], S["rank0"], self.n_levels,
                   self.d_sweights, 1, self.d_W0, self.d_W1, self.d_sums_minus, self.d_sums_plus)
        run.launch(KC.eval_rows, g.elementwise_blocks, g.reduce_threads,
                   self.d_sweights, S["beta_minus"], S["beta_plus"], self.d_sums_minus, self.d_sums_plus, S["z"],
                   self.d_loss_rows)
        run.launch(self.k_reduce, self.G, g.reduce_threads, self.d_loss_rows, self.d_block_rows, self.d_loss_blocks)

    def evaluate_blocks(self, w: np.ndarray) -> np.ndarray:
        self._evaluate(w)
        return self.run.read(self.d_loss_blocks)[:, 0].copy()

    def evaluate(self, w: np.ndarray) -> float:
        self._evaluate(w)
        return float(self._in_order(self.d_loss_blocks, self.d_loss_sum)[0])

    def accept(self) -> None:
        self.current, self.trial = self.trial, self.current

    def xt_z_blocks(self) -> np.ndarray:
        self._rmatvec(self.slots[self.current]["z"])
        return self.run.read(self.d_out)

    def xt_z(self) -> np.ndarray:
        self._rmatvec(self.slots[self.current]["z"])
        return self._in_order(self.d_out, self.d_sum)

    def _hess(self, v: np.ndarray) -> None:
        """X^T u per query block (d_out) for the Hessian product with v at the current point."""
        g, run = self.g, self.run
        S = self.slots[self.current]
        self._matvec(self._send(v), self.d_a0)
        run.launch(self.k_sums, self.Q, g.query_threads,
                   self.d_starts, S["order"], S["vsorted"], S["lo"], S["hi"], S["seqrow"], S["rank0"], self.n_levels,
                   self.d_a, 1, self.d_W0, self.d_W1, self.d_alpha_minus, self.d_alpha_plus)
        run.launch(KC.hess_finish, g.elementwise_blocks, g.reduce_threads,
                   S["beta_minus"], S["beta_plus"], self.d_a0, self.d_alpha_minus0, self.d_alpha_plus0, self.d_u)
        self._rmatvec(self.d_u)

    def xt_hess_blocks(self, v: np.ndarray) -> np.ndarray:
        self._hess(v)
        return self.run.read(self.d_out)

    def xt_hess(self, v: np.ndarray) -> np.ndarray:
        self._hess(v)
        return self._in_order(self.d_out, self.d_sum)

    def statistics(self) -> dict:
        S = self.slots[self.current]
        return {k: self.run.read(S[k]) for k in ("beta_minus", "beta_plus", "z", "order", "lo", "hi")}

    def synchronize(self) -> None:
        self.run.wait()


def _nonempty(a: np.ndarray) -> np.ndarray:
    return a if len(a) else np.zeros(1, a.dtype)


def device_matvec(X, w: np.ndarray, dense: bool, g: RankGeometry) -> np.ndarray:
    """X w (float64) on the device for prediction; X canonical CSR float32."""
    from ..io.corpus import csr_arrays

    n, m = X.shape
    if n == 0:
        return np.zeros(0, np.float64)
    d_w = cuda.to_device(np.ascontiguousarray(w, dtype=np.float64))
    d_out = cuda.device_array(n, np.float64)
    if dense:
        d_X = cuda.to_device(np.ascontiguousarray(X.data, dtype=np.float32).reshape(n, m))
        KC.dense_matvec_kernel(g.matvec_threads, g.tile_cols)[grid_blocks(n, g.matvec_threads), g.matvec_threads](d_X, d_w, d_out)
    else:
        indptr, indices, data = csr_arrays(X)
        kern = KC.csr_matvec_kernel(g.csr_threads, g.csr_group)
        kern[grid_blocks(n, g.csr_threads // g.csr_group), g.csr_threads](
            cuda.to_device(indptr), cuda.to_device(_nonempty(indices)), cuda.to_device(_nonempty(data)), d_w, d_out)
    return d_out.copy_to_host()
