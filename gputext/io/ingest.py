"""Build a Corpus from text, svmlight, UCI bag-of-words or counts-CSV inputs.

    from gputext.io.ingest import build_corpus
    train = build_corpus(["train.tab"])                               # tf-idf, English stopwords
    test = build_corpus(["test.tab"], vocab_from="train.h5")          # training vocabulary and idf
    ltr = build_corpus(["rank.train"], query_groups="rank.train.query")

Pipeline: read every input (readers.py) -> tokenise each text once and count terms
(tokenize.py) -> drop terms by --min-df / --max-df -> weight (weighting.py) -> labels, qid,
relevance -> Corpus with its parameters in uns["gputext"].

Decisions (see docs/corpus.md):
- Several inputs are concatenated in order. Text formats (tab, tsv, dir, jsonl) may be mixed;
  svmlight, uci and counts-csv take one input each (uci: the docword file or its folder; its
  vocab file may be given as a second input).
- Documents left with no terms (all stopwords, or all out of vocabulary) are kept as all-zero
  rows, so labels and ids stay aligned; their number is uns/gputext/n_empty_docs. A corpus with
  no documents, or with no terms left at all, is refused.
- Stopwords apply to tokenised text only; svmlight, UCI and counts-CSV columns are kept as given.
  --min-df / --max-df apply to text, UCI and counts CSV; for svmlight they are refused (feature j
  must stay column j-1).
- min_df / max_df: an int is a number of documents, a float in [0, 1] a fraction of them
  (kept: min_df <= df <= max_df, a fraction f meaning f * n_docs).
- Labels: single-label -> obs/label categorical, categories sorted (numerically when every label
  is a number, else by code point). Multi-label (JSONL "labels", svmlight "1,3") ->
  obsm/labels csr float32 (n_docs, n_labels) of 1.0 and uns/gputext/label_names, and obs/label =
  each document's first label as listed in the input (-1 when it has none), whose categories
  are label_names. With vocab_from the training categories come first, in their order, and
  labels unknown to it are appended (sorted), so codes line up with the training corpus.
- vocab_from: the training corpus's terms and term order, its reference df and N (var/df,
  uns/gputext/idf_n_docs) and, unless given, its weighting. Out-of-vocabulary terms are dropped:
  uns/gputext/n_oov counts dropped token occurrences (for counts inputs the dropped counts; for
  svmlight the dropped nonzero feature values), n_oov_terms the distinct ones.
"""
from __future__ import annotations

import math
import os
from typing import Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from ..progress import info, progress, warn
from .corpus import Categorical, Corpus, duplicates, read_corpus
from .readers import (FORMATS, MATRIX_FORMATS, TEXT_FORMATS, MatrixInput, TextInput, check_exists, detect_format,
                      display_name, read_counts_csv, read_dir, read_jsonl, read_svmlight, read_tab, read_tsv,
                      read_uci)
from .tokenize import TOKEN_PATTERN, count_terms, load_stopwords
from .weighting import WEIGHTINGS, Reference, apply_weighting, document_frequency, idf

TEXT_READERS = {"tab": read_tab, "tsv": read_tsv, "dir": read_dir, "jsonl": read_jsonl}
PROGRESS_MIN_DOCS = 2000  # fewer documents tokenise in well under a second: no progress bar


# ----------------------------------------------------------------------------- options


