"""The one table of similarity metrics: names, the integer codes kernels take, and their sense.

cosine and dot are similarities (larger is better); l2 and l1 are distances (smaller is better).
Every family (the engine, dense kNN, classification, meta-features, clustering) takes metric
names from here and turns them into codes with ``metric_code``; the kernels use the same codes
(gputext.kernels.scoring.COSINE ... L1 and gputext.kernels.dense_knn).
"""
from __future__ import annotations

from .errors import InputError

COSINE, DOT, L2, L1 = 0, 1, 2, 3
METRICS = {"cosine": COSINE, "dot": DOT, "l2": L2, "l1": L1}
SIMILARITIES = ("cosine", "dot")  # larger is better; l2 and l1 are distances


def metric_code(metric: str, allowed=None) -> int:
    """The code of a metric name; InputError naming the choices when it is not one of them."""
    choices = tuple(METRICS) if allowed is None else tuple(allowed)
    if metric not in choices:
        raise InputError(f"unknown metric {metric!r}: expected one of {', '.join(choices)}")
    return METRICS[metric]


def is_similarity(code: int) -> bool:
    return code in (COSINE, DOT)
