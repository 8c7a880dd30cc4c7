"""The engine on a CUDA device: index shards on the device, queries scored into dense
fixed-point score rows, then a selector (gputext.kernels.scoring for the kernels).

Memory plan (reported in the SearchReport): an index shard takes 8 bytes a posting (doc int32 + weight
float32) + 8 a term + 16 a document, and 16 bytes a posting while the device builds it (the CSR
rows are on the device then; where that does not fit, the host builds the lists and uploads its 8:
build_bytes, sorted_postings_device),
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
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..device.launch import DriverCalls, Launch, blocks, device_address, next_pow2
from ..device.memory import Workspace, packed_layout, resources
from ..io.corpus import csr_arrays
from ..kernels import blocked, postings, scan, scoring, unit_select
from ..progress import progress
from .index import Index, Postings
from .merge import merge_topk
from .report import SearchReport

INDEX_SHARE = 0.45
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
BLOCK_TABLE_SHARE = 1 / 16  # a shard's block-starts table (4 B an entry) within this share of its postings' bytes


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
    work: Workspace = field(default_factory=Workspace)  # buffers reused across batches and searches
    rows_dirty: bool = False  # score rows not yet re-zeroed by a selector
    plans: dict = field(default_factory=dict)  # TopkPlan per (k, metric, rows, geometry)
    res: object = field(default_factory=resources)  # the Resources of the device that holds the shard
    sorted_lists: bool = False  # every posting list sorted by document (Geometry.sorted_postings): the shared accumulation's searches need it
    block_tables: dict = None  # documents a block -> (brow, bstart) device arrays (block_table), made on first use

    def buffer(self, name: str, shape: tuple, dtype, zeroed: bool = False):
        """A device array of ``shape`` from the shard's workspace (gputext.device.Workspace)."""
        return self.work.get(name, shape, dtype, zeroed=zeroed)

    def release(self, larger_than: int = 1 << 30) -> None:
        """Free workspace buffers above a size (score rows of big batches) once a search ends."""
        before = {name: arr for name, (arr, _) in self.work.buffers.items()}
        self.work.release(larger_than)
        if any(name not in self.work.buffers for name in before):
            self.plans.clear()  # their launches point into the released buffers

    def dn(self, metric: int, block: int):
        """The documents' norm term for the metric, on the device (kernel doc_norm_terms)."""
        if self.norm_terms is None:
            self.norm_terms = {}
        if metric not in self.norm_terms:
            from numba import cuda
            out = cuda.device_array(max(self.n_docs, 1), np.float64)
            postings.doc_norm_terms[blocks(self.n_docs, block), block](self.d_sq, self.d_l1, metric, out)
            self.norm_terms[metric] = out
        return self.norm_terms[metric]

    def block_table(self, docs: int, block: int, use: bool = True) -> tuple:
        """The block-starts table of the shared accumulation's blocks of ``docs`` documents
        (kernels.postings.block_starts_kernel, made on first use and kept): (brow int32 (n_terms,):
        a term's row or -1, bstart int32 (rows, n_blocks + 1)). Rows for the lists of at least
        one posting a block, longest first, within BLOCK_TABLE_SHARE of the postings' bytes.
        Without ``use``, rows, or sorted lists: a placeholder (brow = [-1], one entry), with which
        the kernels search every range (kernels.blocked.term_range_dev)."""
        from numba import cuda
        if self.block_tables is None:
            self.block_tables = {}
        n_post = int(self.df.sum())
        key = docs if use and self.sorted_lists and n_post else None
        if key not in self.block_tables:
            n_blocks = blocks(self.n_docs, docs) if key else 0
            terms = postings.block_table_terms(self.df, n_blocks, int(BLOCK_TABLE_SHARE * 8 * n_post) // 4) \
                if key else np.zeros(0, np.int32)
            if not terms.size:
                self.block_tables[key] = (cuda.to_device(np.full(1, -1, np.int32)),
                                          cuda.to_device(np.zeros((1, 1), np.int32)))
            else:
                brow = np.full(self.df.size, -1, np.int32)
                brow[terms] = np.arange(terms.size, dtype=np.int32)
                if self.res.simulator:  # the twin: the simulator takes about 2 ms a thread
                    bstart = np.empty((terms.size, n_blocks + 1), np.int32)
                    postings.block_starts_cpu(self.term_ptr.copy_to_host(), self.post_doc.copy_to_host(), terms, docs,
                                              bstart)
                    bstart = cuda.to_device(bstart)
                else:
                    bstart = cuda.device_array((terms.size, n_blocks + 1), np.int32)
                    postings.block_starts_kernel[blocks(bstart.size, block), block](
                        self.term_ptr, self.post_doc, cuda.to_device(terms), docs, bstart)
                self.block_tables[key] = (cuda.to_device(brow), bstart)
        return self.block_tables[key]

    def zero_rows(self, acc, block: int) -> None:
        """Re-zero score rows a search left dirty (interrupted before its selector ran)."""
        scoring.zero_int64[min(blocks(acc.size, block), 65535 * 4), block](acc)

    @property
    def n_docs(self) -> int:
        return self.doc_hi - self.doc_lo


def build_shard(X: sp.csr_matrix, doc_lo: int, doc_hi: int, geom, cpu_postings=None) -> DeviceShard:
    """Build rows [doc_lo, doc_hi) of X into a device index.

    With ``geom.sorted_postings`` (the default) every list is sorted by document, so neighbouring
    postings of a frequent term add into neighbouring score entries and a warp's atomics share
    cache sectors: ``cpu_postings`` (the host's build of exactly these rows, e.g. Index.cpu() of a
    one-shard index, when the caller already has it) is uploaded, else the rows are uploaded and
    the device builds them (sorted_postings_device; the host's build, uploaded, in the simulator
    and when the device build's transient memory does not fit). Otherwise the device's atomic
    build (``shard_from_device``: lists in arbitrary order)."""
    from numba import cuda
    if not geom.sorted_postings:
        indptr, indices, data = csr_arrays(X[doc_lo:doc_hi])
        return shard_from_device(cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(data),
                                 X.shape[1], doc_lo, doc_hi, geom)
    n_docs, n_terms = doc_hi - doc_lo, X.shape[1]
    nbytes = 8 * max(int(X.indptr[doc_hi] - X.indptr[doc_lo]), 1) + 8 * (n_terms + 1) + 16 * max(n_docs, 1)
    p = cpu_postings
    if p is None:  # the rows are sliced (a copy) only when the caller has no build of them
        rows = csr_arrays(X[doc_lo:doc_hi])
        built = sorted_postings_device(*rows, n_terms, geom)
        if built is not None:
            d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, df = built
            return DeviceShard(doc_lo, doc_hi, d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, df, nbytes,
                               sorted_lists=True)
        p = Postings(*postings.build_postings(*rows, n_terms))
    d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1 = (
        cuda.to_device(a if a.size else np.zeros(1, a.dtype))
        for a in (p.term_ptr, p.post_doc, p.post_w, p.d_sq, p.d_l1))
    return DeviceShard(doc_lo, doc_hi, d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, np.diff(p.term_ptr), nbytes,
                       sorted_lists=True)


SORTED_BUILD_CHUNKS_PER_SM = 8  # blocks (chunks of rows) a multiprocessor in the sorted device build ...
SORTED_BUILD_COUNTS_BYTES = 256 << 20  # ... within this much of per-chunk term counts (4 B a (chunk, term))


def sorted_build_chunks(n_docs: int, n_terms: int, multiprocessors: int) -> int:
    """Chunks (blocks) of the sorted device build: SORTED_BUILD_CHUNKS_PER_SM a multiprocessor,
    fewer when the (chunks, terms) counts would pass SORTED_BUILD_COUNTS_BYTES, at least 1, at
    most a row each."""
    by_bytes = SORTED_BUILD_COUNTS_BYTES // max(4 * n_terms, 1)
    return int(max(1, min(n_docs, SORTED_BUILD_CHUNKS_PER_SM * max(multiprocessors, 1), by_bytes)))


def sorted_build_bytes(n_docs: int, nnz: int, n_terms: int, n_chunks: int) -> int:
    """Device bytes the sorted device build holds at its peak: the CSR rows (8 B a posting, 8 a
    row), the postings (8 B a posting), term_ptr and df, norms (16 B a row) and the counts."""
    return 16 * nnz + 24 * (n_docs + 1) + 12 * (n_terms + 1) + 4 * n_chunks * n_terms + 8 * (n_chunks + 1)


def sorted_postings_device(indptr, indices, data, n_terms: int, geom):
    """The sorted postings of CSR rows built on the device (build_sorted_lists), or None in the
    simulator (its threads cost about 2 ms each: the caller uploads the host's build;
    tests/test_postings_device.py runs the kernels there on small inputs) and when
    sorted_build_bytes plus a margin exceeds the free memory (the host's build, uploaded, takes
    half as much: 8 B a posting)."""
    res = resources()
    n_docs, nnz = indptr.shape[0] - 1, indices.shape[0]
    n_chunks = sorted_build_chunks(n_docs, n_terms, res.multiprocessors)
    mem = res.memory()
    if mem is None or sorted_build_bytes(n_docs, nnz, n_terms, n_chunks) > 0.9 * mem[0] - (256 << 20):
        return None
    return build_sorted_lists(indptr, indices, data, n_terms, n_chunks, geom.build_block)


def build_sorted_lists(indptr, indices, data, n_terms: int, n_chunks: int, block: int):
    """CSR rows (indptr int64 (n_docs+1,) from 0, indices int32, data float32) -> (term_ptr int64
    (n_terms+1,), post_doc int32 (nnz,), post_w float32 (nnz,), d_sq, d_l1 float64 (n_docs,)) on
    the device and df int64 (n_terms,) on the host: the arrays of kernels.postings.build_postings
    bit for bit, lists sorted by document. Rows cut into n_chunks chunks of about equal postings
    (postings.chunk_rows), a block of ``block`` threads each: count_chunk_terms, chunk_cursors,
    the lists' offsets on the host (n_terms values), scatter_chunk_rows, doc_norms."""
    from numba import cuda
    n_docs, nnz = indptr.shape[0] - 1, indices.shape[0]
    b = block
    d_indptr = cuda.to_device(indptr)
    d_indices = cuda.to_device(indices if nnz else np.zeros(1, np.int32))
    d_data = cuda.to_device(data if nnz else np.zeros(1, np.float32))
    d_row_lo = cuda.to_device(postings.chunk_rows(indptr, n_chunks))
    d_counts = cuda.to_device(np.zeros((n_chunks, max(n_terms, 1)), np.int32))
    d_df = cuda.to_device(np.zeros(max(n_terms, 1), np.int32))
    if nnz:
        postings.count_chunk_terms[n_chunks, b](d_indptr, d_indices, d_row_lo, d_counts)
    if n_terms:
        postings.chunk_cursors[blocks(n_terms, b), b](d_counts, d_df)
    df = d_df.copy_to_host()[:n_terms].astype(np.int64)
    term_ptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(df, out=term_ptr[1:])
    d_term_ptr = cuda.to_device(term_ptr)
    d_post_doc = cuda.device_array(max(nnz, 1), np.int32)
    d_post_w = cuda.device_array(max(nnz, 1), np.float32)
    if nnz:
        postings.scatter_chunk_rows[n_chunks, b](d_indptr, d_indices, d_data, d_row_lo, d_term_ptr, d_counts,
                                                 d_post_doc, d_post_w)
    d_sq = cuda.device_array(max(n_docs, 1), np.float64)
    d_l1 = cuda.device_array(max(n_docs, 1), np.float64)
    if n_docs:
        postings.doc_norms[blocks(n_docs, b), b](d_indptr, d_data, d_sq, d_l1)
    cuda.synchronize()
    return d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, df


def shard_from_device(d_indptr, d_indices, d_data, n_terms: int, doc_lo: int, doc_hi: int, geom) -> DeviceShard:
    """A device index of CSR rows already on the device: d_indptr int64 (n_docs+1,) starting at 0,
    d_indices int32 / d_data float32 of exactly indptr[-1] entries (may be views into a larger
    upload). df by atomics, exclusive scan, atomic scatter, norms (kernels count_df, scan_blocks,
    scatter_postings, doc_norms). The shard covers documents [doc_lo, doc_hi) of its corpus."""
    from numba import cuda
    nnz = int(d_indices.shape[0])
    n_docs = doc_hi - doc_lo
    b = geom.build_block
    d_df = cuda.to_device(np.zeros(n_terms, np.int32))
    if nnz:
        postings.count_df[blocks(nnz, b), b](d_indices, d_df)
    d_term_ptr = scan.exclusive_scan_device(d_df, geom.scan_block, geom.scan_items)
    d_cursor = cuda.to_device(np.zeros(n_terms, np.int32))
    d_post_doc = cuda.device_array(max(nnz, 1), np.int32)
    d_post_w = cuda.device_array(max(nnz, 1), np.float32)
    if nnz:
        postings.scatter_postings[blocks(nnz, b), b](d_indptr, d_indices, d_data, d_term_ptr, d_cursor,
                                                      d_post_doc, d_post_w)
    d_sq = cuda.device_array(max(n_docs, 1), np.float64)
    d_l1 = cuda.device_array(max(n_docs, 1), np.float64)
    if n_docs:
        postings.doc_norms[blocks(n_docs, b), b](d_indptr, d_data, d_sq, d_l1)
    df = np.diff(d_term_ptr.copy_to_host())
    nbytes = 8 * max(nnz, 1) + 8 * (n_terms + 1) + 16 * max(n_docs, 1)
    return DeviceShard(doc_lo, doc_hi, d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, df, nbytes)


def build_bytes(geom) -> int:
    """Device bytes a posting of a shard takes in the plan: 8 for sorted lists (doc int32 + weight
    float32; Geometry.sorted_postings: their device build needs 16 while it runs, and gives way to
    the host's build, uploaded, where that does not fit: sorted_postings_device), 16 for the
    atomic device build (the CSR rows stay on the device while the shard is planned)."""
    return 8 if geom.sorted_postings else 16


def plan_shards(index: Index, posting_bytes: int = 16) -> list[tuple[int, int]]:
    """Row ranges whose device index (at build time ``posting_bytes`` a posting, build_bytes, and
    16 a document) fits INDEX_SHARE of free memory. (Before 2026-11-27 the engine planned 16 B a
    posting for the uploaded build too: 5x10^7 bench documents, 29.5 GB of index, would have been
    streamed in two shards per search on an H100 instead of staying on it whole.)"""
    budget = resources().share(INDEX_SHARE)
    if budget is None:
        return [(0, index.n_docs)]
    indptr = index.X.indptr
    per_doc = posting_bytes * np.diff(indptr).astype(np.float64) + 16
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


def csr_rows(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, lo: int, hi: int):
    """Rows [lo, hi) of CSR arrays without scipy (indptr rebased to 0; views where possible)."""
    a, b = int(indptr[lo]), int(indptr[hi])
    return indptr[lo:hi + 1] - a, indices[a:b], data[a:b]


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
        args = (seg_off, seg, weights, qinfo, shard.term_ptr, shard.post_doc, shard.post_w, plan.code, shard.n_docs,
                self.acc, 0, 0, 1, 0)
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
        if unit:  # one block a query: its top k straight into the chunk's final lists
            self.select = Launch(plan.select_kernel, 1, plan.block,
                                 (self.acc, ukey, udoc, shard.n_docs, docs, self.acc_block, unit, plan.k,
                                  plan.out_doc, plan.out_key, 0), stream=stream, raw=raw)
        else:
            self.select = Launch(plan.select_kernel, (plan.n_seg, 1), plan.block,
                                 (self.acc, shard.n_docs, qinfo, plan.dn, plan.code, plan.k, plan.seg_doc,
                                  plan.seg_key, 0, 0), stream=stream, raw=raw)

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
