"""Exact top-k of score rows from their units' maxima (issue 19): no per-segment lists, no merges.

The shared accumulation (kernels.blocked.rows_accumulate_kernel with ``unit`` > 0) writes each
query's keys (float64 (n_docs,), -inf for the query's own document) and, for every unit of its
documents, the unit's best (key, document). A unit is ``unit`` consecutive threads of an
accumulation block of ``block`` threads over ``docs`` documents: thread t of block b holds
documents b*docs + t + i*block (i = 0, 1, ...), so unit u of block b holds the documents
b*docs + u*unit + g + i*block (g < unit) -- unit*ceil(docs/block) of them, read back as runs of
``unit`` consecutive keys. Units are numbered b*(block // unit) + u.

unit_topk_kernel selects each query's k best in one block of threads, in three steps:

1. theta0 = the k-th best of the threads' best unit maxima (thread t takes units t, t + F, ...;
   then a bitonic sort of the F bests);
2. the unit maxima at least theta0 are gathered into shared candidates and ordered: the first k
   are the k best units, and the k-th of them is theta1;
3. the documents of those k units at least theta1 are gathered and ordered: the first k are the
   query's top k.

Why exact: "at least" is the tie rule's order (primitives.better: key descending, document
ascending); a gather keeps every item at least its theta, and a theta is the k-th best of k
distinct documents, so it is never better than the k-th best of all. Every document at least
theta1 lies in a unit whose maximum is at least theta1, and exactly k units are (their maxima are
distinct documents): so the k best documents are among the gathered. A gather that finds more
than ``cap`` items sorts the first ``cap`` it stored and makes their k-th best its new theta
(better than the old one, as at most one of them equals it), then gathers again; each round
drops at least cap - k items.

Candidates per query: about k for text (the k best documents spread over about k units); at most
k * (units a thread) in step 2 and k * unit * ceil(docs/block) in step 3. A query costs one block
reading its units' maxima twice and k units' keys once, instead of select_topk's pass over every
key of the row and its lists' merge levels.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, prange

from ._factory import jit_kernel, kernel_cache
from .geometry import next_pow2
from .indices import U32, U64
from .primitives import better_cpu, better_dev, sort_pairs_best_first_dev
from .select import first_k_by_counting, offer_cpu
from .scoring import score_key_cpu, score_key_dev
from .jit import cpu_jit, device_function


# ----------------------------------------------------------------------------- per-item functions

def _unit_doc(unit_id, j, docs, block, unit):
    """Document of the j-th entry of unit unit_id (j < unit * ceil(docs / block)), or -1 when the
    entry lies past its block's ``docs`` documents."""
    per_block = block // unit
    b = unit_id // per_block
    loc = (unit_id - b * per_block) * unit + j % unit + (j // unit) * block
    if loc >= docs:
        return -1
    return b * docs + loc


def _unit_first(d, docs, block, unit):
    """The first document of the unit that holds document d."""
    b0 = d - d % docs
    return b0 + unit * (((d - b0) % block) // unit)


def _entry_doc(first, j, unit, shift, block):
    """The j-th entry of the unit whose first document is ``first`` (unit = 2^shift threads):
    round j >> shift, thread j & (unit - 1). Equal to _unit_doc; one shift and mask, no division."""
    return first + (j & (unit - 1)) + (j >> shift) * block


def _make_at_least(better):
    def at_least(key, d, theta_key, theta_doc):
        """(key, d) is a document (d >= 0, key > -inf) not worse than theta in the tie rule's
        order; theta_doc < 0 (no theta) admits every document."""
        return d >= 0 and key > -math.inf and not better(theta_key, theta_doc, key, d)
    return at_least


def _make_doc_key(score_key):
    def doc_key(metric, acc, scale, qn, dn, d, me):
        """The key of document d (score_key of its accumulator), -inf for the query's own document me."""
        if d == me:
            return -math.inf
        return score_key(metric, acc, scale, qn, dn)
    return doc_key


_host = numba.njit(inline="always")
_device = device_function
unit_doc_cpu = _host(_unit_doc)  # the twins' enumeration of units
unit_first_cpu, unit_first_dev = _host(_unit_first), _device(_unit_first)
entry_doc_cpu, entry_doc_dev = _host(_entry_doc), _device(_entry_doc)
at_least_cpu, at_least_dev = _host(_make_at_least(better_cpu)), _device(_make_at_least(better_dev))
doc_key_cpu, doc_key_dev = _host(_make_doc_key(score_key_cpu)), _device(_make_doc_key(score_key_dev))


def unit_threads(n_docs: int, docs: int, block: int, k: int) -> int:
    """Threads a unit (a power of two <= block) for a row of n_docs documents in accumulation
    blocks of ``docs``: the fewest bytes a query's select reads, 2 x 12 B per unit maximum (steps 1
    and 2) + 8 B x k x the unit's documents (step 3)."""
    items = -(-docs // block)
    n_blocks = max(1, -(-n_docs // docs))
    best, best_cost = 1, math.inf
    u = 1
    while u <= block:
        cost = 24 * n_blocks * (block // u) + 8 * k * u * items
        if cost < best_cost:
            best, best_cost = u, cost
        u *= 2
    return best


SHARED_LIMIT = 48 * 1024  # numba's static shared arrays


def unit_cap(k: int, cap: int, block: int = 256) -> int:
    """Shared candidates of unit_topk_kernel(block, cap): Geometry.unit_cap rounded up to a power
    of two (the refining sort is bitonic), at least the next power of two above k (a refining
    gather must keep more than k), at most what fits 48 KB with the block's own scratch."""
    least = next_pow2(k + 1)
    c = max(least, next_pow2(max(1, cap)))
    while c > least and shared_bytes(block, c) > SHARED_LIMIT:
        c //= 2
    return c


def shared_bytes(block: int, cap: int) -> int:
    """Static shared memory of unit_topk_kernel(block, cap)."""
    return 12 * cap + 20 * block + 16


# ----------------------------------------------------------------------------- device: block-wide steps

@device_function
def kth_best_shared(vk, vd, th_key, th_doc, key, d, k, tid, block):
    """th_key[0] / th_doc[0] (shared, one entry) = the k-th best of every thread's (key, d) in the
    tie rule's order, or (-inf, -1) when fewer than k threads hold a document (d >= 0): the pairs
    go to vk / vd (shared [block], block a power of two) and a bitonic sort puts them best first
    (log2(block) (log2(block) + 1) / 2 barriers: 36 at 256 threads, where ranking each pair by
    counting reads all 256 pairs a thread). Synchronises; vk / vd are free again on return."""
    vk[tid] = key
    vd[tid] = d
    cuda.syncthreads()  # pairs visible
    sort_pairs_best_first_dev(vk, vd, 0, block, tid, block)
    if tid == 0:
        th_key[0] = vk[k - 1] if vd[k - 1] >= 0 else -math.inf
        th_doc[0] = vd[k - 1]
    cuda.syncthreads()  # theta visible, vk / vd read


@device_function
def _offer(key, d, ok, tk, td, cand_key, cand_doc, cap, counter):
    """(key, d) to the next candidate slot (shared atomic counter) when ok and at least theta
    (tk, td); slots past cap are counted, not written."""
    if ok and at_least_dev(key, d, tk, td):
        slot = cuda.atomic.add(counter, 0, 1)
        if slot < cap:
            cand_key[U32(slot)] = key
            cand_doc[U32(slot)] = d


def make_gather(fetch):
    """Device function ``gather(n_items, th_key, th_doc, cand_key, cand_doc, cap, counter, k, tid,
    block, ctx) -> n`` over ``fetch(i, ctx) -> (key, document)`` (document -1: nothing there):
    every item at least theta (th_key[0], th_doc[0], shared) goes to cand_key / cand_doc (shared
    [cap], cap a power of two > k) by a shared atomic counter; while more than cap are found, the
    first cap stored are sorted and their k-th best becomes theta, and the items are gathered
    again (the module docstring: why this ends and stays exact). Items are fetched four at a
    time, their loads issued together. Returns n <= cap (the same in every thread).
    Synchronises."""
    @device_function
    def gather(n_items, th_key, th_doc, cand_key, cand_doc, cap, counter, k, tid, block, ctx):
        while True:
            if tid == 0:
                counter[0] = 0
            cuda.syncthreads()  # counter reset, theta final
            tk = th_key[0]
            td = th_doc[0]
            i = tid
            while i < n_items:
                i1 = i + block
                i2 = i + 2 * block
                i3 = i + 3 * block
                k0, d0 = fetch(i, ctx)
                k1, d1 = fetch(i1 if i1 < n_items else i, ctx)
                k2, d2 = fetch(i2 if i2 < n_items else i, ctx)
                k3, d3 = fetch(i3 if i3 < n_items else i, ctx)
                _offer(k0, d0, True, tk, td, cand_key, cand_doc, cap, counter)
                _offer(k1, d1, i1 < n_items, tk, td, cand_key, cand_doc, cap, counter)
                _offer(k2, d2, i2 < n_items, tk, td, cand_key, cand_doc, cap, counter)
                _offer(k3, d3, i3 < n_items, tk, td, cand_key, cand_doc, cap, counter)
                i += 4 * block
            cuda.syncthreads()  # every item offered
            n = counter[0]
            if n <= cap:
                cuda.syncthreads()  # every thread read the count before anyone resets it
                return n
            sort_pairs_best_first_dev(cand_key, cand_doc, 0, cap, tid, block)
            if tid == 0:
                th_key[0] = cand_key[k - 1]
                th_doc[0] = cand_doc[k - 1]
    return gather


@device_function
def _best(key, d, bk, bd):
    """The better of (key, d) and (bk, bd) in the tie rule's order."""
    if better_dev(key, d, bk, bd):
        return key, d
    return bk, bd


@device_function
def _unit_max(i, ctx):
    """Unit i's best (key, document) of score row q. ctx = (ukey, udoc, q)."""
    ukey, udoc, q = ctx
    return ukey[q, U64(i)], udoc[q, U64(i)]


@device_function
def _unit_entry(i, ctx):
    """Entry i of the listed units' documents (unit m = i // (items * unit), its entry_doc from
    its first document base[m]): (key, document), or (-inf, -1) past the unit's accumulation block
    (end[m]). One division an entry, where unit_doc takes three. ctx = (keys, row, base, end,
    items = rounds a thread, shift = log2(unit), unit, block = accumulation threads)."""
    keys, row, base, end, items, shift, unit, block = ctx
    per_unit = items << shift
    m = numba.int64(U32(i) // U32(per_unit))  # unsigned: a 32-bit division, no sign fix-up
    d = entry_doc_dev(numba.int64(base[U32(m)]), i - m * per_unit, unit, shift, block)
    if d >= end[U32(m)]:
        return -math.inf, numba.int64(-1)
    return keys[U64(row + d)], d


_gather_units = make_gather(_unit_max)
_gather_entries = make_gather(_unit_entry)


@device_function
def _order_first_k(cand_key, cand_doc, n, k, cap, vk, vd, tid, block):
    """The best min(n, k) of cand_*[:n] first, best first: by counting ranks (n^2 / block
    comparisons a thread) when n <= 4 * block, else a bitonic sort of the next power of two
    (empty slots appended). Synchronises."""
    if n <= 4 * block:
        first_k_by_counting(cand_key, cand_doc, n, k, vk, vd, tid, block)
        return
    n_sort = 2
    while n_sort < n:
        n_sort *= 2
    for j in range(n + tid, n_sort, block):
        cand_key[j] = -math.inf
        cand_doc[j] = -1
    cuda.syncthreads()  # padding visible
    sort_pairs_best_first_dev(cand_key, cand_doc, 0, n_sort, tid, block)


# ----------------------------------------------------------------------------- CUDA kernel

@kernel_cache
def unit_topk_kernel(block: int, cap: int):
    """Block q: the k best documents of score row q (keys float64 (rows * n_docs,), row q at
    q * n_docs; ukey float64 / udoc int32 (rows, n_units): each unit's best, document -1 for
    none) to out_doc int32 / out_key float64 (n_out, 1, k) at row out0 + q, best first (key
    descending, document ascending), document -1 / key -inf where the row holds fewer than k.

    Thread tid: in step 1 the units tid, tid + block, ... (its best, then the k-th best of the
    threads' by kth_best_shared); in steps 2 and 3 the items tid, tid + block, ... of the gathers
    (make_gather: unit maxima, then the entries of the k best units by their first documents and
    ends). Shared: candidates 12 * cap B, the ranks' scratch and the unit list's 20 * block B,
    theta and counter 16 B (shared_bytes). block >= k, a power of two; cap a power of two > k
    (unit_cap). The accumulation's geometry (docs a block, block_acc threads, unit threads a
    unit) says where a unit's documents are.
    """

    @jit_kernel(min(255, 65536 // block))  # 70 registers uncapped (ptxas, sm_90): 1,024 threads need 64
    def unit_topk(keys, ukey, udoc, n_docs, docs, block_acc, unit, k, out_doc, out_key, out0):
        cand_key = cuda.shared.array(cap, numba.float64)
        cand_doc = cuda.shared.array(cap, numba.int32)
        vk = cuda.shared.array(block, numba.float64)
        vd = cuda.shared.array(block, numba.int32)
        base = cuda.shared.array(block, numba.int32)
        end = cuda.shared.array(block, numba.int32)
        th_key = cuda.shared.array(1, numba.float64)
        th_doc = cuda.shared.array(1, numba.int32)
        counter = cuda.shared.array(1, numba.int32)
        tid = cuda.threadIdx.x
        q = cuda.blockIdx.x
        n_units = ukey.shape[1]
        bk = -math.inf
        bd = numba.int32(-1)
        i = tid
        while i < n_units:  # four units at a time, their loads issued together
            i1 = i + block if i + block < n_units else i  # past the end: the thread's own unit again
            i2 = i + 2 * block if i + 2 * block < n_units else i
            i3 = i + 3 * block if i + 3 * block < n_units else i
            k0, k1, k2, k3 = ukey[q, U64(i)], ukey[q, U64(i1)], ukey[q, U64(i2)], ukey[q, U64(i3)]
            d0, d1, d2, d3 = udoc[q, U64(i)], udoc[q, U64(i1)], udoc[q, U64(i2)], udoc[q, U64(i3)]
            bk, bd = _best(k0, d0, bk, bd)  # its own unit twice changes nothing
            bk, bd = _best(k1, d1, bk, bd)
            bk, bd = _best(k2, d2, bk, bd)
            bk, bd = _best(k3, d3, bk, bd)
            i += 4 * block
        kth_best_shared(vk, vd, th_key, th_doc, bk, bd, k, tid, block)
        n = _gather_units(n_units, th_key, th_doc, cand_key, cand_doc, cap, counter, k, tid, block, (ukey, udoc, q))
        _order_first_k(cand_key, cand_doc, n, k, cap, vk, vd, tid, block)
        m = min(n, k)
        if tid == 0:
            th_key[0] = cand_key[k - 1] if n >= k else -math.inf
            th_doc[0] = cand_doc[k - 1] if n >= k else -1
        for j in range(tid, m, block):  # each listed unit's first document and its block's end
            d = numba.int64(cand_doc[j])
            base[j] = unit_first_dev(d, docs, block_acc, unit)
            end[j] = min(d - d % docs + docs, n_docs)
        items = (docs + block_acc - 1) // block_acc
        shift = 0
        while (1 << shift) < unit:
            shift += 1
        row = numba.int64(q) * n_docs
        n = _gather_entries(m * unit * items, th_key, th_doc, cand_key, cand_doc, cap, counter, k, tid, block,
                            (keys, row, base, end, items, shift, unit, block_acc))
        _order_first_k(cand_key, cand_doc, n, k, cap, vk, vd, tid, block)
        for j in range(tid, k, block):
            out_doc[out0 + q, 0, j] = cand_doc[j] if j < n else -1
            out_key[out0 + q, 0, j] = cand_key[j] if j < n else -math.inf

    return unit_topk


# ----------------------------------------------------------------------------- CPU twins

@cpu_jit(parallel=True)
def row_keys_cpu(acc, qinfo, dn, metric, n_docs, q0, keys):
    """CPU twin of the keys the accumulation stores with unit > 0 (kernels.blocked.rows_accumulate_kernel):
    keys float64 (rows * n_docs,) = doc_key of int64 score rows acc (rows * n_docs,) for queries
    q0, q0 + 1, ... of qinfo (scale, norm term, own document); rows in parallel."""
    rows = keys.shape[0] // max(n_docs, 1)
    for r in prange(rows):
        q = q0 + r
        for d in range(n_docs):
            keys[r * n_docs + d] = doc_key_cpu(metric, acc[r * n_docs + d], qinfo[q, 0], qinfo[q, 1], dn[d], d,
                                               np.int64(qinfo[q, 2]))


@cpu_jit(parallel=True)
def unit_maxima_cpu(keys, n_docs, docs, block, unit, ukey, udoc):
    """CPU twin of the units' maxima the accumulation stores with unit > 0: each unit's best (key,
    document) of keys float64 (rows * n_docs,) into ukey float64 / udoc int32 (rows, n_units),
    document -1 where the unit holds no key above -inf. Units as the module docstring's; rows in
    parallel."""
    rows = ukey.shape[0]
    per_unit = unit * ((docs + block - 1) // block)
    for r in prange(rows):
        for u in range(ukey.shape[1]):
            bk = -np.inf
            bd = -1
            for j in range(per_unit):
                d = unit_doc_cpu(u, j, docs, block, unit)
                if d >= 0 and d < n_docs:
                    key = keys[r * n_docs + d]
                    if key > -np.inf and better_cpu(key, d, bk, bd):
                        bk = key
                        bd = d
            ukey[r, u] = bk
            udoc[r, u] = bd


@cpu_jit(parallel=True)
def unit_topk_cpu(keys, ukey, udoc, n_docs, docs, block, unit, k, out_doc, out_key):
    """CPU twin of unit_topk_kernel: per row in parallel, the k best units (a running best-k list
    over every unit's maximum, offer_cpu), theta1 = the k-th of them, then every document of those
    units at least theta1 (at_least; the units' entries by unit_first and entry_doc, as the
    kernel's) offered to the row's list. out_doc int32 / out_key float64
    (rows, k), -1 / -inf where fewer than k."""
    rows = ukey.shape[0]
    per_unit = unit * ((docs + block - 1) // block)
    shift = 0
    while (1 << shift) < unit:
        shift += 1
    for r in prange(rows):
        u_key = np.full(k, -np.inf)
        u_doc = np.full(k, -1, np.int32)
        filled = 0
        for u in range(ukey.shape[1]):
            if udoc[r, u] >= 0:
                filled = offer_cpu(ukey[r, u], udoc[r, u], u_key, u_doc, filled, k, True)
        tk = u_key[k - 1] if filled == k else -np.inf
        td = u_doc[k - 1] if filled == k else -1
        out_key[r, :] = -np.inf
        out_doc[r, :] = -1
        got = 0
        for m in range(filled):
            d0 = np.int64(u_doc[m])
            first = unit_first_cpu(d0, docs, block, unit)
            end = min(d0 - d0 % docs + docs, n_docs)
            for j in range(per_unit):
                d = entry_doc_cpu(first, j, unit, shift, block)
                if d < end:
                    key = keys[r * n_docs + d]
                    if at_least_cpu(key, d, tk, td):
                        got = offer_cpu(key, d, out_key[r], out_doc[r], got, k, True)


def ptx_kernels():
    """Every kernel with a representative geometry, for tests/test_ptx.py."""
    sig = ("void(float64[::1], float64[:, ::1], int32[:, ::1], int64, int64, int64, int64, int64, int32[:, :, ::1], "
           "float64[:, :, ::1], int64)")
    return [("unit_topk", unit_topk_kernel(256, 2048), sig), ("unit_topk_1024", unit_topk_kernel(1024, 2048), sig)]
