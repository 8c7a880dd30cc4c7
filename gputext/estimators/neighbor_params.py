"""scikit-learn's neighbour parameters, checked and mapped onto the engine (NearestNeighbors,
KNeighborsClassifier, KNNMetaFeatures).

What each scikit-learn parameter becomes (docs/python.md has the table):
- metric: "minkowski" with p = 2 (scikit-learn's default) is the engine's "l2", with p = 1 its
  "l1"; "euclidean" / "l2", "manhattan" / "l1" / "cityblock", "cosine", and ours "dot". Any
  other name, a callable, or minkowski with another p cannot be honoured: ValueError, the error
  scikit-learn raises for a metric it does not know. p comes from ``p`` or ``metric_params={"p": p}``
  (the latter wins, as in scikit-learn); p is ignored by the other metrics.
- algorithm: "auto" | "brute" (the same: both of the engine's methods are exact, like brute
  force) | "inverted" | "dense" (ours). "ball_tree" and "kd_tree" are accepted and run as "auto":
  there are no trees here, results are exact either way (scikit-learn itself answers sparse
  input with brute force whatever algorithm says).
- leaf_size: accepted (an int >= 1, as scikit-learn checks) and ignored: it sizes the trees'
  leaves, and there are no trees.
- n_jobs: the CPU twin's threads during the call (numba.set_num_threads, restored afterwards);
  None leaves numba's count as it is, -1 is every thread numba has, -2 all but one (joblib's
  rule). Ignored on the GPU.
"""
from __future__ import annotations

from contextlib import contextmanager
from numbers import Integral, Real

import numpy as np

METRICS = {"cosine": "cosine", "dot": "dot", "euclidean": "l2", "l2": "l2",
           "manhattan": "l1", "l1": "l1", "cityblock": "l1"}
MINKOWSKI_P = {1: "l1", 2: "l2"}
ALGORITHMS = {"auto": "auto", "brute": "auto", "ball_tree": "auto", "kd_tree": "auto",
              "inverted": "inverted", "dense": "dense"}


def engine_metric(metric, p=2, metric_params=None) -> str:
    """The engine's metric ("cosine" | "dot" | "l2" | "l1") for scikit-learn's metric, p and
    metric_params (ValueError for what the engine cannot compute)."""
    params = dict(metric_params or {})
    p = params.pop("p", p)
    if params:
        raise ValueError(f"metric_params: only 'p' (for metric='minkowski') is supported, got {sorted(params)}")
    if metric == "minkowski":
        if isinstance(p, bool) or not isinstance(p, Real) or not p > 0:
            raise ValueError(f"The 'p' parameter must be a float in the range (0.0, inf]. Got {p!r} instead.")
        if p not in MINKOWSKI_P:
            raise ValueError(f"metric='minkowski' with p = {p}: the engine computes p = 1 (manhattan) and p = 2 "
                             f"(euclidean) only")
        return MINKOWSKI_P[int(p)]
    try:
        return METRICS[metric]
    except (KeyError, TypeError):
        raise ValueError(f"metric must be one of minkowski (p = 1 or 2), {', '.join(METRICS)}; got {metric!r}") from None


def to_distance(scores: np.ndarray, metric: str) -> np.ndarray:
    """float64 distances (ascending = better) from engine scores: 1 - s clipped to [0, 2] (cosine,
    as scikit-learn's cosine_distances), -s (dot), s (l2, l1)."""
    s = np.asarray(scores, np.float64)
    if metric == "cosine":
        return np.clip(1.0 - s, 0.0, 2.0)
    if metric == "dot":
        return -s
    return s


def check_n_neighbors(n_neighbors) -> int:
    if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, (int, np.integer)):
        raise TypeError(f"n_neighbors does not take {type(n_neighbors).__name__} value, enter integer value")
    if n_neighbors <= 0:
        raise ValueError(f"Expected n_neighbors > 0. Got {n_neighbors}")
    return int(n_neighbors)


def check_algorithm(algorithm, leaf_size=30) -> str:
    """The engine's method name ("auto" | "inverted" | "dense") of an algorithm; leaf_size checked, then ignored."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if isinstance(leaf_size, bool) or not isinstance(leaf_size, Integral) or leaf_size < 1:
        raise ValueError(f"The 'leaf_size' parameter must be an int in the range [1, inf). Got {leaf_size!r} instead.")
    return ALGORITHMS[algorithm]


def n_threads(n_jobs) -> int | None:
    """numba threads for n_jobs (None: leave the count as it is); ValueError for 0, as joblib."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, Integral) or n_jobs == 0:
        raise ValueError(f"n_jobs must be None or a non-zero int, got {n_jobs!r}")
    import numba
    most = numba.config.NUMBA_NUM_THREADS
    return int(min(n_jobs, most) if n_jobs > 0 else max(1, most + 1 + n_jobs))


@contextmanager
def cpu_threads(n_jobs):
    """Run the block with n_threads(n_jobs) numba threads, then restore the previous count."""
    threads = n_threads(n_jobs)
    if threads is None:
        yield
        return
    import numba
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        yield
    finally:
        numba.set_num_threads(previous)
