"""The grouped top-k selector (search_topk_grouped) against a float64 brute-force reference on the
CPU twin, and CUDA == CPU twin bit for bit in the simulator (tiny geometry)."""
import numpy as np
import pytest
import scipy.sparse as sp

from engine_reference import random_corpus, same_up_to_ties, similarity_matrix
from gputext.engine import Geometry, Index, search_topk, search_topk_grouped
from gputext.errors import InputError

ALL = ("cosine", "l1", "l2", "dot")


def grouped_reference(X, Q, k, group_ptr, metric, self_doc):
    """(docs, scores) (n_q, n_groups, k) by (key desc, doc asc) within each group, NaN / -1 padding."""
    S = similarity_matrix(X, Q, metric)
    n_q = S.shape[0]
    G = len(group_ptr) - 1
    docs = np.full((n_q, G, k), -1, np.int64)
    scores = np.full((n_q, G, k), np.nan)
    for i in range(n_q):
        for g in range(G):
            members = [d for d in range(group_ptr[g], group_ptr[g + 1]) if d != self_doc[i]]
            order = sorted(members, key=lambda d: (-S[i, d], d))[:k]
            docs[i, g, :len(order)] = order
            keys = S[i, order]
            scores[i, g, :len(order)] = keys if metric in ("cosine", "dot") else -keys
    return docs, scores


def problem(seed, n_docs=120, n_terms=30, signed=False):
    X = random_corpus(n_docs, n_terms, 0.12, seed=seed, signed=signed, empty_rows=(4, 50),
                      duplicates=((10, 11), (10, 70), (20, 21)))
    # groups of very different sizes, two of them empty, one of a single document
    group_ptr = np.array([0, 3, 3, 4, 60, 60, n_docs - 10, n_docs], np.int64)
    Q = sp.vstack([random_corpus(6, n_terms, 0.2, seed=seed + 1, signed=signed), X[10], X[4],
                   sp.csr_matrix((1, n_terms), dtype=np.float32)]).tocsr()
    return X, Q, group_ptr


def check(got_docs, got_scores, ref_docs, ref_scores):
    n_q, G, k = ref_docs.shape
    for g in range(G):
        assert same_up_to_ties(got_docs[:, g], got_scores[:, g], ref_docs[:, g], ref_scores[:, g]), f"group {g}"


@pytest.mark.parametrize("k", [1, 5, 40])
@pytest.mark.parametrize("signed", [False, True])
def test_grouped_equals_reference_cpu(k, signed):
    X, Q, gp = problem(seed=3 + k, signed=signed)
    self_doc = np.full(Q.shape[0], -1, np.int64)
    self_doc[[0, 6]] = [1, 10]  # leave out a document of group 0, and the query's own duplicate
    index = Index.from_csr(X)
    scores, docs = search_topk_grouped(index, Q, k, gp, ALL, device="cpu", exclude_self=self_doc)
    assert scores.shape == (Q.shape[0], 7, 4, k) and scores.dtype == np.float32 and docs.dtype == np.int64
    for m, metric in enumerate(ALL):
        ref_docs, ref_scores = grouped_reference(X, Q, k, gp, metric, self_doc)
        check(docs[:, :, m], scores[:, :, m], ref_docs, ref_scores)
    assert np.all(docs[:, 1] == -1) and np.all(np.isnan(scores[:, 1]))  # empty group
    assert 1 not in docs[0, 0] and 10 not in docs[6]
    if k >= 3:  # the duplicates 10, 11, 70 tie exactly and come in index order within their group
        row = docs[6, 3, 0].tolist()  # query = doc 10 (left out): 11 first in group 3
        assert row[0] == 11


def test_grouped_equals_plain_search_per_group():
    # per group, the grouped selector gives what search_topk gives over that group's documents alone
    X, Q, gp = problem(seed=9)
    index = Index.from_csr(X)
    scores, docs = search_topk_grouped(index, Q, 6, gp, ("l1", "cosine"), device="cpu")
    for g in range(len(gp) - 1):
        lo, hi = gp[g], gp[g + 1]
        if hi == lo:
            continue
        sub = Index.from_csr(X[lo:hi])
        for m, metric in enumerate(("l1", "cosine")):
            idx, sc = search_topk(sub, Q, 6, metric, device="cpu")
            np.testing.assert_array_equal(np.where(idx >= 0, idx + lo, -1), docs[:, g, m])
            np.testing.assert_array_equal(sc, scores[:, g, m])


def test_pad_last_and_out_columns():
    X, Q, gp = problem(seed=5)
    index = Index.from_csr(X)
    k = 8
    out = np.full((Q.shape[0], 7, 3 * k + 2), 7.0, np.float32)
    got, docs = search_topk_grouped(index, Q, k, gp, ("cosine", "l1", "l2"), device="cpu", pad="last", out=out,
                                    return_docs=False)
    assert got is out and docs is None
    assert np.all(out[:, :, 3 * k:] == 0)
    nan_scores, _ = search_topk_grouped(index, Q, k, gp, ("cosine", "l1", "l2"), device="cpu")
    A = Q.toarray().astype(np.float64)
    empty = {0: np.zeros(len(A)), 1: np.abs(A).sum(1), 2: np.sqrt((A * A).sum(1))}
    for m in range(3):
        block = out[:, :, m * k:(m + 1) * k]
        ref = nan_scores[:, :, m]
        valid = ~np.isnan(ref)
        assert np.array_equal(block[valid], ref[valid])
        n_valid = valid.sum(-1)
        for i in range(Q.shape[0]):
            for g in range(7):
                v = n_valid[i, g]
                want = ref[i, g, v - 1] if v else np.float32(empty[m][i])
                np.testing.assert_allclose(block[i, g, v:], want, rtol=1e-6)


