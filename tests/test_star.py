"""OClustR / CUDA-OClus (gputext.cluster.star, graph, kernels/star.py) against the independent
references of test_star_reference.py, the paper's Table 1 example, and the CLI."""
from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from gputext.cli import cli
from gputext.cluster import dclus
from gputext.cluster.graph import build_graph, graph_from_edges, shard_bounds
from gputext.cluster import star_host as star  # the compiled cover and improvement loops
from gputext.cluster.star import cluster_star, compute_relevance, oclustr_graph
from gputext.errors import InputError
from gputext.io import Corpus, Categorical, read_corpus, write_corpus
from gputext.kernels import star as kstar
from test_star_reference import (TABLE1, adjacency, adjacency_of, brute_force_graph, named, oclustr,
                                 paper_edges, random_corpus, relevance)


def random_graph(n, p, seed, weights=(0.3, 0.4, 0.5, 0.6)):
    """Random graph whose weights come from a small set (many exact ties of degree and AIS)."""
    rng = np.random.default_rng(seed)
    rows, cols = np.triu_indices(n, 1)
    keep = rng.random(len(rows)) < p
    w = rng.choice(np.array(weights, np.float32), keep.sum())
    return graph_from_edges(n, rows[keep], cols[keep], w)


def clusters_of(result):
    return {int(c): frozenset(m) for c, m in result.cluster_sets().items()}


# ----------------------------------------------------------------------------- the paper's example

def test_table1_relevance_and_clusters():
    g = graph_from_edges(9, *paper_edges(TABLE1))
    _, rel = compute_relevance(g, "cpu")
    assert rel.tolist() == [0.25, 0.5, 0.75, 0.75, 0.75, 0.0, 0.5, 1.0, 1.0]
    res = oclustr_graph(g, "cpu")
    # initial cover {v8, v3, v4, v2}; v4's star {v4, v2, v3} shares all three vertices: removed
    assert res.stats["n_initial_clusters"] == 4 and res.stats["n_removed"] == 1
    assert named(clusters_of(res)) == {2: [2, 4, 7], 3: [1, 3, 4, 5, 6], 8: [8, 9]}
    assert res.centers.dtype == np.int32 and res.centers.tolist() == [1, 2, 7]
    assert res.membership.dtype == np.float32 and res.membership.shape == (9, 3)
    assert set(res.membership.data.tolist()) == {1.0}


# ----------------------------------------------------------------------------- relevance

@pytest.mark.parametrize("seed", range(4))
def test_relevance_twin_equals_exact_reference(seed):
    g = random_graph(40, 0.12, seed)
    count, rel = compute_relevance(g, "cpu")
    ref = relevance(adjacency_of(g))
    assert [float(ref[v]) for v in range(g.n)] == rel.tolist()
    assert [int(ref[v] * 2 * g.degree[v]) for v in range(g.n)] == count.tolist()
    assert count.dtype == np.int32 and rel.dtype == np.float64


def test_ais_is_exact_and_order_free():
    w = np.array([0.1, 0.2, 0.3, 0.7000001, 0.25], np.float32)
    deg = np.zeros(2, np.int32)
    sums = np.zeros(2, np.int64)
    for perm in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]):
        deg[:] = 0
        sums[:] = 0
        kstar.accumulate_upper(np.array([0, 5], np.int64), np.ones(5, np.int32), w[perm], 0, deg, sums)
        ais = kstar.ais_from_sums(deg, sums)
        import math
        assert ais[0] == ais[1] == math.fsum(w.astype(np.float64)) / 5


# ----------------------------------------------------------------------------- cover and improvement

@pytest.mark.parametrize("seed", range(8))
def test_oclustr_equals_reference_on_random_graphs(seed):
    g = random_graph(45, [0.05, 0.1, 0.2][seed % 3], seed)
    res = oclustr_graph(g, "cpu")
    assert clusters_of(res) == oclustr(adjacency_of(g))


