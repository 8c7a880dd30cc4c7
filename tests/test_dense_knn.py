"""Dense kNN (gputext.knn.dense, gputext.kernels.dense_knn) against an independent float64 reference.

Exact-equality tests use values that are small multiples of 1/4, so every float64 sum is exact in
any order and the reference (numpy, float64, then float32 rounding, ties -> lower index) must be
matched bit for bit, ties included. Random-float tests compare within float32 rounding.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.errors import InputError
from gputext.knn.dense import DenseGeometry, DenseIndex, dense_fits, search_dense

METRICS = ["cosine", "dot", "l2", "l1"]


def reference(X, Q, k, metric, self_doc=None):
    """float64 brute force: (indices, float32 scores) best first by the float64 score, equal
    float64 scores -> lower index (the engine's order)."""
    A = np.asarray(X, np.float64)
    B = np.asarray(Q, np.float64)
    if metric in ("dot", "cosine"):
        S = B @ A.T
        if metric == "cosine":
            na = np.sqrt((A * A).sum(1))
            nb = np.sqrt((B * B).sum(1))
            den = np.outer(nb, na)
            S = np.where(den > 0, S / np.where(den > 0, den, 1), 0.0)
    elif metric == "l2":
        S = np.sqrt(((B[:, None, :] - A[None]) ** 2).sum(-1))
    else:
        S = np.abs(B[:, None, :] - A[None]).sum(-1)
    S32 = S.astype(np.float32)
    larger = metric in ("dot", "cosine")
    n_q, n_docs = S.shape
    idx = np.full((n_q, k), -1, np.int32)
    sc = np.full((n_q, k), np.nan, np.float32)
    for i in range(n_q):
        docs = np.arange(n_docs)
        if self_doc is not None and self_doc[i] >= 0:
            docs = docs[docs != self_doc[i]]
        vals = S[i, docs]
        order = np.lexsort((docs, -vals if larger else vals))[:k]
        idx[i, :order.size] = docs[order]
        sc[i, :order.size] = S32[i, docs][order]
    return idx, sc


def quarter_data(n_docs, n_terms, n_queries, seed, density=0.35, signed=False):
    rng = np.random.default_rng(seed)
    low = -3 if signed else 0
    X = (rng.integers(low, 5, (n_docs, n_terms)) * (rng.random((n_docs, n_terms)) < density)).astype(np.float32) / 4
    Q = (rng.integers(low, 5, (n_queries, n_terms)) * (rng.random((n_queries, n_terms)) < density)).astype(np.float32) / 4
    X[3] = 0  # an all-zero document
    X[7] = X[5]  # a duplicate: ties broken by lower index
    if n_queries > 2:
        Q[2] = 0  # an all-zero query
    return X, Q


def assert_same(got, ref):
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("signed", [False, True])
def test_cpu_equals_reference_exactly(metric, signed):
    X, Q = quarter_data(60, 37, 9, seed=1, signed=signed)
    assert_same(search_dense(X, Q, 7, metric, device="cpu"), reference(X, Q, 7, metric))


@pytest.mark.parametrize("metric", METRICS)
def test_cpu_random_floats_within_rounding(metric):
    rng = np.random.default_rng(5)
    X = sp.random(80, 50, density=0.2, random_state=rng, format="csr", dtype=np.float32)
    Q = sp.random(6, 50, density=0.3, random_state=rng, format="csr", dtype=np.float32)
    idx, sc = search_dense(X, Q, 10, metric, device="cpu")
    ridx, rsc = reference(X.toarray(), Q.toarray(), 10, metric)
    np.testing.assert_allclose(sc, rsc, rtol=2e-6, atol=1e-6)
    # indices agree except where the reference itself has (near-)equal scores
    for i in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            if idx[i, j] != ridx[i, j]:
                assert np.isclose(rsc[i], rsc[i, j], rtol=1e-6).sum() > 1


def test_exclude_self_and_k_larger_than_corpus():
    X, _ = quarter_data(12, 10, 1, seed=2)
    idx, sc = search_dense(X, X, 15, "cosine", device="cpu", exclude_self=True)
    ref = reference(X, X, 15, "cosine", self_doc=np.arange(12))
    assert_same((idx, sc), ref)
    assert (idx[:, 11:] == -1).all() and np.isnan(sc[:, 11:]).all()
    assert all(i not in row for i, row in enumerate(idx))


def test_exclude_self_array():
    X, Q = quarter_data(20, 10, 4, seed=3)
    leave = np.array([5, -1, 0, 19])
    assert_same(search_dense(X, Q, 6, "l1", device="cpu", exclude_self=leave),
                reference(X, Q, 6, "l1", self_doc=leave))


def test_one_document_and_sparse_input():
    X = sp.csr_matrix(np.array([[0.5, 0, 0.25]], np.float32))
    idx, sc = search_dense(X, sp.csr_matrix(np.array([[1, 0, 0]], np.float32)), 3, "dot", device="cpu")
    assert idx.tolist() == [[0, -1, -1]] and sc[0, 0] == np.float32(0.5) and np.isnan(sc[0, 1:]).all()


def test_bad_input_is_one_clear_error():
    X = np.ones((4, 3), np.float32)
    with pytest.raises(InputError, match="terms"):
        search_dense(X, np.ones((2, 5), np.float32), 2, device="cpu")
    with pytest.raises(InputError, match="unknown metric"):
        search_dense(X, X, 2, "hamming", device="cpu")
    with pytest.raises(InputError, match="k must be a positive integer"):
        search_dense(X, X, 0, device="cpu")
    with pytest.raises(InputError, match="NaN"):
        search_dense(np.full((2, 2), np.nan, np.float32), X[:, :2], 1, device="cpu")
    with pytest.raises(InputError, match="exclude_self"):
        search_dense(X, X[:2], 1, device="cpu", exclude_self=True)


def test_dense_fits_decisions():
    ok, why = dense_fits(1080, 856, 10 << 30, nnz=7233)  # CNAE-9
    assert ok and why.startswith("dense")
    ok, why = dense_fits(11293, 60000, 80 << 30, nnz=11293 * 120)  # 20NG: big and very sparse
    assert not ok and "density" in why
    ok, why = dense_fits(10**6, 10**5, 8 << 30, nnz=10**9)  # does not fit
    assert not ok and "does not fit" in why
    assert not dense_fits(1080, 856, None, nnz=7233)[0]  # CPU: the inverted index does less work
    assert dense_fits(1000, 100, None, nnz=50000)[0]  # CPU, half full


# ----------------------------------------------------------------------------- kernels vs twins

from gputext.kernels import dense_knn as kd  # noqa: E402


def _keys_inputs(X, Q):
    dd = np.empty(X.shape[0]); kd.canonical_sumsq_cpu(X, dd)
    qq = np.empty(Q.shape[0]); kd.canonical_sumsq_cpu(Q, qq)
    rd = np.where(dd > 0, 1 / np.sqrt(np.where(dd > 0, dd, 1)), 0).astype(np.float32)
    rq = np.where(qq > 0, 1 / np.sqrt(np.where(qq > 0, qq, 1)), 0).astype(np.float32)
    return dd, qq, rd, rq, (dd / 2).astype(np.float32)


def _select_twin(keys, rows, kprime, n_slices, self_doc):
    n = rows.size
    ci = np.empty((n, n_slices * kprime), np.int32); ck = np.empty((n, n_slices * kprime), np.uint32)
    cc = np.empty((n, n_slices), np.int32); cp = np.empty((n, n_slices), np.int32); ct = np.empty((n, n_slices), np.int64)
    kd.select_candidates_cpu(keys.view(np.uint32), rows, kprime, n_slices, self_doc, ci, ck, cc, cp, ct)
    return ci, ck, cc, cp, ct


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("n_slices", [1, 3])
def test_select_finish_twins_give_reference(metric, n_slices):
    """The CPU twins of the candidate pipeline, fed exact keys, reproduce the reference."""
    X, Q = quarter_data(70, 23, 5, seed=4)
    code = kd.METRIC_CODE[metric]
    dd, qq, rd, rq, half = _keys_inputs(X, Q)
    keys = np.empty((5, 70), np.float32)
    kd.approx_keys_cpu(X, Q, 5, rq, rd, half, code, keys)
    rows = np.arange(5, dtype=np.int32)
    kprime = 9
    self_doc = np.array([-1, 4, -1, 0, 69], np.int64)
    ci, ck, cc, cp, ct = _select_twin(keys, rows, kprime, n_slices, self_doc)
    res = np.empty((5, 2 * 6 + kd.RES_EXTRA)); fi = np.empty((5, kprime), np.int32)
    kd.finish_cpu(X, Q, rows, ci, ck, cc, cp, ct, kprime, qq, dd, code, 6, res, fi)
    got = res[:, :6].astype(np.int32), res[:, 6:12].astype(np.float32)
    # with exact keys (quarter data), the top kprime keys contain the top 6
    assert_same(got, reference(X, Q, 6, metric, self_doc=self_doc))
    per = -(-70 // n_slices)
    thr = kd.ordered_to_float32(ct)
    for r in range(5):
        cols = [j for j in range(70) if j != self_doc[r]]
        ordk = np.array([kd._ordered_cpu(b) for b in keys[r].view(np.uint32)])
        for s in range(n_slices):
            sc = [j for j in cols if s * per <= j < (s + 1) * per]
            assert thr[r, s] == np.sort(keys[r, sc])[-kprime]
            listed = ci[r, s * kprime:(s + 1) * kprime]
            assert list(listed) == sorted(listed) and cc[r, s] == kprime and cp[r, s] == 0
            np.testing.assert_array_equal(ck[r, s * kprime:(s + 1) * kprime], ordk[listed])
        # thr (the kprime-th key) bounds every left-out key; the final list is the top kprime by (key, -index)
        best = sorted(cols, key=lambda j: (-ordk[j], j))[:kprime]
        assert sorted(fi[r]) == sorted(best) and res[r, 12] == 0 and res[r, 14] == kprime
        assert res[r, 13] == ordk[best[-1]] >= max(ordk[j] for j in cols if j not in best)
        assert list(fi[r, :6]) == list(got[0][r])


def test_finish_twin_complete_lists_and_ties():
    """Slices with fewer documents than kprime are complete; equal keys go to the lower index."""
    keys = np.zeros((2, 12), np.float32)
    keys[0, [3, 7]] = 0.5
    keys[1] = 0.25  # all tied
    rows = np.arange(2, dtype=np.int32)
    self_doc = np.array([-1, 2], np.int64)
    ci, ck, cc, cp, ct = _select_twin(keys, rows, 3, 4, self_doc)  # 4 slices of 3: complete
    assert cp.all() and (ct == 0).all() and list(cc[1]) == [2, 3, 3, 3]
    ci, ck, cc, cp, ct = _select_twin(keys, rows, 4, 2, self_doc)  # 2 slices of 6
    assert list(ci[0, :4]) == [0, 1, 2, 3] and list(ci[0, 4:]) == [6, 7, 8, 9]
    assert list(ci[1, :4]) == [0, 1, 3, 4]


def test_ordered_keys_preserve_float_order():
    vals = np.array([-np.inf, -3.5, -1e-30, 0.0, 1e-30, 2.0, np.inf], np.float32)
    o = np.array([kd._ordered_cpu(b) for b in vals.view(np.uint32)])
    assert (np.diff(o) > 0).all()
    np.testing.assert_array_equal(kd.ordered_to_float32(o), vals)


SIM_GEOMETRY = DenseGeometry(matvec_threads=8, threads_per_row=4, queries_per_pass=2, unroll=2, matvec_blocks=2,
                             gemm_tile=(8, 8, 4, 2, 2), gemm_small_tile=(4, 8, 2, 2, 2), gemm_small_queries=4,
                             gemm_min_queries=4, select_threads=8, select_buffer=16,
                             select_blocks=4, max_slice_candidates=64, finish_threads=32, finish_unroll=2,
                             rescore_threads=32, max_candidates=32, extra_candidates=2, min_docs_per_slice=4,
                             key_backend="numba")


@pytest.mark.cudasim
@pytest.mark.parametrize("metric,n_queries", [("cosine", 3), ("l2", 3), ("dot", 5), ("l1", 5), ("cosine", 4)])
def test_cuda_path_equals_reference_in_simulator(metric, n_queries):
    """matvec (3 queries), GEMM (5 queries) and the small-batch GEMM tile (4 queries) paths, selection
    over slices, rescoring and sort."""
    X, Q = quarter_data(18, 9, n_queries, seed=6)
    index = DenseIndex(X, device="cuda", geometry=SIM_GEOMETRY)
    got = index.search(Q, 4, metric)
    assert index.last_run["kernel"] == ("matvec" if n_queries < 4 else "gemm")
    assert_same(got, reference(X, Q, 4, metric))


@pytest.mark.cudasim
def test_cuda_escalation_and_exact_fallback_in_simulator():
    """All-equal keys defeat the certificate: k' grows, then every document is scored exactly."""
    X = np.zeros((16, 6), np.float32)
    X[:, 0] = 0.5
    X[4, 1] = 0.25  # one better document
    Q = np.array([[1, 0, 0, 0, 0, 0]], np.float32)
    from dataclasses import replace
    index = DenseIndex(X, device="cuda", geometry=replace(SIM_GEOMETRY, max_candidates=8))
    got = index.search(Q, 3, "l2", exclude_self=np.array([0]))
    assert_same(got, reference(X, Q, 3, "l2", self_doc=np.array([0])))
    assert index.last_run["escalated"] >= 1 and index.last_run["fallback_exact"] == 1


@pytest.mark.cudasim
def test_keys_kernels_equal_twin_in_simulator():
    from numba import cuda
    X, Q = quarter_data(19, 13, 4, seed=7, signed=True)
    for code in range(4):
        dd, qq, rd, rq, half = _keys_inputs(X, Q)
        want = np.empty((4, 19), np.float32)
        kd.approx_keys_cpu(X, Q, 4, rq, rd, half, code, want)
        for kern, launch in ((kd.make_matvec_kernel(16, 4, 2, 2, code == 3), (2, 16)),
                             (kd.make_matvec_kernel(16, 4, 2, 2, code == 3, 3), (1, 16)),  # 3 rows per thread, ragged end
                             (kd.make_matvec_kernel(16, 4, 1, 3, code == 3, 2), (2, 16)),
                             (kd.make_matvec_kernel(16, 4, 1, 3, code == 3, 2, True), (2, 16)),  # warp sync
                             (kd.make_gemm_kernel(8, 8, 4, 2, 2, code == 3), kd.gemm_launch(8, 8, 2, 2, 4, 19)),
                             (kd.make_gemm_kernel(8, 8, 4, 4, 4, code == 3), kd.gemm_launch(8, 8, 4, 4, 4, 19)),  # vector layout
                             (kd.make_gemm_kernel(4, 8, 4, 2, 2, code == 3, False), kd.gemm_launch(4, 8, 2, 2, 4, 19)),  # one buffer
                             (kd.make_gemm_kernel(2, 8, 2, 2, 4, code == 3), kd.gemm_launch(2, 8, 2, 4, 4, 19)),  # 2 query tiles
                             # warps as 4 x 8 patches of a 16 x 8 thread grid (64 threads, 2 warps)
                             (kd.make_gemm_kernel(16, 16, 4, 2, 2, code == 3, True, 0, 4), kd.gemm_launch(16, 16, 2, 2, 4, 19))):
            got = cuda.device_array((4, 19), np.float32)
            kern[launch](X, Q, 4, rq, rd, half, code, got)
            np.testing.assert_allclose(got.copy_to_host(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.cudasim
def test_cuda_slices_and_zero_scores_in_simulator():
    """Several document slices per query, and a query whose k-th score is 0 (ties at zero are
    certified by index, not by the error bound)."""
    X, _ = quarter_data(40, 8, 1, seed=9, density=0.2)
    X[:, 7] = 0
    X[[10, 25, 36], 7] = 0.5  # only three documents share term 7 with the query
    Q = np.zeros((2, 8), np.float32)
    Q[0, 7] = 1.0
    Q[1] = X[20] + X[21]
    index = DenseIndex(X, "cuda", SIM_GEOMETRY)
    got = index.search(Q, 4, "cosine")
    assert_same(got, reference(X, Q, 4, "cosine"))
    assert got[1][0, 3] == 0 and got[0][0, 3] == 0  # the first zero-score document is the lowest index


def test_gemm_kernel_keeps_accumulators_in_registers_and_uses_vector_loads():
    """The default 128x128x16 GEMM: no local memory (spilled accumulators), the slice unrolled with
    128-bit shared loads (4 per term step, a few may split), one barrier per slice plus the prologue's,
    and the product loop free of numba's negative-index wraparound selects."""
    from gputext.kernels.jit import compile_ptx
    ptx = compile_ptx(kd.make_gemm_kernel(128, 128, 16, 8, 8, False), kd._KEYS_SIG, cc=(9, 0))
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert ptx.count("ld.shared.v4.f32") >= 60 and ptx.count("fma.rn.f32") >= 16 * 64
    assert ptx.count("bar.sync") == 2
    assert ptx.count("selp.b64") <= 2


@pytest.mark.cudasim
@pytest.mark.parametrize("buffer_size,kprime,n_slices", [(64, 5, 2), (8, 5, 2), (64, 12, 1), (64, 5, 4)])
def test_select_and_finish_kernels_equal_twins_in_simulator(buffer_size, kprime, n_slices):
    """Bit for bit: the bound-and-compact path (buffer 64), the overflow path that reads global memory
    (buffer 8), no bound (kprime 12 > 8 threads), complete slices (4 slices of 10 with kprime 5 ...);
    ties (duplicated keys), a left-out document, and the slice merge of the finish kernel."""
    from numba import cuda
    X, Q = quarter_data(37, 11, 3, seed=12, signed=True)
    X[20] = X[5]  # equal keys
    dd, qq, rd, rq, half = _keys_inputs(X, Q)
    keys = np.empty((3, 37), np.float32)
    kd.approx_keys_cpu(X, Q, 3, rq, rd, half, 0, keys)
    keys[2, 10:30] = 0.125  # many ties
    rows = np.array([2, 0], np.int32)
    self_doc = np.array([7, -1, 36], np.int64)
    want = _select_twin(keys, rows, kprime, n_slices, self_doc)
    got = [cuda.device_array(a.shape, a.dtype) for a in want]
    kd.make_select_kernel(8, buffer_size, 16)[(2, n_slices), 8](keys.view(np.uint32), rows, kprime, self_doc, *got)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g.copy_to_host(), w)
    k = 4
    res_w = np.empty((2, 2 * k + kd.RES_EXTRA)); fi_w = np.empty((2, kprime), np.int32)
    kd.finish_cpu(X, Q, rows, *want, kprime, qq, dd, 0, k, res_w, fi_w)
    res = cuda.device_array(res_w.shape, np.float64); fi = cuda.device_array(fi_w.shape, np.int32)
    kd.make_finish_kernel(32, buffer_size, 16, 2)[1, 32](X, Q, rows, *want, kprime, qq, dd, 0, k, res, fi)
    np.testing.assert_array_equal(res.copy_to_host(), res_w)
    np.testing.assert_array_equal(fi.copy_to_host(), fi_w)


@pytest.mark.cudasim
def test_cuda_index_reused_across_calls_in_simulator():
    """Cached device buffers, views and pinned staging: calls with other batch sizes, k, metrics
    and left-out documents still give the reference (no stale buffer is read)."""
    X, Q = quarter_data(26, 7, 6, seed=14)
    index = DenseIndex(X, "cuda", SIM_GEOMETRY)
    for rows, k, metric, leave in ((slice(0, 2), 3, "cosine", None), (slice(0, 6), 5, "l2", None),
                                   (slice(2, 4), 3, "cosine", np.array([1, -1])), (slice(0, 1), 6, "dot", None)):
        sd = leave if leave is not None else False
        got = index.search(Q[rows], k, metric, exclude_self=sd)
        assert_same(got, reference(X, Q[rows], k, metric, self_doc=leave))


# ----------------------------------------------------------------------------- host side of the CUDA path


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("signed", [False, True])
def test_compiled_certificate_equals_numpy_certificate(metric, signed):
    """certify_unpack_cpu (one compiled call per round) decides every row as _certified (NumPy)
    does, writes exactly the proved rows, and flags the zero-key rows the NumPy form settles by
    index; thresholds are placed right at the bound so both outcomes occur."""
    from gputext.knn.dense import _BoundInputs, _certified, _stats, _zero_rule

    rng = np.random.default_rng(21 + signed)
    X, Q = quarter_data(60, 33, 40, seed=22 + signed, signed=signed)
    code = kd.METRIC_CODE[metric]
    qq = np.empty(40); kd.canonical_sumsq_cpu(Q, qq)
    b = _BoundInputs(code, 34, Q, qq, _stats(X), 33)
    k, n = 3, 40
    rows = rng.permutation(n)[:30].astype(np.int32)
    res = np.zeros((30, 2 * k + kd.RES_EXTRA))
    res[:, :k] = rng.integers(0, 60, (30, k))
    s_k = rng.random(30) * (1 if code <= 1 else 4)
    s_k[::7] = 0.0
    res[:, 2 * k - 1] = s_k
    res[:, k:2 * k - 1] = s_k[:, None] + 0.25
    res[:, 2 * k] = (rng.random(30) < 0.2).astype(float)
    # thresholds around the value that makes s_k equal to the bound
    if code <= 1:
        t = s_k * (1 + rng.choice([-1, 1], 30) * 1e-6)
    elif code == 2:
        t = (qq[rows] - s_k ** 2) / 2 * (1 + rng.choice([-1, 1], 30) * 1e-5)
    else:
        t = -s_k * (1 + rng.choice([-1, 1], 30) * 1e-5)
    t[::9] = 0.0
    bits = t.astype(np.float32).view(np.uint32)
    res[:, 2 * k + 1] = [kd._ordered_cpu(u) for u in bits]
    cand = rng.integers(-1, 60, (30, k + 2)).astype(np.int32)
    self_doc = rng.integers(-1, 60, n)
    want_ok = _certified(code, b, rows, res[:, :k].astype(np.int32), res[:, k:2 * k], res[:, 2 * k] == 1.0,
                         res[:, 2 * k + 1].astype(np.int64), k, lambda: cand, 60, self_doc)
    out_idx = np.full((n, k), -7, np.int32)
    out_score = np.full((n, k), -7, np.float32)
    status = np.empty(30, np.int8)
    kd.certify_unpack_cpu(res, k, code, b.gamma, b.nonneg, b.nq, b.qq, b.docs.max_norm, b.docs.max_sq, b.tiny,
                          rows, out_idx, out_score, status)
    got_ok = status == 1
    zero = np.nonzero(status == 2)[0]
    got_ok[zero] = _zero_rule(rows, zero, res[:, k - 1].astype(np.int64), res[:, 2 * k - 1], cand, 60, self_doc)
    np.testing.assert_array_equal(got_ok, want_ok)
    assert 0 < want_ok.sum() < 30  # both outcomes exercised
    for r in range(30):
        if status[r] == 1:
            np.testing.assert_array_equal(out_idx[rows[r]], res[r, :k].astype(np.int32))
            np.testing.assert_array_equal(out_score[rows[r]], res[r, k:2 * k].astype(np.float32))
        else:
            assert (out_idx[rows[r]] == -7).all()


def test_serial_query_norms_equal_parallel_twin():
    """The small-batch staging (no parallel launch) gives the canonical sums bit for bit, 1/|q| as
    NumPy computes it, zeros for padding rows."""
    rng = np.random.default_rng(30)
    Q = rng.standard_normal((5, 1000)).astype(np.float32)
    Q[1] = 0
    want = np.empty(5); kd.canonical_sumsq_cpu(Q, want)
    qq = np.full(5, -1.0); rq = np.full(5, -1, np.float32)
    kd.query_norms_serial(Q, 4, qq, rq)
    np.testing.assert_array_equal(qq[:4], want[:4])
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(rq[:4], np.where(want[:4] > 0, 1.0 / np.sqrt(want[:4]), 0.0).astype(np.float32))
    assert qq[4] == 0 and rq[4] == 0


def test_select_and_finish_register_caps_reach_the_compiler():
    """DenseGeometry's register caps become the kernels' max_registers (occupancy: two blocks per
    multiprocessor); 0 leaves the compiler's choice. (The simulator has no registers.)"""
    import numba
    if numba.config.ENABLE_CUDASIM:
        pytest.skip("the simulator has no registers")
    g = DenseGeometry()
    assert g.select_registers == 128 and g.finish_registers == 128 and g.select_registers_batch == 64
    assert kd.make_select_kernel(256, 2048, 2048, g.select_registers_batch).targetoptions["max_registers"] == 64
    assert kd.make_select_kernel(256, 2048, 2048, g.select_registers).targetoptions["max_registers"] == 128
    assert kd.make_finish_kernel(256, 2048, 2048, 8, g.finish_registers).targetoptions["max_registers"] == 128
    assert kd.make_select_kernel(256, 2048, 2048, 0).targetoptions.get("max_registers") is None


@pytest.mark.cudasim
def test_cuda_several_batches_sparse_queries_in_simulator():
    """A call split into batches of 2, 2 and 1 queries (the packed staging per batch size, a
    matvec kernel for the 1-query batch), sparse queries and left-out documents."""
    from dataclasses import replace
    X, Q = quarter_data(12, 6, 5, seed=3)
    index = DenseIndex(X, "cuda", replace(SIM_GEOMETRY, keys_bytes=4 * 12 * 2))
    leave = np.array([1, -1, 4, 11, -1])
    assert_same(index.search(sp.csr_matrix(Q), 3, "cosine", exclude_self=leave),
                reference(X, Q, 3, "cosine", self_doc=leave))
    assert index.last_run["rounds"] >= 3  # one finish round per batch at least
