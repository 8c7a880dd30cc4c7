"""Independent float64 references for the RankSVM tests: brute-force pair enumeration, and random
learning-to-rank problems with ties (imported by the other test_rank_* files).

The brute force follows the definition literally: every pair (i, j) of one query with y_i > y_j,
active when 1 - (s_i - s_j) > 0 with s = X w in float64.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def random_problem(seed: int, n_queries: int = 6, max_docs: int = 12, n_features: int = 5, n_levels: int = 3,
                   density: float = 1.0, shuffle: bool = True, singletons: bool = True):
    """(X csr float32, qid int32, relevance float32, w float64) with exact float64 scores.

    density 1.0 stores every entry (dense features, the device's dense path); below 1.0 the
    zeros are dropped (sparse path).

    Integer features in [-3, 3] and w in multiples of 1/2: scores are exact, so ties in scores and
    margins of exactly 1 (pairs on the boundary, inactive) occur often. Query sizes vary from 1
    (no pairs) to max_docs; qids are shuffled so queries are not contiguous.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, max_docs + 1, size=n_queries)
    if singletons and n_queries > 2:
        sizes[1] = 1
    n = int(sizes.sum())
    qid = np.repeat(rng.permutation(1000)[:n_queries] + 1, sizes).astype(np.int32)
    X = rng.integers(-3, 4, size=(n, n_features)).astype(np.float32)
    if density < 1.0:
        X[rng.random((n, n_features)) > density] = 0
    relevance = rng.integers(0, n_levels, size=n).astype(np.float32)
    if n_queries > 3:  # one query with all labels equal (no pairs), the rest random
        relevance[qid == qid[sizes[:3].sum()]] = 1
    if shuffle:
        p = rng.permutation(n)
        X, qid, relevance = X[p], qid[p], relevance[p]
    w = rng.integers(-4, 5, size=n_features) / 2.0
    return as_csr(X, stored_zeros=density >= 1.0), qid, relevance, w.astype(np.float64)


def as_csr(X: np.ndarray, stored_zeros: bool) -> sp.csr_matrix:
    """CSR of a dense array; with ``stored_zeros`` every entry is stored (dense features)."""
    if not stored_zeros:
        return sp.csr_matrix(X)
    n, m = X.shape
    return sp.csr_matrix((np.ascontiguousarray(X, dtype=np.float32).ravel(), np.tile(np.arange(m, dtype=np.int32), n),
                          np.arange(0, n * m + 1, m, dtype=np.int64)), shape=(n, m))


def brute_force(X, qid, relevance, w, C=1.0, v=None):
    """dict(f, grad, hv, beta_minus, beta_plus, loss, n_pairs, n_active) by enumerating pairs."""
    Xd = X.toarray().astype(np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    s = Xd @ w
    y = np.asarray(relevance, dtype=np.float64)
    n = len(y)
    grad = w.copy()
    hv = None if v is None else np.asarray(v, dtype=np.float64).copy()
    loss = 0.0
    beta_minus = np.zeros(n, np.int64)
    beta_plus = np.zeros(n, np.int64)
    n_pairs = 0
    for q in np.unique(qid):
        rows = np.flatnonzero(qid == q)
        for i in rows:
            for j in rows:
                if y[i] > y[j]:
                    n_pairs += 1
                    margin = 1.0 - (s[i] - s[j])
                    if margin > 0:
                        beta_minus[i] += 1
                        beta_plus[j] += 1
                        loss += margin * margin
                        d = Xd[i] - Xd[j]
                        grad -= 2.0 * C * margin * d
                        if hv is not None:
                            hv += 2.0 * C * d * (d @ v)
    f = 0.5 * w @ w + C * loss
    return dict(f=f, grad=grad, hv=hv, beta_minus=beta_minus, beta_plus=beta_plus, loss=loss, n_pairs=n_pairs,
                n_active=int(beta_minus.sum()), scores=s)


def test_brute_force_by_hand():
    # one query: y = [2, 1, 0], scores [0, 0.5, 3]: pairs (0,1) m=1.5, (0,2) m=4, (1,2) m=3.5
    X = np.array([[0.0], [0.5], [3.0]])
    out = brute_force(X, np.array([1, 1, 1]), np.array([2, 1, 0]), np.array([1.0]), C=1.0, v=np.array([1.0]))
    assert out["n_pairs"] == 3 and out["n_active"] == 3
    assert np.isclose(out["f"], 0.5 + 1.5**2 + 4**2 + 3.5**2)
    # d = x_i - x_j: -0.5, -3, -2.5; grad = w - 2 sum m d
    assert np.isclose(out["grad"][0], 1 - 2 * (1.5 * -0.5 + 4 * -3 + 3.5 * -2.5))
    assert np.isclose(out["hv"][0], 1 + 2 * (0.25 + 9 + 6.25))
    assert out["beta_minus"].tolist() == [2, 1, 0] and out["beta_plus"].tolist() == [0, 1, 2]


def test_boundary_pair_is_inactive():
    # s_i - s_j = 1 exactly: margin 0, not a support pair (the definition uses > 0)
    out = brute_force(np.array([[1.0], [0.0]]), np.array([1, 1]), np.array([1, 0]), np.array([1.0]))
    assert out["n_active"] == 0 and out["loss"] == 0.0


def pair_list(qid, relevance):
    """(i, j) int64 arrays of every preference pair: same query, relevance[i] > relevance[j]."""
    qid = np.asarray(qid)
    y = np.asarray(relevance, dtype=np.float64)
    I, J = [], []
    for q in np.unique(qid):
        rows = np.flatnonzero(qid == q)
        a, b = np.meshgrid(rows, rows, indexing="ij")
        keep = y[a] > y[b]
        I.append(a[keep])
        J.append(b[keep])
    return np.concatenate(I).astype(np.int64), np.concatenate(J).astype(np.int64)


def pairwise_fun_grad(X, qid, relevance, C):
    """f(w) and grad f(w) by the definition over an explicit pair list (for scipy's L-BFGS)."""
    Xd = X.toarray().astype(np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    I, J = pair_list(qid, relevance)
    D = Xd[I] - Xd[J]

    def fun_grad(w):
        margin = 1.0 - D @ w
        active = margin > 0
        m = margin[active]
        return 0.5 * w @ w + C * float(m @ m), w - 2.0 * C * (D[active].T @ m)

    return fun_grad
