"""`gputext knn classify` and `gputext knn metafeatures` (thin: validate, call the library, write)."""
from __future__ import annotations

import json

import click

from ..cli_common import SEED, FiniteFloat, check_hdf5_outputs, check_paths, warn_slow_method, corpus_path, device_option, quiet_option
from ..distributed.options import device_for, scheduler_client, scheduler_option
from ..errors import InputError
from ..progress import heartbeat, info
from .method import METHODS

PADDING = ("a class with fewer than k documents (k - 1 for a left-out training document) repeats its "
           "farthest neighbour's value; a class with none gives the empty-document values "
           "(cosine 0, L1 |x|_1, L2 |x|_2); a missing centroid gives cosine 0, L2 |x|_2")


def _parse_grid(text: str) -> tuple[float, ...]:
    import math

    try:
        grid = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"--C-grid {text!r}: expected comma-separated positive numbers, e.g. 0.25,1,4") from None
    if not grid or not all(math.isfinite(c) and c > 0 for c in grid):
        raise InputError(f"--C-grid {text!r}: expected comma-separated positive numbers, e.g. 0.25,1,4")
    return grid


def _result_corpus(queries, obs_extra: dict, obsm: dict, params: dict):
    """A result file: the queries' ids and annotations, an empty X of their shape, the results."""
    import numpy as np
    import scipy.sparse as sp

    from ..io.corpus import Corpus
    empty = sp.csr_matrix(queries.X.shape, dtype=np.float32)
    obs = dict(queries.obs)
    obs.update(obs_extra)
    return Corpus(empty, queries.doc_ids, queries.terms, obs, {}, obsm, {"gputext": params})


def write_result(corpus, path: str, dataset_attrs: dict | None = None) -> None:
    """Write atomically; ``dataset_attrs`` = {hdf5 key: {attr: value}} added before the rename."""
    import h5py
    import numpy as np

    from ..io.corpus import atomic_output, write_corpus
    from ..io.h5file import h5_output
    with atomic_output(path) as tmp:
        write_corpus(corpus, tmp)
        if dataset_attrs:
            with h5_output(tmp, "a") as f:
                for key, attrs in dataset_attrs.items():
                    for name, value in attrs.items():
                        if isinstance(value, (list, tuple, np.ndarray)) and len(value) and isinstance(value[0], str):
                            value = np.asarray(value, dtype=h5py.string_dtype("utf-8"))
                        f[key].attrs[name] = value


def _jsonable(d):
    import numpy as np

    if isinstance(d, dict):
        return {str(k): _jsonable(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_jsonable(v) for v in d]
    if isinstance(d, (np.integer,)):
        return int(d)
    if isinstance(d, (np.floating,)):
        return float(d)
    return d


def _flat(d: dict) -> dict:
    """Scalars of a dict (for /uns/gputext); nested dicts kept, others as JSON strings; keys as
    strings (HDF5 names: the SVM's cross-validation scores are keyed by C, a float)."""
    import numpy as np

    out = {}
    for k, v in d.items():
        k = str(k)
        if isinstance(v, dict):
            out[k] = _flat(v)
        elif isinstance(v, (bool, int, float, str, np.integer, np.floating)) or v is None:
            if v is not None:
                out[k] = v
        else:
            out[k] = json.dumps(_jsonable(v))
    return out


@click.command()
@click.option("--train", "train_path", required=True, type=corpus_path(), help="Labelled training corpus.")
@click.option("--test", "test_path", required=True, type=corpus_path(),
              help="Corpus to classify, in the training vocabulary (build it with --vocab-from).")
@click.option("-k", "k", type=click.IntRange(min=1), default=30, show_default=True, help="Neighbours.")
@click.option("--model", type=click.Choice(["vote", "svm"]), default="vote", show_default=True,
              help="vote: similarity-weighted kNN vote; svm: linear SVM on --features (see --solver).")
@click.option("--features", type=click.Choice(["meta", "bow", "both"]), default="meta", show_default=True,
              help="SVM input: kNN meta-features, bag of words (the stored tf-idf), or both.")
@click.option("--multilabel", is_flag=True,
              help="Category ranking f(d, c) = max similarity to a neighbour labelled c (CNAE paper).")
@click.option("--top-r", type=click.IntRange(min=1), help="--multilabel: predict the r best categories "
              "(default: the mean number of labels of a training document).")
@click.option("--threshold", type=FiniteFloat(), help="--multilabel: predict every category with f(d, c) >= threshold "
              "(in [0, 1] with --metric cosine).")
@click.option("--metric", type=click.Choice(["cosine", "dot"]), default="cosine", show_default=True,
              help="Similarity that weighs the vote.")
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True,
              help="Neighbour search: inverted index, dense kernels, or auto (says which).")
