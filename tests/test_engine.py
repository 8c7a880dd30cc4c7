"""The scoring engine against a float64 brute-force reference, on the CPU twin and (tiny) in the
CUDA simulator; CPU and CUDA results must be identical, not just close."""
import numpy as np
import pytest
import scipy.sparse as sp

from engine_reference import check_resident_shards, random_corpus, same_up_to_ties, similarity_matrix, topk
from gputext.engine import Geometry, Index, search_threshold, search_topk
from gputext.errors import InputError

METRICS = ["cosine", "dot", "l2", "l1"]
TINY = Geometry(accumulate_block=8, accumulate_items=2, select_block=8, select_items=2, merge_block=8,
                merge_width=16, build_block=8, scan_block=8, scan_items=2,
                sorted_postings=False)  # the device build; test_cuda_equals_cpu_in_simulator also runs the uploaded one


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("signed", [False, True])
def test_topk_equals_reference_cpu(metric, signed):
    X = random_corpus(400, 60, 0.06, seed=1, signed=signed, empty_rows=(5, 17), duplicates=((3, 40), (3, 41)))
    Q = sp.vstack([random_corpus(30, 60, 0.1, seed=2, signed=signed), X[3], X[5], sp.csr_matrix((1, 60), dtype=np.float32)]).tocsr()
    idx, sc = search_topk(Index.from_csr(X), Q, 10, metric, device="cpu")
    ref_idx, ref_sc = topk(X, Q, 10, metric)
    assert idx.dtype == np.int32 and sc.dtype == np.float32 and idx.shape == (33, 10)
    assert same_up_to_ties(idx, sc, ref_idx, ref_sc)
    # the duplicates 3, 40, 41 tie exactly and come in index order
    row = idx[30].tolist()
    assert [d for d in row if d in (3, 40, 41)] == [3, 40, 41]


@pytest.mark.parametrize("metric", METRICS)
def test_documents_sharing_no_term_are_scored_exactly(metric):
    # one query term that no document has: every score comes from the norms alone
    X = random_corpus(50, 10, 0.3, seed=3)
    X = sp.hstack([X, sp.csr_matrix((50, 1), dtype=np.float32)]).tocsr()
    Q = sp.csr_matrix(([0.7], [[0], [10]]), shape=(1, 11), dtype=np.float32)
    idx, sc = search_topk(Index.from_csr(X), Q, 50, metric, device="cpu")
    ref_idx, ref_sc = topk(X, Q, 50, metric)
    assert same_up_to_ties(idx, sc, ref_idx, ref_sc)
    if metric in ("cosine", "dot"):
        assert np.all(sc == 0) and idx.tolist()[0] == list(range(50))


def test_k_larger_than_corpus_pads():
    X = random_corpus(6, 8, 0.5, seed=4)
    idx, sc = search_topk(Index.from_csr(X), X, 9, "cosine", device="cpu", exclude_self=True)
    assert np.all(idx[:, 5:] == -1) and np.all(np.isnan(sc[:, 5:]))
    assert all(i not in row for i, row in enumerate(idx.tolist()))
    ref_idx, ref_sc = topk(X, X, 9, "cosine", exclude_self=True)
    assert same_up_to_ties(idx, sc, ref_idx, ref_sc)


def test_single_term_queries_and_one_document():
    X = random_corpus(1, 5, 1.0, seed=5)
    Q = sp.identity(5, dtype=np.float32, format="csr")
    for metric in METRICS:
        idx, sc = search_topk(Index.from_csr(X), Q, 1, metric, device="cpu")
        ref_idx, ref_sc = topk(X, Q, 1, metric)
        assert np.array_equal(idx, ref_idx) and np.allclose(sc, ref_sc, rtol=1e-6)


def test_empty_index_rows_only():
    X = sp.csr_matrix((4, 3), dtype=np.float32)
    Q = sp.csr_matrix(np.array([[1, 0, 2]], np.float32))
    idx, sc = search_topk(Index.from_csr(X), Q, 2, "l2", device="cpu")
    assert idx.tolist() == [[0, 1]] and np.allclose(sc, np.sqrt(5))


