"""DClustR / CUDA-DClus: updating overlapping star clusters after documents are added.

The graph on disk: partial connected components (paper section 3.2)
--------------------------------------------------------------------
A partial connected component (PCC) is a connected subgraph induced by a subset of vertices.
They are built as the paper describes: vertices are processed in the order they were added; a
vertex without a PCC starts a new one; each successor u of v (u after v, plus, during an update,
every old vertex) with S(v, u) >= beta joins v's PCC if it has none, and otherwise the two PCCs
are "linked" when they differ.  A PCC together with everything linked to it, transitively, is a
connected component; we keep only the links that join PCCs not yet connected (a spanning forest
of the paper's link relation, which gives the same components).  Old PCCs never gain vertices (new vertices always start or join new PCCs),
only edges.

A cluster file written by ``gputext cluster star`` keeps, under /uns/gputext/star/graph (graph
format 2, ``format_version``):

    pcc_of_doc  int32 (n,)        PC_V: the PCC of every document
    order       int32 (n,)        documents grouped by PCC (PCC 0 first), ascending id within one
    pcc_indptr  int64 (n_pcc+1,)  PCC p holds order[pcc_indptr[p]:pcc_indptr[p+1]]
    adj_indptr  int64 (n+1,)      owner row of order[r] is adj_indices/adj_weights[adj_indptr[r]:adj_indptr[r+1]]
    adj_indices int32 (E,)        neighbours (document ids), ascending within a row; chunked, growable
    adj_weights float32 (E,)      cosine of each edge; chunked, growable
    degree      int32 (n,)        degree of every document in the stored graph
    weight_sum  int64 (n,)        fixed-point sum (2**fix_bits units) of its edge weights (AIS = sum / degree)
    links       int32 (n_links, 2) linked PCC pairs (p < q), sorted: a spanning forest of the link
                                  relation (a link between PCCs already connected is not kept)
    doc_id_hash uint64 (n,)       64-bit FNV-1a of every document id's UTF-8 bytes (``id_hashes``):
                                  the update's duplicate-id check reads these instead of the ids
                                  (optional: files written before 2026-11-25 08:00 have none)
    n_docs, n_pcc, n_edges, beta, fix_bits, format_version (scalars)

Every edge is stored once, in the *owner row* of one endpoint: the neighbours CUDA-DClus examines
when it processes a vertex (Suc_v: the later vertices, plus, for a vertex added by an update,
every vertex that was there before).  A full build owns (v, u) at min(v, u); an update's new
edges are all owned by new vertices.  New vertices only start or join new PCCs, and new PCCs get
the next ids, so an update never changes a stored row: it appends the new vertices' rows (grouped
by their new PCCs) and rewrites only the small per-document arrays.  Each PCC is one contiguous
range of positions and of the edge datasets; a connected component (all its PCCs) holds every
edge of its vertices, each once, so loading a component and transposing gives its symmetric
adjacency.  The update needs no edge weights: relevance reads degrees and fixed-point sums,
which are stored per document and updated exactly with the new edges.  Format 1 (symmetric
rows rewritten on every update) is refused with a clear error; recluster such a file.

The update (``update``)
-----------------------
1. Score only the new documents: against the old collection and against the new documents
   after them (upper triangle), as one index of the stacked corpus [new; old] with the new
   documents as queries (gputext.cluster.graph.addition_rows: the device graph build on cuda,
   the engine on the CPU, same bits); the rows become the new vertices' owner rows
   (kstar.addition_owner_rows).
2. Assign the new vertices to PCCs (new PCCs, links to old ones) as above; each row's old
   neighbours are first reduced to their distinct PCCs (in parallel; the same links).
3. The affected connected components are those of the new PCCs (union-find over the links).
   Only their old PCCs' owner rows are read from disk (adj_indices only, one read per run of
   consecutive PCCs, runs closer than READ_GAP entries merged, into one buffer); with the new
   vertices' owner rows they give the symmetric adjacency of the affected components in local
   ids (``symmetric_from_owner``: parallel counting-sort transpose and per-row merge), checked
   against the stored degrees.
4. Relevance of every vertex of the affected components is recomputed, on the host where the
   local graph is (uploading its adjacency costs more than the host's parallel pass over it).
5. DClustR's cover update (paper section 2.2) with C' = the old centers of those components:
   V+ (vertices not in C' with relevance > 0) is scanned: v enters the candidate list L when
   (a) v is uncovered, (b) a neighbour of v is uncovered, or (c) some neighbour u has no center
   of C' covering it with relevance >= relevance(v); the u of (c) are marked "active".  Then each
   c in C' is scanned: every neighbour with larger relevance enters L and makes c "weak"; a weak
   c, or one with an active neighbour, leaves C' (and enters L when its relevance is > 0).
   The remaining C' are centers; L is visited in decreasing relevance (ties: lower id first) and
   v becomes a center when v or a neighbour is uncovered.  Linked lists are emptied (the
   improvement recomputes them).
   This always covers the component (checked by an assertion): a vertex left uncovered would
   have had all its C' coverers removed; a removed coverer c with relevance > 0 is itself in L and
   becomes a center again if its star still has an uncovered vertex when it is visited; a removed
   c with relevance 0 was weak, so all its neighbours (relevance > 0, since two adjacent vertices
   cannot both have relevance 0) are in L; an initially uncovered vertex enters L by (a) or, with
   relevance 0, all its neighbours enter L by (b).
6. The improvement stage of OClustR (gputext.cluster.star.improve_centers) gives the final
   clusters of the affected components; clusters of untouched components are copied unchanged.
7. The file is written by appending (``append_update``): the added rows go after /X's rows, the
   new ids after /obs/_index and the new owner rows after the edge datasets (resize + write of
   the tail only), the small per-document arrays (obs columns, obsm, uns with the graph's small
   arrays) are written under temporary names and swapped in.  Reading (step 0) decodes none of
   the old file's strings when it carries the vocabulary digest and the id hashes
   (``_check_vocabulary``, ``_check_new_ids``).  With ``-o`` the input file this happens in place (rolled
   back on any exception; a killed process can leave the file damaged, HDF5 has no journal);
   with another output the old file is first copied at OS speed (shutil.copyfile) to a temporary
   file that is renamed at the end (crash-safe).  ``write="new"`` keeps the whole-file writer
   (union corpus rewritten, old edge datasets H5Ocopy'd); tests check both give the same datasets.

What "equal to DClustR" means here and how it is checked (tests/test_star_dclus.py): the update
is compared with an independent set-based implementation of section 2.2 over the whole graph in
memory (tests/test_star_reference.py), on random corpora and random additions; clusters of
components without new documents equal a from-scratch OClustR of the union (the rules are
component-local); components made only of new documents equal OClustR too (C' is empty there);
the paper's Table 1 + Table 2 additions give the PCCs of its Figures 9-16 and the clusters worked
out by hand in the test; the graph after additions equals the graph of the union built from
scratch (edges, weights, stored degrees and fixed-point sums); the old edge datasets are an
unchanged prefix of the new ones.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field

import h5py
import numba
from numba import prange
import numpy as np
import scipy.sparse as sp

from ..backend import Backend, resolve
from ..errors import FormatError, InputError
from ..io import corpus as cio
from ..io.corpus import Categorical, Corpus, atomic_output, canonical_csr, write_corpus
from ..kernels import star as kstar
from ..progress import info
from .graph import StarGraph, addition_rows, check_beta
from .star import (RelevanceGeometry, StarResult, candidate_order, compute_relevance, cover_candidates,
                   degree_order, improve_centers, membership_matrix, star_reduce)

GRAPH_KEY = "uns/gputext/star/graph"
STAR_KEY = "uns/gputext/star"
GRAPH_FORMAT_VERSION = 2  # 1: symmetric rows rewritten on every update (refused with a clear error)
CHUNK_ENTRIES = 1 << 20  # entries per HDF5 chunk of the two growable edge datasets (4 MiB, no compression)
READ_GAP = 1 << 16  # stored entries between two touched ranges below which both are read as one


# ----------------------------------------------------------------------------- PCCs

@numba.njit(cache=True)
def _find(parent, x):
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@numba.njit(cache=True)
def _union_links(parent, links):
    """Apply links (k, 2) to the union-find ``parent``; smaller root wins."""
    for k in range(links.shape[0]):
        a = _find(parent, links[k, 0])
        b = _find(parent, links[k, 1])
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b


@numba.njit(parallel=True, cache=True)
def _distinct_old_pccs(indptr, indices, pcc_of, first, n_pcc_old, chunks):
    """For each row r, the distinct PCCs of its neighbours before ``first`` (old vertices: their
    PCCs are fixed during an update), in order of first occurrence along the row: dpcc[indptr[r]:
    indptr[r] + dcnt[r]].  Rows in ``chunks`` contiguous pieces, one prange task each with its own
    stamp array (n_pcc_old,).  Returns (dpcc int32 (nnz,), dcnt int64 (n_rows,), n_before int64
    (n_rows,): the number of neighbours before ``first``, the front of each ascending row)."""
    n_rows = indptr.shape[0] - 1
    dpcc = np.empty(indices.shape[0], np.int32)
    dcnt = np.zeros(n_rows, np.int64)
    n_before = np.zeros(n_rows, np.int64)
    for c in prange(chunks):
        seen = np.full(max(n_pcc_old, 1), -1, np.int32)
        for r in range(n_rows * c // chunks, n_rows * (c + 1) // chunks):
            d = indptr[r]
            p = indptr[r]
            while p < indptr[r + 1] and indices[p] < first:
                q = pcc_of[indices[p]]
                if seen[q] != r:
                    seen[q] = r
                    dpcc[d] = q
                    d += 1
                p += 1
            dcnt[r] = d - indptr[r]
            n_before[r] = p - indptr[r]
    return dpcc, dcnt, n_before


def assign_pcc(indptr, indices, pcc_of, first, next_pcc, parent):
    """Assign vertices first..n-1 (rows 0.. of indptr/indices) to PCCs, in order (see
    ``_assign_pcc``).  In an update (first > 0) each row's neighbours among the old vertices
    are first reduced, in parallel, to their distinct PCCs in order of first occurrence
    (``_distinct_old_pccs``): a PCC met again along a row is already connected to the row's PCC
    and never adds a link, so the links are the same as walking every entry."""
    if first > 0 and len(indices):
        dpcc, dcnt, n_before = _distinct_old_pccs(indptr, indices, pcc_of, first, int(pcc_of[:first].max()) + 1,
                                                  max(1, min(numba.get_num_threads() * 4, indptr.shape[0] - 1)))
    else:
        dpcc, dcnt, n_before = (np.empty(0, np.int32), np.zeros(indptr.shape[0] - 1, np.int64),
                                np.zeros(indptr.shape[0] - 1, np.int64))
    return _assign_pcc(indptr, indices, pcc_of, first, next_pcc, parent, dpcc, dcnt, n_before,
                       first > 0 and len(indices) > 0)


@numba.njit(cache=True)
def _link(pu, pv, parent, links, k):
    """Record the link (pu, pv) when the two PCCs are not yet connected; union them."""
    a = _find(parent, pu)
    b = _find(parent, pv)
    if a != b:
        if k == links.shape[0]:
            grown = np.empty((2 * k, 2), np.int32)
            grown[:k] = links[:k]
            links = grown
        links[k, 0] = min(pu, pv)
        links[k, 1] = max(pu, pv)
        k += 1
        if a < b:
            parent[b] = a
        else:
            parent[a] = b
    return links, k


@numba.njit(cache=True)
def _assign_pcc(indptr, indices, pcc_of, first, next_pcc, parent, dpcc, dcnt, n_before, reduced):
    """Assign vertices first..n-1 (rows 0.. of indptr/indices) to PCCs, in order.

    indptr int64 (n-first+1,), indices int32: the adjacency rows of vertices first, first+1, ...
    (global ids).  pcc_of int32 (n,) (-1 = none yet) is updated in place; the neighbours examined
    from v are its successors (u > v) and the vertices before ``first`` (the old collection in an
    update; none in a full build).  parent int32 (next_pcc + n - first,): union-find over PCC ids,
    holding the components of the existing links on entry.  A link between two PCCs is recorded
    only when they are not yet connected through earlier links (a spanning forest of the link
    relation: the same connected components, at most n_pcc - 1 links).
    Returns (next_pcc, links int32 (k, 2) with p < q).
    """
    n_rows = indptr.shape[0] - 1
    links = np.empty((n_rows + 1, 2), np.int32)
    k = 0
    for r in range(n_rows):
        v = first + r
        if pcc_of[v] < 0:
            pcc_of[v] = next_pcc
            parent[next_pcc] = next_pcc
            next_pcc += 1
        pv = pcc_of[v]
        last = -1
        if reduced:  # the old neighbours (the front of the ascending row) as their distinct PCCs
            for t in range(indptr[r], indptr[r] + dcnt[r]):
                pu = dpcc[t]
                if pu != pv:
                    last = pu
                    links, k = _link(pu, pv, parent, links, k)
        for p in range(indptr[r] + n_before[r] if reduced else indptr[r], indptr[r + 1]):
            u = indices[p]
            if u > v or u < first:
                pu = pcc_of[u]
                if pu < 0:
                    pcc_of[u] = pv
                elif pu != pv and pu != last:
                    last = pu
                    links, k = _link(pu, pv, parent, links, k)
    return next_pcc, links[:k]


def sort_links(links: np.ndarray) -> np.ndarray:
    links = np.asarray(links, np.int32).reshape(-1, 2)
    if len(links) == 0:
        return np.empty((0, 2), np.int32)
    return links[np.lexsort((links[:, 1], links[:, 0]))]


@numba.njit(cache=True)
def components_of_pccs(n_pcc, links):
    """Connected component label (int32, = smallest PCC id in it) of every PCC (union-find)."""
    parent = np.arange(n_pcc).astype(np.int32)
    _union_links(parent, links)
    out = np.empty(n_pcc, np.int32)
    for p in range(n_pcc):
        out[p] = _find(parent, p)
    return out


def pcc_layout(pcc_of: np.ndarray, n_pcc: int) -> tuple[np.ndarray, np.ndarray]:
    """(order int32 (n,), pcc_indptr int64 (n_pcc+1,)): documents grouped by PCC, ascending within."""
    order = np.argsort(pcc_of, kind="stable").astype(np.int32)
    indptr = np.zeros(n_pcc + 1, np.int64)
    np.cumsum(np.bincount(pcc_of, minlength=n_pcc), out=indptr[1:])
    return order, indptr


@dataclass
class PCCs:
    """pcc_of int32 (n,), links int32 (k, 2) (spanning forest), order int32 (n,), pcc_indptr int64 (n_pcc+1,)."""

    pcc_of: np.ndarray
    links: np.ndarray
    order: np.ndarray
    pcc_indptr: np.ndarray

    @property
    def n_pcc(self) -> int:
        return len(self.pcc_indptr) - 1

    def components(self) -> np.ndarray:
        return components_of_pccs(self.n_pcc, self.links)

    def members(self, p: int) -> np.ndarray:
        return self.order[self.pcc_indptr[p]:self.pcc_indptr[p + 1]]


def build_pccs(graph: StarGraph) -> PCCs:
    """The array of PCCs of a whole graph, processing vertices 0..n-1 (paper, Figures 9-12)."""
    pcc_of = np.full(graph.n, -1, np.int32)
    n_pcc, links = assign_pcc(graph.indptr, graph.indices, pcc_of, 0, 0, np.empty(graph.n, np.int32))
    order, pcc_indptr = pcc_layout(pcc_of, n_pcc)
    return PCCs(pcc_of, sort_links(links), order, pcc_indptr)


@numba.njit(parallel=True, cache=True)
def _gather_rows(indptr, indices, weights, rows, out_ptr, out_idx, out_w):
    for k in numba.prange(rows.shape[0]):
        v = rows[k]
        s = indptr[v]
        d = out_ptr[k]
        for p in range(indptr[v + 1] - s):
            out_idx[d + p] = indices[s + p]
            out_w[d + p] = weights[s + p]


def gather_rows(indptr, indices, weights, rows):
    """Rows ``rows`` of a CSR, concatenated: (ptr int64 (len+1,), indices, weights)."""
    rows = np.asarray(rows, np.int64)
    lengths = indptr[rows + 1] - indptr[rows]
    ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    out_idx = np.empty(ptr[-1], indices.dtype)
    out_w = np.empty(ptr[-1], weights.dtype)
    if len(rows):
        _gather_rows(indptr, indices, weights, rows, ptr, out_idx, out_w)
    return ptr, out_idx, out_w



# ----------------------------------------------------------------------------- symmetric rows from owner rows

@numba.njit(parallel=True, cache=True)
def _upper_owner_rows(indptr, indices, weights, rows):
    """Owner rows of a full build: for each vertex of ``rows`` (int64) its neighbours u > v
    (the suffix of its sorted symmetric row).  Returns (ptr int64 (len+1,), indices, weights)."""
    m = rows.shape[0]
    first = np.empty(m, np.int64)
    for k in prange(m):
        v = rows[k]
        lo = indptr[v]
        hi = indptr[v + 1]
        while lo < hi:  # binary search of the first neighbour > v
            mid = (lo + hi) // 2
            if indices[mid] > v:
                hi = mid
            else:
                lo = mid + 1
        first[k] = lo
    ptr = np.zeros(m + 1, np.int64)
    for k in range(m):
        ptr[k + 1] = ptr[k] + indptr[rows[k] + 1] - first[k]
    out_idx = np.empty(ptr[m], np.int32)
    out_w = np.empty(ptr[m], np.float32)
    for k in prange(m):
        d = ptr[k]
        for p in range(first[k], indptr[rows[k] + 1]):
            out_idx[d] = indices[p]
            out_w[d] = weights[p]
            d += 1
    return ptr, out_idx, out_w


@numba.njit(parallel=True, cache=True)
def symmetric_from_owner(row_start, row_len, idx, w, local_of, n_chunks, with_weights):
    """Symmetric CSR (rows sorted) of a vertex set from its owner rows, in local ids.

    Every edge of the set is stored once, in the owner row of one endpoint.  Local row k's owner
    row is idx[row_start[k]:row_start[k] + row_len[k]] (int64 starts and lengths, (m,)): global
    ids, ascending; w float32 alongside (read only when ``with_weights``).  local_of int32 maps
    a global id to its local row (ascending with the global id, so sorted rows stay sorted).
    Returns indptr int64 (m+1,), indices int32 (2E,), weights float32 (2E, or 0 without weights).
    Row k = merge of its owner row and the rows owning an edge to k ("transposed" part).
    Parallel: the transposed parts are a counting sort by target over ``n_chunks`` contiguous
    ranges of owner rows (per-chunk counts, per-target offsets, then each chunk scatters its
    entries in owner order), so each transposed part comes out ascending; then one row per prange
    iteration merges its two ascending parts.  Scratch: int32 (n_chunks, m) and the transposed
    entries (E).
    """
    m = row_start.shape[0]
    n_chunks = max(1, min(n_chunks, m))
    step = (m + n_chunks - 1) // n_chunks
    cnt = np.zeros((n_chunks, m), np.int32)
    for t in prange(n_chunks):
        for k in range(t * step, min(m, (t + 1) * step)):
            s = row_start[k]
            for p in range(s, s + row_len[k]):
                cnt[t, local_of[idx[p]]] += 1
    tlen = np.zeros(m, np.int64)
    for j in prange(m):
        running = 0
        for t in range(n_chunks):
            c = cnt[t, j]
            cnt[t, j] = running
            running += c
        tlen[j] = running
    tptr = np.zeros(m + 1, np.int64)
    indptr = np.zeros(m + 1, np.int64)
    for j in range(m):
        tptr[j + 1] = tptr[j] + tlen[j]
        indptr[j + 1] = indptr[j] + tlen[j] + row_len[j]
    t_idx = np.empty(tptr[m], np.int32)
    t_w = np.empty(tptr[m] if with_weights else 0, np.float32)
    for t in prange(n_chunks):
        for k in range(t * step, min(m, (t + 1) * step)):
            s = row_start[k]
            for p in range(s, s + row_len[k]):
                j = local_of[idx[p]]
                pos = tptr[j] + cnt[t, j]
                t_idx[pos] = k
                if with_weights:
                    t_w[pos] = w[p]
                cnt[t, j] += 1
    out_idx = np.empty(indptr[m], np.int32)
    out_w = np.empty(indptr[m] if with_weights else 0, np.float32)
    for k in prange(m):
        a = row_start[k]
        a_end = a + row_len[k]
        b = tptr[k]
        b_end = tptr[k + 1]
        d = indptr[k]
        la = local_of[idx[a]] if a < a_end else m
        while b < b_end and t_idx[b] < la:  # transposed entries before the owner row (all of them
            out_idx[d] = t_idx[b]           # for rows of a full build: owners hold only u > v)
            if with_weights:
                out_w[d] = t_w[b]
            b += 1
            d += 1
        while a < a_end:
            la = local_of[idx[a]]
            while b < b_end and t_idx[b] < la:
                out_idx[d] = t_idx[b]
                if with_weights:
                    out_w[d] = t_w[b]
                b += 1
                d += 1
            out_idx[d] = la
            if with_weights:
                out_w[d] = w[a]
            a += 1
            d += 1
        while b < b_end:
            out_idx[d] = t_idx[b]
            if with_weights:
                out_w[d] = t_w[b]
            b += 1
            d += 1
    return indptr, out_idx, out_w


@numba.njit(parallel=True, cache=True)
def _add_owner_stats(ptr, idx, w, first, degree, weight_sum, chunks=16):
    """Add the edges of owner rows (row r = vertex first + r; neighbours idx, weights w) to both
    endpoints' degree (int32) and fixed-point weight sum (int64, 2**FIX_BITS units: exact and
    order-free).  The owners' side one row per prange iteration, the neighbours' side in
    ``chunks`` pieces of the entries with private counters, added up per vertex (after the
    first loop: the loops never write the same entry at once)."""
    for r in prange(ptr.shape[0] - 1):
        s = numba.int64(0)
        for p in range(ptr[r], ptr[r + 1]):
            s += kstar.fixed_weight(w[p])
        degree[first + r] += ptr[r + 1] - ptr[r]
        weight_sum[first + r] += s
    n = degree.shape[0]
    nnz = idx.shape[0]
    # private (chunks, n) counters (integer sums, order-free), at most 2^25 entries in all
    chunks = max(1, min(chunks, nnz // 65536, (1 << 25) // max(n, 1)))
    c_deg = np.zeros((chunks, n), np.int32)
    c_sum = np.zeros((chunks, n), np.int64)
    for c in prange(chunks):
        for p in range(nnz * c // chunks, nnz * (c + 1) // chunks):
            u = idx[p]
            c_deg[c, u] += 1
            c_sum[c, u] += kstar.fixed_weight(w[p])
    for u in prange(n):
        for c in range(chunks):
            degree[u] += c_deg[c, u]
            weight_sum[u] += c_sum[c, u]


def _n_chunks(m: int) -> int:
    """Owner-row chunks of symmetric_from_owner: one per thread, with the (chunks x m) int32
    counters kept under 512 MiB (the result does not depend on the number of chunks)."""
    return int(max(1, min(numba.get_num_threads(), (1 << 27) // max(int(m), 1))))


# ----------------------------------------------------------------------------- file: graph group

FNV_OFFSET = 0xCBF29CE484222325  # 64-bit FNV-1a
FNV_PRIME = 0x100000001B3


@numba.njit(cache=True)
def _fnv1a64(buf, offsets):
    """64-bit FNV-1a of each byte string buf[offsets[i]:offsets[i+1]] (uint8 buf, int64 offsets
    (n+1,)).  Returns uint64 (n,).  Sequential: 50,000 ids take about 0.1 ms, less than waking a
    thread pool on a loaded host."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        h = np.uint64(FNV_OFFSET)
        for p in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(buf[p])) * np.uint64(FNV_PRIME)
        out[i] = h
    return out