def test_bad_groups_and_options():
    X, Q, gp = problem(seed=6)
    index = Index.from_csr(X)
    with pytest.raises(InputError, match="offsets"):
        search_topk_grouped(index, Q, 3, np.array([0, 5, 3, X.shape[0]]), device="cpu")
    with pytest.raises(InputError, match="offsets"):
        search_topk_grouped(index, Q, 3, np.array([0, 5]), device="cpu")
    with pytest.raises(InputError, match="pad"):
        search_topk_grouped(index, Q, 3, gp, device="cpu", pad="zero")
    with pytest.raises(InputError, match="out must be"):
        search_topk_grouped(index, Q, 3, gp, ("cosine", "l2"), device="cpu", out=np.empty((Q.shape[0], 7, 5), np.float32))
    with pytest.raises(InputError, match="unknown metric"):
        search_topk_grouped(index, Q, 3, gp, ("cos",), device="cpu")
    from gputext.backend import Backend
    with pytest.raises(InputError, match="at most 512"):
        search_topk_grouped(index, Q, 513, gp, device=Backend("cuda", True, "test"))


@pytest.mark.cudasim
@pytest.mark.parametrize("items,pad", [(1, "nan"), (4, "last")])
def test_grouped_cuda_equals_cpu_in_simulator(items, pad):
    # items = 1: groups span several segments of 8 documents and are merged; items = 4: most
    # groups are one segment
    X = random_corpus(40, 12, 0.25, seed=21, empty_rows=(7,), duplicates=((3, 39), (3, 12)))
    gp = np.array([0, 2, 2, 19, 40], np.int64)
    Q = sp.vstack([random_corpus(2, 12, 0.3, seed=22), X[3]]).tocsr()
    self_doc = np.array([-1, 5, 3], np.int64)
    index = Index.from_csr(X)
    # items 1: the copy back goes through the pinned buffers in chunks of a few rows, segments
    # found through the (term, segment) table, selection by bitonic sorts; items 4: one plain copy, binary
    # searches, selection by counting (the default)
    tiny = Geometry(group_block=8, group_items=items, merge_block=8, merge_width=16, finish_block=8, build_block=8,
                    staging_bytes=400 if items == 1 else 0, segment_table_bytes=1 << 20 if items == 1 else 0,
                    group_counting=items != 1)
    sc, dc = search_topk_grouped(index, Q, 5, gp, ("cosine", "l1", "l2"), device="cpu", exclude_self=self_doc, pad=pad)
    sg, dg = search_topk_grouped(index, Q, 5, gp, ("cosine", "l1", "l2"), device="cuda", exclude_self=self_doc,
                                 pad=pad, geometry=tiny, batch_size=2)
    assert np.array_equal(dc, dg)
    assert np.array_equal(sc, sg, equal_nan=True)


def test_query_stats_multi_matches_query_stats():
    from gputext.io.corpus import csr_arrays
    from gputext.kernels import scoring
    X = random_corpus(200, 40, 0.1, seed=31, signed=True, empty_rows=(3,))
    maxabs = np.abs(random_corpus(1, 40, 1.0, seed=32).toarray()[0]).astype(np.float32)
    codes = np.array([0, 3, 2, 1])
    scale, qn = scoring.query_stats_multi(*csr_arrays(X), maxabs, codes)
    for j, code in enumerate(codes):
        s1, q1 = scoring.query_stats(*csr_arrays(X), maxabs, code)
        assert np.array_equal(q1, qn[j]) and np.array_equal(s1, scale[1 if code == 3 else 0])


@pytest.mark.parametrize("n_chunks", [2, 3, 7])
def test_parallel_postings_build_equals_serial(n_chunks):
    from gputext.io.corpus import csr_arrays
    from gputext.kernels import postings
    X = random_corpus(300, 40, 0.1, seed=41, signed=True, empty_rows=(0, 5, 299))
    arrays = csr_arrays(X)
    serial = postings.build_postings_cpu(*arrays, 40)
    parallel = postings.build_postings(*arrays, 40, n_chunks=n_chunks)
    for a, b in zip(serial, parallel):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_merge_sort_equals_numpy_sort_on_runs_and_random_keys():
    """tile_one's sort (kernels.primitives.merge_sort_cpu): ascending runs (one per query, its usual
    input), random keys with repeats, and the corner sizes 0, 1 and 2."""
    from gputext.kernels.primitives import merge_sort_cpu as merge_sort
    rng = np.random.default_rng(7)
    cases = [np.zeros(0, np.int64), np.array([5], np.int64), np.array([2, 1], np.int64), np.arange(9, dtype=np.int64)]
    for _ in range(40):
        runs = [np.sort(rng.integers(0, 1000, rng.integers(0, 40))) for _ in range(rng.integers(1, 13))]
        cases.append(np.concatenate(runs).astype(np.int64))
        cases.append(rng.integers(-50, 50, rng.integers(0, 300)).astype(np.int64))
    for keys in cases:
        got = keys.copy()
        merge_sort(got)
        assert np.array_equal(got, np.sort(keys))


def test_take_rows_equals_scipy_row_indexing():
    """kernels.csr_rows.take_rows == SciPy's X[rows]: any order, repeats, empty rows, no rows."""
    from gputext.kernels.csr_rows import take_rows
    X = random_corpus(200, 30, 0.15, seed=9, empty_rows=(0, 17, 199))
    rng = np.random.default_rng(9)
    for rows in (np.arange(200)[::-1], rng.integers(0, 200, 500), np.array([17, 0, 17], np.int64), np.zeros(0, np.int64)):
        got, want = take_rows(X, rows), X[rows]
        assert got.shape == want.shape and got.has_canonical_format
        assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
        assert np.array_equal(got.data, want.data) and got.data.dtype == want.data.dtype
