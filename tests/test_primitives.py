"""kernels/primitives.py and kernels/select.py on their own: each CPU compilation against a NumPy
reference on random inputs and corner cases (empty slots, ties, one element), and the device
compilations in the CUDA simulator with tiny blocks (a few threads, so the simulator pass stays
cheap)."""
import numba
import numpy as np
import pytest
from numba import cuda

from gputext.kernels import primitives as P
from gputext.kernels import select as S


def _ref_best_first(keys, ids):
    """(key desc, id asc), id < 0 last: the tie rule of every selection."""
    order = sorted(range(len(keys)), key=lambda i: (ids[i] < 0, -keys[i] if ids[i] >= 0 else 0, ids[i]))
    return keys[order], ids[order]


@numba.njit
def _sort_best_first(keys, ids):
    P.sort_pairs_best_first_cpu(keys, ids, 0, keys.shape[0], 0, 1)


@numba.njit
def _sort_ascending(keys, ids, base, n):
    P.sort_pairs_ascending_cpu(keys, ids, base, n, 0, 1)


@numba.njit
def _sort_keys(keys, descending):
    if descending:
        P.sort_keys_descending_cpu(keys, 0, keys.shape[0], 0, 1)
    else:
        P.sort_keys_ascending_cpu(keys, 0, keys.shape[0], 0, 1)


@numba.njit
def _searches(values, x):
    return P.lower_bound_cpu(values, 0, values.shape[0], x), P.last_le_cpu(values, 0, values.shape[0], x)


@numba.njit
def _offer_all(keys_in, docs_in, k, larger):
    keys = np.full(k, -np.inf)
    docs = np.full(k, -1, np.int64)
    filled = 0
    for i in range(keys_in.shape[0]):
        filled = S.offer_cpu(keys_in[i], docs_in[i], keys, docs, filled, k, larger)
    return keys, docs, filled


@pytest.mark.parametrize("n", [1, 2, 8, 64])
def test_sort_pairs_best_first_matches_reference(n):
    rng = np.random.default_rng(n)
    keys = rng.integers(0, 4, n).astype(np.float64)  # many ties
    ids = rng.permutation(n).astype(np.int32)
    ids[rng.random(n) < 0.2] = -1  # empty slots sort last
    want_k, want_i = _ref_best_first(keys.copy(), ids.copy())
    got_k, got_i = keys.copy(), ids.copy()
    _sort_best_first(got_k, got_i)
    assert np.array_equal(got_i, want_i)
    valid = want_i >= 0
    assert np.array_equal(got_k[valid], want_k[valid])


def test_sort_pairs_ascending_sorts_a_window_by_key_then_id():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 5, 40).astype(np.float64)
    ids = rng.permutation(40).astype(np.int32)
    k2, i2 = keys.copy(), ids.copy()
    _sort_ascending(k2, i2, 4, 32)
    order = np.lexsort((ids[4:36], keys[4:36]))
    assert np.array_equal(i2[4:36], ids[4:36][order]) and np.array_equal(k2[4:36], keys[4:36][order])
    assert np.array_equal(k2[:4], keys[:4]) and np.array_equal(k2[36:], keys[36:])  # outside the window untouched


@numba.njit
def _sort_scored(keys, ids, larger):
    P.sort_pairs_scored_cpu(keys, ids, 0, keys.shape[0], 0, 1, larger)


@pytest.mark.parametrize("larger", [True, False])
def test_sort_pairs_scored_orders_by_score_then_index(larger):
    rng = np.random.default_rng(9)
    keys = rng.integers(0, 4, 32).astype(np.float64)
    ids = rng.permutation(32).astype(np.int32)
    got_k, got_i = keys.copy(), ids.copy()
    _sort_scored(got_k, got_i, larger)
    order = np.lexsort((ids, -keys if larger else keys))
    assert np.array_equal(got_i, ids[order]) and np.array_equal(got_k, keys[order])


@pytest.mark.parametrize("descending", [True, False])
def test_sort_keys(descending):
    keys = np.random.default_rng(5).standard_normal(32)
    got = keys.copy()
    _sort_keys(got, descending)
    assert np.array_equal(got, np.sort(keys)[::-1] if descending else np.sort(keys))


def test_searches_match_numpy():
    rng = np.random.default_rng(7)
    values = np.sort(rng.integers(0, 20, 50))
    for x in range(-1, 22):
        lb, le = _searches(values, x)
        assert lb == np.searchsorted(values, x, side="left")
        if x >= values[0]:
            assert le == np.searchsorted(values, x, side="right") - 1


def test_comparators():
    assert P.better_cpu(2.0, 5, 1.0, 0) and not P.better_cpu(1.0, 0, 2.0, 5)
    assert P.better_cpu(1.0, 3, 1.0, 4) and not P.better_cpu(1.0, 4, 1.0, 3)
    assert not P.better_cpu(9.0, -1, 0.0, 1) and P.better_cpu(-np.inf, 0, 9.0, -1)
    assert P.ascending_cpu(1.0, 9, 2.0, 0) and P.ascending_cpu(1.0, 1, 1.0, 2)
    assert P.before_cpu(1.0, 5, 2.0, 0, False) and P.before_cpu(2.0, 5, 1.0, 0, True) and P.before_cpu(1.0, 1, 1.0, 2, True)


