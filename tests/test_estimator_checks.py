"""scikit-learn's estimator checks for every gputext estimator, on the CPU twin (tiny data).

Each check an estimator is expected to fail is listed in EXPECTED_FAILURES (or expected_failures) with the reason.
"""
import warnings

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from gputext.estimators import (KNeighborsClassifier, KNNMetaFeatures, LinearSVC, NearestNeighbors, RankSVM,
                                StarClustering, StreamClustering)

ESTIMATORS = [
    NearestNeighbors(n_neighbors=3, device="cpu"),
    NearestNeighbors(n_neighbors=3, metric="cosine", algorithm="dense", device="cpu"),
    KNeighborsClassifier(n_neighbors=3, device="cpu"),
    KNeighborsClassifier(n_neighbors=3, weights="similarity", metric="cosine", device="cpu"),
    KNeighborsClassifier(n_neighbors=3, weights="distance", metric="manhattan", n_jobs=1, device="cpu"),
    KNNMetaFeatures(n_neighbors=2, device="cpu"),
    StarClustering(beta=0.5, device="cpu"),
    StreamClustering(threshold=0.5, max_terms=8, device="cpu"),
    RankSVM(device="cpu"),
    LinearSVC(device="cpu"),
    LinearSVC(device="cpu", solver="tron"),
]

LEAVE_ONE_OUT = ("fit_transform returns the training rows' leave-one-out meta-features (each row left out of its own "
                 "class's lists), by design not fit(X).transform(X), where every row finds itself")
NEGATIVE_DATA = "the check clusters data with negative values; stream clustering needs weights >= 0 (tf-idf, tf-icf)"
EXPECTED_FAILURES = {
    "KNNMetaFeatures": {
        "check_transformer_general": LEAVE_ONE_OUT,
        "check_transformer_general(readonly_memmap=True)": LEAVE_ONE_OUT,
        "check_transformer_data_not_an_array": LEAVE_ONE_OUT,
    },
    "StreamClustering": {
        "check_clustering": NEGATIVE_DATA,
        "check_clustering(readonly_memmap=True)": NEGATIVE_DATA,
    },
}


TRON_CLASS_WEIGHT = ("solver='tron' weighs every row alike and refuses class_weight with a ValueError (device='auto' "
                     "hands such a fit to LIBLINEAR on the CPU instead)")


def expected_failures(estimator):
    if isinstance(estimator, LinearSVC) and estimator.solver == "tron":
        return {"check_class_weight_classifiers": TRON_CLASS_WEIGHT}
    return EXPECTED_FAILURES.get(type(estimator).__name__, {})


# NearestNeighbors, KNeighborsClassifier and the clusterers keep scikit-learn's contract without its base class
# (estimators/base.py: so that importing them does not import scikit-learn); collecting the checks
# warns that they do not inherit, and every check passes.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Estimator (NearestNeighbors|KNeighborsClassifier|StarClustering|StreamClustering) "
                            "does not inherit from", UserWarning)
    SKLEARN_CHECKS = parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)


@SKLEARN_CHECKS
def test_sklearn_compatible(estimator, check):
    check(estimator)
