"""`gputext cluster stream`: corpus and JSONL input, output keys, --idf-from weighting equal to
`corpus build --weighting tficf --vocab-from`, checkpoint/resume equal to one run, clear errors."""
import json
import os

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from gputext.cli import cli
from gputext.cluster.stream_reference import reference_cluster
from gputext.io import read_corpus, write_corpus


def _texts(n=120, seed=0):
    """Short news-like texts: 6 topics of 8 words, some background words, repeated stories."""
    rng = np.random.default_rng(seed)
    topics = [[f"topic{k}word{i}" for i in range(8)] for k in range(6)]
    background = [f"common{i}" for i in range(30)]
    docs = []
    for i in range(n):
        k = int(rng.integers(6))
        words = list(rng.choice(topics[k], 4)) + list(rng.choice(background, 3))
        if docs and rng.random() < 0.3:  # a follow-up of an earlier story
            words = docs[int(rng.integers(len(docs)))][1].split()[:6] + [str(rng.choice(background))]
        docs.append((k, " ".join(words)))
    return docs


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stream")
    docs = _texts()
    jsonl = tmp / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"id": f"d{i}", "text": text, "label": f"c{k}"}) + "\n"
                             for i, (k, text) in enumerate(docs)))
    ref = tmp / "ref.jsonl"
    ref.write_text("".join(json.dumps({"text": text}) + "\n" for _, text in _texts(200, seed=1)))
    runner = CliRunner()
    for args in (["corpus", "build", str(ref), "--weighting", "tficf", "-o", str(tmp / "ref.h5"), "-q"],
                 ["corpus", "build", str(jsonl), "--weighting", "tficf", "--vocab-from", str(tmp / "ref.h5"),
                  "-o", str(tmp / "docs.h5"), "-q"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, result.output
    return tmp


def run(args, input=None):
    return CliRunner().invoke(cli, ["cluster", "stream", *args], input=input)


def test_corpus_input_writes_the_result_file(files):
    out = files / "out.h5"
    result = run([str(files / "docs.h5"), "-t", "0.4", "-k", "6", "--device", "cpu", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "clustered 120 documents into" in result.output and "p95" in result.output
    res = read_corpus(str(out))
    corpus = read_corpus(str(files / "docs.h5"))
    cluster, sims, new, ref = reference_cluster(corpus.X, 0.4, 6)
    assert res.obs["cluster"].dtype == np.int32
    np.testing.assert_array_equal(res.obs["cluster"], cluster)
    np.testing.assert_array_equal(res.obs["new_cluster"], new)
    np.testing.assert_array_equal(res.obs["similarity"], sims)  # float64, bit for bit
    assert res.X.shape == corpus.X.shape and res.X.nnz == 0
    np.testing.assert_array_equal(res.doc_ids, corpus.doc_ids)
    np.testing.assert_array_equal(res.labels.codes, corpus.labels.codes)
    st = res.params["stream"]
    assert st["n_clusters"] == ref.n_clusters and st["threshold"] == 0.4 and st["max_terms"] == 6
    assert st["ell_terms"].shape == (6, ref.n_clusters) and st["ell_terms"].dtype == np.int32
    np.testing.assert_array_equal(st["size"], ref.size)
    for key in ("latency_ms_p50", "latency_ms_p99", "docs_per_second"):
        assert st[key] >= 0


def _lines(output):
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_jsonl_with_idf_from_equals_clustering_the_built_corpus(files):
    text = (files / "docs.jsonl").read_text()
    result = run(["-", "--idf-from", str(files / "ref.h5"), "-t", "0.4", "-k", "6", "--device", "cpu",
                  "--batch-size", "7", "-q"], input=text)
    assert result.exit_code == 0, result.output
    lines = _lines(result.output)
    corpus = read_corpus(str(files / "docs.h5"))
    cluster, sims, new, _ = reference_cluster(corpus.X, 0.4, 6)
    assert [d["id"] for d in lines] == [f"d{i}" for i in range(120)]
    assert [d["cluster"] for d in lines] == cluster.tolist()
    assert [d["similarity"] for d in lines] == sims.tolist()
    assert [d["new"] for d in lines] == new.tolist()


@pytest.mark.parametrize("idf", [True, False])
def test_state_resume_equals_one_run(files, tmp_path, idf):
    lines = (files / "docs.jsonl").read_text().splitlines(keepends=True)
    extra = ["--idf-from", str(files / "ref.h5")] if idf else []
    common = ["-", "-t", "0.4", "-k", "6", "--device", "cpu", "--batch-size", "5", "-q", *extra]
    whole = run(common, input="".join(lines))
    assert whole.exit_code == 0, whole.output
    state = str(tmp_path / "state.h5")
    first = run(common + ["--state", state], input="".join(lines[:47]))
    assert first.exit_code == 0, first.output
    assert os.path.exists(state)
    resume = ["-", "--device", "cpu", "--batch-size", "3", "-q", "--state", state]  # T, K from the state
    second = run(resume, input="".join(lines[47:]))  # --idf-from is remembered by the state
    assert second.exit_code == 0, second.output
    assert _lines(first.output) + _lines(second.output) == _lines(whole.output)
    with h5py.File(state) as f:
        assert f.attrs["n_docs_seen"] == 120 and f.attrs["mode"] == ("idf-from" if idf else "as-it-goes")


def test_corpus_state_resume_equals_one_run(files, tmp_path):
    corpus = read_corpus(str(files / "docs.h5"))
    write_corpus(corpus.take(np.arange(60)), str(tmp_path / "a.h5"))
    write_corpus(corpus.take(np.arange(60, 120)), str(tmp_path / "b.h5"))
    state = str(tmp_path / "s.h5")
    for name in ("a", "b"):
        result = run([str(tmp_path / f"{name}.h5"), "-t", "0.4", "-k", "6", "--device", "cpu", "--state", state,
                      "-o", str(tmp_path / f"{name}.out.h5"), "-q"])
        assert result.exit_code == 0, result.output
    both = np.concatenate([read_corpus(str(tmp_path / f"{n}.out.h5")).obs["cluster"] for n in ("a", "b")])
    np.testing.assert_array_equal(both, reference_cluster(corpus.X, 0.4, 6)[0])


def test_stream_as_it_goes_weights_are_reeds_tficf(files):
    # the first document alone: N = df = 1 for its terms, weight log(1 + tf) * log(2), unit norm
    result = run(["-", "--device", "cpu", "-q", "--stopwords", "none"],
                 input='{"id": 1, "text": "a a b"}\n{"id": 2, "text": "b a a"}\n')
    lines = _lines(result.output)
    assert [d["cluster"] for d in lines] == [0, 0] and lines[1]["new"] is False
    w = np.array([np.log1p(2) * np.log(2), np.log1p(1) * np.log(2)])
    w /= np.linalg.norm(w)
    # document 2: N = 2, df = 2 for a and b -> log(1 + 1): the same direction, similarity ~ 1
    assert abs(lines[1]["similarity"] - float(np.dot(w.astype(np.float32), w.astype(np.float32)))) < 1e-6


@pytest.mark.parametrize("args,input,message", [
    (["-t", "1.5"], "", "--threshold must be in [0, 1]"),
    (["-k", "0"], "", "--max-terms must be >= 1"),
    (["--batch-size", "0"], "", "--batch-size must be >= 1"),
    (["-o", "x.h5"], "", "-o is for a corpus INPUT"),
    ([], '{"id": 1, "text": "fine"}\nnot json\n', "stdin line 2: invalid JSON"),
    ([], '{"id": 1}\n', "stdin line 1: expected a string field 'text'"),
    ([], '[1, 2]\n', "expected a JSON object"),
])
def test_bad_jsonl_usage_is_one_clear_line(args, input, message):
    result = run(["-", "--device", "cpu", "-q", *args], input=input)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_bad_corpus_usage_is_one_clear_line(files, tmp_path):
    result = run([str(files / "docs.h5"), "--device", "cpu"])
    assert result.exit_code == 2 and "-o OUT.h5 is required" in result.output
    result = run([str(files / "docs.h5"), "--idf-from", str(files / "ref.h5"), "-o", str(tmp_path / "o.h5")])
    assert result.exit_code == 2 and "--idf-from is for JSONL input" in result.output
    result = run([str(tmp_path / "missing.h5"), "-o", str(tmp_path / "o.h5"), "--device", "cpu"])
    assert result.exit_code == 2 and "no such file" in result.output
    assert not (tmp_path / "o.h5").exists()
    state = str(tmp_path / "s.h5")
    assert run([str(files / "docs.h5"), "-k", "6", "--state", state, "-o", str(tmp_path / "o.h5"), "--device", "cpu",
                "-q"]).exit_code == 0
    result = run([str(files / "docs.h5"), "-k", "7", "--state", state, "-o", str(tmp_path / "o2.h5"),
                  "--device", "cpu"])
    assert result.exit_code == 2 and "max_terms 6" in result.output and "keeps its parameters" in result.output
    result = run(["-", "--state", state, "--device", "cpu"], input='{"text": "x"}\n')
    assert result.exit_code == 2 and "not by a JSONL stream" in result.output
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    result = run(["-", "--state", str(tmp_path / "junk.h5"), "--device", "cpu"], input='{"text": "x"}\n')
    assert result.exit_code == 2 and "not a readable HDF5 file" in result.output


def test_help_has_an_example():
    result = CliRunner().invoke(cli, ["cluster", "stream", "--help"])
    assert result.exit_code == 0 and "Example:" in result.output and "--idf-from" in result.output


@pytest.mark.slow
def test_sigterm_stops_at_a_batch_boundary_and_the_stream_resumes(files, tmp_path):
    """A live stream (a real pipe): lines come back as documents arrive; SIGTERM saves the state;
    the resumed stream's lines continue exactly as one uninterrupted run's."""
    import signal
    import subprocess
    import sys
    lines = (files / "docs.jsonl").read_text().splitlines(keepends=True)
    cmd = [sys.executable, "-m", "gputext", "cluster", "stream", "-", "-t", "0.4", "-k", "6", "--device", "cpu",
           "--idf-from", str(files / "ref.h5"), "-q"]
    whole = subprocess.run(cmd, input="".join(lines), capture_output=True, text=True, timeout=120)
    assert whole.returncode == 0, whole.stderr
    state = str(tmp_path / "live.h5")
    proc = subprocess.Popen(cmd + ["--state", state], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1)
    got = []
    for line in lines[:30]:  # one line at a time: each answer comes back before the next is sent
        proc.stdin.write(line)
        proc.stdin.flush()
        got.append(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopped by signal SIGTERM after 30 documents" in err
    resumed = subprocess.run(cmd + ["--state", state], input="".join(lines[30:]), capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert _lines("".join(got) + out + resumed.stdout) == _lines(whole.stdout)
