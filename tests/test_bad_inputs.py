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

    @property
    def id(self) -> str:
        return f"{self.command}: {self.klass}: {' '.join(self.argv)}"


def C(command, klass, args, code, message, process=False):
    return Case(command, klass, tuple(args.split()), code, message, process)


SAME = "output = input"
CASES = [
    # 1. an output that is an input (paths, symlinks, hard links), 7. outputs checked before any work
    C("corpus build", SAME, "{x.tab} -o {x.tab}", 2, "-o {x.tab} is the same file as INPUT"),
    C("corpus build", SAME, "{x.tab} --vocab-from {train.h5} -o {train.h5}", 2, "is the same file as --vocab-from"),
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
    C("corpus synth", "stdout closed", "--n-docs 10 --n-terms 20 --n-classes 2 -o -", 2, "standard output is closed",
      process=True),
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
    # 9. validate lists every problem
    C("corpus validate", "valid file", "{train.h5} {test.h5}", 0, "ok ("),
    C("corpus validate", "several problems", "{multi.h5}", 2, "1 of 1 file(s) are not valid"),
    C("corpus validate", "CSC-encoded /X (h5ad)", "{csc.h5ad}", 2, "not valid"),
    C("corpus validate", "newer format version", "{ver99.h5}", 2, "not valid"),
]


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
    write_corpus(train, str(root / "clusters.h5"))
    write_corpus(_corpus(labels=False, ltr=True), str(root / "ltr.h5"))
    write_corpus(train, str(root / "model.h5"))  # only its path matters to the cases that name it
    os.symlink("train.h5", root / "link.h5")
    os.link(root / "test.h5", root / "hard.h5")
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
    argv = case.command.split() + [fill(a, root) for a in case.argv]
    if case.process:
        return _closed_stdout(argv, root)
    old = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, argv)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


def _closed_stdout(argv, root: Path):
    proc = subprocess.run(f'{sys.executable} -m gputext {" ".join(argv)} >&-', shell=True, cwd=root,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    return proc.returncode, "", proc.stderr


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: Case, workspace: Path):
    before = digests(workspace)
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
    for new in set(after) - set(before):  # a successful case's outputs do not count as inputs
        os.unlink(workspace / new)


# ----------------------------------------------------------------------------- the doc table


def render_table(cases=CASES) -> str:
    lines = ["# Bad inputs: what every command does with them", "",
             "Generated from `tests/test_bad_inputs.py` (its CASES table, which the tests run: exit code, the",
             "one-line message on stderr, every input file byte-for-byte unchanged). Do not edit by hand;",
             "regenerate with `GPUTEXT_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_bad_inputs.py -k doc`.",
             "Exit codes: 0 done (a warning may be printed), 2 refused with one line naming the input.", "",
             "| command | bad input | example | exit | message contains |", "| --- | --- | --- | --- | --- |"]
    for case in sorted(cases, key=lambda c: (c.command, c.klass)):
        args = " ".join(fill(a, None) for a in case.argv).replace("|", "\\|")
        message = fill(case.message, None).replace("|", "\\|")
        lines.append(f"| `{case.command}` | {case.klass} | `{args}` | {case.code} | {message} |")
    return "\n".join(lines) + "\n"


def test_bad_input_doc_is_current():
    text = render_table()
    if os.environ.get("GPUTEXT_WRITE_DOCS"):
        DOC.write_text(text)
    assert DOC.exists() and DOC.read_text() == text, (
        "docs/bad_inputs.md is out of date: GPUTEXT_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_bad_inputs.py -k doc")