def id_hashes(ids) -> np.ndarray:
    """uint64 (n,): 64-bit FNV-1a of the UTF-8 bytes of each document id as written
    (``corpus.str_values``: str(v), "" for None).  Equal ids have equal hashes, so the update's
    duplicate check reads the stored hashes instead of the ids and decodes the ids only when a
    hash of an added id is among them (a real duplicate, or a collision: about 10,000 x 50,000 /
    2^64 = 3e-11 for random ids).  About 1 ms per 50,000 short ids."""
    strings = cio.str_values(ids)
    joined = "".join(strings)
    if joined.isascii():  # one byte per code point: lengths from the strings
        buf = np.frombuffer(joined.encode("ascii"), np.uint8)
        lengths = np.fromiter(map(len, strings), np.int64, len(strings))
    else:
        encoded = [x.encode("utf-8", "surrogatepass") for x in strings]
        buf = np.frombuffer(b"".join(encoded), np.uint8)
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
    offsets = np.zeros(len(strings) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return _fnv1a64(buf, offsets)


def _set_enc(obj, kind: str) -> None:
    obj.attrs["encoding-type"] = kind
    obj.attrs["encoding-version"] = "0.1.0" if kind == "dict" else "0.2.0"


def _dataset(group: h5py.Group, name: str, data=None, shape=None, dtype=None, growable: bool = False):
    kw = {"chunks": (CHUNK_ENTRIES,), "maxshape": (None,)} if growable else {}
    ds = group.create_dataset(name, data=data, shape=shape, dtype=dtype, **kw)
    _set_enc(ds, "array")
    return ds


def _scalar(group: h5py.Group, name: str, value) -> None:
    ds = group.create_dataset(name, data=value)
    _set_enc(ds, "numeric-scalar")


def _graph_group(f: h5py.File, key: str = GRAPH_KEY) -> h5py.Group:
    if key.rsplit("/", 1)[0] not in f:
        raise AssertionError("write the corpus (with uns/gputext/star) before the graph")
    g = f.create_group(key)
    _set_enc(g, "dict")
    return g


def _write_small(g: h5py.Group, pcc_of, order, pcc_indptr, adj_indptr, degree, weight_sum, links, n_pcc: int,
                 beta: float, doc_id_hash: np.ndarray) -> None:
    """Everything of the graph group except the two growable edge datasets."""
    if len(doc_id_hash) != len(pcc_of):
        raise AssertionError("one id hash per document")
    _dataset(g, "pcc_of_doc", np.asarray(pcc_of, np.int32))
    _dataset(g, "order", np.asarray(order, np.int32))
    _dataset(g, "pcc_indptr", np.asarray(pcc_indptr, np.int64))
    _dataset(g, "adj_indptr", np.asarray(adj_indptr, np.int64))
    _dataset(g, "degree", np.asarray(degree, np.int32))
    _dataset(g, "weight_sum", np.asarray(weight_sum, np.int64))
    _dataset(g, "links", np.asarray(links, np.int32).reshape(-1, 2))
    _dataset(g, "doc_id_hash", np.asarray(doc_id_hash, np.uint64))
    _scalar(g, "n_docs", int(len(pcc_of)))
    _scalar(g, "n_pcc", int(n_pcc))
    _scalar(g, "n_edges", int(adj_indptr[-1]))
    _scalar(g, "beta", float(beta))
    _scalar(g, "fix_bits", int(kstar.FIX_BITS))
    _scalar(g, "format_version", GRAPH_FORMAT_VERSION)


def write_graph(f: h5py.File, graph: StarGraph, pccs: PCCs, beta: float, doc_id_hash: np.ndarray) -> None:
    """Write a whole graph as PCC-grouped owner rows (each edge once) into an open result file;
    doc_id_hash: ``id_hashes`` of the file's document ids."""
    g = _graph_group(f)
    ptr, idx, w = _upper_owner_rows(graph.indptr, graph.indices, graph.weights, pccs.order.astype(np.int64))
    _write_small(g, pccs.pcc_of, pccs.order, pccs.pcc_indptr, ptr, graph.degree, graph.weight_sum, pccs.links,
                 pccs.n_pcc, beta, doc_id_hash)
    _dataset(g, "adj_indices", idx, growable=True)
    _dataset(g, "adj_weights", w, growable=True)


@dataclass
class GraphOnDisk:
    """The small per-document and per-PCC arrays of a stored graph (the edges stay on disk)."""

    path: str
    n_docs: int
    beta: float
    pcc_of: np.ndarray
    order: np.ndarray
    pcc_indptr: np.ndarray
    adj_indptr: np.ndarray
    links: np.ndarray
    degree: np.ndarray
    weight_sum: np.ndarray
    doc_id_hash: np.ndarray | None = None  # uint64 (n,); None in files written before it existed

    @property
    def n_pcc(self) -> int:
        return len(self.pcc_indptr) - 1

    @property
    def n_entries(self) -> int:
        return int(self.adj_indptr[-1])


def read_graph_meta(f: h5py.File, path: str, n_docs: int) -> GraphOnDisk:
    if GRAPH_KEY not in f:
        raise InputError(f"{path}: /{GRAPH_KEY} is missing: the file was not written by `gputext cluster star` "
                         "(only its output can be updated with --update)")
    g = f[GRAPH_KEY]
    version = int(g["format_version"][()]) if "format_version" in g else 1
    if version != GRAPH_FORMAT_VERSION:
        raise InputError(f"{path}: /{GRAPH_KEY} has graph format version {version}, this gputext reads version "
                         f"{GRAPH_FORMAT_VERSION} (each edge stored once, per-document degree and weight sums): "
                         "recluster the corpus with `gputext cluster star` to update it")
    need = ("pcc_of_doc", "order", "pcc_indptr", "adj_indptr", "adj_indices", "adj_weights", "links", "beta",
            "degree", "weight_sum")
    for key in need:
        if key not in g:
            raise FormatError(f"{path}: /{GRAPH_KEY}/{key} is missing")
    pcc_of = g["pcc_of_doc"][()].astype(np.int32)
    order = g["order"][()].astype(np.int32)
    pcc_indptr = g["pcc_indptr"][()].astype(np.int64)
    adj_indptr = g["adj_indptr"][()].astype(np.int64)
    links = g["links"][()].astype(np.int32).reshape(-1, 2)
    degree = g["degree"][()].astype(np.int32)
    weight_sum = g["weight_sum"][()].astype(np.int64)
    beta = float(g["beta"][()])
    n_pcc = len(pcc_indptr) - 1
    if pcc_of.shape != (n_docs,) or order.shape != (n_docs,):
        raise FormatError(f"{path}: /{GRAPH_KEY}/pcc_of_doc and order must have n_docs = {n_docs} entries, "
                          f"got {pcc_of.shape[0]} and {order.shape[0]}")
    if degree.shape != (n_docs,) or weight_sum.shape != (n_docs,):
        raise FormatError(f"{path}: /{GRAPH_KEY}/degree and weight_sum must have n_docs = {n_docs} entries, "
                          f"got {degree.shape[0]} and {weight_sum.shape[0]}")
    if n_docs and (pcc_of.min() < 0 or pcc_of.max() >= n_pcc):
        raise FormatError(f"{path}: /{GRAPH_KEY}/pcc_of_doc has a PCC outside [0, {n_pcc})")
    if pcc_indptr[0] != 0 or pcc_indptr[-1] != n_docs or np.any(np.diff(pcc_indptr) < 0):
        raise FormatError(f"{path}: /{GRAPH_KEY}/pcc_indptr is not non-decreasing from 0 to {n_docs}")
    if adj_indptr.shape != (n_docs + 1,) or adj_indptr[0] != 0 or np.any(np.diff(adj_indptr) < 0):
        raise FormatError(f"{path}: /{GRAPH_KEY}/adj_indptr must be {n_docs + 1} non-decreasing offsets from 0")
    if g["adj_indices"].shape != (adj_indptr[-1],) or g["adj_weights"].shape != (adj_indptr[-1],):
        raise FormatError(f"{path}: /{GRAPH_KEY}/adj_indices and adj_weights must have adj_indptr[-1] = {adj_indptr[-1]} entries")
    if int(degree.sum(dtype=np.int64)) != 2 * int(adj_indptr[-1]):
        raise FormatError(f"{path}: /{GRAPH_KEY}/degree sums to {int(degree.sum(dtype=np.int64))}, expected twice the "
                          f"{int(adj_indptr[-1])} stored edges")
    if len(links) and (links.min() < 0 or links.max() >= n_pcc):
        raise FormatError(f"{path}: /{GRAPH_KEY}/links has a PCC outside [0, {n_pcc})")
    id_hash = None
    if "doc_id_hash" in g:
        id_hash = g["doc_id_hash"][()]
        if id_hash.shape != (n_docs,) or id_hash.dtype != np.uint64:
            raise FormatError(f"{path}: /{GRAPH_KEY}/doc_id_hash must be uint64 with n_docs = {n_docs} entries, "
                              f"got {id_hash.dtype} {id_hash.shape}")
    return GraphOnDisk(path, n_docs, beta, pcc_of, order, pcc_indptr, adj_indptr, links, degree, weight_sum, id_hash)


def load_pcc_rows(f: h5py.File, meta: GraphOnDisk, pccs: np.ndarray, extra: int = 0):
    """Read the owner rows of the given PCCs (sorted PCC ids) from disk straight into one buffer
    (``extra`` free entries left at its end).  Runs of consecutive PCCs are contiguous ranges of
    the edge datasets; ranges less than READ_GAP entries apart are read as one (the gap is read
    and ignored), so a component spread over many PCCs costs few reads.
    Returns (positions int64 (m,) in storage order, row_start int64 (m,) into the buffer, row_len
    int64 (m,), buffer int32); only adj_indices is read (the update needs no weights: degrees and
    fixed-point weight sums are stored per document)."""
    ds = f[GRAPH_KEY]["adj_indices"]
    pccs = np.asarray(pccs, np.int64)
    if len(pccs) == 0:
        e = np.zeros(0, np.int64)
        return e, e, e, np.empty(extra, np.int32)
    breaks = np.flatnonzero(np.diff(pccs) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(pccs)]])
    r0 = meta.pcc_indptr[pccs[starts]]
    r1 = meta.pcc_indptr[pccs[ends - 1] + 1]
    lengths = r1 - r0
    positions = np.repeat(r1 - np.cumsum(lengths), lengths) + np.arange(int(lengths.sum()))
    row_len = meta.adj_indptr[positions + 1] - meta.adj_indptr[positions]
    # read ranges: runs closer than READ_GAP entries are merged
    e0, e1 = meta.adj_indptr[r0], meta.adj_indptr[r1]
    new_range = np.concatenate([[True], e0[1:] - e1[:-1] > READ_GAP])
    range_of_run = np.cumsum(new_range) - 1
    read_lo = e0[new_range]
    read_hi = np.maximum.reduceat(e1, np.flatnonzero(new_range))
    buf_at = np.zeros(len(read_lo), np.int64)
    np.cumsum((read_hi - read_lo)[:-1], out=buf_at[1:])
    total = int((read_hi - read_lo).sum())
    run_of_pos = np.repeat(np.arange(len(r0)), lengths)
    rng = range_of_run[run_of_pos]
    row_start = buf_at[rng] + (meta.adj_indptr[positions] - read_lo[rng])
    buf = np.empty(total + extra, np.int32)
    if len(buf):  # first-touch page faults on every core, not inside HDF5's single-threaded copy
        kstar.touch_pages(buf.view(np.uint8), 4096)
    for lo, hi, at in zip(read_lo.tolist(), read_hi.tolist(), buf_at.tolist()):
        if hi > lo:
            ds.read_direct(buf, np.s_[lo:hi], np.s_[at:at + hi - lo])
    return positions, row_start, row_len, buf


