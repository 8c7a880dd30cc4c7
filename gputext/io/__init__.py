"""Corpus files: the HDF5 format (corpus.py) and ingest of text formats (ingest.py and friends)."""
from .corpus import (Categorical, Corpus, CorpusWriter, atomic_output, canonical_csr, check_same_vocabulary,
                     corpus_shape, csr_arrays, read_corpus, read_rows, write_corpus)

__all__ = ["Categorical", "Corpus", "CorpusWriter", "atomic_output", "canonical_csr", "check_same_vocabulary",
           "corpus_shape", "csr_arrays", "read_corpus", "read_rows", "write_corpus"]

from .ingest import build_corpus  # noqa: E402  (after corpus: ingest builds on it)

__all__ += ["build_corpus"]
