"""An in-place DClustR update killed (SIGKILL) at any point of its write leaves a file that reads
as the old result or the new one, and the next update succeeds (issue 20 item 3); a concurrent
update is refused naming the file; a small result is small (issue 20 item 10)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gputext.cli import cli
from gputext.cluster import dclus, metrics
from gputext.errors import InputError
from gputext.io import read_corpus, write_corpus
from gputext.io.commit import CRASH_ENV, TMP_PREFIX
from procs import child_env
from test_star_append import assert_same_file, base_file, corpora

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (checkpoint, what the file holds after a kill there): before the commit record the old result,
# from it on the new one (the steps after the record are redone by the next open)
POINTS = [("X/data", "old"), ("graph", "old"), ("flushed", "old"), ("committed", "new"), ("park obsm", "new"),
          ("recorded", "new")]


def contents(path):
    """What gputext's readers get from a result file: the corpus, the clusters, the stored graph."""
    c = read_corpus(path)
    clusters = metrics.load_clustering(path, "clusters")
    graph, pccs = dclus.read_stored_graph(path)
    return {"X": (c.X.indptr.tolist(), c.X.indices.tolist(), c.X.data.tolist()), "ids": c.doc_ids.tolist(),
            "terms": c.terms.tolist(), "label": c.obs["label"].values().tolist(), "emb": c.obsm["emb"].tolist(),
            "clusters": clusters.membership.toarray().tolist(), "centers": c.uns["gputext"]["star"]["centers"].tolist(),
            "graph": (graph.indptr.tolist(), graph.indices.tolist(), graph.weights.tolist()),
            "pccs": (pccs.pcc_of.tolist(), pccs.links.tolist())}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("crash")
    old, add1, add2 = corpora(11, 90, 50, 70)
    base = str(d / "base.h5")
    base_file(old, 0.3, base)
    paths = {"base": base, "add1": str(d / "add1.h5"), "add2": str(d / "add2.h5"), "new": str(d / "new.h5"),
             "new2": str(d / "new2.h5")}
    write_corpus(add1, paths["add1"])
    write_corpus(add2, paths["add2"])
    dclus.update(base, paths["add1"], paths["new"], device="cpu", write="new")
    dclus.update(paths["new"], paths["add2"], paths["new2"], device="cpu", write="new")
    return paths, contents(base), contents(paths["new"])


@pytest.mark.parametrize("point,state", POINTS)
def test_kill_during_in_place_update_leaves_old_or_new_result(tmp_path, files, point, state):
    paths, old, new = files
    work = str(tmp_path / "c.h5")
    shutil.copyfile(paths["base"], work)
    cmd = [sys.executable, "-m", "gputext", "cluster", "star", "--update", work, "--add", paths["add1"], "-o", work,
           "--device", "cpu", "--quiet"]
    r = subprocess.run(cmd, env=child_env(**{CRASH_ENV: point}), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    v = CliRunner().invoke(cli, ["corpus", "validate", work])
    assert v.exit_code == 0, v.output
    assert contents(work) == (old if state == "old" else new)  # the readers see one whole result
    nxt, ref = ("add1", paths["new"]) if state == "old" else ("add2", paths["new2"])
    dclus.update(work, paths[nxt], work, device="cpu")  # and the next update succeeds
    assert_same_file(work, ref)


def test_reader_completes_an_update_killed_after_its_commit(tmp_path, files):
    """A file left between the commit record and the end of its moves is completed by the first
    reader that opens it (or refused with one clear line when it cannot be written)."""
    paths, _, new = files
    work = str(tmp_path / "c.h5")
    shutil.copyfile(paths["base"], work)
    r = subprocess.run([sys.executable, "-m", "gputext", "cluster", "star", "--update", work, "--add", paths["add1"],
                        "-o", work, "--device", "cpu", "--quiet"],
                       env=child_env(**{CRASH_ENV: "park obs"}), capture_output=True, timeout=600)
    assert r.returncode == -signal.SIGKILL
    ro = str(tmp_path / "ro.h5")
    shutil.copyfile(work, ro)
    os.chmod(ro, 0o444)
    if not os.access(ro, os.W_OK):  # (root ignores file modes: nothing to check then)
        with pytest.raises(Exception, match="killed while putting its committed parts in place"):
            read_corpus(ro)
    assert contents(work) == new
    import h5py
    with h5py.File(work, "r") as f:
        assert not [k for k in f.keys() if k.startswith(TMP_PREFIX)]


def test_concurrent_update_is_refused_naming_the_file(tmp_path, files, monkeypatch):
    """An update whose file was updated by another one after it read it refuses to write,
    naming the file (it used to fail with "?: /obs/_index has ... entries")."""
    paths, _, _ = files
    work = str(tmp_path / "c.h5")
    shutil.copyfile(paths["base"], work)
    stage = sys.modules["gputext.cluster.dclus.update"]
    real = stage.local_graph
    ran = []

    def meanwhile(*args, **kw):
        if not ran:
            ran.append(1)
            dclus.update(work, paths["add2"], work, device="cpu")  # another update lands in between
        return real(*args, **kw)

    monkeypatch.setattr(stage, "local_graph", meanwhile)
    with pytest.raises(InputError, match=f"{work} holds 70 documents, but 50 were read from it"):
        dclus.update(work, paths["add1"], work, device="cpu")


def test_a_small_result_is_small(tmp_path):
    """Edge datasets are chunked to their size (a 451-document result was 9.7 MB: 1M-entry chunks)."""
    old, _, _ = corpora(12, 451, 451, 451)
    path = str(tmp_path / "c.h5")
    base_file(old, 0.3, path)
    assert os.path.getsize(path) < 400_000
    with __import__("h5py").File(path, "r") as f:
        assert f[dclus.GRAPH_KEY]["adj_indices"].chunks[0] <= 1 << 18


# the run parameters name the device that wrote the file; everything else must be equal
BACKEND_KEYS = ("uns/gputext/star/backend", "uns/gputext/star/update/backend")


@pytest.mark.gpu
def test_in_place_update_on_cuda_equals_the_cpu_twin_and_survives_a_kill(tmp_path):
    """On the GPU host: the staged update (scoring on the device) writes the same file as the CPU
    twin, in place and after a kill at the commit (rolled forward by the next open)."""
    old, add1, add2 = corpora(14, 2400, 1600, 2000, n_terms=300)
    base = str(tmp_path / "base.h5")
    base_file(old, 0.25, base, compression=None)
    add_path = str(tmp_path / "add1.h5")
    write_corpus(add1, add_path)
    paths = {d: str(tmp_path / f"{d}.h5") for d in ("cpu", "cuda", "killed")}
    for d in ("cpu", "cuda"):
        shutil.copyfile(base, paths[d])
        dclus.update(paths[d], add_path, paths[d], device=d, compression=None)
    assert_same_file(paths["cuda"], paths["cpu"], ignore=BACKEND_KEYS)
    shutil.copyfile(base, paths["killed"])
    r = subprocess.run([sys.executable, "-m", "gputext", "cluster", "star", "--update", paths["killed"], "--add",
                        add_path, "-o", paths["killed"], "--device", "cuda", "--quiet", "--no-compression"],
                       env=child_env(**{CRASH_ENV: "committed"}), capture_output=True, timeout=600)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    assert contents(paths["killed"]) == contents(paths["cpu"])
    dclus.update(paths["killed"], add2, paths["killed"], device="cuda", compression=None)
    dclus.update(paths["cpu"], add2, paths["cpu"], device="cpu", compression=None)
    assert_same_file(paths["killed"], paths["cpu"], ignore=BACKEND_KEYS)
