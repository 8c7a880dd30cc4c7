"""Rows of a CSR matrix gathered in a given order, on the host's threads (the one row gather of
gputext: meta-features order their training rows by class with it, DClustR its stored rows).

SciPy's ``X[rows]`` copies in one thread; here each thread copies whole rows, and so also takes
the first-touch page faults of its part of the output, which are most of the time: on the 2-core
development VM (2026-11-28), 10^6 rows of 72 nonzeros in random class order took 0.91 s with
SciPy and 0.92 s here, while the copy into already-touched buffers took 0.09 s on 2 threads and
0.17 s on 1. Not yet measured on a many-core host, where the threads should pay.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import prange

from .jit import cpu_jit


@cpu_jit(parallel=True)
def gather_rows_into(indptr, indices, weights, rows, out_ptr, out_idx, out_w):
    """Row rows[k] of the CSR (indptr int64, indices, weights) into out_idx / out_w at
    out_ptr[k] (int64 (len(rows) + 1,), its lengths' prefix sums); rows in parallel."""
    for k in prange(rows.shape[0]):
        v = rows[k]
        s = indptr[v]
        e = indptr[v + 1]
        d = out_ptr[k]
        out_idx[d:d + e - s] = indices[s:e]
        out_w[d:d + e - s] = weights[s:e]


def gather_rows(indptr, indices, weights, rows):
    """Rows ``rows`` (int, any order, repeats allowed) of a CSR, concatenated: (ptr int64
    (len(rows)+1,), indices, weights) of the input's dtypes."""
    indptr = np.asarray(indptr, np.int64)
    rows = np.asarray(rows, np.int64)
    lengths = indptr[rows + 1] - indptr[rows]
    ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    out_idx = np.empty(ptr[-1], indices.dtype)
    out_w = np.empty(ptr[-1], weights.dtype)
    if len(rows):
        gather_rows_into(indptr, indices, weights, rows, ptr, out_idx, out_w)
    return ptr, out_idx, out_w


def take_rows(X: sp.csr_matrix, rows) -> sp.csr_matrix:
    """X[rows] for a CSR X (equal to SciPy's, canonical when X is: rows keep their order within),
    with int64 indptr; the copy on the host's threads."""
    ptr, idx, w = gather_rows(X.indptr, X.indices, X.data, rows)
    out = sp.csr_matrix((w, idx, ptr), shape=(len(ptr) - 1, X.shape[1]))
    out.has_canonical_format = bool(X.has_canonical_format)
    return out
