"""`gputext corpus build | info | split` through click: results, and bad input refused cleanly
(exit 2, one line, no output file left behind)."""
import json
import os

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from gputext.cli import cli
from gputext.io import read_corpus

TSV = "sport\tthe team won the match\npolitics\ta vote was counted\nsport\tmatch of tennis\n" \
      "politics\tthe minister vote\ntech\tgpu kernels\ntech\tgpu count\n"


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


@pytest.fixture()
def corpus_file(tmp_path):
    src = tmp_path / "train.tsv"
    src.write_text(TSV)
    out = str(tmp_path / "train.h5")
    result = run("corpus", "build", str(src), "-o", out)
    assert result.exit_code == 0, result.output
    return out


def files_in(folder):
    return sorted(os.listdir(folder))


def test_build_info_and_json(corpus_file):
    result = run("corpus", "info", corpus_file)
    assert result.exit_code == 0, result.output
    assert "documents   6" in result.output and "3 classes" in result.output and "tfidf" in result.output
    result = run("corpus", "info", corpus_file, "--json")
    summary = json.loads(result.stdout)
    assert summary["n_docs"] == 6 and summary["labels"]["counts"] == {"politics": 2, "sport": 2, "tech": 2}
    c = read_corpus(corpus_file)
    assert summary["nnz"] == c.X.nnz and summary["n_terms"] == c.n_terms
    assert summary["device_bytes"]["csr"] == c.X.nnz * 8 + 7 * 8
    assert summary["device_bytes"]["inverted_index"] == c.X.nnz * 8 + (c.n_terms + 1) * 8 + 6 * 8


