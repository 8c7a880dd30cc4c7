"""Shared scalar code of the dense kNN kernels (kernels/dense_knn.py describes the pipeline):
the canonical float64 sums, the final scores, and the row norms the host needs.

EXACT_LANES = 32 is part of the numeric definition (the canonical order), not a tuning knob.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from .jit import cpu_jit, device_function

EXACT_LANES = 32
SIGN_BIT = 2147483648  # 2**31
ALL32 = 4294967295  # 2**32 - 1


def _final_score_py(metric, cross, qq, dd):
    """float64 final score from the canonical cross term and sums of squares (see module doc)."""
    if metric == 0:
        if qq == 0.0 or dd == 0.0:
            return 0.0
        return cross / (math.sqrt(qq) * math.sqrt(dd))
    if metric == 2:
        v = qq + dd - 2.0 * cross
        if v < 0.0:
            v = 0.0
        return math.sqrt(v)
    return cross


final_cpu = cpu_jit(inline="always")(_final_score_py)
final_dev = device_function(_final_score_py)


def ordered_to_float32(ordered: np.ndarray) -> np.ndarray:
    """Host helper: invert primitives.ordered_bits (int64 array) back to float32 values."""
    o = np.asarray(ordered, dtype=np.int64)
    bits = np.where(o >= SIGN_BIT, o - SIGN_BIT, ALL32 - o).astype(np.uint32)
    return bits.view(np.float32)


@cpu_jit(inline="always")
def canonical_cross(x, q, is_l1, p):
    """Canonical float64 cross term of two float32 rows: dot (is_l1 False) or sum |q - x|.
    p: float64 scratch (EXACT_LANES,), overwritten."""
    p[:] = 0.0
    n = x.shape[0]
    full = n - n % EXACT_LANES
    if is_l1:
        for base in range(0, full, EXACT_LANES):
            for lane in range(EXACT_LANES):
                p[lane] += abs(np.float64(q[base + lane]) - np.float64(x[base + lane]))
        for j in range(full, n):
            p[j - full] += abs(np.float64(q[j]) - np.float64(x[j]))
    else:
        for base in range(0, full, EXACT_LANES):
            for lane in range(EXACT_LANES):
                p[lane] += np.float64(x[base + lane]) * np.float64(q[base + lane])
        for j in range(full, n):
            p[j - full] += np.float64(x[j]) * np.float64(q[j])
    s = EXACT_LANES // 2
    while s > 0:
        for lane in range(s):
            p[lane] += p[lane + s]
        s //= 2
    return p[0]


@cpu_jit(parallel=True)
def canonical_sumsq_cpu(X, out):
    """out[i] = canonical float64 sum of X[i, j]**2. X (n, n_terms) float32 C; out (n,) float64."""
    for i in numba.prange(X.shape[0]):
        p = np.empty(EXACT_LANES, dtype=np.float64)
        out[i] = canonical_cross(X[i], X[i], False, p)


@cpu_jit
def query_norms_serial(Q, n, qq, rq):
    """Host staging of a small query batch without a parallel-region launch (which cost more than
    the work for one query): qq[i] = canonical float64 sum of Q[i, j]**2 (bit-identical to
    canonical_sumsq_cpu) and rq[i] = float32(1 / sqrt(qq[i])) (0 for a zero row), i < n; rows
    n .. Q.shape[0]-1 get qq = 0, rq = 0. Q (n_alloc, n_terms) f32 C; qq (n_alloc,) f64;
    rq (n_alloc,) f32."""
    p = np.empty(EXACT_LANES, dtype=np.float64)
    for i in range(Q.shape[0]):
        if i < n:
            v = canonical_cross(Q[i], Q[i], False, p)
        else:
            v = 0.0
        qq[i] = v
        if v > 0.0:
            rq[i] = np.float32(1.0 / np.sqrt(v))
        else:
            rq[i] = np.float32(0.0)


@cpu_jit(parallel=True)
def row_abs_sums_cpu(X, out):
    """out[i] = float64 sum_j |X[i, j]| (used only for error bounds). X float32 C; out float64."""
    for i in numba.prange(X.shape[0]):
        s = 0.0
        for j in range(X.shape[1]):
            s += abs(np.float64(X[i, j]))
        out[i] = s
