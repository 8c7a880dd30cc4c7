"""DClustR / CUDA-DClus (gputext.cluster.dclus): partial connected components on disk and the
update after additions, against the paper's Figures 9-16 / Tables 1-2 and against the independent
set-based DClustR of test_star_reference.py."""
from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from gputext.cli import cli
from gputext.cluster import dclus
from gputext.cluster.graph import build_graph, graph_from_edges
from gputext.cluster.star import cluster_star, oclustr_graph
from gputext.errors import InputError
from gputext.io import Categorical, Corpus, read_corpus, write_corpus
from test_star_reference import (TABLE1, TABLE2, TABLE2_OLD, adjacency_of, components, dclustr, named, oclustr,
                                 paper_edges, random_corpus)
from procs import child_env


def read_clusters(path):
    """{center: frozenset(members)} of a result file."""
    c = read_corpus(path)
    M = c.obsm["clusters"].tocsc()
    centers = c.uns["gputext"]["star"]["centers"]
    return {int(k): frozenset(M.indices[M.indptr[j]:M.indptr[j + 1]].tolist()) for j, k in enumerate(centers)}


def dummy_corpus(n, n_terms, start=0):
    X = sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), np.arange(start, start + n) % n_terms)), shape=(n, n_terms))
    return Corpus(X, np.array([f"d{start + i + 1}" for i in range(n)], dtype=object),
                  np.array([f"t{j}" for j in range(n_terms)], dtype=object))


@pytest.fixture
def table1_file(tmp_path):
    g = graph_from_edges(9, *paper_edges(TABLE1))
    res = oclustr_graph(g, "cpu")
    path = str(tmp_path / "table1.h5")
    pccs = dclus.write_result(dummy_corpus(9, 15), res, path, 0.3, "cpu")
    return path, pccs


def table2_edges():
    r, c, w = paper_edges(TABLE2_OLD)
    new_old = (r.astype(np.int32), c.astype(np.int32), w)  # (old v2, new v10)
    r, c, w = paper_edges(TABLE2)
    return new_old, (r.astype(np.int32), c.astype(np.int32), w)


# ----------------------------------------------------------------------------- the paper's example

def test_pccs_of_table1_are_figures_9_to_12(table1_file):
    _, pccs = table1_file
    # PCC1 = {v1, v3, v5, v6}, PCC2 = {v2, v4, v7}, PCC3 = {v8, v9}; PCC1 and PCC2 linked (v3 - v4)
    assert pccs.pcc_of.tolist() == [0, 1, 0, 1, 0, 0, 1, 2, 2]
    assert pccs.links.tolist() == [[0, 1]]
    assert [sorted(pccs.members(p) + 1) for p in range(3)] == [[1, 3, 5, 6], [2, 4, 7], [8, 9]]
    assert pccs.components().tolist() == [0, 0, 2]


def test_table2_additions_are_figures_13_to_16_and_the_clusters_by_hand(table1_file, tmp_path):
    path, _ = table1_file
    out = str(tmp_path / "after.h5")
    rep = dclus.update(path, dummy_corpus(6, 15, start=9), out, device="cpu", edges=table2_edges())
    graph, pccs = dclus.read_stored_graph(out)
    # PCC4 = {v10..v13} linked to PCC2 (v2 - v10); PCC5 = {v14, v15}
    assert pccs.pcc_of.tolist() == [0, 1, 0, 1, 0, 0, 1, 2, 2, 3, 3, 3, 3, 4, 4]
    assert pccs.links.tolist() == [[0, 1], [1, 3]]
    # the component of PCC1+PCC2+PCC4 and the new PCC5 are touched; PCC3 (v8, v9) stays on disk
    assert (rep.components_touched, rep.components_total) == (2, 3)
    assert (rep.pccs_loaded, rep.pccs_total, rep.vertices_loaded) == (2, 3, 7)
    # worked by hand (docs/star.md): C' = {v2, v3}; v2 is weak (v10 is more relevant) and leaves;
    # L = {v13, v10, v2} gives centers v13, v10, v2; the improvement keeps v3 and v10, links v7 to v10
    assert named(read_clusters(out)) == {3: [1, 3, 4, 5, 6], 8: [8, 9], 10: [2, 7, 10, 11, 12, 13], 14: [14, 15]}
    assert rep.stats["old_centers_removed"] == 1 and rep.stats["old_centers_kept"] == 1
    # and the graph on disk is the graph of the union
    union = graph_from_edges(15, *paper_edges(TABLE1 + TABLE2 + TABLE2_OLD))
    assert np.array_equal(graph.indptr, union.indptr) and np.array_equal(graph.indices, union.indices)
    assert np.array_equal(graph.weights, union.weights)
    # the same as the set-based reference and, in this example, as OClustR on the union
    assert named(read_clusters(out)) == named(oclustr(adjacency_of(union)))


