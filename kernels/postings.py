"""The inverted index's build (postings grouped by term, document norms) on the device and its
CPU twins. See kernels/scoring.py for how the index is scored.

Sorted build (the default, lists sorted by document, the same arrays on the device and the
host): the rows are cut into chunks of about equal postings (``chunk_rows``); each chunk counts its
terms, the counts turn into each chunk's cursor into every list (the chunks before it first), and
each chunk scatters its rows in order. ``build_postings`` does it with a thread a chunk on the
host (``_build_postings_chunks``; ``build_postings_cpu`` serially), ``count_chunk_terms`` +
``chunk_cursors`` + ``scatter_chunk_rows`` with a block a chunk on the device, so an index is
built where it is searched instead of on the host and uploaded. Norms: ``row_norm`` (a row's
|d|_2^2 and |d|_1 in float64, summed in row order), shared by ``doc_norms`` and ``row_norms_cpu``.

Atomic build (Geometry.sorted_postings=False): ``count_df``, an exclusive scan (kernels/scan.py)
into term_ptr, ``scatter_postings`` (atomic cursor per term: order within a list arbitrary, which
the fixed-point accumulation makes irrelevant), ``doc_norms``; ``doc_norm_terms``.

Block starts: on a sorted index, ``block_starts_kernel`` (twin ``block_starts_cpu``) tabulates
where each document block of a fixed size begins in the lists that hold at least one posting a
block (``block_table_terms``), so that the shared accumulation (kernels.blocked.term_range_dev)
reads a (term, block)'s range instead of searching for it; the engine keeps one table per shard
and block size (gputext.engine.device_index.DeviceShard.block_table).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, prange

from .metrics import COSINE, L1, L2
from .primitives import column_offsets_dev, last_le_dev, lower_bound_cpu, lower_bound_dev
from .jit import cpu_jit, cuda_kernel, device_function


def _row_norm(indptr, data, d):
    """Row d's (|d|_2^2, |d|_1), float64, summed in row order: the same bits on both sides."""
    sq = 0.0
    l1 = 0.0
    for p in range(indptr[d], indptr[d + 1]):
        w = numba.float64(data[p])
        sq += w * w
        l1 += abs(w)
    return sq, l1


row_norm_cpu = numba.njit(inline="always")(_row_norm)
row_norm_dev = device_function(_row_norm)


@cpu_jit(parallel=True)
def row_norms_cpu(indptr, data, d_sq, d_l1):
    """Every row's |d|_2^2 and |d|_1 into d_sq, d_l1 float64 (n_docs,), rows in parallel (twin of
    doc_norms; the norms without the postings, for an index whose postings live on the device)."""
    for d in prange(d_sq.shape[0]):
        d_sq[d], d_l1[d] = row_norm_cpu(indptr, data, d)


@cpu_jit
def _count_rows(indptr, indices, data, lo, hi, counts, maxabs, d_sq, d_l1):
    """Rows [lo, hi): each term's count into counts int64 (n_terms,) and largest |weight| into
    maxabs float32 (n_terms,); each row's norms (row_norm)."""
    for d in range(lo, hi):
        for p in range(indptr[d], indptr[d + 1]):
            t = indices[p]
            counts[t] += 1
            a = abs(data[p])
            if a > maxabs[t]:
                maxabs[t] = a
        d_sq[d], d_l1[d] = row_norm_cpu(indptr, data, d)


@cpu_jit
def _term_offsets(df):
    """int64 (n_terms+1,): exclusive prefix sums of the document frequencies, last the total."""
    n_terms = df.shape[0]
    term_ptr = np.empty(n_terms + 1, np.int64)
    total = 0
    for t in range(n_terms):
        term_ptr[t] = total
        total += df[t]
    term_ptr[n_terms] = total
    return term_ptr


