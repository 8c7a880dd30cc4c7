"""Shared click options and helpers for every gputext command (the CLI is thin: validate, call
one library function, write atomically)."""
from __future__ import annotations

import click

from .backend import DEVICES, Backend, resolve
from .progress import info

device_option = click.option(
    "--device", type=click.Choice(DEVICES, case_sensitive=False), default="auto", show_default=True,
    help="Where kernels run: auto picks the GPU when one is usable (and says so), else the CPU twin.")
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress bars or status lines on stderr.")
output_option = click.option(
    "-o", "--output", "output", required=True, type=click.Path(dir_okay=False, allow_dash=True),
    help="Output HDF5 file (written to a temporary name, then renamed); - writes to stdout.")
input_argument = click.argument  # documented alias: commands use click.argument("corpus", ...)


def corpus_path(**kwargs):
    """A click.Path for an input corpus: '-' reads stdin; existence is checked by the reader so
    that the error is one line from gputext itself."""
    return click.Path(dir_okay=False, allow_dash=True, **kwargs)


def pick_backend(device: str, quiet: bool) -> Backend:
    backend = resolve(device)
    if device == "auto" or backend.simulator:
        info(f"device: {backend.describe()}", quiet)
    return backend


def add_optional_commands(group: click.Group, entries) -> None:
    """Add commands from modules that exist: ``entries`` is [(module, (attribute, ...)), ...].

    Families land one by one; until a family's module is there it has no command (no placeholders).
    A group that ends up with no commands is not added by its parent.
    """
    import importlib
    import importlib.util

    for module, names in entries:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # the parent package is not there yet
            found = False
        if not found:
            continue
        loaded = importlib.import_module(module)
        for name in names:
            command = getattr(loaded, name)
            if isinstance(command, click.Group) and not command.commands:
                continue
            group.add_command(command)
