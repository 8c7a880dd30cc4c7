"""Stream clustering: best-cluster search over an ELLPACK centroid matrix (CUDA kernels + CPU twins).

Centroid matrix (Szaszy & Samet, section 4.2): ELLPACK, column-major, rows padded to an aligned
stride. ``ell_terms`` int32 and ``ell_weights`` float32 have shape ``(K, stride)`` (C order), so
slot ``n`` of cluster ``r`` is ``ell_*[n, r]`` and consecutive threads (rows) read consecutive
words: every load of the scan is coalesced. ``stride`` is the row capacity rounded up to a
multiple of ``ALIGN`` elements (128 bytes), so every column starts on an aligned boundary.
A row holds its terms in increasing term id; unused slots hold term ``-1`` (weight 0) after the
used ones, and the scan stops at the first ``-1`` (ELLPACK-R without the row-length array).

A batch of documents (1 to ``max_docs``) is scored in one launch. The documents are not merged
against the rows (the paper's Rieck seek) but **scattered into a hash table**: the batch's
distinct terms in an open-addressing table (linear probing, ``EMPTY`` = -1 keys), each key with
the index u of the distinct term, whose postings (document slot in the batch, weight) are
``post_*[term_first[u] : term_first[u + 1]]``. A row's thread probes each of its K terms once for
the whole batch instead of merging against every document. Most centroid terms are not in the
batch, so the table is kept sparse (load <= 1/TABLE_LOAD): a miss is then almost always one load
of an EMPTY key, and the branch is predictable (CPU) / rarely divergent (GPU).

Packed batch buffers (one host->device copy each per launch; the host writes them with
``gputext.cluster.stream_host.pack_batch``)::

    ibuf int32:   [upd_rows (U) | upd_terms (U*K) | table_key (S) | table_val (S) | post_doc (P) | term_first (V+1)]
    fbuf float32: [upd_weights (U*K) | post_weight (P)]

``upd_*`` is the update buffer: U rows (sorted ascending row ids) changed or created on the host
since the previous launch, each with its K terms and weights in row-major order. The thread that
owns such a row writes it into the ELL matrix inside the launch and scores the new values (the
paper's update buffer generalised from one row to U rows); there are no per-row copies.
S is a power of two (``mask = S - 1``), P the number of postings, V the batch's distinct terms.

Exactness. A similarity is sum over shared terms t, in increasing t, of
``float64(c_t) * float64(d_t)``: the product of two float32 is exact in float64, so a fused
multiply-add gives the same bits as a multiply then an add, and a sequential float64 sum in a
fixed order is the same on the GPU, the CPU twin and the float64 reference. Each row's sum is made
by one thread walking its slots in order, so the order is fixed by construction.

Selection: best = largest similarity, ties to the lower cluster id (row), as a total order
(similarity descending, row ascending); any reduction tree therefore gives the same answer.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import cuda, prange

from ._factory import kernel_cache
from .primitives import better_cpu, better_dev, lower_bound_cpu, lower_bound_dev
from .jit import cpu_jit, cuda_kernel, device_function

EMPTY = -1
ALIGN = 32  # elements: 128 bytes for int32/float32 columns
HASH_MULT = 2654435761  # Knuth's multiplicative hash constant (fits int64 products with term < 2**31)
TABLE_LOAD = 8  # hash table slots per posting (at least): load <= 1/8, so a miss costs ~1.1 probes
NO_SIM = -1.0  # below every similarity (weights are non-negative)


def aligned_stride(capacity: int) -> int:
    """Rows padded up to a multiple of ALIGN (at least ALIGN)."""
    return max(ALIGN, (int(capacity) + ALIGN - 1) // ALIGN * ALIGN)


def table_size_for(n_postings: int) -> int:
    """Power of two >= TABLE_LOAD * n_postings, at least 16."""
    size = 16
    while size < TABLE_LOAD * n_postings:
        size *= 2
    return size


def batch_layout(n_upd: int, K: int, table_size: int, n_postings: int, n_unique: int):
    """Offsets into (ibuf, fbuf): (o_upd_terms, o_key, o_val, o_post_doc, o_first, o_post_weight,
    ibuf_len, fbuf_len)."""
    o_terms, o_key, o_val, o_pdoc, o_first, o_pw = _offsets(n_upd, K, table_size, n_postings)
    return o_terms, o_key, o_val, o_pdoc, o_first, o_pw, o_first + n_unique + 1, o_pw + n_postings


def _offsets(n_upd, K, table_size, n_postings):
    """(o_upd_terms, o_key, o_val, o_post_doc, o_first, o_post_weight): where each part of the
    packed buffers starts (module docstring); host, kernel and CPU twin alike."""
    o_terms = n_upd
    o_key = o_terms + n_upd * K
    o_val = o_key + table_size
    o_pdoc = o_val + table_size
    o_first = o_pdoc + n_postings
    return o_terms, o_key, o_val, o_pdoc, o_first, n_upd * K


# ----------------------------------------------------------------------------- shared device/host code

def _probe(ibuf, o_key, mask, term):
    """Slot of ``term`` in the hash table at ibuf[o_key : o_key + mask + 1], or -1."""
    h = (numba.int64(term) * HASH_MULT) & mask
    while True:
        key = ibuf[o_key + h]
        if key == term:
            return h
        if key == EMPTY:
            return -1
        h = (h + 1) & mask


def _make_slot(probe):
    def slot(term, n, row, ell_weights, ibuf, fbuf, o_key, o_val, o_first, o_pdoc, o_pw, mask, acc, base):
        """Score slot n of ``row`` (its term ``term`` >= 0) against the batch: probe the hash table
        and, on a hit only, read the slot's weight and add weight * posting weight into
        acc[base + doc]. The per-item function of the kernel and of its CPU twin."""
        h = probe(ibuf, o_key, mask, term)
        if h >= 0:
            w = numba.float64(ell_weights[n, row])
            u = ibuf[o_val + h]
            for p in range(ibuf[o_first + u], ibuf[o_first + u + 1]):
                acc[base + ibuf[o_pdoc + p]] += w * numba.float64(fbuf[o_pw + p])
    return slot


probe_dev = device_function(_probe)
probe_cpu = numba.njit(inline="always")(_probe)
slot_dev = device_function(_make_slot(probe_dev))
offsets_dev = device_function(_offsets)
offsets_cpu = numba.njit(inline="always")(_offsets)
slot_cpu = numba.njit(inline="always")(_make_slot(probe_cpu))
SCAN_UNROLL = 8  # term loads a scanning thread issues at once (a fully unrolled loop in the kernel)


# ----------------------------------------------------------------------------- CUDA kernels

@kernel_cache
def score_kernel(threads_per_block: int, max_docs: int):
    """The best-cluster kernel for ``threads_per_block`` threads (rows) per block and batches of
    at most ``max_docs`` documents (``max_docs <= threads_per_block``).

    ``score_blocks[n_blocks, threads_per_block](ell_terms, ell_weights, n_rows, ibuf, fbuf, n_upd,
    table_size, n_postings, n_docs, part_sim, part_row)`` with n_blocks = ceil(n_rows / threads_per_block):

    - ell_terms int32 (K, stride), ell_weights float32 (K, stride): the ELL matrix (written for
      the rows in the update buffer, read for the others); n_rows <= stride.
    - ibuf int32, fbuf float32: packed update buffer + hash table + postings (module docstring).
    - part_sim float64, part_row int32 (>= n_docs * n_blocks): the block-local best of document d
      in block b at [d * n_blocks + b] (row -1 and NO_SIM when the block has no row).

    Thread ``tx`` of block ``b`` owns row ``r = b * threads_per_block + tx``. Shared memory:
    ``acc`` float64 [threads_per_block][max_docs + 1] (one float64 per (row, document), the +1
    pads away bank conflicts of the reduction) and ``cand_*`` [threads_per_block] for the
    reduction. Steps:

    1. zero ``acc`` (strided over the block). syncthreads: acc zeroed.
    2. each thread binary-searches its row in the sorted update rows (a few cached loads: the
       warp's threads read the same entries). If r is there: write its K slots into the ELL matrix
       and score them; else read slot n = 0, 1, ... until term -1 (SCAN_UNROLL = 8 slots' terms
       are loaded at once before the first is probed, so eight loads are in flight): probe the term in the hash
       table; only on a hit read the (coalesced) weight and add weight * posting weight into
       acc[tx][doc] for each posting. Sums run in slot (= term id) order: exact and
       backend-independent.
    3. syncthreads (all rows scored). Block-local max: thread (group g, document d), with
       G = threads_per_block // max_docs groups, scans rows g, g + G, ... (ascending, strict >, so
       ties keep the lower row). syncthreads. The G candidates of each document are merged by a
       tree (ceil(log2 G) rounds, a syncthreads after each) with the (similarity desc, row asc)
       rule, and thread d writes part_*[d * n_blocks + b].
    Length: scoring and the block-local reduction are one kernel (no round trip of acc through
    global memory); that is why it is over 120 lines.
    """
    tpb = int(threads_per_block)
    mdocs = int(max_docs)
    if mdocs < 1 or mdocs > tpb:
        raise ValueError(f"max_docs must be in [1, threads_per_block={tpb}], got {mdocs}")
    pitch = mdocs + 1
    groups = tpb // mdocs
    acc_len = tpb * pitch  # a closure constant: numba needs literal shared-array shapes

    @cuda_kernel
    def score_blocks(ell_terms, ell_weights, n_rows, ibuf, fbuf, n_upd, table_size, n_postings, n_docs, part_sim,
                     part_row):
        acc = cuda.shared.array(acc_len, numba.float64)
        cand_sim = cuda.shared.array(tpb, numba.float64)
        cand_row = cuda.shared.array(tpb, numba.int32)
        tx = cuda.threadIdx.x
        block = cuda.blockIdx.x
        n_blocks = cuda.gridDim.x
        row0 = block * tpb
        row = row0 + tx
        K = ell_terms.shape[0]
        mask = numba.int64(table_size - 1)
        o_terms, o_key, o_val, o_pdoc, o_first, o_pw = offsets_dev(n_upd, K, table_size, n_postings)

        for i in range(tx, acc_len, tpb):
            acc[i] = 0.0
        cuda.syncthreads()  # acc zeroed before any thread adds into it

        if row < n_rows:
            mine = -1
            if n_upd > 0:
                u = lower_bound_dev(ibuf, 0, n_upd, row)
                if u < n_upd and ibuf[u] == row:
                    mine = u
            base = tx * pitch
            if mine >= 0:
                for n in range(K):
                    term = ibuf[o_terms + mine * K + n]
                    w = fbuf[mine * K + n]
                    ell_terms[n, row] = term
                    ell_weights[n, row] = w
                    if term >= 0:
                        slot_dev(term, n, row, ell_weights, ibuf, fbuf, o_key, o_val, o_first, o_pdoc, o_pw, mask, acc, base)
            else:
                # SCAN_UNROLL independent term loads are issued before the first is probed, so a
                # thread keeps 8 loads in flight instead of 1 (the scan is latency-bound: with one
                # load at a time every slot waits a full DRAM round trip).
                terms = cuda.local.array(SCAN_UNROLL, numba.int32)  # registers once unrolled
                n = 0
                while n < K:
                    for h in range(SCAN_UNROLL):
                        terms[h] = ell_terms[n + h, row] if n + h < K else EMPTY
                    h = 0
                    while h < SCAN_UNROLL and terms[h] >= 0:
                        slot_dev(terms[h], n + h, row, ell_weights, ibuf, fbuf, o_key, o_val, o_first, o_pdoc, o_pw,
                                 mask, acc, base)
                        h += 1
                    if h < SCAN_UNROLL:
                        break
                    n += SCAN_UNROLL
        cuda.syncthreads()  # every row of the block has its similarities in acc

        g = tx // mdocs
        d = tx - g * mdocs
        if g < groups and d < n_docs:
            best = NO_SIM
            best_r = -1
            r = g
            while r < tpb and row0 + r < n_rows:
                s = acc[r * pitch + d]
                if s > best:
                    best = s
                    best_r = r
                r += groups
            cand_sim[g * mdocs + d] = best
            cand_row[g * mdocs + d] = best_r
        cuda.syncthreads()  # the G group candidates of every document are in shared memory

        active = groups  # tree over the groups: log2(G) rounds instead of one thread reading all G
        while active > 1:
            half = (active + 1) // 2
            if g < active - half and d < n_docs:
                a = g * mdocs + d
                b = (g + half) * mdocs + d
                if better_dev(cand_sim[b], cand_row[b], cand_sim[a], cand_row[a]):
                    cand_sim[a] = cand_sim[b]
                    cand_row[a] = cand_row[b]
            cuda.syncthreads()  # this round's merges are visible before the next round reads them
            active = half

        if tx < n_docs:
            best_r = cand_row[tx]
            part_sim[tx * n_blocks + block] = cand_sim[tx]
            part_row[tx * n_blocks + block] = row0 + best_r if best_r >= 0 else -1

    return score_blocks


@kernel_cache
def reduce_kernel(threads_per_block: int):
    """The final reduction: ``reduce_blocks[n_docs, threads_per_block](part_sim, part_row, n_blocks,
    n_docs, best)`` (threads_per_block a power of two).

    Block d reduces document d's n_blocks block-local bests: thread tx scans blocks tx, tx + B, ...
    (coalesced: part_*[d * n_blocks + b]), then a shared-memory tree (log2(B) rounds, a syncthreads
    after each) with the (similarity desc, row asc) rule. Thread 0 writes best[0, d] = similarity
    and best[1, d] = row (as float64, exact; -1 when there is no row). best float64 (2, >= n_docs).
    """
    tpb = int(threads_per_block)
    if tpb < 1 or tpb & (tpb - 1):
        raise ValueError(f"threads_per_block must be a power of two, got {tpb}")

    @cuda_kernel
    def reduce_blocks(part_sim, part_row, n_blocks, n_docs, best):
        s_sim = cuda.shared.array(tpb, numba.float64)
        s_row = cuda.shared.array(tpb, numba.int32)
        d = cuda.blockIdx.x
        tx = cuda.threadIdx.x
        if d >= n_docs:
            return  # whole block leaves together: no syncthreads is skipped by part of a block
        bs = NO_SIM
        br = -1
        for b in range(tx, n_blocks, tpb):
            s = part_sim[d * n_blocks + b]
            r = part_row[d * n_blocks + b]
            if better_dev(s, r, bs, br):
                bs = s
                br = r
        s_sim[tx] = bs
        s_row[tx] = br
        cuda.syncthreads()  # all thread bests visible
        step = tpb // 2
        while step > 0:
            if tx < step:
                if better_dev(s_sim[tx + step], s_row[tx + step], s_sim[tx], s_row[tx]):
                    s_sim[tx] = s_sim[tx + step]
                    s_row[tx] = s_row[tx + step]
            cuda.syncthreads()  # round complete before the next halving reads
            step //= 2
        if tx == 0:
            best[0, d] = s_sim[0]
            best[1, d] = numba.float64(s_row[0])

    return reduce_blocks


@cuda_kernel
def apply_updates(ell_terms, ell_weights, ibuf, fbuf, n_upd):
    """Write the update buffer into the ELL matrix without scoring (a flush: used when more rows
    are pending than one launch's buffer holds, and before reading the matrix back).

    One thread per (update u, slot n): idx = u * K + n < n_upd * K; ibuf/fbuf in the packed layout
    (only the update part is read). No shared memory, no synchronisation.
    """
    K = ell_terms.shape[0]
    idx = cuda.grid(1)
    if idx < n_upd * K:
        u = idx // K
        n = idx - u * K
        row = ibuf[u]
        ell_terms[n, row] = ibuf[n_upd + idx]
        ell_weights[n, row] = fbuf[idx]


@cuda_kernel
def grow_copy(old_terms, old_weights, n_rows, new_terms, new_weights):
    """Capacity growth on the device: copy the first n_rows rows of every column of the old ELL
    matrix (K, old_stride) into the new one (K, new_stride); nothing is re-uploaded from the host.
    One thread per (slot n, row r): idx = n * n_rows + r; coalesced reads and writes."""
    K = old_terms.shape[0]
    idx = cuda.grid(1)
    if idx < K * n_rows:
        n = idx // n_rows
        r = idx - n * n_rows
        new_terms[n, r] = old_terms[n, r]
        new_weights[n, r] = old_weights[n, r]


# ----------------------------------------------------------------------------- CPU twins

@cpu_jit(parallel=True, nogil=True)
def score_blocks_cpu(threads_per_block, max_docs, ell_terms, ell_weights, n_rows, ibuf, fbuf, n_upd,
                     table_size, n_postings, n_docs, part_sim, part_row):
    """CPU twin of ``score_kernel(threads_per_block, max_docs)``: same arguments (geometry first),
    same block partition, same per-row slot order and the same block-local results in part_*.

    prange over blocks; within a block the rows are walked slot-major (slot n of every row, then
    n + 1), which reads the column-major matrix sequentially.
    """
    tpb = threads_per_block
    K = ell_terms.shape[0]
    n_blocks = (n_rows + tpb - 1) // tpb
    mask = np.int64(table_size - 1)
    o_terms, o_key, o_val, o_pdoc, o_first, o_pw = offsets_cpu(n_upd, K, table_size, n_postings)
    for block in prange(n_blocks):
        row0 = block * tpb
        n_here = min(tpb, n_rows - row0)
        acc = np.zeros(n_here * max_docs, np.float64)  # acc[i * max_docs + d], as the kernel's rows
        lo = lower_bound_cpu(ibuf, 0, n_upd, row0)
        hi = lower_bound_cpu(ibuf, 0, n_upd, row0 + tpb)
        for u in range(lo, hi):  # update buffer rows of this block: written, then scored
            row = ibuf[u]
            for n in range(K):
                term = ibuf[o_terms + u * K + n]
                w = fbuf[u * K + n]
                ell_terms[n, row] = term
                ell_weights[n, row] = w
        alive = np.ones(n_here, np.bool_)
        for n in range(K):
            any_alive = False
            for i in range(n_here):
                if not alive[i]:
                    continue
                row = row0 + i
                term = ell_terms[n, row]
                if term < 0:
                    alive[i] = False
                    continue
                any_alive = True
                slot_cpu(term, n, row, ell_weights, ibuf, fbuf, o_key, o_val, o_first, o_pdoc, o_pw, mask, acc,
                         i * max_docs)
            if not any_alive:
                break
        for d in range(n_docs):
            best = NO_SIM
            best_r = -1
            for i in range(n_here):
                if acc[i * max_docs + d] > best:
                    best = acc[i * max_docs + d]
                    best_r = row0 + i
            part_sim[d * n_blocks + block] = best
            part_row[d * n_blocks + block] = best_r


score_blocks_serial = cpu_jit(nogil=True)(score_blocks_cpu.py_func)
"""The same twin compiled without threads (prange runs as range): for small launches, where
waking a thread team costs more than the work (and far more on a machine that is busy)."""


@cpu_jit(nogil=True)
def reduce_blocks_cpu(part_sim, part_row, n_blocks, n_docs, best):
    """CPU twin of ``reduce_kernel``: best[0, d], best[1, d] = the (similarity desc, row asc)
    maximum of document d's n_blocks block-local bests."""
    for d in range(n_docs):
        bs = NO_SIM
        br = -1
        for b in range(n_blocks):
            s = part_sim[d * n_blocks + b]
            r = part_row[d * n_blocks + b]
            if better_cpu(s, r, bs, br):
                bs = s
                br = r
        best[0, d] = bs
        best[1, d] = np.float64(br)


@cpu_jit(nogil=True)
def apply_updates_cpu(ell_terms, ell_weights, ibuf, fbuf, n_upd):
    """CPU twin of ``apply_updates``."""
    K = ell_terms.shape[0]
    for idx in range(n_upd * K):
        u = idx // K
        n = idx - u * K
        row = ibuf[u]
        ell_terms[n, row] = ibuf[n_upd + idx]
        ell_weights[n, row] = fbuf[idx]


@cpu_jit(nogil=True)
def grow_copy_cpu(old_terms, old_weights, n_rows, new_terms, new_weights):
    """CPU twin of ``grow_copy``."""
    K = old_terms.shape[0]
    for n in range(K):
        for r in range(n_rows):
            new_terms[n, r] = old_terms[n, r]
            new_weights[n, r] = old_weights[n, r]


def ptx_kernels():
    ell = "int32[:, ::1], float32[:, ::1]"
    return [
        ("score_blocks", score_kernel(128, 32),
         f"void({ell}, int64, int32[::1], float32[::1], int64, int64, int64, int64, float64[::1], int32[::1])"),
        ("reduce_blocks", reduce_kernel(256), "void(float64[::1], int32[::1], int64, int64, float64[:, ::1])"),
        ("apply_updates", apply_updates, f"void({ell}, int32[::1], float32[::1], int64)"),
        ("grow_copy", grow_copy, f"void({ell}, int64, {ell})"),
    ]
