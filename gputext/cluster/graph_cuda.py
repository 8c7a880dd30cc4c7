"""The star graph built on a CUDA device: edges, AIS sums, symmetric CSR and relevance stay there.

Host driver of the kernels in gputext.kernels.star ("graph on the device"); called by
gputext.cluster.graph.build_graph when the backend is cuda.  Per row shard s (rows [b_s,
b_{s+1}), an index of the documents from b_s on, as the CPU path) and per batch of queries:

  scoring    the engine's dense fixed-point score rows (gputext.engine.cuda_backend.QueryBatch:
             upload of the batch's segments, ``accumulate``)
  counting   the engine's ``count_threshold`` (upper-triangle hits per (segment, query) block),
             ``exclusive_scan_device`` of the counts, one 8-byte copy of the total to the host
             (to know whether the edge buffer holds the batch)
  writing    ``edge_write_kernel``: int32 column + float32 weight per edge into the device edge
             buffer (rows in order, columns ascending), degree and fixed-point weight sums by
             atomics; ``row_lengths``

then once: ``csr``  (scan of the degrees and of the row lengths, ``split_upper``,
``lower_sort_kernel``), ``relevance`` (``ais_kernel``, ``relevance_kernel``) and ``transfer`` (one
copy of indptr, indices, degree, sums, counts and relevance to the host; the weights stay on the
device until read, see ``DeviceWeights``).  Each stage
is timed with CUDA events (stats ``device_seconds``) and by the host clock.

Memory (real device): score rows take at most ``ROWS_SHARE`` of the free memory (one buffer for
the largest shard's rows, handed from shard to shard; the write kernel leaves it zeroed), the edge
buffer (8 bytes an edge) up to ``EDGE_SHARE`` of what is free after them; building the symmetric
CSR needs 24 more bytes an edge (scratch 8 + result 16) and the edge buffer is first trimmed to
its size.  When a batch's edges do not fit in the buffer, the buffer's edges go to the host and
the buffer is reused (``spills`` in stats); after any spill, or when the CSR does not fit, the
symmetric CSR is assembled on the host exactly as the CPU path does (``assembly: host``), from
the device's degrees and sums; the relevance then runs on the device from the host graph.  The
result is identical either way (and identical to the CPU twin: same fixed-point keys, same
float32 rounding, rows sorted).
"""
from __future__ import annotations

import time

import numba
import numpy as np
from numba import cuda

from ..backend import device_memory
from ..device.launch import blocks as grid_blocks
from ..device.memory import Workspace, free_deferred, resources
from ..device.timer import StageTimer
from ..engine.cuda_backend import QueryBatch
from ..engine.device_index import DeviceShard, build_shard, plan_shards, shard_from_device
from ..engine.index import Index
from ..engine.search import Geometry
from ..io.corpus import csr_arrays
from ..kernels import scan, scoring
from ..kernels import star as kstar
from ..kernels.primitives import touch_pages
from ..progress import progress

ROWS_SHARE = 0.30
EDGE_SHARE = 0.60
SIM_BATCH = 16  # query rows per batch in the simulator
SIM_EDGE_CAPACITY = 1 << 16


