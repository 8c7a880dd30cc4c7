"""Deterministic synthetic learning-to-rank data: queries, dense features, graded relevance.

The generative model (also in docs/synth.md):

* **Query sizes.** ``n_queries`` sizes around the mean ``docs_per_query``: log-normal
  (``size_sigma``, default 0.5) draws scaled to the mean, clipped to [1, ``max_docs_per_query``], then adjusted so
  that they sum exactly to ``n_docs`` (default ``round(n_queries * docs_per_query)``). When
  ``max_docs_per_query`` is given, the largest query has exactly that many documents (the
  paper's ``l_L``).
* **Features.** A hidden weight vector ``w ~ N(0, 1)`` over ``n_features`` with 30% of its
  entries set to 0 (irrelevant features). Each query has an offset ``mu_q ~ N(0, 0.5^2)`` per
  feature; a document's features are ``x = mu_q + N(0, 1)``; with ``density < 1`` each entry is
  kept with that probability (others are 0 and not stored).
* **Relevance.** A latent score ``s = x . w / |w| + noise * N(0, 1)``. ``relevance="graded"``:
  levels ``0 .. n_levels - 1`` cut ``s`` at fixed quantiles of its marginal law ``N(0, density *
  1.25 + noise^2)`` so that level ``l`` has probability proportional to ``level_ratio ** l``
  (most documents irrelevant, as in LETOR); the query offset makes some queries richer in
  relevant documents than others. ``relevance="list"`` (the LETOR ``-list`` sets): the relevance
  of a document is its rank by ``s`` inside its query (0 = lowest), so there are as many levels
  as documents in the largest query. A linear model recovers ``w`` up to the noise: RankSVM has
  something measurable to learn (the hidden ``w`` is stored in ``uns/gputext/synth/hidden_weights``).

Storage: X CSR float32 (n_docs, n_features) with every feature stored when density = 1 ("dense
rows"), ``obs/qid`` int32 (1-based, rows of a query contiguous, queries in order),
``obs/relevance`` float32, var ``_index`` "f1".."fN", doc ids "d0".."d{N-1}",
``uns/gputext``: weighting "none", n_pairs (preference pairs: same query, higher relevance),
synth parameters.

Determinism: the model (hidden weights) comes from ``SeedSequence(model_seed, spawn_key=(0,))``,
the query sizes from ``(seed, spawn_key=(1,))`` and the documents of query block ``b`` (queries
``b * BLOCK_QUERIES ..``) from ``(seed, spawn_key=(2, b))``: chunked writing equals in-memory
generation, whatever the thread count.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import scipy.sparse as sp
from scipy.special import ndtri

from gputext.errors import InputError
from gputext.io import Corpus, CorpusWriter, atomic_output
from gputext.progress import progress

BLOCK_QUERIES = 64
"""Queries per random block: part of the generator's definition."""

RELEVANCE_KINDS = ("graded", "list")
QUERY_SHIFT = 0.5
SIZE_SIGMA = 0.5
ZERO_WEIGHT_FRACTION = 0.3


