"""The gputext corpus file: anndata-compatible HDF5 written and read with plain h5py.

Layout (DESIGN.md, "HDF5 corpus format"):

    /                 attrs encoding-type="anndata", encoding-version="0.1.0",
                      gputext-format="corpus", gputext-format-version="1"
    /X                csr_matrix group: data float32, indices int32 (sorted, unique per row),
                      indptr int64, attrs shape=[n_docs, n_terms]
    /obs              dataframe: _index (doc ids), columns (label is categorical: codes int32 +
                      categories), qid int32, relevance float32, cluster int32, ...
    /var              dataframe: _index (terms; attr gputext-sha256 = terms_digest of the list, written
                      by every writer), df int64, idf float64 (when weighted)
    /obsm             dict: dense arrays (knn_indices, knn_scores, ...) or csr groups (labels, clusters)
    /uns/gputext      dict: parameters of the run that wrote the file (nested dicts allowed)

A result file is a corpus file whose rows are the queries/documents it describes.
Every reader error names the offending HDF5 key, what was expected and what was found.
"""
from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from contextlib import contextmanager
from typing import Any, Iterator

import h5py
import numpy as np
import scipy.sparse as sp

from .. import __version__
from ..errors import FormatError, InputError
from .atomic import atomic_output, checkpoint
from .categorical import Categorical
from .h5file import check, h5_output, open_image
from .readers import stdin_bytes
from .commit import committed_length, has_pending, read_committed, settle_path

FORMAT_VERSION = "1"
STR_DTYPE = h5py.string_dtype("utf-8")
TERMS_DIGEST_ATTR = "gputext-sha256"  # attribute of /var/_index: terms_digest() of the stored terms


class DocTermShape:
    """``n_docs`` and ``n_terms`` of a class that holds its documents x terms matrix as ``X``."""

    X: sp.spmatrix

    @property
    def n_docs(self) -> int:
        return self.X.shape[0]

    @property
    def n_terms(self) -> int:
        return self.X.shape[1]


@dataclass
class Corpus(DocTermShape):
    """A document-term matrix with its row and column annotations.

    X        csr_matrix (n_docs, n_terms) float32, indices int32 sorted within rows, indptr int64
    doc_ids  (n_docs,) str
    terms    (n_terms,) str
    obs      columns of length n_docs: np.ndarray or Categorical ("label" is a Categorical)
    var      columns of length n_terms ("df" int64, "idf" float64)
    obsm     arrays with n_docs rows, or csr_matrix with n_docs rows ("labels": multi-label targets)
    uns      nested dict stored under /uns; gputext's own parameters live in uns["gputext"]
    """

    X: sp.csr_matrix
    doc_ids: np.ndarray | None = None
    terms: np.ndarray | None = None
    obs: dict[str, Any] = field(default_factory=dict)
    var: dict[str, Any] = field(default_factory=dict)
    obsm: dict[str, Any] = field(default_factory=dict)
    uns: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.X = canonical_csr(self.X)
        n_docs, n_terms = self.X.shape
        if self.doc_ids is None:
            self.doc_ids = np.array([str(i) for i in range(n_docs)], dtype=object)
        if self.terms is None:
            self.terms = np.array([f"t{j}" for j in range(n_terms)], dtype=object)
        self.doc_ids = np.asarray(self.doc_ids, dtype=object)
        self.terms = np.asarray(self.terms, dtype=object)

    @property
    def params(self) -> dict:
        """uns["gputext"], created on first use."""
        return self.uns.setdefault("gputext", {})

    @property
    def labels(self) -> Categorical | None:
        return self.obs.get("label")

    @property
    def label_matrix(self) -> sp.csr_matrix | None:
        """Multi-label targets (n_docs, n_labels) with names in uns["gputext"]["label_names"]."""
        return self.obsm.get("labels")

    def to_anndata(self):
        """This corpus as an anndata.AnnData (gputext.io.anndata.to_anndata)."""
        from .anndata import to_anndata
        return to_anndata(self)

    @classmethod
    def from_anndata(cls, adata) -> "Corpus":
        """A corpus of an anndata.AnnData (the fields gputext.io.anndata.corpus_fields reads from it)."""
        from .anndata import corpus_fields
        return cls(**corpus_fields(adata))

    def take(self, rows) -> "Corpus":
        """A new corpus of the given rows (any order), annotations included."""
        rows = np.asarray(rows, dtype=np.int64)
        obs = {k: (v.take(rows) if isinstance(v, Categorical) else np.asarray(v)[rows]) for k, v in self.obs.items()}
        obsm = {k: v[rows] for k, v in self.obsm.items()}
        return Corpus(self.X[rows], self.doc_ids[rows], self.terms, obs, dict(self.var), obsm, _copy_dict(self.uns))


