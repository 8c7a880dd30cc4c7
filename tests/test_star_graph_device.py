"""The device graph build (gputext.cluster.graph_cuda, kernels in gputext.kernels.star) in numba's
CUDA simulator, at tiny sizes: the graph (CSR, weights, degrees, AIS sums) and the relevance it
computes on the device equal the CPU twin's and the float64 brute force, on every path (device
CSR with the shared-memory rank and the bitmap rank over several tiles, several shards and
batches, edge buffer spills to the host, the engine fallback)."""
from __future__ import annotations

import numpy as np
import pytest

from gputext.cluster.graph import build_graph
from gputext.cluster.graph_cuda import DeviceGraphGeometry
from gputext.cluster.star import RelevanceGeometry, cluster_star
from gputext.engine import Geometry
from gputext.kernels import star as kstar
from test_star_reference import brute_force_graph, random_corpus

pytestmark = pytest.mark.cudasim

ENGINE_TINY = Geometry(accumulate_block=8, accumulate_items=4, select_block=8, select_items=2, merge_block=8,
                       merge_width=16, build_block=8, scan_block=8, scan_items=2)
# sort_block 4 and one bitmap word a tile (32 ids): rows longer than 4 below them take the bitmap
# path, rows past vertex 32 need two tiles
TINY = DeviceGraphGeometry(write_block=8, write_items=2, split_block=8, split_max_blocks=3, sort_block=4,
                           sort_words=1, sort_max_blocks=5, small_block=8)
REL_TINY = RelevanceGeometry(4, 2, 8)


def assert_same_graph(a, b):
    assert np.array_equal(a.indptr, b.indptr) and a.indptr.dtype == b.indptr.dtype == np.int64
    assert np.array_equal(a.indices, b.indices) and a.indices.dtype == b.indices.dtype == np.int32
    assert np.array_equal(a.weights, b.weights) and a.weights.dtype == b.weights.dtype == np.float32
    assert np.array_equal(a.degree, b.degree) and np.array_equal(a.weight_sum, b.weight_sum)


def twin_relevance(g):
    count = np.zeros(g.n, np.int32)
    rel = np.zeros(g.n)
    kstar.relevance_cpu(g.indptr, g.indices, g.degree, g.ais, count, rel)
    return count, rel


def test_device_graph_equals_twin_and_brute_force():
    # 44 docs, dense-ish: long lower parts (bitmap ranks, two tiles), empty docs, duplicates
    X = random_corpus(44, 14, 5, seed=11, empty=(3, 30), duplicates=((1, 2), (1, 40), (5, 35)))
    beta = 0.3
    cpu = build_graph(X, beta, "cpu")
    dev = build_graph(X, beta, "cuda", batch_size=9, shards=2, engine_geometry=ENGINE_TINY, graph_geometry=TINY,
                      relevance_geometry=REL_TINY)
    assert dev.stats["assembly"] == "device" and dev.stats["batches"] >= 5
    assert_same_graph(dev, cpu)
    lower = np.diff(cpu.indptr) - np.diff(np.r_[0, np.cumsum([np.sum(cpu.neighbours(v) > v) for v in range(cpu.n)])])
    assert lower[32:].max() > 4  # the bitmap path over two tiles was taken
    ref = brute_force_graph(X, beta)
    coo = dev.to_scipy().tocoo()
    got = {(int(i), int(j)) for i, j in zip(coo.row, coo.col) if i < j}
    assert got == set(ref)
    count, rel = twin_relevance(cpu)
    assert np.array_equal(dev.relevance_count, count) and np.array_equal(dev.relevance, rel)


def test_ties_at_beta_are_edges_on_the_device():
    # cosine exactly 0.5 (norms 2 and 1, one shared unit term): on the threshold, an edge
    import scipy.sparse as sp
    rows = [0, 0, 0, 0, 1, 2, 3, 4]
    cols = [0, 1, 2, 3, 0, 1, 4, 5]
    X = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(6, 6))
    cpu = build_graph(X, 0.5, "cpu")
    dev = build_graph(X, 0.5, "cuda", engine_geometry=ENGINE_TINY, graph_geometry=TINY, relevance_geometry=REL_TINY)
    assert_same_graph(dev, cpu)
    assert set(brute_force_graph(X, 0.5)) == {(0, 1), (0, 2)}
    assert {(int(i), int(j)) for i, j in np.argwhere(np.triu(dev.to_scipy().toarray()) > 0)} == {(0, 1), (0, 2)}
    assert dev.weights.tolist() == [0.5, 0.5, 0.5, 0.5]
    assert dev.degree.tolist() == [2, 1, 1, 0, 0, 0]


@pytest.mark.parametrize("capacity", [1, 40])
def test_edge_buffer_spills_to_host_assembly(capacity):
    X = random_corpus(22, 10, 4, seed=4, duplicates=((2, 9),))
    cpu = build_graph(X, 0.3, "cpu")
    dev = build_graph(X, 0.3, "cuda", batch_size=8, shards=1, engine_geometry=ENGINE_TINY, graph_geometry=TINY,
                      relevance_geometry=REL_TINY, edge_capacity=capacity)
    assert cpu.n_edges > 40  # more than the larger buffer holds
    assert dev.stats["assembly"] == "host" and dev.stats["spills"] >= 1
    assert_same_graph(dev, cpu)
    assert dev.relevance is None  # computed later from the host graph (cluster_star does)


