"""Swapping the import keeps the answers: gputext's NearestNeighbors and KNeighborsClassifier with
default arguments, with weights="distance", and with every metric alias, against scikit-learn's
brute force on 20 Newsgroups and Reuters R8 (../shared/datasets; realdata, skipped when absent).

Subsampled for time (each corpus: 1,500 training documents, 200 queries from its test file, the
features `corpus build` makes): the same neighbours up to ties (distances within 1e-6), and the
same predictions except where scikit-learn's own answer is a tie (the k-th and (k+1)-th distances
within 1e-6, or the two best classes' summed weights within 1e-9 relative).
"""
import numpy as np
import pytest

pytestmark = pytest.mark.realdata

CORPORA = {"20ng": ("20newsgroups", "20newsgroups"), "r8": ("reuters-r8", "reuters-r8")}
ALIASES = [("minkowski", 1), ("minkowski", 2), ("euclidean", 2), ("l2", 2), ("manhattan", 2), ("l1", 2),
           ("cityblock", 2), ("cosine", 2)]


def subsample_tab(source, target, n: int) -> None:
    """The .tab file's 3 header lines and n of its documents, drawn at random (seed 0), in file order."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    body = lines[3:]
    keep = np.sort(np.random.default_rng(0).permutation(len(body))[:n])
    target.write_text("".join(lines[:3] + [body[i] for i in keep]), encoding="utf-8")


@pytest.fixture(scope="module", params=sorted(CORPORA))
def corpus(request, shared_datasets, tmp_path_factory):
    """(X train CSR float32 (1500, n_terms), labels str (1500,), Q CSR (200, n_terms)): `corpus build`'s features."""
    from gputext.io import build_corpus, write_corpus
    folder, stem = CORPORA[request.param]
    d = tmp_path_factory.mktemp(request.param)
    subsample_tab(shared_datasets / folder / f"{stem}-train.tab", d / "train.tab", 1500)
    subsample_tab(shared_datasets / folder / f"{stem}-test.tab", d / "test.tab", 200)
    train = build_corpus(str(d / "train.tab"))
    write_corpus(train, str(d / "train.h5"))
    test = build_corpus(str(d / "test.tab"), vocab_from=str(d / "train.h5"))
    return train.X, train.labels.values().astype(str), test.X


def same_neighbours_up_to_ties(ind, dist, ref_ind, ref_dist, tol=1e-6):
    np.testing.assert_allclose(dist, ref_dist, atol=tol, rtol=0)
    for a, da, b, db in zip(ind, dist, ref_ind, ref_dist):
        assert set(a[da < da[-1] - tol]) == set(b[db < db[-1] - tol])


def tied(sk_clf, Q, rows, tol=1e-6) -> np.ndarray:
    """bool per row: scikit-learn's answer for it is a tie (at the k-th neighbour or between classes)."""
    k = sk_clf.n_neighbors
    dist, ind = sk_clf.kneighbors(Q[rows], n_neighbors=k + 1)
    at_k = np.abs(dist[:, k - 1] - dist[:, k]) <= tol
    proba = np.sort(sk_clf.predict_proba(Q[rows]), axis=1)
    classes = np.abs(proba[:, -1] - proba[:, -2]) <= 1e-9 * np.maximum(proba[:, -1], 1e-300)
    return at_k | classes


def check_classifier(X, y, Q, **params):
    from sklearn.neighbors import KNeighborsClassifier as SkKNN
    from gputext import KNeighborsClassifier
    ours = KNeighborsClassifier(device="cpu", **params).fit(X, y)
    ref = SkKNN(**params).fit(X.astype(np.float64), y)
    Q64 = Q.astype(np.float64)
    got, want = ours.predict(Q), ref.predict(Q64)
    differ = np.flatnonzero(got != want)
    assert differ.size <= 0.02 * Q.shape[0] and (differ.size == 0 or tied(ref, Q64, differ).all()), (params, differ)
    agree = np.flatnonzero(got == want)
    np.testing.assert_allclose(ours.predict_proba(Q[agree]), ref.predict_proba(Q64[agree]), atol=1e-6)


def test_default_arguments_give_sklearns_neighbours_and_predictions(corpus):
    from sklearn.neighbors import NearestNeighbors as SkNN
    from gputext import NearestNeighbors
    X, y, Q = corpus
    dist, ind = NearestNeighbors(device="cpu").fit(X).kneighbors(Q)
    ref_dist, ref_ind = SkNN().fit(X.astype(np.float64)).kneighbors(Q.astype(np.float64))
    same_neighbours_up_to_ties(ind, dist, ref_ind, ref_dist)
    check_classifier(X, y, Q)
    check_classifier(X, y, Q, weights="distance")


@pytest.mark.parametrize("metric,p", ALIASES, ids=[f"{m}-p{p}" for m, p in ALIASES])
def test_each_metric_alias_gives_sklearns_answers(corpus, metric, p):
    from sklearn.neighbors import NearestNeighbors as SkNN
    from gputext import NearestNeighbors
    X, y, Q = corpus
    Q = Q[:60]
    dist, ind = NearestNeighbors(metric=metric, p=p, device="cpu").fit(X).kneighbors(Q)
    ref_dist, ref_ind = SkNN(metric=metric, p=p).fit(X.astype(np.float64)).kneighbors(Q.astype(np.float64))
    same_neighbours_up_to_ties(ind, dist, ref_ind, ref_dist)
    check_classifier(X, y, Q, metric=metric, p=p, weights="distance")
