"""The commit record of a corpus file that is appended to in place (DClustR's ``--update X -o X``).

An in-place append must survive being killed at any point (kill -9, OOM killer): a reader must
then see the old contents or the new ones, and the next update must succeed.  HDF5 keeps no
journal, so the file carries its own record: the root attribute ``gputext-commit`` (JSON)

    {"lengths": {"/X/data": nnz, "/X/indices": nnz, "/X/indptr": n + 1, "/obs/_index": n, ...},
     "pending": [["move", src, dst] | ["attr", key, name, value, dtype], ...]}

(and ``"writing": true`` while an append is under way).  ``lengths`` are the committed lengths
of the datasets an append grows: everything a reader takes from such a dataset is its first
``lengths[key]`` entries (``committed_length`` / ``read_committed``), so a torn tail written by a
killed append is invisible.  An append writes
its tails and its new groups (under TMP_PREFIX names at the root, which readers never look at),
flushes, and then commits with one small write: the record with the new lengths and the list
of link moves and attribute writes that put the new groups in place (``pending``).  Those are
redone on the next open when a kill interrupts them (each is idempotent: a move whose source is
gone is done), then the record is rewritten without them; anything TMP_PREFIX left at the root
is deleted, and a torn (uncommitted) tail is truncated to its committed length (``settle``).

Every gputext reader opens corpus files through ``gputext.io.corpus`` (its ``open_file``), which
settles a file left with pending moves before reading it; datasets are read through
``read_committed``.  A file without the record (every file not appended to in place, and files
written before the record existed) reads as stored.  The record protects against the process
dying, not against the machine losing power (no fsync ordering; HDF5 does not promise it).
"""
from __future__ import annotations

import json
import os
import signal

import h5py
import numpy as np

RECORD_ATTR = "gputext-commit"
TMP_PREFIX = "__gputext_update_"  # root-level names of an append's uncommitted groups
CRASH_ENV = "GPUTEXT_CRASH_AT"  # tests: the named checkpoint of an append at which the process kills itself


def read_record(f: h5py.File) -> dict | None:
    """The commit record of an open file ({"lengths": {...}, "pending": [...]}), or None."""
    raw = f.attrs.get(RECORD_ATTR)
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode()
    try:
        record = json.loads(str(raw))
        if not isinstance(record, dict):
            raise ValueError("not an object")
    except ValueError:
        from ..errors import FormatError
        raise FormatError(f"{f.filename}: the root attribute {RECORD_ATTR} is not a commit record (JSON object): "
                          f"{str(raw)[:60]!r}") from None
    record.setdefault("lengths", {})
    record.setdefault("pending", [])
    return record


def write_record(f: h5py.File, lengths: dict, pending=(), writing: bool = False) -> None:
    """Write the record (sorted keys: two writers of the same contents write the same bytes).
    ``writing``: an append is under way (set before its first write, cleared by its commit)."""
    record = {"lengths": {k: int(v) for k, v in lengths.items()}, "pending": [list(op) for op in pending]}
    if writing:
        record["writing"] = True
    f.attrs[RECORD_ATTR] = json.dumps(record, sort_keys=True)


def current_lengths(f: h5py.File, keys) -> dict:
    """{key: stored length} of those of ``keys`` (absolute paths) present in ``f``."""
    return {k: int(f[k].shape[0]) for k in keys if k in f and isinstance(f[k], h5py.Dataset) and f[k].ndim == 1}


def committed_length(ds: h5py.Dataset) -> int:
    """Entries of a 1-d dataset that belong to the file's committed contents."""
    n = int(ds.shape[0]) if ds.ndim else 0
    record = read_record(ds.file)
    if record is None:
        return n
    return min(n, int(record["lengths"].get(ds.name, n)))


