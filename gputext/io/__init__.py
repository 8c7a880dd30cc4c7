"""Corpus files: the HDF5 format (corpus.py) and ingest of text formats (ingest.py and friends).

Exports are imported on first use (module ``__getattr__``), so that importing a light submodule
such as ``gputext.io.atomic`` (the CLI's signal handling, on every command) does not import h5py
and SciPy: ``gputext --help`` stays at click's own start-up cost.
"""
from __future__ import annotations

_EXPORTS = {
    "Categorical": "corpus", "Corpus": "corpus", "CorpusWriter": "corpus", "atomic_output": "corpus",
    "canonical_csr": "corpus", "check_same_vocabulary": "corpus", "corpus_shape": "corpus", "csr_arrays": "corpus",
    "read_corpus": "corpus", "read_rows": "corpus", "write_corpus": "corpus",
    "build_corpus": "ingest",  # after corpus: ingest builds on it
    "from_anndata": "corpus", "to_anndata": "anndata",  # anndata itself is imported on use
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    import importlib

    module = _EXPORTS.get(name)
    if module is None:  # a submodule reached as an attribute (gputext.io.corpus, ...)
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
