"""The inverted index: a corpus's document-term matrix, its postings and its document norms.

An Index is a host object built from a CSR matrix. Backend structures are made on first use:
``cpu()`` returns the postings built by the CPU twin (sorted lists), and the CUDA backend builds
its own on the device shard by shard (gputext.engine.cuda_backend). ``save``/``load`` keep the
CPU postings in an index file, which is also a valid corpus file (its /X is the corpus), so
``knn search --index`` takes either.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import h5py
import numpy as np
import scipy.sparse as sp

from ..errors import FormatError, InputError
from ..io.corpus import Corpus, DocTermShape, canonical_csr, csr_arrays, read_corpus, write_corpus
from ..kernels import postings, scoring
from ..kernels.postings import parallel_stats, weight_stats


@dataclass
class Postings:
    """The CPU twin's index: term_ptr int64 (n_terms+1,), post_doc int32 (nnz,), post_w float32
    (nnz,), d_sq / d_l1 float64 (n_docs,), term_maxabs float32 (n_terms,)."""

    term_ptr: np.ndarray
    post_doc: np.ndarray
    post_w: np.ndarray
    d_sq: np.ndarray
    d_l1: np.ndarray
    term_maxabs: np.ndarray

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.term_ptr, self.post_doc, self.post_w, self.d_sq, self.d_l1, self.term_maxabs))


MAX_ABS_WEIGHT = 2.0 ** 40  # about 1.1e12: larger weights are refused (docs/knn_search.md, "Weights")


def check_weights(data: np.ndarray, what: str, stats: tuple | None = None) -> None:
    """The kNN input rule for weights (index and queries alike, sparse engine and dense kernels):
    finite, and |w| < MAX_ABS_WEIGHT. The engine's int64 fixed point resolves a query's
    contributions to 2**-61 of its bound sum |q_t| max |d_t|, and the dense kernels keep squared
    norms in float32; a weight near float32's range (3e38) pushes every ordinary contribution below
    the first and overflows the second, and documents would tie at score 0 instead of being ranked.
    stats: (non-finite count, largest finite |weight|) when the caller has them
    (kernels.postings.weight_stats, one parallel pass for a large index)."""
    if not len(data):
        return
    bad, largest = stats if stats is not None else (0 if np.all(np.isfinite(data)) else 1, None)
    if bad:
        raise InputError(f"the {what} contains NaN or infinite weights")
    largest = float(np.max(np.abs(data))) if largest is None else float(largest)
    if largest >= MAX_ABS_WEIGHT:
        raise InputError(f"the {what} has a weight of magnitude {largest:.3g}; kNN takes |weight| < "
                         f"2^40 = {MAX_ABS_WEIGHT:.3g} (larger ones would drown the other terms: docs/knn_search.md): "
                         "rescale the features (e.g. divide each by its largest value)")


class Index(DocTermShape):
    """Documents to search: ``Index.from_csr(X)``, ``Index.from_corpus(c)``, ``Index.load(path)``."""

    def __init__(self, X: sp.csr_matrix, corpus: Corpus | None = None, postings: Postings | None = None):
        self.X = canonical_csr(X)
        maxabs = None
        if parallel_stats(self.X.nnz):  # (``postings`` here is the argument)
            bad, top, maxabs = weight_stats(self.X.indices, self.X.data, self.X.shape[1])
            check_weights(self.X.data, "indexed matrix", (bad, top))
        else:
            check_weights(self.X.data, "indexed matrix")
        self.corpus = corpus
        self._postings = postings
        self._norm_order: dict[int, np.ndarray] = {}
        self._norm_terms: dict[int, np.ndarray] = {}
        self._maxabs: np.ndarray | None = maxabs  # term_maxabs (a large matrix's, from its weights' check)
        self._row_norms: tuple | None = None  # row_norms() without postings
        self.device_cache: dict = {}  # the CUDA backend keeps its device shards here
        self._scale_maxabs: np.ndarray | None = None  # with_term_maxabs

    @classmethod
    def from_csr(cls, X) -> "Index":
        return cls(X)

    @classmethod
    def from_corpus(cls, corpus: Corpus) -> "Index":
        return cls(corpus.X, corpus)

    @property
    def nnz(self) -> int:
        return self.X.nnz

    @property
    def host_postings(self) -> Postings | None:
        """The host's postings when built (Index.cpu(), or loaded from an index file), else None:
        the CUDA engine then builds the lists on the device instead."""
        return self._postings

    def cpu(self, keep: bool = True) -> Postings:
        """Postings built by the CPU twin (once; keep=False builds them without holding them here,
        for a caller that only uploads them)."""
        if self._postings is not None:
            return self._postings
        indptr, indices, data = csr_arrays(self.X)
        built = Postings(*postings.build_postings(indptr, indices, data, self.n_terms))
        if keep:
            self._postings = built
        return built

    @property
    def term_maxabs(self) -> np.ndarray:
        """float32 (n_terms,): largest |weight| of each term (sets each query's fixed-point scale)."""
        if self._scale_maxabs is not None:
            return self._scale_maxabs
        if self._postings is not None:
            return self._postings.term_maxabs
        if self._maxabs is None:
            _, indices, data = csr_arrays(self.X)
            self._maxabs = postings.term_maxabs(indices, data, self.n_terms)
        return self._maxabs

    def with_term_maxabs(self, term_maxabs: np.ndarray) -> "Index":
        """A view of this index (same matrix, postings, norms and device cache) whose queries take
        their fixed-point scale from ``term_maxabs`` float32 (n_terms,) instead of this matrix's
        own term maxima. For a shard (a row range) of a larger corpus pass the whole corpus's
        maxima (each >= the shard's): every document then gets the float64 key, bit for bit, that
        the whole corpus's index gives it, so shards' lists merge exactly (gputext.distributed)."""
        m = np.ascontiguousarray(term_maxabs, dtype=np.float32)
        if m.shape != (self.n_terms,):
            raise InputError(f"term_maxabs must have one entry per term ({self.n_terms}), got shape {m.shape}")
        view = copy.copy(self)  # shallow: shares the norm caches and the device cache
        view.cpu = self.cpu  # postings built through a view are built (once) on this index
        view._scale_maxabs = m
        return view

    def norm_terms(self, metric: int) -> np.ndarray:
        """float64 (n_docs,): each document's norm term for the metric (kernels.scoring.norm_terms)."""
        if metric not in self._norm_terms:
            d_sq, d_l1 = self.row_norms()
            self._norm_terms[metric] = np.ascontiguousarray(scoring.norm_terms(d_sq, d_l1, metric))
        return self._norm_terms[metric]

    def row_norms(self) -> tuple[np.ndarray, np.ndarray]:
        """(|d|_2^2, |d|_1) float64 (n_docs,) of every document: the postings' when built, else
        from the rows alone (kernels.postings.row_norms_cpu, the same bits), so that a search on
        the device needs no host build of the lists."""
        if self._postings is not None:
            return self._postings.d_sq, self._postings.d_l1
        if self._row_norms is None:
            indptr, _, data = csr_arrays(self.X)
            d_sq, d_l1 = np.empty(self.n_docs, np.float64), np.empty(self.n_docs, np.float64)
            postings.row_norms_cpu(indptr, data, d_sq, d_l1)
            self._row_norms = (d_sq, d_l1)
        return self._row_norms

    def norm_order(self, metric: int) -> np.ndarray:
        """Documents by (norm term, index) ascending for l2 and l1, the order in which untouched
        documents' keys fall; identity for dot and cosine (their untouched keys are all 0)."""
        if metric not in self._norm_order:
            if metric in (scoring.L2, scoring.L1):
                order = np.argsort(self.norm_terms(metric), kind="stable")
            else:
                order = np.arange(self.n_docs)
            self._norm_order[metric] = np.ascontiguousarray(order, dtype=np.int64)
        return self._norm_order[metric]

    # ------------------------------------------------------------------ files

    def save(self, path: str, params: dict | None = None) -> None:
        """Write an index file: the corpus (valid corpus file) plus /uns/gputext/index postings."""
        p = self.cpu()
        corpus = self.corpus or Corpus(self.X)
        corpus = Corpus(corpus.X, corpus.doc_ids, corpus.terms, dict(corpus.obs), dict(corpus.var),
                        dict(corpus.obsm), {k: v for k, v in corpus.uns.items()})
        corpus.params["index"] = {
            "term_ptr": p.term_ptr, "post_doc": p.post_doc, "post_w": p.post_w,
            "d_sq": p.d_sq, "d_l1": p.d_l1, "term_maxabs": p.term_maxabs,
            "format": "postings-sorted-by-doc", **(params or {}),
        }
        write_corpus(corpus, path)

    @classmethod
    def load(cls, path: str) -> "Index":
        """Read an index file or a plain corpus file (postings are then built on first use)."""
        corpus = read_corpus(path)
        stored = corpus.params.pop("index", None)
        postings = None
        if isinstance(stored, dict):
            try:
                postings = Postings(*(np.asarray(stored[key]) for key in
                                      ("term_ptr", "post_doc", "post_w", "d_sq", "d_l1", "term_maxabs")))
            except KeyError as exc:
                raise FormatError(f"{path}: /uns/gputext/index/{exc.args[0]} is missing") from None
            _check_postings(path, postings, corpus.n_docs, corpus.n_terms, corpus.X.nnz)
        return cls(corpus.X, corpus, postings)


def _check_postings(path, p: Postings, n_docs, n_terms, nnz) -> None:
    where = f"{path}: /uns/gputext/index"
    if p.term_ptr.shape != (n_terms + 1,) or p.term_ptr[0] != 0 or p.term_ptr[-1] != nnz or np.any(np.diff(p.term_ptr) < 0):
        raise FormatError(f"{where}/term_ptr does not match the corpus (expected {n_terms + 1} non-decreasing offsets ending at nnz = {nnz})")
    if p.post_doc.shape != (nnz,) or p.post_w.shape != (nnz,):
        raise FormatError(f"{where}/post_doc and post_w should have nnz = {nnz} entries")
    if nnz and (p.post_doc.min() < 0 or p.post_doc.max() >= n_docs):
        raise FormatError(f"{where}/post_doc has a document index outside [0, {n_docs})")
    if p.d_sq.shape != (n_docs,) or p.d_l1.shape != (n_docs,) or p.term_maxabs.shape != (n_terms,):
        raise FormatError(f"{where}: d_sq, d_l1 ({n_docs}) or term_maxabs ({n_terms}) has the wrong length")
    p.term_ptr = p.term_ptr.astype(np.int64)
    p.post_doc = p.post_doc.astype(np.int32)
    p.post_w = p.post_w.astype(np.float32)
    p.d_sq = p.d_sq.astype(np.float64)
    p.d_l1 = p.d_l1.astype(np.float64)
    p.term_maxabs = p.term_maxabs.astype(np.float32)


def index_file_has_postings(path: str) -> bool:
    with h5py.File(path, "r") as f:
        return "uns/gputext/index/term_ptr" in f
