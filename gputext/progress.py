"""Progress reporting on stderr that respects --quiet."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import click


class Progress:
    """A counter with a label; ``update(n)`` advances it. Silent when ``quiet``."""

    def __init__(self, bar):
        self._bar = bar

    def update(self, n: int = 1) -> None:
        from .io.atomic import checkpoint
        checkpoint()  # a safe point: a SIGINT/SIGTERM deferred during a write is raised here
        if self._bar is not None:
            self._bar.update(n)


@contextmanager
def progress(length: int, label: str, quiet: bool = False) -> Iterator[Progress]:
    if quiet or length <= 0:
        yield Progress(None)
        return
    with click.progressbar(length=length, label=label, file=sys.stderr, show_pos=True,
                           show_eta=True) as bar:
        yield Progress(bar)


def info(message: str, quiet: bool = False) -> None:
    """A status line on stderr (stdout may carry a corpus in a pipeline)."""
    if not quiet:
        click.echo(message, err=True)


@contextmanager
def heartbeat(label: str, quiet: bool = False, every: float = 30.0) -> Iterator[None]:
    """For a stage with no progress of its own (a solver call): '<label> ...' when it starts, then
    '<label>: still running, N s' every ``every`` seconds from a background thread, and
    '<label>: done in N s' at the end. Silent when ``quiet``."""
    import threading
    import time

    if quiet:
        yield
        return
    start = time.perf_counter()
    stop = threading.Event()

    def beat():
        while not stop.wait(every):
            info(f"{label}: still running, {time.perf_counter() - start:.0f} s")

    info(f"{label} ...")
    thread = threading.Thread(target=beat, name="gputext-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    info(f"{label}: done in {time.perf_counter() - start:.1f} s")


def warn(message: str) -> None:
    """A warning on stderr ('Warning: ...'), shown even with --quiet: the result is made but
    something in the input deserves a look."""
    click.echo(f"Warning: {message}", err=True)


NULL = Progress(None)
