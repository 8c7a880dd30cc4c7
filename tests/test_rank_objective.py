"""RankSVM objective on the CPU twin against brute-force pair enumeration (float64), TRON against
scipy's L-BFGS on the same f, and the input checks of gputext.rank.data."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from gputext.errors import InputError
from gputext.kernels import ranksvm as K
from gputext.rank.data import count_pairs, group_by_query, prepare
from gputext.rank.objective import RankObjective
from gputext.backend import resolve
from gputext.rank.geometry import split_queries
from gputext.rank.ops import make_ops
from gputext.rank.tron import tron
from test_rank_reference import as_csr, brute_force, pair_list, pairwise_fun_grad, random_problem

THREE_BLOCKS = 3  # query blocks of the tests below: several blocks even on tiny data


def inverse(perm):
    inv = np.empty_like(perm)
    inv[perm] = np.arange(len(perm))
    return inv


def check_against_brute_force(X, qid, rel, w, C, backend="cpu", geometry=None, seed=0, n_blocks=None):
    """n_blocks: about that many query blocks (split_queries) instead of the data's own (one on tiny data)."""
    data = prepare(X, qid, rel)
    ops = None
    if n_blocks is not None:
        ops = make_ops(data, resolve(backend), geometry, split_queries(data.starts, n_blocks))
    obj = RankObjective(data, C=C, backend=backend, geometry=geometry, ops=ops)
    v = np.random.default_rng(seed).normal(size=X.shape[1])
    ref = brute_force(X, qid, rel, w, C=C, v=v)
    f, g = obj.fun_grad(w)
    hv = obj.hess_vec(v)
    stats = obj.ops.statistics()
    inv = inverse(data.perm)
    assert data.n_pairs == ref["n_pairs"]
    np.testing.assert_array_equal(stats["beta_minus"][inv], ref["beta_minus"])
    np.testing.assert_array_equal(stats["beta_plus"][inv], ref["beta_plus"])
    scale = max(1.0, abs(ref["f"]))
    assert abs(f - ref["f"]) <= 1e-12 * scale
    np.testing.assert_allclose(g, ref["grad"], rtol=1e-11, atol=1e-11 * scale)
    np.testing.assert_allclose(hv, ref["hv"], rtol=1e-11, atol=1e-11 * np.abs(ref["hv"]).max())
    return data, obj, ref


@pytest.mark.parametrize("seed,n_levels,density", [(0, 2, 1.0), (1, 3, 1.0), (2, 5, 0.6), (3, 9, 1.0), (4, 17, 0.4),
                                                   (5, 4, 1.0)])
def test_cpu_twin_equals_brute_force_with_ties(seed, n_levels, density):
    # integer features and half-integer weights: exact scores, many ties in scores and labels,
    # pairs exactly on the margin boundary; shuffled qids, a one-document query, an all-equal query
    X, qid, rel, w = random_problem(seed, n_queries=7, max_docs=14, n_features=5, n_levels=n_levels, density=density)
    check_against_brute_force(X, qid, rel, w, C=0.37, seed=seed, n_blocks=THREE_BLOCKS)


def test_problem_really_has_ties_and_boundary_pairs():
    X, qid, rel, w = random_problem(3, n_queries=7, max_docs=14, n_features=5, n_levels=9)
    s = X.toarray().astype(np.float64) @ w
    I, J = pair_list(qid, rel)
    diff = s[I] - s[J]
    assert np.any(diff == 0) and np.any(diff == 1.0) and np.any(diff > 1) and np.any(diff < 0)


def test_many_levels_and_long_queries():
    # relevance with 40 distinct values (6 wavelet levels), queries up to 60 documents
    rng = np.random.default_rng(7)
    n = 150
    qid = rng.integers(0, 4, size=n)
    rel = rng.integers(0, 40, size=n).astype(np.float32)
    X = sp.csr_matrix(rng.integers(-2, 3, size=(n, 4)).astype(np.float32))
    w = np.array([0.5, -0.25, 1.0, 0.0])
    data, _, _ = check_against_brute_force(X, qid, rel, w, C=2.0)
    assert K.n_levels_for(len(data.levels)) == 6


def test_random_real_valued_problem():
    rng = np.random.default_rng(11)
    n, m = 120, 7
    X = as_csr(rng.normal(size=(n, m)).astype(np.float32), stored_zeros=True)
    qid = np.repeat(np.arange(10), 12)
    rel = rng.integers(0, 4, size=n)
    w = rng.normal(size=m) * 0.3
    check_against_brute_force(X, qid, rel, w, C=1.5)


