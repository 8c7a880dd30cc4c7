"""Appending to a corpus file in place, committed by one final small write (gputext.io.commit).

    with CorpusAppend(path, n_docs=n_old, tracked=keys) as app:   # opens r+, settles, checks n_docs
        app.append_rows(X_add)                 # /X tails (or /X rewritten once when not growable)
        app.append_ids(new_ids)                # /obs/_index tail, moved into the new obs at commit
        app.write_dataframe("obs", columns)    # new groups under TMP_PREFIX names ...
        app.write_dict("obsm", obsm)
        app.write_dict("uns", uns)
        app.append(key, values)                # any growable 1-d dataset (tracked)
        app.move_at_commit(src, dst)           # ... and the steps that put them in place
        app.commit()

Nothing a reader sees changes before ``commit``: tails lie beyond the committed lengths and new
groups under TMP_PREFIX names.  ``commit`` flushes, writes the record (new lengths + the
pending moves and attribute writes), flushes, does the steps, rewrites the record without them
and deletes the replaced groups.  A kill before the record leaves the old file (the next open
truncates the tails and drops the TMP groups); a kill after it leaves the new one (the next open
redoes the steps).  An exception inside the block (in this process), a full disk or an I/O
error included, puts the file back byte for byte from the undo log of gputext.io.h5file (the
file is opened through its ``h5_output``), whether the record was written or not.

``step(name)`` (the constructor's argument) is called at named points (tests inject failures
there); ``commit.checkpoint`` kills the process at the point named by $GPUTEXT_CRASH_AT.
"""
from __future__ import annotations

import h5py
import numpy as np
import scipy.sparse as sp

from ..errors import FormatError, InputError
from .commit import TMP_PREFIX, apply_op, checkpoint, current_lengths, read_record, settle, write_record
from .corpus import (TERMS_DIGEST_ATTR, index_dataset, read_str_array, uns_for_file, write_csr_group,
                     write_dataframe, write_dict)
from .h5file import check, h5_output

X_KEYS = ("/X/data", "/X/indices", "/X/indptr")


def growable(ds) -> bool:
    """A chunked 1-d dataset without a size limit (rows can be appended in place)."""
    return isinstance(ds, h5py.Dataset) and ds.chunks is not None and ds.maxshape == (None,)


