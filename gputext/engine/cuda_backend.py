"""The engine on a CUDA device: index shards on the device, queries scored into dense
fixed-point score rows, then a selector (gputext.kernels.scoring for the kernels).

Memory plan (reported in the SearchReport): an index shard takes 8 bytes a posting (doc int32 + weight
float32) + 8 a term + 16 a document, and 16 bytes a posting while the device builds it (the CSR
rows are on the device then; where that does not fit, the host builds the lists and uploads its 8:
device_index.build_bytes, sorted_postings_device),
plus, on sorted lists, its block-starts table (DeviceShard.block_table: at most half a byte a posting,
within the room the shares below leave);
score rows take 8 bytes per (query, document) for the queries scored
at once: a tile of a few queries per stream for the top-k (TopkPlan), a batch within 30% of the
free memory for the threshold search (QueryBatch). Shards get up to 45% of the free device
memory, so a corpus larger than the device is indexed shard by shard, each shard's top-k lists
merged on the host (exact: keys are the same float64 values whichever shard a document is in).

Per-call cost: the top-k pipeline of a shard is a ``TopkPlan`` made once per (k, metric, tile
rows, lanes, chunk) and kept on the shard: its launches are marshalled once
(gputext.device.Launch), a chunk's inputs go up in one pinned transfer and its results come back
in one, so a single query costs a few driver calls of host time (accumulate, select, merges, two
copies, one synchronisation). Device memory and buffers come from gputext.device (workspaces,
pinned buffers, shares).
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from .. import compile_ahead
from ..device.launch import DriverCalls, Launch, blocks, device_address, next_pow2
from ..device.memory import packed_layout, resources
from ..io.corpus import csr_arrays, csr_rows
from ..kernels import blocked, scoring, unit_select
from ..progress import progress
from .index import Index
from .device_index import DeviceShard, build_bytes, build_shard, plan_shards
from .merge import merge_topk
from .report import SearchReport

ROWS_SHARE = 0.30
SIM_BATCH = 64  # the simulator has no memory to plan against
RANK_MERGE_ENTRIES = 3840  # the rank merge's shared lists (12 B an entry) within 46 KB
SMALL_BATCH = 32  # rows top-k: batches below this merge in narrower groups (Geometry.merge_width_small)
STATIC_SHARED = 48 * 1024  # numba's static shared arrays: at most 48 KB a block
UNIT_BLOCK_BATCH = 256  # unit select threads (Geometry.unit_block None): a batch's selects overlap other tiles' work
UNIT_BLOCK_LATENCY = 1024  # ... a search of one lane-full of tiles (one query) waits on its select
SIM_UNIT_BLOCK = 32  # ... in the simulator (about 2 ms a simulated thread)
RANGES_BLOCK = 256  # threads a block of kernels.blocked.block_ranges_kernel
RANGES_SEGMENTS = 128  # (segment, document block) ranges a lane holds at first, per query of a tile


L2_ROWS_SHARE = 2 / 3  # of the device's L2: the score rows of the tiles in flight (every lane's)
GRID_BLOCKS_PER_SM = 16  # grid tiles: a tile's accumulation blocks a multiprocessor (four waves of four) ...
GRID_ROWS_MIN = 16  # ... with at least this many queries a tile (they read each posting range together) ...
GRID_ROWS_MAX = 32  # ... and at most this many


def l2_shard_docs(geom) -> int:
    """Documents per resident shard of the rows top-k (0: do not split): Geometry.shard_docs, or
    for shard_docs=None (the default) as many as keep the int64 score rows of Geometry.tile_lanes
    one-query tiles within L2_ROWS_SHARE of the device's L2, so that the accumulation's atomics
    and the select stay in L2 instead of going to HBM (one row at 10^7 documents is 80 MB against
    the H100's 50 MB of L2): 1.04 million documents on an H100 at 4 lanes. Measured on an H100
    (bench_knn corpus at 10^7, k = 30, 10,000 queries, identical results): 2026-11-26, one batch
    of score rows, 7.00 s in shards of 3.1 million documents against 12.69 s whole; 2026-11-27
    (tiles on 4 lanes), 6.00 s in shards of 1 million against 6.40 s in shards of 3.1 million and
    6.87 s for 3.1 million without tiles; at 10^6 documents the whole index (0.569 s) beat shards
    of 500,000 (0.688 s), which the rule gives too. One query keeps the whole index
    (Geometry.shard_min_queries: at 10^7 1.69 ms whole against 2.07 ms split, 2026-11-26).
    With the shared accumulation (Geometry.shared_accumulate on sorted lists, the default) the
    rows take plain stores instead of atomics and the index stays whole: H100 2026-11-27 04:23,
    10^7 x 10,000 in 4.85 s whole against 5.23 s in shards of 1M, 4.93 s of 2.5M, 4.90 s of 5M."""
    if geom.shard_docs is not None and geom.shard_docs >= 0:
        return int(geom.shard_docs)
    if geom.sorted_postings and shared_docs(geom, 1):
        return 0  # the shared accumulation stores whole rows: L2-sized shards no longer pay (below)
    l2 = resources().l2_bytes
    return int(l2 * L2_ROWS_SHARE) // (8 * max(1, geom.tile_lanes)) if l2 else 0


def split_shards(index: Index, geom, report: SearchReport, build: bool = True):
    """The index cut into equal document ranges of at most l2_shard_docs(geom), kept on the Index
    (key ("shards", n)) and made when ``build``; None when one shard is enough, when they are not
    made yet and ``build`` is false, or when the index does not fit the device as a whole
    (plan_shards then streams it). Making them drops the whole-index shard: the device holds
    one copy of the index, and later searches of any size use the split one."""
    cap = l2_shard_docs(geom)
    if cap <= 0 or index.n_docs <= cap:
        return None
    n = -(-index.n_docs // cap)
    key = ("shards", n)
    shards = index.device_cache.get(key)
    if shards is None:
        if not build or len(plan_shards(index, build_bytes(geom))) > 1:
            return None
        index.device_cache.pop("shard", None)
        cuts = [index.n_docs * i // n for i in range(n + 1)]
        shards = index.device_cache[key] = [build_shard(index.X, lo, hi, geom) for lo, hi in zip(cuts, cuts[1:])]
    report.shards = n
    report.index_bytes = max(s.nbytes for s in shards)
    return shards


def device_shards(index: Index, geom, report: SearchReport, split: bool = False):
    """Yield device shards; a single shard is kept on the Index for later searches. split: make
    the rows top-k's resident shards of at most l2_shard_docs documents each (split_shards);
    once made, every search of the index uses them."""
    shards = split_shards(index, geom, report, build=split)
    if shards is not None:
        yield from shards
        return
    cached = index.device_cache.get("shard")
    if cached is not None:
        report.shards = 1
        report.index_bytes = cached.nbytes
        yield cached
        return
    ranges = plan_shards(index, build_bytes(geom))
    report.shards = len(ranges)
    if len(ranges) == 1:
        cached = build_shard(index.X, 0, index.n_docs, geom, index.host_postings)
        index.device_cache["shard"] = cached
        report.index_bytes = cached.nbytes
        yield cached
        return
    for lo, hi in ranges:
        shard = build_shard(index.X, lo, hi, geom)
        report.index_bytes = max(report.index_bytes or 0, shard.nbytes)
        yield shard
        del shard


def batch_rows(shard: DeviceShard, n_queries: int, batch_size: int | None, per_query_extra: int) -> int:
    """Queries per batch: score rows (8 B a document) + per_query_extra bytes within ROWS_SHARE."""
    return shard.res.rows_that_fit(n_queries, 8 * shard.n_docs + per_query_extra, ROWS_SHARE, batch_size,
                                   simulator_rows=SIM_BATCH)


def batch_inputs(indptr, indices, data, lo, hi, shard: DeviceShard, scale, qn, self_doc, after=None):
    """Host inputs of a batch of queries [lo, hi) against a shard: the one tile of
    kernels.scoring.tile_one in query order, i.e. seg_off int64 (L+1,) (prefix sum of the
    segments' posting counts), seg int32 (L, 2) = (term, query) of each segment, weights float32
    (L,), qinfo float64 (n, 4) = (scale, norm term, document to leave out, only documents after
    this one), all shard-local. Returns (seg_off, seg, weights, qinfo, postings)."""
    q_ptr, q_ind, q_dat = csr_rows(indptr, indices, data, lo, hi)
    n, L = hi - lo, len(q_ind)
    seg_off, seg = np.empty(L + 1, np.int64), np.empty((L, 2), np.int32)
    weights, qinfo = np.empty(L, np.float32), np.empty((n, 4), np.float64)
    postings = scoring.tile_one(0, q_ptr, q_ind, q_dat, shard.df, max(n, 1), False, scale[lo:hi], qn[lo:hi],
                                self_doc[lo:hi], shard.doc_lo, shard.doc_hi, seg_off, seg, weights, qinfo)
    qinfo[:, 3] = -1 if after is None else np.maximum(after[lo:hi] - shard.doc_lo, -1)
    return seg_off, seg, weights, qinfo, int(postings)


class QueryBatch:
    """One batch of queries on the device: its inputs uploaded in one pinned transfer and its
    postings accumulated into zeroed score rows (``acc``, from the shard's workspace)."""

    def __init__(self, Q: sp.csr_matrix, lo: int, hi: int, shard: DeviceShard, scale, qn, self_doc, code, geom,
                 after=None, arrays=None):
        indptr, indices, data = arrays if arrays is not None else csr_arrays(Q)
        seg_off, seg, weights, qinfo, self.postings = batch_inputs(indptr, indices, data, lo, hi, shard, scale, qn,
                                                                   self_doc, after)
        self.n = hi - lo
        d_off, d_seg, d_w, self.qinfo = resources().upload_packed(
            (seg_off, seg if seg.size else np.zeros((1, 2), np.int32),
             weights if weights.size else np.zeros(1, np.float32), qinfo), into=shard.work, name="batch_upload")
        if not seg.size:
            d_seg = d_seg[:0]
        self.dn = shard.dn(code, geom.build_block)
        # score rows: zero when allocated, and the selectors re-zero every entry they read; a batch
        # that never reached its selector (an interrupted search) leaves them dirty
        self.acc = shard.buffer("acc", (self.n * shard.n_docs,), np.int64, zeroed=True)
        if shard.rows_dirty:
            shard.zero_rows(self.acc, geom.accumulate_block)
        shard.rows_dirty = True
        if self.postings:
            b = geom.accumulate_block
            scoring.accumulate_kernel(b, geom.accumulate_items)[blocks(self.postings, b * geom.accumulate_items), b](
                d_off, d_seg, d_w, self.qinfo, shard.term_ptr, shard.post_doc, shard.post_w, code, shard.n_docs,
                self.acc, 0, 0, d_seg.shape[0], 0)


def shared_docs(geom, rows: int) -> int:
    """Documents per block of the shared-memory accumulation (kernels.blocked.rows_accumulate_kernel)
    for tiles of ``rows`` queries: Geometry.shared_accumulate int64 counters (within the 48 KB
    of static shared memory with the kernel's scratch) split over the rows; 0 (the atomics of
    kernels.scoring.accumulate_kernel instead) when switched off or under Geometry.shared_min_docs.
    Only for a shard whose lists are sorted by document (DeviceShard.sorted_lists)."""
    b = geom.accumulate_block
    entries = min(int(geom.shared_accumulate), (STATIC_SHARED - blocked.rows_shared_bytes(b, 0, 0)) // 8)
    docs = entries // max(1, rows)
    return docs if entries > 0 and docs >= max(1, geom.shared_min_docs) else 0


class TopkLane:
    """One stream's part of a TopkPlan: its own score rows (``rows`` x n_docs int64; with the unit
    select float64 keys, plus the units' maxima ``rows`` x n_units) and the launches of accumulate
    and select on its stream (gputext.kernels.scoring, blocked, unit_select), with the ranges
    kernel before the accumulation when the plan is ranged (its own (document block, segment)
    range buffers, grown by grow_ranges); a tile's offsets into the chunk's inputs and lists are
    scalar arguments. Lane 0 keeps the workspace names of a single-lane plan's rows ("acc" or
    "keys")."""

    def __init__(self, plan: "TopkPlan", index: int, stream, raw: bool):
        shard, geom = plan.shard, plan.geom
        self.stream = stream
        self.acc_block, self.acc_items = geom.accumulate_block, geom.accumulate_items
        suffix = self.suffix = "" if index == 0 else str(index)
        unit = plan.unit
        if unit:  # keys rows and the units' maxima (kernels.unit_select)
            self.acc = shard.buffer("keys" + suffix, (plan.rows * shard.n_docs,), np.float64)
            ukey = shard.buffer("ukey" + suffix, (plan.rows, plan.n_units), np.float64)
            udoc = shard.buffer("udoc" + suffix, (plan.rows, plan.n_units), np.int32)
        else:
            self.acc = shard.buffer("acc" + suffix, (plan.rows * shard.n_docs,), np.int64, zeroed=True)
            ukey, udoc = plan.no_units
        # marshalled with placeholder inputs at the upload's start; each chunk points them at its own
        seg_off, seg, weights, qinfo = (plan.view(i, 0, shape)
                                        for i, shape in enumerate(plan.input_shapes(plan.rows, 1, 1)))
        docs = plan.shared_docs
        if unit:  # one block a query: its top k straight into the chunk's final lists
            select_grid, select_args = 1, (self.acc, ukey, udoc, shard.n_docs, docs, self.acc_block, unit, plan.k,
                                           plan.out_doc, plan.out_key, 0)
        else:
            select_grid, select_args = (plan.n_seg, 1), (self.acc, shard.n_docs, qinfo, plan.dn, plan.code, plan.k,
                                                         plan.seg_doc, plan.seg_key, 0, 0)
        args = (seg_off, seg, weights, qinfo, shard.term_ptr, shard.post_doc, shard.post_w, plan.code, shard.n_docs,
                self.acc, 0, 0, 1, 0)
        if index == 0:  # an empty kernel cache: a helper compiles the select, whose geometry the plan
            # decides (the manifest holds the recorded corpus's), while this process compiles the rest
            compile_ahead.submit(plan.select_kernel, select_args)
        self.ranges = None
        if docs:  # one block per document range, whatever the tile's postings
            kernel = blocked.rows_accumulate_kernel(self.acc_block, docs, 1 if plan.grid else plan.rows, unit,
                                                    plan.ranged, plan.grid)
            self.acc_grid = blocks(shard.n_docs, docs)  # document blocks (grid: times the tile's queries)
            rng = plan.no_ranges
            if plan.ranged:  # the posting ranges of every (segment, document block), by a kernel before
                rng = self._range_buffers(plan)
                self.ranges = Launch(blocked.block_ranges_kernel, 1, RANGES_BLOCK,
                                     (seg, shard.term_ptr, shard.post_doc, shard.n_docs, docs, 0, 1, *plan.table, *rng),
                                     stream=stream, raw=raw)
            args = args + (plan.dn, ukey, udoc, *plan.table, *rng)
        else:
            kernel, self.acc_grid = scoring.accumulate_kernel(self.acc_block, self.acc_items), None
        self.accumulate = Launch(kernel, 1, self.acc_block, args, stream=stream, raw=raw)
        self.select = Launch(plan.select_kernel, select_grid, plan.block, select_args, stream=stream, raw=raw)

    def launches(self) -> list:
        return [self.accumulate, self.select] + ([self.ranges] if self.ranges else [])

    def _range_buffers(self, plan: "TopkPlan") -> tuple:
        """The lane's (rng_first int64, rng_cnt int32) of (document blocks, plan.rng_cap segments)."""
        shape = (self.acc_grid, plan.rng_cap)
        return (plan.shard.buffer("rng_first" + self.suffix, shape, np.int64),
                plan.shard.buffer("rng_cnt" + self.suffix, shape, np.int32))

    def grow_ranges(self, plan: "TopkPlan") -> None:
        """Range buffers of plan.rng_cap segments a block (a tile with more segments than before),
        pointed at by the ranges kernel's and the accumulation's last two arguments."""
        for i, a in enumerate(self._range_buffers(plan)):
            self.ranges.set(len(self.ranges.args) - 2 + i, a)
            self.accumulate.set(len(self.accumulate.args) - 2 + i, a)


class TopkPlan:
    """The top-k pipeline of one shard for tiles of up to ``rows`` queries, marshalled once.

    Kernels (gputext.kernels.scoring): accumulate (a tile's postings into its score rows),
    select_topk (grid segments x queries: each segment's k best), then merge levels (groups of
    lists into one) until one list per query is left: merge_topk by rank (Geometry.merge_rank_group
    lists a group, each entry's rank by binary searches: one barrier) or, with merge_rank_group
    0, by a bitonic sort of the group in shared memory (one barrier per step; fewer than
    SMALL_BATCH rows merge in groups of merge_width_small entries).
    With the shared accumulation and Geometry.unit_select (the default on sorted lists) the
    accumulation stores keys and its units' maxima, and the select is the unit select
    (kernels.unit_select: one block a query writes its final list; no per-segment lists, no
    merges). With grid tiles (Geometry.tile_grid, the default there) a tile's accumulation is one
    launch of (its queries x document blocks) blocks, each query's blocks of one document range
    adjacent, its segments in query order (``grid``).

    A search runs in chunks of up to ``chunk`` queries, each chunk as consecutive tiles of
    ``rows`` queries dealt round-robin to ``lanes`` streams (TopkLane: each its own score rows).
    Per chunk: the inputs of every tile (kernels.scoring.tile_inputs) are packed into a pinned
    buffer and go up in one asynchronous copy; per tile, its lane runs accumulate and select back
    to back (only the tile's four offsets and two row numbers are rewritten: scalar parameter
    slots), so the select reads score rows that the accumulation just wrote (in L2 when rows x
    lanes rows fit L2_ROWS_SHARE of it) and leaves them zeroed, while the other lanes' tiles accumulate.
    The selects write every tile's per-segment lists into the chunk's list buffer; the lanes'
    streams then join lane 0's, the merge levels run once over all the chunk's rows, the final
    lists come back in one copy and the stream is synchronised once. Launches are one driver
    call each (gputext.device.Launch). In the simulator the launches go through numba's
    dispatcher on one stream.
    """

    def __init__(self, shard: DeviceShard, k: int, code: int, geom, rows: int, chunk: int, lanes: int):
        res = shard.res
        self.shard, self.geom, self.k, self.code, self.rows, self.chunk = shard, geom, k, code, rows, chunk
        # the tile's queries as the accumulation's blocks (blocked.rows_accumulate_kernel grid=True)
        self.grid = bool(shard.sorted_lists) and grid_tiles(geom, rows)
        self.term_order = bool(geom.tile_term_order) and not self.grid  # grid: each query's segments together
        self.raw = not res.simulator and getattr(geom, "fast_launch", True)
        self.block, items, cap = scoring.topk_geometry(k, geom.select_block, geom.select_items)
        self.n_seg = blocks(shard.n_docs, self.block * items)
        # shared-memory accumulation overwrites whole rows: the select leaves them as they are
        self.shared_docs = shared_docs(geom, 1 if self.grid else rows) if shard.sorted_lists else 0
        self.shared = self.shared_docs > 0
        # each (term, document block)'s posting range: the block-starts table, else searches
        self.table = shard.block_table(self.shared_docs, geom.build_block, self.shared and geom.block_table)
        self.unit = plan_unit(geom, shard.n_docs, self.shared_docs, k) if self.shared else 0
        self.n_units = blocks(shard.n_docs, self.shared_docs) * (geom.accumulate_block // self.unit) if self.unit else 0
        self.no_units = (shard.buffer("no_ukey", (1, 1), np.float64), shard.buffer("no_udoc", (1, 1), np.int32))
        # the ranges kernel by default for a batch (more tiles than lanes: off the lanes' critical path)
        ranges = geom.block_ranges if geom.block_ranges is not None else chunk > rows * lanes
        self.ranged = bool(ranges) and self.shared
        self.rng_cap = RANGES_SEGMENTS * rows  # segments a tile; grown by run() for longer queries
        self.no_ranges = (shard.buffer("no_rng_first", (1, 1), np.int64), shard.buffer("no_rng_cnt", (1, 1), np.int32))
        if self.unit:
            # a search whose tiles are all in flight at once waits on each select: the widest block
            want = geom.unit_block or (UNIT_BLOCK_LATENCY if chunk <= rows * lanes else UNIT_BLOCK_BATCH)
            if res.simulator and not geom.unit_block:
                want = SIM_UNIT_BLOCK
            self.block = next_pow2(max(want, k))  # a power of two: theta0's bitonic sort
            self.select_kernel = unit_select.unit_topk_kernel(self.block,
                                                              unit_select.unit_cap(k, geom.unit_cap, self.block))
        else:
            self.select_kernel = scoring.select_topk_kernel(self.block, items, cap, rezero=not self.shared)
        self.dn = shard.dn(code, geom.build_block)
        self.upload = shard.buffer("plan_upload", (packed_layout((8 * (16 * chunk + 1), 8 * 16 * chunk, 4 * 16 * chunk,
                                                                  32 * chunk))[1],), np.uint8)
        lists = 1 if self.unit else self.n_seg
        self.seg_doc = shard.buffer("seg_doc", (chunk, lists, k), np.int32)
        self.seg_key = shard.buffer("seg_key", (chunk, lists, k), np.float64)
        # dispatcher launches (the simulator): the lanes take turns on numba's default stream
        streams = [res.stream(f"engine{i}") for i in range(lanes)] if self.raw and lanes > 1 else [None] * lanes
        self._merges(streams[0])
        self.lanes = [TopkLane(self, i, s, self.raw) for i, s in enumerate(streams)]
        launches = [L for lane in self.lanes for L in lane.launches()] + [L for L, _ in self.merges]
        if self.raw and any(L.mode != "raw" for L in launches):
            self.raw = False  # a numba-cuda without the raw path: every launch through the dispatcher
            self._merges(None)
            self.lanes = [TopkLane(self, i, None, False) for i in range(lanes)]
        self.buffers = self._buffer_ids()
        self.calls = DriverCalls(self.lanes[0].stream) if self.raw else None
        self.uploaded, self.done = None, []  # events: the chunk's upload (lane 0), each lane's last tile
        if self.raw and lanes > 1:
            from numba import cuda
            self.uploaded = cuda.event(timing=False)
            self.done = [cuda.event(timing=False) for _ in self.lanes]

    def _merges(self, stream) -> None:
        """The merge levels over a chunk's rows, on lane 0's stream; the last writes the final
        lists (chunk, 1, k) into out_doc / out_key (the select's lists when one segment)."""
        geom, k, shard = self.geom, self.k, self.shard
        if self.unit:  # the unit select writes each query's final list
            self.merges, self.out_doc, self.out_key = [], self.seg_doc, self.seg_key
            return
        by_rank = geom.merge_rank_group > 0
        if by_rank:
            group = max(2, min(geom.merge_rank_group, RANK_MERGE_ENTRIES // k))
        else:
            width = geom.merge_width if self.rows >= SMALL_BATCH else min(geom.merge_width, geom.merge_width_small)
            group = max(2, width // next_pow2(k))
        self.merges = []
        d_doc, d_key, n_lists, level = self.seg_doc, self.seg_key, self.n_seg, 0
        while n_lists > 1:
            n_groups = blocks(n_lists, group)
            entries = min(group, n_lists) * k
            if by_rank:
                m_block = min(1024, max(32, next_pow2(entries)))
                merge = scoring.merge_topk_kernel(m_block, entries, True)
            else:
                m_block = geom.merge_block
                merge = scoring.merge_topk_kernel(m_block, next_pow2(entries))
            level += 1
            name = "chunk" if n_groups == 1 else f"merge{level % 2}"
            o_doc = shard.buffer(f"{name}_doc", (self.chunk, n_groups, k), np.int32)
            o_key = shard.buffer(f"{name}_key", (self.chunk, n_groups, k), np.float64)
            self.merges.append((Launch(merge, (n_groups, 1), m_block, (d_doc, d_key, group, k, o_doc, o_key),
                                       stream=stream, raw=self.raw), n_groups))
            d_doc, d_key, n_lists = o_doc, o_key, n_groups
        self.out_doc, self.out_key = d_doc, d_key

    def _buffer_ids(self) -> tuple:
        work = self.shard.work
        return tuple(id(work.array(name)) for name in sorted(work.buffers))

    def valid(self) -> bool:
        """False once a workspace buffer this plan points into was replaced."""
        return self._buffer_ids() == self.buffers

    INPUT_DTYPES = (np.int64, np.int32, np.float32, np.float64)  # seg_off, seg, weights, qinfo

    @staticmethod
    def input_shapes(n: int, n_tiles: int, L: int) -> tuple:
        """Shapes of a chunk's inputs: seg_off (L + n_tiles,), seg (L, 2), weights (L,), qinfo (n, 4)."""
        return (L + n_tiles,), (L, 2), (L,), (n, 4)

    def view(self, i: int, offset: int, shape: tuple):
        """Input i (INPUT_DTYPES) of ``shape`` at byte ``offset`` of the upload, as a device view."""
        dt = np.dtype(self.INPUT_DTYPES[i])
        return self.upload[offset:offset + dt.itemsize * int(np.prod(shape))].view(dt).reshape(shape)

    def _host_inputs(self, q_ptr, q_ind, q_dat, lo: int, hi: int, scale, qn, self_doc):
        """The chunk's tile inputs written into the pinned upload buffer: (byte offsets of seg_off,
        seg, weights, qinfo; total bytes; postings per tile int64)."""
        shard, n = self.shard, hi - lo
        n_tiles = -(-n // self.rows)
        L = int(q_ptr[-1])
        sizes = (8 * (L + n_tiles), 8 * L, 4 * L, 32 * n)
        offsets, total = packed_layout(sizes)
        if total > self.upload.size:  # queries with more terms than the buffer holds: grow it
            self.upload = shard.buffer("plan_upload", (2 * total,), np.uint8)
            self.buffers = self._buffer_ids()
        host = shard.res.pinned.get("engine_upload", (self.upload.size,), np.uint8)
        o0, o1, o2, o3 = offsets
        args = (q_ptr, q_ind, q_dat, shard.df, self.rows, self.term_order, scale[lo:hi], qn[lo:hi], self_doc[lo:hi],
                shard.doc_lo, shard.doc_hi, host[o0:o0 + sizes[0]].view(np.int64),
                host[o1:o1 + sizes[1]].view(np.int32).reshape(L, 2), host[o2:o2 + sizes[2]].view(np.float32),
                host[o3:o3 + sizes[3]].view(np.float64).reshape(n, 4))
        postings = np.empty(n_tiles, np.int64)
        if n_tiles == 1:
            postings[0] = scoring.tile_one(0, *args)
        else:
            scoring.tile_inputs(*args, postings)
        return offsets, total, postings, host

    def _point_inputs(self, lanes, offsets, n: int, L: int, n_tiles: int) -> None:
        """The lanes' accumulate and select read this chunk's inputs (arrays set once a chunk; a
        chunk without terms launches no accumulation)."""
        shapes = self.input_shapes(n, n_tiles, L)
        for lane in lanes:
            reads_qinfo = [] if self.unit else [(lane.select, 2, 3)]  # the unit select needs no query inputs
            reads_seg = [(lane.ranges, 0, 1)] if lane.ranges and L else []
            for launch, arg, i in ([(lane.accumulate, i, i) for i in range(4)] if L else []) + reads_qinfo + reads_seg:
                if self.raw:
                    launch.set_array(arg, self._base + offsets[i], shapes[i], np.dtype(self.INPUT_DTYPES[i]).itemsize)
                else:
                    launch.set(arg, self.view(i, offsets[i], shapes[i]))

    def run(self, arrays, lo: int, hi: int, scale, qn, self_doc, docs: np.ndarray, keys: np.ndarray) -> int:
        """Score queries [lo, hi) (at most ``chunk``; CSR arrays of all queries) into
        docs/keys[lo:hi] (corpus document numbers, -1 where none). Returns the postings scored."""
        shard, k, n, T = self.shard, self.k, hi - lo, self.rows
        q_ptr, q_ind, q_dat = csr_rows(*arrays, lo, hi)
        offsets, total, postings, host = self._host_inputs(q_ptr, q_ind, q_dat, lo, hi, scale, qn, self_doc)
        if shard.rows_dirty and not self.shared:
            for lane in self.lanes:
                shard.zero_rows(lane.acc, lane.acc_block)
        shard.rows_dirty = True
        n_tiles = postings.size
        used = self.lanes[:n_tiles]
        if self.ranged:  # every tile's segments fit the lanes' range buffers
            most = int(np.diff(q_ptr[np.r_[0:n:T, n]]).max(initial=0))
            if most > self.rng_cap:
                self.rng_cap = next_pow2(most)
                for lane in self.lanes:
                    lane.grow_ranges(self)
                self.buffers = self._buffer_ids()
        if self.raw:
            self._base = device_address(self.upload)
            self.calls.copy_h2d(self._base, host.ctypes.data, total)
            if len(used) > 1:  # the other lanes' streams start after the upload (numba's event API)
                self.uploaded.record(used[0].stream)
                for lane in used[1:]:
                    self.uploaded.wait(lane.stream)
        else:
            self.upload[:total].copy_to_device(host[:total])
        self._point_inputs(used, offsets, n, int(q_ptr[-1]), n_tiles)
        for g, t0 in enumerate(range(0, n, T)):
            lane = used[g % len(used)]
            m = min(T, n - t0)
            if postings[g] or self.shared:  # the shared accumulation writes a tile's rows even when empty
                s0, s1 = int(q_ptr[t0]), int(q_ptr[t0 + m])
                if lane.ranges is not None and s1 > s0:
                    lane.ranges.set(5, s0)
                    lane.ranges.set(6, s1 - s0)
                    lane.ranges(grid=blocks(lane.acc_grid * (s1 - s0), RANGES_BLOCK))
                acc = lane.accumulate
                acc.set(10, s0)
                acc.set(11, s0 + g)
                acc.set(12, s1 - s0)
                acc.set(13, t0)
                if lane.acc_grid:  # document blocks, times the tile's queries in grid mode
                    acc(grid=lane.acc_grid * (m if self.grid else 1))
                else:
                    acc(grid=blocks(int(postings[g]), lane.acc_block * lane.acc_items))
            if self.unit:
                lane.select.set(10, t0)
                lane.select(grid=(m,))
            else:
                lane.select.set(8, t0)
                lane.select.set(9, t0)
                lane.select(grid=(self.n_seg, m))
        if self.raw:
            for lane, done in zip(used[1:], self.done[1:]):  # lane 0's stream waits for the others' tiles
                done.record(lane.stream)
                done.wait(used[0].stream)
        for launch, n_groups in self.merges:
            launch(grid=(n_groups, n))
        got_doc = shard.res.pinned.get("engine_docs", (n, k), np.int32)
        got_key = shard.res.pinned.get("engine_keys", (n, k), np.float64)
        if self.raw:
            self.calls.copy_d2h(got_doc.ctypes.data, device_address(self.out_doc), got_doc.nbytes)
            self.calls.copy_d2h(got_key.ctypes.data, device_address(self.out_key), got_key.nbytes)
            self.calls.sync()
        else:
            got_doc[:] = self.out_doc[:n].copy_to_host()[:, 0, :]
            got_key[:] = self.out_key[:n].copy_to_host()[:, 0, :]
        shard.rows_dirty = self.shared  # the atomics' users zero what the shared accumulation left
        docs[lo:hi] = np.where(got_doc >= 0, got_doc + shard.doc_lo, -1)
        keys[lo:hi] = got_key
        return int(postings.sum())


CHUNK_LIST_BYTES = 1 << 30  # a chunk's per-segment lists on the device (12 B an entry) stay below this


def plan_unit(geom, n_docs: int, docs: int, k: int) -> int:
    """Threads a unit of the unit select (kernels.unit_select) for the shared accumulation's
    blocks of ``docs`` documents: Geometry.unit_threads, or by unit_select.unit_threads; 0 when
    Geometry.unit_select is off (per-segment lists and merges instead)."""
    if not geom.unit_select:
        return 0
    b = geom.accumulate_block
    unit = geom.unit_threads or unit_select.unit_threads(n_docs, docs, b, k)
    if unit > b or unit & (unit - 1):
        raise ValueError(f"unit_threads must be a power of two <= accumulate_block, got {unit}")
    return unit


def grid_tiles(geom, rows: int) -> bool:
    """Whether tiles of ``rows`` queries accumulate as grid tiles (Geometry.tile_grid: each query
    its own blocks with one shared row, blocked.rows_accumulate_kernel grid=True) on a shard whose
    lists are sorted."""
    return bool(geom.tile_grid) and rows > 1 and shared_docs(geom, 1) > 0


def grid_rows(shard: DeviceShard, geom) -> int:
    """Queries a grid tile (Geometry.tile_grid) for tile_rows None: the fewest (a power of two, at
    least GRID_ROWS_MIN, at most GRID_ROWS_MAX) whose accumulation launches GRID_BLOCKS_PER_SM
    blocks a multiprocessor of the device; 0 when the shard takes no grid tiles. Both bounds
    measured on an H100: one query at 10^6 documents is 196 blocks, too few to fill the device
    alone, and its lane's select then leaves it idle (10,000 queries: 0.408 s with one a tile,
    0.271 s with 16); at 10^7, where two queries fill it, 16 read each posting range and the
    documents' norms from L2 after the first (10,000 queries: 2.60 s against 2.94 s with 2,
    2026-11-27 12:07)."""
    docs = shared_docs(geom, 1) if geom.tile_grid and shard.sorted_lists else 0
    if not docs:
        return 0
    want = -(-GRID_BLOCKS_PER_SM * shard.res.multiprocessors // blocks(shard.n_docs, docs))
    return min(GRID_ROWS_MAX, max(GRID_ROWS_MIN, next_pow2(want)))


def tile_rows(shard: DeviceShard, n_queries: int, batch_size: int | None, geom, per_query_extra: int) -> tuple[int, int]:
    """(queries per tile, lanes) of a TopkPlan. With ``batch_size``: that many rows, one lane.
    Otherwise Geometry.tile_rows rows and Geometry.tile_lanes lanes; for tile_rows None (the
    default) grid_rows with grid tiles (the shared accumulation), else as many int64 score rows as
    fit L2_ROWS_SHARE of the device's L2 with every lane's tile in flight (at least one row: the
    accumulation's atomics and the select then stay in L2); for 0,
    or a device that does not say its L2, as many as ROWS_SHARE of the free memory holds, one
    lane (one tile per batch: the score rows go to HBM). The lanes' rows together never exceed
    what the memory share holds."""
    fit = batch_rows(shard, n_queries, batch_size, per_query_extra)
    want, l2 = geom.tile_rows, shard.res.l2_bytes
    if batch_size or want == 0 or (want is None and not l2):
        return fit, 1
    lanes = max(1, min(geom.tile_lanes, fit))
    if want is None:
        want = grid_rows(shard, geom) or int(l2 * L2_ROWS_SHARE) // (8 * max(shard.n_docs, 1) * lanes)
    room = fit if fit >= n_queries else max(1, fit // lanes)  # the memory share binds: the lanes share it
    return max(1, min(room, int(want))), lanes


def topk_plan(shard: DeviceShard, k: int, code: int, geom, rows: int, lanes: int, n_seg: int, n_q: int) -> TopkPlan:
    """The shard's TopkPlan for these parameters (made once; remade when its buffers changed).
    Its chunk: the search's tiles rounded up to a power of two (so searches of similar sizes share
    a plan and its buffers), at most Geometry.tile_chunk queries and fewer where the chunk's
    per-segment lists (12 B x n_seg x k a query) would pass CHUNK_LIST_BYTES; whole tiles, at
    least one."""
    shared = shared_docs(geom, 1 if grid_tiles(geom, rows) else rows)
    lists = 1 if shard.sorted_lists and geom.unit_select and shared else n_seg  # unit select: 1
    cap = min(geom.tile_chunk, CHUNK_LIST_BYTES // (12 * k * lists))
    chunk = max(rows, min(cap, next_pow2(-(-n_q // rows)) * rows) // rows * rows)
    key = (k, code, rows, chunk, geom.select_block, geom.select_items, geom.merge_block, geom.merge_width,
           geom.merge_width_small, geom.merge_rank_group, geom.accumulate_block, geom.accumulate_items,
           geom.shared_accumulate, geom.shared_min_docs, geom.build_block, getattr(geom, "fast_launch", True),
           geom.tile_term_order, geom.tile_grid, lanes, geom.unit_select, geom.unit_threads, geom.unit_block,
           geom.unit_cap, geom.block_ranges, geom.block_table)
    plan = shard.plans.get(key)
    if plan is None or not plan.valid():
        plan = shard.plans[key] = TopkPlan(shard, k, code, geom, rows, chunk, lanes)
    return plan


def topk_cuda(index: Index, Q, k, code, self_doc, batch_size, quiet, geom, report: SearchReport):
    """Host driver of the GPU top-k pipeline; returns (docs int32 (n_q, k), keys float64 (n_q, k))."""
    t0 = time.perf_counter()
    arrays = csr_arrays(Q)
    scale, qn = scoring.query_stats(*arrays, index.term_maxabs, code)
    block, items, _ = scoring.topk_geometry(k, geom.select_block, geom.select_items)
    n_q = Q.shape[0]
    parts = []
    report.postings = 0
    for shard in device_shards(index, geom, report, split=n_q >= geom.shard_min_queries):
        n_seg = blocks(shard.n_docs, block * items)
        rows, lanes = tile_rows(shard, n_q, batch_size, geom, 24 * n_seg * k)
        plan = topk_plan(shard, k, code, geom, rows, lanes, n_seg, n_q)
        report.batch_size = rows
        # rows (+ units' maxima) of every lane, and the chunk's lists
        report.rows_bytes = (lanes * rows * (8 * shard.n_docs + 12 * plan.n_units)
                             + 12 * plan.chunk * plan.seg_doc.shape[1] * k)
        report.launch = "raw" if plan.raw else "dispatcher"
        docs = np.empty((n_q, k), np.int32)
        keys = np.empty((n_q, k), np.float64)
        chunks = range(0, n_q, plan.chunk)
        with progress(len(chunks) if len(chunks) > 1 else 0, "scoring (cuda)", quiet) as bar:
            for lo in chunks:
                report.postings += plan.run(arrays, lo, min(n_q, lo + plan.chunk), scale, qn, self_doc, docs, keys)
                bar.update(1)
        shard.release()
        parts.append((docs, keys))
    report.seconds = time.perf_counter() - t0
    if len(parts) == 1:
        return parts[0]
    return merge_topk(parts, k)


def threshold_cuda(index: Index, Q, min_key, code, self_doc, batch_size, quiet, geom, report: SearchReport,
                   after=None):
    """Host driver of the GPU threshold pipeline; returns CSR parts (indptr int64, docs int32, keys float64)."""
    from numba import cuda

    arrays = csr_arrays(Q)
    scale, qn = scoring.query_stats(*arrays, index.term_maxabs, code)
    block = geom.select_block or 256
    items = geom.select_items or 16
    count, write = scoring.threshold_kernels(block, items)
    n_q = Q.shape[0]
    rows_parts: list[np.ndarray] = []
    docs_parts: list[np.ndarray] = []
    keys_parts: list[np.ndarray] = []
    for shard in device_shards(index, geom, report):
        n_seg = blocks(shard.n_docs, block * items)
        per_batch = batch_rows(shard, n_q, batch_size, 4 * n_seg)
        report.batch_size = per_batch
        batches = range(0, n_q, per_batch)
        with progress(len(batches) if len(batches) > 1 else 0, "scoring (cuda)", quiet) as bar:
            for lo in batches:
                hi = min(n_q, lo + per_batch)
                batch = QueryBatch(Q, lo, hi, shard, scale, qn, self_doc, code, geom, after, arrays)
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
    if report.shards > 1:  # each shard's hits are in order; interleave them by (query, document)
        order = np.lexsort((docs, rows))
        rows, docs, keys = rows[order], docs[order], keys[order]
    indptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_q), out=indptr[1:])
    return indptr, docs, keys
