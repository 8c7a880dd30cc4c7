"""``gputext.LinearSVC``: scikit-learn's LinearSVC, parameters and defaults included, solved by
LIBLINEAR (through scikit-learn) or gputext's TRON (on the GPU or its CPU twin).

    from gputext import LinearSVC
    clf = LinearSVC().fit(X, y)            # X: dense, scipy sparse, or (sparse, dense); defaults as scikit-learn's
    clf.predict(X_test); clf.decision_function(X_test); clf.coef_, clf.intercept_, clf.classes_
    clf.solver_                             # "liblinear" or "tron": the rule below

Decisions (docs/python.md repeats them):
- The solver (``solver="auto"``) is chosen by the device and the problem's shape, as LIBLINEAR's
  users choose: on the CPU, where dual resolves to True (``dual="auto"``: fewer samples than
  features, scikit-learn's rule; tf-idf), scikit-learn's LinearSVC itself (LIBLINEAR's dual
  coordinate descent: our TRON's CPU twin took 3-6x its time on 20NG's tf-idf), and where it
  resolves to False (more samples than features: dense meta-features) our TRON's CPU twin (all
  classes at once on every core, and its default stop much nearer the optimum than LIBLINEAR's
  primal default); on the GPU, TRON. ``solver="tron"`` forces TRON on either device (its CPU
  twin on the CPU), ``solver="liblinear"`` forces LIBLINEAR (always on the CPU). Figures in
  docs/python.md (scripts/svm_defaults.py).
- TRON solves penalty="l2", loss="squared_hinge", multi_class="ovr" without class weights. Any
  other setting with device="auto" goes to LIBLINEAR on the CPU (``solver_`` says so); with
  device="cuda" or solver="tron" it raises ValueError, scikit-learn's error for parameters it
  cannot honour. ``dual`` does not change TRON's problem (the primal and the dual have one
  optimum); random_state and verbose are LIBLINEAR's (dual coordinate descent shuffles).
- Same problem as scikit-learn's: with fit_intercept the rows get a constant feature
  intercept_scaling whose weight is regularised like the others (LIBLINEAR -B), and intercept_ =
  intercept_scaling * that weight. Two classes give one weight vector (coef_ (1, m), positive =
  classes_[1]); more give one per class.
- TRON's stopping rule: LIBLINEAR's -s 2 rule |grad f_j(w)| <= eps_j |grad f_j(0)| with eps_j =
  TRON_TOL_SCALE * tol * max(min(pos_j, neg_j), 1) / l_j (gputext.linear.problem.stopping_eps):
  tol scaled by TRON_TOL_SCALE so that the default fit (tol 1e-4) ends within 1e-5 (relative) of
  the optimum's primal objective per class (20NG, C = 1: 3.6e-10 on tf-idf, 2.4e-7 on the
  meta-features, where eps = tol ended 2.0e-3 above; TRON's last Newton steps converge
  quadratically, so the tighter stop cost 3 iterations of 72). LIBLINEAR's own default primal
  stop ends 2.9e-4 above on the meta-features, and took 4x TRON's CPU twin's time: why the CPU
  takes TRON there.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from ..linear.problem import decide, decision_scores
from ..linear.solver import train_path
from .inputs import backend_of

SOLVERS = ("auto", "liblinear", "tron")
TRON_TOL_SCALE = 0.01  # TRON's eps = 0.01 tol: the default tol 1e-4 then ends within 1e-5 of the optimum (docstring)


def tron_refusal(estimator) -> str | None:
    """Why TRON cannot solve the estimator's problem (None when it can)."""
    if estimator.penalty != "l2" or estimator.loss != "squared_hinge":
        return f"penalty={estimator.penalty!r}, loss={estimator.loss!r} (TRON solves penalty='l2', loss='squared_hinge')"
    if estimator.multi_class != "ovr":
        return f"multi_class={estimator.multi_class!r} (TRON solves one-vs-rest)"
    if estimator.class_weight is not None:
        return f"class_weight={estimator.class_weight!r} (TRON weighs every row alike)"
    return None