@pytest.mark.parametrize("metric,threshold", [("cosine", 0.2), ("dot", 0.1), ("l2", 1.1), ("l1", 2.5), ("cosine", 0.0)])
def test_threshold_equals_reference_cpu(metric, threshold):
    X = random_corpus(200, 40, 0.08, seed=6, empty_rows=(0,))
    Q = random_corpus(15, 40, 0.1, seed=7)
    S = search_threshold(Index.from_csr(X), Q, threshold, metric, device="cpu")
    ref = similarity_matrix(X, Q, metric)
    key_bound = threshold if metric in ("cosine", "dot") else -threshold
    clear = np.abs(ref - key_bound) > 1e-6  # do not judge pairs at the boundary to rounding
    got = np.zeros(ref.shape, bool)
    got[np.repeat(np.arange(15), np.diff(S.indptr)), S.indices] = True
    assert np.array_equal(got[clear], (ref >= key_bound)[clear])
    vals = ref[got] if metric in ("cosine", "dot") else -ref[got]
    assert np.allclose(S.toarray()[got], vals, rtol=1e-5, atol=1e-6)
    assert S.has_sorted_indices


def test_exclude_self_threshold_graph():
    X = random_corpus(80, 20, 0.15, seed=8, duplicates=((1, 2),))
    S = search_threshold(Index.from_csr(X), X, 0.3, "cosine", device="cpu", exclude_self=True)
    assert S.diagonal().sum() == 0 and S[1, 2] > 0.999
    assert abs(S - S.T).max() == 0  # cosine graph is symmetric, bit for bit


def test_bad_input():
    index = Index.from_csr(random_corpus(5, 4, 0.5, seed=9))
    with pytest.raises(InputError, match="vocab"):
        search_topk(index, sp.csr_matrix((1, 7), dtype=np.float32), 2)
    with pytest.raises(InputError, match="metric"):
        search_topk(index, sp.csr_matrix((1, 4), dtype=np.float32), 2, metric="hamming")
    with pytest.raises(InputError, match="k must be"):
        search_topk(index, sp.csr_matrix((1, 4), dtype=np.float32), 0)
    with pytest.raises(InputError, match="NaN"):
        search_topk(index, sp.csr_matrix(np.array([[np.nan, 0, 0, 1]], np.float32)), 2)
    with pytest.raises(InputError, match="exclude_self"):
        search_topk(index, sp.csr_matrix((2, 4), dtype=np.float32), 2, exclude_self=True)


def test_index_file_round_trip(tmp_path):
    X = random_corpus(60, 30, 0.1, seed=10)
    index = Index.from_csr(X)
    index.save(str(tmp_path / "i.h5"))
    loaded = Index.load(str(tmp_path / "i.h5"))
    assert loaded._postings is not None
    Q = random_corpus(5, 30, 0.2, seed=11)
    a = search_topk(index, Q, 7, "l1", device="cpu")
    b = search_topk(loaded, Q, 7, "l1", device="cpu")
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


