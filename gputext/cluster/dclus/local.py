"""The update's local graph stage: the symmetric graph of the connected components it touches.

Only the old PCCs of the affected components are read from disk (adj_indices only, one read per
run of consecutive PCCs, runs closer than store.READ_GAP entries merged, into one buffer:
``load_rows``); with the new vertices' owner rows they give the symmetric adjacency of the
affected components in local ids (``local_graph``: host.symmetric_from_owner, a parallel
counting-sort transpose and per-row merge), checked against the stored degrees.  No weights are
needed: relevance reads the degrees and fixed-point sums, the cover the structure.
"""
from __future__ import annotations

from dataclasses import dataclass

import h5py
import numpy as np

from ..graph import StarGraph
from .host import symmetric_from_owner
from .pccs import UnionPCCs
from .score import OwnerRows
from .store import GraphOnDisk, load_pcc_rows, symmetric_chunks


@dataclass
class LoadedRows:
    """Owner rows of the affected old PCCs as read, with the new vertices' rows after them in
    one index buffer: positions int64 (m_old,) (storage order), row_start / row_len int64 into
    ``buf`` (int32); tail: where the new rows start in buf."""

    positions: np.ndarray
    row_start: np.ndarray
    row_len: np.ndarray
    buf: np.ndarray
    tail: int

    @property
    def n_entries(self) -> int:
        return int(self.row_len.sum())


@dataclass
class LocalGraph:
    """The affected components as one graph in local ids: ``graph`` (weights not loaded),
    vertices int64 (m,) ascending global ids of its local rows, local_of int32 (n_total,) the
    reverse map (-1 outside), n_old_vertices: how many of them are old."""

    graph: StarGraph
    vertices: np.ndarray
    local_of: np.ndarray
    n_old_vertices: int


def load_rows(path: str, meta: GraphOnDisk, pccs: UnionPCCs, rows: OwnerRows) -> LoadedRows:
    """Read the stored owner rows of the affected old PCCs; append the new owner rows' indices."""
    with h5py.File(path, "r") as f:
        positions, row_start, row_len, buf = load_pcc_rows(f, meta, pccs.old_affected, extra=len(rows.idx))
    tail = len(buf) - len(rows.idx)
    buf[tail:] = rows.idx  # the new owner rows after the loaded ones: one index array
    return LoadedRows(positions, row_start, row_len, buf, tail)


def _local_lookup(vertices: np.ndarray, n_total: int) -> np.ndarray:
    """Dense global -> local id table (int32, -1 elsewhere)."""
    table = np.full(n_total, -1, np.int32)
    table[vertices] = np.arange(len(vertices), dtype=np.int32)
    return table


def local_graph(meta: GraphOnDisk, pccs: UnionPCCs, rows: OwnerRows, loaded: LoadedRows) -> LocalGraph:
    """The symmetric graph of the affected components (old vertices of the loaded PCCs, then
    every new vertex), vertices in ascending global id."""
    n_old, n_new = meta.n_docs, len(rows.ptr) - 1
    n_total = n_old + n_new
    old_vertices = meta.order[loaded.positions].astype(np.int64)
    vertices = np.concatenate([np.sort(old_vertices), np.arange(n_old, n_total, dtype=np.int64)])
    local_of = _local_lookup(vertices, n_total)
    m = len(vertices)
    start = np.empty(m, np.int64)
    length = np.empty(m, np.int64)
    lo = local_of[old_vertices]
    start[lo] = loaded.row_start
    length[lo] = loaded.row_len
    start[m - n_new:] = loaded.tail + rows.ptr[:-1]
    length[m - n_new:] = np.diff(rows.ptr)
    indptr, indices, _ = symmetric_from_owner(start, length, loaded.buf, np.empty(0, np.float32), local_of,
                                              symmetric_chunks(m), False)
    local_degree = np.diff(indptr).astype(np.int32)
    if not np.array_equal(local_degree, pccs.degree[vertices]):
        raise AssertionError("the loaded components disagree with the stored degrees")
    graph = StarGraph(m, indptr, indices, np.empty(0, np.float32), local_degree, pccs.weight_sum[vertices])
    return LocalGraph(graph, vertices, local_of, int(len(old_vertices)))
