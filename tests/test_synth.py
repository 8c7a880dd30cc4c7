"""Synthetic text corpora (gputext.datasets.synth): determinism, shapes, statistics, chunked writing."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.datasets import synth
from gputext.datasets.synth import BLOCK_DOCS, TextSpec, make_corpus, write_synth
from gputext.errors import InputError
from gputext.io import Corpus, read_corpus, write_corpus
from gputext.io.weighting import Reference, apply_weighting

SMALL = dict(n_docs=1500, n_terms=3000, terms_per_doc=30, n_classes=5)


def assert_same_corpus(a: Corpus, b: Corpus) -> None:
    assert a.X.shape == b.X.shape
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(a.X, name), getattr(b.X, name), err_msg=name)
    np.testing.assert_array_equal(a.doc_ids.astype(str), b.doc_ids.astype(str))
    np.testing.assert_array_equal(a.terms.astype(str), b.terms.astype(str))
    np.testing.assert_array_equal(a.obs["label"].codes, b.obs["label"].codes)
    np.testing.assert_array_equal(a.obs["label"].categories.astype(str), b.obs["label"].categories.astype(str))
    for key in ("df", "idf"):
        np.testing.assert_array_equal(a.var[key], b.var[key], err_msg=key)
    assert set(a.obsm) == set(b.obsm)
    for key in a.obsm:
        assert (a.obsm[key] != b.obsm[key]).nnz == 0
        np.testing.assert_array_equal(a.obsm[key].indices, b.obsm[key].indices)


def raw_counts(**params) -> sp.csr_matrix:
    return make_corpus(**{**params, "weighting": "none"}).X


# ----------------------------------------------------------------------------- determinism


def test_same_seed_gives_identical_arrays_and_another_seed_does_not():
    a, b = make_corpus(**SMALL, seed=7), make_corpus(**SMALL, seed=7)
    assert_same_corpus(a, b)
    c = make_corpus(**SMALL, seed=8)
    assert c.X.nnz != a.X.nnz or not np.array_equal(c.X.indices, a.X.indices)
    assert not np.array_equal(c.obs["label"].codes, a.obs["label"].codes)


def test_thread_count_does_not_change_the_output():
    params = dict(n_docs=BLOCK_DOCS + 3000, n_terms=5000, terms_per_doc=12, n_classes=4, seed=3)
    assert_same_corpus(make_corpus(**params, threads=1), make_corpus(**params, threads=3))


def test_model_seed_fixes_vocabulary_and_topics_independently_of_the_document_seed():
    # same model, other documents: class centroids of one corpus match the same classes of the other
    a = make_corpus(**SMALL, seed=1, model_seed=5, weighting="tf")
    b = make_corpus(**SMALL, seed=2, model_seed=5, weighting="tf")
    assert not np.array_equal(a.X.indices[:100], b.X.indices[:100])
    ca, cb = class_centroids(a), class_centroids(b)
    assert np.array_equal(np.argmax(ca @ cb.T, axis=1), np.arange(SMALL["n_classes"]))


# ----------------------------------------------------------------------------- shapes, dtypes, names


def test_shapes_dtypes_and_names():
    c = make_corpus(**SMALL)
    X = c.X
    assert X.shape == (1500, 3000)
    assert X.data.dtype == np.float32 and X.indices.dtype == np.int32  # scipy keeps indptr int32 while it fits
    assert X.has_canonical_format
    for i in range(0, 1500, 97):
        row = X.indices[X.indptr[i]:X.indptr[i + 1]]
        assert np.all(np.diff(row) > 0)
    assert list(c.doc_ids[:3]) == ["d0", "d1", "d2"] and c.doc_ids[-1] == "d1499"
    assert list(c.terms[:3]) == ["t0", "t1", "t2"] and c.terms[-1] == "t2999"
    label = c.obs["label"]
    assert label.codes.dtype == np.int32 and list(label.categories) == ["c0", "c1", "c2", "c3", "c4"]
    assert set(np.unique(label.codes)) == set(range(5))
    assert c.var["df"].dtype == np.int64 and c.var["idf"].dtype == np.float64
    assert c.params["weighting"] == "tfidf" and c.params["idf_n_docs"] == 1500
    assert c.params["synth"]["seed"] == 0 and c.params["synth"]["model_seed"] == 0
    assert "labels" not in c.obsm


@pytest.mark.parametrize("n_terms", [7, 1000, 3_000_000, 2**30 + 5])
def test_token_counting_equals_scipy_duplicate_summing(n_terms):
    rng = np.random.default_rng(n_terms)
    n_rows = 3000
    background = np.sort(rng.integers(0, n_rows, 20000)).astype(np.int32)
    topic = np.sort(rng.integers(0, n_rows, 5000)).astype(np.int32)
    rows = np.concatenate([background, topic])
    terms = rng.integers(0, n_terms, rows.size).astype(np.int32)
    indptr, indices, counts = synth._count_rows(rows, terms, n_rows, n_terms, len(background))
    ref = sp.coo_matrix((np.ones(rows.size), (rows, terms)), shape=(n_rows, n_terms)).tocsr()
    ref.sum_duplicates()
    np.testing.assert_array_equal(indptr, ref.indptr)
    np.testing.assert_array_equal(indices, ref.indices)
    np.testing.assert_array_equal(counts, ref.data)


def test_label_names_sort_in_code_order():
    names = synth.label_names(12)
    assert list(names[:2]) == ["c00", "c01"] and names[-1] == "c11"
    assert list(sorted(names)) == list(names)


# ----------------------------------------------------------------------------- statistics


def test_background_rank_frequency_slope_is_about_minus_one_over_the_head():
    X = raw_counts(n_docs=8000, n_terms=40000, terms_per_doc=60, n_classes=4, topic_weight=0.0, seed=1)
    freq = np.sort(np.asarray(X.sum(axis=0)).ravel())[::-1]
    ranks = np.arange(1, len(freq) + 1)
    slope = np.polyfit(np.log(ranks[10:1000]), np.log(freq[10:1000]), 1)[0]
    assert -1.15 < slope < -0.85, slope
    # the head is flattened (Zipf-Mandelbrot offset): the top term is not in every document
    df = np.diff(sp.csc_matrix(X).indptr)
    assert 0.2 < df.max() / X.shape[0] < 0.95


@pytest.mark.parametrize("terms_per_doc,n_terms", [(12, 5000), (40, 2000), (60, 200000), (150, 30000)])
def test_median_distinct_terms_per_document_is_near_the_target(terms_per_doc, n_terms):
    X = raw_counts(n_docs=3000, n_terms=n_terms, terms_per_doc=terms_per_doc, n_classes=6, seed=2)
    median = np.median(np.diff(X.indptr))
    assert abs(median - terms_per_doc) <= 0.1 * terms_per_doc, (median, terms_per_doc)
    assert X.data.max() > 1  # tokens repeat: term frequencies above 1 exist


def class_centroids(c: Corpus) -> np.ndarray:
    X = c.X.toarray().astype(np.float64)
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    codes = c.obs["label"].codes
    cent = np.stack([X[codes == k].mean(axis=0) for k in range(len(c.obs["label"].categories))])
    return cent / np.linalg.norm(cent, axis=1, keepdims=True)


def test_class_structure_nearest_centroid_accuracy_is_well_above_chance():
    c = make_corpus(n_docs=3000, n_terms=2000, terms_per_doc=40, n_classes=6, seed=4)
    train, test = c.take(np.arange(2400)), c.take(np.arange(2400, 3000))
    cent = class_centroids(train)
    Xt = test.X.toarray()
    predicted = np.argmax(Xt @ cent.T, axis=1)
    accuracy = np.mean(predicted == test.obs["label"].codes)
    assert accuracy > 0.8, accuracy  # chance is 1/6
    # without topics there is no structure: accuracy near chance
    flat = make_corpus(n_docs=3000, n_terms=2000, terms_per_doc=40, n_classes=6, seed=4, topic_weight=0.0)
    cent = class_centroids(flat.take(np.arange(2400)))
    flat_acc = np.mean(np.argmax(flat.X[2400:].toarray() @ cent.T, axis=1) == flat.obs["label"].codes[2400:])
    assert flat_acc < 0.35, flat_acc


def test_multilabel_targets():
    c = make_corpus(n_docs=4000, n_terms=4000, terms_per_doc=30, n_classes=8, multilabel=True, max_labels=3, seed=5)
    Y = c.obsm["labels"]
    assert Y.shape == (4000, 8) and Y.dtype == np.float32
    assert np.all(Y.data == 1.0)
    per_doc = np.diff(Y.indptr)
    assert per_doc.min() == 1 and per_doc.max() == 3
    # 1 + Binomial(2, 0.35) labels: P(more than one) = 1 - 0.65^2
    assert abs(np.mean(per_doc > 1) - (1 - 0.65 ** 2)) < 0.04
    for i in range(0, 4000, 37):
        row = Y.indices[Y.indptr[i]:Y.indptr[i + 1]]
        assert np.all(np.diff(row) > 0)  # sorted, distinct
        assert c.obs["label"].codes[i] in row  # obs/label is one of them (the primary)
    assert list(c.params["label_names"]) == [f"c{k}" for k in range(8)]
    # secondary labels carry topic terms too: among the classes other than the primary, the most
    # similar class centroid is one of the document's secondary labels far more often than chance
    cent = class_centroids(make_corpus(n_docs=4000, n_terms=4000, terms_per_doc=30, n_classes=8, seed=5,
                                       model_seed=5, weighting="tf"))
    sims = c.X.toarray() @ cent.T
    primary = c.obs["label"].codes
    sims[np.arange(4000), primary] = -np.inf
    best_other = np.argmax(sims, axis=1)
    has_secondary = per_doc > 1
    hit = np.array([best_other[i] in Y.indices[Y.indptr[i]:Y.indptr[i + 1]] for i in np.flatnonzero(has_secondary)])
    chance = np.mean((per_doc[has_secondary] - 1) / 7)
    assert hit.mean() > chance + 0.3, (hit.mean(), chance)


def test_invalid_parameters_are_refused_with_a_clear_message():
    with pytest.raises(InputError, match="n_docs must be >= 1"):
        TextSpec(0, 100, 10, 2)
    with pytest.raises(InputError, match="terms_per_doc"):
        TextSpec(10, 100, 80, 2)
    with pytest.raises(InputError, match="too many for a vocabulary"):
        TextSpec(10, 40, 5, 100)
    with pytest.raises(InputError, match="weighting must be one of"):
        TextSpec(10, 100, 10, 2, weighting="bm25")
    with pytest.raises(InputError, match="max_labels"):
        TextSpec(10, 100, 10, 2, multilabel=True, max_labels=3)


# ----------------------------------------------------------------------------- weighting


@pytest.mark.parametrize("weighting", ["tfidf", "tficf", "tf", "binary", "none"])
def test_weighting_is_exactly_corpus_builds(weighting):
    counts = raw_counts(**SMALL, seed=6)
    got = make_corpus(**SMALL, seed=6, weighting=weighting).X
    expected = apply_weighting(counts, weighting)
    assert (got != expected).nnz == 0
    np.testing.assert_array_equal(got.indices, expected.indices)


def test_tfidf_equals_a_float64_reference():
    counts = raw_counts(**SMALL, seed=9).toarray().astype(np.float64)
    n = counts.shape[0]
    df = np.count_nonzero(counts, axis=0)
    with np.errstate(divide="ignore"):
        idf = np.where(df > 0, np.log(n / np.maximum(df, 1)), 0.0)
    W = counts * idf
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    c = make_corpus(**SMALL, seed=9)
    np.testing.assert_allclose(c.X.toarray(), W, rtol=2e-7, atol=1e-8)
    np.testing.assert_array_equal(c.var["df"], df)
    np.testing.assert_allclose(c.var["idf"], idf, rtol=1e-15)


def test_idf_from_reference_weights_queries_with_the_index_idf(tmp_path):
    index_path = str(tmp_path / "index.h5")
    write_synth(index_path, 2000, 3000, 30, 5, seed=0, model_seed=11)
    index = read_corpus(index_path)
    queries = make_corpus(300, 3000, 30, 5, seed=1, idf_from=index_path)
    np.testing.assert_array_equal(queries.var["idf"], index.var["idf"])
    np.testing.assert_array_equal(queries.var["df"], index.var["df"])
    assert queries.params["idf_n_docs"] == 2000
    assert queries.params["synth"]["model_seed"] == 11  # inherited: same vocabulary order and topics
    counts = make_corpus(300, 3000, 30, 5, seed=1, model_seed=11, weighting="none").X
    expected = apply_weighting(counts, "tfidf", Reference(index.var["df"], 2000))
    assert (queries.X != expected).nnz == 0
    # the queries' classes match the index's classes
    assert np.array_equal(np.argmax(class_centroids(queries) @ class_centroids(index).T, axis=1), np.arange(5))
    # the file written with --idf-from holds the same arrays
    q_path = str(tmp_path / "q.h5")
    write_synth(q_path, 300, 3000, 30, 5, seed=1, idf_from=index_path)
    assert_same_corpus(read_corpus(q_path), queries)


def test_idf_from_refuses_another_vocabulary(tmp_path):
    ref = str(tmp_path / "ref.h5")
    write_synth(ref, 100, 500, 10, 2)
    with pytest.raises(InputError, match="has 500 terms but the synthetic corpus has n_terms = 600"):
        make_corpus(50, 600, 10, 2, idf_from=ref)
    foreign = str(tmp_path / "foreign.h5")
    write_corpus(Corpus(sp.csr_matrix(np.eye(3, dtype=np.float32)), terms=np.array(["a", "b", "c"], dtype=object),
                        var={"df": np.ones(3, dtype=np.int64)}), foreign)
    with pytest.raises(InputError, match="expected the synthetic t0..t2"):
        make_corpus(5, 3, 1, 1, idf_from=foreign)
    with pytest.raises(InputError, match="no such file"):
        make_corpus(5, 500, 10, 2, idf_from=str(tmp_path / "missing.h5"))


# ----------------------------------------------------------------------------- chunked writing


@pytest.mark.parametrize("options", [
    dict(weighting="tfidf"),
    dict(weighting="tf", multilabel=True, max_labels=3),
    dict(weighting="tficf", n_classes=3),
])
def test_chunked_file_equals_in_memory_generation(tmp_path, options):
    params = {**dict(n_docs=BLOCK_DOCS + 1234, n_terms=6000, terms_per_doc=8, n_classes=5, seed=12), **options}
    path = str(tmp_path / "c.h5")
    summary = write_synth(path, **params, threads=2)
    on_disk = read_corpus(path)
    in_memory = make_corpus(**params, threads=1)
    assert_same_corpus(on_disk, in_memory)
    assert summary["nnz"] == in_memory.X.nnz and summary["n_docs"] == params["n_docs"]
    assert on_disk.params["synth"]["block_docs"] == BLOCK_DOCS
    with h5py.File(path, "r") as f:
        assert f["X/data"].dtype == np.float32 and f["X/indices"].dtype == np.int32
        assert f["X/indptr"].dtype == np.int64 and f["var/df"].dtype == np.int64 and f["var/idf"].dtype == np.float64
        assert f["obs/label/codes"].dtype == np.int32
    assert on_disk.params["weighting"] == params["weighting"]


def test_compressed_output_holds_the_same_arrays(tmp_path):
    plain, packed = str(tmp_path / "a.h5"), str(tmp_path / "b.h5")
    write_synth(plain, 800, 1000, 20, 3, compression="none")
    write_synth(packed, 800, 1000, 20, 3, compression="gzip")
    assert_same_corpus(read_corpus(plain), read_corpus(packed))


def test_a_failure_midway_leaves_no_output(tmp_path, monkeypatch):
    real = synth.generate_block

    def failing(spec, b):
        if b == 1:
            raise RuntimeError("boom")
        return real(spec, b)

    monkeypatch.setattr(synth, "generate_block", failing)
    path = tmp_path / "out.h5"
    with pytest.raises(RuntimeError, match="boom"):
        write_synth(str(path), BLOCK_DOCS + 10, 2000, 5, 2, threads=1)
    assert list(tmp_path.iterdir()) == []


_RSS_SCRIPT = """
import json, resource, sys
from gputext.datasets.synth import write_synth
n_docs, path = int(sys.argv[1]), sys.argv[2]
write_synth(path, n_docs, 50000, 40, 10, seed=0, threads=2)
print(json.dumps({"peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _peak_rss_kb(n_docs: int, path: str) -> int:
    out = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(n_docs), path], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_kb"]


@pytest.mark.slow
def test_peak_memory_stays_flat_from_100k_to_500k_documents(tmp_path):
    """500k documents of 40 terms hold 20M+ non-zeros (~200 MB as CSR): written in blocks, the
    peak RSS must not grow by more than a few blocks' worth."""
    small = _peak_rss_kb(100_000, str(tmp_path / "small.h5"))
    large = _peak_rss_kb(500_000, str(tmp_path / "large.h5"))
    assert os.path.getsize(tmp_path / "large.h5") > 150e6  # the data really is that big
    growth_mb = (large - small) / 1024
    assert growth_mb < 50, f"peak RSS grew by {growth_mb:.0f} MB from 100k to 500k documents"
