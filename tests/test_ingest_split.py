"""Stratified, seeded train/test splits and folds; learning-to-rank corpora split by query."""
import os

import numpy as np
import pytest
import scipy.sparse as sp

from gputext.errors import InputError
from gputext.io import Categorical, Corpus, read_corpus, write_corpus
from gputext.io import split as split_module
from gputext.io.split import fold_corpora, split_corpus, write_split


def labelled_corpus(class_sizes, seed=0):
    rng = np.random.default_rng(seed)
    codes = np.concatenate([np.full(n, c, np.int32) for c, n in enumerate(class_sizes)])
    rng.shuffle(codes)
    n = len(codes)
    X = sp.random(n, 20, density=0.3, random_state=seed, format="csr", dtype=np.float32)
    cats = np.array([f"c{c}" for c in range(len(class_sizes))], dtype=object)
    return Corpus(X, [f"d{i}" for i in range(n)], [f"t{j}" for j in range(20)],
                  obs={"label": Categorical(codes, cats)}, var={"df": np.ones(20, np.int64)},
                  uns={"gputext": {"weighting": "tfidf"}})


def ltr_corpus(sizes, seed=0):
    qid = np.repeat(np.arange(10, 10 + len(sizes), dtype=np.int32), sizes)
    n = len(qid)
    X = sp.random(n, 5, density=0.8, random_state=seed, format="csr", dtype=np.float32)
    rel = np.random.default_rng(seed).integers(0, 3, n).astype(np.float32)
    return Corpus(X, [f"d{i}" for i in range(n)], None, obs={"qid": qid, "relevance": rel})


def ids(c):
    return set(c.doc_ids.tolist())


def test_holdout_is_stratified_exact_and_a_partition():
    c = labelled_corpus([50, 30, 20])
    train, test = split_corpus(c, 0.2, seed=1)
    assert ids(train) | ids(test) == ids(c) and not ids(train) & ids(test)
    assert test.n_docs == 20 and train.n_docs == 80
    np.testing.assert_array_equal(np.bincount(test.labels.codes, minlength=3), [10, 6, 4])
    assert list(test.terms) == list(c.terms) and list(test.labels.categories) == ["c0", "c1", "c2"]
    assert test.params["split"]["part"] == "test" and test.params["split"]["seed"] == 1
    order = [int(d[1:]) for d in train.doc_ids]
    assert order == sorted(order), "rows keep their original order"
    rows = np.array([int(d[1:]) for d in test.doc_ids])
    np.testing.assert_array_equal(test.X.toarray(), c.X[rows].toarray())


def test_largest_remainder_allocation_and_ceil_of_test_size():
    c = labelled_corpus([7, 5, 3])  # n = 15, n_test = ceil(0.3 * 15) = 5: shares 2.33, 1.67, 1.0
    _, test = split_corpus(c, 0.3, seed=0)
    np.testing.assert_array_equal(np.bincount(test.labels.codes, minlength=3), [2, 2, 1])


def test_same_seed_same_split_other_seed_other_split():
    c = labelled_corpus([40, 40])
    a = split_corpus(c, 0.25, seed=3)[1]
    b = split_corpus(c, 0.25, seed=3)[1]
    other = split_corpus(c, 0.25, seed=4)[1]
    assert list(a.doc_ids) == list(b.doc_ids) and list(a.doc_ids) != list(other.doc_ids)


def test_single_document_class_stays_in_train_and_count_test_size():
    c = labelled_corpus([10, 1, 2])
    train, test = split_corpus(c, 3, seed=0)
    assert test.n_docs == 3 and 1 in train.labels.codes
    counts = np.bincount(train.labels.codes, minlength=3)
    assert counts[2] >= 1 and counts[1] == 1


@pytest.mark.parametrize("bad", [0.0, 1.0, 0, 100, "half"])
def test_impossible_test_sizes_are_refused(bad):
    with pytest.raises(InputError, match="--test-size"):
        split_corpus(labelled_corpus([5, 5]), bad)


def test_folds_cover_every_document_once_and_spread_classes():
    c = labelled_corpus([23, 11, 6])
    folds = fold_corpora(c, 5, seed=2)
    seen = []
    for train, test in folds:
        assert ids(train) | ids(test) == ids(c) and not ids(train) & ids(test)
        seen += list(test.doc_ids)
        per_class = np.bincount(test.labels.codes, minlength=3)
        for n_c, got in zip([23, 11, 6], per_class):
            assert n_c // 5 <= got <= -(-n_c // 5)
    assert sorted(seen) == sorted(c.doc_ids.tolist())
    sizes = [t.n_docs for _, t in folds]
    assert max(sizes) - min(sizes) <= 1
    assert folds[0][1].params["split"]["fold"] == 1 and folds[0][1].params["split"]["folds"] == 5


def test_ltr_split_and_folds_keep_queries_whole():
    c = ltr_corpus([3, 5, 2, 4, 6, 1, 3, 2, 5, 4])
    train, test = split_corpus(c, 0.3, seed=0)
    assert not set(train.obs["qid"]) & set(test.obs["qid"])
    assert len(set(test.obs["qid"])) == 3 and train.n_docs + test.n_docs == c.n_docs
    assert test.params["split"]["unit"] == "query"
    for part in (train, test):
        q = part.obs["qid"]
        assert all(len(set(q[np.nonzero(q == v)[0].min():np.nonzero(q == v)[0].max() + 1])) == 1 for v in set(q))
    for tr, te in fold_corpora(c, 3, seed=1):
        assert not set(tr.obs["qid"]) & set(te.obs["qid"])


def test_write_split_files_are_valid_corpora_with_one_vocabulary(tmp_path):
    src = str(tmp_path / "c.h5")
    write_corpus(labelled_corpus([12, 8]), src)
    written = write_split(src, str(tmp_path / "out"), test_size=0.25, seed=1)
    assert written == [str(tmp_path / "out" / "train.h5"), str(tmp_path / "out" / "test.h5")]
    train, test = (read_corpus(p) for p in written)
    assert list(train.terms) == list(test.terms) and train.n_docs + test.n_docs == 20
    folds = write_split(src, str(tmp_path / "folds"), folds=3, seed=1)
    assert len(folds) == 6 and os.path.exists(tmp_path / "folds" / "fold3" / "test.h5")


def test_failed_write_leaves_no_file_behind(tmp_path, monkeypatch):
    src = str(tmp_path / "c.h5")
    write_corpus(labelled_corpus([12, 8]), src)
    calls = []
    real = split_module.write_corpus

    def failing(corpus, path):
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full")
        real(corpus, path)

    monkeypatch.setattr(split_module, "write_corpus", failing)
    with pytest.raises(OSError, match="disk full"):
        write_split(src, str(tmp_path / "folds"), folds=2)
    assert not os.path.exists(tmp_path / "folds")