def read_stored_graph(path: str) -> tuple[StarGraph, PCCs]:
    """The whole stored graph of a cluster file (for tests and inspection), in document order,
    with its stored degree and weight sums checked against the edges."""
    from ..io.corpus import corpus_shape

    n_docs = corpus_shape(path)[0]
    with h5py.File(path, "r") as f:
        meta = read_graph_meta(f, path, n_docs)
        idx = f[GRAPH_KEY]["adj_indices"][()].astype(np.int32)
        w = f[GRAPH_KEY]["adj_weights"][()].astype(np.float32)
    pos = np.empty(n_docs, np.int64)
    pos[meta.order] = np.arange(n_docs)
    start = meta.adj_indptr[pos]
    length = meta.adj_indptr[pos + 1] - start
    ptr, indices, weights = symmetric_from_owner(start, length, idx, w, np.arange(n_docs, dtype=np.int32),
                                                 _n_chunks(n_docs), True)
    degree, weight_sum = kstar.row_stats(ptr, weights)
    if not (np.array_equal(degree, meta.degree) and np.array_equal(weight_sum, meta.weight_sum)):
        raise FormatError(f"{path}: /{GRAPH_KEY}/degree or weight_sum disagree with the stored edges")
    graph = StarGraph(n_docs, ptr, indices, weights, degree, weight_sum)
    return graph, PCCs(meta.pcc_of, meta.links, meta.order, meta.pcc_indptr)