# sorted: the CPU twin's postings uploaded (the default); narrow: the small-batch merge width
# (32 entries = groups of 4 lists of k = 5, 3 segments, so the one level narrows to 16 entries);
# shard_docs: three resident shards of 13-14 documents (the tied duplicates 3 and 39 in different ones);
# tile_rows: tiles of two queries (a tile of 2 and one of 1), their segments by term or by query;
# tile_chunk: chunks of one tile each; tile_lanes: tiles dealt to two lanes (own score rows; one stream here);
# merge_rank_group: 0 the bitonic merges, 2 rank merges of two lists a level; shared_accumulate: the
# accumulation through shared memory (kernels.blocked.rows_accumulate_kernel) in blocks of 16, 16, 24 and 16
# documents, and not on the device's own build (lists unsorted: the atomics);
# accumulate_items: 5 and 8 postings a thread for the atomics; unit_select (the shared accumulation's
# default, kernels.unit_select) off: per-segment lists and merges; units of 2 threads, 8 candidates
# and 8 select threads (6 each, rounded up to powers of two; the gathers refine on the tied duplicates); block_ranges on (by default only for more tiles than lanes)
# and off: the ranges kernel or the accumulation's own binary searches; tile_grid (the default: a
# tile's queries as blocks of their own; 3 queries in one tile; tiles of 2 and 1 on two lanes,
# ranged) and off (the tile's queries as rows of one block's shared memory); block_table (default: the
# ranges of the longest lists from the block-starts table, the others by search and gallop) off: every
# range by binary searches
VARIANTS = [(m, {}) for m in METRICS] + [("cosine", {"sorted_postings": True}), ("l1", {"sorted_postings": True}),
                                         ("cosine", {"merge_width": 64, "merge_width_small": 32}),
                                         ("l2", {"shard_docs": 16}), ("dot", {"shard_docs": 16, "sorted_postings": True}),
                                         ("cosine", {"tile_rows": 2}), ("l1", {"tile_rows": 2, "tile_term_order": False}),
                                         ("dot", {"tile_rows": 2, "tile_chunk": 2, "shard_docs": 16}),
                                         ("l2", {"tile_rows": 1, "tile_lanes": 2}), ("cosine", {"tile_lanes": 1}),
                                         ("cosine", {"merge_rank_group": 0, "merge_width": 64, "merge_width_small": 32}),
                                         ("l1", {"merge_rank_group": 2}),
                                         ("cosine", {"tile_rows": 2, "shared_accumulate": 32, "shared_min_docs": 1,
                                                     "sorted_postings": True, "tile_grid": False}),
                                         ("dot", {"tile_rows": 3, "shared_accumulate": 48, "shared_min_docs": 1,
                                                  "tile_term_order": False, "shard_docs": 16, "sorted_postings": True}),
                                         ("l2", {"tile_rows": 1, "tile_lanes": 2, "shared_accumulate": 24,
                                                 "shared_min_docs": 1, "sorted_postings": True}),
                                         ("dot", {"tile_rows": 2, "shared_accumulate": 32, "shared_min_docs": 1,
                                                  "tile_term_order": False, "sorted_postings": True,
                                                  "tile_grid": False}),
                                         ("cosine", {"shared_accumulate": 32, "shared_min_docs": 1, "tile_rows": 2}),
                                         ("cosine", {"tile_rows": 2, "shared_accumulate": 32, "shared_min_docs": 1,
                                                     "sorted_postings": True, "unit_select": False}),
                                         ("l2", {"tile_rows": 3, "shared_accumulate": 48, "shared_min_docs": 1,
                                                 "sorted_postings": True, "unit_threads": 2, "unit_block": 6,
                                                 "unit_cap": 6, "tile_lanes": 2, "block_ranges": True,
                                                 "tile_grid": False}),
                                         ("cosine", {"tile_rows": 1, "shared_accumulate": 32, "shared_min_docs": 1,
                                                     "sorted_postings": True, "block_ranges": True}),
                                         ("dot", {"tile_rows": 2, "shared_accumulate": 32, "shared_min_docs": 1,
                                                  "sorted_postings": True, "block_ranges": False}),
                                         ("cosine", {"tile_rows": 3, "tile_grid": True, "shared_accumulate": 16,
                                                     "shared_min_docs": 1, "sorted_postings": True}),
                                         ("l2", {"tile_rows": 2, "tile_grid": True, "shared_accumulate": 24,
                                                 "shared_min_docs": 1, "sorted_postings": True, "tile_lanes": 2,
                                                 "block_ranges": True}),
                                         ("dot", {"tile_rows": 2, "tile_grid": True, "shared_accumulate": 16,
                                                  "shared_min_docs": 1, "sorted_postings": True, "block_table": False,
                                                  "block_ranges": True}),
                                         ("l1", {"accumulate_items": 5}), ("cosine", {"accumulate_items": 8})]