def test_objective_at_zero_counts_every_pair():
    X, qid, rel, _ = random_problem(9, n_queries=5)
    data = prepare(X, qid, rel)
    obj = RankObjective(data, C=2.0, backend="cpu")
    assert obj.fun(np.zeros(X.shape[1])) == pytest.approx(2.0 * data.n_pairs, rel=1e-15)


def test_rejected_trial_keeps_current_structure():
    X, qid, rel, w = random_problem(4, n_queries=6, n_levels=4)
    data = prepare(X, qid, rel)
    obj = RankObjective(data, C=1.0, backend="cpu")
    obj.fun(w)
    obj.accept()
    g0 = obj.grad()
    v = np.ones(X.shape[1])
    hv0 = obj.hess_vec(v)
    obj.fun(-3 * w + 1)  # a trial that TRON rejects: no accept()
    np.testing.assert_array_equal(obj.grad(), g0)
    np.testing.assert_array_equal(obj.hess_vec(v), hv0)


def test_deterministic_repeat():
    X, qid, rel, w = random_problem(5, n_queries=8, n_levels=5, density=0.7)
    data = prepare(X, qid, rel)
    a = RankObjective(data, C=1.0, backend="cpu").fun_grad(w)
    b = RankObjective(data, C=1.0, backend="cpu").fun_grad(w)
    assert a[0] == b[0] and np.array_equal(a[1], b[1])


@pytest.mark.parametrize("density", [1.0, 0.5])
def test_tron_reaches_lbfgs_objective(density):
    rng = np.random.default_rng(3)
    n_q, per, m = 25, 16, 8
    n = n_q * per
    Xd = rng.normal(size=(n, m)).astype(np.float32)
    if density < 1:
        Xd[rng.random(Xd.shape) > density] = 0
    hidden = rng.normal(size=m)
    rel = np.digitize(Xd @ hidden + rng.normal(size=n), [-1, 0.5, 1.5]).astype(np.float32)
    qid = np.repeat(rng.permutation(n_q), per)
    X = as_csr(Xd, stored_zeros=density >= 1)
    C = 0.5
    data = prepare(X, qid, rel)
    result = tron(RankObjective(data, C=C, backend="cpu"), m, eps=1e-5)
    assert result.converged and result.grad_norm <= 1e-5 * result.grad_norm0
    fun_grad = pairwise_fun_grad(X, qid, rel, C)
    ref = minimize(fun_grad, np.zeros(m), jac=True, method="L-BFGS-B",
                   options=dict(maxiter=20000, ftol=1e-16, gtol=1e-12, maxcor=30))
    f_ours = fun_grad(result.w)[0]  # our w, evaluated by the independent definition
    assert f_ours == pytest.approx(result.f, rel=1e-12)
    assert abs(f_ours - ref.fun) <= 1e-6 * abs(ref.fun)
    # history: f decreases monotonically over accepted steps
    fs = [h["f"] for h in result.history]
    assert all(b <= a for a, b in zip(fs, fs[1:]))


def test_tron_callback_and_zero_gradient():
    X, qid, rel, _ = random_problem(1, n_queries=5)
    seen = []
    data = prepare(X, qid, rel)
    tron(RankObjective(data, 1.0, "cpu"), X.shape[1], eps=1e-3, callback=seen.append)
    assert seen[0]["iteration"] == 0 and all({"f", "grad_norm", "cg", "accepted"} <= set(s) for s in seen)
    # all features zero: gradient 0 at w = 0, nothing to do
    Z = sp.csr_matrix((len(qid), 3), dtype=np.float32)
    result = tron(RankObjective(prepare(Z, qid, rel), 1.0, "cpu"), 3)
    assert result.iterations == 0 and np.all(result.w == 0) and result.converged


def test_grouping_is_stable_and_counts_pairs():
    qid = np.array([5, 3, 5, 3, 9, 5])
    perm, starts, ids = group_by_query(qid)
    assert perm.tolist() == [1, 3, 0, 2, 5, 4] and starts.tolist() == [0, 2, 5, 6] and ids.tolist() == [3, 5, 9]
    # query 3: labels 1,1 -> 0 pairs; query 5: 2,0,2 -> 2 pairs; query 9: one document
    assert count_pairs(starts, np.array([1, 1, 2, 0, 2, 0], np.int32)) == 2


