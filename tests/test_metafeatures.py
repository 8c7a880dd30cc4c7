"""Meta-features equal a float64 brute-force reference (written here from the definition)."""
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.errors import InputError
from gputext.knn.metafeatures import column_names, compute_metafeatures


def reference(Xtr, y, n_classes, Xq, k):
    """float64 meta-features straight from the definition (dense, no shortcuts)."""
    A = Xtr.toarray().astype(np.float64)
    B = np.vstack([A, Xq.toarray().astype(np.float64)])
    n_train = A.shape[0]
    out = np.zeros((B.shape[0], (3 * k + 2) * n_classes))
    for i, x in enumerate(B):
        for c in range(n_classes):
            members = [j for j in np.nonzero(y == c)[0] if j != i or i >= n_train]
            D = A[members]
            nx = np.linalg.norm(x)
            nd = np.linalg.norm(D, axis=1)
            cos = np.where(nd * nx > 0, D @ x / np.where(nd * nx > 0, nd * nx, 1), 0.0)
            l1 = np.abs(D - x).sum(1)
            l2 = np.sqrt(((D - x) ** 2).sum(1))
            cols = []
            for vals, larger, empty in ((cos, True, 0.0), (l1, False, np.abs(x).sum()), (l2, False, nx)):
                v = np.sort(vals)[::-1] if larger else np.sort(vals)
                v = list(v[:k])
                while len(v) < k:
                    v.append(v[-1] if v else empty)
                cols += v
            if len(members):
                cen = D.mean(0)
                ncen = np.linalg.norm(cen)
                cols += [x @ cen / (nx * ncen) if nx * ncen > 0 else 0.0, np.linalg.norm(x - cen)]
            else:
                cols += [0.0, nx]
            out[i, c * (3 * k + 2):(c + 1) * (3 * k + 2)] = cols
    return out[:n_train], out[n_train:]


def random_problem(seed, n_train=30, n_test=7, n_terms=15, n_classes=4):
    rng = np.random.default_rng(seed)
    X = sp.random(n_train + n_test, n_terms, density=0.3, random_state=rng, format="csr", dtype=np.float32)
    X.data = rng.random(X.nnz).astype(np.float32) + 0.05
    X = X.tolil()
    X[2, :] = 0  # an empty training document
    X[5, :] = X[4, :]  # a duplicate
    X = X.tocsr()
    y = rng.integers(0, n_classes - 1, n_train)  # the last class is empty
    y[0] = n_classes - 2
    y[1] = 0
    y[np.nonzero(y == 1)[0][1:]] = 0  # class 1 has exactly one document (its own list is empty)
    return X[:n_train], y, X[n_train:], n_classes


@pytest.mark.parametrize("method", ["inverted", "dense"])
@pytest.mark.parametrize("k", [1, 3, 12])
def test_equal_float64_reference(method, k):
    Xtr, y, Xq, C = random_problem(seed=k)
    mf = compute_metafeatures(Xtr, y, C, Xq, k=k, method=method, device="cpu")
    ref_tr, ref_q = reference(Xtr, y, C, Xq, k)
    assert mf.train.shape == ref_tr.shape and mf.queries.shape == ref_q.shape
    assert mf.train.dtype == np.float32
    np.testing.assert_allclose(mf.train, ref_tr, rtol=2e-6, atol=2e-7)
    np.testing.assert_allclose(mf.queries, ref_q, rtol=2e-6, atol=2e-7)
    assert len(mf.names) == mf.train.shape[1]


def test_methods_agree_exactly():
    Xtr, y, Xq, C = random_problem(seed=11, n_train=40)
    a = compute_metafeatures(Xtr, y, C, Xq, k=5, method="inverted", device="cpu")
    b = compute_metafeatures(Xtr, y, C, Xq, k=5, method="dense", device="cpu")
    np.testing.assert_allclose(a.train, b.train, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(a.queries, b.queries, rtol=1e-6, atol=1e-7)


def test_column_order_and_padding_rule():
    names = column_names(["a", "b"], 2)
    assert names[:8] == ["a:cos@1", "a:cos@2", "a:l1@1", "a:l1@2", "a:l2@1", "a:l2@2", "a:cos_centroid", "a:l2_centroid"]
    assert names[8] == "b:cos@1" and len(names) == 16
    # a class with one document: its own member sees the empty-document values
    X = sp.csr_matrix(np.array([[1, 0], [0, 2], [0, 1]], np.float32))
    mf = compute_metafeatures(X, np.array([0, 1, 1]), 2, None, k=2, method="inverted", device="cpu")
    row0 = mf.train[0]
    np.testing.assert_allclose(row0[:8], [0, 0, 1, 1, 1, 1, 0, 1])  # class 0 = only itself
    np.testing.assert_allclose(row0[8:10], [0, 0])  # cosine to class 1's documents
    np.testing.assert_allclose(row0[10:12], [2, 3])  # L1 to [0,1] then [0,2]
    np.testing.assert_allclose(row0[12:14], [np.sqrt(2), np.sqrt(5)])


def test_bad_input():
    X = sp.csr_matrix(np.eye(3, dtype=np.float32))
    with pytest.raises(InputError, match="label codes"):
        compute_metafeatures(X, np.array([0, 1, 5]), 2, None, k=1, device="cpu")
    with pytest.raises(InputError, match="terms"):
        compute_metafeatures(X, np.array([0, 1, 1]), 2, sp.csr_matrix((1, 4), dtype=np.float32), k=1, device="cpu")
    with pytest.raises(InputError, match="k must be"):
        compute_metafeatures(X, np.array([0, 1, 1]), 2, None, k=0, device="cpu")


@pytest.mark.cudasim
def test_cuda_equals_cpu_twin_in_simulator(monkeypatch):
    # the grouped engine path on the (simulated) device gives the CPU twin's matrix bit for bit
    from gputext.engine import Geometry, search as engine_search
    tiny = Geometry(group_block=8, group_items=2, merge_block=8, merge_width=16, finish_block=32, build_block=8)
    monkeypatch.setattr(engine_search, "Geometry", lambda: tiny)
    Xtr, y, Xq, C = random_problem(seed=4, n_train=14, n_test=2, n_terms=8, n_classes=3)
    a = compute_metafeatures(Xtr, y, C, Xq, k=3, method="inverted", device="cpu")
    b = compute_metafeatures(Xtr, y, C, Xq, k=3, method="inverted", device="cuda")
    assert np.array_equal(a.train, b.train) and np.array_equal(a.queries, b.queries)
    ref_tr, ref_q = reference(Xtr, y, C, Xq, 3)
    np.testing.assert_allclose(b.train, ref_tr, rtol=2e-6, atol=2e-7)
    np.testing.assert_allclose(b.queries, ref_q, rtol=2e-6, atol=2e-7)