def csr_arrays(X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr int64, indices int32, data float32), C-contiguous: what kernels take."""
    return (np.ascontiguousarray(X.indptr, dtype=np.int64), np.ascontiguousarray(X.indices, dtype=np.int32),
            np.ascontiguousarray(X.data, dtype=np.float32))


def csr_rows(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, lo: int, hi: int):
    """Rows [lo, hi) of CSR arrays without scipy (indptr rebased to 0; views where possible)."""
    a, b = int(indptr[lo]), int(indptr[hi])
    return indptr[lo:hi + 1] - a, indices[a:b], data[a:b]


def _copy_dict(d: dict) -> dict:
    return {k: (_copy_dict(v) if isinstance(v, dict) else v) for k, v in d.items()}


def canonical_csr(X) -> sp.csr_matrix:
    """float32 data, indices sorted and unique within rows, C-contiguous.

    scipy keeps indices and indptr in one index dtype (int32 while it fits); kernels take
    ``csr_arrays(X)``: indptr int64, indices int32, data float32. On disk it is always
    indptr int64 and indices int32.
    """
    if not sp.issparse(X):
        X = sp.csr_matrix(np.asarray(X, dtype=np.float32))
    X = sp.csr_matrix(X)
    if not X.has_canonical_format:
        X.sum_duplicates()
        X.sort_indices()
    out = sp.csr_matrix(
        (np.ascontiguousarray(X.data, dtype=np.float32),
         np.ascontiguousarray(X.indices, dtype=np.int32),
         np.ascontiguousarray(X.indptr, dtype=np.int64)),
        shape=X.shape,
    )
    out.has_sorted_indices = True
    return out


# ----------------------------------------------------------------------------- writing


def _attrs(obj, **attrs):
    for key, value in attrs.items():
        obj.attrs[key] = value


def str_values(values) -> list:
    """The strings a string array is written as: str(v), "" for None (what readers get back)."""
    return [("" if v is None else str(v)) for v in values]


def terms_digest(values) -> str:
    """SHA-256 (hex) of a list of strings as written (``str_values``): of b"gputext-terms-1" and a
    zero byte, the count (int64 little-endian), every string's length in code points (int64
    little-endian) and the concatenated strings in UTF-8.  Two files whose /var/_index carry the
    same digest hold the same term list.  About 2.5 ms per 75,000 terms (2-core VM)."""
    return _digest_of_strings(str_values(values))


def _digest_of_strings(strings: list) -> str:
    lengths = np.fromiter(map(len, strings), np.int64, len(strings)).astype("<i8", copy=False)
    h = hashlib.sha256(b"gputext-terms-1\0")
    h.update(np.array([len(strings)], "<i8").tobytes())
    h.update(lengths.tobytes())
    h.update("".join(strings).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _write_str_array(group: h5py.Group, name: str, values, growable: bool = False, digest: bool = False) -> None:
    """``growable``: chunked with maxshape None (entries can be appended in place: DClustR's update
    appends document ids); ``digest``: attribute TERMS_DIGEST_ATTR = terms_digest(values)."""
    strings = str_values(values)
    values = np.empty(len(strings), dtype=object)
    values[:] = strings
    kw = {"chunks": (growable_chunk(len(values)),), "maxshape": (None,)} if growable else {}
    ds = group.create_dataset(name, data=values, dtype=STR_DTYPE, **kw)
    _attrs(ds, **{"encoding-type": "string-array", "encoding-version": "0.2.0"})
    if digest:
        ds.attrs[TERMS_DIGEST_ATTR] = _digest_of_strings(strings)


def _write_array(group: h5py.Group, name: str, values, compression=None) -> None:
    values = np.asarray(values)
    if values.dtype == object or values.dtype.kind in "US":
        _write_str_array(group, name, values)
        return
    ds = group.create_dataset(name, data=values, compression=compression if values.size > 4096 else None)
    _attrs(ds, **{"encoding-type": "array", "encoding-version": "0.2.0"})


def growable_chunk(n: int) -> int:
    """Chunk length (entries) of a growable 1-d dataset that starts with n entries: 2^12..2^18
    (at most 1-2 MiB: an append allocates at most one partly filled chunk)."""
    return int(min(1 << 18, max(1 << 12, n)))


def _write_csr(group: h5py.Group, name: str, X: sp.csr_matrix, compression=None, growable: bool = False) -> None:
    """``growable``: data, indices and indptr chunked with maxshape None, so rows can be appended
    in place (DClustR's update); same contents either way."""
    X = sp.csr_matrix(X)
    g = group.create_group(name)
    _attrs(g, **{"encoding-type": "csr_matrix", "encoding-version": "0.1.0"})
    g.attrs["shape"] = np.array(X.shape, dtype=np.int64)
    comp = compression if X.nnz > 65536 else None
    kw = (lambda n: {"chunks": (growable_chunk(n),), "maxshape": (None,)}) if growable else (lambda n: {})
    g.create_dataset("data", data=X.data, compression=comp, **kw(X.nnz))
    g.create_dataset("indices", data=X.indices.astype(np.int32, copy=False), compression=comp, **kw(X.nnz))
    g.create_dataset("indptr", data=X.indptr.astype(np.int64, copy=False), **kw(X.shape[0] + 1))


def _write_categorical(group: h5py.Group, name: str, cat: Categorical) -> None:
    g = group.create_group(name)
    _attrs(g, **{"encoding-type": "categorical", "encoding-version": "0.2.0"})
    g.attrs["ordered"] = False
    _write_array(g, "codes", np.asarray(cat.codes, dtype=np.int32))
    _write_str_array(g, "categories", cat.categories)


def _write_dataframe(parent: h5py.Group, name: str, index, columns: dict, index_growable: bool = False,
                     digest: bool = False) -> None:
    """``index`` None: the group is written without its _index dataset (the caller moves one in);
    ``index_growable`` / ``digest``: see _write_str_array (for the index)."""
    g = parent.create_group(name)
    _attrs(g, **{"encoding-type": "dataframe", "encoding-version": "0.2.0", "_index": "_index"})
    g.attrs["column-order"] = np.array(list(columns), dtype=object).astype(STR_DTYPE) if columns else np.array([], dtype="S1")
    if index is not None:
        _write_str_array(g, "_index", index, growable=index_growable, digest=digest)
    for key, value in columns.items():
        if isinstance(value, Categorical):
            _write_categorical(g, key, value)
        else:
            _write_array(g, key, value)


def _write_dict(parent: h5py.Group, name: str, d: dict) -> None:
    g = parent.create_group(name)
    _attrs(g, **{"encoding-type": "dict", "encoding-version": "0.1.0"})
    for key, value in d.items():
        if isinstance(value, dict):
            _write_dict(g, key, value)
        elif sp.issparse(value):
            _write_csr(g, key, value)
        elif isinstance(value, str):
            ds = g.create_dataset(key, data=value, dtype=STR_DTYPE)
            _attrs(ds, **{"encoding-type": "string", "encoding-version": "0.2.0"})
        elif isinstance(value, (bool, int, float, np.integer, np.floating, np.bool_)):
            ds = g.create_dataset(key, data=value)
            _attrs(ds, **{"encoding-type": "numeric-scalar", "encoding-version": "0.2.0"})
        elif value is None:
            continue
        else:
            _write_array(g, key, value)


def uns_for_file(uns: dict) -> dict:
    """The /uns dict as written: a copy with uns["gputext"]["version"] set to this version."""
    uns = _copy_dict(uns)
    uns.setdefault("gputext", {})["version"] = __version__
    return uns


def _write_root(f: h5py.File, corpus: Corpus, compression, growable: bool = False) -> None:
    _attrs(f, **{"encoding-type": "anndata", "encoding-version": "0.1.0",
                 "gputext-format": "corpus", "gputext-format-version": FORMAT_VERSION})
    _write_csr(f, "X", corpus.X, compression, growable)
    _write_dataframe(f, "obs", corpus.doc_ids, corpus.obs, index_growable=growable)
    _write_dataframe(f, "var", corpus.terms, corpus.var, digest=True)
    _write_dict(f, "obsm", corpus.obsm)
    _write_dict(f, "uns", uns_for_file(corpus.uns))
    for empty in ("varm", "layers", "obsp", "varp"):
        _write_dict(f, empty, {})


def from_anndata(adata) -> Corpus:
    """A gputext Corpus of an anndata.AnnData (gputext.io.anndata's docstring has the mapping);
    raises InputError when it has no X or anndata is not installed."""
    return Corpus.from_anndata(adata)


def write_corpus(corpus: Corpus, path: str, compression: str | None = "gzip", growable: bool = False) -> None:
    """Write atomically (temp file + rename); ``-`` writes the file's bytes to stdout.
    ``growable``: a file meant to be updated in place: /X's datasets and /obs/_index chunked and
    growable (rows and ids can be appended) and the file's free space tracked persistently (HDF5 >= 1.10 file-space strategy
    "fsm", fs_persist), so the space of groups an update replaces is reused by the next one.
    ``corpus`` may also be an anndata.AnnData (converted by Corpus.from_anndata)."""
    if not isinstance(corpus, Corpus):
        corpus = Corpus.from_anndata(corpus)
    kw = {"fs_strategy": "fsm", "fs_persist": True, "fs_threshold": 1} if growable else {}
    with atomic_output(path) as tmp:
        with h5_output(tmp, "w", **kw) as f:
            _write_root(f, corpus, compression, growable)


class CorpusWriter:
    """Write a corpus in row chunks, so that 10^7 documents never sit in memory at once.

        with CorpusWriter("big.h5", n_terms) as w:
            for chunk in chunks:
                w.append(X_chunk, doc_ids_chunk, {"label": codes_chunk})
            w.finish(terms, var={"df": df}, categories={"label": names}, uns={...})

    ``obs`` chunks are plain arrays; columns named in ``finish(categories=...)`` are stored as
    categoricals with those category names. The file appears at ``path`` only after ``finish``.
    """

    def __init__(self, path: str, n_terms: int, compression: str | None = "gzip"):
        self.path, self.n_terms, self.compression = path, int(n_terms), compression
        self._ctx = atomic_output(path)
        self._tmp = self._ctx.__enter__()
        self._file = h5_output(self._tmp, "w")
        self._f = self._file.__enter__()
        self._n_docs = 0
        self._nnz = 0
        self._obs_cols: dict[str, h5py.Dataset] = {}
        g = self._f.create_group("X")
        chunk = 1 << 16
        self._data = g.create_dataset("data", (0,), np.float32, maxshape=(None,), chunks=(chunk,), compression=compression)
        self._indices = g.create_dataset("indices", (0,), np.int32, maxshape=(None,), chunks=(chunk,), compression=compression)
        self._indptr = g.create_dataset("indptr", (1,), np.int64, maxshape=(None,), chunks=(chunk,))
        self._indptr[0] = 0
        self._staging = self._f.create_group("_staging")
        self._ids = self._staging.create_dataset("_index", (0,), STR_DTYPE, maxshape=(None,), chunks=(chunk,))
        self._done = False

    def append(self, X, doc_ids, obs: dict | None = None) -> None:
        checkpoint()  # a deferred SIGINT/SIGTERM stops the write here (gputext.io.atomic)
        check(self._f)  # a full disk stops it here too
        X = canonical_csr(X)
        if X.shape[1] != self.n_terms:
            raise InputError(f"chunk has {X.shape[1]} terms, expected {self.n_terms}")
        n, nnz = X.shape[0], X.nnz
        for ds, values in ((self._data, X.data), (self._indices, X.indices)):
            ds.resize((self._nnz + nnz,))
            ds[self._nnz:] = values
        self._indptr.resize((self._n_docs + n + 1,))
        self._indptr[self._n_docs + 1:] = X.indptr[1:].astype(np.int64) + self._nnz
        self._ids.resize((self._n_docs + n,))
        self._ids[self._n_docs:] = np.asarray([str(d) for d in doc_ids], dtype=object)
        for key, values in (obs or {}).items():
            values = np.asarray(values)
            if key not in self._obs_cols:
                if self._n_docs:
                    raise InputError(f"obs column {key!r} first appears after row {self._n_docs}")
                self._obs_cols[key] = self._staging.create_dataset(key, (0,), values.dtype, maxshape=(None,), chunks=(chunk_len(values),))
            ds = self._obs_cols[key]
            ds.resize((self._n_docs + n,))
            ds[self._n_docs:] = values
        self._n_docs += n
        self._nnz += nnz

    def finish(self, terms, var: dict | None = None, categories: dict | None = None,
               obsm: dict | None = None, uns: dict | None = None) -> None:
        f = self._f
        _attrs(f, **{"encoding-type": "anndata", "encoding-version": "0.1.0",
                     "gputext-format": "corpus", "gputext-format-version": FORMAT_VERSION})
        _attrs(f["X"], **{"encoding-type": "csr_matrix", "encoding-version": "0.1.0"})
        f["X"].attrs["shape"] = np.array([self._n_docs, self.n_terms], dtype=np.int64)
        categories = categories or {}
        obs = f.create_group("obs")
        _attrs(obs, **{"encoding-type": "dataframe", "encoding-version": "0.2.0", "_index": "_index"})
        names = list(self._obs_cols)
        obs.attrs["column-order"] = np.array(names, dtype=object).astype(STR_DTYPE) if names else np.array([], dtype="S1")
        f.move("_staging/_index", "obs/_index")
        _attrs(obs["_index"], **{"encoding-type": "string-array", "encoding-version": "0.2.0"})
        for key in names:
            if key in categories:
                g = obs.create_group(key)
                _attrs(g, **{"encoding-type": "categorical", "encoding-version": "0.2.0"})
                g.attrs["ordered"] = False
                f.move(f"_staging/{key}", f"obs/{key}/codes")
                _attrs(g["codes"], **{"encoding-type": "array", "encoding-version": "0.2.0"})
                _write_str_array(g, "categories", categories[key])
            else:
                f.move(f"_staging/{key}", f"obs/{key}")
                _attrs(obs[key], **{"encoding-type": "array", "encoding-version": "0.2.0"})
        del f["_staging"]
        _write_dataframe(f, "var", terms, var or {}, digest=True)
        _write_dict(f, "obsm", obsm or {})
        uns = _copy_dict(uns or {})
        uns.setdefault("gputext", {})["version"] = __version__
        _write_dict(f, "uns", uns)
        for empty in ("varm", "layers", "obsp", "varp"):
            _write_dict(f, empty, {})
        self._close(None)

    @property
    def n_docs(self) -> int:
        return self._n_docs

    def abort(self) -> None:
        """Close and remove the temporary file: the output never appears."""
        self._close(RuntimeError("aborted"))

    def _close(self, exc: BaseException | None) -> None:
        """Close the HDF5 file, then rename it (exc None) or remove it. A failed write of the file
        raises its DiskError here, naming the output (atomic_output)."""
        if self._done:
            return
        self._done = True
        try:
            self._file.__exit__(type(exc), exc, None) if exc else self._file.__exit__(None, None, None)
        except BaseException as raised:
            if raised is not exc:  # the write failed (DiskError), or closing did
                self._ctx.__exit__(type(raised), raised, raised.__traceback__)
                raise
        self._ctx.__exit__(type(exc), exc, None) if exc else self._ctx.__exit__(None, None, None)

    def __enter__(self) -> "CorpusWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or not self._done:
            self.abort()


def chunk_len(values: np.ndarray) -> int:
    return 1 << 16 if values.ndim == 1 else max(1, (1 << 16) // int(np.prod(values.shape[1:])))


# ----------------------------------------------------------------------------- reading


def _open(path: str) -> h5py.File:
    """Open a corpus file (``-`` reads stdin), turning every failure into one clear line."""
    if path == "-":
        data = stdin_bytes()
        if not data:
            raise InputError("stdin is empty: expected a gputext corpus (HDF5) on standard input")
        source: Any = data
        label = "<stdin>"
    else:
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file")
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory, expected a gputext corpus file (.h5)")
        if os.path.getsize(path) == 0:
            raise InputError(f"{path}: file is empty, expected a gputext corpus file (.h5)")
        source, label = path, path
    try:
        f = open_image(source, label) if path == "-" else h5py.File(source, "r")
        if source is path and has_pending(f):  # an in-place update killed while committing: complete it
            f.close()
            settle_path(path)
            f = h5py.File(source, "r")
    except OSError as exc:
        raise FormatError(f"{label}: not a readable HDF5 file (truncated, or another format): {str(exc).splitlines()[0]}") from None
    f.gputext_label = label  # type: ignore[attr-defined]
    problem = version_problem(f.attrs.get("gputext-format-version"), label)
    if problem:
        f.close()
        raise FormatError(problem)
    return f


def version_problem(value, label: str) -> str | None:
    """Why a file's gputext-format-version attribute cannot be read by this gputext (None: it can,
    or the attribute is absent, as in anndata files of other writers)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = str(value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value)
    if not text.isdigit():
        return f"{label}: gputext-format-version {text[:20]!r} is not a version number (expected {FORMAT_VERSION!r})"
    if int(text) > int(FORMAT_VERSION):
        return (f"{label}: gputext-format-version {text!r} is newer than this gputext {__version__} reads "
                f"({FORMAT_VERSION!r}): upgrade gputext to read it")
    return None


DAMAGE = (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError)  # what h5py / numpy raise on damage


@contextmanager
def damaged_file_errors(label: str) -> Iterator[None]:
    """Inside a reader: an h5py/numpy error that the layout checks did not foresee (a damaged or
    hand-edited file) becomes one FormatError line naming the file, not an internal error."""
    try:
        yield
    except (FormatError, InputError):
        raise
    except DAMAGE as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FormatError(f"{label}: cannot read the corpus (damaged or not written as a gputext corpus): "
                          f"{type(exc).__name__}: {first}") from None


def _where(f, key: str) -> str:
    return f"{getattr(f, 'gputext_label', '?')}: /{key.lstrip('/')}"


def _need(f: h5py.File, key: str, kind=None):
    if key not in f:
        raise FormatError(f"{_where(f, key)} is missing (not a gputext corpus file?)")
    obj = f[key]
    if kind is not None and not isinstance(obj, kind):
        what = "group" if kind is h5py.Group else "dataset"
        raise FormatError(f"{_where(f, key)} should be a {what}")
    return obj


def _read_str_array(ds: h5py.Dataset) -> np.ndarray:
    """A string dataset as an object array of str (UTF-8, undecodable bytes replaced).  The usual
    case (1-d, h5py's bytes objects) decodes a plain list, about 15% faster than per-element
    isinstance checks on the array; h5py's own read of the variable-length strings is the rest."""
    values = read_committed(ds)
    if values.dtype.kind in "SO":
        items = values.tolist() if values.ndim == 1 else list(values)
        try:
            strings = [b.decode("utf-8", "replace") for b in items]
        except AttributeError:  # not all bytes (str objects from some writers)
            strings = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in items]
        out = np.empty(len(strings), dtype=object)
        out[:] = strings
        return out
    return values.astype(object)


def stored_terms_digest(f, n_terms: int) -> str | None:
    """The TERMS_DIGEST_ATTR of /var/_index (None when absent: files of other writers, or older
    ones); FormatError when /var/_index does not hold n_terms entries (as _read_dataframe would)."""
    value = _index_dataset(f, "var", n_terms).attrs.get(TERMS_DIGEST_ATTR)
    if isinstance(value, bytes):
        value = value.decode()
    return str(value) if value is not None else None


def _read_csr(f, key: str, n_rows: int | None = None, n_cols: int | None = None, validate: bool = True) -> sp.csr_matrix:
    g = _need(f, key, h5py.Group)
    enc = g.attrs.get("encoding-type")
    if isinstance(enc, bytes):
        enc = enc.decode()
    if enc != "csr_matrix":
        raise FormatError(f"{_where(f, key)} has encoding-type {enc!r}, expected 'csr_matrix'")
    for part in ("data", "indices", "indptr"):
        _need(f, f"{key}/{part}", h5py.Dataset)
    if "shape" not in g.attrs:
        raise FormatError(f"{_where(f, key)} has no 'shape' attribute")
    if np.asarray(g.attrs["shape"]).dtype.kind not in "iu":
        raise FormatError(f"{_where(f, key)} attribute shape has dtype {np.asarray(g.attrs['shape']).dtype}, "
                          "expected integers")
    shape = tuple(int(s) for s in g.attrs["shape"])
    if len(shape) != 2 or min(shape) < 0:
        raise FormatError(f"{_where(f, key)} attribute shape={shape} is not a 2-d shape")
    data = read_committed(g["data"])
    indices = read_committed(g["indices"])
    indptr = read_committed(g["indptr"])
    if validate:
        _validate_csr(f, key, shape, data, indices, indptr)
    if n_rows is not None and shape[0] != n_rows:
        raise FormatError(f"{_where(f, key)} has {shape[0]} rows, expected {n_rows}")
    if n_cols is not None and shape[1] != n_cols:
        raise FormatError(f"{_where(f, key)} has {shape[1]} columns, expected {n_cols}")
    X = sp.csr_matrix((data.astype(np.float32, copy=False), indices.astype(np.int32, copy=False),
                       indptr.astype(np.int64, copy=False)), shape=shape)
    X.has_sorted_indices = True
    return X


def _validate_csr(f, key, shape, data, indices, indptr) -> None:
    problem = next(csr_problems(_where(f, key), shape, data, indices, indptr), None)
    if problem is not None:
        raise FormatError(problem)


def indptr_problems(where: str, n_rows: int, indptr: np.ndarray, nnz_stored: tuple[int, int] | None = None):
    """Problems (one line each) of a CSR row-pointer array for ``n_rows`` rows; ``nnz_stored`` =
    (len(data), len(indices)) checks indptr[-1] against them.  ``where`` names the group."""
    if indptr.ndim != 1 or len(indptr) != n_rows + 1:
        yield f"{where}/indptr has length {len(indptr) if indptr.ndim else 0}, expected n_rows + 1 = {n_rows + 1}"
        return
    if indptr.dtype.kind not in "iu":
        yield f"{where}/indptr has dtype {indptr.dtype}, expected int64"
        return
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        yield f"{where}/indptr is not non-decreasing from 0"
        return
    nnz = int(indptr[-1])
    if nnz_stored is not None and (nnz_stored[0] != nnz or nnz_stored[1] != nnz):
        yield f"{where}: indptr[-1] = {nnz} but data has {nnz_stored[0]} and indices {nnz_stored[1]} entries"


def entry_problems(where: str, n_cols: int, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray):
    """Problems of the entries of consecutive CSR rows (``indptr`` relative to ``data[0]``):
    column indices in [0, n_cols), sorted and unique within every row, finite data."""
    nnz = len(indices)
    if not nnz:
        return
    if indices.min() < 0 or indices.max() >= n_cols:
        yield f"{where}/indices has a column index outside [0, {n_cols})"
    else:
        # entry p + 1 must exceed entry p unless p + 1 starts a row: compare neighbours in the
        # stored dtype (no int64 copy), then clear the row starts (an empty row's start is the
        # next row's), about 3x faster than differencing in int64 with a row-start mask
        bad = indices[1:] <= indices[:-1]
        starts = indptr[1:-1]
        bad[starts[(starts > 0) & (starts < nnz)] - 1] = False
        if bad.any():
            yield f"{where}/indices is not sorted and unique within every row"
    if data.dtype.kind == "f" and not np.all(np.isfinite(data)):
        yield f"{where}/data contains NaN or infinite values"


def csr_problems(where: str, shape, data, indices, indptr):
    """Every problem (one line each) of a CSR matrix's arrays as stored: lengths, dtypes, indptr,
    then the entries (entry_problems).  The readers raise the first; `corpus validate` lists all."""
    n_rows, n_cols = shape
    if indices.dtype.kind not in "iu":
        yield f"{where}/indices has dtype {indices.dtype}, expected int32"
    if data.dtype.kind not in "fiub":
        yield f"{where}/data has dtype {data.dtype}, expected float32"
    ptr = list(indptr_problems(where, n_rows, indptr, (len(data), len(indices))))
    yield from ptr
    if not ptr and indices.dtype.kind in "iu" and data.dtype.kind in "fiub":
        yield from entry_problems(where, n_cols, data, indices, indptr)


def _read_element(f, key: str):
    obj = f[key]
    enc = obj.attrs.get("encoding-type", "")
    if isinstance(enc, bytes):
        enc = enc.decode()
    if isinstance(obj, h5py.Group):
        if enc == "csr_matrix":
            return _read_csr(f, key)
        if enc == "categorical":
            codes = _need(f, f"{key}/codes", h5py.Dataset)[()]
            if np.ndim(codes) != 1 or codes.dtype.kind not in "iu":
                raise FormatError(f"{_where(f, key + '/codes')} has dtype {codes.dtype} and {np.ndim(codes)} "
                                  "dimension(s), expected 1-d integers")
            return Categorical(codes.astype(np.int32), _read_str_array(_need(f, f"{key}/categories", h5py.Dataset)))
        return {k: _read_element(f, f"{key}/{k}") for k in obj.keys()}
    value = obj[()]
    if enc == "string" or isinstance(value, bytes):
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if enc == "string-array" or (isinstance(value, np.ndarray) and value.dtype.kind in "SO"):
        return _read_str_array(obj)
    if enc == "numeric-scalar" and np.ndim(value) == 0:
        return value.item()
    return value


def _index_dataset(f, key: str, n_rows: int) -> h5py.Dataset:
    """The index dataset (ids, terms) of the dataframe group ``key``, named by the group's _index
    attribute; FormatError unless it holds n_rows entries.  Nothing is decoded."""
    g = _need(f, key, h5py.Group)
    index_key = g.attrs.get("_index", "_index")
    if isinstance(index_key, bytes):
        index_key = index_key.decode()
    ds = _need(f, f"{key}/{index_key}", h5py.Dataset)
    n_index = committed_length(ds) if ds.ndim else 0
    if n_index != n_rows:
        raise FormatError(f"{_where(f, key + '/' + index_key)} has {n_index} entries, expected {n_rows}")
    return ds


def _read_dataframe(f, key: str, n_rows: int, index: bool = True) -> tuple[np.ndarray | None, dict]:
    """(index strings, columns); ``index`` False: the index is not decoded (None; its length is
    still checked)."""
    ds = _index_dataset(f, key, n_rows)
    if ds.dtype.kind not in "SOU":
        raise FormatError(f"{_where(f, ds.name.lstrip('/'))} has dtype {ds.dtype}, expected strings (ids or terms)")
    index = _read_str_array(ds) if index else None
    g = f[key]
    index_key = ds.name.rsplit("/", 1)[-1]
    columns = {}
    for name in g.keys():
        if name == index_key:
            continue
        value = _read_element(f, f"{key}/{name}")
        if len(value) != n_rows:
            raise FormatError(f"{_where(f, key + '/' + name)} has {len(value)} entries, expected {n_rows}")
        if isinstance(value, Categorical):
            ok = value.codes >= -1
            if not np.all(ok) or (len(value.codes) and value.codes.max(initial=-1) >= len(value.categories)):
                raise FormatError(f"{_where(f, key + '/' + name + '/codes')} has codes outside the categories")
        columns[name] = value
    return index, columns


def read_corpus(path: str, validate: bool = True, require_docs: bool = True, as_anndata: bool = False) -> Corpus:
    """Read and validate a corpus (or result) file; ``-`` reads stdin. ``as_anndata``: return an
    anndata.AnnData (gputext.io.anndata.to_anndata) instead of a Corpus.

    Raises FormatError naming the HDF5 key for any layout problem, InputError for a missing or
    empty file, and (with ``require_docs``) for a corpus with zero documents.
    """
    with _open(path) as f, damaged_file_errors(f.gputext_label):
        fmt = f.attrs.get("gputext-format")
        enc = f.attrs.get("encoding-type")
        if fmt is None and enc is None:
            raise FormatError(f"{_where(f, '')} has neither gputext-format nor anndata encoding-type attributes: not a gputext corpus")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        if fmt is not None and fmt != "corpus":
            raise FormatError(f"{_where(f, '')} has gputext-format {fmt!r}, expected 'corpus'")
        X = _read_csr(f, "X", validate=validate)
        doc_ids, obs = _read_dataframe(f, "obs", X.shape[0])
        problem = unique_problem(f, "obs/_index", doc_ids, "document ids") if validate else None
        if problem:
            raise FormatError(problem)
        terms, var = _read_dataframe(f, "var", X.shape[1])
        obsm = {}
        if "obsm" in f:
            for key in f["obsm"].keys():
                value = _read_element(f, f"obsm/{key}")
                if value.shape[0] != X.shape[0]:
                    raise FormatError(f"{_where(f, 'obsm/' + key)} has {value.shape[0]} rows, expected n_docs = {X.shape[0]}")
                obsm[key] = value
        uns = _read_element(f, "uns") if "uns" in f else {}
    corpus = Corpus(X, doc_ids, terms, obs, var, obsm, uns if isinstance(uns, dict) else {})
    if require_docs and corpus.n_docs == 0:
        raise InputError(f"{path}: the corpus has zero documents")
    return corpus.to_anndata() if as_anndata else corpus


def corpus_shape(path: str) -> tuple[int, int, int]:
    """(n_docs, n_terms, nnz) read from the file's metadata only."""
    with _open(path) as f:
        g = _need(f, "X", h5py.Group)
        shape = tuple(int(s) for s in g.attrs["shape"])
        return shape[0], shape[1], int(_need(f, "X/indptr", h5py.Dataset)[committed_length(f["X/indptr"]) - 1])


def read_rows(path: str, start: int, stop: int) -> sp.csr_matrix:
    """Rows [start, stop) of /X without reading the rest (for corpora larger than memory)."""
    return read_row_pieces([(path, start, stop)])


PREFAULT_BYTES = 256 << 20  # read_row_pieces: from this many bytes of rows, their pages are faulted in parallel first


def read_row_pieces(pieces) -> sp.csr_matrix:
    """Rows [start, stop) of /X of each (path, start, stop), stacked in order into one CSR matrix
    (float32 data, int32 indices, sorted indices as written), every file's part read straight into
    one allocation (``read_direct``: no per-file matrices, no conversion copies, no stacking copy),
    whose pages are first faulted in on every thread from PREFAULT_BYTES (kernels.primitives.touch_pages:
    1.2 GB of rows from the page cache in 0.255 s against 0.291 s on the 2-core VM, 2026-11-28).
    The files share /X's width (the first file's is taken)."""
    parts, n_terms = [], None
    for path, start, stop in pieces:  # first the row pointers: the sizes to allocate
        with _open(path) as f:
            g = _need(f, "X", h5py.Group)
            width = int(g.attrs["shape"][1])
            n_terms = width if n_terms is None else n_terms
            indptr = np.asarray(g["indptr"][start:stop + 1], dtype=np.int64)
            parts.append((path, indptr))
    n_rows = sum(len(ip) - 1 for _, ip in parts)
    nnz = sum(int(ip[-1] - ip[0]) for _, ip in parts)
    data = np.empty(nnz, np.float32)
    indices = np.empty(nnz, np.int32)
    if 8 * nnz >= PREFAULT_BYTES:  # the pages' first-touch faults on every thread, not one by one in the reads
        from ..kernels.primitives import touch_pages
        touch_pages(data.view(np.uint8), 4096)
        touch_pages(indices.view(np.uint8), 4096)
    indptr = np.zeros(n_rows + 1, np.int64)
    row = off = 0
    for path, ip in parts:
        lo, hi = int(ip[0]), int(ip[-1])
        n = hi - lo
        with _open(path) as f:
            for name, out in (("data", data), ("indices", indices)):
                ds = f["X"][name]
                if n == 0:
                    continue
                if ds.dtype == out.dtype:
                    ds.read_direct(out, np.s_[lo:hi], np.s_[off:off + n])
                else:
                    out[off:off + n] = ds[lo:hi]
        indptr[row + 1:row + len(ip)] = ip[1:] - lo + off
        row += len(ip) - 1
        off += n
    X = sp.csr_matrix((data, indices, indptr), shape=(n_rows, n_terms or 0), copy=False)
    X.has_sorted_indices = True
    return X


def unique_problem(f, key: str, values: np.ndarray, what: str) -> str | None:
    """The problem line of repeated ``what`` (ids, terms) in the dataset ``key``; None when unique
    (a set first: the usual all-unique case costs no sort)."""
    if len(set(np.asarray(values, dtype=object).tolist())) == len(values):
        return None
    found = duplicates(values)
    if found is None:
        return None
    n, value, (a, b) = found
    return f"{_where(f, key)} has {n} duplicate {what} (e.g. {value!r} at rows {a} and {b})"


def duplicates(values) -> tuple[int, str, tuple[int, int]] | None:
    """(number of repeated entries, the first repeated value, its first two rows) of a list of
    ids or terms compared as strings; None when every entry is unique."""
    strings = np.asarray(values, dtype=object).astype(str)
    uniq, counts = np.unique(strings, return_counts=True)
    if len(uniq) == len(strings):
        return None
    value = str(uniq[np.argmax(counts > 1)])
    rows = np.nonzero(strings == value)[0][:2]
    return len(strings) - len(uniq), value, (int(rows[0]), int(rows[1]))


def check_same_vocabulary(a: Corpus, b: Corpus, a_name: str = "index", b_name: str = "queries") -> None:
    """Queries must use the indexed corpus's vocabulary (build them with --vocab-from)."""
    if a.n_terms != b.n_terms or not np.array_equal(a.terms, b.terms):
        raise vocabulary_error(a.n_terms, b.n_terms, a_name, b_name)


def vocabulary_error(a_terms: int, b_terms: int, a_name: str = "index", b_name: str = "queries") -> InputError:
    """The error of check_same_vocabulary (for callers that compare vocabularies another way)."""
    return InputError(
        f"the {b_name} corpus has a different vocabulary ({b_terms} terms) from the {a_name} corpus "
        f"({a_terms} terms): build it with `gputext corpus build ... --vocab-from` the {a_name} corpus")


# ----------------------------------------------------------------------------- element-level building blocks

# Public names of the element readers and writers above, for the io package's partial reader
# (partial.py), in-place appender (append.py), info.py, rows.py and validate.py; other packages use
# partial.py and append.py instead. location(f, key) is "<file label>: /key" for error messages;
# need_element(f, key, kind) the element or a FormatError.
open_file = _open
read_csr_group = _read_csr
validate_csr = _validate_csr
read_dataframe = _read_dataframe
read_element = _read_element
index_dataset = _index_dataset
read_str_array = _read_str_array
write_csr_group = _write_csr
write_dataframe = _write_dataframe
write_dict = _write_dict
location = _where
need_element = _need
