"""DClustR updates written by appending (in place, or into a copy) equal the new-file writer's
output dataset by dataset; a failure during the append rolls the file back."""
from __future__ import annotations

import os
import shutil

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from gputext.cli import cli
from gputext.cluster import dclus
from gputext.cluster.star import cluster_star
from gputext.io import Categorical, Corpus, read_corpus, write_corpus
from test_star_reference import random_corpus

VOLATILE = ("seconds", "write_mode")  # timings differ between runs


def snapshot(path, volatile=VOLATILE):
    """{key: (dtype, shape, value, attrs)} of every dataset and group of an HDF5 file."""
    out = {}

    def visit(name, obj):
        if any(v in name.rsplit("/", 1)[-1] for v in volatile):
            return
        attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in obj.attrs.items()}
        if isinstance(obj, h5py.Dataset):
            value = obj[()]
            value = value.tolist() if isinstance(value, np.ndarray) else value
            out[name] = (str(obj.dtype), obj.shape, value, attrs)
        else:
            out[name] = ("group", None, None, attrs)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
        out["/"] = ("root", None, None, {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in f.attrs.items()})
    return out


def assert_same_file(a, b, ignore=()):
    """Every dataset, group and attribute equal; ``ignore``: keys whose values may differ (both present)."""
    sa, sb = snapshot(a), snapshot(b)
    assert sorted(sa) == sorted(sb)
    for key in sa:
        if key not in ignore:
            assert sa[key] == sb[key], key


def corpora(seed, n, n_old, n_mid, n_terms=60):
    X = random_corpus(n, n_terms, 6, seed=seed)
    terms = np.array([f"t{j}" for j in range(n_terms)], dtype=object)
    labels = Categorical((np.arange(n) % 4).astype(np.int32), np.array(["w", "x", "y", "z"], dtype=object))
    whole = Corpus(X, np.array([f"doc{i}" for i in range(n)], dtype=object), terms,
                   obs={"label": labels, "year": np.arange(n, dtype=np.int64)},
                   obsm={"emb": np.arange(2 * n, dtype=np.float32).reshape(n, 2)})
    return whole.take(np.arange(n_old)), whole.take(np.arange(n_old, n_mid)), whole.take(np.arange(n_mid, n))


def base_file(corpus, beta, path, compression="gzip"):
    res = cluster_star(corpus.X, beta, "cpu")
    dclus.write_result(corpus, res, path, beta, "cpu", compression=compression)