@pytest.mark.parametrize("index,weights", [("device", "lazy"), ("host", "eager")])
def test_edge_buffer_grows_and_index_and_weight_modes(index, weights):
    # a 3-edge buffer doubles on the device (no spill); suffix indexes from one upload or host
    # slices; weights left on the device until read, or copied with the indices
    import dataclasses
    X = random_corpus(26, 10, 4, seed=6, empty=(4,), duplicates=((3, 20),))
    cpu = build_graph(X, 0.3, "cpu")
    geom = DeviceGraphGeometry(**{**vars(TINY), "edge_initial": 3, "index": index, "weights": weights})
    dev = build_graph(X, 0.3, "cuda", batch_size=7, shards=3, engine_geometry=ENGINE_TINY, graph_geometry=geom,
                      relevance_geometry=REL_TINY)
    assert dev.stats["assembly"] == "device" and dev.stats["spills"] == 0 and dev.stats["edge_buffer_grows"] >= 3
    assert dev.weights_on_host == (weights == "eager")
    assert_same_graph(dev, cpu)
    assert dev.weights_on_host
    assert dataclasses.is_dataclass(dev)
    count, rel = twin_relevance(cpu)
    assert np.array_equal(dev.relevance_count, count) and np.array_equal(dev.relevance, rel)


def test_cluster_star_device_path_equals_cpu():
    X = random_corpus(20, 9, 4, seed=8, empty=(6,), duplicates=((0, 19),))
    cpu = cluster_star(X, 0.3, "cpu")
    dev = cluster_star(X, 0.3, "cuda", geometry=REL_TINY, engine_geometry=ENGINE_TINY, graph_geometry=TINY)
    assert dev.stats["graph_assembly"] == "device"
    assert_same_graph(dev.graph, cpu.graph)
    assert np.array_equal(cpu.relevance, dev.relevance)
    assert cpu.cluster_sets() == dev.cluster_sets() and cpu.centers.tolist() == dev.centers.tolist()


def test_engine_path_still_available_on_cuda():
    X = random_corpus(12, 8, 3, seed=1)
    cpu = build_graph(X, 0.3, "cpu")
    dev = build_graph(X, 0.3, "cuda", engine_geometry=ENGINE_TINY, device_graph=False)
    assert dev.stats["device_graph"] is False
    assert_same_graph(dev, cpu)


def test_lower_sort_kernel_ranks_rows():
    """The rank kernel alone: rows of distinct ids in scrambled order come out ascending, with
    their weights, for short rows (shared ranks) and long ones (bitmap over several tiles)."""
    from numba import cuda
    rng = np.random.default_rng(0)
    n = 70
    lower = [np.sort(rng.choice(j, size=min(j, int(rng.integers(0, 12))), replace=False)) if j else np.empty(0, int)
             for j in range(n)]
    up_len = np.zeros(n, np.int64)
    degree = np.array([len(x) for x in lower], np.int64)
    indptr = np.r_[0, np.cumsum(degree)].astype(np.int64)
    up_ptr = np.zeros(n + 1, np.int64)
    tmp_row = np.concatenate([rng.permutation(x) for x in lower]).astype(np.int32)
    tmp_w = (tmp_row.astype(np.float32) + 0.5) / 100
    out_idx = np.full(len(tmp_row), -1, np.int32)
    out_w = np.zeros(len(tmp_row), np.float32)
    kernel = kstar.lower_sort_kernel(4, 1)
    d_idx, d_w = cuda.to_device(out_idx), cuda.to_device(out_w)
    kernel[6, 4](cuda.to_device(indptr), cuda.to_device(up_ptr), cuda.to_device(tmp_row), cuda.to_device(tmp_w),
                 d_idx, d_w)
    assert up_len.sum() == 0
    assert d_idx.copy_to_host().tolist() == np.concatenate(lower).tolist()
    assert np.array_equal(d_w.copy_to_host(), (np.concatenate(lower).astype(np.float32) + 0.5) / 100)


def test_no_terms_and_no_edges_on_the_device():
    import scipy.sparse as sp
    for X in (sp.csr_matrix((5, 4), dtype=np.float32), random_corpus(6, 40, 2, seed=3)):
        cpu = build_graph(X, 0.9, "cpu")
        dev = build_graph(X, 0.9, "cuda", engine_geometry=ENGINE_TINY, graph_geometry=TINY,
                          relevance_geometry=REL_TINY)
        assert dev.stats["assembly"] == "device"
        assert_same_graph(dev, cpu)
        assert dev.relevance.tolist() == [0.0] * X.shape[0]


def test_score_additions_on_the_device_equals_cpu_and_brute_force():
    # new x old and new x new (upper) edges through the device build over [new; old], several
    # batches: the same edges and weights as the engine path on the CPU, and the brute force's pairs
    from gputext.cluster.graph import score_additions
    X = random_corpus(30, 12, 4, seed=13, empty=(25,), duplicates=((2, 24), (20, 27)))
    old, new = X[:19], X[19:]
    cpu = score_additions(old, new, 0.3, "cpu", batch_size=4)
    dev = score_additions(old, new, 0.3, "cuda", batch_size=4, engine_geometry=ENGINE_TINY, graph_geometry=TINY)
    for a, b in zip(cpu, dev):
        for x, y in zip(a, b):
            assert np.array_equal(x, y) and x.dtype == y.dtype
    (o_old, o_new, _), (a, b, _) = dev
    got = {(int(min(u, v)), int(max(u, v))) for u, v in zip(o_old, o_new)} | {(int(u), int(v)) for u, v in zip(a, b)}
    want = {(i, j) for i, j in brute_force_graph(X, 0.3) if j >= 19}
    assert got == want and len(o_old) and len(a)
    assert np.all(a < b) and np.all(o_old < 19) and np.all(o_new >= 19)
