"""NearestNeighbors: scikit-learn's neighbour-search API over gputext's exact engine.

    from gputext import NearestNeighbors
    nn = NearestNeighbors(n_neighbors=10, metric="cosine").fit(X)        # X: TF-IDF (n_docs, n_terms)
    distances, indices = nn.kneighbors(Q)                               # (n_queries, 10), ascending
    distances, indices = nn.kneighbors()                                # every fitted row, itself left out
    G = nn.radius_neighbors_graph(radius=0.1, mode="distance")           # near duplicates, CSR

Decisions (docs/python.md repeats them):
- scikit-learn's parameters and defaults (n_neighbors=5, radius=1.0, algorithm="auto",
  leaf_size=30, metric="minkowski", p=2, metric_params=None, n_jobs=None): minkowski with p = 2
  is euclidean, p = 1 manhattan; what each parameter becomes is in neighbor_params.
- metric: "cosine" (distance 1 - cosine similarity, clipped to [0, 2] as scikit-learn's),
  "euclidean" (alias "l2"), "manhattan" (aliases "l1", "cityblock") and "dot", whose distance is
  the NEGATIVE dot product (so that ascending distance = descending similarity, as for the others;
  a radius r keeps dot >= -r). On TF-IDF rows of unit norm, euclidean and cosine order the
  neighbours alike (|a - b|^2 = 2 - 2 cos).
- algorithm: "auto" | "inverted" | "dense"; "brute", "ball_tree" and "kd_tree" are accepted as
  "auto" for users coming from scikit-learn (both methods are exact, like scikit-learn's brute
  force). "auto" picks the inverted index on the CPU and asks gputext.knn.method.choose_method on
  the GPU. radius_neighbors always runs through the inverted index's threshold selector.
- Results are the engine's: exact, ties broken by the lower fitted-row index, the same on cpu and
  cuda. Distances are float64 computed from the engine's float32 scores; indices are intp.
- X=None in kneighbors / radius_neighbors: the fitted rows, each left out of its own neighbours.
- The engine index is built at fit; it is not pickled (rebuilt on first use after unpickling).
- The class subclasses estimators.base.Estimator, not scikit-learn's BaseEstimator, and imports
  neither scikit-learn nor numba: in a fresh process with the warm server running, fit and the
  searches are answered by the server (daemon/library.py) and this process never loads the engine.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..daemon.library import served
from .base import Estimator
from .inputs import SparseInput, backend_of, check_finite_float32, check_X
from .neighbor_params import check_algorithm, check_n_neighbors, cpu_threads, engine_metric, to_distance


def radius_threshold(radius: float, metric: str) -> float:
    """The engine threshold of a distance radius: similarity >= 1 - r (cosine), >= -r (dot), distance <= r."""
    if metric == "cosine":
        return 1.0 - float(radius)
    if metric == "dot":
        return -float(radius)
    return float(radius)


class NeighbourSearch:
    """The fitted rows, their engine Index (built lazily) and the method: what every kNN estimator
    searches through. topk -> (indices int32, scores float32) as gputext.engine.search_topk;
    threshold -> CSR float32 scores as gputext.engine.search_threshold."""

    def __init__(self, X: sp.csr_matrix, method: str, device: str, batch_size: int | None):
        from ..engine import Index
        from ..knn.method import choose_method
        self.X = X
        self.device = device
        self.batch_size = batch_size
        self._backend = backend_of(device)
        self._index = Index.from_csr(X)
        self._dense = None
        self.method, self.reason = choose_method(method, self._index.n_docs, self._index.n_terms,
                                                 self._index.nnz, self.backend, index_built=True)

    def __getstate__(self):  # device buffers and postings are rebuilt on first use, the device resolved again
        state = dict(self.__dict__)
        state.update(_index=None, _dense=None, _backend=None)
        return state

    def __setstate__(self, state):
        state = dict(state)
        state.pop("backend", None)  # pickled before the backend became lazy
        self.__dict__.update(state)
        self.__dict__.setdefault("_backend", None)

    @property
    def backend(self):
        if self._backend is None:
            self._backend = backend_of(self.device)
        return self._backend

    @property
    def index(self):
        if self._index is None:
            from ..engine import Index
            self._index = Index.from_csr(self.X)
        return self._index

    def topk(self, Q: sp.csr_matrix, k: int, metric: str, exclude_self: bool):
        if self.method == "dense":
            if self._dense is None:
                from ..knn.dense import DenseIndex
                self._dense = DenseIndex(self.X, self.backend)
            return self._dense.search(Q, k, metric, exclude_self, True)
        from ..engine import search_topk
        return search_topk(self.index, Q, k, metric, self.backend, exclude_self=exclude_self,
                           batch_size=self.batch_size)

    def threshold(self, Q: sp.csr_matrix, threshold: float, metric: str, exclude_self: bool) -> sp.csr_matrix:
        from ..engine import search_threshold
        return search_threshold(self.index, Q, threshold, metric, self.backend, exclude_self=exclude_self,
                                batch_size=self.batch_size)


class KNeighborsQueries:
    """kneighbors and kneighbors_graph over a fitted NeighbourSearch (self._search), for
    NearestNeighbors and KNeighborsClassifier alike (scikit-learn's KNeighborsMixin): they need
    n_neighbors, n_jobs, n_samples_fit_ and effective_metric_."""

    def _queries(self, X):
        """(Q, exclude_self) for X, or the fitted rows without themselves when X is None."""
        from sklearn.utils.validation import check_is_fitted
        check_is_fitted(self)
        if X is None:
            return self._search.X, True
        return check_finite_float32(check_X(self, X, reset=False)), False

    @served()
    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """(distances float64, indices intp), both (n_queries, n_neighbors), nearest first.

        X=None: every fitted row, itself excluded (needs n_neighbors < n_samples_fit)."""
        k = check_n_neighbors(self.n_neighbors if n_neighbors is None else n_neighbors)
        Q, exclude = self._queries(X)
        n_fit = self.n_samples_fit_
        if exclude and k >= n_fit:
            raise ValueError(f"Expected n_neighbors < n_samples_fit, but n_neighbors = {k}, n_samples_fit = {n_fit}, "
                             f"n_samples = {Q.shape[0]}")
        if not exclude and k > n_fit:
            raise ValueError(f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k}, n_samples_fit = {n_fit}, "
                             f"n_samples = {Q.shape[0]}")
        with cpu_threads(self.n_jobs):
            indices, scores = self._search.topk(Q, k, self.effective_metric_, exclude)
        indices = indices.astype(np.intp)
        if return_distance:
            return to_distance(scores, self.effective_metric_), indices
        return indices

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """CSR (n_queries, n_samples_fit): ones (connectivity) or distances at each query's neighbours."""
        if mode not in ("connectivity", "distance"):
            raise ValueError(f'Unsupported mode, must be one of "connectivity", or "distance" but got "{mode}" instead')
        distances, indices = self.kneighbors(X, n_neighbors, return_distance=True)
        n_q, k = indices.shape
        data = np.ones(n_q * k) if mode == "connectivity" else distances.ravel()
        return sp.csr_matrix((data, indices.ravel(), np.arange(0, n_q * k + 1, k)), shape=(n_q, self.n_samples_fit_))

class NearestNeighbors(KNeighborsQueries, SparseInput, Estimator):
    """Exact nearest neighbours of sparse (or dense) rows, on the GPU or the parallel CPU twin.

    Parameters (scikit-learn's, with its defaults, then ours)
    ----------
    n_neighbors : int, default 5
        Neighbours returned by kneighbors.
    radius : float, default 1.0
        Distance bound of radius_neighbors.
    metric : str, default "minkowski"
        "minkowski" (with p), "euclidean" / "l2", "manhattan" / "l1" / "cityblock", "cosine",
        and ours "dot" (distance = -dot product). Others raise ValueError.
    algorithm : str, default "auto"
        "auto", "brute", "ball_tree", "kd_tree" (all exact here: the last three are "auto"), or
        ours "inverted" | "dense" to force the engine's method.
    device : "auto" | "cpu" | "cuda", default "auto", resolved once at fit.
    batch_size : int or None, queries per engine batch (None: sized from free device memory).
    p : 1 or 2, default 2
        minkowski's power (p = 2 euclidean, p = 1 manhattan); other values raise ValueError.
    leaf_size : int, default 30. Accepted and ignored (there are no trees).
    metric_params : dict or None. Only {"p": p} (as scikit-learn, it overrides p).
    n_jobs : int or None, default None
        The CPU twin's threads during each call (None: numba's count; -1 all). Ignored on cuda.

    Fitted attributes: n_features_in_, n_samples_fit_, effective_metric_ (engine name: "l2",
    "l1", "cosine" or "dot"), effective_algorithm_ ("inverted" or "dense"), device_ ("cpu" or
    "cuda").
    """

    def __init__(self, n_neighbors=5, radius=1.0, metric="minkowski", algorithm="auto", device="auto",
                 batch_size=None, *, p=2, leaf_size=30, metric_params=None, n_jobs=None):
        self.n_neighbors = n_neighbors
        self.radius = radius
        self.metric = metric
        self.algorithm = algorithm
        self.device = device
        self.batch_size = batch_size
        self.p = p
        self.leaf_size = leaf_size
        self.metric_params = metric_params
        self.n_jobs = n_jobs

    @served(changes_state=True)
    def fit(self, X, y=None):
        """Index the rows of X (n_samples, n_features). y is ignored."""
        metric = engine_metric(self.metric, self.p, self.metric_params)
        method = check_algorithm(self.algorithm, self.leaf_size)
        check_n_neighbors(self.n_neighbors)
        X = check_finite_float32(check_X(self, X, reset=True))
        with cpu_threads(self.n_jobs):
            self._search = NeighbourSearch(X, method, self.device, self.batch_size)
        self.effective_metric_ = metric
        self.effective_algorithm_ = self._search.method
        self.device_ = self._search.backend.name
        self.n_samples_fit_ = X.shape[0]
        return self

    @served()
    def _radius_csr(self, X, radius) -> sp.csr_matrix:
        """CSR of engine scores of every fitted row within the radius (columns ascending)."""
        radius = self.radius if radius is None else radius
        if not np.isfinite(radius):
            raise ValueError(f"radius must be a finite number, got {radius!r}")
        Q, exclude = self._queries(X)
        with cpu_threads(self.n_jobs):
            return self._search.threshold(Q, radius_threshold(radius, self.effective_metric_),
                                          self.effective_metric_, exclude)

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """(distances, indices): object arrays of one array per query, every fitted row at
        distance <= radius (columns ascending, or by distance then index with sort_results)."""
        S = self._radius_csr(X, radius)
        dist = to_distance(S.data, self.effective_metric_)
        ind = S.indices.astype(np.intp)
        n_q = S.shape[0]
        out_d = np.empty(n_q, dtype=object)
        out_i = np.empty(n_q, dtype=object)
        for i in range(n_q):
            lo, hi = S.indptr[i], S.indptr[i + 1]
            d, j = dist[lo:hi], ind[lo:hi]
            if sort_results:
                order = np.lexsort((j, d))
                d, j = d[order], j[order]
            out_d[i], out_i[i] = d, j
        if return_distance:
            return out_d, out_i
        return out_i

    def radius_neighbors_graph(self, X=None, radius=None, mode="connectivity", sort_results=False):
        """CSR (n_queries, n_samples_fit) of the radius neighbours: ones or distances."""
        if mode not in ("connectivity", "distance"):
            raise ValueError(f'Unsupported mode, must be one of "connectivity", or "distance" but got "{mode}" instead')
        S = self._radius_csr(X, radius)
        data = np.ones(S.nnz) if mode == "connectivity" else to_distance(S.data, self.effective_metric_)
        G = sp.csr_matrix((data, S.indices.astype(np.intp), S.indptr), shape=S.shape)
        if sort_results and mode == "distance":
            for i in range(G.shape[0]):  # within-row order by distance, then index
                lo, hi = G.indptr[i], G.indptr[i + 1]
                order = np.lexsort((G.indices[lo:hi], G.data[lo:hi]))
                G.indices[lo:hi], G.data[lo:hi] = G.indices[lo:hi][order], G.data[lo:hi][order]
            G.has_sorted_indices = False
        return G
