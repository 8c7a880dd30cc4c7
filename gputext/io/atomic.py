"""Outputs that appear whole or not at all: temporary files, their names, stale ones, signals.

Every gputext output is written to a temporary file next to it and renamed onto it at the end
(``atomic_output``); a symlink's target is renamed onto, the link stays. Only regular files are
renamed over: '-' (stdout), devices (/dev/null, /dev/full), FIFOs and /dev/stdout are written to a
temporary file in the system's temp folder and copied out at the end (``output_target``). A full
disk or an I/O error while writing is one line (DiskError), the old output stays.

Temporary names: ``.{output name}.gputext-tmp-{pid}-{random}{suffix}``, e.g.
``.train.h5.gputext-tmp-41822-k3j9x1.h5`` (hidden, in the output's folder).

Stale temporary files (left by kill -9, a power cut, ...): each atomic_output first removes, in
the folder it writes to, the temporary files of that naming whose pid is not a running process
on this machine, and those older than 7 days whatever their pid (pids get reused). On a folder
shared by several machines a live writer elsewhere keeps its file only while its pid is not
running here as well; do not let two machines write to one folder at once.

Signals: inside an atomic_output block SIGINT and SIGTERM are deferred: the first one is noted
(one line on stderr) and raised at the next safe point, ``checkpoint()`` (every progress-bar
update and every CorpusWriter.append call it) or at the end of the block, before the rename;
the temporary file is removed and the old output stays. SIGINT raises KeyboardInterrupt (exit
130), SIGTERM raises Terminated (exit 143). A second signal while one is pending raises at once.
Handlers installed by the caller (the stream's stop-at-batch handler) are left in charge.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from ..errors import InputError, Terminated
from .diskerror import DiskError, describe, is_disk_error

TEMP_MARK = ".gputext-tmp-"
STALE_SECONDS = 7 * 24 * 3600
_TEMP_NAME = re.compile(r"^\..+\.gputext-tmp-(\d+)-[A-Za-z0-9_]+(\.[A-Za-z0-9]+)?$")
_pending: list[int] = []   # signals noted while deferred
_depth = [0]               # nesting of deferring blocks


def temp_pid(name: str) -> int | None:
    """The writer's pid of a temporary file name of ours, None for any other name."""
    m = _TEMP_NAME.match(name)
    return int(m.group(1)) if m else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def remove_stale_temps(directory: str, now: float | None = None) -> list[str]:
    """Remove our stale temporary files in ``directory`` (module docstring); returns their paths."""
    now = time.time() if now is None else now
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        pid = temp_pid(name)
        if pid is None or pid == os.getpid():
            continue
        path = os.path.join(directory, name)
        try:
            old = now - os.stat(path).st_mtime > STALE_SECONDS
            if old or not _running(pid):
                os.unlink(path)
                removed.append(path)
        except OSError:
            continue  # gone already, or not ours to remove
    return removed


def checkpoint() -> None:
    """Raise a deferred signal now (called at safe points of long writes)."""
    if _pending:
        signum = _pending.pop()
        _pending.clear()
        raise_for(signum)


def raise_for(signum: int):
    if signum == signal.SIGTERM:
        raise Terminated("terminated (SIGTERM)")
    raise KeyboardInterrupt


