"""Weighting schemes against a dense float64 NumPy reference."""
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.errors import InputError
from gputext.io.weighting import WEIGHTINGS, Reference, apply_weighting, document_frequency


def reference_weights(C, scheme, df=None, n_docs=None):
    C = np.asarray(C, dtype=np.float64)
    if df is None:
        df, n_docs = (C != 0).sum(axis=0), C.shape[0]
    df = np.asarray(df, dtype=np.float64)
    if scheme == "tfidf":
        factor = np.where(df > 0, np.log(n_docs / np.maximum(df, 1)), 0.0)
        W = C * factor
    elif scheme == "tficf":
        W = np.log1p(C) * np.log((n_docs + 1) / (df + 1))
    elif scheme == "binary":
        W = (C != 0).astype(np.float64)
    else:
        W = C.copy()
    if scheme in ("tfidf", "tficf"):
        norms = np.sqrt((W * W).sum(axis=1, keepdims=True))
        W = np.divide(W, norms, out=np.zeros_like(W), where=norms > 0)
    return W.astype(np.float32)


def random_counts(n_docs, n_terms, seed):
    rng = np.random.default_rng(seed)
    C = rng.integers(0, 4, size=(n_docs, n_terms)) * (rng.random((n_docs, n_terms)) < 0.3)
    C[0] = 0  # an empty document
    C[:, 1] = 1 + (np.arange(n_docs) % 3)  # a term in every document: idf 0
    C[1, :] = 0
    C[1, 1] = 2  # a document made only of that term
    return C.astype(np.float64)


@pytest.mark.parametrize("scheme", WEIGHTINGS)
@pytest.mark.parametrize("seed", [0, 1])
def test_weighting_matches_dense_reference(scheme, seed):
    C = random_counts(25, 12, seed)
    W = apply_weighting(sp.csr_matrix(C), scheme)
    assert W.dtype == np.float32 and W.indices.dtype == np.int32 and W.has_sorted_indices
    assert not np.any(W.data == 0), "zero weights must not be stored"
    np.testing.assert_allclose(W.toarray(), reference_weights(C, scheme), rtol=1e-6, atol=1e-7)


def test_term_in_every_document_weighs_zero_and_empty_rows_stay_zero():
    C = random_counts(10, 6, 3)
    for scheme in ("tfidf", "tficf"):
        W = apply_weighting(sp.csr_matrix(C), scheme).toarray()
        assert np.all(W[:, 1] == 0)
        assert np.all(W[0] == 0) and np.all(W[1] == 0)
        norms = np.linalg.norm(W, axis=1)
        nonzero = norms > 0
        np.testing.assert_allclose(norms[nonzero], 1.0, rtol=1e-6)


@pytest.mark.parametrize("scheme", ["tfidf", "tficf"])
def test_reference_collection_statistics_are_used(scheme):
    train = random_counts(30, 8, 4)
    test = random_counts(7, 8, 5)
    ref = Reference(document_frequency(sp.csr_matrix(train)), 30)
    W = apply_weighting(sp.csr_matrix(test), scheme, ref)
    expected = reference_weights(test, scheme, (train != 0).sum(axis=0), 30)
    np.testing.assert_allclose(W.toarray(), expected, rtol=1e-6, atol=1e-7)
    own = apply_weighting(sp.csr_matrix(test), scheme).toarray()
    assert not np.allclose(own, W.toarray())


def test_negative_values_need_weighting_none():
    X = sp.csr_matrix(np.array([[1.0, -2.0]]))
    with pytest.raises(InputError, match="non-negative"):
        apply_weighting(X, "tfidf")
    np.testing.assert_array_equal(apply_weighting(X, "none").toarray(), [[1.0, -2.0]])
