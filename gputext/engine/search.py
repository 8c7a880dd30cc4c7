"""The engine's public entry points: validate once, pick the backend, run, return arrays.

search_topk      exact k nearest documents of each query (the argmax selector is k = 1)
search_threshold every document whose similarity reaches (or distance stays within) a threshold

Both backends compute the same fixed-point scores (gputext.kernels.scoring), so their results are
identical, not merely close. Results are in numpy arrays on the host.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..backend import Backend, as_backend
from ..errors import InputError
from ..io.corpus import csr_arrays
from ..kernels import grouped, scoring
from ..similarity import METRICS as METRIC_CODES
from ..similarity import SIMILARITIES, metric_code
from .index import Index
from .report import SearchReport
from .query import (check_k, check_queries, grouped_query_info, group_ptr, keys_to_scores, metric_codes, min_key_for,
                    self_docs)

METRICS = tuple(METRIC_CODES)
TOPK_METHODS = ("auto", "rows", "blocked")
MAX_CUDA_K = 1024  # the top-k selection block has k <= block <= 1024 threads
MAX_GROUPED_CUDA_K = 512  # the grouped kernel's shared memory (24 B a thread and a position) at block = k
__all__ = ["METRICS", "SIMILARITIES", "Geometry", "search_topk", "search_topk_keys", "search_threshold",
           "search_topk_grouped", "keys_to_scores", "min_key_for", "grouped_query_info", "serving_backend",
           "TOPK_METHODS", "topk_method"]


@dataclass
class Geometry:
    """Launch geometry of the CUDA path (tests shrink it for the simulator)."""

    accumulate_block: int = 256
    accumulate_items: int = 16
    select_block: int | None = None  # None: max(256, next pow2 of k)
    select_items: int | None = None  # None: as many as fit 46 KB of shared memory
    merge_block: int = 256
    merge_width: int = 2048  # entries one merge block sorts (groups of merge_width // k lists) ...
    merge_rank_group: int = 16  # rows top-k: lists a rank merge combines (kernels.scoring.merge_topk_kernel by rank); 0 = its bitonic sort, groups by merge_width
    merge_width_small: int = 256  # ... and for batches of fewer than 32 queries (rows top-k): more, smaller merges run in parallel
    build_block: int = 256
    scan_block: int = 256
    scan_items: int = 8
    group_block: int | None = None  # grouped selector: None = max(128, next pow2 of k)
    group_items: int | None = None  # None: fewest (<= 16) covering the largest group
    group_max_registers: int = 56  # register cap of the fused grouped kernel (0: none); occupancy (H200, 20NG: 56 0.5-1.0 ms faster than 64 in 5 runs of 2026-11-25)
    group_counting: bool = True  # grouped selector: tau and the candidates' order by counting, not sorting (same lists)
    finish_block: int = 256
    staging_bytes: int = 32 << 20  # copy-back chunk through pinned buffers; 0: plain copy
    pipeline: int = 4  # grouped selector: split the queries into at least this many batches ...
    pipeline_min_rows: int = 1024  # ... of at least this many queries, to overlap copies and kernels
    segment_table_bytes: int = 256 << 20  # largest (term, segment) offset table; beyond: binary search
    packed_upload: bool = True  # grouped selector: index and queries each in one pinned transfer (upload_packed)
    fast_launch: bool = True  # top-k: pre-marshalled launches, one driver call each (gputext.device.Launch; real GPU)
    shard_docs: int | None = None  # rows top-k: documents per resident shard; None or -1 (default) = one shard with the shared accumulation, else the lanes' one-query score rows in 2/3 of L2 (engine.cuda_backend.l2_shard_docs); 0 = one shard
    shard_min_queries: int = 2  # rows top-k: a search of fewer queries makes no resident shards (one query at 10^7: 2.07 ms split, 1.69 ms whole)
    tile_rows: int | None = None  # rows top-k: queries per tile; None = with tile_grid (below) enough that a tile's accumulation launches 16 blocks a multiprocessor, at least 16 and at most 32 queries (16 at 10^6 and 10^7 documents on an H100: engine.cuda_backend.grid_rows), else as many score rows as fit 2/3 of L2 with every lane's (engine.cuda_backend.tile_rows); 0 = as many as the memory share holds
    tile_term_order: bool = True  # ... a tile's (query, term) segments by term: queries sharing a term read its postings back to back
    tile_grid: bool = True  # ... with the shared accumulation: a tile's queries as blocks of their own (kernels.blocked.rows_accumulate_kernel grid=True), not rows in one block's shared memory (which splits its documents over the rows). H100 2026-11-27 10:22, 10^6 x 10,000: 0.267-0.293 s for tiles of 32-4, against 0.408 s for one query a tile and 0.38-0.89 s for 2-8 shared rows; 10^7: 3.22-3.25 s either way
    tile_lanes: int = 8  # ... tiles in flight on as many streams, each lane with its own score rows (its select and merges overlap the others' accumulation)
    shared_accumulate: int = 5120  # rows top-k: int64 counters in shared memory per block (documents x tile rows: kernels.blocked.rows_accumulate_kernel, plain stores into the score rows); 0 = atomics into the score rows (kernels.scoring.accumulate_kernel). H100 2026-11-27 04:08, 10^6 x 10,000: 0.496 s (5120) against 0.611 s (atomics), one query 0.297 ms p50 either way
    shared_min_docs: int = 512  # ... the shared accumulation's least documents a block (a tile of more rows takes the atomics)
    block_ranges: bool | None = None  # ... the shared accumulation's posting ranges by a kernel of their own before it (kernels.blocked.block_ranges_kernel), not by binary searches in the accumulation's blocks; None = for a search of more tiles than lanes (H100 08:30, 10^7 x 10,000: 3.60 s with, 3.84 s without; one query: its 0.085 ms kernel costs more than the 0.07 ms it saves)
    block_table: bool = True  # ... each (term, document block)'s posting range from a table of the blocks' first postings for the lists of at least one posting a block (kernels.postings.block_starts_kernel, made once a shard, within 1/16 of its postings' bytes), not two binary searches; shorter lists: one search and a gallop
    unit_select: bool = True  # ... with the shared accumulation: each query's top k from its units' maxima in one block (kernels.unit_select), not per-segment lists and merge levels
    unit_threads: int | None = None  # ... accumulation threads a unit; None = the fewest bytes read (kernels.unit_select.unit_threads)
    unit_block: int | None = None  # ... threads of the unit select (a power of two >= k); None = 1,024 for a search of at most one tile a lane (latency), else 256
    unit_cap: int = 2048  # ... its shared candidates (a power of two; more found: theta refined, gathered again)
    tile_chunk: int = 8192  # ... queries whose tiles are uploaded, launched and read back together (one synchronisation)
    sorted_postings: bool = True  # rows top-k: upload the CPU twin's build (lists sorted by document: a warp's atomics share sectors) instead of building on the device (lists in any order)
    blocked_block: int | None = None  # blocked top-k: threads a block; None = max(128, next pow2 of k)
    blocked_items: int | None = None  # ... documents per thread in a document block; None = from shared memory / SMs
    blocked_tile: int | None = None  # ... queries per tile; None = from shared memory (<= 8)
    blocked_prune: bool = False  # blocked top-k: skip blocks whose bound cannot reach the k-th key (exact; cosine, dot); off: on tf-idf text it skips ~nothing and costs (H100, 10^6 documents: 0 skipped, 6.39 s against 0.14 s)
    blocked_probe: int = 8  # ... document blocks per query tile scored first for the thresholds (cuda)
    blocked_bound_bytes: int = 256 << 20  # ... the largest (term, bound block) table of maxima


def _cpu_chunks(n_queries: int) -> int:
    """One chunk of queries per thread: each chunk holds accumulators of 28 bytes a document."""
    import numba
    return max(1, min(n_queries, numba.get_num_threads()))


def search_topk(index: Index, Q, k: int, metric: str = "cosine", device: str | Backend = "auto",
                exclude_self=False, batch_size: int | None = None, quiet: bool = True,
                geometry: Geometry | None = None, stats: dict | None = None,
                method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest documents of every query row.

    Q: CSR (n_queries, n_terms), same vocabulary as the index. Returns (indices int32, scores
    float32), both (n_queries, k), best first: similarity for cosine/dot, distance for l2/l1;
    ties broken by lower document index; -1 / NaN where fewer than k documents exist.
    exclude_self: False; True (query i is document i); or int array (n_queries,) of documents to
    leave out (-1 for none). stats: a dict to receive what the run did (backend, shards,
    batch_size, index_bytes and rows_bytes on the device, postings scored, seconds, topk_method).
    method: "auto", "rows" (dense per-query score rows) or "blocked" (document blocks in shared
    memory, gputext.engine.blocked); both give identical results (topk_method decides auto).
    """
    docs, keys = search_topk_keys(index, Q, k, metric, device, exclude_self, batch_size, quiet, geometry, stats, method)
    return docs, keys_to_scores(keys, docs, metric_code(metric))


