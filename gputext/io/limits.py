"""Bounds on what an input may declare, checked before anything of that size is allocated.

A sparse input names its shape by its largest index (svmlight ``50000000:1``) or declares it (an
.npz's ``shape``); the corpus then holds one entry per term in /var and one row pointer per
document, whatever the nonzeros. So a 33-byte file could ask for a 3 GB corpus. The rule: at most
``max(MIN_FREE, SPARSITY x nonzeros)`` terms and as many documents (a million of either is
always allowed; past that, a corpus must hold at least one nonzero per 64 of them), and fewer
than 2^31 terms (the int32 column indices). Values must fit float32 (the corpus's /X/data).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError

MIN_FREE = 1 << 20
SPARSITY = 64
MAX_TERMS = 2**31 - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_declared_shape(name: str, n_rows: int, n_cols: int, nnz: int) -> None:
    """Refuse a matrix whose rows or columns far outnumber its nonzeros (module docstring)."""
    bound = max(MIN_FREE, SPARSITY * int(nnz))
    for what, n in (("documents", n_rows), ("terms (columns)", n_cols)):
        if n > bound or (what.startswith("terms") and n > MAX_TERMS):
            raise InputError(f"{name}: declares {n:,} {what} for {nnz:,} nonzeros: at most {min(bound, MAX_TERMS):,} "
                             f"(one nonzero per {SPARSITY} {what.split()[0]} past {MIN_FREE:,}); renumber the features")


def check_float32(name: str, values: np.ndarray) -> None:
    """Refuse values that float32 cannot hold (they would be stored as infinities)."""
    big = np.abs(values) > FLOAT32_MAX
    if big.any():
        raise InputError(f"{name}: the value {values[np.argmax(big)]:g} does not fit float32 (at most "
                         f"{FLOAT32_MAX:.4g} in magnitude)")
