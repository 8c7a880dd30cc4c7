"""PubMed-shaped synthetic document streams for the stream-clustering benchmarks and tables.

``gputext.datasets.synth`` (the `corpus synth` generator, preset ``pubmed``: 141,043 terms, median
55 distinct terms a document, Zipfian vocabulary, 50 topics) gives independent documents. Its
tf-icf documents are rarely more similar than 0.6 to each other, so at the paper's T = 0.6 almost
every document would start a cluster, whereas the paper's PubMed run made 3.5M clusters out of
5.5M documents (64%). A stream has follow-ups: later documents on the same story. So this module
interleaves:

* **base documents**: the synth generator's documents, in order (block by block, bounded memory);
* **follow-ups** (a fraction ``repeat_fraction`` of the stream, default 0.36 so that about 64% of
  the documents start a cluster at T = 0.6 as in the paper): a copy of a base document drawn
  uniformly from the last ``window`` base documents, each of its terms kept with probability
  ``1 - drop_fraction`` (at least one), same class label.

Weights: tf-icf against a reference collection made of the first ``reference_docs`` base
documents (df and N), as `corpus build --weighting tficf --vocab-from`: log(1 + tf) *
log((N + 1) / (df + 1)), unit L2 rows. Everything is a function of the parameters and ``seed``.

    for start, X, labels in pubmed_stream(1_000_000, chunk_docs=65536): ...
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..datasets.synth import BLOCK_DOCS, TextSpec, generate_block, weight_rows
from ..errors import InputError

PUBMED = {"n_terms": 141_043, "terms_per_doc": 55, "n_classes": 50}


@dataclass(frozen=True)
class StreamSpec:
    n_docs: int
    seed: int = 0
    n_terms: int = PUBMED["n_terms"]
    terms_per_doc: float = PUBMED["terms_per_doc"]
    n_classes: int = PUBMED["n_classes"]
    repeat_fraction: float = 0.36
    drop_fraction: float = 0.2
    window: int = 20_000
    reference_docs: int = 100_000
    topic_weight: float = 0.25

    def __post_init__(self):
        if self.n_docs < 1:
            raise InputError(f"n_docs must be >= 1, got {self.n_docs}")
        if not 0 <= self.repeat_fraction < 1:
            raise InputError(f"repeat_fraction must be in [0, 1), got {self.repeat_fraction}")
        if not 0 <= self.drop_fraction < 1:
            raise InputError(f"drop_fraction must be in [0, 1), got {self.drop_fraction}")

    def base_spec(self, n_base: int) -> TextSpec:
        return TextSpec(max(n_base, 1), self.n_terms, self.terms_per_doc, self.n_classes, self.seed,
                        topic_weight=self.topic_weight, weighting="none")


class _BaseDocs:
    """Base documents as counts, generated block by block on demand."""

    def __init__(self, spec: TextSpec):
        self.spec = spec
        self.next_block = 0
        self.indptr = np.zeros(1, np.int64)
        self.indices = np.zeros(0, np.int32)
        self.counts = np.zeros(0, np.int32)
        self.labels = np.zeros(0, np.int32)
        self.first = 0  # global id of the first document held

    def ensure(self, stop: int) -> None:
        while self.first + len(self.labels) < stop:
            block = generate_block(self.spec, self.next_block)
            self.next_block += 1
            self.indptr = np.concatenate([self.indptr[:-1], block.indptr + self.indptr[-1]])
            self.indices = np.concatenate([self.indices, block.indices])
            self.counts = np.concatenate([self.counts, block.counts])
            self.labels = np.concatenate([self.labels, block.labels[:, 0]])

    def forget_before(self, start: int) -> None:
        drop = start - self.first
        if drop <= 0:
            return
        cut = self.indptr[drop]
        self.indptr = self.indptr[drop:] - cut
        self.indices, self.counts = self.indices[cut:], self.counts[cut:]
        self.labels = self.labels[drop:]
        self.first = start

    def rows(self, ids: np.ndarray) -> sp.csr_matrix:
        local = np.asarray(ids, np.int64) - self.first
        X = sp.csr_matrix((self.counts, self.indices, self.indptr), shape=(len(self.labels), self.spec.n_terms))
        return X[local]


def reference_df(spec: StreamSpec) -> tuple[np.ndarray, int]:
    """(df int64 (n_terms,), N) of the first reference_docs base documents."""
    n_ref = min(spec.reference_docs, max(spec.n_docs, 1))
    base = spec.base_spec(max(n_ref, spec.n_docs))
    df = np.zeros(spec.n_terms, np.int64)
    for b in range((n_ref + BLOCK_DOCS - 1) // BLOCK_DOCS):
        block = generate_block(base, b)
        lo, hi = block.start, min(block.stop, n_ref)
        rows = hi - lo
        df += np.bincount(block.indices[:block.indptr[rows]], minlength=spec.n_terms)
    return df, n_ref


def pubmed_stream(n_docs: int, seed: int = 0, chunk_docs: int = 65536, reference=None, **options):
    """Yield (start, X float32 CSR (n, n_terms) tf-icf rows, labels int32 (n,)) chunks of the stream."""
    spec = StreamSpec(n_docs, seed, **options)
    df, n_ref = reference if reference is not None else reference_df(spec)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
    base = _BaseDocs(spec.base_spec(n_docs))
    next_base = 0
    for start in range(0, n_docs, chunk_docs):
        n = min(chunk_docs, n_docs - start)
        follow = rng.random(n) < spec.repeat_fraction
        follow[0] = follow[0] and next_base > 0
        is_base = ~follow
        # base ids in stream order; a follow-up copies one of the `window` base documents before it
        base_before = next_base + np.cumsum(is_base) - is_base  # base docs emitted before each row
        base_ids = np.where(is_base, base_before, 0)
        lo = np.maximum(base_before - spec.window, 0)
        span = np.maximum(base_before - lo, 1)
        src = lo + np.floor(rng.random(n) * span).astype(np.int64)
        follow &= base_before > 0
        ids = np.where(follow, src, base_ids)
        stop_base = next_base + int(is_base.sum())
        base.ensure(stop_base)
        rows = base.rows(ids).tocsr()
        labels = base.labels[ids - base.first].astype(np.int32)
        # follow-ups drop each term with probability drop_fraction, keeping at least one
        keep = np.ones(rows.nnz, bool)
        row_of = np.repeat(np.arange(n), np.diff(rows.indptr))
        drop = (rng.random(rows.nnz) < spec.drop_fraction) & follow[row_of]
        keep &= ~drop
        kept_per_row = np.bincount(row_of[keep], minlength=n)
        lost = np.flatnonzero((kept_per_row == 0) & (np.diff(rows.indptr) > 0))
        keep[rows.indptr[lost]] = True
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(row_of[keep], minlength=n), out=indptr[1:])
        indptr, indices, data = weight_rows(indptr, rows.indices[keep].astype(np.int32), rows.data[keep], "tficf",
                                            df, n_ref)
        X = sp.csr_matrix((data, indices, indptr), shape=(n, spec.n_terms))
        X.has_sorted_indices = True
        next_base = stop_base
        base.forget_before(max(0, next_base - spec.window - 1))
        yield start, X, labels


def pubmed_corpus(n_docs: int, seed: int = 0, **options) -> tuple[sp.csr_matrix, np.ndarray]:
    """The whole stream in memory: (X, labels)."""
    parts = list(pubmed_stream(n_docs, seed, **options))
    return sp.vstack([p[1] for p in parts]).tocsr(), np.concatenate([p[2] for p in parts])
