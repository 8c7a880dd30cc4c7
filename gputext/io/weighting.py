"""Term weighting: raw counts (csr, float64) -> stored weights (csr, float32).

All arithmetic is float64; the result is rounded once to float32. Entries whose weight is 0
(a term in every reference document under tf-idf, say) are not stored.

Every weighting is defined against a *reference collection* (``Reference``: vocabulary, document
frequencies ``df`` and number of documents ``n_docs``): the corpus itself when it is built
without ``--vocab-from``, else the training corpus it borrows its vocabulary from (and that
corpus's own reference, so chains train -> test -> queries all use the training statistics).

    tfidf   w = tf * idf,  idf = log(N / df)  (natural log), then each row scaled to unit L2 norm
    tficf   w = log(1 + tf) * log((N + 1) / (df + 1)), then unit L2 rows: tf-icf of Reed et al.
            (ICMLA 2006), which the stream-clustering paper uses: N and df come from a reference
            collection, not from the documents being weighted, so a document's weights never
            change as others arrive; the +1s keep terms unseen in the reference finite
    tf      w = tf (raw counts, not normalised)
    binary  w = 1 for every term present (not normalised)
    none    the values as read (counts for text; feature values for svmlight, counts CSV, UCI)

Terms with df = N get idf 0 and tf-icf factor 0: they are in every reference document and carry
no information, so their entries vanish (a document made only of such terms becomes an all-zero
row). Terms with df = 0 (possible only in a fixed vocabulary) get idf 0 too. A row whose weights
are all zero stays all zero (no division by zero).

``var/idf`` always stores log(N / df) of the reference collection (0 where df = 0), whatever
the weighting, and ``var/df`` the reference's document frequencies, so any weighting can be
recomputed from the file; ``uns/gputext/idf_n_docs`` stores N.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from .choices import WEIGHTINGS  # noqa: F401 (weighting.WEIGHTINGS: the weightings defined here)

NORMALISED = ("tfidf", "tficf")


@dataclass
class Reference:
    """The collection weights are computed from: df (n_terms,) int64 and its number of documents."""

    df: np.ndarray
    n_docs: int

    def __post_init__(self):
        self.df = np.ascontiguousarray(self.df, dtype=np.int64)
        self.n_docs = int(self.n_docs)


def document_frequency(X: sp.csr_matrix) -> np.ndarray:
    """(n_terms,) int64: number of rows with a nonzero in each column."""
    X = sp.csr_matrix(X)
    nonzero = X.indices[X.data != 0]
    return np.bincount(nonzero, minlength=X.shape[1]).astype(np.int64)


def idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """log(N / df) float64, 0 where df == 0."""
    df = np.asarray(df, dtype=np.float64)
    out = np.zeros(len(df), dtype=np.float64)
    seen = df > 0
    out[seen] = np.log(float(n_docs) / df[seen])
    return out


def icf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """log((N + 1) / (df + 1)) float64 (tf-icf's inverse corpus frequency)."""
    df = np.asarray(df, dtype=np.float64)
    return np.log((float(n_docs) + 1.0) / (df + 1.0))


def l2_normalise_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    """Scale each row of a float64 csr to unit L2 norm; all-zero rows stay zero."""
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    norms = np.sqrt(np.bincount(rows, weights=X.data * X.data, minlength=X.shape[0]))
    scale = np.zeros_like(norms)
    scale[norms > 0] = 1.0 / norms[norms > 0]
    X = X.copy()
    X.data *= np.repeat(scale, np.diff(X.indptr))
    return X


def apply_weighting(counts: sp.csr_matrix, scheme: str, reference: Reference | None = None) -> sp.csr_matrix:
    """Weight raw counts (n_docs, n_terms) with ``scheme`` against ``reference`` (default: itself).

    Returns csr float32 with sorted indices and no stored zeros.
    """
    if scheme not in WEIGHTINGS:
        raise InputError(f"weighting {scheme!r} is not one of {', '.join(WEIGHTINGS)}")
    X = sp.csr_matrix(counts, dtype=np.float64, copy=True)
    X.sort_indices()
    if scheme != "none" and X.nnz and X.data.min() < 0:
        raise InputError(f"weighting {scheme!r} needs non-negative term counts, but the input has negative "
                         f"values (minimum {X.data.min():g}); use --weighting none")
    if reference is None:
        reference = Reference(document_frequency(X), X.shape[0])
    if len(reference.df) != X.shape[1]:
        raise InputError(f"reference has {len(reference.df)} terms, the counts have {X.shape[1]}")
    cols = X.indices
    if scheme == "tfidf":
        X.data *= idf(reference.df, reference.n_docs)[cols]
        X = l2_normalise_rows(X)
    elif scheme == "tficf":
        X.data = np.log1p(X.data) * icf(reference.df, reference.n_docs)[cols]
        X = l2_normalise_rows(X)
    elif scheme == "binary":
        X.data = (X.data != 0).astype(np.float64)
    # tf and none keep the values
    out = sp.csr_matrix((X.data.astype(np.float32), X.indices.astype(np.int32), X.indptr.astype(np.int64)),
                        shape=X.shape)
    out.eliminate_zeros()
    out.has_sorted_indices = True
    return out
