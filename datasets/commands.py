"""`gputext corpus synth`: deterministic synthetic corpora and learning-to-rank data."""
from __future__ import annotations

import click

from gputext.cli_common import SEED, FiniteFloat, check_paths, output_option, quiet_option
from gputext.errors import InputError
from gputext.progress import info


def _list_presets(ctx, _param, value):
    if not value or ctx.resilient_parsing:
        return
    from .presets import describe_presets
    click.echo(describe_presets())
    ctx.exit(0)


MAX_DOCS = 10**8  # ten times the largest corpus the generator is tested and timed at (10^7)


def _positive(_ctx, param, value):
    if value is not None and value < 1:
        raise InputError(f"--{param.name.replace('_', '-')} must be >= 1, got {value}")
    if param.name == "n_docs" and value is not None and value > MAX_DOCS:
        raise InputError(f"--n-docs {value}: at most {MAX_DOCS:,} documents (the generator is made for up to 10^7)")
    return value


@click.command()
@click.option("--list-presets", is_flag=True, is_eager=True, expose_value=False, callback=_list_presets,
              help="List the presets with their shapes and where each shape comes from, then exit.")
@click.option("--preset", metavar="NAME", help="A named shape (see --list-presets); options below override its fields.")
@click.option("--kind", type=click.Choice(["text", "ltr"]), default=None,
              help="Without --preset: a text corpus (default) or learning-to-rank data.")
@output_option
@click.option("--n-docs", type=int, callback=_positive, help="Documents (LTR: total rows).")
@click.option("--seed", type=SEED, help="Seed of the documents (default 0). Same seed, same file.")
@click.option("--model-seed", type=click.IntRange(min=0),
              help="Seed of the model (vocabulary order, class topics, LTR hidden weights); default: --seed, "
                   "or the --idf-from corpus's. Query sets: same --model-seed, another --seed.")
# text corpora
@click.option("--n-terms", type=int, callback=_positive, help="Vocabulary size (terms t0..t{V-1}).")
@click.option("--terms-per-doc", type=FiniteFloat(min=1), help="Median distinct terms per document.")
@click.option("--n-classes", type=int, callback=_positive, help="Classes (topics).")
@click.option("--multilabel/--single-label", default=None,
              help="Documents get 1 to --max-labels labels (obsm/labels; obs/label is the first).")
@click.option("--max-labels", type=int, callback=_positive, help="Most labels a document gets with --multilabel (default 3).")
@click.option("--topic-weight", type=FiniteFloat(0, 1, max_open=True),
              help="Share of a document's tokens drawn from its class topic (default 0.15).")
@click.option("--topic-size", type=int, callback=_positive, help="Terms of each class topic (default: from the vocabulary).")
@click.option("--zipf-exponent", type=FiniteFloat(min=0, min_open=True), help="Background Zipf exponent (default 1.0).")
@click.option("--length-sigma", type=FiniteFloat(0, 3), help="Log-normal sigma of document lengths (default 0.6).")
@click.option("--weighting", type=click.Choice(["tfidf", "tficf", "tf", "binary", "none"]),
              help="As corpus build: tfidf = tf*log(N/df), rows L2-normalised; tficf; tf and none = counts; binary = 1.")
@click.option("--idf-from", type=click.Path(dir_okay=False), metavar="REF.h5",
              help="Weight tf-idf with this synthetic corpus's idf (same vocabulary): query sets for an index.")
# learning to rank
@click.option("--n-queries", type=int, callback=_positive, help="LTR: queries.")
@click.option("--docs-per-query", type=FiniteFloat(min=1), help="LTR: mean documents per query.")
@click.option("--max-docs-per-query", type=int, callback=_positive, help="LTR: documents of the largest query.")
@click.option("--n-features", type=int, callback=_positive, help="LTR: features f1..fN.")
@click.option("--n-levels", type=int, help="LTR: relevance levels 0..L-1 (graded relevance).")
@click.option("--relevance", type=click.Choice(["graded", "list"]),
              help="LTR: graded levels, or list (relevance = rank inside the query, as LETOR's -list sets).")
