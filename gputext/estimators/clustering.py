"""StarClustering and StreamClustering: `gputext cluster star` (with its DClustR update) and
`gputext cluster stream` as scikit-learn estimators.

    from gputext import StarClustering, StreamClustering
    star = StarClustering().fit(X)                   # overlapping clusters (beta 0.1)
    star.membership_, star.centers_, star.labels_
    star.partial_fit(X_more)                         # DClustR: add documents, clusters of the union
    star.predict(X_new)                              # the nearest star centre
    stream = StreamClustering()                      # threshold 0.1, max_terms 35
    for batch in batches: stream.partial_fit(batch)  # one batch of the stream at a time
    stream.labels_                                   # every document so far, in arrival order
    stream.predict(X_new)                            # nearest centroid above the threshold, else -1

Both classes are on estimators.base (Estimator, Clusterer) and import neither scikit-learn nor numba:
in a fresh process with the warm server running, fit, partial_fit and StreamClustering.predict are
answered by the server (daemon/library.py); StarClustering.predict is SciPy's work, done here.

Decisions (docs/python.md repeats them):
- Defaults chosen on real text (20 Newsgroups and Reuters R8 training sets, `corpus build`'s
  tf-idf; gputext.estimators.sweep, figures in docs/python.md): StarClustering beta = 0.1 (the
  CLI's 0.25 leaves 17.7% / 10.8% of the documents alone in a cluster; 0.1 leaves 0.4% / 0.7%,
  with FBcubed F 0.217 / 0.483 against 0.031 / 0.221 and NMI 0.477 / 0.315 against 0.527 /
  0.317), StreamClustering threshold = 0.1 (the CLI's 0.6 leaves 68% / 66% alone; 0.1 leaves
  3.3% / 4.0%, F 0.057 / 0.299, NMI 0.498 / 0.365). Lower values than the papers' because a
  corpus of fewer or shorter documents fragments first; gputext.estimators.sweep.sweep_clustering
  reports cluster count, documents alone, FBcubed and NMI over a grid, to pick a value for a
  corpus. The CLI keeps its defaults (the papers' settings).
- predict(X) assigns new documents without changing the model. Star: the cluster of the most
  similar star centre (cosine, float64; ties -> the lower cluster index), -1 for a document
  sharing no term with any centre. Stream: the most similar centroid when the similarity is
  > threshold (the stream's own similarity: the document's max_terms heaviest terms, unit
  norm, against the stored centroids; ties -> the lower cluster id), else -1 where the stream
  would have started a new cluster (or the document has no terms).
- StarClustering.labels_ (one cluster per document, for hard-partition users): a center's own
  cluster; any other document the cluster whose center is most similar to it (cosine, float64),
  ties -> the lower cluster index. Every document is in at least one cluster (an isolated one is a
  center), so there is no noise label. membership_ (CSR float32 ones, documents x clusters) is the
  real, overlapping answer; clusters are in ascending order of their center.
- StarClustering.partial_fit(X_new) is the DClustR update (gputext.cluster.dclus.update, the CLI's
  `cluster star --update`): the state goes through a temporary cluster file, as the update reads
  and writes its graph in that format. The first partial_fit on an unfitted estimator is fit.
- StreamClustering keeps the stream's centroids; labels_ is -1 for a document without terms
  (scikit-learn's noise label). fit(X) starts a new stream; partial_fit continues it. Pickling
  keeps the centroids (not device buffers), so a pickled stream resumes where it stopped.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import scipy.sparse as sp

from ..daemon.library import served
from .base import Clusterer, Estimator
from .inputs import SparseInput, backend_of, check_device, check_finite_float32, check_X


def unit_rows(X) -> sp.csr_matrix:
    """CSR float64 rows of X scaled to unit L2 norm (all-zero rows stay zero)."""
    Xn = sp.csr_matrix(X, dtype=np.float64)
    norms = np.sqrt(np.asarray(Xn.multiply(Xn).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)) @ Xn)


def best_per_row(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_rows: int) -> np.ndarray:
    """int64 (n_rows,): per row, the column of its largest value among the (row, column, value)
    triples (ties -> the lower column); -1 for a row without any."""
    order = np.lexsort((cols, -values, rows))  # by row, then largest value, then lower column
    out = np.full(n_rows, -1, np.int64)
    first = np.ones(len(order), bool)
    first[1:] = rows[order][1:] != rows[order][:-1]
    out[rows[order][first]] = cols[order][first]
    return out


def best_above(S, floor: float) -> np.ndarray:
    """int64 (n_rows,): per row of the similarity matrix S (rows x clusters, sparse), the column
    of the largest value when it is > floor (ties -> the lower column), else -1."""
    S = sp.coo_matrix(S)
    keep = S.data > floor
    return best_per_row(S.row[keep].astype(np.int64), S.col[keep].astype(np.int64), S.data[keep], S.shape[0])


def hard_labels(X: sp.csr_matrix, membership: sp.csr_matrix, centers: np.ndarray) -> np.ndarray:
    """int64 (n_docs,): each document's cluster by the rule in the module docstring."""
    M = sp.coo_matrix(membership)
    rows, cols = M.row.astype(np.int64), M.col.astype(np.int64)
    Xn = unit_rows(X)
    center_of = np.asarray(centers, np.int64)[cols]
    sims = np.asarray(Xn[rows].multiply(Xn[center_of]).sum(axis=1)).ravel()
    sims = np.where(center_of == rows, np.inf, sims)  # a center's own cluster first
    return best_per_row(rows, cols, sims, X.shape[0])


