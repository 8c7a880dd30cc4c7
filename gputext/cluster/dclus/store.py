"""The star graph stored in a cluster file: its format, writing it, reading parts of it.

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

Growable edge datasets are chunked to their size (``growable_chunk``: 2^12..2^18 entries, at most
CHUNK_ENTRIES), so a small result stays small.  The datasets an in-place update grows are listed in TRACKED; their
committed lengths are in the file's commit record (gputext.io.commit), written by every writer
here, and every read here takes only the committed part.
"""
from __future__ import annotations

from dataclasses import dataclass

import h5py
import numba
import numpy as np

from ...errors import FormatError, InputError
from ...io.append import growable
from ...io.commit import committed_length, current_lengths, read_committed, write_record
from ...io.corpus import corpus_shape, growable_chunk, str_values
from ...kernels import star as kstar
from ...kernels.csr_rows import gather_rows
from ...kernels.primitives import touch_pages
from ..graph import StarGraph
from .host import fnv1a64, symmetric_from_owner, upper_owner_rows
from .pccs import PCCs, pcc_layout

GRAPH_KEY = "uns/gputext/star/graph"
STAR_KEY = "uns/gputext/star"
GRAPH_FORMAT_VERSION = 2  # 1: symmetric rows rewritten on every update (refused with a clear error)
CHUNK_ENTRIES = 1 << 18  # most entries per HDF5 chunk of the growable edge datasets (smaller graphs: smaller chunks)
READ_GAP = 1 << 16  # stored entries between two touched ranges below which both are read as one
TRACKED = ("/X/data", "/X/indices", "/X/indptr", "/obs/_index", f"/{GRAPH_KEY}/adj_indices",
           f"/{GRAPH_KEY}/adj_weights")  # what an in-place update appends to


# ----------------------------------------------------------------------------- document id hashes

def id_hashes(ids) -> np.ndarray:
    """uint64 (n,): 64-bit FNV-1a of the UTF-8 bytes of each document id as written
    (``corpus.str_values``: str(v), "" for None).  Equal ids have equal hashes, so the update's
    duplicate check reads the stored hashes instead of the ids and decodes the ids only when a
    hash of an added id is among them (a real duplicate, or a collision: about 10,000 x 50,000 /
    2^64 = 3e-11 for random ids).  About 1 ms per 50,000 short ids."""
    strings = str_values(ids)
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
    return fnv1a64(buf, offsets)


# ----------------------------------------------------------------------------- writing

def _set_enc(obj, kind: str) -> None:
    obj.attrs["encoding-type"] = kind
    obj.attrs["encoding-version"] = "0.1.0" if kind == "dict" else "0.2.0"


def _dataset(group: h5py.Group, name: str, data=None, shape=None, dtype=None, growable: bool = False):
    n = len(data) if data is not None else (shape[0] if shape else 0)
    kw = {"chunks": (min(CHUNK_ENTRIES, growable_chunk(n)),), "maxshape": (None,)} if growable else {}
    ds = group.create_dataset(name, data=data, shape=shape, dtype=dtype, **kw)
    _set_enc(ds, "array")
    return ds


def _scalar(group: h5py.Group, name: str, value) -> None:
    ds = group.create_dataset(name, data=value)
    _set_enc(ds, "numeric-scalar")


def graph_group(f: h5py.File, key: str = GRAPH_KEY) -> h5py.Group:
    if key.rsplit("/", 1)[0] not in f:
        raise AssertionError("write the corpus (with uns/gputext/star) before the graph")
    g = f.create_group(key)
    _set_enc(g, "dict")
    return g


