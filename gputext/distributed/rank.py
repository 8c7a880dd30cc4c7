"""RankSVM training data-parallel by query groups on a Dask cluster (gputext.rank.train with client=).

The training set's query blocks (gputext.rank.geometry.query_blocks: at most 256 runs of whole
queries, fixed by the data alone) are cut into one part per worker (whole blocks, near-equal
documents); each worker keeps its part's RankSVM ops (gputext.rank.ops: the CPU twin, or the
device's on a GPU worker) for the run. TRON runs here: DistributedRankOps has the ops interface
(evaluate, accept, xt_z, xt_hess, scores), each call goes to every part, every part returns its
blocks' partial sums (loss, X^T z, X^T u per block), and they are added here in global block
order by the function the single-process ops use (geometry.sum_in_order). Each block's sum depends
only on its own rows, so the loss, the gradient and every Hessian product, and so TRON's iterates
and the weights, are the single process's bit for bit, for any number of parts (1 to 256; more
workers than blocks stay idle). Tests: tests/test_distributed.py, 1, 2 and 3 workers.

Worker state: every task carries the accepted point w (and evaluate its trial point); a worker
that lacks the part's ops or holds another point rebuilds them (evaluate at w, accept), so a task
moved to another worker gives the same numbers. Parts are scattered from this process: a part
whose only copy was on a worker that died is lost (one-line error; re-run). Given the file the data
came from (``source``; `gputext rank train --scheduler` passes it) and when every worker sees it,
a part is only its recipe (FilePart: which rows, and 12 bytes a row of ranks and ids): its worker
reads its rows from the file, instead of the client sending them (2026-11-28: the 4 x H100 round's
RankSVM on 10x MSLR-WEB30K shipped about 37 GB through Dask).
"""
from __future__ import annotations

import os
import uuid

import numpy as np

from ..rank.geometry import query_blocks, split_queries, sum_in_order
from .run import gather, worker_addresses

_OPS: dict = {}  # in each worker process: token -> [ops, accepted w, trial w]


def part_of(data, q_lo: int, q_hi: int):
    """The RankingData of queries [q_lo, q_hi) (same relevance levels, so the same ranks)."""
    from ..io.corpus import canonical_csr
    r0, r1 = int(data.starts[q_lo]), int(data.starts[q_hi])
    return _assemble(canonical_csr(data.X[r0:r1]), *_part_arrays(data, q_lo, q_hi))


def _part_arrays(data, q_lo: int, q_hi: int) -> tuple:
    """(starts from 0, query ids, label ranks, levels, input rows) of queries [q_lo, q_hi)."""
    r0, r1 = int(data.starts[q_lo]), int(data.starts[q_hi])
    return (data.starts[q_lo:q_hi + 1] - r0, data.query_ids[q_lo:q_hi], data.label_rank[r0:r1], data.levels,
            data.perm[r0:r1])


def _assemble(X, starts, query_ids, rank, levels, perm):
    from ..rank.data import RankingData, count_pairs
    return RankingData(X, starts, query_ids, rank, levels, perm, count_pairs(starts, rank))


