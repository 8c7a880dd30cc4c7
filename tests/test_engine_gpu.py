"""The engine on a real GPU at sizes the simulator cannot reach (run on the GPU host: make test-gpu).

CUDA results must equal the CPU twin's bit for bit and the float64 reference up to ties, with
the production launch geometry, several batches, and the corpus split into several shards.
"""
import functools

import numpy as np
import pytest
import scipy.sparse as sp

from engine_reference import check_resident_shards, random_corpus, same_up_to_ties, topk
from gputext.engine import Index, search_threshold, search_topk

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2", "l1"])
@pytest.mark.parametrize("k", [1, 30, 300])
def test_gpu_topk_equals_cpu_and_reference(metric, k):
    X = random_corpus(20000, 3000, 0.01, seed=31, signed=metric == "dot", empty_rows=(4, 9), duplicates=((1, 2), (1, 19999)))
    Q = sp.vstack([random_corpus(300, 3000, 0.02, seed=32), X[1], X[4]]).tocsr()
    index = Index.from_csr(X)
    stats = {}
    ig, sg = search_topk(index, Q, k, metric, device="cuda", batch_size=128, stats=stats)
    ic, sc = search_topk(index, Q, k, metric, device="cpu")
    assert np.array_equal(ig, ic) and np.array_equal(np.nan_to_num(sg, nan=7), np.nan_to_num(sc, nan=7))
    ri, rs = topk(X, Q[:40], k, metric)
    assert same_up_to_ties(ig[:40], sg[:40], ri, rs)
    assert stats["backend"] == "cuda" and stats["batch_size"] == 128


def test_gpu_sharded_index_equals_unsharded(monkeypatch):
    from gputext.engine import cuda_backend
    X = random_corpus(30000, 2000, 0.01, seed=33, duplicates=((5, 29999),))
    Q = random_corpus(200, 2000, 0.02, seed=34)
    whole = search_topk(Index.from_csr(X), Q, 25, "l2", device="cuda")
    monkeypatch.setattr(cuda_backend, "plan_shards", lambda index, *_: [(0, 7000), (7000, 7001), (7001, 30000)])
    stats = {}
    sharded = search_topk(Index.from_csr(X), Q, 25, "l2", device="cuda", stats=stats)
    assert stats["shards"] == 3
    assert np.array_equal(whole[0], sharded[0]) and np.array_equal(whole[1], sharded[1])
    T1 = search_threshold(Index.from_csr(X), Q, 0.9, "l2", device="cuda")
    T2 = search_threshold(Index.from_csr(X), Q, 0.9, "l2", device="cpu")
    assert np.array_equal(T1.indptr, T2.indptr) and np.array_equal(T1.indices, T2.indices) and np.array_equal(T1.data, T2.data)


@pytest.mark.parametrize("metric", ["cosine", "l1"])
def test_gpu_resident_shards_equal_the_cpu_twin(metric):
    from gputext.engine import Geometry
    X = random_corpus(20000, 3000, 0.01, seed=37, duplicates=((1, 2), (6665, 6667), (1, 19999)))
    Q = sp.vstack([random_corpus(300, 3000, 0.02, seed=38), X[1], X[6665]]).tocsr()
    check_resident_shards(X, Q, 30, metric, Geometry(shard_docs=6667), 3)


def test_gpu_threshold_graph_equals_cpu():
    from gputext.datasets.synth import make_corpus
    X = make_corpus(15000, 3000, 30, 20, seed=35).X  # topical structure: many pairs above beta
    index = Index.from_csr(X)
    G = search_threshold(index, X, 0.3, "cosine", device="cuda", exclude_self=True, batch_size=1000)
    C = search_threshold(index, X, 0.3, "cosine", device="cpu", exclude_self=True)
    assert np.array_equal(G.indptr, C.indptr) and np.array_equal(G.indices, C.indices) and np.array_equal(G.data, C.data)
    assert G.nnz > 10000


