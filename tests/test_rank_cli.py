"""`gputext rank train | predict | eval`: outputs, progress, the model file, and one-line errors (exit 2)."""
from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from gputext.cli import cli
from gputext.io import Corpus, read_corpus, write_corpus
from gputext.rank.model import RankModel
from test_rank_reference import pair_list, random_problem


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def write_problem(path, seed, drop=(), relevance=None, n_features=4, **kw):
    X, qid, rel, _ = random_problem(seed, n_queries=8, max_docs=12, n_features=n_features, n_levels=4, **kw)
    obs = {"qid": qid, "relevance": rel if relevance is None else relevance(rel)}
    for key in drop:
        obs.pop(key)
    write_corpus(Corpus(X, obs=obs), str(path))
    return X, qid, rel


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rank")
    X, qid, rel = write_problem(d / "train.h5", 1)
    Xt, qt, rt = write_problem(d / "test.h5", 2)
    res = run("rank", "train", d / "train.h5", "-C", "0.5", "--eps", "1e-5", "-o", d / "model.h5", "--device", "cpu")
    assert res.exit_code == 0, res.output
    return dict(dir=d, train=d / "train.h5", test=d / "test.h5", model=d / "model.h5", train_log=res.output,
                test_data=(Xt, qt, rt))


def test_train_writes_model_and_progress(files):
    log = files["train_log"]
    assert "iter   0" in log and "|grad|" in log and "CG" in log and "wrote" in log
    m = RankModel.load(str(files["model"]))
    assert m.n_features == 4 and m.C == 0.5 and m.eps == 1e-5 and m.converged and m.iterations >= 1
    assert m.grad_norm <= 1e-5 * m.grad_norm0
    with h5py.File(files["model"], "r") as f:
        assert f["uns/gputext/rank/w"].dtype == np.float64 and f.attrs["gputext-format"] == "rank-model"
        for key in ("C", "eps", "iterations", "n_features"):
            assert f"uns/gputext/rank/{key}" in f


def test_quiet_train_prints_nothing(files, tmp_path):
    res = run("rank", "train", files["train"], "-o", tmp_path / "m.h5", "--device", "cpu", "--quiet")
    assert res.exit_code == 0 and res.output == ""


def test_predict_keeps_rows_qid_relevance(files, tmp_path):
    out = tmp_path / "scores.h5"
    res = run("rank", "predict", files["model"], files["test"], "-o", out, "--device", "cpu")
    assert res.exit_code == 0, res.output
    Xt, qt, rt = files["test_data"]
    c = read_corpus(str(out))
    w = RankModel.load(str(files["model"])).w
    assert c.obs["score"].dtype == np.float32
    np.testing.assert_allclose(c.obs["score"], (Xt.toarray().astype(np.float64) @ w).astype(np.float32), rtol=1e-6)
    np.testing.assert_array_equal(c.obs["qid"], qt)
    np.testing.assert_array_equal(c.obs["relevance"], rt)


def test_eval_table_and_json(files):
    res = run("rank", "eval", files["model"], files["test"], "--device", "cpu")
    assert res.exit_code == 0, res.output
    for word in ("pairwise accuracy", "NDCG@1 ", "NDCG@5 ", "NDCG@10", "MAP"):
        assert word in res.output
    res = run("rank", "eval", files["model"], files["test"], "--json", "--device", "cpu")
    m = json.loads(res.output)
    Xt, qt, rt = files["test_data"]
    s = Xt.toarray().astype(np.float64) @ RankModel.load(str(files["model"])).w
    I, J = pair_list(qt, rt)
    assert m["pairs"] == len(I) and m["correct_pairs"] == int(np.sum(s[I] > s[J]))
    assert {"ndcg@1", "ndcg@5", "ndcg@10", "map", "pairwise_accuracy"} <= set(m)


def test_C_grid_picks_best_on_validation(files, tmp_path):
    out = tmp_path / "grid.h5"
    res = run("rank", "train", files["train"], "--valid", files["test"], "--C-grid", "10,0.01,1", "-o", out,
              "--device", "cpu", "--select-by", "pairwise-accuracy")
    assert res.exit_code == 0, res.output
    m = RankModel.load(str(out))
    assert m.C_grid.tolist() == [0.01, 1.0, 10.0] and m.selected_by == "pairwise-accuracy"
    best = m.C_grid[int(np.argmax(m.C_grid_scores))]  # argmax: first (smallest C) among ties
    assert m.C == best and "chose C" in res.output
    res = run("rank", "eval", out, files["test"], "--json", "--device", "cpu")
    assert json.loads(res.output)["pairwise_accuracy"] == pytest.approx(m.C_grid_scores.max())


def test_valid_without_grid_reports_metrics(files, tmp_path):
    res = run("rank", "train", files["train"], "--valid", files["test"], "-o", tmp_path / "m.h5", "--device", "cpu")
    assert res.exit_code == 0 and "validation: pairwise accuracy" in res.output


def _error(res, *words):
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("Error: ")
    for word in words:
        assert word in line, line


