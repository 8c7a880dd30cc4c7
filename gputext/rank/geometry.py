"""Launch geometry of the RankSVM objective, the sizes and the arrays both backends keep
(gputext.rank.ops for the CPU twin, gputext.rank.cuda_ops for the device)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import ranksvm as K


@dataclass(frozen=True)
class RankGeometry:
    """Launch geometry (device) and chunking (CPU twin). Thread counts are powers of two.

    query_threads    threads per block of the per-query kernels (rank_structure, wavelet_sums)
    sort_capacity    longest query sorted in shared memory (power of two); longer ones are sorted
                     in global scratch by the same block
    matvec_threads   rows per block of dense X v; tile_cols: columns per shared-memory tile
    rmatvec_threads  threads per block of dense X^T u (0: the feature count rounded up to 32, at
                     most 1024); rows_per_block: rows each block sums (partials of X^T u)
    reduce_threads   threads of column_reduce, csc_rmatvec and eval_finish
    csr_threads, csr_group   sparse X v: threads per block, threads per row
    elementwise_blocks       grid of eval_finish / hess_finish (also the number of loss partials)
    cpu_rows_per_block, cpu_loss_parts   chunking of the CPU twin's X^T u and loss sums
    """

    query_threads: int = 128
    sort_capacity: int = 2048
    matvec_threads: int = 128
    tile_cols: int = 32
    rmatvec_threads: int = 0
    rows_per_block: int = 512
    reduce_threads: int = 256
    csr_threads: int = 128
    csr_group: int = 8
    elementwise_blocks: int = 1024
    cpu_rows_per_block: int = 4096
    cpu_loss_parts: int = 256

    def __post_init__(self):
        for name in ("query_threads", "sort_capacity", "matvec_threads", "reduce_threads", "csr_threads", "csr_group"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"RankGeometry.{name} must be a power of two, got {value}")
        if self.csr_group > self.csr_threads:
            raise ValueError("RankGeometry.csr_group must not exceed csr_threads")


def slot_arrays(alloc, n_docs: int, n_queries: int, n_levels: int) -> dict:
    """The arrays of one slot (current or trial), allocated by ``alloc(shape, dtype)``."""
    return dict(
        order=alloc((n_docs,), np.int32), ssorted=alloc((n_docs,), np.float64),
        vsorted=alloc((n_docs,), np.int32), lo=alloc((n_docs,), np.int32), hi=alloc((n_docs,), np.int32),
        seqrow=alloc((n_levels, n_docs), np.int32), rank0=alloc((n_levels, n_docs + n_queries), np.int32),
        beta_minus=alloc((n_docs,), np.int32), beta_plus=alloc((n_docs,), np.int32),
        z=alloc((n_docs,), np.float64),
    )


def solver_arrays(alloc, n_docs: int, n_queries: int, n_levels: int) -> dict:
    """The solver's arrays outside the slots, allocated by ``alloc(shape, dtype)``: scores s and u
    (n_docs,) float64; sweights, sums_minus, sums_plus (2, n_docs) float64; W0, W1 (n_levels,
    n_docs + n_queries) float64; vbuf, rbuf (2, n_docs) int32; a, alpha_minus, alpha_plus (1, n_docs)
    float64. The CPU twin keeps them under these names, the CUDA ops with a ``d_`` prefix."""
    L, Q = n_docs, n_queries
    return dict(
        s=alloc(L, np.float64), sweights=alloc((2, L), np.float64),
        sums_minus=alloc((2, L), np.float64), sums_plus=alloc((2, L), np.float64),
        W0=alloc((n_levels, L + Q), np.float64), W1=alloc((n_levels, L + Q), np.float64),
        vbuf=alloc((2, L), np.int32), rbuf=alloc((2, L), np.int32),
        a=alloc((1, L), np.float64), alpha_minus=alloc((1, L), np.float64), alpha_plus=alloc((1, L), np.float64),
        u=alloc(L, np.float64),
    )


class RankOpsSizes:
    """What both backends' ops keep of the problem: ``g`` (RankGeometry), ``data`` (RankingData),
    ``L`` documents, ``Q`` queries, ``m`` features and ``n_levels`` wavelet levels."""

    def __init__(self, data, geometry: RankGeometry | None = None):
        self.g = geometry or RankGeometry()
        self.data = data
        self.L, self.Q, self.m = data.n_docs, data.n_queries, data.n_features
        self.n_levels = K.n_levels_for(len(data.levels))
