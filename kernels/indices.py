"""Unsigned index casts for hot loops, in CUDA kernels and CPU twins alike.

numba wraps every signed array index (i < 0: i + length), a compare, a select and an add in 64
bits an access (about a quarter of the shared accumulation's posting loop in the PTX, and 1.3-1.6x
of the CPU twins' accumulation loops, 2026-11-27); an unsigned index has no wrap. Cast only an
index known to be >= 0: U32 for shared memory, U64 for global positions. Imports numba alone (no
numba.cuda), so CPU-only modules take it too.
"""
import numba

U32 = numba.uint32
U64 = numba.uint64
