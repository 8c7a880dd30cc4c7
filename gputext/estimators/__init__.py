"""scikit-learn-compatible estimators over gputext's families (docs/python.md).

    from gputext import NearestNeighbors, KNeighborsClassifier, KNNMetaFeatures
    from gputext import StarClustering, StreamClustering, RankSVM

One module per family: neighbors (NearestNeighbors), classification (KNeighborsClassifier,
KNNMetaFeatures), clustering (StarClustering, StreamClustering), ranking (RankSVM); inputs holds
the input checks they share. Importing this package imports scikit-learn (gputext itself does not
until an estimator is asked for: gputext/__init__.py resolves these names lazily).
"""
from .classification import KNeighborsClassifier, KNNMetaFeatures
from .clustering import StarClustering, StreamClustering
from .neighbors import NearestNeighbors
from .ranking import RankSVM

__all__ = ["NearestNeighbors", "KNeighborsClassifier", "KNNMetaFeatures", "StarClustering", "StreamClustering",
           "RankSVM"]
