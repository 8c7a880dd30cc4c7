"""`gputext knn index` and `gputext knn search` from the command line."""
import os

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from engine_reference import random_corpus, same_up_to_ties, topk
from gputext.cli import cli
from gputext.io import Corpus, read_corpus, write_corpus


@pytest.fixture
def files(tmp_path):
    X = random_corpus(120, 40, 0.1, seed=21, duplicates=((0, 1),))
    Q = random_corpus(9, 40, 0.15, seed=22)
    terms = [f"w{j}" for j in range(40)]
    write_corpus(Corpus(X, terms=terms), str(tmp_path / "train.h5"))
    write_corpus(Corpus(Q, terms=terms), str(tmp_path / "q.h5"))
    write_corpus(Corpus(Q[:, :30], terms=terms[:30]), str(tmp_path / "other.h5"))
    return tmp_path, X, Q


def run(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("metric", ["cosine", "l2"])
def test_search_writes_exact_neighbours(files, metric):
    d, X, Q = files
    r = run("knn", "search", "--index", str(d / "train.h5"), "--queries", str(d / "q.h5"), "-k", "5",
            "--metric", metric, "--device", "cpu", "-o", str(d / "nn.h5"))
    assert r.exit_code == 0, r.output
    res = read_corpus(str(d / "nn.h5"))
    ref_idx, ref_sc = topk(X, Q, 5, metric)
    assert same_up_to_ties(res.obsm["knn_indices"], res.obsm["knn_scores"], ref_idx, ref_sc)
    assert res.params["knn"]["metric"] == metric and res.params["knn"]["k"] == 5
    assert res.params["knn"]["backend"] == "cpu"


def test_index_file_then_search_exclude_self(files):
    d, X, _ = files
    assert run("knn", "index", str(d / "train.h5"), "-o", str(d / "idx.h5"), "-q").exit_code == 0
    r = run("knn", "search", "--index", str(d / "idx.h5"), "--exclude-self", "-k", "3", "--device", "cpu",
            "-q", "-o", str(d / "self.h5"))
    assert r.exit_code == 0, r.output
    idx = read_corpus(str(d / "self.h5")).obsm["knn_indices"]
    assert idx.shape == (120, 3) and idx[0, 0] == 1 and idx[1, 0] == 0
    assert all(i not in row for i, row in enumerate(idx.tolist()))


@pytest.mark.parametrize("args,message", [
    (["-k", "500"], "Expected k <= 120"),
    (["--queries", "{d}/other.h5"], "different vocabulary"),
    (["--queries", "{d}/missing.h5"], "no such file"),
    (["--metric", "cosine", "--index", "{d}/garbage.h5"], "not a readable HDF5 file"),
])
def test_bad_input_is_one_line_exit_2(files, args, message):
    d, _, _ = files
    (d / "garbage.h5").write_bytes(os.urandom(2000))
    base = ["knn", "search", "--index", str(d / "train.h5"), "--queries", str(d / "q.h5"), "--device", "cpu",
            "-o", str(d / "out.h5")]
    args = [a.format(d=d) for a in args]
    for i in range(0, len(args), 2):  # later options override the base ones
        if args[i] in base:
            base[base.index(args[i]) + 1] = args[i + 1]
        else:
            base += args[i:i + 2]
    r = run(*base)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (d / "out.h5").exists() and not [p for p in os.listdir(d) if p.startswith(".out.h5")]


def test_cuda_without_gpu_refused(files, monkeypatch):
    from gputext import backend
    monkeypatch.setattr(backend, "cuda_status", lambda: (False, "no CUDA driver or GPU found"))
    monkeypatch.setattr(backend, "simulator_enabled", lambda: False)
    d, _, _ = files
    r = run("knn", "search", "--index", str(d / "train.h5"), "--queries", str(d / "q.h5"), "--device", "cuda",
            "-o", str(d / "out.h5"))
    assert r.exit_code == 2 and "CUDA is not usable" in r.output


def test_pipeline_through_stdin_and_stdout(files):
    d, X, Q = files
    data = (d / "q.h5").read_bytes()
    r = CliRunner().invoke(cli, ["knn", "search", "--index", str(d / "train.h5"), "--queries", "-", "-k", "2",
                                 "--device", "cpu", "-q", "-o", "-"], input=data)
    assert r.exit_code == 0
    (d / "piped.h5").write_bytes(r.stdout_bytes)
    assert read_corpus(str(d / "piped.h5")).obsm["knn_indices"].shape == (9, 2)
