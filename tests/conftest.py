"""Shared fixtures and markers.

- ``cudasim`` tests run only in the second pass of ``make test`` (NUMBA_ENABLE_CUDASIM=1);
  in the first pass they are deselected, and if run by hand without the simulator they skip.
- ``gpu`` tests need a real GPU (run them on the GPU host with ``make test-gpu``).
- ``realdata`` tests use ../shared/datasets (or $GPUTEXT_DATASETS) and skip when it is absent.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Commands run by tests start in their own processes (no warm server left behind by the suite);
# tests/test_daemon.py switches the server on for its own commands.
os.environ["GPUTEXT_DAEMON"] = "0"
# ... and start no compile helpers behind the tests' backs (tests/test_compile_ahead.py starts its own)
os.environ["GPUTEXT_AHEAD"] = "0"
SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def datasets_dir() -> Path | None:
    env = os.environ.get("GPUTEXT_DATASETS")
    for candidate in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "datasets", ROOT / "shared" / "datasets"]:
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    path = datasets_dir()
    if path is None:
        pytest.skip("../shared/datasets is absent (real-data tests skip on a user's fresh clone)")
    return path


def _real_gpu() -> bool:
    if SIM:
        return False
    try:
        from numba import cuda
        return cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    gpu = None
    for item in items:
        if "cudasim" in item.keywords and not SIM:
            item.add_marker(pytest.mark.skip(reason="needs NUMBA_ENABLE_CUDASIM=1 (second pass of make test)"))
        if "gpu" in item.keywords:
            if gpu is None:
                gpu = _real_gpu()
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="needs a real CUDA GPU"))
        if "realdata" in item.keywords and datasets_dir() is None:
            item.add_marker(pytest.mark.skip(reason="../shared/datasets is absent"))


def pytest_runtest_logreport(report):
    """With $GPUTEXT_TEST_LOG set, append each test's outcome (and a failure's traceback) to that
    file as it happens: device runs are cut off at the call's time limit, and pytest's own summary
    (and, under pytest-xdist, the names of failed tests) comes only at the end."""
    path = os.environ.get("GPUTEXT_TEST_LOG")
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):  # the xdist controller writes, not its workers
        return
    if report.when != "call" and report.passed:
        return
    gateway = getattr(getattr(report, "node", None), "gateway", None)  # the xdist worker that ran it
    worker = f"{gateway.id} " if gateway is not None else ""
    with open(path, "a") as f:
        f.write(f"{report.outcome.upper():8s} {report.when:8s} {report.duration:8.1f}s {worker}{report.nodeid}\n")
        if report.failed:
            f.write(report.longreprtext + "\n\n")
