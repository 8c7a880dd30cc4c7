"""The blocked top-k method (gputext.engine.blocked, issue 19): bit-identical to the rows method
on the CPU twin (several geometries, adversarial ties) and in the CUDA simulator (tiny geometry)."""
import numpy as np
import pytest
import scipy.sparse as sp

from engine_reference import random_corpus, same_up_to_ties, topk
from gputext.engine import Geometry, Index, search_topk
from gputext.errors import InputError
from gputext.kernels.blocked import blocked_geometry, shared_bytes

METRICS = ["cosine", "dot", "l2", "l1"]
# geometries of the CPU twin: one document block per thread-block of 8 x 2 documents, tiles of 1, 3, 4 queries
GEOMS = [Geometry(blocked_block=8, blocked_items=2, blocked_tile=t) for t in (1, 3, 4)] + [Geometry()]
TINY = Geometry(blocked_block=8, blocked_items=2, blocked_tile=2, blocked_probe=1, merge_block=8, merge_width=16,
                blocked_prune=True)


def same(a, b):
    return np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1], equal_nan=True)


def adversarial():
    """Ties at the k-th score (duplicate documents across block boundaries), all-equal weights,
    one dominant term, an empty query, a query equal to a document."""
    n_terms = 20
    X = random_corpus(90, n_terms, 0.15, seed=5, duplicates=((3, 17), (3, 40), (3, 89), (8, 16), (8, 63)))
    X = X.tolil()
    for r in range(50, 60):  # all-equal weights on terms 0..3
        X[r, 0:4] = 1.0
    X[70, 5] = 1e6  # one dominant term
    X[71, 5] = 1e6
    X = X.tocsr()
    Q = sp.vstack([X[3], X[8], sp.csr_matrix(np.r_[np.ones(4), np.zeros(n_terms - 4)].astype(np.float32)),
                   sp.csr_matrix((1, n_terms), dtype=np.float32),
                   sp.csr_matrix(np.r_[np.zeros(5), [1.0], np.zeros(n_terms - 6)].astype(np.float32)),
                   random_corpus(5, n_terms, 0.3, seed=6)]).tocsr()
    return X, Q


@pytest.mark.parametrize("metric", METRICS)
def test_blocked_cpu_twin_equals_rows(metric):
    X = random_corpus(300, 50, 0.08, seed=1, signed=metric in ("dot", "l1"), empty_rows=(5, 17),
                      duplicates=((3, 40), (3, 41), (3, 299)))
    Q = sp.vstack([random_corpus(21, 50, 0.12, seed=2), X[3], X[5]]).tocsr()
    index = Index.from_csr(X)
    want = search_topk(index, Q, 7, metric, device="cpu")
    for g in GEOMS:
        stats = {}
        got = search_topk(index, Q, 7, metric, device="cpu", method="blocked", geometry=g, stats=stats)
        assert same(want, got), g
        assert stats["topk_method"] == "blocked"
    ref_idx, ref_sc = topk(X, Q, 7, metric)
    assert same_up_to_ties(*got, ref_idx, ref_sc)


@pytest.mark.parametrize("metric", METRICS)
def test_blocked_adversarial_ties_and_exclude_self(metric):
    X, Q = adversarial()
    index = Index.from_csr(X)
    for k in (1, 3, 8):
        for ex in (False, np.array([3, 8, -1, -1, 70, 0, 1, 2, 4, 89])):
            want = search_topk(index, Q, k, metric, device="cpu", exclude_self=ex)
            for g in GEOMS[:3]:
                assert same(want, search_topk(index, Q, k, metric, device="cpu", exclude_self=ex, method="blocked",
                                              geometry=g)), (k, g)


def test_blocked_k_above_corpus_and_batches():
    X = random_corpus(13, 9, 0.3, seed=3)
    index = Index.from_csr(X)
    Q = random_corpus(9, 9, 0.4, seed=4)
    want = search_topk(index, Q, 20, "cosine", device="cpu")
    got = search_topk(index, Q, 20, "cosine", device="cpu", method="blocked", batch_size=4,
                      geometry=Geometry(blocked_block=32, blocked_items=1, blocked_tile=3))
    assert same(want, got) and (got[0][:, 13:] == -1).all()


