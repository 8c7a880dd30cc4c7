"""Where a benchmark ran: one probe for every script's JSON."""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PACKAGES = ("numpy", "scipy", "numba", "numba-cuda", "llvmlite", "cupy-cuda12x", "torch", "scikit-learn", "h5py")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The checkout's commit: $GPUTEXT_BENCH_COMMIT where set (the device host's copy of the
    checkout may carry a stale .git; benchmarks.records does the same), else git's; None without."""
    if os.environ.get("GPUTEXT_BENCH_COMMIT"):
        return os.environ["GPUTEXT_BENCH_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def datasets(arg: str | None = None) -> Path | None:
    """The folder of the real datasets (20newsgroups/, reuters-r8/, cnae9/, letor-sample/, ...):
    ``arg``, else $GPUTEXT_DATASETS, else .data (the copy carried to the device host), else
    ../shared/datasets beside the checkout; None when none of them is a folder."""
    for cand in (arg, os.environ.get("GPUTEXT_DATASETS"), ".data", os.path.join(os.path.dirname(ROOT), "shared", "datasets"),
                 os.path.join(ROOT, "shared", "datasets")):
        if cand and os.path.isdir(cand):
            return Path(cand)
    return None


def device_name() -> str:
    """The current CUDA device's name (numba), 'simulator' in numba's CUDA simulator."""
    from numba import cuda
    name = getattr(cuda.get_current_device(), "name", "simulator")
    return name.decode() if isinstance(name, bytes) else str(name)


def _driver() -> dict:
    """CUDA driver version (numba) and the NVIDIA driver string (nvidia-smi, when there)."""
    out = {}
    try:
        from numba.cuda.cudadrv.driver import driver
        major, minor = driver.get_version()
        out["cuda_driver"] = f"{major}.{minor}"
    except Exception:  # noqa: BLE001 - informative only
        pass
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
        if smi.returncode == 0 and smi.stdout.strip():
            out["nvidia_driver"] = smi.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 5) -> float:
    """Device-to-device copy bandwidth in bytes/s: (bytes read + bytes written) / time, the median
    of ``repeats`` CUDA-event timings after a warm-up copy (the ceiling every bandwidth figure of
    the scripts is a fraction of)."""
    import numpy as np
    from numba import cuda

    from .timing import gpu_ms
    a = cuda.to_device(np.arange(nbytes // 4, dtype=np.float32))  # never time on zeros
    b = cuda.device_array(nbytes // 4, np.float32)
    ms = gpu_ms(lambda: b.copy_to_device(a), repeats, warmup=1)
    del a, b
    return 2 * nbytes / (ms / 1e3)


def probe(backend=None, copy_bytes: int | None = None) -> dict:
    """Host, date, commit, library versions, CPU count and numba threads, and the backend
    (gputext.backend.Backend); on a real GPU also its name, memory and drivers, and with
    ``copy_bytes`` the measured copy bandwidth (``copy_bytes_per_s``)."""
    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "python": platform.python_version(), "commit": git_commit(), "cpu_count": os.cpu_count(),
            "versions": {name: v for name in _PACKAGES if (v := _version(name))}}
    try:
        import numba
        info["numba_threads"] = numba.get_num_threads()
    except ImportError:
        info["numba_threads"] = None
    if backend is None:
        return info
    info["backend"] = backend.describe()
    if backend.is_cuda and not backend.simulator:
        from numba import cuda
        info["gpu"] = device_name()
        try:
            info["memory_gib"] = round(cuda.current_context().get_memory_info()[1] / 2**30, 1)
        except Exception:  # noqa: BLE001 - informative only
            pass
        info.update(_driver())
        if copy_bytes:
            info["copy_bytes_per_s"] = copy_bandwidth(copy_bytes)
    return info