# ----------------------------------------------------------------------------- DClustR cover

def dclustr_lists(indptr, indices, relevance, is_center, in_list) -> tuple[int, int]:
    """DClustR's candidate list (paper section 2.2) on a graph whose current centers are C'.

    indptr int64 (n+1,), indices int32: symmetric adjacency; relevance float64 (n,); is_center
    bool (n,): C' on entry; the centers that must leave C' are set False.  in_list bool (n,)
    (all False on entry) receives L.  Returns (centers removed, vertices activated).

    Every rule reads C' as it was on entry and the relevances, so the result does not depend
    on the order in which vertices are visited.  best[] is a scatter over the rows of the centers
    (``star.star_reduce``); then one parallel pass over every row (one vertex per prange iteration, each
    writing only its own entries) and one over the centers' rows:
      best[u]   = largest relevance of a center of C' covering u (u itself or a neighbour), -1 if none;
      V+ scan   : v (not in C', relevance > 0) enters L if best[v] < 0 (a), or some neighbour u has
                  best[u] < relevance(v) ((b): best[u] = -1 < relevance(v); (c) otherwise);
      activated : u is activated when some neighbour v in V+ has relevance(v) > best[u];
      C' scan   : a neighbour u of a center c with relevance(u) > relevance(c) enters L (c is weak);
                  a weak c, or one with an activated neighbour, leaves C' and enters L when its
                  relevance is > 0.
    """
    centers = np.flatnonzero(is_center)
    best = star_reduce(indptr, indices, centers, relevance[centers], True, numba.get_num_threads())
    return _dclustr_lists(indptr, indices, relevance, is_center, in_list, best)


@numba.njit(parallel=True, cache=True)
def _dclustr_lists(indptr, indices, relevance, is_center, in_list, best):
    """dclustr_lists after best[]: the V+ scan, the activations and the C' scan (see there)."""
    n = indptr.shape[0] - 1
    active = np.zeros(n, np.bool_)
    for v in prange(n):  # one pass over every row: activation of v, V+ scan of v, v as a more relevant neighbour
        rv = relevance[v]
        in_vplus = (not is_center[v]) and rv > 0.0
        take = in_vplus and best[v] < 0.0  # (a)
        top = -1.0  # largest relevance of a V+ neighbour of v
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            ru = relevance[u]
            if is_center[u]:
                if rv > ru:  # u is a weak center of C' and v its more relevant neighbour
                    take = True
            elif ru > top and ru > 0.0:
                top = ru
            if in_vplus and best[u] < rv:  # (b) or (c)
                take = True
        active[v] = top > best[v]
        in_list[v] = take
    leave = np.zeros(n, np.bool_)
    for v in prange(n):  # C' scan (rows of centers only): weak, or an activated neighbour
        if is_center[v]:
            rv = relevance[v]
            for p in range(indptr[v], indptr[v + 1]):
                u = indices[p]
                if relevance[u] > rv or active[u]:
                    leave[v] = True
                    break
    removed = 0
    n_active = 0
    for v in range(n):
        if active[v]:
            n_active += 1
        if leave[v]:
            if relevance[v] > 0.0:
                in_list[v] = True
            is_center[v] = False
            removed += 1
    return removed, n_active


@numba.njit(parallel=True, cache=True)
def _covered_by(indptr, indices, is_center, covered):
    """covered[v] = v is a center or adjacent to one (one vertex per prange iteration, a gather)."""
    for v in prange(indptr.shape[0] - 1):
        c = is_center[v]
        p = indptr[v]
        while not c and p < indptr[v + 1]:
            c = is_center[indices[p]]
            p += 1
        covered[v] = c