@cpu_jit
def _scatter_rows(indptr, indices, data, lo, hi, cursor, post_doc, post_w):
    """Rows [lo, hi) in order into their terms' lists at cursor int64 (n_terms,) (advanced)."""
    for d in range(lo, hi):
        for p in range(indptr[d], indptr[d + 1]):
            t = indices[p]
            pos = cursor[t]
            cursor[t] += 1
            post_doc[pos] = d
            post_w[pos] = data[p]


@cpu_jit
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
    d_sq = np.zeros(n_docs, np.float64)
    d_l1 = np.zeros(n_docs, np.float64)
    _count_rows(indptr, indices, data, 0, n_docs, df, maxabs, d_sq, d_l1)
    term_ptr = _term_offsets(df)
    post_doc = np.empty(nnz, np.int32)
    post_w = np.empty(nnz, np.float32)
    _scatter_rows(indptr, indices, data, 0, n_docs, term_ptr[:-1].copy(), post_doc, post_w)
    return term_ptr, post_doc, post_w, d_sq, d_l1, maxabs


@cpu_jit(parallel=True)
def _build_postings_chunks(indptr, indices, data, n_terms, row_lo):
    """Parallel twin of build_postings_cpu (the same arrays, bit for bit): rows are cut into
    chunks [row_lo[c], row_lo[c+1]); each chunk counts its terms, the counts give every chunk its
    own cursor into each list (lists stay sorted by document: chunks are in row order), then each
    chunk scatters its rows. Norms are summed per row in row order, maxima reduced over chunks.
    Two parallel loops (the chunks'); the per-term reductions between them are serial
    (chunks x terms steps, small beside the rows' work), since every parallel loop adds about 0.7 s
    to the function's first compile (2-core VM, 2026-11-27: with four loops its first call took 4.0 s, with two 3.0 s)."""
    n_docs = indptr.shape[0] - 1
    nnz = indices.shape[0]
    n_chunks = row_lo.shape[0] - 1
    counts = np.zeros((n_chunks, n_terms), np.int64)
    maxes = np.zeros((n_chunks, n_terms), np.float32)
    d_sq = np.zeros(n_docs, np.float64)
    d_l1 = np.zeros(n_docs, np.float64)
    for c in prange(n_chunks):
        _count_rows(indptr, indices, data, row_lo[c], row_lo[c + 1], counts[c], maxes[c], d_sq, d_l1)
    df, maxabs, term_ptr = _chunk_cursors(counts, maxes)
    post_doc = np.empty(nnz, np.int32)
    post_w = np.empty(nnz, np.float32)
    for c in prange(n_chunks):
        _scatter_rows(indptr, indices, data, row_lo[c], row_lo[c + 1], counts[c], post_doc, post_w)
    return term_ptr, post_doc, post_w, d_sq, d_l1, maxabs


@cpu_jit
def _chunk_cursors(counts, maxes):
    """From each chunk's term counts int64 (n_chunks, n_terms) and maxima float32: df int64,
    maxabs float32 (n_terms,) and term_ptr int64 (n_terms + 1,); counts[c, t] becomes chunk c's
    cursor into list t (the chunks before it first)."""
    n_chunks, n_terms = counts.shape
    df = np.zeros(n_terms, np.int64)
    maxabs = np.zeros(n_terms, np.float32)
    for c in range(n_chunks):
        for t in range(n_terms):
            df[t] += counts[c, t]
            if maxes[c, t] > maxabs[t]:
                maxabs[t] = maxes[c, t]
    term_ptr = _term_offsets(df)
    at = term_ptr[:-1].copy()
    for c in range(n_chunks):
        for t in range(n_terms):
            n = counts[c, t]
            counts[c, t] = at[t]
            at[t] += n
    return df, maxabs, term_ptr


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
    return _build_postings_chunks(indptr, indices, data, n_terms, chunk_rows(indptr, n_chunks))