def int_or_float(value, name: str, expected: str):
    """A command-line number: '5' -> 5, '0.5' -> 0.5, other values unchanged; anything else is
    an InputError saying ``name``, the text and what was ``expected``."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise InputError(f"{name} {text!r}: expected {expected}") from None


def parse_df_bound(value, name: str):
    """'5' -> 5 (documents), '0.5' -> 0.5 (fraction); ints >= 0, floats in [0, 1]."""
    value = int_or_float(value, name, "a number of documents (int) or a fraction in [0, 1]")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} {value!r}: expected an int or a float")
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise InputError(f"{name} {value}: expected a number of documents >= 0")
        return int(value)
    if not 0.0 <= float(value) <= 1.0 or math.isnan(value):
        raise InputError(f"{name} {value}: a fraction of documents must lie in [0, 1] (use an int for a count)")
    return float(value)


def _df_limit(bound, n_docs: int) -> float:
    return float(bound) if isinstance(bound, int) else bound * n_docs


def _sort_labels(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    try:
        return sorted(names, key=lambda s: (float(s), s))
    except ValueError:
        return sorted(names)


# ----------------------------------------------------------------------------- reading


def _resolve_formats(inputs: Sequence[str], fmt: str) -> list[tuple[str, str]]:
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    out = []
    for path in inputs:
        check_exists(path)
        out.append((path, detect_format(path) if fmt == "auto" else fmt))
    # a UCI vocab file given beside its docword file is consumed by it
    kinds = {k for _, k in out}
    if "uci-vocab" in kinds:
        if "uci" not in kinds:
            vocab = next(p for p, k in out if k == "uci-vocab")
            raise InputError(f"{vocab}: a UCI vocab file needs its docword.NAME.txt[.gz] file as the input")
    text = [p for p, k in out if k in TEXT_FORMATS]
    matrix = [(p, k) for p, k in out if k in MATRIX_FORMATS]
    if text and matrix:
        raise InputError(f"cannot mix text inputs ({display_name(text[0])}) with {matrix[0][1]} input "
                         f"({display_name(matrix[0][0])}) in one corpus")
    if len(matrix) > 1:
        raise InputError(f"{matrix[0][1]} takes one input file, got {len(matrix)}: "
                         + ", ".join(display_name(p) for p, _ in matrix))
    return out


def read_inputs(inputs: Sequence[str], fmt: str = "auto", query_groups: str | None = None,
                quiet: bool = True, labels: str | None = None) -> tuple[TextInput | MatrixInput, str]:
    """Read and concatenate the inputs; returns (documents, format name). ``labels``: a labels
    file for npz input (gputext.io.npz)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    inputs = [os.fspath(p) for p in inputs]
    if not inputs:
        raise InputError("no input files given")
    _refuse_repeated_inputs(inputs)
    resolved = _resolve_formats(inputs, fmt)
    kinds = [k for _, k in resolved if k != "uci-vocab"]
    if query_groups is not None and kinds != ["svmlight"]:
        raise InputError(f"--query-groups applies to svmlight input, not {', '.join(sorted(set(kinds)))}")
    if labels is not None and kinds != ["npz"]:
        raise InputError(f"--labels applies to npz input, not {', '.join(sorted(set(kinds)))}")
    if kinds[0] in MATRIX_FORMATS:
        path = next(p for p, k in resolved if k == kinds[0])
        if kinds[0] == "npz":
            from .npz import read_npz
            return read_npz(path, labels), "npz"
        if kinds[0] == "svmlight":
            return read_svmlight(path, query_groups), "svmlight"
        if kinds[0] == "uci":
            vocab = next((p for p, k in resolved if k == "uci-vocab"), None)
            return read_uci(path, vocab), "uci"
        return read_counts_csv(path), "counts-csv"
    parts = [TEXT_READERS[k](p) for p, k in resolved]
    _distinct_line_ids([p for p, _ in resolved], parts)
    for part in parts:
        for note in part.notes:
            info(note, quiet)
    if len(parts) == 1:
        return parts[0], kinds[0]
    any_labels = any(p.labels is not None for p in parts)
    merged = TextInput([], [], [] if any_labels else None, multilabel=any(p.multilabel for p in parts))
    for part in parts:
        merged.texts += part.texts
        merged.doc_ids += part.doc_ids
        if any_labels:
            merged.labels += part.labels if part.labels is not None else [[] for _ in part.texts]
    return merged, "+".join(dict.fromkeys(kinds))


def _refuse_repeated_inputs(paths: list[str]) -> None:
    """An input given twice (by any spelling or link) would duplicate its documents: refused."""
    seen: dict[str, str] = {}
    for path in paths:
        real = os.path.realpath(path) if path != "-" else "-"
        if real in seen:
            also = "" if seen[real] == path else f" (also as {display_name(seen[real])})"
            raise InputError(f"{display_name(path)} is given twice{also}: give every input once, or its documents "
                             "would be duplicates")
        seen[real] = path


