"""A shard of the index on a CUDA device (DeviceShard) and its build.

The lists of a shard are sorted by document (Geometry.sorted_postings, the default), built on
the device from the uploaded rows (sorted_postings_device, build_sorted_lists: rows in chunks of
about equal postings, a block a chunk; the host's arrays bit for bit), or the host's build
uploaded where the Index holds it already, in the simulator, and where the build's transient
memory does not fit; Geometry.sorted_postings=False builds them with atomics in any order
(shard_from_device). plan_shards cuts an index too large for INDEX_SHARE of the free memory
into row ranges (gputext.engine.cuda_backend streams them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..device.launch import blocks
from ..device.memory import Workspace, resources, zero
from ..io.corpus import csr_arrays, csr_rows
from ..kernels import postings, scan, scoring
from .index import Index, Postings

INDEX_SHARE = 0.45
BLOCK_TABLE_SHARE = 1 / 16  # a shard's block-starts table (4 B an entry) within this share of its postings' bytes


@dataclass
class DeviceShard:
    doc_lo: int
    doc_hi: int
    term_ptr: object  # device int64 (n_terms+1,)
    post_doc: object  # device int32 (nnz,)
    post_w: object  # device float32 (nnz,)
    d_sq: object  # device float64 (n_docs,)
    d_l1: object  # device float64 (n_docs,)
    df: np.ndarray  # host int64 (n_terms,): posting list lengths, for the batch offsets
    nbytes: int
    norm_terms: dict = None  # metric -> device float64 (n_docs,), made on first use
    work: Workspace = field(default_factory=Workspace)  # buffers reused across batches and searches
    rows_dirty: bool = False  # score rows not yet re-zeroed by a selector
    plans: dict = field(default_factory=dict)  # TopkPlan per (k, metric, rows, geometry)
    res: object = field(default_factory=resources)  # the Resources of the device that holds the shard
    sorted_lists: bool = False  # every posting list sorted by document (Geometry.sorted_postings): the shared accumulation's searches need it
    block_tables: dict = None  # documents a block -> (brow, bstart) device arrays (block_table), made on first use

    def buffer(self, name: str, shape: tuple, dtype, zeroed: bool = False):
        """A device array of ``shape`` from the shard's workspace (gputext.device.Workspace)."""
        return self.work.get(name, shape, dtype, zeroed=zeroed)

    def release(self, larger_than: int = 1 << 30) -> None:
        """Free workspace buffers above a size (score rows of big batches) once a search ends."""
        before = {name: arr for name, (arr, _) in self.work.buffers.items()}
        self.work.release(larger_than)
        if any(name not in self.work.buffers for name in before):
            self.plans.clear()  # their launches point into the released buffers

    def dn(self, metric: int, block: int):
        """The documents' norm term for the metric, on the device (kernel doc_norm_terms)."""
        if self.norm_terms is None:
            self.norm_terms = {}
        if metric not in self.norm_terms:
            from numba import cuda
            out = cuda.device_array(max(self.n_docs, 1), np.float64)
            postings.doc_norm_terms[blocks(self.n_docs, block), block](self.d_sq, self.d_l1, metric, out)
            self.norm_terms[metric] = out
        return self.norm_terms[metric]

    def block_table(self, docs: int, block: int, use: bool = True) -> tuple:
        """The block-starts table of the shared accumulation's blocks of ``docs`` documents
        (kernels.postings.block_starts_kernel, made on first use and kept): (brow int32 (n_terms,):
        a term's row or -1, bstart int32 (rows, n_blocks + 1)). Rows for the lists of at least
        one posting a block, longest first, within BLOCK_TABLE_SHARE of the postings' bytes.
        Without ``use``, rows, or sorted lists: a placeholder (brow = [-1], one entry), with which
        the kernels search every range (kernels.blocked.term_range_dev)."""
        from numba import cuda
        if self.block_tables is None:
            self.block_tables = {}
        n_post = int(self.df.sum())
        key = docs if use and self.sorted_lists and n_post else None
        if key not in self.block_tables:
            n_blocks = blocks(self.n_docs, docs) if key else 0
            terms = postings.block_table_terms(self.df, n_blocks, int(BLOCK_TABLE_SHARE * 8 * n_post) // 4) \
                if key else np.zeros(0, np.int32)
            if not terms.size:
                self.block_tables[key] = (cuda.to_device(np.full(1, -1, np.int32)),
                                          cuda.to_device(np.zeros((1, 1), np.int32)))
            else:
                brow = np.full(self.df.size, -1, np.int32)
                brow[terms] = np.arange(terms.size, dtype=np.int32)
                if self.res.simulator:  # the twin: the simulator takes about 2 ms a thread
                    bstart = np.empty((terms.size, n_blocks + 1), np.int32)
                    postings.block_starts_cpu(self.term_ptr.copy_to_host(), self.post_doc.copy_to_host(), terms, docs,
                                              bstart)
                    bstart = cuda.to_device(bstart)
                else:
                    bstart = cuda.device_array((terms.size, n_blocks + 1), np.int32)
                    postings.block_starts_kernel[blocks(bstart.size, block), block](
                        self.term_ptr, self.post_doc, cuda.to_device(terms), docs, bstart)
                self.block_tables[key] = (cuda.to_device(brow), bstart)
        return self.block_tables[key]

    def zero_rows(self, acc, block: int) -> None:
        """Re-zero score rows a search left dirty (interrupted before its selector ran)."""
        scoring.zero_int64[min(blocks(acc.size, block), 65535 * 4), block](acc)

    @property
    def n_docs(self) -> int:
        return self.doc_hi - self.doc_lo


def build_shard(X: sp.csr_matrix, doc_lo: int, doc_hi: int, geom, cpu_postings=None) -> DeviceShard:
    """Build rows [doc_lo, doc_hi) of X into a device index.

    With ``geom.sorted_postings`` (the default) every list is sorted by document, so neighbouring
    postings of a frequent term add into neighbouring score entries and a warp's atomics share
    cache sectors: ``cpu_postings`` (the host's build of exactly these rows, e.g. Index.cpu() of a
    one-shard index, when the caller already has it) is uploaded, else the rows are uploaded and
    the device builds them (sorted_postings_device; the host's build, uploaded, in the simulator
    and when the device build's transient memory does not fit). Otherwise the device's atomic
    build (``shard_from_device``: lists in arbitrary order)."""
    from numba import cuda
    rows = csr_rows(*csr_arrays(X), doc_lo, doc_hi)  # views of X's arrays (indptr rebased)
    if not geom.sorted_postings:
        indptr, indices, data = rows
        return shard_from_device(cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(data),
                                 X.shape[1], doc_lo, doc_hi, geom)
    n_docs, n_terms = doc_hi - doc_lo, X.shape[1]
    nbytes = 8 * max(int(X.indptr[doc_hi] - X.indptr[doc_lo]), 1) + 8 * (n_terms + 1) + 16 * max(n_docs, 1)
    p = cpu_postings
    if p is None:
        built = sorted_postings_device(*rows, n_terms, geom)
        if built is not None:
            d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, df = built
            return DeviceShard(doc_lo, doc_hi, d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, df, nbytes,
                               sorted_lists=True)
        p = Postings(*postings.build_postings(*rows, n_terms))
    d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1 = (
        cuda.to_device(a if a.size else np.zeros(1, a.dtype))
        for a in (p.term_ptr, p.post_doc, p.post_w, p.d_sq, p.d_l1))
    return DeviceShard(doc_lo, doc_hi, d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, np.diff(p.term_ptr), nbytes,
                       sorted_lists=True)


SORTED_BUILD_CHUNKS_PER_SM = 8  # blocks (chunks of rows) a multiprocessor in the sorted device build ...
SORTED_BUILD_COUNTS_BYTES = 256 << 20  # ... within this much of per-chunk term counts (4 B a (chunk, term)) ...
SORTED_BUILD_CHUNK_POSTINGS = 4096  # ... and at least this many postings a chunk (a small corpus: few chunks)


def sorted_build_chunks(n_docs: int, n_terms: int, multiprocessors: int, nnz: int | None = None) -> int:
    """Chunks (blocks) of the sorted device build: SORTED_BUILD_CHUNKS_PER_SM a multiprocessor,
    fewer when the (chunks, terms) counts would pass SORTED_BUILD_COUNTS_BYTES or a chunk would
    hold fewer than SORTED_BUILD_CHUNK_POSTINGS postings; at least 1, at most a row each."""
    by_bytes = SORTED_BUILD_COUNTS_BYTES // max(4 * n_terms, 1)
    by_postings = n_docs if nnz is None else max(1, nnz // SORTED_BUILD_CHUNK_POSTINGS)
    return int(max(1, min(n_docs, SORTED_BUILD_CHUNKS_PER_SM * max(multiprocessors, 1), by_bytes, by_postings)))


def sorted_build_bytes(n_docs: int, nnz: int, n_terms: int, n_chunks: int) -> int:
    """Device bytes the sorted device build holds at its peak: the CSR rows (8 B a posting, 8 a
    row), the postings (8 B a posting), term_ptr and df, norms (16 B a row) and the counts."""
    return 16 * nnz + 24 * (n_docs + 1) + 12 * (n_terms + 1) + 4 * n_chunks * n_terms + 8 * (n_chunks + 1)


def sorted_postings_device(indptr, indices, data, n_terms: int, geom):
    """The sorted postings of CSR rows built on the device (build_sorted_lists), or None in the
    simulator (its threads cost about 2 ms each: the caller uploads the host's build;
    tests/test_postings_device.py runs the kernels there on small inputs) and when
    sorted_build_bytes plus a margin exceeds the free memory (the host's build, uploaded, takes
    half as much: 8 B a posting)."""
    res = resources()
    n_docs, nnz = indptr.shape[0] - 1, indices.shape[0]
    n_chunks = sorted_build_chunks(n_docs, n_terms, res.multiprocessors, nnz)
    mem = res.memory()
    if mem is None or sorted_build_bytes(n_docs, nnz, n_terms, n_chunks) > 0.9 * mem[0] - (256 << 20):
        return None
    return build_sorted_lists(indptr, indices, data, n_terms, n_chunks, geom.build_block)


def build_sorted_lists(indptr, indices, data, n_terms: int, n_chunks: int, block: int):
    """CSR rows (indptr int64 (n_docs+1,) from 0, indices int32, data float32) -> (term_ptr int64
    (n_terms+1,), post_doc int32 (nnz,), post_w float32 (nnz,), d_sq, d_l1 float64 (n_docs,)) on
    the device and df int64 (n_terms,) on the host: the arrays of kernels.postings.build_postings
    bit for bit, lists sorted by document. Rows cut into n_chunks chunks of about equal postings
    (postings.chunk_rows), a block of ``block`` threads each: count_chunk_terms, chunk_cursors,
    the lists' offsets on the host (n_terms values), scatter_chunk_rows, doc_norms."""
    from numba import cuda
    n_docs, nnz = indptr.shape[0] - 1, indices.shape[0]
    b = block
    d_indptr = cuda.to_device(indptr)
    d_indices = cuda.to_device(indices if nnz else np.zeros(1, np.int32))
    d_data = cuda.to_device(data if nnz else np.zeros(1, np.float32))
    d_row_lo = cuda.to_device(postings.chunk_rows(indptr, n_chunks))
    d_counts = cuda.device_array((n_chunks, max(n_terms, 1)), np.int32)
    zero(d_counts)  # a driver memset: up to SORTED_BUILD_COUNTS_BYTES, never from the host
    d_df = cuda.to_device(np.zeros(max(n_terms, 1), np.int32))
    if nnz:
        postings.count_chunk_terms[n_chunks, b](d_indptr, d_indices, d_row_lo, d_counts)
    if n_terms:
        postings.chunk_cursors[blocks(n_terms, b), b](d_counts, d_df)
    df = d_df.copy_to_host()[:n_terms].astype(np.int64)
    term_ptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(df, out=term_ptr[1:])
    d_term_ptr = cuda.to_device(term_ptr)
    d_post_doc = cuda.device_array(max(nnz, 1), np.int32)
    d_post_w = cuda.device_array(max(nnz, 1), np.float32)
    if nnz:
        postings.scatter_chunk_rows[n_chunks, b](d_indptr, d_indices, d_data, d_row_lo, d_term_ptr, d_counts,
                                                 d_post_doc, d_post_w)
    d_sq = cuda.device_array(max(n_docs, 1), np.float64)
    d_l1 = cuda.device_array(max(n_docs, 1), np.float64)
    if n_docs:
        postings.doc_norms[blocks(n_docs, b), b](d_indptr, d_data, d_sq, d_l1)
    cuda.synchronize()
    return d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, df


def shard_from_device(d_indptr, d_indices, d_data, n_terms: int, doc_lo: int, doc_hi: int, geom) -> DeviceShard:
    """A device index of CSR rows already on the device: d_indptr int64 (n_docs+1,) starting at 0,
    d_indices int32 / d_data float32 of exactly indptr[-1] entries (may be views into a larger
    upload). df by atomics, exclusive scan, atomic scatter, norms (kernels count_df, scan_blocks,
    scatter_postings, doc_norms). The shard covers documents [doc_lo, doc_hi) of its corpus."""
    from numba import cuda
    nnz = int(d_indices.shape[0])
    n_docs = doc_hi - doc_lo
    b = geom.build_block
    d_df = cuda.to_device(np.zeros(n_terms, np.int32))
    if nnz:
        postings.count_df[blocks(nnz, b), b](d_indices, d_df)
    d_term_ptr = scan.exclusive_scan_device(d_df, geom.scan_block, geom.scan_items)
    d_cursor = cuda.to_device(np.zeros(n_terms, np.int32))
    d_post_doc = cuda.device_array(max(nnz, 1), np.int32)
    d_post_w = cuda.device_array(max(nnz, 1), np.float32)
    if nnz:
        postings.scatter_postings[blocks(nnz, b), b](d_indptr, d_indices, d_data, d_term_ptr, d_cursor,
                                                      d_post_doc, d_post_w)
    d_sq = cuda.device_array(max(n_docs, 1), np.float64)
    d_l1 = cuda.device_array(max(n_docs, 1), np.float64)
    if n_docs:
        postings.doc_norms[blocks(n_docs, b), b](d_indptr, d_data, d_sq, d_l1)
    df = np.diff(d_term_ptr.copy_to_host())
    nbytes = 8 * max(nnz, 1) + 8 * (n_terms + 1) + 16 * max(n_docs, 1)
    return DeviceShard(doc_lo, doc_hi, d_term_ptr, d_post_doc, d_post_w, d_sq, d_l1, df, nbytes)


def build_bytes(geom) -> int:
    """Device bytes a posting of a shard takes in the plan: 8 for sorted lists (doc int32 + weight
    float32; Geometry.sorted_postings: their device build needs 16 while it runs, and gives way to
    the host's build, uploaded, where that does not fit: sorted_postings_device), 16 for the
    atomic device build (the CSR rows stay on the device while the shard is planned)."""
    return 8 if geom.sorted_postings else 16


def plan_shards(index: Index, posting_bytes: int = 16) -> list[tuple[int, int]]:
    """Row ranges whose device index (at build time ``posting_bytes`` a posting, build_bytes, and
    16 a document) fits INDEX_SHARE of free memory. (Before 2026-11-27 the engine planned 16 B a
    posting for the uploaded build too: 5x10^7 bench documents, 29.5 GB of index, would have been
    streamed in two shards per search on an H100 instead of staying on it whole.)"""
    budget = resources().share(INDEX_SHARE)
    if budget is None:
        return [(0, index.n_docs)]
    indptr = index.X.indptr
    per_doc = posting_bytes * np.diff(indptr).astype(np.float64) + 16
    if per_doc.sum() + 8 * index.n_terms <= budget:
        return [(0, index.n_docs)]
    ranges, lo = [], 0
    cum = np.concatenate([[0.0], np.cumsum(per_doc)])
    while lo < index.n_docs:
        hi = int(np.searchsorted(cum, cum[lo] + budget - 8 * index.n_terms, side="right")) - 1
        hi = max(hi, lo + 1)
        ranges.append((lo, min(hi, index.n_docs)))
        lo = ranges[-1][1]
    return ranges
