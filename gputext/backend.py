"""The one place that decides where kernels run: ``cpu`` or ``cuda``.

``resolve("auto")`` picks ``cuda`` when a real CUDA GPU is usable, else ``cpu``, and says why.
Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) ``auto`` still picks ``cpu`` (the
simulator runs a few threads per second); ``cuda`` is then allowed and runs the kernels in the
simulator, which is how CI tests them.

Nothing here imports ``numba.cuda`` until a question about CUDA is asked.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache

from .errors import BackendError

DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Backend:
    name: str  # "cpu" or "cuda"
    simulator: bool  # True when name == "cuda" and kernels run in numba's CUDA simulator
    reason: str  # one line: why this backend (shown by `auto` and by `gputext doctor`)
    auto: bool = False  # chosen by --device auto: a method may then move the work to another backend


    @property
    def is_cuda(self) -> bool:
        return self.name == "cuda"

    def describe(self) -> str:
        return f"{self.name}{' (simulator)' if self.simulator else ''}: {self.reason}"


def simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


_DRIVER_NAMES = ("libcuda.so.1", "libcuda.so", "/usr/lib/wsl/lib/libcuda.so.1", "/usr/lib64/libcuda.so.1",
                 "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1", "nvcuda.dll")


def driver_library_present() -> bool:
    """Whether a CUDA driver library can be loaded (a dlopen, milliseconds): without one, numba.cuda
    (about as long to import as numba itself) need not be imported to learn that there is no GPU."""
    import ctypes

    names = (os.environ["NUMBA_CUDA_DRIVER"],) if os.environ.get("NUMBA_CUDA_DRIVER") else _DRIVER_NAMES
    for name in names:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


_status_lock = threading.Lock()


def cuda_status() -> tuple[bool, str]:
    """(usable, one-line description of the GPU or of why there is none); asked once per process
    (a second caller, e.g. the main thread while ``start_cuda_early``'s thread asks, waits for the
    first's answer)."""
    with _status_lock:
        return _cuda_status()


def driver_started() -> bool:
    """Whether this process has started the CUDA driver (cuInit succeeded), without starting it."""
    mod = sys.modules.get("numba.cuda.cudadrv.driver")
    drv = getattr(mod, "driver", None) if mod is not None else None
    return getattr(drv, "pid", None) is not None  # numba-cuda sets it when cuInit succeeds


def asks_for_cpu(argv: list[str]) -> bool:
    """Whether a command line (the words after ``gputext``) says ``--device cpu``."""
    return "cpu" in (a.split("=", 1)[1] for a in argv if a.startswith("--device=")) or any(
        a == "--device" and b == "cpu" for a, b in zip(argv, argv[1:]))


def start_cuda_early(argv: list[str]) -> None:
    """Start the CUDA driver and the GPU's context in a background thread, unless ``argv`` asks for
    the CPU: cuInit and the primary context (about 0.2 s on an H200, 2026-11-27) wait on the
    driver with the GIL released, so they overlap the command's imports and reads instead of
    following them. Nothing is started without a driver library or under the simulator."""
    if asks_for_cpu(argv):
        return
    if simulator_enabled() or not driver_library_present():
        return
    threading.Thread(target=cuda_status, name="gputext-cuda-start", daemon=True).start()


@lru_cache(maxsize=1)
def _cuda_status() -> tuple[bool, str]:
    if simulator_enabled():
        return True, "numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    if not driver_library_present():
        return False, "no CUDA driver or GPU found"
    try:
        import numba
        from numba import cuda
    except Exception as exc:  # numba-cuda missing or broken
        return False, f"numba.cuda cannot be imported: {exc}"
    # small grids are legitimate here (one block per document of a batch, single-query searches):
    # numba's low-occupancy warning would only be noise on the users' terminal
    numba.config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
    try:
        from numba.cuda.cudadrv.driver import driver
        if not driver.is_available:
            return False, "no CUDA driver or GPU found"
        if not _nvvm_found():
            return False, "CUDA driver found, but not libNVVM to compile kernels (pip install 'numba-cuda[cu13]')"
        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
        cc = ".".join(map(str, device.compute_capability))
        free, total = cuda.current_context().get_memory_info()
        return True, f"{name}, compute capability {cc}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free"
    except Exception as exc:
        return False, f"CUDA present but unusable: {str(exc).splitlines()[0]}"


_NVVM_MARK = ".nvvm-found"


def _nvvm_found() -> bool:
    """Whether libNVVM can be loaded (numba-cuda compiles with it). Loading it holds the GIL for
    about 0.2 s (an H100 host, 2026-11-27), which stalled the command's reads beside the driver's
    start; so it is checked once per kernel-cache folder and remembered there (a mark file), not
    in every process."""
    from .kernels.jit import cache_folder
    folder = cache_folder()
    if folder is not None and (folder / _NVVM_MARK).exists():
        return True
    from numba.cuda.cudadrv import nvvm
    if not nvvm.is_available():
        return False
    if folder is not None:
        try:
            (folder / _NVVM_MARK).touch()
        except OSError:
            pass
    return True


def resolve(device: str = "auto") -> Backend:
    """Turn a user's ``--device`` into a Backend; ``cuda`` without a usable GPU is an error."""
    device = (device or "auto").lower()
    if device not in DEVICES:
        raise BackendError(f"unknown device {device!r}: expected one of {', '.join(DEVICES)}")
    if device == "cpu":
        return Backend("cpu", False, "requested with --device cpu")
    usable, what = cuda_status()
    if device == "cuda":
        if not usable:
            raise BackendError(f"--device cuda requested but CUDA is not usable: {what}")
        return Backend("cuda", simulator_enabled(), what)
    if usable and not simulator_enabled():
        return Backend("cuda", False, f"auto chose the GPU: {what}", auto=True)
    if simulator_enabled():
        return Backend("cpu", False, "auto chose the CPU: only the CUDA simulator is active (use --device cuda to run "
                       "kernels in it)", auto=True)
    return Backend("cpu", False, f"auto chose the CPU: {what}", auto=True)


class PendingBackend:
    """A ``--device`` choice resolved when first used (``get()``, ``as_backend`` or any Backend
    attribute), not when the command starts: the GPU's driver and context start in a thread
    (``start_cuda_early``, about 0.2 s) while the command reads its inputs, instead of the command
    waiting for them before its first read. ``on_resolve(backend)`` runs once, at resolution (the
    CLI's "device: ..." line)."""

    def __init__(self, device: str, on_resolve=None):
        self._device, self._on_resolve, self._backend = device, on_resolve, None

    def get(self) -> Backend:
        if self._backend is None:
            self._backend = resolve(self._device)
            if self._on_resolve is not None:
                self._on_resolve(self._backend)
        return self._backend

    def __getattr__(self, name):
        return getattr(self.get(), name)


def as_backend(device: "str | Backend | PendingBackend" = "auto") -> Backend:
    """A Backend as it is (decided once, at the CLI or API boundary), a pending one resolved, or a
    ``--device`` string resolved."""
    if isinstance(device, Backend):
        return device
    if isinstance(device, PendingBackend):
        return device.get()
    return resolve(device)


def device_memory() -> tuple[int, int] | None:
    """(free, total) bytes of the current CUDA device, or None without a real GPU."""
    if simulator_enabled():
        return None
    usable, _ = cuda_status()
    if not usable:
        return None
    from numba import cuda
    return cuda.current_context().get_memory_info()


def cpu_threads() -> int:
    import numba
    return numba.get_num_threads()
