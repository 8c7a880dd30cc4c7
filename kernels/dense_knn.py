"""Dense kNN kernels (the CNAE paper's matrix-vector product, a batched register-tiled form,
candidate selection, exact rescoring and a per-query sort), each with an ``@numba.njit`` CPU twin.

The documents are a dense row-major matrix ``X`` (n_docs, n_terms) float32; the queries a dense
row-major batch ``Q`` (n_rows, n_terms) float32. A search runs in two stages:

1. **Approximate keys** (float32, fast): ``make_matvec_kernel`` (the paper's block-strided
   matrix-vector product with a shared-memory tree reduction, for a few queries at a time) or
   ``make_gemm_kernel`` (register-tiled, for many queries) write one float32 *key* per
   (query, document); a larger key is a better document for every metric:

       cosine  key = (q.d) * (1/|q|) * (1/|d|)      (0 when either norm is 0)
       dot     key = q.d
       l2      key = q.d - |d|^2 / 2                 (monotone in -|q - d| for a fixed q)
       l1      key = -sum_j |q_j - d_j|

2. **Exact answer** (float64, deterministic): ``make_select_kernel`` keeps, per query and per
   slice of the documents, the k' documents of largest key (ties: lower index) and the k'-th key;
   ``make_rescore_kernel`` recomputes those candidates' scores in float64 in the *canonical
   order* below; ``make_sort_kernel`` sorts them (best first, ties -> lower index) and writes the
   top k. The host (gputext.knn.dense) proves from the float32 error bound that no document
   outside the candidates can enter the top k, and repeats with a larger k' (or scores every
   document exactly) for the few queries where it cannot.

Canonical float64 order (``EXACT_LANES`` = 32, part of the numeric definition, not a tuning knob):
a cross term sum_j f(q_j, d_j) is accumulated in 32 partial sums, lane l taking
j = l, l+32, l+64, ... in increasing order, then combined by the fixed tree
p[l] += p[l+16] (l < 16), p[l] += p[l+8] (l < 8), ..., p[0] += p[1]. Products of two float32 values
are exact in float64, so a fused multiply-add gives the same result as multiply-then-add and the
CUDA kernels and the CPU twins produce bit-identical float64 values. Final scores:

       cosine  dot / (sqrt(qq) * sqrt(dd))   (0.0 when qq or dd is 0)
       dot     dot
       l2      sqrt(max(qq + dd - 2 dot, 0))  (qq, dd: canonical sums of squares)
       l1      sum_j |q_j - d_j|
and the reported score is float32(final). Lists are ordered by the float64 final score, equal
float64 scores by lower document index (as the engine orders its keys), so two documents whose
scores round to the same float32 keep the order of their exact values.

Launch geometry (threads per block, rows per block, tile sizes, copies of the histogram, ...) is a
factory parameter everywhere; tests shrink it for the CUDA simulator. No warp intrinsics.
"""
from __future__ import annotations

# The pipeline's stages live in modules named for what they do (dense_common: canonical sums and
# scores; dense_keys: stage 1; dense_exact: stage 2; the block selection is kernels/select.py);
# this module is their one entry point: host code imports ``kernels.dense_knn as kd``.
from .dense_common import (EXACT_LANES, canonical_sumsq_cpu, ordered_to_float32, query_norms_serial,  # noqa: F401
                           row_abs_sums_cpu)
from .dense_exact import (RES_EXTRA, certify_unpack_cpu, exact_topk_cpu, finish_cpu, make_finish_kernel,  # noqa: F401
                          make_rescore_kernel, make_select_kernel, rescore_cpu, select_candidates_cpu)
from .dense_keys import (approx_keys_cpu, chain_length, gemm_keys_cpu, gemm_launch, make_gemm_kernel,  # noqa: F401
                         make_matvec_kernel, matvec_keys_cpu)
from .metrics import LARGER_IS_BETTER, METRIC_CODE, METRICS  # noqa: F401
from .primitives import ordered_bits_cpu as _ordered_cpu  # noqa: F401 (kd._ordered_cpu: tests, scripts)
from .primitives import ordered_bits_dev as _ordered_dev  # noqa: F401

__all__ = ["EXACT_LANES", "LARGER_IS_BETTER", "METRICS", "METRIC_CODE", "RES_EXTRA", "approx_keys_cpu",
           "canonical_sumsq_cpu", "certify_unpack_cpu", "chain_length", "exact_topk_cpu", "finish_cpu", "gemm_keys_cpu",
           "gemm_launch", "make_finish_kernel", "make_gemm_kernel", "make_matvec_kernel", "make_rescore_kernel",
           "make_select_kernel", "matvec_keys_cpu", "ordered_to_float32", "query_norms_serial", "rescore_cpu",
           "row_abs_sums_cpu", "select_candidates_cpu", "_ordered_cpu", "_ordered_dev"]

_F2 = "float32[:, ::1]"
_F1 = "float32[::1]"
_KEYS_SIG = f"void({_F2}, {_F2}, int64, {_F1}, {_F1}, {_F1}, int64, {_F2})"
_SELECT_SIG = "void(uint32[:, ::1], int32[::1], int64, int64[::1], int32[:, ::1], uint32[:, ::1], int32[:, ::1], int32[:, ::1], int64[:, ::1])"
_RESCORE_SIG = f"void({_F2}, {_F2}, int32[::1], int32[:, :, ::1], int32[:, ::1], float64[::1], float64[::1], int64, float64[:, :, ::1])"
_FINISH_SIG = (f"void({_F2}, {_F2}, int32[::1], int32[:, ::1], uint32[:, ::1], int32[:, ::1], int32[:, ::1], int64[:, ::1], "
               "int64, float64[::1], float64[::1], int64, int64, float64[:, ::1], int32[:, ::1])")


def ptx_kernels():
    """Every kernel of this module with representative geometry, for tests/test_ptx.py."""
    return [
        ("dense_matvec_keys", make_matvec_kernel(256, 32, 4, 4, False), _KEYS_SIG),
        ("dense_matvec_keys_l1", make_matvec_kernel(256, 32, 4, 4, True), _KEYS_SIG),
        ("dense_matvec_keys_rows4", make_matvec_kernel(256, 32, 1, 4, False, 4), _KEYS_SIG),
        ("dense_matvec_keys_warp", make_matvec_kernel(128, 32, 1, 4, False, 4, True), _KEYS_SIG),
        ("dense_gemm_keys", make_gemm_kernel(128, 128, 8, 8, 8, False), _KEYS_SIG),
        ("dense_gemm_keys_l1", make_gemm_kernel(64, 64, 8, 4, 4, True), _KEYS_SIG),
        ("dense_gemm_keys_one_buffer", make_gemm_kernel(64, 128, 16, 8, 4, False, False, 128), _KEYS_SIG),
        ("dense_select_candidates", make_select_kernel(256, 2048, 2048), _SELECT_SIG),
        ("dense_rescore", make_rescore_kernel(256), _RESCORE_SIG),
        ("dense_finish", make_finish_kernel(256, 2048, 2048, 4), _FINISH_SIG),
    ]
