"""The sparse scoring engine's kernels (GT-kNN) and their CPU twins.

Exactness and determinism: fixed-point accumulation
---------------------------------------------------
A score is a sum of per-term contributions c = q_t * d_t (dot, cosine, l2) or
c = |q_t - d_t| - |q_t| - |d_t| (l1), each computed in float64 from float32 weights (a product of
two float32 is exact in float64). Each contribution is scaled by a per-query power of two S and
truncated to int64; the int64 sums are exact and therefore independent of the order in which
threads add them. S = 2**(62 - e) where 2**e bounds the sum of |c| over the query's terms
(``query_scale``), so nothing overflows and the resolution is 2**-62 of that bound, far finer
than float64's own rounding of the same sum. GPU atomics and the CPU twin thus give bitwise
identical scores, and duplicate documents tie exactly.

Keys: every document d gets a float64 key, larger is better (``score_key``), from one norm term
per query (qn) and per document (dn), chosen by the metric (``norm_terms``):
    dot     acc / S
    cosine  (acc / S) / (|q|_2 |d|_2), 0 when either norm is 0
    l2      -sqrt(max(0, |q|^2 + |d|^2 - 2 acc / S))
    l1      -(|q|_1 + |d|_1 + acc / S)
Documents that share no term with the query have acc = 0 and so get their exact key too.
Selection is by (key descending, document index ascending).

GPU pipeline for a batch of queries (dense per-query score rows, as the paper):
    1. ``zero_int64``        acc[Q * n_docs] = 0 once, when the rows are allocated: the selectors
                             zero every entry they read, so rows come back clean for the next batch
    2. ``accumulate``        E = the concatenated posting lists of every (query, term) of the batch,
                             split evenly over threads: position p -> segment j by binary search in
                             seg_off (an exclusive prefix sum of the segments' document frequencies),
                             posting = term_ptr[term_j] + p - seg_off[j]; atomic int64 add into acc.
    3. ``select_topk``       block (segment s, query q) turns B*IPT score rows entries into keys and
                             keeps the segment's top k (thread-max prefilter, ties in index order,
                             bitonic sort of the few candidates).
    4. ``merge_topk``        groups of sorted top-k lists are merged (each entry's rank by binary
                             searches, or a bitonic sort) until one is left.
   or 3'. ``count_threshold`` / ``write_threshold``: ordered compaction of keys >= threshold.
The index build is kernels/postings.py, the grouped top-k kernels/grouped.py, the block-wide
selection kernels/select.py.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, prange

from ._factory import kernel_cache
from .metrics import COSINE, DOT, L1, L2
from .metrics import METRIC_CODE as METRICS  # noqa: F401 (scoring.METRICS: name -> code, kept for host code)
from .indices import U64
from .primitives import block_exclusive_scan_dev, last_le_dev, merge_sort_cpu
from .select import (merge_sorted_lists, offer_cpu, rank_in_lists_dev, select_top_keys, topk_geometry, topk_scratch,
                     write_first_k)
from .jit import cpu_jit, cuda_kernel, device_function

NEG_INF = -np.inf


def _contribution(metric, qw, dw):
    q = numba.float64(qw)
    d = numba.float64(dw)
    if metric == L1:
        return abs(q - d) - abs(q) - abs(d)
    return q * d


def _score_key(metric, acc, scale, qn, dn):
    # qn, dn: the query's and the document's norm term for the metric (norm_terms): |x|_2 for
    # cosine, |x|_2^2 for l2, |x|_1 for l1, unused for dot
    s = numba.float64(acc) / scale
    if metric == DOT:
        return s
    if metric == COSINE:
        denom = qn * dn
        if denom > 0.0:
            return s / denom
        return 0.0
    if metric == L2:
        dist2 = qn + dn - 2.0 * s
        if dist2 < 0.0:
            dist2 = 0.0
        return -math.sqrt(dist2)
    dist = qn + dn + s
    if dist < 0.0:
        dist = 0.0
    return -dist


contribution_cpu = numba.njit(inline="always")(_contribution)
score_key_cpu = numba.njit(inline="always")(_score_key)
contribution_dev = device_function(_contribution)
score_key_dev = device_function(_score_key)


@cpu_jit(inline="always")
def _query_sums(i, q_indptr, q_indices, q_data, term_maxabs):
    """Query i's float64 sums over its terms in order: |q|_2^2, |q|_1, and the bounds of the sum of
    |contribution| for the dot accumulator (sum |w| m_t) and the l1 one (sum 2 min(|w|, m_t))."""
    sq = 0.0
    l1 = 0.0
    bound_dot = 0.0
    bound_l1 = 0.0
    for p in range(q_indptr[i], q_indptr[i + 1]):
        w = np.float64(q_data[p])
        m = np.float64(term_maxabs[q_indices[p]])
        sq += w * w
        l1 += abs(w)
        bound_l1 += 2.0 * min(abs(w), m)
        bound_dot += abs(w) * m
    return sq, l1, bound_dot, bound_l1


@cpu_jit(inline="always")
def _scale_for(bound):
    """S = 2**(62 - e) for bound < 2**e (1 when the bound is 0): no int64 sum can overflow."""
    if bound > 0.0:
        return math.ldexp(1.0, 62 - math.frexp(bound)[1])
    return 1.0


@cpu_jit(inline="always")
def _query_norm_term(metric, sq, l1):
    return math.sqrt(sq) if metric == COSINE else (sq if metric == L2 else l1)


@cpu_jit
def query_stats(q_indptr, q_indices, q_data, term_maxabs, metric):
    """Per query (host side, shared by both backends so they agree bit for bit).

    q_indptr int64 (Q+1,), q_indices int32, q_data float32; term_maxabs float32 (n_terms,) = the
    largest |weight| of each term in the index. Returns scale and qn (the metric's norm term,
    see norm_terms): float64 (Q,) each.
    """
    n = q_indptr.shape[0] - 1
    scale = np.empty(n, np.float64)
    qn = np.empty(n, np.float64)
    for i in range(n):
        sq, l1, bound_dot, bound_l1 = _query_sums(i, q_indptr, q_indices, q_data, term_maxabs)
        qn[i] = _query_norm_term(metric, sq, l1)
        scale[i] = _scale_for(bound_l1 if metric == L1 else bound_dot)
    return scale, qn


@cpu_jit(parallel=True)
def query_stats_multi(q_indptr, q_indices, q_data, term_maxabs, codes):
    """query_stats for several metrics at once, queries in parallel (the same per-query sums, so
    the values are bit for bit query_stats's). codes int64 (n_metrics,). Returns scale float64
    (2, Q): row 0 the scale shared by dot, cosine and l2 (the dot accumulator), row 1 the l1
    scale; and qn float64 (n_metrics, Q)."""
    n = q_indptr.shape[0] - 1
    n_m = codes.shape[0]
    scale = np.ones((2, n), np.float64)
    qn = np.empty((n_m, n), np.float64)
    for i in prange(n):
        sq, l1, bound_dot, bound_l1 = _query_sums(i, q_indptr, q_indices, q_data, term_maxabs)
        scale[0, i] = _scale_for(bound_dot)
        scale[1, i] = _scale_for(bound_l1)
        for j in range(n_m):
            qn[j, i] = _query_norm_term(codes[j], sq, l1)
    return scale, qn


def norm_terms(d_sq, d_l1, metric):
    """float64 (n_docs,): each document's norm term for the metric: |d|_2 (cosine), |d|_2^2 (l2),
    |d|_1 (l1), zeros (dot). One array, so selection reads 8 bytes a document."""
    if metric == COSINE:
        return np.sqrt(d_sq)
    if metric == L2:
        return d_sq
    if metric == L1:
        return d_l1
    return np.zeros_like(d_sq)


# ----------------------------------------------------------------------------- host: tiles of a search

@cpu_jit
def tile_one(g, q_indptr, q_indices, q_data, df, tile, term_order, scale, qn, self_doc, doc_lo, doc_hi,
             seg_off, seg, weights, qinfo):
    """Tile g of tile_inputs (below), which see; returns its postings."""
    n_q = q_indptr.shape[0] - 1
    lo = g * tile
    hi = min(n_q, lo + tile)
    s0 = q_indptr[lo]
    n = q_indptr[hi] - s0
    key = np.empty(n, np.int64)
    for q in range(lo, hi):
        for p in range(q_indptr[q], q_indptr[q + 1]):
            key[p - s0] = numba.int64(q_indices[p]) * tile + (q - lo)
        me = self_doc[q]
        qinfo[q, 0] = scale[q]
        qinfo[q, 1] = qn[q]
        qinfo[q, 2] = numba.float64(me - doc_lo) if doc_lo <= me < doc_hi else -1.0
        qinfo[q, 3] = numba.float64(q_indptr[q] - s0)  # its first segment in the tile, (query, term) order
    by_term = term_order and hi - lo > 1
    if by_term:  # (term, query) order: sort key * 2^31 + segment (key < 2^32: terms * tile; segment < 2^31)
        for j in range(n):
            key[j] = (key[j] << 31) | j
        merge_sort_cpu(key)
    o0 = s0 + g
    seg_off[o0] = 0
    total = numba.int64(0)
    for i in range(n):
        kk = key[i] >> 31 if by_term else key[i]
        j = key[i] & 2147483647 if by_term else i
        t = kk // tile
        seg[s0 + i, 0] = t
        seg[s0 + i, 1] = kk - t * tile
        weights[s0 + i] = q_data[s0 + j]
        total += df[t]
        seg_off[o0 + i + 1] = total
    return total


@cpu_jit(parallel=True)
def tile_inputs(q_indptr, q_indices, q_data, df, tile, term_order, scale, qn, self_doc, doc_lo, doc_hi,
                seg_off, seg, weights, qinfo, postings):
    """The inputs of accumulate_kernel for queries cut into tiles of ``tile`` consecutive rows.

    q_indptr int64 (n+1,) from 0, q_indices int32, q_data float32: the queries (CSR); df int64
    (n_terms,): the shard's posting list lengths; scale, qn float64 (n,) and self_doc int64 (n,)
    (corpus document numbers, -1 for none) of the queries; the shard covers documents
    [doc_lo, doc_hi). Tile g = queries [g*tile, min(n, (g+1)*tile)) with segments
    s0 = q_indptr[g*tile] .. s1 = q_indptr[end of tile] writes seg int32 (L, 2) = (term, query
    within the tile) and weights float32 (L,) at [s0, s1), its postings' exclusive prefix sum,
    starting at 0, at seg_off int64 (L + n_tiles,) [s0 + g, s1 + g], and postings[g] (int64
    (n_tiles,)) = its total; qinfo float64 (n, 4) = (scale, norm term, shard-local document to
    leave out or -1, the query's first segment within its tile in (query, term) order: where
    blocked.rows_accumulate_kernel(grid=True) finds its segments). term_order: a tile's segments
    by (term, query), so queries that share a term read its postings one after another (from L2
    after the first); otherwise (query, term), the rows' order. Tiles in parallel; one tile alone: call tile_one(0, ...) (no thread pool
    to wake for a single query)."""
    for g in numba.prange(postings.shape[0]):
        # int64(g): prange's index is unsigned, and tile_one would compile again for it
        postings[g] = tile_one(numba.int64(g), q_indptr, q_indices, q_data, df, tile, term_order, scale, qn,
                               self_doc, doc_lo, doc_hi, seg_off, seg, weights, qinfo)


# ----------------------------------------------------------------------------- CPU twin: scoring

@cpu_jit(inline="always")
def _accumulate_query(i, q_indptr, q_indices, q_data, scale, term_ptr, post_doc, post_w, metric,
                      state, touched):
    """Add query i's postings into the fixed-point accumulators; returns the number of touched
    documents (listed in touched[:n]). state int64 (n_docs, 2): [d, 0] = the last query that
    touched d, [d, 1] = its accumulator (side by side: one cache line per posting)."""
    n = 0
    s = scale[i]
    for p in range(q_indptr[i], q_indptr[i + 1]):
        t = q_indices[p]
        qw = q_data[p]
        for r in range(U64(term_ptr[t]), U64(term_ptr[t + 1])):  # unsigned: no index wrap (kernels.indices)
            d = U64(post_doc[r])
            v = numba.int64(contribution_cpu(metric, qw, post_w[r]) * s)
            if state[d, 0] != i:
                state[d, 0] = i
                state[d, 1] = v
                touched[U64(n)] = d
                n += 1
            else:
                state[d, 1] += v
    return n


@cpu_jit(inline="always")
def _touch_state(n_docs):
    """A chunk's scratch for _accumulate_query: state int64 (n_docs, 2) with no document touched
    yet (column 0 = -1) and the touched list int32 (n_docs,)."""
    state = np.empty((n_docs, 2), np.int64)
    state[:, 0] = -1
    return state, np.empty(n_docs, np.int32)


@cpu_jit(inline="always")
def _untouched(r, metric, norm_order):
    """The r-th document in the order untouched documents' keys fall: index order for dot and
    cosine (all 0), norm_order (documents by norm term, then index) for l2 and l1."""
    if metric == COSINE or metric == DOT:
        return r
    return norm_order[r]


@cpu_jit(inline="always")
def _accumulate_dense(i, q_indptr, q_indices, q_data, scale, term_ptr, post_doc, post_w, metric, acc):
    """Add query i's postings into acc (int64 (n_docs,), zero on entry): the same fixed-point
    contributions as _accumulate_query, without touch bookkeeping."""
    s = scale[i]
    for p in range(q_indptr[i], q_indptr[i + 1]):
        qw = q_data[p]
        t = q_indices[p]
        for r in range(U64(term_ptr[t]), U64(term_ptr[t + 1])):
            acc[U64(post_doc[r])] += numba.int64(contribution_cpu(metric, qw, post_w[r]) * s)


@cpu_jit(parallel=True)
def topk_cpu(q_indptr, q_indices, q_data, scale, qn, self_doc, term_ptr, post_doc, post_w, dn,
             norm_order, metric, k, n_chunks, out_doc, out_key):
    """CPU twin of the GPU pipeline: exact top-k for each query.

    Queries are split into n_chunks contiguous chunks run in parallel; each chunk keeps one
    accumulator state. A query whose postings cover at least a quarter of the documents is scored
    densely: a zeroed int64 accumulator, then every document offered to a running best-k list
    (``_offer``) with its key (an untouched document has acc = 0, which gives exactly its key).
    A sparser query tracks the documents it touches (``_accumulate_query``), offers those, then
    the best untouched ones (for dot/cosine their key is 0 and the lowest indices win; for l2/l1
    the key falls with the norm term, so walk ``norm_order``). Both give the same list.
    scale, qn float64 (Q,) from query_stats; dn float64 (n_docs,) from norm_terms; self_doc int64
    (Q,): a document to leave out per query, or -1. out_doc int32 (Q, k) = -1 and out_key float64
    (Q, k) = -inf where fewer than k documents exist.
    """
    n_q = q_indptr.shape[0] - 1
    n_docs = dn.shape[0]
    for c in prange(n_chunks):
        acc = np.empty(n_docs, np.int64)
        state, touched = _touch_state(n_docs)
        for i in range(c * n_q // n_chunks, (c + 1) * n_q // n_chunks):
            keys = out_key[i]
            docs = out_doc[i]
            docs[:] = -1
            keys[:] = -np.inf
            filled = 0
            sc = scale[i]
            qni = qn[i]
            me = self_doc[i]
            postings = 0
            for p in range(q_indptr[i], q_indptr[i + 1]):
                postings += term_ptr[q_indices[p] + 1] - term_ptr[q_indices[p]]
            if 4 * postings >= n_docs:
                acc[:] = 0
                _accumulate_dense(i, q_indptr, q_indices, q_data, scale, term_ptr, post_doc, post_w, metric, acc)
                for d in range(n_docs):
                    if d != me:
                        key = score_key_cpu(metric, acc[d], sc, qni, dn[d])
                        if filled < k or key >= keys[k - 1]:
                            filled = offer_cpu(key, d, keys, docs, filled, k, True)
                continue
            n = _accumulate_query(i, q_indptr, q_indices, q_data, scale, term_ptr, post_doc, post_w,
                                  metric, state, touched)
            for j in range(n):
                d = touched[j]
                if d != me:
                    filled = offer_cpu(score_key_cpu(metric, state[U64(d), 1], sc, qni, dn[U64(d)]), d, keys, docs,
                                       filled, k, True)
            offered = 0
            for r in range(n_docs):
                if offered >= k:
                    break
                d = _untouched(r, metric, norm_order)
                if state[d, 0] == i or d == me:
                    continue
                filled = offer_cpu(score_key_cpu(metric, 0, sc, qni, dn[d]), d, keys, docs, filled, k, True)
                offered += 1


@cpu_jit(parallel=True)
def threshold_cpu(q_indptr, q_indices, q_data, scale, qn, self_doc, after, term_ptr, post_doc, post_w, dn,
                  norm_order, metric, min_key, n_chunks, counts, out_ptr, out_doc, out_key):
    """CPU twin of the threshold selector: every document d > after[i] (int64 (Q,), -1 for all)
    other than self_doc[i] with key >= min_key, by document.

    Called twice: with out_ptr of length 0 it only fills counts (Q,); then with out_ptr (Q+1,)
    (exclusive scan of counts) it writes out_doc int32 / out_key float64 rows sorted by document.
    """
    n_q = q_indptr.shape[0] - 1
    n_docs = dn.shape[0]
    write = out_ptr.shape[0] > 0
    for c in prange(n_chunks):
        state, touched = _touch_state(n_docs)
        for i in range(c * n_q // n_chunks, (c + 1) * n_q // n_chunks):
            n = _accumulate_query(i, q_indptr, q_indices, q_data, scale, term_ptr, post_doc, post_w,
                                  metric, state, touched)
            untouched_pass = n_docs > 0 and score_key_cpu(
                metric, 0, scale[i], qn[i], dn[_untouched(0, metric, norm_order)]) >= min_key
            hits = np.empty(n_docs if untouched_pass else n, np.int32)
            hk = np.empty(hits.shape[0], np.float64)
            m = 0
            for j in range(n):
                d = touched[j]
                key = score_key_cpu(metric, state[d, 1], scale[i], qn[i], dn[d])
                if key >= min_key and d != self_doc[i] and d > after[i]:
                    hits[m] = d
                    hk[m] = key
                    m += 1
            if untouched_pass:  # untouched keys fall along _untouched order: stop at the first miss
                for r in range(n_docs):
                    d = _untouched(r, metric, norm_order)
                    if state[d, 0] == i or d == self_doc[i] or d <= after[i]:
                        continue
                    key = score_key_cpu(metric, 0, scale[i], qn[i], dn[d])
                    if key < min_key:
                        break
                    hits[m] = d
                    hk[m] = key
                    m += 1
            if not write:
                counts[i] = m
                continue
            packed = np.empty(m, np.int64)  # document * 2^32 + hit: merge_sort_cpu, not np.argsort (3 s to compile)
            for j in range(m):
                packed[j] = (numba.int64(hits[j]) << 32) | j
            merge_sort_cpu(packed)
            base = out_ptr[i]
            for j in range(m):
                h = packed[j] & 4294967295
                out_doc[base + j] = hits[h]
                out_key[base + j] = hk[h]


# ----------------------------------------------------------------------------- GPU: scoring

@device_function
def threshold_hit_dev(acc, row, d, q, qinfo, dn, metric, min_key):
    """(hit, key) of document d < n_docs in query q's score row acc[row + d] (qinfo float64 (Q, 4)
    = (scale, norm term, self document, after)): a hit has key >= min_key, is not the query's own
    document and comes after qinfo[q, 3] (the upper triangle of an all-pairs graph)."""
    if d == numba.int64(qinfo[q, 2]) or d <= numba.int64(qinfo[q, 3]):
        return False, -math.inf
    key = score_key_dev(metric, acc[row + d], qinfo[q, 0], qinfo[q, 1], dn[d])
    return key >= min_key, key


@cuda_kernel
def zero_int64(values):
    """Grid-stride loop: values[:] = 0."""
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, values.shape[0], stride):
        values[i] = 0


@kernel_cache
def accumulate_kernel(block: int, items: int):
    """Load-balanced accumulation of a tile's postings into dense score rows.

    The tile's segments j = 0..n_seg-1 are entries s0 + j of seg int32 (L, 2) = (term, query in
    the tile) and seg_weight float32 (L,), in query order (or term order: tile_inputs);
    seg_off[o0:o0 + n_seg + 1] (int64) is the exclusive prefix sum of their document frequencies
    from 0, so E = seg_off[o0 + n_seg] postings in all. Block b covers positions
    [b*block*items, (b+1)*block*items); thread tid takes p = base + i*block + tid for i < items
    (consecutive threads read consecutive postings), finds its segment by binary search once and
    then walks forward. Each posting adds int64(contribution * scale) (scale = qinfo[q0 + query,
    0]; qinfo float64 (Q, 4)) into acc[query * n_docs + doc] with an atomic add. term_ptr int64
    (n_terms+1,), post_doc int32, post_w float32; acc int64 (tile rows * n_docs,). A tile's
    offsets (s0, o0, n_seg, q0) are scalars, so a pipeline of tiles rewrites four parameter slots
    per launch; a single batch passes 0, 0, L, 0. No shared memory, no synchronisation. The
    atomics' throughput bounds it, not memory latency: four items' loads in flight per thread
    changed nothing (H100, 2026-11-27: 0.081 ms for 7.7M postings either way).
    """

    @cuda_kernel
    def accumulate(seg_off, seg, seg_weight, qinfo, term_ptr, post_doc, post_w, metric, n_docs, acc, s0, o0, n_seg,
                   q0):
        total = seg_off[o0 + n_seg]
        p = numba.int64(cuda.blockIdx.x) * (block * items) + cuda.threadIdx.x
        if p >= total:
            return
        j = last_le_dev(seg_off, o0, o0 + n_seg, p)
        for i in range(items):
            if p >= total:
                return
            while seg_off[j + 1] <= p:
                j += 1
            e = s0 + (j - o0)
            t = seg[e, 0]
            q = seg[e, 1]
            r = term_ptr[t] + (p - seg_off[j])
            v = numba.int64(contribution_dev(metric, seg_weight[e], post_w[r]) * qinfo[q0 + q, 0])
            cuda.atomic.add(acc, numba.int64(q) * n_docs + post_doc[r], v)
            p += block

    return accumulate


@kernel_cache
def select_topk_kernel(block: int, items: int, cap: int, rezero: bool = True):
    """Top k of each (query, segment): block (s, q) covers documents [s*block*items, ...) of score
    row q (query q0 + q of qinfo; its lists go to row out0 + q of out_doc / out_key).

    1. Thread tid turns acc entries of documents s*block*items + i*block + tid (i < items) into keys
       (shared float64 keys[block*items]; the query's self document and documents past n_docs get
       -inf) and keeps their maximum in tmax[tid].
    2. tmax is sorted descending (bitonic); tau = tmax[k-1] is a lower bound of the segment's k-th
       key, since k distinct documents reach it.
    3. Documents with key > tau (at most (k-1)*items of them) go to the candidate arrays through a
       shared atomic counter; if fewer than k, ties at tau are added in document order, rounds of
       block documents at a time with a block scan over tie flags.
    4. The candidates are sorted (key desc, doc asc) and the first k written to out_doc int32 /
       out_key float64, shape (Q, n_segments, k); slots without a document get doc -1.
    Shared: keys 8*block*items B, tmax 8*block B, candidates 12*cap B, flags 4*block B.
    rezero: step 1 also zeroes the entries it reads, for an accumulation by atomics (the rows must
    start at zero); False when the next accumulation overwrites every entry (blocked.rows_accumulate_kernel).
    """
    seg_len = block * items
    scratch = topk_scratch(block, cap)

    @cuda_kernel
    def select_topk(acc, n_docs, qinfo, dn, metric, k, out_doc, out_key, q0, out0):
        keys = cuda.shared.array(seg_len, numba.float64)
        flags = cuda.shared.array(block, numba.int32)
        tmax, cand_key, cand_doc, counter = scratch()
        tid = cuda.threadIdx.x
        seg = cuda.blockIdx.x
        q = cuda.blockIdx.y
        base = seg * seg_len
        row = numba.int64(q) * n_docs
        sc = qinfo[q0 + q, 0]
        qnorm = qinfo[q0 + q, 1]
        me = numba.int64(qinfo[q0 + q, 2])
        best = -math.inf
        for i in range(items):
            d = base + i * block + tid
            key = -math.inf
            if d < n_docs:
                if d != me:
                    key = score_key_dev(metric, acc[row + d], sc, qnorm, dn[d])
                if rezero:
                    acc[row + d] = 0  # leave the rows zeroed for the next batch
            keys[i * block + tid] = key
            if key > best:
                best = key
        select_top_keys(keys, items, best, base, k, cap, tmax, cand_key, cand_doc, counter, flags, tid, block, False)
        write_first_k(out_doc[out0 + q, seg], out_key[out0 + q, seg], cand_doc, cand_key, k, tid, block)

    return select_topk


@kernel_cache
def merge_topk_kernel(block: int, width: int, by_rank: bool = False):
    """Merge groups of sorted top-k lists: block (g, q) takes lists [g*group, (g+1)*group) of query
    q (in_doc int32 / in_key float64 (Q, n_lists, k), each sorted best first) into shared arrays
    of ``width`` entries and writes their k best (key desc, doc asc) to out (Q, n_groups, k), doc
    -1 / key -inf where none. Shared: 12*width bytes.

    by_rank False: width a power of two >= group*k; the entries (empty slots doc -1) are sorted
    (bitonic, a barrier per compare-exchange step) and the first k written.
    by_rank True: width >= group*k; out is first filled with empty slots, then each thread takes
    entries tid, tid + block, ... and finds each one's rank among the group's entries
    (select.rank_in_lists: its slot plus a binary search per other list) and an entry of rank
    r < k goes to slot r: one barrier in all. CPU twin: select.merge_rank_cpu."""

    @cuda_kernel
    def merge_topk(in_doc, in_key, group, k, out_doc, out_key):
        keys = cuda.shared.array(width, numba.float64)
        docs = cuda.shared.array(width, numba.int32)
        tid = cuda.threadIdx.x
        g = cuda.blockIdx.x
        q = cuda.blockIdx.y
        n_here = max(0, min(group, in_doc.shape[1] - g * group))  # lists of this group
        if not by_rank:
            merge_sorted_lists(keys, docs, in_doc[q], in_key[q], g * group, n_here * k, k, width, tid, block)
            write_first_k(out_doc[q, g], out_key[q, g], docs, keys, k, tid, block)
            return
        for e in range(tid, n_here * k, block):
            docs[e] = in_doc[q, g * group + e // k, e % k]
            keys[e] = in_key[q, g * group + e // k, e % k]
        for j in range(tid, k, block):
            out_doc[q, g, j] = -1
            out_key[q, g, j] = -math.inf
        cuda.syncthreads()  # lists loaded, output slots emptied
        for e in range(tid, n_here * k, block):
            r = rank_in_lists_dev(keys, docs, n_here, k, e)
            if 0 <= r < k:
                out_doc[q, g, r] = docs[e]
                out_key[q, g, r] = keys[e]

    return merge_topk


@kernel_cache
def threshold_kernels(block: int, items: int):
    """Ordered compaction of documents with key >= min_key, per (segment, query) block.

    A hit is a document d with key >= min_key, d != qinfo[q, 2] (self) and d > qinfo[q, 3] (only
    the documents after a given one: the upper triangle of an all-pairs graph).
    count_threshold: block (s, q) counts its segment's hits into counts[q, s] (shared counter).
    write_threshold: the same block writes its hits in document order starting at
    offsets[q * n_seg + s] (an exclusive scan of counts), in rounds of ``block`` consecutive
    documents with a block scan over hit flags. Shared: 4*block + 4 bytes.
    """
    seg_len = block * items

    @cuda_kernel
    def count_threshold(acc, n_docs, qinfo, dn, metric, min_key, counts):
        counter = cuda.shared.array(1, numba.int32)
        tid = cuda.threadIdx.x
        seg = cuda.blockIdx.x
        q = cuda.blockIdx.y
        if tid == 0:
            counter[0] = 0
        cuda.syncthreads()  # counter zeroed
        row = numba.int64(q) * n_docs
        hits = 0
        for i in range(items):
            d = seg * seg_len + i * block + tid
            if d < n_docs and threshold_hit_dev(acc, row, d, q, qinfo, dn, metric, min_key)[0]:
                hits += 1
        if hits:
            cuda.atomic.add(counter, 0, hits)
        cuda.syncthreads()  # all hits counted
        if tid == 0:
            counts[q, seg] = counter[0]

    @cuda_kernel
    def write_threshold(acc, n_docs, qinfo, dn, metric, min_key,
                        offsets, out_doc, out_key):
        flags = cuda.shared.array(block, numba.int32)
        tid = cuda.threadIdx.x
        seg = cuda.blockIdx.x
        q = cuda.blockIdx.y
        n_seg = cuda.gridDim.x
        row = numba.int64(q) * n_docs
        at = offsets[numba.int64(q) * n_seg + seg]
        for i in range(items):
            d = seg * seg_len + i * block + tid
            key = -math.inf
            hit = 0
            if d < n_docs:
                found, key = threshold_hit_dev(acc, row, d, q, qinfo, dn, metric, min_key)
                if found:
                    hit = 1
                acc[row + d] = 0  # leave the rows zeroed for the next batch
            flags[tid] = hit
            total = block_exclusive_scan_dev(flags, tid, block)
            if hit:
                out_doc[at + flags[tid]] = d
                out_key[at + flags[tid]] = key
            at += total
            cuda.syncthreads()  # flags reused next round

    return count_threshold, write_threshold


def ptx_kernels():
    """Every kernel with a representative geometry, for tests/test_ptx.py."""
    b, it, cap = topk_geometry(30)
    count_t, write_t = threshold_kernels(256, 16)
    acc_sig = "void(int64[::1], int64, float64[:, ::1], float64[::1], int64, "
    return [
        ("zero_int64", zero_int64, "void(int64[::1])"),
        ("accumulate", accumulate_kernel(256, 16),
         "void(int64[::1], int32[:, ::1], float32[::1], float64[:, ::1], int64[::1], int32[::1], float32[::1], int64, int64, "
         "int64[::1], int64, int64, int64, int64)"),
        ("select_topk", select_topk_kernel(b, it, cap),
         acc_sig + "int64, int32[:, :, ::1], float64[:, :, ::1], int64, int64)"),
        ("merge_topk", merge_topk_kernel(256, 2048),
         "void(int32[:, :, ::1], float64[:, :, ::1], int64, int64, int32[:, :, ::1], float64[:, :, ::1])"),
        ("merge_rank", merge_topk_kernel(512, 480, True),
         "void(int32[:, :, ::1], float64[:, :, ::1], int64, int64, int32[:, :, ::1], float64[:, :, ::1])"),
        ("count_threshold", count_t, acc_sig + "float64, int32[:, ::1])"),
        ("write_threshold", write_t, acc_sig + "float64, int64[::1], int32[::1], float64[::1])"),
    ]
