"""Exact kNN on the real 20 Newsgroups split: test documents against the training set, k = 30,
cosine, equal to a float64 brute-force reference (up to ties), on the CPU twin (and on the GPU
when the suite runs with one: tests/test_engine_gpu.py covers large synthetic sizes)."""
import numpy as np
import pytest

from engine_reference import same_up_to_ties
from gputext.engine import Index, search_topk
from gputext.io import build_corpus, write_corpus

pytestmark = [pytest.mark.realdata, pytest.mark.slow]


def test_20ng_test_against_train_k30_cosine_equals_float64_reference(shared_datasets, tmp_path):
    folder = shared_datasets / "20newsgroups"
    train = build_corpus(str(folder / "20newsgroups-train.tab"))
    write_corpus(train, str(tmp_path / "train.h5"))
    test = build_corpus(str(folder / "20newsgroups-test.tab"), vocab_from=str(tmp_path / "train.h5"))
    assert (train.n_docs, test.n_docs) == (11_293, 7_528)
    idx, sc = search_topk(Index.from_corpus(train), test.X, 30, "cosine", device="cpu")

    A = train.X.astype(np.float64).tocsr()
    na = np.sqrt(np.asarray(A.multiply(A).sum(1))).ravel()
    for lo in range(0, test.n_docs, 1500):  # float64 reference in chunks of queries
        B = test.X[lo:lo + 1500].astype(np.float64)
        nb = np.sqrt(np.asarray(B.multiply(B).sum(1))).ravel()
        S = (B @ A.T).toarray()
        den = np.outer(nb, na)
        S = np.where(den > 0, S / np.where(den > 0, den, 1.0), 0.0)
        order = np.lexsort((np.broadcast_to(np.arange(A.shape[0]), S.shape), -S), axis=1)[:, :30]
        ref_sc = np.take_along_axis(S, order, 1)
        assert same_up_to_ties(idx[lo:lo + 1500], sc[lo:lo + 1500], order, ref_sc)
        # identical lists wherever the reference has no tie inside the list
        exact_rows = np.all(np.diff(ref_sc, axis=1) < -1e-7, axis=1)
        assert np.array_equal(idx[lo:lo + 1500][exact_rows], order[exact_rows])
