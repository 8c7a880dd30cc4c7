"""kNN classification (vote, category ranking), SVM, and the `knn classify` / `knn metafeatures` CLI."""
import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from gputext.cli import cli
from gputext.errors import InputError
from gputext.io.corpus import Categorical, Corpus, read_corpus, write_corpus
from gputext.knn.classify import category_ranking, knn_classify, select_labels, weighted_vote


def brute_vote(Xtr, ytr, Xte, k, n_classes):
    """float64 cosine, top k by (float64 score desc, index asc), float64 sum of the float32 scores."""
    A, B = Xtr.toarray().astype(np.float64), Xte.toarray().astype(np.float64)
    na, nb = np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1)
    den = np.outer(nb, na)
    S = np.where(den > 0, B @ A.T / np.where(den > 0, den, 1), 0)
    pred = []
    for i in range(B.shape[0]):
        order = np.lexsort((np.arange(A.shape[0]), -S[i]))[:k]
        votes = np.zeros(n_classes)
        for j in order:
            votes[ytr[j]] += np.float64(np.float32(S[i, j]))
        pred.append(int(np.argmax(votes)))
    return np.array(pred)


def make_corpora(seed, n_train=60, n_test=25, n_terms=30, n_classes=4, multilabel=False):
    rng = np.random.default_rng(seed)
    centers = rng.random((n_classes, n_terms)) < 0.25
    y = rng.integers(0, n_classes, n_train + n_test)
    X = (rng.random((n_train + n_test, n_terms)) < 0.15) | (centers[y] & (rng.random((n_train + n_test, n_terms)) < 0.7))
    X = X.astype(np.float32) * (rng.integers(1, 4, X.shape).astype(np.float32) / 4)
    X[X.sum(1) == 0, 0] = 0.25
    X = sp.csr_matrix(X)
    cats = np.array([f"class{c}" for c in range(n_classes)], dtype=object)
    terms = np.array([f"w{j}" for j in range(n_terms)], dtype=object)

    def corpus(rows):
        obs = {"label": Categorical(y[rows].astype(np.int32), cats)}
        obsm, uns = {}, {}
        if multilabel:
            extra = (y[rows] + 1) % n_classes
            Y = sp.csr_matrix((np.ones(2 * rows.size, bool), (np.repeat(np.arange(rows.size), 2),
                               np.stack([y[rows], extra], 1).ravel())), shape=(rows.size, n_classes))
            Y = Y.tolil()
            Y[::3, extra[::3]] = False  # some documents keep one label, some none
            Y = Y.tocsr()
            Y.eliminate_zeros()
            obsm = {"labels": sp.csr_matrix(Y, dtype=np.float32)}
            uns = {"gputext": {"label_names": cats}}
            obs = {}
        return Corpus(X[rows], None, terms, obs, {}, obsm, uns)

    return corpus(np.arange(n_train)), corpus(np.arange(n_train, n_train + n_test)), y[:n_train]


@pytest.mark.parametrize("method", ["inverted", "dense"])
@pytest.mark.parametrize("k", [1, 7, 60])
def test_vote_equals_brute_force(method, k):
    train, test, ytr = make_corpora(seed=k)
    res = knn_classify(train, test, k=k, method=method, device="cpu")
    np.testing.assert_array_equal(res.predicted, brute_vote(train.X, ytr, test.X, k, 4))
    assert set(res.metrics) >= {"micro_f1", "macro_f1"}
    assert res.metrics["micro_f1"] == pytest.approx(np.mean(res.predicted == test.labels.codes))


def test_vote_ties_go_to_lower_code():
    idx = np.array([[0, 1], [2, -1]])
    sc = np.array([[0.5, 0.5], [0.0, np.nan]], np.float32)
    np.testing.assert_array_equal(weighted_vote(idx, sc, np.array([2, 1, 3]), 4), [1, 0])