def search_topk_keys(index: Index, Q, k: int, metric: str = "cosine", device: str | Backend = "auto",
                     exclude_self=False, batch_size: int | None = None, quiet: bool = True,
                     geometry: Geometry | None = None, stats: dict | None = None,
                     method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """search_topk before the scores are rounded: (indices int32 (n_queries, k), keys float64
    (n_queries, k)), keys larger-is-better (kernels.scoring: similarity, or minus the distance),
    -inf where indices == -1. The selection order is (key descending, index ascending), so lists
    of disjoint row ranges of one corpus merge exactly (merge_topk; the ranges' indexes made with
    Index.with_term_maxabs of the whole corpus). keys_to_scores(keys, indices, code) gives the
    scores search_topk returns."""
    code = metric_code(metric)
    k = check_k(k)
    Q = check_queries(index, Q)
    self_doc = self_docs(index, Q.shape[0], exclude_self)
    report = SearchReport()
    backend = serving_backend(as_backend(device), k, MAX_CUDA_K, "the CUDA selector", quiet, report)
    chosen = report.topk_method = topk_method(method, backend, index)
    if Q.shape[0] == 0:
        report.into(stats)
        return np.empty((0, k), np.int32), np.empty((0, k), np.float64)
    if chosen == "blocked":
        from . import blocked
        run = blocked.topk_blocked_cuda if backend.is_cuda else blocked.topk_blocked_cpu
        docs, keys = run(index, Q, k, code, self_doc, batch_size, quiet, geometry or Geometry(), report)
    elif backend.is_cuda:
        from .cuda_backend import topk_cuda
        docs, keys = topk_cuda(index, Q, k, code, self_doc, batch_size, quiet, geometry or Geometry(), report)
    else:
        docs, keys = _topk_cpu(index, Q, k, code, self_doc, batch_size, quiet)
    report.into(stats)
    return docs, keys


def topk_method(method: str, backend: Backend, index: Index) -> str:
    """The engine's one decision of how search_topk runs: "rows" (dense per-query score rows; the
    CPU twin's touched-document lists) or "blocked" (gputext.engine.blocked). auto keeps "rows"
    on both backends until a GPU benchmark (scripts/bench_knn.py --blocked) shows the blocked
    method faster; it is the method for corpora whose score rows outgrow the device (issue 19)."""
    if method not in TOPK_METHODS:
        raise InputError(f"unknown top-k method {method!r}: expected one of {', '.join(TOPK_METHODS)}")
    return "rows" if method == "auto" else method


def backend_label(backend: Backend) -> str:
    return backend.name + (" (simulator)" if backend.simulator else "")


def serving_backend(backend: Backend, k: int, limit: int, what: str, quiet: bool, report: SearchReport) -> Backend:
    """The backend that serves a top-k request: the CUDA selectors hold k <= limit. Above it, when
    the device was chosen by ``auto``, the CPU twin serves the request (same results) and says so
    in one line (stderr unless quiet, and report.fallback); an explicit ``cuda`` is an error. Sets
    report.backend to the backend that serves."""
    report.backend = backend_label(backend)
    if not backend.is_cuda or k <= limit:
        return backend
    if not backend.auto:
        raise InputError(f"k = {k} is more than {what} holds (at most {limit}); use --device cpu or auto")
    note = f"k = {k} is more than {what} holds (at most {limit}): running the CPU twin (same results)"
    if not quiet:
        import sys
        print(f"note: {note}", file=sys.stderr)
    report.fallback = note
    report.backend = "cpu"
    return Backend("cpu", False, note)


def _batches(n_queries: int, batch_size: int | None, default: int):
    step = max(1, int(batch_size or default))
    return [(s, min(n_queries, s + step)) for s in range(0, n_queries, step)]


def _topk_cpu(index, Q, k, code, self_doc, batch_size, quiet):
    from ..progress import progress

    p = index.cpu()
    scale, qn = scoring.query_stats(*csr_arrays(Q), index.term_maxabs, code)
    dn = index.norm_terms(code)
    order = index.norm_order(code)
    n_q = Q.shape[0]
    out_doc = np.empty((n_q, k), np.int32)
    out_key = np.empty((n_q, k), np.float64)
    batches = _batches(n_q, batch_size, 4096)
    with progress(len(batches) if len(batches) > 1 else 0, "scoring (cpu)", quiet) as bar:
        for lo, hi in batches:
            indptr, indices, data = csr_arrays(Q[lo:hi])
            scoring.topk_cpu(indptr, indices, data, scale[lo:hi], qn[lo:hi], self_doc[lo:hi],
                             p.term_ptr, p.post_doc, p.post_w, dn, order, code, k,
                             _cpu_chunks(hi - lo), out_doc[lo:hi], out_key[lo:hi])
            bar.update(1)
    return out_doc, out_key


def search_threshold(index: Index, Q, threshold: float, metric: str = "cosine",
                     device: str | Backend = "auto", exclude_self=False, batch_size: int | None = None,
                     quiet: bool = True, geometry: Geometry | None = None, stats: dict | None = None,
                     after=None) -> sp.csr_matrix:
    """Every document with similarity >= threshold (cosine, dot) or distance <= threshold (l2, l1).

    Returns CSR float32 (n_queries, n_docs) of the scores (the values search_topk reports),
    column indices sorted within rows. Documents sharing no term with a query are included when
    they qualify (e.g. threshold <= 0 for cosine). after: int array (n_queries,): query i keeps
    only documents with index > after[i] (-1: all), e.g. the upper triangle of an all-pairs graph
    (after = the query's own index), which halves what comes back from the device.
    """
    code = metric_code(metric)
    min_key = min_key_for(threshold, code)
    Q = check_queries(index, Q)
    self_doc = self_docs(index, Q.shape[0], exclude_self)
    if after is None:
        after = np.full(Q.shape[0], -1, np.int64)
    after = np.asarray(after, dtype=np.int64)
    if after.shape != (Q.shape[0],):
        raise InputError(f"after must have one entry per query ({Q.shape[0]}), got shape {after.shape}")
    report = SearchReport()
    backend = as_backend(device)
    report.backend = backend_label(backend)
    if backend.is_cuda:
        from .cuda_backend import threshold_cuda
        indptr, docs, keys = threshold_cuda(index, Q, min_key, code, self_doc, batch_size, quiet,
                                            geometry or Geometry(), report, after)
    else:
        indptr, docs, keys = _threshold_cpu(index, Q, min_key, code, self_doc, after, batch_size, quiet)
    report.into(stats)
    scores = keys_to_scores(keys, docs, code)
    out = sp.csr_matrix((scores, docs, indptr), shape=(Q.shape[0], index.n_docs))
    out.has_sorted_indices = True
    return out


def _threshold_cpu(index, Q, min_key, code, self_doc, after, batch_size, quiet):
    from ..progress import progress

    p = index.cpu()
    scale, qn = scoring.query_stats(*csr_arrays(Q), index.term_maxabs, code)
    dn = index.norm_terms(code)
    order = index.norm_order(code)
    n_q = Q.shape[0]
    parts_ptr, parts_doc, parts_key = [np.zeros(1, np.int64)], [], []
    batches = _batches(n_q, batch_size, 4096)
    total = 0
    with progress(len(batches) if len(batches) > 1 else 0, "scoring (cpu)", quiet) as bar:
        for lo, hi in batches:
            indptr, indices, data = csr_arrays(Q[lo:hi])
            args = (indptr, indices, data, scale[lo:hi], qn[lo:hi], self_doc[lo:hi], after[lo:hi],
                    p.term_ptr, p.post_doc, p.post_w, dn, order, code, min_key, _cpu_chunks(hi - lo))
            counts = np.zeros(hi - lo, np.int64)
            scoring.threshold_cpu(*args, counts, np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.float64))
            ptr = np.zeros(hi - lo + 1, np.int64)
            np.cumsum(counts, out=ptr[1:])
            docs = np.empty(ptr[-1], np.int32)
            keys = np.empty(ptr[-1], np.float64)
            scoring.threshold_cpu(*args, counts, ptr, docs, keys)
            parts_ptr.append(ptr[1:] + total)
            parts_doc.append(docs)
            parts_key.append(keys)
            total += int(ptr[-1])
            bar.update(1)
    return (np.concatenate(parts_ptr), np.concatenate(parts_doc) if parts_doc else np.empty(0, np.int32),
            np.concatenate(parts_key) if parts_key else np.empty(0, np.float64))


