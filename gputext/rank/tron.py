"""Trust-region Newton method (TRON) with conjugate gradient, as in LIBLINEAR 1.94 (tron.cpp), for
one weight vector (RankSVM) or many independent columns at once (the one-vs-rest SVM).

The update rules and constants are LIBLINEAR's: eta0 = 1e-4, eta1 = 0.25, eta2 = 0.75 (step
acceptance and radius update), sigma1 = 0.25, sigma2 = 0.5, sigma3 = 4 (radius factors); the
first radius is |grad f(w0)| and is cut to the first step's length; CG stops at
|r| <= 0.1 |grad f(w)| or on the trust-region boundary. Stopping rule: |grad f(w)| <= eps |grad f(0)|
(``gnorm0``; LIBLINEAR >= 2 also measures it at w = 0 when it starts from a given w0), or max_iter
accepted Newton steps, or LIBLINEAR's safeguards (actual and predicted reductions both tiny, or
non-positive).

Written once for both problems: ``tron_columns`` runs k independent TRONs in lock step. Every
per-column scalar (radius, f, |g|, CG coefficients) is a float64 array of length k on the host;
the vectors are the objective's (host numpy, or device arrays that never leave the device), and
every vector operation goes through the objective's ``space`` with a column mask, so each column
follows exactly the arithmetic of a TRON run on that column alone: a column whose CG has stopped,
or whose TRON has stopped, is left untouched by masked updates (selections, never arithmetic
no-ops). ``tron`` is the one-vector form RankSVM uses: its vectors are plain 1-D float64 arrays
and its space's dot is ``a @ b``, so its results are bit-identical to the single-vector code this
module had before.

The objective protocol (columns ``cols``: int64 array of the columns whose value is used; an
objective may compute others too):

    fun(W, cols) -> f (k,)        evaluate at W, keep the structure as the trial (per column)
    accept(mask)                  the trial becomes current for the masked columns
    grad(cols) -> G               gradient at the current point (columns cols valid)
    hess_vec(D, cols) -> HD       generalised Hessian at the current point times D
    space                         vector algebra (HostSpace or a device space), see HostSpace
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

ETA0, ETA1, ETA2 = 1e-4, 0.25, 0.75
SIGMA1, SIGMA2, SIGMA3 = 0.25, 0.5, 4.0
CG_TOLERANCE = 0.1


@dataclass
class TronResult:
    w: np.ndarray
    f: float
    grad_norm: float
    grad_norm0: float
    iterations: int  # accepted Newton steps
    cg_iterations: int  # Hessian-vector products, all steps
    converged: bool  # |grad| <= eps |grad0|
    stop_reason: str
    seconds: float
    history: list = field(default_factory=list)  # per accepted step: dict(iteration, time, f, grad_norm, cg)


@dataclass
class TronColumnsResult:
    """Per column j of W: f, |grad|, |grad(0)|, accepted steps, CG steps, convergence, stop reason."""

    W: object  # the objective's vectors (numpy (n, k) or a device array)
    f: np.ndarray
    grad_norm: np.ndarray
    grad_norm0: np.ndarray
    iterations: np.ndarray
    cg_iterations: np.ndarray
    converged: np.ndarray
    stop_reason: list
    seconds: float
    hess_products: int  # Hessian products the objective computed (all columns at once)


class HostSpace:
    """TRON's vector algebra on host numpy arrays: 1-D (one column) or (n, k) (k columns).

    ``dot(a, b)`` -> (k,) float64: ``a @ b`` for 1-D arrays (BLAS, as the one-vector TRON always
    did), column sums of a * b for (n, k). Updates act on the masked columns only and in place:
    ``axpy(alpha, x, y, mask)`` y += alpha x; ``xpby(x, beta, y, mask)`` y = x + beta y;
    ``select(dst, src, mask)`` dst = src. ``zeros_like``, ``copy``, ``neg``, ``add`` allocate.
    """

    def dot(self, a, b) -> np.ndarray:
        if a.ndim == 1:
            return np.array([float(a @ b)])
        return np.einsum("ij,ij->j", a, b)

    def dots(self, *pairs) -> list:
        return [self.dot(a, b) for a, b in pairs]

    def zeros_like(self, a):
        return np.zeros_like(a)

    def copy(self, a):
        return a.copy()

    def neg(self, a):
        return -a

    def add(self, a, b):
        return a + b

    def axpy(self, alpha, x, y, mask) -> None:
        if y.ndim == 1:
            if mask[0]:
                y += alpha[0] * x
            return
        cols = np.flatnonzero(mask)
        if cols.size:
            y[:, cols] += alpha[cols] * x[:, cols]

    def xpby(self, x, beta, y, mask) -> None:
        if y.ndim == 1:
            if mask[0]:
                y[...] = x + beta[0] * y
            return
        cols = np.flatnonzero(mask)
        if cols.size:
            y[:, cols] = x[:, cols] + beta[cols] * y[:, cols]

    def select(self, dst, src, mask) -> None:
        if dst.ndim == 1:
            if mask[0]:
                dst[...] = src
            return
        cols = np.flatnonzero(mask)
        if cols.size:
            dst[:, cols] = src[:, cols]


def _trcg(objective, space, delta: np.ndarray, g, gnorm: np.ndarray, active: np.ndarray):
    """Per active column, approximately minimise g.s + s.H s / 2 in |s| <= delta by CG.

    Returns (s, r, cg_iter (k,)), r = -g - H s; columns outside ``active`` keep s = 0."""
    k = delta.shape[0]
    s = space.zeros_like(g)
    r = space.neg(g)
    d = space.copy(r)
    cgtol = CG_TOLERANCE * gnorm
    cg_iter = np.zeros(k, np.int64)
    rTr = space.dot(r, r)
    running = active & ~(np.sqrt(rTr) <= cgtol)
    while running.any():
        cols = np.flatnonzero(running)
        cg_iter[running] += 1
        Hd = objective.hess_vec(d, cols)
        dHd = space.dot(d, Hd)
        alpha = np.zeros(k)
        alpha[running] = rTr[running] / dHd[running]
        space.axpy(alpha, d, s, running)
        out = running & (np.sqrt(space.dot(s, s)) > delta)
        if out.any():
            space.axpy(-alpha, d, s, out)  # step back, then go to the boundary along d
            std, sts, dtd = space.dots((s, d), (s, s), (d, d))
            dsq = delta * delta
            with np.errstate(invalid="ignore", divide="ignore"):
                rad = np.sqrt(std * std + dtd * (dsq - sts))
                to_boundary = np.where(std >= 0, (dsq - sts) / (std + rad), (rad - std) / dtd)
            to_boundary = np.where(out, to_boundary, 0.0)
            space.axpy(to_boundary, d, s, out)
            space.axpy(-to_boundary, Hd, r, out)
            running = running & ~out
        if not running.any():
            break
        space.axpy(-alpha, Hd, r, running)
        rnew = space.dot(r, r)
        beta = np.zeros(k)
        beta[running] = rnew[running] / rTr[running]
        space.xpby(r, beta, d, running)
        rTr = np.where(running, rnew, rTr)
        running = running & ~(np.sqrt(rTr) <= cgtol)
    return s, r, cg_iter


def tron_columns(objective, W0, eps, max_iter: int = 1000, gnorm0=None, callback=None) -> TronColumnsResult:
    """Minimise each column of ``objective`` from W0 (the objective's vectors; consumed).

    eps: scalar or (k,) per-column tolerance; gnorm0: (k,) |grad f(0)| for the stopping rule (None:
    |grad f(W0)|, i.e. W0 = 0). ``callback(info)`` after every trial round with per-column arrays.
    """
    t0 = time.perf_counter()
    space = objective.space
    W = W0
    f = np.asarray(objective.fun(W, None), np.float64)
    k = f.shape[0]
    every = np.ones(k, bool)
    objective.accept(every)
    g = space.copy(objective.grad(None))
    gnorm = np.sqrt(space.dot(g, g))
    gnorm0 = gnorm.copy() if gnorm0 is None else np.asarray(gnorm0, np.float64)
    eps = np.broadcast_to(np.asarray(eps, np.float64), (k,))
    delta = gnorm.copy()
    it = np.ones(k, np.int64)
    trials = np.zeros(k, np.int64)
    total_cg = np.zeros(k, np.int64)
    search = gnorm > eps * gnorm0
    reason = ["gradient is zero at w = 0" if not s else "max_iter reached" for s in search]
    converged = ~search
    if callback is not None:
        callback(dict(iteration=it - 1, f=f.copy(), grad_norm=gnorm.copy(), cg=np.zeros(k, np.int64),
                      accepted=np.ones(k, bool), active=np.ones(k, bool), time=time.perf_counter() - t0,
                      delta=delta.copy()))
    search &= it <= max_iter
    while search.any():
        active = search.copy()
        trials[active] += 1
        s, r, cg_iter = _trcg(objective, space, delta, g, gnorm, active)
        total_cg += cg_iter
        W_new = space.add(W, s)
        gs, sr, ss = space.dots((g, s), (s, r), (s, s))
        prered = -0.5 * (gs - sr)
        fnew = np.asarray(objective.fun(W_new, np.flatnonzero(active)), np.float64)
        actred = f - fnew
        snorm = np.sqrt(ss)
        delta = np.where(active & (it == 1), np.minimum(delta, snorm), delta)
        delta = np.where(active, _new_radius(delta, snorm, gs, f, fnew, actred, prered), delta)
        accepted = active & (actred > ETA0 * prered)
        if accepted.any():
            it[accepted] += 1
            space.select(W, W_new, accepted)
            f = np.where(accepted, fnew, f)
            objective.accept(accepted)
            g_new = objective.grad(np.flatnonzero(accepted))
            space.select(g, g_new, accepted)
            gnorm = np.where(accepted, np.sqrt(space.dot(g, g)), gnorm)
        del W_new, s, r
        if callback is not None:
            callback(dict(iteration=np.where(accepted, it - 1, it), f=f.copy(), grad_norm=gnorm.copy(), cg=cg_iter,
                          accepted=accepted, active=active, time=time.perf_counter() - t0, delta=delta.copy()))
        _stop(active, accepted, gnorm, eps, gnorm0, f, actred, prered, trials, max_iter, it, search, converged, reason)
    converged = converged | (gnorm <= eps * gnorm0)
    return TronColumnsResult(W, f, gnorm, gnorm0, it - 1, total_cg, converged, reason, time.perf_counter() - t0,
                             getattr(objective, "n_hess", 0))


def _new_radius(delta, snorm, gs, f, fnew, actred, prered):
    """LIBLINEAR's radius update, per column (float64 arrays)."""
    curv = fnew - f - gs
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha = np.where(curv <= 0, SIGMA3, np.maximum(SIGMA1, -0.5 * (gs / np.where(curv <= 0, 1.0, curv))))
    return np.where(actred < ETA0 * prered, np.minimum(np.maximum(alpha, SIGMA1) * snorm, SIGMA2 * delta),
           np.where(actred < ETA1 * prered, np.maximum(SIGMA1 * delta, np.minimum(alpha * snorm, SIGMA2 * delta)),
           np.where(actred < ETA2 * prered, np.maximum(SIGMA1 * delta, np.minimum(alpha * snorm, SIGMA3 * delta)),
                    np.maximum(delta, np.minimum(alpha * snorm, SIGMA3 * delta)))))


def _stop(active, accepted, gnorm, eps, gnorm0, f, actred, prered, trials, max_iter, it, search, converged, reason):
    """LIBLINEAR's stopping tests after a trial, per active column (updates search/converged/reason)."""
    tests = ((accepted & (gnorm <= eps * gnorm0), "converged"),
             (f < -1.0e32, "f < -1e32"),
             ((np.abs(actred) <= 0) & (prered <= 0), "actual and predicted reductions <= 0"),
             ((np.abs(actred) <= 1.0e-12 * np.abs(f)) & (np.abs(prered) <= 1.0e-12 * np.abs(f)),
              "actual and predicted reductions too small"),
             (trials >= 20 * max_iter, "too many rejected steps"))
    for hit, why in tests:
        stop = active & search & hit
        for j in np.flatnonzero(stop):
            reason[j] = why
        converged |= stop & (why == "converged")
        search &= ~stop
    search &= it <= max_iter


class _OneVector:
    """A single-vector objective (fun/accept/grad/hess_vec on 1-D arrays, e.g. RankObjective) seen
    through the column protocol with k = 1."""

    space = HostSpace()

    def __init__(self, objective):
        self.objective = objective

    def fun(self, w, cols):
        return np.array([self.objective.fun(w)])

    def accept(self, mask):
        if mask[0]:
            self.objective.accept()

    def grad(self, cols):
        return self.objective.grad()

    def hess_vec(self, d, cols):
        return self.objective.hess_vec(d)


def tron(objective, n: int, eps: float = 1e-5, max_iter: int = 1000, callback=None) -> TronResult:
    """Minimise ``objective`` (fun/accept/grad/hess_vec on 1-D float64 vectors, see RankObjective)
    from w0 = 0: ``tron_columns`` with one column.

    ``callback(info)`` is called at w0 and after every trial step with a dict: iteration, f,
    grad_norm, cg (CG steps of this trial), accepted, time (seconds since start), delta.
    """
    history = []

    def per_step(state):
        one = dict(iteration=int(state["iteration"][0]), f=float(state["f"][0]), grad_norm=float(state["grad_norm"][0]),
                   cg=int(state["cg"][0]), accepted=bool(state["accepted"][0]), time=state["time"],
                   delta=float(state["delta"][0]))
        if one["accepted"]:
            history.append({key: one[key] for key in ("iteration", "time", "f", "grad_norm", "cg")})
        if callback is not None:
            callback(one)

    res = tron_columns(_OneVector(objective), np.zeros(n, np.float64), eps, max_iter, callback=per_step)
    return TronResult(res.W, float(res.f[0]), float(res.grad_norm[0]), float(res.grad_norm0[0]), int(res.iterations[0]),
                      int(res.cg_iterations[0]), bool(res.converged[0]), res.stop_reason[0], res.seconds, history)
