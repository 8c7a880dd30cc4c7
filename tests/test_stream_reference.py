"""The sequential float64 reference of stream clustering, checked by hand on small cases.

Everything else is compared with this reference, so these tests pin its definition: threshold
strictness, tie rules (cluster id, top-K term id), the centroid update arithmetic, empty documents.
"""
import math

import numpy as np
import scipy.sparse as sp

from gputext.cluster.stream_reference import (ReferenceStreamClusterer, add_document, prepare_document,
                                              reference_cluster, similarity)

F32 = np.float32


def rows(*dicts, n_terms=10):
    data, ind, ptr = [], [], [0]
    for d in dicts:
        for t in sorted(d):
            ind.append(t)
            data.append(d[t])
        ptr.append(len(ind))
    return sp.csr_matrix((np.array(data, float), np.array(ind), np.array(ptr)), shape=(len(dicts), n_terms))


def test_prepare_keeps_top_k_with_ties_to_lower_term_and_normalises():
    terms, weights, mag = prepare_document([1, 3, 5, 7], [2.0, 1.0, 2.0, 2.0], max_terms=2)
    assert terms.tolist() == [1, 5]  # three weights of 2.0 tie: the lower term ids win
    assert mag == math.sqrt(8.0)
    assert weights.dtype == np.float32
    assert weights.tolist() == [F32(2.0 / math.sqrt(8.0))] * 2


def test_prepare_drops_zero_weights():
    terms, weights, mag = prepare_document([0, 2], [0.0, 3.0], max_terms=5)
    assert terms.tolist() == [2] and mag == 3.0 and weights.tolist() == [1.0]


def test_similarity_is_a_float64_sum_in_term_order():
    d = (np.array([1, 2, 4]), np.array([0.5, 0.25, 0.125], np.float32))
    c = (np.array([0, 2, 4]), np.array([0.75, 0.5, 0.5], np.float32))
    assert similarity(*d, *c) == 0.25 * 0.5 + 0.125 * 0.5


def test_threshold_is_strict():
    # doc 2 against cluster {t0: 1}: similarity = float32(1/sqrt(2)) exactly, as float64
    s = float(F32(1 / math.sqrt(2)))
    X = rows({0: 1.0}, {0: 1.0, 1: 1.0})
    cluster, sims, new, _ = reference_cluster(X, threshold=s, max_terms=5)
    assert cluster.tolist() == [0, 1] and sims[1] == s and new.tolist() == [True, True]
    cluster, sims, new, _ = reference_cluster(X, threshold=np.nextafter(s, 0), max_terms=5)
    assert cluster.tolist() == [0, 0] and new.tolist() == [True, False]


def test_equal_similarities_go_to_the_lower_cluster_id():
    # A = {0, 1}, B = {0, 2} (similarity 1/2 < T: two clusters), C = {0}: equally similar to both
    X = rows({0: 1.0, 1: 1.0}, {0: 1.0, 2: 1.0}, {0: 1.0})
    cluster, sims, _, _ = reference_cluster(X, threshold=0.6, max_terms=5)
    assert cluster.tolist() == [0, 1, 0]
    assert sims[2] == float(F32(1 / math.sqrt(2)))


def test_join_denormalises_adds_keeps_top_k_and_renormalises():
    c_terms, c_w, c_mag = prepare_document([0, 1], [3.0, 4.0], 2)  # |C| = 5, weights 0.6, 0.8
    d_terms, d_w, d_mag = prepare_document([1, 2], [1.0, 1.0], 2)  # |D| = sqrt 2
    terms, weights, mag = add_document(c_terms, c_w, c_mag, d_terms, d_w, d_mag, max_terms=2)
    raw = {0: float(F32(0.6)) * 5.0, 1: float(F32(0.8)) * 5.0 + float(d_w[0]) * d_mag, 2: float(d_w[1]) * d_mag}
    # keep the two largest raw values: term 1 (about 5) and term 0 (about 3); term 2 (about 1) goes
    assert terms.tolist() == [0, 1]
    expected_mag = math.sqrt(raw[0] * raw[0] + raw[1] * raw[1])
    assert mag == expected_mag
    assert weights.tolist() == [F32(raw[0] / expected_mag), F32(raw[1] / expected_mag)]


def test_empty_document_gets_no_cluster():
    X = rows({0: 1.0}, {}, {0: 2.0})
    cluster, sims, new, ref = reference_cluster(X, threshold=0.5, max_terms=3)
    assert cluster.tolist() == [0, -1, 0] and sims[1] == 0.0 and not new[1]
    assert ref.n_clusters == 1 and ref.size == [2]


def test_a_document_sharing_no_term_starts_a_cluster_with_similarity_zero():
    X = rows({0: 1.0}, {5: 1.0})
    cluster, sims, new, _ = reference_cluster(X, threshold=0.0, max_terms=3)
    assert cluster.tolist() == [0, 1] and sims.tolist() == [0.0, 0.0] and new.all()


def test_candidate_index_forgets_terms_a_centroid_dropped():
    ref = ReferenceStreamClusterer(threshold=0.05, max_terms=2)
    ref.add(np.array([0, 1]), np.array([1.0, 1.0]))
    cluster, _, new = ref.add(np.array([1, 2]), np.array([1.0, 10.0]))  # joins; raw t0 = 1 < t1 = 2 < t2 = 10
    assert cluster == 0 and not new
    assert ref.terms[0].tolist() == [1, 2]
    assert 0 not in ref.clusters_with_term.get(0, set())
    cluster, sim, new = ref.add(np.array([0]), np.array([1.0]))
    assert cluster == 1 and new and sim == 0.0
