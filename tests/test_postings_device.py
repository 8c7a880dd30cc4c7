"""The sorted posting lists built on the device (gputext.engine.device_index.build_sorted_lists:
kernels.postings.count_chunk_terms, chunk_cursors, scatter_chunk_rows, doc_norms) equal the host's
build (kernels.postings.build_postings_cpu) bit for bit, for any number of chunks, empty rows and
terms, rows longer than a block and a term in every row; the norms without postings
(row_norms_cpu, Index.row_norms) equal the postings' norms; and a CUDA search through the device
build equals the CPU twin."""
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.io.corpus import csr_arrays
from gputext.kernels.postings import build_postings, build_postings_cpu, chunk_rows, row_norms_cpu


def corpus(n_docs=37, n_terms=23, seed=0, long_row=70):
    """CSR float32 (n_docs, n_terms), canonical: random rows, every third one empty, term 0 in
    every non-empty row, the last two terms in none, and row 5 holding ``long_row`` terms (longer
    than the simulator's blocks; n_terms is raised to hold it)."""
    rng = np.random.default_rng(seed)
    n_terms = max(n_terms, long_row + 2)
    rows, cols = [], []
    for d in range(n_docs):
        if d % 3 == 2:
            continue
        k = long_row if d == 5 else int(rng.integers(1, 8))
        terms = np.unique(np.r_[0, rng.choice(n_terms - 2, size=k, replace=False)])
        rows += [d] * terms.size
        cols += terms.tolist()
    data = rng.uniform(-2, 2, len(rows)).astype(np.float32)
    X = sp.csr_matrix((data, (rows, cols)), shape=(n_docs, n_terms), dtype=np.float32)
    X.sum_duplicates()
    X.sort_indices()
    return X


def test_chunk_rows_cut_every_row_once_by_postings():
    X = corpus(200, seed=3)
    indptr = csr_arrays(X)[0]
    for n_chunks in (1, 2, 7, 64, 500):
        row_lo = chunk_rows(indptr, n_chunks)
        assert row_lo.shape == (n_chunks + 1,) and row_lo[0] == 0 and row_lo[-1] == X.shape[0]
        assert np.all(np.diff(row_lo) >= 0)
        if n_chunks <= 7:  # about equal postings: no chunk holds more than its share plus one row's
            per = np.diff(indptr[row_lo])
            assert per.max() <= X.nnz / n_chunks + np.diff(indptr).max()


def test_row_norms_equal_the_postings_norms():
    from gputext.engine.index import Index

    X = corpus(300, seed=4)
    indptr, indices, data = csr_arrays(X)
    p = build_postings_cpu(indptr, indices, data, X.shape[1])
    d_sq, d_l1 = np.empty(X.shape[0]), np.empty(X.shape[0])
    row_norms_cpu(indptr, data, d_sq, d_l1)
    assert np.array_equal(d_sq, p[3]) and np.array_equal(d_l1, p[4])
    index = Index.from_csr(X)
    for code in (0, 1, 2, 3):  # the norm terms without postings, then with them: the same bits
        before = index.norm_terms(code).copy()
        assert index.host_postings is None
        assert np.array_equal(before, Index.from_csr(X).norm_terms(code))
    index.cpu()
    assert index.host_postings is not None
    fresh = Index.from_csr(X)
    fresh.cpu()
    assert all(np.array_equal(fresh.norm_terms(c), Index.from_csr(X).norm_terms(c)) for c in (0, 1, 2, 3))
    assert np.array_equal(build_postings(indptr, indices, data, X.shape[1], n_chunks=3)[3], p[3])


def _device_build_equals_host(X, n_chunks, block):
    from gputext.engine.device_index import build_sorted_lists

    indptr, indices, data = csr_arrays(X)
    want = build_postings_cpu(indptr, indices, data, X.shape[1])
    d_ptr, d_doc, d_w, d_sq, d_l1, df = build_sorted_lists(indptr, indices, data, X.shape[1], n_chunks, block)
    nnz, n_docs = X.nnz, X.shape[0]
    assert np.array_equal(d_ptr.copy_to_host(), want[0])
    assert np.array_equal(df, np.diff(want[0]))
    assert np.array_equal(d_doc.copy_to_host()[:nnz], want[1])
    assert np.array_equal(d_w.copy_to_host()[:nnz].view(np.uint32), want[2].view(np.uint32))
    assert np.array_equal(d_sq.copy_to_host()[:n_docs], want[3])
    assert np.array_equal(d_l1.copy_to_host()[:n_docs], want[4])


@pytest.mark.cudasim
@pytest.mark.parametrize("n_chunks", [1, 3, 5])
def test_device_sorted_build_equals_the_host_build_in_the_simulator(n_chunks):
    _device_build_equals_host(corpus(), n_chunks, block=32)


