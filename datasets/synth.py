"""Deterministic synthetic text corpora: Zipfian vocabulary, class topics, log-normal lengths.

The generative model (every choice below is written down in docs/synth.md too):

* **Vocabulary.** ``n_terms`` terms named ``t0 .. t{V-1}``. A background Zipf-Mandelbrot law
  over frequency ranks, ``p(r) ~ 1 / (r + 1 + zipf_offset) ** zipf_exponent`` (r = 0, 1, ...),
  defaults exponent 1.0 and offset 2.7 (Mandelbrot's value: the rank-frequency curve has slope
  about -1 past the first few ranks and a flattened head, as in text without stopwords). Ranks
  map to term ids through a fixed random permutation, so frequent terms are spread over the
  vocabulary as in a built (alphabetical) vocabulary.
* **Classes.** Each of ``n_classes`` classes owns ``topic_size`` terms of its own (disjoint
  between classes, drawn from the ranks after the ``head`` most frequent ones); inside a topic
  the terms follow the same Zipf-Mandelbrot shape. A token is a topic token with probability
  ``topic_weight`` (drawn from the topic of one of the document's labels, chosen uniformly),
  else a background token. So documents of one class share boosted terms: kNN, centroids and
  clustering find real structure, while the background keeps the Zipf shape of the corpus.
* **Labels.** The primary label is uniform over the classes. ``multilabel=True`` adds
  ``Binomial(max_labels - 1, 0.35)`` further distinct labels; ``obs/label`` is the primary
  label, ``obsm/labels`` (CSR float32, ones) holds all of them.
* **Lengths.** ``terms_per_doc`` is the **median number of distinct terms** (non-zeros) per
  document: a target ``D ~ round(LogNormal(log(terms_per_doc), length_sigma))`` is drawn and
  turned into a token count ``n`` with ``E[distinct terms of n tokens] = D`` (computed
  exactly for this model); the ``n`` tokens are drawn with replacement and counted, so term
  frequencies above 1 arise as in real text. The realised median is within a few percent of the
  target (a test checks 10%).
* **Weighting** (``tfidf | tficf | tf | binary | none``, see :func:`weight_rows`): exactly
  ``gputext corpus build``'s (gputext.io.weighting); tf-idf is ``tf * log(N / df)`` with rows
  L2-normalised. var/df, var/idf and uns/gputext/idf_n_docs hold the reference statistics.

Determinism and bounded memory. Documents are generated in blocks of :data:`BLOCK_DOCS`;
block ``b`` draws from ``numpy.random.SeedSequence(seed, spawn_key=(1, b))`` (its labels and
lengths) and ``(2, b)`` (its tokens), i.e. ``SeedSequence(seed).spawn(3)[k].spawn(b + 1)[b]``
for k = 1, 2, so any block can be regenerated alone, in any order, by any thread: the output depends on the
parameters and seeds only, never on ``threads`` or how the writer chunks rows. The model itself
(permutation, topics) comes from ``SeedSequence(model_seed, spawn_key=(0,))``; ``model_seed``
defaults to ``seed``. A query set for a synthetic index uses the index's ``model_seed`` with
another ``seed`` (``--idf-from`` does that by default), so it shares vocabulary and topics.

tf-idf needs the df of the whole corpus: :func:`write_synth` makes two passes (pass 1
regenerates every block to count df, pass 2 regenerates them again and writes weighted rows),
holding only a few blocks at a time.
"""
from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache

import h5py
import numpy as np
import scipy.sparse as sp

from gputext.errors import InputError
from gputext.io import Categorical, Corpus, CorpusWriter, atomic_output, corpus_shape
from gputext.io import weighting as _weighting
from gputext.io.h5file import h5_output
from gputext.io.weighting import Reference
from gputext.progress import progress

BLOCK_DOCS = 16384
"""Documents per random block: part of the generator's definition (changing it changes output)."""

WEIGHTINGS = ("tfidf", "tficf", "tf", "binary", "none")
NORMALISED = ("tfidf", "tficf")
COMPRESSIONS = ("none", "lzf", "gzip")
EXTRA_LABEL_P = 0.35

# stream keys under one seed: (0,) model, (1, b) block metadata, (2, b) block tokens
_MODEL, _META, _TOKENS = 0, 1, 2


