"""Multi-label metrics against hand-computed examples (worked out in the comments) and scikit-learn."""
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.knn.multilabel import (codes_to_indicator, f1_scores, multilabel_report, rank_labels,
                                    ranking_metrics, single_label_f1)

# doc A: scores (.9 .5 .1), true {1, 2}: ranks 1 2 3 -> top label 0 wrong (one-error 1); coverage 3-1 = 2;
#        pairs (1,0), (2,0) both misordered -> ranking loss 2/2 = 1; AP = (1/2 + 2/3) / 2 = 7/12
# doc B: scores (.2 .2 .7), true {0}: tie 0/1 -> 0 first: ranks 2 3 1 -> one-error 1; coverage 1;
#        pairs (0,1) fine, (0,2) misordered -> 1/2; AP = 1/2
# doc C: scores (.3 .8 .1), true {1}: everything perfect -> 0, 0, 0, AP 1
# doc D: no true label -> skipped
SCORES = np.array([[0.9, 0.5, 0.1], [0.2, 0.2, 0.7], [0.3, 0.8, 0.1], [0.5, 0.1, 0.2]])
TRUE = np.array([[0, 1, 1], [1, 0, 0], [0, 1, 0], [0, 0, 0]], bool)


def test_ranks_break_ties_by_lower_label():
    np.testing.assert_array_equal(rank_labels(SCORES[:2]), [[1, 2, 3], [2, 3, 1]])


def test_ranking_metrics_hand_computed():
    m = ranking_metrics(SCORES, sp.csr_matrix(TRUE))
    assert m["documents"] == 3
    assert m["one_error"] == pytest.approx(2 / 3)
    assert m["coverage"] == pytest.approx(1.0)
    assert m["ranking_loss"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["average_precision"] == pytest.approx((7 / 12 + 0.5 + 1) / 3)


def test_f1_hand_computed():
    # label 0: tp 1, fn 1; label 1: tp 1, fn 1; label 2: fp 1 -> micro 2*2/(4+1+2) = 4/7;
    # macro (2/3 + 2/3 + 0) / 3 = 4/9
    T = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 0]], bool)
    P = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0]], bool)
    micro, macro = f1_scores(T, P)
    assert micro == pytest.approx(4 / 7)
    assert macro == pytest.approx(4 / 9)


def test_report_combines_both():
    P = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]], bool)
    r = multilabel_report(SCORES, TRUE, P)
    assert r["one_error"] == pytest.approx(2 / 3)
    # over A, B, C (D skipped): label 0 fp 1 fn 1; label 1 tp 1 fn 1; label 2 fp 1 fn 1
    # -> micro 2*1/(2+2+3) = 2/7, macro (0 + 2/3 + 0) / 3 = 2/9
    assert (r["micro_f1"], r["macro_f1"]) == pytest.approx((2 / 7, 2 / 9))


def test_f1_matches_scikit_learn_on_random_sets():
    from sklearn.metrics import f1_score
    rng = np.random.default_rng(0)
    T = rng.random((50, 6)) < 0.3
    P = rng.random((50, 6)) < 0.3
    P[:, 5] = T[:, 5] = False  # a label in neither: skipped by the macro average
    used = [0, 1, 2, 3, 4]
    micro, macro = f1_scores(T, P)
    assert micro == pytest.approx(f1_score(T, P, average="micro"))
    assert macro == pytest.approx(f1_score(T[:, used], P[:, used], average="macro"))


def test_single_label_f1_matches_scikit_learn():
    from sklearn.metrics import f1_score
    rng = np.random.default_rng(1)
    y = rng.integers(0, 5, 80)
    p = np.where(rng.random(80) < 0.7, y, rng.integers(0, 6, 80))
    y[3] = -1  # unlabelled: skipped
    micro, macro = single_label_f1(y, p, 5)
    keep = y >= 0
    assert micro == pytest.approx(f1_score(y[keep], p[keep], average="micro"))
    assert macro == pytest.approx(f1_score(y[keep], p[keep], average="macro"))
    assert micro == pytest.approx(np.mean(y[keep] == p[keep]))


def test_codes_to_indicator():
    Y = codes_to_indicator(np.array([2, -1, 0]), 3).toarray()
    np.testing.assert_array_equal(Y, [[0, 0, 1], [0, 0, 0], [1, 0, 0]])
