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
from ..io.corpus import csr_arrays
from ..kernels import blocked, scoring
from ..progress import progress
from .cuda_backend import ROWS_SHARE, SIM_BATCH, csr_rows
from .index import Index
from .report import SearchReport

STATIC_SHARED = 48 * 1024  # numba's static shared arrays: at most 48 KB a block whatever the device offers
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


def topk_blocked_cpu(index: Index, Q, k, code, self_doc, batch_size, quiet, geom, report: SearchReport):
    """The CPU twin of the blocked method: (docs int32 (n_q, k), keys float64 (n_q, k)).
    Block length and tile as the CUDA path's at a 46 KB budget (Geometry.blocked_* override)."""
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
    out_doc = np.empty((n_q, k), np.int32)
    out_key = np.empty((n_q, k), np.float64)
    step = max(1, int(batch_size or 4096))
    report.postings = 0
    report.geometry, report.segments = (block, items, tile), -(-index.n_docs // (block * items))
    with progress(-(-n_q // step) if n_q > step else 0, "scoring (cpu, blocked)", quiet) as bar:
        for lo in range(0, n_q, step):
            hi = min(n_q, lo + step)
            tile_ptr, ent_term, ent_q, ent_w = tile_entries(*arrays, lo, hi, tile)
            blocked.topk_blocked_cpu(tile_ptr, ent_term, ent_q, ent_w, scale[lo:hi], qn[lo:hi], self_doc[lo:hi],
                                     p.term_ptr, p.post_doc, p.post_w, dn, code, k, block * items, tile,
                                     out_doc[lo:hi], out_key[lo:hi])
            report.postings += int(np.diff(p.term_ptr)[ent_term].sum())
            bar.update(1)
    report.seconds = time.perf_counter() - t0
    return out_doc, out_key


def topk_blocked_cuda(index: Index, Q, k, code, self_doc, batch_size, quiet, geom, report: SearchReport):
    """Host driver of the blocked method on the device: (docs int32 (n_q, k), keys float64 (n_q, k)).

    Per batch of queries: the entries go up in one packed transfer, one blocked_topk launch
    (grid: document blocks x query tiles), merge_topk levels until one list per query, one copy
    back. Batches: ROWS_SHARE of free memory over 24 B x k per document block (lists and one merge
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
    dev = sorted_index(index, packed=True)
    key = ("blocked_dn", code)
    if key not in index.device_cache:
        index.device_cache[key] = cuda.to_device(index.norm_terms(code))
    d_dn = index.device_cache[key]
    per_query = 24 * n_seg * k + 64
    if batch_size:
        rows = max(1, int(batch_size))
    elif res.simulator:
        rows = SIM_BATCH
    else:
        rows = max(tile, int(res.share(ROWS_SHARE) // per_query) // tile * tile)
    rows = min(rows, n_q, 65535 * tile)
    kernel = blocked.blocked_topk_kernel(block, items, tile, cap, bool(geom.group_counting))
    group = max(2, geom.merge_width // next_pow2(k))
    merge = scoring.merge_topk_kernel(geom.merge_block, next_pow2(group * k)) if n_seg > 1 else None
    work = res.workspace
    report.shards, report.batch_size, report.segments = 1, rows, n_seg
    report.geometry, report.index_bytes, report.rows_bytes = (block, items, tile), dev.nbytes, rows * per_query
    report.launch = "dispatcher"
    report.postings = 0
    docs = np.empty((n_q, k), np.int32)
    keys = np.empty((n_q, k), np.float64)
    df = np.diff(index.cpu().term_ptr)
    batches = range(0, n_q, rows)
    level = 0
    with progress(len(batches) if len(batches) > 1 else 0, "scoring (cuda, blocked)", quiet) as bar:
        for lo in batches:
            hi = min(n_q, lo + rows)
            n = hi - lo
            tile_ptr, ent_term, ent_q, ent_w = tile_entries(*arrays, lo, hi, tile)
            qinfo = np.empty((n, 3), np.float64)
            qinfo[:, 0], qinfo[:, 1], qinfo[:, 2] = scale[lo:hi], qn[lo:hi], self_doc[lo:hi]
            m = ent_term.size
            parts = (tile_ptr, ent_term if m else np.zeros(1, np.int32), ent_q if m else np.zeros(1, np.int32),
                     ent_w if m else np.zeros(1, np.float32), qinfo)
            d_ptr, d_term, d_q, d_w, d_qinfo = res.upload_packed(parts, into=work, name="blocked_upload")
            l_doc = work.get("blocked_doc", (n, n_seg, k), np.int32)
            l_key = work.get("blocked_key", (n, n_seg, k), np.float64)
            kernel[(n_seg, tile_ptr.size - 1), block](d_ptr, d_term, d_q, d_w, d_qinfo, dev.term_ptr, dev.post_doc,
                                                      dev.post_w, d_dn, code, k, l_doc, l_key)
            n_lists, level = n_seg, 0
            while n_lists > 1:
                n_groups = blocks(n_lists, group)
                level += 1
                o_doc = work.get(f"blocked_merge_doc{level % 2}", (n, n_groups, k), np.int32)
                o_key = work.get(f"blocked_merge_key{level % 2}", (n, n_groups, k), np.float64)
                merge[(n_groups, n), geom.merge_block](l_doc, l_key, group, k, o_doc, o_key)
                l_doc, l_key, n_lists = o_doc, o_key, n_groups
            docs[lo:hi] = l_doc.copy_to_host()[:, 0, :]
            keys[lo:hi] = l_key.copy_to_host()[:, 0, :]
            report.postings += int(df[ent_term].sum())
            bar.update(1)
    report.merge_levels = level
    work.release(larger_than=1 << 30)
    report.seconds = time.perf_counter() - t0
    return docs, keys