@pytest.mark.parametrize("seed,n,beta,compression", [(1, 90, 0.3, "gzip"), (2, 120, 0.25, None), (3, 200, 0.35, "gzip")])
def test_in_place_and_copy_equal_the_new_file_writer_after_two_updates(tmp_path, seed, n, beta, compression):
    old, add1, add2 = corpora(seed, n, n // 2, 3 * n // 4)
    base = str(tmp_path / "base.h5")
    base_file(old, beta, base, compression)
    paths = {m: str(tmp_path / f"{m}.h5") for m in ("new", "copy", "inplace")}
    shutil.copyfile(base, paths["inplace"])
    for step, add in enumerate((add1, add2)):
        src = base if step == 0 else paths["new"]
        dclus.update(src, add, paths["new"], device="cpu", compression=compression, write="new")
        src_copy = base if step == 0 else paths["copy"]
        dclus.update(src_copy, add, paths["copy"], device="cpu", compression=compression)
        r = dclus.update(paths["inplace"], add, paths["inplace"], device="cpu", compression=compression)
        assert r.stats["write_mode"] == "append"
        assert_same_file(paths["copy"], paths["new"])
        assert_same_file(paths["inplace"], paths["new"])
    g_new, _ = dclus.read_stored_graph(paths["new"])
    g_in, _ = dclus.read_stored_graph(paths["inplace"])
    assert np.array_equal(g_new.indices, g_in.indices) and np.array_equal(g_new.weights, g_in.weights)
    c = read_corpus(paths["inplace"])
    assert c.n_docs == n and c.X.nnz == random_corpus(n, 60, 6, seed=seed).nnz
    with h5py.File(paths["inplace"], "r") as f:
        assert not [k for k in f.keys() if k.startswith(dclus.TMP_PREFIX)]
        assert f["X/data"].maxshape == (None,) and f[dclus.GRAPH_KEY]["adj_indices"].maxshape == (None,)


def test_a_fixed_size_x_is_rewritten_once_as_growable(tmp_path):
    old, add1, _ = corpora(5, 80, 50, 80)
    base = str(tmp_path / "base.h5")
    base_file(old, 0.3, base)
    with h5py.File(base, "a") as f:  # an X as written before growable datasets
        for k in ("data", "indices", "indptr"):
            v = f[f"X/{k}"][()]
            del f[f"X/{k}"]
            f["X"].create_dataset(k, data=v)
    ref = str(tmp_path / "ref.h5")
    dclus.update(base, add1, ref, device="cpu", write="new")
    dclus.update(base, add1, base, device="cpu")
    assert_same_file(base, ref)
    with h5py.File(base, "r") as f:
        assert f["X/data"].maxshape == (None,)


def test_fixed_size_edge_datasets_are_copied_into_growable_ones(tmp_path):
    old, add1, _ = corpora(6, 80, 50, 80)
    base = str(tmp_path / "base.h5")
    base_file(old, 0.3, base)
    with h5py.File(base, "a") as f:  # edge datasets without maxshape (not growable)
        g = f[dclus.GRAPH_KEY]
        for k in ("adj_indices", "adj_weights"):
            v = g[k][()]
            del g[k]
            g.create_dataset(k, data=v)
    ref, inplace = str(tmp_path / "ref.h5"), str(tmp_path / "inplace.h5")
    shutil.copyfile(base, inplace)
    dclus.update(base, add1, ref, device="cpu", write="new")
    dclus.update(inplace, add1, inplace, device="cpu")
    assert_same_file(inplace, ref)
    for path in (ref, inplace):
        with h5py.File(path, "r") as f:
            assert f[dclus.GRAPH_KEY]["adj_indices"].maxshape == (None,)


STEPS = ["start", "X/data", "X", "obs/_index", "corpus", "adj_indices", "adj_weights", "graph", "park obs", "park obsm",
         "park uns", "swapped"]


@pytest.mark.parametrize("fail_at", STEPS)
def test_failure_during_the_append_leaves_the_old_contents(tmp_path, monkeypatch, fail_at):
    old, add1, _ = corpora(7, 80, 50, 80)
    path = str(tmp_path / "c.h5")
    base_file(old, 0.3, path)
    before = snapshot(path, volatile=())
    seen = []

    def step(name):
        seen.append(name)
        if name == fail_at:
            raise RuntimeError(f"injected at {name}")

    monkeypatch.setattr(dclus.write, "_step", step)
    with pytest.raises(RuntimeError, match="injected"):
        dclus.update(path, add1, path, device="cpu")
    assert fail_at in seen
    assert snapshot(path, volatile=()) == before
    # the same holds for the copy form: the output never appears, the input is untouched
    with pytest.raises(RuntimeError, match="injected"):
        dclus.update(path, add1, str(tmp_path / "o.h5"), device="cpu")
    assert not (tmp_path / "o.h5").exists() and snapshot(path, volatile=()) == before
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp.h5")]
    monkeypatch.undo()
    ref = str(tmp_path / "ref.h5")
    dclus.update(path, add1, ref, device="cpu", write="new")
    dclus.update(path, add1, path, device="cpu")  # and the rolled-back file updates normally
    assert_same_file(path, ref)


def test_bad_input_leaves_the_file_untouched(tmp_path):
    old, add1, _ = corpora(8, 60, 40, 60)
    path = str(tmp_path / "c.h5")
    base_file(old, 0.3, path)
    before = snapshot(path, volatile=())
    mtime = os.stat(path).st_mtime_ns
    run = CliRunner().invoke
    write_corpus(old.take(np.arange(3)), str(tmp_path / "dup.h5"))
    r = run(cli, ["cluster", "star", "--update", path, "--add", str(tmp_path / "dup.h5"), "-o", path, "--device", "cpu"])
    assert r.exit_code == 2 and "already exist" in r.output
    r = run(cli, ["cluster", "star", "--update", path, "--add", str(tmp_path / "dup.h5"), "--beta", "0.4", "-o", path])
    assert r.exit_code == 2
    assert snapshot(path, volatile=()) == before and os.stat(path).st_mtime_ns == mtime


def test_cli_in_place_result_is_read_by_eval_info_and_a_further_update(tmp_path):
    old, add1, add2 = corpora(9, 100, 60, 80)
    run = CliRunner().invoke
    for name, c in (("old", old), ("a1", add1), ("a2", add2)):
        write_corpus(c, str(tmp_path / f"{name}.h5"))
    c = str(tmp_path / "c.h5")
    r = run(cli, ["cluster", "star", str(tmp_path / "old.h5"), "--beta", "0.3", "-o", c, "--device", "cpu"])
    assert r.exit_code == 0, r.output
    ref = str(tmp_path / "ref.h5")
    dclus.update(c, add1, ref, device="cpu", write="new")
    dclus.update(ref, add2, ref, device="cpu", write="new")
    for a in ("a1", "a2"):
        r = run(cli, ["cluster", "star", "--update", c, "--add", str(tmp_path / f"{a}.h5"), "-o", c, "--device", "cpu"])
        assert r.exit_code == 0, r.output
    assert_same_file(c, ref)
    r = run(cli, ["cluster", "eval", c, "--truth", ref])
    assert r.exit_code == 0, r.output
    assert "FBcubed" in r.output or "fbcubed" in r.output.lower()
    r = run(cli, ["corpus", "info", c])
    assert r.exit_code == 0 and "100" in r.output, r.output
    with h5py.File(c, "r") as f:
        assert int(f["uns/gputext/star_updates"][()]) == 2
