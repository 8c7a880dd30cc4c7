"""KNeighborsClassifier: `gputext knn classify` as a scikit-learn estimator (KNNMetaFeatures, `knn
metafeatures`, is in metafeatures.py).

    from gputext import KNeighborsClassifier
    clf = KNeighborsClassifier().fit(X_train, y_train)                    # scikit-learn's defaults: 5, uniform, euclidean
    gt_knn = KNeighborsClassifier(n_neighbors=30, metric="cosine", weights="similarity")   # the CLI's GT-kNN vote
    clf.predict(X_test), clf.predict_proba(X_test), clf.score(X_test, y_test)

Decisions (docs/python.md repeats them):
- Defaults are scikit-learn's (n_neighbors=5, weights="uniform", metric="minkowski", p=2), so
  swapping the import keeps the answers. The GT-kNN recipe of `gputext knn classify` is
  KNeighborsClassifier(n_neighbors=30, metric="cosine", weights="similarity").
- A class's score is the summed weight of the query's neighbours in that class; the prediction is
  the class of largest score, ties -> the class first in classes_ (classes_ is np.unique(y),
  sorted), which is scikit-learn's tie rule too. Weights: "uniform" 1; "distance" 1 / distance as
  scikit-learn, where a query with neighbours at distance 0 gives those weight 1 and the others 0;
  a callable maps the (n_queries, k) float64 distances to weights of that shape; ours
  "similarity" is the similarity itself (the CLI's vote; metric "cosine" or "dot" only).
  "distance" needs distances >= 0, so not metric "dot".
- predict_proba: the scores clipped at 0 and divided by their sum; a row whose scores are all
  <= 0 (no neighbour with positive similarity) is one-hot at its prediction, so that
  argmax(predict_proba) == predict always. With uniform or distance weights (all >= 0) this is
  scikit-learn's predict_proba.
- Rows of y that are None are left out of the neighbour search (as the CLI leaves out unlabelled
  training documents).
- Like NearestNeighbors, the class is on estimators.base (Estimator, Classifier) and imports neither
  scikit-learn nor numba: in a fresh process with the warm server running, fit, predict,
  predict_proba, score and the neighbour queries are answered by the server (daemon/library.py).
"""
from __future__ import annotations

import numpy as np

from ..daemon.library import served
from .base import Classifier, Estimator
from .inputs import SparseInput, check_finite_float32, check_X, labelled_rows
from .neighbor_params import check_algorithm, check_n_neighbors, cpu_threads, engine_metric, to_distance
from .neighbors import KNeighborsQueries, NeighbourSearch

WEIGHTS = ("uniform", "distance", "similarity")


def vote_weights(weights, indices: np.ndarray, scores: np.ndarray, metric: str) -> np.ndarray:
    """float64 (n_queries, k) weight of each neighbour (NaN at padding, index -1), for the
    engine's indices / scores and a weights parameter (module docstring)."""
    if weights == "similarity":
        return np.asarray(scores, np.float64)
    if weights == "uniform":
        return np.where(indices >= 0, 1.0, np.nan)
    dist = to_distance(scores, metric)
    if callable(weights):
        return np.asarray(weights(dist), np.float64).reshape(dist.shape)
    with np.errstate(divide="ignore"):
        inverse = 1.0 / dist
    at_zero = np.isinf(inverse)
    rows = at_zero.any(axis=1)
    inverse[rows] = at_zero[rows]  # scikit-learn's rule: the neighbours at distance 0 alone, weight 1 each
    return inverse


