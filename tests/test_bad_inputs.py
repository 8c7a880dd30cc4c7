"""Every command x every bad-input class: the exit code, the one-line message, inputs unchanged.

CASES is the single source of docs/bad_inputs.md: ``test_bad_input_doc_is_current`` renders the
table from it and compares (regenerate with ``GPUTEXT_WRITE_DOCS=1 pytest tests/test_bad_inputs.py
-k doc``). Each case runs in-process through the CLI (CliRunner: the same error mapping as the
command line) against a shared workspace of small files; every file there is hashed before and
after, so a case that changes any input byte fails. Cases marked ``process`` need a real process
(a closed stdout) and run as one.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from gputext.cli import cli
from gputext.io import Categorical, Corpus, write_corpus

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "bad_inputs.md"


@dataclass(frozen=True)
class Case:
    command: str       # the command as typed after `gputext`
    klass: str         # the bad-input class (a row group of the doc table)
    argv: tuple        # arguments after the command; {name} is a workspace file
    code: int          # expected exit code
    message: str       # a fragment of the one-line message (stderr) or of a warning for exit 0
    process: bool = False  # run as a real process (needs a closed stdout, ...)
    matrix: str = ""       # the argument pattern of a READERS x classes case (rendered as a matrix)
    stdin: str = ""        # a workspace file given as standard input (a real process: exit 139 is caught)

    @property
    def id(self) -> str:
        return f"{self.command}: {self.klass}: {' '.join(self.argv)}{' < ' + self.stdin if self.stdin else ''}"


def C(command, klass, args, code, message, process=False, stdin=""):
    return Case(command, klass, tuple(args.split()), code, message, process or bool(stdin), stdin=stdin)


SAME = "output = input"
CASES = [
    # 1. an output that is an input (paths, symlinks, hard links), 7. outputs checked before any work
    C("corpus build", SAME, "{x.tab} -o {x.tab}", 2, "-o {x.tab} is the same file as INPUT"),
    C("corpus build", SAME, "{x.tab} --vocab-from {train.h5} -o {train.h5}", 2, "is the same file as --vocab-from"),
    C("corpus build", "output inside the input folder", "{news} --format dir -o {news}/out.h5", 2,
      "lies inside the input folder INPUT news"),
    C("corpus split", SAME, "{sp/train.h5} -o {sp}", 2, "is the same file as CORPUS"),
    C("corpus synth", SAME, "--preset demo --n-docs 10 --idf-from {train.h5} -o {train.h5}", 2,
      "is the same file as --idf-from"),
    C("knn index", SAME, "{train.h5} -o {train.h5}", 2, "is the same file as CORPUS"),
    C("knn search", SAME, "--index {train.h5} --queries {test.h5} -k 2 -o {train.h5}", 2, "same file as --index"),
    C("knn search", SAME + " (symlink)", "--index {train.h5} --queries {test.h5} -k 2 -o {link.h5}", 2,
      "same file as --index"),
    C("knn search", SAME + " (hard link)", "--index {train.h5} --queries {hard.h5} -k 2 -o {test.h5}", 2,
      "same file as --queries"),
    C("knn classify", SAME, "--train {train.h5} --test {test.h5} -o {test.h5}", 2, "same file as --test"),
    C("knn metafeatures", SAME, "--train {train.h5} --test {test.h5} -o {train.h5}", 2, "same file as --train"),
    C("knn metafeatures", SAME, "--train {train.h5} --test {test.h5} -o m.h5 --train-output {test.h5}", 2,
      "same file as --test"),
    C("knn metafeatures", "two outputs are one file", "--train {train.h5} --test {test.h5} -o m.h5 --train-output m.h5",
      2, "are the same file"),
    C("knn metafeatures", "output folder missing", "--train {train.h5} --test {test.h5} -o m.h5 --train-output no/dir/t.h5",
      2, "its folder no/dir does not exist"),
    C("cluster star", SAME, "{train.h5} -o {train.h5}", 2, "same file as CORPUS"),
    C("cluster star", SAME, "--update {clusters.h5} --add {test.h5} -o {test.h5}", 2, "same file as --add"),
    C("cluster stream", SAME, "{train.h5} -o {train.h5}", 2, "same file as INPUT"),
    C("cluster stream", SAME, "{train.h5} -o s.h5 --state {train.h5}", 2, "same file as INPUT"),
    C("cluster eval", SAME, "{clusters.h5} --truth {train.h5} --json {clusters.h5}", 2, "same file as CLUSTERS"),
    C("rank train", SAME, "{ltr.h5} -o {ltr.h5}", 2, "same file as TRAIN.h5"),
    C("rank predict", SAME, "{model.h5} {ltr.h5} -o {model.h5}", 2, "same file as MODEL.h5"),
    C("rank predict", SAME, "{model.h5} {ltr.h5} -o {ltr.h5}", 2, "same file as TEST.h5"),
    # 6. exit 2, not 1
    C("cluster eval", "--plot not an image", "{clusters.h5} --truth {train.h5} --plot p.txt", 2, "expected an image file"),
    C("cluster eval", "--plot not an image", "{clusters.h5} --truth {train.h5} --plot x.h5", 2, "expected an image file"),
    C("corpus build", "stdout closed", "{x.tab} -o -", 2, "-o -: standard output is closed", process=True),
    # 2., 6. corrupt corpus files: every reader, `cluster stream` included, refuses with the key
    C("cluster stream", "CSC-encoded /X (h5ad)", "{csc.h5ad} -o s.h5 --device cpu", 2, "encoding-type 'csc_matrix'"),
    C("knn search", "CSC-encoded /X (h5ad)", "--index {csc.h5ad} --exclude-self -k 2 -o s.h5 --device cpu", 2,
      "encoding-type 'csc_matrix'"),
    C("cluster stream", "indptr not monotone", "{ptr_nonmono.h5} -o s.h5 --device cpu", 2, "/X/indptr is not non-decreasing"),
    C("cluster stream", "indptr wrong length", "{ptr_len.h5} -o s.h5 --device cpu", 2, "/X/indptr has length 5"),
    C("cluster stream", "indptr wrong last value", "{ptr_last.h5} -o s.h5 --device cpu", 2, "indptr[-1] ="),
    C("cluster stream", "no shape attribute", "{noshape.h5} -o s.h5 --device cpu", 2, "has no 'shape' attribute"),
    C("cluster stream", "string data", "{strdata.h5} -o s.h5 --device cpu", 2, "/X/data has dtype object"),
    C("cluster stream", "NaN data", "{nan.h5} -o s.h5 --device cpu", 2, "NaN or infinite"),
    C("knn search", "NaN data", "--index {nan.h5} --exclude-self -k 2 -o s.h5 --device cpu", 2, "NaN or infinite"),
    C("corpus info", "newer format version", "{ver99.h5}", 2, "gputext-format-version '99' is newer"),
    C("knn search", "newer format version", "--index {ver99.h5} --exclude-self -k 2 -o s.h5", 2, "is newer"),
    C("cluster stream", "newer format version", "{ver99.h5} -o s.h5 --device cpu", 2, "is newer"),
    # 2. weights the sparse engine cannot score exactly
    C("knn search", "weight >= 2^40 (3e38)", "--index {big.h5} --exclude-self -k 2 -o s.h5 --device cpu", 2,
      "has a weight of magnitude 3e+38"),
    C("knn search", "weight >= 2^40 (3e38)", "--index {train.h5} --queries {big.h5} -k 2 -o s.h5 --device cpu", 2,
      "the query matrix has a weight of magnitude 3e+38"),
    C("knn classify", "weight >= 2^40 (3e38)", "--train {big.h5} --test {test.h5} -k 2 --device cpu", 2,
      "has a weight of magnitude 3e+38"),
    # 5. accepted-but-wrong inputs: refused with the line, or warned about
    C("corpus build", "a .tab line without a TAB", "{notab.tab} -o o.h5", 2,
      "notab.tab:5: expected 2 tab-separated columns (label, text), found 1 (no tab)"),
    C("corpus build", "a bare \\r inside a line", "{cr.tab} -o o.h5", 2, "cr.tab:4: a carriage return"),
    C("corpus build", "a bare \\r inside a line", "{cr.tsv} -o o.h5", 2, "cr.tsv:2: a carriage return"),
    C("corpus build", "a tsv line without a TAB", "{notab.tsv} -o o.h5", 2, "notab.tsv:2: expected 'label<TAB>text'"),
    C("corpus build", "duplicate document ids", "{dup.jsonl} -o o.h5", 2, "document id 'x' is used by documents 1 and 3"),
    C("corpus build", "the same input twice", "{x.tab} {x.tab} -o o.h5", 2, "x.tab is given twice"),
    C("corpus build", "invalid UTF-8 (Latin-1)", "{latin.tab} -o o.h5", 0,
      "latin.tab: not valid UTF-8 (byte 0xe9 at line 4, column 9); decoded as Latin-1"),
    C("corpus build", "one document (all-zero tf-idf)", "{one.tsv} -o o.h5", 0,
      "1 of 1 documents have all-zero tfidf weights (a one-document corpus"),
    C("knn classify", "out-of-range option", "--train {train.h5} --test {test.h5} --multilabel --threshold 2", 2,
      "--threshold 2: a category's score is a cosine similarity"),
    C("knn classify", "out-of-range option", "--train {train.h5} --test {test.h5} --multilabel --threshold -1", 2,
      "expected a number in [0, 1]"),
    C("knn classify", "NaN option", "--train {train.h5} --test {test.h5} --multilabel --threshold nan", 2,
      "'nan' is not a finite number"),
    C("knn classify", "NaN option", "--train {train.h5} --test {test.h5} --model svm --C nan", 2,
      "Invalid value for '--C': 'nan' is not a finite number"),
    C("cluster star", "NaN option", "{train.h5} --beta nan -o s.h5", 2, "'nan' is not a finite number"),
    C("cluster stream", "NaN option", "{train.h5} --threshold nan -o s.h5", 2, "'nan' is not a finite number"),
    C("rank train", "NaN option", "{ltr.h5} --eps nan -o m.h5", 2, "'nan' is not a finite number"),
    C("rank train", "NaN option", "{ltr.h5} -C nan -o m.h5", 2, "-C must be a positive number, got nan"),
    C("rank train", "out-of-range option", "{ltr.h5} --max-iter 0 -o m.h5", 2, "0 is not in the range x>=1"),
    C("corpus split", "out-of-range option", "{train.h5} --seed -1 -o sp2", 2, "-1 is not in the range 0<=x<="),
    C("corpus synth", "NaN option", "--n-docs 10 --topic-weight nan -o o.h5", 2, "'nan' is not a finite number"),
    # 8. long work says so
    C("knn search", "slow method asked for", "--index {train.h5} --queries {test.h5} -k 2 --method dense --device cpu "
      "-o s.h5", 0, "--method dense on the CPU scores every document for every query"),
    C("knn classify", "a long stage (SVM)", "--train {train.h5} --test {test.h5} --model svm --features bow --C 1 "
      "--device cpu", 0, "svm on bow: features, fit (CPU): done in"),
    # 10. a result file's weighting
    C("corpus info", "a result file", "{result.h5}", 0, "none (a result file of `knn search`: /X holds no weights)"),
    # 9. validate lists every problem
    C("corpus validate", "valid file", "{train.h5} {test.h5}", 0, "ok ("),
    C("corpus validate", "several problems", "{multi.h5}", 2, "1 of 1 file(s) are not valid"),
    C("corpus validate", "CSC-encoded /X (h5ad)", "{csc.h5ad}", 2, "not valid"),
    C("corpus validate", "newer format version", "{ver99.h5}", 2, "not valid"),
    C("corpus validate", "standard input", "-", 2, "save standard input to a file first"),
    # issue 32: documented forms, special outputs, standard input, unbounded sizes
    C("knn classify", "the documented SVM form with -o", "--train {train.h5} --test {test.h5} -k 3 --model svm "
      "--features both --C 1 -o p.h5 --device cpu", 0, "micro-F1"),
    C("knn classify", "the documented SVM form with -o", "--train {train.h5} --test {test.h5} -k 3 --model svm "
      "--features both --solver liblinear --C 1 -o p.h5 --device cpu", 0, "micro-F1"),
    C("knn classify", "NaN option", "--train {train.h5} --test {test.h5} --model svm --C-grid nan", 2,
      "--C-grid 'nan': expected comma-separated positive numbers"),
    C("knn classify", "out-of-range option", "--train {train.h5} --test {test.h5} --model svm --features bow --C 1e300",
      2, "C 1e+300: expected a positive number up to 1e+10"),
    C("corpus synth", "out-of-range option", "--preset demo --n-docs 1000000000000 -o o.h5", 2,
      "--n-docs 1000000000000: at most 100,000,000 documents"),
    C("corpus split", "out-of-range option", "{train.h5} --seed 99999999999999999999 -o sp2", 2,
      "99999999999999999999 is not in the range 0<=x<=9223372036854775807"),
    C("knn metafeatures", "two outputs to stdout", "--train {train.h5} --test {test.h5} -o - --train-output -", 2,
      "-o and --train-output both name standard output ('-')"),
    C("knn metafeatures", "a table name for an HDF5 output", "--train {train.h5} --test {test.h5} -o m.csv", 2,
      "-o m.csv: this command writes HDF5 only"),
    C("corpus synth", "output a full device", "--preset demo --n-docs 10 -o /dev/full --quiet", 2,
      "/dev/full: no space left on the device (ENOSPC) while writing; nothing was written"),
    C("corpus synth", "output a device (streamed)", "--preset demo --n-docs 10 -o /dev/null --quiet", 0, ""),
    C("corpus info", "not HDF5 on stdin", "-", 2, "<stdin>: not a readable HDF5 file", stdin="text.h5"),
    C("corpus info", "truncated HDF5 on stdin", "-", 2, "<stdin>: not a readable HDF5 file", stdin="trunc.h5"),
    C("corpus export", "truncated HDF5 on stdin", "- --to csv -o o.csv", 2, "<stdin>: not a readable HDF5 file",
      stdin="trunc.h5"),
    C("knn search", "truncated HDF5 on stdin", "--index {train.h5} --queries - -k 2 -o o.h5 --device cpu", 2,
      "<stdin>: not a readable HDF5 file", stdin="trunc.h5"),
    C("knn classify", "not HDF5 on stdin", "--train {train.h5} --test - -k 2 --device cpu", 2,
      "<stdin>: not a readable HDF5 file", stdin="text.h5"),
    C("cluster star", "truncated HDF5 on stdin", "- -o o.h5 --device cpu", 2, "<stdin>: not a readable HDF5 file",
      stdin="trunc.h5"),
    C("corpus build", "standard input closed", "- -o o.h5", 2, "-: standard input is closed", stdin="&-"),
    C("corpus build", "a declared size far beyond the data", "{big.svm} -o o.h5", 2,
      "big.svm: declares 50,000,000 terms (columns) for 2 nonzeros"),
    C("corpus build", "a declared size far beyond the data", "{huge.npz} -o o.h5", 2,
      "huge.npz: declares 1,000,000,000 terms (columns) for 0 nonzeros"),
    C("corpus build", "a value beyond float32", "{e39.svm} -o o.h5", 2, "e39.svm: the value 1e+39 does not fit float32"),
    C("corpus build", "damaged npz", "{trunc.npz} -o o.h5", 2, "trunc.npz: not a SciPy sparse .npz file"),
    C("corpus build", "damaged npz", "{negidx.npz} -o o.h5", 2, "negidx.npz: not a SciPy sparse .npz file"),
    C("corpus build", "JSON nested 100,000 deep", "{deep.jsonl} -o o.h5", 2, "deep.jsonl:1: JSON nested too deeply"),
    C("corpus build", "a UCI vocabulary naming a term twice", "{uci/docword.t.txt} -o o.h5", 2,
      "vocab.t.txt:3: the word 'a' is also on line 1"),
    C("corpus export", "a label with a comma (npz labels file)", "{comma.h5} --to npz -o o.npz", 2,
      "the label 'a,b' holds a comma"),
    C("corpus synth", "an empty output name", "--preset demo --n-docs 10 -o ''", 2, "-o '': the output file name is empty"),
    C("knn search", "an empty output name", "--index {train.h5} --queries {test.h5} -k 2 -o ''", 2,
      "-o '': the output file name is empty"),
    C("rank train", "out-of-range option", "{ltr.h5} -C 1e300 -o m.h5 --device cpu", 2,
      "C must be a positive number up to 1e+10, got 1e+300"),
    C("corpus build", "a complex matrix", "{complex.npz} -o o.h5", 2, "complex.npz: the matrix holds complex numbers"),
    C("cluster eval", "truth codes outside the categories", "{clusters.h5} --truth {badcode.h5}", 2,
      "has codes outside the categories"),
]
for _name, _klass, _message in (("dupids.h5", "duplicate document ids", "/obs/_index has 1 duplicate document ids"),
                                ("intids.h5", "integer document ids", "/obs/_index has dtype int64, expected strings"),
                                ("floatshape.h5", "a float shape attribute", "/X attribute shape has dtype float64"),
                                ("rankfmt.h5", "a rank model given as a corpus", "has gputext-format 'rank-model'")):
    CASES += [C("knn search", _klass, f"--index {{train.h5}} --queries {{{_name}}} -k 2 -o o.h5 --device cpu", 2,
                _message),
              C("cluster stream", _klass, f"{{{_name}}} -o o.h5 --device cpu", 2, _message),
              C("knn classify", _klass, f"--train {{{_name}}} --test {{test.h5}} -k 2 --device cpu", 2, _message)]


# Every command that reads a corpus file x every class of damaged corpus file: {IN} is the file.
# FILE_CLASSES apply to every reader; X_CLASSES only where the command uses /X (n/a elsewhere).
FILE_CLASSES = [("missing file", "nothere.h5", "no such file"), ("empty file", "empty.h5", "file is empty"),
                ("not HDF5", "text.h5", "not a readable HDF5 file"),
                ("truncated HDF5", "trunc.h5", "not a readable HDF5 file"),
                ("newer format version", "ver99.h5", "gputext-format-version '99' is newer")]
X_CLASSES = [("CSC-encoded /X", "csc.h5ad", "encoding-type 'csc_matrix', expected 'csr_matrix'"),
             ("indptr wrong length", "ptr_len.h5", "/X/indptr has length 5"),
             ("NaN data", "nan.h5", "NaN or infinite")]
READERS = [  # (command, arguments, uses /X)
    ("corpus info", "{IN}", True), ("corpus validate", "{IN}", True), ("corpus split", "{IN} -o spx", True),
    ("corpus build", "{x.tab} --vocab-from {IN} -o o.h5", True), ("corpus export", "{IN} --to csv -o o.csv", True),
    ("corpus synth", "--n-docs 10 --idf-from {IN} -o o.h5", False), ("knn index", "{IN} -o o.h5", True),
    ("knn search", "--index {IN} --queries {test.h5} -k 2 -o o.h5 --device cpu", True),
    ("knn search", "--index {train.h5} --queries {IN} -k 2 -o o.h5 --device cpu", True),
    ("knn classify", "--train {IN} --test {test.h5} -k 2 --device cpu", True),
    ("knn classify", "--train {train.h5} --test {IN} -k 2 --device cpu", True),
    ("knn metafeatures", "--train {IN} --test {test.h5} -k 2 -o o.h5 --device cpu", True),
    ("cluster star", "{IN} -o o.h5 --device cpu", True), ("cluster stream", "{IN} -o o.h5 --device cpu", True),
    ("cluster eval", "{IN} --truth {train.h5}", False), ("cluster eval", "{clusters.h5} --truth {IN}", False),
    ("rank train", "{IN} -o m.h5 --device cpu", True)]
# where the right outcome is not "refused": corpus info describes (validate judges), validate lists
OUTCOME = {("corpus info", "NaN data"): (0, "")}
VALIDATE_MESSAGE = "are not valid corpus files"


def _matrix_cases() -> list[Case]:
    cases = []
    for command, args, uses_x in READERS:
        for klass, name, message in FILE_CLASSES + (X_CLASSES if uses_x else []):
            code, text = OUTCOME.get((command, klass), (2, VALIDATE_MESSAGE if command == "corpus validate" else message))
            cases.append(Case(command, klass, tuple(args.replace("{IN}", "{" + name + "}").split()), code, text,
                              matrix=args))
    return cases


# ----------------------------------------------------------------------------- the workspace


def _corpus(n_docs=24, n_terms=16, seed=0, labels=True, ltr=False) -> Corpus:
    rng = np.random.default_rng(seed)
    X = sp.random(n_docs, n_terms, density=0.4, random_state=seed, format="csr", dtype=np.float32)
    X.data[:] = rng.uniform(0.1, 1.0, X.nnz)
    X = sp.csr_matrix(X.multiply(1 / np.maximum(1e-9, np.sqrt(X.multiply(X).sum(1)))), dtype=np.float32)
    obs = {}
    if labels:
        obs["label"] = Categorical(np.arange(n_docs, dtype=np.int32) % 3, np.array(["a", "b", "c"], dtype=object))
    if ltr:
        obs = {"qid": np.repeat(np.arange(n_docs // 4, dtype=np.int32), 4),
               "relevance": rng.integers(0, 3, n_docs).astype(np.float32)}
    return Corpus(X, np.array([f"d{i}" for i in range(n_docs)], dtype=object), None, obs,
                  uns={"gputext": {"weighting": "tfidf"}})


def _corrupt(src: Path, dst: Path, edit) -> None:
    dst.write_bytes(src.read_bytes())
    with h5py.File(dst, "a") as f:
        edit(f)


def _replace(f, key, data, **kw):
    del f[key]
    f.create_dataset(key, data=data, **kw)


def _csc(f):
    X = sp.csr_matrix((f["X/data"][()], f["X/indices"][()], f["X/indptr"][()]), shape=tuple(f["X"].attrs["shape"]))
    C = X.tocsc()
    f["X"].attrs["encoding-type"] = "csc_matrix"
    for key, value in (("data", C.data), ("indices", C.indices), ("indptr", C.indptr)):
        _replace(f, f"X/{key}", value)


def _multi(f):
    data = f["X/data"][()]
    data[0] = np.nan
    f["X/data"][...] = data
    indices = f["X/indices"][()]
    indices[-1] = 999
    f["X/indices"][...] = indices
    _replace(f, "obs/_index", np.array(["same"] * f["obs/_index"].shape[0], dtype=object), dtype=h5py.string_dtype())


def build_workspace(root: Path) -> None:
    """The files the cases name (small: the whole table runs in seconds)."""
    (root / "sp").mkdir()
    train, test = _corpus(seed=0), _corpus(n_docs=12, seed=1)
    write_corpus(train, str(root / "train.h5"))
    write_corpus(test, str(root / "test.h5"))
    write_corpus(train, str(root / "sp" / "train.h5"))
    clusters = _corpus(seed=0)
    clusters.obs["cluster"] = np.arange(clusters.n_docs, dtype=np.int32) % 4
    write_corpus(clusters, str(root / "clusters.h5"))
    write_corpus(_corpus(labels=False, ltr=True), str(root / "ltr.h5"))
    write_corpus(train, str(root / "model.h5"))  # only its path matters to the cases that name it
    os.symlink("train.h5", root / "link.h5")
    os.link(root / "test.h5", root / "hard.h5")
    big = _corpus(seed=2)
    big.X.data[3] = 3e38
    write_corpus(big, str(root / "big.h5"))
    write_corpus(Corpus(sp.csr_matrix((12, 16), dtype=np.float32), test.doc_ids, None, {}, uns={"gputext": {"knn": {"k": 2}}}),
                 str(root / "result.h5"))
    header = "label\ttext\nd\tstring\nclass\t\n"
    (root / "notab.tab").write_text(header + "a\tthe first document\nthis line has no tab\n")
    (root / "cr.tab").write_bytes((header + "a\tthe first\rdocument\nb\tanother one\n").encode())
    (root / "cr.tsv").write_bytes(b"a\tthe first document\nb\tthe second\rdocument\n")
    (root / "notab.tsv").write_text("a\tthe first document\nno tab on this line\n")
    (root / "dup.jsonl").write_text('{"id": "x", "text": "hello world"}\n{"id": "y", "text": "more words"}\n'
                                    '{"id": "x", "text": "another doc"}\n')
    (root / "latin.tab").write_bytes((header + "a\tle caf\xe9 est bon\nb\tun autre caf\xe9\n").encode("latin-1"))
    (root / "one.tsv").write_text("a\tthe only document here\n")
    (root / "news" / "sport").mkdir(parents=True)
    (root / "news" / "sport" / "1").write_text("the match was won late")
    (root / "x.tab").write_text("label\ttext\nd\tstring\nclass\t\na\tthe first document\nb\tanother one here\n")
    src = root / "train.h5"
    n = train.n_docs
    _corrupt(src, root / "csc.h5ad", _csc)
    _corrupt(src, root / "ptr_nonmono.h5", lambda f: f["X/indptr"].__setitem__(3, 10**6))
    _corrupt(src, root / "ptr_len.h5", lambda f: _replace(f, "X/indptr", np.arange(5, dtype=np.int64)))
    _corrupt(src, root / "ptr_last.h5", lambda f: f["X/indptr"].__setitem__(n, f["X/indptr"][n] - 1))
    _corrupt(src, root / "noshape.h5", lambda f: f["X"].attrs.__delitem__("shape"))
    _corrupt(src, root / "strdata.h5", lambda f: _replace(f, "X/data", np.array(["w"] * f["X/data"].shape[0], dtype=object),
                                                         dtype=h5py.string_dtype()))
    _corrupt(src, root / "nan.h5", lambda f: f["X/data"].__setitem__(0, np.nan))
    _corrupt(src, root / "ver99.h5", lambda f: f.attrs.__setitem__("gputext-format-version", "99"))
    _corrupt(src, root / "multi.h5", _multi)
    (root / "empty.h5").write_bytes(b"")
    (root / "text.h5").write_text("this is not an HDF5 file\n")
    raw = (root / "train.h5").read_bytes()
    (root / "trunc.h5").write_bytes(raw[:len(raw) // 2])
    issue_32_files(root, src)


def _int_ids(f):
    n = f["obs/_index"].shape[0]
    del f["obs/_index"]
    f["obs/_index"] = np.arange(n)


def issue_32_files(root: Path, src: Path) -> None:
    """Inputs that every command used to accept (or crash on) until issue 32."""
    (root / "big.svm").write_text("1 50000000:1\n2 3:1\n")
    (root / "e39.svm").write_text("1 1:1e39\n2 2:1\n")
    X = sp.random(5, 5, density=0.5, format="csr", random_state=0, dtype=np.float32)
    sp.save_npz(root / "huge.npz", sp.csr_matrix((2, 10**9), dtype=np.float32))
    sp.save_npz(root / "ok.npz", X)
    (root / "trunc.npz").write_bytes((root / "ok.npz").read_bytes()[:100])
    os.unlink(root / "ok.npz")
    np.savez(root / "negidx.npz", data=X.data, indices=-X.indices - 1, indptr=X.indptr, format=b"csr", shape=X.shape)
    sp.save_npz(root / "complex.npz", sp.csr_matrix(X.toarray() * (1 + 1j)))
    (root / "deep.jsonl").write_text('{"text": ' + "[" * 100000 + "]" * 100000 + "}\n")
    (root / "uci").mkdir()
    (root / "uci" / "vocab.t.txt").write_text("a\nb\na\n")
    (root / "uci" / "docword.t.txt").write_text("1\n3\n2\n1 1 2\n1 2 1\n")
    comma = _corpus(seed=3)
    comma.obs["label"] = Categorical(comma.obs["label"].codes, np.array(["a,b", "c", "d"], dtype=object))
    write_corpus(comma, str(root / "comma.h5"))
    _corrupt(src, root / "badcode.h5", lambda f: f["obs/label/codes"].__setitem__(0, 9))
    _corrupt(src, root / "dupids.h5", lambda f: f["obs/_index"].__setitem__(1, f["obs/_index"][0]))
    _corrupt(src, root / "intids.h5", _int_ids)
    _corrupt(src, root / "floatshape.h5", lambda f: f["X"].attrs.__setitem__("shape", f["X"].attrs["shape"].astype(float)))
    _corrupt(src, root / "rankfmt.h5", lambda f: f.attrs.__setitem__("gputext-format", "rank-model"))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad_inputs")
    build_workspace(root)
    return root


def digests(root: Path) -> dict:
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if not path.is_symlink():
                out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def fill(text: str, root) -> str:
    """A case's text with its {file} marks dropped (cases run inside the workspace)."""
    return text.replace("{", "").replace("}", "")