def dclustr_cover(graph: StarGraph, relevance: np.ndarray, old_center: np.ndarray,
                  vertex_ids: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """Updated centers (bool (n,)) of the affected components after DClustR's cover update.

    old_center bool (n,): C'.  vertex_ids: global ids (ascending) for the tie rules.
    """
    n = graph.n
    is_center = np.asarray(old_center, bool).copy()
    in_list = np.zeros(n, bool)
    removed, n_active = dclustr_lists(graph.indptr, graph.indices, relevance, is_center, in_list)
    kept = int(is_center.sum())
    is_center |= graph.degree == 0  # isolated vertices are their own clusters
    covered = np.zeros(n, bool)
    _covered_by(graph.indptr, graph.indices, is_center, covered)
    order = candidate_order(np.where(in_list, relevance, 0.0), vertex_ids)
    added = cover_candidates(graph.indptr, graph.indices, order, is_center, covered)
    if not covered.all():
        raise AssertionError(f"DClustR cover left {int((~covered).sum())} vertices uncovered")
    stats = {"old_centers": int(np.asarray(old_center, bool).sum()), "old_centers_removed": int(removed),
             "old_centers_kept": kept, "activated": int(n_active), "candidates": int(in_list.sum()),
             "centers_added": int(added)}
    return is_center, stats


def dclustr_graph(graph: StarGraph, old_center: np.ndarray, device: str | Backend = "cpu",
                  geometry: RelevanceGeometry | None = None, vertex_ids: np.ndarray | None = None) -> StarResult:
    """DClustR's update of the clusters of ``graph`` (all of it taken as affected), given the
    previous centers C' (bool (n,)).  With no previous centers it is OClustR."""
    t0 = time.perf_counter()
    _, rel = compute_relevance(graph, device, geometry)
    t1 = time.perf_counter()
    is_center, stats = dclustr_cover(graph, rel, old_center, vertex_ids)
    t2 = time.perf_counter()
    n_initial = int(is_center.sum())
    linked_to = np.full(graph.n, -1, np.int32)
    order = degree_order(graph.degree, np.flatnonzero(is_center), vertex_ids)
    removed = improve_centers(graph.indptr, graph.indices, order, is_center, linked_to)
    centers = np.flatnonzero(is_center).astype(np.int32)
    t3 = time.perf_counter()
    membership = membership_matrix(graph, centers, linked_to)
    t4 = time.perf_counter()
    stats.update({"n_initial_clusters": n_initial, "n_removed": int(removed), "n_clusters": int(len(centers)),
                  "seconds_relevance": t1 - t0, "seconds_cover": t2 - t1, "seconds_improve": t3 - t2,
                  "seconds_membership": t4 - t3})
    return StarResult(graph.n, centers, membership, rel, linked_to, graph, stats)



# ----------------------------------------------------------------------------- reading a cluster file

@dataclass
class _Parts:
    """What the update reads of a corpus file (the cluster file, or the corpus to add), selectively:
    X (validated), obs columns, obsm, and the stored digest of the terms.  The document ids and the
    terms are decoded only when asked for (``ids`` / ``load_ids``, ``terms`` / ``load_terms``):
    decoding HDF5 variable-length strings is most of the cost of reading such a file."""

    path: str | None  # None: given in memory (a Corpus)
    X: sp.csr_matrix
    obs: dict
    obsm: dict
    terms_digest: str | None  # TERMS_DIGEST_ATTR of /var/_index (None: absent, or given in memory)
    doc_ids: np.ndarray | None = None  # None: not decoded
    terms: np.ndarray | None = None  # None: not decoded
    var: dict | None = None  # read with the terms
    uns: dict = field(default_factory=dict)
    decoded: list = field(default_factory=list)  # what load_ids / load_terms had to read afterwards

    @property
    def n_docs(self) -> int:
        return self.X.shape[0]

    @property
    def n_terms(self) -> int:
        return self.X.shape[1]

    def _index(self, group: str, n: int) -> np.ndarray:
        with cio._open(self.path) as f:
            values = cio._read_str_array(cio._index_dataset(f, group, n))
        self.decoded.append(group)
        return values

    def load_ids(self) -> np.ndarray:
        if self.doc_ids is None:
            self.doc_ids = self._index("obs", self.n_docs)
        return self.doc_ids

    def load_terms(self) -> np.ndarray:
        if self.terms is None:
            self.terms = self._index("var", self.n_terms)
        return self.terms

    @classmethod
    def of_corpus(cls, c: Corpus) -> "_Parts":
        return cls(None, c.X, dict(c.obs), dict(c.obsm), None, c.doc_ids, c.terms, dict(c.var), dict(c.uns))


def _read_corpus_parts(f, path: str, lap, ids: bool, terms: bool) -> _Parts:
    """X, obs (ids decoded when ``ids``), var (terms and columns when ``terms``, else only the
    stored digest), obsm (rows checked) of an open corpus file; ``lap(name)`` after each part."""
    if "X" not in f:
        raise FormatError(f"{path}: /X is missing (not a gputext corpus file)")
    X = cio._read_csr(f, "X")
    lap("X")
    doc_ids, obs = cio._read_dataframe(f, "obs", X.shape[0], index=ids)
    lap("obs")
    digest = cio.stored_terms_digest(f, X.shape[1])
    term_list, var = cio._read_dataframe(f, "var", X.shape[1]) if terms else (None, None)
    lap("var")
    obsm = {}
    for k in (f["obsm"].keys() if "obsm" in f else []):
        value = cio._read_element(f, f"obsm/{k}")
        if not isinstance(value, dict) and np.shape(value)[:1] != (X.shape[0],):
            raise FormatError(f"{path}: /obsm/{k} has {np.shape(value)[:1]} rows, expected n_docs = {X.shape[0]}")
        obsm[k] = value
    return _Parts(path, X, obs, obsm, digest, doc_ids, term_list, var)


def _read_added(path: str) -> _Parts:
    """The corpus to add, read selectively (its ids decoded: they are appended; its terms not:
    see _check_vocabulary)."""
    with cio._open(path) as f:
        if f.attrs.get("gputext-format") is None and f.attrs.get("encoding-type") is None:
            raise FormatError(f"{path}: has neither gputext-format nor anndata encoding-type attributes: "
                              "not a gputext corpus")
        return _read_corpus_parts(f, path, lambda name: None, ids=True, terms=False)


def _read_parts(path: str, times: dict | None = None, ids: bool = False, terms: bool = False):
    """The non-graph parts of a cluster file, read selectively (the graph's edges stay on disk;
    ids and terms decoded only when asked for).  ``times`` gets seconds_read_{X, obs, var,
    obsm_uns, graph_meta}.  Returns (_Parts, centers int64, membership CSC, GraphOnDisk)."""
    times = {} if times is None else times
    t = [time.perf_counter()]

    def lap(name):
        now = time.perf_counter()
        times[f"seconds_read_{name}"] = now - t[0]
        t[0] = now

    with cio._open(path) as f:
        old = _read_corpus_parts(f, path, lap, ids, terms)
        uns = {}
        if "uns" in f:
            for k in f["uns"].keys():
                if k != "gputext":
                    uns[k] = cio._read_element(f, f"uns/{k}")
            if "uns/gputext" in f:
                uns["gputext"] = {k: cio._read_element(f, f"uns/gputext/{k}") for k in f["uns/gputext"].keys() if k != "star"}
        old.uns = uns
        if STAR_KEY not in f or "centers" not in f[STAR_KEY]:
            raise InputError(f"{path}: /{STAR_KEY}/centers is missing: the file was not written by `gputext cluster star`")
        centers = f[f"{STAR_KEY}/centers"][()].astype(np.int64)
        lap("obsm_uns")
        meta = read_graph_meta(f, path, old.n_docs)
        lap("graph_meta")
    n_docs = old.n_docs
    if "clusters" not in old.obsm or not sp.issparse(old.obsm["clusters"]):
        raise InputError(f"{path}: /obsm/clusters is missing or not a CSR matrix")
    M = old.obsm.pop("clusters")
    if M.shape != (n_docs, len(centers)):
        raise FormatError(f"{path}: /obsm/clusters has shape {M.shape}, expected ({n_docs}, {len(centers)}) "
                          "(n_docs x number of centers)")
    if len(centers) and (centers.min() < 0 or centers.max() >= n_docs or np.any(np.diff(centers) <= 0)):
        raise FormatError(f"{path}: /{STAR_KEY}/centers must be ascending document indices in [0, {n_docs})")
    return old, centers, sp.csc_matrix(M), meta


def _check_vocabulary(old: _Parts, added: _Parts) -> str | None:
    """The added corpus must have the clustered corpus's terms.  Equal stored digests (both files
    written by gputext: TERMS_DIGEST_ATTR of /var/_index) settle it without decoding a term;
    otherwise the added terms are decoded and digested, and only if that does not match the
    stored digest are the old terms decoded and compared string by string (files without a
    digest, or a vocabulary that differs: the error).  Returns the digest to store on the old
    file's /var/_index when it has none (or a wrong one), else None."""
    if old.n_terms != added.n_terms:
        raise cio.vocabulary_error(old.n_terms, added.n_terms, "clustered", "added")
    if old.terms_digest is not None and added.terms_digest == old.terms_digest:
        return None
    added_terms = added.load_terms()
    if old.terms_digest is not None and cio.terms_digest(added_terms) == old.terms_digest:
        return None
    if not np.array_equal(old.load_terms(), added_terms):
        raise cio.vocabulary_error(old.n_terms, added.n_terms, "clustered", "added")
    digest = cio.terms_digest(old.terms)
    return digest if digest != old.terms_digest else None


def _check_new_ids(old: _Parts, old_hash: np.ndarray | None, new_ids: list, path: str) -> np.ndarray:
    """Refuse added ids that already exist in the cluster file; returns id_hashes(new_ids).  The
    stored hashes (uint64, one per old document) answer it when no added id's hash is among them;
    otherwise (or when the file has no hashes) the old ids are decoded and compared as strings."""
    new_hash = id_hashes(new_ids)
    if old_hash is not None and not np.isin(new_hash, old_hash).any():
        return new_hash
    clash = set(old.load_ids().tolist()) & set(new_ids)
    if clash:
        raise InputError(f"{len(clash)} added document ids already exist in {path} (e.g. {sorted(clash)[0]!r}): "
                         "document ids must stay unique")
    return new_hash


def _merge_obs(old: dict, new: dict, n_old: int, n_new: int) -> tuple[dict, list[str]]:
    """obs columns of the union: columns both have (categoricals get the union of categories)."""
    out, dropped = {}, []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a is None or b is None:
            dropped.append(key)
            continue
        if isinstance(a, Categorical) and isinstance(b, Categorical):
            cats = list(a.categories) + [c for c in b.categories if c not in set(a.categories)]
            where = {c: i for i, c in enumerate(cats)}
            remap = np.array([where[c] for c in b.categories] + [-1], np.int32)
            codes_b = remap[np.where(b.codes >= 0, b.codes, len(b.categories))]
            out[key] = Categorical(np.concatenate([a.codes, codes_b]).astype(np.int32), np.array(cats, dtype=object))
        elif not isinstance(a, Categorical) and not isinstance(b, Categorical) and np.asarray(a).dtype.kind == np.asarray(b).dtype.kind:
            out[key] = np.concatenate([np.asarray(a), np.asarray(b)])
        else:
            dropped.append(key)
    return out, dropped


# ----------------------------------------------------------------------------- the update

@dataclass
class UpdateReport:
    n_old: int
    n_new: int
    n_new_edges: int
    components_total: int
    components_touched: int
    pccs_total: int
    pccs_loaded: int
    vertices_loaded: int
    entries_loaded: int
    n_clusters: int
    stats: dict = field(default_factory=dict)
    # which strings the update decoded (old_ids, old_terms, added_terms: bool); not written to the file
    decoded: dict = field(default_factory=dict)

    def line(self) -> str:
        return (f"added {self.n_new} documents to {self.n_old} ({self.n_new_edges} new edges); touched "
                f"{self.components_touched} of {self.components_total} connected components "
                f"({self.pccs_loaded} of {self.pccs_total} old PCCs, {self.vertices_loaded} vertices loaded); "
                f"{self.n_clusters} clusters")



# ----------------------------------------------------------------------------- the update

@numba.njit(parallel=True, cache=True)
def _owner_rows_in_order(n_old, n_new, o_old, o_new, o_w, a, b, w):
    """Owner rows from the engine's ordered output, or (False, ...) when it is not in order.

    In order means: new-old edges by ascending new vertex, old ids strictly ascending within one;
    new-new edges (a < b) by ascending a, b strictly ascending within one.  Row v is then its old
    neighbours (a contiguous run of the new-old edges) followed by its later new neighbours (a
    run of the new-new edges); old ids < new ids, so rows are ascending.  The order checks are
    parallel reductions, the run bounds binary searches, then one row per prange iteration
    copies its two runs."""
    n_no = o_new.shape[0]
    n_nn = a.shape[0]
    bad = 0
    for e in prange(n_no):
        if o_new[e] < n_old or o_new[e] >= n_old + n_new or o_old[e] < 0 or o_old[e] >= n_old:
            bad += 1
        elif e > 0 and (o_new[e] < o_new[e - 1] or (o_new[e] == o_new[e - 1] and o_old[e] <= o_old[e - 1])):
            bad += 1
    for e in prange(n_nn):
        if a[e] < n_old or b[e] <= a[e] or b[e] >= n_old + n_new:
            bad += 1
        elif e > 0 and (a[e] < a[e - 1] or (a[e] == a[e - 1] and b[e] <= b[e - 1])):
            bad += 1
    if bad > 0:
        return False, np.zeros(1, np.int64), np.empty(0, np.int32), np.empty(0, np.float32)
    keys = np.arange(n_old, n_old + n_new + 1).astype(o_new.dtype)
    s_no = np.searchsorted(o_new, keys)  # run of row r: [s_no[r], s_no[r+1])
    s_nn = np.searchsorted(a, keys)
    ptr = np.zeros(n_new + 1, np.int64)
    for r in range(n_new):
        ptr[r + 1] = ptr[r] + (s_no[r + 1] - s_no[r]) + (s_nn[r + 1] - s_nn[r])
    idx = np.empty(ptr[n_new], np.int32)
    val = np.empty(ptr[n_new], np.float32)
    for r in prange(n_new):
        d = ptr[r]
        for e in range(s_no[r], s_no[r + 1]):  # old neighbours first ...
            idx[d] = o_old[e]
            val[d] = o_w[e]
            d += 1
        for e in range(s_nn[r], s_nn[r + 1]):  # ... then the later new ones
            idx[d] = b[e]
            val[d] = w[e]
            d += 1
    return True, ptr, idx, val


def _new_owner_rows(n_old: int, n_new: int, new_old, new_new):
    """Owner rows of the new vertices (vertex order, global ids, ascending within a row): each
    new vertex owns its edges to old vertices and to the new vertices after it (the neighbours
    CUDA-DClus examines when it processes the vertex: Suc_v U (V \\ M)).
    Returns (ptr int64 (n_new+1,), indices int32, weights float32)."""
    o_old, o_new, o_w = (np.ascontiguousarray(x, t) for x, t in zip(new_old, (np.int32, np.int32, np.float32)))
    a, b, w = (np.ascontiguousarray(x, t) for x, t in zip(new_new, (np.int32, np.int32, np.float32)))
    ok, ptr, idx, val = _owner_rows_in_order(n_old, n_new, o_old, o_new, o_w, a, b, w)
    if ok:
        return ptr, idx, val
    # any order (tests feed hand-made edges): sort by (owner, neighbour)
    lo = np.minimum(a, b).astype(np.int64)
    hi = np.maximum(a, b).astype(np.int64)
    rows = np.concatenate([o_new.astype(np.int64), lo]) - n_old
    cols = np.concatenate([o_old.astype(np.int64), hi])
    vals = np.concatenate([o_w, w])
    if len(rows) and (rows.min() < 0 or rows.max() >= n_new or cols.min() < 0 or cols.max() >= n_old + n_new
                      or np.any(o_old >= n_old)):
        raise AssertionError("an added edge does not join a new document to an old or a later new one")
    key = rows * (n_old + n_new) + cols
    order = np.argsort(key, kind="stable")
    rows, cols, vals, key = rows[order], cols[order], vals[order], key[order]
    if len(key) > 1 and np.any(key[1:] == key[:-1]):
        raise AssertionError("an added edge is given twice")
    ptr = np.zeros(n_new + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_new), out=ptr[1:])
    return ptr, cols.astype(np.int32), vals


