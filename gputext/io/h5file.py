"""HDF5 files written so that a full disk or an I/O error is one clean error, never a torn file.

HDF5 does not survive a failed write: after ENOSPC, EFBIG (``ulimit -f``) or EIO inside one of its
writes, its metadata cache is inconsistent, closing the file writes more, and the process ends in
"Slist already enabled?", "Exception ignored in ObjectID.__dealloc__" or a segfault, leaving a file
that no longer opens. So gputext never lets HDF5 see a failed write. Every HDF5 file it writes is
opened on a ``GuardedFile`` (h5py's file-object driver): the first failed write is recorded and the
file turns into a sink (later writes are kept in memory so that HDF5 reads back what it wrote, and
never reach the disk); HDF5 finishes and closes normally; ``h5_output`` then raises ``DiskError``
(an OSError: exit code 2, one line) and the caller's temporary file is removed (atomic_output).

An in-place update (``journal=True``) also keeps an undo log in memory: before a write or a
truncation changes a byte of the file as it was when opened, the original 4 KiB pages around it are
saved. On an error of any kind (a failed write, an exception, Ctrl-C) the file is closed and then
put back byte for byte: cut to its old size, the saved pages written back (they lie inside the old
size, so on a full disk this needs no new space). The undo log is for errors in this process; a
process killed outright is rolled back or forward by the commit record (gputext.io.commit).

``open_image`` opens HDF5 bytes (standard input) with HDF5's in-memory driver: no Python object
behind the file, so a refused input leaves nothing for the interpreter's exit to trip over.
"""
from __future__ import annotations

import fcntl
import gc
import io
import os
from contextlib import contextmanager
from typing import Iterator

import h5py

from .diskerror import DiskError, describe

PAGE = 4096
OVERLAY_CAP = 64 << 20  # bytes of writes kept in memory after a failure (larger ones are dropped)