@pytest.mark.parametrize("k", [1, 30, 200])
def test_gpu_grouped_topk_equals_cpu(k):
    from gputext.engine import search_topk_grouped
    X = random_corpus(12000, 3000, 0.01, seed=36, empty_rows=(4, 9), duplicates=((1, 2), (1, 11999)))
    # groups: empty, tiny, one larger than a default segment (split and merged), uneven
    group_ptr = np.array([0, 0, 3, 40, 5040, 5040, 9000, 12000], np.int64)
    Q = sp.vstack([random_corpus(700, 3000, 0.02, seed=37), X[1], X[4]]).tocsr()
    self_doc = np.full(Q.shape[0], -1, np.int64)
    self_doc[-2] = 1
    index = Index.from_csr(X)
    stats = {}
    metrics = ("cosine", "l1", "l2", "dot")
    sg, dg = search_topk_grouped(index, Q, k, group_ptr, metrics, device="cuda", exclude_self=self_doc,
                                 batch_size=256, stats=stats)
    sc, dc = search_topk_grouped(index, Q, k, group_ptr, metrics, device="cpu", exclude_self=self_doc)
    assert np.array_equal(dg, dc) and np.array_equal(sg, sc, equal_nan=True)
    assert stats["merge_levels"] >= 1 and stats["batch_size"] == 256
    out = np.empty((Q.shape[0], 7, 4 * k + 2), np.float32)
    search_topk_grouped(index, Q, k, group_ptr, metrics, device="cuda", exclude_self=self_doc, pad="last", out=out,
                        return_docs=False)
    ref = np.empty_like(out)
    search_topk_grouped(index, Q, k, group_ptr, metrics, device="cpu", exclude_self=self_doc, pad="last", out=ref,
                        return_docs=False)
    assert np.array_equal(out, ref)
    for g in (2, 3):  # against search_topk over the group alone
        lo, hi = group_ptr[g], group_ptr[g + 1]
        idx, s = search_topk(Index.from_csr(X[lo:hi]), Q[:50], k, "l1", device="cpu")
        assert np.array_equal(np.where(idx >= 0, idx + lo, -1), dg[:50, g, 1]) and np.array_equal(s, sg[:50, g, 1], equal_nan=True)


@functools.lru_cache(maxsize=2)
def _tied_corpus(signed: bool):
    """200,000 documents (2.4M nonzeros) with 3,000 copies of document 7 and an empty document 11;
    queries: 60 random, document 7, an empty one, a copy (its own document left out: self_doc)."""
    X = random_corpus(200000, 3000, 0.004, seed=41, signed=signed, empty_rows=(11,)).tolil()
    copies = np.random.default_rng(42).choice(np.arange(12, 200000), 3000, replace=False)
    for c in copies:
        X[c, :] = X[7, :]
    X = X.tocsr()
    Q = sp.vstack([random_corpus(60, 3000, 0.01, seed=43), X[7], sp.csr_matrix((1, 3000), dtype=np.float32),
                   X[copies[0]]]).tocsr()
    self_doc = np.full(Q.shape[0], -1, np.int64)
    self_doc[-1] = copies[0]
    return X, Q, self_doc


UNIT_GEOMETRIES = [{}, {"unit_cap": 64}, {"unit_threads": 1}, {"unit_threads": 64, "unit_block": 1024},
                   {"block_ranges": False}, {"unit_select": False}, {"tile_rows": 8, "tile_grid": True},
                   {"tile_rows": 5, "tile_grid": True, "block_ranges": False}, {"tile_rows": 3, "tile_grid": False}]


@pytest.mark.parametrize("change", UNIT_GEOMETRIES)
@pytest.mark.parametrize("metric,k", [("cosine", 30), ("l1", 30), ("cosine", 300), ("dot", 1)])
def test_gpu_shared_accumulation_and_unit_select_equal_cpu(metric, k, change):
    # one query a tile (tile_rows=1): the shared accumulation (5,120 documents a block, 40 blocks)
    # and the unit select (kernels.unit_select), the default on a real GPU at 10^6 documents, which
    # the tests above (wide tiles at 20,000 documents) do not reach. Ties: 3,000 copies of document
    # 7 spread over every block (query 7 and its copies: the gathers refine past 64 candidates),
    # an empty query, an empty document; one query's own document left out. tile_grid: tiles of 8
    # or 5 queries, each query its own blocks (blocked.rows_accumulate_kernel grid=True).
    X, Q, self_doc = _tied_corpus(metric == "dot")
    from gputext.engine import Geometry
    geom = Geometry(**{"tile_rows": 1, **change})
    index = Index.from_csr(X)
    ig, sg = search_topk(index, Q, k, metric, device="cuda", exclude_self=self_doc, geometry=geom)
    plans = list(index.device_cache["shard"].plans.values())
    assert all(p.shared for p in plans) and {p.unit > 0 for p in plans} == {change.get("unit_select", True)}
    assert all(p.grid == (p.rows > 1 and change.get("tile_grid", True)) for p in plans)  # 63 queries: the last tile of 7 (of 5: 3)
    ic, sc = search_topk(index, Q, k, metric, device="cpu", exclude_self=self_doc)
    assert np.array_equal(ig, ic) and np.array_equal(np.nan_to_num(sg, nan=7), np.nan_to_num(sc, nan=7))
    one = search_topk(index, Q[-3:-2], k, metric, device="cuda", geometry=geom)  # one tile: the 1,024-thread select
    assert np.array_equal(one[0], ic[-3:-2])
