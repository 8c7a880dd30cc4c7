"""Ranking metrics against hand-computed examples, brute-force pair counting and scikit-learn."""
from __future__ import annotations

import math

import numpy as np
import pytest

from gputext.errors import InputError
from gputext.rank.metrics import gain_values, pairwise_accuracy, ranking_metrics
from test_rank_reference import pair_list


def test_pairwise_accuracy_by_hand():
    # query 7: rel [2, 1, 0, 1], scores [3, 1, 2, 1]: pairs (0,1) (0,2) (0,3) right, (1,2) (3,2) wrong;
    # query 8: rel [1, 0] with equal scores: a tie counts as wrong. 3 of 6.
    qid = np.array([7, 7, 7, 7, 8, 8])
    rel = np.array([2, 1, 0, 1, 1, 0])
    scores = np.array([3, 1, 2, 1, 5, 5], dtype=float)
    acc, correct, pairs = pairwise_accuracy(scores, qid, rel)
    assert (correct, pairs) == (3, 6) and acc == 0.5


def test_pairwise_accuracy_against_enumeration():
    rng = np.random.default_rng(0)
    n = 300
    qid = rng.integers(0, 12, size=n)
    rel = rng.integers(0, 6, size=n).astype(float)
    scores = np.round(rng.normal(size=n), 1)  # many ties
    I, J = pair_list(qid, rel)
    acc, correct, pairs = pairwise_accuracy(scores, qid, rel)
    assert pairs == len(I) and correct == int(np.sum(scores[I] > scores[J]))


def test_ndcg_and_map_by_hand():
    # one query, rel [3, 2, 0, 1], scores order: doc1 (rel 2), doc2 (0), doc3 (1), doc0 (3)
    qid = np.zeros(4, int)
    rel = np.array([3, 2, 0, 1])
    scores = np.array([0.1, 0.4, 0.3, 0.2])
    m = ranking_metrics(scores, qid, rel)
    dcg4 = 3 / math.log2(2) + 0 / math.log2(3) + 1 / math.log2(4) + 7 / math.log2(5)
    idcg4 = 7 / math.log2(2) + 3 / math.log2(3) + 1 / math.log2(4)
    assert m["ndcg@1"] == pytest.approx(3 / 7, rel=1e-12)
    assert m["ndcg@5"] == pytest.approx(dcg4 / idcg4, rel=1e-12)
    assert m["ndcg@10"] == pytest.approx(dcg4 / idcg4, rel=1e-12)  # fewer than 10 documents: all of them
    assert m["map"] == pytest.approx((1 / 1 + 2 / 3 + 3 / 4) / 3, rel=1e-12)
    assert m["pairwise_accuracy"] == pytest.approx(2 / 6)  # 6 pairs; right: (1,2) and (3,2)
    assert m["gain"] == "exp" and m["queries"] == 1 and m["documents"] == 4


def test_ties_in_score_follow_file_order_and_empty_queries_score_zero():
    # query 1: equal scores, the irrelevant document comes first in the file -> NDCG@1 = 0, AP = 1/2
    # query 2: no relevant document -> NDCG = AP = 0
    qid = np.array([1, 1, 2, 2])
    rel = np.array([0, 2, 0, 0])
    scores = np.array([1.0, 1.0, 0.5, 0.2])
    m = ranking_metrics(scores, qid, rel)
    assert m["ndcg@1"] == 0.0
    assert m["map"] == pytest.approx((0.5 + 0.0) / 2)
    assert m["queries_without_relevant"] == 1


def test_ndcg_matches_scikit_learn_without_ties():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(2)
    n_q, per = 9, 15
    rel = rng.integers(0, 5, size=(n_q, per))
    rel[:, 0] = 1  # every query has a relevant document
    scores = rng.normal(size=(n_q, per))
    m = ranking_metrics(scores.ravel(), np.repeat(np.arange(n_q), per), rel.ravel())
    for k in (1, 5, 10):
        ref = sklearn_metrics.ndcg_score(2.0 ** rel - 1, scores, k=k)
        assert m[f"ndcg@{k}"] == pytest.approx(ref, rel=1e-12)


def test_gain_choice():
    assert gain_values(np.array([0, 1, 31]))[1] == "exp"
    g, kind = gain_values(np.array([0, 40.0]))
    assert kind == "linear" and g.tolist() == [0, 40]
    with pytest.raises(InputError, match=">= 0"):
        gain_values(np.array([-1.0, 1.0]))
