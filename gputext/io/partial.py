"""Reading parts of a corpus file: the keys asked for, a range of rows, ids and terms decoded lazily.

``read_corpus`` reads and decodes everything; decoding HDF5 variable-length strings (document
ids, terms) is most of the cost of reading a large file, and commands that update or evaluate a
result file need only some of it.  ``read_parts`` reads /X (all rows or a range), the obs
columns, obsm and uns as asked, checks what it reads as ``read_corpus`` does, and leaves the ids
and terms on disk until ``CorpusParts.load_ids`` / ``load_terms`` (the stored digest of the
terms is read instead: two gputext files with the same digest have the same vocabulary).
``read_elements`` reads single elements by path (e.g. "obsm/clusters").  Every read takes only
the committed part of a file appended to in place (gputext.io.commit).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import h5py
import numpy as np
import scipy.sparse as sp

from ..errors import FormatError
from .corpus import (Corpus, index_dataset, open_file, read_csr_group, read_dataframe, read_element, read_str_array,
                     stored_terms_digest, validate_csr)


@dataclass
class CorpusParts:
    """What ``read_parts`` read of a corpus file (or a Corpus given in memory: ``of_corpus``).

    X csr (n_docs, n_terms) or None (not asked for); obs, obsm, uns dicts (empty when not asked
    for); terms_digest: the stored digest of the terms (None: absent, or given in memory);
    doc_ids / terms: None until decoded (``load_ids`` / ``load_terms``); decoded: what was
    decoded afterwards ("obs", "var")."""

    path: str | None
    n_docs: int
    n_terms: int
    X: sp.csr_matrix | None = None
    obs: dict = field(default_factory=dict)
    obsm: dict = field(default_factory=dict)
    uns: dict = field(default_factory=dict)
    terms_digest: str | None = None
    doc_ids: np.ndarray | None = None
    terms: np.ndarray | None = None
    var: dict | None = None
    rows: tuple[int, int] | None = None  # the row range read, None: all rows
    decoded: list = field(default_factory=list)

    def _index(self, group: str, n: int) -> np.ndarray:
        with open_file(self.path) as f:
            values = read_str_array(index_dataset(f, group, n))
        self.decoded.append(group)
        return values

    def load_ids(self) -> np.ndarray:
        """The document ids (of the rows read), decoded on first use."""
        if self.doc_ids is None:
            n_all = self.n_docs if self.rows is None else None
            ids = self._index("obs", n_all if n_all is not None else self._stored_docs())
            self.doc_ids = ids if self.rows is None else ids[self.rows[0]:self.rows[1]]
        return self.doc_ids

    def load_terms(self) -> np.ndarray:
        if self.terms is None:
            self.terms = self._index("var", self.n_terms)
        return self.terms

    def _stored_docs(self) -> int:
        with open_file(self.path) as f:
            return int(f["X"].attrs["shape"][0])

    @classmethod
    def of_corpus(cls, c: Corpus) -> "CorpusParts":
        return cls(None, c.n_docs, c.n_terms, c.X, dict(c.obs), dict(c.obsm), dict(c.uns), None, c.doc_ids, c.terms,
                   dict(c.var))


def _read_obsm(f, path: str, n_docs: int) -> dict:
    obsm = {}
    for k in (f["obsm"].keys() if "obsm" in f else []):
        value = read_element(f, f"obsm/{k}")
        if not isinstance(value, dict) and np.shape(value)[:1] != (n_docs,):
            raise FormatError(f"{path}: /obsm/{k} has {np.shape(value)[:1]} rows, expected n_docs = {n_docs}")
        obsm[k] = value
    return obsm


def _read_uns(f, skip: tuple) -> dict:
    """/uns as a dict, leaving out the paths in ``skip`` (e.g. "gputext/star": large arrays)."""
    def walk(key: str, rel: str):
        obj = f[key]
        if isinstance(obj, h5py.Group) and obj.attrs.get("encoding-type", "dict") in ("dict", b"dict"):
            inner = {k: f"{rel}/{k}".lstrip("/") for k in obj.keys()}
            return {k: walk(f"{key}/{k}", path) for k, path in inner.items() if path not in skip}
        return read_element(f, key)
    return walk("uns", "") if "uns" in f else {}


def _rows_of(f, start: int, stop: int) -> sp.csr_matrix:
    """Rows [start, stop) of /X, checked like a whole read (indices in range, sorted, finite)."""
    g = f["X"]
    n_rows, n_cols = (int(s) for s in g.attrs["shape"])
    if not 0 <= start <= stop <= n_rows:
        raise ValueError(f"rows [{start}, {stop}) outside the {n_rows} rows of {f.filename}")
    indptr = g["indptr"][start:stop + 1].astype(np.int64)
    lo, hi = int(indptr[0]), int(indptr[-1])
    data, indices, indptr = g["data"][lo:hi], g["indices"][lo:hi], indptr - lo
    validate_csr(f, "X", (stop - start, n_cols), data, indices, indptr)
    X = sp.csr_matrix((data.astype(np.float32, copy=False), indices.astype(np.int32, copy=False), indptr),
                      shape=(stop - start, n_cols))
    X.has_sorted_indices = True
    return X


def read_parts(path: str, *, X: bool = True, rows: tuple[int, int] | None = None, obs: bool = True,
               obsm: bool = True, uns: bool = False, uns_skip: tuple = (), ids: bool = False, terms: bool = False,
               require_format: bool = False, times: dict | None = None) -> CorpusParts:
    """Read the parts of a corpus file asked for (see the module docstring).

    X: read /X (validated), all rows or ``rows`` = (start, stop); obs: the obs columns (ids
    decoded only with ``ids``); obsm: every obsm element (rows checked); uns: /uns as a dict
    without the paths in ``uns_skip``; terms: decode the terms and var columns now (else only
    their digest is read); require_format: refuse a file without gputext-format or anndata
    encoding-type attributes.  ``times`` gets seconds_read_{X, obs, var, obsm, uns}."""
    times = {} if times is None else times
    t = [time.perf_counter()]

    def lap(name):
        now = time.perf_counter()
        times[f"seconds_read_{name}"] = now - t[0]
        t[0] = now

    with open_file(path) as f:
        if require_format and f.attrs.get("gputext-format") is None and f.attrs.get("encoding-type") is None:
            raise FormatError(f"{path}: has neither gputext-format nor anndata encoding-type attributes: "
                              "not a gputext corpus")
        if "X" not in f:
            raise FormatError(f"{path}: /X is missing (not a gputext corpus file)")
        n_docs, n_terms = (int(s) for s in f["X"].attrs["shape"]) if "shape" in f["X"].attrs else (None, None)
        matrix = None
        if X:
            matrix = read_csr_group(f, "X") if rows is None else _rows_of(f, *rows)
            n_docs, n_terms = (matrix.shape[0], matrix.shape[1]) if rows is None else (n_docs, n_terms)
        if n_docs is None:
            raise FormatError(f"{path}: /X has no 'shape' attribute")
        lap("X")
        out = CorpusParts(path, n_docs, n_terms, matrix, rows=rows)
        if obs or ids:
            out.doc_ids, out.obs = read_dataframe(f, "obs", n_docs, index=ids)
        lap("obs")
        out.terms_digest = stored_terms_digest(f, n_terms)
        if terms:
            out.terms, out.var = read_dataframe(f, "var", n_terms)
        lap("var")
        if obsm:
            out.obsm = _read_obsm(f, path, n_docs)
        lap("obsm")
        if uns:
            out.uns = _read_uns(f, tuple(uns_skip))
        lap("uns")
    if rows is not None:
        a, b = rows
        out.n_docs = b - a
        out.obs = {k: v.take(np.arange(a, b)) if hasattr(v, "take") and not isinstance(v, np.ndarray) else v[a:b]
                   for k, v in out.obs.items()}
        out.obsm = {k: v[a:b] for k, v in out.obsm.items()}
        out.doc_ids = None if out.doc_ids is None else out.doc_ids[a:b]
    return out


def read_elements(path: str, keys, missing_ok: bool = False) -> dict:
    """{key: value} of anndata elements by path ("obsm/clusters", "uns/gputext/star/centers", ...),
    read as ``read_corpus`` reads them; keys absent from the file are left out with
    ``missing_ok``, else FormatError naming the key."""
    out = {}
    with open_file(path) as f:
        for key in keys:
            if key not in f:
                if missing_ok:
                    continue
                raise FormatError(f"{path}: /{key} is missing")
            obj = f[key]
            if isinstance(obj, h5py.Dataset) and h5py.check_string_dtype(obj.dtype) is not None and obj.ndim == 1:
                out[key] = read_str_array(obj)  # decoded once (read_element would read it twice)
            else:
                out[key] = read_element(f, key)
    return out


def present_keys(path: str, keys) -> list:
    """Those of ``keys`` (paths inside the file) that the file holds, in the order given."""
    with open_file(path) as f:
        return [k for k in keys if k in f]
