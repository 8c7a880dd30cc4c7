"""Device building blocks, each written once as plain Python and compiled twice.

``NAME_dev`` is the CUDA device function (``jit.device_function``: inlined into the
calling kernel, which therefore compiles to the code it would have with the lines written out) and
``NAME_cpu`` the ``numba.njit(inline="always")`` twin that CPU twins call.

Scalar functions (any thread, no synchronisation):

    better(ka, ia, kb, ib)        the tie rule of every selection: (key ia) before (key ib) when
                                  its key is larger, on equal keys when its id is lower; an id < 0
                                  marks an empty slot, which is never better and always beaten
    ascending(ka, ia, kb, ib)     (key, id) ascending, the sort order of RankSVM's scores
    before(sa, ia, sb, ib, larger)  the dense kNN's order: the better score (larger when
                                  ``larger``, else smaller), then the lower index
    lower_bound(values, lo, hi, x)  first p in [lo, hi) with values[p] >= x (ascending values), else hi
    last_le(values, lo, hi, x)    largest p in [lo, hi) with values[p] <= x, for values[lo] <= x
    ordered_bits(bits)            float32 bit pattern (an integer 0..2**32-1) -> int64 with the
                                  order of the float (radix-selectable keys)
    column_offsets(counts, totals, j)   a counting sort's offsets of target j: counts[c, j] (chunk
                                  c's count of j) becomes the count of j in chunks before c,
                                  totals[j] the sum (one target per thread or prange iteration)

Block collectives: called by every thread of a block of ``block`` threads (thread ``tid``); each
thread handles items tid, tid + block, ... and the threads meet at a barrier, ``cuda.syncthreads``
on the device and nothing on the CPU, where a twin runs the collective as a block of one thread
(tid = 0, block = 1: a serial loop over every item, the same result).

    sort_pairs_best_first(keys, ids, base, n, tid, block)   bitonic sort of keys[base:base+n] with
                                  ids (n a power of two) into ``better`` order; shared or global
    sort_pairs_ascending(...)     the same into ``ascending`` order
    sort_pairs_scored(keys, ids, base, n, tid, block, larger)   the same into ``before`` order
    sort_keys_descending(keys, base, n, tid, block) / sort_keys_ascending(...)  keys only
    block_inclusive_scan(buf, x, tid, block) -> (prefix, total)   one value x per thread, Hillis-Steele
                                  in buf[:block] (a barrier after every read and write round and
                                  one before buf may be reused)
    block_inclusive_scan2(buf0, buf1, x0, x1, tid, block) -> (prefix0, total0, prefix1, total1)  two
                                  scans in the same rounds (fixed association order: deterministic)
    block_exclusive_scan(buf, tid, block) -> total    buf[:block] (one value per thread, written by
                                  the caller) becomes its exclusive prefix sums
    block_tree_sum(buf, x, tid, lane, width)   sums x over each group of ``width`` consecutive threads
                                  (lane = tid % width; width a power of two) by the fixed tree
                                  buf[l] += buf[l + width/2], ..., buf[l] += buf[l + 1]; the group's
                                  sum ends in buf[tid - lane] (read it after the final barrier)

Host only:

    merge_sort_cpu(a)             int64 a sorted in place, ascending (a merge of its ascending runs;
                                  compiles in a fraction of NumPy's quicksort's seconds)
    touch_pages(a, step)          one byte written every ``step`` bytes of a fresh array (uint8
                                  view), pages in parallel: its first-touch page faults taken on
                                  every thread before a copy or read fills it
    merge_lists_cpu(docs, keys, ptr, k, out_docs, out_keys)   per row, the k best of several
                                  ``better``-sorted lists (a P-way merge of their heads, rows in
                                  parallel), then their empty slots in list order

Device only:

    make_chunk_walk(visit) -> walk(cnt, start, t_off, tid, block, ctx)   a chunk's positions split
                                  evenly over the block: each thread brings a segment (cnt
                                  positions from start[tid]), a block scan gives the offsets, every
                                  thread visits positions tid, tid + block, ... (blocked and grouped
                                  top-k accumulate postings so)

A bitonic step compares i with i ^ stride and swaps when the pair is out of order, so on equal
elements (only possible for keys-only sorts and empty slots) the order does not matter.

The binary searches index with kernels.indices.U64 (no signed index wrap).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import cuda

from .indices import U64
from .jit import cpu_jit, device_function


# ----------------------------------------------------------------------------- scalar functions

def _better(ka, ia, kb, ib):
    if ia < 0:
        return False
    if ib < 0:
        return True
    if ka != kb:
        return ka > kb
    return ia < ib


def _ascending(ka, ia, kb, ib):
    return ka < kb or (ka == kb and ia < ib)


def _before(sa, ia, sb, ib, larger):
    if larger:
        if sa > sb:
            return True
    elif sa < sb:
        return True
    return sa == sb and ia < ib


def _descending_key(a, b):
    return a > b


def _ascending_key(a, b):
    return a < b


def _lower_bound(values, lo, hi, x):
    while lo < hi:
        mid = (lo + hi) >> 1  # lo, hi >= 0: floor halving without the signed division's fix-up
        if values[U64(mid)] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _last_le(values, lo, hi, x):
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if values[U64(mid)] <= x:
            lo = mid
        else:
            hi = mid
    return lo


def _ordered_bits(bits):
    u = numba.int64(bits)
    if u >= 2147483648:
        return numba.int64(4294967295) - u
    return u + numba.int64(2147483648)


def _column_offsets(counts, totals, j):
    running = 0
    for c in range(counts.shape[0]):
        n = counts[c, j]
        counts[c, j] = running
        running += n
    totals[j] = running


def _no_barrier():
    pass


# ----------------------------------------------------------------------------- block collectives
# Factories of plain Python functions: the barrier and the order are compile-time constants.

def _make_bitonic(exchange, barrier):
    def bitonic(keys, ids, base, n, tid, block, order):
        size = 2
        while size <= n:
            stride = size // 2
            while stride > 0:
                i = tid
                while i < n:
                    partner = i ^ stride
                    if partner > i:
                        exchange(keys, ids, base + i, base + partner, (i & size) == 0, order)
                    i += block
                barrier()  # step complete before the next stride reads
                stride //= 2
            size *= 2
    return bitonic


def _make_pair_exchange(before):
    def exchange(keys, ids, a, b, in_order, order):
        # in_order: this pair's run is sorted in the wanted order (else in reverse); order: the
        # comparator's flag (before's ``larger``; ignored by the others)
        ka = keys[a]
        ia = ids[a]
        kb = keys[b]
        ib = ids[b]
        if in_order:
            swap = before(kb, ib, ka, ia, order)
        else:
            swap = before(ka, ia, kb, ib, order)
        if swap:
            keys[a] = kb
            ids[a] = ib
            keys[b] = ka
            ids[b] = ia
    return exchange


def _make_key_exchange(before):
    def exchange(keys, ids, a, b, in_order, order):
        x = keys[a]
        y = keys[b]
        if (in_order and before(y, x)) or (not in_order and before(x, y)):
            keys[a] = y
            keys[b] = x
    return exchange


def _make_sort_keys(bitonic):
    def sort_keys(keys, base, n, tid, block):
        bitonic(keys, keys, base, n, tid, block, True)
    return sort_keys


def _make_sort_pairs(bitonic):
    def sort_pairs(keys, ids, base, n, tid, block):
        bitonic(keys, ids, base, n, tid, block, True)
    return sort_pairs


def _make_ignoring_order(before):
    def before_ignoring_order(ka, ia, kb, ib, order):
        return before(ka, ia, kb, ib)
    return before_ignoring_order


def _make_block_inclusive_scan(barrier):
    def block_inclusive_scan(buf, x, tid, block):
        buf[tid] = x
        barrier()  # all values written
        off = 1
        while off < block:
            add = 0
            if tid >= off:
                add = buf[tid - off]
            barrier()  # all reads of this round done
            buf[tid] += add
            barrier()  # all writes of this round done
            off *= 2
        mine = buf[tid]
        total = buf[block - 1]
        barrier()  # everyone read before buf is reused
        return mine, total
    return block_inclusive_scan


def _make_block_inclusive_scan2(barrier):
    def block_inclusive_scan2(buf0, buf1, x0, x1, tid, block):
        buf0[tid] = x0
        buf1[tid] = x1
        barrier()  # all values written
        off = 1
        while off < block:
            add0 = 0.0
            add1 = 0.0
            if tid >= off:
                add0 = buf0[tid - off]
                add1 = buf1[tid - off]
            barrier()  # all reads of this round done
            buf0[tid] += add0
            buf1[tid] += add1
            barrier()  # all writes of this round done
            off *= 2
        m0 = buf0[tid]
        m1 = buf1[tid]
        t0 = buf0[block - 1]
        t1 = buf1[block - 1]
        barrier()  # everyone read before the buffers are reused
        return m0, t0, m1, t1
    return block_inclusive_scan2


def _make_block_exclusive_scan(block_inclusive_scan, barrier):
    def block_exclusive_scan(buf, tid, block):
        own = buf[tid]
        mine, total = block_inclusive_scan(buf, own, tid, block)
        buf[tid] = mine - own
        barrier()  # exclusive prefixes visible
        return total
    return block_exclusive_scan


def _make_block_tree_sum(barrier):
    def block_tree_sum(buf, x, tid, lane, width):
        buf[tid] = x
        barrier()  # partial sums written
        half = width // 2
        while half > 0:
            if lane < half:
                buf[tid] += buf[tid + half]
            barrier()  # round complete
            half //= 2
    return block_tree_sum


# ----------------------------------------------------------------------------- the two compilations

_dev = device_function


def _cpu(fn):
    return numba.njit(inline="always", cache=False)(fn)


better_dev, better_cpu = _dev(_better), _cpu(_better)
ascending_dev, ascending_cpu = _dev(_ascending), _cpu(_ascending)
before_dev, before_cpu = _dev(_before), _cpu(_before)
lower_bound_dev, lower_bound_cpu = _dev(_lower_bound), _cpu(_lower_bound)
last_le_dev, last_le_cpu = _dev(_last_le), _cpu(_last_le)
ordered_bits_dev, ordered_bits_cpu = _dev(_ordered_bits), _cpu(_ordered_bits)
column_offsets_dev, column_offsets_cpu = _dev(_column_offsets), _cpu(_column_offsets)
_descending_key_dev, _descending_key_cpu = _dev(_descending_key), _cpu(_descending_key)
_ascending_key_dev, _ascending_key_cpu = _dev(_ascending_key), _cpu(_ascending_key)
_no_barrier_cpu = _cpu(_no_barrier)


@device_function
def _sync():
    # a device function, not cuda.syncthreads itself: the simulator provides cuda.syncthreads only
    # inside running kernels
    cuda.syncthreads()



def _sorts(jit, barrier, better, ascending, before, descending_key, ascending_key):
    """The sorts of the module docstring, compiled by ``jit`` with ``barrier``: one bitonic network,
    four exchanges (pairs or keys only) and their orders."""
    network = [jit(_make_bitonic(jit(make(order)), barrier)) for make, order in
               ((_make_pair_exchange, jit(_make_ignoring_order(better))),
                (_make_pair_exchange, jit(_make_ignoring_order(ascending))),
                (_make_pair_exchange, before),
                (_make_key_exchange, descending_key), (_make_key_exchange, ascending_key))]
    return (jit(_make_sort_pairs(network[0])), jit(_make_sort_pairs(network[1])), network[2],
            jit(_make_sort_keys(network[3])), jit(_make_sort_keys(network[4])))


(sort_pairs_best_first_dev, sort_pairs_ascending_dev, sort_pairs_scored_dev, sort_keys_descending_dev,
 sort_keys_ascending_dev) = _sorts(_dev, _sync, better_dev, ascending_dev, before_dev, _descending_key_dev,
                                   _ascending_key_dev)
(sort_pairs_best_first_cpu, sort_pairs_ascending_cpu, sort_pairs_scored_cpu, sort_keys_descending_cpu,
 sort_keys_ascending_cpu) = _sorts(_cpu, _no_barrier_cpu, better_cpu, ascending_cpu, before_cpu, _descending_key_cpu,
                                   _ascending_key_cpu)
block_inclusive_scan_dev = _dev(_make_block_inclusive_scan(_sync))
block_inclusive_scan_cpu = _cpu(_make_block_inclusive_scan(_no_barrier_cpu))
block_inclusive_scan2_dev = _dev(_make_block_inclusive_scan2(_sync))
block_inclusive_scan2_cpu = _cpu(_make_block_inclusive_scan2(_no_barrier_cpu))
block_exclusive_scan_dev = _dev(_make_block_exclusive_scan(block_inclusive_scan_dev, _sync))
block_exclusive_scan_cpu = _cpu(_make_block_exclusive_scan(block_inclusive_scan_cpu, _no_barrier_cpu))
block_tree_sum_dev = _dev(_make_block_tree_sum(_sync))
block_tree_sum_cpu = _cpu(_make_block_tree_sum(_no_barrier_cpu))


# ----------------------------------------------------------------------------- device-only: a chunk's balanced walk

@device_function
def chunk_offsets(cnt, t_off, tid, block):
    """Every thread of a block brings ``cnt`` (its segment's length); t_off (int32, block + 1)
    becomes their exclusive prefix sum with t_off[block] = the total, which is returned.
    Synchronises (t_off complete for every thread after the call)."""
    t_off[tid] = cnt
    total = block_exclusive_scan_dev(t_off, tid, block)  # synchronises; t_off now exclusive
    if tid == 0:
        t_off[block] = total
    cuda.syncthreads()  # t_off[block] visible
    return total


def make_chunk_walk(visit):
    """Device function ``walk(cnt, start, t_off, tid, block, ctx)`` over ``visit`` (a device
    function ``visit(i, r, ctx)``), called by every thread of a block of ``block`` threads.

    Thread tid brings one segment of a chunk: ``cnt`` positions from ``start[tid]`` (its posting
    range, say; cnt = 0 for none). The segments' lengths go through a block exclusive scan into
    t_off (int32, block + 1 entries; t_off[block] = the chunk's total), then the chunk's positions
    are split evenly: thread tid takes flattened positions p = tid, tid + block, ... < total, finds
    the segment i holding p by one binary search in t_off (last_le) and then by walking forward,
    and calls visit(i, start[i] + p - t_off[i], ctx); ctx is a tuple of the caller's arrays and
    values. Synchronises after the scan (t_off complete) and at the end (start and t_off may be
    rewritten). Used by the blocked and grouped top-k kernels for their accumulation chunks.
    """
    @device_function
    def walk(cnt, start, t_off, tid, block, ctx):
        total = chunk_offsets(cnt, t_off, tid, block)
        p = tid
        if p < total:
            i = last_le_dev(t_off, 0, block, p)
            while p < total:
                while t_off[i + 1] <= p:
                    i += 1
                visit(i, start[i] + (p - t_off[i]), ctx)
                p += block
        cuda.syncthreads()  # chunk done before start / t_off are rewritten
    return walk


@cpu_jit
def merge_sort_cpu(a):
    """Sort int64 a (n,) in place, ascending: a bottom-up merge of its ascending runs (the host
    sort of gputext's kernels: scoring.tile_one's keys come as one run per query, so log2(queries
    a tile) passes). np.sort would do, but its quicksort adds 2-3 s of compiling to a command's
    first search (2-core VM, 2026-11-27)."""
    n = a.shape[0]
    bounds = np.empty(n + 1, np.int64)  # runs r = [bounds[r], bounds[r + 1])
    runs = 0
    for i in range(n):
        if i == 0 or a[i] < a[i - 1]:
            bounds[runs] = i
            runs += 1
    bounds[runs] = n
    src = a
    dst = np.empty(n, np.int64)
    in_a = True
    while runs > 1:
        w = 0
        for r in range(0, runs, 2):
            lo = bounds[r]
            mid = bounds[r + 1]
            hi = bounds[r + 2] if r + 2 <= runs else mid
            i = lo
            j = mid
            for o in range(lo, hi):
                if j >= hi or (i < mid and src[i] <= src[j]):
                    dst[o] = src[i]
                    i += 1
                else:
                    dst[o] = src[j]
                    j += 1
            bounds[w] = lo
            w += 1
        bounds[w] = n
        runs = w
        src, dst = dst, src
        in_a = not in_a
    if not in_a:
        for i in range(n):
            a[i] = src[i]


@cpu_jit(parallel=True)
def merge_lists_cpu(docs, keys, ptr, k, out_docs, out_keys):
    """Row i of docs int64 / keys float64 (n, total) holds P lists, list p in columns [ptr[p],
    ptr[p+1]) (ptr int64 (P+1,)), each in ``better`` order with its empty slots (doc < 0) last.
    out_docs int64 / out_keys float64 (n, k) get the best k of their union in ``better`` order,
    then the empty slots in list order: what a stable sort of the row by (key desc, doc asc,
    empty slots last) gives, in k x P steps instead of a sort. Rows in parallel."""
    n = docs.shape[0]
    n_lists = ptr.shape[0] - 1
    for i in numba.prange(n):
        head = ptr[:-1].copy()
        j = 0
        while j < k:
            best = -1
            for p in range(n_lists):
                h = head[p]
                if h < ptr[p + 1] and docs[i, h] >= 0 and (
                        best < 0 or better_cpu(keys[i, h], docs[i, h], keys[i, head[best]], docs[i, head[best]])):
                    best = p
            if best < 0:
                break
            out_docs[i, j] = docs[i, head[best]]
            out_keys[i, j] = keys[i, head[best]]
            head[best] += 1
            j += 1
        for p in range(n_lists):
            for h in range(head[p], ptr[p + 1]):
                if j < k and docs[i, h] < 0:
                    out_docs[i, j] = docs[i, h]
                    out_keys[i, j] = keys[i, h]
                    j += 1


@cpu_jit(parallel=True)
def touch_pages(a, step):
    """Write one byte every ``step`` bytes of a fresh host array a (uint8 view), pages in
    parallel: the first-touch page faults are taken now, on every thread (while a device still
    works, or before a file is read into it), rather than during the copy into it."""
    pages = (a.shape[0] + step - 1) // step
    for i in numba.prange(pages):
        a[i * step] = 0

