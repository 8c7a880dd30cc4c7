"""The engine's grouped selector on a CUDA device: the k best documents of every group, for
every query and several metrics in one pass (gputext.engine.search.search_topk_grouped).

One upload of the queries, per batch one fused accumulate+select launch (grid: segments x
queries), merge launches only for groups spanning several segments, one finishing launch, one
copy of the batch's scores (and documents when wanted) back through pinned staging buffers.
Kernels run on one stream and copies on another, so batch i is copied back while batch i+1 is
computed. Buffers, pinned memory and streams come from gputext.device.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..device.launch import blocks, next_pow2
from ..device.memory import resources
from ..device.timer import StageTimer, elapsed_ms
from ..io.corpus import csr_arrays
from ..kernels import grouped
from ..progress import progress
from .cuda_backend import ROWS_SHARE, SIM_BATCH
from .device_index import sorted_postings_device
from .index import Index
from .query import grouped_query_info
from .report import SearchReport


@dataclass
class SortedIndex:
    """The index's postings, lists sorted by document, on the device (built there, or the host's
    build uploaded): the grouped selector finds each segment's part of a list by binary search."""

    term_ptr: object
    post_doc: object
    post_w: object
    nbytes: int
    dn: dict  # tuple of metric codes -> device float64 (n_metrics, n_docs)
    tables: dict  # the last segment table: key (segment bounds) and device int64 (n_terms, n_seg+1)


def sorted_index(index: Index, geom, packed: bool = False) -> SortedIndex:
    """The index's sorted postings on the device (made once per Index): built there
    (device_index.sorted_postings_device) unless the host has them already or the device build
    does not fit, else the host's build uploaded; packed: its three arrays in one transfer from a
    pinned buffer into one allocation (Resources.upload_packed)."""
    from numba import cuda

    cached = index.device_cache.get("sorted")
    if cached is None:
        nbytes = 8 * (index.n_terms + 1) + 8 * max(index.nnz, 1)
        built = None if index.host_postings is not None else \
            sorted_postings_device(*csr_arrays(index.X), index.n_terms, geom)
        if built is not None:
            cached = SortedIndex(*built[:3], nbytes, {}, {})
        else:
            p = index.cpu()
            arrays = (p.term_ptr, p.post_doc if p.post_doc.size else np.zeros(1, np.int32),
                      p.post_w if p.post_w.size else np.zeros(1, np.float32))
            d = resources().upload_packed(arrays) if packed else [cuda.to_device(a) for a in arrays]
            cached = SortedIndex(*d, nbytes, {}, {})
        index.device_cache["sorted"] = cached
    return cached


def work_table_empty():
    """A (1, 1) int64 device array: tells the fused kernel to binary-search instead."""
    from numba import cuda
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