# ----------------------------------------------------------------------------- grouped top-k


def search_topk_grouped(index: Index, Q, k: int, groups, metrics=("cosine",), device: str | Backend = "auto",
                        exclude_self=False, pad: str = "nan", out: np.ndarray | None = None,
                        return_docs: bool = True, batch_size: int | None = None, quiet: bool = True,
                        geometry: Geometry | None = None, stats: dict | None = None, host_work=None):
    """Exact k best documents of every group, for every query and several metrics in one pass.

    groups: int64 offsets (n_groups+1,) from 0 to index.n_docs: group g is the documents
    [groups[g], groups[g+1]) of the index (build the index over a corpus permuted so that each
    group is contiguous; empty groups allowed). metrics: names from METRICS; cosine, dot and l2
    share one accumulation (the dot product), l1 has its own, both made in the same pass.
    exclude_self: as search_topk (an int array gives, per query, an index document to leave out).
    pad: "nan" (scores NaN where fewer than k documents exist) or "last" (repeat the last found
    score; an empty list gets the score of an all-zero document: cosine/dot 0, l2 |q|_2, l1 |q|_1).
    out: optional float32 array (n_queries, n_groups, width), C-contiguous, width >= n_metrics*k,
    filled in place: metric m's scores in columns [m*k, (m+1)*k), columns from n_metrics*k on set
    to 0 (callers fill them afterwards, e.g. meta-features' centroid columns).

    host_work: a callable run once while the device works on the first batch of queries (cuda),
    or after the search (cpu): host computation to overlap with the device's.

    Returns (scores, docs): scores = out, or float32 (n_queries, n_groups, n_metrics, k) when out
    is None; docs int64 (n_queries, n_groups, n_metrics, k) of index documents, -1 where none (None
    unless return_docs). Best first, ties broken by lower document index; values identical on cpu
    and cuda and to search_topk's within a group's documents.
    """
    codes = metric_codes(metrics)
    k = check_k(k)
    if pad not in ("nan", "last"):
        raise InputError(f"pad must be 'nan' or 'last', got {pad!r}")
    offsets = group_ptr(index, groups)
    n_groups = offsets.size - 1
    Q = check_queries(index, Q)
    n_q = Q.shape[0]
    self_doc = self_docs(index, n_q, exclude_self)
    n_m = codes.size
    if out is None:
        target = np.empty((n_q, n_groups, n_m * k), np.float32)
    else:
        if (not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.ndim != 3 or not out.flags.c_contiguous
                or out.shape[:2] != (n_q, n_groups) or out.shape[2] < n_m * k):
            raise InputError(f"out must be a C-contiguous float32 array ({n_q}, {n_groups}, >= {n_m * k}), got "
                             f"{getattr(out, 'dtype', type(out))} {getattr(out, 'shape', '')}")
        target = out
    docs = np.empty((n_q, n_groups, n_m, k), np.int64) if return_docs else np.empty((0, 0, 0, 0), np.int64)
    report = SearchReport()
    backend = serving_backend(as_backend(device), k, MAX_GROUPED_CUDA_K, "the grouped CUDA selector", quiet, report)
    if n_q and n_groups:
        if backend.is_cuda:
            from .grouped_cuda import topk_grouped_cuda
            topk_grouped_cuda(index, Q, k, codes, offsets, self_doc, pad == "last", target, docs, batch_size,
                              quiet, geometry or Geometry(), report, host_work)
        else:
            _topk_grouped_cpu(index, Q, k, codes, offsets, self_doc, pad == "last", target, docs, batch_size,
                              quiet, report)
            if host_work is not None:
                host_work()
    elif host_work is not None:
        host_work()
    report.into(stats)
    scores = target if out is not None else target.reshape(n_q, n_groups, n_m, k)
    return scores, (docs if return_docs else None)