def test_category_ranking_and_selection():
    idx = np.array([[2, 0, 1], [1, -1, -1]])
    sc = np.array([[0.9, 0.6, 0.3], [0.4, np.nan, np.nan]], np.float32)
    Y = sp.csr_matrix(np.array([[1, 0, 1], [0, 1, 0], [0, 0, 1]], bool))
    scores, reached = category_ranking(idx, sc, Y)
    np.testing.assert_allclose(scores, [[0.6, 0.3, 0.9], [0, 0.4, 0]])
    np.testing.assert_array_equal(reached, [[1, 1, 1], [0, 1, 0]])
    np.testing.assert_array_equal(select_labels(scores, reached, top_r=2).toarray(), [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(select_labels(scores, reached, threshold=0.5).toarray(), [[1, 0, 1], [0, 0, 0]])


def test_multilabel_classify_against_definition():
    train, test, _ = make_corpora(seed=3, multilabel=True)
    res = knn_classify(train, test, k=5, multilabel=True, top_r=2, method="inverted", device="cpu")
    # f(d, c) by brute force over the labelled training documents
    Y = train.label_matrix.toarray() > 0
    labelled = Y.any(axis=1)
    assert not labelled.all()  # the unlabelled ones must stay out of the neighbours
    Y = Y[labelled]
    A, B = train.X.toarray()[labelled].astype(np.float64), test.X.toarray().astype(np.float64)
    S = B @ A.T / np.outer(np.linalg.norm(B, axis=1), np.linalg.norm(A, axis=1))
    for i in range(B.shape[0]):
        nn = np.lexsort((np.arange(A.shape[0]), -S[i]))[:5]
        want = np.array([max([np.float32(S[i, j]) for j in nn if Y[j, c]], default=0.0) for c in range(4)], np.float32)
        np.testing.assert_array_equal(res.label_scores[i], want)
    assert res.predicted_labels.sum(axis=1).max() <= 2
    assert {"one_error", "coverage", "ranking_loss", "average_precision", "micro_f1"} <= set(res.metrics)


def test_classify_errors():
    train, test, _ = make_corpora(seed=4)
    with pytest.raises(InputError, match="k <= 60"):
        knn_classify(train, test, k=61, device="cpu")
    with pytest.raises(InputError, match="metric"):
        knn_classify(train, test, metric="l2", device="cpu")
    unlabelled = Corpus(train.X, None, train.terms)
    with pytest.raises(InputError, match="no labels"):
        knn_classify(unlabelled, test, device="cpu")
    other = Corpus(test.X[:, :10], None, None)
    with pytest.raises(InputError, match="vocabulary"):
        knn_classify(train, other, device="cpu")


def test_svm_on_each_feature_set():
    from gputext.knn.svm import svm_classify
    train, test, _ = make_corpora(seed=5, n_train=80)
    for features in ("bow", "meta", "both"):
        res = svm_classify(train, test, features=features, k=5, C_grid=(0.25, 4), cv_folds=3, device="cpu", n_jobs=1)
        assert res.predicted.shape == (test.n_docs,) and res.info["C"] in (0.25, 4)
        assert res.metrics["micro_f1"] > 0.5  # well above chance (0.25) on separable synthetic classes


def test_svm_meta_matches_manual_pipeline():
    """svm_classify = compute_metafeatures + min-max scaling + LinearSVC(C, primal tolerance), nothing hidden."""
    from sklearn.svm import LinearSVC

    from gputext.knn.metafeatures import compute_metafeatures
    from gputext.knn.svm import PRIMAL_TOL, svm_classify, svm_tol
    train, test, ytr = make_corpora(seed=6)
    res = svm_classify(train, test, features="meta", k=4, C=1.0, device="cpu", solver="liblinear")
    mf = compute_metafeatures(train.X, ytr, 4, test.X, k=4, device="cpu")
    lo, hi = mf.train.min(0), mf.train.max(0)
    scale = np.where(hi > lo, 1 / np.where(hi > lo, hi - lo, 1), 0)
    assert svm_tol(False) == PRIMAL_TOL == 1e-3 and svm_tol(True) == 0.1  # LIBLINEAR's -s 1 default for the dual
    model = LinearSVC(C=1.0, dual=False, tol=1e-3, max_iter=5000).fit(((mf.train - lo) * scale).astype(np.float32), ytr)
    np.testing.assert_array_equal(res.predicted, model.predict(((mf.queries - lo) * scale).astype(np.float32)))


def test_folds_protocol_reports_mean_and_spread():
    from gputext.knn.svm import cross_validation_protocol
    train, test, _ = make_corpora(seed=7)
    rep = cross_validation_protocol(train, test, n_folds=3, model="vote", k=5, device="cpu")
    assert len(rep["folds"]) == 3 and sum(f["n_test"] for f in rep["folds"]) == train.n_docs + test.n_docs
    micro = [f["micro_f1"] for f in rep["folds"]]
    assert rep["micro_f1_mean"] == pytest.approx(np.mean(micro))
    assert rep["micro_f1_std"] == pytest.approx(np.std(micro, ddof=1))


# ----------------------------------------------------------------------------- CLI


@pytest.fixture()
def files(tmp_path):
    train, test, _ = make_corpora(seed=8)
    write_corpus(train, str(tmp_path / "train.h5"))
    write_corpus(test, str(tmp_path / "test.h5"))
    mtrain, mtest, _ = make_corpora(seed=8, multilabel=True)
    write_corpus(mtrain, str(tmp_path / "mtrain.h5"))
    write_corpus(mtest, str(tmp_path / "mtest.h5"))
    return tmp_path


def run(*args):
    return CliRunner().invoke(cli, ["knn", *args], catch_exceptions=False)


def test_cli_vote_writes_predictions(files):
    out = files / "pred.h5"
    r = run("classify", "--train", str(files / "train.h5"), "--test", str(files / "test.h5"), "-k", "5",
            "--device", "cpu", "-q", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert "micro-F1" in r.output and "macro-F1" in r.output
    res = read_corpus(str(out), require_docs=False)
    pred = res.obs["predicted"]
    assert list(pred.categories) == [f"class{c}" for c in range(4)]
    train, test = read_corpus(str(files / "train.h5")), read_corpus(str(files / "test.h5"))
    np.testing.assert_array_equal(pred.codes, knn_classify(train, test, k=5, device="cpu").predicted)


def test_cli_multilabel_keys(files):
    out = files / "ml.h5"
    r = run("classify", "--train", str(files / "mtrain.h5"), "--test", str(files / "mtest.h5"), "-k", "5",
            "--multilabel", "--top-r", "2", "--device", "cpu", "-q", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert "one-error" in r.output and "average precision" in r.output
    res = read_corpus(str(out), require_docs=False)
    assert res.obsm["label_scores"].dtype == np.float32 and res.obsm["label_scores"].shape == (25, 4)
    assert sp.issparse(res.obsm["predicted_labels"]) and res.obsm["predicted_labels"].shape == (25, 4)


def test_cli_metafeatures_files(files):
    out, out_tr = files / "meta.h5", files / "meta_train.h5"
    r = run("metafeatures", "--train", str(files / "train.h5"), "--test", str(files / "test.h5"), "-k", "3",
            "--device", "cpu", "-q", "-o", str(out), "--train-output", str(out_tr))
    assert r.exit_code == 0, r.output
    with h5py.File(out, "r") as f:
        ds = f["obsm/metafeatures"]
        assert ds.shape == (25, 4 * 11) and ds.dtype == np.float32
        assert "cos@1..3" in ds.attrs["column_order"] and list(ds.attrs["classes"])[0] == "class0"
        assert "padding" in ds.attrs
        assert f["uns/gputext/metafeatures/columns"][0].decode() == "class0:cos@1"
    with h5py.File(out_tr, "r") as f:
        assert f["obsm/metafeatures"].shape == (60, 44)


def test_cli_svm_and_folds(files):
    base = ["--train", str(files / "train.h5"), "--test", str(files / "test.h5"), "-k", "3", "--device", "cpu", "-q"]
    r = run("classify", *base, "--model", "svm", "--features", "both", "--C", "1")
    assert r.exit_code == 0, r.output
    assert "micro-F1" in r.output
    r = run("classify", *base, "--model", "vote", "--folds", "3")
    assert r.exit_code == 0, r.output
    assert "3-fold vote" in r.output and "+-" in r.output


@pytest.mark.parametrize("args,message", [
    (["--top-r", "2"], "--top-r and --threshold need --multilabel"),
    (["--folds", "3", "-o", "x.h5"], "--folds reports figures only"),
    (["--model", "svm", "--multilabel"], "single-label"),
    (["--C-grid", "a,b"], "--C-grid"),
    (["-k", "500"], "Expected k <= 60"),
])
def test_cli_errors_are_one_line_exit_2(files, args, message):
    r = CliRunner().invoke(cli, ["knn", "classify", "--train", str(files / "train.h5"), "--test",
                                 str(files / "test.h5"), "--device", "cpu", "-q", *args])
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_cli_missing_labels_and_vocabulary(files, tmp_path):
    train = read_corpus(str(files / "train.h5"))
    write_corpus(Corpus(train.X, None, train.terms), str(tmp_path / "nolabels.h5"))
    r = CliRunner().invoke(cli, ["knn", "metafeatures", "--train", str(tmp_path / "nolabels.h5"), "--test",
                                 str(files / "test.h5"), "-o", str(tmp_path / "m.h5"), "--device", "cpu", "-q"])
    assert r.exit_code == 2 and "no labels" in r.output
    assert not (tmp_path / "m.h5").exists()
    write_corpus(Corpus(train.X[:, :5], None, None), str(tmp_path / "other.h5"))
    r = CliRunner().invoke(cli, ["knn", "classify", "--train", str(files / "train.h5"), "--test",
                                 str(tmp_path / "other.h5"), "--device", "cpu", "-q"])
    assert r.exit_code == 2 and "vocabulary" in r.output


def test_help_has_examples():
    for command in ("classify", "metafeatures"):
        r = CliRunner().invoke(cli, ["knn", command, "--help"])
        assert r.exit_code == 0 and "Example:" in r.output
