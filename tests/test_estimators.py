"""The scikit-learn estimators: the same results as their CLI commands on the same files, scikit-learn's
own neighbours on the same matrix, inputs (sparse formats, arrays, AnnData, Corpus, obs columns),
pickling, and the lazy top-level export."""
import pickle
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from gputext.cli import cli
from gputext.io import Categorical, Corpus, read_corpus, write_corpus

TERMS = [f"w{j}" for j in range(50)]


def tfidf_like(n, seed, n_terms=50, density=0.12):
    """Non-negative rows (a few all-zero), unit L2 norm where non-empty, with planted classes."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, n_terms, density=density, random_state=rng, format="csr", dtype=np.float32)
    y = rng.integers(0, 3, n)
    X = X + sp.csr_matrix((np.full(n, 0.8, np.float32), (np.arange(n), y * 5), ), shape=X.shape)
    keep = np.ones(n, np.float32)
    keep[3] = 0  # an all-zero row
    X = sp.csr_matrix(sp.diags(keep) @ X)
    X.eliminate_zeros()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags(np.where(norms > 0, 1 / np.maximum(norms, 1e-30), 0)) @ X, dtype=np.float32)
    return X, np.array(["alpha", "beta", "gamma"], dtype=object)[y]


def labelled(X, names):
    cats, codes = np.unique(names.astype(str), return_inverse=True)
    return Corpus(X, terms=TERMS, obs={"label": Categorical(codes.astype(np.int32), cats.astype(object))})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("est")
    X, y = tfidf_like(90, 1)
    Q, yq = tfidf_like(25, 2)
    A, _ = tfidf_like(20, 3)
    write_corpus(labelled(X, y), str(d / "train.h5"))
    write_corpus(labelled(Q, yq), str(d / "test.h5"))
    write_corpus(Corpus(A, doc_ids=[f"new{i}" for i in range(20)], terms=TERMS), str(d / "add.h5"))
    return d, X, y, Q, yq, A


def cli_run(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_import_gputext_imports_neither_numba_nor_sklearn():
    # NearestNeighbors, KNeighborsClassifier and the clusterers neither (estimators/base.py); the estimators on
    # scikit-learn's base classes import it
    code = ("import sys, gputext; assert 'numba' not in sys.modules and 'sklearn' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith(('numba', 'sklearn')))[:5]; "
            "from gputext import NearestNeighbors, KNeighborsClassifier, StarClustering, StreamClustering; "
            "assert not {'numba', 'sklearn'} & set(sys.modules); "
            "from gputext import KNNMetaFeatures; assert 'sklearn' in sys.modules; print(NearestNeighbors.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "NearestNeighbors", out.stderr
    import gputext
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        gputext.Nope


def test_nearest_neighbors_equals_knn_search_cli(files):
    from gputext import NearestNeighbors
    d, X, _, Q, _, _ = files
    cli_run("knn", "search", "--index", d / "train.h5", "--queries", d / "test.h5", "-k", 7, "--device", "cpu",
            "-q", "-o", d / "nn.h5")
    res = read_corpus(str(d / "nn.h5"))
    dist, ind = NearestNeighbors(n_neighbors=7, metric="cosine", device="cpu").fit(X).kneighbors(Q)
    np.testing.assert_array_equal(ind, res.obsm["knn_indices"])
    np.testing.assert_array_equal(dist, np.clip(1.0 - res.obsm["knn_scores"].astype(np.float64), 0, 2))
    cli_run("knn", "search", "--index", d / "train.h5", "--exclude-self", "-k", 4, "--metric", "l1",
            "--device", "cpu", "-q", "-o", d / "self.h5")
    res = read_corpus(str(d / "self.h5"))
    dist, ind = NearestNeighbors(n_neighbors=4, metric="manhattan", device="cpu").fit(X).kneighbors()
    np.testing.assert_array_equal(ind, res.obsm["knn_indices"])
    np.testing.assert_array_equal(dist, res.obsm["knn_scores"].astype(np.float64))


@pytest.mark.parametrize("metric", ["cosine", "euclidean", "manhattan"])
@pytest.mark.parametrize("algorithm", ["inverted", "dense", "brute"])
def test_nearest_neighbors_equals_sklearn(files, metric, algorithm):
    from sklearn.neighbors import NearestNeighbors as SkNN
    from gputext import NearestNeighbors
    _, X, _, Q, _, _ = files
    ours = NearestNeighbors(n_neighbors=6, metric=metric, algorithm=algorithm, device="cpu").fit(X)
    ref = SkNN(n_neighbors=6, metric=metric, algorithm="brute").fit(X.astype(np.float64))
    for query in (Q, None):
        d1, i1 = ours.kneighbors(query)
        d2, i2 = ref.kneighbors(None if query is None else query.astype(np.float64))
        np.testing.assert_allclose(d1, d2, atol=1e-6)
        assert same_neighbours_up_to_ties(i1, d1, i2, d2)
    r1 = ours.radius_neighbors(Q, radius=0.9, sort_results=True)
    r2 = ref.radius_neighbors(Q.astype(np.float64), radius=0.9, sort_results=True)
    for a, b, da, db in zip(r1[1], r2[1], r1[0], r2[0]):
        keep = np.abs(db - 0.9) > 1e-6  # boundary cases are decided on the engine's exact scores
        assert set(a[np.abs(da - 0.9) > 1e-6]) == set(b[keep])
    G1 = ours.kneighbors_graph(mode="distance")
    G2 = ref.kneighbors_graph(mode="distance")
    assert G1.shape == G2.shape and G1.nnz == G2.nnz


def same_neighbours_up_to_ties(i1, d1, i2, d2, tol=1e-6):
    """Row by row: the same distances, and the same index sets outside the last tied distance."""
    for a, da, b, db in zip(i1, d1, i2, d2):
        last = da[-1]
        if set(a[da < last - tol]) != set(b[db < last - tol]):
            return False
    return True


def test_dot_distance_is_negative_dot_and_radius_graph(files):
    from gputext import NearestNeighbors
    _, X, _, Q, _, _ = files
    nn = NearestNeighbors(n_neighbors=3, metric="dot", device="cpu").fit(X)
    dist, ind = nn.kneighbors(Q)
    S = (Q @ X.T).toarray().astype(np.float64)
    np.testing.assert_allclose(-dist, np.take_along_axis(S, ind, axis=1), atol=1e-6)
    assert (np.diff(dist, axis=1) >= 0).all()
    G = nn.radius_neighbors_graph(Q, radius=-0.5, mode="distance")  # dot >= 0.5
    np.testing.assert_array_equal(G.toarray() != 0, S >= 0.5)


def test_kneighbors_errors_are_sklearns(files):
    from sklearn.exceptions import NotFittedError
    from gputext import NearestNeighbors
    _, X, _, Q, _, _ = files
    with pytest.raises(NotFittedError):
        NearestNeighbors().kneighbors(Q)
    nn = NearestNeighbors(device="cpu").fit(X[:4])
    with pytest.raises(ValueError, match="Expected n_neighbors <= n_samples_fit, but n_neighbors = 5, n_samples_fit = 4"):
        nn.kneighbors(Q)
    with pytest.raises(ValueError, match="Expected n_neighbors < n_samples_fit"):
        nn.kneighbors(n_neighbors=4)
    with pytest.raises(ValueError, match="X has 49 features, but NearestNeighbors is expecting 50"):
        nn.kneighbors(Q[:, :49])
    with pytest.raises(ValueError, match="metric must be one of"):
        NearestNeighbors(metric="chebyshev").fit(X)
    with pytest.raises(ValueError, match="p = 1 .manhattan. and p = 2 .euclidean. only"):
        NearestNeighbors(p=3).fit(X)
    with pytest.raises(ValueError, match="n_jobs must be None or a non-zero int"):
        NearestNeighbors(n_jobs=0, device="cpu").fit(X)
    with pytest.raises(ValueError, match="device must be one of"):
        NearestNeighbors(device="gpu").fit(X)


def test_classifier_equals_knn_classify_cli(files):
    from gputext import KNeighborsClassifier
    d, X, y, Q, yq, _ = files
    cli_run("knn", "classify", "--train", d / "train.h5", "--test", d / "test.h5", "-k", 9, "--device", "cpu",
            "-q", "-o", d / "pred.h5")
    predicted = read_corpus(str(d / "pred.h5")).obs["predicted"].values()
    clf = KNeighborsClassifier(n_neighbors=9, metric="cosine", weights="similarity", device="cpu").fit(X, y)
    np.testing.assert_array_equal(clf.predict(Q), predicted.astype(str))
    proba = clf.predict_proba(Q)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)], clf.predict(Q))
    assert clf.score(Q, yq) == pytest.approx(np.mean(predicted.astype(str) == yq))


def test_classifier_takes_anndata_and_obs_column_names(files):
    anndata = pytest.importorskip("anndata")
    import pandas as pd
    from gputext import KNeighborsClassifier
    _, X, y, Q, _, _ = files
    adata = anndata.AnnData(X=X, obs=pd.DataFrame({"topic": pd.Categorical(y)}, index=[str(i) for i in range(len(y))]))
    a = KNeighborsClassifier(n_neighbors=5, device="cpu").fit(adata, "topic")
    b = KNeighborsClassifier(n_neighbors=5, device="cpu").fit(X.tocoo(), list(y))
    c = KNeighborsClassifier(n_neighbors=5, device="cpu").fit(labelled(X, y), "label")
    for other in (b, c):
        np.testing.assert_array_equal(a.predict(Q.toarray()), other.predict(anndata.AnnData(X=Q)))
    with pytest.raises(ValueError, match="no such obs column"):
        KNeighborsClassifier(device="cpu").fit(adata, "nope")
    with pytest.raises(ValueError, match="names an obs column"):
        KNeighborsClassifier(device="cpu").fit(X, "topic")


def test_metafeatures_equal_knn_metafeatures_cli(files):
    from gputext import KNNMetaFeatures
    d, X, y, Q, _, _ = files
    cli_run("knn", "metafeatures", "--train", d / "train.h5", "--test", d / "test.h5", "-k", 4, "--device", "cpu",
            "-q", "-o", d / "meta.h5", "--train-output", d / "meta_train.h5")
    meta = KNNMetaFeatures(n_neighbors=4, device="cpu")
    np.testing.assert_array_equal(meta.fit_transform(X, y), read_corpus(str(d / "meta_train.h5")).obsm["metafeatures"])
    np.testing.assert_array_equal(meta.transform(Q), read_corpus(str(d / "meta.h5")).obsm["metafeatures"])
    names = meta.get_feature_names_out()
    assert len(names) == 3 * (3 * 4 + 2) and names[0] == "alpha:cos@1" and names[-1] == "gamma:l2_centroid"


def test_star_clustering_equals_cluster_star_cli_and_update(files):
    from gputext import StarClustering
    d, X, _, _, _, A = files
    cli_run("cluster", "star", d / "train.h5", "--beta", 0.3, "--device", "cpu", "-q", "-o", d / "c.h5")
    cli_run("cluster", "star", "--update", d / "c.h5", "--add", d / "add.h5", "--device", "cpu", "-q",
            "-o", d / "c2.h5")
    star = StarClustering(beta=0.3, device="cpu").fit(X)
    first = read_corpus(str(d / "c.h5"))
    assert (star.membership_ != first.obsm["clusters"]).nnz == 0
    np.testing.assert_array_equal(star.centers_, first.params["star"]["centers"])
    assert star.membership_[np.arange(X.shape[0]), star.labels_].min() == 1  # each label is one of its clusters
    np.testing.assert_array_equal(star.labels_[star.centers_], np.arange(star.n_clusters_))
    star.partial_fit(A)
    second = read_corpus(str(d / "c2.h5"))
    assert star.membership_.shape == second.obsm["clusters"].shape
    assert (star.membership_ != second.obsm["clusters"]).nnz == 0
    np.testing.assert_array_equal(star.centers_, second.params["star"]["centers"])
    again = pickle.loads(pickle.dumps(star))
    np.testing.assert_array_equal(again.labels_, star.labels_)


def test_stream_clustering_equals_cluster_stream_cli_and_resumes_after_pickle(files):
    from gputext import StreamClustering
    d, X, _, _, _, _ = files
    cli_run("cluster", "stream", d / "train.h5", "--threshold", 0.35, "--max-terms", 10, "--device", "cpu", "-q",
            "-o", d / "s.h5")
    expected = read_corpus(str(d / "s.h5")).obs["cluster"]
    whole = StreamClustering(threshold=0.35, max_terms=10, device="cpu")
    np.testing.assert_array_equal(whole.fit_predict(X), expected)
    parts = StreamClustering(threshold=0.35, max_terms=10, device="cpu").partial_fit(X[:40])
    parts = pickle.loads(pickle.dumps(parts))
    parts.partial_fit(X[40:])
    np.testing.assert_array_equal(parts.labels_, expected)
    assert parts.n_clusters_ == whole.n_clusters_ == expected.max() + 1
    with pytest.raises(ValueError, match="Negative values"):
        StreamClustering(device="cpu").fit(-X)


def test_ranksvm_equals_rank_train_cli(tmp_path):
    from gputext import RankSVM
    from gputext.rank import RankModel
    rng = np.random.default_rng(5)
    n, f = 120, 6
    X = sp.csr_matrix(rng.normal(size=(n, f)).astype(np.float32))
    qid = np.repeat(np.arange(12), 10).astype(np.int32)
    rel = np.clip(np.round(X.toarray() @ rng.normal(size=f) + rng.normal(size=n) * 0.3), 0, 3).astype(np.float32)
    write_corpus(Corpus(X, obs={"qid": qid, "relevance": rel}), str(tmp_path / "ltr.h5"))
    cli_run("rank", "train", tmp_path / "ltr.h5", "-C", 0.5, "--device", "cpu", "-q", "-o", tmp_path / "m.h5")
    w = RankModel.load(str(tmp_path / "m.h5")).w
    a = RankSVM(C=0.5, device="cpu").fit(X, rel, qid=qid)
    b = RankSVM(C=0.5, device="cpu").fit(X, rel, group=[10] * 12)
    c = RankSVM(C=0.5, device="cpu").fit(read_corpus(str(tmp_path / "ltr.h5")))  # obs relevance / qid by default
    for model in (a, b, c):
        np.testing.assert_array_equal(model.coef_, w)
    np.testing.assert_allclose(a.predict(X), X.toarray().astype(np.float64) @ w, rtol=1e-12)
    from gputext.rank import ranking_metrics
    assert a.score(X, rel, qid=qid) == ranking_metrics(X.toarray().astype(np.float64) @ w, qid, rel)["ndcg@10"]
    with pytest.raises(ValueError, match="either qid or group"):
        RankSVM(device="cpu").fit(X, rel, qid=qid, group=[n])


def test_fitted_estimators_pickle_without_device_state(files):
    from gputext import KNeighborsClassifier, NearestNeighbors
    _, X, y, Q, _, _ = files
    nn = NearestNeighbors(n_neighbors=3, metric="cosine", device="cpu").fit(X)
    expected = nn.kneighbors(Q)
    nn._search.topk(Q, 2, "cosine", False)  # the index has postings now
    blob = pickle.dumps(nn)
    assert len(blob) < 3 * (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) + 4000
    again = pickle.loads(blob)
    for a, b in zip(again.kneighbors(Q), expected):
        np.testing.assert_array_equal(a, b)
    clf = pickle.loads(pickle.dumps(KNeighborsClassifier(n_neighbors=3, device="cpu").fit(X, y)))
    assert clf.predict(Q).shape == (Q.shape[0],)


def test_pipeline_with_tfidf_and_grid_search():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline
    from gputext import KNeighborsClassifier
    words = {"a": "ball goal match team score", "b": "vote law court senate bill", "c": "gene cell virus dna protein"}
    rng = np.random.default_rng(0)
    texts, labels = [], []
    for label, vocab in words.items():
        for _ in range(12):
            texts.append(" ".join(rng.choice(vocab.split(), 6)))
            labels.append(label)
    pipe = Pipeline([("tfidf", TfidfVectorizer()), ("knn", KNeighborsClassifier(device="cpu"))])
    search = GridSearchCV(pipe, {"knn__n_neighbors": [3, 5]}, cv=3).fit(texts, labels)
    assert search.best_score_ == 1.0


@pytest.mark.gpu
def test_estimators_on_cuda_equal_the_cpu_twin(files):
    from gputext import (KNeighborsClassifier, KNNMetaFeatures, NearestNeighbors, RankSVM, StarClustering,
                         StreamClustering)
    _, X, y, Q, _, A = files
    for algorithm in ("inverted", "dense"):
        a = NearestNeighbors(n_neighbors=5, algorithm=algorithm, device="cuda").fit(X)
        b = NearestNeighbors(n_neighbors=5, algorithm=algorithm, device="cpu").fit(X)
        assert a.device_ == "cuda"
        for got, want in zip(a.kneighbors(Q) + a.kneighbors(), b.kneighbors(Q) + b.kneighbors()):
            np.testing.assert_array_equal(got, want)
        assert (a.radius_neighbors_graph(Q, 0.8) != b.radius_neighbors_graph(Q, 0.8)).nnz == 0
    for params in (dict(metric="cosine", weights="similarity"), dict(weights="distance")):
        np.testing.assert_array_equal(KNeighborsClassifier(7, device="cuda", **params).fit(X, y).predict(Q),
                                      KNeighborsClassifier(7, device="cpu", **params).fit(X, y).predict(Q))
    np.testing.assert_array_equal(KNNMetaFeatures(n_neighbors=3, device="cuda").fit(X, y).transform(Q),
                                  KNNMetaFeatures(n_neighbors=3, device="cpu").fit(X, y).transform(Q))
    s1 = StarClustering(beta=0.3, device="cuda").fit(X).partial_fit(A)
    s2 = StarClustering(beta=0.3, device="cpu").fit(X).partial_fit(A)
    assert (s1.membership_ != s2.membership_).nnz == 0
    np.testing.assert_array_equal(StreamClustering(threshold=0.35, device="cuda").fit_predict(X),
                                  StreamClustering(threshold=0.35, device="cpu").fit_predict(X))
    rel = (np.arange(X.shape[0]) % 3).astype(float)
    np.testing.assert_allclose(RankSVM(device="cuda").fit(X, rel, group=[30] * 3).coef_,
                               RankSVM(device="cpu").fit(X, rel, group=[30] * 3).coef_, rtol=1e-6, atol=1e-9)


def test_bench_estimators_script_runs_on_the_cpu(tmp_path, monkeypatch):
    import json
    import runpy
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_estimators.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--device", "cpu", "--docs", "3000", "--queries", "40",
                                      "--terms", "4000", "--repeats", "1", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(script), run_name="__main__")
    assert done.value.code == 0
    result = json.loads((tmp_path / "bench_estimators.json").read_text())["kneighbors_vs_search_topk"]
    assert result["identical"] and result["n_docs"] == 3000 and result["ratio"] > 0


@pytest.mark.parametrize("method", ["inverted", "dense"])
def test_metafeatures_of_queries_alone_equal_those_computed_with_the_training_rows(files, method):
    from gputext.knn.metafeatures import compute_metafeatures
    _, X, y, Q, _, _ = files
    codes = np.unique(y, return_inverse=True)[1]
    both = compute_metafeatures(X, codes, 3, Q, k=4, method=method, device="cpu")
    alone = compute_metafeatures(X, codes, 3, Q, k=4, method=method, device="cpu", train_rows=False)
    assert alone.train.shape == (0, both.train.shape[1])
    np.testing.assert_array_equal(alone.queries, both.queries)


def test_distance_weights_and_callables_follow_sklearn_with_zero_distances(files):
    from sklearn.neighbors import KNeighborsClassifier as SkKNN
    from gputext import KNeighborsClassifier
    _, X, y, Q, _, _ = files
    X2 = sp.vstack([X, X[:6]]).tocsr()  # six duplicated rows with other labels: zero distances that disagree
    y2 = np.concatenate([y, np.roll(y[:6], 1)])
    Qz = sp.vstack([X[:10], Q]).tocsr()  # ten queries at distance 0 from one or two training rows
    d6 = SkKNN(n_neighbors=6).fit(X2.astype(np.float64), y2).kneighbors(Qz.astype(np.float64))[0]
    Qz = Qz[np.flatnonzero(d6[:, 5] - d6[:, 4] > 1e-6)]  # no tie at the 5th neighbour (duplicates make some)
    assert Qz.shape[0] > 20
    for weights in ("distance", lambda d: np.exp(-d)):
        ours = KNeighborsClassifier(n_neighbors=5, weights=weights, device="cpu").fit(X2, y2)
        ref = SkKNN(n_neighbors=5, weights=weights).fit(X2.astype(np.float64), y2)
        np.testing.assert_array_equal(ours.predict(Qz), ref.predict(Qz.astype(np.float64)))
        np.testing.assert_allclose(ours.predict_proba(Qz), ref.predict_proba(Qz.astype(np.float64)), atol=1e-6)
    d1, i1 = ours.kneighbors(Qz)  # the classifier's kneighbors is NearestNeighbors' (scikit-learn's KNeighborsMixin)
    d2, i2 = SkKNN(n_neighbors=5).fit(X2.astype(np.float64), y2).kneighbors(Qz.astype(np.float64))
    np.testing.assert_allclose(d1, d2, atol=1e-6)
    assert same_neighbours_up_to_ties(i1, d1, i2, d2)


def test_n_jobs_sets_numba_threads_for_the_call_only(files, monkeypatch):
    import numba
    from gputext import NearestNeighbors
    from gputext.estimators import neighbors
    _, X, _, Q, _, _ = files
    before = numba.get_num_threads()
    seen = []
    topk = neighbors.NeighbourSearch.topk
    monkeypatch.setattr(neighbors.NeighbourSearch, "topk", lambda self, *a: seen.append(numba.get_num_threads())
                        or topk(self, *a))
    nn = NearestNeighbors(n_jobs=1, device="cpu").fit(X)
    np.testing.assert_array_equal(nn.kneighbors(Q)[1], NearestNeighbors(device="cpu").fit(X).kneighbors(Q)[1])
    assert seen[0] == 1 and numba.get_num_threads() == before
