"""``gputext.LinearSVC``: scikit-learn's LinearSVC interface (penalty l2, loss squared_hinge,
dual=False, one-vs-rest) trained by gputext's TRON on the GPU or the CPU twin.

    from gputext import LinearSVC
    clf = LinearSVC(C=1.0, device="auto").fit(X, y)      # X: dense, scipy sparse, or (sparse, dense)
    clf.predict(X_test); clf.decision_function(X_test); clf.coef_, clf.intercept_, clf.classes_

Same problem as scikit-learn's LinearSVC(dual=False): with fit_intercept the rows get a constant
feature intercept_scaling whose weight is regularised like the others (LIBLINEAR -B), and
intercept_ = intercept_scaling * that weight. Two classes give one weight vector (coef_ (1, m),
positive = classes_[1]); more give one per class. ``tol`` is LIBLINEAR's -s 2 eps (relative to
|grad f(0)| and scaled by the class balance, see gputext.linear.problem.stopping_eps); scikit-learn's
default 1e-4 is kept.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from ..linear.problem import decide
from ..linear.solver import DEFAULT_MAX_ITER, train_path


def decision_scores(X, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    """X coef^T + intercept (n, n_cols) float64; X dense, sparse, or a (sparse, dense) pair."""
    parts = X if isinstance(X, (tuple, list)) else (X,)
    out = np.zeros((parts[0].shape[0], coef.shape[0]))
    off = 0
    for P in parts:
        block = coef[:, off:off + P.shape[1]].T
        out += np.asarray(P @ block) if sp.issparse(P) else np.asarray(P, np.float64) @ block
        off += P.shape[1]
    if off != coef.shape[1]:
        raise ValueError(f"X has {off} features, the model {coef.shape[1]}")
    return out + intercept


class LinearSVC(ClassifierMixin, BaseEstimator):
    """One-vs-rest L2-regularised squared-hinge linear SVM in the primal, trained by TRON."""

    def __init__(self, C: float = 1.0, tol: float = 1e-4, fit_intercept: bool = True, intercept_scaling: float = 1.0,
                 max_iter: int = DEFAULT_MAX_ITER, device: str = "auto"):
        self.C = C
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.max_iter = max_iter
        self.device = device

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _check_X(self, X, reset: bool, y="no_validation"):
        """X checked as scikit-learn does (finite numbers, 2-d, n_features_in_); a (sparse, dense)
        pair is checked block by block and kept as blocks. Returns X, or (X, y) when y is given."""
        if not isinstance(X, tuple):
            if isinstance(y, str) and y == "no_validation":
                return validate_data(self, X, accept_sparse="csr", dtype=[np.float32, np.float64], reset=reset)
            return validate_data(self, X, y, accept_sparse="csr", dtype=[np.float32, np.float64], reset=reset)
        if len(X) != 2:
            raise ValueError(f"a tuple X is the pair (sparse block, dense block), got {len(X)} items")
        X = tuple(check_array(P, accept_sparse="csr", dtype=[np.float32, np.float64]) for P in X)
        if X[0].shape[0] != X[1].shape[0]:
            raise ValueError(f"the sparse and dense blocks have {X[0].shape[0]} and {X[1].shape[0]} rows")
        n_features = X[0].shape[1] + X[1].shape[1]
        if reset:
            self.n_features_in_ = n_features
        elif n_features != self.n_features_in_:
            raise ValueError(f"X has {n_features} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        if isinstance(y, str) and y == "no_validation":
            return X
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != X[0].shape[0]:
            raise ValueError(f"y must be 1-d with one label per row of X ({X[0].shape[0]}), got shape {y.shape}")
        return X, y

    def fit(self, X, y):
        """X (n_samples, n_features): dense, scipy sparse, or a (sparse, dense) pair; y (n_samples,) labels."""
        X, y = self._check_X(X, reset=True, y=y)
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(f"LinearSVC needs samples of at least 2 classes in the data, but the data contains only one class: "
                             f"{self.classes_[0]!r}")
        if not (self.C > 0):
            raise ValueError(f"C must be positive, got {self.C}")
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        res = train_path(X, codes.astype(np.int32), self.classes_.size, [float(self.C)], tol=self.tol,
                         max_iter=self.max_iter, bias=bias, device=self.device)
        W = res.weights[float(self.C)]
        if self.fit_intercept:
            self.coef_, self.intercept_ = W[:-1].T.copy(), bias * W[-1]
        else:
            self.coef_, self.intercept_ = W.T.copy(), np.zeros(W.shape[1])
        self.n_iter_ = max(res.info["iterations"].values())
        self.info_ = res.info
        return self

    def decision_function(self, X) -> np.ndarray:
        check_is_fitted(self)
        scores = decision_scores(self._check_X(X, reset=False), self.coef_, self.intercept_)
        return scores[:, 0] if self.classes_.size == 2 else scores

    def predict(self, X) -> np.ndarray:
        check_is_fitted(self)
        scores = decision_scores(self._check_X(X, reset=False), self.coef_, self.intercept_)
        return self.classes_[decide(scores, self.classes_.size)]
