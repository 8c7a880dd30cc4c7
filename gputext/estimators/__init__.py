"""scikit-learn-compatible estimators over gputext's families (docs/python.md).

    from gputext import NearestNeighbors, KNeighborsClassifier, KNNMetaFeatures
    from gputext import StarClustering, StreamClustering, RankSVM, LinearSVC, TfidfVectorizer

One module per family: neighbors (NearestNeighbors), classification (KNeighborsClassifier),
metafeatures (KNNMetaFeatures), clustering (StarClustering, StreamClustering), ranking (RankSVM),
svm (LinearSVC: the one-vs-rest linear SVM trained by our TRON, gputext.linear), text
(TfidfVectorizer: raw texts -> `corpus build`'s features); inputs holds the input checks they
share, base the scikit-learn contract of the estimators that do not import scikit-learn
(NearestNeighbors, KNeighborsClassifier, StarClustering, StreamClustering: their calls may be
answered by the warm server, daemon/library.py). Each name is imported on first use (module
``__getattr__``), so ``from gputext import NearestNeighbors`` imports the neighbours module alone,
not every family and scikit-learn's modules too.
"""
_EXPORTS = {
    "NearestNeighbors": "neighbors",
    "KNeighborsClassifier": "classification",
    "KNNMetaFeatures": "metafeatures",
    "StarClustering": "clustering",
    "StreamClustering": "clustering",
    "RankSVM": "ranking",
    "LinearSVC": "svm",
    "TfidfVectorizer": "text",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gputext.estimators' has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