def _local_lookup(vertices: np.ndarray, n_total: int) -> np.ndarray:
    """Dense global -> local id table (int32, -1 elsewhere)."""
    table = np.full(n_total, -1, np.int32)
    table[vertices] = np.arange(len(vertices), dtype=np.int32)
    return table


def update(clusters_path: str, added: Corpus | str, output: str, device: str | Backend = "auto",
           beta: float | None = None, batch_size: int | None = None, quiet: bool = True, engine_geometry=None,
           compression: str | None = "gzip", edges=None, write: str = "append") -> UpdateReport:
    """DClustR / CUDA-DClus: add the documents of ``added`` to the clustering in ``clusters_path``
    (a file written by ``cluster star``) and write the updated clustering of the union to
    ``output`` (may equal clusters_path: the file is replaced atomically).  Returns the report
    (components touched, PCCs loaded, seconds per stage).  ``edges`` = (new_old, new_new) as
    returned by ``graph.score_additions`` replaces the scoring (tests feed the paper's hand-made
    similarities).  ``added``: a Corpus, or the path of a corpus file (read selectively: its
    terms are not decoded when its stored vocabulary digest equals the cluster file's; what the
    CLI passes).  The cluster file's document ids and terms are decoded only when needed (see
    _check_vocabulary and _check_new_ids; ``report.decoded`` lists what was).

    Writing (``write="append"``): with ``output`` the same file as ``clusters_path`` the file is
    updated in place (``append_update``: new rows appended to X and to the edge datasets, the
    small arrays rewritten under temporary names and swapped in; any exception rolls the file back
    to its old contents); with another path the old file is copied at OS speed (shutil.copyfile) to
    a temporary file next to ``output``, appended to the same way, and renamed.
    ``write="new"`` writes the whole union into a new file (the writer before 2026-11-25; tests
    compare the two)."""
    if write not in ("append", "new"):
        raise ValueError(f"write must be 'append' or 'new', not {write!r}")
    if clusters_path == "-":
        raise InputError("--update needs a cluster file on disk (random access to its graph), not stdin")
    backend = device if isinstance(device, Backend) else resolve(device)
    t0 = time.perf_counter()
    added = _read_added(added) if isinstance(added, str) else _Parts.of_corpus(added)
    t_added = time.perf_counter()
    read_times: dict = {"seconds_read_added": t_added - t0}
    # the new-file writer rewrites the union's ids and terms: it needs them decoded
    old, old_centers, old_M, meta = _read_parts(clusters_path, read_times, ids=write == "new", terms=write == "new")
    t_parts = time.perf_counter()
    stored_beta = check_beta(meta.beta)
    if beta is not None and abs(check_beta(beta) - stored_beta) > 0:
        raise InputError(f"--beta {beta} differs from the beta {stored_beta} the clusters in {clusters_path} were built "
                         "with: an update keeps the original threshold (leave --beta out)")
    store_digest = _check_vocabulary(old, added)
    n_old, n_new = old.n_docs, added.n_docs
    if n_new == 0:
        raise InputError("the corpus to add has zero documents")
    new_ids = cio.str_values(added.doc_ids)
    new_hash = _check_new_ids(old, meta.doc_id_hash, new_ids, clusters_path)
    # the union's id hashes (a file without stored hashes had its ids decoded by the check)
    id_hash = np.concatenate([meta.doc_id_hash if meta.doc_id_hash is not None else id_hashes(old.load_ids()), new_hash])
    n_total = n_old + n_new
    t_read = time.perf_counter()

    # 1. score only the new documents; 2. their owner rows (what CUDA-DClus examines)
    if edges is None:
        up = addition_rows(old.X, added.X, stored_beta, backend, batch_size, quiet, engine_geometry)
        t_score = time.perf_counter()
        own_ptr, own_idx, own_w = kstar.addition_owner_rows(up[0], up[1], up[2], n_new, n_old)
        up = None
    else:
        t_score = time.perf_counter()
        own_ptr, own_idx, own_w = _new_owner_rows(n_old, n_new, *edges)
    n_new_edges = len(own_idx)

    # PCCs of the new vertices
    pcc_of = np.concatenate([meta.pcc_of, np.full(n_new, -1, np.int32)])
    parent = np.empty(meta.n_pcc + n_new, np.int32)
    parent[:meta.n_pcc] = np.arange(meta.n_pcc, dtype=np.int32)
    _union_links(parent, meta.links)
    n_pcc, new_links = assign_pcc(own_ptr, own_idx, pcc_of, n_old, meta.n_pcc, parent)
    links = sort_links(np.concatenate([meta.links, new_links]))
    # degree and fixed-point weight sums of the union (old vertices gain only the new edges)
    degree = np.concatenate([meta.degree, np.zeros(n_new, np.int32)])
    weight_sum = np.concatenate([meta.weight_sum, np.zeros(n_new, np.int64)])
    _add_owner_stats(own_ptr, own_idx, own_w, n_old, degree, weight_sum, max(1, numba.get_num_threads()))

    # 3. affected connected components and their old PCCs
    comp = components_of_pccs(n_pcc, links)
    affected_comp = np.zeros(n_pcc, bool)
    affected_comp[np.unique(comp[meta.n_pcc:])] = True
    affected_pcc = affected_comp[comp]
    old_affected = np.flatnonzero(affected_pcc[:meta.n_pcc])
    components_total = int(len(np.unique(comp)))
    components_touched = int(affected_comp.sum())
    t_pcc = time.perf_counter()
    with h5py.File(clusters_path, "r") as f:
        positions, row_start, row_len, buf = load_pcc_rows(f, meta, old_affected, extra=len(own_idx))
    n_loaded_entries = int(row_len.sum())
    tail = len(buf) - len(own_idx)
    buf[tail:] = own_idx  # the new owner rows after the loaded ones: one index array
    t_load = time.perf_counter()

    # the local graph of the affected components (vertices in ascending global id)
    old_vertices = meta.order[positions].astype(np.int64)
    vertices = np.concatenate([np.sort(old_vertices), np.arange(n_old, n_total, dtype=np.int64)])
    local_of = _local_lookup(vertices, n_total)
    m = len(vertices)
    start = np.empty(m, np.int64)
    length = np.empty(m, np.int64)
    lo = local_of[old_vertices]
    start[lo] = row_start
    length[lo] = row_len
    start[m - n_new:] = tail + own_ptr[:-1]
    length[m - n_new:] = np.diff(own_ptr)
    indptr, indices, _ = symmetric_from_owner(start, length, buf, np.empty(0, np.float32), local_of, _n_chunks(m), False)
    local_degree = np.diff(indptr).astype(np.int32)
    if not np.array_equal(local_degree, degree[vertices]):
        raise AssertionError("the loaded components disagree with the stored degrees")
    # weights are not needed: relevance reads degree and the fixed-point sums, the cover the structure
    local = StarGraph(m, indptr, indices, np.empty(0, np.float32), local_degree, weight_sum[vertices])
    t_local = time.perf_counter()

    # 4-6. relevance, DClustR cover update and improvement on the affected components
    old_center = np.zeros(m, bool)
    in_local = old_centers[local_of[old_centers] >= 0] if len(old_centers) else old_centers
    old_center[local_of[in_local]] = True
    # relevance on the host: the local graph is there, and shipping its adjacency to the device
    # costs more than the host's parallel pass over it (measured: docs/star.md, "DClustR update")
    res = dclustr_graph(local, old_center, "cpu", vertex_ids=vertices)
    t_cluster = time.perf_counter()

    # clusters of the union: untouched old clusters + the affected components' new ones
    keep = local_of[old_centers] < 0 if len(old_centers) else np.zeros(0, bool)
    kept_cols = np.flatnonzero(keep)
    kept_centers = old_centers[kept_cols]
    kept = old_M[:, kept_cols].tocoo()
    new_centers_global = vertices[res.centers]
    new_coo = res.membership.tocoo()
    centers = np.concatenate([kept_centers, new_centers_global]).astype(np.int64)
    corder = np.argsort(centers, kind="stable")
    rank = np.empty(len(centers), np.int64)
    rank[corder] = np.arange(len(centers))
    docs = np.concatenate([kept.row.astype(np.int64), vertices[new_coo.row]])
    cols = np.concatenate([rank[kept.col], rank[len(kept_centers) + new_coo.col]])
    M = sp.csr_matrix((np.ones(len(docs), np.float32), (docs, cols)), shape=(n_total, len(centers)))
    M.sort_indices()
    centers = centers[corder].astype(np.int32)
    t_members = time.perf_counter()

    report = UpdateReport(n_old, n_new, n_new_edges, components_total, components_touched, meta.n_pcc,
                          int(len(old_affected)), int(len(old_vertices)), n_loaded_entries, int(len(centers)))
    report.stats = {**res.stats, **read_times, "seconds_read_checks": t_read - t_parts,
                    "seconds_read": t_read - t_added, "seconds_scoring": t_score - t_read,
                    # load = PCC assignment + reading rows, cluster = local graph + relevance + cover +
                    # improvement (the same spans as before the finer stages were added)
                    "seconds_pcc": t_pcc - t_score, "seconds_load_rows": t_load - t_pcc, "seconds_load": t_load - t_score,
                    "seconds_local_graph": t_local - t_load, "seconds_cluster": t_cluster - t_load,
                    "seconds_union_clusters": t_members - t_cluster,
                    "affected_vertices": int(m), "affected_entries": int(indptr[-1]), "backend": backend.name,
                    "graph_format": GRAPH_FORMAT_VERSION}

    # 7. the output file: the union corpus, then the graph (old edges copied raw, new ones appended)
    obs, dropped = _merge_obs(old.obs, added.obs, n_old, n_new)
    if dropped and not quiet:
        info(f"obs columns not in both corpora (dropped from the output): {', '.join(dropped)}", quiet)
    obsm = {"clusters": M}
    for key in set(old.obsm) & set(added.obsm):
        a, b = old.obsm[key], added.obsm[key]
        if sp.issparse(a) and sp.issparse(b) and a.shape[1] == b.shape[1]:
            obsm[key] = sp.vstack([a, b]).tocsr()
        elif not sp.issparse(a) and not sp.issparse(b) and np.ndim(a) == np.ndim(b) and np.shape(a)[1:] == np.shape(b)[1:]:
            obsm[key] = np.concatenate([a, b])
    uns = dict(old.uns)
    gp = dict(uns.get("gputext", {}))
    prev = gp.get("star_updates", 0)
    t_write0 = time.perf_counter()
    stats_out = {k: v for k, v in report.stats.items() if isinstance(v, (int, float, str))}
    gp["star"] = star_params(stored_beta, backend.name, centers, extra={
        "update": {k: v for k, v in report.__dict__.items() if k not in ("stats", "decoded")} | stats_out})
    gp["star_updates"] = int(prev) + 1
    uns["gputext"] = gp
    X_add = canonical_csr(added.X)
    if write == "new":
        X = sp.vstack([old.X, X_add]).tocsr()
        doc_ids = np.concatenate([old.doc_ids, np.asarray(new_ids, dtype=object)])
        corpus = Corpus(X, doc_ids, old.terms, obs, dict(old.var), obsm, uns)
        with atomic_output(output) as tmp:
            write_corpus(corpus, tmp, compression=compression)
            t_write1 = time.perf_counter()
            with h5py.File(clusters_path, "r") as src, h5py.File(tmp, "a") as dst:
                _write_updated_graph(src, dst, meta, pcc_of, n_pcc, links, degree, weight_sum, own_ptr, own_idx, own_w,
                                     stored_beta, id_hash)
        t_end = time.perf_counter()
        report.stats["seconds_write_corpus"] = t_write1 - t_write0
        report.stats["seconds_write_graph"] = t_end - t_write1
    else:
        parts = AppendParts(old.X, X_add, old.doc_ids, new_ids, obs, obsm, uns, meta, pcc_of, n_pcc, links, degree,
                            weight_sum, own_ptr, own_idx, own_w, stored_beta, compression, id_hash, store_digest)
        wstats = {}
        if output != "-" and os.path.exists(output) and os.path.samefile(output, clusters_path):
            append_update(clusters_path, parts, wstats)
        else:
            with atomic_output(output) as tmp:
                tc = time.perf_counter()
                shutil.copyfile(clusters_path, tmp)  # sendfile / copy_file_range (reflink where the filesystem has it)
                wstats["seconds_copy"] = time.perf_counter() - tc
                append_update(tmp, parts, wstats)
        t_end = time.perf_counter()
        report.stats.update(wstats)
    report.stats["seconds_write"] = t_end - t_cluster
    report.stats["seconds_total"] = t_end - t0
    report.decoded = {"old_ids": old.doc_ids is not None, "old_terms": old.terms is not None,
                      "added_terms": added.path is not None and added.terms is not None}
    return report