# ----------------------------------------------------------------------------- random corpora

def split_corpus(X, n_old, seed=0):
    n = X.shape[0]
    terms = np.array([f"t{j}" for j in range(X.shape[1])], dtype=object)
    labels = Categorical((np.arange(n) % 3).astype(np.int32), np.array(["x", "y", "z"], dtype=object))
    whole = Corpus(X, np.array([f"doc{i}" for i in range(n)], dtype=object), terms, obs={"label": labels})
    return whole.take(np.arange(n_old)), whole.take(np.arange(n_old, n)), whole


def cluster_file(corpus, beta, path):
    res = cluster_star(corpus.X, beta, "cpu")
    dclus.write_result(corpus, res, path, beta, "cpu")
    return res


@pytest.mark.parametrize("seed,n_old,n_new,beta,n_terms", [
    (1, 60, 20, 0.3, 45), (2, 50, 30, 0.35, 45), (3, 70, 10, 0.25, 45), (4, 40, 40, 0.4, 45), (5, 30, 5, 0.5, 45),
    (6, 120, 40, 0.3, 150), (7, 100, 25, 0.25, 250)])  # the last two: many components
def test_update_equals_reference_dclustr(tmp_path, seed, n_old, n_new, beta, n_terms):
    X = random_corpus(n_old + n_new, n_terms, 6, seed=seed, empty=(3, n_old + 1), duplicates=((5, n_old + 2),))
    old, new, whole = split_corpus(X, n_old)
    before = cluster_file(old, beta, str(tmp_path / "old.h5"))
    out = str(tmp_path / "new.h5")
    rep = dclus.update(str(tmp_path / "old.h5"), new, out, device="cpu")
    graph, _ = dclus.read_stored_graph(out)
    # the graph kept on disk equals the union's graph built from scratch
    scratch = build_graph(whole.X, beta, "cpu")
    assert np.array_equal(graph.indptr, scratch.indptr) and np.array_equal(graph.indices, scratch.indices)
    assert np.array_equal(graph.weights, scratch.weights)
    # the clusters equal the set-based DClustR on that graph
    adj = adjacency_of(graph)
    expect, affected = dclustr(adj, {int(c): frozenset(m) for c, m in before.cluster_sets().items()},
                               set(range(n_old, n_old + n_new)))
    got = read_clusters(out)
    assert got == expect
    assert rep.vertices_loaded == len([v for v in affected if v < n_old])
    # where the paper's definitions make DClustR and OClustR coincide: components without new
    # documents keep their clusters; components of new documents only are clustered as OClustR
    full = oclustr(adj)
    untouched = set(range(n_old + n_new)) - affected
    assert {c: m for c, m in got.items() if c in untouched} == {c: m for c, m in full.items() if c in untouched}
    new_only = [comp for comp in (components(adj, [v]) for v in range(n_old, n_old + n_new)) if min(comp) >= n_old]
    for comp in new_only:
        assert {c: m for c, m in got.items() if c in comp} == {c: m for c, m in full.items() if c in comp}
    # the corpus of the union
    res = read_corpus(out)
    assert res.doc_ids.tolist() == whole.doc_ids.tolist() and (res.X != whole.X).nnz == 0
    assert res.obs["label"].codes.tolist() == whole.obs["label"].codes.tolist()
    assert np.all(np.diff(res.obsm["clusters"].indptr) >= 1)