def _topk_grouped_cpu(index, Q, k, codes, group_ptr, self_doc, pad_last, out, docs, batch_size, quiet, report):
    import time

    from ..progress import progress

    t0 = time.perf_counter()
    p = index.cpu()
    scale, qn, dn = grouped_query_info(index, Q, codes, self_doc)
    t1 = time.perf_counter()
    n_q = Q.shape[0]
    want = docs.shape[0] > 0
    batches = _batches(n_q, batch_size, 4096)  # progress shown between batches
    with progress(len(batches) if len(batches) > 1 else 0, "scoring (cpu)", quiet) as bar:
        for lo, hi in batches:
            indptr, indices, data = csr_arrays(Q[lo:hi]) if (lo, hi) != (0, n_q) else csr_arrays(Q)
            grouped.topk_grouped_cpu(indptr, indices, data, np.ascontiguousarray(scale[:, lo:hi]),
                                     np.ascontiguousarray(qn[:, lo:hi]), self_doc[lo:hi], p.term_ptr, p.post_doc,
                                     p.post_w, dn, group_ptr, codes, k, int(pad_last), _cpu_chunks(hi - lo),
                                     out[lo:hi], docs[lo:hi] if want else docs)
            bar.update(1)
    report.stages = {"host_prep_ms": 1e3 * (t1 - t0), "score_select_ms": 1e3 * (time.perf_counter() - t1)}
