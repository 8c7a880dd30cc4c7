"""One selection library: the k best of a set of (key, id) pairs under the tie rule of
kernels/primitives.py (``better``: key descending, id ascending, id < 0 an empty slot), for every
family (sparse scoring, grouped top-k, dense kNN, RankSVM's sorts via primitives, stream
clustering's best cluster, star's thresholded edges).

CPU twins:
    offer_cpu(key, d, keys, docs, filled, k, larger) -> filled    a running best-k list (insertion)
Device, block-wide (every thread of the block calls them; shared scratch from the caller):
    topk_scratch(block, cap)  the shared scratch select_top_keys needs
    make_segment_keys(key_of) the keys of a segment's documents into shared memory (the input
                              of select_top_keys), each thread its items; returns its maximum
    select_top_keys(...)      the k best of a segment's keys (tau bound from thread maxima,
                              candidates by counter, ties by block scan, sort or counting)
    kth_largest_shared(...), first_k_by_counting(...)  the counting forms used by select_top_keys
    merge_sorted_lists(...)   sorted lists loaded into one shared array and sorted: their best first
    rank_in_lists(...)        an entry's rank among sorted lists (binary searches): merging by rank,
                              no sort (scoring.merge_topk_kernel by_rank; twin merge_rank_cpu)
    write_first_k(...)        a result row out of shared memory
    make_block_select(...), block_select_scratch(...)    the dense kNN's k best of a list of float32 keys (bound from group
                              maxima, compaction, radix select, winners sorted by document)
Host:
    topk_geometry(k), fit_geometry(...), select_cap(k, items)   launch geometry of select_top_keys
"""
from __future__ import annotations

import math
from functools import lru_cache

import numba
from numba import cuda, int32, int64, uint64

from ._factory import kernel_cache
from .geometry import next_pow2
from .primitives import (before_cpu, better_cpu, block_exclusive_scan_dev, better_dev, ordered_bits_dev,
                         sort_keys_ascending_dev, sort_keys_descending_dev, sort_pairs_best_first_dev)
from .jit import cpu_jit, device_function


@cpu_jit(inline="always")
def offer_cpu(key, d, keys, docs, filled, k, larger):
    """Insert (key, d) into the running best-k list keys/docs if it belongs there; returns the new
    fill count. The list is sorted best first by primitives.before: the larger key when ``larger``
    (else the smaller), equal keys by lower d (d >= 0). Any offering order gives the same list."""
    if filled < k:
        pos = filled
        filled += 1
    else:
        if not before_cpu(key, d, keys[k - 1], docs[k - 1], larger):
            return filled
        pos = k - 1
    while pos > 0 and before_cpu(key, d, keys[pos - 1], docs[pos - 1], larger):
        keys[pos] = keys[pos - 1]
        docs[pos] = docs[pos - 1]
        pos -= 1
    keys[pos] = key
    docs[pos] = d
    return filled


@device_function
def kth_largest_shared(vals, v, k, tid, block):
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


@device_function
def first_k_by_counting(keys, docs, n, k, tmp_key, tmp_doc, tid, block):
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
            if better_dev(keys[j], docs[j], ka, da):
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


def make_segment_keys(key_of):
    """Device function ``segment_keys(keys, n_items, d_lo, d_hi, me, tid, block, ctx) -> best``:
    thread tid writes keys[loc] for its items loc = i * block + tid, i < n_items (float64, shared):
    key_of(loc, d, ctx) for document d = d_lo + loc when d < d_hi and d != me (the query's own
    document, or -1), else -inf; returns the largest key it wrote (select_top_keys' ``best``).
    ctx is a tuple of the caller's arrays and values. No synchronisation."""
    @device_function
    def segment_keys(keys, n_items, d_lo, d_hi, me, tid, block, ctx):
        best = -math.inf
        for i in range(n_items):
            loc = i * block + tid
            d = d_lo + loc
            key = -math.inf
            if d < d_hi and d != me:
                key = key_of(loc, d, ctx)
            keys[loc] = key
            if key > best:
                best = key
        return best
    return segment_keys


