"""Pre-marshalled CUDA launches and copies for the per-document path of stream clustering.

numba's ``kernel[grid, block, stream](*args)`` types every argument, looks the overload up and
flattens each array into its ABI fields (meminfo, parent, size, itemsize, data, shape, strides)
on every call: ~0.05-0.1 ms per launch for the scan's 11 arguments, a fifth of the 0.5 ms
latency goal at batch size 1. The arguments of the per-document launches change little: the
arrays only when the centroid matrix grows, the scalars every call. ``RawLaunch`` flattens the
arguments once, with numba's own marshalling (``_Kernel._prepare_args``), into one array of
8-byte kernel parameters, and then launches with one driver call (``cuLaunchKernel``) after
writing the scalars that changed into their parameter slots. ``copy_h2d``, ``copy_d2h`` and
``sync`` are the driver's asynchronous copies and stream synchronisation on raw addresses.

Only for a real GPU: the simulator and any numba-cuda whose internals differ use the dispatcher
(``RawLaunch`` raises ``RawLaunchUnavailable`` and the caller falls back).
"""
from __future__ import annotations

import ctypes

import numpy as np


class RawLaunchUnavailable(RuntimeError):
    """This numba-cuda / driver binding does not offer what RawLaunch needs."""


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
    return int(stream.handle or 0)


class DriverCalls:
    """The few driver calls of the per-document path, on raw addresses, with error checks."""

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


class RawLaunch:
    """One compiled kernel, its arguments flattened once into 8-byte parameter slots.

    ``RawLaunch(dispatcher, args, stream)`` compiles (or finds) the overload for ``args``'
    types. ``set(i, value)`` rewrites scalar argument i (an integer argument: one slot);
    ``launch(grid, block)`` issues ``cuLaunchKernel`` on ``stream`` (1-D grid and block, no
    dynamic shared memory). The array arguments are kept referenced, so they stay alive; pass
    new arrays by building a new RawLaunch.
    """

    def __init__(self, dispatcher, args, stream):
        self.cu = _binding()
        try:
            argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
            kernel = dispatcher.overloads.get(argtypes) or dispatcher.compile(argtypes)
            func = kernel._codelibrary.get_cufunc()
            flat, starts, retr = [], [], []
            for ty, value in zip(kernel.argument_types, args):
                starts.append(len(flat))
                kernel._prepare_args(ty, value, stream, retr, flat)
        except (AttributeError, TypeError, KeyError) as exc:  # another numba-cuda layout
            raise RawLaunchUnavailable(f"{type(exc).__name__}: {exc}") from exc
        words = []
        for x in flat:
            if isinstance(x, bool):
                raise RawLaunchUnavailable("a boolean kernel parameter (size not 8 bytes)")
            if isinstance(x, ctypes._SimpleCData):
                if ctypes.sizeof(x) != 8 or isinstance(x, (ctypes.c_double, ctypes.c_float)):
                    raise RawLaunchUnavailable(f"kernel parameter {x!r} is not an 8-byte integer")
                x = x.value
            words.append(int(x))
        n = len(words)
        self.values = (ctypes.c_uint64 * n)(*[w & 0xFFFFFFFFFFFFFFFF for w in words])
        base = ctypes.addressof(self.values)
        self.params = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        self.params_addr = ctypes.addressof(self.params)
        self.starts = starts
        self.keep = (args, retr)  # the arrays whose addresses are in the slots
        self.func = int(func.handle)
        self.hstream = stream_handle(stream)
        self.regs = getattr(getattr(func, "attrs", None), "regs", None)

    def set(self, i: int, value: int) -> None:
        self.values[self.starts[i]] = value

    def launch(self, grid: int, block: int) -> None:
        _check(self.cu.cuLaunchKernel(self.func, grid, 1, 1, block, 1, 1, 0, self.hstream, self.params_addr, 0),
               "cuLaunchKernel")
