"""The ``gputext`` command: a thin click group over the library.

Every error a user can cause is one line on stderr and exit code 2 (never a traceback); an
internal error is one line and exit code 1 (``GPUTEXT_DEBUG=1`` shows its traceback).
Families register their groups in FAMILIES; a family whose module is not there yet has no command.
"""
from __future__ import annotations

import os
import sys
import warnings
import time

import click

from . import __version__
from .cli_common import LazyGroup, add_optional_commands
from .errors import GputextError, Terminated

# (module, attributes): click commands or groups added to `gputext` when their module exists.
FAMILIES = [
    ("gputext.corpus_cli", ("corpus",)),
    ("gputext.knn.cli", ("knn",)),
    ("gputext.cluster.cli", ("cluster",)),
    ("gputext.rank.cli", ("rank",)),
    ("gputext.daemon.cli", ("daemon",)),
]


class UserError(click.ClickException):
    """A GputextError on its way to the terminal: 'Error: <message>', exit code 2."""

    exit_code = 2


def _one_line(exc) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


USER_ERRORS = (GputextError, OSError, MemoryError, UnicodeError)  # exit 2: the input, the disk or the memory


def exit_code_for(exc: BaseException) -> int:
    """The exit code the CLI gives an exception a command raised: 2 for a user's error
    (USER_ERRORS), 130 / 143 for SIGINT / SIGTERM, 1 for anything else (a bug). Tests call
    library functions through it (tests/test_fuzz_readers.py)."""
    if isinstance(exc, USER_ERRORS):
        return 2
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, Terminated):
        return 143
    return 1


class GputextGroup(LazyGroup):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except USER_ERRORS as exc:
            raise UserError(_one_line(exc)) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Terminated:
            click.echo("terminated", err=True)
            sys.exit(143)
        except Exception as exc:  # a bug: still one line unless asked
            if os.environ.get("GPUTEXT_DEBUG"):
                raise
            click.echo(f"Error: internal error: {type(exc).__name__}: {_one_line(exc)} "
                       "(set GPUTEXT_DEBUG=1 for a traceback)", err=True)
            sys.exit(1)


