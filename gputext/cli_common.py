"""Shared click options and helpers for every gputext command (the CLI is thin: validate, call
one library function, write atomically)."""
from __future__ import annotations

import click

from .backend import DEVICES, Backend, PendingBackend, resolve
from .progress import info

device_option = click.option(
    "--device", type=click.Choice(DEVICES, case_sensitive=False), default="auto", show_default=True,
    help="Where kernels run: auto picks the GPU when one is usable (and says so), else the CPU twin.")
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress bars or status lines on stderr.")
output_option = click.option(
    "-o", "--output", "output", required=True, type=click.Path(dir_okay=False, allow_dash=True),
    help="Output HDF5 file (written to a temporary name, then renamed); - writes to stdout.")


class FiniteFloat(click.FloatRange):
    """click.FloatRange that also refuses nan and infinities (FloatRange lets nan through, since
    every comparison with nan is false): a usage error, exit code 2. Without bounds: any finite float."""

    name = "float"

    def convert(self, value, param, ctx):
        import math

        result = super().convert(value, param, ctx)
        if not math.isfinite(result):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return result


SEED = click.IntRange(min=0, max=2**63 - 1)  # --seed: stored in the output's /uns as int64
TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet", ".npz", ".svm", ".svmlight", ".txt")

input_argument = click.argument  # documented alias: commands use click.argument("corpus", ...)


def corpus_path(**kwargs):
    """A click.Path for an input corpus: '-' reads stdin; existence is checked by the reader so
    that the error is one line from gputext itself."""
    return click.Path(dir_okay=False, allow_dash=True, **kwargs)


def pick_backend(device: str, quiet: bool):
    """The command's backend: ``--device cpu`` at once; otherwise a PendingBackend, resolved when the
    command first needs it (after its reads, while the GPU starts in the background), which then
    says which device (for auto, and for the simulator)."""
    def said(backend):
        if device == "auto" or backend.simulator:
            info(f"device: {backend.describe()}", quiet)

    if device == "cpu":
        backend = resolve(device)
        said(backend)
        return backend
    return PendingBackend(device, said)


def warn_slow_method(method: str, backend: Backend) -> None:
    """One line when --method dense is asked for on the CPU: it scores every document for every
    query (auto never picks it there; on sparse text about 300x slower than inverted, same results)."""
    from .progress import warn

    if method == "dense" and backend.name == "cpu":
        warn("--method dense on the CPU scores every document for every query: on sparse text it is about 300x "
             "slower than --method inverted, with the same results (auto picks inverted here)")


class LazyGroup(click.Group):
    """A click group whose commands are imported only when used (``gputext --help`` and ``gputext
    corpus info`` import no family's library code, and no numba).

    ``@click.group(cls=LazyGroup)`` then ``add_optional_commands(group, entries)`` with entries
    [(module, (attribute, ...)), ...]: a command's name is its attribute without trailing
    underscores, underscores as dashes (``eval_`` -> ``eval``); a module that is not there yet gives
    no command. Listing the group's commands (its --help) imports nothing but the group.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy: dict = {}  # command name -> (module, attribute)

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | {n for n, (m, _) in self.lazy.items() if _module_exists(m)})

    def get_command(self, ctx, name):
        command = super().get_command(ctx, name)
        if command is None and name in self.lazy and _module_exists(self.lazy[name][0]):
            import importlib
            module, attribute = self.lazy[name]
            command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, name)
        return command


def _module_exists(module: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is not there yet
        return False


def add_optional_commands(group: click.Group, entries) -> None:
    """Add commands from modules that exist: ``entries`` is [(module, (attribute, ...)), ...].

    Families land one by one; until a family's module is there it has no command (no placeholders).
    A group that ends up with no commands is not added by its parent.
    """
    import importlib

    if isinstance(group, LazyGroup):  # registered now, imported when used
        for module, names in entries:
            for name in names:
                group.lazy[name.rstrip("_").replace("_", "-")] = (module, name)
        return
    for module, names in entries:
        if not _module_exists(module):
            continue
        loaded = importlib.import_module(module)
        for name in names:
            command = getattr(loaded, name)
            if isinstance(command, click.Group) and not command.commands:
                continue
            group.add_command(command)


# ----------------------------------------------------------------------------- paths


def same_file(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` name one file: equal resolved paths (symlinks followed, so also a
    file that does not exist yet behind a link), or, when both exist, os.path.samefile (hard links)."""
    import os

    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def _inside(path: str, folder: str) -> bool:
    import os

    folder = os.path.realpath(folder)
    return os.path.realpath(path).startswith(folder.rstrip(os.sep) + os.sep)


