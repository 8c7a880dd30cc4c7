"""Stream clustering on the CPU (ELL-scan twin, inverted index, auto) against the sequential float64
reference, document by document: cluster ids, similarities (bit for bit), new-cluster flags and
the final centroids, for batch sizes 1 and many."""
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.backend import Backend
from gputext.cluster import stream_host as H
from gputext.cluster.stream import StreamClusterer
from gputext.cluster.stream_reference import reference_cluster
from gputext.cluster.stream_synth import pubmed_corpus
from gputext.errors import InputError
from gputext.kernels import stream_ell as E


def _ties(seed=0, n=300, n_terms=30, per=6):
    """Small vocabulary, integer weights: many equal similarities and equal top-K weights."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, n_terms, density=per / n_terms, random_state=rng, format="csr")
    X.data = np.ceil(X.data * 3)
    return X


def _bursts(seed=1):
    """Documents repeated in bursts (and an empty row): batches hit clusters they change, so the
    in-batch re-check and the restart path both run."""
    base = _ties(seed, n=60, n_terms=40, per=8).toarray()
    rng = np.random.default_rng(seed)
    order = np.repeat(np.arange(60), rng.integers(1, 5, 60))
    X = base[order]
    X[5] = 0
    return sp.csr_matrix(X)


def _long_docs(seed=2):
    """Documents longer than K: the top-K truncation matters."""
    rng = np.random.default_rng(seed)
    X = sp.random(200, 50, density=0.4, random_state=rng, format="csr")
    X.data = np.round(X.data * 8) + 1
    return X


def _pairs(seed=3):
    """Two-term documents of equal weights and one-term documents over 12 terms: a one-term
    document is exactly as similar (float32(1/sqrt 2)) to every pair cluster holding its term, so
    the best cluster is decided by the lower-id rule again and again."""
    rng = np.random.default_rng(seed)
    X = np.zeros((240, 12))
    for i in range(240):
        X[i, rng.choice(12, 1 if rng.random() < 0.4 else 2, replace=False)] = 1.0
    return sp.csr_matrix(X)


CASES = {
    "pairs": (_pairs, 0.6, 3),
    "ties": (_ties, 0.3, 5),
    "bursts": (_bursts, 0.5, 6),
    "long": (_long_docs, 0.2, 7),
    "pubmed": (lambda: pubmed_corpus(1500, reference_docs=1500, chunk_docs=512, n_terms=5000, n_classes=10)[0], 0.6, 35),
}
_REF = {}


def reference(case):
    if case not in _REF:
        make, T, K = CASES[case]
        X = make()
        _REF[case] = (X, T, K, reference_cluster(X, T, K))
    return _REF[case]


def assert_same_as_reference(sc, result, ref_out):
    cluster, sims, new, ref = ref_out
    np.testing.assert_array_equal(result.cluster, cluster)
    np.testing.assert_array_equal(result.similarity, sims)  # bit for bit
    np.testing.assert_array_equal(result.new_cluster, new)
    cents = sc.centroids()
    assert sc.n_clusters == ref.n_clusters
    for c in range(ref.n_clusters):
        length = len(ref.terms[c])
        np.testing.assert_array_equal(cents["ell_terms"][:length, c], ref.terms[c])
        assert (cents["ell_terms"][length:, c] == -1).all()
        np.testing.assert_array_equal(cents["ell_weights"][:length, c], ref.weights[c])
    np.testing.assert_array_equal(cents["magnitude"], np.array(ref.magnitude))
    np.testing.assert_array_equal(cents["size"], np.array(ref.size))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("candidates", ["scan", "index", "auto"])
@pytest.mark.parametrize("batch_size", [1, 5, 64])
def test_cpu_equals_reference_document_by_document(case, candidates, batch_size):
    X, T, K, ref_out = reference(case)
    sc = StreamClusterer(T, K, device="cpu", batch_size=batch_size, candidates=candidates, capacity=2,
                         threads_per_block=16)
    sc.index_slack = 0  # rebuild the inverted index as soon as stale entries outnumber live ones
    result = sc.partial_fit(X)
    assert_same_as_reference(sc, result, ref_out)
    if sc.scanner is not None:  # the twin's ELL copy (update buffer + growth) equals the host centroids
        terms, weights = sc.device_matrix()
        cents = sc.centroids()
        np.testing.assert_array_equal(terms, cents["ell_terms"])
        np.testing.assert_array_equal(weights, cents["ell_weights"])


def test_pairs_produce_equal_best_similarities():
    X, T, K, (cluster, sims, new, ref) = reference("pairs")
    joined_by_tie = 0
    for i in np.flatnonzero(~new):
        if X[i].nnz == 1:
            t = X[i].indices[0]
            holders = [c for c in range(cluster[i] + 1, ref.n_clusters) if t in ref.terms[c]]
            joined_by_tie += bool(holders)
    assert joined_by_tie > 0  # the case is not vacuous (checked on final centroids: a lower bound)


@pytest.mark.parametrize("candidates", ["scan", "index"])
def test_similarity_equal_to_the_threshold_does_not_join(candidates):
    import math
    s = float(np.float32(1 / math.sqrt(2)))
    X = sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 1.0]]))
    for threshold, expect in ((s, [0, 1]), (np.nextafter(s, 0), [0, 0])):
        r = StreamClusterer(threshold, 4, device="cpu", candidates=candidates).partial_fit(X)
        assert r.cluster.tolist() == expect and r.similarity[1] == s


def test_bursts_exercise_rechecks_and_restarts():
    X, T, K, ref_out = reference("bursts")
    sc = StreamClusterer(T, K, device="cpu", batch_size=16, candidates="scan")
    assert_same_as_reference(sc, sc.partial_fit(X), ref_out)
    assert sc.stats.restarts > 0 and sc.stats.rechecks > 0
    assert sc.stats.launches == sc.stats.restarts + (X.shape[0] + 15) // 16


def test_index_rebuild_and_pool_growth_keep_results():
    X, T, K, ref_out = reference("long")
    sc = StreamClusterer(T, K, device="cpu", batch_size=3, candidates="index")
    sc.index_slack = 0
    sc._init_index(1, 1)  # tiny pool and term table: both must grow
    assert_same_as_reference(sc, sc.partial_fit(X), ref_out)
    assert sc.ix_pool.shape[0] > 1


@pytest.mark.parametrize("candidates", ["scan", "index"])
def test_partial_fit_in_pieces_equals_one_pass(candidates):
    X, T, K, ref_out = reference("pubmed")
    sc = StreamClusterer(T, K, device="cpu", batch_size=32, candidates=candidates)
    parts = [sc.partial_fit(X[a:b]) for a, b in ((0, 1), (1, 700), (700, 701), (701, X.shape[0]))]
    result = type(parts[0])(*(np.concatenate([getattr(p, f) for p in parts])
                              for f in ("cluster", "similarity", "new_cluster", "latency_s")))
    assert_same_as_reference(sc, result, ref_out)
    assert sc.n_docs_seen == X.shape[0]


@pytest.mark.parametrize("candidates", ["scan", "index", "auto"])
def test_restore_continues_the_stream(candidates):
    X, T, K, ref_out = reference("ties")
    first = StreamClusterer(T, K, device="cpu", batch_size=8, candidates=candidates)
    r1 = first.partial_fit(X[:150])
    second = StreamClusterer(T, K, device="cpu", batch_size=8, candidates=candidates)
    second.restore(first.state_arrays())
    r2 = second.partial_fit(X[150:])
    np.testing.assert_array_equal(np.concatenate([r1.cluster, r2.cluster]), ref_out[0])
    np.testing.assert_array_equal(np.concatenate([r1.similarity, r2.similarity]), ref_out[1])
    with pytest.raises(InputError, match="max_terms"):
        StreamClusterer(T, K + 1, device="cpu").restore(first.state_arrays())


def test_results_do_not_depend_on_batch_size_or_candidates_on_a_larger_stream():
    X = pubmed_corpus(6000, reference_docs=3000, n_terms=20000)[0]
    runs = [StreamClusterer(0.6, 35, device="cpu", batch_size=b, candidates=c).partial_fit(X)
            for b, c in ((1, "index"), (32, "scan"), (64, "auto"))]
    for r in runs[1:]:
        np.testing.assert_array_equal(r.cluster, runs[0].cluster)
        np.testing.assert_array_equal(r.similarity, runs[0].similarity)
    assert 0.5 < runs[0].new_cluster.mean() < 0.8  # the story stream makes about 64% new clusters


def test_bad_input_is_refused():
    with pytest.raises(InputError, match="threshold"):
        StreamClusterer(1.5, 10, device="cpu")
    with pytest.raises(InputError, match="max_terms"):
        StreamClusterer(0.5, 0, device="cpu")
    with pytest.raises(InputError, match="candidates"):
        StreamClusterer(0.5, 10, device="cpu", candidates="hash")
    with pytest.raises(InputError, match="CPU's inverted index"):
        StreamClusterer(0.5, 10, candidates="index", backend=Backend("cuda", False, "test"))
    with pytest.raises(InputError, match=">= 0"):
        StreamClusterer(0.5, 10, device="cpu").partial_fit(sp.csr_matrix(np.array([[1.0, -2.0]])))
    with pytest.raises(InputError, match="finite"):
        StreamClusterer(0.5, 10, device="cpu").partial_fit(sp.csr_matrix(np.array([[np.nan, 1.0]])))


# ----------------------------------------------------------------------------- kernel twins

def _brute_best(terms, weights, n_rows, docs):
    """Similarities by dense float64 products summed left to right over the slots."""
    K = terms.shape[0]
    best = []
    for dense in docs:
        sims = np.zeros(n_rows)
        for r in range(n_rows):
            s = 0.0
            for n in range(K):
                t = terms[n, r]
                if t < 0:
                    break
                if dense[t] != 0:
                    s += float(weights[n, r]) * float(dense[t])
            sims[r] = s
        top = sims.max()
        best.append((top, int(np.flatnonzero(sims == top)[0])))
    return best


@pytest.mark.parametrize("tpb,n_rows", [(4, 13), (16, 16), (64, 5)])
def test_score_twin_with_update_buffer_equals_brute_force(tpb, n_rows):
    rng = np.random.default_rng(tpb)
    K, n_terms, stride = 4, 12, E.aligned_stride(n_rows)
    terms = np.full((K, stride), -1, np.int32)
    weights = np.zeros((K, stride), np.float32)
    for r in range(n_rows):
        m = rng.integers(0, K + 1)
        terms[:m, r] = np.sort(rng.choice(n_terms, m, replace=False))
        weights[:m, r] = rng.integers(1, 4, m) / 4
    # rows 2 and n_rows - 1 change: the host versions (row-major) go in the update buffer
    host_terms = np.ascontiguousarray(terms.T)
    host_weights = np.ascontiguousarray(weights.T)
    upd = np.array(sorted({2 % n_rows, n_rows - 1}), np.int32)
    for r in upd:
        host_terms[r] = [0, 3, 7, -1]
        host_weights[r] = [0.5, 0.25, 0.75, 0.0]
    docs_csr = sp.csr_matrix((rng.integers(1, 4, (3, n_terms)) * (rng.random((3, n_terms)) < 0.5)) / 4)
    d_indptr, d_terms, d_w = (docs_csr.indptr.astype(np.int64), docs_csr.indices.astype(np.int32),
                              docs_csr.data.astype(np.float32))
    ibuf = np.zeros(4096, np.int32)
    fbuf = np.zeros(4096, np.float32)
    table = E.table_size_for(docs_csr.nnz)
    n_post, _ = H.pack_batch(ibuf, fbuf, upd, len(upd), host_terms, host_weights, d_indptr, d_terms, d_w, 0, 3, table)
    n_blocks = (n_rows + tpb - 1) // tpb
    part_sim = np.zeros(3 * n_blocks)
    part_row = np.zeros(3 * n_blocks, np.int32)
    best = np.zeros((2, 3))
    for twin in (E.score_blocks_cpu, E.score_blocks_serial):
        t2, w2 = terms.copy(), weights.copy()
        twin(tpb, 3, t2, w2, n_rows, ibuf, fbuf, len(upd), table, n_post, 3, part_sim, part_row)
        E.reduce_blocks_cpu(part_sim, part_row, n_blocks, 3, best)
        np.testing.assert_array_equal(t2[:, :n_rows], host_terms[:n_rows].T)  # the buffer was written
        np.testing.assert_array_equal(w2[:, :n_rows], host_weights[:n_rows].T)
        expect = _brute_best(t2, w2, n_rows, docs_csr.toarray().astype(np.float32))
        assert [(s, int(r)) for s, r in zip(best[0], best[1])] == expect


def test_apply_and_grow_twins():
    K = 3
    terms = np.arange(K * 32, dtype=np.int32).reshape(K, 32)
    weights = terms.astype(np.float32) / 100
    new_t = np.full((K, 64), -9, np.int32)
    new_w = np.zeros((K, 64), np.float32)
    E.grow_copy_cpu(terms, weights, 20, new_t, new_w)
    np.testing.assert_array_equal(new_t[:, :20], terms[:, :20])
    assert (new_t[:, 20:] == -9).all()
    host_t = np.full((30, K), -1, np.int32)
    host_w = np.zeros((30, K), np.float32)
    host_t[7] = [1, 2, 3]
    host_w[7] = [0.1, 0.2, 0.3]
    ibuf = np.zeros(200, np.int32)
    fbuf = np.zeros(200, np.float32)
    H.pack_batch(ibuf, fbuf, np.array([7], np.int32), 1, host_t, host_w, np.zeros(2, np.int64),
                 np.zeros(0, np.int32), np.zeros(0, np.float32), 0, 0, 16)
    E.apply_updates_cpu(new_t, new_w, ibuf, fbuf, 1)
    np.testing.assert_array_equal(new_t[:, 7], [1, 2, 3])
    np.testing.assert_array_equal(new_w[:, 7], host_w[7])
