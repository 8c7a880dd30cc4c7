"""Helpers shared by scripts/gpu_rank.py and scripts/table_rank.py: data sets and timed training.

* ``preset_split(name, n_queries=None, seed=0)``: synthetic LTR data with the shape of a preset
  (gputext.datasets presets mq2007 ... mslr-web30k, the paper's Table 1), a training set and a
  test set drawn from the same hidden model (model_seed) with other documents (seed + 1) and a
  fifth of the queries.
* ``letor_sample(folder)``: the LightGBM lambdarank sample (svmlight without qid + .query files),
  read with gputext's svmlight reader; the test set uses the training set's feature columns.
* ``timed_train(...)``: TRON on a backend with the time spent in f, gradient and Hessian-vector
  products, and the per-iteration history (for the convergence plot).
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from ..backend import Backend, as_backend
from ..io.corpus import Corpus, write_corpus
from .data import RankingData, from_corpus
from .objective import RankObjective
from .ops import RankGeometry
from .tron import tron

TABLE1 = ("mq2007-list", "mq2008-list", "mslr-web10k", "mslr-web30k", "mq2007", "mq2008")


def preset_params(name: str, n_queries: int | None = None) -> dict:
    from ..datasets.presets import resolve as resolve_preset

    kind, params = resolve_preset(name, n_queries=n_queries)
    if kind != "ltr":
        raise ValueError(f"preset {name!r} is not learning-to-rank data")
    return params


def preset_split(name: str, n_queries: int | None = None, seed: int = 0, test_fraction: float = 0.2,
                 threads: int | None = None) -> tuple[Corpus, Corpus]:
    """(train, test) corpora with the preset's shape (n_queries scales it down: fewer queries of the
    same mean size). The test set has round(test_fraction * n_queries) queries of the same model."""
    from ..datasets.ltr import make_ltr

    params = preset_params(name, n_queries)
    train = make_ltr(**{**params, "seed": seed, "model_seed": seed}, threads=threads)
    q_test = max(2, int(round(test_fraction * params["n_queries"])))
    test_params = preset_params(name, q_test)
    if "max_docs_per_query" in params:
        test_params["max_docs_per_query"] = min(params["max_docs_per_query"],
                                                int(round(test_params["n_queries"] * test_params["docs_per_query"])))
    test = make_ltr(**{**test_params, "seed": seed + 1, "model_seed": seed}, threads=threads)
    return train, test


def letor_sample(folder: str) -> tuple[Corpus, Corpus]:
    """(train, test) of datasets/letor-sample (rank.train + rank.train.query, rank.test + .query)."""
    from ..io.ingest import build_corpus

    train = build_corpus([os.path.join(folder, "rank.train")], format="svmlight",
                         query_groups=os.path.join(folder, "rank.train.query"))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.h5")
        write_corpus(train, path)
        test = build_corpus([os.path.join(folder, "rank.test")], format="svmlight",
                            query_groups=os.path.join(folder, "rank.test.query"), vocab_from=path)
    return train, test


class TimedObjective(RankObjective):
    """RankObjective that adds up wall time per operation (synchronous: results come back to the host)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.seconds = {"fun": 0.0, "grad": 0.0, "hess": 0.0}

    def fun(self, w):
        t = time.perf_counter()
        out = super().fun(w)
        self.seconds["fun"] += time.perf_counter() - t
        return out

    def grad(self):
        t = time.perf_counter()
        out = super().grad()
        self.seconds["grad"] += time.perf_counter() - t
        return out

    def hess_vec(self, v):
        t = time.perf_counter()
        out = super().hess_vec(v)
        self.seconds["hess"] += time.perf_counter() - t
        return out


def timed_train(data: RankingData, C: float = 1.0, eps: float = 1e-5, max_iter: int = 1000,
                backend: Backend | str = "cpu", geometry: RankGeometry | None = None, callback=None) -> dict:
    """Train with TRON; returns dict(result, setup_seconds, seconds (train, excluding setup),
    fun/grad/hess seconds, n_fun, n_hess, backend)."""
    backend = as_backend(backend)
    t0 = time.perf_counter()
    objective = TimedObjective(data, C, backend, geometry)
    setup = time.perf_counter() - t0
    result = tron(objective, data.n_features, eps=eps, max_iter=max_iter, callback=callback)
    return dict(result=result, setup_seconds=setup, seconds=result.seconds, fun_seconds=objective.seconds["fun"],
                grad_seconds=objective.seconds["grad"], hess_seconds=objective.seconds["hess"],
                n_fun=objective.n_fun, n_hess=objective.n_hess, backend=backend.name, objective=objective)


def prepared(corpus: Corpus, name: str) -> RankingData:
    return from_corpus(corpus, name)


def scores_of(corpus: Corpus, w: np.ndarray) -> np.ndarray:
    """X w in float64 with scipy (host reference for metrics in the scripts)."""
    return np.asarray(corpus.X.astype(np.float64) @ w).ravel()
