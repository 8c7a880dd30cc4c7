"""Launch geometry of the RankSVM objective and the per-slot arrays both backends keep
(gputext.rank.ops for the CPU twin, gputext.rank.cuda_ops for the device)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
