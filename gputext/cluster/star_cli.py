"""`gputext cluster star`: OClustR (from scratch) and DClustR (--update ... --add ...)."""
from __future__ import annotations

import click

from gputext.cli_common import FiniteFloat, check_paths, corpus_path, device_option, output_option, pick_backend, quiet_option
from gputext.distributed.options import device_for, scheduler_client, scheduler_option
from gputext.errors import InputError
from gputext.progress import info

DEFAULT_BETA = 0.25


@click.command("star")
@click.argument("corpus", required=False, type=corpus_path())
@click.option("--beta", type=FiniteFloat(), default=None,
              help=f"Cosine similarity threshold of the graph (edges where cos >= beta), in [0.0001, 1] "
                   f"[default: {DEFAULT_BETA}; with --update the stored beta].")
@click.option("--update", "update_path", type=click.Path(dir_okay=False),
              help="Cluster file written by `cluster star` to update with the documents of --add (DClustR).")
@click.option("--add", "add_path", type=corpus_path(),
              help="Corpus of the documents to add (same vocabulary: build it with --vocab-from).")
@output_option
@click.option("--batch-size", type=int, default=None,
              help="Query documents per scoring-engine call (default 8192; bounds host memory).")
@click.option("--shards", type=int, default=None,
              help="Row shards of the upper-triangle graph build (default: one per 16,384 documents, at most 8).")
@click.option("--no-compression", is_flag=True, help="Write the output without gzip (faster, larger).")
@device_option
@scheduler_option
@quiet_option
def star(corpus, beta, update_path, add_path, output, batch_size, shards, no_compression, device, scheduler, quiet):
    """Overlapping star clustering (OClustR / CUDA-OClus) and its incremental update (DClustR).

    From scratch: reads CORPUS.h5, builds the graph of all document pairs with cosine >= beta
    through the scoring engine, computes each vertex's relevance on the device, covers the graph
    with stars and removes non-useful ones. Writes -o CLUSTERS.h5: the corpus (X, doc ids, obs)
    plus /obsm/clusters (CSR n_docs x n_clusters, overlapping memberships),
    /uns/gputext/star/centers (int32, ascending; cluster k is centered on centers[k]) and the graph
    as partial connected components under /uns/gputext/star/graph.

    Update: --update CLUSTERS.h5 --add NEW.h5 scores only the new documents against the
    collection, reloads only the connected components they touch, re-covers them as DClustR does
    and writes the clusters of the union to -o (reports how many components it touched).

    The graph (engine) and the relevance run on --device (GPU if usable, else the CPU twin);
    cover and improvement run on the host. Progress and a summary go to stderr. With --scheduler
    the graph is scored on a Dask cluster's workers (they read CORPUS), the rest here; same
    clusters (docs/distributed.md). --update runs in this process.

    \b
    Example:
      gputext cluster star corpus.h5 --beta 0.25 -o clusters.h5
      gputext cluster star --update clusters.h5 --add new.h5 -o clusters2.h5
      gputext cluster eval clusters2.h5 --truth corpus_all.h5
    """
    from gputext.cluster import dclus
    from gputext.cluster.graph import check_beta
    from gputext.io import read_corpus

    for name, value in (("--batch-size", batch_size), ("--shards", shards)):
        if value is not None and value < 1:
            raise InputError(f"{name} must be a positive integer, got {value}")
    compression = None if no_compression else "gzip"
    # the documented in-place update (--update X -o X) is the one output that may be an input
    check_paths([("CORPUS", corpus), ("--update", update_path), ("--add", add_path)], [("-o", output)],
                in_place=[("-o", "--update")])
    if update_path or add_path:
        if not (update_path and add_path):
            raise InputError("--update CLUSTERS.h5 and --add NEW.h5 go together")
        if corpus:
            raise InputError(f"give either CORPUS ({corpus}) or --update/--add, not both")
        if scheduler:
            raise InputError("--update runs in one process: drop --scheduler")
        backend = pick_backend(device, quiet)
        # the path: the update reads the added corpus selectively (its terms only when the stored
        # vocabulary digests differ)
        report = dclus.update(update_path, add_path, output, backend, beta=beta, batch_size=batch_size, quiet=quiet,
                              compression=compression)
        info(f"star --update: {report.line()} in {report.stats['seconds_total']:.2f} s on {backend.name}", quiet)
        return
    if not corpus:
        raise InputError("missing CORPUS: give a corpus file to cluster, or --update CLUSTERS.h5 --add NEW.h5")
    beta = check_beta(DEFAULT_BETA if beta is None else beta)
    from gputext.cluster.star import cluster_star

    data = read_corpus(corpus)
    backend = device_for(device, scheduler, quiet)
    with scheduler_client(scheduler, quiet) as client:
        source = corpus if client is not None and corpus != "-" else data.X  # workers read the file
        result = cluster_star(source, beta, backend, batch_size=batch_size, shards=shards, quiet=quiet, client=client)
    backend_name = getattr(backend, "name", "dask")
    dclus.write_result(data, result, output, beta, backend_name, compression=compression)
    s = result.stats
    info(f"star: {data.n_docs} documents, {s['n_edges']} edges (beta {beta}), {result.n_clusters} clusters "
         f"({s['n_isolated']} isolated documents) in {s['seconds_total']:.2f} s on {backend_name} "
         f"(graph {s['seconds_graph']:.2f} s, relevance {s['seconds_relevance']:.3f} s, cover {s['seconds_cover']:.3f} s)",
         quiet)