@click.option("--folds", type=click.IntRange(min=0), default=0, show_default=True,
              help="Run the GT-kNN paper's n-fold protocol over train (+ test) and report mean and spread.")
@click.option("--C", "C", type=FiniteFloat(min=0, min_open=True), help="SVM C (skips the cross-validation).")
@click.option("--C-grid", "C_grid", default="0.0625,0.25,1,4,16", show_default=True,
              help="SVM C values tried by 5-fold cross-validation on the training set.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the cross-validation folds.")
@click.option("--solver", type=click.Choice(["tron", "liblinear"]), default="tron", show_default=True,
              help="SVM trainer: tron (ours: every class, fold and C on --device) or liblinear (scikit-learn's "
                   "LinearSVC on the CPU).")
@click.option("--jobs", type=click.IntRange(min=1), help="Processes for --solver liblinear's cross-validation "
              "(default: CPU count).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write predictions (HDF5; - is stdout). Not with --folds.")
@device_option
@scheduler_option
@quiet_option
def classify(train_path, test_path, k, model, features, multilabel, top_r, threshold, metric, method, folds, C,
             C_grid, seed, solver, jobs, output, device, scheduler, quiet):
    """Classify TEST with kNN (vote or multi-label category ranking) or an SVM on kNN meta-features.

    Reads the labelled training corpus and the test corpus (same vocabulary). Writes, with -o, a
    result file whose rows are the test documents: /obs/predicted (codes into the training
    categories) or, with --multilabel, /obsm/label_scores float32 (n, n_labels) and
    /obsm/predicted_labels (CSR). Prints micro- and macro-F1 (and, multi-label, one-error,
    coverage, ranking loss, average precision) when the test corpus is labelled. The neighbour
    search and the meta-features run on the GPU when one is usable (--device), else on the CPU
    twin; so does the SVM (one-vs-rest squared hinge, LIBLINEAR -s 2 with bias, trained by our
    TRON; C by stratified 5-fold cross-validation over --C-grid, every fold and C together), or
    scikit-learn's LinearSVC on the CPU with --solver liblinear. --scheduler runs the vote's neighbour
    search on a Dask cluster (docs/distributed.md; --model svm and --folds run in one process).

    \b
    Example:
      gputext knn classify --train train.h5 --test test.h5 -k 30 -o pred.h5
      gputext knn classify --train train.h5 --test test.h5 --multilabel --top-r 2
      gputext knn classify --train train.h5 --test test.h5 --model svm --features both
      gputext knn classify --train train.h5 --test test.h5 --model svm --folds 5
    """
    from ..io.corpus import read_corpus

    if (top_r is not None or threshold is not None) and not multilabel:
        raise click.UsageError("--top-r and --threshold need --multilabel")
    if multilabel and model == "svm":
        raise click.UsageError("--model svm is single-label; use --multilabel with --model vote")
    if folds == 1:
        raise click.UsageError("--folds must be 0 (off) or at least 2")
    if threshold is not None and metric == "cosine" and not 0.0 <= threshold <= 1.0:
        raise InputError(f"--threshold {threshold:g}: a category's score is a cosine similarity with --metric cosine, "
                         "expected a number in [0, 1]")
    if folds and output:
        raise click.UsageError("--folds reports figures only; drop -o")
    if scheduler and (model == "svm" or folds):
        raise click.UsageError("--scheduler runs the vote model's search; --model svm and --folds run in one process")
    grid = _parse_grid(C_grid)
    check_paths([("--train", train_path), ("--test", test_path)], [("-o", output)])
    check_hdf5_outputs([("-o", output)])
    backend = device_for(device, scheduler, quiet)
    if scheduler is None:
        warn_slow_method(method, backend)
    train = read_corpus(train_path)
    test = read_corpus(test_path)
    to_err = output == "-"
    if folds:
        from .svm import cross_validation_protocol
        with heartbeat(f"{folds}-fold {model} protocol", quiet):
            report = cross_validation_protocol(train, test, folds, model, features, k, grid, C, method, backend,
                                               seed, jobs, quiet, solver)
        click.echo(f"{folds}-fold {model}{'' if model == 'vote' else ' (' + features + ')'}, k = {k}: "
                   f"micro-F1 {report['micro_f1_mean']:.4f} +- {report['micro_f1_std']:.4f}  "
                   f"macro-F1 {report['macro_f1_mean']:.4f} +- {report['macro_f1_std']:.4f}  "
                   f"({report['seconds']:.1f} s)", err=to_err)
        return
    if model == "svm":
        from .svm import svm_classify
        where = str(getattr(backend, "name", backend)).upper() if solver == "tron" else "CPU"
        stage = f"svm on {features}: features, {'C by 5-fold cross-validation, ' if C is None else ''}fit ({where})"
        with heartbeat(stage, quiet):
            res = svm_classify(train, test, features, k, grid, C, 5, method, backend, seed, jobs, quiet, solver=solver)
        what = f"svm on {features} (C = {res.info['C']:g})"
    else:
        from .classify import knn_classify
        with scheduler_client(scheduler, quiet) as client:
            res = knn_classify(train, test, k, metric, method, backend, multilabel, top_r, threshold, quiet, client)
        what = f"kNN {'category ranking' if multilabel else 'vote'} (k = {k}, {res.info.get('method')})"
    times = ", ".join(f"{key} {v:.2f} s" for key, v in res.seconds.items() if key != "total")
    info(f"{what}: {test.n_docs} documents in {res.seconds['total']:.2f} s ({times})", quiet)
    m = res.metrics
    if m:
        line = f"micro-F1 {m['micro_f1']:.4f}  macro-F1 {m['macro_f1']:.4f}  ({m['documents']} labelled documents)"
        if multilabel:
            line += (f"\none-error {m['one_error']:.4f}  coverage {m['coverage']:.4f}  "
                     f"ranking loss {m['ranking_loss']:.4f}  average precision {m['average_precision']:.4f}")
        click.echo(line, err=to_err)
    if output:
        _write_predictions(res, test, train_path, model, multilabel, output)


