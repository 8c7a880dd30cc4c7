"""Stream clustering on a real GPU (run on the GPU host: make test-gpu / pytest -m gpu).

The pre-marshalled launch path (gputext.device.launch) and numba's dispatcher give the CPU path's
clusters and similarity bits document by document on a PubMed-shaped stream, for batch sizes 1
and 32, with device capacity growth; a restored state (load + priming scan) continues the stream
exactly; the device matrix equals the host centroids.
"""
import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu

K, T = 35, 0.6


@pytest.fixture(scope="module")
def stream():
    from gputext.cluster.stream_synth import StreamSpec, pubmed_stream, reference_df
    n = 4000
    ref = reference_df(StreamSpec(n, reference_docs=n))
    X = sp.vstack([part[1] for part in pubmed_stream(n, 0, chunk_docs=1024, reference=ref)]).tocsr()
    from gputext.cluster.stream import StreamClusterer
    cpu = StreamClusterer(T, K, device="cpu", batch_size=64, candidates="index").partial_fit(X)
    return X, cpu


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("batch_size", [1, 32])
def test_gpu_equals_cpu_document_by_document(stream, fast, batch_size):
    from gputext.cluster.stream import StreamClusterer
    X, cpu = stream
    sc = StreamClusterer(T, K, device="cuda", batch_size=batch_size, candidates="scan", capacity=64, fast_launch=fast)
    r = sc.partial_fit(X)
    assert sc.scanner.launch_mode == ("raw" if fast else "dispatcher")
    assert sc.scanner.grows >= 1  # 64 rows of capacity: the matrix grew on the device
    np.testing.assert_array_equal(r.cluster, cpu.cluster)
    np.testing.assert_array_equal(r.similarity, cpu.similarity)
    np.testing.assert_array_equal(r.new_cluster, cpu.new_cluster)
    terms, weights = sc.device_matrix()
    cents = sc.centroids()
    np.testing.assert_array_equal(terms, cents["ell_terms"])
    np.testing.assert_array_equal(weights, cents["ell_weights"])


def test_gpu_restore_continues_the_stream(stream):
    from gputext.cluster.stream import StreamClusterer
    X, cpu = stream
    first = StreamClusterer(T, K, device="cuda", batch_size=1, candidates="scan")
    r1 = first.partial_fit(X[:2500])
    second = StreamClusterer(T, K, device="cuda", batch_size=1, candidates="scan")
    second.restore(first.state_arrays())
    assert second.scanner.launch_mode == "raw"
    r2 = second.partial_fit(X[2500:])
    np.testing.assert_array_equal(np.r_[r1.cluster, r2.cluster], cpu.cluster)
    np.testing.assert_array_equal(np.r_[r1.similarity, r2.similarity], cpu.similarity)