def test_method_choice():
    index = Index.from_csr(random_corpus(10, 5, 0.5, seed=1))
    stats = {}
    search_topk(index, index.X, 2, device="cpu", stats=stats)
    assert stats["topk_method"] == "rows"  # auto keeps the rows method until the GPU benchmark decides
    with pytest.raises(InputError, match="top-k method"):
        search_topk(index, index.X, 2, device="cpu", method="nope")


def test_geometry_from_device_properties():
    for k in (1, 30, 100, 200):
        for limit in (46 * 1024, 30 * 1024, 98 * 1024):
            block, items, tile, cap = blocked_geometry(k, 10000, 10 ** 7, limit, 132)
            assert block >= k and shared_bytes(block, items, tile, cap) <= limit
    assert blocked_geometry(30, 10000, 10 ** 7, 46 * 1024, 132)[2] > 1  # batches get query tiles
    assert blocked_geometry(30, 1, 10 ** 7, 46 * 1024, 132)[2] == 1  # a single query does not
    small = blocked_geometry(30, 1, 5000, 46 * 1024, 132)
    big = blocked_geometry(30, 1, 10 ** 7, 46 * 1024, 132)
    assert small[1] < big[1]  # a small corpus is cut finer to feed every multiprocessor


def test_grid_tile_rows_from_device_properties():
    # engine.cuda_backend.grid_rows: enough queries a grid tile for 16 accumulation blocks a
    # multiprocessor (5,120 documents a block), a power of two, at least 16, at most 32; none without grid tiles
    from types import SimpleNamespace

    from gputext.engine.cuda_backend import grid_rows

    def rows(n_docs, sms=132, sorted_lists=True, **geom):
        shard = SimpleNamespace(res=SimpleNamespace(multiprocessors=sms), n_docs=n_docs, sorted_lists=sorted_lists)
        return grid_rows(shard, Geometry(**geom))
    assert [rows(n) for n in (10 ** 6, 10 ** 7, 5 * 10 ** 7, 20000)] == [16, 16, 16, 32]
    assert rows(10 ** 6, sms=66) == 16 and rows(10 ** 6, sms=264) == 32  # the device's multiprocessors
    assert rows(10 ** 6, tile_grid=False) == rows(10 ** 6, sorted_lists=False) == rows(10 ** 6, shared_accumulate=0) == 0


@pytest.mark.cudasim
@pytest.mark.parametrize("metric", ["cosine", "l1"])
def test_blocked_cuda_equals_cpu_in_simulator(metric):
    X = random_corpus(40, 12, 0.2, seed=12, signed=metric == "l1", empty_rows=(7,), duplicates=((3, 39), (3, 16)))
    Q = sp.vstack([random_corpus(2, 12, 0.3, seed=13), X[3]]).tocsr()
    index = Index.from_csr(X)
    want = search_topk(index, Q, 5, metric, device="cpu")
    stats = {}
    got = search_topk(index, Q, 5, metric, device="cuda", method="blocked", geometry=TINY, exclude_self=False,
                      stats=stats)
    assert same(want, got)
    assert stats["geometry"] == (8, 2, 2) and stats["segments"] == 3 and stats["merge_levels"] >= 1
    ex = np.array([0, -1, 3])
    assert same(search_topk(index, Q, 5, metric, device="cpu", exclude_self=ex),
                search_topk(index, Q, 5, metric, device="cuda", method="blocked", geometry=TINY, exclude_self=ex))


@pytest.mark.cudasim
def test_blocked_cuda_pruning_in_simulator():
    """The probe pass, then the pruned pass: identical lists, and blocks skipped for a query whose
    one dominant term is held by two documents; duplicates tying at the k-th key are kept."""
    X, Q = adversarial()
    index = Index.from_csr(X)
    for Qs, k, metric in ((Q[4], 2, "dot"), (sp.vstack([Q[4], Q[0]]).tocsr(), 4, "cosine")):
        want = search_topk(index, Qs, k, metric, device="cpu")
        stats = {}
        got = search_topk(index, Qs, k, metric, device="cuda", method="blocked", geometry=TINY, stats=stats)
        assert same(want, got), (k, metric)
        assert stats["postings"] > 0
        if Qs.shape[0] == 1:  # the probe scores the block of documents 70, 71: every other block is below
            assert stats["postings_skipped"] > 0
    assert list(got[0][1]) == [3, 17, 40, 89]


