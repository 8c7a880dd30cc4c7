"""The engine's document-blocked top-k ("blocked", issue 19): host preparation, CPU twin and CUDA driver.

No dense score rows: the documents are cut into blocks whose int64 accumulators for a tile of
queries fit in shared memory (gputext.kernels.blocked), so device memory per query is its
per-block top-k lists (12 bytes x k per block, twice with the merge levels) instead of 8 bytes a
document. Block and tile sizes come from the device (shared memory per block, multiprocessors:
kernels.blocked.blocked_geometry); Geometry.blocked_* fix them (tests, the simulator).

The CUDA path keeps the index's sorted postings on the device (engine.grouped_cuda.sorted_index,
shared with the grouped selector), so it serves an index whose postings fit the device; the rows
method shards larger ones.
"""
from __future__ import annotations

import time

import numpy as np

from ..device.launch import blocks, next_pow2
from ..device.memory import resources
from ..io.corpus import csr_arrays, csr_rows
from ..kernels import blocked, scoring
from ..progress import progress
from .cuda_backend import ROWS_SHARE, SIM_BATCH, STATIC_SHARED
from .index import Index
from .report import SearchReport

SHARED_MARGIN = 2 * 1024  # the runtime's own use of shared memory


def tile_entries(indptr, indices, data, lo: int, hi: int, tile: int):
    """Entries of queries [lo, hi) (CSR arrays of all queries): (tile_ptr int64 (n_tiles+1,),
    ent_term int32, ent_q int32 (row in the batch), ent_w float32), sorted by (tile, term, query)."""
    b_ptr, b_ind, b_dat = csr_rows(indptr, indices, data, lo, hi)
    n = hi - lo
    rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(b_ptr))
    tiles = rows // tile
    order = np.lexsort((rows, b_ind, tiles))
    n_tiles = -(-n // tile)
    tile_ptr = np.searchsorted(tiles[order], np.arange(n_tiles + 1), side="left").astype(np.int64)
    return (tile_ptr, np.ascontiguousarray(b_ind[order], np.int32), np.ascontiguousarray(rows[order]),
            np.ascontiguousarray(b_dat[order], np.float32))


def geometry_for(k: int, n_q: int, n_docs: int, geom, simulator: bool):
    """(block, items, tile, cap): Geometry.blocked_* where set, else from the device."""
    res = resources()
    limit, n_sm = STATIC_SHARED - SHARED_MARGIN, 1
    if not simulator:
        from numba import cuda
        dev = cuda.get_current_device()
        limit = min(int(getattr(dev, "MAX_SHARED_MEMORY_PER_BLOCK", STATIC_SHARED)), STATIC_SHARED) - SHARED_MARGIN
        n_sm = res.multiprocessors
    return blocked.blocked_geometry(k, n_q, n_docs, limit, n_sm, geom.blocked_block, geom.blocked_items,
                                    geom.blocked_tile)


def bound_tables(index: Index, seg_len: int, code: int, budget: int):
    """The safe-pruning bounds of kernels.blocked (made once per (index, block length, metric,
    budget) and kept on the Index): (term_row int32 (n_terms,) = 0..n_terms-1, bmax float32
    (n_terms, n_bound) = each term's largest |weight| per bound block (cosine: largest |weight| /
    |d|_2, rounded up, so the bound is sum |q_t| bmax / |q|_2, and dn_min = 1), dn_min float64
    (n_bound,) = each bound block's smallest positive norm term (dot: unused), bound_len). bound_len is the smallest
    seg_len x 2^j whose table fits ``budget`` bytes; one parallel pass over the postings builds it."""
    key = ("blocked_bounds", seg_len, code, budget)
    if key not in index.device_cache:
        p = index.cpu()
        bound_len = seg_len
        while 4 * index.n_terms * -(-index.n_docs // bound_len) > budget and bound_len < index.n_docs:
            bound_len *= 2
        n_bound = max(1, -(-index.n_docs // bound_len))
        terms = np.arange(index.n_terms, dtype=np.int64)
        cosine = code == scoring.COSINE
        bmax = blocked.block_max_table(p.term_ptr, p.post_doc, p.post_w, terms, bound_len, n_bound,
                                       index.norm_terms(code) if cosine else np.empty(0))
        dn_min = np.ones(n_bound) if cosine else blocked.block_min_norm(index.norm_terms(code), bound_len, n_bound)
        index.device_cache[key] = (terms.astype(np.int32), bmax, dn_min, bound_len)
    return index.device_cache[key]


def topk_blocked_cpu(index: Index, Q, k, code, self_doc, batch_size, quiet, geom, report: SearchReport):
    """The CPU twin of the blocked method: (docs int32 (n_q, k), keys float64 (n_q, k)).
    Block length and tile as the CUDA path's at a 46 KB budget (Geometry.blocked_* override).
    With Geometry.blocked_prune (cosine, dot) blocks whose bound cannot reach a query's k-th key
    are skipped (kernels.blocked: safe pruning); report.postings / postings_skipped count them."""
    import numba

    t0 = time.perf_counter()
    p = index.cpu()
    arrays = csr_arrays(Q)
    scale, qn = scoring.query_stats(*arrays, index.term_maxabs, code)
    dn = index.norm_terms(code)
    n_q = Q.shape[0]
    block, items, tile, _ = blocked.blocked_geometry(k, n_q, index.n_docs, STATIC_SHARED - SHARED_MARGIN,
                                                     numba.get_num_threads(), geom.blocked_block, geom.blocked_items,
                                                     geom.blocked_tile)
    seg_len = block * items
    prune = bool(geom.blocked_prune) and code in (scoring.COSINE, scoring.DOT) and index.n_docs > 0
    if prune:
        term_row, bmax, dn_min, bound_len = bound_tables(index, seg_len, code, geom.blocked_bound_bytes)
    else:
        term_row, bmax, dn_min, bound_len = np.empty(0, np.int32), np.zeros((1, 1), np.float32), np.zeros(1), seg_len
    out_doc = np.empty((n_q, k), np.int32)
    out_key = np.empty((n_q, k), np.float64)
    step = max(1, int(batch_size or 4096))
    report.postings = report.postings_skipped = 0
    report.geometry, report.segments = (block, items, tile), -(-index.n_docs // seg_len)
    with progress(-(-n_q // step) if n_q > step else 0, "scoring (cpu, blocked)", quiet) as bar:
        for lo in range(0, n_q, step):
            hi = min(n_q, lo + step)
            tile_ptr, ent_term, ent_q, ent_w = tile_entries(*arrays, lo, hi, tile)
            counts = np.zeros((tile_ptr.size - 1, 2), np.int64)
            blocked.topk_blocked_cpu(tile_ptr, ent_term, ent_q, ent_w, scale[lo:hi], qn[lo:hi], self_doc[lo:hi],
                                     p.term_ptr, p.post_doc, p.post_w, dn, code, k, seg_len, tile, int(prune), term_row,
                                     bmax, index.term_maxabs, dn_min, bound_len, counts, out_doc[lo:hi],
                                     out_key[lo:hi])
            report.postings += int(counts[:, 0].sum())
            report.postings_skipped += int(counts[:, 1].sum())
            bar.update(1)
    report.seconds = time.perf_counter() - t0
    return out_doc, out_key


def probe_blocks(Qb, bmax, dn_min, bound_len: int, seg_len: int, n_seg: int, tile: int, n_probe: int,
                 code: int) -> np.ndarray:
    """int32 (n_tiles, n_probe): for each tile of the batch Qb (CSR, n queries), the document
    blocks of the bound blocks whose bounds are the highest for the tile's queries (each query's
    bounds scaled to its largest, summed over the tile), -1 past the last. The probe pass scores
    them first: its k-th key is a lower bound of each query's final k-th key. Only a ranking (in
    float32): the pruning's safety comes from the bound in the kernel, not from this choice."""
    n = Qb.shape[0]
    ub = np.asarray(abs(Qb).astype(np.float32) @ bmax, dtype=np.float64)  # (n, n_bound)
    if code == scoring.COSINE:
        ub = ub / np.where(np.isfinite(dn_min) & (dn_min > 0), dn_min, np.inf)
    ub = ub / np.maximum(ub.max(axis=1, keepdims=True), 1e-300)
    n_tiles = -(-n // tile)
    pad = np.zeros((n_tiles * tile, ub.shape[1]))
    pad[:n] = ub
    score = pad.reshape(n_tiles, tile, -1).sum(axis=1)
    per_bound = bound_len // seg_len
    n_bb = max(1, min(score.shape[1], -(-n_probe // per_bound)))
    best = np.argsort(-score, axis=1, kind="stable")[:, :n_bb]
    segs = (best[:, :, None] * per_bound + np.arange(per_bound)[None, None, :]).reshape(n_tiles, -1)[:, :n_probe]
    return np.ascontiguousarray(np.where(segs < n_seg, segs, -1), np.int32)


def merge_lists(l_doc, l_key, n: int, k: int, merge, group: int, geom, work, prefix: str):
    """Merge (n, n_lists, k) device lists to (n, 1, k) with merge_topk levels; returns the final
    (docs, keys) device arrays and the number of levels."""
    n_lists, level = l_doc.shape[1], 0
    while n_lists > 1:
        n_groups = blocks(n_lists, group)
        level += 1
        o_doc = work.get(f"{prefix}_doc{level % 2}", (n, n_groups, k), np.int32)
        o_key = work.get(f"{prefix}_key{level % 2}", (n, n_groups, k), np.float64)
        merge[(n_groups, n), geom.merge_block](l_doc, l_key, group, k, o_doc, o_key)
        l_doc, l_key, n_lists = o_doc, o_key, n_groups
    return l_doc, l_key, level


def topk_blocked_cuda(index: Index, Q, k, code, self_doc, batch_size, quiet, geom, report: SearchReport):
    """Host driver of the blocked method on the device: (docs int32 (n_q, k), keys float64 (n_q, k)).

    Per batch of queries: the entries go up in one packed transfer; with pruning (cosine, dot,
    Geometry.blocked_prune) a probe launch scores geom.blocked_probe document blocks per tile (the
    highest bounds) and its merged lists' k-th keys are the thresholds of the main launch; the main
    blocked_topk launch (grid: document blocks x query tiles) skips the (block, query) pairs whose
    bound is below the threshold; merge_topk levels until one list per query, one copy back.
    Batches: ROWS_SHARE of free memory over 24 B x k per document block (lists and one merge
    level)."""
    from numba import cuda

    from .grouped_cuda import sorted_index

    t0 = time.perf_counter()
    res = resources()
    arrays = csr_arrays(Q)
    scale, qn = scoring.query_stats(*arrays, index.term_maxabs, code)
    n_q, n_docs = Q.shape[0], index.n_docs
    block, items, tile, cap = geometry_for(k, n_q, n_docs, geom, res.simulator)
    seg_len = block * items
    n_seg = blocks(n_docs, seg_len)
    key = ("blocked_dn", code)
    if key not in index.device_cache:
        index.device_cache[key] = cuda.to_device(index.norm_terms(code))
    d_dn = index.device_cache[key]
    prune = bool(geom.blocked_prune) and code in (scoring.COSINE, scoring.DOT) and n_docs > 0
    n_probe = max(1, min(int(geom.blocked_probe), n_seg))
    work = res.workspace
    if prune:
        term_row, bmax, dn_min, bound_len = bound_tables(index, seg_len, code, geom.blocked_bound_bytes)
        dkey = ("blocked_bounds_device", seg_len, code, geom.blocked_bound_bytes)
        if dkey not in index.device_cache:  # uploaded once per Index, like the postings
            index.device_cache[dkey] = tuple(cuda.to_device(a) for a in (term_row, bmax, dn_min))
        d_row, d_bmax, d_dnmin = index.device_cache[dkey]
    else:
        bound_len = seg_len
        d_row, d_bmax, d_dnmin = (cuda.to_device(np.zeros(1, np.int32)), cuda.to_device(np.zeros((1, 1), np.float32)),
                                  cuda.to_device(np.zeros(1)))
    dev = sorted_index(index, geom, packed=True)  # after the bounds: their host build, when made, is uploaded
    per_query = 24 * (n_seg + (n_probe if prune else 0)) * k + 64
    if batch_size:
        rows = max(1, int(batch_size))
    elif res.simulator:
        rows = SIM_BATCH
    else:
        rows = max(tile, int(res.share(ROWS_SHARE) // per_query) // tile * tile)
    rows = min(rows, n_q, 65535 * tile)
    kernel = blocked.blocked_topk_kernel(block, items, tile, cap, bool(geom.group_counting))
    group = max(2, geom.merge_width // next_pow2(k))
    merge = scoring.merge_topk_kernel(geom.merge_block, next_pow2(group * k))
    report.shards, report.batch_size, report.segments = 1, rows, n_seg
    report.geometry, report.index_bytes, report.rows_bytes = (block, items, tile), dev.nbytes, rows * per_query
    report.launch = "dispatcher"
    docs = np.empty((n_q, k), np.int32)
    keys = np.empty((n_q, k), np.float64)
    d_counts = cuda.to_device(np.zeros(2, np.int64))
    no_probe = cuda.to_device(np.zeros((1, 0), np.int32))
    batches = range(0, n_q, rows)
    level = 0
    with progress(len(batches) if len(batches) > 1 else 0, "scoring (cuda, blocked)", quiet) as bar:
        for lo in batches:
            hi = min(n_q, lo + rows)
            n = hi - lo
            tile_ptr, ent_term, ent_q, ent_w = tile_entries(*arrays, lo, hi, tile)
            n_tiles = tile_ptr.size - 1
            qinfo = np.empty((n, 3), np.float64)
            qinfo[:, 0], qinfo[:, 1], qinfo[:, 2] = scale[lo:hi], qn[lo:hi], self_doc[lo:hi]
            m = ent_term.size
            parts = [tile_ptr, ent_term if m else np.zeros(1, np.int32), ent_q if m else np.zeros(1, np.int32),
                     ent_w if m else np.zeros(1, np.float32), qinfo]
            if prune:
                parts.append(probe_blocks(Q[lo:hi], bmax, dn_min, bound_len, seg_len, n_seg, tile, n_probe, code))
            up = res.upload_packed(tuple(parts), into=work, name="blocked_upload")
            args = (*up[:5], dev.term_ptr, dev.post_doc, dev.post_w, d_dn, code, k)
            theta = work.get("blocked_theta", (n, 1, k), np.float64)
            if prune:  # the probe pass: its merged lists' k-th keys are the thresholds
                p_doc = work.get("probe_doc", (n, n_probe, k), np.int32)
                p_key = work.get("probe_key", (n, n_probe, k), np.float64)
                kernel[(n_probe, n_tiles), block](*args, up[5], 0, theta, d_row, d_bmax, d_dnmin, bound_len,
                                                  work.get("probe_counts", (2,), np.int64), p_doc, p_key)
                _, theta, _ = merge_lists(p_doc, p_key, n, k, merge, group, geom, work, "probe_merge")
            l_doc = work.get("blocked_doc", (n, n_seg, k), np.int32)
            l_key = work.get("blocked_key", (n, n_seg, k), np.float64)
            kernel[(n_seg, n_tiles), block](*args, no_probe, int(prune), theta, d_row, d_bmax, d_dnmin, bound_len,
                                            d_counts, l_doc, l_key)
            l_doc, l_key, level = merge_lists(l_doc, l_key, n, k, merge, group, geom, work, "blocked_merge")
            docs[lo:hi] = l_doc.copy_to_host()[:, 0, :]
            keys[lo:hi] = l_key.copy_to_host()[:, 0, :]
            bar.update(1)
    report.postings, report.postings_skipped = (int(v) for v in d_counts.copy_to_host())
    report.merge_levels = level
    work.release(larger_than=1 << 30)
    report.seconds = time.perf_counter() - t0
    return docs, keys
