"""gputext.TfidfVectorizer: `corpus build`'s features behind scikit-learn's transformer interface.

- fit_transform(texts) equals `gputext corpus build` of the same texts (X bit-identical, terms equal)
  and transform(new) equals `corpus build --vocab-from`, for each weighting and with min_df/max_df
  and a stopword file.
- scikit-learn's check_estimator does not apply: it feeds 2-D numeric arrays and a text vectorizer takes
  an iterable of str (scikit-learn marks its own vectorizers string-input and skips them). The checks
  below are the ones that feed no data (parameters, clone, repr, tags, unfitted errors); get_params /
  set_params / clone / pickle of a fitted vectorizer are tested by hand.
"""
import json
import pickle

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import estimator_checks as ec

from gputext import TfidfVectorizer
from gputext.cli import cli
from gputext.io import read_corpus

TRAIN = ["The CPU is a 486DX2; the_bus runs at 33 MHz.", "Ärger über den Bus: don't buy the e-mail 486!",
         "GPU text mining, GPU kNN, exact results", "the the the", "Senate vote on the bill; bill passed 52-48",
         "team won the match 3-1\tin the rain\nagain", "mining the senate's e-mail archive", "bus bus gpu"]
TEST = ["a new GPU bus", "nothing known here zzz", "bill vote match mining ärger", ""]


def write_jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return str(path)


def build(tmp_path, name, texts, *options):
    out = str(tmp_path / f"{name}.h5")
    r = CliRunner().invoke(cli, ["corpus", "build", write_jsonl(tmp_path / f"{name}.jsonl", texts), "-o", out,
                                 "-q", *options])
    assert r.exit_code == 0, r.output
    return read_corpus(out)


def assert_same_csr(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("weighting", ["tfidf", "tficf", "tf", "binary", "none"])
def test_fit_transform_and_transform_equal_corpus_build(tmp_path, weighting):
    train = build(tmp_path, "train", TRAIN, "--weighting", weighting)
    test = build(tmp_path, "test", TEST, "--vocab-from", str(tmp_path / "train.h5"))
    vec = TfidfVectorizer(weighting=weighting)
    assert_same_csr(vec.fit_transform(TRAIN), train.X)
    assert list(vec.get_feature_names_out()) == list(train.terms)
    np.testing.assert_array_equal(vec.idf_, train.var["idf"])
    np.testing.assert_array_equal(vec.df_, train.var["df"])
    assert_same_csr(vec.transform(TEST), test.X)
    assert_same_csr(TfidfVectorizer(weighting=weighting).fit(TRAIN).transform(TRAIN), train.X)


def test_df_bounds_and_stopword_file_equal_corpus_build(tmp_path):
    (tmp_path / "stop.txt").write_text("# mine\ngpu\nThe\n")
    options = dict(stopwords=str(tmp_path / "stop.txt"), min_df=2, max_df=0.5)
    train = build(tmp_path, "train", TRAIN, "--stopwords", options["stopwords"], "--min-df", "2", "--max-df", "0.5")
    test = build(tmp_path, "test", TEST, "--vocab-from", str(tmp_path / "train.h5"),
                 "--stopwords", options["stopwords"])
    vec = TfidfVectorizer(**options)
    assert_same_csr(vec.fit_transform(TRAIN), train.X)
    assert list(vec.get_feature_names_out()) == list(train.terms) and "gpu" not in vec.vocabulary_
    assert_same_csr(vec.transform(TEST), test.X)
    assert vec.vocabulary_ == {t: j for j, t in enumerate(train.terms)}


def test_bad_input_and_parameters_are_value_errors():
    with pytest.raises(NotFittedError):
        TfidfVectorizer().transform(["a"])
    with pytest.raises(ValueError, match="string object received"):
        TfidfVectorizer().fit("one text, not a list")
    with pytest.raises(ValueError, match="document 1 is nan"):
        TfidfVectorizer().fit(["a b", float("nan")])
    with pytest.raises(ValueError, match="empty vocabulary"):
        TfidfVectorizer().fit(["the and of", "a the"])
    with pytest.raises(ValueError, match="weighting must be one of"):
        TfidfVectorizer(weighting="bm25").fit(TRAIN)
    with pytest.raises(ValueError, match="min_df"):
        TfidfVectorizer(min_df=-1).fit(TRAIN)
    with pytest.raises(ValueError, match="no documents"):
        TfidfVectorizer().fit([])


def test_params_clone_and_pickle_of_a_fitted_vectorizer():
    vec = TfidfVectorizer(min_df=2)
    assert vec.get_params() == {"stopwords": "english", "weighting": "tfidf", "min_df": 2, "max_df": 1.0}
    assert vec.set_params(weighting="tficf", max_df=0.9) is vec and vec.weighting == "tficf" and vec.max_df == 0.9
    fitted = TfidfVectorizer().fit(TRAIN)
    copy = clone(fitted)
    assert copy.get_params() == fitted.get_params() and not hasattr(copy, "vocabulary_")
    restored = pickle.loads(pickle.dumps(fitted))
    assert_same_csr(restored.transform(TEST), fitted.transform(TEST))
    assert restored.vocabulary_ == fitted.vocabulary_ and not hasattr(fitted, "n_features_in_")


NO_DATA_CHECKS = ["check_no_attributes_set_in_init", "check_get_params_invariance", "check_set_params",
                  "check_estimator_cloneable", "check_estimator_repr", "check_mixin_order", "check_valid_tag_types",
                  "check_estimator_tags_renamed", "check_do_not_raise_errors_in_init_or_set_params",
                  "check_transformers_unfitted", "check_get_feature_names_out_error",
                  "check_parameters_default_constructible"]


@pytest.mark.parametrize("check", NO_DATA_CHECKS)
def test_sklearn_checks_that_feed_no_arrays(check):
    getattr(ec, check)("TfidfVectorizer", TfidfVectorizer())


def test_in_a_pipeline_with_the_classifier():
    from sklearn.pipeline import make_pipeline
    from gputext import KNeighborsClassifier
    texts = ["goal match team", "team won the match", "senate vote bill", "the bill passed the vote"] * 5
    labels = ["sport", "sport", "politics", "politics"] * 5
    pipe = make_pipeline(TfidfVectorizer(), KNeighborsClassifier(n_neighbors=3, device="cpu")).fit(texts, labels)
    assert list(pipe.predict(["the team lost the match", "a vote on the bill"])) == ["sport", "politics"]