def test_build_reports_on_stderr_and_quiet_silences_it(tmp_path):
    src = tmp_path / "a.tsv"
    src.write_text(TSV)
    loud = run("corpus", "build", str(src), "-o", str(tmp_path / "a.h5"))
    assert "wrote" in loud.stderr and "6 documents" in loud.stderr and loud.stdout == ""
    quiet = run("corpus", "build", str(src), "-o", str(tmp_path / "b.h5"), "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_build_reads_stdin_and_vocab_from(tmp_path, corpus_file):
    out = str(tmp_path / "test.h5")
    result = run("corpus", "build", "-", "--format", "tsv", "--vocab-from", corpus_file, "-o", out, "-q",
                 input="tech\tgpu kernels zebra\nscience\tmoon\n")
    assert result.exit_code == 0, result.output
    test, train = read_corpus(out), read_corpus(corpus_file)
    assert list(test.terms) == list(train.terms) and test.params["n_oov"] == 2
    assert list(test.labels.categories) == ["politics", "sport", "tech", "science"]


def test_split_holdout_and_folds(tmp_path, corpus_file):
    result = run("corpus", "split", corpus_file, "--test-size", "0.5", "--seed", "1", "-o", str(tmp_path / "s"), "-q")
    assert result.exit_code == 0, result.output
    assert files_in(tmp_path / "s") == ["test.h5", "train.h5"]
    test = read_corpus(str(tmp_path / "s" / "test.h5"))
    assert test.n_docs == 3 and sorted(test.labels.codes.tolist()) == [0, 1, 2]
    result = run("corpus", "split", corpus_file, "--folds", "2", "-o", str(tmp_path / "f"), "-q")
    assert result.exit_code == 0 and files_in(tmp_path / "f") == ["fold1", "fold2"]
    result = run("corpus", "split", corpus_file, "--folds", "2", "--test-size", "0.2", "-o", str(tmp_path / "g"))
    assert result.exit_code == 2 and "exclude each other" in result.stderr


# ----------------------------------------------------------------------------- bad input


def assert_refused(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def truncated_corpus(tmp_path, corpus_file):
    path = tmp_path / "truncated.h5"
    data = open(corpus_file, "rb").read()
    path.write_bytes(data[: len(data) // 3])
    return str(path)


def foreign_hdf5(tmp_path):
    path = str(tmp_path / "foreign.h5")
    with h5py.File(path, "w") as f:
        f["weights"] = np.arange(3)
    return path


def put(path, data):
    """Write text or bytes to ``path``; return it as a str."""
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return str(path)


def flat_dir(d):
    (d / "flat").mkdir()
    return put(d / "flat" / "x.txt", "hi")[: -len("/x.txt")]


BUILD_CASES = {
    "missing file": (lambda d: str(d / "nope.tsv"), [], ["nope.tsv: no such file or directory"]),
    "empty file": (lambda d: put(d / "empty.tsv", ""), [], ["file is empty"]),
    "binary garbage": (lambda d: put(d / "garbage.bin", bytes(range(256)) * 40),
                       [], ["NUL bytes"]),
    "binary garbage as tsv": (lambda d: put(d / "g.tsv", b"\x00\x01\xff" * 100),
                              ["--format", "tsv"], ["NUL bytes"]),
    "malformed svmlight": (lambda d: put(d / "r.svm", "1 1:0.5\n0 2:0.1\n1 3:x\n"),
                           [], ["r.svm:3:", "not INDEX:VALUE"]),
    "all stopwords": (lambda d: put(d / "s.tsv", "a\tthe of and\nb\tit is\n"),
                      [], ["no terms left in 2 documents"]),
    "min-df removes everything": (lambda d: put(d / "m.tsv", "a\tx y\nb\tz w\n"),
                                  ["--min-df", "2"], ["no terms left"]),
    "blank lines only": (lambda d: put(d / "b.tsv", "\n\n  \n"), ["--format", "tsv"],
                         ["no documents"]),
    "no class folders": (flat_dir,
                         ["--format", "dir"], ["no class folders"]),
    "an HDF5 file as input": (lambda d: foreign_hdf5(d), [], ["is an HDF5 file"]),
    "unknown stopword file": (lambda d: put(d / "ok.tsv", "a\tb\n"),
                              ["--stopwords", "missing.txt"], ["--stopwords 'missing.txt'"]),
}


@pytest.mark.parametrize("case", list(BUILD_CASES))
def test_build_refuses_bad_input_cleanly(tmp_path, case):
    make, extra, fragments = BUILD_CASES[case]
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = make(inputs)
    outdir = tmp_path / "out"
    outdir.mkdir()
    result = run("corpus", "build", path, "-o", str(outdir / "c.h5"), *extra)
    assert_refused(result, *fragments)
    assert files_in(outdir) == [], "no output (or temporary) file may be left behind"


def test_unknown_format_is_refused_by_click(tmp_path):
    (tmp_path / "a.tsv").write_text(TSV)
    result = run("corpus", "build", str(tmp_path / "a.tsv"), "--format", "docx", "-o", str(tmp_path / "a.h5"))
    assert result.exit_code == 2 and "Invalid value for '--format'" in result.output
    assert not (tmp_path / "a.h5").exists()


@pytest.mark.parametrize("command", ["info", "split", "vocab-from"])
@pytest.mark.parametrize("kind", ["truncated", "foreign", "missing", "empty"])
def test_hdf5_readers_refuse_bad_files(tmp_path, corpus_file, command, kind):
    bad = {"truncated": lambda: truncated_corpus(tmp_path, corpus_file),
           "foreign": lambda: foreign_hdf5(tmp_path),
           "missing": lambda: str(tmp_path / "absent.h5"),
           "empty": lambda: put(tmp_path / "empty.h5", b"")}[kind]()
    outdir = tmp_path / "out"
    outdir.mkdir()
    if command == "info":
        result = run("corpus", "info", bad)
    elif command == "split":
        result = run("corpus", "split", bad, "-o", str(outdir / "split"))
    else:
        (tmp_path / "q.tsv").write_text("x\tgpu\n")
        result = run("corpus", "build", str(tmp_path / "q.tsv"), "--vocab-from", bad, "-o", str(outdir / "q.h5"))
    assert_refused(result, os.path.basename(bad))
    assert files_in(outdir) == []


def test_malformed_query_groups_is_refused(tmp_path):
    (tmp_path / "r.train").write_text("1 1:1\n0 2:1\n")
    (tmp_path / "r.query").write_text("1\nx\n")
    result = run("corpus", "build", str(tmp_path / "r.train"), "--query-groups", str(tmp_path / "r.query"),
                 "-o", str(tmp_path / "r.h5"))
    assert_refused(result, "r.query:2:", "positive integer")
    assert not (tmp_path / "r.h5").exists()
