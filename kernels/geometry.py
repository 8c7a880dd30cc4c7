"""Launch-geometry arithmetic shared by the kernels and the host (gputext.device.launch): plain
Python, so importing it imports no numba."""
from __future__ import annotations


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def blocks(n: int, block: int) -> int:
    """Blocks of ``block`` items covering n items (at least 1)."""
    return max(1, (int(n) + block - 1) // block)