def _distinct_line_ids(paths: list[str], parts: list) -> None:
    """The NAME:LINE ids of inputs that share a file name in different folders get the path as
    given instead (train/a.tab:4, test/a.tab:4), so they stay unique."""
    bases = [os.path.basename(p.rstrip("/")) if p != "-" else "stdin" for p in paths]
    for path, base, part in zip(paths, bases, parts):
        if bases.count(base) > 1 and path != "-":
            part.doc_ids = [f"{path}{d[len(base):]}" if d.startswith(base + ":") else d for d in part.doc_ids]


def check_unique_ids(doc_ids) -> None:
    """Document ids must be unique (results are matched by id): refuse the first repeated one."""
    found = duplicates(doc_ids)
    if found is not None:
        n, value, (a, b) = found
        raise InputError(f"document id {value!r} is used by documents {a + 1} and {b + 1} ({n} repeated "
                         "entries): ids must be unique (a JSONL 'id' given twice?)")


def _warn_zero_rows(counts: sp.csr_matrix, X: sp.csr_matrix, weighting: str) -> None:
    """Documents with terms whose weights all came out 0 (every term in every document: idf 0)."""
    had = np.diff(counts.indptr) > 0
    zero = had & (np.asarray(abs(X).sum(axis=1)).ravel() == 0)
    n = int(zero.sum())
    if n:
        why = "a one-document corpus: idf = log(1/1) = 0" if X.shape[0] == 1 else "their terms occur in every document"
        warn(f"{n} of {X.shape[0]} documents have all-zero {weighting} weights ({why}); they match nothing. "
             "Use --weighting tf or tficf, or build from more documents")


# ----------------------------------------------------------------------------- labels


def _labels_annotations(labels: list[list[str]] | None, multilabel: bool, base_categories: list[str] | None,
                        base_multilabel: bool):
    """-> (obs label Categorical or None, obsm labels csr or None, label_names or None)."""
    if labels is None:
        return None, None, None
    multilabel = multilabel or base_multilabel or any(len(ls) > 1 for ls in labels)
    seen = _sort_labels(lab for ls in labels for lab in ls)
    if base_categories is not None:
        known = set(base_categories)
        categories = list(base_categories) + [lab for lab in seen if lab not in known]
    else:
        categories = seen
    code_of = {lab: i for i, lab in enumerate(categories)}
    first = np.array([code_of[ls[0]] if ls else -1 for ls in labels], dtype=np.int32)
    cats = np.array(categories, dtype=object)
    obs_label = Categorical(first, cats)
    if not multilabel:
        return obs_label, None, None
    lengths = np.array([len(ls) for ls in labels], dtype=np.int64)
    indptr = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    cols = np.array([code_of[lab] for ls in labels for lab in ls], dtype=np.int32)
    Y = sp.csr_matrix((np.ones(len(cols), np.float32), cols, indptr), shape=(len(labels), len(categories)))
    Y.sum_duplicates()
    Y.data[:] = 1.0
    Y.sort_indices()
    return obs_label, Y, cats


# ----------------------------------------------------------------------------- the reference corpus


class _Training:
    """What a --vocab-from corpus lends: vocabulary, reference df/N, weighting, label categories."""

    def __init__(self, path: str):
        self.path = path
        ref = read_corpus(path, validate=True)
        self.terms = ref.terms
        self.vocabulary = {str(t): j for j, t in enumerate(ref.terms)}
        if len(self.vocabulary) != len(ref.terms):
            raise InputError(f"--vocab-from {path}: its vocabulary (/var/_index) has duplicate terms")
        params = ref.params
        if "df" in ref.var:
            df = np.asarray(ref.var["df"], dtype=np.int64)
        else:
            df = document_frequency(ref.X)
        self.reference = Reference(df, int(params.get("idf_n_docs", ref.n_docs)))
        self.weighting = params.get("weighting")
        self.format = params.get("format")
        self.stopwords = params.get("stopwords")
        names = params.get("label_names")
        self.multilabel = names is not None or ref.label_matrix is not None
        if names is not None:
            self.categories = [str(c) for c in names]
        elif ref.labels is not None:
            self.categories = [str(c) for c in ref.labels.categories]
        else:
            self.categories = None