def _updated_layout(meta: GraphOnDisk, pcc_of: np.ndarray, n_pcc: int, own_ptr, own_idx, own_w):
    """(order, pcc_indptr, adj_indptr, tail indices, tail weights) of the union's graph: the old
    positions and rows unchanged, the new vertices' owner rows grouped by their new PCCs after them."""
    n_old = meta.n_docs
    order, pcc_indptr = pcc_layout(pcc_of, n_pcc)
    if not np.array_equal(order[:n_old], meta.order):
        raise AssertionError("old PCCs changed their vertices")
    new_rows = order[n_old:].astype(np.int64) - n_old
    ptr, idx, w = gather_rows(own_ptr, own_idx, own_w, new_rows)
    adj_indptr = np.concatenate([meta.adj_indptr, meta.adj_indptr[-1] + ptr[1:]])
    return order, pcc_indptr, adj_indptr, idx, w


def _write_updated_graph(src: h5py.File, dst: h5py.File, meta: GraphOnDisk, pcc_of: np.ndarray, n_pcc: int,
                         links: np.ndarray, degree: np.ndarray, weight_sum: np.ndarray, own_ptr: np.ndarray,
                         own_idx: np.ndarray, own_w: np.ndarray, beta: float, id_hash: np.ndarray) -> None:
    """The graph of the union into a new file (``update(write="new")``).  Old PCCs never gain
    vertices and every new edge is owned by a new vertex, which sits in a new PCC: the stored rows
    of the old positions are unchanged, so the two edge datasets are copied raw (H5Ocopy, nothing
    decoded) and the new vertices' owner rows, grouped by their new PCCs, are appended.  The small
    arrays are rewritten."""
    order, pcc_indptr, adj_indptr, idx, w = _updated_layout(meta, pcc_of, n_pcc, own_ptr, own_idx, own_w)
    g = _graph_group(dst)
    _write_small(g, pcc_of, order, pcc_indptr, adj_indptr, degree, weight_sum, links, n_pcc, beta, id_hash)
    e_old = int(meta.adj_indptr[-1])
    for name, values in (("adj_indices", idx), ("adj_weights", w)):
        s = src[GRAPH_KEY][name]
        if _growable(s):
            src.copy(s, g, name)
            _append_tail(g[name], values, [])  # a new file: nothing to undo
        else:  # not growable: copy through memory
            _growable_copy(g, name, s, e_old, values)


def _growable_copy(g: h5py.Group, name: str, src: h5py.Dataset, n_old: int, tail: np.ndarray) -> None:
    """g[name] = src[:n_old] then ``tail``, as a growable dataset; the old part is copied
    through memory in pieces of 2^24 entries (a fixed-size src cannot be resized or H5Ocopy'd
    into a growable one)."""
    ds = _dataset(g, name, shape=(n_old + len(tail),), dtype=src.dtype, growable=True)
    step = 1 << 24
    for a in range(0, n_old, step):
        ds[a:min(n_old, a + step)] = src[a:min(n_old, a + step)]
    if len(tail):
        ds[n_old:] = tail



# ----------------------------------------------------------------------------- appending in place

TMP_PREFIX = "__gputext_update_"  # temporary names at the file's root during an in-place append


