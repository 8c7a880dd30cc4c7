"""The CLI's ``--scheduler`` option and the client it gives (Dask imported only when used)."""
from __future__ import annotations

from contextlib import contextmanager

import click

scheduler_option = click.option(
    "--scheduler", metavar="ADDRESS|local:N",
    help="Run on a Dask cluster: a scheduler address (tcp://host:8786) or local:N (N workers here; one per GPU "
         "with dask-cuda). Results are identical to one process. Needs pip install 'gputext[dask]'.")


@contextmanager
def scheduler_client(scheduler: str | None, quiet: bool):
    """None without --scheduler, else a connected Client (closed, with any local cluster, at the end)."""
    if scheduler is None:
        yield None
        return
    from .client import connect
    with connect(scheduler, quiet) as client:
        yield client


def device_for(device: str, scheduler: str | None, quiet: bool):
    """The --device value to use: picked here (and said) without a scheduler; passed through to the
    workers, which resolve it on their own hardware, with one."""
    if scheduler is None:
        from ..cli_common import pick_backend
        return pick_backend(device, quiet)
    return device
