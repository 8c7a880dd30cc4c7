"""Single-pass stream clustering against an ELLPACK centroid matrix (Szaszy & Samet, "Document
Stream Clustering using GPUs"), exact: document by document the same clusters as the sequential
reference (stream_reference.py) on every backend and for every batch size.

    from gputext.cluster.stream import StreamClusterer

    sc = StreamClusterer(threshold=0.6, max_terms=35, device="auto", batch_size=32)
    result = sc.partial_fit(X)            # X: weighted CSR rows (n_docs, n_terms), in stream order
    result.cluster, result.similarity, result.new_cluster, result.latency_s
    sc.n_clusters, sc.centroids()         # ELL arrays (K, n_clusters), magnitudes, sizes
    sc.save_state("state.h5"); sc = StreamClusterer.load_state("state.h5", device="cuda")

Algorithm (per document, in order): join the most similar cluster when its similarity is
> threshold, else start a new cluster; a centroid keeps its top ``max_terms`` (K) terms. The exact
arithmetic (float64 sums in term order over float32-stored weights, tie rules) is defined in
stream_reference.py and shared by stream_host.py and kernels/stream_ell.py.

Batches (beyond the paper): one scoring launch scores up to ``batch_size`` documents against all
clusters as they were at the launch. The host then decides the documents in order: document j is
re-scored against the clusters created or changed since the launch (by documents before it), and
the launch's answer stands for every other cluster. When the launch's best cluster for j has itself
changed, the best among the unchanged ones is unknown and the rest of the batch is scored again
(a "restart"). Results are therefore identical to one document at a time.

Candidates: ``scan`` scores every cluster through the ELL matrix (GPU kernel or its CPU twin);
``index`` walks an inverted index over centroid terms (clusters sharing a term; CPU only);
``auto`` is scan on the GPU and, on the CPU, chooses per launch whichever the cost model says is
cheaper (docs/stream.md gives the measurements behind it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numba
import numpy as np
import scipy.sparse as sp

from ..backend import Backend, resolve as resolve_backend
from ..errors import InputError
from . import stream_host as H
from ..device.launch import RawLaunchUnavailable, raw_launch

CANDIDATES = ("auto", "scan", "index")
DEFAULT_BATCH = {"cuda": 32, "cpu": 16}
# auto on the CPU: the inverted index is chosen when (posting entries it would walk) * INDEX_COST
# is below ((centroid slots the scan reads) + (rows)) * (1 + recent restarts per batch). Measured
# on 2 shared cores: 25-100 ns per posting entry against 3-10 ns per scanned slot (docs/stream.md).
INDEX_COST = 4.0


@dataclass
class StreamResult:
    """Per document, in input order: cluster int32 (-1 for a document without terms), similarity
    float64 (best similarity found; the one compared with the threshold), new_cluster bool,
    latency_s float64 (from its batch being ready, or its arrival, to its decision)."""

    cluster: np.ndarray
    similarity: np.ndarray
    new_cluster: np.ndarray
    latency_s: np.ndarray
    seconds: float = 0.0

    def percentiles_ms(self) -> dict:
        if len(self.latency_s) == 0:
            return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
        p = np.percentile(self.latency_s, [50, 95, 99]) * 1e3
        return {"p50": float(p[0]), "p95": float(p[1]), "p99": float(p[2])}


@dataclass
class StreamStats:
    launches: int = 0
    scan_launches: int = 0
    index_launches: int = 0
    restarts: int = 0
    rechecks: int = 0
    device_grows: int = 0
    flushed_rows: int = 0
    scan_seconds: float = 0.0
    index_seconds: float = 0.0
    resolve_seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def _check_params(threshold, max_terms, batch_size, candidates):
    if not (0.0 <= float(threshold) <= 1.0):
        raise InputError(f"threshold must be in [0, 1], got {threshold}")
    if int(max_terms) < 1:
        raise InputError(f"max_terms (K) must be >= 1, got {max_terms}")
    if batch_size is not None and int(batch_size) < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if candidates not in CANDIDATES:
        raise InputError(f"candidates must be one of {', '.join(CANDIDATES)}, got {candidates!r}")


def default_threads_per_block(batch_size: int) -> int:
    """GPU scan kernel rows per block: 256 for small batches (H100, 1.6M clusters, batch 1, same
    run: kernel 0.335 ms, p50 latency 0.439 ms vs 0.377 / 0.518 ms with 128), 128 when the block's
    float64 accumulators (rows x (batch + 1)) would otherwise not fit 48 KB of shared memory."""
    return 256 if batch_size <= 8 else 128


class _EllScanner:
    """The ELLPACK centroid matrix on the device (or the CPU twin's copy of it), its update buffer
    and the scoring launch. The host centroids stay authoritative; this copy lags by the rows in
    the host's dirty list, which travel in the next launch's update buffer."""

    def __init__(self, backend: Backend, K: int, max_docs: int, threads_per_block: int, reduce_threads: int,
                 capacity: int, fast_launch: bool = True):
        from ..kernels import stream_ell as E
        self.E = E
        self.cuda = backend.is_cuda
        self.K = K
        self.max_docs = max_docs
        self.tpb = threads_per_block
        self.reduce_tpb = reduce_threads
        self.max_upd = max(max_docs, 64)
        self.table_max = E.table_size_for(max_docs * K)
        self.ibuf_len = self.max_upd * (1 + K) + 2 * self.table_max + 2 * max_docs * K + 1
        self.fbuf_len = self.max_upd * K + max_docs * K
        self.timing = False  # record CUDA events around the scoring kernels (benchmarks)
        self.kernel_ms: list[float] = []  # per launch: scan + final reduction (raw path: GPU time only)
        self.score_ms: list[float] = []  # per launch: the scan kernel alone (raw path only)
        self.work_hint = 0  # centroid slots to scan (set by the clusterer): picks the threaded CPU twin
        self.rows_valid = 0  # rows of the copy that hold current data (others arrive by the update buffer)
        self.stride = 0
        self.grows = 0
        self.grow_seconds: list[float] = []  # host time of each capacity growth (allocation + copy launch)
        self.flushed = 0
        self.raw = None  # gputext.device.launch.DriverCalls: pre-marshalled launches and raw copies (real GPU only)
        self.launch_mode = "cpu"
        if self.cuda:
            from numba import cuda
            self.cu = cuda
            self.stream = cuda.stream()
            # one pinned host buffer and one device buffer hold [ibuf | fbuf]: one upload per launch
            n_all = self.ibuf_len + self.fbuf_len
            self.h_all = cuda.pinned_array(n_all, np.int32)
            self.h_ibuf = self.h_all[:self.ibuf_len]
            self.h_fbuf = self.h_all[self.ibuf_len:].view(np.float32)
            self.h_best = cuda.pinned_array((2, max_docs), np.float64)
            self.d_best = cuda.device_array((2, max_docs), np.float64)
            self.score_k = E.score_kernel(threads_per_block, max_docs)
            self.reduce_k = E.reduce_kernel(reduce_threads)
            self._raw_score = self._raw_reduce = None
            self._events = (cuda.event(), cuda.event(), cuda.event())  # for timing (raw path)
            self.launch_mode = "dispatcher"
            if fast_launch and not backend.simulator:
                try:
                    from ..device.launch import DriverCalls, device_address, host_address
                    self.d_all = cuda.device_array(n_all, np.int32)
                    self.d_ibuf = self.d_all[:self.ibuf_len]
                    self.d_fbuf = self.d_all[self.ibuf_len:].view(np.float32)
                    self.raw = DriverCalls(self.stream)
                    self._addr = (device_address(self.d_all), host_address(self.h_all),
                                  device_address(self.d_best), host_address(self.h_best))
                    self.launch_mode = "raw"
                except Exception as exc:  # another numba-cuda / binding layout: the dispatcher path
                    self.raw = None
                    self.launch_mode = f"dispatcher (raw launch unavailable: {type(exc).__name__}: {exc})"
            if self.raw is None:
                self.d_ibuf = cuda.device_array(self.ibuf_len, np.int32)
                self.d_fbuf = cuda.device_array(self.fbuf_len, np.float32)
            self._h2d = None
            if not backend.simulator:
                try:
                    from numba.cuda.cudadrv.driver import host_to_device
                    self._h2d = host_to_device
                except ImportError:  # another numba-cuda layout: slices then
                    pass
        else:
            self.h_ibuf = np.empty(self.ibuf_len, np.int32)
            self.h_fbuf = np.empty(self.fbuf_len, np.float32)
            self.h_best = np.empty((2, max_docs), np.float64)
        self.terms = self.weights = None
        self.part_sim = self.part_row = None
        self._ensure_capacity(max(capacity, 1))

    # -- memory
    def _alloc(self, shape, dtype):
        return self.cu.device_array(shape, dtype) if self.cuda else np.empty(shape, dtype)

    def _ensure_capacity(self, n_rows: int, reserve: int = 0) -> None:
        """At least n_rows (and, when growing, max(2 x the old stride, reserve)) rows of capacity.
        Growth allocates the new matrix and copies the valid rows on the device (grow_copy)."""
        if n_rows <= self.stride:
            return
        t0 = time.perf_counter()
        stride = self.E.aligned_stride(max(n_rows, 2 * self.stride, reserve))
        terms = self._alloc((self.K, stride), np.int32)
        weights = self._alloc((self.K, stride), np.float32)
        grown = self.terms is not None and self.rows_valid
        if grown:
            n = self.rows_valid
            if self.cuda:
                blocks = (self.K * n + 255) // 256
                self.E.grow_copy[blocks, 256, self.stream](self.terms, self.weights, n, terms, weights)
            else:
                self.E.grow_copy_cpu(self.terms, self.weights, n, terms, weights)
            self.grows += 1
        self.terms, self.weights, self.stride = terms, weights, stride
        n_blocks = (stride + self.tpb - 1) // self.tpb
        self.part_sim = self._alloc(self.max_docs * n_blocks, np.float64)
        self.part_row = self._alloc(self.max_docs * n_blocks, np.int32)
        if self.cuda:
            self._raw_score = self._raw_reduce = None  # new arrays: marshalled again at the next launch
        if grown:
            self.grow_seconds.append(time.perf_counter() - t0)

    def device_bytes(self) -> int:
        """Bytes this scanner holds on the device (ELL matrix, partials, buffers)."""
        return (self.K * self.stride * 8 + self.part_sim.size * 12 + self.ibuf_len * 4 + self.fbuf_len * 4
                + self.h_best.size * 8)

    # -- buffers
    def _upload(self, ilen: int, flen: int) -> None:
        """Copy the used prefixes of the pinned launch buffers to the device (asynchronously, on
        the scanner's stream). Raw path: one copy of [ibuf | used fbuf] when the unused tail of
        ibuf is small (64 KB), else two. Otherwise the driver call avoids making device-array
        views on every launch."""
        if not self.cuda:
            return
        if self.raw is not None:
            d_all, h_all = self._addr[0], self._addr[1]
            if flen == 0:
                if ilen:
                    self.raw.copy_h2d(d_all, h_all, 4 * ilen)
            elif self.ibuf_len - ilen <= 16384:
                self.raw.copy_h2d(d_all, h_all, 4 * (self.ibuf_len + flen))
            else:
                if ilen:
                    self.raw.copy_h2d(d_all, h_all, 4 * ilen)
                off = 4 * self.ibuf_len
                self.raw.copy_h2d(d_all + off, h_all + off, 4 * flen)
            return
        if self._h2d is not None:
            if ilen:
                self._h2d(self.d_ibuf, self.h_ibuf, ilen * 4, stream=self.stream)
            if flen:
                self._h2d(self.d_fbuf, self.h_fbuf, flen * 4, stream=self.stream)
            return
        if ilen:
            self.d_ibuf[:ilen].copy_to_device(self.h_ibuf[:ilen], stream=self.stream)
        if flen:
            self.d_fbuf[:flen].copy_to_device(self.h_fbuf[:flen], stream=self.stream)

    def _bufs(self):
        return (self.d_ibuf, self.d_fbuf) if self.cuda else (self.h_ibuf, self.h_fbuf)

    def _flush_rows(self, rows, c_terms, c_weights) -> None:
        """Write rows (sorted) into the copy with one apply_updates launch (a temporary buffer
        when they do not fit the launch buffer)."""
        n_upd = len(rows)
        if n_upd == 0:
            return
        if n_upd <= self.max_upd:
            h_ibuf, h_fbuf = self.h_ibuf, self.h_fbuf
        else:
            h_ibuf, h_fbuf = np.empty(n_upd * (1 + self.K) + 40, np.int32), np.empty(n_upd * self.K, np.float32)
        H.pack_batch(h_ibuf, h_fbuf, rows, n_upd, c_terms, c_weights,
                     np.zeros(2, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), 0, 0, 16)
        ilen, flen = n_upd * (1 + self.K), n_upd * self.K
        if self.cuda:
            if h_ibuf is self.h_ibuf:
                self._upload(ilen, flen)
                ibuf, fbuf = self.d_ibuf, self.d_fbuf
            else:
                ibuf, fbuf = self.cu.to_device(h_ibuf[:ilen], stream=self.stream), self.cu.to_device(h_fbuf[:flen], stream=self.stream)
            blocks = (n_upd * self.K + 255) // 256
            self.E.apply_updates[blocks, 256, self.stream](self.terms, self.weights, ibuf, fbuf, n_upd)
            self.stream.synchronize()  # the pinned buffers are rewritten next: the copies must have read them
        else:
            self.E.apply_updates_cpu(self.terms, self.weights, h_ibuf, h_fbuf, n_upd)
        self.flushed += n_upd

    def load(self, n_rows: int, c_terms, c_weights) -> None:
        """Upload rows 0..n_rows-1 whole (a resumed state or a benchmark's synthetic state). The
        capacity reserved is 2 x n_rows, as if the matrix had just doubled: the clusters that the
        stream goes on to create do not pay for a growth right away."""
        self._ensure_capacity(n_rows, reserve=2 * n_rows)
        terms = np.full((self.K, self.stride), -1, np.int32)
        weights = np.zeros((self.K, self.stride), np.float32)
        terms[:, :n_rows] = c_terms[:n_rows].T
        weights[:, :n_rows] = c_weights[:n_rows].T
        if self.cuda:
            self.terms.copy_to_device(terms, stream=self.stream)
            self.weights.copy_to_device(weights, stream=self.stream)
            self.stream.synchronize()
        else:
            self.terms[:], self.weights[:] = terms, weights
        self.rows_valid = n_rows
        if self.cuda and n_rows:
            self.prime(n_rows, c_terms, c_weights)

    def prime(self, n_rows: int, c_terms, c_weights) -> None:
        """One scan of the copy with no documents, after a load: the launch marshalling, the
        pinned buffers and the device copy are warm before the first real document (H200, 1.6M
        clusters: the first document after a restore took 1.1-1.4 ms before this scan was added,
        0.55-0.85 ms after; the median document takes 0.3 ms)."""
        self.score(n_rows, np.zeros(0, np.int32), c_terms, c_weights, np.zeros(1, np.int64), np.zeros(0, np.int32),
                   np.zeros(0, np.float32), 0, 0)

    def flush(self, n_rows: int, rows, c_terms, c_weights) -> None:
        self._ensure_capacity(n_rows)
        self._flush_rows(rows, c_terms, c_weights)
        self.rows_valid = n_rows
        if self.cuda:
            self.stream.synchronize()

    def score(self, n_rows: int, rows, c_terms, c_weights, d_indptr, d_terms, d_weights, j0: int, j1: int):
        """Best cluster (over rows < n_rows) of documents j0..j1-1 (j1 - j0 <= max_docs), after
        writing the pending rows. Returns a float64 (2, j1 - j0) view: similarity, row."""
        n_docs = j1 - j0
        self._ensure_capacity(n_rows)
        if len(rows) > self.max_upd:  # more pending rows than one launch's buffer: write them first
            self._flush_rows(rows, c_terms, c_weights)
            rows = rows[:0]
        n_upd = len(rows)
        nnz = int(d_indptr[j1] - d_indptr[j0])
        table_size = self.E.table_size_for(nnz)
        n_post, n_unique = H.pack_batch(self.h_ibuf, self.h_fbuf, rows, n_upd, c_terms, c_weights,
                                        d_indptr, d_terms, d_weights, j0, j1, table_size)
        *_, ilen, flen = self.E.batch_layout(n_upd, self.K, table_size, n_post, n_unique)
        self._upload(ilen, flen)
        ibuf, fbuf = self._bufs()
        if n_rows == 0:
            self.h_best[0, :n_docs] = self.E.NO_SIM
            self.h_best[1, :n_docs] = -1
            self.rows_valid = 0
            return self.h_best[:, :n_docs]
        n_blocks = (n_rows + self.tpb - 1) // self.tpb
        if self.raw is not None:
            try:
                self._score_raw(n_rows, n_upd, table_size, n_post, n_docs, n_blocks)
            except RawLaunchUnavailable as exc:  # marshalling unavailable on this numba-cuda: the dispatcher from now on
                self.raw = None  # the upload above went to the same device buffers (views of d_all)
                self.launch_mode = f"dispatcher (raw launch unavailable: {exc})"
        if self.cuda and self.raw is None:
            if self.timing:
                ev0, ev1 = self.cu.event(), self.cu.event()
                ev0.record(self.stream)
            self.score_k[n_blocks, self.tpb, self.stream](self.terms, self.weights, n_rows, ibuf, fbuf, n_upd,
                                                         table_size, n_post, n_docs, self.part_sim, self.part_row)
            if n_docs:
                self.reduce_k[n_docs, self.reduce_tpb, self.stream](self.part_sim, self.part_row, n_blocks, n_docs,
                                                                   self.d_best)
            if self.timing:
                ev1.record(self.stream)
            self.d_best.copy_to_host(self.h_best, stream=self.stream)
            self.stream.synchronize()
            if self.timing:
                self.kernel_ms.append(ev0.elapsed_time(ev1))
        elif not self.cuda:
            parallel = self.work_hint >= H.PARALLEL_MIN_WORK and n_rows > self.tpb
            twin = self.E.score_blocks_cpu if parallel else self.E.score_blocks_serial
            twin(self.tpb, self.max_docs, self.terms, self.weights, n_rows, ibuf, fbuf, n_upd,
                 table_size, n_post, n_docs, self.part_sim, self.part_row)
            self.E.reduce_blocks_cpu(self.part_sim, self.part_row, n_blocks, n_docs, self.h_best)
        self.rows_valid = n_rows
        return self.h_best[:, :n_docs]

    def _score_raw(self, n_rows, n_upd, table_size, n_post, n_docs, n_blocks) -> None:
        """The scoring launch through gputext.device.launch: the two kernels with pre-marshalled
        arguments (marshalled again only after a capacity growth), the (2, max_docs) result
        copied back, one stream synchronisation. The upload was issued by score()."""
        L, R = self._raw_score, self._raw_reduce
        if L is None:
            L = self._raw_score = raw_launch(self.score_k, (self.terms, self.weights, 0, self.d_ibuf, self.d_fbuf, 0,
                                                           0, 0, 0, self.part_sim, self.part_row), self.stream)
            R = self._raw_reduce = raw_launch(self.reduce_k, (self.part_sim, self.part_row, 0, 0, self.d_best),
                                             self.stream)
        L.set(2, n_rows)
        L.set(5, n_upd)
        L.set(6, table_size)
        L.set(7, n_post)
        L.set(8, n_docs)
        R.set(2, n_blocks)
        R.set(3, n_docs)
        if self.timing:
            self.raw.record(self._events[0])
        L.launch(n_blocks, self.tpb)
        if self.timing:
            self.raw.record(self._events[1])
        if n_docs:
            R.launch(n_docs, self.reduce_tpb)
        if self.timing:
            self.raw.record(self._events[2])
        self.raw.copy_d2h(self._addr[3], self._addr[2], self.h_best.nbytes)
        self.raw.sync()
        if self.timing:
            ev = self._events
            self.kernel_ms.append(ev[0].elapsed_time(ev[2]))
            self.score_ms.append(ev[0].elapsed_time(ev[1]))

    def read_back(self, n_rows: int):
        """(terms (K, n_rows), weights (K, n_rows)) of the copy, as host arrays."""
        if self.cuda:
            return self.terms.copy_to_host()[:, :n_rows], self.weights.copy_to_host()[:, :n_rows]
        return self.terms[:, :n_rows].copy(), self.weights[:, :n_rows].copy()


class StreamClusterer:
    """Exact single-pass stream clustering (module docstring).

    threshold       T in [0, 1]: a document joins its best cluster when similarity > T.
    max_terms       K: terms kept per centroid (and per document), the ELL width.
    device          auto | cpu | cuda (gputext.backend.resolve).
    batch_size      documents per scoring launch (default 32 on the GPU, 16 on the CPU); 1 is the
                    paper's one-document-at-a-time latency mode.
    candidates      auto | scan | index (module docstring).
    threads_per_block  rows per block of the scan kernel (CPU twin: rows per task; default on the
                    GPU 256 for batches of at most 8 documents, else 128 (the kernel's shared
                    accumulators grow with the batch); 2048 on the CPU); batch_size must not exceed it.
    reduce_threads  threads of the final reduction kernel (a power of two).
    capacity        initial number of cluster rows (grows by doubling on host and device).
    fast_launch     on a real GPU, launch the scan through pre-marshalled driver calls
                    (gputext.device.launch) instead of numba's dispatcher (False: the dispatcher; the
                    results are the same, only the host time per launch differs).
    """

    def __init__(self, threshold: float = 0.6, max_terms: int = 35, device: str = "auto",
                 batch_size: int | None = None, candidates: str = "auto", threads_per_block: int | None = None,
                 reduce_threads: int = 256, capacity: int = 1024, backend: Backend | None = None,
                 fast_launch: bool = True):
        _check_params(threshold, max_terms, batch_size, candidates)
        self.backend = backend or resolve_backend(device)
        if candidates == "index" and self.backend.is_cuda:
            raise InputError("--candidates index is the CPU's inverted index: use it with --device cpu "
                             "(the GPU always scans the ELL matrix)")
        self.threshold = float(threshold)
        self.K = int(max_terms)
        self.batch_size = int(batch_size or DEFAULT_BATCH[self.backend.name])
        self.candidates = candidates
        self.tpb = int(threads_per_block or (default_threads_per_block(self.batch_size) if self.backend.is_cuda else 2048))
        if self.backend.is_cuda and self.batch_size > self.tpb:
            raise InputError(f"batch_size ({self.batch_size}) must be <= threads_per_block ({self.tpb}) on the GPU")
        self.reduce_threads = int(reduce_threads)
        cap = max(int(capacity), 1)
        K = self.K
        self.c_terms = np.full((cap, K), -1, np.int32)
        self.c_weights = np.zeros((cap, K), np.float32)
        self.c_len = np.zeros(cap, np.int32)
        self.c_mag = np.zeros(cap, np.float64)
        self.c_size = np.zeros(cap, np.int64)
        self.c_version = np.zeros(cap, np.int32)
        self.changed_mark = np.full(cap, -1, np.int64)
        self.dirty_mark = np.zeros(cap, np.uint8)
        self.dirty_list = np.zeros(cap, np.int32)
        self.changed_list = np.zeros(self.batch_size, np.int32)
        self.counters = np.zeros(H.N_COUNTERS, np.int64)
        self.scr_terms = np.zeros(2 * K + 1, np.int32)
        self.scr_raw = np.zeros(2 * K + 1, np.float64)
        self.n_docs_seen = 0
        self._restart_rate = 0.0  # moving average of restarts per batch (auto's cost model)
        self.index_slack = 4096  # stale index entries tolerated beyond 2x the live ones before a rebuild
        self.stats = StreamStats()
        self.use_scan = candidates in ("auto", "scan")
        self.use_index = (candidates == "index") or (candidates == "auto" and not self.backend.is_cuda)
        self._init_index(1024, 4096)
        self.fast_launch = bool(fast_launch)
        self.scanner = (_EllScanner(self.backend, K, self.batch_size, self.tpb, self.reduce_threads, cap,
                                    self.fast_launch) if self.use_scan else None)

    # ------------------------------------------------------------------ state
    @property
    def n_clusters(self) -> int:
        return int(self.counters[H.N_CLUSTERS])

    def _init_index(self, n_terms: int, n_blocks: int) -> None:
        self.ix_head = np.full(n_terms, -1, np.int64)
        self.ix_count = np.zeros(n_terms, np.int64)
        self.ix_pool = np.zeros((n_blocks if self.use_index else 1, H.INDEX_BLOCK, 3), np.int32)
        self.ix_fill = np.zeros(self.ix_pool.shape[0], np.int32)
        self.ix_next = np.zeros(self.ix_pool.shape[0], np.int64)
        self.ix_meta = np.zeros(2, np.int64)
        workers = numba.get_num_threads() if self.use_index else 1
        cap = self.c_terms.shape[0] if self.use_index else 1
        self.acc = np.zeros((workers, cap), np.float64)  # zero between calls (index_score resets what it touches)
        self.touched = np.zeros((workers, cap), np.int32)

    def _grow_clusters(self) -> None:
        cap = self.c_terms.shape[0]
        new = 2 * cap

        def grow(a, fill):
            b = np.full((new,) + a.shape[1:], fill, a.dtype)
            b[:cap] = a
            return b
        self.c_terms = grow(self.c_terms, -1)
        self.c_weights = grow(self.c_weights, 0)
        self.c_len = grow(self.c_len, 0)
        self.c_mag = grow(self.c_mag, 0)
        self.c_size = grow(self.c_size, 0)
        self.c_version = grow(self.c_version, 0)
        if self.use_index:
            self.acc = np.zeros((self.acc.shape[0], new), np.float64)
            self.touched = np.zeros((self.acc.shape[0], new), np.int32)
        self.changed_mark = grow(self.changed_mark, -1)
        self.dirty_mark = grow(self.dirty_mark, 0)
        self.dirty_list = grow(self.dirty_list, 0)

    def _grow_index_terms(self, n_terms: int) -> None:
        if n_terms <= self.ix_head.shape[0]:
            return
        new = max(n_terms, 2 * self.ix_head.shape[0])
        head = np.full(new, -1, np.int64)
        head[:self.ix_head.shape[0]] = self.ix_head
        count = np.zeros(new, np.int64)
        count[:self.ix_count.shape[0]] = self.ix_count
        self.ix_head, self.ix_count = head, count

    def _grow_index_pool(self, blocks: int) -> None:
        old = self.ix_pool.shape[0]
        if blocks <= old:
            return
        pool = np.zeros((blocks, H.INDEX_BLOCK, 3), np.int32)
        pool[:old] = self.ix_pool
        fill = np.zeros(blocks, np.int32)
        fill[:old] = self.ix_fill
        nxt = np.zeros(blocks, np.int64)
        nxt[:old] = self.ix_next
        self.ix_pool, self.ix_fill, self.ix_next = pool, fill, nxt

    def _maybe_rebuild_index(self) -> None:
        """Stale postings (terms a centroid dropped) only cost time: rebuild when they outnumber live ones."""
        if not self.use_index or self.ix_meta[1] <= 2 * self.counters[H.TOTAL_NNZ] + self.index_slack:
            return
        n = self.n_clusters
        need = H.index_blocks_needed(self.c_terms, self.c_len, n, self.ix_head.shape[0], H.INDEX_BLOCK)
        self._grow_index_pool(int(need * 1.5) + 4096)
        H.index_rebuild(self.c_terms, self.c_len, self.c_version, n, self.ix_head, self.ix_count, self.ix_pool, self.ix_fill,
                        self.ix_next, self.ix_meta)

    # ------------------------------------------------------------------ clustering
    def partial_fit(self, X, arrival: np.ndarray | None = None) -> StreamResult:
        """Cluster the rows of X (weighted CSR, weights >= 0) in order, continuing the stream.

        ``arrival``: optional perf_counter() times at which each row arrived (latency is then
        measured from arrival; otherwise from the moment its batch is ready)."""
        X = sp.csr_matrix(X)
        data = np.asarray(X.data, dtype=np.float64)
        if data.size and (not np.all(np.isfinite(data)) or data.min() < 0):
            raise InputError("document weights must be finite and >= 0 (tf-icf or tf-idf weights), "
                             f"got values in [{data.min()}, {data.max()}]")
        indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
        indices = np.ascontiguousarray(X.indices, dtype=np.int32)
        if not X.has_sorted_indices:
            X = X.copy()
            X.sort_indices()
            indptr, indices, data = (np.ascontiguousarray(X.indptr, dtype=np.int64),
                                     np.ascontiguousarray(X.indices, dtype=np.int32),
                                     np.asarray(X.data, dtype=np.float64))
        prepare = H.prepare_docs if len(data) >= H.PARALLEL_MIN_WORK else H.prepare_docs_serial
        d_indptr, d_terms, d_weights, d_mag = prepare(indptr, indices, np.ascontiguousarray(data), self.K)
        return self._run(d_indptr, d_terms, d_weights, d_mag, X.shape[1], arrival)

    def _choose_index(self, j0, j1, d_indptr, d_terms) -> bool:
        if not self.use_index:
            return False
        if not self.use_scan:
            return True
        walk = H.index_cost(j0, j1, d_indptr, d_terms, self.ix_count)
        # a conflict in the batch costs the scan a whole new launch, the index one document
        scan = (self.counters[H.TOTAL_NNZ] + self.n_clusters) * (1.0 + self._restart_rate)
        return walk * INDEX_COST < scan

    def _index_score(self, j0, j1, d_indptr, d_terms, d_weights, best) -> None:
        walk = H.index_cost(j0, j1, d_indptr, d_terms, self.ix_count)
        if walk >= H.PARALLEL_MIN_WORK and j1 - j0 > 1:
            score, acc, touched = H.index_score, self.acc, self.touched
        else:
            score, acc, touched = H.index_score_serial, self.acc[:1], self.touched[:1]
        score(j0, j1, d_indptr, d_terms, d_weights, self.c_weights, self.c_version, self.ix_head,
              self.ix_pool, self.ix_fill, self.ix_next, acc, touched, best)

    def _scan_score(self, j0, j1, d_indptr, d_terms, d_weights):
        rows = H.drain_dirty(self.dirty_list, self.dirty_mark, self.counters)
        self.scanner.work_hint = int(self.counters[H.TOTAL_NNZ]) + self.n_clusters
        return self.scanner.score(self.n_clusters, rows, self.c_terms, self.c_weights, d_indptr, d_terms,
                                  d_weights, j0, j1)

    def _resolve(self, j, j_end, d_indptr, d_terms, d_weights, d_mag, best, j_launch, out_cluster, out_sim,
                 out_new, fresh):
        """H.resolve, growing the centroid arrays or the index pool when it asks; returns (j, status)
        with status DONE or RESTART."""
        while True:
            j, status = H.resolve(
                j, j_end, d_indptr, d_terms, d_weights, d_mag, best, j_launch, self.threshold,
                self.c_terms, self.c_weights, self.c_len, self.c_mag, self.c_size, self.counters,
                self.changed_mark, self.changed_list, self.dirty_mark, self.dirty_list,
                self.use_index, self.c_version, self.ix_head, self.ix_count, self.ix_pool, self.ix_fill, self.ix_next,
                self.ix_meta, out_cluster, out_sim, out_new, self.scr_terms, self.scr_raw, fresh)
            if status == H.GROW_CLUSTERS:
                self._grow_clusters()
            elif status == H.GROW_INDEX:
                self._grow_index_pool(2 * self.ix_pool.shape[0])
            else:
                return j, status

    @staticmethod
    def _latency(latency, arrival, t_ready, j_from, j_to) -> None:
        now = time.perf_counter()
        if arrival is None:
            latency[j_from:j_to] = now - t_ready
        else:
            latency[j_from:j_to] = now - arrival[j_from:j_to]

    def _run(self, d_indptr, d_terms, d_weights, d_mag, n_terms, arrival) -> StreamResult:
        n = len(d_mag)
        out_cluster = np.empty(n, np.int32)
        out_sim = np.empty(n, np.float64)
        out_new = np.zeros(n, np.bool_)
        latency = np.empty(n, np.float64)
        if self.use_index:
            self._grow_index_terms(max(n_terms, int(d_terms.max()) + 1 if len(d_terms) else 0))
        best_idx = np.empty((2, self.batch_size), np.float64)
        best_one = np.empty((2, 1), np.float64)
        st = self.stats
        t_start = time.perf_counter()
        for b0 in range(0, n, self.batch_size):
            b1 = min(n, b0 + self.batch_size)
            t_ready = time.perf_counter()
            j = b0
            restarts0 = st.restarts
            while j < b1:
                t0 = time.perf_counter()
                use_index = self._choose_index(j, b1, d_indptr, d_terms)
                if use_index:
                    self._index_score(j, b1, d_indptr, d_terms, d_weights, best_idx)
                    best = best_idx
                    st.index_launches += 1
                    st.index_seconds += time.perf_counter() - t0
                else:
                    best = self._scan_score(j, b1, d_indptr, d_terms, d_weights)
                    st.scan_launches += 1
                    st.scan_seconds += time.perf_counter() - t0
                st.launches += 1
                self.counters[H.EPOCH] += 1
                self.counters[H.N_CHANGED] = 0
                j_launch = j
                t1 = time.perf_counter()
                while j < b1:
                    j_from = j
                    j, status = self._resolve(j, b1, d_indptr, d_terms, d_weights, d_mag, best, j_launch,
                                              out_cluster, out_sim, out_new, False)
                    self._latency(latency, arrival, t_ready, j_from, j)
                    if status == H.RESTART:
                        st.restarts += 1
                        if not use_index:
                            break  # one scan scores the rest of the batch afresh: cheaper than a scan per conflict
                        # the index is cheap per document: score just this one against the current state,
                        # decide it, and go on with the launch's scores for the others
                        t2 = time.perf_counter()
                        self._index_score(j, j + 1, d_indptr, d_terms, d_weights, best_one)
                        st.index_seconds += time.perf_counter() - t2
                        st.launches += 1
                        st.index_launches += 1
                        j_from = j
                        j, status = self._resolve(j, j + 1, d_indptr, d_terms, d_weights, d_mag, best_one, j,
                                                  out_cluster, out_sim, out_new, True)
                        self._latency(latency, arrival, t_ready, j_from, j)
                st.resolve_seconds += time.perf_counter() - t1
            self._restart_rate = 0.9 * self._restart_rate + 0.1 * (st.restarts - restarts0)
            self._maybe_rebuild_index()
        st.rechecks = int(self.counters[H.N_RECHECKS])
        if self.scanner is not None:
            st.device_grows, st.flushed_rows = self.scanner.grows, self.scanner.flushed
        self.n_docs_seen += n
        return StreamResult(out_cluster, out_sim, out_new, latency, time.perf_counter() - t_start)

    def warm_up(self) -> None:
        """Compile/load every kernel and host function this configuration uses (on a throwaway
        clusterer), so that the first real document's latency is not a JIT's."""
        kw = dict(device=self.backend.name, batch_size=self.batch_size, candidates=self.candidates,
                  threads_per_block=self.tpb, reduce_threads=self.reduce_threads, backend=self.backend)
        X = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
        for candidates in (("scan", "index") if self.candidates == "auto" and self.use_index else (self.candidates,)):
            kw["candidates"] = candidates
            sc = StreamClusterer(self.threshold, self.K, fast_launch=self.fast_launch, **kw)
            sc.partial_fit(X)
            sc.partial_fit(X)  # the first launch of a batch had no clusters to score (no kernel ran)
            if sc.scanner is not None:  # the capacity growth (grow_copy) and the flush (apply_updates)
                sc.scanner._ensure_capacity(sc.scanner.stride + 1)
                sc.device_matrix()

    # ------------------------------------------------------------------ views
    def centroids(self) -> dict:
        """The cluster state as ELL arrays: ell_terms int32 (K, n_clusters) (-1 padded),
        ell_weights float32 (K, n_clusters), magnitude float64 (n_clusters,), size int64, length int32."""
        n = self.n_clusters
        return {"ell_terms": np.ascontiguousarray(self.c_terms[:n].T),
                "ell_weights": np.ascontiguousarray(self.c_weights[:n].T),
                "magnitude": self.c_mag[:n].copy(), "size": self.c_size[:n].copy(),
                "length": self.c_len[:n].copy()}

    def device_matrix(self):
        """Write all pending rows into the device (or twin) copy and read it back:
        (terms (K, n_clusters), weights (K, n_clusters)). For tests and checks."""
        if self.scanner is None:
            raise InputError("no ELL matrix: candidates='index' keeps no device copy")
        rows = H.drain_dirty(self.dirty_list, self.dirty_mark, self.counters)
        self.scanner.flush(self.n_clusters, rows, self.c_terms, self.c_weights)
        return self.scanner.read_back(self.n_clusters)

    def device_bytes(self) -> int:
        return self.scanner.device_bytes() if self.scanner is not None else 0

    # ------------------------------------------------------------------ checkpoint
    def state_arrays(self) -> dict:
        out = self.centroids()
        out.update({"threshold": self.threshold, "max_terms": self.K, "n_docs_seen": self.n_docs_seen})
        return out

    def restore(self, state: dict) -> None:
        """Load centroids saved by state_arrays() into this (fresh) clusterer."""
        if int(state["max_terms"]) != self.K or float(state["threshold"]) != self.threshold:
            raise InputError(f"the saved state has threshold {state['threshold']} and max_terms {state['max_terms']}, "
                             f"but this run asks for threshold {self.threshold} and max_terms {self.K}")
        terms = np.asarray(state["ell_terms"], np.int32)
        n = terms.shape[1]
        while self.c_terms.shape[0] < n:
            self._grow_clusters()
        self.c_terms[:n] = terms.T
        self.c_weights[:n] = np.asarray(state["ell_weights"], np.float32).T
        self.c_mag[:n] = state["magnitude"]
        self.c_size[:n] = state["size"]
        self.c_len[:n] = (terms >= 0).sum(axis=0)
        self.counters[H.N_CLUSTERS] = n
        self.counters[H.TOTAL_NNZ] = int(self.c_len[:n].sum())
        self.n_docs_seen = int(state["n_docs_seen"])
        if self.use_index:
            n_terms = int(terms.max()) + 1 if n else 1
            self._grow_index_terms(n_terms)
            self.ix_meta[1] = 1 << 62  # force the rebuild below
            self._maybe_rebuild_index()
            if n == 0:
                self.ix_meta[1] = 0
        if self.scanner is not None and n:
            H.drain_dirty(self.dirty_list, self.dirty_mark, self.counters)
            self.scanner.load(n, self.c_terms, self.c_weights)
