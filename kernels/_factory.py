"""Kernel factories: kernels whose shared-memory sizes depend on launch geometry are made by a
function of that geometry (numba needs compile-time shared array shapes); each distinct
geometry is compiled once."""
import functools

import numba
from numba import cuda

kernel_cache = functools.lru_cache(maxsize=None)


def jit_kernel(max_registers: int):
    """cuda.jit, with a per-thread register cap when ``max_registers`` > 0 (ptxas spills the rest
    to local memory). Without a cap the select and finish kernels take ~230-250 registers at 256
    threads (ptxas, sm_90), i.e. one block per multiprocessor; 128 allows two. The simulator has
    no registers: the cap is left out there."""
    if int(max_registers) > 0 and not numba.config.ENABLE_CUDASIM:
        return cuda.jit(max_registers=int(max_registers))
    return cuda.jit
