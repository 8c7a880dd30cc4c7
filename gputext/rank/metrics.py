"""Ranking metrics over queries: pairwise accuracy, NDCG@k, MAP (CPU, numba parallel over queries).

Definitions (decisions written down here and in docs/rank.md):

* **Pairwise accuracy** (the paper's eq. 16): over all preference pairs (i, j) of the same query
  with y_i > y_j, the fraction with s_i > s_j strictly (a tie in scores counts as wrong); pairs are
  pooled over queries (micro average), as LIBLINEAR's ranksvm evaluation does. O(n log n) per
  query: scores sorted, then a Fenwick tree over the query's relevance ranks.
* **NDCG@k**: documents ordered by score descending, ties broken by lower row (file order);
  DCG@k = sum over the first min(k, n) positions r = 1.. of gain(y) / log2(r + 1), divided by the
  DCG@k of the ideal order. gain(y) = 2^y - 1 (LETOR's exponential gain) when every relevance is at
  most 31, else y (linear gain; list datasets carry relevance values in the hundreds);
  ``gain="exp"|"linear"`` forces one. A query whose ideal DCG is 0 (no relevant document) scores
  0, as in LETOR's evaluation script and scikit-learn's ndcg_score. Mean over queries.
* **MAP**: relevant means relevance > 0; AP = mean over the relevant documents of precision at
  their position (same order as NDCG); a query with no relevant document has AP = 0. Mean over queries.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from ..errors import InputError
from .data import group_by_query
from .ops import cpu_threads_limited
from ..kernels.jit import cpu_jit


@cpu_jit(parallel=True)
def _pairwise_counts(starts, scores, labels):
    """(correct, pairs) per query; scores float64, labels float64 in grouped order."""
    n_q = starts.shape[0] - 1
    correct = np.zeros(n_q, np.int64)
    pairs = np.zeros(n_q, np.int64)
    for t in prange(n_q):
        st = starts[t]
        n = starts[t + 1] - st
        lab = labels[st:st + n]
        levels = np.unique(lab)
        k = levels.shape[0]
        rank = np.searchsorted(levels, lab)  # 0..k-1
        counts = np.zeros(k, np.int64)
        for i in range(n):
            counts[rank[i]] += 1
        same = 0
        for c in range(k):
            same += counts[c] * counts[c]
        pairs[t] = (n * n - same) // 2
        order = np.argsort(scores[st:st + n], kind="mergesort")
        tree = np.zeros(k + 1, np.int64)  # Fenwick over ranks: counts of lower-scored documents
        good = 0
        i = 0
        while i < n:
            j = i
            while j < n and scores[st + order[j]] == scores[st + order[i]]:
                j += 1
            for p in range(i, j):  # documents strictly below in score and strictly below in relevance
                r = rank[order[p]]
                x = r  # prefix sum of ranks < r: Fenwick positions 1..r
                while x > 0:
                    good += tree[x]
                    x -= x & (-x)
            for p in range(i, j):
                x = rank[order[p]] + 1
                while x <= k:
                    tree[x] += 1
                    x += x & (-x)
            i = j
        correct[t] = good
    return correct, pairs


@cpu_jit(parallel=True)
def _ndcg_map(starts, scores, gains, relevant, ks):
    """Per query: NDCG at each k of ks (float64 (Q, len(ks))) and AP (Q,)."""
    n_q = starts.shape[0] - 1
    n_k = ks.shape[0]
    ndcg = np.zeros((n_q, n_k), np.float64)
    ap = np.zeros(n_q, np.float64)
    for t in prange(n_q):
        st = starts[t]
        n = starts[t + 1] - st
        order = np.argsort(-scores[st:st + n], kind="mergesort")  # descending, ties by lower row
        ideal = np.sort(gains[st:st + n])[::-1]
        for a in range(n_k):
            k = min(ks[a], n)
            dcg = 0.0
            idcg = 0.0
            for r in range(k):
                disc = 1.0 / np.log2(r + 2.0)
                dcg += gains[st + order[r]] * disc
                idcg += ideal[r] * disc
            if idcg > 0:
                ndcg[t, a] = dcg / idcg
        hits = 0
        total = 0.0
        for r in range(n):
            if relevant[st + order[r]]:
                hits += 1
                total += hits / (r + 1.0)
        if hits > 0:
            ap[t] = total / hits
    return ndcg, ap


MAX_EXP_RELEVANCE = 1023  # 2^1024 is beyond float64: the exp gain of a larger grade is infinite, NDCG NaN


def gain_values(relevance: np.ndarray, gain: str = "auto") -> tuple[np.ndarray, str]:
    """(gains float64, 'exp'|'linear') for NDCG."""
    relevance = np.asarray(relevance, dtype=np.float64)
    if len(relevance) and relevance.min() < 0:
        raise InputError(f"relevance must be >= 0 for NDCG and MAP, found {relevance.min()}")
    if gain == "auto":
        gain = "exp" if (len(relevance) == 0 or relevance.max() <= 31) else "linear"
    if gain == "exp":
        if len(relevance) and relevance.max() > MAX_EXP_RELEVANCE:
            raise InputError(f"--gain exp: relevance {relevance.max():g} makes 2^rel - 1 overflow (at most "
                             f"{MAX_EXP_RELEVANCE}); use --gain linear")
        return np.exp2(relevance) - 1.0, "exp"
    if gain == "linear":
        return relevance.copy(), "linear"
    raise InputError(f"gain must be auto, exp or linear, got {gain!r}")


def pairwise_accuracy(scores, qid, relevance) -> tuple[float, int, int]:
    """(accuracy, correct pairs, all pairs); accuracy is NaN when there are no pairs."""
    perm, starts, _ = group_by_query(qid)
    with cpu_threads_limited(16 * len(perm)):
        correct, pairs = _pairwise_counts(starts, np.ascontiguousarray(np.asarray(scores, np.float64)[perm]),
                                          np.ascontiguousarray(np.asarray(relevance, np.float64)[perm]))
    c, p = int(correct.sum()), int(pairs.sum())
    return (c / p if p else float("nan")), c, p


def ranking_metrics(scores, qid, relevance, ks=(1, 5, 10), gain: str = "auto") -> dict:
    """Pairwise accuracy, NDCG@k for k in ks, MAP, and counts, as a dict."""
    scores = np.asarray(scores, np.float64)
    relevance = np.asarray(relevance, np.float64)
    if not np.all(np.isfinite(scores)):
        raise InputError("scores contain NaN or infinite values")
    acc, correct, pairs = pairwise_accuracy(scores, qid, relevance)
    perm, starts, _ = group_by_query(qid)
    gains, gain_kind = gain_values(relevance, gain)
    with cpu_threads_limited(16 * len(perm)):
        ndcg, ap = _ndcg_map(starts, np.ascontiguousarray(scores[perm]), np.ascontiguousarray(gains[perm]),
                             np.ascontiguousarray(relevance[perm] > 0), np.asarray(ks, np.int64))
    n_q = len(starts) - 1
    out = {"pairwise_accuracy": acc, "correct_pairs": correct, "pairs": pairs}
    for a, k in enumerate(ks):
        out[f"ndcg@{k}"] = float(ndcg[:, a].mean()) if n_q else float("nan")
    out["map"] = float(ap.mean()) if n_q else float("nan")
    relevant_per_query = np.add.reduceat((relevance[perm] > 0).astype(np.int64), starts[:-1]) if n_q else np.zeros(0)
    out.update(queries=n_q, documents=int(len(scores)), queries_without_relevant=int(np.sum(relevant_per_query == 0)),
               gain=gain_kind)
    return out
