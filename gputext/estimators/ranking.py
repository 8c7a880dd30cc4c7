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
- qid as a column of X (XGBoost's convention): a pandas DataFrame X with a column named "qid"
  gives the rows' query ids and that column is not a feature (fit, predict and score drop it;
  n_features_in_ and feature_names_in_ are the other columns). scikit-learn's utilities slice the
  column with the rows, so GridSearchCV / cross_validate score each fold per query unchanged.
  Arrays have no column names: a NumPy or sparse X is all features, and its queries come from
  qid= / group= (in scikit-learn's utilities through metadata routing, below).
- Metadata routing: fit and score request qid and group by default, so with
  sklearn.set_config(enable_metadata_routing=True), GridSearchCV(...).fit(X, y, qid=qid) routes
  each fold's qid to both fit and score (set_fit_request / set_score_request change that).
- score without queries (no qid, no group, no qid column) on a model fitted on several queries
  raises a ValueError: it would otherwise score the rows as one giant query, which is what
  scikit-learn's utilities do silently when routing is off. A model fitted on one query
  (n_queries_ == 1) scores such rows as one query.
- score is NDCG@10 (gputext.rank.ranking_metrics): per query, rows ordered by predict
  descending (ties: lower row first), DCG@10 = sum over the first min(10, n) positions r of
  (2^rel - 1) / log2(r + 1) over the ideal order's DCG@10 (a query without a relevant row scores
  0); the mean over queries. Gains are linear (rel) when some relevance exceeds 31.
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


QID_COLUMN = "qid"


def split_qid_column(X, qid):
    """(X without its qid column, qid): a pandas DataFrame with a column named "qid" gives the
    query ids (XGBoost's convention); anything else is returned as it is."""
    columns = getattr(X, "columns", None)
    if columns is None or not hasattr(X, "drop") or QID_COLUMN not in list(columns):
        return X, qid
    if qid is not None:
        raise ValueError(f"qid was given twice: as the {QID_COLUMN!r} column of X and as qid=; pass one of them")
    return X.drop(columns=QID_COLUMN), X[QID_COLUMN].to_numpy()


def ranking_inputs(estimator, X, y, qid, group, reset: bool):
    """(X canonical CSR, relevance float64, qid int64 or None when no query was given): obs names
    resolved, a DataFrame's qid column taken, defaults applied."""
    X, qid = split_qid_column(X, qid)
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
    given = qid is not None or group is not None
    return check_finite_float32(X), np.asarray(y, np.float64), query_ids(qid, group, X.shape[0]) if given else None


class RankSVM(SparseInput, BaseEstimator):
    """Linear RankSVM (L2 loss, trust-region Newton) with per-query preference pairs.

    Parameters
    ----------
    C : float, default 1.0
        Weight of the pairwise squared hinge loss against 1/2 |w|^2.
    eps : float, default 1e-5
        TRON's relative gradient tolerance.
    max_iter : int, default 1000
        TRON's Newton iterations at most.
    device : "auto" | "cpu" | "cuda", default "auto"

    Queries: qid= (one id per row) or group= (sizes of consecutive groups) in fit and score, or a
    pandas DataFrame X with a "qid" column (XGBoost's convention; the column is not a feature).
    In scikit-learn's utilities use the column, or enable metadata routing: fit and score request
    qid and group by default. score without any query on a model fitted on several queries
    raises ValueError (it would score one giant query).

    score is NDCG@10 over queries: gains 2^rel - 1 (rel when some relevance exceeds 31),
    discount 1 / log2(1 + position), cut-off 10, each query divided by its ideal DCG@10 (0 for a
    query without a relevant row), then the mean over queries.

    Fitted attributes: coef_ float64 (n_features,), n_iter_, converged_, n_queries_ (queries in
    the training rows), n_features_in_ (and feature_names_in_ for a DataFrame, qid excluded),
    device_.
    """

    __metadata_request__fit = {"qid": True, "group": True}
    __metadata_request__score = {"qid": True, "group": True}

    def __init__(self, C=1.0, eps=1e-5, max_iter=1000, device="auto"):
        self.C = C
        self.eps = eps
        self.max_iter = max_iter
        self.device = device

    def fit(self, X, y=None, qid=None, group=None):
        """X (n_samples, n_features); y relevance (n_samples,); qid= or group= (module docstring)."""
        from ..rank import prepare, train_data
        X, y, qid = ranking_inputs(self, X, y, qid, group, reset=True)
        qid = np.zeros(X.shape[0], np.int64) if qid is None else qid
        backend = backend_of(self.device)
        model = train_data(prepare(X, qid, y, "training data"), float(self.C), float(self.eps), int(self.max_iter),
                           backend)
        self.coef_ = np.asarray(model.w, np.float64)
        self.n_iter_ = int(model.iterations)
        self.converged_ = bool(model.converged)
        self.device_ = backend.name
        self.n_queries_ = int(np.unique(qid).size)
        return self

    def predict(self, X):
        """Scores X w, float64 (n_samples,): larger ranks higher within a query."""
        from ..rank.ops import matvec
        check_is_fitted(self)
        X = check_finite_float32(check_X(self, unwrap(split_qid_column(X, None)[0])[0], reset=False))
        return matvec(X, self.coef_, backend_of(self.device))

    def score(self, X, y=None, qid=None, group=None):
        """NDCG@10 of predict(X) against relevance y within each query (the class docstring gives
        the gains and the cut-off); queries from qid=, group= or X's "qid" column."""
        from ..rank import ranking_metrics
        check_is_fitted(self)
        X_csr, y, qid = ranking_inputs(self, X, y, qid, group, reset=False)
        if qid is None:
            if getattr(self, "n_queries_", 1) > 1:
                raise ValueError(
                    f"RankSVM.score needs the rows' queries: the model was fitted on {self.n_queries_} queries, "
                    f"and rows without qid would be scored as one query. Pass qid= or group=, give X as a "
                    f"DataFrame with a 'qid' column, or in GridSearchCV / cross_validate enable metadata routing "
                    f"(sklearn.set_config(enable_metadata_routing=True)) and pass qid to fit")
            qid = np.zeros(X_csr.shape[0], np.int64)
        from ..rank.ops import matvec
        return float(ranking_metrics(matvec(X_csr, self.coef_, backend_of(self.device)), qid, y)["ndcg@10"])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags
