"""In-process measurements of the registry's entries ("kernel" records): the library call a command
makes, on the corpora it reads, timed warm (one untimed call first compiles), the median of
``repeats`` calls. Reading the files is not timed; the work is the same as the CLI command's.

Each function takes (files, device, repeats) and returns (median seconds, every run's seconds).
"""
from __future__ import annotations

import statistics
import time

from .named import registrar

CALLS: dict = {}
call = registrar(CALLS)  # @call("name"): the in-process measurement of an Entry's ``library``


def timed(fn, repeats: int) -> tuple[float, list]:
    """One untimed call (compilation, caches), then ``repeats`` timed calls: (median, runs)."""
    fn()
    runs = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), runs


def _read(files: dict, *roles: str):
    from gputext.io import read_corpus
    return [read_corpus(str(files[r])) for r in roles]


def _labels(corpus):
    return corpus.labels.values()


@call("knn_search")
def knn_search(files, device, repeats):
    from gputext import NearestNeighbors
    train, test = _read(files, "train", "test")
    return timed(lambda: NearestNeighbors(n_neighbors=30, device=device).fit(train.X).kneighbors(test.X), repeats)


@call("sklearn_knn")
def sklearn_knn(files, device, repeats):
    from sklearn.neighbors import NearestNeighbors
    train, test = _read(files, "train", "test")
    model = NearestNeighbors(n_neighbors=30, algorithm="brute", metric="cosine", n_jobs=-1)
    return timed(lambda: model.fit(train.X).kneighbors(test.X), repeats)


@call("knn_vote")
def knn_vote(files, device, repeats):
    from gputext import KNeighborsClassifier
    train, test = _read(files, "train", "test")
    y = _labels(train)
    return timed(lambda: KNeighborsClassifier(n_neighbors=30, device=device).fit(train.X, y).predict(test.X), repeats)


@call("svm_classify")
def svm_classify(files, device, repeats):
    from gputext.knn.svm import svm_classify as run
    train, test = _read(files, "train", "test")
    return timed(lambda: run(train, test, "meta", 30, device=device), repeats)


@call("star")
def star(files, device, repeats):
    from gputext import StarClustering
    (train,) = _read(files, "train")
    return timed(lambda: StarClustering(beta=0.25, device=device).fit(train.X), repeats)


@call("stream")
def stream(files, device, repeats):
    from gputext import StreamClustering
    (train,) = _read(files, "train")
    return timed(lambda: StreamClustering(threshold=0.6, max_terms=35, device=device).fit(train.X), repeats)


@call("rank_train")
def rank_train(files, device, repeats):
    import numpy as np

    from gputext import RankSVM
    (train,) = _read(files, "train")
    y, qid = np.asarray(train.obs["relevance"]), np.asarray(train.obs["qid"])
    return timed(lambda: RankSVM(C=1.0, eps=1e-5, device=device).fit(train.X, y, qid=qid), repeats)