@pytest.mark.cudasim
def test_device_sorted_build_of_nothing():
    _device_build_equals_host(sp.csr_matrix((4, 6), dtype=np.float32), 2, block=32)  # no postings
    _device_build_equals_host(sp.csr_matrix((3, 0), dtype=np.float32), 1, block=32)  # no terms


@pytest.mark.gpu
@pytest.mark.parametrize("n_chunks, block", [(1, 256), (7, 64), (1056, 128)])
def test_device_sorted_build_equals_the_host_build_on_the_gpu(n_chunks, block):
    rng = np.random.default_rng(n_chunks)
    X = sp.random(20_000, 3_000, density=0.01, format="csr", dtype=np.float32, random_state=rng)
    X.data = rng.uniform(0.01, 3, X.nnz).astype(np.float32)
    X = X.tolil()
    X[:, 7] = 1.0  # a term in every row
    X[11] = rng.uniform(0.5, 1, 3_000)  # a row longer than any block
    _device_build_equals_host(sp.csr_matrix(X, dtype=np.float32), n_chunks, block)
    _device_build_equals_host(corpus(), 3, 32)


@pytest.mark.gpu
def test_cuda_search_through_the_device_build_equals_the_cpu_twin():
    from gputext.engine.index import Index
    from gputext.engine.search import search_topk

    rng = np.random.default_rng(5)
    X = sp.random(30_000, 2_000, density=0.02, format="csr", dtype=np.float32, random_state=rng)
    Q = sp.random(300, 2_000, density=0.02, format="csr", dtype=np.float32, random_state=rng)
    index = Index.from_csr(X)
    got = search_topk(index, Q, 30, device="cuda")
    assert index.host_postings is None  # the device built the lists
    want = search_topk(Index.from_csr(X), Q, 30, device="cpu")
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_sorted_build_chunks_stay_within_their_bounds():
    from gputext.engine.device_index import (SORTED_BUILD_CHUNK_POSTINGS, SORTED_BUILD_COUNTS_BYTES,
                                             sorted_build_chunks, sorted_build_bytes)
    for n_docs, n_terms, sms, nnz in [(11_293, 73_539, 132, 1_119_221), (10**7, 200_000, 132, 718 * 10**6),
                                      (5, 10, 132, 0), (3, 0, 132, 0), (10**6, 1, 132, 10**6)]:
        n = sorted_build_chunks(n_docs, n_terms, sms, nnz)
        assert 1 <= n <= max(1, n_docs)
        assert n == 1 or 4 * n * n_terms <= SORTED_BUILD_COUNTS_BYTES
        assert n == 1 or nnz // n >= SORTED_BUILD_CHUNK_POSTINGS
        assert sorted_build_bytes(n_docs, nnz, n_terms, n) >= 16 * nnz


def test_weight_stats_equal_numpy_and_the_serial_term_maxima():
    from gputext.kernels.postings import term_maxabs_cpu, term_stats_cpu

    def weight_stats_cpu(indices, data, n_terms, n_chunks):  # postings.weight_stats with its chunks given
        maxabs, _, bad = term_stats_cpu(indices, data, np.array([0, data.shape[0]]), n_terms, n_chunks, False)
        return bad[0], maxabs[0].max(initial=0.0), maxabs[0]

    X = corpus(400, seed=6)
    indptr, indices, data = csr_arrays(X)
    want = term_maxabs_cpu(indices, data, X.shape[1])
    for n_chunks in (1, 3, 16):
        bad, top, maxabs = weight_stats_cpu(indices, data, X.shape[1], n_chunks)
        assert bad == 0 and top == np.abs(data).max()
        assert np.array_equal(maxabs.view(np.uint32), want.view(np.uint32))
    spoiled = data.copy()
    spoiled[[3, 50]] = [np.nan, -np.inf]
    bad, top, _ = weight_stats_cpu(indices, spoiled, X.shape[1], 4)
    assert bad == 2 and top == np.abs(np.delete(spoiled, [3, 50])).max()


def test_a_large_index_checks_its_weights_in_one_parallel_pass(monkeypatch):
    # from PARALLEL_STATS_ENTRIES stored weights Index checks them and takes the term maxima in one
    # parallel pass (kernels.postings.weight_stats): the same maxima, the same refusals
    from gputext.engine.index import Index
    from gputext.errors import InputError
    from gputext.kernels import postings

    X = corpus(400, seed=7)
    want = Index.from_csr(X).term_maxabs
    monkeypatch.setattr(postings, "PARALLEL_STATS_ENTRIES", 1)  # parallel_stats reads it at call time
    index = Index.from_csr(X)
    assert index._maxabs is not None  # made by the check
    assert np.array_equal(index.term_maxabs, want)
    for bad, message in ((np.nan, "NaN or infinite"), (2.0 ** 41, "magnitude")):
        Y = X.copy()
        Y.data[7] = bad
        with pytest.raises(InputError, match=message):
            Index.from_csr(Y)
