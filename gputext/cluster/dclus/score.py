"""The update's score stage: the new documents' edges, as the owner rows of the new vertices.

Only the new documents are scored: against the old collection and against the new documents
after them (upper triangle), as one index of the stacked corpus [new; old] with the new
documents as queries (gputext.cluster.graph.addition_rows: the device graph build on cuda, the
engine on the CPU, same bits); the rows become the new vertices' owner rows
(kernels.star.addition_owner_rows): each new vertex owns its edges to old vertices and to the
new vertices after it (the neighbours CUDA-DClus examines when it processes the vertex).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...backend import Backend
from ...kernels import star as kstar
from ..graph import addition_rows
from .host import owner_rows_in_order


@dataclass
class OwnerRows:
    """Owner rows of the new vertices (vertex order; global ids, ascending within a row):
    ptr int64 (n_new+1,), idx int32 (E,), w float32 (E,)."""

    ptr: np.ndarray
    idx: np.ndarray
    w: np.ndarray

    @property
    def n_edges(self) -> int:
        return int(len(self.idx))


def score(old_X, new_X, beta: float, backend: Backend, batch_size: int | None = None, quiet: bool = True,
          engine_geometry=None, edges=None) -> OwnerRows:
    """The new vertices' owner rows: scored on ``backend`` (old_X, new_X CSR), or from ``edges``
    = (new_old, new_new) as returned by graph.score_additions (tests feed the paper's hand-made
    similarities)."""
    n_old, n_new = old_X.shape[0], new_X.shape[0]
    if edges is not None:
        return OwnerRows(*new_owner_rows(n_old, n_new, *edges))
    up = addition_rows(old_X, new_X, beta, backend, batch_size, quiet, engine_geometry)
    return OwnerRows(*kstar.addition_owner_rows(up[0], up[1], up[2], n_new, n_old))


def new_owner_rows(n_old: int, n_new: int, new_old, new_new):
    """Owner rows of the new vertices (vertex order, global ids, ascending within a row): each
    new vertex owns its edges to old vertices and to the new vertices after it (the neighbours
    CUDA-DClus examines when it processes the vertex: Suc_v U (V \\ M)).
    Returns (ptr int64 (n_new+1,), indices int32, weights float32)."""
    o_old, o_new, o_w = (np.ascontiguousarray(x, t) for x, t in zip(new_old, (np.int32, np.int32, np.float32)))
    a, b, w = (np.ascontiguousarray(x, t) for x, t in zip(new_new, (np.int32, np.int32, np.float32)))
    ok, ptr, idx, val = owner_rows_in_order(n_old, n_new, o_old, o_new, o_w, a, b, w)
    if ok:
        return ptr, idx, val
    # any order (tests feed hand-made edges): sort by (owner, neighbour)
    lo = np.minimum(a, b).astype(np.int64)
    hi = np.maximum(a, b).astype(np.int64)
    rows = np.concatenate([o_new.astype(np.int64), lo]) - n_old
    cols = np.concatenate([o_old.astype(np.int64), hi])
    vals = np.concatenate([o_w, w])
    if len(rows) and (rows.min() < 0 or rows.max() >= n_new or cols.min() < 0 or cols.max() >= n_old + n_new
                      or np.any(o_old >= n_old)):
        raise AssertionError("an added edge does not join a new document to an old or a later new one")
    key = rows * (n_old + n_new) + cols
    order = np.argsort(key, kind="stable")
    rows, cols, vals, key = rows[order], cols[order], vals[order], key[order]
    if len(key) > 1 and np.any(key[1:] == key[:-1]):
        raise AssertionError("an added edge is given twice")
    ptr = np.zeros(n_new + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_new), out=ptr[1:])
    return ptr, cols.astype(np.int32), vals