def _write_predictions(res, test, train_path, model: str, multilabel: bool, output: str) -> None:
    """classify's -o: the test documents with /obs/predicted, or (multi-label) /obsm/label_scores and
    /obsm/predicted_labels; the run's info, metrics and seconds under /uns/gputext/classify."""
    import numpy as np
    import scipy.sparse as sp

    from ..io.corpus import Categorical
    params = {"classify": _flat({**res.info, "metrics": res.metrics, "seconds": res.seconds, "train": str(train_path),
                                 "model": model})}
    if multilabel:
        params["classify"]["label_names"] = np.asarray(res.label_names, dtype=object)
        result = _result_corpus(test, {}, {"label_scores": res.label_scores,
                                           "predicted_labels": sp.csr_matrix(res.predicted_labels, dtype=np.float32)},
                                params)
    else:
        result = _result_corpus(test, {"predicted": Categorical(res.predicted, res.categories)}, {}, params)
    write_result(result, output)


@click.command()
@click.option("--train", "train_path", required=True, type=corpus_path(), help="Labelled training corpus.")
@click.option("--test", "test_path", required=True, type=corpus_path(),
              help="Corpus whose meta-features go to -o (training vocabulary).")
@click.option("-k", "k", type=click.IntRange(min=1), default=30, show_default=True,
              help="Neighbours per class and metric.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="META.h5 for the test documents (- is stdout).")
@click.option("--train-output", type=click.Path(dir_okay=False),
              help="Also write the training documents' meta-features (each left out of its own class).")
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True,
              help="Neighbour search: inverted index (one per class), dense kernels, or auto.")