def sequential_cover(g, candidates, is_center, covered):
    """The cover's visit, literally (plain Python): v becomes a center when v or a neighbour is uncovered."""
    for v in candidates:
        if not is_center[v] and (not covered[v] or not covered[g.neighbours(v)].all()):
            is_center[v] = True
            covered[v] = True
            covered[g.neighbours(v)] = True


@pytest.mark.parametrize("seed", range(6))
def test_cover_in_blocks_equals_the_sequential_visit(seed):
    # cover_candidates drops, block by block and in parallel, the candidates with nothing left to
    # cover; with blocks of 1..4 candidates, or one block, it must equal the literal visit
    rng = np.random.default_rng(seed)
    g = random_graph(300, [0.01, 0.03, 0.08][seed % 3], seed + 50)
    cand = rng.permutation(300)[:rng.integers(100, 300)].astype(np.int64)
    start = rng.random(300) < [0.0, 0.05][seed % 2]  # e.g. DClustR's kept centers
    covered0 = start.copy()
    for c in np.flatnonzero(start):
        covered0[g.neighbours(c)] = True
    want_c, want_cov = start.copy(), covered0.copy()
    sequential_cover(g, cand, want_c, want_cov)
    for block, max_block in ((1, 4), (3, 3), (256, 16384), (1 << 20, 1 << 20)):
        is_c, cov = start.copy(), covered0.copy()
        added = star.cover_candidates(g.indptr, g.indices, cand, is_c, cov, block, max_block)
        assert is_c.tolist() == want_c.tolist() and cov.tolist() == want_cov.tolist()
        assert added == int(want_c.sum() - start.sum())


@pytest.mark.parametrize("seed", range(4))
def test_non_useful_stops_early_with_the_full_count_answer(seed):
    rng = np.random.default_rng(seed)
    g = random_graph(80, 0.1, seed + 70)
    for _ in range(20):
        cnt = rng.integers(0, 3, g.n).astype(np.int32)
        for u in range(g.n):
            if g.degree[u] == 0:
                continue
            members = np.concatenate([[u], g.neighbours(u)])
            shared = int((cnt[members] > 1).sum())
            assert star._non_useful(g.indptr, g.indices, u, cnt) == (shared > len(members) - shared)


@pytest.mark.parametrize("seed", range(3))
def test_result_is_a_cover_with_its_centers(seed):
    g = random_graph(60, 0.04, seed + 10)
    res = oclustr_graph(g, "cpu")
    M = res.membership.tocsc()
    assert np.all(np.diff(res.membership.indptr) >= 1), "every vertex is in a cluster"
    assert np.all(np.diff(res.centers) > 0)
    for k, c in enumerate(res.centers):
        members = set(M.indices[M.indptr[k]:M.indptr[k + 1]].tolist())
        assert c in members and set(g.neighbours(c).tolist()) <= members
    isolated = np.flatnonzero(g.degree == 0)
    assert set(isolated.tolist()) <= set(res.centers.tolist())


def test_clusters_decompose_over_components():
    """The rules are component-local: clustering two disjoint graphs together = separately."""
    a, b = random_graph(20, 0.15, 1), random_graph(25, 0.12, 2)
    ra, rb = a.to_scipy().tocoo(), b.to_scipy().tocoo()
    up_a, up_b = ra.row < ra.col, rb.row < rb.col
    both = graph_from_edges(45, np.concatenate([ra.row[up_a], rb.row[up_b] + 20]),
                            np.concatenate([ra.col[up_a], rb.col[up_b] + 20]),
                            np.concatenate([ra.data[up_a], rb.data[up_b]]))
    whole = clusters_of(oclustr_graph(both, "cpu"))
    left = clusters_of(oclustr_graph(a, "cpu"))
    right = {c + 20: frozenset(m + 20 for m in ms) for c, ms in clusters_of(oclustr_graph(b, "cpu")).items()}
    assert whole == {**left, **right}


# ----------------------------------------------------------------------------- graph through the engine

