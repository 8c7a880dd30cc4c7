"""Estimator: scikit-learn's estimator contract without importing scikit-learn to define a class.

Importing ``sklearn.base`` takes 0.7-1.1 s (it imports ``scipy.stats`` and pandas through
``sklearn.utils.fixes``): half of the 2 s a fresh Python process has for
``NearestNeighbors(n_neighbors=30).fit(X).kneighbors(Q)`` (docs/first_answer.md). An estimator that
subclasses ``Estimator`` instead of ``sklearn.base.BaseEstimator`` keeps what scikit-learn asks of
one, and imports scikit-learn only where scikit-learn itself is the caller (its tags) or where the
call computes in this process anyway (``validate_data``, in estimators.inputs):

- ``get_params`` / ``set_params`` (nested ``a__b`` names), from the ``__init__`` signature, as
  BaseEstimator's; so ``sklearn.base.clone``, ``GridSearchCV`` and ``Pipeline`` take it as theirs;
- ``__sklearn_tags__``: BaseEstimator's default tags (``sklearn.utils.Tags``, imported when asked);
- ``repr``: the class and the parameters that differ from their defaults, as scikit-learn prints
  them (``NearestNeighbors(n_neighbors=30)``);
- ``Classifier`` (left of ``Estimator``): ClassifierMixin's tags (a classifier, y required, so that
  ``GridSearchCV`` stratifies its folds) and ``score`` (accuracy); ``Clusterer``: ClusterMixin's
  tag and ``fit_predict`` (``fit``, then ``labels_``).

scikit-learn's estimator checks pass for every subclass (tests/test_estimator_checks.py; they warn
that it does not inherit BaseEstimator, which scikit-learn itself only checks when it nests an
estimator in another's parameters, to print or clone it). Not kept: the HTML repr of a notebook
cell (the text repr is shown instead) and metadata routing (an estimator that routes metadata,
RankSVM's ``qid``, stays on BaseEstimator).
"""
from __future__ import annotations

import inspect


class Estimator:
    @classmethod
    def _get_param_names(cls) -> list[str]:
        init = cls.__init__
        if init is object.__init__:
            return []
        names = []
        for p in inspect.signature(init).parameters.values():
            if p.name == "self" or p.kind == p.VAR_KEYWORD:
                continue
            if p.kind == p.VAR_POSITIONAL:
                raise RuntimeError(f"{cls.__name__}'s __init__ takes *args: an estimator names every parameter")
            names.append(p.name)
        return sorted(names)

    def get_params(self, deep: bool = True) -> dict:
        out = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{name}__{k}", v) for k, v in value.get_params().items())
            out[name] = value
        return out

    def set_params(self, **params):
        if not params:
            return self
        valid = self.get_params(deep=True)
        nested: dict[str, dict] = {}
        for name, value in params.items():
            name, delim, sub = name.partition("__")
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for estimator {self}. "
                                 f"Valid parameters are: {self._get_param_names()!r}.")
            if delim:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
                valid[name] = value
        for name, sub_params in nested.items():
            valid[name].set_params(**sub_params)
        return self

    def __sklearn_tags__(self):
        from sklearn.utils import Tags, TargetTags
        return Tags(estimator_type=None, target_tags=TargetTags(required=False), transformer_tags=None,
                    regressor_tags=None, classifier_tags=None)

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = []
        for name in self._get_param_names():
            value = getattr(self, name, None)
            default = defaults.get(name, inspect.Parameter.empty)
            if not _same(value, default):
                changed.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(changed)})"


class Classifier:
    """scikit-learn's ClassifierMixin: the classifier's tags and ``score`` = accuracy of ``predict``."""

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags
        tags = super().__sklearn_tags__()
        tags.estimator_type = "classifier"
        tags.classifier_tags = ClassifierTags()
        tags.target_tags.required = True
        return tags

    def score(self, X, y, sample_weight=None) -> float:
        """Mean accuracy of ``predict(X)`` against ``y`` (weighted by ``sample_weight``)."""
        from sklearn.metrics import accuracy_score
        return accuracy_score(y, self.predict(X), sample_weight=sample_weight)


class Clusterer:
    """scikit-learn's ClusterMixin: the clusterer's tag and ``fit_predict`` = ``fit`` then ``labels_``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.estimator_type = "clusterer"
        if tags.transformer_tags is not None:
            tags.transformer_tags.preserves_dtype = []
        return tags

    def fit_predict(self, X, y=None, **kwargs):
        """Cluster X; labels_ (int64 (n_samples,))."""
        self.fit(X, **kwargs)
        return self.labels_


def _same(value, default) -> bool:
    """Whether a parameter still has its default (scikit-learn's rule: identical, or equal scalars;
    an array or other object that is not the default itself counts as changed)."""
    if value is default:
        return True
    if isinstance(value, (str, int, float, bool, type(None))) and type(value) is type(default):
        return value == default or (value != value and default != default)  # NaN is NaN's default
    return False
