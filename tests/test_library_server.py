"""Library calls answered by the warm server (gputext.daemon.library): docs/python.md's block runs
as written, and a fresh Python process that runs its NearestNeighbors lines with the server running
gets what the same lines give in their own process, without importing numba; errors and warnings come back as they would be
raised here; a call the server should not take (GPUTEXT_DAEMON=0, over GPUTEXT_SERVE_BYTES, a
process that has its own engine) runs in the process.

Every other test computes in its own process (conftest sets GPUTEXT_DAEMON=0); this module starts
a server of its own (socket folder XDG_RUNTIME_DIR under tmp_path) on the CPU twin."""
from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the warm server needs fork()")

GPUTEXT = [sys.executable, "-m", "gputext"]

ROOT = Path(__file__).resolve().parents[1]


def documented_block() -> str:
    """docs/python.md's shell block under "A fresh process" (files, the server, the Python lines)."""
    text = (ROOT / "docs" / "python.md").read_text()
    section = text[text.index("## A fresh process"):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


# the block's Python lines, as a user's script runs them
USER_LINES = re.search(r"<<'EOF'\n(.*?)\nEOF", documented_block(), re.S).group(1) + "\n"

# the same lines and more, reporting what happened (a JSON line on stdout, arrays in out.npz)
CHECKS = USER_LINES + """
import json, pickle, sys, warnings
import numpy as np
nn = NearestNeighbors(n_neighbors=30).fit(X)
d, i = nn.kneighbors(Q)
G = nn.radius_neighbors_graph(Q[:40], radius=1.3, mode="distance")
self_d, self_i = nn.kneighbors()
np.savez("out.npz", distances=distances, indices=indices, d=d, i=i, self_d=self_d, self_i=self_i,
         G_data=G.data, G_indices=G.indices, G_indptr=G.indptr)
pickle.dump(nn, open("nn.pkl", "wb"))
report = {"numba": "numba" in sys.modules, "sklearn": "sklearn" in sys.modules, "device_": nn.device_,
          "n_features_in_": nn.n_features_in_, "n_samples_fit_": nn.n_samples_fit_, "repr": repr(nn)}
try:
    nn.kneighbors(Q, n_neighbors=X.shape[0] + 1)
except ValueError as exc:
    report["too_many"] = str(exc)
try:
    NearestNeighbors(device="cpu").kneighbors(Q)
except Exception as exc:
    report["unfitted"] = type(exc).__name__
import pandas as pd
frame = pd.DataFrame(X[:50].toarray(), columns=[f"t{j}" for j in range(X.shape[1])])
named = NearestNeighbors(n_neighbors=3, device="cpu").fit(frame)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    named.kneighbors(X[:5].toarray())
report["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
from gputext import KNeighborsClassifier
from gputext.io import read_corpus as again
y, yq = again("train.h5").obs["label"].values(), again("test.h5").obs["label"].values()
clf = KNeighborsClassifier(n_neighbors=10, metric="cosine", weights="similarity").fit(X, y)
np.savez("clf.npz", predict=clf.predict(Q), proba=clf.predict_proba(Q), classes=clf.classes_,
         score=clf.score(Q, yq), kn=clf.kneighbors(Q[:20])[1])
report["clf_repr"] = repr(clf)
from gputext import StarClustering, StreamClustering
star = StarClustering(beta=0.2).fit(X)
star_fp = StarClustering(beta=0.2).fit_predict(X)
star.partial_fit(Q[:50])
stream = StreamClustering(threshold=0.3)
stream.partial_fit(X[:200]); stream.partial_fit(X[200:])
np.savez("clusters.npz", star_labels=star.labels_, star_fp=star_fp, star_centers=star.centers_,
         star_predict=star.predict(Q), stream_labels=stream.labels_, stream_predict=stream.predict(Q),
         stream_pickled=pickle.loads(pickle.dumps(stream)).predict(Q[:30]))
report["numba_at_end"] = "numba" in sys.modules
def mine(d):  # defined in this script's __main__: the server cannot unpickle it, so the call runs here
    return 1.0 / (1.0 + d)
report["own_weights"] = KNeighborsClassifier(n_neighbors=5, weights=mine).fit(X, y).predict(Q[:30]).tolist()
report["numba_after_own_weights"] = "numba" in sys.modules
print(json.dumps(report))
"""


def run(args, env, cwd, **kw):
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(environment with the server on, folder): docs/python.md's block run there as written (it
    writes train.h5 and test.h5, starts the server, answers through it); the server stopped afterwards."""
    base = tmp_path_factory.mktemp("library")
    (base / "run").mkdir(mode=0o700)
    shims = base / "bin"  # `gputext` and `python` as this environment's, installed or not
    shims.mkdir()
    for name, line in (("gputext", f'exec "{sys.executable}" -m gputext "$@"'), ("python", f'exec "{sys.executable}" "$@"')):
        (shims / name).write_text(f"#!/bin/sh\n{line}\n")
        (shims / name).chmod(0o755)
    env = dict(os.environ, GPUTEXT_DAEMON="1", XDG_RUNTIME_DIR=str(base / "run"),
               PATH=f"{shims}{os.pathsep}{os.environ.get('PATH', '')}")
    r = run(["bash", "-e", "-c", documented_block()], env, base)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().count("[") >= 2  # the printed indices
    yield env, base
    run([*GPUTEXT, "daemon", "stop"], env, base)


@pytest.fixture(scope="module")
def checked(server):
    """CHECKS run once in a fresh process: (its report, the server's commands it took, its stderr)."""
    env, base = server
    before = commands(env, base)
    r = run([sys.executable, "-c", CHECKS], env, base)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout.decode().strip().splitlines()[-1]), commands(env, base) - before, r.stderr.decode()


