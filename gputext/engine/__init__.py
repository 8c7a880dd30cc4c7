"""The one sparse scoring engine: an inverted index, batched load-balanced scoring, and selectors.

GT-kNN search, meta-features, the star-clustering graph and DClustR additions all score
documents through it; they differ only in the selector (top-k, threshold; argmax is top-1).
See docs/ENGINE_API.md and gputext.kernels.scoring for the method.
"""
from .index import Index, Postings
from .merge import merge_topk
from .search import (METRICS, Geometry, keys_to_scores, search_threshold, search_topk, search_topk_grouped,
                     search_topk_keys)

__all__ = ["Index", "Postings", "METRICS", "Geometry", "search_threshold", "search_topk", "search_topk_grouped",
           "search_topk_keys", "merge_topk", "keys_to_scores"]
