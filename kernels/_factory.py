"""Kernel factories: kernels whose shared-memory sizes depend on launch geometry are made by a
function of that geometry (numba needs compile-time shared array shapes); each distinct
geometry is compiled once."""
import functools

from .jit import cuda_kernel

kernel_cache = functools.lru_cache(maxsize=None)


def jit_kernel(max_registers: int):
    """A kernel decorator (kernels.jit.cuda_kernel: kept in the kernel cache) with a per-thread
    register cap when ``max_registers`` > 0 (ptxas spills the rest to local memory). Without a cap
    the select and finish kernels take ~230-250 registers at 256 threads (ptxas, sm_90), i.e. one
    block per multiprocessor; 128 allows two."""
    return cuda_kernel(max_registers=int(max_registers))
