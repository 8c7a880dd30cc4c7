"""gputext.cluster.metrics against hand-computed examples and brute-force definitions, and the
`gputext cluster eval` command."""
from __future__ import annotations

import builtins
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from gputext.cli import cli
from gputext.cluster import metrics
from gputext.cluster.metrics import as_membership, fbcubed, nmi, onmi, purity, size_histogram
from gputext.errors import InputError
from gputext.io import Categorical, Corpus, write_corpus


def members(clusters, n):
    return as_membership([sorted(c) for c in clusters], n)


# ----------------------------------------------------------------------------- brute force definitions

def bcubed_brute(C, L):
    """Amigo et al. extended BCubed straight from the definition (items: lists of sets)."""
    n = len(C)
    P, R = [], []
    for e in range(n):
        ps = [Fraction(min(len(C[e] & C[f]), len(L[e] & L[f])), len(C[e] & C[f])) for f in range(n) if C[e] & C[f]]
        rs = [Fraction(min(len(C[e] & C[f]), len(L[e] & L[f])), len(L[e] & L[f])) for f in range(n) if L[e] & L[f]]
        P.append(sum(ps) / len(ps))
        R.append(sum(rs) / len(rs))
    p, r = sum(P) / n, sum(R) / n
    return float(p), float(r), float(2 * p * r / (p + r))


def _h(p):
    return 0.0 if p <= 0 else -p * math.log2(p)


def onmi_brute(X, Y, n):
    """LFK and McDaid NMI with the K x L loop of the definitions (clusters: lists of sets)."""
    def cond(A, B):
        out = []
        for x in A:
            a = len(x)
            hx = _h(a / n) + _h(1 - a / n)
            best = None
            for y in B:
                b, c = len(y), len(x & y)
                p = (c / n, (a - c) / n, (b - c) / n, (n - a - b + c) / n)
                if _h(p[0]) + _h(p[3]) > _h(p[1]) + _h(p[2]):
                    v = sum(map(_h, p)) - (_h(b / n) + _h(1 - b / n))
                    best = v if best is None else min(best, v)
            out.append((hx, hx if best is None else best))
        return out
    a, b = cond(X, Y), cond(Y, X)
    lfk = 1 - 0.5 * (np.mean([c / h if h > 0 else 0 for h, c in a]) + np.mean([c / h if h > 0 else 0 for h, c in b]))
    HX, HY = sum(h for h, _ in a), sum(h for h, _ in b)
    mutual = 0.5 * (HX - sum(c for _, c in a) + HY - sum(c for _, c in b))
    return lfk, (mutual / max(HX, HY) if max(HX, HY) > 0 else 1.0)


# ----------------------------------------------------------------------------- hand-computed examples

def test_fbcubed_hand_example():
    # truth A = {0, 1}, B = {2, 3}; clusters {0, 1, 2} and {2, 3} (item 2 in both)
    # precision per item 2/3, 2/3, 3/8, 1 -> 65/96; recall 1 for every item; F = 130/161
    got = fbcubed(members([{0, 1, 2}, {2, 3}], 4), members([{0, 1}, {2, 3}], 4))
    assert got["precision"] == pytest.approx(65 / 96, abs=1e-15)
    assert got["recall"] == pytest.approx(1.0, abs=1e-15)
    assert got["f"] == pytest.approx(130 / 161, abs=1e-15)


def test_fbcubed_perfect_and_one_cluster():
    truth = members([{0, 1}, {2, 3, 4}], 5)
    assert fbcubed(truth, truth) == {"precision": 1.0, "recall": 1.0, "f": 1.0}
    one = fbcubed(members([{0, 1, 2, 3, 4}], 5), truth)  # precision (2*2/5 + 3*3/5) / 5 = 13/25
    assert one["precision"] == pytest.approx(13 / 25) and one["recall"] == 1.0


def test_unclustered_items_count_as_singletons_and_unlabelled_items_are_left_out():
    pred = members([{0, 1}], 4)  # items 2 and 3 are in no cluster
    truth = np.array([0, 0, 1, -1])  # item 3 has no truth label
    got = fbcubed(pred, truth)
    # judged items 0, 1, 2: 2 alone in its singleton cluster: precision 1, recall 1
    assert got == {"precision": 1.0, "recall": 1.0, "f": 1.0}


