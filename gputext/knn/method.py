"""The one place where a kNN method is decided: the inverted index or the dense kernels.

    choose_method(method, n_docs, n_terms, nnz, backend, k=1, index_built=False, groups=1) -> (method, reason)

Every caller asks here: `knn search` and gputext.knn.search (index_built=True), `knn classify`,
`knn metafeatures` and gputext.knn.classify (index_built=False), the estimators
(gputext.estimators.neighbors, index_built=True). The backend is resolved before (backend.resolve
once at the CLI/API boundary) and only read here.

What each method serves (both exact, the same results):
- inverted: any k and metric; on CUDA k <= engine.search.MAX_CUDA_K, above it the CPU twin runs
  under --device auto (engine.search.serving_backend says so);
- dense: any k and metric where the float32 matrix fits (gputext.knn.dense.dense_fits).

The rule for ``auto``:
1. On the GPU: dense when dense_fits says the matrix fits half the free device memory and pays
   (small, or dense enough); else dense when k is more than the inverted index's CUDA selector
   holds and the matrix fits at all (the dense method serves any k on the device); else inverted.
2. On the CPU: a caller that already holds a built inverted index (index_built: an index file,
   or an estimator's index built at fit) keeps it, since the CPU twin of the inverted index does
   less work on text; a caller that has built nothing yet takes dense only under dense_fits' host
   rule (the matrix fits HOST_DENSE_MAX_BYTES and is at least 25% dense), else inverted.
3. A grouped search (the meta-features: every query's k nearest in each of ``groups`` classes)
   takes the inverted index whenever its grouped selector can serve k (on CUDA k <= 512): its grouped search scores each query once for
   every class, while the dense method builds an index per class and densifies every query row
   once per class. Measured 2026-11-26 (H100, Reuters R52, 52 classes, 6,532 + 2,568 rows): dense
   on the GPU 46.3 s, the inverted CPU twin 1.4 s on 2 cores (dense twin 142 s).
An explicit method is taken as asked ("requested"), as long as this build has it.

No numpy here: the CLI takes METHODS for its --method choices without importing library code.
"""
from __future__ import annotations

from ..errors import InputError

METHODS = ("inverted", "dense", "auto")


def choose_method(method: str, n_docs: int, n_terms: int, nnz: int | None, backend, k: int = 1,
                  index_built: bool = False, groups: int = 1) -> tuple[str, str]:
    """(method, one-line reason) for a search of k neighbours among n_docs x n_terms training rows
    with nnz stored entries, on ``backend`` (a resolved gputext.backend.Backend); the rule is in the
    module docstring."""
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")
    if method == "inverted":
        return "inverted", "requested"
    try:
        from . import dense
    except ImportError:
        if method == "dense":
            raise InputError("--method dense is not available in this build") from None
        return "inverted", "dense method not available"
    if method == "dense":
        return "dense", "requested"
    from ..engine.search import MAX_CUDA_K, MAX_GROUPED_CUDA_K

    if groups > 1 and (not backend.is_cuda or k <= MAX_GROUPED_CUDA_K):
        return "inverted", f"inverted: one grouped search serves all {groups} classes (dense: an index per class)"
    if not backend.is_cuda:
        if index_built:
            return "inverted", "the CPU twin of the inverted index (the dense method pays on the GPU)"
        fits, reason = dense.dense_fits(n_docs, n_terms, None, nnz=nnz)
        return ("dense" if fits else "inverted"), reason
    from ..backend import device_memory

    mem = device_memory()
    fits, reason = dense.dense_fits(n_docs, n_terms, mem[0] if mem else None, nnz=nnz)
    if not fits and k > MAX_CUDA_K and mem is not None:
        room, _ = dense.dense_fits(n_docs, n_terms, mem[0], nnz=None)  # fits at all (density aside)
        if room:
            return "dense", f"dense: k = {k} is more than the inverted index's CUDA selector holds ({MAX_CUDA_K})"
    return ("dense" if fits else "inverted"), reason