def run_case(case: Case, root: Path):
    """(exit code, stdout, stderr) of the case, run in ``root``."""
    argv = case.command.split() + ["" if a == "''" else fill(a, root) for a in case.argv]  # '' an empty argument
    if case.process:
        return _process(argv, root, case.stdin)
    old = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, argv)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


def _process(argv, root: Path, stdin: str = ""):
    """A real `python -m gputext` (exit 139, a segfault, is then an exit code like any other):
    standard input from the workspace file ``stdin``, else standard output closed."""
    redirect = f"<{stdin}" if stdin == "&-" else f"< {stdin}" if stdin else ">&-"
    proc = subprocess.run(f'{sys.executable} -m gputext {" ".join(argv)} {redirect}', shell=True, cwd=root,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    return proc.returncode, "", proc.stderr


ALL_CASES = CASES + _matrix_cases()


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_bad_input(case: Case, workspace: Path):
    before = digests(workspace)
    try:
        check_case(case, workspace, before)
    finally:  # a case's own outputs are not inputs of the next one
        for new in set(digests(workspace)) - set(before):
            os.unlink(workspace / new)


def check_case(case: Case, workspace: Path, before: dict) -> None:
    code, out, err = run_case(case, workspace)
    assert code == case.code, (out, err)
    assert "Traceback" not in out + err
    message = fill(case.message, workspace)
    if code == 2:
        lines = [line for line in err.splitlines() if line.startswith("Error:")]
        assert len(lines) == 1, err
        assert err.rstrip().endswith(lines[0])  # the error is the last line, on one line
        assert message in lines[0], lines[0]
    else:
        assert message in out + err
    after = digests(workspace)
    changed = [k for k in before if before[k] != after.get(k)]
    assert not changed, f"inputs changed: {changed}"


# ----------------------------------------------------------------------------- the doc table


def render_matrix(cases) -> list[str]:
    classes = [k for k, _, _ in FILE_CLASSES + X_CLASSES]
    lines = ["## Every corpus reader x every damaged corpus file", "",
             "Rows: a command and the argument that names the damaged file `IN`. Cells: the exit code (`-`: the",
             "command does not read /X there, so /X damage does not concern it). Messages below the table.", "",
             "| command | " + " | ".join(classes) + " |", "| --- |" + " --- |" * len(classes)]
    for command, args, _ in READERS:
        row = {c.klass: c for c in cases if c.matrix == args and c.command == command}
        cells = [str(row[k].code) if k in row else "-" for k in classes]
        lines.append(f"| `{command} {fill(args, None)}` | " + " | ".join(cells) + " |")
    lines += ["", "| damaged file | the one line (exit 2) contains |", "| --- | --- |"]
    lines += [f"| {k} (`{name}`) | {m} |" for k, name, m in FILE_CLASSES + X_CLASSES]
    lines += [f"| `corpus validate`, any | {VALIDATE_MESSAGE} (each problem listed on stdout first) |",
              "| `corpus info`, NaN data | exit 0: info describes a file, `corpus validate` judges it |", ""]
    return lines


def render_table(cases=ALL_CASES) -> str:
    lines = ["# Bad inputs: what every command does with them", "",
             "Generated from `tests/test_bad_inputs.py` (its CASES and READERS tables, which the tests run: exit",
             "code, the one-line message on stderr, every input file byte-for-byte unchanged). Do not edit by",
             "hand; regenerate with `GPUTEXT_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_bad_inputs.py -k doc`.",
             "Exit codes: 0 done (a warning may be printed), 2 refused with one line naming the input.", ""]
    lines += render_matrix([c for c in cases if c.matrix])
    lines += ["## Every command x every other bad-input class", "",
              "| command | bad input | example | exit | message contains |", "| --- | --- | --- | --- | --- |"]
    cases = [c for c in cases if not c.matrix]
    for case in sorted(cases, key=lambda c: (c.command, c.klass)):
        args = " ".join(fill(a, None) for a in case.argv).replace("|", "\\|")
        args += f" < {case.stdin}" if case.stdin else ""
        message = fill(case.message, None).replace("|", "\\|")
        lines.append(f"| `{case.command}` | {case.klass} | `{args}` | {case.code} | {message} |")
    return "\n".join(lines) + "\n"


def test_bad_input_doc_is_current():
    text = render_table()
    if os.environ.get("GPUTEXT_WRITE_DOCS"):
        DOC.write_text(text)
    assert DOC.exists() and DOC.read_text() == text, (
        "docs/bad_inputs.md is out of date: GPUTEXT_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_bad_inputs.py -k doc")


# ----------------------------------------------------------------------------- details the table cannot show


def test_validate_lists_every_problem(workspace: Path):
    code, out, err = run_case(C("corpus validate", "", "{multi.h5} {train.h5}", 2, ""), workspace)
    assert code == 2
    problems = out.splitlines()
    assert problems[:3] == ["multi.h5: /X/indices has a column index outside [0, 16) (rows 0..23)",
                            "multi.h5: /X/data contains NaN or infinite values (rows 0..23)",
                            "multi.h5: /obs/_index has 23 duplicate document ids (e.g. 'same' at rows 0 and 1)"]
    assert problems[3].startswith("train.h5: ok (24 documents x 16 terms")
    assert err.strip() == "Error: 1 of 2 file(s) are not valid corpus files (problems listed above)"


def test_in_place_update_is_the_one_allowed_overwrite(tmp_path: Path):
    from gputext.cli_common import check_paths
    from gputext.errors import InputError
    path = str(tmp_path / "c.h5")
    Path(path).write_bytes(b"x")
    check_paths([("--update", path), ("--add", None)], [("-o", path)], in_place=[("-o", "--update")])
    with pytest.raises(InputError, match="is the same file as --update"):
        check_paths([("--update", path)], [("-o", path)])


def test_heartbeat_reports_a_long_stage(capsys):
    import time

    from gputext.progress import heartbeat
    with heartbeat("svm fit", every=0.05):
        time.sleep(0.3)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "svm fit ..." and err[-1].startswith("svm fit: done in")
    assert any(line.startswith("svm fit: still running") for line in err[1:-1])
    with heartbeat("quiet stage", quiet=True, every=0.01):
        time.sleep(0.05)
    assert capsys.readouterr().err == ""


def test_svmlight_export_of_text_labels_builds_back(workspace: Path, tmp_path: Path):
    """Text labels (one with '#', one with a space) survive export --to svmlight and build (issue 32
    item 10: targets like 'c3' were refused, '#' started a comment)."""
    corpus = _corpus(seed=4)
    corpus.obs["label"] = Categorical(corpus.obs["label"].codes, np.array(["c3", "a#b", "x y"], dtype=object))
    write_corpus(corpus, str(tmp_path / "t.h5"))
    run = CliRunner().invoke
    for argv in (["corpus", "export", str(tmp_path / "t.h5"), "--to", "svmlight", "-o", str(tmp_path / "t.svm")],
                 ["corpus", "build", str(tmp_path / "t.svm"), "-o", str(tmp_path / "back.h5"), "--quiet"]):
        result = run(cli, argv)
        assert result.exit_code == 0, result.output
    from gputext.io import read_corpus
    assert read_corpus(str(tmp_path / "back.h5")).labels.values().tolist() == corpus.obs["label"].values().tolist()


def test_npz_export_of_an_unlabelled_corpus_removes_old_labels(tmp_path: Path):
    """An earlier export's o.labels.txt would be rebuilt with the new matrix (issue 32 item 6)."""
    run = CliRunner().invoke
    write_corpus(_corpus(seed=5), str(tmp_path / "a.h5"))
    write_corpus(_corpus(seed=6, labels=False), str(tmp_path / "b.h5"))
    out = str(tmp_path / "o.npz")
    assert run(cli, ["corpus", "export", str(tmp_path / "a.h5"), "--to", "npz", "-o", out]).exit_code == 0
    assert (tmp_path / "o.labels.txt").exists()
    result = run(cli, ["corpus", "export", str(tmp_path / "b.h5"), "--to", "npz", "-o", out])
    assert result.exit_code == 0 and "removed" in result.stderr
    assert not (tmp_path / "o.labels.txt").exists()


def test_dir_input_with_a_fifo_is_refused_not_read(tmp_path: Path):
    """A FIFO in a --format dir folder used to block the build for ever (issue 32 item 8)."""
    (tmp_path / "news" / "a").mkdir(parents=True)
    (tmp_path / "news" / "a" / "1").write_text("a document")
    os.mkfifo(tmp_path / "news" / "a" / "pipe")
    result = CliRunner().invoke(cli, ["corpus", "build", str(tmp_path / "news"), "--format", "dir", "-o",
                                      str(tmp_path / "o.h5")])
    assert result.exit_code == 2 and "pipe: not a regular file (a FIFO, socket or device)" in result.stderr


def test_exp_gain_of_a_large_grade_is_refused_not_nan(workspace: Path, tmp_path: Path):
    """rank eval --gain exp with relevance 2000 gave NDCG = NaN (issue 32 item 6)."""
    import h5py
    run = CliRunner().invoke
    model, test = str(tmp_path / "m.h5"), str(tmp_path / "t.h5")
    assert run(cli, ["rank", "train", str(workspace / "ltr.h5"), "-o", model, "--device", "cpu", "--quiet"]).exit_code == 0
    test_bytes = (workspace / "ltr.h5").read_bytes()
    Path(test).write_bytes(test_bytes)
    with h5py.File(test, "a") as f:
        f["obs/relevance"][0] = 2000
    result = run(cli, ["rank", "eval", model, test, "--gain", "exp", "--device", "cpu"])
    assert result.exit_code == 2 and "relevance 2000 makes 2^rel - 1 overflow" in result.stderr
    result = run(cli, ["rank", "eval", model, test, "--device", "cpu"])
    assert result.exit_code == 0 and "nan" not in result.output.lower()


def test_python_warnings_are_one_line():
    """numpy's RuntimeWarning / ComplexWarning used to print their source line too (issue 32 item 11);
    gputext.cli.main formats every warning with this function: one line."""
    from gputext.cli import one_line_warning
    assert one_line_warning(RuntimeWarning("overflow\nencountered"), RuntimeWarning, "x.py", 3, "y = x * x") == \
        "Warning: RuntimeWarning: overflow encountered\n"
