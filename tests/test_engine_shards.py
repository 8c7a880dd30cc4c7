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