def test_graph_equals_float64_brute_force():
    X = random_corpus(70, 30, 6, seed=3, empty=(4, 50), duplicates=((1, 2), (1, 60)))
    beta = 0.35
    g = build_graph(X, beta, "cpu")
    ref = brute_force_graph(X, beta)
    assert all(abs(s - beta) > 1e-9 for s in ref.values())  # no pair on the threshold itself
    coo = g.to_scipy().tocoo()
    got = {(int(i), int(j)): float(w) for i, j, w in zip(coo.row, coo.col, coo.data) if i < j}
    assert set(got) == set(ref)
    assert np.allclose([got[k] for k in ref], [ref[k] for k in ref], rtol=1e-6, atol=1e-7)
    assert g.to_scipy().toarray().tolist() == g.to_scipy().T.toarray().tolist()  # symmetric, weights too
    assert g.degree[4] == 0 and g.degree[50] == 0
    assert g.indices.dtype == np.int32 and g.indptr.dtype == np.int64 and g.weights.dtype == np.float32
    for v in range(g.n):  # sorted rows
        assert np.all(np.diff(g.neighbours(v)) > 0)


def test_graph_does_not_depend_on_batches_or_shards():
    X = random_corpus(90, 25, 5, seed=5)
    base = build_graph(X, 0.3, "cpu")
    for batch, shards in ((7, 1), (13, 3), (200, 5), (1, 2)):
        g = build_graph(X, 0.3, "cpu", batch_size=batch, shards=shards)
        assert np.array_equal(g.indptr, base.indptr) and np.array_equal(g.indices, base.indices)
        assert np.array_equal(g.weights, base.weights) and np.array_equal(g.weight_sum, base.weight_sum)


def test_shard_bounds_cover_the_rows():
    for n, s in ((10, 3), (100000, 8), (5, 9), (1, 1), (0, 2)):
        b = shard_bounds(n, s)
        assert b[0] == 0 and b[-1] == n and np.all(np.diff(b) > 0 if n else True)


@pytest.mark.parametrize("seed", range(3))
def test_cluster_star_on_random_corpora_equals_reference(seed):
    X = random_corpus(80, 40, 7, seed=seed + 20, empty=(0,), duplicates=((3, 33),))
    res = cluster_star(X, 0.3, "cpu")
    assert clusters_of(res) == oclustr(adjacency_of(res.graph))
    # the same graph as the brute force, so the same clusters as the reference on it
    ref_edges = brute_force_graph(X, 0.3)
    adj = adjacency(80, [i for i, _ in ref_edges], [j for _, j in ref_edges],
                    [float(np.float32(s)) for s in ref_edges.values()])
    assert clusters_of(res) == oclustr(adj)
    again = cluster_star(X, 0.3, "cpu", batch_size=11)
    assert clusters_of(again) == clusters_of(res)


def test_all_isolated_and_single_document():
    X = sp.identity(5, dtype=np.float32, format="csr")
    res = cluster_star(X, 0.5, "cpu")
    assert res.centers.tolist() == [0, 1, 2, 3, 4] and res.membership.toarray().tolist() == np.eye(5).tolist()
    one = cluster_star(sp.csr_matrix(np.ones((1, 3), np.float32)), 0.5, "cpu")
    assert one.centers.tolist() == [0] and one.n_clusters == 1


@pytest.mark.parametrize("beta", [0, -0.1, 1.5, float("nan"), "x"])
def test_bad_beta_is_refused(beta):
    with pytest.raises(InputError, match="beta"):
        cluster_star(sp.identity(3, dtype=np.float32, format="csr"), beta, "cpu")


# ----------------------------------------------------------------------------- files and CLI

@pytest.fixture
def corpus_file(tmp_path):
    X = random_corpus(60, 30, 6, seed=7)
    labels = Categorical(np.arange(60, dtype=np.int32) % 3, np.array(["a", "b", "c"], dtype=object))
    c = Corpus(X, np.array([f"doc{i}" for i in range(60)], dtype=object), obs={"label": labels})
    path = tmp_path / "corpus.h5"
    write_corpus(c, str(path))
    return path, c


