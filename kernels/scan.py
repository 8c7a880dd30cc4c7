"""Exclusive prefix sum on the device (int64 out) and its CPU twin.

Used by the inverted-index build (offsets of each term's posting list from the document
frequencies). Two kernels and a host recursion:

1. ``scan_blocks``: block b scans items [b*B*IPT, (b+1)*B*IPT): each thread sums its IPT
   consecutive items, the B thread totals are scanned in shared memory (primitives.block_inclusive_scan), then each thread writes its items'
   exclusive prefixes and the block total goes to ``block_sums[b]``.
2. the block totals are scanned the same way (recursively) and ``add_block_offsets`` adds
   scanned block totals to every item of their block.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import cuda

from ._factory import kernel_cache
from .geometry import blocks
from .primitives import block_inclusive_scan_dev
from .jit import cpu_jit, cuda_kernel


@kernel_cache
def scan_kernels(block: int, items: int):
    """(scan_blocks, add_block_offsets) for ``block`` threads (a power of two) x ``items`` per thread."""

    @cuda_kernel
    def scan_blocks(values, out, block_sums, n):
        # values: (n,) int32/int64; out: (n + 1,) int64; block_sums: (n_blocks,) int64.
        # Item n is taken as 0, so out[n] receives the total.
        sums = cuda.shared.array(block, numba.int64)
        tid = cuda.threadIdx.x
        start = (cuda.blockIdx.x * block + tid) * items
        total = numba.int64(0)
        for i in range(items):
            if start + i < n:
                total += values[start + i]
        mine, block_total = block_inclusive_scan_dev(sums, total, tid, block)  # items past n count as 0
        running = mine - total  # exclusive prefix of this thread's first item
        for i in range(items):
            if start + i <= n:
                out[start + i] = running
            if start + i < n:
                running += values[start + i]
        if tid == 0:
            block_sums[cuda.blockIdx.x] = block_total

    @cuda_kernel
    def add_block_offsets(out, scanned_block_sums, n):
        # each thread adds its block's offset to its items of out (n entries)
        tid = cuda.threadIdx.x
        start = (cuda.blockIdx.x * block + tid) * items
        add = scanned_block_sums[cuda.blockIdx.x]
        for i in range(items):
            if start + i < n:
                out[start + i] += add

    return scan_blocks, add_block_offsets


def exclusive_scan_device(d_values, block: int = 256, items: int = 8):
    """Device array (n,) -> device array (n + 1,) int64 of exclusive prefix sums (last = total)."""
    n = d_values.shape[0]
    d_out = cuda.device_array(n + 1, dtype=np.int64)
    _scan_into(d_values, d_out, n, block, items)
    return d_out


def _scan_into(d_values, d_out, n, block, items):
    scan_blocks, add_block_offsets = scan_kernels(block, items)
    per_block = block * items
    n_blocks = blocks(n + 1, per_block)
    d_sums = cuda.device_array(n_blocks, dtype=np.int64)
    scan_blocks[n_blocks, block](d_values, d_out, d_sums, n)
    if n_blocks > 1:
        d_scanned = cuda.device_array(n_blocks + 1, dtype=np.int64)
        _scan_into(d_sums, d_scanned, n_blocks, block, items)
        add_block_offsets[n_blocks, block](d_out, d_scanned, n + 1)


@cpu_jit
def exclusive_scan_cpu(values):
    """CPU twin: (n,) ints -> (n + 1,) int64 exclusive prefix sums, last entry the total."""
    out = np.empty(values.shape[0] + 1, dtype=np.int64)
    total = np.int64(0)
    for i in range(values.shape[0]):
        out[i] = total
        total += values[i]
    out[values.shape[0]] = total
    return out


def ptx_kernels():
    scan_blocks, add_block_offsets = scan_kernels(256, 8)
    return [
        ("scan_blocks", scan_blocks, "void(int32[::1], int64[::1], int64[::1], int64)"),
        ("add_block_offsets", add_block_offsets, "void(int64[::1], int64[::1], int64)"),
    ]
