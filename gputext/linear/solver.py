"""One-vs-rest L2-regularised squared-hinge linear SVM in the primal (LIBLINEAR -s 2, scikit-learn's
LinearSVC(dual=False)), every class at once, trained by gputext.rank.tron.tron_columns.

Per column j (class c vs rest, rows R_j of its fold group, y = +1 for class c else -1):

    f_j(w) = 1/2 w.w + C sum_{i in R_j} max(0, 1 - y_i w.x_i)^2
    grad   = w + 2C X^T r,        r_i = z_i - y_i on the active rows I = {y_i z_i < 1}, else 0
    H d    = d + 2C X_I^T X_I d   (LIBLINEAR's generalised Hessian)

Stopping per column as LIBLINEAR -s 2: |grad f_j(w)| <= eps_j |grad f_j(0)| with
eps_j = tol max(min(pos_j, neg_j), 1) / l_j (``problem.stopping_eps``); a column that meets it stops
while the others go on.

``train_path`` walks a C grid in ascending order, each C warm-started from the previous C's W (as
LIBLINEAR's -C parameter search does); with ``n_folds`` it trains every fold's columns and the
final fit's columns together as one W (n_features x (n_folds + 1) n_cols), so the products serve
all of them, and scores each fold's held-out rows from the same margins. C is chosen by mean
accuracy over the folds, ties to the smaller C, as GridSearchCV does.

Decision (issue 18, dense blocks with few features): no per-column Gram matrix H_j = I + 2C
X_I^T X_I. Counted on 20NG's meta-features (11,293 x 1,840 + bias, 120 columns = 6 groups x 20
classes, grid 0.0625..16, CPU twin, 2026-11-25): 54 Newton steps and 1,016 Hessian products in
all (CG steps per column up to 95 / 54 / 91 / 204 / 177 per C), on average 15.6 columns still
running and 28,064 active (row, column) pairs (11% of rows x running columns) per product.
Forming H_j costs |I_j| d^2 per Newton step against 2 |I_j| d per CG step, so it pays only past
d / 2 = 920 CG steps per Newton step (20NG has about 19), and 120 of them take 3.3 GB. The meta
features are not "a few": d = (3k + 2) n_classes. The products stay X_I^T (X_I d), over the
active (row, column) pairs only on both backends (gputext.linear.cuda_ops: a dense GEMM over every
row and a 64-column tile did 5.3 GFLOP per product where the active pairs need 0.21); H100,
2026-11-25: the `--features meta` SVM stage 7.65 -> 1.39 s.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..backend import Backend, as_backend
from ..rank.tron import tron_columns
from .ops import make_ops
from .problem import decide, make_blocks, make_columns, one_vs_rest_classes, stopping_eps

DEFAULT_TOL = 1e-3  # LIBLINEAR -s 2's default is 0.01; gputext.knn.svm says why 1e-3 (same as its LinearSVC path)
DEFAULT_MAX_ITER = 1000


class SquaredHingeObjective:
    """TRON's column protocol (see gputext.rank.tron) over backend ops; C is per column."""

    def __init__(self, ops, C):
        self.ops = ops
        self.space = ops.space
        self.C = np.broadcast_to(np.asarray(C, np.float64), (ops.k,)).copy()
        self.W = ops.zeros()
        self.G = ops.zeros()
        self.H = ops.zeros()
        self._trial = None
        self.n_hess = 0

    def fun(self, W, cols):
        loss = self.ops.evaluate(W, cols)
        self._trial = W
        return 0.5 * self.space.dot(W, W) + self.C * loss

    def accept(self, mask) -> None:
        self.ops.accept(mask)
        self.space.select(self.W, self._trial, np.asarray(mask, bool))

    def grad(self, cols):
        self.ops.grad(self.W, 2.0 * self.C, cols, self.G)
        return self.G

    def hess_vec(self, D, cols):
        self.n_hess += 1
        self.ops.hess(D, 2.0 * self.C, cols, self.H)
        return self.H

    def grad_norm_at_zero(self) -> np.ndarray:
        """|grad f_j(0)| per column for the current C (the stopping rule's reference)."""
        zero = self.ops.zeros()
        self.fun(zero, None)
        self.accept(np.ones(self.ops.k, bool))
        g = self.grad(None)
        return np.sqrt(self.space.dot(g, g))


@dataclass
class PathResult:
    """Per C of the grid: the final fit's weights (n_features, n_cols) float64 on the host, the
    fold accuracies, TRON's work; ``C`` the chosen value (None without folds)."""

    grid: list
    weights: dict
    fold_accuracy: dict = field(default_factory=dict)
    mean_accuracy: dict = field(default_factory=dict)
    C: float | None = None
    info: dict = field(default_factory=dict)


def _backend(device) -> Backend:
    return as_backend(device)


def train_path(X, y: np.ndarray, n_classes: int, C_grid, folds: np.ndarray | None = None, n_folds: int = 0,
               tol: float = DEFAULT_TOL, max_iter: int = DEFAULT_MAX_ITER, bias: float = 1.0, device="auto",
               progress=None) -> PathResult:
    """Train the one-vs-rest SVM of class codes ``y`` (n,) int (0..n_classes-1; -1 trains nothing)
    for every C of ``C_grid`` (ascending, warm starts); with ``n_folds``, ``folds`` (n,) gives each
    row's fold (0..n_folds-1) and the fold models are trained alongside the final one."""
    t0 = time.perf_counter()
    backend = _backend(device)
    blocks = make_blocks(X, bias)
    groups = list(range(n_folds)) + [-1]
    columns = make_columns(y, n_classes, folds if n_folds else None, groups)
    ops = make_ops(blocks, columns, backend)
    n_cols = one_vs_rest_classes(n_classes).size
    final = np.arange(n_folds * n_cols, (n_folds + 1) * n_cols)
    eps = stopping_eps(tol, columns)
    objective = SquaredHingeObjective(ops, 1.0)
    gnorm0_unit = objective.grad_norm_at_zero()
    grid = sorted(float(c) for c in C_grid)
    W = ops.zeros()
    out = PathResult(grid, {}, info=dict(backend=backend.name, n_columns=columns.k, tol=tol, iterations={},
                                         cg_iterations={}, seconds={}, unconverged={}))
    y_arr = np.asarray(y)
    for C in grid:
        t1 = time.perf_counter()
        objective.C[:] = C
        res = tron_columns(objective, W, eps, max_iter, gnorm0=C * gnorm0_unit)
        W = res.W
        out.weights[C] = ops.space.to_host(W)[:, final].copy()
        out.info["iterations"][C] = int(res.iterations.max())
        out.info["cg_iterations"][C] = int(res.cg_iterations.max())
        out.info["unconverged"][C] = int((~res.converged).sum())
        if n_folds:
            Z = ops.scores(W)
            acc = []
            for g in range(n_folds):
                rows = np.flatnonzero((folds == g) & (y_arr >= 0))
                pred = decide(Z[rows][:, g * n_cols:(g + 1) * n_cols], n_classes)
                acc.append(float(np.mean(pred == y_arr[rows])) if rows.size else 0.0)
            out.fold_accuracy[C] = acc
            out.mean_accuracy[C] = float(np.mean(acc))
        out.info["seconds"][C] = time.perf_counter() - t1
        if progress is not None:
            progress(C, out)
    if n_folds:
        best = max(out.mean_accuracy.values())
        out.C = min(c for c, a in out.mean_accuracy.items() if a == best)
    out.info["total_seconds"] = time.perf_counter() - t0
    out.info["hess_products"] = objective.n_hess
    if hasattr(ops, "counters"):
        out.info.update(ops.counters())
    return out

