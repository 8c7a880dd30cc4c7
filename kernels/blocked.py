"""Document-blocked exact top-k (issue 19): accumulators in shared memory, no dense score rows.

The rows method (gputext.kernels.scoring) scatters a batch of queries into dense int64 score rows
in global memory (8 bytes per (query, document): 20 GB for 252 queries at 10^7 documents), so
the scoring runs from HBM. Here the documents are cut into blocks of ``seg_len`` consecutive
documents and the queries into tiles of ``tile`` queries; one CUDA block per (document block,
query tile) accumulates the tile's postings that fall in its document block into shared-memory
int64 accumulators (tile x seg_len), then selects each query's k best of the block. The per-block
lists are merged by scoring.merge_topk_kernel, as the rows method's are.

Entries: a batch's (query, term) pairs sorted by (tile, term, query): ent_term int32, ent_q int32
(the query's row in the batch), ent_w float32 (the query's weight), tile_ptr int64 (n_tiles+1,)
(gputext.engine.blocked.tile_entries). Sorting by term puts the queries of a tile that share a
term next to each other, so the block reads that term's range of postings once from HBM and
again from L1/L2 for the other queries.

Exactness: every posting adds ``posting_value`` = int64(contribution * scale), the same int64 as
the rows method (scoring._accumulate_query); int64 sums do not depend on order, keys come from
scoring's score_key and the lists from the same (key desc, document asc) rule, so the results are
bit-identical to the rows method and to its CPU twin.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, prange

from ._factory import jit_kernel, kernel_cache
from .geometry import next_pow2
from .metrics import COSINE, DOT
from .indices import U32, U64
from .primitives import better_dev, chunk_offsets, last_le_dev, lower_bound_cpu, lower_bound_dev, make_chunk_walk
from .scoring import contribution_cpu, contribution_dev, score_key_cpu, score_key_dev
from .select import make_segment_keys, offer_cpu, select_cap, select_top_keys
from .unit_select import doc_key_dev
from .jit import cpu_jit, cuda_kernel, device_function


# ----------------------------------------------------------------------------- per-item functions
# Written once, compiled for the host (njit) and the device (cuda.jit(device=True)).

def _make_posting_value(contribution):
    def posting_value(metric, qw, w, scale):
        """One posting's fixed-point contribution: int64(contribution(metric, qw, w) * scale)."""
        return numba.int64(contribution(metric, qw, w) * scale)
    return posting_value


def _make_block_range(lower_bound):
    def block_range(post_doc, start, end, d_lo, d_hi):
        """The part [first, last) of one posting list post_doc[start:end] (sorted by document)
        whose documents fall in [d_lo, d_hi): two binary searches, the second within at most
        d_hi - d_lo entries (documents are distinct within a list)."""
        first = lower_bound(post_doc, start, end, d_lo)
        last = lower_bound(post_doc, first, min(end, first + (d_hi - d_lo)), d_hi)
        return first, last
    return block_range


def _make_short_range(lower_bound):
    def short_range(post_doc, start, end, d_lo, d_hi):
        """block_range for a list with fewer postings than document blocks: a binary search for
        first, then a gallop from it for last (positions first, first + 1, first + 2, first + 4,
        ...: the block usually holds none or one of the list's postings)."""
        first = lower_bound(post_doc, start, end, d_lo)
        lo = first
        hi = first
        step = 1
        while hi < end and post_doc[U64(hi)] < d_hi:
            lo = hi + 1
            hi = first + step
            step *= 2
        return first, lower_bound(post_doc, lo, min(hi, end), d_hi)
    return short_range


def _make_term_range(block_range, short_range):
    def term_range(t, b, d_lo, d_hi, term_ptr, post_doc, brow, bstart):
        """The part [first, last) of term t's list inside document block b = [d_lo, d_hi). With a
        block-starts table (brow int32 (n_terms,), bstart int32 (rows, n_blocks + 1):
        kernels.postings.block_starts_kernel for blocks of d_hi - d_lo documents) a term with a
        row (brow[t] >= 0) reads its range there, two loads, and a term without one (a short
        list) takes short_range; without a table (brow shorter than the terms: a placeholder)
        every term takes block_range's two binary searches."""
        start = term_ptr[t]
        end = term_ptr[t + 1]
        if brow.shape[0] < term_ptr.shape[0] - 1:
            return block_range(post_doc, start, end, d_lo, d_hi)
        r = brow[t]
        if r >= 0:
            return start + bstart[r, b], start + bstart[r, b + 1]
        return short_range(post_doc, start, end, d_lo, d_hi)
    return term_range


posting_value_cpu = numba.njit(inline="always")(_make_posting_value(contribution_cpu))
posting_value_dev = device_function(_make_posting_value(contribution_dev))
block_range_cpu = numba.njit(inline="always")(_make_block_range(lower_bound_cpu))
block_range_dev = device_function(_make_block_range(lower_bound_dev))
term_range_cpu = numba.njit(inline="always")(_make_term_range(
    block_range_cpu, numba.njit(inline="always")(_make_short_range(lower_bound_cpu))))
term_range_dev = device_function(_make_term_range(
    block_range_dev, device_function(_make_short_range(lower_bound_dev))))


@device_function
def _add_posting(i, r, ctx):
    """Posting r of the chunk's entry i into the shared accumulator of its query row: a shared-memory
    atomic add of posting_value (int64 fixed point: exact and order-free).
    ctx = (acc, e_row, e_w, e_scale, post_doc, post_w, d_lo, metric)."""
    acc, e_row, e_w, e_scale, post_doc, post_w, d_lo, metric = ctx
    cuda.atomic.add(acc, e_row[i] + (post_doc[r] - d_lo), posting_value_dev(metric, e_w[i], post_w[r], e_scale[i]))