@pytest.mark.parametrize("seed", range(6))
def test_cover_update_with_any_previous_centers_equals_reference(seed):
    """dclustr_graph on random graphs with exact ties, from an arbitrary C' (not only OClustR's)."""
    from test_star import random_graph
    g = random_graph(30, 0.12, seed + 40)
    previous = np.random.default_rng(seed).random(30) < 0.3
    got = {int(c): frozenset(m) for c, m in dclus.dclustr_graph(g, previous, "cpu").cluster_sets().items()}
    expect, _ = dclustr(adjacency_of(g), {int(c): frozenset() for c in np.flatnonzero(previous)}, set(range(30)))
    assert got == expect
    # with no previous centers the update is OClustR
    none = dclus.dclustr_graph(g, np.zeros(30, bool), "cpu")
    assert {int(c): frozenset(m) for c, m in none.cluster_sets().items()} == oclustr(adjacency_of(g))


def test_two_successive_updates_equal_reference(tmp_path):
    X = random_corpus(90, 40, 6, seed=11)
    n = X.shape[0]
    terms = np.array([f"t{j}" for j in range(40)], dtype=object)
    whole = Corpus(X, np.array([f"d{i}" for i in range(n)], dtype=object), terms)
    parts = [whole.take(np.arange(a, b)) for a, b in ((0, 50), (50, 75), (75, 90))]
    before = cluster_file(parts[0], 0.3, str(tmp_path / "a.h5"))
    dclus.update(str(tmp_path / "a.h5"), parts[1], str(tmp_path / "b.h5"), device="cpu")
    dclus.update(str(tmp_path / "b.h5"), parts[2], str(tmp_path / "c.h5"), device="cpu")
    graph, pccs = dclus.read_stored_graph(str(tmp_path / "c.h5"))
    adj = adjacency_of(graph)
    sub = {v: {u: w for u, w in adj[v].items() if u < 75} for v in range(75)}
    mid, _ = dclustr(sub, {int(c): frozenset(m) for c, m in before.cluster_sets().items()}, set(range(50, 75)))
    assert read_clusters(str(tmp_path / "b.h5")) == mid
    final, _ = dclustr(adj, mid, set(range(75, 90)))
    assert read_clusters(str(tmp_path / "c.h5")) == final
    assert read_corpus(str(tmp_path / "c.h5")).uns["gputext"]["star_updates"] == 2
    # PCCs stay a partition whose links close into the graph's connected components
    comp = pccs.components()[pccs.pcc_of]
    for v in range(n):
        for u in graph.neighbours(v):
            assert comp[u] == comp[v]


def test_additions_without_edges_touch_only_new_components(tmp_path):
    X = random_corpus(40, 30, 5, seed=4)
    old, _, _ = split_corpus(X, 40)
    cluster_file(old, 0.3, str(tmp_path / "old.h5"))
    far = Corpus(sp.csr_matrix(np.zeros((3, 30), np.float32)), np.array(["n1", "n2", "n3"], dtype=object), old.terms,
                 obs={"label": Categorical(np.array([0, 1, 0], np.int32), np.array(["y", "w"], dtype=object))})
    rep = dclus.update(str(tmp_path / "old.h5"), far, str(tmp_path / "o.h5"), device="cpu")
    assert rep.pccs_loaded == 0 and rep.vertices_loaded == 0 and rep.components_touched == 3
    got = read_clusters(str(tmp_path / "o.h5"))
    before = read_clusters(str(tmp_path / "old.h5"))
    assert got == {**before, 40: frozenset([40]), 41: frozenset([41]), 42: frozenset([42])}
    label = read_corpus(str(tmp_path / "o.h5")).obs["label"]  # categories merged
    assert label.categories.tolist() == ["x", "y", "z", "w"] and label.codes[-3:].tolist() == [1, 3, 1]