def stdout_usable() -> bool:
    """False when standard output is closed (``>&-``): nothing can be written there."""
    import os
    import sys

    import io

    if sys.stdout is None:  # Python's stdout when file descriptor 1 was closed at start-up
        return False
    try:
        fd = sys.stdout.fileno()
    except (io.UnsupportedOperation, AttributeError):  # an in-memory stream (tests): usable
        return True
    except ValueError:  # the stream object itself was closed
        return False
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def check_hdf5_outputs(outputs) -> None:
    """Refuse an output named like a table (.csv, .jsonl, ...) for a command that writes only HDF5
    (it used to write HDF5 under that name): ``outputs`` are (option name, path or None) pairs."""
    from .errors import InputError

    for name, path in outputs:
        if path and path.lower().endswith(TABLE_SUFFIXES):
            raise InputError(f"{name} {path}: this command writes HDF5 only; give a .h5 name (`gputext corpus export` "
                             "turns it into a table)")


def check_paths(inputs, outputs, in_place=(), makes_folders: bool = False) -> None:
    """Refuse, before any work, every output that would destroy an input or cannot be written.

    ``inputs`` and ``outputs`` are (option name, path or None) pairs as the user typed them
    ('-' is stdin/stdout). An output is refused when it is the same file as an input (same_file:
    resolved paths, symlinks and hard links), lies inside an input folder, is an existing folder,
    has no existing parent folder, equals another output, or is '-' with standard output closed.
    ``in_place`` lists (output name, input name) pairs that may be the same file (the documented
    in-place `cluster star --update X -o X`); ``makes_folders``: the command creates the outputs'
    folders (corpus split), so they need not exist yet. Raises InputError (exit code 2) naming both options.
    """
    import os

    from .errors import InputError

    inputs = [(n, p) for n, p in inputs if p is not None and p != "-"]
    to_stdout = [n for n, p in outputs if p == "-"]
    if len(to_stdout) > 1:
        raise InputError(f"{' and '.join(to_stdout)} both name standard output ('-'): one output at most can go there")
    seen: list[tuple[str, str]] = []
    for name, path in outputs:
        if path is None:
            continue
        if not path:
            raise InputError(f"{name} '': the output file name is empty")
        if path == "-":
            if not stdout_usable():
                raise InputError(f"{name} -: standard output is closed, nothing can be written there")
            continue
        for other_name, other in seen:
            if same_file(path, other):
                raise InputError(f"{name} {path} and {other_name} {other} are the same file: give two different names")
        if os.path.isdir(path):
            raise InputError(f"{name} {path}: is a folder, expected a file name")
        parent = os.path.dirname(os.path.abspath(path))
        if not makes_folders and not os.path.isdir(parent):
            raise InputError(f"{name} {path}: its folder {os.path.dirname(path) or '.'} does not exist")
        for in_name, in_path in inputs:
            if (name, in_name) in in_place:
                continue
            if os.path.isdir(in_path) and _inside(path, in_path):
                raise InputError(f"{name} {path} lies inside the input folder {in_name} {in_path}: "
                                 "write it somewhere else")
            if same_file(path, in_path):
                raise InputError(f"{name} {path} is the same file as {in_name} {in_path}: refusing to overwrite "
                                 "an input; give another output name")
        seen.append((name, path))
