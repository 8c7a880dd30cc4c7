"""The exact merge of top-k lists scored over disjoint document ranges of one corpus.

The engine's CUDA path merges its device shards with it, and gputext.distributed the lists its
workers' shards return: each list is sorted by (key descending, document ascending) with global
document indices, so the k best of their union, in that order, is the single index's list.
"""
from __future__ import annotations

import numpy as np


def merge_topk(parts, k: int) -> tuple[np.ndarray, np.ndarray]:
    """parts: [(docs int (..., k_p), keys float64 (..., k_p))], docs global (-1: empty slot, key
    -inf), each list sorted by (key desc, doc asc) with its empty slots last. Returns (docs, keys)
    (..., k): the k best by (key desc, doc asc), empty slots last. docs keep the first part's
    dtype. A P-way merge of each row's lists in numba's threads
    (kernels.primitives.merge_lists_cpu): for the meta-features' grouped lists of 10,000 queries on
    4 workers it takes a fraction of NumPy's lexsort of the concatenation (merge_topk_lexsort, the
    reference the tests compare it with)."""
    from ..kernels.primitives import merge_lists_cpu

    lead = parts[0][0].shape[:-1]
    widths = [d.shape[-1] for d, _ in parts]
    docs = np.concatenate([np.asarray(d, np.int64).reshape(-1, w) for (d, _), w in zip(parts, widths)], axis=1)
    keys = np.concatenate([np.asarray(kk, np.float64).reshape(-1, w) for (_, kk), w in zip(parts, widths)], axis=1)
    ptr = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    k = min(int(k), int(ptr[-1]))  # as many as the lists hold
    out_docs = np.empty((docs.shape[0], k), np.int64)
    out_keys = np.empty((docs.shape[0], k), np.float64)
    if docs.shape[0] and k:
        merge_lists_cpu(docs, keys, ptr, k, out_docs, out_keys)
    return out_docs.astype(parts[0][0].dtype, copy=False).reshape(*lead, k), out_keys.reshape(*lead, k)


def merge_topk_lexsort(parts, k: int) -> tuple[np.ndarray, np.ndarray]:
    """merge_topk by NumPy's lexsort of the concatenated lists (the reference of its tests)."""
    docs = np.concatenate([d for d, _ in parts], axis=-1)
    keys = np.concatenate([kk for _, kk in parts], axis=-1)
    missing = docs < 0
    sort_keys = np.where(missing, np.inf, -keys)
    sort_docs = np.where(missing, np.iinfo(np.int64).max, docs.astype(np.int64))
    order = np.lexsort((sort_docs, sort_keys), axis=-1)[..., :k]
    return np.take_along_axis(docs, order, -1), np.take_along_axis(keys, order, -1)
