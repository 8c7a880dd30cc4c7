"""The engine on a CUDA device: index shards built on the device, batches of queries scored
into dense fixed-point score rows, then a selector (gputext.kernels.scoring for the kernels).

Memory plan (reported in ``stats``): an index shard takes 8 bytes a posting (doc int32 + weight
float32) + 8 a term + 16 a document, and 16 bytes a posting while it is being built (the CSR rows
are on the device then); a batch takes 8 bytes per (query, document) of score rows. Shards get
up to 45% of the free device memory and score rows 30%, so a corpus larger than the device is
indexed shard by shard, each shard's top-k lists merged on the host (exact: keys are the same
float64 values whichever shard a document is in).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from numba import cuda

from ..backend import device_memory
from ..io.corpus import csr_arrays
from ..kernels import scan, scoring
from ..progress import progress
from .index import Index

INDEX_SHARE = 0.45
ROWS_SHARE = 0.30
SIM_BATCH = 64  # the simulator has no memory to plan against


@dataclass
class DeviceShard:
    doc_lo: int
    doc_hi: int
    term_ptr: object  # device int64 (n_terms+1,)
    post_doc: object  # device int32 (nnz,)
    post_w: object  # device float32 (nnz,)
    d_sq: object  # device float64 (n_docs,)
    d_l1: object  # device float64 (n_docs,)
    df: np.ndarray  # host int64 (n_terms,): posting list lengths, for the batch offsets
    nbytes: int
    norm_terms: dict = None  # metric -> device float64 (n_docs,), made on first use
    buffers: dict = None  # name -> device array reused across batches and searches (workspace)
    rows_dirty: bool = False  # score rows not yet re-zeroed by a selector

    def buffer(self, name: str, shape: tuple, dtype, zeroed: bool = False):
        """A device array of at least ``shape``'s size, reused while large enough: numba's
        allocations are synchronous cuMemAlloc calls, and its frees are deferred, so fresh
        arrays per batch cost time and can hold twice the memory. Views are cached by shape
        (slicing a numba device array costs tens of microseconds). ``zeroed``: zero it when it is
        (re)allocated; the caller keeps it zero after use."""
        if self.buffers is None:
            self.buffers = {}
        size = int(np.prod(shape))
        have = self.buffers.get(name)
        if have is None or have[0].size < size or have[0].dtype != np.dtype(dtype):
            self.buffers.pop(name, None)
            arr = cuda.device_array(max(size, 1), dtype)
            if zeroed:
                scoring.zero_int64[min(_blocks(arr.size, 256), 65535 * 4), 256](arr)
            have = (arr, {})
            self.buffers[name] = have
        arr, views = have
        if shape not in views:
            views[shape] = arr[:size].reshape(shape) if len(shape) > 1 else arr[:size]
        return views[shape]

    def release(self, larger_than: int = 1 << 30) -> None:
        """Free workspace buffers above a size (score rows of big batches) once a search ends."""
        for name, (arr, _) in list((self.buffers or {}).items()):
            if arr.nbytes > larger_than:
                del self.buffers[name]

    def dn(self, metric: int, block: int):
        """The documents' norm term for the metric, on the device (kernel doc_norm_terms)."""
        if self.norm_terms is None:
            self.norm_terms = {}
        if metric not in self.norm_terms:
            out = cuda.device_array(max(self.n_docs, 1), np.float64)
            scoring.doc_norm_terms[_blocks(self.n_docs, block), block](self.d_sq, self.d_l1, metric, out)
            self.norm_terms[metric] = out
        return self.norm_terms[metric]

    @property
    def n_docs(self) -> int:
        return self.doc_hi - self.doc_lo


def build_shard(X: sp.csr_matrix, doc_lo: int, doc_hi: int, geom) -> DeviceShard:
    """Build rows [doc_lo, doc_hi) of X into a device index: upload the rows, then
    ``shard_from_device``."""
    indptr, indices, data = csr_arrays(X[doc_lo:doc_hi])
    return shard_from_device(cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(data),
                             X.shape[1], doc_lo, doc_hi, geom)


