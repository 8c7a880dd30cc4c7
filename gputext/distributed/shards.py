"""Document-range shards: planned on the client, built once and kept on the workers.

A Source says where a worker gets document rows: a corpus file every worker can read (rows
[lo, hi) of /X, gputext.io.corpus.read_rows), or a block of the client's matrix scattered once to
the shard's worker. Each worker process keeps the engine Index of every shard it has served in
``_CACHE`` (keyed by the source's token and the row range) for the life of the client; a worker
that comes new to a shard (its first worker died, or Dask moved the task) builds it again from
the source, so a re-run gives the same result.

Every function named ``task_*`` runs on a worker.
"""
from __future__ import annotations

import functools
import os
import uuid
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import GputextError, InputError

_CACHE: dict = {}  # in each worker process: (token, lo, hi) -> gputext.engine.Index


@dataclass(frozen=True)
class Source:
    """Where the documents are. token: the worker cache's key (the files' paths, sizes and mtimes,
    or a fresh id for an in-memory matrix); paths: the corpus files whose rows, in order, are the
    documents (one file usually), empty for scattered blocks; offsets: each file's first row."""

    token: str
    paths: tuple
    offsets: tuple
    n_docs: int
    n_terms: int
    nnz: int

    @property
    def path(self) -> str | None:
        """The file (or the first of several), None for scattered blocks."""
        return self.paths[0] if self.paths else None

    @property
    def name(self) -> str:
        if not self.paths:
            return "the scattered matrix"
        return self.paths[0] if len(self.paths) == 1 else f"{self.paths[0]} (+{len(self.paths) - 1} files)"


@dataclass(frozen=True)
class Shard:
    """Rows [lo, hi) of the source, at ``position`` in the merge order, preferably on ``worker``.
    Its documents are numbered [doc_lo, doc_hi) in the index (the rows' numbers, unless the
    index orders each shard's rows by class: ByLabel)."""

    position: int
    lo: int
    hi: int
    worker: str
    doc_lo: int = -1
    doc_hi: int = -1

    @property
    def docs(self) -> tuple[int, int]:
        """[first, end) of the shard's document numbers."""
        return (self.lo, self.hi) if self.doc_lo < 0 else (self.doc_lo, self.doc_hi)


class ByLabel:
    """A shard indexed by class: of its rows (labels int64 (rows,), -1 for a row in no class, left
    out), those in a class ordered by (class, row), so that each class is one group of the shard's
    documents (group_ptr int64 (n_classes + 1,)). Scattered once to the shard's worker in place of
    a block of rows, which the worker reads from the file. Within a class the order is the file's,
    as in an index of the whole class-ordered matrix: scores and the tie rule's order agree."""

    def __init__(self, labels: np.ndarray, n_classes: int):
        self.labels = np.ascontiguousarray(labels, np.int64)
        self.n_classes = int(n_classes)

    def order(self) -> np.ndarray:
        """The shard's rows (local numbers) in document order: in a class, by class then row."""
        inside = np.flatnonzero(self.labels >= 0)
        return inside[np.argsort(self.labels[inside], kind="stable")]

    def group_ptr(self) -> np.ndarray:
        counts = np.bincount(self.labels[self.labels >= 0], minlength=self.n_classes)
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @functools.cached_property
    def token(self) -> str:
        """The worker cache's key part (once per block: every task of the shard asks for it)."""
        import hashlib
        return "by-label:" + hashlib.sha256(self.labels.tobytes()).hexdigest()[:16] + f":{self.n_classes}"