@dataclass(frozen=True)
class LtrSpec:
    n_queries: int
    docs_per_query: float
    n_features: int
    n_levels: int = 5
    seed: int = 0
    density: float = 1.0
    n_docs: int | None = None
    max_docs_per_query: int | None = None
    relevance: str = "graded"
    noise: float = 0.5
    level_ratio: float = 0.5
    size_sigma: float = SIZE_SIGMA
    model_seed: int | None = None

    def __post_init__(self):
        def need(ok, what, value):
            if not ok:
                raise InputError(f"{what}, got {value!r}")
        for name in ("n_queries", "n_features", "n_levels", "seed"):
            value = getattr(self, name)
            need(isinstance(value, (int, np.integer)) and not isinstance(value, bool), f"{name} must be an integer", value)
        need(self.n_queries >= 1, "n_queries must be >= 1", self.n_queries)
        need(self.docs_per_query >= 1, "docs_per_query must be >= 1", self.docs_per_query)
        need(1 <= self.n_features < 2**31, "n_features must be >= 1", self.n_features)
        need(self.n_levels >= 2 or self.relevance == "list", "n_levels must be >= 2", self.n_levels)
        need(self.seed >= 0, "seed must be >= 0", self.seed)
        need(self.model_seed is None or self.model_seed >= 0, "model_seed must be >= 0", self.model_seed)
        need(0 < self.density <= 1, "density must be in (0, 1]", self.density)
        need(self.relevance in RELEVANCE_KINDS, f"relevance must be one of {', '.join(RELEVANCE_KINDS)}", self.relevance)
        need(self.noise >= 0, "noise must be >= 0", self.noise)
        need(0 < self.level_ratio <= 1, "level_ratio must be in (0, 1]", self.level_ratio)
        need(0 <= self.size_sigma <= 3, "size_sigma must be in [0, 3]", self.size_sigma)
        if self.max_docs_per_query is not None:
            need(self.max_docs_per_query >= 1, "max_docs_per_query must be >= 1", self.max_docs_per_query)
        total = self.total_docs
        hi = self.max_docs_per_query
        if total < self.n_queries:
            raise InputError(f"n_docs = {total} is fewer than n_queries = {self.n_queries}: every query needs a document")
        if hi is not None and total > hi * self.n_queries:
            raise InputError(f"n_docs = {total} does not fit in n_queries = {self.n_queries} queries of at most "
                             f"max_docs_per_query = {hi} documents")
        if hi is not None and self.n_queries > 1 and total < hi + self.n_queries - 1:
            raise InputError(f"n_docs = {total} is too few for the largest of n_queries = {self.n_queries} queries to "
                             f"have max_docs_per_query = {hi} documents and every other query one")
        if hi is not None and self.n_queries == 1 and total != hi:
            raise InputError(f"one query of n_docs = {total} documents cannot have max_docs_per_query = {hi}")

    @property
    def total_docs(self) -> int:
        return int(self.n_docs) if self.n_docs is not None else int(round(self.n_queries * self.docs_per_query))

    @property
    def effective_model_seed(self) -> int:
        return self.seed if self.model_seed is None else int(self.model_seed)

    @property
    def n_blocks(self) -> int:
        return -(-self.n_queries // BLOCK_QUERIES)

    def as_uns(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if v is not None}
        d["n_docs"] = self.total_docs
        d["model_seed"] = self.effective_model_seed
        d["block_queries"] = BLOCK_QUERIES
        d["kind"] = "ltr"
        return d


def _stream(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


def hidden_weights(spec: LtrSpec) -> np.ndarray:
    """The hidden linear model (n_features,) float64, 30% zeros, from the model seed."""
    rng = _stream(spec.effective_model_seed, 0)
    w = rng.normal(size=spec.n_features)
    w[rng.random(spec.n_features) < ZERO_WEIGHT_FRACTION] = 0.0
    if not np.any(w):
        w[0] = 1.0
    return w


def query_sizes(spec: LtrSpec) -> np.ndarray:
    """(n_queries,) int64 documents per query, summing to spec.total_docs (see module doc)."""
    Q, total, hi = spec.n_queries, spec.total_docs, spec.max_docs_per_query
    raw = np.exp(_stream(spec.seed, 1).normal(0.0, spec.size_sigma, size=Q))
    sizes = np.zeros(Q, dtype=np.int64)
    if hi is not None and Q > 1:
        pin = int(np.argmax(raw))
        rest = np.arange(Q) != pin
        sizes[pin] = hi
        sizes[rest] = _fit_sizes(raw[rest], total - hi, hi)
    else:
        sizes[:] = _fit_sizes(raw, total, hi if hi is not None else total)
    return sizes


def _fit_sizes(raw: np.ndarray, total: int, hi: int) -> np.ndarray:
    """Integers in [1, hi] proportional to ``raw`` (as far as the bounds allow) summing to ``total``."""
    s = raw * (total / raw.sum())
    for _ in range(100):
        s = np.clip(s, 1.0, hi)
        gap = total - s.sum()
        if abs(gap) < 1e-6:
            break
        free = (s < hi) if gap > 0 else (s > 1.0)
        s[free] *= 1.0 + gap / s[free].sum()
    out = np.clip(np.floor(s), 1, hi).astype(np.int64)
    gap = int(total - out.sum())
    frac = s - out
    # hand out the remaining units by largest fractional part (ties: lower query), within bounds
    while gap != 0:
        room = (out < hi) if gap > 0 else (out > 1)
        order = np.lexsort((np.arange(len(out)), -frac if gap > 0 else frac))
        order = order[room[order]][:abs(gap)]
        out[order] += 1 if gap > 0 else -1
        gap = int(total - out.sum())
    return out


def _thresholds(spec: LtrSpec) -> np.ndarray:
    """Cut points of the latent score: level l has probability proportional to level_ratio^l."""
    L = spec.n_levels
    p = spec.level_ratio ** np.arange(L)
    cum = np.cumsum(p / p.sum())[:-1]
    sd = np.sqrt(spec.density * (1.0 + QUERY_SHIFT ** 2) + spec.noise ** 2)
    return sd * ndtri(cum)


def generate_query_block(spec: LtrSpec, b: int, sizes: np.ndarray, offsets: np.ndarray, w: np.ndarray):
    """Rows of query block b: (X csr float32, qid int32, relevance float32, row range)."""
    q0, q1 = b * BLOCK_QUERIES, min(spec.n_queries, (b + 1) * BLOCK_QUERIES)
    r0, r1 = int(offsets[q0]), int(offsets[q1])
    n, F = r1 - r0, spec.n_features
    rng = _stream(spec.seed, 2, b)
    qrow = np.repeat(np.arange(q1 - q0), sizes[q0:q1])
    mu = rng.normal(0.0, QUERY_SHIFT, size=(q1 - q0, F))
    x = rng.normal(size=(n, F))
    x += mu[qrow]
    if spec.density < 1.0:
        x *= rng.random((n, F)) < spec.density
    s = x @ (w / np.linalg.norm(w)) + spec.noise * rng.normal(size=n)
    if spec.relevance == "graded":
        rel = np.searchsorted(_thresholds(spec), s, side="right").astype(np.float32)
    else:
        order = np.lexsort((s, qrow))  # by query, then ascending score
        rel = np.empty(n, dtype=np.float32)
        rel[order] = np.arange(n) - (offsets[q0:q1] - r0)[qrow[order]]
    x32 = x.astype(np.float32)
    if spec.density < 1.0:
        X = sp.csr_matrix(x32)
    else:
        X = sp.csr_matrix((x32.ravel(), np.tile(np.arange(F, dtype=np.int32), n),
                           np.arange(0, n * F + 1, F, dtype=np.int64)), shape=(n, F))
    X.has_sorted_indices = True
    qid = (q0 + 1 + qrow).astype(np.int32)
    return X, qid, rel, (r0, r1)


def _pairs(qid: np.ndarray, rel: np.ndarray) -> int:
    """Preference pairs: (i, j) of one query with rel_i > rel_j (= (n^2 - sum_l n_l^2) / 2 per query)."""
    _, q_counts = np.unique(qid, return_counts=True)
    _, ql_counts = np.unique(np.stack([qid.astype(np.int64), rel.astype(np.int64)]), axis=1, return_counts=True)
    return int((np.sum(q_counts.astype(np.int64) ** 2) - np.sum(ql_counts.astype(np.int64) ** 2)) // 2)


def _blocks(spec: LtrSpec, threads: int | None):
    sizes = query_sizes(spec)
    offsets = np.zeros(spec.n_queries + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    w = hidden_weights(spec)
    threads = max(1, threads or os.cpu_count() or 1)
    if threads == 1 or spec.n_blocks == 1:
        for b in range(spec.n_blocks):
            yield generate_query_block(spec, b, sizes, offsets, w)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending, nxt = [], 0
        while nxt < spec.n_blocks and len(pending) < threads + 1:
            pending.append(pool.submit(generate_query_block, spec, nxt, sizes, offsets, w))
            nxt += 1
        while pending:
            out = pending.pop(0).result()
            if nxt < spec.n_blocks:
                pending.append(pool.submit(generate_query_block, spec, nxt, sizes, offsets, w))
                nxt += 1
            yield out


def feature_names(n_features: int) -> np.ndarray:
    return np.char.add("f", np.arange(1, n_features + 1).astype(str)).astype(object)


def _uns(spec: LtrSpec, n_pairs: int) -> dict:
    synth = spec.as_uns()
    synth["hidden_weights"] = hidden_weights(spec)
    return {"command": "corpus synth", "weighting": "none", "n_pairs": n_pairs, "synth": synth}


def make_ltr(n_queries: int, docs_per_query: float, n_features: int, n_levels: int = 5, seed: int = 0,
             density: float = 1.0, *, threads: int | None = None, **options) -> Corpus:
    """Synthetic learning-to-rank data in memory (the arrays write_ltr writes).

    n_queries, docs_per_query   queries and the mean documents per query
    n_features, n_levels        feature columns "f1".."fN"; relevance levels 0..n_levels-1
    density                     fraction of stored feature entries (1.0: dense rows)
    options                     n_docs (exact total rows), max_docs_per_query, relevance
                                ("graded" | "list"), noise, level_ratio, model_seed
    Returns a Corpus: X (n_docs, n_features) float32 CSR, obs qid int32 / relevance float32.
    """
    spec = LtrSpec(n_queries, docs_per_query, n_features, n_levels, seed, density, **options)
    parts = list(_blocks(spec, threads))
    X = sp.vstack([p[0] for p in parts], format="csr") if len(parts) > 1 else parts[0][0]
    qid = np.concatenate([p[1] for p in parts])
    rel = np.concatenate([p[2] for p in parts])
    n = X.shape[0]
    return Corpus(X, np.char.add("d", np.arange(n).astype(str)).astype(object), feature_names(n_features),
                  {"qid": qid, "relevance": rel}, {}, {}, {"gputext": _uns(spec, _pairs(qid, rel))})


def write_ltr(path: str, n_queries: int, docs_per_query: float, n_features: int, n_levels: int = 5, seed: int = 0,
              density: float = 1.0, *, compression: str = "none", threads: int | None = None, quiet: bool = True,
              **options) -> dict:
    """Write synthetic LTR data block by block (bounded memory, atomic); same arrays as make_ltr.

    Returns a summary: n_docs, n_features, n_queries, n_pairs, seconds, docs_per_second.
    """
    t0 = time.perf_counter()
    if compression not in ("none", "lzf", "gzip"):
        raise InputError(f"compression must be one of none, lzf, gzip, got {compression!r}")
    spec = LtrSpec(n_queries, docs_per_query, n_features, n_levels, seed, density, **options)
    total = spec.total_docs
    n_pairs = 0
    with atomic_output(path) as tmp:
        with CorpusWriter(tmp, n_features, compression=None if compression == "none" else compression) as writer:
            with progress(total, "synth: writing learning-to-rank rows", quiet) as bar:
                for X, qid, rel, (r0, r1) in _blocks(spec, threads):
                    writer.append(X, np.char.add("d", np.arange(r0, r1).astype(str)), {"qid": qid, "relevance": rel})
                    n_pairs += _pairs(qid, rel)
                    bar.update(r1 - r0)
            writer.finish(feature_names(n_features), uns={"gputext": _uns(spec, n_pairs)})
    seconds = time.perf_counter() - t0
    return {"n_docs": total, "n_features": n_features, "n_queries": n_queries, "n_pairs": n_pairs,
            "seconds": seconds, "docs_per_second": total / seconds if seconds > 0 else float("inf")}
