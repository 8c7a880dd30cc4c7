"""`gputext corpus build | info | split | validate`: thin click commands over gputext.io.ingest / info / split / validate."""
from __future__ import annotations

import json

import click

from ..cli_common import SEED, check_paths, corpus_path, output_option, quiet_option
from ..errors import InputError
from ..progress import info as status
from .choices import FORMATS, WEIGHTINGS


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(allow_dash=True))
@output_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Input format; auto looks at the name (.tab .tsv .jsonl .csv .svm, docword.*.txt, a folder), "
                   "then at the first line.")
@click.option("--stopwords", default="english", show_default=True, metavar="english|none|FILE",
              help="Stopword list for text formats: the built-in English list, none, or a file of one word a line.")
@click.option("--weighting", type=click.Choice(WEIGHTINGS), default=None,
              help="tfidf (tf*log(N/df), unit rows), tficf (log(1+tf)*log((N+1)/(df+1)), unit rows), tf, binary, "
                   "none. Default: the --vocab-from corpus's, else none for svmlight and tfidf otherwise.")
@click.option("--min-df", default="1", show_default=True,
              help="Drop terms in fewer documents: an int is a count, a float in [0, 1] a fraction.")
@click.option("--max-df", default="1.0", show_default=True,
              help="Drop terms in more documents: an int is a count, a float in [0, 1] a fraction.")
@click.option("--vocab-from", type=corpus_path(), default=None, metavar="TRAIN.h5",
              help="Reuse a training corpus's vocabulary, term order, df/idf and label categories "
                   "(for test and query sets); out-of-vocabulary terms are dropped and counted.")