@pytest.mark.filterwarnings("ignore:overflow encountered")  # split counters: uint32 words wrap in the simulator too
@pytest.mark.cudasim
@pytest.mark.parametrize("metric,change", VARIANTS)
def test_cuda_equals_cpu_in_simulator(metric, change):
    X = random_corpus(40, 12, 0.2, seed=12, signed=metric == "dot", empty_rows=(7,), duplicates=((3, 39),))
    Q = sp.vstack([random_corpus(2, 12, 0.3, seed=13), X[3]]).tocsr()
    index = Index.from_csr(X)
    ic, sc = search_topk(index, Q, 5, metric, device="cpu")
    ig, sg = search_topk(index, Q, 5, metric, device="cuda", geometry=Geometry(**{**TINY.__dict__, **change}))
    if "shard_docs" in change:
        assert [(s.doc_lo, s.doc_hi) for s in index.device_cache[("shards", 3)]] == [(0, 13), (13, 26), (26, 40)]
    elif change.get("sorted_postings"):  # the device shard is the CPU twin's build, lists sorted by document
        shard = index.device_cache["shard"]
        assert np.array_equal(shard.post_doc.copy_to_host(), index.cpu().post_doc)
        if change.get("tile_grid"):  # the grid accumulation ran
            assert any(plan.grid for plan in shard.plans.values())
    assert np.array_equal(ic, ig) and np.array_equal(sc, sg)
    ref_idx, ref_sc = topk(X, Q, 5, metric)
    assert same_up_to_ties(ig, sg, ref_idx, ref_sc)
    if change.get("shared_min_docs"):  # the shared accumulation ran exactly where the lists are sorted
        shards = index.device_cache.get(("shards", 3)) or [index.device_cache["shard"]]
        assert {p.shared for s in shards for p in s.plans.values()} == {bool(change.get("sorted_postings"))}
        units = {p.unit > 0 for s in shards for p in s.plans.values()}
        assert units == {bool(change.get("sorted_postings")) and change.get("unit_select", True)}
        if "block_ranges" in change:
            assert {p.ranged for s in shards for p in s.plans.values()} == {change["block_ranges"]}
        # the block-starts table (a row for each list of at least one posting a block, within the budget)
        tabled = bool(change.get("sorted_postings")) and change.get("block_table", True)
        assert {p.table[0].shape[0] > 1 for s in shards for p in s.plans.values()} == {tabled}


@pytest.mark.filterwarnings("ignore:overflow encountered")  # split counters: uint32 words wrap in the simulator too
@pytest.mark.cudasim
def test_range_buffers_grow_for_long_queries_in_simulator(monkeypatch):
    # lanes' (segment, block) range buffers start at one segment a query: the tiles' 4-9 segments
    # grow them (the launches repointed); results equal the CPU twin's
    from gputext.engine import cuda_backend
    monkeypatch.setattr(cuda_backend, "RANGES_SEGMENTS", 1)
    X = random_corpus(40, 12, 0.2, seed=12, duplicates=((3, 39),))
    Q = random_corpus(5, 12, 0.4, seed=14)
    index = Index.from_csr(X)
    geom = Geometry(**{**TINY.__dict__, "tile_rows": 2, "shared_accumulate": 32, "shared_min_docs": 1,
                       "sorted_postings": True, "tile_lanes": 2})
    got = search_topk(index, Q, 5, "cosine", device="cuda", geometry=geom)
    want = search_topk(index, Q, 5, "cosine", device="cpu")
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    plan = next(iter(index.device_cache["shard"].plans.values()))
    assert plan.ranged and plan.rng_cap >= max(np.diff(Q.indptr[::2])) > 2


@pytest.mark.cudasim
def test_resident_shards_are_made_by_a_batch_and_then_serve_every_search_in_simulator():
    X = random_corpus(40, 12, 0.2, seed=15, duplicates=((3, 39),))
    Q = sp.vstack([random_corpus(2, 12, 0.3, seed=16), X[3]]).tocsr()
    check_resident_shards(X, Q, 5, "cosine", Geometry(**{**TINY.__dict__, "shard_docs": 16}), 3)