class KNeighborsClassifier(KNeighborsQueries, SparseInput, Classifier, Estimator):
    """kNN vote over exact neighbours, with scikit-learn's parameters and defaults.

    Parameters (scikit-learn's, with its defaults, then ours)
    ----------
    n_neighbors : int, default 5
    weights : "uniform" | "distance" | callable | "similarity", default "uniform"
        "distance": 1 / distance (scikit-learn's rule at distance 0); a callable maps the
        (n_queries, k) distances to weights; "similarity" (ours, metric "cosine" or "dot"): the
        CLI's GT-kNN vote.
    metric : str, default "minkowski"
        As NearestNeighbors: "minkowski" (p 1 or 2), "euclidean" / "l2", "manhattan" / "l1" /
        "cityblock", "cosine", "dot".
    algorithm : "auto" | "brute" | "ball_tree" | "kd_tree" (all "auto": exact) | "inverted" | "dense".
    device : "auto" | "cpu" | "cuda".
    batch_size : int or None, queries per engine batch.
    p : 1 or 2, default 2. leaf_size : int, default 30 (accepted, ignored: no trees).
    metric_params : dict or None ({"p": p} only). n_jobs : int or None, the CPU twin's threads.

    The GT-kNN recipe (`gputext knn classify`): KNeighborsClassifier(n_neighbors=30,
    metric="cosine", weights="similarity").

    Fitted attributes: classes_, n_features_in_, n_samples_fit_, effective_metric_ (engine name),
    effective_algorithm_, device_. kneighbors / kneighbors_graph as NearestNeighbors' (over the
    labelled training rows).
    """

    def __init__(self, n_neighbors=5, weights="uniform", metric="minkowski", algorithm="auto", device="auto",
                 batch_size=None, *, p=2, leaf_size=30, metric_params=None, n_jobs=None):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.metric = metric
        self.algorithm = algorithm
        self.device = device
        self.batch_size = batch_size
        self.p = p
        self.leaf_size = leaf_size
        self.metric_params = metric_params
        self.n_jobs = n_jobs

    def _check_params(self) -> tuple[str, str]:
        """(engine metric, engine method)."""
        metric = engine_metric(self.metric, self.p, self.metric_params)
        if not callable(self.weights) and self.weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTS)} or a callable, got {self.weights!r}")
        if self.weights == "similarity" and metric not in ("cosine", "dot"):
            raise ValueError(f"weights='similarity' weighs neighbours by similarity: metric must be 'cosine' or 'dot', "
                             f"got {self.metric!r} (use weights='uniform' or 'distance' with distances)")
        if self.weights == "distance" and metric == "dot":
            raise ValueError("weights='distance' needs distances >= 0; metric 'dot' gives negative ones "
                             "(use weights='similarity')")
        method = check_algorithm(self.algorithm, self.leaf_size)
        check_n_neighbors(self.n_neighbors)
        return metric, method

    @served(changes_state=True)
    def fit(self, X, y):
        """X (n_samples, n_features); y (n_samples,) labels, or the name of an obs column of an AnnData / Corpus X."""
        metric, method = self._check_params()
        X, self.classes_, self._codes = labelled_rows(self, X, y)
        with cpu_threads(self.n_jobs):
            self._search = NeighbourSearch(check_finite_float32(X), method, self.device, self.batch_size)
        self.effective_metric_ = metric
        self.effective_algorithm_ = self._search.method
        self.device_ = self._search.backend.name
        self.n_samples_fit_ = X.shape[0]
        return self

    def _votes(self, X) -> np.ndarray:
        """float64 (n_queries, n_classes) class scores."""
        from sklearn.utils.validation import check_is_fitted

        from ..knn.classify import class_votes
        check_is_fitted(self)
        Q = check_finite_float32(check_X(self, X, reset=False))
        k = check_n_neighbors(self.n_neighbors)
        if k > self.n_samples_fit_:
            raise ValueError(f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k}, "
                             f"n_samples_fit = {self.n_samples_fit_}, n_samples = {Q.shape[0]}")
        with cpu_threads(self.n_jobs):
            indices, scores = self._search.topk(Q, k, self.effective_metric_, False)
        weights = vote_weights(self.weights, indices, scores, self.effective_metric_)
        return class_votes(indices, weights, self._codes, len(self.classes_))

    @served()
    def predict(self, X):
        """Labels (n_queries,) of the classes_' type."""
        votes = self._votes(X)
        return self.classes_[votes.argmax(axis=1)]

    @served()
    def predict_proba(self, X):
        """float64 (n_queries, n_classes), columns in classes_ order (module docstring)."""
        votes = self._votes(X)
        pos = np.maximum(votes, 0.0)
        total = pos.sum(axis=1, keepdims=True)
        onehot = np.zeros_like(votes)
        onehot[np.arange(len(votes)), votes.argmax(axis=1)] = 1.0
        return np.where(total > 0, pos / np.where(total > 0, total, 1.0), onehot)

    score = served()(Classifier.score)  # the whole score in the server: predict and scikit-learn's metric there


def __getattr__(name):  # KNNMetaFeatures lived here until 2026-11-28: pickles name this module
    if name == "KNNMetaFeatures":
        from .metafeatures import KNNMetaFeatures
        return KNNMetaFeatures
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