def test_stored_graph_is_chunk_size_independent_and_append_only(tmp_path, monkeypatch):
    """The update copies the old edge datasets raw and appends: the old prefix is unchanged, and
    tiny HDF5 chunks (many chunks, partial last chunks) give the same file contents."""
    X = random_corpus(80, 40, 6, seed=8)
    old, new, _ = split_corpus(X, 65)
    cluster_file(old, 0.3, str(tmp_path / "old.h5"))
    dclus.update(str(tmp_path / "old.h5"), new, str(tmp_path / "big.h5"), device="cpu")
    monkeypatch.setattr(dclus.store, "CHUNK_ENTRIES", 7)
    cluster_file(old, 0.3, str(tmp_path / "old7.h5"))
    dclus.update(str(tmp_path / "old7.h5"), new, str(tmp_path / "small.h5"), device="cpu")
    keys = ("order", "pcc_indptr", "adj_indptr", "adj_indices", "adj_weights", "links", "pcc_of_doc", "degree",
            "weight_sum")
    with h5py.File(tmp_path / "big.h5") as a, h5py.File(tmp_path / "small.h5") as b, h5py.File(tmp_path / "old.h5") as o:
        for key in keys:
            assert np.array_equal(a[f"uns/gputext/star/graph/{key}"][()], b[f"uns/gputext/star/graph/{key}"][()]), key
        assert b["uns/gputext/star/graph/adj_indices"].chunks == (7,)
        n_old_entries = o["uns/gputext/star/graph/adj_indptr"][-1]
        for key in ("adj_indices", "adj_weights", "order", "pcc_indptr"):
            before = o[f"uns/gputext/star/graph/{key}"][()]
            assert np.array_equal(a[f"uns/gputext/star/graph/{key}"][:len(before)], before), key
        assert np.array_equal(a["uns/gputext/star/graph/adj_indptr"][:66], o["uns/gputext/star/graph/adj_indptr"][()])
        assert a["uns/gputext/star/graph/adj_indices"].shape[0] > n_old_entries


def test_stored_degree_and_weight_sums_equal_the_union_graph(tmp_path):
    """Per-document degree and fixed-point weight sums (what the update reads instead of edge
    weights) equal row_stats of the union's graph built from scratch."""
    from gputext.kernels import star as kstar
    X = random_corpus(90, 40, 6, seed=21)
    old, new, whole = split_corpus(X, 60)
    cluster_file(old, 0.3, str(tmp_path / "old.h5"))
    dclus.update(str(tmp_path / "old.h5"), new, str(tmp_path / "new.h5"), device="cpu")
    scratch = build_graph(whole.X, 0.3, "cpu")
    degree, weight_sum = kstar.row_stats(scratch.indptr, scratch.weights)
    with h5py.File(tmp_path / "new.h5") as f:
        g = f["uns/gputext/star/graph"]
        assert np.array_equal(g["degree"][()], degree) and np.array_equal(g["weight_sum"][()], weight_sum)
        assert g["n_edges"][()] == scratch.n_edges == g["adj_indices"].shape[0]
        assert g["format_version"][()] == dclus.GRAPH_FORMAT_VERSION


def test_old_graph_format_is_refused_with_a_clear_error(tmp_path):
    X = random_corpus(30, 20, 5, seed=13)
    old, new, _ = split_corpus(X, 25)
    path = str(tmp_path / "c.h5")
    cluster_file(old, 0.3, path)
    with h5py.File(path, "a") as f:  # what a format-1 file looks like: no format_version, no degree/weight_sum
        for key in ("format_version", "degree", "weight_sum"):
            del f[f"uns/gputext/star/graph/{key}"]
    with pytest.raises(InputError, match="graph format version 1.*recluster"):
        dclus.update(path, new, str(tmp_path / "o.h5"), device="cpu")
    assert not (tmp_path / "o.h5").exists()


def test_update_in_place_replaces_the_file(tmp_path):
    X = random_corpus(50, 30, 5, seed=9)
    old, new, whole = split_corpus(X, 40)
    cluster_file(old, 0.3, str(tmp_path / "c.h5"))
    dclus.update(str(tmp_path / "c.h5"), new, str(tmp_path / "ref.h5"), device="cpu")
    dclus.update(str(tmp_path / "c.h5"), new, str(tmp_path / "c.h5"), device="cpu")
    assert read_clusters(str(tmp_path / "c.h5")) == read_clusters(str(tmp_path / "ref.h5"))
    assert read_corpus(str(tmp_path / "c.h5")).n_docs == 50