def commands(env, base) -> int:
    out = run([*GPUTEXT, "daemon", "status"], env, base).stdout.decode()
    return int(out.split("pid")[1].split(",")[1].split()[0])


def in_process(base):
    """The same calls in this process (GPUTEXT_DAEMON=0 here: conftest)."""
    from gputext import NearestNeighbors
    from gputext.io import read_corpus
    X, Q = read_corpus(base / "train.h5").X, read_corpus(base / "test.h5").X
    nn = NearestNeighbors(n_neighbors=30, device="cpu").fit(X)
    return nn, X, Q


def test_a_fresh_process_is_answered_by_the_server_and_gets_the_same_results(server, checked):
    env, base = server
    report, taken, _ = checked
    assert report["numba"] is False and report["sklearn"] is False  # neither was imported for the answers
    # USER_LINES' fit and kneighbors, fit, kneighbors, the graph, kneighbors(), the refused calls, the named fit
    assert taken >= 8
    nn, X, Q = in_process(base)
    got = np.load(base / "out.npz")
    d, i = nn.kneighbors(Q)
    for name_d, name_i in (("distances", "indices"), ("d", "i")):
        assert np.array_equal(got[name_i], i) and np.array_equal(got[name_d], d)
    self_d, self_i = nn.kneighbors()
    assert np.array_equal(got["self_i"], self_i) and np.array_equal(got["self_d"], self_d)
    G = nn.radius_neighbors_graph(Q[:40], radius=1.3, mode="distance")
    assert G.nnz > 0
    assert np.array_equal(got["G_indptr"], G.indptr) and np.array_equal(got["G_indices"], G.indices)
    assert np.array_equal(got["G_data"], G.data)
    assert report["device_"] in ("cpu", "cuda") and report["n_features_in_"] == X.shape[1]
    assert report["n_samples_fit_"] == X.shape[0]
    assert report["repr"] == "NearestNeighbors(n_neighbors=30)"
    assert repr(nn) == "NearestNeighbors(device='cpu', n_neighbors=30)"
    # an estimator fitted by the server pickles, and searches here like one fitted here
    with open(base / "nn.pkl", "rb") as f:
        again = pickle.load(f)
    d2, i2 = again.kneighbors(Q)
    assert np.array_equal(i2, i) and np.array_equal(d2, d)


