"""The exact merge of top-k lists scored over disjoint document ranges of one corpus.

The engine's CUDA path merges its device shards with it, and gputext.distributed the lists its
workers' shards return: each list is sorted by (key descending, document ascending) with global
document indices, so the k best of their union, in that order, is the single index's list.
"""
from __future__ import annotations

import numpy as np


def merge_topk(parts, k: int) -> tuple[np.ndarray, np.ndarray]:
    """parts: [(docs int (..., k_p), keys float64 (..., k_p))], docs global (-1: empty slot, key
    -inf). Returns (docs, keys) (..., k): the k best by (key desc, doc asc), empty slots last.
    docs keep the first part's dtype."""
    docs = np.concatenate([d for d, _ in parts], axis=-1)
    keys = np.concatenate([kk for _, kk in parts], axis=-1)
    missing = docs < 0
    sort_keys = np.where(missing, np.inf, -keys)
    sort_docs = np.where(missing, np.iinfo(np.int64).max, docs.astype(np.int64))
    order = np.lexsort((sort_docs, sort_keys), axis=-1)[..., :k]
    return np.take_along_axis(docs, order, -1), np.take_along_axis(keys, order, -1)
