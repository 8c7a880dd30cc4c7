"""Tokenizer rules, stopword lists and term counting against an independent reference."""
import re

import numpy as np
import pytest

from gputext.errors import InputError
from gputext.io.tokenize import count_terms, load_stopwords, tokenize


def reference_tokens(text, stop=frozenset()):
    """Independent rule: split the lowercased text on runs of non-alphanumerics or underscores."""
    return [w for w in re.split(r"[\W_]+", text.lower()) if w and w not in stop]


def test_tokens_are_lowercased_runs_of_unicode_letters_and_digits():
    text = "Hello, World! foo_bar don't 486DX2 e-mail Ärger naïve 1993 ΑΘΗΝΑ"
    assert tokenize(text) == ["hello", "world", "foo", "bar", "don", "t", "486dx2", "e", "mail", "ärger",
                              "naïve", "1993", "αθηνα"]


def test_builtin_english_stopwords_hold_function_words_only():
    stop = load_stopwords("english")
    for word in ("the", "and", "of", "is", "don", "t", "which"):
        assert word in stop
    for word in ("computer", "god", "space", "price"):
        assert word not in stop
    assert load_stopwords("none") == frozenset()


def test_stopword_file_is_lowercased_and_comments_dropped(tmp_path):
    path = tmp_path / "stop.txt"
    path.write_text("# my list\nFoo\n  bar  # trailing comment\n\n")
    assert load_stopwords(str(path)) == {"foo", "bar"}


def test_missing_stopword_file_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="expected 'english', 'none' or an existing word-list file"):
        load_stopwords(str(tmp_path / "nope.txt"))


def random_texts(n_docs, seed):
    rng = np.random.default_rng(seed)
    pool = ["alpha", "Beta", "gamma_ray", "the", "and", "x1", "ÉCOLE", "42", "don't", "zeta", "e-mail", "Ωmega"]
    seps = [" ", ", ", "\n", "\t", "!? ", "--"]
    texts = []
    for _ in range(n_docs):
        k = int(rng.integers(0, 12))
        parts = []
        for _ in range(k):
            parts.append(pool[int(rng.integers(len(pool)))])
            parts.append(seps[int(rng.integers(len(seps)))])
        texts.append("".join(parts))
    return texts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_count_terms_matches_reference_counts(seed):
    texts = random_texts(40, seed)
    stop = load_stopwords("english")
    counted = count_terms(texts, stop)
    tokens = [reference_tokens(t, stop) for t in texts]
    vocab = sorted({w for ts in tokens for w in ts})
    dense = np.zeros((len(texts), len(vocab)))
    col = {w: j for j, w in enumerate(vocab)}
    for i, ts in enumerate(tokens):
        for w in ts:
            dense[i, col[w]] += 1
    assert list(counted.terms) == vocab
    np.testing.assert_array_equal(counted.counts.toarray(), dense)
    assert counted.n_tokens == int(dense.sum())
    assert counted.counts.has_sorted_indices


def test_vocabulary_does_not_depend_on_document_order():
    texts = random_texts(30, 5)
    a = count_terms(texts)
    b = count_terms(texts[::-1])
    assert list(a.terms) == list(b.terms)
    np.testing.assert_array_equal(a.counts.toarray()[::-1], b.counts.toarray())


def test_fixed_vocabulary_drops_and_counts_out_of_vocabulary_tokens():
    vocab = {"zeta": 0, "alpha": 1}
    counted = count_terms(["alpha beta beta zeta", "gamma", "ALPHA alpha"], vocabulary=vocab)
    np.testing.assert_array_equal(counted.counts.toarray(), [[1, 1], [0, 0], [0, 2]])
    assert list(counted.terms) == ["zeta", "alpha"]
    assert counted.n_oov == 3 and counted.n_oov_terms == 2
    assert vocab == {"zeta": 0, "alpha": 1}  # the caller's vocabulary is not modified
