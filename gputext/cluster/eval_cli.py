"""`gputext cluster eval`: FBcubed, overlapping NMI, purity/NMI, cluster sizes (and a plot)."""
from __future__ import annotations

import json

import click

from gputext.cli_common import check_paths, corpus_path
from gputext.errors import InputError

TRUTH_KEYS = ("auto", "clusters", "cluster", "labels", "label")


PLOT_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "eps", "ps")


def check_plot_format(path: str) -> None:
    """--plot's file type, from its extension (matplotlib's writers), checked before any work."""
    import os

    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in PLOT_FORMATS:
        raise InputError(f"--plot {path}: expected an image file name ending in "
                         f"{', '.join('.' + e for e in PLOT_FORMATS)}, got {('.' + ext) if ext else 'no extension'}")


def plot_sizes(sizes, path: str, title: str) -> None:
    """Bar chart of cluster sizes over power-of-two bins (log y), written atomically to ``path``."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("--plot needs matplotlib, which is not installed: pip install matplotlib "
                         "(or pip install 'gputext[plot]')") from None
    import os

    import numpy as np

    from gputext.io import atomic_output

    sizes = np.asarray(sizes)
    sizes = sizes[sizes > 0]
    edges = [1]
    while edges[-1] <= (sizes.max() if len(sizes) else 1):
        edges.append(edges[-1] * 2)
    counts = [int(((sizes >= lo) & (sizes < hi)).sum()) for lo, hi in zip(edges[:-1], edges[1:])]
    labels = [str(lo) if hi - lo == 1 else f"{lo}-{hi - 1}" for lo, hi in zip(edges[:-1], edges[1:])]
    fig, ax = plt.subplots(figsize=(max(5, 0.55 * len(counts) + 2), 3.6))
    ax.bar(range(len(counts)), counts, color="#4c72b0")
    ax.set_xticks(range(len(counts)), labels, rotation=45, ha="right")
    ax.set_yscale("log" if max(counts, default=0) > 50 else "linear")
    ax.set_xlabel("cluster size (documents)")
    ax.set_ylabel("clusters")
    ax.set_title(title)
    fig.tight_layout()
    ext = os.path.splitext(path)[1] or ".png"
    with atomic_output(path, suffix=ext) as tmp:
        fig.savefig(tmp, format=ext.lstrip(".") or "png", dpi=120)
    plt.close(fig)


def format_report(result: dict, pred_source: str, truth_source: str) -> str:
    fb, on = result["fbcubed"], result["onmi"]
    lines = [
        f"documents           {result['n_items']} ({result['n_judged']} with a truth category)",
        f"clusters            {result['n_clusters']} from {pred_source}, "
        f"{result['mean_memberships']:.3f} clusters per document",
        f"truth               {truth_source}",
        f"FBcubed             F {fb['f']:.4f}  (precision {fb['precision']:.4f}, recall {fb['recall']:.4f})",
        f"NMI overlapping     LFK {on['lfk']:.4f}  McDaid max {on['max']:.4f}",
    ]
    if "purity" in result:
        lines.append(f"hard partitions     purity {result['purity']:.4f}  NMI {result['nmi']:.4f}")
    lines.append("cluster sizes")
    for lo, hi, count in result["size_histogram"]:
        label = str(lo) if lo == hi else f"{lo}-{hi}"
        lines.append(f"  {label:>13}   {count}")
    return "\n".join(lines)


@click.command("eval")
@click.argument("clusters", type=corpus_path())
@click.argument("truth_arg", metavar="[TRUTH]", required=False, type=corpus_path())
@click.option("--truth", "truth", type=corpus_path(),
              help="Corpus with /obs/label or /obsm/labels, or another result file (/obsm/clusters or /obs/cluster).")
@click.option("--truth-key", type=click.Choice(TRUTH_KEYS), default="auto", show_default=True,
              help="What to read from --truth; auto: clusters, then cluster, then labels, then label.")
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a plot of the cluster-size distribution (PNG).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True),
              help="Also write the measures as JSON ('-' for stdout instead of the table).")
def eval_(clusters, truth_arg, truth, truth_key, plot, json_path):
    """Evaluate a clustering against a truth: FBcubed, overlapping NMI, cluster count and sizes.

    Reads CLUSTERS.h5 (/obsm/clusters from `cluster star`, overlapping, or /obs/cluster from
    `cluster stream`, a hard partition) and the truth (--truth, or a second argument): a corpus
    with /obs/label (categorical) or /obsm/labels (multi-label), or another result file.
    Documents are matched by id. Prints FBcubed (extended BCubed, Amigo et al.), overlapping NMI
    (Lancichinetti et al. and McDaid et al.), the number of clusters and a size histogram; when
    both sides are hard partitions also purity and NMI. Documents without a truth category are
    left out. Writes nothing unless --plot / --json. Runs on the CPU.

    \b
    Example:
      gputext cluster eval clusters.h5 --truth corpus.h5 --plot sizes.png
      gputext cluster eval clusters_gpu.h5 --truth clusters_cpu.h5
    """
    from gputext.cluster import metrics

    if truth and truth_arg:
        raise InputError(f"give the truth once: as an argument ({truth_arg}) or with --truth ({truth})")
    truth = truth or truth_arg
    if not truth:
        raise InputError("missing the truth: gputext cluster eval CLUSTERS.h5 --truth CORPUS.h5")
    check_paths([("CLUSTERS", clusters), ("TRUTH", truth)], [("--json", json_path), ("--plot", plot)])
    if plot:
        check_plot_format(plot)
    pred = metrics.load_clustering(clusters, "auto", prefer=("clusters", "cluster"))
    gold = metrics.load_clustering(truth, truth_key)
    pred, gold = metrics.align(pred, gold, "clusters", "truth")
    hard = pred.labels is not None and gold.labels is not None
    result = metrics.evaluate(pred.membership, gold.membership,
                              pred.labels if hard else None, gold.labels if hard else None)
    if json_path:
        payload = json.dumps({"clusters": clusters, "truth": truth, "pred_source": pred.source,
                              "truth_source": gold.source, **result}, indent=2)
        if json_path == "-":
            click.echo(payload)
        else:
            from gputext.io import atomic_output
            with atomic_output(json_path, suffix=".json") as tmp:
                with open(tmp, "w") as fh:
                    fh.write(payload + "\n")
    if json_path != "-":
        click.echo(format_report(result, f"{clusters}:/{pred.source}", f"{truth}:/{gold.source}"))
    if plot:
        plot_sizes(metrics.cluster_sizes(pred.membership), plot, f"cluster sizes: {clusters}")