def test_update_refusals(tmp_path):
    X = random_corpus(30, 20, 5, seed=10)
    old, new, _ = split_corpus(X, 25)
    path = str(tmp_path / "c.h5")
    cluster_file(old, 0.3, path)
    with pytest.raises(InputError, match="already exist"):
        dclus.update(path, old.take(np.arange(3)), str(tmp_path / "o.h5"), device="cpu")
    other = Corpus(new.X[:, :10], new.doc_ids, new.terms[:10])
    with pytest.raises(InputError, match="different vocabulary"):
        dclus.update(path, other, str(tmp_path / "o.h5"), device="cpu")
    with pytest.raises(InputError, match="differs from the beta 0.3"):
        dclus.update(path, new, str(tmp_path / "o.h5"), device="cpu", beta=0.4)
    with pytest.raises(InputError, match="not stdin"):
        dclus.update("-", new, str(tmp_path / "o.h5"), device="cpu")
    assert not (tmp_path / "o.h5").exists()


def test_cli_update(tmp_path):
    X = random_corpus(70, 40, 6, seed=12)
    old, new, whole = split_corpus(X, 55)
    write_corpus(old, str(tmp_path / "old.h5"))
    write_corpus(new, str(tmp_path / "new.h5"))
    run = CliRunner().invoke
    r = run(cli, ["cluster", "star", str(tmp_path / "old.h5"), "--beta", "0.3", "-o", str(tmp_path / "c.h5"), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    r = run(cli, ["cluster", "star", "--update", str(tmp_path / "c.h5"), "--add", str(tmp_path / "new.h5"),
                  "-o", str(tmp_path / "c2.h5"), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert "touched" in r.output and "connected components" in r.output
    lib = str(tmp_path / "lib.h5")
    dclus.update(str(tmp_path / "c.h5"), new, lib, device="cpu")
    assert read_clusters(str(tmp_path / "c2.h5")) == read_clusters(lib)
    stats = read_corpus(str(tmp_path / "c2.h5")).uns["gputext"]["star"]["update"]
    assert stats["n_new"] == 15 and stats["components_touched"] >= 1
    r = run(cli, ["cluster", "star", "--update", str(tmp_path / "c.h5"), "--add", str(tmp_path / "new.h5"),
                  "--beta", "0.5", "-o", str(tmp_path / "c3.h5")])
    assert r.exit_code == 2 and "differs from the beta" in r.output and not (tmp_path / "c3.h5").exists()


def _lists_sequential(adj, relevance, centers):
    """The paper's candidate-list procedure as written: visit V+ in order, then C' in order
    (plain Python; reference for the parallel, gather-based dclustr_lists)."""
    n = len(adj)
    best = [-1.0] * n
    for c in range(n):
        if centers[c]:
            for u in [c] + list(adj[c]):
                best[u] = max(best[u], relevance[c])
    in_list, active = [False] * n, [False] * n
    for v in range(n):
        if centers[v] or relevance[v] <= 0:
            continue
        if best[v] < 0:
            in_list[v] = True
        for u in adj[v]:
            if best[u] < 0:
                in_list[v] = True
            if best[u] < relevance[v]:
                in_list[v] = True
                active[u] = True
    leave = [False] * n
    for v in range(n):
        if not centers[v]:
            continue
        weak = any(relevance[u] > relevance[v] for u in adj[v])
        for u in adj[v]:
            if relevance[u] > relevance[v]:
                in_list[u] = True
        if weak or any(active[u] for u in adj[v]):
            leave[v] = True
            if relevance[v] > 0:
                in_list[v] = True
    kept = [bool(centers[v]) and not leave[v] for v in range(n)]
    return in_list, kept, sum(leave), sum(active)


@pytest.mark.parametrize("seed", range(8))
def test_parallel_candidate_list_equals_the_sequential_procedure(seed):
    from test_star import random_graph
    from gputext.cluster.star import compute_relevance
    rng = np.random.default_rng(seed)
    for trial in range(12):
        g = random_graph(int(rng.integers(5, 50)), float(rng.uniform(0.03, 0.4)), seed * 100 + trial)
        _, rel = compute_relevance(g, "cpu")
        centers = rng.random(g.n) < rng.uniform(0.0, 0.6)
        adj = [g.neighbours(v).tolist() for v in range(g.n)]
        expect_list, expect_kept, expect_removed, expect_active = _lists_sequential(adj, rel.tolist(), centers.tolist())
        is_center, in_list = centers.copy(), np.zeros(g.n, bool)
        removed, n_active = dclus.dclustr_lists(g.indptr, g.indices, rel, is_center, in_list)
        assert in_list.tolist() == expect_list and is_center.tolist() == expect_kept
        assert (removed, n_active) == (expect_removed, expect_active)


def test_owner_rows_of_ordered_engine_output_equal_the_sorting_path():
    """The additions' owner rows (what assign_pcc examines and what is appended on disk) from the
    engine's ordered output equal those of the general path (shuffled edges, swapped ends)."""
    rng = np.random.default_rng(0)
    for trial in range(60):
        n_old, n_new = int(rng.integers(0, 25)), int(rng.integers(1, 25))
        no = [(o, v) for v in range(n_old, n_old + n_new) for o in range(n_old) if rng.random() < 0.3]
        nn = [(x, y) for x in range(n_old, n_old + n_new) for y in range(x + 1, n_old + n_new) if rng.random() < 0.3]
        o_old, o_new = (np.array([p[i] for p in no], np.int32) for i in (0, 1))
        a, b = (np.array([p[i] for p in nn], np.int32) for i in (0, 1))
        w_no, w_nn = rng.random(len(no)).astype(np.float32), rng.random(len(nn)).astype(np.float32)
        ptr, idx, val = dclus.score.new_owner_rows(n_old, n_new, (o_old, o_new, w_no), (a, b, w_nn))
        p1, p2 = rng.permutation(len(no)), rng.permutation(len(nn))
        ptr2, idx2, val2 = dclus.score.new_owner_rows(n_old, n_new, (o_old[p1], o_new[p1], w_no[p1]), (b[p2], a[p2], w_nn[p2]))
        assert np.array_equal(ptr, ptr2) and np.array_equal(idx, idx2) and np.array_equal(val, val2)
        for r in range(n_new):  # row r: old neighbours, then later new ones, ascending
            v = n_old + r
            expect = sorted([o for o, x in no if x == v] + [y for x, y in nn if x == v])
            assert idx[ptr[r]:ptr[r + 1]].tolist() == expect


@pytest.mark.cudasim
def test_update_on_cuda_writes_the_same_file_as_cpu(tmp_path):
    """Simulator, tiny sizes: scoring of the additions on device="cuda" gives the same clusters and
    the same stored graph (every dataset) as the CPU twin."""
    from gputext.backend import resolve
    from gputext.engine import Geometry
    try:
        backend = resolve("cuda")
    except InputError:
        pytest.skip("no CUDA device and no simulator")
    tiny = Geometry(accumulate_block=8, accumulate_items=2, select_block=8, select_items=2, merge_block=8,
                    merge_width=16, build_block=8, scan_block=8, scan_items=2)
    X = random_corpus(17, 10, 4, seed=5)
    old, new, _ = split_corpus(X, 12)
    cluster_file(old, 0.3, str(tmp_path / "old.h5"))
    dclus.update(str(tmp_path / "old.h5"), new, str(tmp_path / "cpu.h5"), device="cpu")
    dclus.update(str(tmp_path / "old.h5"), new, str(tmp_path / "gpu.h5"), device=backend, engine_geometry=tiny)
    assert read_clusters(str(tmp_path / "cpu.h5")) == read_clusters(str(tmp_path / "gpu.h5"))
    with h5py.File(tmp_path / "cpu.h5") as a, h5py.File(tmp_path / "gpu.h5") as b:
        g1, g2 = a["uns/gputext/star/graph"], b["uns/gputext/star/graph"]
        assert set(g1) == set(g2)
        for key in g1:
            assert np.array_equal(g1[key][()], g2[key][()]), key


def test_coalesced_reads_do_not_change_the_update(tmp_path, monkeypatch):
    """Touched PCC ranges are read one by one (READ_GAP = 0), merged across small gaps, or as one
    read: the loaded rows, clusters and stored graph are the same."""
    X = random_corpus(160, 150, 6, seed=6)  # many components: several separate touched ranges
    old, new, _ = split_corpus(X, 120)
    cluster_file(old, 0.3, str(tmp_path / "old.h5"))
    outs = []
    for gap in (0, 5, 1 << 30):
        monkeypatch.setattr(dclus.store, "READ_GAP", gap)
        out = str(tmp_path / f"gap{gap}.h5")
        rep = dclus.update(str(tmp_path / "old.h5"), new, out, device="cpu")
        outs.append((out, rep))
    assert outs[0][1].pccs_loaded > 1 and outs[0][1].pccs_loaded < outs[0][1].pccs_total
    first = read_clusters(outs[0][0])
    for out, rep in outs[1:]:
        assert read_clusters(out) == first and rep.entries_loaded == outs[0][1].entries_loaded
        with h5py.File(outs[0][0]) as a, h5py.File(out) as b:
            for key in ("adj_indptr", "adj_indices", "adj_weights", "degree", "weight_sum", "order"):
                assert np.array_equal(a[f"uns/gputext/star/graph/{key}"][()], b[f"uns/gputext/star/graph/{key}"][()])


@pytest.mark.parametrize("seed", range(4))
def test_symmetric_from_owner_equals_scipy_for_any_ownership_and_chunks(seed):
    """Each edge stored once, in the row of a random endpoint, rows scattered in the buffer: the
    symmetric CSR (in local ids, rows sorted) equals scipy's A + A.T, for any number of chunks."""
    rng = np.random.default_rng(seed)
    n_global = 60
    vertices = np.sort(rng.choice(n_global, 40, replace=False))  # the local vertex set
    local_of = np.full(n_global, -1, np.int32)
    local_of[vertices] = np.arange(len(vertices), dtype=np.int32)
    m = len(vertices)
    dense = np.triu(rng.random((m, m)) < 0.2, 1)
    a, b = np.nonzero(dense)
    w = rng.random(len(a)).astype(np.float32)
    owner_is_a = rng.random(len(a)) < 0.5
    own, other = np.where(owner_is_a, a, b), np.where(owner_is_a, b, a)
    rows = [sorted(zip(vertices[other[own == k]].tolist(), w[own == k].tolist())) for k in range(m)]
    order = rng.permutation(m)  # rows laid out in a random order in the buffer, with gaps
    idx, ws, start, length = [], [], np.zeros(m, np.int64), np.zeros(m, np.int64)
    for k in order:
        idx += [-7] * int(rng.integers(0, 3))
        ws += [0.0] * (len(idx) - len(ws))
        start[k], length[k] = len(idx), len(rows[k])
        idx += [g for g, _ in rows[k]]
        ws += [x for _, x in rows[k]]
    idx, ws = np.array(idx, np.int32), np.array(ws, np.float32)
    ref = sp.coo_matrix((w, (a, b)), shape=(m, m)).tocsr()
    ref = (ref + ref.T).tocsr()
    ref.sort_indices()
    for chunks in (1, 3, 64):
        ptr, ind, val = dclus.symmetric_from_owner(start, length, idx, ws, local_of, chunks, True)
        assert np.array_equal(ptr, ref.indptr) and np.array_equal(ind, ref.indices) and np.array_equal(val, ref.data)
        ptr2, ind2, val2 = dclus.symmetric_from_owner(start, length, idx, ws, local_of, chunks, False)
        assert np.array_equal(ptr2, ptr) and np.array_equal(ind2, ind) and len(val2) == 0


@pytest.mark.parametrize("chunks", [1, 3, 64])
def test_star_reduce_gives_the_best_cover_and_the_star_counts(chunks):
    rng = np.random.default_rng(chunks)
    from test_star import random_graph
    g = random_graph(120, 0.05, chunks + 3)
    rel = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], g.n)
    is_center = rng.random(g.n) < 0.2
    want = np.full(g.n, -1.0)
    for c in np.flatnonzero(is_center):
        for u in np.concatenate([[c], g.neighbours(c)]):
            want[u] = max(want[u], rel[c])
    centers = np.flatnonzero(is_center)
    assert dclus.star_reduce(g.indptr, g.indices, centers, rel[centers], True, chunks).tolist() == want.tolist()
    held = np.zeros(g.n)  # the sum form: how many of the stars hold each vertex (the improvement's counts)
    for c in centers:
        held[np.concatenate([[c], g.neighbours(c)])] += 1
    assert dclus.star_reduce(g.indptr, g.indices, centers, np.ones(len(centers)), False, chunks).tolist() == held.tolist()


def test_assign_pcc_by_distinct_old_pccs_equals_the_entry_walk():
    # an update's PCC assignment reduces each row's old neighbours to their distinct PCCs (in
    # parallel); the PCCs and the links must be those of walking every entry in order
    rng = np.random.default_rng(7)
    n_links = 0
    for trial in range(20):
        n_old, n_new, n_pcc = 200, 60, 30
        pcc_of_old = rng.integers(0, n_pcc, n_old).astype(np.int32)
        links = np.array([(a, b) for a, b in rng.integers(0, n_pcc, (8, 2)) if a < b], np.int32).reshape(-1, 2)
        rows, ptr = [], [0]
        for r in range(n_new):
            old_n = np.sort(rng.choice(n_old, rng.integers(0, 12), replace=False))
            later = np.arange(n_old + r + 1, n_old + n_new)
            new_n = np.sort(rng.choice(later, min(len(later), rng.integers(0, 4)), replace=False)) if len(later) else later
            row = np.concatenate([old_n, new_n]).astype(np.int32)
            rows.append(row)
            ptr.append(ptr[-1] + len(row))
        ptr = np.asarray(ptr, np.int64)
        idx = np.concatenate(rows).astype(np.int32)
        outs = []
        for reduced in (True, False):
            pcc_of = np.concatenate([pcc_of_old, np.full(n_new, -1, np.int32)])
            parent = np.empty(n_pcc + n_new, np.int32)
            parent[:n_pcc] = np.arange(n_pcc, dtype=np.int32)
            dclus.host.union_links(parent, links)
            if reduced:
                out = dclus.assign_pcc(ptr, idx, pcc_of, n_old, n_pcc, parent)
            else:
                out = dclus.host.assign_pcc_rows(ptr, idx, pcc_of, n_old, n_pcc, parent, np.empty(0, np.int32),
                                                 np.zeros(n_new, np.int64), np.zeros(n_new, np.int64), False)
            outs.append((out[0], out[1], pcc_of))
        assert outs[0][0] == outs[1][0]
        assert np.array_equal(outs[0][1], outs[1][1]) and np.array_equal(outs[0][2], outs[1][2])
        n_links += len(outs[0][1])
    assert n_links > 100  # the walks do link PCCs (old ones among themselves, new ones to old)


def test_the_cluster_and_update_kernels_can_be_cached(tmp_path):
    """numba cannot cache a jitted function that uses a dynamic global (numba.get_num_threads()
    inside jitted code is one): it would compile in every process, seconds on every CLI call.  A
    fresh process clusters and updates a small corpus with numba's warnings as errors: a "Cannot
    cache" warning fails it."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent(f"""
        import warnings
        from numba.core.errors import NumbaWarning
        warnings.simplefilter("error", NumbaWarning)
        import numpy as np
        from gputext.cluster import dclus
        from gputext.cluster.star import cluster_star
        from gputext.io import Corpus, write_corpus
        from test_star_reference import random_corpus
        X = random_corpus(80, 30, 6, 1)
        c = Corpus(X, np.array([f"d{{i}}" for i in range(80)], object), np.array([f"t{{j}}" for j in range(30)], object))
        base, add = c.take(np.arange(60)), c.take(np.arange(60, 80))
        dclus.write_result(base, cluster_star(base, beta=0.2, device="cpu"), r"{tmp_path}/b.h5", 0.2, "cpu")
        dclus.update(r"{tmp_path}/b.h5", add, r"{tmp_path}/b.h5", device="cpu")
    """)
    tests = str(__import__("pathlib").Path(__file__).parent)
    env = child_env(tests)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