def test_missing_qid_and_relevance(tmp_path):
    write_problem(tmp_path / "noq.h5", 3, drop=("qid",))
    write_problem(tmp_path / "norel.h5", 3, drop=("relevance",))
    _error(run("rank", "train", tmp_path / "noq.h5", "-o", tmp_path / "m.h5"), "/obs/qid is missing")
    _error(run("rank", "train", tmp_path / "norel.h5", "-o", tmp_path / "m.h5"), "/obs/relevance is missing")
    assert not (tmp_path / "m.h5").exists()


def test_all_labels_equal_and_nan_relevance(tmp_path):
    write_problem(tmp_path / "flat.h5", 3, relevance=lambda r: np.ones_like(r))
    _error(run("rank", "train", tmp_path / "flat.h5", "-o", tmp_path / "m.h5"), "no preference pairs")
    write_problem(tmp_path / "nan.h5", 3, relevance=lambda r: np.where(np.arange(len(r)) == 5, np.nan, r).astype(np.float32))
    _error(run("rank", "train", tmp_path / "nan.h5", "-o", tmp_path / "m.h5"), "relevance", "NaN")


def test_feature_count_mismatch(files, tmp_path):
    write_problem(tmp_path / "wide.h5", 4, n_features=6)
    _error(run("rank", "eval", files["model"], tmp_path / "wide.h5"), "6 features", "model has 4")
    _error(run("rank", "predict", files["model"], tmp_path / "wide.h5", "-o", tmp_path / "s.h5"), "6 features")
    _error(run("rank", "train", files["train"], "--valid", tmp_path / "wide.h5", "--C-grid", "1,2", "-o",
               tmp_path / "m.h5"), "6 features")
    _error(run("rank", "train", files["train"], "--valid", tmp_path / "wide.h5", "-o", tmp_path / "m.h5"), "6 features")
    assert not (tmp_path / "s.h5").exists() and not (tmp_path / "m.h5").exists()


def test_bad_options(files, tmp_path):
    _error(run("rank", "train", files["train"], "--C-grid", "1,10", "-o", tmp_path / "m.h5"), "--valid")
    _error(run("rank", "train", files["train"], "--valid", files["test"], "--C-grid", "1,x", "-o", tmp_path / "m.h5"),
           "--C-grid")
    _error(run("rank", "train", files["train"], "--valid", files["test"], "--C-grid", "1,-2", "-o", tmp_path / "m.h5"),
           "--C-grid")
    _error(run("rank", "train", files["train"], "-C", "0", "-o", tmp_path / "m.h5"), "-C must be a positive")
    _error(run("rank", "train", files["train"], "--eps", "0", "-o", tmp_path / "m.h5"), "eps")
    _error(run("rank", "train", files["train"], "-o", "-"), "model is an HDF5 file")


def test_bad_model_files(files, tmp_path):
    _error(run("rank", "eval", tmp_path / "absent.h5", files["test"]), "no such file")
    _error(run("rank", "eval", files["test"], files["test"]), "gputext corpus, not a model")
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all")
    _error(run("rank", "eval", tmp_path / "junk.h5", files["test"]), "not a readable HDF5")
    broken = tmp_path / "broken.h5"
    broken.write_bytes(files["model"].read_bytes())
    with h5py.File(broken, "a") as f:
        del f["uns/gputext/rank/w"]
    _error(run("rank", "eval", broken, files["test"]), "/uns/gputext/rank/w is missing")
    broken.write_bytes(files["model"].read_bytes())
    with h5py.File(broken, "a") as f:
        del f["uns/gputext/rank/n_features"]
        f["uns/gputext/rank/n_features"] = np.int64(9)
    _error(run("rank", "eval", broken, files["test"]), "n_features = 9")


def test_cuda_without_gpu_is_an_error(files, tmp_path):
    from gputext.backend import cuda_status
    if cuda_status()[0]:
        pytest.skip("a CUDA device (or the simulator) is available here")
    _error(run("rank", "train", files["train"], "-o", tmp_path / "m.h5", "--device", "cuda"), "CUDA is not usable")


def test_every_command_has_an_example():
    for name in ("train", "predict", "eval"):
        res = run("rank", name, "--help")
        assert res.exit_code == 0 and "Example:" in res.output and "GPU" in res.output


@pytest.mark.realdata
def test_letor_sample_trains_and_beats_chance(shared_datasets, tmp_path):
    src = shared_datasets / "letor-sample"
    for part, extra in (("train", []), ("test", ["--vocab-from", tmp_path / "train.h5"])):
        res = run("corpus", "build", src / f"rank.{part}", "--query-groups", src / f"rank.{part}.query", *extra, "-o",
                  tmp_path / f"{part}.h5", "--quiet")
        assert res.exit_code == 0, res.output
    res = run("rank", "train", tmp_path / "train.h5", "--eps", "1e-3", "-o", tmp_path / "m.h5", "--device", "cpu", "-q")
    assert res.exit_code == 0, res.output
    m = json.loads(run("rank", "eval", tmp_path / "m.h5", tmp_path / "test.h5", "--json", "--device", "cpu").output)
    assert m["queries"] == 50 and m["documents"] == 768
    assert m["pairwise_accuracy"] > 0.6 and m["ndcg@10"] > 0.6
