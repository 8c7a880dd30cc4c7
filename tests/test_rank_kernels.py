"""RankSVM kernels: CPU twins of the matrix-vector products against numpy, and the CUDA kernels
inside numba's simulator (tiny geometry: a few blocks of at most 16 threads) against the
brute-force reference and the CPU twin."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gputext.kernels import products as P
from gputext.kernels import ranksvm as K
from gputext.kernels import ranksvm_cuda as KC
from gputext.rank.data import prepare
from gputext.rank.objective import RankObjective
from gputext.rank.geometry import block_chunks
from gputext.rank.ops import RankGeometry
from test_rank_objective import check_against_brute_force, check_block_sums_do_not_depend_on_the_cut, inverse
from test_rank_reference import as_csr, random_problem

# sort_capacity 8 sends queries of more than 8 documents down the global-memory sort path;
# 4 threads per query block make several scan chunks; tiles of 2 columns, blocks of 4 rows
TINY = RankGeometry(query_threads=4, sort_capacity=8, matvec_threads=8, tile_cols=2, rows_per_block=4,
                    reduce_threads=4, csr_threads=8, csr_group=2, elementwise_blocks=3)


def _dense(rng, n, m):
    return rng.normal(size=(n, m)).astype(np.float32)


def test_cpu_matvec_twins_match_numpy():
    rng = np.random.default_rng(0)
    A = _dense(rng, 37, 6)
    v = rng.normal(size=6)
    u = rng.normal(size=37)
    out = np.zeros(37)
    P.dense_matvec_cpu(A, v, out)
    np.testing.assert_allclose(out, A.astype(np.float64) @ v, rtol=1e-12)
    block_rows = np.array([0, 8, 8, 30, 37], np.int64)  # an empty block too
    partial = np.full((4, 6), np.nan)
    K.dense_rmatvec_cpu(A, u, block_rows, partial)
    for g in range(4):
        rows = slice(block_rows[g], block_rows[g + 1])
        np.testing.assert_allclose(partial[g], A[rows].astype(np.float64).T @ u[rows], rtol=1e-12, atol=1e-300)
    res = np.zeros(6)
    K.sum_rows_in_order(partial, res)
    assert np.array_equal(res, ((partial[0] + partial[1]) + partial[2]) + partial[3])
    np.testing.assert_allclose(res, A.astype(np.float64).T @ u, rtol=1e-12)
    S = sp.random(37, 9, density=0.3, random_state=1, format="csr", dtype=np.float32)
    v9 = rng.normal(size=9)
    out = np.zeros(37)
    P.csr_matvec_cpu(S.indptr.astype(np.int64), S.indices.astype(np.int32), S.data, v9, out)
    np.testing.assert_allclose(out, S.astype(np.float64) @ v9, rtol=1e-12)
    C = S.tocsc()
    res = np.zeros(9)
    P.csr_matvec_cpu(C.indptr.astype(np.int64), C.indices.astype(np.int32), C.data, u, res)
    np.testing.assert_allclose(res, S.astype(np.float64).T @ u, rtol=1e-12)



def test_csr_matvec_equals_the_svm_product_bit_for_bit():
    # RankSVM's one-column CPU product (a register sum) must stay the one-column case of the
    # SVM's product, to the last bit
    from gputext.kernels.products import csr_matmat_cpu

    S = sp.random(203, 41, density=0.2, random_state=3, format="csr", dtype=np.float32)
    for M, n_in in ((S, 41), (S.tocsc(), 203)):
        v = np.random.default_rng(n_in).normal(size=n_in)
        args = (M.indptr.astype(np.int64), M.indices.astype(np.int32), M.data)
        out, ref = np.zeros(len(M.indptr) - 1), np.zeros((len(M.indptr) - 1, 1))
        P.csr_matvec_cpu(*args, v, out)
        csr_matmat_cpu(*args, v.reshape(-1, 1), ref)
        assert np.array_equal(out, ref[:, 0])

def test_row_order_transpose_product_equals_the_column_walk_bit_for_bit():
    # the CPU twin's X^T u walks each query block's CSR rows instead of a CSC copy: each column's
    # sum must keep row order, so it equals the column walk over the block's rows to the last bit
    S = sp.random(311, 47, density=0.25, random_state=5, format="csr", dtype=np.float32)
    u = np.random.default_rng(5).normal(size=311)
    for block_rows in ([0, 311], [0, 100, 100, 311], [0, 1, 50, 200, 310, 311]):
        block_rows = np.array(block_rows, np.int64)
        G = len(block_rows) - 1
        ref = np.zeros((G, 47))
        for g in range(G):
            C = S[block_rows[g]:block_rows[g + 1]].tocsc()
            P.csr_matvec_cpu(C.indptr.astype(np.int64), C.indices.astype(np.int32), C.data,
                             u[block_rows[g]:block_rows[g + 1]], ref[g])
        for index_type, data in ((np.int32, S.data), (np.uint32, S.data.astype(np.float64))):
            out = np.full((G, 47), np.nan)
            K.csr_rmatvec_cpu(S.indptr.astype(np.int64), S.indices.astype(index_type), data, u, block_rows, out)
            assert np.array_equal(out, ref), (index_type, G)


def test_n_levels():
    assert [K.n_levels_for(k) for k in (1, 2, 3, 4, 5, 8, 9, 1268)] == [1, 1, 2, 2, 3, 3, 4, 11]


@pytest.mark.cudasim
def test_device_matvec_kernels_match_numpy():
    from numba import cuda

    rng = np.random.default_rng(1)
    n, m = 19, 5
    A = _dense(rng, n, m)
    v = rng.normal(size=m)
    u = rng.normal(size=n)
    out = cuda.device_array(n, np.float64)
    KC.dense_matvec_kernel(8, 2)[2, 8](cuda.to_device(A), cuda.to_device(v), out)  # grid-stride: 2 blocks, 3 row groups
    np.testing.assert_allclose(out.copy_to_host(), A.astype(np.float64) @ v, rtol=1e-12)
    block_rows = np.array([0, 3, 3, 19], np.int64)  # query blocks of 3, 0 and 16 rows
    chunk_rows, chunk_of_block = block_chunks(block_rows, 4)
    assert chunk_rows.tolist() == [0, 3, 3, 7, 11, 15, 19] and chunk_of_block.tolist() == [0, 1, 2, 6]
    n_chunks = len(chunk_rows) - 1
    partial = cuda.device_array((m, n_chunks), np.float64)
    KC.dense_rmatvec_partial[n_chunks, 4](cuda.to_device(A), cuda.to_device(u), cuda.to_device(chunk_rows), partial)
    res = cuda.device_array((3, m), np.float64)
    KC.segment_reduce_kernel(4)[5, 4](partial, cuda.to_device(chunk_of_block), res)  # grid-stride over 15 pairs
    for g, blk in enumerate(res.copy_to_host()):
        rows = slice(block_rows[g], block_rows[g + 1])
        np.testing.assert_allclose(blk, A[rows].astype(np.float64).T @ u[rows], rtol=1e-12, atol=1e-300)
    S = sp.random(n, 7, density=0.4, random_state=2, format="csr", dtype=np.float32)
    v7 = rng.normal(size=7)
    out = cuda.device_array(n, np.float64)
    KC.csr_matvec_kernel(8, 2)[2, 8](cuda.to_device(S.indptr.astype(np.int64)), cuda.to_device(S.indices.astype(np.int32)),
                                    cuda.to_device(S.data), cuda.to_device(v7), out)
    np.testing.assert_allclose(out.copy_to_host(), S.astype(np.float64) @ v7, rtol=1e-12)
    C = S.tocsc()
    res = cuda.device_array((3, 7), np.float64)
    KC.csc_rmatvec_blocks_kernel(4)[4, 4](cuda.to_device(C.indptr.astype(np.int64)),
                                         cuda.to_device(C.indices.astype(np.int32)), cuda.to_device(C.data),
                                         cuda.to_device(u), cuda.to_device(block_rows), res)
    for g, blk in enumerate(res.copy_to_host()):
        rows = slice(block_rows[g], block_rows[g + 1])
        np.testing.assert_allclose(blk, S[rows].astype(np.float64).T @ u[rows], rtol=1e-12, atol=1e-300)


@pytest.mark.cudasim
@pytest.mark.parametrize("seed,n_levels,density", [(0, 3, 1.0), (1, 6, 0.6), (2, 2, 1.0)])
def test_device_objective_equals_brute_force(seed, n_levels, density):
    # queries of up to 11 documents (some above sort_capacity = 8: global sort path), ties,
    # boundary pairs, a one-document query, an all-equal query
    X, qid, rel, w = random_problem(seed, n_queries=4, max_docs=11, n_features=3, n_levels=n_levels, density=density)
    check_against_brute_force(X, qid, rel, w, C=0.7, backend="cuda", geometry=TINY, seed=seed, n_blocks=2)


@pytest.mark.cudasim
def test_device_block_sums_do_not_depend_on_the_cut():
    # what makes a Dask run on GPU workers bit-identical to one GPU (gputext.distributed.rank);
    # sparse (the CSC kernel's per-block runs; the dense chunks: test_device_matvec_kernels_match_numpy)
    check_block_sums_do_not_depend_on_the_cut("cuda", TINY, n_queries=5, max_docs=7, cuts=(3,))


@pytest.mark.cudasim
def test_device_structure_equals_cpu_twin():
    X, qid, rel, w = random_problem(5, n_queries=3, max_docs=12, n_features=3, n_levels=5)
    data = prepare(X, qid, rel)
    gpu = RankObjective(data, 1.0, "cuda", TINY)
    cpu = RankObjective(data, 1.0, "cpu", TINY)
    fg, gg = gpu.fun_grad(w)
    fc, gc = cpu.fun_grad(w)
    sg, sc = gpu.ops.statistics(), cpu.ops.statistics()
    for key in ("beta_minus", "beta_plus", "order", "lo", "hi"):
        np.testing.assert_array_equal(sg[key], sc[key], err_msg=key)
    assert fg == pytest.approx(fc, rel=1e-13)
    np.testing.assert_allclose(gg, gc, rtol=1e-12, atol=1e-12)


@pytest.mark.cudasim
def test_device_prediction_matches_cpu():
    from gputext.backend import resolve
    from gputext.rank.ops import matvec

    rng = np.random.default_rng(4)
    w = rng.normal(size=4)
    for X in (as_csr(_dense(rng, 13, 4), stored_zeros=True), sp.random(13, 4, density=0.5, random_state=3, format="csr",
                                                                       dtype=np.float32)):
        got = matvec(sp.csr_matrix(X), w, resolve("cuda"), TINY)
        np.testing.assert_allclose(got, X.astype(np.float64) @ w, rtol=1e-12)
