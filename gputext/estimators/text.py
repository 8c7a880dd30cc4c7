"""TfidfVectorizer: raw texts -> the term vectors `gputext corpus build` makes of the same texts.

    from gputext import TfidfVectorizer, KNeighborsClassifier
    pipe = Pipeline([("tfidf", TfidfVectorizer()),
                     ("knn", KNeighborsClassifier(n_neighbors=30, metric="cosine", weights="similarity"))])

``fit_transform(texts)`` equals ``corpus build`` of those texts (the same X, bit for bit, and the
same terms in the same order) and ``transform(texts)`` equals ``corpus build --vocab-from`` the
fitted corpus: it is the ingest code (gputext.io.tokenize, gputext.io.weighting,
gputext.io.ingest.filter_terms_by_df) behind scikit-learn's transformer interface, not a second
implementation. The parameters are the CLI's options, under their names:

    stopwords   "english" (gputext's built-in list) | "none" | None | path of a word file (--stopwords)
    weighting   "tfidf" | "tficf" | "tf" | "binary" | "none" (--weighting; "none" keeps raw counts)
    min_df, max_df  int (documents) or float in [0, 1] (fraction of the documents) (--min-df, --max-df)

Where it differs from scikit-learn's TfidfVectorizer (decided, docs/python.md):
- idf = ln(N / df), not scikit-learn's smoothed ln((1 + N) / (1 + df)) + 1: a term in every
  training document weighs 0. This and the tokenizer (gputext.io.tokenize: letters and digits,
  underscores split) are why scikit-learn's vectorizer gives 0.7776 on 20 Newsgroups with the
  GT-kNN recipe KNeighborsClassifier(30, metric="cosine", weights="similarity") where this one
  gives the CLI's 0.7825.
- The output is the corpus format's CSR: float32 data, int32 indices, int64 indptr, rows of unit
  L2 norm for tfidf/tficf (all arithmetic in float64, rounded once).
- ``transform`` of documents that share no term with the vocabulary gives all-zero rows (the CLI
  refuses a --vocab-from corpus in which *every* document is empty; a transformer does not).
- Like scikit-learn's vectorizers, it takes an iterable of str (not a 2-D array), so it has no
  ``n_features_in_``, and scikit-learn's check_estimator does not apply to it (scikit-learn skips
  its own text vectorizers); tests/test_text_vectorizer.py runs the checks that do not feed arrays.

Fitted attributes: ``vocabulary_`` (term -> column), ``idf_`` (n_terms,) float64 ln(N/df)
(``var/idf`` of the corpus, whatever the weighting), ``df_`` (n_terms,) int64 document
frequencies and ``n_docs_`` (N) of the training texts (the reference every transform weights
against, as --vocab-from does), ``stopwords_`` (the frozenset of words removed).
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..io.ingest import filter_terms_by_df, parse_df_bound
from ..io.tokenize import count_terms, load_stopwords
from ..io.weighting import WEIGHTINGS, Reference, apply_weighting, document_frequency, idf


def check_documents(raw_documents) -> list[str]:
    """The documents as a list of str; a bare string or a non-str document is a ValueError."""
    if isinstance(raw_documents, (str, bytes)):
        raise ValueError("Iterable over raw text documents expected, string object received.")
    try:
        docs = list(raw_documents)
    except TypeError:
        raise ValueError(f"Iterable over raw text documents expected, got {type(raw_documents).__name__}") from None
    for i, doc in enumerate(docs):
        if not isinstance(doc, str):
            raise ValueError(f"document {i} is {doc!r} ({type(doc).__name__}), expected a str")
    return docs


class TfidfVectorizer(TransformerMixin, BaseEstimator):
    """Raw texts -> csr_matrix (n_docs, n_terms) float32, exactly as `gputext corpus build` weights them.

    Parameters (`corpus build`'s options, under their names; not scikit-learn's TfidfVectorizer's)
    ----------
    stopwords : "english" | "none" | None | str path, default "english"
        gputext's built-in English list, no stopwords, or a file of words (one a line); as
        --stopwords. scikit-learn's default is stop_words=None.
    weighting : "tfidf" | "tficf" | "tf" | "binary" | "none", default "tfidf"
        As --weighting; tfidf and tficf rows have unit L2 norm; "none" keeps raw counts.
    min_df : int or float, default 1
        Terms in fewer documents are dropped: an int counts documents, a float in [0, 1] is a
        fraction of them (as --min-df and scikit-learn's min_df).
    max_df : int or float, default 1.0
        Terms in more documents are dropped (as --max-df and scikit-learn's max_df).

    Methods: fit(texts), transform(texts) -> CSR float32 (n_texts, n_terms),
    fit_transform(texts), get_feature_names_out(). texts: an iterable of str.

    Fitted attributes: vocabulary_ (dict term -> column; columns in code point order of the
    terms), idf_ float64 (n_terms,) ln(N / df), df_ int64 (n_terms,), n_docs_ (N),
    stopwords_ (frozenset).

    Where it differs from scikit-learn's TfidfVectorizer: idf is ln(N / df) (scikit-learn: the
    smoothed ln((1 + N) / (1 + df)) + 1, so a term in every document weighs 0 here), tokens are
    runs of letters and digits with "_" as a separator (scikit-learn: words of 2+ word
    characters), English stopwords are removed by default, the output is float32, and
    scikit-learn's other parameters (ngram_range, sublinear_tf, norm, ...) do not exist here.
    """

    def __init__(self, stopwords="english", weighting="tfidf", min_df=1, max_df=1.0):
        self.stopwords = stopwords
        self.weighting = weighting
        self.min_df = min_df
        self.max_df = max_df

    def _check_weighting(self) -> str:
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {self.weighting!r}")
        return self.weighting

    def fit(self, raw_documents, y=None):
        """Learn the vocabulary, document frequencies and N of ``raw_documents`` (an iterable of str)."""
        self.fit_transform(raw_documents)
        return self

    def fit_transform(self, raw_documents, y=None):
        """fit, and return the training texts' weights: `corpus build`'s X of the same texts."""
        weighting = self._check_weighting()
        min_df, max_df = parse_df_bound(self.min_df, "min_df"), parse_df_bound(self.max_df, "max_df")
        stopwords = load_stopwords(self.stopwords)
        docs = check_documents(raw_documents)
        if not docs:
            raise ValueError("no documents: fit needs at least one text")
        counted = count_terms(docs, stopwords)
        counts, terms = filter_terms_by_df(counted.counts, counted.terms, min_df, max_df)
        if counts.shape[1] == 0:
            raise ValueError(f"empty vocabulary: no terms left in {len(docs)} documents after stopwords, min_df and "
                             "max_df (perhaps the documents contain only stopwords)")
        reference = Reference(document_frequency(counts), len(docs))
        self.stopwords_ = stopwords
        self.vocabulary_ = {str(t): j for j, t in enumerate(terms)}
        self.df_ = reference.df
        self.n_docs_ = reference.n_docs
        self.idf_ = idf(reference.df, reference.n_docs)
        return apply_weighting(counts, weighting, reference)

    def transform(self, raw_documents):
        """Weights of new texts against the fitted vocabulary, df and N (`corpus build --vocab-from`);
        out-of-vocabulary terms are dropped."""
        check_is_fitted(self, "vocabulary_")
        weighting = self._check_weighting()
        counts = count_terms(check_documents(raw_documents), self.stopwords_, self.vocabulary_).counts
        return apply_weighting(counts, weighting, Reference(self.df_, self.n_docs_))

    def get_feature_names_out(self, input_features=None):
        """(n_terms,) object array of the terms, column order (code point order)."""
        check_is_fitted(self, "vocabulary_")
        names = np.empty(len(self.vocabulary_), dtype=object)
        for term, j in self.vocabulary_.items():
            names[j] = term
        return names

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        return tags
