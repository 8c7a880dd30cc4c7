"""DistributedIndex: the engine's selectors over document-range shards on Dask workers.

Exactness: every shard's Index scores queries with the fixed-point scale of the *whole* corpus
(Index.with_term_maxabs of the global term maxima, computed once from the shards' maxima), so each
document gets the float64 key the single-process engine gives it; shard lists are sorted by
(key desc, document asc) with global document indices and merged exactly (gputext.engine
.merge_topk). Results are bit-identical to gputext.engine for any number of workers.
The grouped selector returns float32 scores; its lists merge on those scores (NaN-free, rounding
is monotone), which gives the same scores bit for bit; the docs may differ from the single index's
only among entries of equal float32 score (distinct float64 keys that round to one float32).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..engine.query import check_queries, group_ptr, self_docs
from ..errors import InputError
from ..io.corpus import canonical_csr, csr_arrays
from ..kernels import scoring
from ..progress import progress
from . import shards as S
from .run import gather, submit, worker_addresses

DEFAULT_BATCH = 16384  # queries per task: the engine batches inside it on its device


class DistributedIndex:
    """An engine index cut into document-range shards kept on a Dask cluster's workers.

    from_path(path, client): each worker reads its rows of the corpus file (shared filesystem);
    from_path([path, ...], client): a corpus stored as several files, rows concatenated in order;
    from_csr(X, client): the client's CSR rows are scattered once, one block to each worker.
    from_path(path, client, labels=y, n_classes=c): only the rows in a class (y >= 0), each
    worker's rows ordered by class (shards.ByLabel): the index of a grouped search by class
    (meta-features) without the client ordering and shipping the matrix. Its documents: shard
    after shard, each shard's by class then row (``doc_of_row``).
    n_shards: default one per worker; workers: the worker addresses to use (default all).
    ``cuts``: row offsets whose suffix term maxima to know (the star graph's row shards; 0 always).
    """

    def __init__(self, client, source: S.Source, indptr: np.ndarray, X=None, n_shards: int | None = None,
                 cuts=(0,), quiet: bool = True, workers=None, labels=None, n_classes: int = 0):
        self.client = client
        self.source = source
        self.X = X  # the client's matrix (from_csr), else None
        self.shards = S.plan_shards(indptr, list(workers) if workers else worker_addresses(client), n_shards)
        self.blocks = [None] * len(self.shards)
        self.by_label = labels is not None
        if X is not None:  # one block per shard, scattered once to its worker
            self.blocks = [client.scatter(X[s.lo:s.hi], workers=[s.worker], hash=False) for s in self.shards]
        elif self.by_label:
            self._plan_by_label(np.asarray(labels, np.int64), int(n_classes), cuts)
        self.cuts = tuple(sorted({0, *(int(c) for c in cuts)}))
        parts = gather(client, [submit(client, S.task_term_maxabs, s, source, s, b, self.cuts)
                                for s, b in zip(self.shards, self.blocks)], f"indexing {self._name()}")
        maxima = np.max(np.stack(parts), axis=0)  # (cuts, n_terms): max is exact in any order
        self.term_maxabs = {c: np.ascontiguousarray(maxima[j]) for j, c in enumerate(self.cuts)}
        self.quiet = quiet

    @classmethod
    def from_path(cls, path, client, n_shards: int | None = None, cuts=(0,), quiet: bool = True, workers=None,
                  labels=None, n_classes: int = 0):
        source, indptr = S.file_source(path)
        if source.n_docs == 0:
            raise InputError(f"{source.name}: the corpus has zero documents")
        return cls(client, source, indptr, None, n_shards, cuts, quiet, workers, labels, n_classes)

    @classmethod
    def from_csr(cls, X, client, n_shards: int | None = None, cuts=(0,), quiet: bool = True, workers=None):
        X = canonical_csr(X)
        if X.nnz and not np.all(np.isfinite(X.data)):
            raise InputError("the indexed matrix contains NaN or infinite weights")
        return cls(client, S.array_source(X), X.indptr.astype(np.int64), X, n_shards, cuts, quiet, workers)

    def _plan_by_label(self, labels: np.ndarray, n_classes: int, cuts) -> None:
        """Each shard's ByLabel block (its rows' labels) and document numbers; doc_of_row int64
        (rows,): the document each row became, -1 for a row in no class."""
        if labels.shape != (self.source.n_docs,):
            raise InputError(f"{self.source.name} holds {self.source.n_docs} documents, labels for {labels.size} "
                             "documents were given")
        if labels.size and (labels.max() >= n_classes or labels.min() < -1):
            raise InputError(f"labels must be class codes in [0, {n_classes}) or -1")
        if tuple(cuts) != (0,):
            raise InputError("an index by class has no row cuts")
        shards, blocks, at = [], [], 0
        self.doc_of_row = np.full(labels.size, -1, np.int64)
        for s in self.shards:
            block = S.ByLabel(labels[s.lo:s.hi], n_classes)
            order = block.order()
            self.doc_of_row[s.lo + order] = at + np.arange(order.size)
            shards.append(S.Shard(s.position, s.lo, s.hi, s.worker, at, at + order.size))
            blocks.append(self.client.scatter(block, workers=[s.worker], hash=False))
            at += order.size
        self.shards, self.blocks, self.n_labelled = shards, blocks, at
        self.class_ptr = S.ByLabel(labels, n_classes).group_ptr()  # the classes as the groups, over all shards

    @property
    def n_docs(self) -> int:
        return self.n_labelled if self.by_label else self.source.n_docs

    @property
    def n_terms(self) -> int:
        return self.source.n_terms

    @property
    def nnz(self) -> int:
        return self.source.nnz

    def _name(self) -> str:
        return self.source.name

    def close(self) -> None:
        """Drop the shards from the workers' caches (the client stays open)."""
        try:
            self.client.run(S.task_drop, self.source.token)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ plumbing

    def _queries(self, Q):
        """(argument for the tasks, n_queries): a CSR checked as the engine checks it, or
        ('rows', lo, hi) of this index's own corpus (read by the workers from the file)."""
        if isinstance(Q, tuple):
            _, lo, hi = Q
            if self.X is not None:
                return self.X[lo:hi], hi - lo
            return Q, hi - lo
        Q = check_queries(self, Q)
        return Q, Q.shape[0]

    def _self_docs(self, n_q: int, exclude_self) -> np.ndarray:
        return self_docs(self, n_q, exclude_self)

    def _batches(self, n_q: int, batch_size: int | None):
        step = max(1, int(batch_size or DEFAULT_BATCH))
        return [(lo, min(n_q, lo + step)) for lo in range(0, n_q, step)]

    def _run(self, task, arg, n_q, batch_size, quiet, per_batch, shard_filter=None, cut: int = 0, label="scoring"):
        """task(source, shard, block, maxabs, queries_batch, *per_batch(lo, hi)) for every batch of
        the queries (``arg``, n_q from _queries) and every shard; returns [[shard results in shard
        order] per batch]. The queries and the term maxima travel inside the tasks (not scattered:
        a task re-run on another worker after its first one died needs nothing that died with it)."""
        maxabs = self.term_maxabs[cut]
        batches = self._batches(n_q, batch_size)
        futures, layout = [], []
        for b, (lo, hi) in enumerate(batches):
            qb = ("rows", arg[1] + lo, arg[1] + hi) if isinstance(arg, tuple) else arg[lo:hi]
            extra = per_batch(lo, hi)
            for s, block in zip(self.shards, self.blocks):
                if shard_filter is not None and not shard_filter(s, lo, hi):
                    continue
                futures.append(submit(self.client, task, s, self.source, s, block, maxabs, qb, *extra))
                layout.append(b)
        out = [[] for _ in batches]
        with progress(len(futures) if len(futures) > 1 else 0, f"{label} (dask, {len(self.shards)} shards)",
                      quiet) as bar:
            results = gather(self.client, futures, f"searching {self._name()}", lambda i, r: bar.update(1))
        for b, r in zip(layout, results):
            out[b].append(r)
        return batches, out

    # ------------------------------------------------------------------ selectors

    def search_topk_keys(self, Q, k: int, metric: str = "cosine", device: str = "auto", exclude_self=False,
                         batch_size: int | None = None, quiet: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """As gputext.engine.search_topk_keys: (indices int32 (n_q, k), keys float64 (n_q, k))."""
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k must be a positive integer, got {k!r}")
        _code(metric)
        arg, n_q = self._queries(Q)
        self_doc = self._self_docs(n_q, exclude_self)
        batches, out = self._run(S.task_topk, arg, n_q, batch_size, quiet,
                                 lambda lo, hi: (int(k), metric, device, self_doc[lo:hi], batch_size))
        from ..engine import merge_topk
        docs = np.empty((n_q, k), np.int32)
        keys = np.empty((n_q, k), np.float64)
        for (lo, hi), parts in zip(batches, out):
            docs[lo:hi], keys[lo:hi] = parts[0] if len(parts) == 1 else merge_topk(parts, int(k))
        return docs, keys

    def search_topk(self, Q, k: int, metric: str = "cosine", device: str = "auto", exclude_self=False,
                    batch_size: int | None = None, quiet: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """As gputext.engine.search_topk, bit for bit: (indices int32, scores float32) (n_q, k)."""
        from ..engine import keys_to_scores
        docs, keys = self.search_topk_keys(Q, k, metric, device, exclude_self, batch_size, quiet)
        return docs, keys_to_scores(keys, docs, _code(metric))

    def search_threshold(self, Q, threshold: float, metric: str = "cosine", device: str = "auto",
                         exclude_self=False, batch_size: int | None = None, quiet: bool = True, after=None,
                         term_maxabs_from: int = 0) -> sp.csr_matrix:
        """As gputext.engine.search_threshold: CSR float32 (n_q, n_docs). Q may be ('rows', lo, hi)
        of this corpus. term_maxabs_from: score with the term maxima of rows >= that cut (one of
        ``cuts``), as an engine Index of X[cut:] would (the star graph's row shards)."""
        if self.by_label:
            raise InputError("an index by class answers grouped searches only")
        if not np.isfinite(threshold):
            raise InputError(f"threshold must be a finite number, got {threshold!r}")
        _code(metric)
        arg, n_q = self._queries(Q)
        self_doc = self._self_docs(n_q, exclude_self)
        after = np.full(n_q, -1, np.int64) if after is None else np.asarray(after, np.int64)
        if after.shape != (n_q,):
            raise InputError(f"after must have one entry per query ({n_q}), got shape {after.shape}")
        if term_maxabs_from not in self.term_maxabs:
            raise InputError(f"term_maxabs_from = {term_maxabs_from} is not one of the index's cuts {self.cuts}")
        # a shard whose rows all lie at or below every query's `after` has nothing to give
        wanted = lambda s, lo, hi: s.hi - 1 > after[lo:hi].min() if hi > lo else False  # noqa: E731
        batches, out = self._run(S.task_threshold, arg, n_q, batch_size, quiet,
                                 lambda lo, hi: (float(threshold), metric, device, self_doc[lo:hi], after[lo:hi],
                                                 batch_size), wanted, term_maxabs_from, "similarity graph")
        rows = []
        for (lo, hi), parts in zip(batches, out):
            skipped = len(self.shards) - len(parts)
            blocks = [sp.csr_matrix((hi - lo, s.hi - s.lo), dtype=np.float32) for s in self.shards[:skipped]]
            rows.append(sp.hstack(blocks + parts, format="csr", dtype=np.float32))
        result = sp.vstack(rows, format="csr", dtype=np.float32) if rows else sp.csr_matrix((0, self.n_docs),
                                                                                           dtype=np.float32)
        result.has_sorted_indices = True
        return result

    def search_topk_grouped(self, Q, k: int, groups, metrics=("cosine",), device: str = "auto", exclude_self=False,
                            pad: str = "nan", out: np.ndarray | None = None, return_docs: bool = True,
                            batch_size: int | None = None, quiet: bool = True, host_work=None):
        """As gputext.engine.search_topk_grouped (same arguments and results; see the module
        docstring for the docs of equal float32 scores). host_work runs on the client while the
        workers score."""
        metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
        codes = np.array([_code(m) for m in metrics], np.int64)
        if codes.size == 0 or not isinstance(k, (int, np.integer)) or k < 1 or pad not in ("nan", "last"):
            raise InputError(f"grouped search needs metrics (got {metrics}), k >= 1 (got {k!r}) and pad 'nan' or "
                             f"'last' (got {pad!r})")
        g = group_ptr(self, groups)
        Qarg, n_q = self._queries(Q)
        self_doc = self._self_docs(n_q, exclude_self)
        n_g, n_m = g.size - 1, codes.size
        if out is not None and (not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.ndim != 3
                                or not out.flags.c_contiguous or out.shape[:2] != (n_q, n_g) or out.shape[2] < n_m * k):
            raise InputError(f"out must be a C-contiguous float32 array ({n_q}, {n_g}, >= {n_m * k})")
        if self.by_label:  # each shard's groups are its own classes
            if not np.array_equal(g, self.class_ptr):
                raise InputError("an index by class is searched with its classes as the groups (class_ptr)")
            wanted = lambda s, lo, hi: s.doc_hi > s.doc_lo  # noqa: E731
        else:
            wanted = lambda s, lo, hi: bool(np.any((g[:-1] < s.hi) & (g[1:] > s.lo)))  # noqa: E731
        # the run is synchronous: host work first would serialise; submit, work, then collect
        args = (S.task_grouped, Qarg, n_q, batch_size, quiet,
                lambda lo, hi: (int(k), g, metrics, device, self_doc[lo:hi], batch_size), wanted)
        batches, parts = self._run(*args, label="grouped scoring") if host_work is None else \
            self._while(host_work, *args)
        sign = np.where(np.isin(codes, (scoring.COSINE, scoring.DOT)), 1.0, -1.0)[None, None, :, None]
        scores = np.empty((n_q, n_g, n_m, k), np.float32)
        docs = np.empty((n_q, n_g, n_m, k), np.int64)
        from ..engine import merge_topk
        for (lo, hi), shard_parts in zip(batches, parts):
            keyed = [(d, np.where(d >= 0, sign * s.astype(np.float64), -np.inf)) for s, d in shard_parts]
            if not keyed:
                d, kk = np.full((hi - lo, n_g, n_m, k), -1, np.int64), np.full((hi - lo, n_g, n_m, k), -np.inf)
            else:
                d, kk = merge_topk(keyed, int(k))
            docs[lo:hi] = d
            scores[lo:hi] = np.where(d >= 0, sign * kk, np.nan).astype(np.float32)
        if pad == "last":
            _pad_last(scores, docs, Qarg if not isinstance(Qarg, tuple) else None, self, codes, Q)
        if out is not None:
            out[:, :, :n_m * k] = scores.reshape(n_q, n_g, n_m * k)
            out[:, :, n_m * k:] = 0
            scores = out
        return scores, (docs if return_docs else None)

    def _while(self, host_work, *args):
        """self._run(*args) while host_work() runs on another thread of this process."""
        import threading
        error = []

        def work():
            try:
                host_work()
            except BaseException as exc:  # re-raised on the calling thread
                error.append(exc)
        t = threading.Thread(target=work)
        t.start()
        try:
            return self._run(*args, label="grouped scoring")
        finally:
            t.join()
            if error:
                raise error[0]


def _code(metric: str) -> int:
    try:
        return scoring.METRICS[metric]
    except KeyError:
        raise InputError(f"unknown metric {metric!r}: expected one of {', '.join(scoring.METRICS)}") from None


def _pad_last(scores, docs, Qm, index: DistributedIndex, codes, Q) -> None:
    """pad='last' as the engine: a short list repeats its last score; an empty one gets the score
    of an all-zero document (cosine/dot 0, l2 |q|_2, l1 |q|_1, from the engine's own norm terms)."""
    if Qm is None:
        Qm = index.X[Q[1]:Q[2]] if index.X is not None else S.read_source_rows(index.source, Q[1], Q[2])
    filled = (docs >= 0).sum(axis=-1)  # (n_q, n_g, n_m)
    k = scores.shape[-1]
    if np.all(filled == k):
        return
    _, qn = scoring.query_stats_multi(*csr_arrays(canonical_csr(Qm)), index.term_maxabs[0], codes)
    empty = np.zeros((qn.shape[1], codes.size), np.float64)
    for m, c in enumerate(codes):
        if c == scoring.L2:
            empty[:, m] = np.sqrt(np.maximum(qn[m], 0.0))
        elif c == scoring.L1:
            empty[:, m] = np.maximum(qn[m], 0.0)
    last = np.take_along_axis(scores, np.maximum(filled - 1, 0)[..., None], -1)[..., 0]
    fill = np.where(filled > 0, last, empty.astype(np.float32)[:, None, :])
    pos = np.arange(k)
    scores[...] = np.where(pos >= filled[..., None], fill[..., None], scores)