def file_source(paths) -> tuple[Source, np.ndarray]:
    """(Source, indptr int64 (n_docs+1,)) of corpus files (one path or several, their rows
    concatenated in order; the same vocabulary size), reading only /X's metadata and indptr."""
    import h5py

    from ..io.corpus import corpus_shape
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise InputError("no corpus file given")
    parts, offsets, tokens, n_terms, total, nnz = [], [], [], None, 0, 0
    for path in paths:
        path = os.path.abspath(os.fspath(path))
        n, m, z = corpus_shape(path)  # one-line errors for missing or malformed files
        if n_terms is not None and m != n_terms:
            raise InputError(f"{path} has {m} terms, {paths[0]} has {n_terms}: the files must share one vocabulary")
        n_terms = m
        with h5py.File(path, "r") as f:
            parts.append(np.asarray(f["X/indptr"][1:], np.int64) + nnz)
        st = os.stat(path)
        tokens.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
        offsets.append(total)
        total += n
        nnz += z
    indptr = np.concatenate([np.zeros(1, np.int64)] + parts)
    abs_paths = tuple(os.path.abspath(os.fspath(p)) for p in paths)
    return Source("|".join(tokens), abs_paths, tuple(offsets), total, n_terms, nnz), indptr


def array_source(X: sp.csr_matrix) -> Source:
    return Source(f"array:{uuid.uuid4().hex}", (), (), X.shape[0], X.shape[1], X.nnz)


def plan_bounds(indptr: np.ndarray, n_shards: int) -> np.ndarray:
    """int64 (S+1,) row boundaries 0 = b_0 < ... < b_S = n_docs cutting the rows into at most
    n_shards ranges of near-equal postings (nonzeros); S < n_shards when there are too few rows."""
    n = len(indptr) - 1
    nnz = int(indptr[-1])
    n_shards = max(1, min(int(n_shards), n))
    if nnz == 0:
        cuts = np.arange(1, n_shards) * n // n_shards
    else:
        cuts = np.searchsorted(indptr, np.arange(1, n_shards) * (nnz / n_shards), side="left")
    return np.unique(np.concatenate([[0], np.clip(cuts, 0, n), [n]]).astype(np.int64))


def plan_shards(indptr: np.ndarray, workers: list[str], n_shards: int | None = None) -> list[Shard]:
    """One shard per worker (or n_shards, dealt round-robin over the sorted worker addresses)."""
    if not workers:
        raise InputError("the Dask cluster has no worker")
    bounds = plan_bounds(indptr, n_shards or len(workers))
    ordered = sorted(workers)
    return [Shard(s, int(bounds[s]), int(bounds[s + 1]), ordered[s % len(ordered)]) for s in range(len(bounds) - 1)]


# ----------------------------------------------------------------------------- on the workers


def _where() -> str:
    try:
        from distributed import get_worker
        return f"worker {get_worker().address}"
    except Exception:  # outside a worker (tests calling tasks directly)
        return "this process"


def read_source_rows(source: Source, lo: int, hi: int) -> sp.csr_matrix:
    """Rows [lo, hi) of a file source (across its files, read into one matrix), or a one-line
    InputError naming the worker."""
    from ..io.corpus import read_row_pieces
    ends = list(source.offsets[1:]) + [source.n_docs]
    pieces = [(path, max(lo, first) - first, min(hi, end) - first)
              for path, first, end in zip(source.paths, source.offsets, ends) if max(lo, first) < min(hi, end)]
    if not pieces:
        return sp.csr_matrix((0, source.n_terms), dtype=np.float32)
    try:
        return read_row_pieces(pieces)
    except (OSError, GputextError, KeyError) as exc:
        raise InputError(f"shard rows [{lo}, {hi}) of {source.name} cannot be read on {_where()}: "
                         f"{' '.join(str(exc).split())}") from None


def shard_index(source: Source, shard: Shard, block):
    """The worker's Index of the shard (built on first use from ``block`` or the file)."""
    from ..engine import Index
    from .client import limit_threads
    limit_threads()
    by_label = isinstance(block, ByLabel)
    key = (source.token, shard.lo, shard.hi) + ((block.token,) if by_label else ())
    index = _CACHE.get(key)
    if index is None:
        X = block if block is not None and not by_label else read_source_rows(source, shard.lo, shard.hi)
        if X.shape != (shard.hi - shard.lo, source.n_terms):
            raise InputError(f"shard rows [{shard.lo}, {shard.hi}) on {_where()} have shape {X.shape}, expected "
                             f"({shard.hi - shard.lo}, {source.n_terms}): the corpus changed while in use")
        if by_label:
            from ..kernels.csr_rows import take_rows
            X = take_rows(X, block.order())
        index = Index.from_csr(X)  # postings built on first search, kept with the Index
        _CACHE[key] = index
    return index