def row_runs(rows: np.ndarray) -> list:
    """The runs of consecutive values of ``rows`` (int64), in order, as [start, stop) pairs."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == 0:
        return []
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    first, last = np.concatenate(([0], cut)), np.concatenate((cut, [rows.size]))
    return [(int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(first, last)]


class FilePart:
    """A part that its worker reads from the training file (a path every worker sees) instead of
    receiving it from the client: its rows as runs of the file's rows (one run when the file is
    grouped by query already) and its small arrays (12 bytes a row, against the rows' features)."""

    def __init__(self, path: str, data, q_lo: int, q_hi: int):
        self.path = path
        self.arrays = _part_arrays(data, q_lo, q_hi)
        self.runs = row_runs(self.arrays[-1])

    def load(self):
        """The part's RankingData: part_of's bit for bit (the same rows, canonical as written)."""
        from ..io.corpus import canonical_csr, read_row_pieces
        return _assemble(canonical_csr(read_row_pieces([(self.path, a, b) for a, b in self.runs])), *self.arrays)


def workers_see(client, path: str) -> bool:
    """Whether every worker of ``client`` sees ``path`` as this process does (the same size)."""
    try:
        size = os.path.getsize(path)
        sizes = client.run(os.path.getsize, path, on_error="return")
    except Exception:
        return False
    return bool(sizes) and all(v == size for v in sizes.values())


# ----------------------------------------------------------------------------- on the workers


def _state(token, part, device, geometry, w_accepted):
    """The worker's [ops, accepted w, trial w] for the part ((RankingData, its query blocks, the
    whole set's X layout)), brought to the accepted point."""
    from ..backend import resolve
    from ..rank.ops import make_ops
    from .client import limit_threads
    limit_threads()
    st = _OPS.get(token)
    if st is None:
        data = part[0].load() if isinstance(part[0], FilePart) else part[0]
        st = _OPS[token] = [make_ops(data, resolve(device), geometry, part[1], part[2]), None, None]
    ops = st[0]
    if w_accepted is not None and not _same(st[1], w_accepted):
        if not _same(st[2], w_accepted):
            ops.evaluate(w_accepted)
        ops.accept()
        st[1], st[2] = w_accepted, st[1]
    return st


def _same(a, b) -> bool:
    return a is not None and b is not None and np.array_equal(a, b)


def task_evaluate(token, part, device, geometry, w_accepted, w):
    st = _state(token, part, device, geometry, w_accepted)
    losses = st[0].evaluate_blocks(w)
    st[2] = w
    return losses


def task_xt_z(token, part, device, geometry, w_accepted):
    return _state(token, part, device, geometry, w_accepted)[0].xt_z_blocks()


def task_xt_hess(token, part, device, geometry, w_accepted, v):
    return _state(token, part, device, geometry, w_accepted)[0].xt_hess_blocks(v)


def task_scores(token, part, device, geometry, w_accepted, w):
    return _state(token, part, device, geometry, w_accepted)[0].scores(w)


def task_drop(token) -> None:
    _OPS.pop(token, None)


# ----------------------------------------------------------------------------- on the client


class DistributedRankOps:
    """The RankSVM ops interface (gputext.rank.ops) over query-group parts on Dask workers."""

    backend_name = "dask"

    def __init__(self, client, data, device: str = "auto", geometry=None, n_parts: int | None = None,
                 source: str | None = None):
        """source: the file ``data`` was read from (gputext.rank.data.from_corpus of read_corpus(source));
        when every worker sees it, each worker reads its part's rows from it (FilePart) instead of
        receiving them from here (``self.from_file``)."""
        self.client = client
        workers = worker_addresses(client)
        blocks = query_blocks(data.starts, data.X.nnz, data.n_features)
        cuts = split_queries(data.starts[blocks], n_parts or len(workers))  # whole blocks per part
        bounds = blocks[cuts]
        self.n_parts = len(bounds) - 1
        self.workers = [workers[p % len(workers)] for p in range(self.n_parts)]
        self.token = uuid.uuid4().hex
        self.device, self.geometry = device, geometry
        self.from_file = source is not None and workers_see(client, source)
        if self.from_file:
            parts = [FilePart(source, data, bounds[p], bounds[p + 1]) for p in range(self.n_parts)]
        elif self.n_parts == 1:
            parts = [data]
        else:
            parts = [part_of(data, bounds[p], bounds[p + 1]) for p in range(self.n_parts)]
        # (part, its query blocks, the whole set's X layout: a full part of sparse data still sums as sparse)
        parts = [(part, blocks[cuts[p]:cuts[p + 1] + 1] - blocks[cuts[p]], data.is_dense)
                 for p, part in enumerate(parts)]
        self.rows = [(int(data.starts[bounds[p]]), int(data.starts[bounds[p + 1]])) for p in range(self.n_parts)]
        self.parts = [client.scatter(part, workers=[w], hash=False) for part, w in zip(parts, self.workers)]
        self.n_docs = data.n_docs
        self.w_accepted: np.ndarray | None = None
        self.w_trial: np.ndarray | None = None

    def _each(self, fn, *args, what="RankSVM training") -> list:
        futures = [self.client.submit(fn, f"{self.token}:{p}", self.parts[p], self.device, self.geometry,
                                      self.w_accepted, *args, workers=[self.workers[p]], allow_other_workers=True,
                                      pure=False) for p in range(self.n_parts)]
        return gather(self.client, futures, what)

    def evaluate(self, w: np.ndarray) -> float:
        w = np.ascontiguousarray(w, dtype=np.float64).copy()
        losses = np.concatenate(self._each(task_evaluate, w))  # global block order
        self.w_trial = w
        return float(sum_in_order(losses[:, None])[0])

    def accept(self) -> None:
        self.w_accepted, self.w_trial = self.w_trial, self.w_accepted

    def xt_z(self) -> np.ndarray:
        return sum_in_order(np.concatenate(self._each(task_xt_z)))

    def xt_hess(self, v: np.ndarray) -> np.ndarray:
        return sum_in_order(np.concatenate(self._each(task_xt_hess, np.ascontiguousarray(v, dtype=np.float64))))

    def scores(self, w: np.ndarray) -> np.ndarray:
        """X w (float64) in the data's grouped row order."""
        parts = self._each(task_scores, np.ascontiguousarray(w, dtype=np.float64))
        return np.concatenate(parts)

    def close(self) -> None:
        try:
            for p in range(self.n_parts):
                self.client.run(task_drop, f"{self.token}:{p}")
        except Exception:
            pass