def shard_from_device(d_indptr, d_indices, d_data, n_terms: int, doc_lo: int, doc_hi: int, geom) -> DeviceShard:
    """A device index of CSR rows already on the device: d_indptr int64 (n_docs+1,) starting at 0,
    d_indices int32 / d_data float32 of exactly indptr[-1] entries (may be views into a larger
    upload). df by atomics, exclusive scan, atomic scatter, norms (kernels count_df, scan_blocks,
    scatter_postings, doc_norms). The shard covers documents [doc_lo, doc_hi) of its corpus."""
    nnz = int(d_indices.shape[0])
    n_docs = doc_hi - doc_lo
    b = geom.build_block
    d_df = cuda.to_device(np.zeros(n_terms, np.int32))
    if nnz:
        scoring.count_df[_blocks(nnz, b), b](d_indices, d_df)
    d_term_ptr = scan.exclusive_scan_device(d_df, geom.scan_block, geom.scan_items)
    d_cursor = cuda.to_device(np.zeros(n_terms, np.int32))
    d_post_doc = cuda.device_array(max(nnz, 1), np.int32)
    d_post_w = cuda.device_array(max(nnz, 1), np.float32)
    if nnz:
        scoring.scatter_postings[_blocks(nnz, b), b](d_indptr, d_indices, d_data, d_term_ptr, d_cursor,
                                                      d_post_doc, d_post_w)
    d_sq = cuda.device_array(max(n_docs, 1), np.float64)
    d_l1 = cuda.device_array(max(n_docs, 1), np.float64)
    if n_docs:
        scoring.doc_norms[_blocks(n_docs, b), b](d_indptr, d_data, d_sq, d_l1)
    df = np.diff(d_term_ptr.copy_to_host())
    nbytes = 8 * max(nnz, 1) + 8 * (n_terms + 1) + 16 * max(n_docs, 1)
    return DeviceShard(doc_lo, doc_hi, d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, df, nbytes)


