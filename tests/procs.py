"""The environment of a child ``python -m gputext`` that a test starts."""
from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(*paths: str, **extra: str) -> dict:
    """os.environ with ``paths`` (default: the checkout) put before $PYTHONPATH, which is kept: on
    the GPU host it names the carried wheels (numpy < 2.5) that numba-cuda needs."""
    path = os.pathsep.join(list(paths or (ROOT,)) + [p for p in [os.environ.get("PYTHONPATH", "")] if p])
    return {**os.environ, **extra, "PYTHONPATH": path}
