"""KNNMetaFeatures: `gputext knn metafeatures` as a scikit-learn transformer.

    from gputext import KNNMetaFeatures
    meta = KNNMetaFeatures(n_neighbors=30)
    F_train = meta.fit_transform(X_train, y_train)                       # leave-one-out rows
    F_test = meta.transform(X_test)

KNNMetaFeatures.fit_transform(X, y) gives the training rows' LEAVE-ONE-OUT features (each row left
out of its own class's lists and centroid), which differ from fit(X, y).transform(X) (where each row
finds itself): that is what stacking a second model on them needs. transform() computes the new
rows' features only. Rows labelled None are left out, as KNeighborsClassifier leaves them out.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .inputs import SparseInput, check_device, check_finite_float32, check_X, labelled_rows
from .neighbor_params import check_algorithm, check_n_neighbors


class KNNMetaFeatures(SparseInput, TransformerMixin, BaseEstimator):
    """kNN meta-features (Gopal & Yang 2010; the CLI's `knn metafeatures`): for every class, the
    cosine / L1 / L2 values of the k nearest training rows of that class and the centroid features,
    (3k + 2) * n_classes float32 columns (names from get_feature_names_out)."""

    def __init__(self, n_neighbors=30, algorithm="auto", device="auto"):
        self.n_neighbors = n_neighbors
        self.algorithm = algorithm
        self.device = device

    def fit(self, X, y):
        """X (n_samples, n_features); y labels (or an obs column name of an AnnData / Corpus X)."""
        self._fit(X, y)
        return self

    def _fit(self, X, y):
        from ..backend import resolve
        check_n_neighbors(self.n_neighbors)
        check_algorithm(self.algorithm)
        X, self.classes_, self._codes = labelled_rows(self, X, y)
        self._X = check_finite_float32(X)
        self.device_ = resolve(check_device(self.device)).name
        self._n_features_out = (3 * int(self.n_neighbors) + 2) * len(self.classes_)

    def _compute(self, Q):
        """Q None: the training rows' leave-one-out features (.train); else Q's only (.queries)."""
        from ..knn.metafeatures import compute_metafeatures
        return compute_metafeatures(self._X, self._codes, len(self.classes_), Q, k=int(self.n_neighbors),
                                    method=check_algorithm(self.algorithm), device=self.device_,
                                    categories=self.classes_, train_rows=Q is None)

    def fit_transform(self, X, y=None, **fit_params):
        """The training rows' leave-one-out meta-features, float32 (n_samples, n_features_out)."""
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None")
        self._fit(X, y)
        return self._compute(None).train

    def transform(self, X):
        """Meta-features of new rows, float32 (n_queries, (3k + 2) n_classes)."""
        check_is_fitted(self)
        Q = check_finite_float32(check_X(self, X, reset=False))
        return self._compute(Q).queries

    def get_feature_names_out(self, input_features=None):
        """'<class>:cos@1' .. '<class>:l2_centroid', in column order."""
        from ..knn.metafeatures import column_names
        check_is_fitted(self)
        return np.asarray(column_names(self.classes_, int(self.n_neighbors)), dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags
