"""Grouped top-k of the sparse scoring engine: for every query and every group of the index's
documents, and for several metrics at once, the k best documents of that group.

The index's documents are split into groups of consecutive documents (group_ptr int64
(n_groups+1,)), e.g. a training corpus permuted so that each class is one range. For every
query and group, and for several metrics at once, the k best documents of that group. Cosine,
dot and l2 share one fixed-point accumulator (the dot product, scale from query_stats with any
of those metrics); l1 has its own (its correction sum, scale from query_stats with L1). Keys,
ties (lower document index first) and padding are as for the plain top-k.

Output: float32 scores out (Q, n_groups, width), width >= n_metrics*k: metric m's k scores in
columns [m*k, (m+1)*k) (similarity for cosine/dot, distance for l2/l1, best first); columns from
n_metrics*k on are set to 0. Where fewer than k documents exist: NaN (pad_last = 0), or
(pad_last = 1) the last found score repeated, or, if the group offers no document at all, the
score an all-zero document gets (cosine/dot 0, l2 |q|_2, l1 |q|_1). out_doc int64
(Q, n_groups, n_metrics, k) (or a (0, 0, 0, 0) array: not wanted): the documents, -1 where none.

GPU pipeline: ``grouped_topk_kernel`` (fused accumulation in shared memory and block top-k per
segment of a group), ``merge_lists_kernel`` (the segments' lists of a group merged), then
``grouped_finish`` (scores and padding). CPU twin: ``topk_grouped_cpu``. Keys, fixed point and
ties as kernels/scoring.py.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, prange

from ._factory import jit_kernel, kernel_cache
from .metrics import COSINE, DOT, L1
from .indices import U64
from .primitives import lower_bound_dev, make_chunk_walk
from .scoring import contribution_cpu, contribution_dev, score_key_cpu, score_key_dev
from .select import (fit_geometry, make_segment_keys, merge_sorted_lists, offer_cpu, select_top_keys, topk_scratch,
                     write_first_k)
from .jit import cpu_jit, cuda_kernel, device_function


def _accumulators(metrics):
    """(need_dot, need_l1): which fixed-point accumulators the metric codes need."""
    need_dot = False
    need_l1 = False
    for m in range(metrics.shape[0]):
        if metrics[m] == L1:
            need_l1 = True
        else:
            need_dot = True
    return need_dot, need_l1


_accumulators_cpu = numba.njit(inline="always")(_accumulators)
_accumulators_dev = device_function(_accumulators)


@cpu_jit(inline="always")
def _key_to_score(metric, key):
    if metric == COSINE or metric == DOT:
        return numba.float32(key)
    return numba.float32(-key)


@cpu_jit(parallel=True)
def topk_grouped_cpu(q_indptr, q_indices, q_data, scale, qn, self_doc, term_ptr, post_doc, post_w, dn,
                     group_ptr, metrics, k, pad_last, n_chunks, out, out_doc):
    """CPU twin of the grouped GPU pipeline (grouped_topk_kernel + merge_lists_kernel +
    grouped_finish).

    q_* : the queries' CSR (int64 / int32 / float32); scale float64 (2, Q): row 0 the scale of the
    dot accumulator, row 1 of the l1 accumulator (query_stats); qn float64 (n_metrics, Q) and dn
    float64 (n_metrics, n_docs): the norm terms of each metric; self_doc int64 (Q,): a document to
    leave out, or -1; term_ptr/post_doc/post_w: the index's postings; group_ptr int64
    (n_groups+1,); metrics int64 (n_metrics,) metric codes; out / out_doc as described above.
    Queries are split into n_chunks contiguous chunks run in parallel; each query is accumulated
    densely (int64 (2, n_docs)), then every document of each group offered to a running best-k
    list (_offer: key desc, doc asc) per metric.
    """
    n_q = q_indptr.shape[0] - 1
    n_docs = dn.shape[1]
    n_groups = group_ptr.shape[0] - 1
    n_m = metrics.shape[0]
    width = out.shape[2]
    want_docs = out_doc.shape[0] > 0
    need_dot, need_l1 = _accumulators_cpu(metrics)
    for c in prange(n_chunks):
        acc = np.zeros((2, max(n_docs, 1)), np.int64)
        keys = np.empty(max(k, 1), np.float64)
        docs = np.empty(max(k, 1), np.int64)
        lo = c * n_q // n_chunks
        hi = (c + 1) * n_q // n_chunks
        for i in range(lo, hi):
            s0 = scale[0, i]
            s1 = scale[1, i]
            if need_dot:
                acc[0, :] = 0
            if need_l1:
                acc[1, :] = 0
            for p in range(q_indptr[i], q_indptr[i + 1]):
                t = q_indices[p]
                qw = q_data[p]
                for r in range(U64(term_ptr[t]), U64(term_ptr[t + 1])):  # unsigned: no index wrap (kernels.indices)
                    d = U64(post_doc[r])
                    if need_dot:
                        acc[0, d] += numba.int64(contribution_cpu(DOT, qw, post_w[r]) * s0)
                    if need_l1:
                        acc[1, d] += numba.int64(contribution_cpu(L1, qw, post_w[r]) * s1)
            me = self_doc[i]
            for g in range(n_groups):
                for m in range(n_m):
                    metric = metrics[m]
                    a = 1 if metric == L1 else 0
                    sc = scale[a, i]
                    qnm = qn[m, i]
                    filled = 0
                    for j in range(k):
                        keys[j] = -np.inf
                        docs[j] = -1
                    for d in range(group_ptr[g], group_ptr[g + 1]):
                        if d != me:
                            key = score_key_cpu(metric, acc[a, U64(d)], sc, qnm, dn[m, U64(d)])
                            if filled < k or key >= keys[k - 1]:
                                filled = offer_cpu(key, d, keys, docs, filled, k, True)
                    base = m * k
                    for j in range(k):
                        if j < filled:
                            out[i, g, base + j] = _key_to_score(metric, keys[j])
                        elif pad_last == 0:
                            out[i, g, base + j] = np.float32(np.nan)
                        elif filled > 0:
                            out[i, g, base + j] = out[i, g, base + filled - 1]
                        else:
                            out[i, g, base + j] = _key_to_score(metric, score_key_cpu(metric, 0, sc, qnm, 0.0))
                        if want_docs:
                            out_doc[i, g, m, j] = docs[j] if j < filled else -1
                for j in range(n_m * k, width):
                    out[i, g, j] = 0.0


def grouped_geometry(k: int, largest_group: int = 0, block: int | None = None, items: int | None = None) -> tuple[int, int, int]:
    """(block, items, cap) for grouped_topk_kernel: block a power of two >= k (default
    max(128, next pow2 of k)); items a power of two, by default the most (at most 16) whose
    shared memory stays under 46 KB: segments of block*items documents, a group larger than that
    is split and merged. The default depends on k only, not on the data (largest_group is
    ignored; kept for callers), so that one compiled kernel serves every corpus: the kernel loops
    over the items that hold documents at run time. cap as topk_geometry. Shared memory: 24 B a
    segment position (two int64 accumulators + float64 keys) + 24 B a thread + 12*cap B."""
    block, items, cap = fit_geometry(k, block, items, 128, grouped_shared_bytes)
    if grouped_shared_bytes(block, items, cap) > 48 * 1024:
        raise ValueError(f"block={block} x items={items} needs {grouped_shared_bytes(block, items, cap)} B "
                         "of shared memory (at most 48 KB)")
    return block, items, cap


def grouped_shared_bytes(block: int, items: int, cap: int) -> int:
    return 24 * block * items + 24 * block + 4 + 12 * cap + 4


@device_function
def _segment_postings(t, s, seg_lo, seg_hi, use_table, seg_table, term_ptr, post_doc):
    """(first, last): the positions of term t's postings that fall in segment s (documents
    [seg_lo, seg_hi)), from the table made by segment_offsets or by two binary searches (post_doc
    is sorted within each list)."""
    if use_table:
        return seg_table[t, s], seg_table[t, s + 1]
    end = term_ptr[t + 1]
    first = lower_bound_dev(post_doc, term_ptr[t], end, seg_lo)
    return first, lower_bound_dev(post_doc, first, min(end, first + (seg_hi - seg_lo)), seg_hi)


@device_function
def _add_grouped_posting(i, r, ctx):
    """Posting r of the chunk's term i into the shared accumulators (dot and/or L1) with
    shared-memory atomics (int64 fixed point: exact, order-free).
    ctx = (t_w, post_doc, post_w, seg_lo, need_dot, need_l1, s_dot, s_l1, acc_dot, acc_l1)."""
    t_w, post_doc, post_w, seg_lo, need_dot, need_l1, s_dot, s_l1, acc_dot, acc_l1 = ctx
    d = post_doc[r] - seg_lo
    w = post_w[r]
    qw = t_w[i]
    if need_dot:
        cuda.atomic.add(acc_dot, d, numba.int64(contribution_dev(DOT, qw, w) * s_dot))
    if need_l1:
        cuda.atomic.add(acc_l1, d, numba.int64(contribution_dev(L1, qw, w) * s_l1))


_add_chunk = make_chunk_walk(_add_grouped_posting)


@device_function
def _grouped_key(loc, d, ctx):
    """score_key of document d for metric m (the L1 or the dot accumulator at loc).
    ctx = (acc_dot, acc_l1, metric, scale, qnorm, dn, m)."""
    acc_dot, acc_l1, metric, sc, qnm, dn, m = ctx
    if metric == L1:
        v = acc_l1[loc]
    else:
        v = acc_dot[loc]
    return score_key_dev(metric, v, sc, qnm, dn[m, d])


_segment_keys = make_segment_keys(_grouped_key)


@kernel_cache
def grouped_topk_kernel(block: int, items: int, cap: int, max_registers: int = 0, counting: bool = False):
    """Fused accumulation and selection: block (s, b) scores query q = q_lo + b against the
    documents of segment s ([seg_range[s, 0], seg_range[s, 1]), at most block*items consecutive
    documents of one group) and keeps the segment's top k for every metric.

    Accumulation (shared int64 acc_dot / acc_l1 [block*items], zeroed first): the query's terms
    are taken block at a time; thread tid takes term j = chunk + tid, finds the part of the term's
    posting list that falls in the segment (seg_table[t, s] .. seg_table[t, s+1], made by
    segment_offsets; or, when seg_table is not (n_terms, n_seg+1), by two binary searches: post_doc
    is sorted within each list, the index's postings as built by build_postings_cpu) and its
    length goes through a block exclusive scan (t_off). The chunk's postings are then split
    evenly: thread tid takes positions tid, tid + block, ... (binary search in t_off once, then
    walking forward: primitives.make_chunk_walk) and adds int64(contribution * scale) with
    shared-memory atomics (exact, order-free). A syncthreads separates the chunks.
    Selection, per metric m (metrics int64 (n_metrics,)): as select_topk (keys into shared
    float64 keys[block*items], thread maxima sorted, tau = k-th thread maximum, candidates above
    tau by a shared atomic counter, ties at tau in document order by a block scan, bitonic sort),
    writing out_doc int32 / out_key float64 (Qb, n_seg, n_metrics, k), doc -1 for empty slots.

    q_indptr int64 (Q+1,), q_indices int32, q_data float32: all queries (uploaded once); qinfo
    float64 (Q, 3 + n_metrics) = (dot scale, l1 scale, document to leave out or -1, qn per metric);
    term_ptr int64, post_doc int32 (sorted within lists), post_w float32; dn float64 (n_metrics,
    n_docs); seg_range int64 (n_seg, 2). Shared: see grouped_shared_bytes. Selection loops run
    over the items that hold documents of the segment only (fewer for a short group).
    max_registers > 0 caps the registers per thread (ptxas, sm_90, block 128 x items 8: 130
    uncapped = 3 blocks per multiprocessor; 96 = 5 blocks, 80 bytes spilled; 64 = 7 (the shared
    memory limit), 220 bytes spilled). The simulator has no registers: the cap is left out there.
    counting: the selection's two sorts replaced by counting (kth_largest_shared for tau,
    first_k_by_counting for the candidates): about 6 syncthreads per metric instead of ~50 at
    block 128; the same lists.
    """
    seg_len = block * items
    off_len = block + 1

    scratch = topk_scratch(block, cap)

    @jit_kernel(max_registers)
    def grouped_topk(q_indptr, q_indices, q_data, q_lo, qinfo, term_ptr, post_doc, post_w, dn, seg_range,
                     seg_table, metrics, k, out_doc, out_key):
        acc_dot = cuda.shared.array(seg_len, numba.int64)
        acc_l1 = cuda.shared.array(seg_len, numba.int64)
        keys = cuda.shared.array(seg_len, numba.float64)
        t_start = cuda.shared.array(block, numba.int64)
        t_w = cuda.shared.array(block, numba.float32)
        t_off = cuda.shared.array(off_len, numba.int32)  # also select_top_keys's flags
        tmax, cand_key, cand_doc, counter = scratch()
        tid = cuda.threadIdx.x
        s = cuda.blockIdx.x
        b = cuda.blockIdx.y
        q = q_lo + b
        seg_lo = seg_range[s, 0]
        seg_hi = seg_range[s, 1]
        n_m = metrics.shape[0]
        need_dot, need_l1 = _accumulators_dev(metrics)
        s_dot = qinfo[q, 0]
        s_l1 = qinfo[q, 1]
        me = numba.int64(qinfo[q, 2])
        use_table = seg_table.shape[1] == seg_range.shape[0] + 1
        n_items = (seg_hi - seg_lo + block - 1) // block  # items that hold documents (the same for the whole block)
        for j in range(tid, n_items * block, block):
            acc_dot[j] = 0
            acc_l1[j] = 0
        p0 = q_indptr[q]
        p1 = q_indptr[q + 1]
        cuda.syncthreads()  # accumulators zeroed
        for chunk in range(p0, p1, block):
            j = chunk + tid
            cnt = 0
            if j < p1:
                first, last = _segment_postings(q_indices[j], s, seg_lo, seg_hi, use_table, seg_table, term_ptr, post_doc)
                t_start[tid] = first
                t_w[tid] = q_data[j]
                cnt = last - first
            # synchronises after the offsets and at the end (t_start / t_off are rewritten next chunk)
            _add_chunk(cnt, t_start, t_off, tid, block,
                       (t_w, post_doc, post_w, seg_lo, need_dot, need_l1, s_dot, s_l1, acc_dot, acc_l1))
        for m in range(n_m):
            metric = metrics[m]
            sc = s_dot
            if metric == L1:
                sc = s_l1
            best = _segment_keys(keys, n_items, seg_lo, seg_hi, me, tid, block,
                                 (acc_dot, acc_l1, metric, sc, qinfo[q, 3 + m], dn, m))
            select_top_keys(keys, n_items, best, seg_lo, k, cap, tmax, cand_key, cand_doc, counter, t_off, tid, block,
                             counting)
            write_first_k(out_doc[b, s, m], out_key[b, s, m], cand_doc, cand_key, k, tid, block)
            cuda.syncthreads()  # candidates read before the next metric resets them

    return grouped_topk


@cuda_kernel
def segment_offsets(term_ptr, post_doc, bounds, table):
    """Grid-stride loop over (term t, boundary j): table[t, j] = the first position of t's posting
    list (sorted by document) whose document is >= bounds[j] (int64 (n_seg+1,): the segments'
    first documents, then n_docs), so that segment s of term t is table[t, s] .. table[t, s+1]."""
    n_b = bounds.shape[0]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, table.shape[0] * n_b, stride):
        t = e // n_b
        j = e % n_b
        table[t, j] = lower_bound_dev(post_doc, term_ptr[t], term_ptr[t + 1], bounds[j])


@kernel_cache
def merge_lists_kernel(block: int, width: int):
    """Merge ranges of sorted top-k lists: block (j, b, m) merges lists [in_lo[j], in_hi[j]) of
    query b, metric m (in_doc int32 / in_key float64 (Qb, n_in, n_metrics, k)) in shared arrays of
    ``width`` entries (a power of two >= (in_hi - in_lo) * k; empty slots doc -1), sorted (key
    desc, doc asc) by a bitonic network, and writes the first k to out (Qb, n_out, n_metrics, k).
    Shared: 12*width bytes; a syncthreads after loading and after every bitonic step."""

    @cuda_kernel
    def merge_lists(in_doc, in_key, in_lo, in_hi, k, out_doc, out_key):
        keys = cuda.shared.array(width, numba.float64)
        docs = cuda.shared.array(width, numba.int32)
        tid = cuda.threadIdx.x
        j = cuda.blockIdx.x
        b = cuda.blockIdx.y
        m = cuda.blockIdx.z
        lo = in_lo[j]
        merge_sorted_lists(keys, docs, in_doc[b, :, m], in_key[b, :, m], lo, (in_hi[j] - lo) * k, k, width, tid, block)
        write_first_k(out_doc[b, j, m], out_key[b, j, m], docs, keys, k, tid, block)

    return merge_lists


@cuda_kernel
def grouped_finish(in_doc, in_key, qinfo, q_lo, metrics, pad_last, want_docs, out, out_doc):
    """Top-k lists (Qb, n_groups, n_metrics, k) -> float32 scores out (Qb, n_groups, width) and
    documents out_doc int64 (Qb, n_groups, n_metrics, k) (written when want_docs).

    Grid-stride loop, one element (b, g, column) of out per step: column c < n_metrics*k is entry
    j = c % k of metric m = c // k: the score of the document there (key for cosine/dot, -key for
    l2/l1, rounded to float32), else the padding (NaN; or with pad_last the last found entry's
    score, or the score of an all-zero document when the list is empty); columns past
    n_metrics*k get 0. The twin is the output loop of topk_grouped_cpu."""
    n_b = out.shape[0]
    n_g = out.shape[1]
    width = out.shape[2]
    n_m = in_doc.shape[2]
    k = in_doc.shape[3]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, n_b * n_g * width, stride):
        col = e % width
        bg = e // width
        g = bg % n_g
        b = bg // n_g
        if col >= n_m * k:
            out[b, g, col] = 0.0
            continue
        m = col // k
        j = col % k
        metric = metrics[m]
        doc = in_doc[b, g, m, j]
        if want_docs:
            out_doc[b, g, m, j] = doc
        if doc >= 0:
            key = in_key[b, g, m, j]
        elif pad_last == 0:
            out[b, g, col] = math.nan
            continue
        else:
            last = j - 1
            while last >= 0 and in_doc[b, g, m, last] < 0:
                last -= 1
            if last >= 0:
                key = in_key[b, g, m, last]
            else:
                q = q_lo + b
                sc = qinfo[q, 0]
                if metric == L1:
                    sc = qinfo[q, 1]
                key = score_key_dev(metric, 0, sc, qinfo[q, 3 + m], 0.0)
        if metric == COSINE or metric == DOT:
            out[b, g, col] = numba.float32(key)
        else:
            out[b, g, col] = numba.float32(-key)


def ptx_kernels():
    """Every kernel with a representative geometry, for tests/test_ptx.py."""
    sig = ("void(int64[::1], int32[::1], float32[::1], int64, float64[:, ::1], int64[::1], int32[::1], float32[::1], "
           "float64[:, ::1], int64[:, ::1], int64[:, ::1], int64[::1], int64, int32[:, :, :, ::1], float64[:, :, :, ::1])")
    return [
        ("grouped_topk_k200", grouped_topk_kernel(*grouped_geometry(200, 5000)), sig),
        ("grouped_topk", grouped_topk_kernel(*grouped_geometry(30, 600)), sig),
        ("grouped_topk_counting", grouped_topk_kernel(*grouped_geometry(30, 600), 64, True), sig),
        ("segment_offsets", segment_offsets, "void(int64[::1], int32[::1], int64[::1], int64[:, ::1])"),
        ("merge_lists", merge_lists_kernel(128, 1024),
         "void(int32[:, :, :, ::1], float64[:, :, :, ::1], int64[::1], int64[::1], int64, int32[:, :, :, ::1], float64[:, :, :, ::1])"),
        ("grouped_finish", grouped_finish,
         "void(int32[:, :, :, ::1], float64[:, :, :, ::1], float64[:, ::1], int64, int64[::1], int64, int64, "
         "float32[:, :, ::1], int64[:, :, :, ::1])"),
    ]
