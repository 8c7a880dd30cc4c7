"""Kernel factories: kernels whose shared-memory sizes depend on launch geometry are made by a
function of that geometry (numba needs compile-time shared array shapes); each distinct
geometry is compiled once."""
import functools

from .jit import cuda_kernel


def kernel_cache(factory):
    """``functools.lru_cache`` of a kernel factory (each geometry made and compiled once); a kernel
    it returns (or each of a tuple of kernels) also names the call that made it, ``gputext_factory``
    = (module, name, args, kwargs items[, position in the tuple]), so that another process can make
    the same kernel (gputext.compile_ahead's
    helper compiles it into the kernel cache while this process compiles another)."""
    cached = functools.lru_cache(maxsize=None)(factory)

    @functools.wraps(factory)
    def make(*args, **kwargs):
        made = cached(*args, **kwargs)
        call = (factory.__module__, factory.__qualname__, args, tuple(sorted(kwargs.items())))
        for i, kernel in (enumerate(made) if isinstance(made, tuple) else [(None, made)]):
            if not hasattr(kernel, "gputext_factory"):
                try:
                    kernel.gputext_factory = call if i is None else (*call, i)
                except AttributeError:  # not a dispatcher (a number, a device function's wrapper)
                    pass
        return made

    make.cache_clear, make.cache_info = cached.cache_clear, cached.cache_info
    return make


def jit_kernel(max_registers: int):
    """A kernel decorator (kernels.jit.cuda_kernel: kept in the kernel cache) with a per-thread
    register cap when ``max_registers`` > 0 (ptxas spills the rest to local memory). Without a cap
    the select and finish kernels take ~230-250 registers at 256 threads (ptxas, sm_90), i.e. one
    block per multiprocessor; 128 allows two."""
    return cuda_kernel(max_registers=int(max_registers))
