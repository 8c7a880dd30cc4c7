"""Metric names for host code: checked once with ``metric_code``, with their sense.

The table itself (names, the integer codes kernels take, which are similarities) is the
project's one table, gputext.kernels.metrics (a plain module: importing it imports no numba).
cosine and dot are similarities (larger is better); l2 and l1 are distances (smaller is better).
"""
from __future__ import annotations

from .errors import InputError
from .kernels.metrics import COSINE, DOT, L1, L2, LARGER_IS_BETTER
from .kernels.metrics import METRIC_CODE as METRICS

SIMILARITIES = tuple(name for name, larger in LARGER_IS_BETTER.items() if larger)  # ("cosine", "dot")
__all__ = ["COSINE", "DOT", "L1", "L2", "METRICS", "SIMILARITIES", "metric_code", "is_similarity"]


def metric_code(metric: str, allowed=None) -> int:
    """The code of a metric name; InputError naming the choices when it is not one of them."""
    choices = tuple(METRICS) if allowed is None else tuple(allowed)
    if metric not in choices:
        raise InputError(f"unknown metric {metric!r}: expected one of {', '.join(choices)}")
    return METRICS[metric]


def is_similarity(code: int) -> bool:
    return code in (COSINE, DOT)