@pytest.mark.cudasim
def test_cuda_threshold_and_exclude_self_in_simulator():
    X = random_corpus(24, 10, 0.3, seed=14, duplicates=((0, 23),))
    index = Index.from_csr(X)
    Tc = search_threshold(index, X[:4], 0.2, "cosine", device="cpu", exclude_self=np.arange(4))
    Tg = search_threshold(index, X[:4], 0.2, "cosine", device="cuda", exclude_self=np.arange(4), geometry=TINY)
    assert np.array_equal(Tc.indptr, Tg.indptr) and np.array_equal(Tc.indices, Tg.indices) and np.array_equal(Tc.data, Tg.data)
    ic, sc = search_topk(index, X[:3], 30, "l2", device="cpu", exclude_self=np.arange(3))
    wide = Geometry(**{**TINY.__dict__, "select_block": 32, "select_items": 1})  # block >= k
    ig, sg = search_topk(index, X[:3], 30, "l2", device="cuda", exclude_self=np.arange(3), geometry=wide)
    assert np.array_equal(ic, ig) and np.array_equal(np.isnan(sc), np.isnan(sg)) and np.all((ic[:, 23:] == -1))


@pytest.mark.cudasim
def test_device_scan_in_simulator():
    from numba import cuda
    from gputext.kernels.scan import exclusive_scan_cpu, exclusive_scan_device
    values = np.random.default_rng(15).integers(0, 9, 77).astype(np.int32)
    got = exclusive_scan_device(cuda.to_device(values), block=4, items=2).copy_to_host()
    assert np.array_equal(got, exclusive_scan_cpu(values))


@pytest.mark.cudasim
def test_device_index_build_in_simulator():
    from gputext.engine.device_index import build_shard
    X = random_corpus(20, 9, 0.3, seed=16)
    shard = build_shard(X, 0, 20, TINY)
    cpu = Index.from_csr(X).cpu()
    tp = shard.term_ptr.copy_to_host()
    assert np.array_equal(tp, cpu.term_ptr)
    docs, ws = shard.post_doc.copy_to_host(), shard.post_w.copy_to_host()
    for t in range(9):  # same postings, any order within a list
        a = sorted(zip(docs[tp[t]:tp[t + 1]], ws[tp[t]:tp[t + 1]]))
        b = list(zip(cpu.post_doc[tp[t]:tp[t + 1]], cpu.post_w[tp[t]:tp[t + 1]]))
        assert a == b
    assert np.array_equal(shard.d_sq.copy_to_host(), cpu.d_sq) and np.array_equal(shard.d_l1.copy_to_host(), cpu.d_l1)


@pytest.mark.filterwarnings("ignore:overflow encountered")  # split counters: uint32 words wrap in the simulator too
@pytest.mark.cudasim
def test_cuda_score_rows_stay_clean_across_searches_in_simulator():
    # the selectors re-zero the score rows they read; reuse across batch sizes and selectors
    X = random_corpus(30, 10, 0.3, seed=17)
    Q = random_corpus(4, 10, 0.4, seed=18)
    index = Index.from_csr(X)
    ref = search_topk(index, Q, 3, "cosine", device="cpu")
    for batch in (4, 1, 3):
        got = search_topk(index, Q, 3, "cosine", device="cuda", batch_size=batch, geometry=TINY)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
    T = search_threshold(index, Q, 0.1, "dot", device="cuda", geometry=TINY)
    assert np.array_equal(T.toarray(), search_threshold(index, Q, 0.1, "dot", device="cpu").toarray())
    got = search_topk(index, Q, 3, "cosine", device="cuda", geometry=TINY)
    assert np.array_equal(got[0], ref[0])
    # the shared-memory accumulation leaves its rows as they are; the atomics' users zero them first
    shared = Geometry(**{**TINY.__dict__, "tile_rows": 1, "shared_accumulate": 16, "shared_min_docs": 1,
                         "sorted_postings": True})
    index = Index.from_csr(X)  # built sorted by the first search (the shared accumulation needs it)
    for geom in (shared, TINY, shared):
        got = search_topk(index, Q, 3, "cosine", device="cuda", geometry=geom)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
        T = search_threshold(index, Q, 0.1, "dot", device="cuda", geometry=TINY)
        assert np.array_equal(T.toarray(), search_threshold(index, Q, 0.1, "dot", device="cpu").toarray())


