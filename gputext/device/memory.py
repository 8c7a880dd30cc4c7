"""Device memory for every host driver: workspaces, pinned host buffers, packed uploads, staged
copy-back, memory shares and streams, held by one ``Resources`` object per device.

numba allocates device memory with synchronous ``cuMemAlloc`` calls and frees it late (deferred
deallocation), and pinning host memory takes milliseconds, so buffers that a driver needs on
every batch or every call are kept and reused here instead of allocated per call. Slicing a
numba device array costs tens of microseconds of Python, so views are cached too.

    from gputext.device import resources
    res = resources()                                  # this device's (one per device, made once)
    rows = res.rows_that_fit(n_q, per_row_bytes=8 * n_docs, share=0.30)
    acc = res.workspace.get("acc", (rows, n_docs), np.int64, zeroed=True)
    d_a, d_b = res.upload_packed((a, b), into=res.workspace, name="upload")  # one pinned transfer
    res.copy_back(d_out, host_out, staging_bytes=32 << 20, stream=res.stream("copy"))

A family that keeps buffers with one of its objects (an index on the device, a clusterer) gives
it its own ``Workspace`` (``Workspace()``), so buffers live and die with that object; the
``Resources.workspace`` is for buffers of one call at a time (drivers run one search at a time
per process). No module keeps device buffers in globals: they live in a Workspace.
"""
from __future__ import annotations

import numba
import numpy as np
from ..kernels.jit import cpu_jit

ALIGN = 256  # byte alignment of each array inside a packed upload
SMALL_COPY = 1 << 20  # host copies below this many bytes: one numpy copy (no parallel region)


class Workspace:
    """Named device arrays reused while large enough, with their views cached by shape.

    ``get(name, shape, dtype)`` returns a C-contiguous device view of ``shape`` backed by a flat
    buffer of at least its size; a larger request replaces the buffer (its old views are
    dropped, so a view obtained before may then point at freed memory: take views per call).
    ``zeroed``: set to 0 when (re)allocated; the caller keeps it zero after use.
    """

    def __init__(self):
        self.buffers: dict = {}  # name -> (flat device array, {shape: view})

    def get(self, name: str, shape, dtype, zeroed: bool = False):
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        have = self.buffers.get(name)
        if have is not None:
            view = have[1].get(shape)
            if view is not None and have[0].dtype == dtype:
                return view
        size = 1
        for s in shape:
            size *= s
        if have is None or have[0].size < size or have[0].dtype != np.dtype(dtype):
            from numba import cuda
            self.buffers.pop(name, None)
            arr = cuda.device_array(max(size, 1), dtype)
            if zeroed:
                zero(arr)
            have = (arr, {})
            self.buffers[name] = have
        arr, views = have
        if len(views) > 64:  # views of many shapes (e.g. packed uploads of varying size): keep few
            views.clear()
        view = arr[:size].reshape(shape) if len(shape) != 1 or size != arr.size else arr
        views[shape] = view
        return view

    def array(self, name: str):
        """The flat buffer behind ``name`` (None when there is none)."""
        have = self.buffers.get(name)
        return None if have is None else have[0]

    def adopt(self, name: str, arr) -> None:
        """Make a flat device array the buffer behind ``name`` (hand a buffer between owners)."""
        self.buffers[name] = (arr, {})

    def release(self, larger_than: int = 0) -> None:
        """Drop buffers above a size (e.g. the score rows of a big batch once a search ends)."""
        for name, (arr, _) in list(self.buffers.items()):
            if arr.nbytes > larger_than:
                del self.buffers[name]

    @property
    def nbytes(self) -> int:
        return sum(arr.nbytes for arr, _ in self.buffers.values())


class PinnedPool:
    """Named page-locked host buffers kept for the life of their owner (pinning is slow)."""

    def __init__(self):
        self.buffers: dict = {}  # name -> pinned uint8 buffer
        self.views: dict = {}  # (name, shape, dtype) -> view

    def get(self, name: str, shape, dtype, headroom: float = 0.25) -> np.ndarray:
        """A pinned host view of ``shape`` and ``dtype``; a larger request re-pins with headroom."""
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        dt = np.dtype(dtype)
        key = (name, shape, dt.str)
        view = self.views.get(key)
        if view is not None:
            return view
        nbytes = dt.itemsize
        for s in shape:
            nbytes *= s
        buf = self.buffers.get(name)
        if buf is None or buf.nbytes < nbytes:
            from numba import cuda
            buf = cuda.pinned_array(max(ALIGN, nbytes + int(nbytes * headroom)), np.uint8)
            self.buffers[name] = buf
            self.views = {k: v for k, v in self.views.items() if k[0] != name}
        view = buf[:nbytes].view(dt).reshape(shape)
        if len(self.views) > 256:  # views of many shapes: keep the dict small
            self.views.clear()
        self.views[key] = view
        return view