@pytest.mark.gpu
@pytest.mark.parametrize("metric", METRICS)
def test_blocked_cuda_equals_rows_on_gpu(metric):
    X = random_corpus(20000, 2000, 0.01, seed=21, signed=metric == "dot", duplicates=((3, 19999), (3, 4096)))
    Q = sp.vstack([random_corpus(300, 2000, 0.01, seed=22), X[3]]).tocsr()
    index = Index.from_csr(X)
    for q in (Q, Q[-1:]):  # tiles of queries, and one query (tile 1)
        assert same(search_topk(index, q, 30, metric, device="cpu"),
                    search_topk(index, q, 30, metric, device="cuda", method="blocked"))


# ----------------------------------------------------------------------------- safe pruning (CPU twin)

PRUNE_GEOMS = [Geometry(blocked_block=8, blocked_items=2, blocked_tile=t, blocked_prune=p) for t in (1, 4) for p in (True, False)]


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_pruning_is_exact_on_adversarial_inputs(metric):
    """Ties at the k-th key (duplicates in later blocks: a bound equal to the k-th key must not be
    skipped, the lower document wins), all-equal weights, one dominant term: pruned == unpruned ==
    rows, and postings scored + skipped is the same total."""
    X, Q = adversarial()
    index = Index.from_csr(X)
    for k in (1, 2, 3, 8):
        want = search_topk(index, Q, k, metric, device="cpu")
        totals = set()
        for g in PRUNE_GEOMS:
            stats = {}
            assert same(want, search_topk(index, Q, k, metric, device="cpu", method="blocked", geometry=g,
                                          stats=stats)), (k, g)
            totals.add(stats["postings"] + stats["postings_skipped"])
            if not g.blocked_prune:
                assert stats["postings_skipped"] == 0
        assert len(totals) == 1


def test_pruning_skips_blocks_that_cannot_reach_the_kth_key():
    X, Q = adversarial()
    index = Index.from_csr(X)
    dominant = Q[4]  # term 5 only: documents 70 and 71 hold 1e6, every later block is bounded far below
    stats = {}
    got = search_topk(index, dominant, 2, "dot", device="cpu", method="blocked", geometry=PRUNE_GEOMS[0], stats=stats)
    assert list(got[0][0]) == [70, 71] and stats["postings_skipped"] > 0
    dup = Q[0]  # X[3], duplicated at 17, 40, 89: every duplicate ties at the k-th key, none may be skipped
    got = search_topk(index, dup, 4, "cosine", device="cpu", method="blocked", geometry=PRUNE_GEOMS[0])
    assert list(got[0][0]) == [3, 17, 40, 89]


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_bound_is_never_below_a_key(metric):
    """The block-max bound of every (query, bound block) is at least the largest key in the block
    (keys from the engine's own fixed point: search_topk_keys with k = n_docs)."""
    from gputext.engine.blocked import bound_tables
    from gputext.engine.search import search_topk_keys
    from gputext.io.corpus import csr_arrays
    from gputext.kernels import blocked as kb
    from gputext.kernels.scoring import query_stats
    from gputext.similarity import metric_code

    X = random_corpus(200, 30, 0.1, seed=9, signed=metric == "dot", duplicates=((3, 150),))
    Q = sp.vstack([random_corpus(12, 30, 0.2, seed=10, signed=metric == "dot"), X[3]]).tocsr()
    index = Index.from_csr(X)
    code = metric_code(metric)
    docs, keys = search_topk_keys(index, Q, X.shape[0], metric, device="cpu")
    key_of = np.empty_like(keys)
    np.put_along_axis(key_of, docs.astype(np.int64), keys, 1)
    indptr, indices, data = csr_arrays(Q)
    _, qn = query_stats(indptr, indices, data, index.term_maxabs, code)
    term_row, bmax, dn_min, bound_len = bound_tables(index, 16, code, 1 << 20)
    for i in range(Q.shape[0]):
        for b in range(bmax.shape[1]):
            s_ub = sum(abs(float(w)) * float(bmax[term_row[t], b]) for t, w in
                       zip(indices[indptr[i]:indptr[i + 1]], data[indptr[i]:indptr[i + 1]]))
            assert kb.bound_key_cpu(code, s_ub, qn[i], dn_min[b]) >= key_of[i, b * bound_len:(b + 1) * bound_len].max()


