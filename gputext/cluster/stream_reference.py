"""The straightforward sequential stream-clustering reference: pure Python + NumPy, float64, one
document at a time (Szaszy & Samet, Algorithm 1, with its hash index of clusters per term).

Everything else (CPU twin, GPU, batches, inverted index) is tested against this, document by
document. It is written independently of stream_host.py (no numba, other code paths: Python
sets, ``np.lexsort``, Python float sums) but follows the same definition:

1. Document: drop zero weights; keep the top ``max_terms`` terms (weight descending, ties to the
   lower term id), sorted by term id; magnitude |D| = sqrt(sum of w^2 added in term order);
   stored weights d_t = float32(w_t / |D|).
2. Similarity sim(D, C) = sum over shared terms, in increasing term id, of
   float64(d_t) * float64(c_t), accumulated left to right in float64.
3. Best cluster: the largest similarity, ties to the lower cluster id. If it is > threshold the
   document joins it; otherwise it starts cluster n_clusters with centroid = the document
   (terms, stored weights, magnitude). A document without terms gets cluster -1 and creates
   nothing. The reported similarity is the best similarity (0 when no cluster shares a term).
4. Joining: raw_t = float64(c_t) |C| + float64(d_t) |D| over the union of terms (only one side's
   product where the term is in one only), keep the K largest raw_t (ties to the lower term id),
   |C'| = sqrt(sum of raw_t^2 added in term order), c'_t = float32(raw_t / |C'|).

Storing weights as float32 is part of the definition (it is what the GPU scans: 8 bytes per
slot); all arithmetic is float64 and every sum has a fixed order, so all backends agree bit for bit.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp


def top_terms(terms: np.ndarray, values: np.ndarray, max_terms: int):
    """(terms, values) cut to the ``max_terms`` largest values (value descending, ties to the lower
    term id), kept in the input's (ascending term) order; unchanged when there are no more."""
    if len(terms) > max_terms:
        order = np.lexsort((terms, -values))[:max_terms]  # value desc, then term asc
        order.sort()
        terms, values = terms[order], values[order]
    return terms, values


def magnitude_in_order(values) -> float:
    """sqrt of the float64 sum of squares, added left to right (term order)."""
    total = 0.0
    for v in values:
        total += float(v) * float(v)
    return math.sqrt(total)


def prepare_document(terms: np.ndarray, weights: np.ndarray, max_terms: int):
    """(terms int64 ascending, weights float32 normalised, magnitude float) of one weighted row."""
    terms = np.asarray(terms, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    keep = weights > 0
    terms, weights = top_terms(terms[keep], weights[keep], max_terms)
    magnitude = magnitude_in_order(weights)
    stored = (weights / magnitude).astype(np.float32) if len(terms) else np.zeros(0, np.float32)
    return terms, stored, magnitude


def similarity(d_terms, d_weights, c_terms, c_weights) -> float:
    """Sum over shared terms in increasing term id of float64(d) * float64(c)."""
    lookup = {int(t): float(w) for t, w in zip(c_terms, c_weights)}
    total = 0.0
    for t, w in zip(d_terms, d_weights):  # d_terms ascending, so shared terms come in term order
        cw = lookup.get(int(t))
        if cw is not None:
            total += float(w) * cw
    return total


def add_document(c_terms, c_weights, c_mag, d_terms, d_weights, d_mag, max_terms):
    """The joined centroid (terms, float32 weights, magnitude)."""
    raw: dict[int, float] = {}
    for t, w in zip(c_terms, c_weights):
        raw[int(t)] = float(w) * c_mag
    for t, w in zip(d_terms, d_weights):
        t = int(t)
        if t in raw:
            raw[t] = raw[t] + float(w) * d_mag
        else:
            raw[t] = float(w) * d_mag
    terms = np.array(sorted(raw), dtype=np.int64)
    values = np.array([raw[int(t)] for t in terms], dtype=np.float64)
    terms, values = top_terms(terms, values, max_terms)
    magnitude = magnitude_in_order(values)
    return terms, (values / magnitude).astype(np.float32), magnitude


class ReferenceStreamClusterer:
    """One document at a time; ``add(terms, weights)`` returns (cluster, similarity, new)."""

    def __init__(self, threshold: float, max_terms: int):
        self.threshold = float(threshold)
        self.max_terms = int(max_terms)
        self.terms: list[np.ndarray] = []
        self.weights: list[np.ndarray] = []
        self.magnitude: list[float] = []
        self.size: list[int] = []
        self.clusters_with_term: dict[int, set[int]] = {}

    @property
    def n_clusters(self) -> int:
        return len(self.terms)

    def add(self, terms, weights):
        d_terms, d_weights, d_mag = prepare_document(terms, weights, self.max_terms)
        if len(d_terms) == 0:
            return -1, 0.0, False
        candidates: set[int] = set()
        for t in d_terms:
            candidates |= self.clusters_with_term.get(int(t), set())
        best, best_sim = -1, 0.0
        for c in sorted(candidates):
            s = similarity(d_terms, d_weights, self.terms[c], self.weights[c])
            if best < 0 or s > best_sim:  # ascending c: ties keep the lower id
                best, best_sim = c, s
        if best >= 0 and best_sim > self.threshold:
            old = set(int(t) for t in self.terms[best])
            terms_new, weights_new, mag_new = add_document(self.terms[best], self.weights[best], self.magnitude[best],
                                                           d_terms, d_weights, d_mag, self.max_terms)
            for t in old - set(int(t) for t in terms_new):
                self.clusters_with_term[t].discard(best)
            for t in terms_new:
                self.clusters_with_term.setdefault(int(t), set()).add(best)
            self.terms[best], self.weights[best], self.magnitude[best] = terms_new, weights_new, mag_new
            self.size[best] += 1
            return best, best_sim, False
        c = self.n_clusters
        self.terms.append(d_terms)
        self.weights.append(d_weights)
        self.magnitude.append(d_mag)
        self.size.append(1)
        for t in d_terms:
            self.clusters_with_term.setdefault(int(t), set()).add(c)
        return c, (best_sim if best >= 0 else 0.0), True


def reference_cluster(X, threshold: float, max_terms: int):
    """Cluster the rows of a weighted CSR matrix in order.

    Returns (cluster int32 (n,), similarity float64 (n,), new bool (n,), ReferenceStreamClusterer).
    """
    X = sp.csr_matrix(X)
    ref = ReferenceStreamClusterer(threshold, max_terms)
    n = X.shape[0]
    cluster = np.empty(n, np.int32)
    sims = np.empty(n, np.float64)
    new = np.empty(n, bool)
    for i in range(n):
        lo, hi = X.indptr[i], X.indptr[i + 1]
        cluster[i], sims[i], new[i] = ref.add(X.indices[lo:hi], X.data[lo:hi])
    return cluster, sims, new, ref
