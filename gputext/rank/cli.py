"""`gputext rank train | predict | eval`: thin click commands over gputext.rank.api."""
from __future__ import annotations

import json
import math
import os

import click

from ..cli_common import FiniteFloat, check_paths, corpus_path, device_option, output_option, pick_backend, quiet_option
from ..distributed.options import device_for, scheduler_client, scheduler_option
from ..errors import InputError
from ..progress import info


def _parse_grid(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--C-grid must be comma-separated positive numbers such as 0.01,0.1,1,10, got {text!r}") from None
    if not values or any(not (v > 0 and math.isfinite(v)) for v in values):
        raise InputError(f"--C-grid must be comma-separated positive numbers such as 0.01,0.1,1,10, got {text!r}")
    return values


def one_blas_thread() -> None:
    """OpenBLAS on one thread for this process unless the environment says otherwise; call before
    numpy is imported (click's command bodies import it). Training's BLAS work is TRON's dots of
    length n_features: one thread makes them independent of the core count, and skips the start
    of OpenBLAS's thread pools (numpy's and SciPy's, each ~0.06 CPU s of spinning threads on the
    2-core VM; benchmarks/RESULTS.md, start-up). The CPU twin's threads are numba's, not BLAS's."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@click.group()
def rank():
    """Learning to rank: linear RankSVM (L2 loss) trained by TRON on per-query pair statistics.

    \b
    Example:
      gputext corpus synth --preset ltr-demo -o ltr.h5
      gputext corpus split ltr.h5 --test-size 0.2 --seed 1 -o split
      gputext rank train split/train.h5 -C 1 --eps 1e-5 -o model.h5
      gputext rank eval model.h5 split/test.h5
    """


@rank.command()
@click.argument("train_file", metavar="TRAIN.h5", type=corpus_path())
@click.option("-C", "C", type=float, default=None, help="Regularisation trade-off C > 0 (default 1; with --C-grid, "
              "the grid decides).")
@click.option("--eps", type=FiniteFloat(min=0, min_open=True), default=1e-5, show_default=True,
              help="Stop when |grad f(w)| <= eps |grad f(0)| (LIBLINEAR's rule).")
@click.option("--max-iter", type=click.IntRange(min=1), default=1000, show_default=True, help="At most this many Newton iterations.")
@click.option("--valid", "valid_file", metavar="VALID.h5", type=corpus_path(), default=None,
              help="Validation corpus: with --C-grid, C is chosen on it; without, its metrics are reported.")
@click.option("--C-grid", "C_grid", metavar="C1,C2,...", default=None,
              help="Train one model per C (from w = 0) and keep the best on --valid (ties: smaller C).")
@click.option("--select-by", type=click.Choice(["ndcg@10", "pairwise-accuracy"]), default="ndcg@10", show_default=True,
              help="Validation metric that picks C.")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False), metavar="MODEL.h5",
              help="Model file (HDF5, written to a temporary name, then renamed).")
@device_option
@scheduler_option
@quiet_option
def train(train_file, C, eps, max_iter, valid_file, C_grid, select_by, output, device, scheduler, quiet):
    """Train a linear RankSVM: minimise 1/2 |w|^2 + C * sum of squared hinge losses over the pairs
    (i, j) of each query with relevance y_i > y_j.

    Reads TRAIN.h5 (a corpus with /obs/qid and /obs/relevance; X are the features). Writes MODEL.h5
    (-o): /uns/gputext/rank/w (float64) plus C, eps, iterations and the feature count. Prints one line
    per Newton iteration (iteration, f, |grad|, CG steps) on stderr unless --quiet. Runs on the GPU
    when one is usable (--device auto), else on the parallel CPU twin. --scheduler: the loss,
    gradient and Hessian products run on a Dask cluster's workers (whole queries each), TRON here
    (docs/distributed.md).

    \b
    Example:
      gputext rank train train.h5 -C 1 --eps 1e-5 -o model.h5
      gputext rank train train.h5 --valid valid.h5 --C-grid 0.01,0.1,1,10 -o model.h5
    """
    one_blas_thread()
    from ..io.corpus import read_corpus
    from .api import evaluate, train as train_one, train_grid

    if output == "-":
        raise InputError("-o -: a model is an HDF5 file on disk; give a file name such as model.h5")
    if C is not None and not (C > 0 and math.isfinite(C)):
        raise InputError(f"-C must be a positive number, got {C}")
    if C_grid is not None and valid_file is None:
        raise InputError("--C-grid needs --valid VALID.h5: C is chosen on the validation corpus")
    if C_grid is not None and C is not None:
        raise InputError("-C and --C-grid exclude each other: the grid chooses C")
    check_paths([("TRAIN.h5", train_file), ("--valid", valid_file)], [("-o", output)])
    backend = device_for(device, scheduler, quiet)
    corpus = read_corpus(train_file)
    valid = read_corpus(valid_file) if valid_file else None
    if valid is not None and valid.n_terms != corpus.n_terms:
        raise InputError(f"{valid_file} has {valid.n_terms} features but {train_file} has {corpus.n_terms}: "
                         "build it with the training corpus's feature set")
    with scheduler_client(scheduler, quiet) as client:
        if C_grid is not None:
            model = train_grid(corpus, valid, _parse_grid(C_grid), eps=eps, max_iter=max_iter, device=backend,
                               quiet=quiet, select_by=select_by, name=train_file, valid_name=valid_file, client=client,
                               source=train_file)
            info(f"chose C = {model.C:g} by {select_by} on {valid_file}", quiet)
        else:
            model = train_one(corpus, C=1.0 if C is None else C, eps=eps, max_iter=max_iter, device=backend,
                              quiet=quiet, name=train_file, client=client, source=train_file)
    model.save(output)
    state = "converged" if model.converged else "stopped before eps was reached"
    info(f"wrote {output}: {model.n_features} features, C = {model.C:g}, {model.iterations} Newton iterations, "
         f"{model.cg_iterations} CG steps, {model.train_seconds:.2f} s on {model.backend}; f = {model.objective:.10e}, "
         f"|grad|/|grad0| = {model.grad_norm / model.grad_norm0 if model.grad_norm0 else 0.0:.2e} ({state}); "
         f"{model.n_docs:,} documents, {model.n_queries:,} queries, {model.n_pairs:,} pairs", quiet)
    if valid is not None and C_grid is None:
        m = evaluate(model, valid, "cpu" if scheduler else backend, valid_file)
        info(f"validation: pairwise accuracy {m['pairwise_accuracy']:.4f}, NDCG@10 {m['ndcg@10']:.4f}, "
             f"MAP {m['map']:.4f}", quiet)


@rank.command()
@click.argument("model_file", metavar="MODEL.h5", type=click.Path(dir_okay=False))
@click.argument("test_file", metavar="TEST.h5", type=corpus_path())
@output_option
@device_option
@quiet_option
def predict(model_file, test_file, output, device, quiet):
    """Score documents with a trained model: score = X w.

    Reads MODEL.h5 and TEST.h5 (a corpus with the model's number of features; qid and relevance
    optional). Writes SCORES.h5 (-o; - is stdout): a corpus file with one row per document of TEST.h5,
    in its order, with /obs/score float32 and the /obs/qid and /obs/relevance columns of TEST.h5
    when present; its X has no columns (the features stay in TEST.h5). Runs on the GPU when one is
    usable, else on the CPU.

    \b
    Example:
      gputext rank predict model.h5 test.h5 -o scores.h5
    """
    import numpy as np
    import scipy.sparse as sp

    from ..io.corpus import Corpus, read_corpus, write_corpus
    from .api import predict_scores
    from .model import RankModel

    check_paths([("MODEL.h5", model_file), ("TEST.h5", test_file)], [("-o", output)])
    model = RankModel.load(model_file)
    backend = pick_backend(device, quiet)
    corpus = read_corpus(test_file)
    scores = predict_scores(model, corpus, backend, test_file)
    obs = {k: corpus.obs[k] for k in ("qid", "relevance") if k in corpus.obs}
    obs["score"] = scores.astype(np.float32)
    out = Corpus(sp.csr_matrix((corpus.n_docs, 0), dtype=np.float32), corpus.doc_ids, np.array([], dtype=object), obs)
    out.params["rank"] = {"model": model_file, "C": model.C, "n_features": model.n_features, "backend": backend.name}
    write_corpus(out, output)
    info(f"wrote {output}: {corpus.n_docs:,} scores ({backend.name})", quiet)


@rank.command(name="eval")
@click.argument("model_file", metavar="MODEL.h5", type=click.Path(dir_okay=False))
@click.argument("test_file", metavar="TEST.h5", type=corpus_path())
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON object.")
@click.option("--gain", type=click.Choice(["auto", "exp", "linear"]), default="auto", show_default=True,
              help="NDCG gain: exp is 2^rel - 1, linear is rel; auto takes exp when every relevance <= 31.")
@device_option
@quiet_option
def eval_(model_file, test_file, as_json, gain, device, quiet):
    """Evaluate a model: pairwise accuracy, NDCG@1, NDCG@5, NDCG@10 and MAP.

    Reads MODEL.h5 and TEST.h5 (with /obs/qid and /obs/relevance). Writes the metrics to stdout
    (a table, or JSON with --json). Pairwise accuracy pools all pairs of all queries (ties in
    score count as wrong); NDCG and MAP are means over queries (ties in score ordered by file
    order; a query without relevant documents counts 0). Scores on the GPU when one is usable,
    else on the CPU; the metrics run on the CPU.

    \b
    Example:
      gputext rank eval model.h5 test.h5
      gputext rank eval model.h5 test.h5 --json
    """
    from ..io.corpus import read_corpus
    from .api import evaluate
    from .model import RankModel

    model = RankModel.load(model_file)
    backend = pick_backend(device, quiet)
    corpus = read_corpus(test_file)
    metrics = evaluate(model, corpus, backend, test_file, gain=gain)
    if as_json:
        click.echo(json.dumps({"model": model_file, "test": test_file, **metrics}, sort_keys=False))
        return
    click.echo(f"pairwise accuracy  {metrics['pairwise_accuracy']:.4f}  ({metrics['correct_pairs']:,} of "
               f"{metrics['pairs']:,} pairs)")
    for k in (1, 5, 10):
        click.echo(f"NDCG@{k:<2}            {metrics[f'ndcg@{k}']:.4f}")
    click.echo(f"MAP                {metrics['map']:.4f}")
    click.echo(f"queries {metrics['queries']:,} ({metrics['queries_without_relevant']:,} without a relevant "
               f"document), documents {metrics['documents']:,}, gain {metrics['gain']}")