def read_committed(ds: h5py.Dataset) -> np.ndarray:
    """The committed entries of a dataset (all of a dataset the record does not list)."""
    if ds.ndim != 1:
        return ds[()]
    n = committed_length(ds)
    return ds[()] if n == ds.shape[0] else ds[:n]


def has_pending(f: h5py.File) -> bool:
    record = read_record(f)
    return bool(record and record["pending"])


def apply_op(f: h5py.File, op) -> None:
    """Do one pending step; a step already done is skipped (so it can be redone after a kill)."""
    if op[0] == "move":
        src, dst = op[1], op[2]
        if src in f and dst not in f:
            f.move(src, dst)
    elif op[0] == "attr":
        key, name, value, dtype = op[1:5]
        f[key].attrs[name] = np.asarray(value, dtype=dtype) if dtype else value
    else:
        raise ValueError(f"unknown commit step {op[0]!r}")


def _is_vlen(ds: h5py.Dataset) -> bool:
    return h5py.check_vlen_dtype(ds.dtype) is not None or (
        h5py.check_string_dtype(ds.dtype) is not None and h5py.check_string_dtype(ds.dtype).length is None)


def _truncate(ds: h5py.Dataset, n: int) -> None:
    """Cut a growable 1-d dataset back to n entries.  A variable-length (string) dataset is
    rewritten instead: entries past n in its last chunk may point at global-heap objects that a
    killed append never flushed (even where the stored length is still n), and HDF5 frees what an
    entry pointed at when it is overwritten, so appending over them would fail ("bad heap
    index")."""
    if not _is_vlen(ds):
        ds.resize((n,))
        return
    values, attrs, chunks, dtype = ds[:n], dict(ds.attrs), ds.chunks, ds.dtype
    parent, name = ds.parent, ds.name.rsplit("/", 1)[1]
    del parent[name]
    new = parent.create_dataset(name, shape=(n,), dtype=dtype, chunks=chunks, maxshape=(None,))
    if n:
        new[:] = values
    for key, value in attrs.items():
        new.attrs[key] = value


def settle(f: h5py.File) -> str:
    """Bring a file opened for writing to a committed state: pending steps of a commit are
    redone (roll forward), otherwise tails beyond the committed lengths are truncated (roll
    back; after a torn append, flagged by ``writing``, variable-length datasets are rewritten
whatever their stored length); leftover TMP_PREFIX groups are deleted.  Returns "forward",
"back" or ""."""
    record = read_record(f)
    done = ""
    if record is not None and record["pending"]:
        for op in record["pending"]:
            apply_op(f, op)
        write_record(f, record["lengths"])
        f.flush()
        done = "forward"
    elif record is not None:
        torn = bool(record.get("writing"))
        for key, n in record["lengths"].items():
            if key in f and (f[key].shape[0] > n or (torn and _is_vlen(f[key]))):
                _truncate(f[key], n)
                done = "back"
        if torn:
            write_record(f, record["lengths"])
            done = "back"
    for key in [k for k in f.keys() if k.startswith(TMP_PREFIX)]:
        del f[key]
        done = done or "back"
    if done:
        f.flush()
    return done


def settle_path(path: str) -> None:
    """Settle a file whose record has pending steps (what a reader does before reading it); a
    file that cannot be opened for writing gets a clear error instead."""
    from ..errors import FormatError
    from .diskerror import DiskError
    from .h5file import h5_output

    try:
        with h5_output(path, "r+", journal=True) as f:  # a full disk meanwhile: put back as it was
            settle(f)
    except DiskError:
        raise
    except OSError as exc:
        raise FormatError(f"{path}: an update of this file was killed while putting its committed parts in "
                          "place; open it once with write access (any gputext command reading it completes the "
                          f"update): {str(exc).splitlines()[0]}") from None


def checkpoint(name: str) -> None:
    """A named point of an in-place append; with $GPUTEXT_CRASH_AT equal to it the process
    kills itself there (SIGKILL: no cleanup runs), so tests hit every point deterministically."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