def task_term_maxabs(source: Source, shard: Shard, block, cuts) -> np.ndarray:
    """float32 (len(cuts), n_terms): the largest |weight| of each term over the shard's rows from
    each cut on (rows >= cut); zeros where the shard has none."""
    from ..io.corpus import csr_arrays, csr_rows
    from ..kernels import postings
    X = shard_index(source, shard, block).X
    arrays = csr_arrays(X)
    out = np.zeros((len(cuts), source.n_terms), np.float32)
    for j, cut in enumerate(cuts):
        start = max(0, int(cut) - shard.lo)
        if start < X.shape[0]:
            _, indices, data = csr_rows(*arrays, start, X.shape[0])  # views, no copy of the rows
            out[j] = postings.term_maxabs(indices, data, source.n_terms)
    return out


def task_drop(token: str) -> int:
    """Forget the source's shards on this worker (the client is done with them)."""
    keys = [key for key in _CACHE if key[0] == token]
    for key in keys:
        del _CACHE[key]
    return len(keys)


def query_rows(source: Source, queries):
    """The query matrix: a CSR given, or ('rows', lo, hi) of the file source read here."""
    if isinstance(queries, tuple):
        _, lo, hi = queries
        return read_source_rows(source, lo, hi)
    return queries


def local_docs(docs: np.ndarray, shard: Shard) -> np.ndarray:
    """Global document indices (int64, -1 none) -> the shard's local ones (-1 outside it)."""
    docs = np.asarray(docs, np.int64)
    lo, hi = shard.docs
    inside = (docs >= lo) & (docs < hi)
    return np.where(inside, docs - lo, -1)


def task_topk(source: Source, shard: Shard, block, maxabs, queries, k, metric, device, self_doc, batch_size):
    """The shard's top-k: (docs int32 (n_q, k) global, -1 none; keys float64 (n_q, k))."""
    from ..engine import search_topk_keys
    index = shard_index(source, shard, block).with_term_maxabs(maxabs)
    docs, keys = search_topk_keys(index, query_rows(source, queries), k, metric, device,
                                  exclude_self=local_docs(self_doc, shard), batch_size=batch_size, quiet=True)
    return np.where(docs >= 0, docs + shard.docs[0], -1).astype(np.int32), keys


def task_threshold(source: Source, shard: Shard, block, maxabs, queries, threshold, metric, device, self_doc,
                   after, batch_size) -> sp.csr_matrix:
    """The shard's threshold hits: CSR float32 (n_q, shard rows), local columns."""
    from ..engine import search_threshold
    index = shard_index(source, shard, block).with_term_maxabs(maxabs)
    local_after = np.maximum(np.asarray(after, np.int64) - shard.lo, -1)
    return search_threshold(index, query_rows(source, queries), threshold, metric, device,
                            exclude_self=local_docs(self_doc, shard), batch_size=batch_size, quiet=True,
                            after=local_after)


def task_grouped(source: Source, shard: Shard, block, maxabs, queries, k, groups, metrics, device, self_doc,
                 batch_size):
    """The shard's part of every group: (scores float32 (n_q, n_groups, n_metrics, k), NaN none;
    docs int64 global, -1 none). Groups are ranges of the index's documents, or with a ByLabel
    block the shard's own classes."""
    from ..engine import search_topk_grouped
    index = shard_index(source, shard, block).with_term_maxabs(maxabs)
    lo, hi = shard.docs
    if isinstance(block, ByLabel):
        local_groups = block.group_ptr()
    else:
        local_groups = np.clip(np.asarray(groups, np.int64) - lo, 0, hi - lo)
    scores, docs = search_topk_grouped(index, query_rows(source, queries), k, local_groups, metrics, device,
                                       exclude_self=local_docs(self_doc, shard), pad="nan", batch_size=batch_size,
                                       quiet=True)
    return scores, np.where(docs >= 0, docs + lo, -1)
