"""Interop: AnnData in and out of gputext.io, `corpus build --format npz` (+ labels), `corpus export
--to svmlight|npz|csv` round trips, and `knn search -o nn.csv|.jsonl|.parquet` tables."""
import csv
import json

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from gputext.cli import cli
from gputext.io import Categorical, Corpus, from_anndata, read_corpus, to_anndata, write_corpus


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def ok(*args):
    r = run(*args)
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture
def corpus():
    X = sp.random(12, 9, density=0.3, random_state=3, format="csr", dtype=np.float32)
    X = sp.csr_matrix(X + sp.csr_matrix(([0.5], ([0], [0])), shape=X.shape, dtype=np.float32))  # row 0 starts with 1:0.5
    label = Categorical(np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, -1], np.int32),
                        np.array(["ant", "bee", "cat"], dtype=object))
    return Corpus(X, [f"d{i}" for i in range(12)], [f"w{j}" for j in range(9)],
                  {"label": label, "qid": np.repeat(np.arange(4), 3).astype(np.int32)})


def test_anndata_round_trip_through_files(corpus, tmp_path):
    anndata = pytest.importorskip("anndata")
    adata = to_anndata(corpus)
    assert isinstance(adata, anndata.AnnData) and list(adata.obs["label"].cat.categories) == ["ant", "bee", "cat"]
    write_corpus(adata, str(tmp_path / "a.h5"))  # an AnnData is accepted by write_corpus
    back = read_corpus(str(tmp_path / "a.h5"))
    assert (back.X != corpus.X).nnz == 0
    np.testing.assert_array_equal(back.doc_ids, corpus.doc_ids)
    np.testing.assert_array_equal(back.labels.codes, corpus.labels.codes)
    np.testing.assert_array_equal(back.obs["qid"], corpus.obs["qid"])
    again = read_corpus(str(tmp_path / "a.h5"), as_anndata=True)
    assert again.shape == (12, 9) and list(again.var_names) == list(corpus.terms)
    c2 = from_anndata(anndata.AnnData(X=corpus.X.toarray()))  # dense X, no annotations
    assert (c2.X != corpus.X).nnz == 0 and c2.n_docs == 12


def test_npz_build_export_round_trip(corpus, tmp_path):
    write_corpus(corpus, str(tmp_path / "c.h5"))
    ok("corpus", "export", tmp_path / "c.h5", "--to", "npz", "-o", tmp_path / "c.npz", "-q")
    assert (tmp_path / "c.labels.txt").read_text().split("\n")[:3] == ["ant", "bee", "cat"]
    ok("corpus", "build", tmp_path / "c.npz", "--labels", tmp_path / "c.labels.txt", "-o", tmp_path / "b.h5", "-q")
    back = read_corpus(str(tmp_path / "b.h5"))
    assert (back.X != corpus.X).nnz == 0  # weighting none: the values as saved
    np.testing.assert_array_equal(back.labels.values(), corpus.labels.values())
    r = run("corpus", "build", tmp_path / "c.npz", "--labels", tmp_path / "c.h5", "-o", tmp_path / "x.h5")
    assert r.exit_code == 2 and "HDF5" in r.output  # one clear line, no traceback
    r = run("corpus", "build", tmp_path / "c.labels.txt", "--format", "tsv", "--labels", tmp_path / "c.labels.txt",
            "-o", tmp_path / "x.h5")
    assert r.exit_code == 2 and "--labels applies to npz input" in r.output


def test_svmlight_export_round_trip_with_qid(corpus, tmp_path):
    corpus.obs["relevance"] = np.arange(12, dtype=np.float32) % 3
    write_corpus(corpus, str(tmp_path / "c.h5"))
    ok("corpus", "export", tmp_path / "c.h5", "--to", "svmlight", "-o", tmp_path / "c.svm", "-q")
    first = (tmp_path / "c.svm").read_text().splitlines()[0]
    assert first.startswith("0 qid:0 1:0.5")
    ok("corpus", "build", tmp_path / "c.svm", "-o", tmp_path / "b.h5", "-q")
    back = read_corpus(str(tmp_path / "b.h5"))
    assert np.array_equal(back.X.toarray(), corpus.X.toarray()[:, :back.n_terms])
    np.testing.assert_array_equal(back.obs["qid"], corpus.obs["qid"])
    np.testing.assert_array_equal(back.obs["relevance"], corpus.obs["relevance"])


def test_csv_export_of_a_result_file(corpus, tmp_path):
    write_corpus(corpus, str(tmp_path / "c.h5"))
    ok("knn", "search", "--index", tmp_path / "c.h5", "--exclude-self", "-k", 2, "--device", "cpu", "-q",
       "-o", tmp_path / "nn.h5")
    ok("corpus", "export", tmp_path / "nn.h5", "--to", "csv", "-o", tmp_path / "nn_export.csv", "-q")
    rows = list(csv.DictReader(open(tmp_path / "nn_export.csv")))
    res = read_corpus(str(tmp_path / "nn.h5"))
    assert len(rows) == 12 and rows[0]["id"] == "d0" and rows[0]["label"] == "ant" and rows[11]["label"] == ""
    assert [int(rows[3][f"knn_indices_{j}"]) for j in (1, 2)] == res.obsm["knn_indices"][3].tolist()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_knn_search_writes_tables_by_extension(corpus, tmp_path, suffix):
    write_corpus(corpus, str(tmp_path / "c.h5"))
    if suffix == ".parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            r = run("knn", "search", "--index", tmp_path / "c.h5", "--exclude-self", "-k", 3, "--device", "cpu",
                    "-o", tmp_path / "nn.parquet")
            assert r.exit_code == 2 and "needs pyarrow" in r.output and not (tmp_path / "nn.parquet").exists()
            return
    ok("knn", "search", "--index", tmp_path / "c.h5", "--exclude-self", "-k", 3, "--device", "cpu", "-q",
       "-o", tmp_path / "nn.h5")
    ok("knn", "search", "--index", tmp_path / "c.h5", "--exclude-self", "-k", 3, "--device", "cpu", "-q",
       "-o", tmp_path / f"nn{suffix}")
    res = read_corpus(str(tmp_path / "nn.h5"))
    ids = [[f"d{j}" for j in row] for row in res.obsm["knn_indices"]]
    scores = res.obsm["knn_scores"].astype(np.float64).tolist()
    if suffix == ".csv":
        rows = list(csv.DictReader(open(tmp_path / "nn.csv")))
        got_ids = [[r[f"neighbor_{j}"] for j in (1, 2, 3)] for r in rows]
        got_scores = [[float(r[f"score_{j}"]) for j in (1, 2, 3)] for r in rows]
    elif suffix == ".jsonl":
        rows = [json.loads(line) for line in open(tmp_path / "nn.jsonl")]
        got_ids, got_scores = [r["neighbors"] for r in rows], [r["scores"] for r in rows]
    else:
        import pyarrow.parquet as pq
        table = pq.read_table(tmp_path / "nn.parquet").to_pydict()
        rows = [{"id": i} for i in table["id"]]
        got_ids, got_scores = table["neighbors"], table["scores"]
    assert [r["id"] for r in rows] == [f"d{i}" for i in range(12)]
    assert got_ids == ids and got_scores == scores