class StarClustering(SparseInput, Clusterer, Estimator):
    """Overlapping star clustering (OClustR / CUDA-OClus) with the DClustR update as partial_fit.

    Parameters
    ----------
    beta : float in [1e-4, 1], default 0.1
        Cosine threshold of the similarity graph (the CLI's default is 0.25; module docstring).
    device : "auto" | "cpu" | "cuda".
    batch_size : int or None, queries per engine batch when building the graph.

    Fitted attributes: membership_ (CSR float32 (n_docs, n_clusters)), centers_ (int64
    (n_clusters,), ascending), labels_ (int64 (n_docs,)), n_clusters_, n_features_in_, device_.
    predict(X): the nearest star centre's cluster (-1: no term shared with any centre).
    """

    def __init__(self, beta=0.1, device="auto", batch_size=None):
        self.beta = beta
        self.device = device
        self.batch_size = batch_size

    @served(changes_state=True)
    def fit(self, X, y=None):
        """Cluster the rows of X (n_docs, n_features), e.g. TF-IDF vectors."""
        from ..cluster.graph import check_beta
        from ..cluster.star import cluster_star
        check_beta(self.beta)
        X = check_finite_float32(check_X(self, X, reset=True))
        backend = backend_of(self.device)
        result = cluster_star(X, float(self.beta), backend, batch_size=self.batch_size)
        self._set(X, result.membership, result.centers, result.graph, backend.name)
        return self

    def _set(self, X, membership, centers, graph, device):
        self._X, self._graph = X, graph
        self.membership_ = sp.csr_matrix(membership, dtype=np.float32)
        self.centers_ = np.asarray(centers, np.int64)
        self.n_clusters_ = int(len(self.centers_))
        self.labels_ = hard_labels(X, self.membership_, self.centers_)
        self.device_ = device

    @served(changes_state=True)
    def partial_fit(self, X, y=None):
        """Add the rows of X to the clustering (DClustR); labels_ and membership_ then cover all
        documents so far (the old ones first). On an unfitted estimator: fit(X)."""
        if not hasattr(self, "membership_"):
            return self.fit(X)
        from ..cluster.dclus import read_stored_graph, update, write_result
        from ..cluster.star import StarResult
        from ..io.corpus import Corpus, read_corpus
        X_new = check_finite_float32(check_X(self, X, reset=False))
        backend = backend_of(self.device)
        n_old = self._X.shape[0]
        with tempfile.TemporaryDirectory(prefix="gputext-star-") as folder:
            path = os.path.join(folder, "clusters.h5")
            state = StarResult(n_old, self.centers_.astype(np.int32), self.membership_, None, None, self._star_graph())
            write_result(Corpus(self._X), state, path, float(self.beta), self.device_, compression=None)
            ids = np.array([str(n_old + i) for i in range(X_new.shape[0])], dtype=object)
            update(path, Corpus(X_new, ids), path, device=backend, quiet=True)
            out = read_corpus(path)
            graph, _ = read_stored_graph(path)
        self._set(out.X, out.obsm["clusters"], out.params["star"]["centers"], graph, backend.name)
        return self

    def _star_graph(self):
        """The similarity graph (cluster.graph.StarGraph), rebuilt from its arrays after unpickling."""
        if isinstance(self._graph, dict):
            from ..cluster.graph import StarGraph
            self._graph = StarGraph(**self._graph)
        return self._graph

    def __getstate__(self):  # the graph as its arrays: unpickling imports no engine module (numba)
        state = dict(self.__dict__)
        graph = state.get("_graph")
        if graph is not None and not isinstance(graph, dict):
            from dataclasses import fields
            state["_graph"] = {f.name: getattr(graph, f.name) for f in fields(graph)}
        return state

    def predict(self, X):
        """int64 (n_samples,): the cluster of each row's most similar star centre (cosine; ties ->
        the lower cluster index), -1 for a row sharing no term with any centre."""
        from sklearn.utils.validation import check_is_fitted
        check_is_fitted(self)
        Q = check_finite_float32(check_X(self, X, reset=False))
        return best_above(unit_rows(Q) @ unit_rows(self._X[self.centers_]).T, 0.0)

