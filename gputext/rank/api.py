"""Library entry points: train (one C, or a grid of C chosen on validation data), predict, evaluate.

    from gputext.rank import train, predict_scores, evaluate
    model = train(corpus, C=1.0, eps=1e-5, device="auto")
    scores = predict_scores(model, test_corpus, device="auto")
    metrics = evaluate(model, test_corpus)      # pairwise_accuracy, ndcg@1/5/10, map, ...
"""
from __future__ import annotations

import numpy as np

from ..backend import Backend, as_backend
from ..errors import InputError
from ..io.corpus import Corpus, canonical_csr
from ..progress import info
from .data import RankingData, corpus_columns, from_corpus, prepare
from .metrics import ranking_metrics
from .model import RankModel
from .objective import RankObjective
from .ops import RankGeometry, matvec
from .tron import tron

SELECT_BY = ("ndcg@10", "pairwise-accuracy")
MAX_C = 1e10  # at C = 1e300 TRON's objective overflows and the weights stay zero


def _backend(device) -> Backend:
    return as_backend(device)


def progress_printer(quiet: bool, prefix: str = ""):
    """A TRON callback printing one line per Newton iteration on stderr (nothing when quiet)."""
    def show(state: dict) -> None:
        mark = "" if state["accepted"] else "  (step rejected, radius cut)"
        info(f"{prefix}iter {state['iteration']:3d}  f {state['f']:.10e}  |grad| {state['grad_norm']:.3e}  "
             f"CG {state['cg']:3d}  {state['time']:.2f} s{mark}", quiet)
    return show


def train_data(data: RankingData, C: float = 1.0, eps: float = 1e-5, max_iter: int = 1000, device="auto",
               quiet: bool = True, geometry: RankGeometry | None = None, callback=None, client=None,
               source: str | None = None) -> RankModel:
    """Train on prepared data (gputext.rank.data.prepare) with TRON; returns a RankModel.
    client: a dask.distributed Client: f, gradient and Hessian-vector products are computed on
    its workers, each holding whole queries, and summed here in a fixed order; TRON runs here
    (gputext.distributed.rank: the single process's weights bit for bit, for any number of workers).
    source: with client, the corpus file ``data`` was read from; workers that see it read their
    parts from it instead of receiving them from this process."""
    if not (eps > 0):
        raise InputError(f"eps must be positive, got {eps}")
    if max_iter < 1:
        raise InputError(f"max_iter must be at least 1, got {max_iter}")
    if not 0 < C <= MAX_C:  # false for nan too
        raise InputError(f"C must be a positive number up to {MAX_C:g}, got {C:g} (past it the squared hinge "
                         "overflows: all-zero weights)")
    ops = None
    if client is not None:
        from ..distributed.rank import DistributedRankOps
        ops = DistributedRankOps(client, data, getattr(device, "name", device), geometry, source=source)
        backend = Backend("cpu", False, "TRON here; f, gradient and Hessian products on the Dask workers")
    else:
        backend = _backend(device)
    objective = RankObjective(data, C, backend, geometry, ops=ops)
    try:
        result = tron(objective, data.n_features, eps=eps, max_iter=max_iter,
                      callback=callback if callback is not None else progress_printer(quiet))
    finally:
        if ops is not None:
            ops.close()
    return RankModel(w=result.w, C=float(C), eps=float(eps), max_iter=int(max_iter), iterations=result.iterations,
                     cg_iterations=result.cg_iterations, objective=result.f, grad_norm=result.grad_norm,
                     grad_norm0=result.grad_norm0, converged=result.converged,
                     backend="dask" if client is not None else backend.name,
                     train_seconds=result.seconds, n_docs=data.n_docs, n_queries=data.n_queries,
                     n_pairs=data.n_pairs, history=result.history)


def train(corpus: Corpus, C: float = 1.0, eps: float = 1e-5, max_iter: int = 1000, device="auto",
          quiet: bool = True, name: str = "training corpus", geometry: RankGeometry | None = None,
          client=None, source: str | None = None) -> RankModel:
    """Train on a corpus with /obs/qid and /obs/relevance (client, source: see train_data)."""
    return train_data(from_corpus(corpus, name), C, eps, max_iter, device, quiet, geometry, client=client,
                      source=source)


def train_grid(corpus: Corpus, valid: Corpus, C_grid, eps: float = 1e-5, max_iter: int = 1000, device="auto",
               quiet: bool = True, select_by: str = "ndcg@10", name: str = "training corpus",
               valid_name: str = "validation corpus", geometry: RankGeometry | None = None,
               client=None, source: str | None = None) -> RankModel:
    """Train one model per C (each from w = 0) and keep the one with the best ``select_by`` on the
    validation corpus (ties: the smaller C). The returned model records the grid and its scores.
    client: train on a Dask cluster (train_data); the validation scores are computed here."""
    if select_by not in SELECT_BY:
        raise InputError(f"select_by must be one of {', '.join(SELECT_BY)}, got {select_by!r}")
    C_grid = [float(c) for c in C_grid]
    if not C_grid or any(not (c > 0 and np.isfinite(c)) for c in C_grid):
        raise InputError(f"the C grid must hold positive numbers, got {C_grid}")
    data = from_corpus(corpus, name)
    check_features(valid.n_terms, data.n_features, valid_name)
    vqid, vrel = corpus_columns(valid, valid_name)
    backend = _backend("cpu" if client is not None else device)
    best, best_score, scores = None, -np.inf, []
    for C in sorted(set(C_grid)):
        info(f"C = {C:g}", quiet)
        model = train_data(data, C, eps, max_iter, device if client is not None else backend, quiet, geometry,
                           client=client, source=source)
        metrics = ranking_metrics(matvec(valid.X, model.w, backend, geometry), vqid, vrel)
        score = metrics["ndcg@10" if select_by == "ndcg@10" else "pairwise_accuracy"]
        scores.append(score)
        info(f"C = {C:g}: validation {select_by} = {score:.6f}", quiet)
        if score > best_score:  # strict: ties keep the smaller C
            best, best_score = model, score
    if best is None:  # every score NaN (no pairs / queries in the validation file)
        raise InputError(f"{valid_name}: no validation score could be computed ({select_by} is undefined: "
                         "the validation corpus has no preference pairs)")
    best.C_grid = np.array(sorted(set(C_grid)), np.float64)
    best.C_grid_scores = np.array(scores, np.float64)
    best.selected_by = select_by
    return best


def check_features(n_features: int, expected: int, name: str) -> None:
    if n_features != expected:
        raise InputError(f"{name} has {n_features} features but the model has {expected}: "
                         "build it with the training corpus's feature set")


def predict_scores(model: RankModel, corpus: Corpus, device="auto", name: str = "test corpus",
                   geometry: RankGeometry | None = None) -> np.ndarray:
    """Scores X w (float64, in the corpus's row order)."""
    check_features(corpus.n_terms, model.n_features, name)
    X = canonical_csr(corpus.X)
    return matvec(X, model.w, _backend(device), geometry)


def evaluate(model: RankModel, corpus: Corpus, device="auto", name: str = "test corpus", gain: str = "auto",
             geometry: RankGeometry | None = None) -> dict:
    """Pairwise accuracy, NDCG@1/5/10 and MAP of the model on a corpus with qid and relevance."""
    qid, relevance = corpus_columns(corpus, name)
    scores = predict_scores(model, corpus, device, name, geometry)
    return ranking_metrics(scores, qid, relevance, gain=gain)


__all__ = ["train", "train_data", "train_grid", "predict_scores", "evaluate", "prepare", "RankModel", "RankGeometry"]