@click.group(cls=GputextGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gputext")
def cli():
    """GPU text mining over HDF5 corpora: exact kNN, classification, clustering, ranking.

    Every command reads and writes anndata-compatible HDF5 files ('-' is stdin/stdout, so
    commands pipe) and runs on the GPU when one is usable, else on the parallel CPU twin
    (--device auto|cpu|cuda).

    \b
    Example:
      gputext corpus synth --preset reu-10k -o train.h5
      gputext corpus info train.h5
    """


@cli.command()
@click.option("--scheduler", metavar="ADDRESS|local:N",
              help="Also connect to this Dask scheduler (or start local:N) and list its workers and devices.")
@click.option("--compile", "compile_", is_flag=True,
              help="Compile the kernels of every command for this device into the kernel cache (once; "
                   "later processes load them), with a progress bar and the time each step took.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="With --compile: the device to compile for (auto: the GPU when one is usable).")
@click.option("--jobs", type=click.IntRange(0), default=1, show_default=True,
              help="With --compile: run the steps in this many processes at once (0: one a CPU core, at most "
                   "as many as there are steps).")
@click.option("--clear-cache", is_flag=True,
              help="Remove the kernel cache's folders of other code versions (and this one's with --compile, "
                   "before compiling afresh).")
def doctor(scheduler, compile_, device, clear_cache, jobs):
    """Print versions, the CUDA device and driver (or why there is none), what --device auto picks,
    and where the kernel cache is.

    Also the versions of Dask, distributed and dask-cuda (the --scheduler extras), and with
    --scheduler the workers of that cluster: address, memory limit, numba threads and GPUs.
    Compiled kernels are kept on disk in $GPUTEXT_CACHE_DIR (default ~/.cache/gputext) and reused by
    every later process; --compile fills the cache for every command at once (`make demo` runs it
    when there is a GPU).

    \b
    Example:
      gputext doctor
      gputext doctor --compile
      gputext doctor --compile --jobs 0
      gputext doctor --scheduler tcp://head:8786
    """
    import numba
    import numpy

    from .backend import cpu_threads, resolve, simulator_enabled

    try:
        from importlib.metadata import version
        numba_cuda = version("numba-cuda")
    except Exception:
        numba_cuda = "not installed"
    click.echo(f"gputext     {__version__}")
    click.echo(f"python      {sys.version.split()[0]}")
    click.echo(f"numpy       {numpy.__version__}")
    click.echo(f"numba       {numba.__version__} ({cpu_threads()} CPU threads)")
    click.echo(f"numba-cuda  {numba_cuda}")
    if simulator_enabled():
        click.echo("cuda        numba CUDA simulator is ON (NUMBA_ENABLE_CUDASIM=1): kernels run in Python, for tests")
    else:
        try:
            from numba import cuda
            if cuda.is_available():
                dev = cuda.get_current_device()
                name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
                drv = cuda.cudadrv.driver.driver.get_version()
                click.echo(f"cuda        {name}, compute capability {'.'.join(map(str, dev.compute_capability))}, "
                           f"driver CUDA {drv[0]}.{drv[1]}")
            else:
                click.echo("cuda        none: no CUDA driver or GPU found")
        except Exception as exc:
            click.echo(f"cuda        none: {_one_line(exc)}")
    click.echo(f"auto        {resolve('auto').describe()}")
    from .distributed.client import versions
    dask_versions = versions()
    click.echo("dask        " + ", ".join(f"{name} {v}" for name, v in dask_versions.items()))
    _kernel_cache(compile_, device, clear_cache, jobs)
    click.echo(f"server      {_server_line()}")
    if scheduler:
        from .distributed.client import connect, describe_cluster
        with connect(scheduler, quiet=True) as client:
            lines = describe_cluster(client)
            click.echo(f"scheduler   {client.scheduler.address}: {len(lines)} worker(s); dashboard {client.dashboard_link}")
            for line in lines:
                click.echo(f"  worker    {line}")


def _server_line() -> str:
    """doctor's line on the warm server of this environment (gputext.daemon)."""
    from .daemon import key
    if not key.enabled():
        return "off (GPUTEXT_DAEMON=0, or no fork/SCM_RIGHTS here): every command runs in its own process"
    try:
        server_key = key.server_key()
        path, _ = key.paths(server_key)
    except OSError as exc:
        return f"none: {_one_line(exc)}"
    return f"{key.server_state(server_key)}, socket {path} (gputext daemon status)"


def _kernel_cache(compile_: bool, device: str, clear_cache: bool, jobs: int = 1) -> None:
    """doctor's kernel-cache lines: the folder and its entries; --clear-cache, --compile (--jobs)."""
    from .kernels.jit import cache_folder, clear_other_versions, why_not_cached
    from .warmup import WARMUP_STEPS, cache_entries, compile_all

    folder = cache_folder()
    if folder is None:
        click.echo(f"cache       none: {why_not_cached()} (kernels compile in every process)")
    if clear_cache and folder is not None:
        removed = clear_other_versions(include_current=compile_)
        click.echo(f"cache       removed {removed} folder(s) of compiled kernels")
    if folder is not None:
        click.echo(f"cache       {folder} ({cache_entries(folder)} compiled entries; $GPUTEXT_CACHE_DIR moves it)")
        from .kernels import scoring  # noqa: F401 (decorating its kernels tells whether this numba's cache is usable)
        if why_not_cached():
            click.echo(f"cache       partly off: {why_not_cached()}")
        from .compile_ahead import describe
        click.echo(f"helpers     {describe(folder)}")
    if not compile_:
        return
    from .backend import resolve
    backend = resolve(device)
    if jobs == 0:
        jobs = max(1, min(os.cpu_count() or 1, len(WARMUP_STEPS)))
    done = []
    t0 = time.perf_counter()
    with click.progressbar(length=len(WARMUP_STEPS), label=f"compiling for {backend.describe()}", file=sys.stderr,
                           show_pos=True, item_show_func=lambda label: label) as bar:
        def on_step(label):  # a step starts in this process, or ends in a job's
            if done:
                bar.update(1, done[-1])
            done.append(label)
        report = compile_all(cli, backend.name, on_step=on_step, jobs=jobs)
        bar.update(1, done[-1])
    for label, seconds, added in report.steps:
        click.echo(f"  {label:<26} {seconds:7.2f} s  " + (f"{added:4d} new entries" if added is not None else
                                                          "(in a job of its own)"))
    click.echo(f"compiled    {report.entries_after - report.entries_before} new entries in "
               f"{time.perf_counter() - t0:.1f} s on {backend.describe()}"
               + (f", {jobs} processes at once" if jobs > 1 else "") + f"; cache {report.folder or 'none'}")


add_optional_commands(cli, FAMILIES)


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A Python warning (numpy's RuntimeWarning, ...) as one line, without its source line."""
    return f"Warning: {category.__name__}: {_one_line(message)}\n"


_freeze_at_exit = False


def main() -> None:
    import atexit
    import gc

    from .io.atomic import raise_on_sigterm

    # At exit, skip the interpreter's last garbage collection over everything the command left
    # alive (numba's type registries and code objects: ~0.2 s of a ~1.2 s `rank train` on the
    # 2-core VM, benchmarks/RESULTS.md start-up); the operating system frees the memory. Outputs
    # are closed and renamed inside the commands, never left to finalizers. Registered first, so
    # it runs after every other exit handler; an in-process caller of main() is unaffected until
    # its interpreter exits.
    global _freeze_at_exit
    if not _freeze_at_exit:  # once per process: the server's resident calls main() for every command
        _freeze_at_exit = bool(atexit.register(gc.freeze))
    warnings.formatwarning = one_line_warning
    raise_on_sigterm()  # SIGTERM unwinds like Ctrl-C: temporary files are removed
    from .backend import start_cuda_early
    args = sys.argv[1:]
    if args[:1] in (["knn"], ["cluster"], ["rank"]) and args[1:2] not in (["eval"], []) and "--help" not in args:
        start_cuda_early(args)  # a command that computes: the GPU's start overlaps its imports
        from .compile_ahead import start as compile_ahead
        compile_ahead(args)  # on an empty kernel cache: helpers compile its manifest beside it
    try:
        cli(prog_name="gputext")
    except KeyboardInterrupt:  # outside a command (while click parses or modules load): no traceback
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Terminated:
        click.echo("terminated", err=True)
        sys.exit(143)


if __name__ == "__main__":
    main()