# ----------------------------------------------------------------------------- building


def filter_terms_by_df(counts: sp.csr_matrix, terms: np.ndarray, min_df, max_df) -> tuple[sp.csr_matrix, np.ndarray]:
    """Keep the columns (terms) with min_df <= df <= max_df and df > 0 (bounds as parse_df_bound
    returns them: int documents or float fraction of counts.shape[0]); -> (counts, terms)."""
    n_docs = counts.shape[0]
    df = document_frequency(counts)
    keep = (df >= _df_limit(min_df, n_docs)) & (df <= _df_limit(max_df, n_docs)) & (df > 0)
    if keep.all():
        return counts, terms
    cols = np.nonzero(keep)[0]
    return counts[:, cols].tocsr(), terms[cols]


def _map_columns(values: sp.csr_matrix, terms: np.ndarray, vocabulary: dict[str, int], n_terms: int,
                 kind: str) -> tuple[sp.csr_matrix, int, int]:
    """Re-index columns into a training vocabulary by term name; returns (matrix, n_oov, n_oov_terms)."""
    target = np.array([vocabulary.get(str(t), -1) for t in terms], dtype=np.int64)
    coo = values.tocoo()
    new_cols = target[coo.col] if coo.nnz else np.zeros(0, np.int64)
    inside = new_cols >= 0
    dropped = coo.data[~inside]
    n_oov = int(np.count_nonzero(dropped)) if kind == "features" else int(round(float(dropped.sum())))
    n_oov_terms = int(len(np.unique(coo.col[~inside]))) if coo.nnz else 0
    mapped = sp.csr_matrix((coo.data[inside], (coo.row[inside], new_cols[inside])), shape=(values.shape[0], n_terms))
    mapped.sort_indices()
    return mapped, n_oov, n_oov_terms