class StreamClustering(SparseInput, Clusterer, Estimator):
    """Exact single-pass stream clustering (Szaszy & Samet) against an ELLPACK centroid matrix.

    Parameters
    ----------
    threshold : float in [0, 1], default 0.1: a document joins its most similar cluster when the
        similarity is > threshold, else starts a new one (the CLI's default is 0.6; module docstring).
    max_terms : int, default 35: terms kept per centroid (K).
    batch_size : int or None: documents per scoring launch (results do not depend on it).
    device : "auto" | "cpu" | "cuda".

    Fitted attributes: labels_ (int64, every document so far; -1 without terms), n_clusters_,
    n_features_in_, device_. Weights must be >= 0 (tf-idf, tf-icf).
    predict(X): the most similar centroid above the threshold, else -1 (the model is unchanged).
    """

    def __init__(self, threshold=0.1, max_terms=35, batch_size=None, device="auto"):
        self.threshold = threshold
        self.max_terms = max_terms
        self.batch_size = batch_size
        self.device = device

    def _new_clusterer(self):
        from ..cluster.stream import StreamClusterer
        return StreamClusterer(float(self.threshold), int(self.max_terms), device=check_device(self.device),
                               batch_size=self.batch_size)

    def _clusterer(self):
        if self._stream is None:  # after unpickling: the centroids come back, device buffers are rebuilt
            self._stream = self._new_clusterer()
            self._stream.restore(self._saved)
            self._saved = None
        return self._stream

    @served(changes_state=True)
    def fit(self, X, y=None):
        """Start a new stream with the rows of X, in order."""
        for name in ("labels_", "n_clusters_", "device_", "n_features_in_"):
            self.__dict__.pop(name, None)
        return self.partial_fit(X)

    @served(changes_state=True)
    def partial_fit(self, X, y=None):
        """Cluster the rows of X (n_docs, n_features), continuing the stream."""
        first = not hasattr(self, "labels_")
        X = check_finite_float32(check_X(self, X, reset=first))
        if X.nnz and X.data.min() < 0:
            raise ValueError(f"Negative values in data passed to StreamClustering: document weights must be >= 0 "
                             f"(tf-idf, tf-icf), got a minimum of {X.data.min()}")
        if first:
            self._stream, self._saved = self._new_clusterer(), None
            self.labels_ = np.empty(0, np.int64)
        result = self._clusterer().partial_fit(X)
        self.labels_ = np.concatenate([self.labels_, result.cluster.astype(np.int64)])
        self.n_clusters_ = self._stream.n_clusters
        self.device_ = self._stream.backend.name
        return self

    @served()
    def predict(self, X):
        """int64 (n_samples,): each row's most similar cluster when the similarity is > threshold,
        else -1 (where the stream would start a new cluster, or the row has no terms). The
        similarity is the stream's (gputext.cluster.stream_reference): the row's max_terms
        heaviest terms at unit norm against the stored centroids."""
        from sklearn.utils.validation import check_is_fitted

        from ..cluster.stream_reference import prepare_document
        check_is_fitted(self, "labels_")
        Q = check_finite_float32(check_X(self, X, reset=False))
        state = self._clusterer().centroids()
        terms, weights = state["ell_terms"], state["ell_weights"].astype(np.float64)
        cluster_of = np.broadcast_to(np.arange(terms.shape[1]), terms.shape)
        keep = terms >= 0
        C = sp.csr_matrix((weights[keep], (cluster_of[keep], terms[keep])), shape=(terms.shape[1], Q.shape[1]))
        rows = [prepare_document(Q.indices[a:b], Q.data[a:b], int(self.max_terms))
                for a, b in zip(Q.indptr[:-1], Q.indptr[1:])]
        D = sp.csr_matrix((np.concatenate([r[1] for r in rows] + [np.zeros(0, np.float32)]).astype(np.float64),
                           np.concatenate([r[0] for r in rows] + [np.zeros(0, np.int64)]),
                           np.concatenate([[0], np.cumsum([len(r[0]) for r in rows])])), shape=Q.shape)
        return best_above(D @ C.T, float(self.threshold))

    def __getstate__(self):
        state = dict(self.__dict__)
        if state.get("_stream") is not None:
            state["_saved"] = state["_stream"].state_arrays()
            state["_stream"] = None
        return state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        return tags
