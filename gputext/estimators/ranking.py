"""RankSVM: `gputext rank train / predict / eval` as a scikit-learn estimator.

    from gputext import RankSVM
    model = RankSVM(C=1.0, eps=1e-5).fit(X, relevance, qid=qid)    # or group=[sizes] as LightGBM
    scores = model.predict(X_test)                                 # X w, float64
    model.score(X_test, relevance_test, qid=qid_test)              # NDCG@10

Decisions (docs/python.md repeats them):
- Queries: qid= (one id per row, any order) or group= (sizes of consecutive row groups, as
  LightGBM's); neither: all rows are one query. With an AnnData or Corpus X, y and qid may name
  obs columns and default to "relevance" and "qid" when those columns exist.
- Training is gputext.rank.train_data (linear RankSVM, L2 loss, TRON) on gputext.rank.prepare's
  grouping: the same model as `rank train` on the same rows.
- score is NDCG@10 (gputext.rank.ranking_metrics; exponential gains for relevance <= 31).
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .inputs import SparseInput, backend_of, check_finite_float32, check_X, obs_column, unwrap


def query_ids(qid, group, n_rows: int) -> np.ndarray:
    """int64 (n_rows,) query ids from qid= or group= (sizes); all zeros when neither is given."""
    if qid is not None and group is not None:
        raise ValueError("give either qid or group, not both")
    if group is not None:
        sizes = np.asarray(group)
        if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer) or (sizes < 0).any() or sizes.sum() != n_rows:
            raise ValueError(f"group must hold non-negative integer group sizes summing to n_samples = {n_rows}, "
                             f"got {sizes.tolist()[:10]}")
        return np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    if qid is None:
        return np.zeros(n_rows, np.int64)
    qid = np.asarray(qid)
    if qid.shape != (n_rows,):
        raise ValueError(f"qid must have one entry per row (n_samples = {n_rows}), got shape {qid.shape}")
    if not np.issubdtype(qid.dtype, np.integer):
        qid = np.unique(qid, return_inverse=True)[1].ravel()
    return qid.astype(np.int64)


def ranking_inputs(estimator, X, y, qid, group, reset: bool):
    """(X canonical CSR, relevance float64, qid int64): obs names resolved, defaults applied."""
    X_in, container = unwrap(X)
    if container is not None:
        columns = container.obs.keys() if isinstance(container.obs, dict) else container.obs.columns
        y = "relevance" if y is None and "relevance" in columns else y
        qid = "qid" if qid is None and group is None and "qid" in columns else qid
    y = obs_column(container, y, "y")
    qid = obs_column(container, qid, "qid")
    X, y = check_X(estimator, X_in, reset=reset, y=y, y_numeric=True)
    if X.shape[0] < 2:
        raise ValueError(f"RankSVM needs at least 2 samples to form a preference pair, got n_samples = {X.shape[0]}")
    return check_finite_float32(X), np.asarray(y, np.float64), query_ids(qid, group, X.shape[0])


class RankSVM(SparseInput, BaseEstimator):
    """Linear RankSVM (L2 loss, trust-region Newton) with per-query preference pairs.

    Parameters
    ----------
    C : float, default 1.0. eps : float, default 1e-5 (TRON's relative gradient tolerance).
    max_iter : int, default 1000. device : "auto" | "cpu" | "cuda".

    Fitted attributes: coef_ float64 (n_features,), n_iter_, n_features_in_, device_.
    """

    def __init__(self, C=1.0, eps=1e-5, max_iter=1000, device="auto"):
        self.C = C
        self.eps = eps
        self.max_iter = max_iter
        self.device = device

    def fit(self, X, y=None, qid=None, group=None):
        """X (n_samples, n_features); y relevance (n_samples,); qid= or group= (module docstring)."""
        from ..rank import prepare, train_data
        X, y, qid = ranking_inputs(self, X, y, qid, group, reset=True)
        backend = backend_of(self.device)
        model = train_data(prepare(X, qid, y, "training data"), float(self.C), float(self.eps), int(self.max_iter),
                           backend)
        self.coef_ = np.asarray(model.w, np.float64)
        self.n_iter_ = int(model.iterations)
        self.converged_ = bool(model.converged)
        self.device_ = backend.name
        return self

    def predict(self, X):
        """Scores X w, float64 (n_samples,): larger ranks higher within a query."""
        from ..rank.ops import matvec
        check_is_fitted(self)
        X = check_finite_float32(check_X(self, unwrap(X)[0], reset=False))
        return matvec(X, self.coef_, backend_of(self.device))

    def score(self, X, y=None, qid=None, group=None):
        """NDCG@10 of predict(X) against relevance y within each query."""
        from ..rank import ranking_metrics
        check_is_fitted(self)
        X_csr, y, qid = ranking_inputs(self, X, y, qid, group, reset=False)
        return float(ranking_metrics(self.predict(X_csr), qid, y)["ndcg@10"])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags
