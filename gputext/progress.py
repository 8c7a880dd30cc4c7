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


NULL = Progress(None)
