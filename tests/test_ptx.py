"""Every CUDA kernel compiles for a real GPU (sm_90) with numba.cuda.compile_ptx, no GPU needed.

This catches Python that the CUDA simulator accepts but the CUDA target does not. Each module in
gputext.kernels that defines @cuda.jit kernels exposes ``ptx_kernels()``: a list of
(name, dispatcher, signature) covering every kernel (factories with representative parameters).
"""
import importlib
import pkgutil

import pytest

import gputext.kernels as kernels_pkg

pytestmark = pytest.mark.filterwarnings("ignore")


def kernel_modules():
    for info in pkgutil.iter_modules(kernels_pkg.__path__):
        yield importlib.import_module(f"gputext.kernels.{info.name}")


def all_entries():
    out = []
    for module in kernel_modules():
        if hasattr(module, "ptx_kernels"):
            out.extend((module.__name__, *entry) for entry in module.ptx_kernels())
    return out


def _cuda_dispatchers(module):
    from numba.cuda.dispatcher import CUDADispatcher
    return {name for name, obj in vars(module).items()
            if isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device")}  # kernels, not device functions


def test_every_module_level_kernel_is_listed():
    for module in kernel_modules():
        kernels = _cuda_dispatchers(module)
        listed = {name for name, *_ in (module.ptx_kernels() if hasattr(module, "ptx_kernels") else [])}
        assert kernels <= listed, f"{module.__name__}: kernels without a compile_ptx entry: {sorted(kernels - listed)}"


@pytest.mark.parametrize("module,name,dispatcher,signature", all_entries(), ids=lambda v: v if isinstance(v, str) else "")
def test_compiles_to_ptx(module, name, dispatcher, signature):
    from numba import cuda
    ptx, _ = cuda.compile_ptx(dispatcher.py_func, signature, cc=(9, 0))
    assert ".entry" in ptx or ".visible" in ptx