def test_threshold_after_keeps_the_upper_triangle():
    X = random_corpus(90, 25, 0.15, seed=19, duplicates=((4, 70),))
    index = Index.from_csr(X)
    full = search_threshold(index, X, 0.2, "cosine", device="cpu", exclude_self=True)
    upper = search_threshold(index, X, 0.2, "cosine", device="cpu", after=np.arange(90))
    assert np.array_equal(upper.toarray(), sp.triu(full, k=1).toarray()) and upper.nnz > 0


@pytest.mark.cudasim
def test_cuda_threshold_after_in_simulator():
    X = random_corpus(20, 10, 0.3, seed=20, duplicates=((1, 19),))
    index = Index.from_csr(X)
    after = np.array([0, 1, 5, -1])
    c = search_threshold(index, X[:4], 0.1, "cosine", device="cpu", after=after)
    g = search_threshold(index, X[:4], 0.1, "cosine", device="cuda", after=after, geometry=TINY)
    assert np.array_equal(c.toarray(), g.toarray()) and c.nnz > 0


@pytest.mark.parametrize("metric", METRICS)
def test_sparse_and_dense_cpu_paths_agree_with_reference(metric):
    # queries whose postings cover few documents take the CPU twin's touched-list path, the
    # others its dense path (kernels.scoring.topk_cpu); both must equal the reference
    X = random_corpus(3000, 800, 0.003, seed=23, duplicates=((7, 2999),))
    dense_queries = random_corpus(5, 800, 0.2, seed=24)
    sparse_queries = sp.csr_matrix((np.ones(6, np.float32), ([0, 1, 2, 3, 4, 5], [0, 5, 9, 13, 400, 799])), shape=(6, 800))
    Q = sp.vstack([dense_queries, sparse_queries, X[7]]).tocsr()
    idx, sc = search_topk(Index.from_csr(X), Q, 12, metric, device="cpu")
    ref_idx, ref_sc = topk(X, Q, 12, metric)
    assert same_up_to_ties(idx, sc, ref_idx, ref_sc)


@pytest.mark.parametrize("term_order", [True, False])
def test_tile_inputs_layout(term_order):
    # kernels.scoring.tile_inputs against the layout written out by hand: tiles of 3 queries (the
    # last of 2), per tile the (term, query-in-tile) segments by term (or by query), their
    # postings' prefix sums from 0, and the queries' qinfo rows (column 3: the query's first segment
    # in its tile, where the grid accumulation finds its segments); one tile alone by tile_one
    from gputext.io.corpus import csr_arrays
    from gputext.kernels import scoring
    Q = random_corpus(8, 20, 0.3, seed=31)
    ptr, ind, dat = csr_arrays(Q)
    df = np.arange(20, dtype=np.int64) % 7
    scale, qn = np.arange(8.0) + 1, np.arange(8.0) + 10
    self_doc = np.array([-1, 5, 12, 40, -1, 11, 3, 9], np.int64)
    n_tiles, L = 3, Q.nnz
    seg_off, seg = np.full(L + n_tiles, -7, np.int64), np.full((L, 2), -7, np.int32)
    weights, qinfo, postings = np.zeros(L, np.float32), np.zeros((8, 4)), np.zeros(n_tiles, np.int64)
    scoring.tile_inputs(ptr, ind, dat, df, 3, term_order, scale, qn, self_doc, 10, 20, seg_off, seg, weights,
                        qinfo, postings)
    for g in range(n_tiles):
        lo, hi = 3 * g, min(8, 3 * g + 3)
        s0, s1 = ptr[lo], ptr[hi]
        want = [(ind[p], q - lo, dat[p]) for q in range(lo, hi) for p in range(ptr[q], ptr[q + 1])]
        if term_order:
            want.sort(key=lambda e: (e[0], e[1]))
        assert seg[s0:s1].tolist() == [[t, q] for t, q, _ in want] and weights[s0:s1].tolist() == [w for *_, w in want]
        assert seg_off[s0 + g:s1 + g + 1].tolist() == [0] + np.cumsum([df[t] for t, *_ in want]).tolist()
        assert postings[g] == sum(df[t] for t, *_ in want)
    assert qinfo[:, 0].tolist() == scale.tolist() and qinfo[:, 1].tolist() == qn.tolist()
    assert qinfo[:, 2].tolist() == [-1, -1, 2, -1, -1, 1, -1, -1]
    first = [ptr[q] - ptr[q - q % 3] for q in range(8)]  # each query's first segment in its tile, query order
    assert qinfo[:, 3].tolist() == first
    one = np.full(L + 1, -7, np.int64), np.full((L, 2), -7, np.int32), np.zeros(L, np.float32), np.zeros((8, 4))
    assert scoring.tile_one(0, ptr, ind, dat, df, 8, term_order, scale, qn, self_doc, 10, 20, *one) == postings.sum()
    assert one[0][-1] == postings.sum()