class CorpusAppend:
    """An in-place append to the corpus file ``path`` (see the module docstring).

    n_docs: the number of documents the caller read (the file must still hold that many: an
    update that ran meanwhile is refused); tracked: absolute paths of every dataset whose
    committed length the record keeps (what this and later appends grow)."""

    def __init__(self, path: str, n_docs: int, tracked, step=None):
        self.path = path
        self.tracked = tuple(tracked)
        self._user_step = step or (lambda name: None)
        self._ops: list = []  # steps done at commit: ["move", src, dst] / ["attr", key, name, value, dtype]
        self._replace: list[str] = []  # root groups replaced at commit by TMP_PREFIX + name
        self._ids_index = None  # all ids, when /obs/_index is rewritten instead of appended to
        self._file = h5_output(path, "r+", journal=True)
        try:
            self.f = self._file.__enter__()
        except OSError as exc:
            raise InputError(f"{path}: cannot open for writing (is another process updating it?): "
                             f"{str(exc).splitlines()[0]}") from None
        self.f.gputext_label = path  # type: ignore[attr-defined]  (reader errors name the file)
        try:
            settle(self.f)
            stored = int(self.f["X"].attrs["shape"][0]) if "X" in self.f and "shape" in self.f["X"].attrs else -1
            if stored != n_docs:
                raise InputError(f"{path} holds {stored} documents, but {n_docs} were read from it: the file changed "
                                 "while it was being updated (another update of the same file?); run the update again")
            record = read_record(self.f)
            lengths = dict(record["lengths"]) if record else {}
            missing = {k: v for k, v in current_lengths(self.f, self.tracked).items() if k not in lengths}
            self.lengths = {**lengths, **missing}  # missing: a file never appended to, or written before
            write_record(self.f, self.lengths, writing=True)  # a kill from here on is rolled back
            self.f.flush()
        except BaseException as exc:
            self._file.__exit__(type(exc), exc, exc.__traceback__)
            raise

    # ------------------------------------------------------------------ before the commit
    def step(self, name: str) -> None:
        check(self.f)  # a write failed (full disk): stop here, the file is put back on exit
        checkpoint(name)
        self._user_step(name)

    def append(self, key: str, values: np.ndarray) -> None:
        """Write ``values`` after the committed end of the growable dataset ``key``."""
        ds = self.f[key]
        n0 = self.lengths.get(ds.name, ds.shape[0])
        ds.resize((n0 + len(values),))
        if len(values):
            ds.write_direct(np.ascontiguousarray(values, ds.dtype), np.s_[0:len(values)], np.s_[n0:n0 + len(values)])

    def rows_growable(self, n_docs: int) -> bool:
        X = self.f["X"]
        return all(growable(X.get(k)) for k in ("data", "indices", "indptr")) and \
            self.lengths.get("/X/indptr", X["indptr"].shape[0]) == n_docs + 1

    def append_rows(self, X_old, X_add: sp.csr_matrix, compression=None) -> None:
        """Append the rows of X_add to /X (tails; the shape attribute is set at commit), or, when
        /X is not growable, write the union (X_old() gives the stored rows) under a TMP name
        once, as growable datasets, to replace /X at commit."""
        X = self.f["X"]
        n_old, n_cols = (int(s) for s in X.attrs["shape"])
        if self.rows_growable(n_old):
            nnz0 = int(X["indptr"][n_old])
            if self.lengths.get("/X/data", X["data"].shape[0]) != nnz0 or \
                    self.lengths.get("/X/indices", X["indices"].shape[0]) != nnz0:
                raise FormatError(f"{self.path}: /X/data and /X/indices must have indptr[-1] = {nnz0} entries")
            self._ops.append(["attr", "/X", "shape", [n_old + X_add.shape[0], n_cols], "int64"])
            self.append("/X/data", X_add.data)
            self.step("X/data")
            self.append("/X/indices", X_add.indices)
            self.append("/X/indptr", X_add.indptr[1:].astype(np.int64) + nnz0)
            self.step("X")
        else:
            write_csr_group(self.f, TMP_PREFIX + "X", sp.vstack([X_old(), X_add]).tocsr(), compression, growable=True)
            self._replace.append("X")

    def append_ids(self, new_ids: list, old_ids=None) -> None:
        """The ids after the committed /obs/_index (moved into the new obs group at commit), or,
        when it is not growable, every id rewritten once (old_ids() gives the stored ones)."""
        n_old = int(self.f["X"].attrs["shape"][0])
        ds = index_dataset(self.f, "obs", n_old)
        if ds.name == "/obs/_index" and growable(ds) and h5py.check_string_dtype(ds.dtype) is not None:
            values = np.empty(len(new_ids), dtype=object)
            values[:] = new_ids
            self.append("/obs/_index", values)
            self.step("obs/_index")
            self._ops.append(["move", "/obs/_index", f"/{TMP_PREFIX}obs/_index"])
        else:
            old = old_ids() if old_ids is not None else read_str_array(ds)
            self._ids_index = np.concatenate([old, np.asarray(new_ids, dtype=object)])

    def write_dataframe(self, name: str, columns: dict) -> None:
        """The new dataframe ``name`` (columns; its index from append_ids) under a TMP name."""
        write_dataframe(self.f, TMP_PREFIX + name, self._ids_index, columns, index_growable=self._ids_index is not None)
        self._replace.append(name)

    def write_dict(self, name: str, d: dict, uns: bool = False) -> h5py.Group:
        """The new dict group ``name`` under a TMP name (``uns``: as /uns is written, with the
        version); returns it (callers add datasets of their own)."""
        write_dict(self.f, TMP_PREFIX + name, uns_for_file(d) if uns else d)
        self._replace.append(name)
        return self.f[TMP_PREFIX + name]

    def store_terms_digest(self, digest: str, n_terms: int) -> None:
        """Set the vocabulary digest of /var/_index at commit (a file written without it)."""
        self.set_attr_at_commit(index_dataset(self.f, "var", n_terms).name, TERMS_DIGEST_ATTR, digest)

    def move_at_commit(self, src: str, dst: str) -> None:
        self._ops.append(["move", src, dst])

    def set_attr_at_commit(self, key: str, name: str, value, dtype: str | None = None) -> None:
        self._ops.append(["attr", key, name, value, dtype])

    # ------------------------------------------------------------------ the commit
    def commit(self) -> None:
        """Record the new lengths and the steps (one small write), then do the steps."""
        ops = list(self._ops)
        for name in self._replace:  # park the old group, put the new one in place
            ops += [["move", f"/{name}", f"/{TMP_PREFIX}old_{name}"], ["move", f"/{TMP_PREFIX}{name}", f"/{name}"]]
        self.f.flush()
        self.step("flushed")
        final = self.lengths | self._final_lengths(ops)
        write_record(self.f, final, ops)
        self.f.flush()
        self.step("committed")
        for op in ops:
            self._do(op)
            if op[0] == "move" and op[2].startswith(f"/{TMP_PREFIX}old_"):
                self.step("park " + op[1].lstrip("/"))
        self.step("swapped")
        write_record(self.f, final)
        self.f.flush()
        self.step("recorded")
        for name in self._replace:
            del self.f[f"{TMP_PREFIX}old_{name}"]

    def _final_lengths(self, ops) -> dict:
        """Lengths of the tracked datasets once the steps are done (read where they are now)."""
        out = {}
        for k in self.tracked:
            src = self._source_of(k, ops)
            if src in self.f and isinstance(self.f[src], h5py.Dataset):
                out[k] = int(self.f[src].shape[0])
        return out

    @staticmethod
    def _source_of(key: str, ops) -> str:
        """Where the dataset that ends up at ``key`` lies before the steps (undoing the moves)."""
        for op in reversed(ops):
            if op[0] == "move" and (key == op[2] or key.startswith(op[2] + "/")):
                key = op[1] + key[len(op[2]):]
        return key

    def _do(self, op) -> None:
        apply_op(self.f, op)

    def __enter__(self) -> "CorpusAppend":
        return self

    def __exit__(self, exc_type, exc, tb):
        """Close; on an exception (or a failed write) the file is first put back byte for byte."""
        return self._file.__exit__(exc_type, exc, tb)