@device_function
def select_top_keys(keys, items, best, base, k, cap, tmax, cand_key, cand_doc, counter, flags, tid, block,
                     counting):
    """Block-wide top-k of a segment's keys, in shared memory; every thread of the block calls it.

    keys float64 [items * block] (thread tid holds entries i * block + tid, document base + that
    index; -inf for none), best = the thread's largest key. tmax float64 [block], cand_key float64
    / cand_doc int32 [cap], counter int32 [1], flags int32 [block] are scratch. The k-th largest of
    the thread maxima (found by a bitonic sort of tmax, or with ``counting`` by
    kth_largest_shared: the same value) is a lower bound tau on the k-th best key: keys > tau are
    placed by an atomic counter, then keys == tau in index order (a block scan per item round)
    until k are held, and a bitonic sort orders the candidates by (key desc, document asc) (with
    ``counting``: first_k_by_counting, the same first k). On return cand_*[:k] are the segment's
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
        tau = kth_largest_shared(tmax, best, k, tid, block)
    else:
        sort_keys_descending_dev(tmax, 0, block, tid, block)
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
            total = block_exclusive_scan_dev(flags, tid, block)
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
        first_k_by_counting(cand_key, cand_doc, n_cand, k, tmax, flags, tid, block)
    else:
        n_sort = 2
        while n_sort < n_cand:
            n_sort *= 2
        sort_pairs_best_first_dev(cand_key, cand_doc, 0, n_sort, tid, block)


@kernel_cache
def topk_scratch(block: int, cap: int):
    """Device function () -> (tmax float64 [block], cand_key float64 [cap], cand_doc int32 [cap],
    counter int32 [1]): the shared scratch of select_top_keys, declared once per kernel that
    calls it; select_top_keys also takes int32 flags [>= block], which a kernel may share with
    scratch of its own."""

    @device_function
    def scratch():
        # one array a line: the simulator tells shared arrays apart by the line that declares them
        tmax = cuda.shared.array(block, numba.float64)
        cand_key = cuda.shared.array(cap, numba.float64)
        cand_doc = cuda.shared.array(cap, numba.int32)
        counter = cuda.shared.array(1, numba.int32)
        return tmax, cand_key, cand_doc, counter

    return scratch


@device_function
def merge_sorted_lists(keys, docs, src_doc, src_key, lo, n_entries, k, width, tid, block):
    """Merge sorted top-k lists: entries e < n_entries of the lists src_doc int32 / src_key float64
    (n_lists, k) from list lo on (entry e is slot e % k of list lo + e // k) go into the shared
    keys float64 / docs int32 [width] (width a power of two >= n_entries; the rest empty: doc -1,
    key -inf), which are then sorted best first (sort_pairs_best_first). Every thread of the block
    calls it; a syncthreads after loading and after every bitonic step."""
    for e in range(tid, width, block):
        docs[e] = -1
        keys[e] = -math.inf
        if e < n_entries:
            docs[e] = src_doc[lo + e // k, e % k]
            keys[e] = src_key[lo + e // k, e % k]
    cuda.syncthreads()  # shared lists loaded
    sort_pairs_best_first_dev(keys, docs, 0, width, tid, block)


def _make_rank_in_lists(better):
    def rank_in_lists(keys, docs, n_lists, k, e):
        """Rank of entry e among the n_lists sorted lists (best first under ``better``) of k entries
        each in keys / docs (list j at [j*k, (j+1)*k), empty slots doc -1 at their ends): its slot
        in its own list plus, for every other list, how many of its entries are better (a binary
        search). Returns -1 for an empty slot and stops counting at k (the entry is not among
        the k best). Ties cannot happen (documents are distinct), so the ranks of the non-empty
        entries are distinct: rank r goes to slot r of the merged list."""
        j = e // k
        d = docs[e]
        if d < 0:
            return -1
        key = keys[e]
        rank = e - j * k
        for i in range(n_lists):
            if rank >= k:
                break
            if i == j:
                continue
            lo = i * k
            hi = lo + k
            while lo < hi:
                mid = (lo + hi) // 2
                if better(keys[mid], docs[mid], key, d):
                    lo = mid + 1
                else:
                    hi = mid
            rank += lo - i * k
        return rank
    return rank_in_lists


rank_in_lists_dev = device_function(_make_rank_in_lists(better_dev))
rank_in_lists_cpu = numba.njit(inline="always")(_make_rank_in_lists(better_cpu))


@cpu_jit
def merge_rank_cpu(in_doc, in_key, group, k, out_doc, out_key):
    """CPU twin of scoring.merge_topk_kernel(by_rank=True): in (Q, n_lists, k) sorted lists, out (Q, n_groups,
    k) = the k best of each group of ``group`` lists (slots without a document: -1 / -inf)."""
    n_lists = in_doc.shape[1]
    for q in range(in_doc.shape[0]):
        for g in range(out_doc.shape[1]):
            lo = g * group
            n_here = max(0, min(group, n_lists - lo))
            keys = in_key[q, lo:lo + n_here].copy().reshape(-1)
            docs = in_doc[q, lo:lo + n_here].copy().reshape(-1)
            out_doc[q, g, :] = -1
            out_key[q, g, :] = -math.inf
            for e in range(n_here * k):
                r = rank_in_lists_cpu(keys, docs, n_here, k, e)
                if 0 <= r < k:
                    out_doc[q, g, r] = docs[e]
                    out_key[q, g, r] = keys[e]


@device_function
def write_first_k(out_doc, out_key, docs, keys, k, tid, block):
    """out_doc[:k], out_key[:k] = docs[:k], keys[:k] (a selection's result row), threads strided."""
    for j in range(tid, k, block):
        out_doc[j] = docs[j]
        out_key[j] = keys[j]


def fit_geometry(k: int, block, items, default_block: int, shared_bytes) -> tuple[int, int, int]:
    """(block, items, cap) of a kernel that keeps a segment of block*items keys and selects its k
    best with select_top_keys: block a power of two >= k (default max(default_block, next pow2 of
    k)); items a power of two, by default the most (at most 16) with shared_bytes(block, items,
    cap) <= 46 KB; cap = select_cap(k, items)."""
    if block is None:
        block = max(default_block, next_pow2(k))
    if block < k or block & (block - 1):
        raise ValueError(f"block must be a power of two >= k, got block={block}, k={k}")
    if items is None:
        items = 16
        while items > 1 and shared_bytes(block, items, select_cap(k, items)) > 46 * 1024:
            items //= 2
    return block, items, select_cap(k, items)


def topk_shared_bytes(block: int, items: int, cap: int) -> int:
    """select_topk's shared memory: keys 8 B a segment position, tmax and flags 12 B a thread,
    candidates 12 B each."""
    return block * items * 8 + cap * 12 + block * 12


def topk_geometry(k: int, block: int | None = None, items: int | None = None) -> tuple[int, int, int]:
    """(block, items, cap) for select_topk: block >= k a power of two, the segment's keys
    (block*items float64) plus candidates (cap = next pow2 of max(k, (k-1)*items)) in < 48 KB."""
    return fit_geometry(k, block, items, 256, topk_shared_bytes)


def select_cap(k, items):
    return max(2, next_pow2(max(k, (k - 1) * items)))


# ----------------------------------------------------------------------------- dense kNN: radix block selection

ORDERED_LOW = 4294967295  # 2**32 - 1: the document part of a combined key
_LOW = ORDERED_LOW


def _elem_py(keys, kidx, use_kidx, ordered_in, p, selfcol):
    """Combined 64-bit sort key of list entry p: (ordered key << 32) | (2**32 - 1 - document), so a
    larger value is a larger key, then a lower document; 0 for an entry to skip (padding, self).
    The loads come first and unconditionally, so that unrolled callers keep several in flight."""
    raw = keys[p]
    d = int64(p)
    if use_kidx:
        d = int64(kidx[p])
    u = int64(raw)
    if not ordered_in:
        u = ordered_bits_dev(raw)
    skip = d < 0 or d == selfcol
    if d < 0:
        d = 0
    c = (uint64(u) << uint64(32)) | (uint64(_LOW) - uint64(d))
    if skip:
        c = uint64(0)
    return c


_elem_dev = device_function(_elem_py)


@lru_cache(maxsize=None)
def block_select_scratch(threads_per_block: int, buffer_size: int, max_candidates: int):
    """Device function () -> (gmax int64 [TPB], buf uint64 [buffer_size], hist int32 [256],
    st int64 [8], sp uint64 [2], win int32 [max_candidates]): the shared scratch of
    make_block_select's selection, declared once per kernel that calls it."""
    TPB, CAP, MAXC = int(threads_per_block), int(buffer_size), int(max_candidates)

    @device_function
    def scratch():
        # one array a line: the simulator tells shared arrays apart by the line that declares them
        gmax = cuda.shared.array(TPB, int64)
        buf = cuda.shared.array(CAP, uint64)
        hist = cuda.shared.array(256, int32)
        st = cuda.shared.array(8, int64)
        sp = cuda.shared.array(2, uint64)
        win = cuda.shared.array(MAXC, int32)
        return gmax, buf, hist, st, sp, win

    return scratch


@lru_cache(maxsize=None)
def make_block_select(threads_per_block: int, buffer_size: int, max_candidates: int):
    """Device function: the kprime best entries (largest key, then lowest document) of one list.

    ``block_select(keys, kidx, use_kidx, ordered_in, lo, hi, selfcol, kprime, tid, gmax, buf, hist,
    st, sp, win) -> (n, complete, thr)``, called by every thread of a block (threads_per_block, a
    power of two). List entries p in [lo, hi): key ``keys[p]`` (uint32: float32 bits, or already
    ordered when ``ordered_in``), document ``kidx[p]`` when ``use_kidx`` (negative: padding) else p;
    the document ``selfcol`` is skipped. Entries are compared by the combined 64-bit key
    ``_elem_py``, so all are distinct and ties go to the lower document.
    Work: (A) each thread takes the maximum key of its strided entries p = lo + tid + i*TPB; the
    maxima are merged (shared atomic max) into G groups (group = tid % G, G >= kprime a power of two
    <= TPB); every group holds distinct entries, so the smallest group maximum L0 is <= the
    kprime-th largest key (A and B load 4 entries per thread before using any). (B) the entries with key >= L0 (typically a few hundred) are compacted
    into shared memory ``buf`` (uint64 (buffer_size,), shared atomic counter; when they do not fit,
    the passes below read the list again from global memory instead). (C) radix select of the
    kprime-th largest combined key, 8 bits per pass from the top (256-bin shared histogram
    ``hist``; thread 0 walks the bins; it stops as soon as the chosen bin holds exactly the rank
    still sought, usually after 2-3 passes). (D) the winners' documents go to ``win`` (int32
    (max_candidates,)) and are sorted ascending by a bitonic network.
    Returns n (listed winners: kprime, or every valid entry when there are at most kprime),
    complete (1 when every valid entry is listed) and thr (ordered kprime-th largest key; 0 when
    complete). Shared scratch: gmax int64 (TPB,), st int64 (8,), sp uint64 (2,).
    Synchronisation: after each phase's shared writes (init, maxima, compaction, each histogram
    clear/fill/walk, winner collection, each sorting step); returns after a final syncthreads.
    Length: four phases sharing the shared scratch and each thread's state (bound, counts),
    inlined into two kernels; that is why the function and its factory are over 120 lines.
    """
    TPB, CAP, MAXC = int(threads_per_block), int(buffer_size), int(max_candidates)
    assert TPB & (TPB - 1) == 0 and MAXC & (MAXC - 1) == 0
    G0 = min(TPB, 64)
    UNR = 4  # list entries loaded per thread before any is used (phases A and B)

    @device_function
    def load_round(vv, keys, kidx, use_kidx, ordered_in, p, lo, hi, selfcol):
        # UNR entries p, p + TPB, ... (0 past hi), every load issued before any is used
        for h in range(UNR):
            q_ = p + h * TPB
            vv[h] = _elem_dev(keys, kidx, use_kidx, ordered_in, q_ if q_ < hi else lo, selfcol)
            if q_ >= hi:
                vv[h] = uint64(0)

    @device_function
    def block_select(keys, kidx, use_kidx, ordered_in, lo, hi, selfcol, kprime, tid, gmax, buf, hist, st, sp, win):
        vv = cuda.local.array(UNR, uint64)
        G = G0
        while G < kprime and G < TPB:
            G *= 2
        if G < kprime:
            G = 0  # no bound: every entry goes through the passes
        gmax[tid] = -1
        if tid == 0:
            st[0] = 0  # valid entries
            st[1] = 0  # entries compacted into buf
            st[2] = 0  # L0
            st[3] = kprime  # rank still sought
            st[4] = 0  # radix select finished
            st[5] = 0  # winners listed
            st[6] = 4294967296  # smallest winner key
            sp[0] = uint64(0)  # prefix of the kprime-th combined key
            sp[1] = uint64(0)  # mask of the bits fixed so far
        cuda.syncthreads()  # scratch initialised
        m = int64(-1)
        cnt = int64(0)
        p = lo + tid
        while p < hi:
            # UNR entries per round: loads issued before any is used
            load_round(vv, keys, kidx, use_kidx, ordered_in, p, lo, hi, selfcol)
            for h in range(UNR):
                v = vv[h]
                if v != uint64(0):
                    cnt += 1
                    kk = int64(v >> uint64(32))
                    if kk > m:
                        m = kk
            p += UNR * TPB
        if G > 0:
            cuda.atomic.max(gmax, tid % G, m)
        cuda.atomic.add(st, 0, cnt)
        cuda.syncthreads()  # group maxima and the count complete
        nvalid = st[0]
        complete = nvalid <= kprime
        over = True
        L0c = uint64(1)  # complete: every valid entry (combined keys are >= 2**31)
        nb = int64(0)
        if not complete:
            if tid == 0:
                L0 = int64(0)
                if G > 0:
                    L0 = gmax[0]
                    for g in range(1, G):
                        if gmax[g] < L0:
                            L0 = gmax[g]
                    if L0 < 0:
                        L0 = 0
                st[2] = L0
            cuda.syncthreads()  # L0 visible
            L0c = uint64(st[2]) << uint64(32)
            p = lo + tid
            while p < hi:
                load_round(vv, keys, kidx, use_kidx, ordered_in, p, lo, hi, selfcol)
                for h in range(UNR):
                    v = vv[h]
                    if v != uint64(0) and v >= L0c:
                        pos = cuda.atomic.add(st, 1, 1)
                        if pos < CAP:
                            buf[pos] = v
                p += UNR * TPB
            cuda.syncthreads()  # compaction complete
            nb = st[1]
            over = nb > CAP
            for ps in range(8):
                if st[4] != 0:
                    break
                shift = uint64(56 - 8 * ps)
                for b in range(tid, 256, TPB):
                    hist[b] = 0
                cuda.syncthreads()  # histogram cleared
                prefix = sp[0]
                mask = sp[1]
                if over:
                    for p in range(lo + tid, hi, TPB):
                        v = _elem_dev(keys, kidx, use_kidx, ordered_in, p, selfcol)
                        if v != uint64(0) and v >= L0c and (v & mask) == prefix:
                            cuda.atomic.add(hist, int64((v >> shift) & uint64(255)), 1)
                else:
                    for p in range(tid, nb, TPB):
                        v = buf[p]
                        if (v & mask) == prefix:
                            cuda.atomic.add(hist, int64((v >> shift) & uint64(255)), 1)
                cuda.syncthreads()  # histogram complete
                if tid == 0:
                    rem = st[3]
                    cum = int64(0)
                    for bb in range(256):
                        b = 255 - bb
                        h = int64(hist[b])
                        if cum + h >= rem:
                            sp[0] = prefix | (uint64(b) << shift)
                            sp[1] = mask | (uint64(255) << shift)
                            st[3] = rem - cum
                            if h == rem - cum:
                                st[4] = 1
                            break
                        cum += h
                cuda.syncthreads()  # next byte fixed
            if sp[0] > L0c:
                L0c = sp[0]
        # winners: valid entries >= L0c (the kprime-th combined key's prefix, or 1 when complete)
        if over:
            for p in range(lo + tid, hi, TPB):
                v = _elem_dev(keys, kidx, use_kidx, ordered_in, p, selfcol)
                if v != uint64(0) and v >= L0c:
                    pos = cuda.atomic.add(st, 5, 1)
                    win[pos] = int32(int64(uint64(_LOW) - (v & uint64(_LOW))))
                    cuda.atomic.min(st, 6, int64(v >> uint64(32)))
        else:
            for p in range(tid, nb, TPB):
                v = buf[p]
                if v >= L0c:
                    pos = cuda.atomic.add(st, 5, 1)
                    win[pos] = int32(int64(uint64(_LOW) - (v & uint64(_LOW))))
                    cuda.atomic.min(st, 6, int64(v >> uint64(32)))
        cuda.syncthreads()  # winners listed
        n = st[5]
        size = 1
        while size < n:
            size *= 2
        for p in range(n + tid, size, TPB):
            win[p] = 2147483647
        cuda.syncthreads()  # padding written
        sort_keys_ascending_dev(win, 0, size, tid, TPB)
        thr = int64(0)
        done = int64(1)
        if not complete:
            thr = st[6]
            done = 0
        cuda.syncthreads()  # results read before the caller reuses the scratch
        return n, done, thr

    return block_select