@pytest.mark.parametrize("mutate,message", [
    (lambda X, q, r: (X, q, np.where(np.arange(len(r)) == 3, np.nan, r)), "NaN"),
    (lambda X, q, r: (X, q, np.ones_like(r)), "no preference pairs"),
    (lambda X, q, r: (X, q[:-1], r), "length n_docs"),
    (lambda X, q, r: (sp.csr_matrix((X.shape[0], 0), dtype=np.float32), q, r), "zero features"),
])
def test_prepare_refuses_bad_input(mutate, message):
    X, qid, rel, _ = random_problem(2, n_queries=5)
    with pytest.raises(InputError, match=message):
        prepare(*mutate(X, qid, rel))


def test_prepare_refuses_nan_features():
    X, qid, rel, _ = random_problem(2, n_queries=5)
    X = X.copy()
    X.data[0] = np.nan
    with pytest.raises(InputError, match="NaN or infinite feature"):
        prepare(X, qid, rel)


def test_single_document_queries_are_fine():
    # every query but one has a single document: only that query has pairs
    X = sp.csr_matrix(np.array([[1.0], [2.0], [3.0], [0.5], [0.0]], np.float32))
    qid = np.array([1, 2, 3, 4, 4])
    rel = np.array([0, 1, 2, 1, 0])
    data, _, ref = check_against_brute_force(X, qid, rel, np.array([0.5]), C=1.0)
    assert data.n_pairs == 1 and ref["n_pairs"] == 1


def check_block_sums_do_not_depend_on_the_cut(backend="cpu", geometry=None, n_queries=60, max_docs=25, dense=False,
                                              cuts=(2, 3, 7)):
    """The loss, X^T z and X^T u per query block are the same numbers whether a block is computed
    with the whole training set or inside a part made of whole blocks (what a Dask worker holds),
    so the block-order sums, and TRON, are bit-identical for any number of parts."""
    from gputext.distributed.rank import part_of
    rng = np.random.default_rng(21)
    sizes = rng.integers(1, max_docs, n_queries)
    qid = np.repeat(np.arange(n_queries), sizes)
    n = qid.size
    X = rng.normal(size=(n, 6)).astype(np.float32)
    if dense:
        X = as_csr(X, stored_zeros=True)
    else:  # sparse, but the first two queries' rows full: a part of them alone would look dense
        X = sp.csr_matrix(np.where((rng.random((n, 6)) < 0.5) | (np.arange(n) < sizes[:2].sum())[:, None], X, 0))
    data = prepare(X, qid, rng.integers(0, 5, n).astype(np.float64))
    w, v = rng.normal(size=6), rng.normal(size=6)
    blocks = split_queries(data.starts, max(cuts))
    whole = make_ops(data, resolve(backend), geometry, blocks)
    want = (whole.evaluate_blocks(w), (whole.accept(), whole.xt_z_blocks())[1], whole.xt_hess_blocks(v))
    for n_parts in cuts:
        cut = split_queries(data.starts[blocks], n_parts)
        got = [[], [], []]
        for p in range(len(cut) - 1):
            lo, hi = blocks[cut[p]], blocks[cut[p + 1]]
            ops = make_ops(part_of(data, lo, hi), resolve(backend), geometry, blocks[cut[p]:cut[p + 1] + 1] - lo,
                           data.is_dense)  # as gputext.distributed.rank does
            assert (ops.is_dense == data.is_dense) and ((ops.dense is not None) if backend == "cpu" else ops.dense) == dense
            got[0].append(ops.evaluate_blocks(w))
            ops.accept()
            got[1].append(ops.xt_z_blocks())
            got[2].append(ops.xt_hess_blocks(v))
        for a, b in zip(want, got):
            assert np.array_equal(a, np.concatenate(b)), n_parts
    assert whole.evaluate(w) == values_added_in_order(want[0])
    assert np.array_equal(whole.xt_z(), rows_added_in_order(want[1]))


@pytest.mark.parametrize("dense", [False, True])
def test_query_block_sums_do_not_depend_on_the_cut(dense):
    check_block_sums_do_not_depend_on_the_cut(dense=dense)


def values_added_in_order(values):
    total = 0.0
    for x in values:
        total += x
    return total


def rows_added_in_order(partial):
    out = np.zeros(partial.shape[1])
    for row in partial:
        out = out + row
    return out