@click.option("--query-groups", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="svmlight without qid: a file of query group sizes, one a line, in order (LightGBM .query).")
@click.option("--labels", "labels_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="npz input: a file of one label per matrix row (comma-separated for several; empty: none).")
@quiet_option
def build(inputs, output, fmt, stopwords, weighting, min_df, max_df, vocab_from, query_groups, labels_file, quiet):
    """Build a corpus file from text, svmlight, UCI bag-of-words or counts-CSV inputs.

    Reads INPUT... (files, a class-per-folder directory, or - for stdin): Orange .tab, label<TAB>text,
    JSONL (text, id, label or labels), svmlight/libsvm (qid: or --query-groups), UCI docword +
    vocab, counts CSV (label, then counts), a SciPy sparse .npz (scipy.sparse.save_npz; --labels). Text is lowercased and split into runs of Unicode
    letters and digits. Writes one HDF5 corpus (-o; - is stdout). Runs on the CPU.

    \b
    Example:
      gputext corpus build 20newsgroups-train.tab -o train.h5
      gputext corpus build 20newsgroups-test.tab --vocab-from train.h5 -o test.h5
      gputext corpus build rank.train --query-groups rank.train.query -o ltr.h5
      gputext corpus build news/ --format dir --min-df 2 --weighting tficf -o news.h5
      gputext corpus build X.npz --labels X.labels.txt -o x.h5
    """
    from ..io.corpus import write_corpus
    from .ingest import build_corpus

    check_paths([("INPUT", p) for p in inputs] + [("--vocab-from", vocab_from), ("--query-groups", query_groups),
                                                  ("--labels", labels_file)], [("-o", output)])

    corpus = build_corpus(list(inputs), format=fmt, stopwords=stopwords, weighting=weighting, min_df=min_df,
                          max_df=max_df, vocab_from=vocab_from, query_groups=query_groups, quiet=quiet,
                          labels=labels_file)
    write_corpus(corpus, output)
    p = corpus.params
    extra = f"; {p['n_oov']:,} out-of-vocabulary occurrences dropped" if vocab_from else ""
    status(f"wrote {output}: {corpus.n_docs:,} documents x {corpus.n_terms:,} terms, {corpus.X.nnz:,} nonzeros, "
           f"format {p['format']}, weighting {p['weighting']}{extra}", quiet)


@click.command()
@click.argument("corpus", type=corpus_path())
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (all classes, all parameters).")
def info(corpus, as_json):
    """Summarise a corpus file: documents, terms, nnz, density, labels, queries, weighting, device memory.

    Reads CORPUS (HDF5; - is stdin), only its metadata, row pointers and label/query columns.
    Writes the summary to stdout. Runs on the CPU. Device memory is what the CSR matrix and the
    inverted index of the GPU kernels take.

    \b
    Example:
      gputext corpus info train.h5
      gputext corpus info train.h5 --json | python -m json.tool
    """
    from .info import corpus_info, format_info

    summary = corpus_info(corpus)
    click.echo(json.dumps(summary, indent=2) if as_json else format_info(summary))


@click.command()
@click.argument("corpus", type=corpus_path())
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output folder (created): train.h5 and test.h5, or fold1/ ... foldK/ with both.")
@click.option("--test-size", default=None, metavar="FRACTION|COUNT",
              help="Share of documents (queries for learning-to-rank) in the test part: a fraction in (0, 1) "
                   "or a count.  [default: 0.2]")
@click.option("--folds", type=int, default=None, help="K stratified folds instead of one hold-out split.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the shuffles.")
@quiet_option
def split(corpus, out_dir, test_size, folds, seed, quiet):
    """Split a corpus into train and test parts (or K folds), stratified by label and seeded.

    Reads CORPUS (HDF5). Writes OUT/train.h5 and OUT/test.h5, or OUT/fold1/train.h5,
    OUT/fold1/test.h5, ... with --folds K; every part is a full corpus with the same vocabulary.
    Learning-to-rank corpora are split by query (all rows of a qid stay together). Runs on the CPU.

    \b
    Example:
      gputext corpus split corpus.h5 --test-size 0.2 --seed 1 -o split
      gputext corpus split corpus.h5 --folds 5 -o folds
    """
    from .split import split_targets, write_split

    check_paths([("CORPUS", corpus)], [("-o", target) for target in split_targets(out_dir, folds)],
                makes_folders=True)
    if folds is not None and test_size is not None:
        raise InputError("--folds and --test-size exclude each other: folds set their own test parts")
    written = write_split(corpus, out_dir, test_size=0.2 if test_size is None else test_size, folds=folds,
                          seed=seed, quiet=quiet)
    status(f"wrote {len(written)} files to {out_dir}: " + ", ".join(written[:4]) + (" ..." if len(written) > 4 else ""),
           quiet)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@quiet_option
def validate(files, quiet):
    """Check corpus files thoroughly and list every problem (exit 0: all valid, 2: not).

    Reads each FILE (HDF5), /X in row chunks: format and version, the CSR layout (encoding,
    shape, dtypes, indptr, column indices in range and sorted within rows, finite data), /obs and
    /var lengths, unique document ids and terms, categorical codes, /obsm rows. Prints
    'FILE: ok (...)' or each problem on its own line (stdout), then a one-line verdict on stderr
    when a file is not valid. `corpus info` describes a file; validate judges it. Runs on the CPU.

    \b
    Example:
      gputext corpus validate train.h5 test.h5
    """
    from .validate import corpus_problems, corpus_summary

    if "-" in files:
        raise InputError("corpus validate reads files (it opens each twice): save standard input to a file first")
    bad = 0
    for path in files:
        problems = corpus_problems(path, quiet)
        if problems:
            bad += 1
            for line in problems:
                click.echo(" ".join(line.split()))
        elif not quiet:
            click.echo(f"{path}: ok ({corpus_summary(path)})")
    if bad:
        raise InputError(f"{bad} of {len(files)} file(s) are not valid corpus files (problems listed above)")


@click.command()
@click.argument("corpus", type=corpus_path())
@click.option("--to", "to", type=click.Choice(["svmlight", "npz", "csv"]), required=True,
              help="svmlight (features + labels/relevance + qid), npz (scipy.sparse.save_npz + a labels file "
                   "beside it), csv (one row per document: id, obs columns, result columns; not the matrix).")
@output_option
@quiet_option
def export(corpus, to, output, quiet):
    """Write a corpus or result file in another format (gputext.io.export).

    \b
    Example:
      gputext corpus export train.h5 --to svmlight -o train.svm
      gputext corpus export train.h5 --to npz -o train.npz        # + train.labels.txt when labelled
      gputext corpus export pred.h5 --to csv -o pred.csv
    """
    from .corpus import read_corpus
    from .export import export_corpus, labels_path

    outputs = [("-o", output)] + ([("labels file", labels_path(output))] if to == "npz" else [])
    check_paths([("CORPUS", corpus)], outputs)
    c = read_corpus(corpus)
    written = export_corpus(c, to, output)
    status(f"{c.n_docs} documents -> {', '.join(written)}", quiet or output == "-")
