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
    reduce_threads   threads of segment_reduce and csc_rmatvec_blocks
    csr_threads, csr_group   sparse X v: threads per block, threads per row
    elementwise_blocks       grid of eval_rows / hess_finish
    (the sums over documents are cut by query blocks, see query_blocks, not by the geometry)
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


MAX_QUERY_BLOCKS = 256
"""At most this many query blocks (so at most this many Dask parts for RankSVM)."""

ENTRIES_PER_BLOCK_COLUMN = 128
"""At least this many stored feature entries per query block and feature: the blocks' partial sums
(G x n_features numbers per product) stay a small fraction of a product's work."""


def split_queries(starts: np.ndarray, n_parts: int) -> np.ndarray:
    """Query boundaries q_0 = 0 < ... < q_P = n_queries cutting the documents into near-equal parts
    (starts (Q+1,) int64: the first row of each query; at most n_queries parts)."""
    n_q = len(starts) - 1
    n_parts = max(1, min(int(n_parts), n_q))
    targets = np.arange(1, n_parts) * (starts[-1] / n_parts)
    cuts = np.searchsorted(starts, targets, side="left")
    return np.unique(np.concatenate([[0], np.clip(cuts, 0, n_q), [n_q]]).astype(np.int64))


def query_blocks(starts: np.ndarray, n_entries: int, n_features: int) -> np.ndarray:
    """The query blocks of a training set: query boundaries (G+1,) int64 cutting its documents into
    G near-equal runs of whole queries, G = min(queries, MAX_QUERY_BLOCKS, n_entries /
    (ENTRIES_PER_BLOCK_COLUMN n_features)), at least 1.

    A function of the data alone (never of the number of Dask parts): the loss and X^T u are summed
    per block, each in an order fixed by the block's own rows, and the blocks are added in block
    order, so any cut of the blocks into parts gives the same bits (kernels/ranksvm.py)."""
    n_q = len(starts) - 1
    if n_q < 1:
        return np.zeros(2, np.int64)
    per_block = ENTRIES_PER_BLOCK_COLUMN * max(1, int(n_features))
    return split_queries(starts, min(n_q, MAX_QUERY_BLOCKS, max(1, int(n_entries) // per_block)))


def block_chunks(block_rows: np.ndarray, rows_per_chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query block's rows cut into chunks of at most rows_per_chunk rows from the block's first
    row: (chunk_rows (n_chunks+1,) int64 row boundaries, chunk_of_block (G+1,) int64 the first chunk
    of each block). A chunk's rows depend only on its own block (the device's dense X^T u)."""
    sizes = np.diff(block_rows)
    per_block = np.maximum(1, -(-sizes // rows_per_chunk))
    chunk_of_block = np.concatenate([[0], np.cumsum(per_block)]).astype(np.int64)
    local = np.arange(chunk_of_block[-1]) - np.repeat(chunk_of_block[:-1], per_block)
    rows = np.minimum(np.repeat(block_rows[:-1], per_block) + local * rows_per_chunk, np.repeat(block_rows[1:], per_block))
    return np.concatenate([rows, block_rows[-1:]]).astype(np.int64), chunk_of_block


class RankOpsSizes:
    """What both backends' ops keep of the problem: ``g`` (RankGeometry), ``data`` (RankingData),
    ``L`` documents, ``Q`` queries, ``m`` features, ``n_levels`` wavelet levels, and the query
    blocks: ``blocks`` (G+1,) query boundaries, ``block_rows`` their first rows, ``G``.

    blocks: the query blocks to use (a Dask part passes its slice of the whole training set's,
    gputext.distributed.rank); None: query_blocks of ``data``. ``dense``: read X as a dense matrix
    (the products' summation order differs on the device); None: when every row stores every
    feature (data.is_dense). A Dask part passes the whole training set's, so that a part of sparse
    data whose rows happen to be full sums as the whole does."""

    def __init__(self, data, geometry: RankGeometry | None = None, blocks: np.ndarray | None = None,
                 dense: bool | None = None):
        self.g = geometry or RankGeometry()
        self.data = data
        self.is_dense = data.is_dense if dense is None else bool(dense) and data.is_dense
        self.L, self.Q, self.m = data.n_docs, data.n_queries, data.n_features
        self.n_levels = K.n_levels_for(len(data.levels))
        if blocks is None:
            blocks = query_blocks(data.starts, data.X.nnz, self.m)
        self.blocks = np.asarray(blocks, np.int64)
        self.block_rows = np.ascontiguousarray(data.starts[self.blocks], np.int64)
        self.G = len(self.blocks) - 1

    def evaluate(self, w: np.ndarray) -> float:
        """The loss at w: the query blocks' losses (evaluate_blocks) added in block order."""
        return float(sum_in_order(self.evaluate_blocks(w)[:, None])[0])

    def xt_z(self) -> np.ndarray:
        """X^T z at the current point: xt_z_blocks added in block order."""
        return sum_in_order(self.xt_z_blocks())

    def xt_hess(self, v: np.ndarray) -> np.ndarray:
        """X^T u for the Hessian product with v: xt_hess_blocks added in block order."""
        return sum_in_order(self.xt_hess_blocks(v))


def sum_in_order(partial: np.ndarray) -> np.ndarray:
    """The rows of a (G, m) float64 array added in row order (kernels.ranksvm.sum_rows_in_order):
    the one way query blocks' partial sums are added, in a single process and on a Dask client."""
    partial = np.ascontiguousarray(partial, dtype=np.float64)
    out = np.empty(partial.shape[1], np.float64)
    K.sum_rows_in_order(partial, out)
    return out