def _blocks(n: int, block: int) -> int:
    return max(1, (n + block - 1) // block)


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


def plan_shards(index: Index) -> list[tuple[int, int]]:
    """Row ranges whose device index (at build time, 16 B a posting) fits INDEX_SHARE of free memory."""
    mem = device_memory()
    if mem is None:
        return [(0, index.n_docs)]
    budget = INDEX_SHARE * mem[0]
    indptr = index.X.indptr
    per_doc = 16 * np.diff(indptr).astype(np.float64) + 16
    if per_doc.sum() + 8 * index.n_terms <= budget:
        return [(0, index.n_docs)]
    ranges, lo = [], 0
    cum = np.concatenate([[0.0], np.cumsum(per_doc)])
    while lo < index.n_docs:
        hi = int(np.searchsorted(cum, cum[lo] + budget - 8 * index.n_terms, side="right")) - 1
        hi = max(hi, lo + 1)
        ranges.append((lo, min(hi, index.n_docs)))
        lo = ranges[-1][1]
    return ranges


def _shards(index: Index, geom, stats: dict):
    """Yield device shards; a single shard is kept on the Index for later searches."""
    cached = index.device_cache.get("shard")
    if cached is not None:
        stats["shards"] = 1
        stats["index_bytes"] = cached.nbytes
        yield cached
        return
    ranges = plan_shards(index)
    stats["shards"] = len(ranges)
    if len(ranges) == 1:
        cached = index.device_cache.get("shard")
        if cached is None:
            cached = build_shard(index.X, 0, index.n_docs, geom)
            index.device_cache["shard"] = cached
        stats["index_bytes"] = cached.nbytes
        yield cached
        return
    for lo, hi in ranges:
        shard = build_shard(index.X, lo, hi, geom)
        stats["index_bytes"] = max(stats.get("index_bytes", 0), shard.nbytes)
        yield shard
        del shard


def _batch_rows(shard: DeviceShard, n_queries: int, batch_size: int | None, per_query_extra: int) -> int:
    if batch_size:
        return max(1, min(int(batch_size), n_queries, 65535))
    mem = device_memory()
    if mem is None:
        return max(1, min(n_queries, SIM_BATCH))
    per_query = 8 * shard.n_docs + per_query_extra
    return max(1, min(n_queries, 65535, int(ROWS_SHARE * mem[0] // per_query)))


class _Batch:
    """One batch of queries on the device: uploaded segments and zeroed score rows."""

    def __init__(self, Q: sp.csr_matrix, lo: int, hi: int, shard: DeviceShard, scale, qn, self_doc, code, geom,
                 after=None):
        indptr, indices, data = csr_arrays(Q[lo:hi])
        self.n = hi - lo
        seg_len = shard.df[indices]
        seg_off = np.zeros(len(indices) + 1, np.int64)
        np.cumsum(seg_len, out=seg_off[1:])
        seg = np.empty((len(indices), 2), np.int32)  # (term, query) of each segment
        seg[:, 0] = indices
        seg[:, 1] = np.repeat(np.arange(self.n, dtype=np.int32), np.diff(indptr))
        local_self = np.where((self_doc[lo:hi] >= shard.doc_lo) & (self_doc[lo:hi] < shard.doc_hi),
                              self_doc[lo:hi] - shard.doc_lo, -1)
        local_after = (np.full(self.n, -1.0) if after is None else
                       np.maximum(after[lo:hi] - shard.doc_lo, -1).astype(np.float64))
        # qinfo (n, 4): scale, norm term, document to leave out, only documents after this one
        self.qinfo = cuda.to_device(np.column_stack([scale[lo:hi], qn[lo:hi], local_self.astype(np.float64), local_after]))
        self.dn = shard.dn(code, geom.build_block)
        self.postings = int(seg_off[-1])
        # score rows: zero when allocated, and the selectors re-zero every entry they read; a batch
        # that never reached its selector (an interrupted search) leaves them dirty
        self.acc = shard.buffer("acc", (self.n * shard.n_docs,), np.int64, zeroed=True)
        b = geom.accumulate_block
        if shard.rows_dirty:
            scoring.zero_int64[min(_blocks(self.acc.size, b), 65535 * 4), b](self.acc)
        shard.rows_dirty = True
        if self.postings:
            per_block = b * geom.accumulate_items
            scoring.accumulate_kernel(b, geom.accumulate_items)[_blocks(self.postings, per_block), b](
                cuda.to_device(seg_off), cuda.to_device(seg), cuda.to_device(data), self.qinfo,
                shard.term_ptr, shard.post_doc, shard.post_w, code, shard.n_docs, self.acc)


def topk_cuda(index: Index, Q, k, code, self_doc, batch_size, quiet, geom, stats: dict | None = None):
    """Host driver of the GPU top-k pipeline; returns (docs int32 (n_q, k), keys float64 (n_q, k))."""
    stats = {} if stats is None else stats
    t0 = time.perf_counter()
    scale, qn = scoring.query_stats(*csr_arrays(Q), index.term_maxabs, code)
    block, items, cap = scoring.topk_geometry(k, geom.select_block, geom.select_items)
    seg_len = block * items
    select = scoring.select_topk_kernel(block, items, cap)
    group = max(2, geom.merge_width // _next_pow2(k))
    width = _next_pow2(group * k)
    merge = scoring.merge_topk_kernel(geom.merge_block, width)
    n_q = Q.shape[0]
    parts = []
    for shard in _shards(index, geom, stats):
        n_seg = _blocks(shard.n_docs, seg_len)
        rows = _batch_rows(shard, n_q, batch_size, 12 * n_seg * k)
        stats["batch_size"] = rows
        stats["rows_bytes"] = 8 * rows * shard.n_docs + 12 * rows * n_seg * k
        docs = np.empty((n_q, k), np.int32)
        keys = np.empty((n_q, k), np.float64)
        batches = range(0, n_q, rows)
        with progress(len(batches) if len(batches) > 1 else 0, "scoring (cuda)", quiet) as bar:
            for lo in batches:
                hi = min(n_q, lo + rows)
                batch = _Batch(Q, lo, hi, shard, scale, qn, self_doc, code, geom)
                d_doc = shard.buffer("seg_doc", (batch.n, n_seg, k), np.int32)
                d_key = shard.buffer("seg_key", (batch.n, n_seg, k), np.float64)
                select[(n_seg, batch.n), block](batch.acc, shard.n_docs, batch.qinfo, batch.dn, code, k, d_doc, d_key)
                shard.rows_dirty = False
                n_lists = n_seg
                level = 0
                while n_lists > 1:
                    n_groups = _blocks(n_lists, group)
                    level += 1
                    o_doc = shard.buffer(f"merge_doc{level % 2}", (batch.n, n_groups, k), np.int32)
                    o_key = shard.buffer(f"merge_key{level % 2}", (batch.n, n_groups, k), np.float64)
                    merge[(n_groups, batch.n), geom.merge_block](d_doc, d_key, group, k, o_doc, o_key)
                    d_doc, d_key, n_lists = o_doc, o_key, n_groups
                got = d_doc.copy_to_host()[:, 0, :]
                docs[lo:hi] = np.where(got >= 0, got + shard.doc_lo, -1)
                keys[lo:hi] = d_key.copy_to_host()[:, 0, :]
                stats["postings"] = stats.get("postings", 0) + batch.postings
                bar.update(1)
        shard.release()
        parts.append((docs, keys))
    stats["seconds"] = time.perf_counter() - t0
    if len(parts) == 1:
        return parts[0]
    return merge_shard_results(parts, k)


def merge_shard_results(parts, k):
    """Exact merge of per-shard top-k lists: (key desc, doc asc), empty slots (doc -1) last."""
    docs = np.concatenate([d for d, _ in parts], axis=1)
    keys = np.concatenate([kk for _, kk in parts], axis=1)
    missing = docs < 0
    sort_keys = np.where(missing, np.inf, -keys)
    sort_docs = np.where(missing, np.iinfo(np.int64).max, docs.astype(np.int64))
    order = np.lexsort((sort_docs, sort_keys), axis=1)[:, :k]
    return np.take_along_axis(docs, order, 1), np.take_along_axis(keys, order, 1)


def threshold_cuda(index: Index, Q, min_key, code, self_doc, batch_size, quiet, geom, stats: dict | None = None,
                   after=None):
    """Host driver of the GPU threshold pipeline; returns CSR parts (indptr int64, docs int32, keys float64)."""
    stats = {} if stats is None else stats
    scale, qn = scoring.query_stats(*csr_arrays(Q), index.term_maxabs, code)
    block = geom.select_block or 256
    items = geom.select_items or 16
    count, write = scoring.threshold_kernels(block, items)
    n_q = Q.shape[0]
    rows_parts: list[np.ndarray] = []
    docs_parts: list[np.ndarray] = []
    keys_parts: list[np.ndarray] = []
    for shard in _shards(index, geom, stats):
        n_seg = _blocks(shard.n_docs, block * items)
        per_batch = _batch_rows(shard, n_q, batch_size, 4 * n_seg)
        stats["batch_size"] = per_batch
        batches = range(0, n_q, per_batch)
        with progress(len(batches) if len(batches) > 1 else 0, "scoring (cuda)", quiet) as bar:
            for lo in batches:
                hi = min(n_q, lo + per_batch)
                batch = _Batch(Q, lo, hi, shard, scale, qn, self_doc, code, geom, after)
                d_counts = cuda.device_array((batch.n, n_seg), np.int32)
                args = (batch.acc, shard.n_docs, batch.qinfo, batch.dn, code, min_key)
                count[(n_seg, batch.n), block](*args, d_counts)
                counts = d_counts.copy_to_host().astype(np.int64)
                offsets = np.zeros(counts.size + 1, np.int64)
                np.cumsum(counts.ravel(), out=offsets[1:])
                total = int(offsets[-1])
                d_doc = cuda.device_array(max(total, 1), np.int32)
                d_key = cuda.device_array(max(total, 1), np.float64)
                write[(n_seg, batch.n), block](*args, cuda.to_device(offsets[:-1]), d_doc, d_key)  # also re-zeroes the rows
                shard.rows_dirty = False
                # q-major offsets: hits come grouped by query, then in document order
                rows_parts.append(np.repeat(np.arange(lo, hi, dtype=np.int64), counts.sum(axis=1)))
                docs_parts.append(d_doc.copy_to_host()[:total] + shard.doc_lo)
                keys_parts.append(d_key.copy_to_host()[:total])
                bar.update(1)
        shard.release()
    rows = np.concatenate(rows_parts) if rows_parts else np.empty(0, np.int64)
    docs = (np.concatenate(docs_parts) if docs_parts else np.empty(0)).astype(np.int32)
    keys = np.concatenate(keys_parts) if keys_parts else np.empty(0, np.float64)
    if stats["shards"] > 1:  # each shard's hits are in order; interleave them by (query, document)
        order = np.lexsort((docs, rows))
        rows, docs, keys = rows[order], docs[order], keys[order]
    indptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_q), out=indptr[1:])
    return indptr, docs, keys


# ----------------------------------------------------------------------------- grouped top-k


class _Workspace:
    """Device buffers kept across batches and calls (numba's allocations are synchronous)."""

    def __init__(self):
        self.buffers: dict = {}

    def release(self, larger_than: int) -> None:
        """Drop buffers above a size once a search ends (those of big batches)."""
        for name, arr in list(self.buffers.items()):
            if arr.nbytes > larger_than:
                del self.buffers[name]

    def get(self, name: str, shape: tuple, dtype):
        size = int(np.prod(shape))
        arr = self.buffers.get(name)
        if arr is None or arr.size < size or arr.dtype != np.dtype(dtype):
            arr = cuda.device_array(max(size, 1), dtype)
            self.buffers[name] = arr
        return arr[:size].reshape(shape)


@dataclass
class SortedIndex:
    """The index's postings as the CPU twin builds them (lists sorted by document), on the
    device: the grouped selector finds each segment's part of a list by binary search."""

    term_ptr: object
    post_doc: object
    post_w: object
    nbytes: int
    dn: dict  # tuple of metric codes -> device float64 (n_metrics, n_docs)
    tables: dict  # the last segment table: key (segment bounds) and device int64 (n_terms, n_seg+1)


def sorted_index(index: Index, packed: bool = False) -> SortedIndex:
    """The index's sorted postings on the device (uploaded once per Index). packed: the three
    arrays in one transfer from a pinned buffer into one allocation (upload_packed)."""
    cached = index.device_cache.get("sorted")
    if cached is None:
        p = index.cpu()
        arrays = (p.term_ptr, p.post_doc if p.post_doc.size else np.zeros(1, np.int32),
                  p.post_w if p.post_w.size else np.zeros(1, np.float32))
        d = upload_packed(arrays) if packed else [cuda.to_device(a) for a in arrays]
        cached = SortedIndex(*d, p.term_ptr.nbytes + p.post_doc.nbytes + p.post_w.nbytes, {}, {})
        index.device_cache["sorted"] = cached
    return cached


_UPLOAD: list = []  # one pinned host buffer for packed uploads, kept for the process (pinning is slow)
_ALIGN = 256


def upload_packed(arrays, dest=None) -> list:
    """Host arrays to the device in one transfer: each is copied (by every core, _copy_parallel)
    into a pinned buffer at a 256-byte aligned offset, the buffer goes to the device in one
    host -> device copy (full PCIe speed, versus one synchronous pageable copy and one allocation
    per array), and the result is device views of the same shapes and dtypes. dest: callable
    nbytes -> uint8 device array to upload into (a reused workspace), else one fresh allocation.
    Arrays must be non-empty. The copy is synchronous: the pinned buffer is free on return."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    offsets, at = [], 0
    for a in arrays:
        offsets.append(at)
        at += -(-a.nbytes // _ALIGN) * _ALIGN
    total = max(at, _ALIGN)
    if not _UPLOAD or _UPLOAD[0].nbytes < total:
        _UPLOAD.clear()
        _UPLOAD.append(cuda.pinned_array(total + total // 4, np.uint8))  # headroom for slightly larger calls
    host = _UPLOAD[0]
    for a, off in zip(arrays, offsets):
        _copy_parallel(a.reshape(-1).view(np.uint8), host[off:off + a.nbytes])
    d = dest(total) if dest is not None else cuda.device_array(total, np.uint8)
    d[:total].copy_to_device(host[:total])
    return [d[off:off + a.nbytes].view(a.dtype).reshape(a.shape) for a, off in zip(arrays, offsets)]


_GROUPED_WORK = _Workspace()  # the grouped selector's batch buffers, shared by every Index (one search at a time)


def work_table_empty():
    """A (1, 1) int64 device array: tells the fused kernel to binary-search instead."""
    return cuda.to_device(np.zeros((1, 1), np.int64))


def merge_plan(lists_per_group: np.ndarray, fan: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Levels of a within-group merge: each level maps output list j to input lists
    [in_lo[j], in_hi[j]) (at most ``fan``, all of one group). Returns [(in_lo, in_hi, counts)]
    until every group has one list (counts: lists per group after the level)."""
    levels = []
    counts = lists_per_group.astype(np.int64)
    while counts.max(initial=1) > 1:
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        new = (counts + fan - 1) // fan
        lo, hi = [], []
        for g in range(counts.size):
            for j in range(new[g]):
                a = starts[g] + j * fan
                lo.append(a)
                hi.append(min(a + fan, starts[g] + counts[g]))
        levels.append((np.array(lo, np.int64), np.array(hi, np.int64), new))
        counts = new
    return levels


def topk_grouped_cuda(index: Index, Q, k, codes, group_ptr, self_doc, pad_last, out, docs, batch_size, quiet, geom,
                      stats: dict | None = None, host_work=None):
    """Host driver of the grouped GPU pipeline: one upload of the queries, per batch one fused
    accumulate+select launch (grid: segments x queries), merge launches only for groups spanning
    several segments, one finishing launch, one copy of the batch's scores into ``out`` (and of
    the documents when wanted), through pinned staging buffers (copy_back). Kernels run on one
    stream and copies on another, so batch i is copied back while batch i+1 is computed (on a
    real device at least geom.pipeline batches when there are enough queries). host_work: called
    once after the first batch's launches, while the device computes. stats["stages"] (ms):
    host_prep, index_upload (first call on an Index), query_upload (CUDA events), kernels (CUDA
    events, all batches), copy_back and host_work (host wall time, overlapped with kernels)."""
    from .search import grouped_query_info

    stats = {} if stats is None else stats
    events = []  # (stage, start event, end event)

    def mark(stage):
        e = cuda.event()
        e.record()
        events.append((stage, e))

    t0 = time.perf_counter()
    n_q, n_groups, width = out.shape
    n_m = codes.size
    mark("start")
    fresh = "sorted" not in index.device_cache
    t = time.perf_counter()
    index.cpu()  # the postings, built on the host once per Index (timed apart from the upload)
    index_build_s = time.perf_counter() - t
    packed = bool(getattr(geom, "packed_upload", False)) and Q.nnz > 0
    dev = sorted_index(index, packed)
    mark("index_upload")
    t = time.perf_counter()
    scale, qn, dn = grouped_query_info(index, Q, codes, self_doc)
    query_info_s = time.perf_counter() - t
    qinfo = np.empty((n_q, 3 + n_m), np.float64)
    qinfo[:, 0:2] = scale.T
    qinfo[:, 2] = self_doc
    qinfo[:, 3:] = qn.T
    key = tuple(int(c) for c in codes)
    if key not in dev.dn:
        dev.dn[key] = cuda.to_device(dn)
    d_dn = dev.dn[key]
    indptr, indices, data = csr_arrays(Q)
    if packed:  # queries in one pinned transfer into a reused workspace buffer
        d_qptr, d_qind, d_qdat, d_qinfo, d_codes = upload_packed(
            (indptr, indices, data, qinfo, codes.astype(np.int64)),
            lambda nbytes: _GROUPED_WORK.get("upload", (nbytes,), np.uint8))
    else:
        d_qptr = cuda.to_device(indptr)
        d_qind = cuda.to_device(indices if indices.size else np.zeros(1, np.int32))
        d_qdat = cuda.to_device(data if data.size else np.zeros(1, np.float32))
        d_qinfo = cuda.to_device(qinfo)
        d_codes = cuda.to_device(codes.astype(np.int64))
    sizes = np.diff(group_ptr)
    block, items, cap = scoring.grouped_geometry(k, int(sizes.max(initial=1)), geom.group_block, geom.group_items)
    seg_len = block * items
    per_group = np.maximum(1, (sizes + seg_len - 1) // seg_len)
    seg_range = np.empty((int(per_group.sum()), 2), np.int64)
    at = 0
    for g in range(n_groups):
        for j in range(per_group[g]):
            lo = group_ptr[g] + j * seg_len
            seg_range[at] = (lo, min(lo + seg_len, group_ptr[g + 1]))
            at += 1
    n_seg = seg_range.shape[0]
    d_seg = cuda.to_device(seg_range)
    # where each term's list enters each segment, computed once (unless the table is too large:
    # then the fused kernel binary-searches)
    table_bytes = 8 * index.n_terms * (n_seg + 1)
    if 0 < table_bytes <= geom.segment_table_bytes and index.n_terms > 0:
        bounds = np.append(seg_range[:, 0], index.n_docs).astype(np.int64)
        tkey = ("table", bounds.tobytes())
        if dev.tables.get("key") != tkey:
            dev.tables.clear()
            table = cuda.device_array((index.n_terms, n_seg + 1), np.int64)
            n_el = table.size
            sb = geom.build_block
            scoring.segment_offsets[min(_blocks(n_el, sb), 65535 * 4), sb](dev.term_ptr, dev.post_doc,
                                                                             cuda.to_device(bounds), table)
            dev.tables.update(key=tkey, table=table)
        d_table = dev.tables["table"]
    else:
        d_table = work_table_empty()
    fan = max(2, geom.merge_width // _next_pow2(k))
    plan = merge_plan(per_group, fan)
    d_plan = [(cuda.to_device(lo), cuda.to_device(hi), lo.size) for lo, hi, _ in plan]
    merge_width = _next_pow2(min(fan, int(per_group.max(initial=1))) * k)  # the most lists one block merges
    select = scoring.grouped_topk_kernel(block, items, cap, geom.group_max_registers, bool(geom.group_counting))
    merge = scoring.merge_lists_kernel(geom.merge_block, merge_width) if plan else None
    mark("query_upload")
    host_prep = time.perf_counter() - t0
    want_docs = docs.shape[0] > 0
    # device memory per query: segment lists (+ merge levels) 2 x 12 B, scores and documents
    # twice (two batches in flight: one being copied back while the next is computed)
    per_query = 24 * n_seg * n_m * k + 2 * (4 * n_groups * width + (8 * n_groups * n_m * k if want_docs else 0))
    if batch_size:
        rows = max(1, min(int(batch_size), n_q, 65535))
    else:
        mem = device_memory()
        rows = n_q if mem is None else int(ROWS_SHARE * mem[0] // max(per_query, 1))
        rows = max(1, min(n_q, 65535, rows if mem is not None else SIM_BATCH))
        if mem is not None and geom.pipeline > 1 and n_q >= 2 * geom.pipeline_min_rows:
            # at least ``pipeline`` batches, so that copying one back overlaps computing the next
            rows = min(rows, max(geom.pipeline_min_rows, -(-n_q // geom.pipeline)))
    stats.update(batch_size=rows, segments=n_seg, geometry=(block, items), merge_levels=len(plan),
                 index_bytes=dev.nbytes, rows_bytes=rows * per_query)
    work = _GROUPED_WORK
    fb = geom.finish_block
    compute = cuda.stream()  # kernels; the copy stream waits for a batch's event, not for later kernels
    copy = cuda.stream()
    kernel_events = []  # (start, end) of each batch's kernels on the compute stream
    copy_s = 0.0
    host_work_s = 0.0
    batches = list(range(0, n_q, rows))
    pending = None  # (done event, device scores, device docs, lo, hi) of the batch to copy back

    def drain(item):
        nonlocal copy_s
        t = time.perf_counter()
        done, d_out, d_docs, lo, hi = item
        done.wait(copy)
        copy_back(d_out, out[lo:hi], geom.staging_bytes, copy)
        if want_docs:
            d_docs.copy_to_host(docs[lo:hi], stream=copy)
            copy.synchronize()
        copy_s += time.perf_counter() - t

    with progress(len(batches) if len(batches) > 1 else 0, "scoring (cuda)", quiet) as bar:
        for i, lo in enumerate(batches):
            hi = min(n_q, lo + rows)
            nb = hi - lo
            start = cuda.event()
            start.record(compute)
            l_doc = work.get("seg_doc", (nb, n_seg, n_m, k), np.int32)
            l_key = work.get("seg_key", (nb, n_seg, n_m, k), np.float64)
            select[(n_seg, nb), block, compute](d_qptr, d_qind, d_qdat, lo, d_qinfo, dev.term_ptr, dev.post_doc,
                                                dev.post_w, d_dn, d_seg, d_table, d_codes, k, l_doc, l_key)
            for level, (d_lo, d_hi, n_out) in enumerate(d_plan):
                o_doc = work.get(f"merge_doc{level % 2}", (nb, n_out, n_m, k), np.int32)
                o_key = work.get(f"merge_key{level % 2}", (nb, n_out, n_m, k), np.float64)
                merge[(n_out, nb, n_m), geom.merge_block, compute](l_doc, l_key, d_lo, d_hi, k, o_doc, o_key)
                l_doc, l_key = o_doc, o_key
            d_out = work.get(f"out{i % 2}", (nb, n_groups, width), np.float32)
            d_docs = work.get(f"docs{i % 2}", (nb, n_groups, n_m, k) if want_docs else (1, 1, 1, 1), np.int64)
            n_el = nb * n_groups * width
            scoring.grouped_finish[min(_blocks(n_el, fb), 65535 * 4), fb, compute](
                l_doc, l_key, d_qinfo, lo, d_codes, int(pad_last), int(want_docs), d_out, d_docs)
            done = cuda.event()
            done.record(compute)
            kernel_events.append((start, done))
            if i == 0 and host_work is not None:
                t = time.perf_counter()
                host_work()  # the device computes the first batch meanwhile
                host_work_s = time.perf_counter() - t
            if pending is not None:
                drain(pending)  # batch i-1 comes back while batch i is computed
                bar.update(1)
            pending = (done, d_out, d_docs, lo, hi)
        drain(pending)
        bar.update(1)
    cuda.synchronize()
    mark("end")
    stages = {"host_prep_ms": 1e3 * host_prep, "index_build_ms": 1e3 * index_build_s, "query_info_ms": 1e3 * query_info_s}
    for (_, a), (stage, b) in zip(events[:-2], events[1:-1]):
        if stage == "index_upload" and not fresh:
            continue
        stages[stage + "_ms"] = _elapsed_ms(a, b)
    stages["kernels_ms"] = sum(_elapsed_ms(a, b) for a, b in kernel_events)  # scoring, selection, merge, finish
    stages["batches"] = len(batches)
    stages["copy_back_ms"] = 1e3 * copy_s  # host wall time, overlapped with the next batch's kernels
    if host_work is not None:
        stages["host_work_ms"] = 1e3 * host_work_s  # overlapped with the first batch's kernels
    stats["stages"] = stages
    work.release(larger_than=1 << 30)
    stats["seconds"] = time.perf_counter() - t0


def _elapsed_ms(a, b) -> float:
    try:
        return float(a.elapsed_time(b))
    except Exception:  # the simulator's events do not time
        return 0.0


_STAGING: list = []  # two pinned host buffers, kept for the process (pinning memory is slow)


def _staging(nbytes: int):
    if not _STAGING or _STAGING[0].nbytes < nbytes:
        _STAGING.clear()
        _STAGING.extend(cuda.pinned_array(nbytes, np.uint8) for _ in range(2))
    return _STAGING


@numba.njit(parallel=True, cache=True)
def _copy_parallel(src, dst):
    """dst[:] = src[:] (1-D, same length) in parallel blocks of 64 KiB."""
    n = src.shape[0]
    step = 16384
    for b in numba.prange((n + step - 1) // step):
        for i in range(b * step, min(n, (b + 1) * step)):
            dst[i] = src[i]


def copy_back(d_arr, host, staging_bytes: int, stream=None) -> None:
    """Copy a C-contiguous device array into a C-contiguous host array of the same shape: chunks
    of rows go device -> pinned staging buffer asynchronously (on a stream; full PCIe speed) while
    the previous chunk is copied staging -> host by every core (which also takes the first-touch
    page faults of a fresh host array in parallel). staging_bytes <= 0: one plain copy_to_host."""
    n = d_arr.shape[0]
    row_bytes = max(1, host.nbytes // max(n, 1))
    stream = stream or cuda.stream()
    if staging_bytes <= 0 or host.nbytes <= row_bytes or n == 0:
        d_arr.copy_to_host(host, stream=stream)
        stream.synchronize()
        return
    rows = max(1, staging_bytes // row_bytes)
    bufs = _staging(rows * row_bytes)
    pending = None  # (event, staging view, host view) of the chunk in flight
    for ci, r0 in enumerate(range(0, n, rows)):
        r1 = min(n, r0 + rows)
        view = bufs[ci % 2][:(r1 - r0) * row_bytes].view(host.dtype).reshape((r1 - r0,) + host.shape[1:])
        d_arr[r0:r1].copy_to_host(view, stream=stream)
        done = cuda.event()
        done.record(stream)
        if pending is not None:
            pending[0].synchronize()
            _copy_parallel(pending[1].reshape(-1), pending[2].reshape(-1))
        pending = (done, view, host[r0:r1])
    pending[0].synchronize()
    _copy_parallel(pending[1].reshape(-1), pending[2].reshape(-1))