def _rows_inputs(metric, seed=40, big=False):
    """Inputs of a rows-accumulation tile of 3 queries at segment offset s0 = 2 of the arrays
    (two leading segments that must not be read) against a 70-document index: (args, reference
    rows int64 (3 * 70,) summed in Python from posting_value)."""
    from gputext.kernels import scoring
    from gputext.kernels.blocked import posting_value_cpu
    X = random_corpus(70, 15, 0.25, seed=seed, signed=metric == "dot", duplicates=((3, 64),))
    Q = random_corpus(3, 15, 0.35, seed=seed + 1)
    p = Index.from_csr(X).cpu()
    terms, rows = Q.indices.astype(np.int32), np.repeat(np.arange(3, dtype=np.int32), np.diff(Q.indptr))
    seg = np.vstack([[[14, 0], [14, 1]], np.c_[terms, rows]]).astype(np.int32)
    weights = np.r_[np.float32(9), np.float32(9), Q.data].astype(np.float32)
    qinfo = np.zeros((4, 4))
    qinfo[1:, 0] = [2.0 ** 20, 3.0 * 2 ** 18, 2.0 ** 21]  # the tile is queries 1..3 of qinfo (q0 = 1)
    if big:  # contributions past 2^32: the split counters' high words and carries
        qinfo[1:, 0] *= 2.0 ** 26
    code = scoring.METRICS[metric]
    want = np.zeros(3 * 70, np.int64)
    for e in range(2, len(seg)):
        t, q = seg[e]
        for r in range(p.term_ptr[t], p.term_ptr[t + 1]):
            want[q * 70 + p.post_doc[r]] += posting_value_cpu(code, weights[e], p.post_w[r], qinfo[1 + q, 0])
    seg_off = np.zeros(len(seg) + 1, np.int64)  # unused by the shared kernel; the atomic one's prefix sums
    seg_off[3:] = np.cumsum(np.diff(p.term_ptr)[seg[2:, 0]])
    return (seg_off, seg, weights, qinfo, p.term_ptr, p.post_doc, p.post_w, code, 70), want, int(seg_off[-1])


def _table(tp, pd, n_docs, docs, min_df=1):
    """A block-starts table (brow, bstart) of the index tp / pd (n_docs documents) for blocks of
    ``docs`` documents, with rows for the lists of at least min_df postings (the engine's rule is
    df >= n_blocks; a lower bar gives the tests rows for short lists too); min_df None: the
    placeholder (no table)."""
    from test_block_table import block_table
    terms = None if min_df is None else np.flatnonzero(np.diff(tp) >= min_df)
    return block_table(tp, pd, n_docs, docs, terms)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("min_df", [None, 1, 6])
def test_rows_accumulation_twin_equals_the_sum_of_postings(metric, min_df):
    # kernels.blocked.accumulate_rows_cpu: blocks of 16 documents (the last of 6), stale rows overwritten;
    # ranges by binary searches (no table), from the table for every list, or the table for lists of >= 6
    from gputext.kernels.blocked import accumulate_rows_cpu
    (seg_off, seg, w, qinfo, tp, pd, pw, code, n), want, _ = _rows_inputs(metric)
    acc = np.full(3 * n, 99, np.int64)
    accumulate_rows_cpu(seg, w, qinfo, tp, pd, pw, code, n, 16, acc, 2, len(seg) - 2, 1, *_table(tp, pd, n, 16, min_df))
    assert np.array_equal(acc, want)