def zero(arr, stream=0) -> None:
    """Set a device array to 0 (one driver memset on a real GPU)."""
    from ..backend import simulator_enabled
    if simulator_enabled():
        arr.copy_to_device(np.zeros(arr.shape, arr.dtype))
        return
    from numba.cuda.cudadrv import driver
    driver.device_memset(arr, 0, arr.nbytes, stream=stream)


def free_deferred() -> None:
    """Run numba's deferred frees now (large buffers must be gone before the next allocation)."""
    try:
        from numba import cuda
        cuda.current_context().deallocations.clear()
    except Exception:  # the simulator has no deallocation queue
        pass


@cpu_jit(parallel=True)
def copy_parallel(src, dst):
    """dst[:] = src[:] (1-D, same length) in parallel blocks of 16 K elements (also takes a fresh
    destination's first-touch page faults on every core)."""
    n = src.shape[0]
    step = 16384
    for b in numba.prange((n + step - 1) // step):
        for i in range(b * step, min(n, (b + 1) * step)):
            dst[i] = src[i]


def host_copy(src: np.ndarray, dst: np.ndarray) -> None:
    """dst[:] = src[:] for 1-D arrays: one numpy copy when small, else every core."""
    if src.nbytes < SMALL_COPY:
        dst[:] = src
    else:
        copy_parallel(src, dst)


def packed_layout(arrays) -> tuple[list[int], int]:
    """Byte offsets (ALIGN-aligned) of arrays packed one after another, and the total size;
    an int in ``arrays`` stands for an array of that many bytes."""
    offsets, at = [], 0
    for a in arrays:
        offsets.append(at)
        at += -(-(a if isinstance(a, int) else a.nbytes) // ALIGN) * ALIGN
    return offsets, max(at, ALIGN)


class Resources:
    """One device's workspace, pinned buffers and streams (see the module docstring).

    ``simulator``: numba's CUDA simulator (no memory to plan against, no driver).
    """

    def __init__(self, simulator: bool, device_id: int = 0):
        self.simulator = simulator
        self.device_id = device_id
        self.workspace = Workspace()
        self.pinned = PinnedPool()
        self._streams: dict = {}
        self._attributes: dict = {}

    # ------------------------------------------------------------------ memory

    def memory(self) -> tuple[int, int] | None:
        """(free, total) bytes of the device, or None in the simulator."""
        if self.simulator:
            return None
        from numba import cuda
        return cuda.current_context().get_memory_info()

    def share(self, fraction: float) -> int | None:
        """``fraction`` of the free device memory in bytes (None in the simulator)."""
        mem = self.memory()
        return None if mem is None else int(fraction * mem[0])

    def rows_that_fit(self, n_rows: int, per_row_bytes: int, share: float, batch_size: int | None = None,
                      limit: int = 65535, simulator_rows: int = 64, small_bytes: int = 64 << 20) -> int:
        """Rows of a batch: ``batch_size`` when given, else as many as ``share`` of the free memory
        holds at ``per_row_bytes`` each (simulator: ``simulator_rows``), within [1, min(n_rows,
        limit)]. Work below ``small_bytes`` in total does not ask the driver (a call per search)."""
        if batch_size:
            return max(1, min(int(batch_size), n_rows, limit))
        if self.simulator:
            return max(1, min(n_rows, limit, simulator_rows))
        if n_rows * per_row_bytes <= small_bytes:
            return max(1, min(n_rows, limit))
        budget = self.share(share)
        return max(1, min(n_rows, limit, int(budget // max(per_row_bytes, 1))))

    def attribute(self, name: str, default: int, simulated: bool = False) -> int:
        """A device attribute (CU_DEVICE_ATTRIBUTE_<name>), read once; ``default`` when the driver
        does not say, and in the simulator unless ``simulated`` (its fake device answers some)."""
        if name not in self._attributes:
            value = default
            if simulated or not self.simulator:
                try:
                    from numba import cuda
                    value = int(getattr(cuda.get_current_device(), name, default) or default)
                except Exception:
                    value = default
            self._attributes[name] = value
        return self._attributes[name]

    @property
    def l2_bytes(self) -> int:
        """The device's L2 cache in bytes (0 in the simulator or when the driver does not say)."""
        return self.attribute("L2_CACHE_SIZE", 0)

    @property
    def multiprocessors(self) -> int:
        return self.attribute("MULTIPROCESSOR_COUNT", 1, simulated=True)

    # ------------------------------------------------------------------ streams

    def stream(self, name: str = "compute"):
        """A named stream made once (``"default"``: numba's default stream)."""
        s = self._streams.get(name)
        if s is None:
            from numba import cuda
            s = cuda.default_stream() if name == "default" else cuda.stream()
            self._streams[name] = s
        return s

    # ------------------------------------------------------------------ transfers

    def upload_packed(self, arrays, into: Workspace | None = None, name: str = "upload", stream=None,
                      sync: bool = True) -> list:
        """Host arrays to the device in one transfer: each is copied into a pinned buffer at a
        256-byte aligned offset, the buffer goes up in one host -> device copy (full PCIe speed,
        versus one synchronous pageable copy and one allocation per array), and the result is
        device views of the same shapes and dtypes. into: a Workspace whose buffer ``name``
        receives them (reused), else one fresh allocation. Arrays must be non-empty. sync=False:
        the copy is asynchronous on ``stream``; the pinned buffer ``name`` must not be reused
        before the stream has been synchronised."""
        arrays = [np.ascontiguousarray(a) for a in arrays]
        offsets, total = packed_layout(arrays)
        host = self.pinned.get(name, (total,), np.uint8)
        for a, off in zip(arrays, offsets):
            host_copy(a.reshape(-1).view(np.uint8), host[off:off + a.nbytes])
        if into is not None:
            d = into.get(name, (total,), np.uint8)
        else:
            from numba import cuda
            d = cuda.device_array(total, np.uint8)
        if stream is None:
            d.copy_to_device(host)
        else:
            d.copy_to_device(host, stream=stream)
            if sync:
                stream.synchronize()
        return [d[off:off + a.nbytes].view(a.dtype).reshape(a.shape) for a, off in zip(arrays, offsets)]

    def copy_back(self, d_arr, host: np.ndarray, staging_bytes: int, stream=None) -> None:
        """Copy a C-contiguous device array into a C-contiguous host array of the same shape:
        chunks of rows go device -> pinned staging buffer asynchronously (full PCIe speed) while
        the previous chunk is copied staging -> host by every core (which also takes the
        first-touch page faults of a fresh host array in parallel). staging_bytes <= 0: one
        plain copy_to_host. Returns when the host array holds the data."""
        n = d_arr.shape[0]
        row_bytes = max(1, host.nbytes // max(n, 1))
        stream = stream if stream is not None else self.stream("copy")
        if staging_bytes <= 0 or host.nbytes <= row_bytes or n == 0:
            d_arr.copy_to_host(host, stream=stream)
            stream.synchronize()
            return
        from numba import cuda
        rows = max(1, staging_bytes // row_bytes)
        bufs = [self.pinned.get(f"staging{i}", (rows * row_bytes,), np.uint8, headroom=0.0) for i in range(2)]
        pending = None  # (event, staging view, host view) of the chunk in flight
        for ci, r0 in enumerate(range(0, n, rows)):
            r1 = min(n, r0 + rows)
            view = bufs[ci % 2][:(r1 - r0) * row_bytes].view(host.dtype).reshape((r1 - r0,) + host.shape[1:])
            d_arr[r0:r1].copy_to_host(view, stream=stream)
            done = cuda.event()
            done.record(stream)
            if pending is not None:
                pending[0].synchronize()
                host_copy(pending[1].reshape(-1), pending[2].reshape(-1))
            pending = (done, view, host[r0:r1])
        pending[0].synchronize()
        host_copy(pending[1].reshape(-1), pending[2].reshape(-1))


_BY_DEVICE: dict = {}  # device id -> Resources: the one registry of per-device state


def trim(keep_bytes: int) -> None:
    """Between commands of a long-lived process (the warm server's resident, gputext.daemon):
    drop every device's workspace and pinned buffers when together they hold more than
    ``keep_bytes``, then run numba's deferred frees. Small buffers stay for the next command
    (re-pinning and re-allocating cost milliseconds each). The garbage collector runs over the
    young generations (milliseconds), over everything when buffers were dropped (they may sit in
    reference cycles)."""
    dropped = False
    for dev, res in list(_BY_DEVICE.items()):
        if res.workspace.nbytes + sum(b.nbytes for b in res.pinned.buffers.values()) > keep_bytes:
            del _BY_DEVICE[dev]
            dropped = True
    import gc
    gc.collect(2 if dropped else 1)
    from ..backend import driver_started
    if driver_started():
        free_deferred()


def resources() -> Resources:
    """The current device's Resources (made on first use)."""
    from ..backend import simulator_enabled

    sim = simulator_enabled()
    dev = 0
    if not sim:
        from numba import cuda
        dev = int(cuda.get_current_device().id)
    res = _BY_DEVICE.get(dev)
    if res is None:
        res = _BY_DEVICE[dev] = Resources(sim, dev)
    return res
