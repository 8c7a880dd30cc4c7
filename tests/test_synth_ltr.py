"""Synthetic learning-to-rank data (gputext.datasets.ltr) and the presets of the papers' tables."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from gputext.datasets.ltr import BLOCK_QUERIES, LtrSpec, hidden_weights, make_ltr, query_sizes, write_ltr
from gputext.datasets.presets import PRESETS, resolve
from gputext.errors import InputError
from gputext.io import read_corpus


def query_bounds(qid: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.r_[True, qid[1:] != qid[:-1], True])


def test_qids_are_contiguous_and_sizes_vary_around_the_mean():
    c = make_ltr(200, 25, 12, n_levels=4, seed=1)
    qid = c.obs["qid"]
    assert qid.dtype == np.int32 and np.all(np.diff(qid) >= 0)
    assert list(np.unique(qid)) == list(range(1, 201))  # each qid one contiguous run, 1-based, in order
    sizes = np.diff(query_bounds(qid))
    assert len(sizes) == 200 and sizes.sum() == c.n_docs == 5000
    assert sizes.min() >= 1 and sizes.std() > 3  # they vary


def test_shapes_dtypes_and_dense_rows():
    c = make_ltr(30, 10, 7, seed=2)
    assert c.X.shape == (300, 7) and c.X.dtype == np.float32
    assert np.all(np.diff(c.X.indptr) == 7)  # dense rows: every feature stored
    assert list(c.terms) == [f"f{j}" for j in range(1, 8)]
    assert list(c.doc_ids[:2]) == ["d0", "d1"]
    rel = c.obs["relevance"]
    assert rel.dtype == np.float32 and np.all(rel == np.round(rel))
    assert rel.min() == 0 and rel.max() <= 4
    assert c.params["weighting"] == "none"
    np.testing.assert_array_equal(c.params["synth"]["hidden_weights"], hidden_weights(LtrSpec(30, 10, 7, seed=2)))


def test_levels_cover_the_range_with_fewer_documents_at_higher_levels():
    rel = make_ltr(300, 40, 10, n_levels=5, seed=3).obs["relevance"].astype(int)
    counts = np.bincount(rel, minlength=5)
    assert rel.min() == 0 and rel.max() == 4
    assert np.all(np.diff(counts) < 0)  # level l has probability ~ 0.5^l


def test_exact_row_count_and_largest_query():
    spec = LtrSpec(50, 20, 5, n_docs=1003, max_docs_per_query=90)
    sizes = query_sizes(spec)
    assert sizes.sum() == 1003 and sizes.max() == 90 and sizes.min() >= 1
    with pytest.raises(InputError, match="does not fit"):
        LtrSpec(5, 20, 5, n_docs=1000, max_docs_per_query=10)
    with pytest.raises(InputError, match="fewer than n_queries"):
        LtrSpec(50, 1, 5, n_docs=10)


def pairwise_accuracy(scores, rel, qid) -> float:
    right = total = 0
    b = query_bounds(qid)
    for lo, hi in zip(b[:-1], b[1:]):
        s, y = scores[lo:hi], rel[lo:hi]
        better = y[:, None] > y[None, :]
        right += np.count_nonzero(better & (s[:, None] > s[None, :]))
        total += np.count_nonzero(better)
    return right / total


def test_a_linear_model_fitted_on_the_features_ranks_far_better_than_random():
    c = make_ltr(300, 30, 20, n_levels=5, seed=4)
    X, rel, qid = c.X.toarray().astype(np.float64), c.obs["relevance"].astype(np.float64), c.obs["qid"]
    train = qid <= 200
    # least squares on query-centred features and labels (an independent, simple learner)
    def centred(A):
        out = A.copy()
        b = query_bounds(qid)
        for lo, hi in zip(b[:-1], b[1:]):
            out[lo:hi] -= out[lo:hi].mean(axis=0)
        return out
    w, *_ = np.linalg.lstsq(centred(X)[train], centred(rel[:, None])[train, 0], rcond=None)
    test = ~train
    learned = pairwise_accuracy(X[test] @ w, rel[test], qid[test])
    rng = np.random.default_rng(0)
    random = pairwise_accuracy(rng.normal(size=test.sum()), rel[test], qid[test])
    assert abs(random - 0.5) < 0.05
    assert learned > 0.75, learned
    # and the learned direction is the hidden one
    hidden = c.params["synth"]["hidden_weights"]
    assert np.dot(w, hidden) / np.linalg.norm(w) / np.linalg.norm(hidden) > 0.9


def brute_force_pairs(rel, qid) -> int:
    b = query_bounds(qid)
    return sum(int(np.count_nonzero(rel[lo:hi, None] > rel[None, lo:hi])) for lo, hi in zip(b[:-1], b[1:]))


def test_list_relevance_is_the_rank_inside_the_query():
    c = make_ltr(40, 15, 6, relevance="list", seed=5, max_docs_per_query=33)
    rel, qid = c.obs["relevance"], c.obs["qid"]
    b = query_bounds(qid)
    for lo, hi in zip(b[:-1], b[1:]):
        assert sorted(rel[lo:hi].astype(int)) == list(range(hi - lo))
    assert rel.max() == 32  # levels = documents of the largest query
    sizes = np.diff(b)
    assert c.params["n_pairs"] == int(np.sum(sizes * (sizes - 1) // 2)) == brute_force_pairs(rel, qid)


def test_n_pairs_counts_preference_pairs():
    c = make_ltr(60, 12, 4, n_levels=3, seed=6)
    assert c.params["n_pairs"] == brute_force_pairs(c.obs["relevance"], c.obs["qid"])


def test_density_below_one_stores_that_share_of_entries():
    c = make_ltr(100, 20, 50, density=0.3, seed=7)
    assert abs(c.X.nnz / (c.n_docs * 50) - 0.3) < 0.01
    assert np.all(c.X.data != 0)


def test_determinism_and_chunked_file_equals_in_memory(tmp_path):
    params = dict(n_queries=BLOCK_QUERIES * 2 + 5, docs_per_query=9, n_features=6, n_levels=3, seed=8)
    a, b = make_ltr(**params, threads=1), make_ltr(**params, threads=3)
    assert (a.X != b.X).nnz == 0
    path = str(tmp_path / "ltr.h5")
    summary = write_ltr(path, **params)
    c = read_corpus(path)
    assert (a.X != c.X).nnz == 0
    for key in ("qid", "relevance"):
        np.testing.assert_array_equal(a.obs[key], c.obs[key])
    assert list(c.terms) == list(a.terms) and list(c.doc_ids) == list(a.doc_ids)
    assert summary["n_pairs"] == a.params["n_pairs"] == c.params["n_pairs"]
    with h5py.File(path, "r") as f:
        assert f["obs/qid"].dtype == np.int32 and f["obs/relevance"].dtype == np.float32
    d = make_ltr(**{**params, "seed": 9})
    assert not np.array_equal(d.obs["relevance"], a.obs["relevance"])


TABLE1 = {  # RankSVM paper Table 1: rows l, features n, levels k, queries |Q|, pairs p, largest query l_L
    "mq2007-list": (743_790, 46, 1_268, 1_017, 285_943_893, 1_268),
    "mq2008-list": (540_679, 46, 1_831, 471, 323_151_792, 1_831),
    "mslr-web10k": (723_421, 136, 2, 6_000, 31_783_391, 809),
    "mslr-web30k": (2_270_296, 136, 5, 18_919, 101_312_036, 1_251),
    "mq2007": (42_158, 46, 2, 1_017, 246_015, 147),
    "mq2008": (9_630, 46, 3, 471, 52_325, 121),
}


@pytest.mark.parametrize("name", list(TABLE1))
def test_ranksvm_presets_have_the_table_shapes(name):
    rows, features, levels, queries, _, largest = TABLE1[name]
    kind, params = resolve(name)
    assert kind == "ltr"
    assert (params["n_docs"], params["n_features"], params["n_levels"], params["n_queries"]) == (rows, features, levels, queries)
    spec = LtrSpec(**{k: v for k, v in params.items() if k in LtrSpec.__dataclass_fields__})
    sizes = query_sizes(spec)
    assert len(sizes) == queries and sizes.sum() == rows and sizes.max() == largest
    if params.get("relevance") == "list":
        assert largest == levels  # the list sets' levels are the ranks of the largest query
        pairs = int(np.sum(sizes * (sizes - 1) // 2))
        assert abs(pairs / TABLE1[name][4] - 1) < 0.02


@pytest.mark.parametrize("name", ["mq2007", "mq2008"])
def test_small_ranksvm_presets_match_the_table_pair_counts(name):
    _, params = resolve(name)
    c = make_ltr(**{k: v for k, v in params.items()})
    assert abs(c.params["n_pairs"] / TABLE1[name][4] - 1) < 0.05
    assert c.obs["relevance"].max() == TABLE1[name][2] - 1


def test_reu_presets_have_the_table_shapes():
    table3 = {"reu-10k": (10000, 33370, 27), "reu-20k": (20000, 48493, 41), "reu-30k": (30000, 59413, 50),
              "reu-40k": (40000, 70348, 58), "reu-50k": (50000, 74720, 64), "reu-60k": (60000, 81632, 69),
              "reu-70k": (70000, 91490, 76)}
    for name, (docs, terms, _) in table3.items():
        assert (PRESETS[name]["n_docs"], PRESETS[name]["n_terms"]) == (docs, terms)
    from gputext.datasets.synth import make_corpus
    _, params = resolve("reu-10k")
    c = make_corpus(**params)
    mean_terms = np.diff(c.X.indptr).mean()
    assert abs(mean_terms - 27) < 1.5, mean_terms  # the table's average terms per document
    assert c.obsm["labels"].shape == (10000, 20)


def test_presets_resolve_with_overrides():
    kind, params = resolve("pubmed", n_docs=1000)
    assert kind == "text" and params["n_docs"] == 1000 and params["terms_per_doc"] == 55
    kind, params = resolve("mq2007", n_queries=10)
    assert "n_docs" not in params and "max_docs_per_query" not in params and params["n_queries"] == 10
    assert round(params["docs_per_query"]) == 41
    kind, params = resolve(None, "ltr", n_queries=5)
    assert params["n_features"] == 46
    with pytest.raises(InputError, match="unknown preset 'reu-1k'"):
        resolve("reu-1k")
    with pytest.raises(InputError, match="--n-queries does not apply to a text corpus"):
        resolve("demo", n_queries=4)
    with pytest.raises(InputError, match="give --preset NAME"):
        resolve(None, n_docs=5)
    for name, preset in PRESETS.items():
        assert preset["kind"] in ("text", "ltr") and preset["description"] and preset["source"], name
