"""The one table of metric names and codes: every kernel, CPU twin and host module takes its
metric codes from here (the int64 code is a kernel argument)."""
from __future__ import annotations

COSINE, DOT, L2, L1 = 0, 1, 2, 3
METRIC_CODE = {"cosine": COSINE, "dot": DOT, "l2": L2, "l1": L1}
METRICS = tuple(METRIC_CODE)  # ("cosine", "dot", "l2", "l1")
LARGER_IS_BETTER = {"cosine": True, "dot": True, "l2": False, "l1": False}
