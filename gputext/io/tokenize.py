"""Tokenizer and term counting shared by `gputext corpus build` and every family that turns raw
text into term vectors (the stream clusterer tokenises arriving documents with these rules).

Rules (decided here, documented in docs/corpus.md):

- Text is lowercased with ``str.lower()`` (Unicode aware: "Ärger" -> "ärger").
- A token is a maximal run of Unicode letters and digits: the regex ``[^\\W_]+``, i.e. ``\\w+``
  without the underscore. Underscores separate tokens ("foo_bar" -> "foo", "bar"), so do
  apostrophes and hyphens ("don't" -> "don", "t"; "e-mail" -> "e", "mail"). Tokens made only of
  digits are kept ("486", "1993"): in news and e-mail they name things (CPU models, years);
  drop them with a stopword file or ``--min-df`` if you do not want them. No minimum length.
- Stopwords are removed after lowercasing: ``english`` (the built-in list in
  gputext/data/stopwords_english.txt), ``none``, or a path to a file with one word a line
  (``#`` starts a comment; words are lowercased).

Counting is one pass over each document: ``findall`` on the lowercased text, a C-level
``Counter`` per document, one dict lookup per distinct term of the document, then numpy CSR
assembly. Terms are numbered in order of first appearance while counting and renumbered in
sorted (code point) order at the end, so the vocabulary does not depend on the document order.
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from typing import Iterable

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from ..progress import NULL, Progress

TOKEN_PATTERN = r"[^\W_]+"
_TOKEN_RE = re.compile(TOKEN_PATTERN)
STOPWORD_CHOICES = ("english", "none")


def tokenize(text: str) -> list[str]:
    """Lowercased tokens of ``text`` in order (stopwords not removed)."""
    return _TOKEN_RE.findall(text.lower())


def _parse_word_list(lines: Iterable[str]) -> frozenset[str]:
    words = set()
    for line in lines:
        word = line.split("#", 1)[0].strip().lower()
        if word:
            words.add(word)
    return frozenset(words)


def load_stopwords(spec: str | None) -> frozenset[str]:
    """``"english"`` (built-in list), ``"none"``/``None`` (empty set), or a path to a word file."""
    if spec is None or spec == "none":
        return frozenset()
    if spec == "english":
        text = resources.files("gputext").joinpath("data/stopwords_english.txt").read_text("utf-8")
        return _parse_word_list(text.splitlines())
    if not os.path.exists(spec):
        raise InputError(f"--stopwords {spec!r}: expected 'english', 'none' or an existing word-list file; "
                         "no such file")
    if os.path.isdir(spec):
        raise InputError(f"--stopwords {spec!r} is a directory, expected a word-list file (one word a line)")
    with open(spec, "rb") as fh:
        data = fh.read()
    if b"\x00" in data:
        raise InputError(f"--stopwords {spec!r}: binary data (NUL bytes), expected a text file with one word a line")
    return _parse_word_list(data.decode("utf-8", "replace").splitlines())


@dataclass
class TermCounts:
    """Raw term counts of a list of documents.

    counts   csr_matrix (n_docs, n_terms) float64 counts, indices sorted within rows
    terms    (n_terms,) object array of str; column j of ``counts`` is ``terms[j]``
    n_tokens total token occurrences kept (after stopwords and, with a fixed vocabulary, OOV removal)
    n_oov    token occurrences dropped because they are not in the fixed vocabulary (0 otherwise)
    n_oov_terms  distinct terms among those
    """

    counts: sp.csr_matrix
    terms: np.ndarray
    n_tokens: int
    n_oov: int = 0
    n_oov_terms: int = 0


def count_terms(texts: Iterable[str], stopwords: frozenset[str] = frozenset(),
                vocabulary: dict[str, int] | None = None, n_docs: int | None = None,
                progress: Progress = NULL, progress_every: int = 1000) -> TermCounts:
    """Tokenise every text once and count terms.

    With ``vocabulary`` (term -> column), terms outside it are dropped and counted as OOV and the
    columns keep the vocabulary's numbering; without it the vocabulary is built from the texts
    and returned sorted. ``progress.update`` is called every ``progress_every`` documents.
    """
    findall = _TOKEN_RE.findall
    grow = vocabulary is None
    vocab: dict[str, int] = {} if grow else vocabulary
    get = vocab.get
    row_lengths: list[int] = []
    indices: list[int] = []
    values: list[int] = []
    n_oov = 0
    oov_terms: set[str] = set()
    pending = 0
    for text in texts:
        counter = Counter(findall(text.lower()))
        if stopwords:
            for word in stopwords.intersection(counter):
                del counter[word]
        start = len(indices)
        for term, n in counter.items():
            j = get(term)
            if j is None:
                if grow:
                    j = vocab[term] = len(vocab)
                else:
                    n_oov += n
                    oov_terms.add(term)
                    continue
            indices.append(j)
            values.append(n)
        row_lengths.append(len(indices) - start)
        pending += 1
        if pending == progress_every:
            progress.update(pending)
            pending = 0
    if pending:
        progress.update(pending)
    if n_docs is not None and len(row_lengths) != n_docs:
        raise InputError(f"expected {n_docs} documents, counted {len(row_lengths)}")

    indptr = np.zeros(len(row_lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(row_lengths, dtype=np.int64), out=indptr[1:])
    idx = np.asarray(indices, dtype=np.int64)
    data = np.asarray(values, dtype=np.float64)
    if grow:
        order_terms = sorted(vocab, key=vocab.__getitem__)  # terms by first appearance
        terms_by_id = np.array(order_terms, dtype=object)
        sorted_ids = np.argsort(terms_by_id.astype(str), kind="stable") if len(terms_by_id) else np.zeros(0, np.int64)
        new_of_old = np.empty(len(terms_by_id), dtype=np.int64)
        new_of_old[sorted_ids] = np.arange(len(terms_by_id))
        idx = new_of_old[idx] if len(idx) else idx
        terms = terms_by_id[sorted_ids]
        n_terms = len(terms)
    else:
        n_terms = max(vocab.values(), default=-1) + 1
        terms = np.empty(n_terms, dtype=object)
        for term, j in vocab.items():
            terms[j] = term
    counts = sp.csr_matrix((data, idx.astype(np.int32), indptr), shape=(len(row_lengths), n_terms))
    counts.sort_indices()
    return TermCounts(counts, terms, int(data.sum()) if len(data) else 0, n_oov, len(oov_terms))