def test_a_classifier_is_answered_by_the_server_too(server, checked):
    env, base = server
    report, *_ = checked
    from gputext import KNeighborsClassifier
    from gputext.io import read_corpus
    train, test = read_corpus(base / "train.h5"), read_corpus(base / "test.h5")
    y, yq = train.obs["label"].values(), test.obs["label"].values()
    clf = KNeighborsClassifier(n_neighbors=10, metric="cosine", weights="similarity", device="cpu").fit(train.X, y)
    got = np.load(base / "clf.npz", allow_pickle=True)
    assert np.array_equal(got["classes"], clf.classes_)
    assert np.array_equal(got["predict"], clf.predict(test.X))
    assert np.array_equal(got["proba"], clf.predict_proba(test.X))
    assert float(got["score"]) == clf.score(test.X, yq) and 0 < float(got["score"]) <= 1
    assert np.array_equal(got["kn"], clf.kneighbors(test.X[:20])[1])
    assert report["clf_repr"] == "KNeighborsClassifier(metric='cosine', n_neighbors=10, weights='similarity')"
    # a weights function of the script's own: computed in the script's process, the same answer, no noise
    mine = KNeighborsClassifier(n_neighbors=5, weights=lambda d: 1.0 / (1.0 + d), device="cpu").fit(train.X, y)
    assert report["own_weights"] == mine.predict(test.X[:30]).tolist()
    assert report["numba_after_own_weights"] is True
    assert checked[2] == ""  # the script's stderr: nothing (no error from the server's refused unpickling)


def test_clusterers_are_answered_by_the_server_and_resume_their_streams(server, checked):
    env, base = server
    report, *_ = checked
    from gputext import StarClustering, StreamClustering
    _, X, Q = in_process(base)
    got = np.load(base / "clusters.npz")
    star = StarClustering(beta=0.2, device="cpu").fit(X)
    assert np.array_equal(got["star_fp"], star.labels_)
    star.partial_fit(Q[:50])
    assert np.array_equal(got["star_labels"], star.labels_) and np.array_equal(got["star_centers"], star.centers_)
    assert np.array_equal(got["star_predict"], star.predict(Q))
    stream = StreamClustering(threshold=0.3, device="cpu")
    stream.partial_fit(X[:200])
    stream.partial_fit(X[200:])
    assert np.array_equal(got["stream_labels"], stream.labels_) and len(set(stream.labels_.tolist())) > 1
    assert np.array_equal(got["stream_predict"], stream.predict(Q))
    assert np.array_equal(got["stream_pickled"], stream.predict(Q[:30]))
    assert report["numba_at_end"] is False


def test_errors_and_warnings_come_back_as_in_process(server, checked):
    env, base = server
    report, *_ = checked
    nn, X, Q = in_process(base)
    with pytest.raises(ValueError) as exc:
        nn.kneighbors(Q, n_neighbors=X.shape[0] + 1)
    assert report["too_many"] == str(exc.value)
    assert report["unfitted"] == "NotFittedError"
    assert any(w.startswith("UserWarning: X does not have valid feature names") for w in report["warnings"])
    # the pandas fit was answered by the server: the process still has no engine of its own
    assert report["numba_at_end"] is False


@pytest.mark.parametrize("setting", [{"GPUTEXT_DAEMON": "0"}, {"GPUTEXT_SERVE_BYTES": "1000"}])
def test_calls_the_server_should_not_take_run_in_the_process(server, setting):
    env, base = server
    before = commands(env, base)
    line = USER_LINES + "import sys, numpy as np; np.save('here.npy', indices); print('numba' in sys.modules)"
    r = run([sys.executable, "-c", line], dict(env, **setting), base)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().split()[-1] == "True"  # computed here, with this process's own engine
    assert commands(env, base) == before
    nn, X, Q = in_process(base)
    assert np.array_equal(np.load(base / "here.npy"), nn.kneighbors(Q)[1])


def test_a_process_with_its_own_engine_computes_itself(server):
    env, base = server
    before = commands(env, base)
    line = "import numba\n" + USER_LINES
    r = run([sys.executable, "-c", line], env, base)
    assert r.returncode == 0, r.stderr.decode()
    assert commands(env, base) == before


def test_the_internal_command_refuses_a_user(server):
    env, base = server
    for e in (env, dict(env, GPUTEXT_DAEMON="0")):
        r = run([*GPUTEXT, "daemon", "call"], e, base, stdin=subprocess.DEVNULL)
        assert r.returncode == 2
        err = r.stderr.decode()
        assert err.count("\n") == 1 and "not run by hand" in err


def test_pickled_size_counts_buffers_without_copying():
    from gputext.daemon.library import _pickled_size
    X = sp.random(1000, 500, density=0.02, format="csr", dtype=np.float32, random_state=0)
    size = _pickled_size((X, "kneighbors"))
    assert len(pickle.dumps((X, "kneighbors"), protocol=5)) - 200 <= size <= len(pickle.dumps((X, "kneighbors"), protocol=5))
    assert _pickled_size(lambda: 0) is None