def test_onmi_hand_examples():
    two = members([{0, 1}, {2, 3}], 4)
    assert onmi(two, two) == {"lfk": 1.0, "max": 1.0}
    # against one cluster of everything: LFK 0.5 (its known bias), McDaid's NMI_max 0
    got = onmi(two, members([{0, 1, 2, 3}], 4))
    assert got["lfk"] == pytest.approx(0.5) and got["max"] == pytest.approx(0.0)


def test_purity_and_nmi_hand_example():
    pred = np.array([0, 0, 1, 1, 1])
    truth = np.array([0, 0, 0, 1, 1])
    assert purity(pred, truth) == pytest.approx(0.8)
    from sklearn.metrics import normalized_mutual_info_score
    assert nmi(pred, truth) == pytest.approx(normalized_mutual_info_score(truth, pred), abs=1e-12)
    assert nmi(pred, pred) == pytest.approx(1.0) and purity(np.array([0, 0, -1]), np.array([1, 2, 1])) == 0.5


def test_size_histogram():
    sizes = [1, 2, 3, 5, 8, 9]
    clusters, start = [], 0
    for s in sizes:
        clusters.append(set(range(start, start + s)))
        start += s
    assert size_histogram(members(clusters, start)) == [(1, 1, 1), (2, 2, 1), (3, 4, 1), (5, 8, 2), (9, 16, 1)]


# ----------------------------------------------------------------------------- against the definitions

@pytest.mark.parametrize("seed", range(12))
def test_overlapping_measures_equal_the_definitions(seed):
    rng = np.random.default_rng(seed)
    n, k, l = int(rng.integers(4, 30)), int(rng.integers(1, 7)), int(rng.integers(1, 5))
    C = [set(rng.choice(k, min(k, int(rng.integers(1, 3))), replace=False).tolist()) for _ in range(n)]
    L = [set(rng.choice(l, min(l, int(rng.integers(1, 3))), replace=False).tolist()) for _ in range(n)]
    X = [x for x in ({i for i in range(n) if c in C[i]} for c in range(k)) if x]
    Y = [y for y in ({i for i in range(n) if c in L[i]} for c in range(l)) if y]
    got = fbcubed(members(X, n), members(Y, n))
    assert [got["precision"], got["recall"], got["f"]] == pytest.approx(bcubed_brute(C, L), abs=1e-12)
    o = onmi(members(X, n), members(Y, n))
    assert [o["lfk"], o["max"]] == pytest.approx(list(onmi_brute(X, Y, n)), abs=1e-12)


def test_big_clusters_are_cheap_and_exact():
    """20,000 items in 4 hard clusters: groups make BCubed linear; the contingency formula agrees."""
    rng = np.random.default_rng(1)
    pred = rng.integers(0, 4, 20000)
    truth = rng.integers(0, 3, 20000)
    got = fbcubed(pred, truth)
    n = np.zeros((4, 3))
    np.add.at(n, (pred, truth), 1)
    p = (n ** 2 / n.sum(axis=1, keepdims=True)).sum() / 20000
    r = (n ** 2 / n.sum(axis=0, keepdims=True)).sum() / 20000
    assert got["precision"] == pytest.approx(p, abs=1e-12) and got["recall"] == pytest.approx(r, abs=1e-12)


def test_bad_metric_inputs():
    with pytest.raises(InputError, match="different numbers of items"):
        fbcubed(np.array([0, 1]), np.array([0, 1, 1]))
    with pytest.raises(InputError, match="no item has a truth category"):
        onmi(np.array([0, 1]), np.array([-1, -1]))


# ----------------------------------------------------------------------------- the CLI

@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    n = 40
    X = sp.random(n, 20, density=0.3, random_state=4, format="csr", dtype=np.float32)
    ids = np.array([f"d{i}" for i in range(n)], dtype=object)
    label = Categorical(rng.integers(0, 3, n).astype(np.int32), np.array(["a", "b", "c"], dtype=object))
    dense = (rng.random((n, 4)) < 0.4).astype(np.float32)
    dense[dense.sum(axis=1) == 0, 0] = 1.0
    multi = sp.csr_matrix(dense)
    truth = tmp_path / "truth.h5"
    write_corpus(Corpus(X, ids, obs={"label": label}, obsm={"labels": sp.csr_matrix(multi)}), str(truth))
    overlap = members([set(rng.choice(n, 8, replace=False).tolist()) for _ in range(9)], n)
    over = tmp_path / "over.h5"
    write_corpus(Corpus(X, ids, obsm={"clusters": overlap.astype(np.float32)}), str(over))
    hard = rng.integers(0, 5, n).astype(np.int32)
    hard_path = tmp_path / "hard.h5"
    write_corpus(Corpus(X, ids, obs={"cluster": hard}), str(hard_path))
    perm = rng.permutation(n)
    shuffled = tmp_path / "shuffled.h5"
    write_corpus(Corpus(X[perm], ids[perm], obs={"label": label.take(perm)}), str(shuffled))
    return {"truth": truth, "over": over, "hard": hard_path, "shuffled": shuffled, "label": label, "multi": multi,
            "overlap": overlap, "hard_labels": hard, "n": n}