def test_cli_star_writes_the_result_file(corpus_file, tmp_path):
    path, c = corpus_file
    out = tmp_path / "clusters.h5"
    r = CliRunner().invoke(cli, ["cluster", "star", str(path), "--beta", "0.3", "-o", str(out), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert "clusters" in r.output  # the summary line (stderr is mixed in by CliRunner)
    res = read_corpus(str(out))
    ref = cluster_star(c.X, 0.3, "cpu")
    assert res.doc_ids.tolist() == c.doc_ids.tolist() and (res.X != c.X).nnz == 0
    assert res.obs["label"].codes.tolist() == c.obs["label"].codes.tolist()
    M = res.obsm["clusters"]
    assert sp.issparse(M) and M.dtype == np.float32 and M.shape == (60, ref.n_clusters)
    assert (M != ref.membership).nnz == 0
    star = res.uns["gputext"]["star"]
    assert star["centers"].dtype == np.int32 and star["centers"].tolist() == ref.centers.tolist()
    assert star["beta"] == 0.3 and star["metric"] == "cosine"
    with h5py.File(out) as f:
        g = f["uns/gputext/star/graph"]
        assert g["adj_indices"].dtype == np.int32 and g["adj_weights"].dtype == np.float32
        assert g["adj_indptr"].dtype == np.int64 and g["pcc_of_doc"].dtype == np.int32
    graph, _ = dclus.read_stored_graph(str(out))
    assert np.array_equal(graph.indptr, ref.graph.indptr) and np.array_equal(graph.indices, ref.graph.indices)
    assert np.array_equal(graph.weights, ref.graph.weights)


def test_result_file_reads_in_anndata(corpus_file, tmp_path):
    anndata = pytest.importorskip("anndata")
    path, c = corpus_file
    out = tmp_path / "clusters.h5"
    assert CliRunner().invoke(cli, ["cluster", "star", str(path), "-o", str(out), "--device", "cpu", "-q"]).exit_code == 0
    ad = anndata.read_h5ad(str(out))
    assert ad.n_obs == 60 and ad.obsm["clusters"].shape[0] == 60


@pytest.mark.parametrize("args,message", [
    (["--beta", "2"], "beta must be in"),
    ([], None),
])
def test_cli_star_beta(corpus_file, tmp_path, args, message):
    path, _ = corpus_file
    r = CliRunner().invoke(cli, ["cluster", "star", str(path), "-o", str(tmp_path / "o.h5"), "--device", "cpu", "-q"] + args)
    if message:
        assert r.exit_code == 2 and message in r.output and not (tmp_path / "o.h5").exists()
    else:
        assert r.exit_code == 0, r.output and read_corpus(str(tmp_path / "o.h5")).uns["gputext"]["star"]["beta"] == 0.25


def test_cli_star_bad_inputs(corpus_file, tmp_path):
    path, _ = corpus_file
    run = CliRunner().invoke
    r = run(cli, ["cluster", "star", "-o", str(tmp_path / "o.h5")])
    assert r.exit_code == 2 and "missing CORPUS" in r.output
    r = run(cli, ["cluster", "star", str(tmp_path / "nope.h5"), "-o", str(tmp_path / "o.h5")])
    assert r.exit_code == 2 and "no such file" in r.output
    r = run(cli, ["cluster", "star", "--update", str(path), "-o", str(tmp_path / "o.h5")])
    assert r.exit_code == 2 and "go together" in r.output
    r = run(cli, ["cluster", "star", str(path), "--update", str(path), "--add", str(path), "-o", str(tmp_path / "o.h5")])
    assert r.exit_code == 2 and "not both" in r.output
    r = run(cli, ["cluster", "star", "--update", str(path), "--add", str(path), "-o", str(tmp_path / "o.h5")])
    assert r.exit_code == 2 and "not written by `gputext cluster star`" in r.output
    r = run(cli, ["cluster", "star", str(path), "--batch-size", "0", "-o", str(tmp_path / "o.h5")])
    assert r.exit_code == 2 and "--batch-size" in r.output
    assert not (tmp_path / "o.h5").exists()


@pytest.mark.realdata
def test_reuters_r8_clusters_cover_and_match_reference_rules(shared_datasets):
    from gputext.io.ingest import build_corpus
    c = build_corpus(str(shared_datasets / "reuters-r8" / "reuters-r8-test.tab"))
    res = cluster_star(c.X, 0.35, "cpu")
    assert res.n_docs == 2189 and np.all(np.diff(res.membership.indptr) >= 1)
    ref = oclustr(adjacency_of(res.graph))
    assert clusters_of(res) == ref


def test_term_stats_ranges_and_parallel_query_stats_equal_the_engine_helpers():
    # the device graph's host helpers: per-shard term maxima (parallel chunks) and query scales
    # (queries in parallel) give the engine's sequential values bit for bit
    import scipy.sparse as sp

    from gputext.cluster.graph_cuda import _query_stats
    from gputext.kernels import postings, scoring
    from gputext.kernels import star as kstar
    X = sp.random(300, 120, density=0.06, format="csr", dtype=np.float32, random_state=3)
    X.data = (X.data - 0.4).astype(np.float32)
    for starts in ([0, 90, X.nnz], [0, X.nnz], [0, 0, 7, X.nnz]):
        starts = np.asarray(starts, np.int64)
        got, cnt = kstar.term_stats_ranges(X.indices, X.data, starts, 120, 5)
        for r in range(len(starts) - 1):
            ref = postings.term_maxabs_cpu(X.indices[starts[r]:starts[r + 1]], X.data[starts[r]:starts[r + 1]], 120)
            assert np.array_equal(got[r], ref)
            assert np.array_equal(cnt[r], np.bincount(X.indices[starts[r]:starts[r + 1]], minlength=120))
    m = postings.term_maxabs_cpu(X.indices, X.data, 120)
    ref = scoring.query_stats(X.indptr.astype(np.int64), X.indices, X.data, m, scoring.COSINE)
    got = _query_stats(X.indptr.astype(np.int64), X.indices, X.data, m, scoring.COSINE)
    assert np.array_equal(ref[0], got[0]) and np.array_equal(ref[1], got[1])


def test_batch_segments_and_shard_query_stats_equal_the_engines():
    # the device graph's batch preparation (kstar.batch_segments, graph_cuda._shard_query_stats,
    # kstar.term_stats_ranges) against the engine's _Batch arrays and query_stats on suffix indexes
    from gputext.cluster.graph_cuda import _shard_query_stats
    from gputext.engine.index import Index
    from gputext.kernels import scoring
    from gputext.kernels import star as kstar
    X = sp.random(90, 40, density=0.1, format="csr", dtype=np.float32, random_state=5)
    X.data = (X.data + 0.05).astype(np.float32)
    X.sort_indices()
    bounds = np.array([0, 30, 55, 90], np.int64)
    indptr = X.indptr.astype(np.int64)
    starts = indptr[bounds].astype(np.int64)
    maxabs, counts = kstar.term_stats_ranges(X.indices, X.data, starts, 40, 3)
    for s in (1, 0):
        np.maximum(maxabs[s], maxabs[s + 1], out=maxabs[s])
        counts[s] += counts[s + 1]
    scale, qn = _shard_query_stats(indptr, X.indices, X.data, bounds, maxabs, scoring.COSINE)
    for s in range(3):
        a, b = bounds[s], bounds[s + 1]
        index = Index.from_csr(X[a:])
        assert np.array_equal(counts[s], np.bincount(X[a:].indices, minlength=40))
        ref = scoring.query_stats(indptr[a:b + 1] - indptr[a], X.indices[indptr[a]:indptr[b]], X.data[indptr[a]:indptr[b]],
                                  index.term_maxabs, scoring.COSINE)
        assert np.array_equal(ref[0], scale[a:b]) and np.array_equal(ref[1], qn[a:b])
        lo, hi = a + 3, b - 2
        seg_off, seg = kstar.batch_segments(indptr, X.indices, lo, hi, counts[s])
        q = X[lo:hi]
        want_off = np.concatenate([[0], np.cumsum(counts[s][q.indices])])
        want_seg = np.column_stack([q.indices, np.repeat(np.arange(hi - lo), np.diff(q.indptr))])
        assert np.array_equal(seg_off, want_off) and np.array_equal(seg, want_seg)
