"""Corpus files: the HDF5 format (corpus.py) and ingest of text formats (ingest.py and friends)."""
from .corpus import (Categorical, Corpus, CorpusWriter, atomic_output, canonical_csr, check_same_vocabulary,
                     corpus_shape, csr_arrays, read_corpus, read_rows, write_corpus)

__all__ = ["Categorical", "Corpus", "CorpusWriter", "atomic_output", "canonical_csr", "check_same_vocabulary",
           "corpus_shape", "csr_arrays", "read_corpus", "read_rows", "write_corpus"]

from .ingest import build_corpus  # noqa: E402  (after corpus: ingest builds on it)
from .anndata import from_anndata, to_anndata  # noqa: E402  (anndata itself is imported on use)

__all__ += ["build_corpus", "from_anndata", "to_anndata"]
