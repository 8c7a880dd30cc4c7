"""Float64 brute-force references for the scoring engine, independent of gputext's code."""
import numpy as np
import scipy.sparse as sp


def similarity_matrix(X, Q, metric):
    """Dense float64 (n_queries, n_docs) of keys, larger is better (distances negated)."""
    A = X.toarray().astype(np.float64)
    B = Q.toarray().astype(np.float64)
    if metric == "dot":
        return B @ A.T
    if metric == "cosine":
        na = np.linalg.norm(A, axis=1)
        nb = np.linalg.norm(B, axis=1)
        den = np.outer(nb, na)
        return np.where(den > 0, (B @ A.T) / np.where(den > 0, den, 1.0), 0.0)
    if metric == "l2":
        return -np.sqrt(((B[:, None, :] - A[None, :, :]) ** 2).sum(-1))
    if metric == "l1":
        return -np.abs(B[:, None, :] - A[None, :, :]).sum(-1)
    raise ValueError(metric)


def topk(X, Q, k, metric, exclude_self=False):
    """(indices, scores) by (key desc, index asc); -1 / NaN padding; scores as the engine reports."""
    S = similarity_matrix(X, Q, metric)
    n_q, n_docs = S.shape
    if exclude_self:
        S = S.copy()
        S[np.arange(n_q), np.arange(n_q)] = -np.inf
    order = np.lexsort((np.broadcast_to(np.arange(n_docs), S.shape), -S), axis=1)
    valid = n_docs - (1 if exclude_self else 0)
    idx = np.full((n_q, k), -1, np.int64)
    sc = np.full((n_q, k), np.nan)
    m = min(k, valid)
    idx[:, :m] = order[:, :m]
    keys = np.take_along_axis(S, order[:, :m], 1)
    sc[:, :m] = keys if metric in ("cosine", "dot") else -keys
    return idx, sc


def same_up_to_ties(idx, sc, ref_idx, ref_sc, rtol=1e-5, atol=1e-6):
    """Scores equal within float32 rounding; indices equal wherever the reference's score is not
    tied (within tolerance) with a neighbour in the list or the first left out."""
    if not np.allclose(np.nan_to_num(sc, nan=-9e9), np.nan_to_num(ref_sc, nan=-9e9), rtol=rtol, atol=atol):
        return False
    n_q, k = idx.shape
    for i in range(n_q):
        for j in range(k):
            if idx[i, j] == ref_idx[i, j]:
                continue
            tied = np.isclose(ref_sc[i], ref_sc[i, j], rtol=rtol, atol=atol)
            if tied.sum() <= 1 and not (j == k - 1):
                return False
            if ref_idx[i, j] < 0 or idx[i, j] < 0:
                return False
    return True


def random_corpus(n_docs, n_terms, density, seed, signed=False, empty_rows=(), duplicates=()):
    rng = np.random.default_rng(seed)
    X = sp.random(n_docs, n_terms, density=density, random_state=rng, format="lil", dtype=np.float32)
    X = X.tocsr()
    if signed:
        X.data = rng.standard_normal(X.nnz).astype(np.float32)
    else:
        X.data = rng.random(X.nnz).astype(np.float32) + 0.01
    X = X.tolil()
    for r in empty_rows:
        X[r, :] = 0
    for src, dst in duplicates:
        X[dst, :] = X[src, :]
    X = X.tocsr()
    X.eliminate_zeros()
    return X


def check_resident_shards(X, Q, k, metric, geometry, n_shards):
    """The rows top-k's resident shards (Geometry.shard_docs) on the cuda backend: a single query
    before any batch uses the whole index; a batch makes ``n_shards`` shards, which replace the
    whole one; afterwards single queries and the threshold search use them. Every result equals
    the CPU twin's bit for bit."""
    from gputext.engine import Index, search_threshold, search_topk
    index = Index.from_csr(X)
    cpu = search_topk(index, Q, k, metric, device="cpu")
    first = search_topk(index, Q[:1], k, metric, device="cuda", geometry=geometry)
    assert "shard" in index.device_cache and not any(isinstance(key, tuple) for key in index.device_cache)
    stats = {}
    batch = search_topk(index, Q, k, metric, device="cuda", geometry=geometry, stats=stats)
    assert stats["shards"] == n_shards and "shard" not in index.device_cache
    single = search_topk(index, Q[:1], k, metric, device="cuda", geometry=geometry, stats=stats)
    assert stats["shards"] == n_shards
    for got in (batch, first, single):
        n = got[0].shape[0]
        assert np.array_equal(got[0], cpu[0][:n]) and np.array_equal(got[1], cpu[1][:n], equal_nan=True)
    T = search_threshold(index, Q, 0.1, metric, device="cuda", geometry=geometry, stats=stats)
    C = search_threshold(index, Q, 0.1, metric, device="cpu")
    assert stats["shards"] == n_shards
    assert np.array_equal(T.indptr, C.indptr) and np.array_equal(T.indices, C.indices) and np.array_equal(T.data, C.data)
