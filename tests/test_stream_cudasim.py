"""Stream-clustering CUDA kernels in numba's simulator (NUMBA_ENABLE_CUDASIM=1, tiny sizes): each
kernel against its CPU twin, and the whole clusterer on ``device="cuda"`` against the sequential
reference, document by document, for batch sizes 1 and 4, with device capacity growth."""
import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.cudasim


def _setup(n_rows=21, K=4, n_terms=10, n_docs=3, seed=0):
    from gputext.cluster import stream_host as H
    from gputext.kernels import stream_ell as E
    rng = np.random.default_rng(seed)
    stride = E.aligned_stride(n_rows)
    terms = np.full((K, stride), -1, np.int32)
    weights = np.zeros((K, stride), np.float32)
    for r in range(n_rows):
        m = rng.integers(0, K + 1)
        terms[:m, r] = np.sort(rng.choice(n_terms, m, replace=False))
        weights[:m, r] = rng.integers(1, 4, m) / 4
    host_t = np.ascontiguousarray(terms.T)
    host_w = np.ascontiguousarray(weights.T)
    upd = np.array([3, n_rows - 1], np.int32)
    host_t[3] = [1, 4] + [-1] * (K - 2)
    host_w[3] = [0.5, 0.5] + [0] * (K - 2)
    host_t[n_rows - 1] = np.arange(K) * (n_terms // K)
    host_w[n_rows - 1] = 0.25
    docs = sp.csr_matrix((rng.integers(0, 4, (n_docs, n_terms)) * (rng.random((n_docs, n_terms)) < 0.5)) / 4)
    ibuf = np.zeros(2048, np.int32)
    fbuf = np.zeros(2048, np.float32)
    table = E.table_size_for(docs.nnz)
    n_post, _ = H.pack_batch(ibuf, fbuf, upd, len(upd), host_t, host_w, docs.indptr.astype(np.int64),
                             docs.indices.astype(np.int32), docs.data.astype(np.float32), 0, n_docs, table)
    return E, terms, weights, ibuf, fbuf, upd, table, n_post, n_docs, n_rows


@pytest.mark.parametrize("tpb,max_docs,K", [(8, 4, 4), (16, 3, 4), (16, 4, 19), (8, 4, 16)])
def test_score_and_reduce_kernels_equal_twins(tpb, max_docs, K):
    """K = 19 crosses the scan's 8-slot load groups twice and ends inside the third one; K = 16
    ends exactly at a group boundary."""
    from numba import cuda
    E, terms, weights, ibuf, fbuf, upd, table, n_post, n_docs, n_rows = _setup(K=K, n_terms=10 if K < 10 else 40)
    n_blocks = (n_rows + tpb - 1) // tpb
    part_sim, part_row = np.zeros(n_docs * n_blocks), np.zeros(n_docs * n_blocks, np.int32)
    t_cpu, w_cpu = terms.copy(), weights.copy()
    E.score_blocks_cpu(tpb, max_docs, t_cpu, w_cpu, n_rows, ibuf, fbuf, len(upd), table, n_post, n_docs,
                       part_sim, part_row)
    best_cpu = np.zeros((2, n_docs))
    E.reduce_blocks_cpu(part_sim, part_row, n_blocks, n_docs, best_cpu)

    d_t, d_w = cuda.to_device(terms), cuda.to_device(weights)
    d_ps, d_pr = cuda.device_array(n_docs * n_blocks), cuda.device_array(n_docs * n_blocks, np.int32)
    E.score_kernel(tpb, max_docs)[n_blocks, tpb](d_t, d_w, n_rows, cuda.to_device(ibuf), cuda.to_device(fbuf),
                                                 len(upd), table, n_post, n_docs, d_ps, d_pr)
    np.testing.assert_array_equal(d_ps.copy_to_host(), part_sim)
    np.testing.assert_array_equal(d_pr.copy_to_host(), part_row)
    np.testing.assert_array_equal(d_t.copy_to_host(), t_cpu)  # update buffer written inside the launch
    np.testing.assert_array_equal(d_w.copy_to_host(), w_cpu)
    d_best = cuda.device_array((2, n_docs))
    E.reduce_kernel(8)[n_docs, 8](d_ps, d_pr, n_blocks, n_docs, d_best)
    np.testing.assert_array_equal(d_best.copy_to_host(), best_cpu)


def test_apply_and_grow_kernels_equal_twins():
    from numba import cuda
    E, terms, weights, ibuf, fbuf, upd, *_ = _setup()
    K = terms.shape[0]
    t_cpu, w_cpu = terms.copy(), weights.copy()
    E.apply_updates_cpu(t_cpu, w_cpu, ibuf, fbuf, len(upd))
    d_t, d_w = cuda.to_device(terms), cuda.to_device(weights)
    E.apply_updates[1, 16](d_t, d_w, cuda.to_device(ibuf), cuda.to_device(fbuf), len(upd))
    np.testing.assert_array_equal(d_t.copy_to_host(), t_cpu)
    np.testing.assert_array_equal(d_w.copy_to_host(), w_cpu)
    new_t, new_w = cuda.to_device(np.full((K, 64), -7, np.int32)), cuda.to_device(np.zeros((K, 64), np.float32))
    E.grow_copy[(K * 21 + 31) // 32, 32](d_t, d_w, 21, new_t, new_w)
    grown = new_t.copy_to_host()
    np.testing.assert_array_equal(grown[:, :21], t_cpu[:, :21])
    assert (grown[:, 21:] == -7).all()


@pytest.mark.parametrize("batch_size", [1, 4])
def test_clusterer_on_simulated_gpu_equals_reference(batch_size):
    from gputext.cluster.stream import StreamClusterer
    from gputext.cluster.stream_reference import reference_cluster
    rng = np.random.default_rng(5)
    X = np.zeros((40, 14))
    for i in range(40):  # one- and two-term documents: ties to the lower cluster id, many clusters
        X[i, rng.choice(14, 1 if rng.random() < 0.3 else 2, replace=False)] = rng.integers(1, 3)
    X = sp.csr_matrix(X)
    cluster, sims, new, ref = reference_cluster(X, 0.75, 3)
    assert ref.n_clusters > 32  # more than one aligned stride: the device matrix grows
    sc = StreamClusterer(0.75, 3, device="cuda", batch_size=batch_size, threads_per_block=16,
                         reduce_threads=8, capacity=1)
    r = sc.partial_fit(X)
    np.testing.assert_array_equal(r.cluster, cluster)
    np.testing.assert_array_equal(r.similarity, sims)
    np.testing.assert_array_equal(r.new_cluster, new)
    terms, weights = sc.device_matrix()
    assert sc.scanner.grows >= 1  # grown on the device by grow_copy (during the run or at the flush)
    cents = sc.centroids()
    np.testing.assert_array_equal(terms, cents["ell_terms"])
    np.testing.assert_array_equal(weights, cents["ell_weights"])


def test_restore_on_simulated_gpu_primes_the_copy_and_continues_the_stream():
    """restore() loads the device copy and primes it with one scan without documents (no
    reduction launch); the stream then goes on exactly as in one pass."""
    from gputext.cluster.stream import StreamClusterer
    X = sp.random(30, 12, density=0.3, random_state=2, format="csr")
    kw = dict(device="cuda", batch_size=1, threads_per_block=8, reduce_threads=8, capacity=4)
    whole = StreamClusterer(0.3, 4, **kw).partial_fit(X)
    first = StreamClusterer(0.3, 4, **kw)
    r1 = first.partial_fit(X[:13])
    second = StreamClusterer(0.3, 4, **kw)
    second.restore(first.state_arrays())
    assert second.scanner.stride >= 2 * first.n_clusters  # load() reserved room to grow
    r2 = second.partial_fit(X[13:])
    np.testing.assert_array_equal(np.r_[r1.cluster, r2.cluster], whole.cluster)
    np.testing.assert_array_equal(np.r_[r1.similarity, r2.similarity], whole.similarity)
    terms, weights = second.device_matrix()
    np.testing.assert_array_equal(terms, second.centroids()["ell_terms"])
    np.testing.assert_array_equal(weights, second.centroids()["ell_weights"])
