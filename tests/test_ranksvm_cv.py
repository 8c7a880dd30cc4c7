"""RankSVM in scikit-learn's utilities: every fold scored per query (issue 33).

GridSearchCV and cross_validate with GroupKFold, on synthetic learning-to-rank data and on the
LETOR sample (../shared/datasets/letor-sample, realdata, skipped when absent): each fold's test
score equals RankSVM(...).fit(train rows).score(test rows, qid=the test rows' qid), both with qid
as a DataFrame column (XGBoost's convention) and with metadata routing enabled. Without either,
score on rows of several queries raises ValueError instead of scoring one giant query.
"""
import numpy as np
import pytest
import sklearn
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_validate

from gputext import RankSVM

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def synthetic():
    from gputext.datasets.ltr import make_ltr
    corpus = make_ltr(60, 15, 12, seed=3)
    X = corpus.X.toarray()
    return X, np.asarray(corpus.obs["relevance"], np.float64), np.asarray(corpus.obs["qid"], np.int64)


@pytest.fixture(scope="module")
def letor(shared_datasets):
    from sklearn.datasets import load_svmlight_file
    folder = shared_datasets / "letor-sample"
    X, y = load_svmlight_file(str(folder / "rank.train"))
    sizes = np.loadtxt(folder / "rank.train.query", dtype=np.int64)
    return X.toarray()[:1200], y[:1200], np.repeat(np.arange(sizes.size), sizes)[:1200]


def fold_scores(X, y, qid, cv):
    """Each fold's RankSVM.score with that fold's qid: the reference the utilities must match."""
    out = []
    for train, test in cv.split(X, y, groups=qid):
        model = RankSVM(device="cpu").fit(X[train], y[train], qid=qid[train])
        out.append(model.score(X[test], y[test], qid=qid[test]))
    return np.array(out)


def with_qid_column(X, qid):
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    frame["qid"] = qid
    return frame


def check_cv_scores_per_query(X, y, qid):
    cv = GroupKFold(n_splits=3)
    expected = fold_scores(X, y, qid, cv)
    frame = with_qid_column(X, qid)
    search = GridSearchCV(RankSVM(device="cpu"), {"C": [1.0]}, cv=cv).fit(frame, y, groups=qid)
    got = [search.cv_results_[f"split{i}_test_score"][0] for i in range(3)]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    result = cross_validate(RankSVM(device="cpu"), frame, y, groups=qid, cv=cv)
    np.testing.assert_allclose(result["test_score"], expected, rtol=1e-12)
    with sklearn.config_context(enable_metadata_routing=True):
        search = GridSearchCV(RankSVM(device="cpu"), {"C": [1.0]}, cv=cv).fit(X, y, groups=qid, qid=qid)
        got = [search.cv_results_[f"split{i}_test_score"][0] for i in range(3)]
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        result = cross_validate(RankSVM(device="cpu"), X, y, cv=cv, params={"groups": qid, "qid": qid})
        np.testing.assert_allclose(result["test_score"], expected, rtol=1e-12)
    return expected


def test_cv_scores_each_fold_per_query_on_synthetic_ltr(synthetic):
    X, y, qid = synthetic
    expected = check_cv_scores_per_query(X, y, qid)
    one_query = RankSVM(device="cpu").fit(X, y, qid=qid)
    one_query_scores = [one_query.score(X[t], y[t], qid=np.zeros(len(t))) for _, t in GroupKFold(3).split(X, y, qid)]
    assert not np.allclose(one_query_scores, expected)  # per query is not one giant query here


@pytest.mark.realdata
def test_cv_scores_each_fold_per_query_on_letor(letor):
    check_cv_scores_per_query(*letor)


def test_score_without_queries_on_a_model_of_several_queries_raises(synthetic):
    X, y, qid = synthetic
    model = RankSVM(device="cpu").fit(X, y, qid=qid)
    assert model.n_queries_ == np.unique(qid).size
    with pytest.raises(ValueError, match="fitted on 60 queries.*enable_metadata_routing"):
        model.score(X, y)
    with pytest.warns(UserWarning, match="Scoring failed"):  # routing off, no column: nan and the error, not a wrong score
        scores = cross_validate(RankSVM(device="cpu"), X, y, groups=qid, cv=GroupKFold(3), params={"qid": qid})
    assert np.isnan(scores["test_score"]).all()
    single = RankSVM(device="cpu").fit(X[qid == qid[0]], y[qid == qid[0]])
    assert single.n_queries_ == 1 and np.isfinite(single.score(X[:10], y[:10]))


def test_qid_column_is_not_a_feature(synthetic):
    X, y, qid = synthetic
    frame = with_qid_column(X, qid)
    model = RankSVM(device="cpu").fit(frame, y)
    reference = RankSVM(device="cpu").fit(X, y, qid=qid)
    assert model.n_features_in_ == X.shape[1] and "qid" not in model.feature_names_in_
    np.testing.assert_array_equal(model.coef_, reference.coef_)
    np.testing.assert_array_equal(model.predict(frame), reference.predict(X))
    assert model.score(frame, y) == reference.score(X, y, qid=qid)
    with pytest.raises(ValueError, match="qid was given twice"):
        model.score(frame, y, qid=qid)
