"""Device side of gputext, installed as ``gputext.kernels``.

One module per algorithm; each holds its ``@cuda.jit`` kernels and their ``@numba.njit``
CPU twins. Kernels take only C-contiguous arrays of fixed dtypes with caller-allocated outputs;
launch geometry is always a parameter. The public API never imports numba.cuda directly:
host code goes through gputext.backend.
"""
