"""The unit select (kernels.unit_select, issue 19): each query's top k from its units' maxima.

The CPU twins against a direct top-k of the same keys (the tie rule: key descending, document
ascending) on random keys with heavy ties, -inf keys, rows with fewer than k documents and
geometries whose blocks are not whole multiples of their threads; the kernels in the simulator
against the twins, with a candidate cap small enough that both gathers refine their theta; the
accumulation's keys epilogue against accumulate_rows_cpu + row_keys_cpu + unit_maxima_cpu."""
import numpy as np
import pytest

from engine_reference import random_corpus
from gputext.engine import Index
from gputext.kernels import scoring
from gputext.kernels.unit_select import (entry_doc_cpu, row_keys_cpu, unit_cap, unit_doc_cpu, unit_first_cpu,
                                         unit_maxima_cpu, unit_threads, unit_topk_cpu)

# (n_docs, docs a block, accumulation threads, threads a unit)
LAYOUTS = [(70, 16, 8, 2), (70, 20, 8, 4), (64, 16, 8, 8), (50, 12, 8, 1), (9, 16, 8, 4)]


def direct_topk(keys, n_docs, k):
    """(docs int32 (rows, k), keys float64 (rows, k)) of each row by a full sort, -1 / -inf past its
    documents with a key above -inf."""
    rows = keys.size // n_docs
    out_doc = np.full((rows, k), -1, np.int32)
    out_key = np.full((rows, k), -np.inf)
    for r in range(rows):
        row = keys[r * n_docs:(r + 1) * n_docs]
        ok = np.flatnonzero(row > -np.inf)
        order = ok[np.lexsort((ok, -row[ok]))][:k]
        out_doc[r, :order.size] = order
        out_key[r, :order.size] = row[order]
    return out_doc, out_key