def _no_units(table=(np.full(1, -1, np.int32), np.zeros((1, 1), np.int32))):
    """dn, ukey, udoc, brow, bstart, rng_first, rng_cnt of rows_accumulate_kernel without units or
    ranges (not read); the block-starts table ``table`` (default: the placeholder)."""
    from numba import cuda
    return (cuda.to_device(np.zeros(1)), cuda.to_device(np.zeros((1, 1))), cuda.to_device(np.zeros((1, 1), np.int32)),
            *(cuda.to_device(a) for a in table),
            cuda.to_device(np.zeros((1, 1), np.int64)), cuda.to_device(np.zeros((1, 1), np.int32)))


@pytest.mark.cudasim
@pytest.mark.filterwarnings("ignore:overflow encountered")  # the simulator's uint32 words wrap as the device's do
@pytest.mark.parametrize("docs,big,ranged,grid,min_df", [(16, False, False, False, None), (32, False, True, False, 1),
                                                          (16, True, False, False, 6), (16, False, True, False, None),
                                                          (16, False, False, True, 1), (32, True, True, True, 6)])
def test_rows_accumulation_kernel_equals_twin_and_atomics_in_simulator(docs, big, ranged, grid, min_df):
    # kernels.blocked.rows_accumulate_kernel (8 threads, 5 or 3 blocks, 15-16 segments: two chunks of
    # segments) against the twin and against scoring.accumulate_kernel's atomics on the same rows;
    # grid: the three queries as blocks of their own (one shared row), their segments from qinfo[:, 3];
    # min_df: the block-starts table's rows (None: no table, binary searches)
    from numba import cuda

    from gputext.kernels import scoring
    from gputext.kernels.blocked import rows_accumulate_kernel
    (seg_off, seg, w, qinfo, tp, pd, pw, code, n), want, total = _rows_inputs("l1" if big else "cosine", big=big)
    if grid:  # each query's first segment of the tile (segments in query order), as kernels.scoring.tile_one writes
        qinfo[1:, 3] = np.searchsorted(seg[2:, 1], np.arange(3))
    d = [cuda.to_device(a) for a in (seg_off, seg, w, qinfo, tp, pd, pw)]
    shared = cuda.to_device(np.full(3 * n, 99, np.int64))
    table = _table(tp, pd, n, docs, min_df)
    extra = _no_units(table)
    if ranged:  # the ranges by block_ranges_kernel (16 threads a block), equal to its twin's
        from gputext.kernels.blocked import block_ranges_cpu, block_ranges_kernel
        n_blk, n_seg = -(-n // docs), len(seg) - 2
        rf, rc = np.full((n_blk, n_seg + 3), 7, np.int64), np.full((n_blk, n_seg + 3), 7, np.int32)
        block_ranges_cpu(seg, tp, pd, n, docs, 2, n_seg, *table, rf, rc)
        d_rf, d_rc = cuda.to_device(np.full_like(rf, 7)), cuda.to_device(np.full_like(rc, 7))
        block_ranges_kernel[-(-n_blk * n_seg // 16), 16](d[1], d[4], d[5], n, docs, 2, n_seg, *extra[3:5], d_rf, d_rc)
        assert np.array_equal(d_rf.copy_to_host(), rf) and np.array_equal(d_rc.copy_to_host(), rc)
        extra = (*extra[:5], d_rf, d_rc)
    n_blk = -(-n // docs)
    kernel = rows_accumulate_kernel(8, docs, 1, 0, ranged, True) if grid else rows_accumulate_kernel(8, docs, 3, 0, ranged)
    kernel[n_blk * (3 if grid else 1), 8](*d, code, n, shared, 2, 0, len(seg) - 2, 1, *extra)
    atomic = cuda.to_device(np.zeros(3 * n, np.int64))
    scoring.accumulate_kernel(8, 2)[-(-total // 16), 8](cuda.to_device(seg_off[2:]), *d[1:], code, n, atomic, 2, 0,
                                                         len(seg) - 2, 1)
    assert np.array_equal(shared.copy_to_host(), want) and np.array_equal(atomic.copy_to_host(), want)