def run(*args):
    return CliRunner().invoke(cli, ["cluster", "eval", *map(str, args)])


def test_cli_eval_overlapping_against_labels(files):
    r = run(files["over"], "--truth", files["truth"], "--truth-key", "label", "--json", "-")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    expect = metrics.evaluate(files["overlap"], files["label"].codes)
    assert out["fbcubed"] == pytest.approx(expect["fbcubed"]) and out["onmi"] == pytest.approx(expect["onmi"])
    assert out["truth_source"] == "obs/label" and "purity" not in out
    r = run(files["over"], files["truth"])  # positional truth; auto picks /obsm/labels before /obs/label
    assert r.exit_code == 0 and "truth.h5:/obsm/labels" in r.output and "FBcubed" in r.output
    f = metrics.fbcubed(files["overlap"], files["multi"])["f"]
    assert f"F {f:.4f}" in r.output


def test_cli_eval_hard_partition_prints_purity_and_nmi(files):
    r = run(files["hard"], "--truth", files["truth"], "--truth-key", "label")
    assert r.exit_code == 0, r.output
    p = purity(files["hard_labels"], files["label"].codes)
    q = nmi(files["hard_labels"], files["label"].codes)
    assert f"purity {p:.4f}  NMI {q:.4f}" in r.output and "obs/cluster" in r.output


def test_cli_eval_identical_results_score_one(files):
    r = run(files["over"], "--truth", files["over"])
    assert r.exit_code == 0 and "F 1.0000" in r.output and "LFK 1.0000  McDaid max 1.0000" in r.output


def test_cli_eval_aligns_documents_by_id(files):
    a = run(files["hard"], "--truth", files["truth"], "--truth-key", "label", "--json", "-")
    b = run(files["hard"], "--truth", files["shuffled"], "--json", "-")
    assert a.exit_code == 0 and b.exit_code == 0
    ja, jb = json.loads(a.output), json.loads(b.output)
    assert ja["fbcubed"] == jb["fbcubed"] and ja["nmi"] == jb["nmi"]


def test_cli_eval_plot(files, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    png = tmp_path / "sizes.png"
    r = run(files["over"], "--truth", files["truth"], "--plot", png)
    assert r.exit_code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    real_import = builtins.__import__

    def no_matplotlib(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    r = run(files["over"], "--truth", files["truth"], "--plot", tmp_path / "other.png")
    assert r.exit_code == 2 and "--plot needs matplotlib" in r.output and not (tmp_path / "other.png").exists()


def test_cli_eval_refusals(files, tmp_path):
    r = run(files["over"])
    assert r.exit_code == 2 and "missing the truth" in r.output
    r = run(files["over"], files["truth"], "--truth", files["truth"])
    assert r.exit_code == 2 and "give the truth once" in r.output
    r = run(files["truth"], "--truth", files["truth"])
    assert r.exit_code == 2 and "no clustering" in r.output
    r = run(files["over"], "--truth", files["truth"], "--truth-key", "cluster")
    assert r.exit_code == 2 and "/obs/cluster is missing" in r.output
    other = tmp_path / "other.h5"
    write_corpus(Corpus(sp.identity(3, dtype=np.float32, format="csr"), np.array(["x", "y", "z"], dtype=object),
                        obs={"label": Categorical(np.zeros(3, np.int32), np.array(["a"], dtype=object))}), str(other))
    r = run(files["over"], "--truth", other)
    assert r.exit_code == 2 and "are not in the truth file" in r.output
    r = run(tmp_path / "missing.h5", "--truth", files["truth"])
    assert r.exit_code == 2 and "no such file" in r.output
