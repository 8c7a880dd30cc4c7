"""StarClustering.predict / StreamClustering.predict, and the beta / threshold sweep
(gputext.estimators.sweep), on small synthetic corpora (CPU twin).

- Stream: predict(q) is what partial_fit(q) would do to the stream as it stands, one document at
  a time: the cluster q joins, or -1 where it would start a new one.
- Star: each star centre predicts its own cluster; a row sharing no term with any centre -1;
  otherwise the cluster of the most similar centre (float64 cosine reference).
- The sweep's rows: cluster counts and alone counts equal the fitted estimators', FBcubed / NMI
  equal gputext.cluster.metrics on the same fits.
"""
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from gputext import StarClustering, StreamClustering
from gputext.datasets.synth import make_corpus


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(400, 1500, 25, 4, seed=5, weighting="tficf")


def test_stream_predict_is_what_partial_fit_would_do(corpus):
    X = corpus.X
    stream = StreamClustering(threshold=0.2, max_terms=20, device="cpu").fit(X[:300])
    predicted = stream.predict(X[300:340])
    blob = pickle.dumps(stream)
    joined = 0
    for i, label in enumerate(predicted):
        one = pickle.loads(blob).partial_fit(X[300 + i])
        got = one.labels_[-1]
        assert label == (got if got < stream.n_clusters_ else -1), i
        joined += label >= 0
    assert 0 < joined < 40  # both outcomes are exercised
    assert stream.n_clusters_ == pickle.loads(blob).n_clusters_  # predict changed nothing
    assert stream.predict(sp.csr_matrix((1, X.shape[1]), dtype=np.float32))[0] == -1


def test_star_predict_is_the_nearest_centre(corpus):
    X = corpus.X
    star = StarClustering(beta=0.1, device="cpu").fit(X[:300])
    np.testing.assert_array_equal(star.predict(X[star.centers_]), np.arange(star.n_clusters_))
    Q = X[300:]
    Xn = Q.toarray().astype(np.float64)
    Cn = X[star.centers_].toarray().astype(np.float64)
    S = (Xn / np.linalg.norm(Xn, axis=1, keepdims=True)) @ (Cn / np.linalg.norm(Cn, axis=1, keepdims=True)).T
    expected = np.where(S.max(axis=1) > 0, S.argmax(axis=1), -1)
    got = star.predict(Q)
    clear = np.sort(S, axis=1)[:, -1] - np.sort(S, axis=1)[:, -2] > 1e-9
    np.testing.assert_array_equal(got[clear], expected[clear])
    assert star.predict(sp.csr_matrix((1, X.shape[1]), dtype=np.float32))[0] == -1


def test_sweep_reports_counts_and_quality_of_each_fit(corpus, tmp_path):
    from gputext.cluster.metrics import fbcubed, nmi
    from gputext.estimators.sweep import alone, best_row, memberships, sweep_clustering
    X, y = corpus.X, corpus.labels.values()
    rows = sweep_clustering(StreamClustering(device="cpu"), X, [0.1, 0.3], y=y)
    codes = np.unique(y.astype(str), return_inverse=True)[1]
    for row in rows:
        model = StreamClustering(threshold=row["threshold"], device="cpu").fit(X)
        M = memberships(model)
        assert row["n_clusters"] == model.n_clusters_ and row["alone"] == alone(M)
        assert row["alone"] == int(np.sum(np.bincount(model.labels_)[model.labels_] == 1))
        assert row["fbcubed"] == fbcubed(M, codes) and row["nmi"] == nmi(model.labels_, codes)
    assert rows[0]["n_clusters"] < rows[1]["n_clusters"]
    assert best_row(rows) in rows
    star = sweep_clustering(StarClustering(device="cpu"), X, [0.1])
    assert set(star[0]) == {"beta", "n_clusters", "alone", "alone_fraction", "seconds"}
    pytest.importorskip("matplotlib")
    from gputext.estimators.sweep import plot_sweep
    plot_sweep(rows, str(tmp_path / "sweep.png"))
    assert (tmp_path / "sweep.png").stat().st_size > 5_000


def test_sweep_from_the_shell_prints_a_line_per_value(corpus, tmp_path, capsys):
    from gputext.estimators.sweep import main
    from gputext.io import write_corpus
    write_corpus(corpus, str(tmp_path / "c.h5"))
    main([str(tmp_path / "c.h5"), "--kind", "stream", "--values", "0.1,0.3", "--device", "cpu"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("threshold 0.1: ") and "NMI" in lines[0] and lines[2].startswith("best FBcubed F at")
