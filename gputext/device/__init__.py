"""The device runtime: one way to hold device memory, launch kernels and time stages.

Every family's host driver (engine, dense kNN, star graph, stream clustering, RankSVM) runs on
these three pieces; none keeps device buffers in module globals or copies this plumbing.

  memory.py  ``resources()``: the current device's ``Resources`` (made once per device):
             ``workspace`` (named device buffers grown on demand, views cached: ``Workspace``),
             ``pinned`` (named page-locked host buffers: ``PinnedPool``), ``upload_packed``
             (several host arrays up in one pinned transfer), ``copy_back`` (device -> host
             through two pinned staging buffers, every core copying), ``rows_that_fit`` (batch
             rows from a share of the free memory), ``stream(name)``, ``multiprocessors``.
  launch.py  ``Launch(kernel, grid, block, args, stream)``: arguments marshalled once, each
             launch one ``cuLaunchKernel`` (numba's dispatcher in the simulator); ``set(i, v)``
             changes an argument. ``LaunchSet``: one Launch per kernel for a driver that calls a
             fixed set of kernels many times (an iterative solver), arguments rewritten only when
             they change, ``ArrayRef`` pieces (``rows``, ``item``) passed by address.
             ``DriverCalls``: raw async copies / records / syncs.
             ``blocks(n, block)``, ``next_pow2(n)``.
  timer.py   ``StageTimer``: CUDA events + host wall per named stage; ``RunReport``: the typed
             report a run fills (families subclass it; ``as_stats()`` is the flat dict view).

How a new driver uses it (the GPU SVM, say)::

    from gputext.device import Launch, RunReport, StageTimer, Workspace, resources

    @dataclass
    class SvmReport(RunReport):           # typed fields for what this family reports
        iterations: int = 0

    class SvmOnDevice:
        def __init__(self, X):
            self.res = resources()
            self.work = Workspace()        # buffers that live as long as this object
            self.d_X, self.d_y = self.res.upload_packed((X.data, y), into=self.work, name="data")
            self.grad = Launch(kernels.gradient, grid=blocks(n, 256), block=256,
                               args=(self.d_X, self.d_y, 0.0, out), stream=self.res.stream())

        def step(self, c, report):
            timer = StageTimer(on=report is not None, stream=self.res.stream())
            out = self.work.get("out", (n,), np.float64)   # reused, grown when n grows
            self.grad.set(2, c)            # one slot rewritten, no re-marshalling
            self.grad()                    # one driver call
            timer.mark("gradient")
            self.res.copy_back(out, host, staging_bytes=0, stream=self.res.stream())
            report.stages_ms.update(timer.device_ms())

Rules: allocate through a Workspace (per object, or ``resources().workspace`` for one call's
scratch), never ``cuda.device_array`` in a loop; move several small inputs with one
``upload_packed``; launch a kernel that runs more than once per call through ``Launch``; time
with ``StageTimer`` and report through a ``RunReport`` subclass. Importing this package imports
nothing heavy; ``memory`` and ``launch`` import numba when first used.
"""
from __future__ import annotations

_EXPORTS = {
    "Resources": "memory", "Workspace": "memory", "PinnedPool": "memory", "resources": "memory", "zero": "memory",
    "host_copy": "memory", "Launch": "launch", "DriverCalls": "launch", "RawLaunchUnavailable": "launch",
    "blocks": "launch", "LaunchSet": "launch", "ArrayRef": "launch", "rows": "launch", "item": "launch", "next_pow2": "launch", "StageTimer": "timer", "RunReport": "timer", "elapsed_ms": "timer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gputext.device' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