_accumulate_chunk = make_chunk_walk(_add_posting)


def _entry_scratch(block: int):
    """Device function () -> (e_start int64, e_row int32, e_w float32, e_scale float64 [block],
    t_off int32 [block + 1]): the shared arrays of one chunk of entries (a thread's posting range,
    accumulator row, query weight and scale; the ranges' offsets), for the chunk walks of
    blocked_topk_kernel and rows_accumulate_kernel."""
    off_len = block + 1

    @device_function
    def scratch():
        # one array a line: the simulator tells shared arrays apart by the line that declares them
        e_start = cuda.shared.array(block, numba.int64)
        e_row = cuda.shared.array(block, numba.int32)
        e_w = cuda.shared.array(block, numba.float32)
        e_scale = cuda.shared.array(block, numba.float64)
        t_off = cuda.shared.array(off_len, numba.int32)
        return e_start, e_row, e_w, e_scale, t_off

    return scratch


def entry_scratch_bytes(block: int) -> int:
    """Shared bytes of _entry_scratch(block): 8 + 4 + 4 + 8 a thread, and t_off's block + 1 int32."""
    return 24 * block + 4 * (block + 1)


@device_function
def _document_key(loc, d, ctx):
    """score_key of document d (accumulator row0 + loc). ctx = (acc, row0, metric, scale, qnorm, dn)."""
    acc, row0, metric, sc, qnorm, dn = ctx
    return score_key_dev(metric, acc[row0 + loc], sc, qnorm, dn[d])


_segment_keys = make_segment_keys(_document_key)


# ----------------------------------------------------------------------------- geometry

def shared_bytes(block: int, items: int, tile: int, cap: int) -> int:
    """Static shared memory of blocked_topk_kernel(block, items, tile, cap)."""
    seg_len = block * items
    # accumulators, keys, candidates, the entries' scratch, tmax, counter, the tile's bounds and flags
    return 8 * tile * seg_len + 8 * seg_len + 12 * cap + entry_scratch_bytes(block) + 8 * block + 4 + 12 * tile