class DeviceGraphGeometry:
    """Launch geometry of the device graph kernels (tests shrink it for the simulator).

    write_block/write_items: ``edge_write_kernel`` and the engine's ``count_threshold``
    (block threads x items documents per (segment, query) block); split_block: ``split_upper``
    threads per block (grid-stride, at most split_max_blocks blocks); sort_block/sort_words:
    ``lower_sort_kernel`` threads per row and bitmap words per tile (a multiple of sort_block),
    at most sort_max_blocks blocks; small_block: the 1-d kernels (row_lengths, ais).
    transfer: how the CSR comes to the host: "staged" (default: chunks of ``staging_bytes`` go
    device -> two page-locked buffers kept for the process, asynchronously, while every core copies
    the previous chunk into the result and takes its first-touch page faults; the engine's
    ``copy_back``), "pageable" (one plain copy into fresh numpy arrays) or "pinned" (fresh
    page-locked result arrays; their allocation is paid every call).  scripts/gpu_star.py
    measures the three.  weights: "lazy" (default) leaves the CSR's weights on the device until
    ``graph.weights`` is first read (``DeviceWeights``: the cover, the improvement and the
    relevance never read them; writing a result file or comparing graphs does), "eager" copies
    them with the indices.  index: "device" (default: the corpus is uploaded once and each row
    shard's suffix index is built from device views of it, ``_SuffixIndexes``) or "host" (each
    suffix sliced on the host and built by the engine's ``build_shard``).  edge_initial: edges
    the device edge buffer starts with (8 bytes each; it doubles as needed up to ``EDGE_SHARE``
    of the free memory, then spills to the host).  prefault: the host result arrays are allocated
    and their pages touched (every core) right after the last kernels are queued, so the page
    faults overlap the device's CSR and relevance work instead of the copy."""

    def __init__(self, write_block=256, write_items=16, split_block=256, split_max_blocks=65536,
                 sort_block=256, sort_words=2048, sort_max_blocks=65536, small_block=256, transfer="staged",
                 staging_bytes=32 << 20, weights="lazy", index="device", edge_initial=1 << 26, prefault=True):
        if transfer not in ("staged", "pageable", "pinned"):
            raise ValueError(f"transfer must be staged, pageable or pinned, got {transfer!r}")
        if weights not in ("lazy", "eager"):
            raise ValueError(f"weights must be lazy or eager, got {weights!r}")
        if index not in ("device", "host"):
            raise ValueError(f"index must be device or host, got {index!r}")
        self.index = index
        self.edge_initial = int(edge_initial)
        self.prefault = bool(prefault)
        self.transfer = transfer
        self.weights = weights
        self.staging_bytes = int(staging_bytes)
        self.write_block = write_block
        self.write_items = write_items
        self.split_block = split_block
        self.split_max_blocks = split_max_blocks
        self.sort_block = sort_block
        self.sort_words = sort_words
        self.sort_max_blocks = sort_max_blocks
        self.small_block = small_block


def _device_seconds(timer: StageTimer) -> dict[str, float]:
    """The timer's device stages in seconds, folded (_fold)."""
    return _fold({stage: ms / 1e3 for stage, ms in timer.device_ms().items()})


def _host_seconds(timer: StageTimer) -> dict[str, float]:
    return {stage: ms / 1e3 for stage, ms in timer.host_ms.items()}


def _fold(times: dict[str, float]) -> dict[str, float]:
    """Sub-stages ``<stage>_<part>`` are kept and also added into ``<stage>`` (for ``index``:
    slice = host CSR slicing, build = device index build, query_stats = host query scales,
    the rest = score-row and edge-buffer allocation)."""
    for key in [k for k in times if k.startswith("index_")]:
        times["index"] = times.get("index", 0.0) + times[key]
    return times


