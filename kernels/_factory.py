"""Kernel factories: kernels whose shared-memory sizes depend on launch geometry are made by a
function of that geometry (numba needs compile-time shared array shapes); each distinct
geometry is compiled once."""
import functools

kernel_cache = functools.lru_cache(maxsize=None)
