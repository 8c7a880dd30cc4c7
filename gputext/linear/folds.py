"""Stratified cross-validation folds without importing scikit-learn (its import costs a command
line process over a second: docs/first_answer.md).

``stratified_test_folds`` gives, for each sample, the fold whose test set holds it: exactly the
folds of scikit-learn's ``StratifiedKFold(n_splits, shuffle=True, random_state=seed)`` (its
``_make_test_folds``, scikit-learn 1.6-1.8: the same round-robin allocation and the same
``RandomState`` shuffles), so a grid search chooses the same C either way
(tests/test_linear_svm.py checks the equality).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError


def stratified_test_folds(y, n_folds: int, seed: int) -> np.ndarray:
    """int32 (n,): each sample's test fold in 0..n_folds-1. y (n,): class labels (any type).
    InputError when every class has fewer than n_folds samples (scikit-learn: ValueError);
    smaller classes then miss some folds, as there."""
    y = np.asarray(y)
    rng = np.random.RandomState(seed)
    _, y_idx, y_inv = np.unique(y, return_index=True, return_inverse=True)
    _, class_perm = np.unique(y_idx, return_inverse=True)  # classes numbered by first appearance
    y_encoded = class_perm[y_inv.ravel()]
    n_classes = len(y_idx)
    if np.all(n_folds > np.bincount(y_encoded)):
        raise InputError(f"{n_folds} cross-validation folds need a class with at least {n_folds} documents")
    y_order = np.sort(y_encoded)
    allocation = np.asarray([np.bincount(y_order[i::n_folds], minlength=n_classes) for i in range(n_folds)])
    folds = np.empty(len(y), dtype=np.int32)
    for k in range(n_classes):
        for_class = np.arange(n_folds).repeat(allocation[:, k])
        rng.shuffle(for_class)
        folds[y_encoded == k] = for_class
    return folds


def fold_splits(test_folds: np.ndarray, n_folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train indices, test indices) of each fold, as StratifiedKFold.split yields them."""
    idx = np.arange(test_folds.size)
    return [(idx[test_folds != f], idx[test_folds == f]) for f in range(n_folds)]
