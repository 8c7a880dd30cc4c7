"""Host side of stream clustering, compiled with numba (no CUDA here): document preparation, the
centroid update, the in-order resolution of a scored batch, packing of the device's batch buffers,
and the inverted index over centroid terms (the CPU algorithm's candidate filter).

Arithmetic contract (shared with the kernels and the float64 reference, stream_reference.py):

- a prepared document keeps its top K terms (weight descending, ties to the lower term id),
  sorted by term id; its magnitude is sqrt of the sequential float64 sum of its squared weights
  in term order; its stored weights are float32(w / magnitude).
- similarity = sequential float64 sum, in increasing term id, of float64(c_t) * float64(d_t)
  over shared terms (each product of two float32 is exact in float64).
- a new cluster's centroid is its first document (terms, float32 weights, magnitude) as is.
- C + D: raw_t = float64(c_t) * |C| + float64(d_t) * |D| (one side only: just its product),
  keep the K largest raw_t (ties to the lower term id), |C'| = sqrt(sequential sum of raw_t^2 in
  term order), c'_t = float32(raw_t / |C'|), terms sorted ascending.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from ..kernels.primitives import better_cpu as better  # the selection's tie rule (kernels/primitives.py)
from ..kernels.stream_ell import EMPTY, HASH_MULT, NO_SIM, offsets_cpu, probe_cpu
from ..kernels.jit import cpu_jit

# resolve() status codes
DONE, RESTART, GROW_CLUSTERS, GROW_INDEX = 0, 1, 2, 3
# counters (int64 array) slots
N_CLUSTERS, N_CHANGED, EPOCH, N_DIRTY, TOTAL_NNZ, N_UPDATES, N_RECHECKS = range(7)
N_COUNTERS = 7
INDEX_BLOCK = 8  # entries (cluster, slot, version) per block of an inverted-index posting list


@cpu_jit(parallel=True, nogil=True)
def prepare_docs(indptr, indices, data, max_terms):
    """Weighted CSR rows -> prepared documents.

    indptr int64 (n+1,), indices int32 (sorted within rows), data float64 (weights >= 0; zeros are
    dropped). Returns (p_indptr int64 (n+1,), p_terms int32, p_weights float32, p_mag float64 (n,)).
    """
    n = indptr.shape[0] - 1
    counts = np.zeros(n + 1, np.int64)
    for i in prange(n):
        c = 0
        for p in range(indptr[i], indptr[i + 1]):
            if data[p] > 0.0:
                c += 1
        counts[i + 1] = min(c, max_terms)
    p_indptr = np.cumsum(counts)
    p_terms = np.empty(p_indptr[n], np.int32)
    p_weights = np.empty(p_indptr[n], np.float32)
    p_mag = np.zeros(n, np.float64)
    for i in prange(n):
        lo = indptr[i]
        hi = indptr[i + 1]
        pos = np.empty(hi - lo, np.int64)
        m = 0
        for p in range(lo, hi):
            if data[p] > 0.0:
                pos[m] = p
                m += 1
        if m > max_terms:
            neg = np.empty(m, np.float64)
            for q in range(m):
                neg[q] = -data[pos[q]]
            order = np.argsort(neg, kind="mergesort")  # stable: equal weights stay in term order
            keep = np.sort(order[:max_terms])
            kept = np.empty(max_terms, np.int64)
            for q in range(max_terms):
                kept[q] = pos[keep[q]]
            pos = kept
            m = max_terms
        sq = 0.0
        for q in range(m):
            w = data[pos[q]]
            sq += w * w
        mag = math.sqrt(sq)
        p_mag[i] = mag
        out = p_indptr[i]
        for q in range(m):
            p_terms[out + q] = indices[pos[q]]
            p_weights[out + q] = np.float32(data[pos[q]] / mag)
    return p_indptr, p_terms, p_weights, p_mag


@numba.njit(inline="always")
def sim_row(d_terms, d_weights, lo, hi, c_terms, c_weights, c, length):
    """Similarity of document [lo, hi) with centroid row c: merge of two ascending term lists."""
    s = 0.0
    i = lo
    n = 0
    while i < hi and n < length:
        a = d_terms[i]
        b = c_terms[c, n]
        if a == b:
            s += np.float64(d_weights[i]) * np.float64(c_weights[c, n])
            i += 1
            n += 1
        elif a < b:
            i += 1
        else:
            n += 1
    return s


@cpu_jit(nogil=True)
def sim_rows(d_terms, d_weights, lo, hi, c_terms, c_weights, c_len, rows):
    """Similarities of one document with the given centroid rows (float64 (len(rows),))."""
    out = np.empty(rows.shape[0], np.float64)
    for i in range(rows.shape[0]):
        out[i] = sim_row(d_terms, d_weights, lo, hi, c_terms, c_weights, rows[i], c_len[rows[i]])
    return out


@cpu_jit(nogil=True)
def update_centroid(c, d_terms, d_weights, lo, hi, d_mag, c_terms, c_weights, c_len, c_mag, scr_terms, scr_raw):
    """C <- top-K(|C| c + |D| d), re-normalised (module docstring). scr_* hold >= 2K entries."""
    K = c_terms.shape[1]
    length = c_len[c]
    cm = c_mag[c]
    m = 0
    i = lo
    n = 0
    while i < hi or n < length:
        if n >= length or (i < hi and d_terms[i] < c_terms[c, n]):
            scr_terms[m] = d_terms[i]
            scr_raw[m] = np.float64(d_weights[i]) * d_mag
            i += 1
        elif i >= hi or c_terms[c, n] < d_terms[i]:
            scr_terms[m] = c_terms[c, n]
            scr_raw[m] = np.float64(c_weights[c, n]) * cm
            n += 1
        else:
            scr_terms[m] = c_terms[c, n]
            scr_raw[m] = np.float64(c_weights[c, n]) * cm + np.float64(d_weights[i]) * d_mag
            i += 1
            n += 1
        m += 1
    if m > K:
        neg = np.empty(m, np.float64)
        for q in range(m):
            neg[q] = -scr_raw[q]
        order = np.argsort(neg, kind="mergesort")  # stable: ties keep ascending term order
        keep = np.sort(order[:K])
        for q in range(K):  # keep is ascending, so q <= keep[q]: compacting in place is safe
            scr_terms[q] = scr_terms[keep[q]]
            scr_raw[q] = scr_raw[keep[q]]
        m = K
    sq = 0.0
    for q in range(m):
        sq += scr_raw[q] * scr_raw[q]
    mag = math.sqrt(sq)
    for q in range(m):
        c_terms[c, q] = scr_terms[q]
        c_weights[c, q] = np.float32(scr_raw[q] / mag)
    for q in range(m, K):
        c_terms[c, q] = EMPTY
        c_weights[c, q] = 0.0
    c_len[c] = m
    c_mag[c] = mag


# ----------------------------------------------------------------------------- inverted index
# Posting lists of the terms of the centroids: for term t, entries (cluster c, slot n, version v)
# meaning "c_terms[c, n] == t when c_version[c] == v". A centroid's every change bumps its version
# and appends its K postings again, so older entries go stale (skipped by the version check) and
# no entry is ever edited. Lists are chains of fixed-size blocks in one pool (newest block first).
# Scoring is term-at-a-time: the document's terms in increasing id, each posting adding
# d_t * c_weights[c, n] into a dense accumulator of c, so every cluster's sum runs in term order:
# bit for bit the merge of stream_reference.similarity.

@numba.njit(inline="always")
def _index_append(term, cluster, slot, version, ix_head, ix_count, ix_pool, ix_fill, ix_next, ix_meta):
    b = ix_head[term]
    if b < 0 or ix_fill[b] == ix_pool.shape[1]:
        nb = ix_meta[0]
        ix_meta[0] = nb + 1
        ix_next[nb] = b
        ix_fill[nb] = 0
        ix_head[term] = nb
        b = nb
    e = ix_fill[b]
    ix_pool[b, e, 0] = cluster
    ix_pool[b, e, 1] = slot
    ix_pool[b, e, 2] = version
    ix_fill[b] = e + 1
    ix_count[term] += 1
    ix_meta[1] += 1


@numba.njit(inline="always")
def _index_add_row(c, c_terms, c_len, c_version, ix_head, ix_count, ix_pool, ix_fill, ix_next, ix_meta):
    for n in range(c_len[c]):
        _index_append(c_terms[c, n], c, n, c_version[c], ix_head, ix_count, ix_pool, ix_fill, ix_next, ix_meta)


@cpu_jit(nogil=True)
def index_rebuild(c_terms, c_len, c_version, n_clusters, ix_head, ix_count, ix_pool, ix_fill, ix_next, ix_meta):
    """Rebuild the index from the centroids (drops stale entries). The pool must hold
    ``index_blocks_needed(...)`` blocks."""
    ix_head[:] = -1
    ix_count[:] = 0
    ix_meta[0] = 0
    ix_meta[1] = 0
    for c in range(n_clusters):
        _index_add_row(c, c_terms, c_len, c_version, ix_head, ix_count, ix_pool, ix_fill, ix_next, ix_meta)


@cpu_jit(nogil=True)
def index_blocks_needed(c_terms, c_len, n_clusters, n_terms, block):
    counts = np.zeros(n_terms, np.int64)
    for c in range(n_clusters):
        for n in range(c_len[c]):
            counts[c_terms[c, n]] += 1
    total = 0
    for t in range(n_terms):
        total += (counts[t] + block - 1) // block
    return total


@cpu_jit(parallel=True, nogil=True)
def index_score(j0, j1, d_indptr, d_terms, d_weights, c_weights, c_version, ix_head, ix_pool, ix_fill, ix_next,
                acc, touched, best):
    """Best cluster of documents j0..j1-1 through the inverted index (the clusters that share a
    term; the others have similarity 0). best[0, j - j0] = similarity, best[1, j - j0] = row
    (-1 and NO_SIM when no cluster shares a term).

    acc float64 (W, >= n_clusters) all zero on entry and on exit, touched int32 (W, >= n_clusters):
    worker w (prange over W = acc.shape[0]) takes documents j0 + w, j0 + w + W, ...
    """
    W = acc.shape[0]
    n_docs = j1 - j0
    for w in prange(min(W, n_docs)):
        for q in range(w, n_docs, W):
            j = j0 + q
            n_touched = 0
            for p in range(d_indptr[j], d_indptr[j + 1]):
                t = d_terms[p]
                if t >= ix_head.shape[0]:
                    continue
                dw = np.float64(d_weights[p])
                b = ix_head[t]
                while b >= 0:
                    for e in range(ix_fill[b]):
                        c = ix_pool[b, e, 0]
                        if ix_pool[b, e, 2] != c_version[c]:
                            continue  # stale: the centroid changed since this entry was written
                        if acc[w, c] == 0.0:
                            touched[w, n_touched] = c
                            n_touched += 1
                        acc[w, c] += dw * np.float64(c_weights[c, ix_pool[b, e, 1]])
                    b = ix_next[b]
            bs = NO_SIM
            br = -1
            for i in range(n_touched):
                c = touched[w, i]
                if better(acc[w, c], c, bs, br):
                    bs = acc[w, c]
                    br = c
                acc[w, c] = 0.0
            best[0, q] = bs
            best[1, q] = np.float64(br)


index_score_serial = cpu_jit(nogil=True)(index_score.py_func)
prepare_docs_serial = cpu_jit(nogil=True)(prepare_docs.py_func)
PARALLEL_MIN_WORK = 1_000_000  # slots or postings below which the serial compilation is used (a few ms of work:
# waking a thread team costs ~2 us on an idle machine but milliseconds on a busy one)


@cpu_jit(nogil=True)
def index_cost(j0, j1, d_indptr, d_terms, ix_count):
    """Posting entries the inverted index would walk for documents j0..j1-1."""
    total = 0
    for p in range(d_indptr[j0], d_indptr[j1]):
        t = d_terms[p]
        if t < ix_count.shape[0]:
            total += ix_count[t]
    return total


# ----------------------------------------------------------------------------- batch resolution

@cpu_jit(nogil=True)
def resolve(j, j_end, d_indptr, d_terms, d_weights, d_mag, best, j_launch, threshold,
            c_terms, c_weights, c_len, c_mag, c_size, counters,
            changed_mark, changed_list, dirty_mark, dirty_list,
            use_index, c_version, ix_head, ix_count, ix_pool, ix_fill, ix_next, ix_meta,
            out_cluster, out_sim, out_new, scr_terms, scr_raw, fresh):
    """Decide documents j, j+1, ... < j_end in order, as the one-at-a-time algorithm would.

    ``best[:, j - j_launch]`` is document j's best cluster over the state of the last scoring
    launch (similarity, row as float64; row -1 when none). A cluster created or changed since that
    launch is in ``changed_list`` (and ``changed_mark[c] == counters[EPOCH]``); document j is
    re-scored here against exactly those, and the launch's answer stands for all the others. If
    the launch's best row itself changed since the launch, the best among the unchanged rows is
    unknown: return (j, RESTART) so that the caller scores the rest of the batch again.
    ``fresh``: the scores were taken against the current state (no cluster changed since), so no
    re-check is needed; the decision is still recorded in the changed list of the current epoch.
    Also returns (j, GROW_CLUSTERS) when the centroid arrays are full and (j, GROW_INDEX) when the
    index pool may not hold another document's postings; (j_end, DONE) when all are decided.

    Every changed row is also recorded once in ``dirty_list`` (rows the device copy still lacks).
    Documents with no terms get cluster -1, similarity 0 and create nothing.
    """
    K = c_terms.shape[1]
    cap = c_terms.shape[0]
    epoch = counters[EPOCH]
    while j < j_end:
        lo = d_indptr[j]
        hi = d_indptr[j + 1]
        if hi == lo:
            out_cluster[j] = -1
            out_sim[j] = 0.0
            out_new[j] = False
            j += 1
            continue
        col = j - j_launch
        bs = best[0, col]
        br = np.int64(best[1, col])
        if br >= 0 and changed_mark[br] == epoch and not fresh:
            return j, RESTART
        if use_index and ix_pool.shape[0] - ix_meta[0] < K:
            return j, GROW_INDEX
        n_changed = 0 if fresh else counters[N_CHANGED]
        for i in range(n_changed):
            c = changed_list[i]
            s = sim_row(d_terms, d_weights, lo, hi, c_terms, c_weights, c, c_len[c])
            if better(s, c, bs, br):
                bs = s
                br = c
        counters[N_RECHECKS] += n_changed
        if br >= 0 and bs > threshold:
            c = br
            old_len = c_len[c]
            update_centroid(c, d_terms, d_weights, lo, hi, d_mag[j], c_terms, c_weights, c_len, c_mag,
                            scr_terms, scr_raw)
            counters[TOTAL_NNZ] += c_len[c] - old_len
            if use_index:
                c_version[c] += 1
                _index_add_row(c, c_terms, c_len, c_version, ix_head, ix_count, ix_pool, ix_fill, ix_next, ix_meta)
            c_size[c] += 1
            counters[N_UPDATES] += 1
            out_new[j] = False
        else:
            c = counters[N_CLUSTERS]
            if c >= cap:
                return j, GROW_CLUSTERS
            m = hi - lo
            for n in range(m):
                c_terms[c, n] = d_terms[lo + n]
                c_weights[c, n] = d_weights[lo + n]
            for n in range(m, K):
                c_terms[c, n] = EMPTY
                c_weights[c, n] = 0.0
            c_len[c] = m
            c_mag[c] = d_mag[j]
            c_size[c] = 1
            counters[N_CLUSTERS] = c + 1
            counters[TOTAL_NNZ] += m
            if use_index:
                c_version[c] = 0
                _index_add_row(c, c_terms, c_len, c_version, ix_head, ix_count, ix_pool, ix_fill, ix_next, ix_meta)
            out_new[j] = True
        if changed_mark[c] != epoch:
            changed_mark[c] = epoch
            changed_list[counters[N_CHANGED]] = c
            counters[N_CHANGED] += 1
        if dirty_mark[c] == 0:
            dirty_mark[c] = 1
            dirty_list[counters[N_DIRTY]] = c
            counters[N_DIRTY] += 1
        out_cluster[j] = c
        out_sim[j] = bs if br >= 0 else 0.0
        j += 1
    return j, DONE


# ----------------------------------------------------------------------------- device buffers

@cpu_jit(nogil=True)
def pack_batch(ibuf, fbuf, upd_rows, n_upd, c_terms, c_weights, d_indptr, d_terms, d_weights, j0, j1, table_size):
    """Write the packed launch buffers (kernels/stream_ell.py layout): the update buffer (rows
    upd_rows[:n_upd], sorted ascending, copied from the host centroids), the hash table of the
    distinct terms of documents j0..j1-1 (u = order of first appearance), their postings
    (document slot j - j0, weight) grouped by term, in document order within a term, and
    term_first. Returns (n_postings, n_unique)."""
    K = c_terms.shape[1]
    for u in range(n_upd):
        r = upd_rows[u]
        ibuf[u] = r
        for n in range(K):
            ibuf[n_upd + u * K + n] = c_terms[r, n]
            fbuf[u * K + n] = c_weights[r, n]
    n_post = d_indptr[j1] - d_indptr[j0]
    _, o_key, o_val, o_pdoc, o_first, o_pw = offsets_cpu(n_upd, K, table_size, n_post)
    mask = np.int64(table_size - 1)
    for h in range(table_size):
        ibuf[o_key + h] = EMPTY
    n_unique = 0
    counts = np.zeros(n_post + 1, np.int64)
    for p in range(d_indptr[j0], d_indptr[j1]):
        t = d_terms[p]
        h = (np.int64(t) * HASH_MULT) & mask
        while ibuf[o_key + h] != EMPTY and ibuf[o_key + h] != t:
            h = (h + 1) & mask
        if ibuf[o_key + h] == EMPTY:
            ibuf[o_key + h] = t
            ibuf[o_val + h] = n_unique
            n_unique += 1
        counts[ibuf[o_val + h]] += 1
    running = 0
    for u in range(n_unique):
        ibuf[o_first + u] = running
        running += counts[u]
        counts[u] = 0
    ibuf[o_first + n_unique] = running
    for j in range(j0, j1):
        for p in range(d_indptr[j], d_indptr[j + 1]):
            u = ibuf[o_val + probe_cpu(ibuf, o_key, mask, d_terms[p])]
            slot = ibuf[o_first + u] + counts[u]
            counts[u] += 1
            ibuf[o_pdoc + slot] = j - j0
            fbuf[o_pw + slot] = d_weights[p]
    return n_post, n_unique


@cpu_jit(nogil=True)
def drain_dirty(dirty_list, dirty_mark, counters):
    """The rows changed since the device copy was last written, sorted ascending; clears the list."""
    n = counters[N_DIRTY]
    rows = np.sort(dirty_list[:n])
    for i in range(n):
        dirty_mark[rows[i]] = 0
    counters[N_DIRTY] = 0
    return rows
