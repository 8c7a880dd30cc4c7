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
    4. ``merge_topk``        groups of sorted top-k lists are merged (bitonic) until one is left.
   or 3'. ``count_threshold`` / ``write_threshold``: ordered compaction of keys >= threshold.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, prange

from ._factory import kernel_cache

COSINE, DOT, L2, L1 = 0, 1, 2, 3
METRICS = {"cosine": COSINE, "dot": DOT, "l2": L2, "l1": L1}
NEG_INF = -np.inf


# ----------------------------------------------------------------------------- shared math
# These run on the host (numba.njit) and on the device (cuda.jit(device=True)) from one source.

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
contribution_dev = cuda.jit(device=True, inline=True)(_contribution)
score_key_dev = cuda.jit(device=True, inline=True)(_score_key)


@cuda.jit(device=True, inline=True)
def last_le_dev(arr, lo, hi, value):
    """Largest i in [lo, hi) with arr[i] <= value, for arr ascending and arr[lo] <= value: the row
    (segment, term) of a flat position p in an offsets array, by binary search."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if arr[mid] <= value:
            lo = mid
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
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
        bound = 0.0
        sq = 0.0
        l1 = 0.0
        for p in range(q_indptr[i], q_indptr[i + 1]):
            w = np.float64(q_data[p])
            m = np.float64(term_maxabs[q_indices[p]])
            sq += w * w
            l1 += abs(w)
            if metric == L1:
                bound += 2.0 * min(abs(w), m)
            else:
                bound += abs(w) * m
        qn[i] = math.sqrt(sq) if metric == COSINE else (sq if metric == L2 else l1)
        if bound > 0.0:
            e = math.frexp(bound)[1]  # bound < 2**e
            scale[i] = math.ldexp(1.0, 62 - e)
        else:
            scale[i] = 1.0
    return scale, qn


@numba.njit(parallel=True, cache=True)
def query_stats_multi(q_indptr, q_indices, q_data, term_maxabs, codes):
    """query_stats for several metrics at once, queries in parallel (each query's loop is
    query_stats's, so the values are bit for bit the same). codes int64 (n_metrics,). Returns
    scale float64 (2, Q): row 0 the scale shared by dot, cosine and l2 (the dot accumulator),
    row 1 the l1 scale; and qn float64 (n_metrics, Q)."""
    n = q_indptr.shape[0] - 1
    n_m = codes.shape[0]
    scale = np.ones((2, n), np.float64)
    qn = np.empty((n_m, n), np.float64)
    for i in prange(n):
        bound_dot = 0.0
        bound_l1 = 0.0
        sq = 0.0
        l1 = 0.0
        for p in range(q_indptr[i], q_indptr[i + 1]):
            w = np.float64(q_data[p])
            m = np.float64(term_maxabs[q_indices[p]])
            sq += w * w
            l1 += abs(w)
            bound_l1 += 2.0 * min(abs(w), m)
            bound_dot += abs(w) * m
        if bound_dot > 0.0:
            scale[0, i] = math.ldexp(1.0, 62 - math.frexp(bound_dot)[1])
        if bound_l1 > 0.0:
            scale[1, i] = math.ldexp(1.0, 62 - math.frexp(bound_l1)[1])
        for j in range(n_m):
            c = codes[j]
            qn[j, i] = math.sqrt(sq) if c == COSINE else (sq if c == L2 else l1)
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


# ----------------------------------------------------------------------------- index build (CPU twin)

@numba.njit(cache=True)
def build_postings_cpu(indptr, indices, data, n_terms):
    """CSR (n_docs, n_terms) -> postings grouped by term, each list sorted by document.

    Returns term_ptr int64 (n_terms+1,), post_doc int32 (nnz,), post_w float32 (nnz,),
    d_sq float64 (n_docs,) = |d|_2^2, d_l1 float64 (n_docs,), term_maxabs float32 (n_terms,).
    Twin of count_df + exclusive scan + scatter_postings + doc_norms (rows scattered in order, so
    lists come out sorted; the device's atomic scatter leaves them in arbitrary order, which the
    fixed-point accumulation makes irrelevant).
    """
    n_docs = indptr.shape[0] - 1
    nnz = indices.shape[0]
    df = np.zeros(n_terms, np.int64)
    maxabs = np.zeros(n_terms, np.float32)
    for p in range(nnz):
        t = indices[p]
        df[t] += 1
        a = abs(data[p])
        if a > maxabs[t]:
            maxabs[t] = a
    term_ptr = np.empty(n_terms + 1, np.int64)
    total = 0
    for t in range(n_terms):
        term_ptr[t] = total
        total += df[t]
    term_ptr[n_terms] = total
    cursor = term_ptr[:-1].copy()
    post_doc = np.empty(nnz, np.int32)
    post_w = np.empty(nnz, np.float32)
    d_sq = np.zeros(n_docs, np.float64)
    d_l1 = np.zeros(n_docs, np.float64)
    for d in range(n_docs):
        sq = 0.0
        l1 = 0.0
        for p in range(indptr[d], indptr[d + 1]):
            t = indices[p]
            pos = cursor[t]
            cursor[t] += 1
            post_doc[pos] = d
            post_w[pos] = data[p]
            w = np.float64(data[p])
            sq += w * w
            l1 += abs(w)
        d_sq[d] = sq
        d_l1[d] = l1
    return term_ptr, post_doc, post_w, d_sq, d_l1, maxabs


@numba.njit(parallel=True, cache=True)
def _build_postings_chunks(indptr, indices, data, n_terms, row_lo):
    """Parallel twin of build_postings_cpu (the same arrays, bit for bit): rows are cut into
    chunks [row_lo[c], row_lo[c+1]); each chunk counts its terms, the counts give every chunk its
    own cursor into each list (lists stay sorted by document: chunks are in row order), then each
    chunk scatters its rows. Norms are summed per row in row order, maxima reduced over chunks."""
    n_docs = indptr.shape[0] - 1
    nnz = indices.shape[0]
    n_chunks = row_lo.shape[0] - 1
    counts = np.zeros((n_chunks, n_terms), np.int64)
    maxes = np.zeros((n_chunks, n_terms), np.float32)
    d_sq = np.zeros(n_docs, np.float64)
    d_l1 = np.zeros(n_docs, np.float64)
    for c in prange(n_chunks):
        cnt = counts[c]
        mx = maxes[c]
        for d in range(row_lo[c], row_lo[c + 1]):
            sq = 0.0
            l1 = 0.0
            for p in range(indptr[d], indptr[d + 1]):
                t = indices[p]
                cnt[t] += 1
                a = abs(data[p])
                if a > mx[t]:
                    mx[t] = a
                w = np.float64(data[p])
                sq += w * w
                l1 += abs(w)
            d_sq[d] = sq
            d_l1[d] = l1
    df = np.zeros(n_terms, np.int64)
    maxabs = np.zeros(n_terms, np.float32)
    for t in prange(n_terms):
        total = 0
        m = np.float32(0.0)
        for c in range(n_chunks):
            total += counts[c, t]
            if maxes[c, t] > m:
                m = maxes[c, t]
        df[t] = total
        maxabs[t] = m
    term_ptr = np.empty(n_terms + 1, np.int64)
    total = 0
    for t in range(n_terms):
        term_ptr[t] = total
        total += df[t]
    term_ptr[n_terms] = total
    for t in prange(n_terms):  # counts[c, t] becomes chunk c's cursor into list t
        at = term_ptr[t]
        for c in range(n_chunks):
            n = counts[c, t]
            counts[c, t] = at
            at += n
    post_doc = np.empty(nnz, np.int32)
    post_w = np.empty(nnz, np.float32)
    for c in prange(n_chunks):
        cursor = counts[c]
        for d in range(row_lo[c], row_lo[c + 1]):
            for p in range(indptr[d], indptr[d + 1]):
                t = indices[p]
                pos = cursor[t]
                cursor[t] += 1
                post_doc[pos] = d
                post_w[pos] = data[p]
    return term_ptr, post_doc, post_w, d_sq, d_l1, maxabs


def build_postings(indptr, indices, data, n_terms, n_chunks=None):
    """build_postings_cpu's arrays, built by n_chunks threads (default: numba's thread count,
    fewer when the vocabulary is large against nnz, so that the per-chunk counts stay small; the
    serial build below 4 threads, where four parallel regions cost more than they save: on the
    2-core development machine under load, 20NG's training set took 9 ms serial, 52 ms in 2 chunks)."""
    nnz = indices.shape[0]
    if n_chunks is None:
        threads = numba.get_num_threads()
        n_chunks = 1 if threads < 4 else min(threads, max(1, nnz // max(4 * n_terms, 1)))
    n_docs = indptr.shape[0] - 1
    if n_chunks <= 1 or n_docs < 2:
        return build_postings_cpu(indptr, indices, data, n_terms)
    targets = (np.arange(n_chunks + 1, dtype=np.int64) * nnz) // n_chunks
    row_lo = np.searchsorted(indptr, targets, side="left").astype(np.int64)
    row_lo[0], row_lo[-1] = 0, n_docs
    row_lo = np.maximum.accumulate(np.minimum(row_lo, n_docs))
    return _build_postings_chunks(indptr, indices, data, n_terms, row_lo)


@numba.njit(cache=True)
def term_maxabs_cpu(indices, data, n_terms):
    """float32 (n_terms,): the largest |weight| of each term. Host side for both backends (it
    sets the queries' fixed-point scales, which must agree bit for bit)."""
    out = np.zeros(n_terms, np.float32)
    for p in range(indices.shape[0]):
        a = abs(data[p])
        if a > out[indices[p]]:
            out[indices[p]] = a
    return out


# ----------------------------------------------------------------------------- CPU twin: scoring

@numba.njit(cache=True, inline="always")
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
        for r in range(term_ptr[t], term_ptr[t + 1]):
            d = post_doc[r]
            v = numba.int64(contribution_cpu(metric, qw, post_w[r]) * s)
            if state[d, 0] != i:
                state[d, 0] = i
                state[d, 1] = v
                touched[n] = d
                n += 1
            else:
                state[d, 1] += v
    return n


@numba.njit(cache=True, inline="always")
def _offer(key, d, keys, docs, filled, k):
    """Insert (key, d) into the running best-k list keys/docs (sorted by key desc, doc asc) if it
    belongs there; returns the new fill count. Any offering order gives the same list."""
    if filled < k:
        pos = filled
        filled += 1
    else:
        last = keys[k - 1]
        if key < last or (key == last and d > docs[k - 1]):
            return filled
        pos = k - 1
    while pos > 0 and (keys[pos - 1] < key or (keys[pos - 1] == key and docs[pos - 1] > d)):
        keys[pos] = keys[pos - 1]
        docs[pos] = docs[pos - 1]
        pos -= 1
    keys[pos] = key
    docs[pos] = d
    return filled


@numba.njit(cache=True, inline="always")
def _untouched(r, metric, norm_order):
    """The r-th document in the order untouched documents' keys fall: index order for dot and
    cosine (all 0), norm_order (documents by norm term, then index) for l2 and l1."""
    if metric == COSINE or metric == DOT:
        return r
    return norm_order[r]


@numba.njit(cache=True, inline="always")
def _accumulate_dense(i, q_indptr, q_indices, q_data, scale, term_ptr, post_doc, post_w, metric, acc):
    """Add query i's postings into acc (int64 (n_docs,), zero on entry): the same fixed-point
    contributions as _accumulate_query, without touch bookkeeping."""
    s = scale[i]
    for p in range(q_indptr[i], q_indptr[i + 1]):
        qw = q_data[p]
        t = q_indices[p]
        for r in range(term_ptr[t], term_ptr[t + 1]):
            acc[post_doc[r]] += numba.int64(contribution_cpu(metric, qw, post_w[r]) * s)


@numba.njit(parallel=True, cache=True)
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
        state = np.empty((n_docs, 2), np.int64)
        state[:, 0] = -1
        touched = np.empty(n_docs, np.int32)
        lo = c * n_q // n_chunks
        hi = (c + 1) * n_q // n_chunks
        for i in range(lo, hi):
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
                            filled = _offer(key, d, keys, docs, filled, k)
                continue
            n = _accumulate_query(i, q_indptr, q_indices, q_data, scale, term_ptr, post_doc, post_w,
                                  metric, state, touched)
            for j in range(n):
                d = touched[j]
                if d != me:
                    filled = _offer(score_key_cpu(metric, state[d, 1], sc, qni, dn[d]), d, keys, docs, filled, k)
            offered = 0
            for r in range(n_docs):
                if offered >= k:
                    break
                d = _untouched(r, metric, norm_order)
                if state[d, 0] == i or d == me:
                    continue
                filled = _offer(score_key_cpu(metric, 0, sc, qni, dn[d]), d, keys, docs, filled, k)
                offered += 1


@numba.njit(parallel=True, cache=True)
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
        state = np.empty((n_docs, 2), np.int64)
        state[:, 0] = -1
        touched = np.empty(n_docs, np.int32)
        lo = c * n_q // n_chunks
        hi = (c + 1) * n_q // n_chunks
        for i in range(lo, hi):
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
            order = np.argsort(hits[:m])
            base = out_ptr[i]
            for j in range(m):
                out_doc[base + j] = hits[order[j]]
                out_key[base + j] = hk[order[j]]


# ----------------------------------------------------------------------------- GPU: index build

@cuda.jit
def count_df(indices, df):
    """Thread p (one per stored entry): df[indices[p]] += 1 (atomic int32)."""
    p = cuda.grid(1)
    if p < indices.shape[0]:
        cuda.atomic.add(df, indices[p], 1)


@cuda.jit
def scatter_postings(indptr, indices, data, term_ptr, cursor, post_doc, post_w):
    """Thread p (one per stored entry of the CSR): its row by binary search in indptr (int64,
    n_docs+1), then slot = term_ptr[t] + atomic cursor[t]++, and post_doc/post_w[slot] = row,
    weight. Order within a posting list is arbitrary (see the module docstring)."""
    p = cuda.grid(1)
    nnz = indices.shape[0]
    if p >= nnz:
        return
    row = last_le_dev(indptr, 0, indptr.shape[0] - 1, p)
    t = indices[p]
    slot = term_ptr[t] + cuda.atomic.add(cursor, t, 1)
    post_doc[slot] = row
    post_w[slot] = data[p]


@cuda.jit
def doc_norms(indptr, data, d_sq, d_l1):
    """Thread d (one per row): |d|_2^2 and |d|_1 in float64, summed in row order (as the twin)."""
    d = cuda.grid(1)
    if d < d_sq.shape[0]:
        sq = 0.0
        l1 = 0.0
        for p in range(indptr[d], indptr[d + 1]):
            w = numba.float64(data[p])
            sq += w * w
            l1 += abs(w)
        d_sq[d] = sq
        d_l1[d] = l1


@cuda.jit
def doc_norm_terms(d_sq, d_l1, metric, out):
    """Thread d: out[d] = the document's norm term for the metric (twin: norm_terms)."""
    d = cuda.grid(1)
    if d < out.shape[0]:
        if metric == COSINE:
            out[d] = math.sqrt(d_sq[d])
        elif metric == L2:
            out[d] = d_sq[d]
        elif metric == L1:
            out[d] = d_l1[d]
        else:
            out[d] = 0.0


# ----------------------------------------------------------------------------- GPU: scoring

@cuda.jit
def zero_int64(values):
    """Grid-stride loop: values[:] = 0."""
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, values.shape[0], stride):
        values[i] = 0


@kernel_cache
def accumulate_kernel(block: int, items: int):
    """Load-balanced accumulation of a batch's postings into dense score rows.

    Segments j = 0..L-1 are the (query, term) pairs of the batch in query order; seg_off int64
    (L+1,) is the exclusive prefix sum of their document frequencies, so E = seg_off[L] postings
    in all. Block b covers positions [b*block*items, (b+1)*block*items); thread tid takes
    p = base + i*block + tid for i < items (consecutive threads read consecutive postings), finds
    its segment by binary search once and then walks forward. Each posting adds
    int64(contribution * scale[query]) into acc[query * n_docs + doc] with an atomic add.
    seg int32 (L, 2) = (term, query); seg_weight float32 (L,); qinfo float64 (Q, 3) = (scale,
    norm term, document to leave out or -1);
    term_ptr int64 (n_terms+1,), post_doc int32, post_w float32; acc int64 (Q * n_docs,).
    No shared memory, no synchronisation.
    """

    @cuda.jit
    def accumulate(seg_off, seg, seg_weight, qinfo, term_ptr, post_doc, post_w, metric, n_docs, acc):
        n_seg = seg.shape[0]
        total = seg_off[n_seg]
        p = numba.int64(cuda.blockIdx.x) * (block * items) + cuda.threadIdx.x
        if p >= total:
            return
        j = last_le_dev(seg_off, 0, n_seg, p)
        for i in range(items):
            if p >= total:
                return
            while seg_off[j + 1] <= p:
                j += 1
            t = seg[j, 0]
            q = seg[j, 1]
            r = term_ptr[t] + (p - seg_off[j])
            v = numba.int64(contribution_dev(metric, seg_weight[j], post_w[r]) * qinfo[q, 0])
            cuda.atomic.add(acc, numba.int64(q) * n_docs + post_doc[r], v)
            p += block

    return accumulate


@cuda.jit(device=True, inline=True)
def _better(ka, da, kb, db):
    """(key desc, doc asc) order; doc < 0 marks an empty slot, which sorts last."""
    if da < 0:
        return False
    if db < 0:
        return True
    if ka != kb:
        return ka > kb
    return da < db


@cuda.jit(device=True, inline=True)
def _bitonic_pairs(keys, docs, n, tid, block):
    """Sort keys/docs (shared, n a power of two) best first by _better. Each of the block's threads
    handles pairs i = tid, tid + block, ...; a syncthreads after every compare-exchange step."""
    size = 2
    while size <= n:
        stride = size // 2
        while stride > 0:
            i = tid
            while i < n:
                partner = i ^ stride
                if partner > i:
                    ka = keys[i]
                    da = docs[i]
                    kb = keys[partner]
                    db = docs[partner]
                    if (i & size) == 0:
                        swap = _better(kb, db, ka, da)
                    else:
                        swap = _better(ka, da, kb, db)
                    if swap:
                        keys[i] = kb
                        docs[i] = db
                        keys[partner] = ka
                        docs[partner] = da
                i += block
            cuda.syncthreads()  # step complete before the next stride reads
            stride //= 2
        size *= 2


@cuda.jit(device=True, inline=True)
def _bitonic_keys_desc(keys, n, tid, block):
    """Sort float64 keys (shared, n a power of two) descending; syncthreads after every step."""
    size = 2
    while size <= n:
        stride = size // 2
        while stride > 0:
            i = tid
            while i < n:
                partner = i ^ stride
                if partner > i:
                    a = keys[i]
                    b = keys[partner]
                    if ((i & size) == 0 and b > a) or ((i & size) != 0 and a > b):
                        keys[i] = b
                        keys[partner] = a
                i += block
            cuda.syncthreads()  # step complete
            stride //= 2
        size *= 2


@cuda.jit(device=True, inline=True)
def _block_exclusive_scan(flags, tid, block):
    """In-place exclusive scan of flags (shared int32, block entries); returns the total.
    Hillis-Steele with a syncthreads around every round (read, then write)."""
    own = flags[tid]
    cuda.syncthreads()  # every flag written by the caller
    offset = 1
    while offset < block:
        add = 0
        if tid >= offset:
            add = flags[tid - offset]
        cuda.syncthreads()  # all reads of this round done
        flags[tid] += add
        cuda.syncthreads()  # all writes of this round done
        offset *= 2
    total = flags[block - 1]
    cuda.syncthreads()  # everyone read the total before flags become exclusive
    flags[tid] -= own
    cuda.syncthreads()
    return total


@cuda.jit(device=True, inline=True)
def _kth_largest_shared(vals, v, k, tid, block):
    """The k-th largest (k <= block) of vals (float64 shared [block], thread tid's value v at
    vals[tid], written and synchronised by the caller), returned to every thread: each thread
    counts the values above its own and at least its own (broadcast reads, no sorting); the
    thread(s) holding the k-th largest (fewer than k above, at least k at or above: all hold the
    same value) write it to vals[0]. Two syncthreads instead of the bitonic sort's log2(block)
    * (log2(block)+1) / 2. vals is overwritten."""
    gt = 0
    ge = 0
    for j in range(block):
        x = vals[j]
        if x > v:
            gt += 1
        if x >= v:
            ge += 1
    cuda.syncthreads()  # every thread counted before vals[0] changes
    if gt < k and ge >= k:
        vals[0] = v
    cuda.syncthreads()  # the k-th largest visible
    return vals[0]


@cuda.jit(device=True, inline=True)
def _first_k_by_counting(keys, docs, n, k, tmp_key, tmp_doc, tid, block):
    """Put the best min(k, n) of keys/docs[:n] (shared; documents distinct and >= 0) first, in
    _better order, without sorting: entry i's rank = the number of entries better than it
    (broadcast reads; ranks are distinct because documents are), entries of rank < k go to
    tmp_key/tmp_doc (shared scratch of >= k entries) and are copied back. Entries from n on are
    left as they are. Two syncthreads instead of a bitonic network's log2(n) (log2(n)+1) / 2."""
    i = tid
    while i < n:
        ka = keys[i]
        da = docs[i]
        r = 0
        for j in range(n):
            if _better(keys[j], docs[j], ka, da):
                r += 1
        if r < k:
            tmp_key[r] = ka
            tmp_doc[r] = da
        i += block
    cuda.syncthreads()  # every rank computed and placed
    for j in range(tid, min(k, n), block):
        keys[j] = tmp_key[j]
        docs[j] = tmp_doc[j]
    cuda.syncthreads()  # the first k in order


@cuda.jit(device=True, inline=True)
def _select_top_keys(keys, items, best, base, k, cap, tmax, cand_key, cand_doc, counter, flags, tid, block,
                     counting):
    """Block-wide top-k of a segment's keys, in shared memory; every thread of the block calls it.

    keys float64 [items * block] (thread tid holds entries i * block + tid, document base + that
    index; -inf for none), best = the thread's largest key. tmax float64 [block], cand_key float64
    / cand_doc int32 [cap], counter int32 [1], flags int32 [block] are scratch. The k-th largest of
    the thread maxima (found by a bitonic sort of tmax, or with ``counting`` by
    _kth_largest_shared: the same value) is a lower bound tau on the k-th best key: keys > tau are
    placed by an atomic counter, then keys == tau in index order (a block scan per item round)
    until k are held, and a bitonic sort orders the candidates by (key desc, document asc) (with
    ``counting``: _first_k_by_counting, the same first k). On return cand_*[:k] are the segment's
    best (documents -1 / keys -inf past the segment's valid keys). Synchronises inside.
    """
    tmax[tid] = best
    for j in range(tid, cap, block):
        cand_doc[j] = -1
        cand_key[j] = -math.inf
    if tid == 0:
        counter[0] = 0
    cuda.syncthreads()  # keys, tmax, empty candidates and counter ready
    if counting:
        tau = _kth_largest_shared(tmax, best, k, tid, block)
    else:
        _bitonic_keys_desc(tmax, block, tid, block)
        tau = tmax[k - 1]
    for i in range(items):
        key = keys[i * block + tid]
        if key > tau:
            slot = cuda.atomic.add(counter, 0, 1)
            cand_key[slot] = key
            cand_doc[slot] = base + i * block + tid
    cuda.syncthreads()  # all candidates above tau placed
    n_gt = counter[0]
    n_cand = n_gt
    if n_gt < k and tau > -math.inf:
        need = k - n_gt
        taken = 0
        for i in range(items):
            key = keys[i * block + tid]
            flags[tid] = 1 if key == tau else 0
            total = _block_exclusive_scan(flags, tid, block)
            pos = taken + flags[tid]
            if key == tau and pos < need:
                cand_key[n_gt + pos] = key
                cand_doc[n_gt + pos] = base + i * block + tid
            taken += total
            cuda.syncthreads()  # flags reused next round
            if taken >= need:
                break
        n_cand = n_gt + min(taken, need)
    cuda.syncthreads()  # all candidates placed
    if counting:
        _first_k_by_counting(cand_key, cand_doc, n_cand, k, tmax, flags, tid, block)
    else:
        n_sort = 2
        while n_sort < n_cand:
            n_sort *= 2
        _bitonic_pairs(cand_key, cand_doc, n_sort, tid, block)


def topk_geometry(k: int, block: int | None = None, items: int | None = None) -> tuple[int, int, int]:
    """(block, items, cap) for select_topk: block >= k a power of two, the segment's keys
    (block*items float64) plus candidates (cap = next pow2 of max(k, (k-1)*items)) in < 48 KB."""
    if block is None:
        block = max(256, _next_pow2(k))
    if block < k or block & (block - 1):
        raise ValueError(f"block must be a power of two >= k, got block={block}, k={k}")
    if items is None:
        items = 16
        while items > 1 and (block * items * 8 + _cap(k, items) * 12 + block * 12) > 46 * 1024:
            items //= 2
    return block, items, _cap(k, items)


def _cap(k, items):
    return max(2, _next_pow2(max(k, (k - 1) * items)))


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


@kernel_cache
def select_topk_kernel(block: int, items: int, cap: int):
    """Top k of each (query, segment): block (s, q) covers documents [s*block*items, ...).

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
    """
    seg_len = block * items

    @cuda.jit
    def select_topk(acc, n_docs, qinfo, dn, metric, k, out_doc, out_key):
        keys = cuda.shared.array(seg_len, numba.float64)
        tmax = cuda.shared.array(block, numba.float64)
        cand_key = cuda.shared.array(cap, numba.float64)
        cand_doc = cuda.shared.array(cap, numba.int32)
        flags = cuda.shared.array(block, numba.int32)
        counter = cuda.shared.array(1, numba.int32)
        tid = cuda.threadIdx.x
        seg = cuda.blockIdx.x
        q = cuda.blockIdx.y
        base = seg * seg_len
        row = numba.int64(q) * n_docs
        sc = qinfo[q, 0]
        qnorm = qinfo[q, 1]
        me = numba.int64(qinfo[q, 2])
        best = -math.inf
        for i in range(items):
            d = base + i * block + tid
            key = -math.inf
            if d < n_docs:
                if d != me:
                    key = score_key_dev(metric, acc[row + d], sc, qnorm, dn[d])
                acc[row + d] = 0  # leave the rows zeroed for the next batch
            keys[i * block + tid] = key
            if key > best:
                best = key
        _select_top_keys(keys, items, best, base, k, cap, tmax, cand_key, cand_doc, counter, flags, tid, block, False)
        for j in range(tid, k, block):
            out_doc[q, seg, j] = cand_doc[j]
            out_key[q, seg, j] = cand_key[j]

    return select_topk


@kernel_cache
def merge_topk_kernel(block: int, width: int):
    """Merge groups of sorted top-k lists: block (g, q) loads lists [g*group, (g+1)*group) of query
    q (in_doc int32 / in_key float64, shape (Q, n_lists, k)) into shared arrays of ``width`` entries
    (a power of two >= group*k; empty slots doc -1), sorts them (key desc, doc asc) and writes
    the first k to out (Q, n_groups, k). Shared: 12*width bytes."""

    @cuda.jit
    def merge_topk(in_doc, in_key, group, k, out_doc, out_key):
        keys = cuda.shared.array(width, numba.float64)
        docs = cuda.shared.array(width, numba.int32)
        tid = cuda.threadIdx.x
        g = cuda.blockIdx.x
        q = cuda.blockIdx.y
        n_lists = in_doc.shape[1]
        for j in range(tid, width, block):
            lst = g * group + j // k
            docs[j] = -1
            keys[j] = -math.inf
            if j < group * k and lst < n_lists:
                docs[j] = in_doc[q, lst, j % k]
                keys[j] = in_key[q, lst, j % k]
        cuda.syncthreads()  # shared lists loaded
        _bitonic_pairs(keys, docs, width, tid, block)
        for j in range(tid, k, block):
            out_doc[q, g, j] = docs[j]
            out_key[q, g, j] = keys[j]

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

    @cuda.jit
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
            if d < n_docs and d != numba.int64(qinfo[q, 2]) and d > numba.int64(qinfo[q, 3]):
                key = score_key_dev(metric, acc[row + d], qinfo[q, 0], qinfo[q, 1], dn[d])
                if key >= min_key:
                    hits += 1
        if hits:
            cuda.atomic.add(counter, 0, hits)
        cuda.syncthreads()  # all hits counted
        if tid == 0:
            counts[q, seg] = counter[0]

    @cuda.jit
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
                if d != numba.int64(qinfo[q, 2]) and d > numba.int64(qinfo[q, 3]):
                    key = score_key_dev(metric, acc[row + d], qinfo[q, 0], qinfo[q, 1], dn[d])
                    if key >= min_key:
                        hit = 1
                acc[row + d] = 0  # leave the rows zeroed for the next batch
            flags[tid] = hit
            total = _block_exclusive_scan(flags, tid, block)
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
        ("count_df", count_df, "void(int32[::1], int32[::1])"),
        ("scatter_postings", scatter_postings,
         "void(int64[::1], int32[::1], float32[::1], int64[::1], int32[::1], int32[::1], float32[::1])"),
        ("doc_norms", doc_norms, "void(int64[::1], float32[::1], float64[::1], float64[::1])"),
        ("doc_norm_terms", doc_norm_terms, "void(float64[::1], float64[::1], int64, float64[::1])"),
        ("zero_int64", zero_int64, "void(int64[::1])"),
        ("accumulate", accumulate_kernel(256, 16),
         "void(int64[::1], int32[:, ::1], float32[::1], float64[:, ::1], int64[::1], int32[::1], float32[::1], int64, int64, int64[::1])"),
        ("select_topk", select_topk_kernel(b, it, cap), acc_sig + "int64, int32[:, :, ::1], float64[:, :, ::1])"),
        ("merge_topk", merge_topk_kernel(256, 2048),
         "void(int32[:, :, ::1], float64[:, :, ::1], int64, int64, int32[:, :, ::1], float64[:, :, ::1])"),
        ("count_threshold", count_t, acc_sig + "float64, int32[:, ::1])"),
        ("write_threshold", write_t, acc_sig + "float64, int64[::1], int32[::1], float64[::1])"),
        ("grouped_topk_k200", grouped_topk_kernel(*grouped_geometry(200, 5000)),
         "void(int64[::1], int32[::1], float32[::1], int64, float64[:, ::1], int64[::1], int32[::1], float32[::1], "
         "float64[:, ::1], int64[:, ::1], int64[:, ::1], int64[::1], int64, int32[:, :, :, ::1], float64[:, :, :, ::1])"),
        ("grouped_topk", grouped_topk_kernel(*grouped_geometry(30, 600)),
         "void(int64[::1], int32[::1], float32[::1], int64, float64[:, ::1], int64[::1], int32[::1], float32[::1], "
         "float64[:, ::1], int64[:, ::1], int64[:, ::1], int64[::1], int64, int32[:, :, :, ::1], float64[:, :, :, ::1])"),
        ("grouped_topk_counting", grouped_topk_kernel(*grouped_geometry(30, 600), 64, True),
         "void(int64[::1], int32[::1], float32[::1], int64, float64[:, ::1], int64[::1], int32[::1], float32[::1], "
         "float64[:, ::1], int64[:, ::1], int64[:, ::1], int64[::1], int64, int32[:, :, :, ::1], float64[:, :, :, ::1])"),
        ("segment_offsets", segment_offsets, "void(int64[::1], int32[::1], int64[::1], int64[:, ::1])"),
        ("merge_lists", merge_lists_kernel(128, 1024),
         "void(int32[:, :, :, ::1], float64[:, :, :, ::1], int64[::1], int64[::1], int64, int32[:, :, :, ::1], float64[:, :, :, ::1])"),
        ("grouped_finish", grouped_finish,
         "void(int32[:, :, :, ::1], float64[:, :, :, ::1], float64[:, ::1], int64, int64[::1], int64, int64, "
         "float32[:, :, ::1], int64[:, :, :, ::1])"),
    ]


# ----------------------------------------------------------------------------- grouped top-k
#
# The index's documents are split into groups of consecutive documents (group_ptr int64
# (n_groups+1,)), e.g. a training corpus permuted so that each class is one range. For every
# query and group, and for several metrics at once, the k best documents of that group. Cosine,
# dot and l2 share one fixed-point accumulator (the dot product, scale from query_stats with any
# of those metrics); l1 has its own (its correction sum, scale from query_stats with L1). Keys,
# ties (lower document index first) and padding are as for the plain top-k.
#
# Output: float32 scores out (Q, n_groups, width), width >= n_metrics*k: metric m's k scores in
# columns [m*k, (m+1)*k) (similarity for cosine/dot, distance for l2/l1, best first); columns from
# n_metrics*k on are set to 0. Where fewer than k documents exist: NaN (pad_last = 0), or
# (pad_last = 1) the last found score repeated, or, if the group offers no document at all, the
# score an all-zero document gets (cosine/dot 0, l2 |q|_2, l1 |q|_1). out_doc int64
# (Q, n_groups, n_metrics, k) (or a (0, 0, 0, 0) array: not wanted): the documents, -1 where none.

@numba.njit(cache=True, inline="always")
def _key_to_score(metric, key):
    if metric == COSINE or metric == DOT:
        return numba.float32(key)
    return numba.float32(-key)


@numba.njit(parallel=True, cache=True)
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
    need_dot = False
    need_l1 = False
    for m in range(n_m):
        if metrics[m] == L1:
            need_l1 = True
        else:
            need_dot = True
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
                for r in range(term_ptr[t], term_ptr[t + 1]):
                    d = post_doc[r]
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
                            key = score_key_cpu(metric, acc[a, d], sc, qnm, dn[m, d])
                            if filled < k or key >= keys[k - 1]:
                                filled = _offer(key, d, keys, docs, filled, k)
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
    if block is None:
        block = max(128, _next_pow2(k))
    if block < k or block & (block - 1):
        raise ValueError(f"block must be a power of two >= k, got block={block}, k={k}")
    if items is None:
        items = 16
        while items > 1 and grouped_shared_bytes(block, items, _cap(k, items)) > 46 * 1024:
            items //= 2
    if grouped_shared_bytes(block, items, _cap(k, items)) > 48 * 1024:
        raise ValueError(f"block={block} x items={items} needs {grouped_shared_bytes(block, items, _cap(k, items))} B "
                         "of shared memory (at most 48 KB)")
    return block, items, _cap(k, items)


def grouped_shared_bytes(block: int, items: int, cap: int) -> int:
    return 24 * block * items + 24 * block + 4 + 12 * cap + 4


def _lower_bound_py(values, lo, hi, x):
    """First position p in [lo, hi) with values[p] >= x (values sorted ascending), else hi."""
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


_lower_bound = cuda.jit(device=True, inline=True)(_lower_bound_py)
lower_bound_cpu = numba.njit(inline="always")(_lower_bound_py)  # the same search for CPU twins


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
    length goes through a block exclusive scan (t_off). The chunk's postings are then split evenly: thread tid takes
    positions tid, tid + block, ... (binary search in t_off once, then walking forward) and adds
    int64(contribution * scale) with shared-memory atomics (exact, order-free). A syncthreads
    separates the chunks.
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
    counting: the selection's two sorts replaced by counting (_kth_largest_shared for tau,
    _first_k_by_counting for the candidates): about 6 syncthreads per metric instead of ~50 at
    block 128; the same lists.
    """
    seg_len = block * items
    off_len = block + 1

    @(cuda.jit(max_registers=int(max_registers)) if max_registers > 0 and not numba.config.ENABLE_CUDASIM
      else cuda.jit)
    def grouped_topk(q_indptr, q_indices, q_data, q_lo, qinfo, term_ptr, post_doc, post_w, dn, seg_range,
                     seg_table, metrics, k, out_doc, out_key):
        acc_dot = cuda.shared.array(seg_len, numba.int64)
        acc_l1 = cuda.shared.array(seg_len, numba.int64)
        keys = cuda.shared.array(seg_len, numba.float64)
        t_start = cuda.shared.array(block, numba.int64)
        t_w = cuda.shared.array(block, numba.float32)
        t_off = cuda.shared.array(off_len, numba.int32)
        tmax = cuda.shared.array(block, numba.float64)
        cand_key = cuda.shared.array(cap, numba.float64)
        cand_doc = cuda.shared.array(cap, numba.int32)
        counter = cuda.shared.array(1, numba.int32)
        tid = cuda.threadIdx.x
        s = cuda.blockIdx.x
        b = cuda.blockIdx.y
        q = q_lo + b
        seg_lo = seg_range[s, 0]
        seg_hi = seg_range[s, 1]
        n_m = metrics.shape[0]
        need_dot = False
        need_l1 = False
        for m in range(n_m):
            if metrics[m] == L1:
                need_l1 = True
            else:
                need_dot = True
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
                t = q_indices[j]
                if use_table:
                    first = seg_table[t, s]
                    last = seg_table[t, s + 1]
                else:
                    end = term_ptr[t + 1]
                    first = _lower_bound(post_doc, term_ptr[t], end, seg_lo)
                    last = _lower_bound(post_doc, first, min(end, first + (seg_hi - seg_lo)), seg_hi)
                t_start[tid] = first
                t_w[tid] = q_data[j]
                cnt = last - first
            t_off[tid] = cnt
            total = _block_exclusive_scan(t_off, tid, block)  # synchronises; t_off now exclusive
            if tid == 0:
                t_off[block] = total
            cuda.syncthreads()  # t_off[block] visible
            p = tid
            if p < total:
                i = last_le_dev(t_off, 0, block, p)
                while p < total:
                    while t_off[i + 1] <= p:
                        i += 1
                    r = t_start[i] + (p - t_off[i])
                    d = post_doc[r] - seg_lo
                    w = post_w[r]
                    qw = t_w[i]
                    if need_dot:
                        cuda.atomic.add(acc_dot, d, numba.int64(contribution_dev(DOT, qw, w) * s_dot))
                    if need_l1:
                        cuda.atomic.add(acc_l1, d, numba.int64(contribution_dev(L1, qw, w) * s_l1))
                    p += block
            cuda.syncthreads()  # chunk done before t_start / t_off are rewritten
        for m in range(n_m):
            metric = metrics[m]
            sc = s_dot
            if metric == L1:
                sc = s_l1
            qnm = qinfo[q, 3 + m]
            best = -math.inf
            for i in range(n_items):
                loc = i * block + tid
                d = seg_lo + loc
                key = -math.inf
                if d < seg_hi and d != me:
                    if metric == L1:
                        v = acc_l1[loc]
                    else:
                        v = acc_dot[loc]
                    key = score_key_dev(metric, v, sc, qnm, dn[m, d])
                keys[loc] = key
                if key > best:
                    best = key
            _select_top_keys(keys, n_items, best, seg_lo, k, cap, tmax, cand_key, cand_doc, counter, t_off, tid, block,
                             counting)
            for j in range(tid, k, block):
                out_doc[b, s, m, j] = cand_doc[j]
                out_key[b, s, m, j] = cand_key[j]
            cuda.syncthreads()  # candidates read before the next metric resets them

    return grouped_topk


@cuda.jit
def segment_offsets(term_ptr, post_doc, bounds, table):
    """Grid-stride loop over (term t, boundary j): table[t, j] = the first position of t's posting
    list (sorted by document) whose document is >= bounds[j] (int64 (n_seg+1,): the segments'
    first documents, then n_docs), so that segment s of term t is table[t, s] .. table[t, s+1]."""
    n_b = bounds.shape[0]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, table.shape[0] * n_b, stride):
        t = e // n_b
        j = e % n_b
        table[t, j] = _lower_bound(post_doc, term_ptr[t], term_ptr[t + 1], bounds[j])


@kernel_cache
def merge_lists_kernel(block: int, width: int):
    """Merge ranges of sorted top-k lists: block (j, b, m) merges lists [in_lo[j], in_hi[j]) of
    query b, metric m (in_doc int32 / in_key float64 (Qb, n_in, n_metrics, k)) in shared arrays of
    ``width`` entries (a power of two >= (in_hi - in_lo) * k; empty slots doc -1), sorted (key
    desc, doc asc) by a bitonic network, and writes the first k to out (Qb, n_out, n_metrics, k).
    Shared: 12*width bytes; a syncthreads after loading and after every bitonic step."""

    @cuda.jit
    def merge_lists(in_doc, in_key, in_lo, in_hi, k, out_doc, out_key):
        keys = cuda.shared.array(width, numba.float64)
        docs = cuda.shared.array(width, numba.int32)
        tid = cuda.threadIdx.x
        j = cuda.blockIdx.x
        b = cuda.blockIdx.y
        m = cuda.blockIdx.z
        lo = in_lo[j]
        n = (in_hi[j] - lo) * k
        for e in range(tid, width, block):
            docs[e] = -1
            keys[e] = -math.inf
            if e < n:
                docs[e] = in_doc[b, lo + e // k, m, e % k]
                keys[e] = in_key[b, lo + e // k, m, e % k]
        cuda.syncthreads()  # shared lists loaded
        _bitonic_pairs(keys, docs, width, tid, block)
        for e in range(tid, k, block):
            out_doc[b, j, m, e] = docs[e]
            out_key[b, j, m, e] = keys[e]

    return merge_lists


@cuda.jit
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


# ----------------------------------------------------------------------------- meta-features: centroids (host, both backends)

@numba.njit(parallel=True, cache=True)
def group_sums_cpu(indptr, indices, data, group_ptr, n_terms):
    """Sums of the rows of each group (rows [group_ptr[g], group_ptr[g+1]) of a CSR matrix),
    float64, added in row order: S (n_terms, n_groups) and ss (n_groups,) = |S_g|^2. Groups in
    parallel, each into its own row of a (n_groups, n_terms) scratch, transposed at the end."""
    n_groups = group_ptr.shape[0] - 1
    rows = np.zeros((n_groups, n_terms), np.float64)
    ss = np.zeros(n_groups, np.float64)
    for g in prange(n_groups):
        sums = rows[g]
        for r in range(group_ptr[g], group_ptr[g + 1]):
            for p in range(indptr[r], indptr[r + 1]):
                sums[indices[p]] += np.float64(data[p])
        total = 0.0
        for t in range(n_terms):
            total += sums[t] * sums[t]
        ss[g] = total
    return np.ascontiguousarray(rows.T), ss


@numba.njit(parallel=True, cache=True)
def centroid_features_cpu(q_indptr, q_indices, q_data, S, ss, counts, own_group, out, col_cos, col_l2):
    """Cosine similarity and L2 distance of every query to every group's centroid, in float64,
    rounded into out[i, g, col_cos] and out[i, g, col_l2] (out float32 (Q, n_groups, width)).

    S float64 (n_terms, n_groups) group sums, ss (n_groups,) their squared norms, counts int64
    (n_groups,) group sizes; own_group int64 (Q,): the group query i belongs to (it is then left
    out of that group's centroid: the centroid of the other counts[g] - 1 rows), or -1. x.S_g is
    summed over the query's terms in order; a centroid that does not exist (no row left) is the
    zero vector: cosine 0, L2 |x|_2. Queries in parallel."""
    n_q = q_indptr.shape[0] - 1
    n_groups = S.shape[1]
    for i in prange(n_q):
        xs = np.zeros(n_groups, np.float64)
        sq = 0.0
        for p in range(q_indptr[i], q_indptr[i + 1]):
            w = np.float64(q_data[p])
            sq += w * w
            t = q_indices[p]
            for g in range(n_groups):
                xs[g] += w * S[t, g]
        for g in range(n_groups):
            loo = own_group[i] == g
            n_eff = counts[g] - 1 if loo else counts[g]
            safe = np.float64(max(n_eff, 1))
            if loo:
                dot = (xs[g] - sq) / safe
                cen_sq = (ss[g] - 2.0 * xs[g] + sq) / (safe * safe)
            else:
                dot = xs[g] / safe
                cen_sq = ss[g] / (safe * safe)
            if cen_sq < 0.0:
                cen_sq = 0.0
            if n_eff > 0:
                den = math.sqrt(sq) * math.sqrt(cen_sq)
                cos = dot / den if den > 0.0 else 0.0
                l2 = math.sqrt(max(sq - 2.0 * dot + cen_sq, 0.0))
            else:
                cos = 0.0
                l2 = math.sqrt(sq)
            out[i, g, col_cos] = np.float32(cos)
            out[i, g, col_l2] = np.float32(l2)


@numba.njit(parallel=True, cache=True)
def set_columns_cpu(out, values, col):
    """out[i, g, col:col + values.shape[2]] = values[i, g, :] for every (i, g), rows in parallel
    (out float32 (Q, G, width), values float32 (Q, G, n)): the meta-features' centroid columns."""
    n = values.shape[2]
    for i in prange(out.shape[0]):
        for g in range(out.shape[1]):
            for j in range(n):
                out[i, g, col + j] = values[i, g, j]