def tied_keys(rows, n_docs, seed, levels=3):
    """Keys from a few levels (most documents tie), some -inf, row 1 all -inf but two, row 2 all 0,
    row 3 ascending (the best units hold many documents above the k-th unit maximum: with a small
    cap the entries' gather refines)."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, levels, size=(rows, n_docs)).astype(np.float64) / levels
    keys[rng.random((rows, n_docs)) < 0.2] = -np.inf
    if rows > 2:
        keys[1] = -np.inf
        keys[1, [n_docs // 2, n_docs - 1]] = [0.5, 0.5]
        keys[2] = 0.0
    if rows > 3:
        keys[3] = np.arange(n_docs)
    return keys.ravel()


def twin_topk(keys, n_docs, docs, block, unit, k):
    n_units = -(-n_docs // docs) * (block // unit)
    rows = keys.size // n_docs
    ukey, udoc = np.empty((rows, n_units)), np.empty((rows, n_units), np.int32)
    unit_maxima_cpu(keys, n_docs, docs, block, unit, ukey, udoc)
    out_doc, out_key = np.empty((rows, k), np.int32), np.empty((rows, k))
    unit_topk_cpu(keys, ukey, udoc, n_docs, docs, block, unit, k, out_doc, out_key)
    return (out_doc, out_key), ukey, udoc


def test_units_cover_every_document_once():
    for n_docs, docs, block, unit in LAYOUTS:
        n_units = -(-n_docs // docs) * (block // unit)
        per_unit = unit * -(-docs // block)
        seen = [unit_doc_cpu(u, j, docs, block, unit) for u in range(n_units) for j in range(per_unit)]
        seen = [d for d in seen if 0 <= d < n_docs]
        assert sorted(seen) == list(range(n_docs))
        shift = unit.bit_length() - 1
        for d in range(n_docs):  # the unit select's view: d among its unit's entries from the unit's first document
            first = unit_first_cpu(d, docs, block, unit)
            assert d in [entry_doc_cpu(first, j, unit, shift, block) for j in range(per_unit)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_twin_equals_a_full_sort_on_tied_keys(layout, k):
    n_docs, docs, block, unit = layout
    keys = tied_keys(5, n_docs, seed=n_docs + k)
    got, _, _ = twin_topk(keys, n_docs, docs, block, unit, k)
    want = direct_topk(keys, n_docs, k)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_unit_threads_balance_the_two_reads():
    # 10^6 and 10^7 documents in blocks of 5120 at 256 threads, k = 30: units of 16 and 64 threads
    assert unit_threads(10 ** 6, 5120, 256, 30) == 16
    assert unit_threads(10 ** 7, 5120, 256, 30) == 64
    assert unit_threads(100, 5120, 256, 30) == 1  # one block: one unit a thread
    assert unit_cap(30, 2048) == 2048 and unit_cap(5, 4) == 8 and unit_cap(8, 8) == 16
    assert unit_cap(30, 1000) == 1024  # rounded up to a power of two (the refining sort is bitonic)
    assert unit_cap(30, 8192, 1024) == 2048 and unit_cap(1024, 64, 1024) == 2048  # within 48 KB, above k


def _rows(metric, seed=3):
    """Int64 score rows of 4 queries (one of them document 5, left out) against 70 documents, with
    their qinfo and norm terms: (acc (4 * 70,), qinfo (4, 4), dn, code)."""
    from gputext.kernels.blocked import posting_value_cpu
    X = random_corpus(70, 15, 0.25, seed=seed, signed=metric == "dot", duplicates=((3, 64), (3, 9)))
    Q = random_corpus(4, 15, 0.35, seed=seed + 1)
    index = Index.from_csr(X)
    p = index.cpu()
    code = scoring.METRICS[metric]
    scale, qn = scoring.query_stats(Q.indptr.astype(np.int64), Q.indices, Q.data, index.term_maxabs, code)
    qinfo = np.zeros((4, 4))
    qinfo[:, 0], qinfo[:, 1], qinfo[:, 2] = scale, qn, [-1, 5, -1, -1]
    acc = np.zeros(4 * 70, np.int64)
    for q in range(4):
        for t, w in zip(Q.indices[Q.indptr[q]:Q.indptr[q + 1]], Q.data[Q.indptr[q]:Q.indptr[q + 1]]):
            for r in range(p.term_ptr[t], p.term_ptr[t + 1]):
                acc[q * 70 + p.post_doc[r]] += posting_value_cpu(code, w, p.post_w[r], scale[q])
    return acc, qinfo, index.norm_terms(code), code, (X, Q, p)


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2", "l1"])
def test_twin_pipeline_equals_the_keys_full_sort(metric):
    acc, qinfo, dn, code, _ = _rows(metric)
    keys = np.empty(4 * 70)
    row_keys_cpu(acc, qinfo, dn, code, 70, 0, keys)
    assert keys[70 + 5] == -np.inf
    want = [scoring.score_key_cpu(code, acc[q * 70 + d], qinfo[q, 0], qinfo[q, 1], dn[d]) for q in (0, 2)
            for d in range(70)]
    assert np.array_equal(np.r_[keys[:70], keys[140:210]], want)
    for n_docs, docs, block, unit in LAYOUTS[:4]:
        got, _, _ = twin_topk(keys, 70, docs, block, unit, 6)
        ref = direct_topk(keys, 70, 6)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])


@pytest.mark.cudasim
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k,block,cap", [(3, 8, 4), (8, 8, 16), (2, 16, 32)])
def test_kernel_equals_twin_in_simulator(layout, k, block, cap):
    # cap 4 at k = 3: both gathers overflow on the tied rows and refine their theta
    from numba import cuda

    from gputext.kernels.unit_select import unit_topk_kernel
    n_docs, docs, b_acc, unit = layout
    keys = tied_keys(4, n_docs, seed=7 * n_docs + k)
    want, ukey, udoc = twin_topk(keys, n_docs, docs, b_acc, unit, k)
    out_doc = cuda.to_device(np.zeros((6, 1, k), np.int32))
    out_key = cuda.to_device(np.zeros((6, 1, k)))
    unit_topk_kernel(block, unit_cap(k, cap))[4, block](cuda.to_device(keys), cuda.to_device(ukey),
                                                         cuda.to_device(udoc), n_docs, docs, b_acc, unit, k,
                                                         out_doc, out_key, 2)
    got_doc, got_key = out_doc.copy_to_host()[2:, 0], out_key.copy_to_host()[2:, 0]
    assert np.array_equal(got_doc, want[0]) and np.array_equal(got_key, want[1])


@pytest.mark.cudasim
@pytest.mark.filterwarnings("ignore:overflow encountered")  # split counters: uint32 words wrap in the simulator too
@pytest.mark.parametrize("docs,unit", [(16, 2), (20, 8), (32, 1)])
def test_accumulation_keys_epilogue_equals_twins_in_simulator(docs, unit):
    # kernels.blocked.rows_accumulate_kernel with unit > 0: tiles of 3 rows (queries 1..3 of qinfo),
    # every posting of the queries as one segment each
    from numba import cuda

    from gputext.kernels.blocked import rows_accumulate_kernel
    acc, qinfo, dn, code, (X, Q, p) = _rows("cosine")
    n = 70
    seg = np.c_[Q.indices, np.repeat(np.arange(4), np.diff(Q.indptr))].astype(np.int32)
    seg = seg[seg[:, 1] >= 1] - np.array([0, 1], np.int32)
    w = Q.data[Q.indptr[1]:].astype(np.float32)
    keys = np.empty(3 * n)
    row_keys_cpu(acc[n:], qinfo, dn, code, n, 1, keys)
    n_units = -(-n // docs) * (8 // unit)
    ukey, udoc = np.empty((3, n_units)), np.empty((3, n_units), np.int32)
    unit_maxima_cpu(keys, n, docs, 8, unit, ukey, udoc)
    d_keys = cuda.to_device(np.full(3 * n, 7.0))
    d_ukey, d_udoc = cuda.to_device(np.zeros((3, n_units))), cuda.to_device(np.zeros((3, n_units), np.int32))
    args = [cuda.to_device(a) for a in (np.zeros(len(seg) + 1, np.int64), seg, w, qinfo, p.term_ptr, p.post_doc,
                                        p.post_w)]
    rows_accumulate_kernel(8, docs, 3, unit)[-(-n // docs), 8](*args, code, n, d_keys, 0, 0, len(seg), 1,
                                                               cuda.to_device(dn), d_ukey, d_udoc,
                                                               cuda.to_device(np.full(1, -1, np.int32)),
                                                               cuda.to_device(np.zeros((1, 1), np.int32)),
                                                               cuda.to_device(np.zeros((1, 1), np.int64)),
                                                               cuda.to_device(np.zeros((1, 1), np.int32)))
    assert np.array_equal(d_keys.copy_to_host(), keys)
    assert np.array_equal(d_ukey.copy_to_host(), ukey) and np.array_equal(d_udoc.copy_to_host(), udoc)