@dataclass
class AppendParts:
    """Everything an in-place append writes, computed (and validated) before the first write."""

    X_old: sp.csr_matrix  # only used when the stored X is not growable (rewritten once)
    X_add: sp.csr_matrix  # canonical rows of the added documents
    old_ids: np.ndarray | None  # None: not decoded (read here only if the stored ids are not growable)
    new_ids: list  # the added documents' ids (str)
    obs: dict
    obsm: dict
    uns: dict
    meta: GraphOnDisk
    pcc_of: np.ndarray
    n_pcc: int
    links: np.ndarray
    degree: np.ndarray
    weight_sum: np.ndarray
    own_ptr: np.ndarray
    own_idx: np.ndarray
    own_w: np.ndarray
    beta: float
    compression: str | None
    id_hash: np.ndarray  # uint64 (n_total,): id_hashes of the union's ids
    terms_digest: str | None  # stored on /var/_index when not None (a file without the digest)


def _step(name: str) -> None:
    """A named point of the in-place append (tests replace it to inject a failure there)."""


def _growable(ds) -> bool:
    return isinstance(ds, h5py.Dataset) and ds.chunks is not None and ds.maxshape == (None,)


def _append_tail(ds: h5py.Dataset, values: np.ndarray, undo: list) -> None:
    """Resize a growable 1-d dataset and write ``values`` after its old end; undo resizes back."""
    n0 = ds.shape[0]
    undo.append(lambda: ds.resize((n0,)))
    ds.resize((n0 + len(values),))
    if len(values):
        ds.write_direct(np.ascontiguousarray(values, ds.dtype), np.s_[0:len(values)], np.s_[n0:n0 + len(values)])


def _drop(f: h5py.File, key: str) -> None:
    if key in f:
        del f[key]


def _move(f: h5py.File, src: str, dst: str, undo: list) -> None:
    f.move(src, dst)
    undo.append(lambda: f.move(dst, src))


def _set_attr(obj, name: str, value, undo: list) -> None:
    """obj.attrs[name] = value; undo restores the old value (or removes the attribute)."""
    had = name in obj.attrs
    before = obj.attrs[name] if had else None
    undo.append(lambda: obj.attrs.__setitem__(name, before) if had else obj.attrs.__delitem__(name))
    obj.attrs[name] = value


def _write_obs(f: h5py.File, p: AppendParts, n_old: int, undo: list) -> None:
    """The union's obs under TMP_PREFIX + "obs": the columns rewritten; the ids appended to the
    stored growable /obs/_index, which is then moved into the new group (the old ids are never
    decoded), or, when the stored ids are not growable (files written before), all ids rewritten
    once as a growable dataset."""
    ds = cio._index_dataset(f, "obs", n_old)
    if ds.name == "/obs/_index" and _growable(ds) and h5py.check_string_dtype(ds.dtype) is not None:
        cio._write_dataframe(f, TMP_PREFIX + "obs", None, p.obs)
        undo.append(lambda: ds.resize((n_old,)))
        ds.resize((n_old + len(p.new_ids),))
        if len(p.new_ids):
            values = np.empty(len(p.new_ids), dtype=object)
            values[:] = p.new_ids
            ds[n_old:] = values
        _step("obs/_index")
        _move(f, "obs/_index", TMP_PREFIX + "obs/_index", undo)
        return
    old_ids = p.old_ids if p.old_ids is not None else cio._read_str_array(ds)
    cio._write_dataframe(f, TMP_PREFIX + "obs", np.concatenate([old_ids, np.asarray(p.new_ids, dtype=object)]), p.obs,
                         index_growable=True)


def append_update(path: str, p: AppendParts, stats: dict) -> None:
    """Write an update into the cluster file ``path`` in place.

    Appended (resize + write of the new tail only): /X's data, indices and indptr (when the
    stored X is growable; an older file's fixed-size X is rewritten once as growable datasets),
    /obs/_index (the ids; likewise rewritten once when not growable) and the graph's adj_indices /
    adj_weights.  Rewritten: the per-document and per-PCC arrays (obs columns, obsm, uns with the
    graph's small arrays), first under temporary names, then swapped in by moving links (the
    appended ids and edge datasets are moved into the new groups); the old groups are deleted
    last.  A file without the vocabulary digest gets it on /var/_index (``p.terms_digest``).
    Every step registers its undo; on any exception they run in reverse, so the file's contents
    equal the old ones (the appended datasets are resized back).  A process killed mid-append (SIGKILL, power loss) cannot roll
    back and HDF5 keeps no journal: the file may be left damaged.  Updating into another output
    path (a copy, renamed at the end) is the crash-safe form.
    ``stats`` gets seconds_write_corpus (X, obs, obsm, uns), seconds_write_graph, seconds_swap."""
    order, pcc_indptr, adj_indptr, tail_idx, tail_w = _updated_layout(p.meta, p.pcc_of, p.n_pcc, p.own_ptr,
                                                                      p.own_idx, p.own_w)
    n_old, n_total = p.meta.n_docs, len(p.pcc_of)
    try:
        f = h5py.File(path, "r+")
    except OSError as exc:
        raise InputError(f"{path}: cannot open for writing: {str(exc).splitlines()[0]}") from None
    undo: list = []
    delete_after: list[str] = []
    with f:
        for k in [k for k in f.keys() if k.startswith(TMP_PREFIX)]:  # left by a killed process
            del f[k]
        try:
            t0 = time.perf_counter()
            _step("start")
            X = f["X"]
            names = {}
            if all(_growable(X.get(k)) for k in ("data", "indices", "indptr")) and X["indptr"].shape[0] == n_old + 1:
                nnz0 = int(X["indptr"][n_old])
                if X["data"].shape[0] != nnz0 or X["indices"].shape[0] != nnz0:
                    raise FormatError(f"{path}: /X/data and /X/indices must have indptr[-1] = {nnz0} entries")
                shape0 = np.array(X.attrs["shape"])
                undo.append(lambda: X.attrs.__setitem__("shape", shape0))
                X.attrs["shape"] = np.array([n_total, shape0[1]], dtype=np.int64)
                _append_tail(X["data"], p.X_add.data, undo)
                _step("X/data")
                _append_tail(X["indices"], p.X_add.indices, undo)
                _append_tail(X["indptr"], p.X_add.indptr[1:].astype(np.int64) + nnz0, undo)
                _step("X")
            else:  # an X written before growable datasets: rewritten once
                union = sp.vstack([p.X_old, p.X_add]).tocsr()
                undo.append(lambda: _drop(f, TMP_PREFIX + "X"))
                cio._write_csr(f, TMP_PREFIX + "X", union, p.compression, growable=True)
                names["X"] = TMP_PREFIX + "X"
            for key in ("obs", "obsm", "uns"):
                undo.append(lambda key=key: _drop(f, TMP_PREFIX + key))
            _write_obs(f, p, n_old, undo)
            cio._write_dict(f, TMP_PREFIX + "obsm", p.obsm)
            cio._write_dict(f, TMP_PREFIX + "uns", cio.uns_for_file(p.uns))
            names.update(obs=TMP_PREFIX + "obs", obsm=TMP_PREFIX + "obsm", uns=TMP_PREFIX + "uns")
            _step("corpus")
            t1 = time.perf_counter()
            new_graph = TMP_PREFIX + GRAPH_KEY
            g = _graph_group(f, new_graph)
            _write_small(g, p.pcc_of, order, pcc_indptr, adj_indptr, p.degree, p.weight_sum, p.links, p.n_pcc, p.beta,
                         p.id_hash)
            e_old = int(p.meta.adj_indptr[-1])
            for name, values in (("adj_indices", tail_idx), ("adj_weights", tail_w)):
                s = f[GRAPH_KEY][name]
                if _growable(s):
                    _append_tail(s, values, undo)
                    _step(name)
                    _move(f, f"{GRAPH_KEY}/{name}", f"{new_graph}/{name}", undo)
                else:  # not growable: copied through memory into a growable dataset
                    _growable_copy(g, name, s, e_old, values)
            _step("graph")
            t2 = time.perf_counter()
            if p.terms_digest is not None:
                _set_attr(cio._index_dataset(f, "var", p.X_add.shape[1]), cio.TERMS_DIGEST_ATTR, p.terms_digest, undo)
            for key, tmp_key in names.items():  # swap: old -> parked, new -> in place
                _move(f, key, TMP_PREFIX + "old_" + key, undo)
                _step("park " + key)
                _move(f, tmp_key, key, undo)
                delete_after.append(TMP_PREFIX + "old_" + key)
            _step("swapped")
        except BaseException:
            for fn in reversed(undo):
                try:
                    fn()
                except Exception:  # keep undoing the rest
                    pass
            raise
        for key in delete_after:  # after this point the new state is complete
            del f[key]
    stats["seconds_write_corpus"] = t1 - t0
    stats["seconds_write_graph"] = t2 - t1
    stats["seconds_swap"] = time.perf_counter() - t2
    stats["write_mode"] = "append"


# ----------------------------------------------------------------------------- writing a fresh result

def star_params(beta: float, backend: str, centers: np.ndarray, extra: dict | None = None) -> dict:
    return {"centers": np.asarray(centers, np.int32), "beta": float(beta), "metric": "cosine",
            "algorithm": "OClustR/DClustR (CUDA-OClus, CUDA-DClus)", "backend": backend,
            "n_clusters": int(len(centers)), **(extra or {})}


def write_result(corpus: Corpus, result: StarResult, output: str, beta: float, backend: str,
                 compression: str | None = "gzip") -> PCCs:
    """Write the clusters of ``corpus`` (a result file that is also a corpus file: X, doc ids,
    obs and var of the input) with the graph as PCCs, atomically.  Returns the PCCs."""
    if result.graph is None:
        raise AssertionError("write_result needs the graph")
    pccs = build_pccs(result.graph)
    obsm = {k: v for k, v in corpus.obsm.items() if k != "clusters"}
    obsm["clusters"] = result.membership
    uns = {k: v for k, v in corpus.uns.items()}
    gp = {k: v for k, v in uns.get("gputext", {}).items() if k not in ("star", "star_updates")}
    stats = {k: v for k, v in result.stats.items() if isinstance(v, (int, float, str))}
    gp["star"] = star_params(beta, backend, result.centers, {"stats": stats})
    uns["gputext"] = gp
    out = Corpus(corpus.X, corpus.doc_ids, corpus.terms, dict(corpus.obs), dict(corpus.var), obsm, uns)
    with atomic_output(output) as tmp:
        write_corpus(out, tmp, compression=compression, growable=True)  # X, ids growable: updates append rows
        with h5py.File(tmp, "a") as f:
            write_graph(f, result.graph, pccs, beta, id_hashes(out.doc_ids))
    return pccs


