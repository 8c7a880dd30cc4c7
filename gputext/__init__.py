"""gputext: GPU text mining with exact results and a parallel CPU twin.

Public API (each family adds its own module):
    gputext.io          HDF5 corpus format (anndata-compatible) and ingest of text formats
    gputext.backend     choice of cpu / cuda, decided in one place
    gputext.estimators  scikit-learn estimators, also importable from here:
                        ``from gputext import NearestNeighbors`` (docs/python.md)

Exported names are resolved on first use (module ``__getattr__``), so ``import gputext`` and
``gputext --help`` import neither numba nor scikit-learn.
"""
__version__ = "0.1.0"

# name -> module that defines it, imported when the name is first asked for
_EXPORTS = {
    "NearestNeighbors": "gputext.estimators.neighbors",
    "KNeighborsClassifier": "gputext.estimators.classification",
    "KNNMetaFeatures": "gputext.estimators.metafeatures",
    "StarClustering": "gputext.estimators.clustering",
    "StreamClustering": "gputext.estimators.clustering",
    "RankSVM": "gputext.estimators.ranking",
    "LinearSVC": "gputext.estimators.svm",
    "TfidfVectorizer": "gputext.estimators.text",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name):
    if name in _EXPORTS:
        from importlib import import_module
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gputext' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