def as_one_matrix(X):
    """X for LIBLINEAR: a (sparse, dense) pair becomes one CSR matrix (their hstack); else X."""
    if isinstance(X, tuple):
        return sp.hstack([sp.csr_matrix(X[0]), sp.csr_matrix(X[1])], format="csr")
    return X


class LinearSVC(ClassifierMixin, BaseEstimator):
    """Linear support vector classification: scikit-learn's LinearSVC, on the CPU or the GPU.

    Parameters (scikit-learn's, in its order and with its defaults, then ours)
    ----------
    penalty : "l2" | "l1", default "l2"
    loss : "squared_hinge" | "hinge", default "squared_hinge"
    dual : "auto" | bool, default "auto"
        LIBLINEAR's formulation; "auto" picks the primal when n_samples > n_features and the
        combination allows it (scikit-learn's rule). TRON solves the primal whatever it says.
    tol : float, default 1e-4
        LIBLINEAR's stopping tolerance; TRON uses TRON_TOL_SCALE * tol in LIBLINEAR's -s 2 rule
        (module docstring).
    C : float, default 1.0
        Weight of the (squared) hinge loss against the regulariser; > 0.
    multi_class : "ovr" | "crammer_singer", default "ovr"
    fit_intercept : bool, default True
    intercept_scaling : float, default 1.0
        The constant feature's value (its weight is regularised).
    class_weight : dict, "balanced" or None, default None
        C of class c's rows times class_weight[c] (LIBLINEAR only).
    verbose : int, default 0 (LIBLINEAR only).
    random_state : int, RandomState or None, default None
        LIBLINEAR's dual coordinate descent shuffles with it; TRON is deterministic.
    max_iter : int, default 1000
        LIBLINEAR's iterations, or TRON's Newton iterations.
    device : "auto" | "cpu" | "cuda", default "auto"
    solver : "auto" | "liblinear" | "tron", default "auto"
        "auto": TRON on the GPU; on the CPU, LIBLINEAR where dual resolves to True (fewer samples
        than features) and TRON's CPU twin where it resolves to False (module docstring).

    X is dense (n_samples, n_features), SciPy sparse, or a pair (sparse, dense) meaning their
    horizontal concatenation (bag of words beside meta-features; TRON keeps the blocks apart,
    LIBLINEAR gets their CSR hstack). y (n_samples,) labels of any sortable type.

    Fitted attributes: classes_, coef_ float64 (1 or n_classes, n_features), intercept_ float64
    (1 or n_classes,), n_iter_, n_features_in_, solver_ ("liblinear" or "tron"), device_,
    info_ (TRON's work per C; LIBLINEAR: {}).
    """

    def __init__(self, penalty="l2", loss="squared_hinge", *, dual="auto", tol=1e-4, C=1.0, multi_class="ovr",
                 fit_intercept=True, intercept_scaling=1.0, class_weight=None, verbose=0, random_state=None,
                 max_iter=1000, device="auto", solver="auto"):
        self.penalty = penalty
        self.loss = loss
        self.dual = dual
        self.tol = tol
        self.C = C
        self.multi_class = multi_class
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.verbose = verbose
        self.random_state = random_state
        self.max_iter = max_iter
        self.device = device
        self.solver = solver

    def _sklearn_model(self):
        from sklearn.svm import LinearSVC as SkLinearSVC
        params = {name: getattr(self, name) for name in ("penalty", "loss", "dual", "tol", "C", "multi_class",
                                                          "fit_intercept", "intercept_scaling", "class_weight",
                                                          "verbose", "random_state", "max_iter")}
        return SkLinearSVC(**params)

    def _choose_solver(self, n_samples: int, n_features: int):
        """(solver, backend): the rule in the module docstring."""
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {self.solver!r}")
        backend = backend_of(self.device)
        refusal = tron_refusal(self)
        if self.solver == "liblinear":
            return "liblinear", backend
        if self.solver == "auto" and not backend.is_cuda:
            dual = n_samples < n_features if self.dual == "auto" else bool(self.dual)  # scikit-learn's "auto"
            return ("tron" if refusal is None and not dual else "liblinear"), backend
        if refusal is None:
            return "tron", backend
        if self.solver == "auto" and backend.auto:
            return "liblinear", backend
        raise ValueError(f"TRON (solver='tron', or device='cuda') cannot honour {refusal}; "
                         f"use device='cpu' or solver='liblinear' (scikit-learn's LIBLINEAR)")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _check_X(self, X, reset: bool, y="no_validation"):
        """X checked as scikit-learn does (finite numbers, 2-d, n_features_in_); a (sparse, dense)
        pair is checked block by block and kept as blocks. Returns X, or (X, y) when y is given."""
        if not isinstance(X, tuple):
            if isinstance(y, str) and y == "no_validation":
                return validate_data(self, X, accept_sparse="csr", dtype=[np.float32, np.float64], reset=reset)
            return validate_data(self, X, y, accept_sparse="csr", dtype=[np.float32, np.float64], reset=reset)
        if len(X) != 2:
            raise ValueError(f"a tuple X is the pair (sparse block, dense block), got {len(X)} items")
        X = tuple(check_array(P, accept_sparse="csr", dtype=[np.float32, np.float64]) for P in X)
        if X[0].shape[0] != X[1].shape[0]:
            raise ValueError(f"the sparse and dense blocks have {X[0].shape[0]} and {X[1].shape[0]} rows")
        n_features = X[0].shape[1] + X[1].shape[1]
        if reset:
            self.n_features_in_ = n_features
        elif n_features != self.n_features_in_:
            raise ValueError(f"X has {n_features} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        if isinstance(y, str) and y == "no_validation":
            return X
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != X[0].shape[0]:
            raise ValueError(f"y must be 1-d with one label per row of X ({X[0].shape[0]}), got shape {y.shape}")
        return X, y

    def fit(self, X, y):
        """X (n_samples, n_features): dense, scipy sparse, or a (sparse, dense) pair; y (n_samples,)
        labels. No sample_weight (scikit-learn's fit has one; here it is a TypeError)."""
        X, y = self._check_X(X, reset=True, y=y)
        check_classification_targets(y)
        solver, backend = self._choose_solver(X[0].shape[0] if isinstance(X, tuple) else X.shape[0],
                                              self.n_features_in_)
        if solver == "liblinear":
            return self._fit_liblinear(as_one_matrix(X), y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(f"This solver needs samples of at least 2 classes in the data, but the data contains "
                             f"only one class: {self.classes_[0]!r}")
        if not (self.C > 0):
            raise ValueError(f"C must be positive, got {self.C}")
        if self.dual not in ("auto", True, False):
            raise ValueError(f"dual must be 'auto', True or False, got {self.dual!r}")
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        res = train_path(X, codes.astype(np.int32), self.classes_.size, [float(self.C)],
                         tol=TRON_TOL_SCALE * float(self.tol), max_iter=self.max_iter, bias=bias, device=backend)
        W = res.weights[float(self.C)]
        if self.fit_intercept:
            self.coef_, self.intercept_ = W[:-1].T.copy(), bias * W[-1]
        else:
            self.coef_, self.intercept_ = W.T.copy(), np.zeros(W.shape[1])
        self.n_iter_ = max(res.info["iterations"].values())
        self.info_ = res.info
        self.solver_, self.device_ = "tron", backend.name
        return self

    def _fit_liblinear(self, X, y):
        """scikit-learn's LinearSVC on the CPU; its fitted weights become ours."""
        model = self._sklearn_model().fit(X, y)
        self.classes_, self.coef_, self.intercept_ = model.classes_, model.coef_, model.intercept_
        self.n_iter_ = int(model.n_iter_)
        self.info_ = {}
        self.solver_, self.device_ = "liblinear", "cpu"
        return self

    def decision_function(self, X) -> np.ndarray:
        """float64 (n_samples,) for two classes (positive: classes_[1]), else (n_samples, n_classes)."""
        check_is_fitted(self)
        scores = decision_scores(self._check_X(X, reset=False), self.coef_, self.intercept_)
        return scores[:, 0] if self.classes_.size == 2 else scores

    def predict(self, X) -> np.ndarray:
        """Labels (n_samples,): the class of largest decision value (two classes: classes_[1] where > 0)."""
        check_is_fitted(self)
        scores = decision_scores(self._check_X(X, reset=False), self.coef_, self.intercept_)
        return self.classes_[decide(scores, self.classes_.size)]