def blocked_geometry(k: int, n_queries: int, n_docs: int, shared_limit: int, n_sm: int, block: int | None = None,
                     items: int | None = None, tile: int | None = None, max_tile: int = 8) -> tuple[int, int, int, int]:
    """(block, items, tile, cap) from the device's properties: shared_limit = static shared memory
    a block may use (bytes), n_sm = multiprocessors. block = max(128, next pow2 of k) threads.
    The widest tile (<= max_tile, <= next pow2 of n_queries) whose accumulators fit with at least
    4 items (512 documents at block 128) wins: a posting range read once serves more queries;
    then the most items that fit (fewer, longer blocks: fewer lists to merge). For a corpus too
    small to give 2 blocks per multiprocessor, items shrink (more, shorter document blocks).
    Explicit block/items/tile (tests, the simulator) are taken as given."""
    if block is None:
        block = max(128, next_pow2(k))
    if block < k or block & (block - 1):
        raise ValueError(f"block must be a power of two >= k, got block={block}, k={k}")

    def fits(it, tl):
        return shared_bytes(block, it, tl, select_cap(k, it)) <= shared_limit

    tiles = [tile] if tile else [t for t in (8, 4, 2, 1) if t <= max_tile and t <= max(1, next_pow2(n_queries))]
    chosen = None
    for tl in tiles:
        for it in ([items] if items else (16, 8, 4, 2, 1)):
            if fits(it, tl) and (it >= 4 or items or tl == tiles[-1]):
                chosen = (it, tl)
                break
        if chosen:
            break
    if chosen is None:
        raise ValueError(f"no blocked geometry fits {shared_limit} bytes of shared memory at k={k}")
    it, tl = chosen
    if not items:
        n_tiles = -(-max(n_queries, 1) // tl)
        while it > 1 and -(-max(n_docs, 1) // (block * it)) * n_tiles < 2 * n_sm:
            it //= 2
    return block, it, tl, select_cap(k, it)


# ----------------------------------------------------------------------------- CUDA kernel

@kernel_cache
def blocked_topk_kernel(block: int, items: int, tile: int, cap: int, counting: bool = True):
    """Block (c, g): document block s = c (or seg_ids[g, c] when seg_ids has columns: the probe
    pass, s < 0 = none) of seg_len = block*items documents x queries [g*tile, (g+1)*tile) of the
    batch; writes each query's k best of the document block to out_doc int32 / out_key float64
    (n_q, n_cols, k) at column c, document -1 / key -inf for empty slots.

    Safe pruning (prune != 0; cosine and dot): first each query's bound (kernels.blocked._bound_key)
    for the document block's bound block bb = d_lo // bound_len: threads over the tile's entries add
    |q_t| x bmax[term_row[t], bb] into shared float64 ub[query] (atomics: the sum's order may vary
    in the last bits, which BOUND_SLACK covers; skipping is safe either way); a query whose bound is
    strictly below theta[q, 0, k-1] (a lower bound of its final k-th key: the k-th key of the probe
    pass) cannot place a document of this block and is left out (its entries count as skipped in
    counts[1], int64, global atomics; scored postings in counts[0]; its list stays empty).
    Accumulation (shared int64 acc[tile*seg_len], zeroed first): the tile's entries
    [tile_ptr[g], tile_ptr[g+1]) are taken block at a time; thread tid takes entry j = chunk + tid,
    finds the range of its term's postings inside the document block (block_range_dev: two
    binary searches), and the ranges' lengths go through a block exclusive scan (t_off). The
    chunk's postings are then split evenly: thread tid takes positions tid, tid + block, ...
    (binary search in t_off once, then walking forward: primitives.make_chunk_walk) and adds posting_value into
    acc[row(query) + doc - d_lo] with a shared-memory atomic (exact, order-free). A syncthreads
    separates the chunks.
    Selection, per query of the tile: keys (score_key of the accumulator; -inf for the query's own
    document and past n_docs) into shared float64 keys[seg_len], then scoring's block top-k
    (thread maxima, tau = k-th largest, candidates above tau, ties at tau in document order,
    ordered by (key desc, document asc)).

    tile_ptr int64 (n_tiles+1,), ent_term / ent_q int32, ent_w float32 (entries, see the module
    docstring); qinfo float64 (n_q, 3) = (scale, norm term, document to leave out or -1);
    term_ptr int64, post_doc int32 (sorted within lists), post_w float32; dn float64 (n_docs,);
    seg_ids int32 (n_tiles, n_probe or 0); theta float64 (n_q, 1, k); term_row int32 (n_terms,),
    bmax float32 (rows, n_bound), dn_min float64 (n_bound,) (engine.blocked.bound_tables); counts
    int64 (2,). Shared: shared_bytes(block, items, tile, cap). One fused kernel: the accumulators
    live in shared memory for the block's lifetime only, so bound, accumulation and selection
    cannot be split into kernels without writing them to global memory; the per-posting and
    per-document work are inlined device functions (_add_posting through primitives.make_chunk_walk,
    _document_key through select.make_segment_keys, shared with the grouped kernel).
    """
    seg_len = block * items
    acc_len = tile * seg_len
    entries = _entry_scratch(block)

    @cuda_kernel
    def blocked_topk(tile_ptr, ent_term, ent_q, ent_w, qinfo, term_ptr, post_doc, post_w, dn, metric, k,
                     seg_ids, prune, theta, term_row, bmax, dn_min, bound_len, counts, out_doc, out_key):
        acc = cuda.shared.array(acc_len, numba.int64)
        keys = cuda.shared.array(seg_len, numba.float64)
        e_start, e_row, e_w, e_scale, t_off = entries()
        tmax = cuda.shared.array(block, numba.float64)
        cand_key = cuda.shared.array(cap, numba.float64)
        cand_doc = cuda.shared.array(cap, numba.int32)
        counter = cuda.shared.array(1, numba.int32)
        ub = cuda.shared.array(tile, numba.float64)
        active = cuda.shared.array(tile, numba.int32)
        tid = cuda.threadIdx.x
        c = cuda.blockIdx.x
        g = cuda.blockIdx.y
        s = numba.int64(c)
        if seg_ids.shape[1] > 0:
            s = seg_ids[g, c]
        n_docs = dn.shape[0]
        n_q = qinfo.shape[0]
        d_lo = s * seg_len
        d_hi = min(n_docs, d_lo + seg_len)
        if s < 0:
            d_lo = 0
            d_hi = 0
        q0 = g * tile
        nq = min(tile, n_q - q0)
        n_items = (d_hi - d_lo + block - 1) // block  # items that hold documents (the same for the whole block)
        for j in range(tid, acc_len, block):
            acc[j] = 0
        if tid < tile:
            ub[tid] = 0.0
            active[tid] = 1 if d_hi > d_lo else 0
        e0 = tile_ptr[g]
        e1 = tile_ptr[g + 1]
        cuda.syncthreads()  # accumulators, bounds and flags ready
        if prune != 0 and d_hi > d_lo:
            bb = d_lo // bound_len
            for j in range(e0 + tid, e1, block):
                m = bmax[term_row[ent_term[j]], bb]
                cuda.atomic.add(ub, ent_q[j] - q0, abs(numba.float64(ent_w[j])) * numba.float64(m))
            cuda.syncthreads()  # bounds summed
            if tid < nq:
                q = q0 + tid
                if bound_key_dev(metric, ub[tid], qinfo[q, 1], dn_min[bb]) < theta[q, 0, k - 1]:
                    active[tid] = 0
            cuda.syncthreads()  # flags final
        scored = numba.int64(0)
        skipped = numba.int64(0)
        for chunk in range(e0, e1, block):
            j = chunk + tid
            cnt = 0
            if j < e1 and d_hi > d_lo:
                t = ent_term[j]
                first, last = block_range_dev(post_doc, term_ptr[t], term_ptr[t + 1], d_lo, d_hi)
                q = ent_q[j]
                if active[q - q0] != 0:
                    e_start[tid] = first
                    e_row[tid] = (q - q0) * seg_len
                    e_w[tid] = ent_w[j]
                    e_scale[tid] = qinfo[q, 0]
                    cnt = last - first
                    scored += cnt
                else:
                    skipped += last - first
            # synchronises after the offsets and at the end (e_* / t_off are rewritten next chunk)
            _accumulate_chunk(cnt, e_start, t_off, tid, block,
                              (acc, e_row, e_w, e_scale, post_doc, post_w, d_lo, metric))
        if scored:
            cuda.atomic.add(counts, 0, scored)
        if skipped:
            cuda.atomic.add(counts, 1, skipped)
        for b in range(nq):
            q = q0 + b
            if active[b] == 0:  # the same for every thread of the block
                for j in range(tid, k, block):
                    out_doc[q, c, j] = -1
                    out_key[q, c, j] = -math.inf
                continue
            best = _segment_keys(keys, n_items, d_lo, d_hi, numba.int64(qinfo[q, 2]), tid, block,
                                 (acc, b * seg_len, metric, qinfo[q, 0], qinfo[q, 1], dn))
            select_top_keys(keys, n_items, best, d_lo, k, cap, tmax, cand_key, cand_doc, counter, t_off,
                                     tid, block, counting)
            for j in range(tid, k, block):
                out_doc[q, c, j] = cand_doc[j]
                out_key[q, c, j] = cand_key[j]
            cuda.syncthreads()  # candidates read before the next query resets them

    return blocked_topk


# ----------------------------------------------------------------------------- rows accumulation in shared memory

def rows_shared_bytes(block: int, docs: int, rows: int) -> int:
    """Static shared memory of rows_accumulate_kernel(block, docs, rows): the counters (two uint32
    words each) and the entries' scratch."""
    return 8 * docs * rows + entry_scratch_bytes(block)


# The posting loop below indexes with U32 / U64 (kernels.indices): about ten array accesses a posting,
# each with a signed index's wrap otherwise (about a quarter of the loop's PTX, 2026-11-27).
@device_function
def _walk_to(i, p, t_off):
    """The chunk segment holding flattened position p, walking forward from segment i."""
    while t_off[U32(i + 1)] <= p:
        i += 1
    return i


@device_function
def _position(i, p, e_start, t_off):
    """The posting (uint64 position in the lists) at flattened position p of the chunk's segment i."""
    return U64(e_start[U32(i)] + (p - t_off[U32(i)]))


@device_function
def _add_entry(sw, hi0, i, d, x, ctx):
    """Posting (document d, weight x) of the chunk's segment i into its row's counter (_add_split).
    ctx = (e_row, e_w, e_scale, metric)."""
    e_row, e_w, e_scale, metric = ctx
    u = U32(i)
    _add_split(sw, hi0, e_row[u] + d, posting_value_dev(metric, e_w[u], x, e_scale[u]))


@device_function
def _add_split(sw, hi0, j, v):
    """Add int64 v into counter j, kept as two uint32 words, sw[j] (low) and sw[hi0 + j] (high),
    with native 32-bit shared atomics: the low word's carry (seen in the old value its atomic
    returns) goes into the high word with v's high word. The pair sums modulo 2^64 in any order,
    so it ends equal to the int64 sum, which fits int64 (the scale guarantees it). (A shared int64
    atomic add was slower: H100, 2026-11-27, 10^6 x 10,000 in 0.525 s against 0.506 s.)"""
    j = U32(j)
    low = v & 0xFFFFFFFF
    old = cuda.atomic.add(sw, j, numba.uint32(low))
    carry = (numba.int64(old) + low) >> 32
    cuda.atomic.add(sw, j + U32(hi0), numba.uint32(((v >> 32) + carry) & 0xFFFFFFFF))


@device_function
def _split_value(sw, hi0, j):
    """The int64 held by counter j as two uint32 words (_add_split): sw[j] low, sw[hi0 + j] high."""
    j = U32(j)
    h = numba.int64(sw[j + U32(hi0)])
    if h >= 2147483648:
        h -= 4294967296
    return (h << 32) + numba.int64(sw[j])


def keys_registers(block: int) -> int:
    """Register cap of rows_accumulate_kernel with keys (unit > 0): four blocks of ``block``
    threads a multiprocessor, as many as its shared memory holds at 5,120 documents a block.
    Uncapped at 256 threads (local ptxas, sm_90): 60 registers, 66 with grid=True (66 for both
    before the unsigned indices, when only three blocks fit). Nsight Compute on the GPU host saw
    local-memory spills at the cap of 64 (2026-11-27, before the unsigned indices)."""
    return max(32, min(255, 65536 // (4 * block)))


@device_function
def _store_key(j, x, bk, bd, ctx):
    """Document d_lo + j's key (unit_select.doc_key_dev of its split counter, norm term x) stored
    at acc[row + j]; returns the thread's best (key, document) so far, a strictly larger key
    replacing it (a thread's documents ascend: the lowest of a tie stays).
    ctx = (acc, row, sw, acc_len, counter base of the row, d_lo, metric, scale, norm term, own document)."""
    acc, row, sw, acc_len, base, d_lo, metric, sc, qn, me = ctx
    d = d_lo + j
    key = doc_key_dev(metric, _split_value(sw, acc_len, base + j), sc, qn, x, d, me)
    acc[U64(row + j)] = key
    if key > bk:
        return key, d
    return bk, bd


@device_function
def _store_keys(n, tid, block, dn, ctx):
    """The keys of the block's documents d_lo + j, j = tid, tid + block, ... < n (_store_key), four
    at a time (their norm terms' loads from dn issued together); returns the thread's best (key,
    document). ctx: _store_key's."""
    d_lo = ctx[5]
    bk = -math.inf
    bd = numba.int64(-1)
    last = n - 1
    j = tid
    while j <= last:
        j1 = min(j + block, last)
        j2 = min(j + 2 * block, last)
        j3 = min(j + 3 * block, last)
        x0, x1, x2, x3 = dn[U64(d_lo + j)], dn[U64(d_lo + j1)], dn[U64(d_lo + j2)], dn[U64(d_lo + j3)]
        bk, bd = _store_key(j, x0, bk, bd, ctx)
        if j + block <= last:
            bk, bd = _store_key(j1, x1, bk, bd, ctx)
        if j + 2 * block <= last:
            bk, bd = _store_key(j2, x2, bk, bd, ctx)
        if j + 3 * block <= last:
            bk, bd = _store_key(j3, x3, bk, bd, ctx)
        j += 4 * block
    return bk, bd


@device_function
def _unit_best(keys, docs, u, unit):
    """The best (key, document) by the tie rule of threads [u * unit, (u + 1) * unit)'s bests in
    keys float64 / docs int32 (shared)."""
    uk = -math.inf
    ud = -1
    for g in range(u * unit, (u + 1) * unit):
        if better_dev(keys[g], docs[g], uk, ud):
            uk = keys[g]
            ud = docs[g]
    return uk, ud


@kernel_cache
def rows_accumulate_kernel(block: int, docs: int, rows: int, unit: int = 0, ranged: bool = False, grid: bool = False):
    """The rows top-k's accumulation through shared memory: a drop-in for
    scoring.accumulate_kernel (same arguments) that writes the same score rows without global
    atomics.

    Block b owns documents [b*docs, (b+1)*docs) of every row of the tile (grid: ceil(n_docs /
    docs) blocks). It zeroes its shared counters (rows x docs, two uint32 words each), takes the
    tile's segments s0 .. s0 + n_seg - 1 of seg int32 (L, 2) = (term, query in the tile) and
    seg_weight float32 block at a time: thread tid finds its segment's postings inside the
    document block (term_range_dev: two loads from the block-starts table brow int32 (n_terms,) /
    bstart int32 (rows, n_blocks + 1) of kernels.postings.block_starts_kernel for this ``docs``,
    else binary searches in the list, which is sorted by document), the ranges' lengths go
    through a block exclusive scan (t_off) and the chunk's postings are split evenly: thread tid
    takes positions tid, tid + block, ... four at a time (their segments found by walking t_off,
    then their eight loads issued together, then four adds), each adding posting_value (scale = qinfo[q0 + query, 0]) into its document's counter
    (_add_split: exact and order-free, so the rows equal accumulate_kernel's bit for bit). Then the
    block stores its counters into acc int64 (rows * n_docs,) at [query * n_docs + document]
    (coalesced plain stores of every document of the block, zeros included: the rows need no
    zeroing before). seg_off and o0 are unused (the ranges come from the searches). Shared:
    rows_shared_bytes(block, docs, rows).

    unit > 0 (a power of two <= block; kernels.unit_select): the block stores each document's key
    instead (acc float64: unit_select.doc_key_dev of the counter, qinfo's scale, norm term and own
    document, dn float64 (n_docs,)), and each thread's best (key, document) of its documents
    (strictly larger keys: the lowest document of a tie) goes through the entries' scratch, where
    thread u < block // unit reduces threads [u*unit, (u+1)*unit) by the tie rule into ukey float64
    / udoc int32 (rows, n_units) at unit blockIdx * (block // unit) + u (document -1: no key).
    One syncthreads a row between the two. unit = 0: dn, ukey and udoc are not read.

    ranged: the segments' posting ranges inside the block come from block_ranges_kernel, run
    before (rng_first int64 / rng_cnt int32 (n_blocks, >= n_seg): row blockIdx, column the
    segment's index in the tile), one coalesced load a segment instead of the table's loads or
    the binary searches (about 33 dependent loads for a long list without a table, while three
    quarters of the threads wait at the scan); not ranged: rng_first and rng_cnt are not read.

    grid (rows = 1): the tile's m queries are blocks, not shared rows: m * ceil(n_docs / docs)
    blocks, block i takes query i % m of the tile and document block i // m, so the m queries'
    blocks of one document range are adjacent in launch order and run together, and the postings
    of a term that several of them share come from L2 after the first read. The segments must be
    in (query, term) order; the query's own are [qinfo[q, 3], qinfo[q + 1, 3]) of the tile (the
    last query's end: n_seg); its keys and units go to row i % m of acc / ukey / udoc.
    """
    if grid and rows != 1:
        raise ValueError("rows_accumulate_kernel: grid takes one shared row")
    acc_len = docs * rows
    words = 2 * acc_len  # low words [0, acc_len), high words [acc_len, 2 acc_len)
    entries = _entry_scratch(block)
    per_block = block // unit if unit else 0

    @jit_kernel(keys_registers(block) if unit else 0)
    def accumulate_rows(seg_off, seg, seg_weight, qinfo, term_ptr, post_doc, post_w, metric, n_docs, acc, s0, o0,
                        n_seg, q0, dn, ukey, udoc, brow, bstart, rng_first, rng_cnt):
        sw = cuda.shared.array(words, numba.uint32)
        e_start, e_row, e_w, e_scale, t_off = entries()
        tid = cuda.threadIdx.x
        if grid:  # query g_row of the tile, document block b
            n_b = (n_docs + docs - 1) // docs
            m = cuda.gridDim.x // n_b
            g_row = cuda.blockIdx.x % m
            b = cuda.blockIdx.x // m
            j_lo = numba.int64(qinfo[q0 + g_row, 3])
            j_hi = numba.int64(qinfo[q0 + g_row + 1, 3]) if g_row + 1 < m else n_seg
        else:
            g_row = 0
            b = numba.int64(cuda.blockIdx.x)
            j_lo = 0
            j_hi = n_seg
        d_lo = b * docs
        d_hi = min(numba.int64(n_docs), d_lo + docs)
        for j in range(tid, words, block):
            sw[U32(j)] = 0
        cuda.syncthreads()  # counters zeroed
        for chunk in range(j_lo, j_hi, block):
            j = chunk + tid
            cnt = 0
            if j < j_hi:
                e = s0 + j
                q = seg[e, 1]
                if ranged:
                    first = rng_first[b, j]
                    last = first + rng_cnt[b, j]
                else:
                    first, last = term_range_dev(seg[e, 0], b, d_lo, d_hi, term_ptr, post_doc, brow, bstart)
                e_start[tid] = first
                e_row[tid] = (0 if grid else q) * docs - d_lo
                e_w[tid] = seg_weight[e]
                e_scale[tid] = qinfo[q0 + q, 0]
                cnt = last - first
            total = chunk_offsets(cnt, t_off, tid, block)
            p = tid
            i = last_le_dev(t_off, 0, block, p) if p < total else 0
            while p < total:
                i = _walk_to(i, p, t_off)
                i0 = i
                i1, i2, i3 = i0, i0, i0
                ok1 = p + block < total
                ok2 = p + 2 * block < total
                ok3 = p + 3 * block < total
                if ok1:
                    i = _walk_to(i, p + block, t_off)
                    i1 = i
                if ok2:
                    i = _walk_to(i, p + 2 * block, t_off)
                    i2 = i
                if ok3:
                    i = _walk_to(i, p + 3 * block, t_off)
                    i3 = i
                r0 = _position(i0, p, e_start, t_off)
                r1 = _position(i1, p + block, e_start, t_off) if ok1 else r0
                r2 = _position(i2, p + 2 * block, e_start, t_off) if ok2 else r0
                r3 = _position(i3, p + 3 * block, e_start, t_off) if ok3 else r0
                d0, d1, d2, d3 = post_doc[r0], post_doc[r1], post_doc[r2], post_doc[r3]
                x0, x1, x2, x3 = post_w[r0], post_w[r1], post_w[r2], post_w[r3]
                ectx = (e_row, e_w, e_scale, metric)
                _add_entry(sw, acc_len, i0, d0, x0, ectx)
                if ok1:
                    _add_entry(sw, acc_len, i1, d1, x1, ectx)
                if ok2:
                    _add_entry(sw, acc_len, i2, d2, x2, ectx)
                if ok3:
                    _add_entry(sw, acc_len, i3, d3, x3, ectx)
                p += 4 * block
            cuda.syncthreads()  # chunk done before e_* / t_off are rewritten
        for r in range(rows):  # r: the shared row; o: the output row (grid: the block's query)
            o = g_row + r
            row = numba.int64(o) * n_docs + d_lo
            q = q0 + o
            if unit and q >= qinfo.shape[0]:
                break  # the chunk's last tile may hold fewer rows (the same for the whole block)
            if unit:  # keys, then the threads' bests through the (now free) entries' scratch, then each unit's
                ctx = (acc, row, sw, acc_len, r * docs, d_lo, metric, qinfo[q, 0], qinfo[q, 1], numba.int64(qinfo[q, 2]))
                e_scale[tid], e_row[tid] = _store_keys(d_hi - d_lo, tid, block, dn, ctx)
                cuda.syncthreads()  # every thread's best visible
                if tid < per_block:
                    ukey[o, b * per_block + tid], udoc[o, b * per_block + tid] = _unit_best(e_scale, e_row, tid, unit)
                cuda.syncthreads()  # scratch read before the next row's bests
            else:
                for j in range(tid, d_hi - d_lo, block):
                    acc[U64(row + j)] = _split_value(sw, acc_len, r * docs + j)

    return accumulate_rows


@cuda_kernel
def block_ranges_kernel(seg, term_ptr, post_doc, n_docs, docs, s0, n_seg, brow, bstart, rng_first, rng_cnt):
    """The posting ranges of rows_accumulate_kernel(ranged=True): thread i takes segment
    j = i // n_blocks of the tile (term seg[s0 + j, 0]) and document block b = i % n_blocks
    ([b*docs, (b+1)*docs) of n_docs; a warp's threads share a term, so a warp either reads the
    block-starts table or searches), and writes the part of the term's list inside the block
    (term_range_dev: the table, else binary searches) as rng_first[b, j] int64 and rng_cnt[b, j]
    int32 (n_blocks rows). No shared memory: the searches' dependent loads overlap across many
    resident warps instead of holding an accumulation block's 48 KB. CPU twin: block_ranges_cpu."""
    i = numba.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    n_blocks = rng_first.shape[0]
    j = i // n_blocks
    if j >= n_seg:
        return
    b = i - j * n_blocks
    d_lo = b * docs
    first, last = term_range_dev(seg[s0 + j, 0], b, d_lo, min(numba.int64(n_docs), d_lo + docs), term_ptr, post_doc,
                                 brow, bstart)
    rng_first[b, j] = first
    rng_cnt[b, j] = last - first


@cpu_jit(parallel=True)
def block_ranges_cpu(seg, term_ptr, post_doc, n_docs, docs, s0, n_seg, brow, bstart, rng_first, rng_cnt):
    """CPU twin of block_ranges_kernel: document blocks in parallel, term_range_cpu per segment."""
    for b in prange(rng_first.shape[0]):
        d_lo = b * docs
        for j in range(n_seg):
            first, last = term_range_cpu(seg[s0 + j, 0], b, d_lo, min(n_docs, d_lo + docs), term_ptr, post_doc, brow,
                                         bstart)
            rng_first[b, j] = first
            rng_cnt[b, j] = last - first


@cpu_jit(parallel=True)
def accumulate_rows_cpu(seg, seg_weight, qinfo, term_ptr, post_doc, post_w, metric, n_docs, docs, acc, s0, n_seg,
                        q0, brow, bstart):
    """CPU twin of rows_accumulate_kernel: document blocks of ``docs`` in parallel, each adding
    the segments' postings inside it (term_range_cpu with the table brow / bstart, as the kernel;
    posting_value_cpu) into acc int64 (rows * n_docs,), which it first zeroes over its documents
    in every row."""
    n_rows = acc.shape[0] // max(n_docs, 1)
    for b in prange((n_docs + docs - 1) // docs):
        d_lo = b * docs
        d_hi = min(n_docs, d_lo + docs)
        for r in range(n_rows):
            acc[r * n_docs + d_lo:r * n_docs + d_hi] = 0
        for j in range(n_seg):
            e = s0 + j
            t = seg[e, 0]
            row = numba.int64(seg[e, 1]) * n_docs
            sc = qinfo[q0 + seg[e, 1], 0]
            first, last = term_range_cpu(t, b, d_lo, d_hi, term_ptr, post_doc, brow, bstart)
            for r in range(U64(first), U64(last)):
                acc[U64(row + post_doc[r])] += posting_value_cpu(metric, seg_weight[e], post_w[r], sc)


# ----------------------------------------------------------------------------- safe pruning (block-max bounds)

BOUND_SLACK = 1.0 + 2.0 ** -30  # far above the float64 rounding of a bound (a few ulps per term)


def _bound_key(metric, s_ub, qn, dn_min):
    """An upper bound of the key of every document of a bound block for one query, or +inf (no
    bound: l2, l1). s_ub = sum over the query's terms of |q_t| x the block's largest |d_t|: every
    document's acc / scale is at most that (each int64(c * scale) truncates towards zero, so it
    never exceeds |q_t| |d_t| scale). dn_min: the block's smallest positive document norm (+inf when
    every norm is 0); 1 when the table already holds |d_t| / |d|_2 (cosine: the tighter bound
    sum |q_t| max(|d_t| / |d|_2) / |q|_2, engine.blocked.bound_tables). Documents sharing no term score 0, so the bound is at least 0. Inflated by
    BOUND_SLACK so that the bound's own float64 rounding never makes it smaller than a key."""
    if metric == DOT:
        return s_ub * BOUND_SLACK
    if metric == COSINE:
        denom = qn * dn_min
        if s_ub > 0.0 and denom > 0.0 and dn_min < math.inf:
            return s_ub / denom * BOUND_SLACK
        return 0.0
    return math.inf


bound_key_cpu = numba.njit(inline="always")(_bound_key)
bound_key_dev = device_function(_bound_key)


@cpu_jit(parallel=True)
def block_max_table(term_ptr, post_doc, post_w, terms, bound_len, n_bound, norm):
    """float32 (terms.size, n_bound): row i, column b = the largest |weight| of term terms[i] among
    documents [b*bound_len, (b+1)*bound_len) (0 where the term has none); with norm (float64
    (n_docs,), cosine: |d|_2) the largest |weight| / norm[d] instead, computed in float64 and
    rounded up to float32 (a bound must never shrink). Terms in parallel."""
    out = np.zeros((terms.shape[0], n_bound), np.float32)
    scaled = norm.shape[0] > 0
    for i in prange(terms.shape[0]):
        t = terms[i]
        row = out[i]
        for r in range(term_ptr[t], term_ptr[t + 1]):
            d = post_doc[r]
            b = d // bound_len
            a = abs(np.float64(post_w[r]))
            if scaled:
                if norm[d] <= 0.0:
                    continue
                a = a / norm[d]
            v = np.float32(a)
            if np.float64(v) < a:
                v = np.nextafter(v, np.float32(np.inf))
            if v > row[b]:
                row[b] = v
    return out


@cpu_jit
def block_min_norm(dn, bound_len, n_bound):
    """float64 (n_bound,): each bound block's smallest positive document norm term, +inf if none."""
    out = np.full(n_bound, np.inf)
    for d in range(dn.shape[0]):
        b = d // bound_len
        if dn[d] > 0.0 and dn[d] < out[b]:
            out[b] = dn[d]
    return out


# ----------------------------------------------------------------------------- CPU twin

@cpu_jit(parallel=True)
def topk_blocked_cpu(tile_ptr, ent_term, ent_q, ent_w, scale, qn, self_doc, term_ptr, post_doc, post_w, dn, metric,
                     k, seg_len, tile, prune, term_row, bmax, term_maxabs, dn_min, bound_len, counts, out_doc,
                     out_key):
    """CPU twin of blocked_topk_kernel: tiles in parallel; each walks the document blocks in order,
    accumulates the tile's entries into an int64 (tile, seg_len) scratch with posting_value_cpu
    (ranges by block_range_cpu) and offers every document of the block to the query's running
    best-k list (scoring's offer: key desc, document asc). Entries as the kernel's; scale, qn
    float64 (n_q,), self_doc int64 (n_q,) (-1: none); out_doc int32 / out_key float64 (n_q, k),
    -1 / -inf where fewer than k documents exist.

    Safe pruning (prune != 0; cosine and dot): before a document block, a query whose list holds k
    documents gets the bound _bound_key of its bound block (bound_len documents, a multiple of
    seg_len): |q_t| x bmax[term_row[t], block] (term_maxabs[t] for a term without a row,
    term_row[t] < 0), dn_min (block_min_norm). A bound strictly below the list's k-th key means no
    document of the block can enter the list (a tie could: a lower document index wins), so the
    query's postings in the block are skipped. counts int64 (n_tiles, 2): postings scored, skipped.
    """
    n_tiles = tile_ptr.shape[0] - 1
    n_q = out_doc.shape[0]
    n_docs = dn.shape[0]
    n_seg = (n_docs + seg_len - 1) // seg_len
    for g in prange(n_tiles):
        acc = np.zeros((tile, seg_len), np.int64)
        q0 = g * tile
        nq = min(tile, n_q - q0)
        filled = np.zeros(tile, np.int64)
        s_ub = np.zeros(tile, np.float64)
        active = np.ones(tile, np.bool_)
        for b in range(nq):
            out_doc[q0 + b, :] = -1
            out_key[q0 + b, :] = -np.inf
        for s in range(n_seg):
            d_lo = s * seg_len
            d_hi = min(n_docs, d_lo + seg_len)
            acc[:, :] = 0
            if prune:
                bb = d_lo // bound_len
                s_ub[:] = 0.0
                for j in range(tile_ptr[g], tile_ptr[g + 1]):
                    t = ent_term[j]
                    m = term_maxabs[t] if term_row[t] < 0 else bmax[term_row[t], bb]
                    s_ub[ent_q[j] - q0] += abs(np.float64(ent_w[j])) * np.float64(m)
                for b in range(nq):
                    active[b] = not (filled[b] == k and bound_key_cpu(metric, s_ub[b], qn[q0 + b], dn_min[bb])
                                     < out_key[q0 + b, k - 1])
            for j in range(tile_ptr[g], tile_ptr[g + 1]):
                t = ent_term[j]
                q = ent_q[j]
                first, last = block_range_cpu(post_doc, term_ptr[t], term_ptr[t + 1], d_lo, d_hi)
                if not active[q - q0]:
                    counts[g, 1] += last - first
                    continue
                counts[g, 0] += last - first
                for r in range(first, last):
                    acc[q - q0, post_doc[r] - d_lo] += posting_value_cpu(metric, ent_w[j], post_w[r], scale[q])
            for b in range(nq):
                if not active[b]:
                    continue
                q = q0 + b
                keys = out_key[q]
                docs = out_doc[q]
                for d in range(d_lo, d_hi):
                    if d == self_doc[q]:
                        continue
                    key = score_key_cpu(metric, acc[b, d - d_lo], scale[q], qn[q], dn[d])
                    if filled[b] < k or key >= keys[k - 1]:
                        filled[b] = offer_cpu(key, d, keys, docs, filled[b], k, True)


def rows_sig(acc: str) -> str:
    """rows_accumulate_kernel's signature with score rows of dtype ``acc`` (int64 sums, float64 keys)."""
    return ("void(int64[::1], int32[:, ::1], float32[::1], float64[:, ::1], int64[::1], int32[::1], float32[::1], "
            f"int64, int64, {acc}[::1], int64, int64, int64, int64, float64[::1], float64[:, ::1], int32[:, ::1], "
            "int32[::1], int32[:, ::1], int64[:, ::1], int32[:, ::1])")


def ptx_kernels():
    """Every kernel with a representative geometry, for tests/test_ptx.py."""
    sig = ("void(int64[::1], int32[::1], int32[::1], float32[::1], float64[:, ::1], int64[::1], int32[::1], "
           "float32[::1], float64[::1], int64, int64, int32[:, ::1], int64, float64[:, :, ::1], int32[::1], "
           "float32[:, ::1], float64[::1], int64, int64[::1], int32[:, :, ::1], float64[:, :, ::1])")
    return [
        ("blocked_topk_tile8", blocked_topk_kernel(*blocked_geometry(30, 10000, 10 ** 7, 46 * 1024, 132)), sig),
        ("blocked_topk_tile1", blocked_topk_kernel(*blocked_geometry(30, 1, 10 ** 7, 46 * 1024, 132)), sig),
        ("blocked_topk_k200", blocked_topk_kernel(*blocked_geometry(200, 10000, 10 ** 7, 46 * 1024, 132)), sig),
        ("rows_accumulate", rows_accumulate_kernel(256, 5120, 1), rows_sig("int64")),
        ("rows_accumulate_2", rows_accumulate_kernel(256, 2048, 2), rows_sig("int64")),
        ("rows_accumulate_4", rows_accumulate_kernel(256, 1280, 4), rows_sig("int64")),
        ("rows_accumulate_keys", rows_accumulate_kernel(256, 5120, 1, 16), rows_sig("float64")),
        ("rows_accumulate_keys_2", rows_accumulate_kernel(256, 2048, 2, 32), rows_sig("float64")),
        ("rows_accumulate_keys_ranged", rows_accumulate_kernel(256, 5120, 1, 16, True), rows_sig("float64")),
        ("rows_accumulate_keys_grid", rows_accumulate_kernel(256, 5120, 1, 16, True, True), rows_sig("float64")),
        ("block_ranges_kernel", block_ranges_kernel,
         "void(int32[:, ::1], int64[::1], int32[::1], int64, int64, int64, int64, int32[::1], int32[:, ::1], "
         "int64[:, ::1], int32[:, ::1])"),
    ]
