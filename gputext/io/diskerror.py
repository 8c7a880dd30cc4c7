"""Failed writes in words: DiskError and the one line that names the file and the reason.

No h5py or numpy here: gputext.io.atomic (loaded at start-up) uses it too.
"""
from __future__ import annotations

import errno

DISK_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EFBIG: "file too large (a file size limit, "
               "e.g. ulimit -f)", errno.EIO: "input/output error", errno.EDQUOT: "disk quota exceeded"}


class DiskError(OSError):
    """A write failed (ENOSPC, EFBIG, EIO, ...); the message is one line naming the file.
    ``named``: the message names the user's output (not a temporary file): an enclosing
    atomic_output keeps it as it is."""

    named = False

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def describe(exc: OSError) -> str:
    """A failed write's reason in words, with the errno's name (e.g. 'no space left on the device (ENOSPC)')."""
    name = errno.errorcode.get(exc.errno or 0, "")
    words = DISK_ERRNOS.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()
    return f"{words} ({name})" if name else words


def is_disk_error(exc: BaseException) -> bool:
    """An OSError of the disk (full, over a size limit or quota, failing), not of a path or permission."""
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS
