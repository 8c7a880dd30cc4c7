"""The L2-loss linear RankSVM objective from per-query pair statistics (the paper's eq. 11-13).

    f(w)     = 1/2 w.w + C * sum over active pairs (i, j), y_i > y_j, same query, of (1 - w.(x_i - x_j))^2
    grad f   = w + 2C X^T z,   z_i = (beta+_i + beta-_i) s_i - (gamma+_i + gamma-_i) - (beta-_i - beta+_i)
    H v      = v + 2C X^T u,   u_i = (beta+_i + beta-_i) (X v)_i - (alpha+_i + alpha-_i)

(a pair is active when 1 - (s_i - s_j) > 0; H is LIBLINEAR's generalised Hessian). Nothing here
enumerates pairs: gputext.kernels.ranksvm computes the statistics per query in O(n log n).
All host arithmetic is float64.
"""
from __future__ import annotations

import numpy as np

from ..backend import Backend, as_backend
from .data import RankingData
from .ops import RankGeometry, make_ops


class RankObjective:
    """f, grad f and H v of one training set and one C on one backend.

    TRON's protocol (as LIBLINEAR's function objects): ``fun(w)`` evaluates a point and keeps its
    pair structure as the *trial*; ``accept()`` makes the trial current; ``grad()`` and
    ``hess_vec(v)`` are taken at the current point. ``fun`` at a rejected trial point leaves the
    current structure untouched.
    """

    def __init__(self, data: RankingData, C: float = 1.0, backend: Backend | str = "cpu",
                 geometry: RankGeometry | None = None, ops=None):
        """ops: an object with the ops interface (gputext.rank.ops) to use instead of the
        backend's, e.g. gputext.distributed.rank.DistributedRankOps (then backend is unused)."""
        if not (C > 0 and np.isfinite(C)):
            raise ValueError(f"C must be a positive number, got {C}")
        self.data = data
        self.C = float(C)
        self.backend = None if ops is not None else as_backend(backend)
        self.ops = ops if ops is not None else make_ops(data, self.backend, geometry)
        self.n = data.n_features
        self._w_trial: np.ndarray | None = None
        self._w: np.ndarray | None = None
        self.n_fun = 0
        self.n_hess = 0

    def fun(self, w: np.ndarray) -> float:
        w = np.ascontiguousarray(w, dtype=np.float64)
        loss = self.ops.evaluate(w)
        self._w_trial = w.copy()
        self.n_fun += 1
        return 0.5 * float(w @ w) + self.C * loss

    def accept(self) -> None:
        self.ops.accept()
        self._w, self._w_trial = self._w_trial, self._w

    def grad(self) -> np.ndarray:
        return self._w + 2.0 * self.C * self.ops.xt_z()

    def hess_vec(self, v: np.ndarray) -> np.ndarray:
        self.n_hess += 1
        v = np.ascontiguousarray(v, dtype=np.float64)
        return v + 2.0 * self.C * self.ops.xt_hess(v)

    # conveniences (tests, scipy comparison)
    def fun_grad(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        f = self.fun(w)
        self.accept()
        return f, self.grad()

    def scores(self, w: np.ndarray) -> np.ndarray:
        """X w (float64) in the data's grouped row order."""
        return self.ops.scores(np.ascontiguousarray(w, dtype=np.float64))