class GuardedFile(io.RawIOBase):
    """A file for h5py's file-object driver that never fails a write (module docstring).

    ``create``: truncate or create the file; ``journal``: keep the undo log of the file's old
    bytes. ``error`` is the first OSError of a write, truncation or flush (None while all went well)."""

    def __init__(self, path: str, create: bool = False, journal: bool = False):
        super().__init__()
        self.path = path
        self.fd = os.open(path, os.O_RDWR | ((os.O_CREAT | os.O_TRUNC) if create else 0), 0o666)
        try:  # HDF5's own lock (its file-object driver takes none): one writer, no readers meanwhile
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            raise
        self.pos = 0
        self.error: OSError | None = None
        self.journal = journal
        self.old_size = os.fstat(self.fd).st_size
        self.saved: dict[int, bytes] = {}  # page number -> the page's bytes when opened (journal)
        self.overlay: list[tuple[int, bytes]] = []  # writes after a failure, in order
        self.overlay_bytes = 0
        self.size_after_failure = 0

    # ------------------------------------------------------------------ io.RawIOBase
    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self._size()}[whence]
        self.pos = base + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        data = os.pread(self.fd, len(view), self.pos)
        view[:len(data)] = data
        n = len(data)
        for start, chunk in self.overlay:  # what HDF5 wrote after the failure, over the disk's bytes
            lo, hi = max(start, self.pos), min(start + len(chunk), self.pos + len(view))
            if lo < hi:
                if hi - self.pos > n:
                    view[n:hi - self.pos] = bytes(hi - self.pos - n)
                    n = hi - self.pos
                view[lo - self.pos:hi - self.pos] = chunk[lo - start:hi - start]
        self.pos += n
        return n

    def write(self, buffer) -> int:
        data = bytes(buffer)
        if self.error is None:
            try:
                self._save(self.pos, self.pos + len(data))
                done = 0
                while done < len(data):
                    done += os.pwrite(self.fd, data[done:], self.pos + done)
            except OSError as exc:
                self._failed(exc)
        if self.error is not None:
            self._keep(self.pos, data)
        self.pos += len(data)
        return len(data)

    def truncate(self, size: int | None = None) -> int:
        size = self.pos if size is None else size
        if self.error is None:
            try:
                self._save(size, self.old_size)
                os.ftruncate(self.fd, size)
            except OSError as exc:
                self._failed(exc)
        if self.error is not None:
            self.size_after_failure = size
        return size

    def flush(self) -> None:
        pass  # unbuffered: every write went to the operating system already

    def close(self) -> None:
        """Close the descriptor (h5py never does; h5_output does, after HDF5 closed the file)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        super().close()

    # ------------------------------------------------------------------ the guard
    @property
    def failed(self) -> bool:
        return self.error is not None

    def _size(self) -> int:
        if self.error is None:
            return os.fstat(self.fd).st_size
        return max([self.size_after_failure] + [s + len(c) for s, c in self.overlay])

    def _failed(self, exc: OSError) -> None:
        self.error = exc
        self.size_after_failure = os.fstat(self.fd).st_size

    def _keep(self, start: int, data: bytes) -> None:
        if self.overlay_bytes + len(data) <= OVERLAY_CAP:
            self.overlay.append((start, data))
            self.overlay_bytes += len(data)

    def _save(self, start: int, end: int) -> None:
        """Journal: save the old pages that [start, end) overlaps inside the old size, once each."""
        if not self.journal:
            return
        for page in range(start // PAGE, (min(end, self.old_size) + PAGE - 1) // PAGE):
            if page not in self.saved:
                self.saved[page] = os.pread(self.fd, PAGE, page * PAGE)

    def roll_back(self) -> None:
        """Put the file back as it was when opened (journal): old size, then the saved pages."""
        os.ftruncate(self.fd, self.old_size)
        for page, data in sorted(self.saved.items()):
            done = 0
            while done < len(data):
                done += os.pwrite(self.fd, data[done:], page * PAGE + done)


@contextmanager
def h5_output(path: str, mode: str = "w", journal: bool = False, **kwargs) -> Iterator[h5py.File]:
    """An h5py.File on a GuardedFile (module docstring): ``mode`` "w" (create), "a" or "r+";
    ``kwargs`` go to h5py.File (file-space strategy, ...). A failed write raises DiskError once
    HDF5 closed the file; with ``journal`` any error puts the file back as it was first."""
    raw = GuardedFile(path, create=mode == "w", journal=journal)
    f = _open_on(raw, mode, journal, kwargs)
    f.gputext_guard = raw  # type: ignore[attr-defined]  (check)
    try:
        yield f
    except BaseException as exc:
        try:
            f.close()
        finally:
            _release(raw, journal)
        if raw.error is not None:  # the failed write came first: it is the reason
            raise disk_error(path, raw.error, journal) from None
        raise exc
    f.close()
    _release(raw, journal and raw.failed)
    if raw.error is not None:
        raise disk_error(path, raw.error, journal)


def _open_on(raw: GuardedFile, mode: str, journal: bool, kwargs: dict) -> h5py.File:
    """h5py.File on ``raw``. When HDF5 refuses the file, its half-open file still refers to ``raw``
    from h5py's frames: the error is dropped and collected here, else the interpreter's exit
    finalizes it after the modules it needs (a segfault, exit 139); a plain OSError with its
    first line is raised instead."""
    message = None
    try:
        return h5py.File(raw, mode, **kwargs)
    except OSError as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except BaseException:
        _release(raw, journal)
        raise
    _release(raw, journal)
    gc.collect()
    raise OSError(message)


def _release(raw: GuardedFile, roll_back: bool) -> None:
    """Put the file back (``roll_back``) and close the descriptor; a failed roll-back is one line."""
    try:
        if roll_back:
            raw.roll_back()
    except OSError as exc:
        raise DiskError(exc.errno, f"{raw.path}: {describe(exc)} while putting the file back after a failed "
                                   "write: it may be damaged; `gputext corpus validate` says") from None
    finally:
        raw.close()


def disk_error(path: str, exc: OSError, rolled_back: bool) -> DiskError:
    """The one-line DiskError of a failed write to ``path`` (atomic_output names its output instead
    of its temporary file)."""
    what = "; the update was rolled back, the file is as it was" if rolled_back else ""
    error = DiskError(exc.errno, f"{path}: {describe(exc)} while writing{what}")
    error.named = rolled_back  # a file updated in place is the user's own; a new one is a temporary file
    return error


def check(f: h5py.File) -> None:
    """Raise now if a write of an h5_output file failed (long writers call it between chunks, so
    a full disk stops them at once; h5_output turns it into the DiskError)."""
    guard = getattr(f, "gputext_guard", None)
    if guard is not None and guard.error is not None:
        raise guard.error


def open_image(data: bytes, label: str) -> h5py.File:
    """A read-only h5py.File over HDF5 bytes held in memory (HDF5's core driver; module docstring)."""
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_fapl_core(backing_store=False)
    fapl.set_file_image(data)
    fid = h5py.h5f.open(label.encode(), h5py.h5f.ACC_RDONLY, fapl=fapl)
    return h5py.File(fid)
