"""Every dataset in ../shared/datasets ingests with its published document and class counts."""
import numpy as np
import pytest

from gputext.io import read_corpus, write_corpus
from gputext.io.ingest import build_corpus
from gputext.io.info import corpus_info

pytestmark = pytest.mark.realdata

# (folder, file stem, train docs, test docs, classes)
TAB_SETS = [
    ("20newsgroups", "20newsgroups", 11_293, 7_528, 20),
    ("reuters-r8", "reuters-r8", 5_485, 2_189, 8),
    ("reuters-r52", "reuters-r52", 6_532, 2_568, 52),
]


@pytest.fixture(scope="module")
def built(shared_datasets, tmp_path_factory):
    """Build each train set once (written to disk) and its test set with --vocab-from it."""
    out = tmp_path_factory.mktemp("realdata")
    cache = {}

    def get(folder, stem):
        if stem not in cache:
            train = build_corpus(str(shared_datasets / folder / f"{stem}-train.tab"))
            train_path = str(out / f"{stem}-train.h5")
            write_corpus(train, train_path)
            test = build_corpus(str(shared_datasets / folder / f"{stem}-test.tab"), vocab_from=train_path)
            cache[stem] = (train, train_path, test)
        return cache[stem]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("folder,stem,n_train,n_test,n_classes", TAB_SETS, ids=[s[0] for s in TAB_SETS])
def test_tab_datasets_document_and_class_counts(built, folder, stem, n_train, n_test, n_classes):
    train, _, test = built(folder, stem)
    assert train.n_docs == n_train and test.n_docs == n_test
    assert len(train.labels.categories) == n_classes
    assert np.all(train.labels.codes >= 0) and np.all(test.labels.codes >= 0)
    assert list(test.labels.categories) == list(train.labels.categories)  # no class unseen in train
    assert len(np.unique(train.labels.codes)) == n_classes and len(np.unique(test.labels.codes)) == n_classes
    assert train.params["weighting"] == "tfidf" and train.params["format"] == "tab"


@pytest.mark.slow
def test_20ng_test_shares_the_training_vocabulary_and_idf(built):
    train, train_path, test = built("20newsgroups", "20newsgroups")
    assert list(test.terms) == list(train.terms)
    np.testing.assert_array_equal(test.var["idf"], train.var["idf"])
    assert test.params["n_oov"] > 0 and test.params["idf_n_docs"] == 11_293
    norms = np.sqrt(np.asarray(test.X.multiply(test.X).sum(axis=1)).ravel())
    nonempty = np.diff(test.X.indptr) > 0
    np.testing.assert_allclose(norms[nonempty], 1.0, rtol=1e-5)
    anndata = pytest.importorskip("anndata")
    ad = anndata.read_h5ad(train_path)
    assert ad.shape == (11_293, train.n_terms) and len(ad.obs["label"].cat.categories) == 20


def test_cnae9_counts_csv(shared_datasets):
    c = build_corpus(str(shared_datasets / "cnae9" / "CNAE-9.data"))
    assert c.n_docs == 1_080 and c.params["format"] == "counts-csv"
    assert list(c.labels.categories) == [str(k) for k in range(1, 10)]
    np.testing.assert_array_equal(np.bincount(c.labels.codes), [120] * 9)


def test_letor_sample_train_and_test(shared_datasets, tmp_path):
    d = shared_datasets / "letor-sample"
    train = build_corpus(str(d / "rank.train"), query_groups=str(d / "rank.train.query"))
    path = str(tmp_path / "ltr.h5")
    write_corpus(train, path)
    test = build_corpus(str(d / "rank.test"), query_groups=str(d / "rank.test.query"), vocab_from=path)
    for corpus, n_docs, n_queries in ((train, 3_005, 201), (test, 768, 50)):
        assert corpus.n_docs == n_docs and len(np.unique(corpus.obs["qid"])) == n_queries
        assert set(np.unique(corpus.obs["relevance"]).tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
        assert corpus.params["weighting"] == "none" and corpus.params["format"] == "svmlight"
    assert list(test.terms) == list(train.terms)
    info = corpus_info(path)
    assert info["queries"]["n_queries"] == 201 and info["n_docs"] == 3_005
    first = read_corpus(path).X[0].toarray().ravel()
    with open(d / "rank.train") as fh:
        line = fh.readline().split()
    expected = np.zeros(train.n_terms, np.float32)
    for tok in line[1:]:
        j, v = tok.split(":")
        expected[int(j) - 1] = np.float32(v)
    np.testing.assert_array_equal(first, expected)
