"""The one launch layer: a kernel with its arguments marshalled once, launched by one driver call.

numba's ``kernel[grid, block, stream](*args)`` types every argument, looks the overload up and
flattens each array into its ABI fields (meminfo, parent, size, itemsize, data, shape, strides)
on every call: 0.05-0.15 ms of host time per launch, more than the kernels of a single query take.
``Launch`` does that work once, with numba's own marshalling (``_Kernel._prepare_args``), into
one array of 8-byte parameter slots, and then launches with one ``cuLaunchKernel``; ``set(i,
value)`` rewrites argument i in place (an int or float scalar, or a device array of the same
rank). A launch whose arguments did not change costs one driver call.

On numba's CUDA simulator, and on a numba-cuda whose internals differ (the marshalling is a
private numba API), ``Launch`` keeps the argument list and calls the dispatcher instead: same
results, the dispatcher's cost. ``Launch.mode`` says which ("raw" or "dispatcher").

CUDA graphs are not used (a decision, to revisit with a measurement): the sequences that repeat
(one query's accumulate, select and merges) change grid sizes and argument shapes on every call
(the accumulate grid follows the query's postings), so a graph would be re-instantiated or
updated per call, and a raw launch already costs one driver call (a few microseconds).

``DriverCalls`` are the asynchronous copies, event records and stream synchronisation on raw
addresses (pinned host buffers and device arrays), for paths that count microseconds.

    from gputext.device.launch import Launch
    scan = Launch(kernel, grid=(n_seg, n_q), block=256, args=(acc, n_docs, 0), stream=stream)
    scan.set(2, 7)        # scalars and arrays can change between launches
    scan()                # one cuLaunchKernel (or kernel[grid, block, stream](*args) in the simulator)
    scan(grid=(n_seg, 1)) # another grid, same arguments
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..kernels.geometry import blocks, next_pow2  # noqa: F401 (launch arithmetic, written once)


class RawLaunchUnavailable(RuntimeError):
    """This numba-cuda / driver binding does not offer what a raw launch needs."""


def _binding():
    try:
        from cuda.bindings import driver as cu
    except ImportError:  # older cuda-python layout
        try:
            from cuda import cuda as cu
        except ImportError as exc:
            raise RawLaunchUnavailable(f"no CUDA driver binding: {exc}") from exc
    return cu


def _check(result, what):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err!r}")


def device_address(devary) -> int:
    """Device pointer (int) of a numba device array."""
    return int(devary.device_ctypes_pointer.value or 0)


def host_address(ary: np.ndarray) -> int:
    return int(ary.ctypes.data)


def stream_handle(stream) -> int:
    """The driver handle of a numba stream (0: the default stream)."""
    if stream is None or isinstance(stream, int):
        return int(stream or 0)
    return int(stream.handle or 0)


def _dim3(d) -> tuple[int, int, int]:
    d = (d,) if isinstance(d, (int, np.integer)) else tuple(d)
    d = tuple(int(x) for x in d) + (1,) * (3 - len(d))
    return d[0], d[1], d[2]


class DriverCalls:
    """Copies, event records and synchronisation of one stream, on raw addresses (real GPU only)."""

    def __init__(self, stream):
        self.cu = _binding()
        self.hstream = stream_handle(stream)

    def copy_h2d(self, dst: int, src: int, nbytes: int) -> None:
        _check(self.cu.cuMemcpyHtoDAsync(dst, src, nbytes, self.hstream), "cuMemcpyHtoDAsync")

    def copy_d2h(self, dst: int, src: int, nbytes: int) -> None:
        _check(self.cu.cuMemcpyDtoHAsync(dst, src, nbytes, self.hstream), "cuMemcpyDtoHAsync")

    def sync(self) -> None:
        _check(self.cu.cuStreamSynchronize(self.hstream), "cuStreamSynchronize")

    def record(self, event) -> None:
        _check(self.cu.cuEventRecord(int(event.handle), self.hstream), "cuEventRecord")


def _as_bytes(x) -> bytes:
    """One flattened kernel parameter (numba's marshalling output) as its little-endian bytes."""
    if isinstance(x, bool):
        return bytes([int(x)])
    if isinstance(x, ctypes._SimpleCData):
        return ctypes.string_at(ctypes.addressof(x), ctypes.sizeof(x))
    return (int(x) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")


class Launch:
    """A kernel launch with pre-marshalled arguments (module docstring).

    kernel: a ``numba.cuda.jit`` dispatcher; grid, block: int or tuple (up to 3-d); args: the
    kernel's arguments (device arrays and scalars); stream: a numba stream (None: the default
    stream); raw: False forces the dispatcher path. A float argument given as a Python int stays
    typed as the first launch typed it (numba types ints as int64): pass the same types later.
    """

    def __init__(self, kernel, grid, block, args, stream=None, raw: bool = True):
        self.kernel = kernel
        self.grid = grid
        self.block = block
        self.args = list(args)
        self.stream = stream
        self.mode = "dispatcher"
        self.why_not_raw = "" if raw else "raw launches switched off"
        self._raw = None
        if raw:
            try:
                self._raw = _RawParams(kernel, self.args, stream)
                self.mode = "raw"
            except RawLaunchUnavailable as exc:
                self.why_not_raw = str(exc)

    def set(self, i: int, value) -> None:
        """Argument i becomes ``value`` (scalar of the same kind, or array of the same dtype and rank)."""
        self.args[i] = value
        if self._raw is not None:
            self._raw.set(i, value)

    def set_array(self, i: int, address: int, shape: tuple, itemsize: int) -> None:
        """Raw launches only: argument i (an array of the same rank) becomes the C-contiguous device
        array of ``shape`` at ``address`` (no numba view is made: slicing a numba device array
        costs tens of microseconds)."""
        self._raw.set_array(i, address, shape, itemsize)

    def __call__(self, grid=None, block=None) -> None:
        grid = self.grid if grid is None else grid
        block = self.block if block is None else block
        if self._raw is not None:
            self._raw.launch(grid, block)
        elif self.stream is None:
            self.kernel[grid, block](*self.args)
        else:
            self.kernel[grid, block, self.stream](*self.args)

    launch = __call__

    @property
    def regs(self):
        """Registers per thread of the compiled kernel (raw launches; None otherwise)."""
        return None if self._raw is None else self._raw.regs


def raw_launch(kernel, args, stream=None, grid=1, block=1) -> Launch:
    """A Launch that must take the raw path: RawLaunchUnavailable when it cannot (the caller
    then chooses the dispatcher explicitly and says so)."""
    launch = Launch(kernel, grid, block, args, stream)
    if launch.mode != "raw":
        raise RawLaunchUnavailable(launch.why_not_raw)
    return launch


class ArrayRef:
    """``shape`` elements from element ``start`` of a C-contiguous device array, passed to a raw
    launch by address (slicing a numba device array costs tens of microseconds); ``array()``
    makes the numba view (first launch, simulator)."""

    __slots__ = ("base", "start", "shape")

    def __init__(self, base, start: int, shape: tuple):
        self.base, self.start, self.shape = base, int(start), tuple(int(s) for s in shape)

    def address(self) -> int:
        return device_address(self.base) + self.start * self.base.dtype.itemsize

    def array(self):
        size = int(np.prod(self.shape, dtype=np.int64))
        return self.base.reshape(self.base.size)[self.start:self.start + size].reshape(self.shape)


def rows(a, r0: int, r1: int) -> ArrayRef:
    """Rows [r0, r1) of a C-contiguous device array."""
    inner = tuple(a.shape[1:])
    return ArrayRef(a, r0 * int(np.prod(inner, dtype=np.int64)), (r1 - r0,) + inner)


def item(a, i: int) -> ArrayRef:
    """a[i] of a C-contiguous device array (one dimension less)."""
    inner = tuple(a.shape[1:])
    return ArrayRef(a, i * int(np.prod(inner, dtype=np.int64)), inner)


class LaunchSet:
    """The launches of a driver that calls a fixed set of kernels many times on the default stream
    (an iterative solver, say): one ``Launch`` per kernel, made at its first call; a later call
    rewrites only the arguments that are not the same objects as last time (``ArrayRef`` pieces
    by address). Raw launches on a GPU; the dispatcher in the simulator or where numba-cuda lacks
    the raw path (then for every kernel). ``copy_up``, ``wait`` and ``read`` are the small
    transfers around them; ``n_launches`` and ``n_reads`` count the driver's work."""

    def __init__(self):
        from .memory import PinnedPool, resources
        self.res = resources()
        self.pinned = PinnedPool()
        self.raw = not self.res.simulator
        self.calls = None
        if self.raw:
            try:
                self.calls = DriverCalls(None)
            except RawLaunchUnavailable:
                self.raw = False
        self.launches: dict = {}
        self.n_launches = 0
        self.n_reads = 0

    def launch(self, kernel, grid, block, *args) -> None:
        """kernel[grid, block](*args) through the kernel's one Launch; args may hold ArrayRef pieces."""
        entry = self.launches.get(kernel)
        if entry is None:
            real = [a.array() if isinstance(a, ArrayRef) else a for a in args]
            launch = Launch(kernel, grid, block, real, raw=self.raw)
            if self.raw and launch.mode != "raw":  # a numba-cuda without the raw path: the dispatcher for all
                self.raw, self.calls = False, None
                self.launches = {}
                launch = Launch(kernel, grid, block, real, raw=False)
            entry = self.launches[kernel] = [launch, list(args)]
        else:
            launch, last = entry
            for i, a in enumerate(args):
                if a is not last[i]:
                    last[i] = a
                    self._set(launch, i, a)
        self.n_launches += 1
        entry[0](grid, block)

    def _set(self, launch, i: int, a) -> None:
        if isinstance(a, ArrayRef):
            if self.raw:
                launch.set_array(i, a.address(), a.shape, a.base.dtype.itemsize)
            else:
                launch.set(i, a.array())
        elif self.raw and hasattr(a, "device_ctypes_pointer"):
            launch.set_array(i, device_address(a), a.shape, a.dtype.itemsize)
        else:
            launch.set(i, a)

    def copy_up(self, dst: ArrayRef, host: np.ndarray) -> None:
        """Asynchronous copy of a pinned C-contiguous host array into ``dst`` (same size); the
        host array must not change before the next ``wait``."""
        if self.raw:
            self.calls.copy_h2d(dst.address(), host.ctypes.data, host.nbytes)
        else:
            dst.array().copy_to_device(host)

    def wait(self) -> None:
        """Wait for the stream."""
        if self.raw:
            self.calls.sync()
        else:
            from numba import cuda
            cuda.synchronize()

    def read(self, d_arr, n_rows: int | None = None) -> np.ndarray:
        """A host copy of a C-contiguous device array (its first ``n_rows`` rows); waits."""
        self.n_reads += 1
        if not self.raw:
            out = (d_arr if n_rows is None else d_arr[:n_rows]).copy_to_host()
            self.wait()
            return out
        shape = tuple(d_arr.shape) if n_rows is None else (n_rows,) + tuple(d_arr.shape[1:])
        host = self.pinned.get("read", shape, d_arr.dtype)
        self.calls.copy_d2h(host.ctypes.data, device_address(d_arr), host.nbytes)
        self.wait()
        return host.copy()


class _RawParams:
    """The flattened parameters of one compiled kernel and the driver call that launches it."""

    def __init__(self, dispatcher, args, stream):
        from ..backend import simulator_enabled

        if simulator_enabled():
            raise RawLaunchUnavailable("the CUDA simulator has no driver")
        self.cu = _binding()
        try:
            argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
            kernel = dispatcher.overloads.get(argtypes) or dispatcher.compile(argtypes)
            if getattr(kernel, "cooperative", False) or getattr(kernel, "debug", False):
                raise RawLaunchUnavailable("cooperative or debug kernels launch through numba")
            func = kernel._codelibrary.get_cufunc()
            self._kernel = kernel
            self.types = kernel.argument_types
            self.starts, self.counts, flat, self.retr = [], [], [], []
            self.int_arg = [str(ty).startswith(("int", "uint")) for ty in self.types]
            for ty, value in zip(self.types, args):
                part = self._flatten(ty, value)
                self.starts.append(len(flat))
                self.counts.append(len(part))
                flat.extend(part)
        except (AttributeError, TypeError, KeyError, NotImplementedError) as exc:  # another numba-cuda layout
            raise RawLaunchUnavailable(f"{type(exc).__name__}: {exc}") from exc
        n = max(1, len(flat))
        self.values = (ctypes.c_uint64 * n)()
        self.base = ctypes.addressof(self.values)
        for slot, x in enumerate(flat):
            self._write(slot, x)
        self.params = (ctypes.c_void_p * n)(*[self.base + 8 * i for i in range(n)])
        self.params_addr = ctypes.addressof(self.params)
        self.keep = list(args)  # the arrays whose addresses are in the slots stay alive
        self.func = int(func.handle)
        self.hstream = stream_handle(stream)
        self.regs = getattr(getattr(func, "attrs", None), "regs", None)

    def _flatten(self, ty, value) -> list:
        out: list = []
        self._kernel._prepare_args(ty, value, 0, self.retr, out)
        for x in out:
            if isinstance(x, ctypes._SimpleCData) and ctypes.sizeof(x) > 8:
                raise RawLaunchUnavailable(f"kernel parameter {x!r} wider than 8 bytes")
        return out

    def _write(self, slot: int, x) -> None:
        data = _as_bytes(x)
        self.values[slot] = 0
        ctypes.memmove(self.base + 8 * slot, data, len(data))

    def set(self, i: int, value) -> None:
        if self.int_arg[i] and isinstance(value, (int, np.integer)):
            self.values[self.starts[i]] = int(value) & 0xFFFFFFFFFFFFFFFF  # two's complement, low bytes first
            return
        part = self._flatten(self.types[i], value)
        if len(part) != self.counts[i]:
            raise ValueError(f"argument {i}: {len(part)} parameter slots, the launch was marshalled with {self.counts[i]}")
        for j, x in enumerate(part):
            self._write(self.starts[i] + j, x)
        self.keep[i] = value

    def set_array(self, i: int, address: int, shape: tuple, itemsize: int) -> None:
        ndim = len(shape)
        if self.counts[i] != 5 + 2 * ndim:
            raise ValueError(f"argument {i}: a {ndim}-d array needs {5 + 2 * ndim} slots, it has {self.counts[i]}")
        v, s = self.values, self.starts[i]
        size = 1
        for d in shape:
            size *= int(d)
        v[s + 2] = size  # numba's array ABI: meminfo, parent, size, itemsize, data, shape..., strides...
        v[s + 3] = itemsize
        v[s + 4] = address
        stride = itemsize
        for d in range(ndim - 1, -1, -1):
            v[s + 5 + d] = int(shape[d])
            v[s + 5 + ndim + d] = stride
            stride *= int(shape[d])

    def launch(self, grid, block) -> None:
        gx, gy, gz = _dim3(grid)
        bx, by, bz = _dim3(block)
        _check(self.cu.cuLaunchKernel(self.func, gx, gy, gz, bx, by, bz, 0, self.hstream, self.params_addr, 0),
               "cuLaunchKernel")