def build_corpus(inputs: str | Sequence[str], format: str = "auto", stopwords: str = "english",
                 weighting: str | None = None, min_df=1, max_df=1.0, vocab_from: str | None = None,
                 query_groups: str | None = None, quiet: bool = True, labels: str | None = None) -> Corpus:
    """Ingest ``inputs`` (paths; ``-`` is stdin) into a weighted Corpus.

    format        auto | tab | tsv | dir | jsonl | svmlight | uci | counts-csv | npz
    stopwords     "english" | "none" | path of a word file (text formats only)
    weighting     tfidf | tf | binary | tficf | none; default: the --vocab-from corpus's, else
                  "none" for svmlight and npz and "tfidf" for everything else
    min_df/max_df int (documents) or float in [0, 1] (fraction); not with vocab_from or svmlight
    vocab_from    path of a training corpus: reuse its vocabulary, term order, df/N and categories
    query_groups  LightGBM-style group sizes file for svmlight input without qid:
    labels        labels file (one line per row) for npz input (gputext.io.npz)
    """
    min_df = parse_df_bound(min_df, "--min-df")
    max_df = parse_df_bound(max_df, "--max-df")
    if weighting is not None and weighting not in WEIGHTINGS:
        raise InputError(f"--weighting {weighting!r}: expected one of {', '.join(WEIGHTINGS)}")
    df_filtered = not (min_df in (0, 1) and isinstance(min_df, int) and max_df == 1.0 and isinstance(max_df, float))
    training = _Training(vocab_from) if vocab_from is not None else None
    if training is not None and df_filtered:
        raise InputError("--min-df/--max-df cannot be combined with --vocab-from: the vocabulary is the training "
                         "corpus's")

    docs, fmt = read_inputs(inputs, format, query_groups, quiet, labels)
    check_unique_ids(docs.doc_ids)
    n_docs = len(docs.doc_ids)
    if n_docs == 0:
        raise InputError(f"{', '.join(display_name(p) for p in ([inputs] if isinstance(inputs, str) else inputs))}: "
                         "no documents found")
    n_oov = n_oov_terms = 0
    if isinstance(docs, TextInput):
        stop = load_stopwords(stopwords)
        stopwords_used = stopwords
        with progress(n_docs, "tokenising", quiet or n_docs < PROGRESS_MIN_DOCS) as bar:
            counted = count_terms(docs.texts, stop, training.vocabulary if training else None, progress=bar)
        counts, terms = counted.counts, counted.terms
        n_oov, n_oov_terms = counted.n_oov, counted.n_oov_terms
        kind = "counts"
        labels, multilabel = docs.labels, docs.multilabel
        qid = relevance = None
    else:
        if stopwords not in ("english", "none", None):
            raise InputError(f"--stopwords {stopwords}: stopwords apply to text formats, not {fmt} (its columns are "
                             "kept as given)")
        stopwords_used = "none"
        kind = docs.kind
        if fmt == "svmlight" and df_filtered:
            raise InputError("--min-df/--max-df do not apply to svmlight input: feature j must stay column j-1")
        counts, terms = docs.values, docs.terms
        if training is not None:
            counts, n_oov, n_oov_terms = _map_columns(counts, terms, training.vocabulary, len(training.terms), kind)
            terms = training.terms
        labels, multilabel = docs.labels, docs.multilabel
        qid, relevance = docs.qid, docs.relevance

    if training is None and kind == "counts":
        counts, terms = filter_terms_by_df(counts, terms, min_df, max_df)
    if counts.shape[1] == 0:
        what = "stopwords, --min-df and --max-df" if isinstance(docs, TextInput) else "--min-df and --max-df"
        raise InputError(f"no terms left in {n_docs} documents after {what}: the corpus would have zero "
                         "terms (every document empty)")
    if training is not None and counts.nnz == 0:
        raise InputError(f"none of the {n_docs} documents shares a term with the --vocab-from corpus "
                         f"{training.path}: every document would be empty")

    if weighting is None:
        weighting = (training.weighting if training is not None and training.weighting in WEIGHTINGS
                     else ("none" if fmt in ("svmlight", "npz") else "tfidf"))
    reference = training.reference if training is not None else Reference(document_frequency(counts), n_docs)
    X = apply_weighting(counts, weighting, reference)
    _warn_zero_rows(counts, X, weighting)

    obs: dict = {}
    base = training.categories if training is not None else None
    obs_label, Y, label_names = _labels_annotations(labels, multilabel, base,
                                                    training.multilabel if training is not None else False)
    if obs_label is not None:
        obs["label"] = obs_label
    if qid is not None:
        obs["qid"] = np.asarray(qid, dtype=np.int32)
    if relevance is not None:
        obs["relevance"] = np.asarray(relevance, dtype=np.float32)
    obsm = {"labels": Y} if Y is not None else {}
    sources = [os.path.abspath(p) if p != "-" else "-" for p in ([inputs] if isinstance(inputs, str) else inputs)]
    params = {
        "command": "corpus build",
        "format": fmt,
        "sources": np.array(sources, dtype=object),
        "weighting": weighting,
        "stopwords": stopwords_used if isinstance(docs, TextInput) else "none",
        "tokenizer": TOKEN_PATTERN if isinstance(docs, TextInput) else "n/a",
        "min_df": min_df,
        "max_df": max_df,
        "n_oov": int(n_oov),
        "n_oov_terms": int(n_oov_terms),
        "n_empty_docs": int(np.count_nonzero(np.diff(X.indptr) == 0)),
        "idf_n_docs": int(reference.n_docs),
    }
    if training is not None:
        params["vocab_from"] = os.path.abspath(training.path)
    if query_groups is not None:
        params["query_groups"] = os.path.abspath(query_groups)
    if label_names is not None:
        params["label_names"] = label_names
    var = {"df": reference.df, "idf": idf(reference.df, reference.n_docs)}
    return Corpus(X, np.array(docs.doc_ids, dtype=object), np.asarray(terms, dtype=object), obs, var, obsm,
                  {"gputext": params})
