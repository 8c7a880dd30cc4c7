"""Outputs that appear whole or not at all: temporary files, their names, stale ones, signals.

Every gputext output is written to a temporary file next to it and renamed onto it at the end
(``atomic_output``); '-' (stdout) is written to a temporary file in the system's temp folder and
copied out at the end.

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
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from ..errors import InputError, Terminated

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


@contextmanager
def atomic_output(path: str, suffix: str = ".h5") -> Iterator[str]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds.

    ``-`` means stdout: the temporary file's bytes are copied there at the end. On any error (a
    signal included: module docstring) the temporary file is removed, so no half-written output
    is ever left behind; stale temporary files of earlier runs in that folder are removed first.
    """
    to_stdout = path == "-"
    directory = tempfile.gettempdir() if to_stdout else (os.path.dirname(os.path.abspath(path)) or ".")
    if not to_stdout and not os.path.isdir(directory):
        raise InputError(f"output directory {directory!r} does not exist")
    if to_stdout and (sys.stdout is None or not hasattr(sys.stdout, "buffer")):
        raise InputError("-o -: standard output is closed, nothing can be written there")
    remove_stale_temps(directory)
    base = "stdout" if to_stdout else os.path.basename(path)
    with deferred_signals():
        fd, tmp = tempfile.mkstemp(prefix=f".{base}{TEMP_MARK}{os.getpid()}-", suffix=suffix, dir=directory)
        os.close(fd)
        try:
            yield tmp
            checkpoint()
            if to_stdout:
                with open(tmp, "rb") as src:
                    try:
                        shutil.copyfileobj(src, sys.stdout.buffer)
                        sys.stdout.buffer.flush()
                    except BrokenPipeError:
                        raise InputError("-o -: the reader of standard output went away (broken pipe)") from None
                os.unlink(tmp)
            else:
                umask = os.umask(0)  # mkstemp makes 0600 files; give the output the usual mode
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
                os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
