"""`gputext knn index` and `gputext knn search`."""
from __future__ import annotations

import click

from ..cli_common import check_paths, warn_slow_method, corpus_path, device_option, output_option, quiet_option
from ..distributed.options import device_for, scheduler_client, scheduler_option
from ..kernels.metrics import METRICS
from ..progress import info
from .method import METHODS


@click.command()
@click.argument("corpus", type=corpus_path())
@output_option
@quiet_option
def index(corpus, output, quiet):
    """Build the inverted index of CORPUS (postings by term, document norms) and write INDEX.h5.

    Reads a corpus file; writes an index file that is also a valid corpus file, so `knn search
    --index` takes either (with a plain corpus the index is built at search time: on the GPU in
    milliseconds, on the CPU in about a second per 50M nonzeros). Runs on the CPU.

    \b
    Example:
      gputext knn index train.h5 -o train.index.h5
      gputext knn search --index train.index.h5 --queries test.h5 -k 30 -o nn.h5
    """
    from ..engine import Index
    from ..io.corpus import read_corpus

    check_paths([("CORPUS", corpus)], [("-o", output)])
    idx = Index.from_corpus(read_corpus(corpus))
    idx.save(output)
    info(f"indexed {idx.n_docs} documents, {idx.n_terms} terms, {idx.nnz} postings "
         f"({idx.cpu().nbytes / 2**20:.1f} MiB) -> {output}", quiet)


@click.command()
@click.option("--index", "index_path", required=True, type=corpus_path(),
              help="INDEX.h5 from `gputext knn index`, or a corpus file.")
@click.option("--queries", "queries_path", type=corpus_path(),
              help="Query corpus in the same vocabulary (build it with --vocab-from); default: the indexed corpus.")
@click.option("-k", "k", type=click.IntRange(min=1), default=30, show_default=True, help="Neighbours per query.")
@click.option("--metric", type=click.Choice(METRICS), default="cosine", show_default=True,
              help="cosine and dot are similarities (higher first); l2 and l1 distances (lower first).")
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True,
              help="inverted: the GT-kNN inverted index; dense: matrix-vector kernel; auto picks and says which.")
@click.option("--exclude-self", is_flag=True, help="Queries are the indexed corpus: leave each document out of its own list.")
@click.option("--batch-size", type=click.IntRange(min=1), help="Queries scored at once on the device (default: a few per stream, sized from the GPU's L2 cache).")
@device_option
@scheduler_option
@output_option
@quiet_option
def search(index_path, queries_path, k, metric, method, exclude_self, batch_size, device, scheduler, output, quiet):
    """Exact k nearest neighbours of every query document.

    Reads the index (or corpus) and the query corpus; writes OUTPUT with /obsm/knn_indices int32
    (n_queries, k; -1 where fewer than k exist) and /obsm/knn_scores float32 (similarity for
    cosine/dot, distance for l2/l1), best first, ties broken by lower document index. Results are
    exact and identical on the GPU (--device cuda) and the CPU twin (--device cpu). An OUTPUT
    ending in .csv, .jsonl or .parquet (pyarrow) is a table instead: one row per query with its
    id, the neighbours' document ids and their scores.
    With --scheduler the index is cut into one document range per Dask worker (each reads its
    rows of the index file) and the lists are merged here: identical results (docs/distributed.md).

    \b
    Example:
      gputext knn search --index train.h5 --queries test.h5 -k 30 -o neighbours.h5
      gputext knn search --index train.h5 --exclude-self -k 10 --metric l2 -o self.h5
      gputext knn search --index train.h5 --queries test.h5 -k 5 -o nn.csv
      gputext knn search --index train.h5 --queries test.h5 -k 30 --scheduler local:4 -o neighbours.h5
    """
    from .search import search_files

    if queries_path is None and not exclude_self:
        raise click.UsageError("give --queries, or --exclude-self to search the indexed corpus against itself")
    check_paths([("--index", index_path), ("--queries", queries_path)], [("-o", output)])
    backend = device_for(device, scheduler, quiet)
    if scheduler is None:
        warn_slow_method(method, backend)
    with scheduler_client(scheduler, quiet) as client:
        result = search_files(index_path, queries_path, k, metric, method, backend, exclude_self, batch_size, quiet,
                              client)
    from ..io.export import read_doc_ids, table_format, write_neighbour_table
    if table_format(output):  # nn.csv / .jsonl / .parquet: one row per query (gputext.io.export)
        write_neighbour_table(result, output, read_doc_ids(index_path))
    else:
        from ..io.corpus import write_corpus

        write_corpus(result, output)
    p = result.params["knn"]
    memory = ""
    if "index_bytes" in p:
        memory = (f"; device memory: index {p['index_bytes'] / 2**20:.0f} MiB in {p.get('shards', 1)} shard(s), "
                  f"score rows {p.get('rows_bytes', 0) / 2**20:.0f} MiB ({p.get('batch_size')} queries at a time a stream)")
    info(f"{result.n_docs} queries x {p['index_n_docs']} documents, k = {k}, {metric}, "
         f"{p['method']} on {p.get('backend', getattr(backend, 'name', backend))}: {p['seconds']:.3f} s{memory}", quiet)
