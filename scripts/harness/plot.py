"""The paper-table scripts' figures: one matplotlib set-up (Agg), one way to label an axis and
one way to save."""
from __future__ import annotations

from contextlib import contextmanager

from .cli import log


def have_pyplot() -> bool:
    """True when matplotlib is importable; else False and one line saying the plots are skipped."""
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        log("matplotlib is not installed: tables only, no plots")
        return False


@contextmanager
def figure(path: str, nrows: int = 1, ncols: int = 1, size: tuple = (6, 4)):
    """Yields (fig, axes) of a new figure, axes always a 2-D array; on leaving the block the
    figure is laid out, saved to ``path`` (PNG, 120 dpi) and closed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False)
    try:
        yield fig, axes
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def style(ax, title=None, xlabel=None, ylabel=None, logx=False, logy=False, legend: float | None = None,
          grid: bool = True, title_size=None):
    """Title, axis labels, log scales, a light grid and (``legend``: its font size) a legend."""
    if title:
        ax.set_title(title, fontsize=title_size)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if grid:
        ax.grid(True, which="both" if logy else "major", alpha=0.3)
    if legend is not None:
        ax.legend(fontsize=legend)
