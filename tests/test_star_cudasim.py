"""The star-clustering device path in numba's CUDA simulator (tiny sizes): the relevance kernel
equals its CPU twin, and whole clusterings / updates on device="cuda" equal the CPU's."""
from __future__ import annotations

import numpy as np
import pytest

from gputext.cluster import dclus
from gputext.cluster.graph_cuda import DeviceGraphGeometry
from gputext.cluster.star import RelevanceGeometry, cluster_star, compute_relevance
from gputext.engine import Geometry
from gputext.kernels import star as kstar
from test_star import random_graph
from test_star_dclus import read_clusters, split_corpus
from test_star_reference import random_corpus

pytestmark = pytest.mark.cudasim
GRAPH_TINY = DeviceGraphGeometry(write_block=8, write_items=2, split_block=8, split_max_blocks=4, sort_block=4,
                                 sort_words=1, sort_max_blocks=4, small_block=8)

ENGINE_TINY = Geometry(accumulate_block=8, accumulate_items=2, select_block=8, select_items=2, merge_block=8,
                       merge_width=16, build_block=8, scan_block=8, scan_items=2)


@pytest.mark.parametrize("lanes,vertices,max_blocks", [(4, 2, 3), (2, 4, 64), (1, 3, 2)])
def test_relevance_kernel_equals_twin(lanes, vertices, max_blocks):
    g = random_graph(14, 0.35, seed=lanes * 7 + vertices)  # some rows longer than the lanes: tiling
    assert g.degree.max() > lanes
    ais = g.ais
    count_dev, rel_dev = kstar.relevance_device(g.indptr, g.indices, g.degree, ais, lanes, vertices, max_blocks)
    count = np.zeros(g.n, np.int32)
    rel = np.zeros(g.n)
    kstar.relevance_cpu(g.indptr, g.indices, g.degree, ais, count, rel)
    assert np.array_equal(count_dev, count) and np.array_equal(rel_dev, rel)


def test_relevance_with_isolated_vertices_and_no_edges():
    g = random_graph(5, 0.0, seed=1)
    count, rel = compute_relevance(g, "cuda", RelevanceGeometry(2, 2, 2))
    assert count.tolist() == [0] * 5 and rel.tolist() == [0.0] * 5


def test_cluster_star_on_cuda_equals_cpu():
    X = random_corpus(16, 10, 4, seed=2, empty=(3,), duplicates=((1, 9),))
    cpu = cluster_star(X, 0.3, "cpu")
    gpu = cluster_star(X, 0.3, "cuda", geometry=RelevanceGeometry(4, 2, 4), engine_geometry=ENGINE_TINY,
                       graph_geometry=GRAPH_TINY)
    assert np.array_equal(cpu.graph.indices, gpu.graph.indices) and np.array_equal(cpu.graph.weights, gpu.graph.weights)
    assert np.array_equal(cpu.relevance, gpu.relevance)
    assert cpu.cluster_sets() == gpu.cluster_sets() and cpu.centers.tolist() == gpu.centers.tolist()


def test_update_on_cuda_equals_cpu(tmp_path):
    X = random_corpus(18, 10, 4, seed=3)
    old, new, _ = split_corpus(X, 13)
    res = cluster_star(old.X, 0.3, "cpu")
    dclus.write_result(old, res, str(tmp_path / "old.h5"), 0.3, "cpu")
    dclus.update(str(tmp_path / "old.h5"), new, str(tmp_path / "cpu.h5"), device="cpu")
    dclus.update(str(tmp_path / "old.h5"), new, str(tmp_path / "gpu.h5"), device="cuda", engine_geometry=ENGINE_TINY)
    assert read_clusters(str(tmp_path / "cpu.h5")) == read_clusters(str(tmp_path / "gpu.h5"))