class _EdgeBuffer:
    """The device edge buffer (int32 columns, float32 weights) with host spill.

    It starts at ``initial`` edges and doubles (a new buffer, a device-to-device copy of the
    edges so far) up to ``capacity``; past that the edges go to the host (spill).  Allocating
    the largest buffer up front would cost its cuMemAlloc even for small graphs."""

    def __init__(self, capacity: int, initial: int | None = None, geom: DeviceGraphGeometry | None = None):
        self.geom = geom or DeviceGraphGeometry()
        self.max_capacity = max(1, int(capacity))
        self.capacity = min(self.max_capacity, max(1, int(initial or capacity)))
        self.cols = cuda.device_array(self.capacity, np.int32)
        self.weights = cuda.device_array(self.capacity, np.float32)
        self.fill = 0
        self.grows = 0
        self.spilled_cols: list[np.ndarray] = []
        self.spilled_weights: list[np.ndarray] = []

    def _grow(self, need: int) -> bool:
        """Reallocate to max(2 x capacity, need) edges, at most max_capacity; False if no room."""
        cap = min(self.max_capacity, max(2 * self.capacity, need))
        if cap < need:
            return False
        mem = device_memory()
        if mem is not None and mem[0] < 8 * cap + (64 << 20):
            return False
        cols = cuda.device_array(cap, np.int32)
        weights = cuda.device_array(cap, np.float32)
        if self.fill:
            cols[:self.fill].copy_to_device(self.cols[:self.fill])
            weights[:self.fill].copy_to_device(self.weights[:self.fill])
        self.cols, self.weights, self.capacity = cols, weights, cap
        free_deferred()
        self.grows += 1
        return True

    def make_room(self, extra: int) -> None:
        if self.fill + extra <= self.capacity:
            return
        if self.capacity < self.max_capacity and self._grow(self.fill + extra):
            return
        self.spill()
        if extra > self.capacity:  # one batch alone is larger: a buffer of its size
            self.cols = self.weights = None
            free_deferred()
            self.capacity = int(extra)
            self.cols = cuda.device_array(self.capacity, np.int32)
            self.weights = cuda.device_array(self.capacity, np.float32)

    def spill(self) -> None:
        """The edges so far to new host arrays (the build's transfer mode: staged by default)."""
        if self.fill:
            for dev, out in ((self.cols, self.spilled_cols), (self.weights, self.spilled_weights)):
                host = np.empty(self.fill, dev.dtype)
                _to_host(dev[:self.fill], host, self.geom)
                out.append(host)
        self.fill = 0

    def host_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge, on the host (cols int32, weights float32), spilling what is left."""
        self.spill()
        pieces = (self.spilled_cols, self.spilled_weights)
        return tuple(p[0] if len(p) == 1 else np.concatenate(p) if p else np.empty(0, t)
                     for p, t in zip(pieces, (np.int32, np.float32)))

    @property
    def spills(self) -> int:
        return len(self.spilled_cols)


def build_graph_cuda(X, beta: float, bounds: np.ndarray, batch_size: int | None, quiet: bool,
                     engine_geometry: Geometry | None, geometry: DeviceGraphGeometry | None,
                     relevance_geometry, edge_capacity: int | None, simulator: bool, upper_only: bool = False):
    """G_beta of the rows of X (canonical CSR) on the device; see the module docstring.

    bounds: row-shard boundaries (gputext.cluster.graph.shard_bounds).  Returns (up_ptr,
    indptr, indices, weights, degree, weight_sum, count, relevance, stats): up_ptr is None
    when the symmetric CSR was assembled on the device (then indptr.. relevance are host arrays),
    else (host assembly) indptr/indices/weights are the upper-triangle CSR (up_ptr, cols, weights)
    to be assembled by the caller and count/relevance are None.  upper_only: always that second
    form, with ``assembly: upper`` (DClustR's additions: bounds [0, n_new] over [new; old]).
    """
    geom = geometry or DeviceGraphGeometry()
    egeom = engine_geometry or Geometry()
    n = X.shape[0]
    min_key = float(beta)
    clock = StageTimer(on=True, device=not simulator)
    stats: dict = {"device_graph": True, "spills": 0, "batches": 0}
    d_degree = cuda.to_device(np.zeros(max(n, 1), np.int32))
    d_wsum = cuda.to_device(np.zeros(max(n, 1), np.int64))
    d_up_len = cuda.to_device(np.zeros(max(n, 1), np.int64))
    clock.mark("setup")
    if len(plan_shards(Index.from_csr(X))) > 1:
        return None  # the index itself does not fit: the caller takes the engine's path
    edges = _score_and_write(X, bounds, batch_size, quiet, egeom, geom, edge_capacity, simulator, clock, stats,
                             min_key, d_degree, d_wsum, d_up_len)
    n_edges = edges.fill + sum(len(c) for c in edges.spilled_cols)
    stats["n_upper_edges"] = n_edges
    stats["edge_buffer_grows"] = edges.grows
    clock.mark("release")
    slack = 16 * (n + 1) + (64 << 20)
    fits = edges.spills == 0 and not upper_only
    up_col, up_w = edges.cols, edges.weights
    if fits:
        mem = device_memory()
        if mem is not None and mem[0] >= 24 * n_edges + slack:
            pass  # the CSR fits next to the buffer as it is: no trim
        elif mem is None or mem[0] >= 8 * n_edges + slack:
            # trim the buffer to its edges: frees the reserve before the CSR's 24 bytes an edge
            up_col = cuda.device_array(max(n_edges, 1), np.int32)
            up_w = cuda.device_array(max(n_edges, 1), np.float32)
            if n_edges:
                up_col[:n_edges].copy_to_device(edges.cols[:n_edges])
                up_w[:n_edges].copy_to_device(edges.weights[:n_edges])
            edges.cols = edges.weights = None
            free_deferred()
        mem = device_memory()
        fits = mem is None or mem[0] >= 24 * n_edges + slack
    if not fits:
        if edges.cols is None:
            edges.cols, edges.weights = up_col, up_w
        up_col = up_w = None
        stats["assembly"] = "upper" if upper_only else "host"
        cols, weights = edges.host_edges()
        stats["spills"] = edges.spills
        edges = None
        up_len = d_up_len.copy_to_host()[:n]
        degree = d_degree.copy_to_host()[:n]
        wsum = d_wsum.copy_to_host()[:n]
        clock.mark("transfer")
        up_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(up_len, out=up_ptr[1:])
        stats["device_seconds"] = _device_seconds(clock)
        stats["host_seconds"] = _host_seconds(clock)
        return up_ptr, None, cols, weights, degree, wsum, None, None, stats
    stats["assembly"] = "device"
    edges = None
    upper = [up_col, up_w]  # handed over, not kept here: _device_csr frees them once split
    up_col = up_w = None
    return _device_csr(n, n_edges, upper, d_up_len, d_degree, d_wsum, geom, relevance_geometry, simulator, clock,
                       stats)


def _score_and_write(X, bounds, batch_size, quiet, egeom, geom, edge_capacity, simulator, clock, stats, min_key,
                     d_degree, d_wsum, d_up_len) -> "_EdgeBuffer":
    """Score every row shard's batches against its suffix index and write their upper-triangle
    edges (weight >= min_key) into the device edge buffer, with degrees, fixed-point weight sums
    and row lengths by atomics (module docstring: scoring, counting, writing). Returns the buffer."""
    n = X.shape[0]
    code = scoring.COSINE
    count_kernel, _ = scoring.threshold_kernels(geom.write_block, geom.write_items)
    write_kernel = kstar.edge_write_kernel(geom.write_block, geom.write_items)
    seg_len = geom.write_block * geom.write_items
    acc = None  # the score rows, handed from shard to shard (left zeroed by the write kernel)
    edges: _EdgeBuffer | None = None
    corpus = _SuffixIndexes(X, bounds, egeom) if geom.index == "device" else None
    clock.mark("index_slice")
    with progress(n if len(bounds) > 2 else 0, "similarity graph (cuda)", quiet) as bar:
        for s in range(len(bounds) - 1):
            start, stop = int(bounds[s]), int(bounds[s + 1])
            if corpus is not None:  # rows [start, n) of the corpus uploaded once
                shard = corpus.shard(s)
            else:  # host slice of the rows, uploaded and built by the engine
                index = Index.from_csr(X[start:])
                clock.mark("index_slice")
                shard = build_shard(index.X, 0, index.n_docs, egeom)
                maxabs = index.term_maxabs
            clock.mark("index_build")
            if acc is not None:
                shard.work.adopt("acc", acc)
            if corpus is None:
                Q = X[start:stop]
                scale, qn = _query_stats(*csr_arrays(Q), maxabs, code)
                self_doc = np.full(stop - start, -1, np.int64)
                after = np.arange(stop - start, dtype=np.int64)
            clock.mark("index_query_stats")
            n_docs = n - start
            n_seg = grid_blocks(n_docs, seg_len)
            if edges is None:  # score rows for the largest shard's batch, reused by every shard
                entries = _score_row_entries(n, bounds, batch_size, simulator)
                shard.buffer("acc", (entries,), np.int64, zeroed=True)
                acc = shard.work.array("acc")  # the flat buffer behind the shard's workspace entry
                cap = edge_capacity or _edge_capacity(simulator)
                edges = _EdgeBuffer(cap, geom.edge_initial, geom)
                stats["edge_capacity"] = edges.max_capacity
            rows = max(1, min(stop - start, 65535, acc.size // max(1, n_docs)))
            clock.mark("index")
            for lo in range(0, stop - start, rows):
                hi = min(stop - start, lo + rows)
                if corpus is not None:
                    batch = corpus.batch(s, start + lo, start + hi, shard, code, egeom)
                else:
                    batch = QueryBatch(Q, lo, hi, shard, scale, qn, self_doc, code, egeom, after)
                clock.mark("scoring")
                d_counts = cuda.device_array((batch.n, n_seg), np.int32)
                args = (batch.acc, n_docs, batch.qinfo, batch.dn, code, min_key)
                count_kernel[(n_seg, batch.n), geom.write_block](*args, d_counts)
                d_offsets = scan.exclusive_scan_device(d_counts.reshape(batch.n * n_seg))
                total = int(d_offsets[batch.n * n_seg])
                clock.mark("counting")
                edges.make_room(total)
                write_kernel[(n_seg, batch.n), geom.write_block](
                    *args, d_offsets, edges.fill, start + lo, start, edges.cols, edges.weights, d_degree, d_wsum)
                shard.rows_dirty = False
                kstar.row_lengths[grid_blocks(batch.n, geom.small_block), geom.small_block](
                    d_offsets, n_seg, batch.n, start + lo, d_up_len)
                edges.fill += total
                stats["batches"] += 1
                clock.mark("writing")
                bar.update(hi - lo)
            acc = shard.work.array("acc")  # QueryBatch may have replaced it (it never does: rows fit)
            shard.work = Workspace()
            batch = args = d_counts = d_offsets = None  # they hold views of the score rows
            shard = index = None
            free_deferred()
    acc = corpus = None
    free_deferred()
    return edges


def _device_csr(n, n_edges, upper: list, d_up_len, d_degree, d_wsum, geom, relevance_geometry, simulator, clock,
                stats):
    """The symmetric CSR (split_upper, lower_sort), the relevance (ais, relevance) and their copy
    to the host (module docstring: csr, relevance, transfer); the weights stay on the device
    unless geom.weights is "eager". upper: [columns, weights] of the upper-triangle edges (emptied
    here, so that they are freed once split). Returns build_graph_cuda's device-assembly tuple."""
    up_col, up_w = upper
    upper.clear()
    edges = None
    d_up_ptr = scan.exclusive_scan_device(d_up_len[:n]) if n else cuda.to_device(np.zeros(1, np.int64))
    d_indptr = scan.exclusive_scan_device(d_degree[:n]) if n else cuda.to_device(np.zeros(1, np.int64))
    nnz = 2 * n_edges
    d_idx = cuda.device_array(max(nnz, 1), np.int32)
    d_w = cuda.device_array(max(nnz, 1), np.float32)
    if n_edges:
        d_cursor = cuda.to_device(np.zeros(n, np.int32))
        tmp_row = cuda.device_array(n_edges, np.int32)
        tmp_w = cuda.device_array(n_edges, np.float32)
        blocks = max(1, min(geom.split_max_blocks, grid_blocks(n_edges, geom.split_block)))
        kstar.split_upper[blocks, geom.split_block](d_up_ptr, up_col, up_w, n_edges, d_indptr, d_cursor,
                                                    d_idx, d_w, tmp_row, tmp_w)
        up_col = up_w = d_cursor = None
        sort = kstar.lower_sort_kernel(geom.sort_block, geom.sort_words)
        sort[max(1, min(geom.sort_max_blocks, n)), geom.sort_block](d_indptr, d_up_ptr, tmp_row, tmp_w, d_idx, d_w)
        tmp_row = tmp_w = None
    clock.mark("csr")
    count = np.zeros(n, np.int32)
    rel = np.zeros(n, np.float64)
    d_ais = cuda.device_array(max(n, 1), np.float64)
    d_count = cuda.device_array(max(n, 1), np.int32)
    d_rel = cuda.device_array(max(n, 1), np.float64)
    if n:
        kstar.ais_kernel[grid_blocks(n, geom.small_block), geom.small_block](d_degree[:n], d_wsum[:n], d_ais[:n])
        rg = relevance_geometry or kstar.RelevanceLaunch()
        kernel = kstar.relevance_kernel(int(rg.lanes), int(rg.vertices))
        blocks = max(1, min(int(rg.max_blocks), grid_blocks(n, rg.vertices)))
        kernel[blocks, (rg.lanes, rg.vertices)](d_indptr, d_idx, d_degree[:n], d_ais[:n], d_count[:n], d_rel[:n])
    clock.mark("relevance")
    host_array = cuda.pinned_array if geom.transfer == "pinned" and not simulator else np.empty
    indices = host_array(nnz, np.int32)
    weights = np.empty(nnz, np.float32) if nnz == 0 or geom.weights != "eager" else host_array(nnz, np.float32)
    if geom.prefault and geom.transfer != "pinned" and nnz:  # page faults now, while the csr and relevance kernels run
        touch_pages(indices.view(np.uint8), 4096)
        if geom.weights == "eager":
            touch_pages(weights.view(np.uint8), 4096)
    indptr = d_indptr.copy_to_host()
    if nnz:
        _to_host(d_idx[:nnz], indices, geom)
        if geom.weights == "eager":
            _to_host(d_w[:nnz], weights, geom)
        else:  # left on the device until graph.weights is read (the clustering never reads it)
            weights = DeviceWeights(d_w, nnz, geom, simulator)
    d_w = None
    degree = d_degree.copy_to_host()[:n]
    wsum = d_wsum.copy_to_host()[:n]
    if n:
        d_count[:n].copy_to_host(count)
        d_rel[:n].copy_to_host(rel)
    clock.mark("transfer")
    stats["device_seconds"] = _device_seconds(clock)
    stats["host_seconds"] = _fold(_host_seconds(clock))
    return None, indptr, indices, weights, degree, wsum, count, rel, stats




def _query_stats(indptr, indices, data, term_maxabs, code: int):
    """The engine's per-query scale and norm term (scoring.query_stats) of the rows of (indptr,
    indices, data) (indptr may be a slice of a larger CSR's), queries in parallel
    (scoring.query_stats_multi: the same loop per query, so the same bits)."""
    scale, qn = scoring.query_stats_multi(indptr, indices, data, term_maxabs, np.array([code], np.int64))
    return np.ascontiguousarray(scale[0]), np.ascontiguousarray(qn[0])


def _shard_query_stats(indptr, indices, data, bounds, maxabs, code: int):
    """scale, qn float64 (n,): row i of shard s (bounds[s] <= i < bounds[s+1]) against the term
    maxima maxabs[s] of its shard's index (rows past the last bound: 1 and 0, never queried)."""
    n = indptr.shape[0] - 1
    scale, qn = np.ones(n, np.float64), np.zeros(n, np.float64)
    for s in range(len(bounds) - 1):
        a, b = int(bounds[s]), int(bounds[s + 1])
        scale[a:b], qn[a:b] = _query_stats(indptr[a:b + 1], indices, data, maxabs[s], code)
    return scale, qn


class _SuffixIndexes:
    """Device indexes of the row suffixes X[b_s:] (s = 0..S-1) from one upload of X.

    X's indices and weights go to the device once; the index of shard s is built there from
    views of them (the engine's ``shard_from_device``: count_df, exclusive scan,
    scatter_postings, doc_norms) with the shard's row
    offsets rebased on the host (8 bytes a row).  term_maxabs[s] float32 (n_terms,): the largest
    |weight| of each term over rows >= b_s (one pass over X per shard range, then suffix
    maxima: the same values as an Index of X[b_s:]), which sets the queries' fixed-point scales.
    """

    def __init__(self, X, bounds: np.ndarray, egeom: Geometry):
        self.indptr, indices, data = csr_arrays(X)
        self.n, self.n_terms = X.shape
        self.bounds = bounds
        self.egeom = egeom
        self.d_indices = cuda.to_device(indices) if len(indices) else cuda.device_array(1, np.int32)
        self.d_data = cuda.to_device(data) if len(data) else cuda.device_array(1, np.float32)
        # per shard's rows (the last range runs to the end of X), in parallel, then suffix maxima
        starts = self.indptr[np.append(np.asarray(bounds[:-1], np.int64), self.n)].astype(np.int64)
        # private per-chunk term maxima and counts: at most 2^24 entries of each (192 MiB)
        chunks = max(1, min(numba.get_num_threads(), (1 << 24) // max(1, (len(bounds) - 1) * self.n_terms)))
        maxabs, counts = kstar.term_stats_ranges(indices, data, starts, self.n_terms, chunks)
        for s in range(len(maxabs) - 2, -1, -1):
            np.maximum(maxabs[s], maxabs[s + 1], out=maxabs[s])
            counts[s] += counts[s + 1]
        self.term_maxabs = list(maxabs)
        self.df = counts  # int64 (S, n_terms): posting lengths of each suffix index (its count_df)
        self.indices = indices
        # every row's query scale and norm against its shard's index (queries in parallel)
        self.scale, self.qn = _shard_query_stats(self.indptr, indices, data, bounds, maxabs, scoring.COSINE)

    def batch(self, s: int, lo: int, hi: int, shard: DeviceShard, code: int, egeom: Geometry):
        """Rows [lo, hi) (global) of shard s scored into the shard's score rows: what the
        engine's ``QueryBatch`` does, with the segments made by one parallel pass
        (kstar.batch_segments, from the host's suffix posting lengths) and the batch's weights
        taken from the corpus already on the device.  Returns an object with n, acc, qinfo, dn."""
        from types import SimpleNamespace

        start = int(self.bounds[s])
        n_q = hi - lo
        seg_off, seg = kstar.batch_segments(self.indptr, self.indices, lo, hi, self.df[s])
        local_after = np.arange(lo - start, hi - start, dtype=np.float64)
        qinfo = cuda.to_device(np.column_stack([self.scale[lo:hi], self.qn[lo:hi], np.full(n_q, -1.0), local_after]))
        acc = shard.buffer("acc", (n_q * shard.n_docs,), np.int64, zeroed=True)
        b = egeom.accumulate_block
        if shard.rows_dirty:
            shard.zero_rows(acc, b)
        shard.rows_dirty = True
        postings = int(seg_off[-1])
        if postings:
            a, e = int(self.indptr[lo]), int(self.indptr[hi])
            scoring.accumulate_kernel(b, egeom.accumulate_items)[grid_blocks(postings, b * egeom.accumulate_items), b](
                cuda.to_device(seg_off), cuda.to_device(seg), self.d_data[a:e], qinfo, shard.term_ptr, shard.post_doc,
                shard.post_w, code, shard.n_docs, acc, 0, 0, seg.shape[0], 0)
        return SimpleNamespace(n=n_q, acc=acc, qinfo=qinfo, dn=shard.dn(code, egeom.build_block), postings=postings)

    def shard(self, s: int) -> DeviceShard:
        """The suffix index of shard s (documents from its start on, local ids from 0), built on
        the device from views of the corpus uploaded once."""
        start = int(self.bounds[s])
        o = int(self.indptr[start])
        nnz = int(self.indptr[-1]) - o
        d_indptr = cuda.to_device(np.ascontiguousarray(self.indptr[start:] - o))
        return shard_from_device(d_indptr, self.d_indices[o:o + nnz], self.d_data[o:o + nnz], self.n_terms, 0,
                                 self.n - start, self.egeom)


def _to_host(d_arr, host, geom: DeviceGraphGeometry) -> None:
    """One device array into a host array of its size, as ``geom.transfer`` says."""
    if geom.transfer == "staged":
        resources().copy_back(d_arr, host, geom.staging_bytes)
    else:
        d_arr.copy_to_host(host)


class DeviceWeights:
    """The symmetric CSR's weights left on the device (float32 (nnz,)); ``fetch()`` copies them
    to a new host array (the transfer mode of the build) and drops the device array.  A
    StarGraph holding one copies on the first read of ``graph.weights``
    (gputext.cluster.graph)."""

    def __init__(self, d_w, nnz: int, geom: DeviceGraphGeometry, simulator: bool):
        self.d_w, self.nnz, self.geom, self.simulator = d_w, int(nnz), geom, simulator
        self.seconds = None  # host seconds of the copy, once fetched

    def fetch(self) -> np.ndarray:
        t = time.perf_counter()
        pinned = self.geom.transfer == "pinned" and not self.simulator
        host = cuda.pinned_array(self.nnz, np.float32) if pinned else np.empty(self.nnz, np.float32)
        _to_host(self.d_w[:self.nnz], host, self.geom)
        self.d_w = None
        free_deferred()
        self.seconds = time.perf_counter() - t
        return host


def _edge_capacity(simulator: bool) -> int:
    mem = device_memory()
    if simulator or mem is None:
        return SIM_EDGE_CAPACITY
    return max(1 << 20, int(EDGE_SHARE * mem[0]) // 8)


def _score_row_entries(n: int, bounds: np.ndarray, batch_size: int | None, simulator: bool) -> int:
    """int64 entries of the score rows: the largest shard's rows x documents (shards hold about
    equal numbers of pairs), at most ``batch_size`` rows of the whole corpus when given, else at
    most ROWS_SHARE of the free device memory (SIM_BATCH rows in the simulator)."""
    largest = max(int(bounds[s + 1] - bounds[s]) * int(n - bounds[s]) for s in range(len(bounds) - 1))
    if batch_size:
        cap = int(batch_size) * n
    elif simulator or device_memory() is None:
        cap = SIM_BATCH * n
    else:
        cap = int(ROWS_SHARE * device_memory()[0]) // 8
    return max(n, min(largest, cap))
