"""The block-starts table (kernels.postings.block_starts_kernel / block_starts_cpu) and the ranges
read from it (kernels.blocked.term_range_*): each (term, document block)'s part of the term's
posting list, equal to the binary searches it replaces, for long, short, empty and clustered lists."""
import numpy as np
import pytest

from gputext.kernels.blocked import block_range_cpu, term_range_cpu
from gputext.kernels.postings import block_starts_cpu, block_table_terms


def _lists(seed=0, n_docs=300):
    """term_ptr int64 / post_doc int32 of 9 lists over n_docs documents, each sorted: long random,
    short random, empty, one posting, a run of consecutive documents inside one block and across
    blocks (the gallop's long walks), every document, the first and the last document."""
    rng = np.random.default_rng(seed)
    lists = [np.sort(rng.choice(n_docs, 200, replace=False)), np.sort(rng.choice(n_docs, 5, replace=False)),
             np.zeros(0, np.int64), np.array([n_docs // 2]), np.arange(40, 70), np.arange(0, 130),
             np.arange(n_docs), np.array([0]), np.array([n_docs - 1])]
    term_ptr = np.r_[0, np.cumsum([len(x) for x in lists])].astype(np.int64)
    return term_ptr, np.concatenate(lists).astype(np.int32)


def block_table(term_ptr, post_doc, n_docs, docs, terms):
    """(brow, bstart) of the block-starts table with rows for ``terms`` (blocks of ``docs`` of
    n_docs documents), by the twin; terms None: the placeholder (no table)."""
    if terms is None:
        return np.full(1, -1, np.int32), np.zeros((1, 1), np.int32)
    n_blocks = -(-n_docs // docs)
    brow = np.full(term_ptr.size - 1, -1, np.int32)
    brow[terms] = np.arange(len(terms), dtype=np.int32)
    bstart = np.empty((len(terms), n_blocks + 1), np.int32)
    block_starts_cpu(term_ptr, post_doc, np.asarray(terms, np.int32), docs, bstart)
    return brow, bstart


@pytest.mark.parametrize("docs", [1, 7, 32, 300, 512])
def test_block_starts_are_each_blocks_first_posting(docs):
    term_ptr, post_doc = _lists()
    terms = np.arange(term_ptr.size - 1, dtype=np.int32)
    _, bstart = block_table(term_ptr, post_doc, 300, docs, terms)
    for r, t in enumerate(terms):
        lst = post_doc[term_ptr[t]:term_ptr[t + 1]]
        want = np.searchsorted(lst, np.arange(bstart.shape[1]) * docs, side="left")
        assert np.array_equal(bstart[r], want), t


@pytest.mark.parametrize("docs", [1, 7, 32, 300, 512])
@pytest.mark.parametrize("rows", ["all", "some", "none", "placeholder"])
def test_term_range_equals_the_binary_searches(docs, rows):
    # every (term, block): the table's rows where a term has one, the short-list gallop where it has
    # none, block_range's two searches without a table; the same ranges either way
    n_docs = 300
    term_ptr, post_doc = _lists(seed=docs)
    n_terms = term_ptr.size - 1
    terms = {"all": np.arange(n_terms), "some": [0, 4, 6], "none": []}.get(rows)
    brow, bstart = block_table(term_ptr, post_doc, n_docs, docs, terms)
    for t in range(n_terms):
        for b in range(-(-n_docs // docs)):
            d_lo, d_hi = b * docs, min(n_docs, (b + 1) * docs)
            want = block_range_cpu(post_doc, term_ptr[t], term_ptr[t + 1], d_lo, d_hi)
            assert term_range_cpu(t, b, d_lo, d_hi, term_ptr, post_doc, brow, bstart) == want, (t, b)


def test_table_terms_take_the_longest_lists_within_the_budget():
    df = np.array([5, 100, 0, 40, 3, 100, 20])
    # 10 blocks: rows of 11 entries; lists of >= 10 postings qualify (1, 3, 5, 6), longest first
    assert block_table_terms(df, 10, 1000).tolist() == [1, 3, 5, 6]
    assert block_table_terms(df, 10, 33).tolist() == [1, 3, 5]  # three rows fit
    assert block_table_terms(df, 10, 22).tolist() == [1, 5]  # the two longest (tie: lower term first)
    assert block_table_terms(df, 10, 10).tolist() == []
    assert block_table_terms(df, 200, 10 ** 6).tolist() == []  # no list has a posting a block
    assert block_table_terms(df, 10, 1000).dtype == np.int32


@pytest.mark.cudasim
def test_block_starts_kernel_equals_twin_in_simulator():
    # kernels.postings.block_starts_kernel: 4 rows x 6 entries (blocks of 64 of 300 documents), 32 threads a block
    from numba import cuda

    from gputext.kernels.postings import block_starts_kernel
    term_ptr, post_doc = _lists()
    terms = np.array([0, 2, 5, 8], np.int32)
    _, want = block_table(term_ptr, post_doc, 300, 64, terms)
    got = cuda.to_device(np.full(want.shape, -7, np.int32))
    block_starts_kernel[-(-want.size // 32), 32](cuda.to_device(term_ptr), cuda.to_device(post_doc),
                                                 cuda.to_device(terms), 64, got)
    assert np.array_equal(got.copy_to_host(), want)