def _deferring_handler(signum, frame):
    if _pending:  # asked twice: stop now
        _pending.clear()
        raise_for(signum)
    _pending.append(signum)
    try:
        sys.stderr.write(f"\n{signal.Signals(signum).name}: stopping at the next safe point; the old output is "
                         "kept (send it again to stop now)\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


@contextmanager
def deferred_signals() -> Iterator[None]:
    """SIGINT and SIGTERM noted instead of raised inside the block (module docstring). Only in the
    main thread, and only where the handler is Python's default (a caller's own handler stays)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    installed = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        current = signal.getsignal(sig)
        if current in (signal.default_int_handler, signal.SIG_DFL, _deferring_handler, _terminate_handler):
            installed[sig] = signal.signal(sig, _deferring_handler)
    _depth[0] += 1
    pending: list[int] = []
    try:
        yield
    finally:
        _depth[0] -= 1
        for sig, old in installed.items():
            signal.signal(sig, old)
        if _depth[0] == 0:
            pending = list(_pending)
            _pending.clear()
    if pending:  # arrived after the last checkpoint: the output is complete, the command stops here
        raise_for(pending[-1])


def _terminate_handler(signum, frame):
    raise Terminated("terminated (SIGTERM)")


def raise_on_sigterm() -> None:
    """Make SIGTERM raise Terminated in the main thread (the CLI calls it once), so that finally
    blocks run and temporary files are removed, as for Ctrl-C."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate_handler)


def output_target(path: str) -> str | None:
    """The regular file an output named ``path`` is renamed onto (symlinks resolved: the link
    stays and its target gets the output), or None when the output is streamed into ``path``
    instead: '-' (stdout), a character or block device (/dev/null, /dev/full), a FIFO, a socket,
    or a /proc file-descriptor link such as /dev/stdout. A rename would replace those."""
    if path == "-":
        return None
    try:
        st = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"{path}: cannot write the output here: {exc.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{path}: is a directory, expected an output file name")
        return None
    real = os.path.realpath(path)
    if real.startswith("/proc/") or (st is not None and not os.path.exists(real)):
        return None  # /dev/stdout redirected to a file: write through the descriptor, as a shell would
    return real


def _stream_out(tmp: str, path: str) -> None:
    """Copy the finished temporary file into stdout or the special file ``path``."""
    with open(tmp, "rb") as src:
        try:
            if path == "-":
                shutil.copyfileobj(src, sys.stdout.buffer)
                sys.stdout.buffer.flush()
            else:
                with open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        except BrokenPipeError:
            raise InputError(f"-o {path}: the reader went away (broken pipe)") from None


def _disk_error(path: str, exc: OSError) -> DiskError:
    name = "standard output" if path == "-" else path
    kept = "the old file is kept" if path != "-" and os.path.isfile(path) else "nothing was written"
    error = DiskError(exc.errno, f"{name}: {describe(exc)} while writing; {kept}")
    error.named = temp_pid(os.path.basename(path)) is None  # False: an outer block's temporary file
    return error


@contextmanager
def atomic_output(path: str, suffix: str = ".h5") -> Iterator[str]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds.

    ``-`` means stdout, and a device, a FIFO or /dev/stdout are streamed too (output_target): the
    temporary file (in the system's temp folder) is copied there at the end. A symlink's target
    gets the output. On any error (a signal included: module docstring) the temporary file is
    removed, so no half-written output is ever left behind; a full disk or an I/O error is one
    line (DiskError) and the old output stays. Stale temporary files of earlier runs in that
    folder are removed first.
    """
    if not path:
        raise InputError("-o '': the output file name is empty")
    target = output_target(path)
    streamed = target is None
    directory = tempfile.gettempdir() if streamed else (os.path.dirname(target) or ".")
    if not streamed and not os.path.isdir(directory):
        raise InputError(f"output directory {directory!r} does not exist")
    if path == "-" and (sys.stdout is None or not hasattr(sys.stdout, "buffer")):
        raise InputError("-o -: standard output is closed, nothing can be written there")
    remove_stale_temps(directory)
    base = "stdout" if streamed else os.path.basename(target)
    with deferred_signals():
        fd, tmp = tempfile.mkstemp(prefix=f".{base}{TEMP_MARK}{os.getpid()}-", suffix=suffix, dir=directory)
        os.close(fd)
        try:
            yield tmp
            checkpoint()
            if streamed:
                _stream_out(tmp, path)
                os.unlink(tmp)
            else:
                umask = os.umask(0)  # mkstemp makes 0600 files; give the output the usual mode
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
                os.replace(tmp, target)
        except BaseException as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if is_disk_error(exc) and not getattr(exc, "named", False):  # named: a nested output's own
                raise _disk_error(path, exc) from None
            raise