def test_merge_by_rank_equals_sorting():
    # select.merge_rank_cpu (the twin of scoring.merge_topk_kernel by rank): each group's k best under the
    # tie rule, equal keys across lists (ordered by document), short lists padded with -1 / -inf
    from gputext.kernels.select import merge_rank_cpu
    rng = np.random.default_rng(32)
    n_q, n_lists, k, group = 3, 7, 5, 3
    keys = np.round(rng.random((n_q, n_lists, k)) * 4) / 4  # few distinct values: ties
    docs = rng.permutation(n_q * n_lists * k).reshape(n_q, n_lists, k).astype(np.int32)
    docs[1, 2, 3:] = -1  # a list with two empty slots
    docs[2, 6, :] = -1  # an empty list, alone in the last group
    keys[docs < 0] = -np.inf
    for q in range(n_q):
        for j in range(n_lists):
            order = sorted(range(k), key=lambda p: (docs[q, j, p] < 0, -keys[q, j, p], docs[q, j, p]))
            keys[q, j], docs[q, j] = keys[q, j, order], docs[q, j, order]
    n_groups = -(-n_lists // group)
    out_doc, out_key = np.zeros((n_q, n_groups, k), np.int32), np.zeros((n_q, n_groups, k))
    merge_rank_cpu(docs, keys, group, k, out_doc, out_key)
    for q in range(n_q):
        for g in range(n_groups):
            e = [(-keys[q, j, p], docs[q, j, p]) for j in range(g * group, min(n_lists, g * group + group))
                 for p in range(k) if docs[q, j, p] >= 0]
            want = sorted(e)[:k] + [(np.inf, -1)] * max(0, k - len(e))
            assert out_doc[q, g].tolist() == [d for _, d in want]
            assert out_key[q, g].tolist() == [-v for v, _ in want]


def test_shard_plan_counts_the_build_that_is_uploaded(monkeypatch):
    # plan_shards: 16 B a posting for the atomic device build (its CSR rows stay on the device), 8 B
    # for sorted lists (the default; built on the device where its transient 16 B fit, else the
    # host's build uploaded): an index that fits whole at 8 B is not streamed in shards
    from gputext.engine import device_index
    X = random_corpus(100, 50, 0.2, seed=41)
    need = {16: 16 * X.nnz + 16 * 100 + 8 * 50, 8: 8 * X.nnz + 16 * 100 + 8 * 50}

    class Budget:
        def share(self, fraction):
            return need[8] + 100

    monkeypatch.setattr(device_index, "resources", Budget)
    index = Index.from_csr(X)
    assert device_index.plan_shards(index, device_index.build_bytes(Geometry())) == [(0, 100)]
    ranges = device_index.plan_shards(index, device_index.build_bytes(Geometry(sorted_postings=False)))
    assert len(ranges) == 2 and ranges[0][0] == 0 and ranges[-1][1] == 100
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
