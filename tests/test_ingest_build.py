"""build_corpus: the whole ingest pipeline against independent references."""
import gzip
import json
import re

import h5py
import numpy as np
import pytest

from gputext.errors import FormatError, InputError
from gputext.io import read_corpus, write_corpus
from gputext.io.ingest import build_corpus, parse_df_bound
from gputext.io.tokenize import load_stopwords

TRAIN = [("sport", "The team won the match, the TEAM cheered"),
         ("politics", "The vote was counted; the minister resigned"),
         ("sport", "A match of tennis and a match of golf"),
         ("tech", "GPU kernels count votes faster than CPUs"),
         ("politics", "Minister of sport: a vote on the stadium")]
TEST = [("tech", "GPU match kernels unknownword"), ("science", "Orbit of the moon"), ("sport", "team team")]


def tsv(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("".join(f"{label}\t{text}\n" for label, text in rows), encoding="utf-8")
    return str(path)


def reference_tfidf(texts, vocab=None, df=None, n_docs=None):
    """Independent tf-idf: tokens by re.split, dense float64, unit rows."""
    stop = load_stopwords("english")
    docs = [[w for w in re.split(r"[\W_]+", t.lower()) if w and w not in stop] for t in texts]
    vocab = vocab or sorted({w for d in docs for w in d})
    col = {w: j for j, w in enumerate(vocab)}
    C = np.zeros((len(docs), len(vocab)))
    for i, d in enumerate(docs):
        for w in d:
            if w in col:
                C[i, col[w]] += 1
    if df is None:
        df, n_docs = (C > 0).sum(axis=0), len(docs)
    W = C * np.where(df > 0, np.log(n_docs / np.maximum(df, 1)), 0)
    norms = np.linalg.norm(W, axis=1, keepdims=True)
    return np.divide(W, norms, out=np.zeros_like(W), where=norms > 0), vocab, df


def test_tsv_corpus_equals_reference_tfidf_with_sorted_label_categories(tmp_path):
    c = build_corpus(tsv(tmp_path, "train.tsv", TRAIN))
    W, vocab, df = reference_tfidf([t for _, t in TRAIN])
    assert list(c.terms) == vocab
    np.testing.assert_allclose(c.X.toarray(), W, rtol=1e-6, atol=1e-7)
    assert list(c.labels.categories) == ["politics", "sport", "tech"]
    np.testing.assert_array_equal(c.labels.codes, [1, 0, 1, 2, 0])
    np.testing.assert_array_equal(c.var["df"], df)
    np.testing.assert_allclose(c.var["idf"], np.log(5 / df))
    p = c.params
    assert (p["weighting"], p["format"], p["stopwords"], p["min_df"], p["max_df"]) == ("tfidf", "tsv", "english", 1, 1.0)
    assert p["n_oov"] == 0 and p["idf_n_docs"] == 5


def test_vocab_from_reuses_vocabulary_idf_and_label_codes(tmp_path):
    train_path = str(tmp_path / "train.h5")
    write_corpus(build_corpus(tsv(tmp_path, "train.tsv", TRAIN)), train_path)
    train = read_corpus(train_path)
    test = build_corpus(tsv(tmp_path, "test.tsv", TEST), vocab_from=train_path)
    assert list(test.terms) == list(train.terms)
    W, _, _ = reference_tfidf([t for _, t in TEST], vocab=list(train.terms), df=np.asarray(train.var["df"]), n_docs=5)
    np.testing.assert_allclose(test.X.toarray(), W, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(test.var["df"], train.var["df"])
    assert test.params["n_oov"] == 3 and test.params["n_oov_terms"] == 3  # unknownword, orbit, moon
    assert list(test.labels.categories) == ["politics", "sport", "tech", "science"]
    np.testing.assert_array_equal(test.labels.codes, [2, 3, 1])
    assert test.params["n_empty_docs"] == 1 and test.params["vocab_from"] == train_path


def test_vocab_from_inherits_weighting_and_refuses_df_bounds(tmp_path):
    train_path = str(tmp_path / "train.h5")
    write_corpus(build_corpus(tsv(tmp_path, "train.tsv", TRAIN), weighting="binary"), train_path)
    test = build_corpus(tsv(tmp_path, "test.tsv", TEST), vocab_from=train_path)
    assert test.params["weighting"] == "binary" and set(test.X.data.tolist()) == {1.0}
    with pytest.raises(InputError, match="--min-df/--max-df cannot be combined with --vocab-from"):
        build_corpus(tsv(tmp_path, "test.tsv", TEST), vocab_from=train_path, min_df=2)


def test_vocab_from_a_truncated_file_is_refused(tmp_path):
    path = tmp_path / "train.h5"
    write_corpus(build_corpus(tsv(tmp_path, "train.tsv", TRAIN)), str(path))
    path.write_bytes(path.read_bytes()[:600])
    with pytest.raises(FormatError):
        build_corpus(tsv(tmp_path, "test.tsv", TEST), vocab_from=str(path))


@pytest.mark.parametrize("min_df,max_df,low,high", [
    (2, 1.0, 2, 5), (0.4, 1.0, 2, 5), (1, 1, 1, 1), (2, 0.4, 2, 2), (0.0, 0.2, 1, 1), (3, 1.0, 3, 5),
])
def test_min_df_and_max_df_counts_and_fractions(tmp_path, min_df, max_df, low, high):
    path = tsv(tmp_path, "train.tsv", TRAIN)
    _, vocab, df = reference_tfidf([t for _, t in TRAIN])
    expected = [w for w, d in zip(vocab, df) if low <= d <= high]
    if not expected:
        with pytest.raises(InputError, match="no terms left in 5 documents"):
            build_corpus(path, min_df=min_df, max_df=max_df)
        return
    c = build_corpus(path, min_df=min_df, max_df=max_df)
    assert list(c.terms) == expected
    assert c.params["min_df"] == min_df and c.params["max_df"] == max_df


def test_min_df_two_keeps_the_terms_of_two_documents(tmp_path):
    c = build_corpus(tsv(tmp_path, "train.tsv", TRAIN), min_df=2)
    assert list(c.terms) == ["match", "minister", "vote"]  # counted by hand
    assert c.n_docs == 5 and c.params["n_empty_docs"] == 1  # document 4 (tech) keeps no term


def test_df_bound_parsing():
    assert parse_df_bound("5", "--min-df") == 5 and parse_df_bound("0.5", "--min-df") == 0.5
    assert parse_df_bound("1.0", "--max-df") == 1.0 and isinstance(parse_df_bound("1.0", "x"), float)
    for bad in ("-1", "1.5", "abc"):
        with pytest.raises(InputError):
            parse_df_bound(bad, "--min-df")


def test_all_stopwords_give_a_zero_term_corpus_error(tmp_path):
    with pytest.raises(InputError, match="no terms left"):
        build_corpus(tsv(tmp_path, "s.tsv", [("a", "the and of"), ("b", "it is")]))


def test_multilabel_jsonl(tmp_path):
    rows = [{"text": "gpu kernels", "labels": ["tech", "science"]}, {"text": "match", "labels": []},
            {"text": "vote", "labels": ["politics"]}]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    c = build_corpus(str(path))
    names = list(c.params["label_names"])
    assert names == ["politics", "science", "tech"]
    np.testing.assert_array_equal(c.label_matrix.toarray(), [[0, 1, 1], [0, 0, 0], [1, 0, 0]])
    assert c.label_matrix.dtype == np.float32
    np.testing.assert_array_equal(c.labels.codes, [2, -1, 0])  # the first label as listed
    assert list(c.labels.categories) == names
    out = str(tmp_path / "m.h5")
    write_corpus(c, out)
    back = read_corpus(out)
    np.testing.assert_array_equal(back.label_matrix.toarray(), c.label_matrix.toarray())
    assert list(back.params["label_names"]) == names


def test_svmlight_ltr_layout_keeps_values_and_feature_columns(tmp_path):
    data = tmp_path / "rank.train"
    data.write_text("2 1:0.5 3:1.5\n0 2:0.25\n1 1:1 2:2 3:3\n")
    (tmp_path / "rank.train.query").write_text("2\n1\n")
    c = build_corpus(str(data), query_groups=str(tmp_path / "rank.train.query"))
    assert c.params["weighting"] == "none" and c.params["format"] == "svmlight"
    np.testing.assert_array_equal(c.X.toarray(), np.array([[0.5, 0, 1.5], [0, 0.25, 0], [1, 2, 3]], np.float32))
    assert list(c.terms) == ["f1", "f2", "f3"]
    assert c.obs["qid"].dtype == np.int32 and c.obs["relevance"].dtype == np.float32
    np.testing.assert_array_equal(c.obs["qid"], [1, 1, 2])
    with pytest.raises(InputError, match="do not apply to svmlight"):
        build_corpus(str(data), query_groups=str(tmp_path / "rank.train.query"), min_df=2)


def test_svmlight_vocab_from_drops_features_beyond_training(tmp_path):
    (tmp_path / "a.svm").write_text("1 qid:1 1:1 2:1\n")
    (tmp_path / "b.svm").write_text("1 qid:1 1:1 4:2 5:1\n")
    write_corpus(build_corpus(str(tmp_path / "a.svm")), str(tmp_path / "a.h5"))
    c = build_corpus(str(tmp_path / "b.svm"), vocab_from=str(tmp_path / "a.h5"))
    assert c.n_terms == 2 and c.params["n_oov"] == 2 and c.params["n_oov_terms"] == 2
    np.testing.assert_array_equal(c.X.toarray(), [[1, 0]])


def test_uci_and_counts_csv_are_weighted_like_text(tmp_path):
    (tmp_path / "docword.toy.txt.gz").write_bytes(gzip.compress(b"2\n3\n3\n1 1 2\n2 2 1\n2 3 1\n"))
    (tmp_path / "vocab.toy.txt").write_text("apple\nbanana\ncherry\n")
    c = build_corpus(str(tmp_path / "docword.toy.txt.gz"))
    assert c.params["format"] == "uci" and c.params["weighting"] == "tfidf" and list(c.terms) == ["apple", "banana", "cherry"]
    np.testing.assert_allclose(c.X.toarray(), [[1, 0, 0], [0, 2 ** -0.5, 2 ** -0.5]], rtol=1e-6)
    (tmp_path / "c.data").write_text("2,1,0,0\n1,0,3,0\n2,1,1,0")
    c = build_corpus(str(tmp_path / "c.data"), weighting="tf")
    assert list(c.labels.categories) == ["1", "2"] and list(c.terms) == ["t1", "t2"]  # t3 is in no document
    np.testing.assert_array_equal(c.X.toarray(), [[1, 0], [0, 3], [1, 1]])


def test_numeric_labels_sort_numerically(tmp_path):
    c = build_corpus(tsv(tmp_path, "n.tsv", [("10", "alpha"), ("9", "beta"), ("2", "gamma")]))
    assert list(c.labels.categories) == ["2", "9", "10"]


def test_text_inputs_concatenate_and_mix_formats(tmp_path):
    a = tsv(tmp_path, "a.tsv", TRAIN[:2])
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps({"text": "gpu kernels", "label": "tech"}) + "\n")
    c = build_corpus([a, str(b)])
    assert c.n_docs == 3 and c.params["format"] == "tsv+jsonl"
    assert list(c.labels.values()) == ["sport", "politics", "tech"]
    with pytest.raises(InputError, match="cannot mix text inputs"):
        (tmp_path / "x.svm").write_text("1 1:1\n")
        build_corpus([a, str(tmp_path / "x.svm")])


def test_written_corpus_opens_in_anndata(tmp_path):
    anndata = pytest.importorskip("anndata")
    out = str(tmp_path / "c.h5")
    write_corpus(build_corpus(tsv(tmp_path, "train.tsv", TRAIN)), out)
    ad = anndata.read_h5ad(out)
    assert ad.shape == (5, len(reference_tfidf([t for _, t in TRAIN])[1]))
    np.testing.assert_allclose(ad.X.toarray(), read_corpus(out).X.toarray())
    assert list(ad.obs["label"].cat.categories) == ["politics", "sport", "tech"]
    assert "df" in ad.var and "idf" in ad.var
    with h5py.File(out) as f:
        assert f["var/df"].dtype == np.int64 and f["var/idf"].dtype == np.float64