@device_option
@scheduler_option
@quiet_option
def metafeatures(train_path, test_path, k, output, train_output, method, device, scheduler, quiet):
    """kNN meta-features: per class, k cosine similarities, k L1 and k L2 distances, cosine and L2 to the centroid.

    Reads the labelled training corpus and the test corpus. Writes OUTPUT, a result file whose
    rows are the test documents, with /obsm/metafeatures float32 (n, (3k+2) x n_classes); its
    attrs give the column order (per class in category order: cos@1..k, l1@1..k, l2@1..k,
    cos_centroid, l2_centroid) and the padding rule; /uns/gputext/metafeatures/columns lists every
    column name. --train-output writes the training documents' meta-features the same way, each
    document left out of its own class's lists and centroid. Runs on the GPU when one is usable
    (--device), else on the CPU twin; with --scheduler the search runs on a Dask cluster's workers
    (same values; docs/distributed.md).

    \b
    Example:
      gputext knn metafeatures --train train.h5 --test test.h5 -k 30 -o meta_test.h5 --train-output meta_train.h5
    """
    import numpy as np

    from ..io.corpus import check_same_vocabulary, read_corpus
    from .classify import single_labels
    from .metafeatures import compute_metafeatures

    check_paths([("--train", train_path), ("--test", test_path)], [("-o", output), ("--train-output", train_output)])
    check_hdf5_outputs([("-o", output), ("--train-output", train_output)])
    backend = device_for(device, scheduler, quiet)
    if scheduler is None:
        warn_slow_method(method, backend)
    train = read_corpus(train_path)
    test = read_corpus(test_path)
    check_same_vocabulary(train, test, "training", "test")
    cat = single_labels(train, "training")
    with scheduler_client(scheduler, quiet) as client:
        mf = compute_metafeatures(train.X, cat.codes, len(cat.categories), test.X, k=k, method=method, device=backend,
                                  categories=cat.categories, quiet=quiet, client=client,
                                  train_path=None if client is None else train_path)  # its workers read it
    params = {"metafeatures": {"k": int(k), "train": str(train_path), "method": mf.info["method"],
                               "backend": mf.info["backend"], "seconds": float(mf.info["seconds"]),
                               "classes": np.asarray(cat.categories, dtype=object),
                               "columns": np.asarray(mf.names, dtype=object)}}
    attrs = {"obsm/metafeatures": {
        "column_order": f"per class, in the order of 'classes': cos@1..{k}, l1@1..{k}, l2@1..{k}, cos_centroid, "
                        "l2_centroid (names: /uns/gputext/metafeatures/columns)",
        "classes": [str(c) for c in cat.categories], "k": int(k), "padding": PADDING}}
    for rows_corpus, matrix, path, left_out in ((test, mf.queries, output, False), (train, mf.train, train_output, True)):
        if path is None:
            continue
        p = {"metafeatures": {**params["metafeatures"], "left_out_of_own_class": left_out}}
        write_result(_result_corpus(rows_corpus, {}, {"metafeatures": matrix}, p), path, attrs)
    info(f"meta-features: {mf.train.shape[1]} columns ({len(cat.categories)} classes x {3 * k + 2}) for "
         f"{mf.train.shape[0]} training + {mf.queries.shape[0]} test documents in {mf.info['seconds']:.2f} s "
         f"({mf.info['method']} on {mf.info['backend']})", quiet)