# ----------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class TextSpec:
    """All parameters of a synthetic text corpus (validated on construction)."""

    n_docs: int
    n_terms: int
    terms_per_doc: float
    n_classes: int
    seed: int = 0
    model_seed: int | None = None
    multilabel: bool = False
    max_labels: int = 3
    topic_weight: float = 0.15
    topic_size: int | None = None
    zipf_exponent: float = 1.0
    zipf_offset: float = 2.7
    length_sigma: float = 0.6
    weighting: str = "tfidf"

    def __post_init__(self):
        def need(ok, what, value):
            if not ok:
                raise InputError(f"{what}, got {value!r}")
        for name in ("n_docs", "n_terms", "n_classes", "max_labels", "seed"):
            value = getattr(self, name)
            need(isinstance(value, (int, np.integer)) and not isinstance(value, bool),
                 f"{name} must be an integer", value)
        need(self.n_docs >= 1, "n_docs must be >= 1", self.n_docs)
        need(1 <= self.n_terms < 2**31, "n_terms must be in [1, 2^31)", self.n_terms)
        need(self.n_classes >= 1, "n_classes must be >= 1", self.n_classes)
        need(self.seed >= 0, "seed must be >= 0", self.seed)
        need(self.model_seed is None or self.model_seed >= 0, "model_seed must be >= 0", self.model_seed)
        need(1 <= self.terms_per_doc <= self.n_terms / 2,
             f"terms_per_doc (median distinct terms per document) must be in [1, n_terms/2 = {self.n_terms / 2:g}]",
             self.terms_per_doc)
        need(0 <= self.topic_weight < 1, "topic_weight must be in [0, 1)", self.topic_weight)
        need(1 <= self.max_labels <= self.n_classes or not self.multilabel,
             f"max_labels must be in [1, n_classes = {self.n_classes}]", self.max_labels)
        need(self.zipf_exponent > 0, "zipf_exponent must be > 0", self.zipf_exponent)
        need(self.zipf_offset > -1, "zipf_offset must be > -1", self.zipf_offset)
        need(0 <= self.length_sigma <= 3, "length_sigma must be in [0, 3]", self.length_sigma)
        need(self.weighting in WEIGHTINGS, f"weighting must be one of {', '.join(WEIGHTINGS)}", self.weighting)
        if self.topic_size is not None:
            need(self.topic_size >= 1, "topic_size must be >= 1", self.topic_size)
        if self.n_classes > self.n_terms - _head(self.n_terms):
            raise InputError(f"n_classes = {self.n_classes} is too many for a vocabulary of n_terms = {self.n_terms}: "
                             f"each class needs at least one topic term outside the {_head(self.n_terms)} most frequent")

    @property
    def effective_model_seed(self) -> int:
        return self.seed if self.model_seed is None else int(self.model_seed)

    @property
    def n_blocks(self) -> int:
        return -(-self.n_docs // BLOCK_DOCS)

    def block_range(self, b: int) -> tuple[int, int]:
        return b * BLOCK_DOCS, min(self.n_docs, (b + 1) * BLOCK_DOCS)

    def as_uns(self) -> dict:
        """The parameters as stored in uns/gputext/synth (None dropped, model seed resolved)."""
        d = {k: v for k, v in asdict(self).items() if v is not None}
        d["model_seed"] = self.effective_model_seed
        d["topic_size"] = _model(self).topic_size
        d["block_docs"] = BLOCK_DOCS
        d["kind"] = "text"
        return d


def _head(n_terms: int) -> int:
    """Most frequent ranks never used as topic terms (stopword-like terms)."""
    return min(100, n_terms // 20)


def label_names(n_classes: int) -> np.ndarray:
    """"c0".."c9", or zero-padded "c00".."c19", so that sorting the names keeps code order."""
    width = len(str(n_classes - 1))
    return np.array([f"c{c:0{width}d}" for c in range(n_classes)], dtype=object)


def term_names(n_terms: int) -> np.ndarray:
    return np.char.add("t", np.arange(n_terms).astype(str)).astype(object)


def doc_names(start: int, stop: int) -> np.ndarray:
    return np.char.add("d", np.arange(start, stop).astype(str))


def _stream(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


# ----------------------------------------------------------------------------- the model


def _zipf_probs(n: int, exponent: float, offset: float) -> np.ndarray:
    p = 1.0 / np.power(np.arange(1, n + 1, dtype=np.float64) + offset, exponent)
    return p / p.sum()


@lru_cache(maxsize=16)
def _alias_table(n: int, exponent: float, offset: float) -> tuple[np.ndarray, np.ndarray]:
    """Vose's alias table of the Zipf-Mandelbrot law over n ranks: (prob float64, alias int32).

    Sample: x = u * n, k = floor(x); rank = k if x < k + prob[k] else alias[k].
    """
    scaled = (_zipf_probs(n, exponent, offset) * n).tolist()
    prob = [1.0] * n
    alias = list(range(n))
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = scaled[s], g
        scaled[g] = scaled[g] + scaled[s] - 1.0
        (small if scaled[g] < 1.0 else large).append(g)
    return np.array(prob, dtype=np.float64), np.array(alias, dtype=np.int32)


@dataclass
class _Model:
    perm: np.ndarray          # (V,) int32: background rank -> term id
    perm_alias: np.ndarray    # (V,) int32: perm[bg_alias], so a token costs one gather per table
    bg_cut: np.ndarray        # (V,) float64 k + alias probability of k, background law
    topic_terms: np.ndarray   # (C, K) int32: term ids of each class's topic, by topic rank
    topic_size: int
    topic_cut: np.ndarray     # (K,) float64 / (K,) int32: alias table of the within-topic law
    topic_alias: np.ndarray
    grid_tokens: np.ndarray   # calibration: token counts ...
    grid_distinct: np.ndarray  # ... and the expected distinct terms they give (increasing)
    max_distinct: int


_MODELS: dict = {}


def _model(spec: TextSpec) -> _Model:
    key = (spec.effective_model_seed, spec.n_terms, spec.n_classes, spec.topic_size, spec.topic_weight,
           spec.zipf_exponent, spec.zipf_offset, spec.terms_per_doc, spec.length_sigma)
    model = _MODELS.get(key)
    if model is None:
        model = _build_model(spec)
        if len(_MODELS) > 8:
            _MODELS.clear()
        _MODELS[key] = model
    return model


def _build_model(spec: TextSpec) -> _Model:
    V, C = spec.n_terms, spec.n_classes
    head = _head(V)
    rng = _stream(spec.effective_model_seed, _MODEL)
    perm = rng.permutation(V).astype(np.int32)
    K = spec.topic_size if spec.topic_size is not None else int(np.clip((V - head) // (4 * C), 10, 500))
    K = max(1, min(K, (V - head) // C))
    topic_ranks = (head + rng.permutation(V - head)[:C * K]).astype(np.int32).reshape(C, K)
    bg_prob, bg_alias = _alias_table(V, float(spec.zipf_exponent), float(spec.zipf_offset))
    t_prob, t_alias = _alias_table(K, float(spec.zipf_exponent), float(spec.zipf_offset))
    grid_tokens, grid_distinct = _calibrate(spec, topic_ranks)
    return _Model(perm, perm[bg_alias], np.arange(V) + bg_prob, perm[topic_ranks], K, np.arange(K) + t_prob,
                  t_alias, grid_tokens, grid_distinct, max_distinct=int(grid_distinct[-1]))


def _calibrate(spec: TextSpec, topic_ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expected distinct terms E[D | n tokens] = sum_r 1 - (1 - p_r)^n of a single-label document,
    averaged over (up to) 3 classes, on a geometric grid of n; increasing in n."""
    V = spec.n_terms
    bg = _zipf_probs(V, spec.zipf_exponent, spec.zipf_offset)
    topic = _zipf_probs(topic_ranks.shape[1], spec.zipf_exponent, spec.zipf_offset)
    logs = []
    for c in range(min(3, spec.n_classes)):
        p = (1.0 - spec.topic_weight) * bg
        np.add.at(p, topic_ranks[c], spec.topic_weight * topic)
        p = p[p > 0]
        logs.append(np.log1p(-np.minimum(p, 1.0 - 1e-15)))

    def expected(n: float) -> float:
        return float(np.mean([np.sum(-np.expm1(n * lg)) for lg in logs]))

    d_hi = min(0.95 * V, spec.terms_per_doc * math.exp(4 * spec.length_sigma) + 1)
    n_max = max(2.0, 2 * d_hi)
    while expected(n_max) < d_hi and n_max < 1e9:
        n_max *= 2
    grid = np.unique(np.round(np.geomspace(1, n_max, 80)))
    distinct = np.array([expected(n) for n in grid])
    keep = np.concatenate([[True], np.diff(distinct) > 1e-9])
    return grid[keep], distinct[keep]


# ----------------------------------------------------------------------------- one block


@dataclass
class Block:
    """Rows [start, stop) of the corpus: CSR pieces of raw counts plus labels."""

    start: int
    stop: int
    indptr: np.ndarray   # (n + 1,) int64, local
    indices: np.ndarray  # (nnz,) int32, sorted within rows
    counts: np.ndarray   # (nnz,) int32 term frequencies
    labels: np.ndarray   # (n, L) int32, primary label first, -1 padded
    n_labels: np.ndarray  # (n,) int32


def block_meta(spec: TextSpec, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels (n, L) int32 primary first and -1 padded, n_labels (n,) int32, distinct-term
    targets (n,) int64) of block b, from its own stream: cheap to regenerate without tokens."""
    start, stop = spec.block_range(b)
    n, C = stop - start, spec.n_classes
    rng = _stream(spec.seed, _META, b)
    primary = rng.integers(0, C, size=n, dtype=np.int64)
    target = np.exp(rng.normal(math.log(spec.terms_per_doc), spec.length_sigma, size=n))
    L = spec.max_labels if spec.multilabel else 1
    labels = np.full((n, L), -1, dtype=np.int64)
    labels[:, 0] = primary
    n_labels = np.ones(n, dtype=np.int64)
    if spec.multilabel and L > 1:
        n_extra = rng.binomial(L - 1, EXTRA_LABEL_P, size=n)
        taken = np.sort(labels[:, :1], axis=1)
        for j in range(1, L):
            # uniform over the classes not taken yet: draw r in [0, C - j), then step over taken ones
            r = np.floor(rng.random(n) * (C - j)).astype(np.int64)
            for t in range(j):
                r += r >= taken[:, t]
            use = n_extra >= j
            labels[use, j] = r[use]
            n_labels += use
            taken = np.sort(np.concatenate([taken, np.where(use, r, C + j)[:, None]], axis=1), axis=1)
    distinct = np.clip(np.rint(target), 1, None).astype(np.int64)
    return labels.astype(np.int32), n_labels.astype(np.int32), distinct


def generate_block(spec: TextSpec, b: int) -> Block:
    """Generate block b: labels and lengths (block_meta), then tokens counted into sorted CSR rows.

    A document of n tokens has Binomial(n, topic_weight) topic tokens and the rest background
    tokens (the same law as choosing each token's source independently); each token costs one
    uniform draw, turned into a rank by the alias method and into a term id by the permutation.
    """
    model = _model(spec)
    start, stop = spec.block_range(b)
    n, V = stop - start, spec.n_terms
    labels, n_labels, distinct = block_meta(spec, b)
    distinct = np.minimum(distinct, model.max_distinct)
    n_tokens = np.rint(np.interp(distinct, model.grid_distinct, model.grid_tokens)).astype(np.int64)
    n_tokens = np.maximum(n_tokens, distinct)
    rng = _stream(spec.seed, _TOKENS, b)
    n_topic = rng.binomial(n_tokens, spec.topic_weight) if spec.topic_weight > 0 else np.zeros(n, np.int64)
    n_bg = n_tokens - n_topic
    # background tokens of every document, then topic tokens (order is irrelevant: rows are counted)
    rows = np.concatenate([np.repeat(np.arange(n, dtype=np.int32), n_bg),
                           np.repeat(np.arange(n, dtype=np.int32), n_topic)])
    t_bg = int(n_bg.sum())
    terms = np.empty(rows.size, dtype=np.int32)
    x = rng.random(t_bg)
    x *= V
    k = x.astype(np.int32)
    keep = x < model.bg_cut.take(k)
    terms[:t_bg] = np.where(keep, model.perm.take(k), model.perm_alias.take(k))
    if rows.size > t_bg:
        t_rows = rows[t_bg:]
        v = rng.random(rows.size - t_bg)
        if spec.multilabel:
            m = n_labels[t_rows]
            j = np.minimum((v * m).astype(np.int32), m - 1)
            v = v * m - j
            cls = labels[t_rows, j]
        else:
            cls = labels[t_rows, 0]
        K = model.topic_size
        v *= K
        k = np.minimum(v.astype(np.int32), K - 1)
        k = np.where(v < model.topic_cut.take(k), k, model.topic_alias.take(k))
        terms[t_bg:] = model.topic_terms[cls, k]
    indptr, indices, counts = _count_rows(rows, terms, n, V, t_bg)
    return Block(start, stop, indptr, indices, counts, labels, n_labels)


def _count_rows(rows: np.ndarray, terms: np.ndarray, n: int, V: int, cut: int = 0):
    """Count (row, term) pairs into CSR rows: (indptr int64, indices int32 sorted, counts int32).

    ``rows`` (int32) is non-decreasing on [0, cut) and on [cut, end) (background, then topic
    tokens). Rows go in groups small enough for int32 keys ``row * V + term`` (int32 sorts are
    3x faster than int64); V >= 2^30 falls back to int64 keys.
    """
    if V < 2**30:
        per_group, key_type = (2**31 - 1) // V, np.int32
    else:
        per_group, key_type = max(n, 1), np.int64
    edges = np.arange(0, n + per_group, per_group, dtype=np.int64)
    cuts = [lo + np.searchsorted(rows[lo:hi], edges.astype(rows.dtype)) for lo, hi in ((0, cut), (cut, rows.size))]
    indptr = np.zeros(n + 1, dtype=np.int64)
    idx_parts, cnt_parts = [], []
    for g in range(len(edges) - 1):
        first, last = int(edges[g]), min(n, int(edges[g + 1]))
        if first >= n:
            break
        sl = [slice(c[g], c[g + 1]) for c in cuts]
        r = np.concatenate([rows[s] for s in sl]).astype(key_type, copy=False)
        r -= key_type(first)
        r *= key_type(V)
        r += np.concatenate([terms[s] for s in sl])
        keys = r
        keys.sort()
        new = np.empty(keys.size + 1, dtype=bool)
        new[0] = new[-1] = True
        np.not_equal(keys[1:], keys[:-1], out=new[1:-1])
        bounds = np.flatnonzero(new)
        starts = bounds[:-1]
        cnt_parts.append((bounds[1:] - starts).astype(np.int32))
        unique = keys[starts]
        idx_parts.append((unique % key_type(V)).astype(np.int32, copy=False))
        row_starts = np.searchsorted(unique, np.arange(0, last - first + 1, dtype=key_type) * key_type(V))
        indptr[first:last + 1] = row_starts + (indptr[first] if first else 0)
    if not idx_parts:
        return indptr, np.zeros(0, np.int32), np.zeros(0, np.int32)
    return indptr, np.concatenate(idx_parts), np.concatenate(cnt_parts)


# ----------------------------------------------------------------------------- weighting


def weight_rows(indptr: np.ndarray, indices: np.ndarray, counts: np.ndarray, weighting: str,
                df: np.ndarray | None = None, n_docs: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weight raw counts of CSR rows exactly as ``gputext corpus build`` does
    (:func:`gputext.io.weighting.apply_weighting`, same float64 arithmetic in the same order, so
    the float32 results are identical); returns (indptr int64, indices int32, data float32).

    tfidf   tf * log(N / df), rows scaled to unit L2 norm
    tficf   log(1 + tf) * log((N + 1) / (df + 1)), rows scaled to unit L2 norm
    tf      raw counts (not normalised; identical to none for synthetic text)
    binary  1 for every present term
    none    raw counts
    ``df`` (n_terms,) and ``n_docs`` are the reference collection's (the corpus itself, or the
    --idf-from corpus). Entries whose weight is 0 (idf 0: a term in every reference document, or
    in none) are not stored, so such a row can become empty.
    """
    if weighting not in WEIGHTINGS:
        raise InputError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    w = np.asarray(counts, dtype=np.float64)
    if weighting in NORMALISED:
        if df is None or n_docs is None:
            raise InputError(f"{weighting} weighting needs the reference df and n_docs")
        if weighting == "tfidf":
            w = w * _weighting.idf(df, n_docs)[indices]
        else:
            w = np.log1p(w) * _weighting.icf(df, n_docs)[indices]
        lengths = np.diff(indptr)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        norms = np.sqrt(np.bincount(rows, weights=w * w, minlength=len(lengths)))
        scale = np.zeros_like(norms)
        scale[norms > 0] = 1.0 / norms[norms > 0]
        w *= np.repeat(scale, lengths)
    elif weighting == "binary":
        w = np.ones(len(w), dtype=np.float64)
    data = w.astype(np.float32)
    keep = data != 0
    if not keep.all():
        lengths = np.diff(indptr)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[keep], minlength=len(lengths)), out=indptr[1:])
        indices, data = indices[keep], data[keep]
    return indptr, indices, data


def read_reference(path: str, n_terms: int | None = None) -> tuple[np.ndarray, int, dict]:
    """(df int64 (n_terms,), N, synth parameters or {}) of the --idf-from reference corpus.

    Reads only /var and /uns (never /X), so a 10^7-document reference costs nothing. N is
    uns/gputext/idf_n_docs when stored, else the reference's number of documents. The reference's
    terms must be ``t0 .. t{V-1}`` (a synthetic vocabulary) and, when ``n_terms`` is given, V
    must equal it.
    """
    ref_docs, ref_terms, _ = corpus_shape(path)  # validates the file, one-line errors
    with h5py.File(path, "r") as f:
        if "var/df" not in f:
            raise InputError(f"{path}: /var/df is missing: --idf-from needs a corpus with document frequencies "
                             "(written by `gputext corpus synth` or `gputext corpus build`)")
        df = np.asarray(f["var/df"][()], dtype=np.int64)
        n_ref = int(f["uns/gputext/idf_n_docs"][()]) if "uns/gputext/idf_n_docs" in f else ref_docs
        terms = f["var/_index"].asstr()[()] if "var/_index" in f else None
        synth = {}
        if "uns/gputext/synth" in f:
            for key, ds in f["uns/gputext/synth"].items():
                if isinstance(ds, h5py.Dataset) and ds.shape == ():
                    value = ds[()]
                    synth[key] = value.decode() if isinstance(value, bytes) else value.item()
    if df.shape != (ref_terms,) or (df.size and df.min() < 0):
        raise InputError(f"{path}: /var/df has shape {df.shape} or negative values, expected ({ref_terms},) counts")
    if n_terms is not None and ref_terms != n_terms:
        raise InputError(f"{path} has {ref_terms} terms but the synthetic corpus has n_terms = {n_terms}: "
                         "--idf-from needs the same vocabulary (leave --n-terms out to take the reference's)")
    if terms is None or not np.array_equal(np.asarray(terms, dtype=str), term_names(ref_terms).astype(str)):
        shown = list(np.asarray(terms[:3], dtype=str)) if terms is not None else []
        raise InputError(f"{path}: its vocabulary starts {shown}, expected the synthetic t0..t{ref_terms - 1}: "
                         "--idf-from needs a corpus made by `gputext corpus synth`")
    return df, n_ref, synth


# ----------------------------------------------------------------------------- in memory


def _blocks(spec: TextSpec, threads: int | None):
    """Yield every block in order, generated by a small thread pool (numpy releases the GIL)."""
    threads = max(1, threads or os.cpu_count() or 1)
    if threads == 1 or spec.n_blocks == 1:
        for b in range(spec.n_blocks):
            yield generate_block(spec, b)
        return
    _model(spec)  # build once, before the workers
    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending = []
        nxt = 0
        while nxt < spec.n_blocks and len(pending) < threads + 1:
            pending.append(pool.submit(generate_block, spec, nxt))
            nxt += 1
        while pending:
            block = pending.pop(0).result()
            if nxt < spec.n_blocks:
                pending.append(pool.submit(generate_block, spec, nxt))
                nxt += 1
            yield block


def make_corpus(n_docs: int, n_terms: int, terms_per_doc: float, n_classes: int, seed: int = 0, *,
                reference: Reference | None = None, idf_from: str | None = None, threads: int | None = None,
                **options) -> Corpus:
    """A synthetic corpus in memory (for tests and benchmarks): the arrays write_synth writes.

    n_docs, n_terms   rows and vocabulary (terms "t0".."t{V-1}", documents "d0".."d{N-1}")
    terms_per_doc     median number of distinct terms (non-zeros) per document
    n_classes         classes (topics); obs/label is the primary label
    seed              the documents' seed; ``model_seed=`` (default: seed) fixes vocabulary order
                      and topics
    reference         gputext.io.weighting.Reference (df, n_docs) to weight with instead of the
                      corpus's own statistics; ``idf_from=PATH`` reads it from a synthetic corpus
                      (and takes its model_seed unless one is given)
    options           multilabel, max_labels, topic_weight, topic_size, zipf_exponent,
                      zipf_offset, length_sigma, weighting ("tfidf" | "tficf" | "tf" | "binary" | "none")
    Returns a Corpus: X float32 CSR; obs label (Categorical "c0".."c{C-1}"); var df int64 and
    idf float64 (of the reference collection, as corpus build); obsm labels (multilabel);
    uns gputext {weighting, idf_n_docs, synth: parameters, label_names (multilabel)}.
    """
    reference, options = _reference(idf_from, reference, n_terms, options)
    spec = TextSpec(n_docs, n_terms, terms_per_doc, n_classes, seed, **options)
    blocks = list(_blocks(spec, threads))
    indptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.concatenate([np.diff(bl.indptr) for bl in blocks]), out=indptr[1:])
    indices = np.concatenate([bl.indices for bl in blocks])
    counts = np.concatenate([bl.counts for bl in blocks])
    if reference is None:
        reference = Reference(np.bincount(indices, minlength=n_terms), n_docs)
    indptr, indices, data = weight_rows(indptr, indices, counts, spec.weighting, reference.df, reference.n_docs)
    X = sp.csr_matrix((data, indices, indptr), shape=(n_docs, n_terms))
    X.has_sorted_indices = True
    labels = np.concatenate([bl.labels for bl in blocks])
    n_labels = np.concatenate([bl.n_labels for bl in blocks])
    obs = {"label": Categorical(labels[:, 0].copy(), label_names(n_classes))}
    obsm = {"labels": _label_matrix(labels, n_labels, n_classes)} if spec.multilabel else {}
    var = {"df": reference.df, "idf": _weighting.idf(reference.df, reference.n_docs)}
    return Corpus(X, doc_names(0, n_docs).astype(object), term_names(n_terms), obs, var, obsm,
                  {"gputext": _uns(spec, reference.n_docs, idf_from)})


def _reference(idf_from, reference, n_terms, options):
    """Resolve --idf-from / reference: (Reference or None, options with the reference's model_seed)."""
    if idf_from is not None:
        if reference is not None:
            raise InputError("give idf_from or reference, not both")
        df, n_ref, synth = read_reference(idf_from, n_terms)
        reference = Reference(df, n_ref)
        if options.get("model_seed") is None and "model_seed" in synth:
            options = {**options, "model_seed": int(synth["model_seed"])}
    if reference is not None:
        if len(reference.df) != n_terms:
            raise InputError(f"the reference has {len(reference.df)} terms, expected n_terms = {n_terms}")
        if reference.n_docs < 1:
            raise InputError(f"the reference has n_docs = {reference.n_docs}, expected >= 1")
    return reference, options


def _label_matrix(labels: np.ndarray, n_labels: np.ndarray, n_classes: int) -> sp.csr_matrix:
    """Multi-label targets: CSR float32 (n, n_classes), ones, indices sorted within rows."""
    n = labels.shape[0]
    ordered = np.sort(np.where(labels >= 0, labels, n_classes), axis=1)
    keep = ordered < n_classes
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(n_labels, out=indptr[1:])
    M = sp.csr_matrix((np.ones(int(indptr[-1]), np.float32), ordered[keep].astype(np.int32), indptr),
                      shape=(n, n_classes))
    M.has_sorted_indices = True
    return M


def _uns(spec: TextSpec, idf_n_docs: int, idf_from: str | None) -> dict:
    uns = {"command": "corpus synth", "weighting": spec.weighting, "idf_n_docs": int(idf_n_docs),
           "synth": spec.as_uns()}
    if spec.multilabel:
        uns["label_names"] = label_names(spec.n_classes)
    if idf_from is not None:
        uns["idf_from"] = os.path.abspath(idf_from)
    return uns


# ----------------------------------------------------------------------------- chunked writing


def write_synth(path: str, n_docs: int, n_terms: int, terms_per_doc: float, n_classes: int, seed: int = 0, *,
                reference: Reference | None = None, idf_from: str | None = None, compression: str = "none",
                threads: int | None = None, quiet: bool = True, **options) -> dict:
    """Write a synthetic corpus to ``path`` block by block (bounded memory, atomic, ``-`` = stdout).

    Same parameters as :func:`make_corpus` (the file holds exactly its arrays), plus
    compression   "none" (default: synthetic data is regenerated from its seed, and gzip would
                  cut the write speed about 8x), "lzf" or "gzip"
    threads       generator threads (default: all cores); the output does not depend on it
    quiet         no progress bars
    tf-idf / tf-icf without a reference make two passes: pass 1 regenerates every block to
    count df, pass 2 regenerates them again and writes weighted rows.
    Returns a summary: n_docs, n_terms, nnz, weighting, seconds, docs_per_second.
    """
    t0 = time.perf_counter()
    if compression not in COMPRESSIONS:
        raise InputError(f"compression must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
    reference, options = _reference(idf_from, reference, n_terms, options)
    spec = TextSpec(n_docs, n_terms, terms_per_doc, n_classes, seed, **options)
    _model(spec)
    passes = 2 if spec.weighting in NORMALISED and reference is None else 1
    if passes == 2:
        df = np.zeros(n_terms, dtype=np.int64)
        with progress(n_docs, "synth pass 1/2: counting df", quiet) as bar:
            for block in _blocks(spec, threads):
                df += np.bincount(block.indices, minlength=n_terms)
                bar.update(block.stop - block.start)
        reference = Reference(df, n_docs)
    own_df = np.zeros(n_terms, dtype=np.int64)
    ref_df, ref_n = (reference.df, reference.n_docs) if reference is not None else (None, None)
    nnz = 0
    with atomic_output(path) as tmp:
        with CorpusWriter(tmp, n_terms, compression=None if compression == "none" else compression) as writer:
            with progress(n_docs, f"synth pass {passes}/{passes}: writing", quiet) as bar:
                for block in _blocks(spec, threads):
                    own_df += np.bincount(block.indices, minlength=n_terms)
                    indptr, indices, data = weight_rows(block.indptr, block.indices, block.counts, spec.weighting,
                                                        ref_df, ref_n)
                    X = sp.csr_matrix((data, indices, indptr), shape=(block.stop - block.start, n_terms))
                    X.has_sorted_indices = True
                    writer.append(X, doc_names(block.start, block.stop), {"label": block.labels[:, 0]})
                    nnz += len(indices)
                    bar.update(block.stop - block.start)
            if reference is None:
                reference = Reference(own_df, n_docs)
            writer.finish(term_names(n_terms), var={"df": reference.df, "idf": _weighting.idf(reference.df, reference.n_docs)},
                          categories={"label": label_names(n_classes)},
                          uns={"gputext": _uns(spec, reference.n_docs, idf_from)})
        if spec.multilabel:
            _append_label_matrix(tmp, spec)
    seconds = time.perf_counter() - t0
    return {"n_docs": n_docs, "n_terms": n_terms, "nnz": nnz, "weighting": spec.weighting,
            "seconds": seconds, "docs_per_second": n_docs / seconds if seconds > 0 else float("inf")}


def _append_label_matrix(path: str, spec: TextSpec) -> None:
    """Write obsm/labels into a finished (still temporary) file, block by block, regenerating only
    the blocks' labels (their own random stream), so memory stays bounded."""
    with h5_output(path, "r+") as f:
        g = f["obsm"].create_group("labels")
        g.attrs["encoding-type"] = "csr_matrix"
        g.attrs["encoding-version"] = "0.1.0"
        g.attrs["shape"] = np.array([spec.n_docs, spec.n_classes], dtype=np.int64)
        chunk = 1 << 16
        data = g.create_dataset("data", (0,), np.float32, maxshape=(None,), chunks=(chunk,))
        indices = g.create_dataset("indices", (0,), np.int32, maxshape=(None,), chunks=(chunk,))
        indptr = g.create_dataset("indptr", (spec.n_docs + 1,), np.int64)
        indptr[0] = 0
        nnz = 0
        for b in range(spec.n_blocks):
            labels, n_labels, _ = block_meta(spec, b)
            M = _label_matrix(labels, n_labels, spec.n_classes)
            start, stop = spec.block_range(b)
            data.resize((nnz + M.nnz,))
            data[nnz:] = M.data
            indices.resize((nnz + M.nnz,))
            indices[nnz:] = M.indices
            indptr[start + 1:stop + 1] = M.indptr[1:] + nnz
            nnz += M.nnz
