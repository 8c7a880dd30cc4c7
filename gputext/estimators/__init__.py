"""scikit-learn-compatible estimators over gputext's families (docs/python.md).

    from gputext import NearestNeighbors, KNeighborsClassifier, KNNMetaFeatures
    from gputext import StarClustering, StreamClustering, RankSVM, LinearSVC, TfidfVectorizer

One module per family: neighbors (NearestNeighbors), classification (KNeighborsClassifier,
KNNMetaFeatures), clustering (StarClustering, StreamClustering), ranking (RankSVM), svm (LinearSVC: the one-vs-rest
linear SVM trained by our TRON, gputext.linear), text (TfidfVectorizer: raw texts -> `corpus build`'s
features); inputs holds
the input checks they share. Importing this package imports scikit-learn (gputext itself does not
until an estimator is asked for: gputext/__init__.py resolves these names lazily).
"""
from .classification import KNeighborsClassifier, KNNMetaFeatures
from .clustering import StarClustering, StreamClustering
from .neighbors import NearestNeighbors
from .ranking import RankSVM
from .svm import LinearSVC
from .text import TfidfVectorizer

__all__ = ["NearestNeighbors", "KNeighborsClassifier", "KNNMetaFeatures", "StarClustering", "StreamClustering",
           "RankSVM", "LinearSVC", "TfidfVectorizer"]