def write_small(g: h5py.Group, pcc_of, order, pcc_indptr, adj_indptr, degree, weight_sum, links, n_pcc: int,
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
    g = graph_group(f)
    ptr, idx, w = upper_owner_rows(graph.indptr, graph.indices, graph.weights, pccs.order.astype(np.int64))
    write_small(g, pccs.pcc_of, pccs.order, pccs.pcc_indptr, ptr, graph.degree, graph.weight_sum, pccs.links,
                 pccs.n_pcc, beta, doc_id_hash)
    _dataset(g, "adj_indices", idx, growable=True)
    _dataset(g, "adj_weights", w, growable=True)
    write_record(f, current_lengths(f, TRACKED))


def updated_layout(meta: GraphOnDisk, pcc_of: np.ndarray, n_pcc: int, own_ptr, own_idx, own_w):
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


def write_updated_graph(src: h5py.File, dst: h5py.File, meta: GraphOnDisk, pcc_of: np.ndarray, n_pcc: int,
                         links: np.ndarray, degree: np.ndarray, weight_sum: np.ndarray, own_ptr: np.ndarray,
                         own_idx: np.ndarray, own_w: np.ndarray, beta: float, id_hash: np.ndarray) -> None:
    """The graph of the union into a new file (``update(write="new")``).  Old PCCs never gain
    vertices and every new edge is owned by a new vertex, which sits in a new PCC: the stored rows
    of the old positions are unchanged, so the two edge datasets are copied raw (H5Ocopy, nothing
    decoded) and the new vertices' owner rows, grouped by their new PCCs, are appended.  The small
    arrays are rewritten."""
    order, pcc_indptr, adj_indptr, idx, w = updated_layout(meta, pcc_of, n_pcc, own_ptr, own_idx, own_w)
    g = graph_group(dst)
    write_small(g, pcc_of, order, pcc_indptr, adj_indptr, degree, weight_sum, links, n_pcc, beta, id_hash)
    e_old = int(meta.adj_indptr[-1])
    for name, values in (("adj_indices", idx), ("adj_weights", w)):
        s = src[GRAPH_KEY][name]
        if growable(s):
            src.copy(s, g, name)  # then resized to the committed part + the new rows
            g[name].resize((e_old + len(values),))
            if len(values):
                g[name][e_old:] = values
        else:  # not growable: copy through memory
            growable_copy(g, name, s, e_old, values)
    write_record(dst, current_lengths(dst, TRACKED))


def growable_copy(g: h5py.Group, name: str, src: h5py.Dataset, n_old: int, tail: np.ndarray) -> None:
    """g[name] = src[:n_old] then ``tail``, as a growable dataset; the old part is copied
    through memory in pieces of 2^24 entries (a fixed-size src cannot be resized or H5Ocopy'd
    into a growable one)."""
    ds = _dataset(g, name, shape=(n_old + len(tail),), dtype=src.dtype, growable=True)
    step = 1 << 24
    for a in range(0, n_old, step):
        ds[a:min(n_old, a + step)] = src[a:min(n_old, a + step)]
    if len(tail):
        ds[n_old:] = tail



# ----------------------------------------------------------------------------- reading

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
    if any(g[k].ndim != 1 or committed_length(g[k]) != adj_indptr[-1] for k in ("adj_indices", "adj_weights")):
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
        touch_pages(buf.view(np.uint8), 4096)
    for lo, hi, at in zip(read_lo.tolist(), read_hi.tolist(), buf_at.tolist()):
        if hi > lo:
            ds.read_direct(buf, np.s_[lo:hi], np.s_[at:at + hi - lo])
    return positions, row_start, row_len, buf



def symmetric_chunks(m: int) -> int:
    """Owner-row chunks of symmetric_from_owner: one per thread, with the (chunks x m) int32
    counters kept under 512 MiB (the result does not depend on the number of chunks)."""
    return int(max(1, min(numba.get_num_threads(), (1 << 27) // max(int(m), 1))))


def read_stored_graph(path: str) -> tuple[StarGraph, PCCs]:
    """The whole stored graph of a cluster file (for tests and inspection), in document order,
    with its stored degree and weight sums checked against the edges."""
    n_docs = corpus_shape(path)[0]
    with h5py.File(path, "r") as f:
        meta = read_graph_meta(f, path, n_docs)
        idx = read_committed(f[GRAPH_KEY]["adj_indices"]).astype(np.int32)
        w = read_committed(f[GRAPH_KEY]["adj_weights"]).astype(np.float32)
    pos = np.empty(n_docs, np.int64)
    pos[meta.order] = np.arange(n_docs)
    start = meta.adj_indptr[pos]
    length = meta.adj_indptr[pos + 1] - start
    ptr, indices, weights = symmetric_from_owner(start, length, idx, w, np.arange(n_docs, dtype=np.int32),
                                                 symmetric_chunks(n_docs), True)
    degree, weight_sum = kstar.row_stats(ptr, weights)
    if not (np.array_equal(degree, meta.degree) and np.array_equal(weight_sum, meta.weight_sum)):
        raise FormatError(f"{path}: /{GRAPH_KEY}/degree or weight_sum disagree with the stored edges")
    graph = StarGraph(n_docs, ptr, indices, weights, degree, weight_sum)
    return graph, PCCs(meta.pcc_of, meta.links, meta.order, meta.pcc_indptr)
