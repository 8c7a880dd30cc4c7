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
    from gputext.kernels.jit import compile_ptx
    ptx = compile_ptx(dispatcher, signature, cc=(9, 0))
    assert ".entry" in ptx or ".visible" in ptx


def test_device_functions_are_inlined_by_nvvm_not_by_numba():
    """Every device function goes through jit.device_function (forceinline): numba's IR inliner
    (inline="always") made the kernels compile 2.5x slower, so none may come back."""
    from numba.cuda.dispatcher import CUDADispatcher
    device_fns = [(module.__name__, name, obj) for module in kernel_modules() for name, obj in vars(module).items()
                  if isinstance(obj, CUDADispatcher) and obj.targetoptions.get("device")]
    assert len(device_fns) > 20
    numba_inlined = [f"{m}.{n}" for m, n, obj in device_fns if obj.targetoptions.get("inline", "never") != "never"]
    not_forced = [f"{m}.{n}" for m, n, obj in device_fns if not obj.targetoptions.get("forceinline")]
    assert numba_inlined == [] and not_forced == []