@click.option("--density", type=FiniteFloat(0, 1, min_open=True), help="LTR: share of stored feature entries (default 1: dense rows).")
@click.option("--noise", type=FiniteFloat(min=0), help="LTR: noise of the hidden relevance score (default 0.5).")
# output
@click.option("--compression", type=click.Choice(["none", "lzf", "gzip"]), default="none", show_default=True,
              help="HDF5 compression of /X (gzip makes files ~15% smaller and writing ~8x slower).")
@click.option("--threads", type=int, callback=_positive, help="Generator threads (default: all cores); output does not depend on it.")
@quiet_option
def synth(preset, kind, output, compression, threads, quiet, idf_from, **options):
    """Write a deterministic synthetic corpus or learning-to-rank set (same seed, same file).

    Text corpora: Zipfian background vocabulary, one topic of boosted terms per class, log-normal
    document lengths with the given median, optional multi-label, weighted like `corpus build`.
    Any size up to 10^7 documents in bounded memory (written block by block; tf-idf makes two
    passes). Learning-to-rank sets: queries of varying size, dense features, relevance from a
    hidden linear model plus noise (X, obs/qid, obs/relevance).

    Reads nothing (--idf-from reads the reference's /var/idf), writes OUTPUT, runs on the CPU.

    \b
    Example:
      gputext corpus synth --list-presets
      gputext corpus synth --preset demo -o corpus.h5
      gputext corpus synth --preset knn-1e6 -o index.h5
      gputext corpus synth --preset knn-1e6 --n-docs 10000 --seed 1 --idf-from index.h5 -o queries.h5
      gputext corpus synth --preset mq2007 -o mq2007.h5
      gputext corpus synth --n-docs 50000 --n-terms 30000 --n-classes 8 --multilabel -o ml.h5
    """
    from .ltr import write_ltr
    from .presets import resolve
    from .synth import write_synth

    from .presets import PRESETS

    check_paths([("--idf-from", idf_from)], [("-o", output)])
    target = PRESETS[preset]["kind"] if preset in PRESETS else (kind or "text")
    if idf_from is not None and target == "text" and options.get("n_terms") is None:
        from gputext.io import corpus_shape
        options["n_terms"] = corpus_shape(idf_from)[1]  # the reference's vocabulary
    kind, params = resolve(preset, kind, **options)
    seed = params.pop("seed", 0)
    if kind == "text":
        n_docs, n_terms = params.pop("n_docs"), params.pop("n_terms")
        summary = write_synth(output, n_docs, n_terms, params.pop("terms_per_doc"), params.pop("n_classes"), seed,
                              idf_from=idf_from, compression=compression, threads=threads, quiet=quiet, **params)
        info(f"wrote {output}: {summary['n_docs']:,} docs x {summary['n_terms']:,} terms, {summary['nnz']:,} non-zeros, "
             f"{summary['weighting']}, in {summary['seconds']:.1f} s ({summary['docs_per_second']:,.0f} docs/s)", quiet)
    else:
        if idf_from is not None:
            raise InputError("--idf-from does not apply to learning-to-rank data")
        if params.get("relevance") == "list" and options.get("n_levels") is not None:
            raise InputError("--n-levels does not apply to --relevance list (the levels are the ranks inside a query)")
        summary = write_ltr(output, params.pop("n_queries"), params.pop("docs_per_query"), params.pop("n_features"),
                            params.pop("n_levels"), seed, compression=compression, threads=threads, quiet=quiet,
                            **params)
        info(f"wrote {output}: {summary['n_docs']:,} rows x {summary['n_features']} features, "
             f"{summary['n_queries']:,} queries, {summary['n_pairs']:,} preference pairs, "
             f"in {summary['seconds']:.1f} s ({summary['docs_per_second']:,.0f} rows/s)", quiet)