def chunk_rows(indptr: np.ndarray, n_chunks: int) -> np.ndarray:
    """row_lo int64 (n_chunks + 1,): rows cut into n_chunks ranges [row_lo[c], row_lo[c+1]) of
    about equal postings (some empty when rows are long), row_lo[0] = 0, row_lo[-1] = n_docs."""
    n_docs = indptr.shape[0] - 1
    nnz = int(indptr[-1]) if n_docs >= 0 else 0
    targets = (np.arange(n_chunks + 1, dtype=np.int64) * nnz) // max(n_chunks, 1)
    row_lo = np.searchsorted(indptr, targets, side="left").astype(np.int64)
    row_lo[0], row_lo[-1] = 0, n_docs
    return np.maximum.accumulate(np.minimum(row_lo, n_docs))


@cpu_jit
def term_maxabs_cpu(indices, data, n_terms):
    """float32 (n_terms,): the largest |weight| of each term. Host side for both backends (it
    sets the queries' fixed-point scales, which must agree bit for bit)."""
    out = np.zeros(n_terms, np.float32)
    for p in range(indices.shape[0]):
        a = abs(data[p])
        if a > out[indices[p]]:
            out[indices[p]] = a
    return out


@cpu_jit(parallel=True)
def term_stats_cpu(indices, data, starts, n_terms, chunks, with_counts):
    """Per term, within entries [starts[r], starts[r+1]) of a CSR's indices/data, r < R =
    len(starts) - 1 (a whole matrix, or the rows of each row shard), in one pass: the largest
    finite |weight| (float32 (R, n_terms)), with_counts the number of entries (int64 (R, n_terms),
    else (R, 0)), and the entries that are NaN or infinite (int64 (R,)). Each range is cut into
    ``chunks`` pieces, one per prange task with private maxima and counts, then reduced per
    term; maxima and integer counts are exact, so for finite weights the maxima equal
    term_maxabs_cpu over each range and the counts its bincount."""
    n_r = starts.shape[0] - 1
    part_max = np.zeros((n_r * chunks, n_terms), np.float32)
    part_cnt = np.zeros((n_r * chunks, n_terms if with_counts else 0), np.int64)
    part_bad = np.zeros(n_r * chunks, np.int64)
    for t in prange(n_r * chunks):
        r = t // chunks
        c = t % chunks
        a = starts[r]
        length = starts[r + 1] - a
        for p in range(a + length * c // chunks, a + length * (c + 1) // chunks):
            term = indices[p]
            v = abs(data[p])
            if not np.isfinite(v):
                part_bad[t] += 1
            elif v > part_max[t, term]:
                part_max[t, term] = v
            if with_counts:
                part_cnt[t, term] += 1
    maxabs = np.zeros((n_r, n_terms), np.float32)
    counts = np.zeros((n_r, n_terms if with_counts else 0), np.int64)
    bad = np.zeros(n_r, np.int64)
    for k in prange(n_terms):
        for r in range(n_r):
            m = np.float32(0.0)
            n = numba.int64(0)
            for c in range(chunks):
                t = r * chunks + c
                if part_max[t, k] > m:
                    m = part_max[t, k]
                if with_counts:
                    n += part_cnt[t, k]
            maxabs[r, k] = m
            if with_counts:
                counts[r, k] = n
    for r in range(n_r):
        for c in range(chunks):
            bad[r] += part_bad[r * chunks + c]
    return maxabs, counts, bad


PARALLEL_STATS_ENTRIES = 1 << 24  # stored weights from which the host's passes over them take every thread


def parallel_stats(nnz: int) -> bool:
    """Whether a pass over nnz stored weights takes numba's threads (weight_stats)."""
    return nnz >= PARALLEL_STATS_ENTRIES and numba.get_num_threads() > 1


def weight_stats(indices, data, n_terms: int):
    """term_stats_cpu over all of indices int32 / data float32 (nnz,), in numba's threads:
    (bad int = NaN or infinite entries, top float = the largest finite |weight|, maxabs float32
    (n_terms,)). One pass where NumPy's checks take three and the term maxima a fourth, serial
    (a Dask worker's shard: 1.4x10^9 weights)."""
    nnz = data.shape[0]
    chunks = max(1, min(4 * numba.get_num_threads(), nnz // max(4 * n_terms, 1)))
    maxabs, _, bad = term_stats_cpu(indices, data, np.array([0, nnz], np.int64), n_terms, chunks, False)
    return int(bad[0]), float(maxabs[0].max(initial=0.0)), maxabs[0]


def term_maxabs(indices, data, n_terms: int) -> np.ndarray:
    """float32 (n_terms,): term_maxabs_cpu, in numba's threads (weight_stats) from
    PARALLEL_STATS_ENTRIES stored weights; a small matrix compiles no parallel function."""
    if not parallel_stats(data.shape[0]):
        return term_maxabs_cpu(indices, data, n_terms)
    return weight_stats(indices, data, n_terms)[2]


# ----------------------------------------------------------------------------- block starts

def block_table_terms(df: np.ndarray, n_blocks: int, max_entries: int) -> np.ndarray:
    """The terms of a block-starts table (int32, ascending): those with at least one posting a
    document block on average (df >= n_blocks), the longest lists first while their rows
    (n_blocks + 1 entries each) stay within max_entries. A shorter list is cheap to search: a
    search over fewer than n_blocks entries, and its block usually holds none or one of them."""
    long_ = np.flatnonzero(np.asarray(df) >= max(1, n_blocks))
    order = long_[np.argsort(-np.asarray(df)[long_], kind="stable")]
    fit = max(0, max_entries // (n_blocks + 1))
    return np.sort(order[:fit]).astype(np.int32)


def _make_block_start(lower_bound):
    def block_start(post_doc, start, end, b, docs):
        """Offset from start of the first posting of post_doc[start:end] (a list sorted by
        document) in document block b or later (document >= b * docs); end - start past the last."""
        return lower_bound(post_doc, start, end, b * docs) - start
    return block_start


block_start_cpu = numba.njit(inline="always")(_make_block_start(lower_bound_cpu))
block_start_dev = device_function(_make_block_start(lower_bound_dev))


@cuda_kernel
def block_starts_kernel(term_ptr, post_doc, terms, docs, bstart):
    """The block-starts table of the terms ``terms`` int32 (n_rows,): thread i takes row
    r = i // (n_blocks + 1) and block b = i % (n_blocks + 1), and writes bstart[r, b] int32
    (n_rows, n_blocks + 1) = block_start of term terms[r]'s list for block b of ``docs``
    documents (one binary search; b = n_blocks gives the list's length). Row r's block b holds
    postings [term_ptr[t] + bstart[r, b], term_ptr[t] + bstart[r, b + 1]). CPU twin: block_starts_cpu."""
    i = numba.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    width = bstart.shape[1]
    r = i // width
    if r < bstart.shape[0]:
        b = i - r * width
        t = terms[r]
        bstart[r, b] = block_start_dev(post_doc, term_ptr[t], term_ptr[t + 1], b, docs)


@cpu_jit(parallel=True)
def block_starts_cpu(term_ptr, post_doc, terms, docs, bstart):
    """CPU twin of block_starts_kernel: rows in parallel."""
    for r in prange(bstart.shape[0]):
        t = terms[r]
        for b in range(bstart.shape[1]):
            bstart[r, b] = block_start_cpu(post_doc, term_ptr[t], term_ptr[t + 1], b, docs)


# ----------------------------------------------------------------------------- device build

@cuda_kernel
def count_df(indices, df):
    """Thread p (one per stored entry): df[indices[p]] += 1 (atomic int32)."""
    p = cuda.grid(1)
    if p < indices.shape[0]:
        cuda.atomic.add(df, indices[p], 1)


@cuda_kernel
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


@cuda_kernel
def doc_norms(indptr, data, d_sq, d_l1):
    """Thread d (one per row): row_norm into d_sq, d_l1 float64 (n_docs,). Twin: row_norms_cpu."""
    d = cuda.grid(1)
    if d < d_sq.shape[0]:
        d_sq[d], d_l1[d] = row_norm_dev(indptr, data, d)


@cuda_kernel
def count_chunk_terms(indptr, indices, row_lo, counts):
    """Block c counts the terms of its rows [row_lo[c], row_lo[c+1]) (row_lo int64 (n_chunks+1,)):
    counts[c, t] int32 (n_chunks, n_terms), zeroed, += 1 for each stored entry of term t; the
    block's threads stride over the chunk's entries (atomics within the chunk's row of counts).
    Twin: _count_rows's counts, a chunk each (_build_postings_chunks)."""
    c = cuda.blockIdx.x
    if c < counts.shape[0]:
        for p in range(indptr[row_lo[c]] + cuda.threadIdx.x, indptr[row_lo[c + 1]], cuda.blockDim.x):
            cuda.atomic.add(counts, (c, indices[p]), 1)


@cuda_kernel
def chunk_cursors(counts, df):
    """Thread t (one per term): counts[c, t] int32 becomes the postings of term t in chunks before
    c (chunk c's offset into list t), df[t] int32 the list's length (primitives.column_offsets). Twin:
    _chunk_cursors."""
    t = cuda.grid(1)
    if t < df.shape[0]:
        column_offsets_dev(counts, df, t)


@cuda_kernel
def scatter_chunk_rows(indptr, indices, data, row_lo, term_ptr, cursor, post_doc, post_w):
    """Block c writes its rows [row_lo[c], row_lo[c+1]) in order into their lists: a row's entries
    (distinct terms: canonical CSR) go out side by side, one thread each, to slot term_ptr[t] +
    cursor[c, t] (int32 (n_chunks, n_terms), chunk_cursors's offsets, advanced); post_doc[slot] =
    the row, post_w[slot] its weight. The block synchronises after every row, so each list gets
    chunk c's rows ascending, after the chunks before it: every list sorted by document, the
    arrays of build_postings_cpu bit for bit. Twin: _scatter_rows, a chunk each."""
    c = cuda.blockIdx.x
    if c < cursor.shape[0]:
        for d in range(row_lo[c], row_lo[c + 1]):
            for p in range(indptr[d] + cuda.threadIdx.x, indptr[d + 1], cuda.blockDim.x):
                t = indices[p]
                at = cursor[c, t]
                cursor[c, t] = at + 1
                slot = term_ptr[t] + at
                post_doc[slot] = d
                post_w[slot] = data[p]
            cuda.syncthreads()


@cuda_kernel
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


def ptx_kernels():
    """Every kernel of this module, for tests/test_ptx.py."""
    return [
        ("count_df", count_df, "void(int32[::1], int32[::1])"),
        ("scatter_postings", scatter_postings,
         "void(int64[::1], int32[::1], float32[::1], int64[::1], int32[::1], int32[::1], float32[::1])"),
        ("doc_norms", doc_norms, "void(int64[::1], float32[::1], float64[::1], float64[::1])"),
        ("count_chunk_terms", count_chunk_terms, "void(int64[::1], int32[::1], int64[::1], int32[:, ::1])"),
        ("chunk_cursors", chunk_cursors, "void(int32[:, ::1], int32[::1])"),
        ("scatter_chunk_rows", scatter_chunk_rows,
         "void(int64[::1], int32[::1], float32[::1], int64[::1], int64[::1], int32[:, ::1], int32[::1], float32[::1])"),
        ("doc_norm_terms", doc_norm_terms, "void(float64[::1], float64[::1], int64, float64[::1])"),
        ("block_starts_kernel", block_starts_kernel, "void(int64[::1], int32[::1], int32[::1], int64, int32[:, ::1])"),
    ]
