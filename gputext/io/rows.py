"""A corpus file's rows in chunks, checked as the whole-file reader checks them.

    with CorpusRows("big.h5") as rows:              # header and /X/indptr checked here
        for start in range(0, rows.n_docs, 65536):
            X = rows.read(start, min(rows.n_docs, start + 65536))   # entries checked per chunk

For corpora larger than memory (`cluster stream`, `corpus validate`): /X/indptr ((n_docs + 1)
int64) is read whole, /X/data and /X/indices chunk by chunk. Every problem is a FormatError
naming the HDF5 key, the same lines as read_corpus gives (csr_problems in corpus.py), so a
CSC-encoded /X, a short or non-monotone indptr, a missing shape attribute or string data are
refused before any row is used.
"""
from __future__ import annotations

import h5py
import numpy as np
import scipy.sparse as sp

from ..errors import FormatError
from .commit import committed_length, read_committed
from .corpus import (Categorical, damaged_file_errors, entry_problems, indptr_problems, location, open_file,
                     read_dataframe, unique_problem)


def _attr_str(obj, name: str):
    value = obj.attrs.get(name)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def csr_header_problems(f: h5py.File, key: str = "X"):
    """Problems of a CSR group's header: encoding, shape attribute, datasets, dtypes. Yields lines;
    stops at the first one that makes the rest unreadable."""
    where = location(f, key)
    if key not in f:
        yield f"{where} is missing (not a gputext corpus file?)"
        return
    g = f[key]
    if not isinstance(g, h5py.Group):
        yield f"{where} should be a group (a CSR matrix: data, indices, indptr)"
        return
    enc = _attr_str(g, "encoding-type")
    if enc != "csr_matrix":
        hint = ": gputext reads row-compressed matrices; convert with X.tocsr()" if enc == "csc_matrix" else ""
        yield f"{where} has encoding-type {enc!r}, expected 'csr_matrix'{hint}"
        return
    missing = [part for part in ("data", "indices", "indptr") if not isinstance(g.get(part), h5py.Dataset)]
    if missing:
        yield f"{where}/{missing[0]} is missing (or not a dataset)"
        return
    if "shape" not in g.attrs:
        yield f"{where} has no 'shape' attribute"
        return
    try:
        shape = tuple(int(s) for s in np.ravel(g.attrs["shape"]))
    except (TypeError, ValueError):
        shape = ()
    if len(shape) != 2 or min(shape) < 0:
        yield f"{where} attribute shape={g.attrs['shape']!r} is not a 2-d shape"
        return
    if np.asarray(g.attrs["shape"]).dtype.kind not in "iu":
        yield f"{where} attribute shape has dtype {np.asarray(g.attrs['shape']).dtype}, expected integers"
        return
    for part, kinds, want in (("indices", "iu", "int32"), ("data", "fiub", "float32"), ("indptr", "iu", "int64")):
        ds = g[part]
        if ds.dtype.kind not in kinds:
            yield f"{where}/{part} has dtype {ds.dtype}, expected {want}"
        elif ds.ndim != 1:
            yield f"{where}/{part} has {ds.ndim} dimensions, expected 1"


class CorpusRows:
    """Checked row-chunk access to /X of a corpus file (module docstring). ``path`` '-' is stdin."""

    def __init__(self, path: str):
        self.path = path
        self._f = open_file(path)
        try:
            self._check()
        except BaseException:
            self._f.close()
            raise
        self.nnz = int(self.indptr[-1])

    def _check(self) -> None:
        with damaged_file_errors(self._f.gputext_label):
            fmt = _attr_str(self._f, "gputext-format")
            if fmt not in (None, "corpus"):
                raise FormatError(f"{location(self._f, '')} has gputext-format {fmt!r}, expected 'corpus'")
            problem = next(csr_header_problems(self._f), None)
            if problem is not None:
                raise FormatError(problem)
            g = self._f["X"]
            self.n_docs, self.n_terms = (int(s) for s in np.ravel(g.attrs["shape"]))
            # committed entries only: an in-place update killed mid-append leaves tails (gputext.io.commit)
            self.indptr = read_committed(g["indptr"]).astype(np.int64, copy=False)
            stored = (committed_length(g["data"]), committed_length(g["indices"]))
            problem = next(indptr_problems(location(self._f, "X"), self.n_docs, self.indptr, stored), None)
            if problem is not None:
                raise FormatError(problem)

    def _chunk(self, start: int, stop: int):
        with damaged_file_errors(self._f.gputext_label):
            g = self._f["X"]
            lo, hi = int(self.indptr[start]), int(self.indptr[stop])
            return g["data"][lo:hi], g["indices"][lo:hi], self.indptr[start:stop + 1] - lo

    def problems(self, start: int, stop: int) -> list[str]:
        """Every problem of the entries of rows [start, stop) (entry_problems)."""
        data, indices, indptr = self._chunk(start, stop)
        return [f"{p} (rows {start}..{stop - 1})"
                for p in entry_problems(location(self._f, "X"), self.n_terms, data, indices, indptr)]

    def read(self, start: int, stop: int) -> sp.csr_matrix:
        """Rows [start, stop) as canonical CSR (float32 / int32 / int64), entries checked."""
        data, indices, indptr = self._chunk(start, stop)
        problem = next(entry_problems(location(self._f, "X"), self.n_terms, data, indices, indptr), None)
        if problem is not None:
            raise FormatError(f"{problem} (rows {start}..{stop - 1})")
        X = sp.csr_matrix((data.astype(np.float32, copy=False), indices.astype(np.int32, copy=False), indptr),
                          shape=(stop - start, self.n_terms))
        X.has_sorted_indices = True
        return X

    def annotations(self) -> tuple[np.ndarray, np.ndarray, Categorical | None]:
        """(doc ids, terms, obs/label or None), lengths checked against the shape, /X not read."""
        with damaged_file_errors(self._f.gputext_label):
            doc_ids, obs = read_dataframe(self._f, "obs", self.n_docs)
            terms, _ = read_dataframe(self._f, "var", self.n_terms)
            problem = unique_problem(self._f, "obs/_index", doc_ids, "document ids")
            if problem:
                raise FormatError(problem)
        label = obs.get("label")
        return doc_ids, terms, label if isinstance(label, Categorical) else None

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "CorpusRows":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

