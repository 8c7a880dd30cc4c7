"""Stream clustering on a real GPU (run on the GPU host: make test-gpu / pytest -m gpu).

The pre-marshalled launch path (gputext.device.launch) and numba's dispatcher give the CPU path's
clusters and similarity bits document by document on a PubMed-shaped stream, for batch sizes 1
and 32, with device capacity growth; a restored state (load + priming scan) continues the stream
exactly; the device matrix equals the host centroids.
"""
import hashlib
import os

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


def _context(X, cpu, r) -> str:
    """What a failure message should say (these tests failed under pytest-xdist once, 2026-11-26,
    and passed alone): the input's checksum, the cluster counts, the first differing document."""
    digest = hashlib.sha1(X.data.tobytes() + X.indices.tobytes() + X.indptr.tobytes()).hexdigest()[:12]
    bad = np.flatnonzero((r.cluster != cpu.cluster) | (r.similarity != cpu.similarity))
    first = ""
    if bad.size:
        j = int(bad[0])
        first = (f"; first differing document {j}: gpu ({r.cluster[j]}, {r.similarity[j]!r}, new {r.new_cluster[j]}) "
                 f"cpu ({cpu.cluster[j]}, {cpu.similarity[j]!r}, new {cpu.new_cluster[j]})")
        from gputext.cluster.stream import StreamClusterer
        again = StreamClusterer(T, K, device="cpu", batch_size=1, candidates="scan").partial_fit(X)  # which side moved?
        first += (f"; the CPU again (batch 1, scan): equals gpu {np.array_equal(again.cluster, r.cluster)}, "
                  f"equals the fixture {np.array_equal(again.cluster, cpu.cluster)}")
    return (f"X sha1 {digest} nnz {X.nnz}; clusters gpu {r.cluster.max() + 1} cpu {cpu.cluster.max() + 1}; "
            f"{bad.size} documents differ{first}; pid {os.getpid()}")


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("batch_size", [1, 32])
def test_gpu_equals_cpu_document_by_document(stream, fast, batch_size):
    from gputext.cluster.stream import StreamClusterer
    X, cpu = stream
    sc = StreamClusterer(T, K, device="cuda", batch_size=batch_size, candidates="scan", capacity=64, fast_launch=fast)
    r = sc.partial_fit(X)
    assert sc.scanner.launch_mode == ("raw" if fast else "dispatcher")
    assert sc.scanner.grows >= 1  # 64 rows of capacity: the matrix grew on the device
    np.testing.assert_array_equal(r.cluster, cpu.cluster, err_msg=_context(X, cpu, r))
    np.testing.assert_array_equal(r.similarity, cpu.similarity)
    np.testing.assert_array_equal(r.new_cluster, cpu.new_cluster)
    terms, weights = sc.device_matrix()
    cents = sc.centroids()
    np.testing.assert_array_equal(terms, cents["ell_terms"])
    np.testing.assert_array_equal(weights, cents["ell_weights"])


def test_gpu_restore_continues_the_stream(stream):
    from gputext.cluster.stream import StreamClusterer, StreamResult
    X, cpu = stream
    first = StreamClusterer(T, K, device="cuda", batch_size=1, candidates="scan")
    r1 = first.partial_fit(X[:2500])
    second = StreamClusterer(T, K, device="cuda", batch_size=1, candidates="scan")
    second.restore(first.state_arrays())
    assert second.scanner.launch_mode == "raw"
    r2 = second.partial_fit(X[2500:])
    whole = StreamResult(np.r_[r1.cluster, r2.cluster], np.r_[r1.similarity, r2.similarity],
                         np.r_[r1.new_cluster, r2.new_cluster], np.r_[r1.latency_s, r2.latency_s])
    np.testing.assert_array_equal(np.r_[r1.cluster, r2.cluster], cpu.cluster, err_msg=_context(X, cpu, whole))
    np.testing.assert_array_equal(np.r_[r1.similarity, r2.similarity], cpu.similarity)