def test_ordered_bits_orders_like_the_floats():
    x = np.array([-np.inf, -3.5, -0.0, 0.0, 1e-30, 2.0, np.inf], np.float32)
    o = np.array([P.ordered_bits_cpu(b) for b in x.view(np.uint32)])
    assert np.all(np.diff(o) >= 0) and o[2] + 1 == o[3]


@pytest.mark.parametrize("k", [1, 3, 10, 15])
@pytest.mark.parametrize("larger", [True, False])
def test_offer_keeps_the_best_k_in_any_order(k, larger):
    rng = np.random.default_rng(k)
    keys = rng.integers(0, 3, 12).astype(np.float64)
    docs = np.arange(12)
    want = np.lexsort((docs, -keys if larger else keys))[:k]
    for perm in (np.arange(12), rng.permutation(12)):
        got_k, got_d, filled = _offer_all(keys[perm], docs[perm], k, larger)
        assert filled == min(k, 12) and np.array_equal(got_d[:filled], docs[want]) and np.array_equal(got_k[:filled], keys[want])


def test_block_collectives_of_one_thread():
    """The CPU compilations run a collective as a block of one thread."""
    @numba.njit
    def run():
        buf = np.array([5], np.int32)
        total = P.block_exclusive_scan_cpu(buf, 0, 1)
        inc = np.zeros(1)
        m, t = P.block_inclusive_scan_cpu(inc, 2.5, 0, 1)
        s = np.zeros(1)
        P.block_tree_sum_cpu(s, 4.0, 0, 0, 1)
        return total, buf[0], m, t, s[0]
    assert run() == (5, 0, 2.5, 2.5, 4.0)


# ----------------------------------------------------------------------------- the device compilations (simulator)

@pytest.mark.cudasim
def test_block_collectives_in_the_simulator():
    T = 8

    @cuda.jit
    def kernel(vals, fvals, keys, ids, skeys, out_excl, out_incl, out_tot, out_sum, out_s2):
        flags = cuda.shared.array(T, numba.int32)
        buf = cuda.shared.array(T, numba.float64)
        buf2 = cuda.shared.array(T, numba.float64)
        sk = cuda.shared.array(2 * T, numba.float64)
        si = cuda.shared.array(2 * T, numba.int32)
        tid = cuda.threadIdx.x
        flags[tid] = vals[tid]
        for j in range(tid, 2 * T, T):
            sk[j] = keys[j]
            si[j] = ids[j]
        total = P.block_exclusive_scan_dev(flags, tid, T)
        out_excl[tid] = flags[tid]
        out_tot[0] = total
        m, t = P.block_inclusive_scan_dev(buf, fvals[tid], tid, T)
        out_incl[tid] = m
        m0, t0, m1, t1 = P.block_inclusive_scan2_dev(buf, buf2, fvals[tid], 2.0 * fvals[tid], tid, T)
        out_s2[0, tid] = m0
        out_s2[1, tid] = m1
        P.block_tree_sum_dev(buf, fvals[tid], tid, tid % 4, 4)  # two groups of four
        if tid % 4 == 0:
            out_sum[tid // 4] = buf[tid]
        P.sort_pairs_best_first_dev(sk, si, 0, 2 * T, tid, T)
        for j in range(tid, 2 * T, T):
            keys[j] = sk[j]
            ids[j] = si[j]
        P.sort_keys_descending_dev(skeys, 0, 2 * T, tid, T)

    rng = np.random.default_rng(11)
    vals = rng.integers(0, 3, T).astype(np.int32)
    fvals = rng.integers(0, 5, T).astype(np.float64)
    keys = rng.integers(0, 3, 2 * T).astype(np.float64)
    ids = rng.permutation(2 * T).astype(np.int32)
    ids[3] = -1
    skeys = rng.standard_normal(2 * T)
    want_k, want_i = _ref_best_first(keys.copy(), ids.copy())
    want_s = np.sort(skeys)[::-1]
    out_excl = np.zeros(T, np.int32)
    out_incl = np.zeros(T)
    out_tot = np.zeros(1, np.int64)
    out_sum = np.zeros(2)
    out_s2 = np.zeros((2, T))
    kernel[1, T](vals, fvals, keys, ids, skeys, out_excl, out_incl, out_tot, out_sum, out_s2)
    assert np.array_equal(out_excl, np.cumsum(vals) - vals) and out_tot[0] == vals.sum()
    assert np.array_equal(out_incl, np.cumsum(fvals))
    assert np.array_equal(out_s2[0], np.cumsum(fvals)) and np.array_equal(out_s2[1], np.cumsum(2 * fvals))
    assert np.array_equal(out_sum, [fvals[:4].sum(), fvals[4:].sum()])
    assert np.array_equal(ids, want_i) and np.array_equal(keys[ids >= 0], want_k[want_i >= 0])
    assert np.array_equal(skeys, want_s)
