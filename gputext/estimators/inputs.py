"""Input handling shared by the estimators: what a user may pass, checked once at the boundary.

X may be a SciPy sparse matrix or array (any format), a NumPy array (or anything array-like),
an ``anndata.AnnData`` (its ``.X``) or a ``gputext.io.Corpus`` (its ``.X``). Where a label, a
relevance or a query id is asked for, an AnnData or Corpus input also accepts the name of one of
its ``obs`` columns. Everything is validated by scikit-learn's ``validate_data``, imported at the
first check (so errors and ``n_features_in_`` are scikit-learn's), and converted to the engine's
canonical CSR (float32 data, int32 sorted indices, int64 indptr).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..backend import DEVICES, Backend, resolve
from ..io.corpus import Categorical, Corpus, canonical_csr

SPARSE_FORMATS = ("csr", "csc", "coo", "dok", "lil", "dia", "bsr")


def is_anndata(X) -> bool:
    """True for an anndata.AnnData (checked by type name: anndata need not be installed)."""
    return any(t.__name__ == "AnnData" and t.__module__.startswith("anndata") for t in type(X).__mro__)


def unwrap(X):
    """(matrix, container): the data matrix of an AnnData or Corpus (container = that object), else (X, None)."""
    if isinstance(X, Corpus):
        return X.X, X
    if is_anndata(X):
        return X.X, X
    return X, None


def obs_column(container, value, what: str):
    """A per-row array: ``value`` itself, or (a str naming a column) the container's obs column.

    Categorical columns become their values (object array; missing -> None)."""
    if not isinstance(value, str):
        return value
    if container is None:
        raise ValueError(f"{what}={value!r} names an obs column, which needs X to be an AnnData or a gputext Corpus; "
                         f"got X without columns: pass the {what} values as an array")
    obs = container.obs
    if value not in obs:
        have = list(obs.keys()) if isinstance(container, Corpus) else list(obs.columns)
        raise ValueError(f"{what}={value!r}: no such obs column (have: {', '.join(map(str, have)) or 'none'})")
    column = obs[value]
    if isinstance(column, Categorical):
        return column.values()
    return np.asarray(column)


def check_device(device) -> str:
    """The device parameter, checked with a ValueError (scikit-learn's kind of error for a bad parameter)."""
    if not isinstance(device, str) or device.lower() not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    return device.lower()


def backend_of(device) -> Backend:
    """Resolve the device once (at fit): 'auto' picks the GPU when numba-cuda finds a usable one."""
    return resolve(check_device(device))


def check_X(estimator, X, reset: bool, y="no_validation", **kw):
    """validate_data + canonical CSR. Returns X, or (X, y) when y is passed (y=None is then
    scikit-learn's "requires y" error)."""
    from sklearn.utils.validation import validate_data  # here: importing the estimators does not import scikit-learn
    X, _ = unwrap(X)
    if isinstance(y, str) and y == "no_validation":
        X = validate_data(estimator, X, reset=reset, accept_sparse=SPARSE_FORMATS, dtype=(np.float64, np.float32), **kw)
        return canonical_csr(X)
    X, y = validate_data(estimator, X, y, reset=reset, accept_sparse=SPARSE_FORMATS,
                         dtype=(np.float64, np.float32), **kw)
    return canonical_csr(X), y


def check_finite_float32(X: sp.csr_matrix) -> sp.csr_matrix:
    """The engine stores float32: values beyond float32's range would become infinite."""
    if X.nnz and not np.all(np.isfinite(X.data)):
        raise ValueError("Input X contains values too large for float32 (the engine's storage type)")
    return X


class SparseInput:
    """Mixin (left of BaseEstimator) for estimators that take sparse X: scikit-learn's tag says so."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def labelled_rows(estimator, X, y, what: str = "y"):
    """(X canonical CSR of the labelled rows, classes_, codes int64): y may name an obs column;
    rows labelled None are dropped."""
    X_in, container = unwrap(X)
    y = obs_column(container, y, what)
    if y is not None:
        y = np.asarray(y)
        if y.dtype == object:
            keep = np.array([v is not None for v in y], bool)
            if not keep.all():
                rows = np.flatnonzero(keep)
                X_in = sp.csr_matrix(X_in)[rows] if sp.issparse(X_in) else np.asarray(X_in)[rows]
                y = y[keep]
    from sklearn.utils.multiclass import check_classification_targets
    X_csr, y = check_X(estimator, X_in, reset=True, y=y)
    check_classification_targets(y)
    classes, codes = np.unique(y, return_inverse=True)
    return X_csr, classes, codes.astype(np.int64).ravel()
