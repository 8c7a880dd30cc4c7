"""RankSVM training data-parallel by query groups on a Dask cluster (gputext.rank.train with client=).

The grouped training data is cut at query boundaries into one part per worker (near-equal
documents); each worker keeps its part's RankSVM ops (gputext.rank.ops: the CPU twin, or the
device's on a GPU worker) for the run. TRON runs here: DistributedRankOps has the ops interface
(evaluate, accept, xt_z, xt_hess, scores), each call goes to every part, and the parts' losses and
vectors are summed here in float64 in part order, so a run repeats exactly for a given number of
parts. With one part the run is the single-process one, bit for bit. With several, sums are
regrouped by part: each loss, gradient or Hessian-vector component differs from the
single-process sum by at most (parts - 1) ulp-sized roundings (|error| <= (n_parts - 1) * 2**-52 *
sum |terms|), and TRON's iterates follow to about that relative accuracy (tests: weights within
1e-9 relative, same Newton steps).

Worker state: every task carries the accepted point w (and evaluate its trial point); a worker
that lacks the part's ops or holds another point rebuilds them (evaluate at w, accept), so a task
moved to another worker gives the same numbers. Parts are scattered from this process: a part
whose only copy was on a worker that died is lost (one-line error; re-run).
"""
from __future__ import annotations

import uuid

import numpy as np

from .run import gather, worker_addresses

_OPS: dict = {}  # in each worker process: token -> [ops, accepted w, trial w]


def split_queries(starts: np.ndarray, n_parts: int) -> np.ndarray:
    """Query boundaries q_0 = 0 < ... < q_P = n_queries cutting the documents into near-equal parts."""
    n_q = len(starts) - 1
    n_parts = max(1, min(int(n_parts), n_q))
    targets = np.arange(1, n_parts) * (starts[-1] / n_parts)
    cuts = np.searchsorted(starts, targets, side="left")
    return np.unique(np.concatenate([[0], np.clip(cuts, 0, n_q), [n_q]]).astype(np.int64))


def part_of(data, q_lo: int, q_hi: int):
    """The RankingData of queries [q_lo, q_hi) (same relevance levels, so the same ranks)."""
    from ..rank.data import RankingData, count_pairs
    from ..io.corpus import canonical_csr
    r0, r1 = int(data.starts[q_lo]), int(data.starts[q_hi])
    starts = data.starts[q_lo:q_hi + 1] - r0
    rank = data.label_rank[r0:r1]
    return RankingData(canonical_csr(data.X[r0:r1]), starts, data.query_ids[q_lo:q_hi], rank, data.levels,
                       data.perm[r0:r1], count_pairs(starts, rank))


# ----------------------------------------------------------------------------- on the workers


def _state(token, part, device, geometry, w_accepted):
    """The worker's [ops, accepted w, trial w] for the part, brought to the accepted point."""
    from ..backend import resolve
    from ..rank.ops import make_ops
    from .client import limit_threads
    limit_threads()
    st = _OPS.get(token)
    if st is None:
        st = _OPS[token] = [make_ops(part, resolve(device), geometry), None, None]
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
    loss = st[0].evaluate(w)
    st[2] = w
    return loss


def task_xt_z(token, part, device, geometry, w_accepted):
    return _state(token, part, device, geometry, w_accepted)[0].xt_z()


def task_xt_hess(token, part, device, geometry, w_accepted, v):
    return _state(token, part, device, geometry, w_accepted)[0].xt_hess(v)


def task_scores(token, part, device, geometry, w_accepted, w):
    return _state(token, part, device, geometry, w_accepted)[0].scores(w)


def task_drop(token) -> None:
    _OPS.pop(token, None)


# ----------------------------------------------------------------------------- on the client


class DistributedRankOps:
    """The RankSVM ops interface (gputext.rank.ops) over query-group parts on Dask workers."""

    backend_name = "dask"

    def __init__(self, client, data, device: str = "auto", geometry=None, n_parts: int | None = None):
        self.client = client
        workers = worker_addresses(client)
        bounds = split_queries(data.starts, n_parts or len(workers))
        self.n_parts = len(bounds) - 1
        self.workers = [workers[p % len(workers)] for p in range(self.n_parts)]
        self.token = uuid.uuid4().hex
        self.device, self.geometry = device, geometry
        parts = [data] if self.n_parts == 1 else [part_of(data, bounds[p], bounds[p + 1]) for p in range(self.n_parts)]
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

    @staticmethod
    def _sum(values):
        total = values[0]
        for v in values[1:]:  # fixed order: part 0, 1, ... (float64)
            total = total + v
        return total

    def evaluate(self, w: np.ndarray) -> float:
        w = np.ascontiguousarray(w, dtype=np.float64).copy()
        loss = float(self._sum([float(x) for x in self._each(task_evaluate, w)]))
        self.w_trial = w
        return loss

    def accept(self) -> None:
        self.w_accepted, self.w_trial = self.w_trial, self.w_accepted

    def xt_z(self) -> np.ndarray:
        return self._sum(self._each(task_xt_z))

    def xt_hess(self, v: np.ndarray) -> np.ndarray:
        return self._sum(self._each(task_xt_hess, np.ascontiguousarray(v, dtype=np.float64)))

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
