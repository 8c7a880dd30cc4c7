"""Trust-region Newton method (TRON) with conjugate gradient, as in LIBLINEAR 1.94 (tron.cpp).

The update rules and constants are LIBLINEAR's: eta0 = 1e-4, eta1 = 0.25, eta2 = 0.75 (step
acceptance and radius update), sigma1 = 0.25, sigma2 = 0.5, sigma3 = 4 (radius factors); the
first radius is |grad f(w0)| and is cut to the first step's length; CG stops at
|r| <= 0.1 |grad f(w)| or on the trust-region boundary. Stopping rule: |grad f(w)| <= eps |grad f(w0)|
with w0 = 0, or max_iter accepted Newton steps, or LIBLINEAR's safeguards (actual and predicted
reductions both tiny, or non-positive). Everything here is float64 on the host; the objective
keeps the data on its backend.
"""
from __future__ import annotations

import math
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


def _trcg(objective, delta: float, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Approximately minimise g.s + s.H s / 2 in |s| <= delta by CG; returns (s, r, cg_iter), r = -g - H s."""
    s = np.zeros_like(g)
    r = -g.copy()
    d = r.copy()
    cgtol = CG_TOLERANCE * float(np.linalg.norm(g))
    cg_iter = 0
    rTr = float(r @ r)
    while True:
        if math.sqrt(rTr) <= cgtol:
            break
        cg_iter += 1
        Hd = objective.hess_vec(d)
        alpha = rTr / float(d @ Hd)
        s += alpha * d
        if float(np.linalg.norm(s)) > delta:
            s -= alpha * d  # step back, then go to the boundary along d
            std = float(s @ d)
            sts = float(s @ s)
            dtd = float(d @ d)
            dsq = delta * delta
            rad = math.sqrt(std * std + dtd * (dsq - sts))
            if std >= 0:
                alpha = (dsq - sts) / (std + rad)
            else:
                alpha = (rad - std) / dtd
            s += alpha * d
            r -= alpha * Hd
            break
        r -= alpha * Hd
        rnewTrnew = float(r @ r)
        beta = rnewTrnew / rTr
        d = r + beta * d
        rTr = rnewTrnew
    return s, r, cg_iter


def tron(objective, n: int, eps: float = 1e-5, max_iter: int = 1000, callback=None) -> TronResult:
    """Minimise ``objective`` (fun/accept/grad/hess_vec, see RankObjective) from w0 = 0.

    ``callback(info)`` is called at w0 and after every trial step with a dict: iteration, f,
    grad_norm, cg (CG steps of this trial), accepted, time (seconds since start), delta.
    """
    t0 = time.perf_counter()
    w = np.zeros(n, np.float64)
    f = objective.fun(w)
    objective.accept()
    g = objective.grad()
    gnorm0 = float(np.linalg.norm(g))
    gnorm = gnorm0
    delta = gnorm0
    history = [dict(iteration=0, time=time.perf_counter() - t0, f=f, grad_norm=gnorm, cg=0)]
    if callback is not None:
        callback(dict(iteration=0, f=f, grad_norm=gnorm, cg=0, accepted=True, time=history[0]["time"], delta=delta))
    it = 1
    total_cg = 0
    search = gnorm > eps * gnorm0
    reason = "gradient is zero at w = 0" if not search else "max_iter reached"
    converged = not search
    trials = 0
    while it <= max_iter and search:
        trials += 1
        s, r, cg_iter = _trcg(objective, delta, g)
        total_cg += cg_iter
        w_new = w + s
        gs = float(g @ s)
        prered = -0.5 * (gs - float(s @ r))
        fnew = objective.fun(w_new)
        actred = f - fnew
        snorm = float(np.linalg.norm(s))
        if it == 1:
            delta = min(delta, snorm)
        if fnew - f - gs <= 0:
            alpha = SIGMA3
        else:
            alpha = max(SIGMA1, -0.5 * (gs / (fnew - f - gs)))
        if actred < ETA0 * prered:
            delta = min(max(alpha, SIGMA1) * snorm, SIGMA2 * delta)
        elif actred < ETA1 * prered:
            delta = max(SIGMA1 * delta, min(alpha * snorm, SIGMA2 * delta))
        elif actred < ETA2 * prered:
            delta = max(SIGMA1 * delta, min(alpha * snorm, SIGMA3 * delta))
        else:
            delta = max(delta, min(alpha * snorm, SIGMA3 * delta))
        accepted = actred > ETA0 * prered
        if accepted:
            it += 1
            w = w_new
            f = fnew
            objective.accept()
            g = objective.grad()
            gnorm = float(np.linalg.norm(g))
            history.append(dict(iteration=it - 1, time=time.perf_counter() - t0, f=f, grad_norm=gnorm, cg=cg_iter))
        if callback is not None:
            callback(dict(iteration=it - 1 if accepted else it, f=f, grad_norm=gnorm, cg=cg_iter, accepted=accepted,
                          time=time.perf_counter() - t0, delta=delta))
        if accepted and gnorm <= eps * gnorm0:
            converged, reason = True, "converged"
            break
        if f < -1.0e32:
            reason = "f < -1e32"
            break
        if abs(actred) <= 0 and prered <= 0:
            reason = "actual and predicted reductions <= 0"
            break
        if abs(actred) <= 1.0e-12 * abs(f) and abs(prered) <= 1.0e-12 * abs(f):
            reason = "actual and predicted reductions too small"
            break
        if trials >= 20 * max_iter:
            reason = "too many rejected steps"
            break
    return TronResult(w, f, gnorm, gnorm0, it - 1, total_cg, converged or gnorm <= eps * gnorm0, reason,
                      time.perf_counter() - t0, history)
