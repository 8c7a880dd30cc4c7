"""The engine's shard-level entry points (used by gputext.distributed): row ranges of a corpus
scored with the whole corpus's term maxima (Index.with_term_maxabs), searched with
search_topk_keys and merged with merge_topk, give the whole index's lists bit for bit."""
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.engine import Index, keys_to_scores, merge_topk, search_topk, search_topk_keys
from gputext.errors import InputError
from gputext.kernels import scoring


def corpus(n, seed):
    X = sp.random(n, 30, density=0.15, format="csr", dtype=np.float32, random_state=seed)
    X.data = np.round(X.data * 4) / 4  # ties
    X.eliminate_zeros()
    return sp.csr_matrix(X[np.repeat(np.arange(n), 2)[:n]])  # duplicate rows: exact ties across ranges


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2", "l1"])
def test_ranges_merge_to_the_whole_index(metric):
    X, Q = corpus(90, 1), corpus(12, 2)
    whole = Index.from_csr(X)
    want_docs, want_scores = search_topk(whole, Q, 40, metric, "cpu", exclude_self=np.arange(12))
    parts = []
    for lo, hi in ((0, 31), (31, 32), (32, 90)):
        view = Index.from_csr(X[lo:hi]).with_term_maxabs(whole.term_maxabs)
        own = np.where(np.arange(12) >= lo, np.arange(12) - lo, -1)
        own[np.arange(12) >= hi] = -1
        docs, keys = search_topk_keys(view, Q, 40, metric, "cpu", exclude_self=own)
        parts.append((np.where(docs >= 0, docs + lo, -1), keys))
    docs, keys = merge_topk(parts, 40)
    assert np.array_equal(docs, want_docs)
    assert np.array_equal(keys_to_scores(keys, docs, scoring.METRICS[metric]), want_scores, equal_nan=True)


def test_with_term_maxabs_shares_the_postings_and_checks_its_length():
    index = Index.from_csr(corpus(20, 3))
    view = index.with_term_maxabs(index.term_maxabs)
    view.cpu()
    assert index._postings is not None and view.cpu() is index.cpu()
    with pytest.raises(InputError, match="one entry per term"):
        index.with_term_maxabs(np.ones(3, np.float32))


@pytest.mark.parametrize("seed", range(6))
def test_the_lists_merge_equals_a_stable_sort_of_their_union(seed):
    # merge_topk (a P-way merge of each row's heads, kernels.primitives.merge_lists_cpu) against
    # merge_topk_lexsort: lists of different lengths over disjoint documents, equal keys across
    # lists, empty slots (doc -1, key -inf) at each list's end, leading dimensions, int32 and int64
    # documents, k below, at and above what the lists hold
    from gputext.engine.merge import merge_topk_lexsort
    rng = np.random.default_rng(seed)
    lead = ((7,), (3, 4, 2), (0,))[seed % 3]
    widths = [int(w) for w in rng.integers(1, 9, size=int(rng.integers(1, 6)))]
    parts, base = [], 0
    for w in widths:
        keys = rng.integers(-3, 4, size=(*lead, w)).astype(np.float64) / 2  # many ties
        docs = base + np.argsort(rng.random((*lead, w)), axis=-1)
        base += w
        order = np.lexsort((docs, -keys), axis=-1)  # (key desc, doc asc)
        docs, keys = np.take_along_axis(docs, order, -1), np.take_along_axis(keys, order, -1)
        empty = np.arange(w) >= rng.integers(0, w + 1, size=(*lead, 1))  # a tail of empty slots
        docs = np.where(empty, -1, docs).astype(np.int32 if seed % 2 else np.int64)
        parts.append((docs, np.where(empty, -np.inf, keys)))
    for k in (1, 3, sum(widths), sum(widths) + 4):
        got, want = merge_topk(parts, k), merge_topk_lexsort(parts, k)
        assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