def segment_ranges(group_ptr: np.ndarray, seg_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Segments of at most seg_len documents, none spanning two groups: (per_group int64 (G,),
    ranges int64 (n_seg, 2) of [lo, hi) document ranges)."""
    sizes = np.diff(group_ptr)
    per_group = np.maximum(1, (sizes + seg_len - 1) // seg_len)
    seg_range = np.empty((int(per_group.sum()), 2), np.int64)
    at = 0
    for g in range(sizes.size):
        for j in range(per_group[g]):
            lo = group_ptr[g] + j * seg_len
            seg_range[at] = (lo, min(lo + seg_len, group_ptr[g + 1]))
            at += 1
    return per_group, seg_range


def segment_table(index: Index, dev: SortedIndex, seg_range: np.ndarray, geom):
    """Where each term's list enters each segment (int64 (n_terms, n_seg+1)), computed once per
    segment layout; an empty (1, 1) table (the kernel then binary-searches) when too large."""
    from numba import cuda

    n_seg = seg_range.shape[0]
    table_bytes = 8 * index.n_terms * (n_seg + 1)
    if not (0 < table_bytes <= geom.segment_table_bytes and index.n_terms > 0):
        return work_table_empty()
    bounds = np.append(seg_range[:, 0], index.n_docs).astype(np.int64)
    tkey = ("table", bounds.tobytes())
    if dev.tables.get("key") != tkey:
        dev.tables.clear()
        table = cuda.device_array((index.n_terms, n_seg + 1), np.int64)
        sb = geom.build_block
        grouped.segment_offsets[min(blocks(table.size, sb), 65535 * 4), sb](dev.term_ptr, dev.post_doc,
                                                                            cuda.to_device(bounds), table)
        dev.tables.update(key=tkey, table=table)
    return dev.tables["table"]


def upload_queries(Q, qinfo: np.ndarray, codes: np.ndarray, packed: bool) -> tuple:
    """(qptr, qind, qdat, qinfo, codes) on the device: one pinned transfer into the device's
    workspace when packed, else five plain copies."""
    from numba import cuda

    indptr, indices, data = csr_arrays(Q)
    if packed:
        res = resources()
        return tuple(res.upload_packed((indptr, indices, data, qinfo, codes.astype(np.int64)), into=res.workspace,
                                       name="upload"))
    return (cuda.to_device(indptr), cuda.to_device(indices if indices.size else np.zeros(1, np.int32)),
            cuda.to_device(data if data.size else np.zeros(1, np.float32)), cuda.to_device(qinfo),
            cuda.to_device(codes.astype(np.int64)))


def grouped_rows(n_q: int, per_query: int, batch_size, geom) -> int:
    """Queries per batch: ROWS_SHARE of free memory; on a real device at least geom.pipeline
    batches of >= geom.pipeline_min_rows queries, so copying one back overlaps computing the next."""
    res = resources()
    if batch_size:
        return max(1, min(int(batch_size), n_q, 65535))
    if res.simulator:
        return max(1, min(n_q, 65535, SIM_BATCH))
    rows = max(1, min(n_q, 65535, int(res.share(ROWS_SHARE) // max(per_query, 1))))
    if geom.pipeline > 1 and n_q >= 2 * geom.pipeline_min_rows:
        rows = min(rows, max(geom.pipeline_min_rows, -(-n_q // geom.pipeline)))
    return rows


class _GroupedRun:
    """The device state of one grouped search: uploads, segments, kernels and merge plan."""

    def __init__(self, index: Index, Q, k, codes, group_ptr, self_doc, geom, timer: StageTimer):
        from numba import cuda

        n_q, n_m = Q.shape[0], codes.size
        self.fresh = "sorted" not in index.device_cache
        t = time.perf_counter()
        packed = bool(getattr(geom, "packed_upload", False)) and Q.nnz > 0
        self.dev = dev = sorted_index(index, geom, packed)  # built on the device once per Index
        self.index_build_s = time.perf_counter() - t
        timer.mark("index_upload")
        t = time.perf_counter()
        scale, qn, dn = grouped_query_info(index, Q, codes, self_doc)
        self.query_info_s = time.perf_counter() - t
        qinfo = np.empty((n_q, 3 + n_m), np.float64)
        qinfo[:, 0:2] = scale.T
        qinfo[:, 2] = self_doc
        qinfo[:, 3:] = qn.T
        key = tuple(int(c) for c in codes)
        if key not in dev.dn:
            dev.dn[key] = cuda.to_device(dn)
        self.d_dn = dev.dn[key]
        self.d_qptr, self.d_qind, self.d_qdat, self.d_qinfo, self.d_codes = upload_queries(Q, qinfo, codes, packed)
        sizes = np.diff(group_ptr)
        self.block, items, cap = grouped.grouped_geometry(k, int(sizes.max(initial=1)), geom.group_block,
                                                          geom.group_items)
        self.items = items
        self.per_group, seg_range = segment_ranges(group_ptr, self.block * items)
        self.n_seg = seg_range.shape[0]
        self.d_seg = cuda.to_device(seg_range)
        self.d_table = segment_table(index, dev, seg_range, geom)
        fan = max(2, geom.merge_width // next_pow2(k))
        self.plan = merge_plan(self.per_group, fan)
        self.d_plan = [(cuda.to_device(lo), cuda.to_device(hi), lo.size) for lo, hi, _ in self.plan]
        merge_width = next_pow2(min(fan, int(self.per_group.max(initial=1))) * k)  # the most lists one block merges
        self.select = grouped.grouped_topk_kernel(self.block, items, cap, geom.group_max_registers,
                                                  bool(geom.group_counting))
        self.merge = grouped.merge_lists_kernel(geom.merge_block, merge_width) if self.plan else None
        timer.mark("query_upload")

    def launch_batch(self, i, lo, hi, k, n_m, n_groups, width, pad_last, want_docs, geom, stream):
        """Queue batch [lo, hi)'s kernels on ``stream``; returns its (scores, docs) device arrays."""
        work = resources().workspace
        nb = hi - lo
        l_doc = work.get("seg_doc", (nb, self.n_seg, n_m, k), np.int32)
        l_key = work.get("seg_key", (nb, self.n_seg, n_m, k), np.float64)
        dev = self.dev
        self.select[(self.n_seg, nb), self.block, stream](
            self.d_qptr, self.d_qind, self.d_qdat, lo, self.d_qinfo, dev.term_ptr, dev.post_doc, dev.post_w,
            self.d_dn, self.d_seg, self.d_table, self.d_codes, k, l_doc, l_key)
        for level, (d_lo, d_hi, n_out) in enumerate(self.d_plan):
            o_doc = work.get(f"merge_doc{level % 2}", (nb, n_out, n_m, k), np.int32)
            o_key = work.get(f"merge_key{level % 2}", (nb, n_out, n_m, k), np.float64)
            self.merge[(n_out, nb, n_m), geom.merge_block, stream](l_doc, l_key, d_lo, d_hi, k, o_doc, o_key)
            l_doc, l_key = o_doc, o_key
        d_out = work.get(f"out{i % 2}", (nb, n_groups, width), np.float32)
        d_docs = work.get(f"docs{i % 2}", (nb, n_groups, n_m, k) if want_docs else (1, 1, 1, 1), np.int64)
        fb = geom.finish_block
        grouped.grouped_finish[min(blocks(nb * n_groups * width, fb), 65535 * 4), fb, stream](
            l_doc, l_key, self.d_qinfo, lo, self.d_codes, int(pad_last), int(want_docs), d_out, d_docs)
        return d_out, d_docs


def topk_grouped_cuda(index: Index, Q, k, codes, group_ptr, self_doc, pad_last, out, docs, batch_size, quiet, geom,
                      report: SearchReport, host_work=None):
    """Host driver of the grouped GPU pipeline (module docstring); fills ``out`` (and ``docs``
    when it has rows) in place. host_work: called once after the first batch's launches, while
    the device computes. report.stages (ms): host_prep, index_build (first call on an Index: the
    sorted lists built on the device, or on the host and uploaded; host wall time), index_upload,
    query_upload (CUDA events), kernels (CUDA events, all batches), copy_back and host_work (host
    wall time, overlapped with kernels)."""
    from numba import cuda

    res = resources()
    t0 = time.perf_counter()
    n_q, n_groups, width = out.shape
    n_m = codes.size
    timer = StageTimer(on=True)
    run = _GroupedRun(index, Q, k, codes, group_ptr, self_doc, geom, timer)
    host_prep = time.perf_counter() - t0
    want_docs = docs.shape[0] > 0
    # device memory per query: segment lists (+ merge levels) 2 x 12 B, scores and documents
    # twice (two batches in flight: one being copied back while the next is computed)
    per_query = 24 * run.n_seg * n_m * k + 2 * (4 * n_groups * width + (8 * n_groups * n_m * k if want_docs else 0))
    rows = grouped_rows(n_q, per_query, batch_size, geom)
    report.batch_size, report.segments, report.geometry = rows, run.n_seg, (run.block, run.items)
    report.merge_levels, report.index_bytes, report.rows_bytes = len(run.plan), run.dev.nbytes, rows * per_query
    compute = res.stream("grouped_compute")  # kernels; the copy stream waits for a batch's event
    copy = res.stream("grouped_copy")
    kernel_events = []  # (start, end) of each batch's kernels on the compute stream
    spent = {"copy": 0.0, "host_work": 0.0}
    batches = list(range(0, n_q, rows))
    pending = None  # (done event, device scores, device docs, lo, hi) of the batch to copy back

    def drain(item):
        t = time.perf_counter()
        done, d_out, d_docs, lo, hi = item
        done.wait(copy)
        res.copy_back(d_out, out[lo:hi], geom.staging_bytes, copy)
        if want_docs:
            d_docs.copy_to_host(docs[lo:hi], stream=copy)
            copy.synchronize()
        spent["copy"] += time.perf_counter() - t

    with progress(len(batches) if len(batches) > 1 else 0, "scoring (cuda)", quiet) as bar:
        for i, lo in enumerate(batches):
            hi = min(n_q, lo + rows)
            start = cuda.event()
            start.record(compute)
            d_out, d_docs = run.launch_batch(i, lo, hi, k, n_m, n_groups, width, pad_last, want_docs, geom, compute)
            done = cuda.event()
            done.record(compute)
            kernel_events.append((start, done))
            if i == 0 and host_work is not None:
                t = time.perf_counter()
                host_work()  # the device computes the first batch meanwhile
                spent["host_work"] = time.perf_counter() - t
            if pending is not None:
                drain(pending)  # batch i-1 comes back while batch i is computed
                bar.update(1)
            pending = (done, d_out, d_docs, lo, hi)
        drain(pending)
        bar.update(1)
    cuda.synchronize()
    stages = {"host_prep_ms": 1e3 * host_prep, "index_build_ms": 1e3 * run.index_build_s,
              "query_info_ms": 1e3 * run.query_info_s}
    for stage, ms in timer.device_ms().items():
        if stage != "index_upload" or run.fresh:
            stages[stage + "_ms"] = ms
    stages["kernels_ms"] = sum(elapsed_ms(a, b) or 0.0 for a, b in kernel_events)  # scoring, selection, merge, finish
    stages["batches"] = len(batches)
    stages["copy_back_ms"] = 1e3 * spent["copy"]  # host wall time, overlapped with the next batch's kernels
    if host_work is not None:
        stages["host_work_ms"] = 1e3 * spent["host_work"]  # overlapped with the first batch's kernels
    report.stages = stages
    res.workspace.release(larger_than=1 << 30)
    report.seconds = time.perf_counter() - t0
