"""`gputext corpus synth`: presets, overrides, errors (exit 2, one line, no output left)."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from gputext.cli import cli
from gputext.datasets.presets import PRESETS
from gputext.datasets.synth import make_corpus
from gputext.io import read_corpus


def run(*args):
    return CliRunner().invoke(cli, ["corpus", "synth", *args])


def one_line_error(result, text):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("Error: "), result.output
    assert text in lines[0], lines[0]


def test_list_presets_names_every_preset_with_shape_and_source():
    result = run("--list-presets")
    assert result.exit_code == 0, result.output
    for name, preset in PRESETS.items():
        assert f"\n{name} " in "\n" + result.output
        assert preset["source"] in result.output
    assert "Table 3" in result.output and "Table 1" in result.output


def test_demo_preset_writes_the_demo_corpus(tmp_path):
    out = tmp_path / "corpus.h5"
    result = run("--preset", "demo", "-o", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    assert result.output == ""  # --quiet
    c = read_corpus(str(out))
    assert c.X.shape == (3000, 2000)
    assert len(c.obs["label"].categories) == 6
    assert c.params["weighting"] == "tfidf" and c.params["command"] == "corpus synth"
    # the file is exactly the library's in-memory corpus
    ref = make_corpus(3000, 2000, 40, 6, seed=0)
    assert (c.X != ref.X).nnz == 0


def test_overrides_replace_preset_fields(tmp_path):
    out = tmp_path / "small.h5"
    result = run("--preset", "demo", "--n-docs", "400", "--n-classes", "3", "--weighting", "binary",
                 "--multilabel", "--seed", "4", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "400 docs x 2,000 terms" in result.output
    c = read_corpus(str(out))
    assert c.X.shape == (400, 2000) and np.all(c.X.data == 1)
    assert c.obsm["labels"].shape == (400, 3)
    assert c.params["synth"]["seed"] == 4 and c.params["weighting"] == "binary"


def test_ltr_preset_with_overrides(tmp_path):
    out = tmp_path / "ltr.h5"
    result = run("--preset", "ltr-demo", "--n-queries", "20", "--n-features", "8", "-o", str(out))
    assert result.exit_code == 0, result.output
    c = read_corpus(str(out))
    assert c.X.shape == (600, 8) and len(np.unique(c.obs["qid"])) == 20
    assert "preference pairs" in result.output


def test_without_preset_kind_and_sizes(tmp_path):
    out = tmp_path / "x.h5"
    result = run("--n-docs", "100", "--n-terms", "500", "--terms-per-doc", "10", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert read_corpus(str(out)).X.shape == (100, 500)
    result = run("--kind", "ltr", "--n-queries", "7", "--docs-per-query", "3", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert read_corpus(str(out)).X.shape == (21, 46)


def test_idf_from_cli(tmp_path):
    index, queries = tmp_path / "index.h5", tmp_path / "queries.h5"
    assert run("--preset", "demo", "-o", str(index), "-q").exit_code == 0
    result = run("--preset", "demo", "--n-docs", "50", "--seed", "9", "--idf-from", str(index), "-o", str(queries), "-q")
    assert result.exit_code == 0, result.output
    a, b = read_corpus(str(index)), read_corpus(str(queries))
    np.testing.assert_array_equal(a.var["idf"], b.var["idf"])
    assert b.params["idf_from"] == str(index)


def test_stdout_output_is_an_hdf5_file():
    result = CliRunner().invoke(cli, ["corpus", "synth", "--preset", "demo", "--n-docs", "20", "-o", "-", "-q"])
    assert result.exit_code == 0
    assert result.stdout_bytes[:8] == b"\x89HDF\r\n\x1a\n"


@pytest.mark.parametrize("args,message", [
    (["--preset", "nope"], "unknown preset 'nope': expected one of demo, ltr-demo"),
    (["--preset", "mq2007", "--n-terms", "5"], "--n-terms does not apply to learning-to-rank data"),
    (["--preset", "demo", "--n-queries", "5"], "--n-queries does not apply to a text corpus"),
    (["--n-docs", "10"], "give --preset NAME (see --list-presets) or --n-terms"),
    (["--preset", "demo", "--n-docs", "0"], "--n-docs must be >= 1, got 0"),
    (["--preset", "demo", "--terms-per-doc", "1500"], "terms_per_doc (median distinct terms per document) must be in"),
    (["--preset", "demo", "--idf-from", "missing.h5"], "missing.h5: no such file"),
    (["--preset", "mq2007-list", "--n-levels", "3"], "--n-levels does not apply to --relevance list"),
    (["--preset", "ltr-demo", "--kind", "text"], "--kind text does not match preset 'ltr-demo'"),
])
def test_bad_input_is_one_line_and_exit_2_with_no_output(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["corpus", "synth", *args, "-o", "out.h5"])
    one_line_error(result, message)
    assert list(tmp_path.iterdir()) == []  # no output, no temporary left behind


def test_idf_from_a_non_synthetic_vocabulary_is_refused(tmp_path):
    import scipy.sparse as sp

    from gputext.io import Corpus, write_corpus
    ref = tmp_path / "ref.h5"
    write_corpus(Corpus(sp.csr_matrix(np.eye(4, dtype=np.float32)), terms=np.array(list("abcd"), dtype=object),
                        var={"df": np.ones(4, dtype=np.int64)}), str(ref))
    result = run("--n-docs", "5", "--terms-per-doc", "1", "--n-classes", "1", "--idf-from", str(ref),
                 "-o", str(tmp_path / "q.h5"))
    one_line_error(result, "expected the synthetic t0..t3")


def test_anndata_reads_a_synthetic_corpus(tmp_path):
    anndata = pytest.importorskip("anndata")
    out = tmp_path / "ml.h5"
    assert run("--preset", "demo", "--n-docs", "100", "--multilabel", "-o", str(out), "-q").exit_code == 0
    adata = anndata.read_h5ad(str(out))
    assert adata.shape == (100, 2000)
    assert adata.obsm["labels"].shape == (100, 6)
    assert list(adata.var_names[:2]) == ["t0", "t1"]
