"""One-vs-rest squared-hinge SVM trained by TRON (gputext.linear): kernels' CPU twins against a
float64 NumPy reference, the solver against scikit-learn's LinearSVC(dual=False) at a tight
tolerance (LIBLINEAR -s 2, the same problem), the batched folds against separate fits, the
estimator, and the CUDA operations in the simulator against the CPU twin."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from gputext.kernels import linear_svm as K
from gputext.kernels import products as P
from gputext.estimators.svm import LinearSVC
from gputext.linear.ops import CpuSvmOps
from gputext.linear.problem import decide, make_blocks, make_columns, stopping_eps
from gputext.linear.solver import train_path


def problem(seed=0, n=120, m=7, ms=11, n_classes=4):
    """Dense and sparse blocks with class signal; labels (n,) int32."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n).astype(np.int32)
    Xd = rng.normal(size=(n, m)).astype(np.float32)
    Xd[np.arange(n), y % m] += 1.3
    Xs = sp.random(n, ms, density=0.3, random_state=seed + 1, format="csr", dtype=np.float32)
    return Xd, Xs, y


def with_bias(X) -> np.ndarray:
    parts = X if isinstance(X, tuple) else (X,)
    dense = np.hstack([P.toarray() if sp.issparse(P) else P for P in parts]).astype(np.float64)
    return np.hstack([dense, np.ones((dense.shape[0], 1))])


def primal(Xb, y, w, C, cls):
    """float64 reference of f(w) = w.w/2 + C sum max(0, 1 - y w.x)^2 for class ``cls`` vs rest."""
    yy = np.where(y == cls, 1.0, -1.0)
    return 0.5 * w @ w + C * np.sum(np.maximum(0.0, 1.0 - yy * (Xb @ w)) ** 2)


def sklearn_svc(X, y, C):
    from sklearn.svm import LinearSVC as SkLinearSVC
    Xd = with_bias(X)[:, :-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SkLinearSVC(C=C, dual=False, tol=1e-10, max_iter=10000).fit(Xd, y)


def test_cpu_products_match_numpy():
    Xd, Xs, _ = problem()
    rng = np.random.default_rng(3)
    V = rng.normal(size=(Xd.shape[1], 5))
    out = np.empty((Xd.shape[0], 5))
    P.dense_matmat_cpu(Xd, V, out)
    np.testing.assert_allclose(out, Xd.astype(np.float64) @ V, rtol=1e-12, atol=1e-12)
    Vs = rng.normal(size=(Xs.shape[1], 5))
    P.csr_matmat_cpu(Xs.indptr.astype(np.int64), Xs.indices.astype(np.int32), Xs.data, Vs, out)
    np.testing.assert_allclose(out, Xs.toarray().astype(np.float64) @ Vs, rtol=1e-12, atol=1e-12)


def test_pair_products_equal_masked_full_products():
    """X_I^T (X_I v) through the active-pair lists equals the masked dense formula."""
    Xd, Xs, y = problem(1)
    blocks = make_blocks((Xs, Xd), bias=1.0)
    cols = make_columns(y, 4, y % 3, groups=(0, 1, -1))
    ops = CpuSvmOps(blocks, cols)
    rng = np.random.default_rng(4)
    W = rng.normal(size=(blocks.n_features, cols.k)) * 0.3
    ops.evaluate(W, None)
    ops.accept(np.ones(cols.k, bool))
    Xb = with_bias((Xs, Xd))
    Z = Xb @ W
    yy = np.where(y[:, None] == cols.cls[None, :], 1.0, -1.0)
    trains = (cols.folds[:, None] != cols.group[None, :])
    active = trains & (yy * Z < 1)
    D = rng.normal(size=W.shape)
    scale = np.full(cols.k, 0.7)
    out = np.zeros_like(W)
    ops.hess(D, scale, None, out)
    np.testing.assert_allclose(out, D + scale * (Xb.T @ (active * (Xb @ D))), rtol=1e-10, atol=1e-10)
    ops.grad(W, scale, None, out)
    np.testing.assert_allclose(out, W + scale * (Xb.T @ (active * (Z - yy))), rtol=1e-10, atol=1e-10)
    loss = ops.evaluate(W, None)
    np.testing.assert_allclose(loss, np.sum(np.where(active, (1 - yy * Z) ** 2, 0), axis=0), rtol=1e-12)


@pytest.mark.parametrize("kind", ["dense", "sparse", "both"])
@pytest.mark.parametrize("C", [0.25, 16.0])
def test_objective_equals_liblinear_at_tight_tolerance(kind, C):
    Xd, Xs, y = problem(2)
    X = {"dense": Xd, "sparse": Xs, "both": (Xs, Xd)}[kind]
    res = train_path(X, y, 4, [C], tol=1e-10, device="cpu")
    W = res.weights[C]
    ref = sklearn_svc(X, y, C)
    Xb = with_bias(X)
    for c in range(4):
        mine = primal(Xb, y, W[:, c], C, c)
        theirs = primal(Xb, y, np.concatenate([ref.coef_[c], ref.intercept_[c:c + 1]]), C, c)
        assert abs(mine - theirs) <= 1e-9 * theirs
    scores = Xb @ W
    ours = decide(scores, 4)
    top2 = np.sort(scores, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-6
    np.testing.assert_array_equal(ours[clear], ref.predict(with_bias(X)[:, :-1])[clear])


def test_stopping_eps_is_liblinears_class_balance_rule():
    y = np.array([0, 0, 0, 1, 2, 2], np.int32)
    cols = make_columns(y, 3)
    np.testing.assert_allclose(stopping_eps(0.01, cols), 0.01 * np.array([3, 1, 2]) / 6)
    two = make_columns(np.array([0, 1, 1], np.int32), 2)
    assert two.k == 1 and two.cls[0] == 1  # one column for two classes, +1 = class 1


def test_batched_folds_equal_separate_fits():
    """Each fold's columns, trained together with the others along the C path, reach the same
    optimum as a separate cold fit on that fold's training rows."""
    Xd, _, y = problem(5, n=90)
    folds = (np.arange(90) % 3).astype(np.int32)
    res = train_path(Xd, y, 4, [0.5, 2.0], folds=folds, n_folds=3, tol=1e-10, device="cpu")
    Xb = with_bias(Xd)
    for C in (0.5, 2.0):
        accs = []
        for g in range(3):
            tr, te = folds != g, folds == g
            alone = train_path(Xd[tr], y[tr], 4, [C], tol=1e-10, device="cpu").weights[C]
            accs.append(np.mean(decide(Xb[te] @ alone, 4) == y[te]))
        assert res.mean_accuracy[C] == pytest.approx(np.mean(accs))
        full = train_path(Xd, y, 4, [C], tol=1e-10, device="cpu").weights[C]
        for c in range(4):
            a, b = primal(Xb, y, res.weights[C][:, c], C, c), primal(Xb, y, full[:, c], C, c)
            assert abs(a - b) <= 1e-9 * b
    best = max(res.mean_accuracy.values())
    assert res.C == min(c for c, a in res.mean_accuracy.items() if a == best)


@pytest.mark.parametrize("solver", ["liblinear", "tron"])
def test_estimator_binary_and_multiclass_match_sklearn(solver):
    Xd, Xs, y = problem(6)
    for labels in (np.array(["a", "b"])[y % 2], np.array(["w", "x", "y", "z"])[y]):
        ours = LinearSVC(C=1.0, tol=1e-10, device="cpu", solver=solver).fit(Xd, labels)
        assert ours.solver_ == solver
        from sklearn.svm import LinearSVC as SkLinearSVC
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = SkLinearSVC(C=1.0, dual=False, tol=1e-10, max_iter=10000).fit(Xd, labels)
        np.testing.assert_array_equal(ours.classes_, ref.classes_)
        assert ours.coef_.shape == ref.coef_.shape
        np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-5)
        np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-5)
        np.testing.assert_array_equal(ours.predict(Xd), ref.predict(Xd))
        np.testing.assert_allclose(ours.decision_function(Xd), ref.decision_function(Xd), atol=1e-4)


def test_fit_svm_solvers_agree_on_choice_and_predictions():
    from gputext.knn.svm import fit_svm
    Xd, _, y = problem(7, n=150)
    a, Ca, sa = fit_svm(Xd, y, C_grid=(0.25, 4.0), cv_folds=3, solver="tron", device="cpu", tol=1e-8)
    b, Cb, sb = fit_svm(Xd, y, C_grid=(0.25, 4.0), cv_folds=3, solver="liblinear", tol=1e-8, n_jobs=1)
    assert set(sa) == set(sb) == {0.25, 4.0}
    for C in sa:
        assert sa[C] == pytest.approx(sb[C], abs=1 / 50)  # one fold document at most
    assert Ca == Cb
    np.testing.assert_array_equal(a.predict(Xd), b.predict(Xd))


# ----------------------------------------------------------------------------- CUDA simulator

@pytest.mark.cudasim
def test_cuda_ops_equal_cpu_twin():
    """Both blocks (the sparse and the dense products, the split sum), a column subset, a fold group."""
    from numba import cuda

    from gputext.linear.cuda_ops import CudaSvmOps
    Xd, Xs, y = problem(8, n=20, m=3, ms=5, n_classes=3)
    X = (Xs, Xd)
    blocks = make_blocks(X, bias=1.0)
    cols = make_columns(y, 3, (np.arange(20) % 2).astype(np.int32), groups=(0, -1))
    cpu, dev = CpuSvmOps(blocks, cols), CudaSvmOps(blocks, cols)
    rng = np.random.default_rng(9)
    W = rng.normal(size=(blocks.n_features, cols.k)) * 0.5
    D = rng.normal(size=W.shape)
    sub = np.array([0, 2, 5])
    np.testing.assert_allclose(dev.evaluate(cuda.to_device(W), sub)[sub], cpu.evaluate(W, sub)[sub], rtol=1e-12)
    mask = np.zeros(cols.k, bool)
    mask[sub] = True
    dev.accept(mask)
    cpu.accept(mask)
    scale = np.linspace(0.5, 2.0, cols.k)
    for name in ("grad", "hess"):
        a, b = np.zeros_like(W), dev.zeros()
        arg = W if name == "grad" else D
        getattr(cpu, name)(arg, scale, sub, a)
        getattr(dev, name)(cuda.to_device(arg), scale, sub, b)
        np.testing.assert_allclose(b.copy_to_host()[:, sub], a[:, sub], rtol=1e-11, atol=1e-12)
    space = dev.space
    A, B = cuda.to_device(W), cuda.to_device(D)
    np.testing.assert_allclose(space.dot(A, B), np.einsum("ij,ij->j", W, D), rtol=1e-12)
    alpha = rng.normal(size=cols.k)
    space.axpy(alpha, A, B, mask)
    np.testing.assert_array_equal(B.copy_to_host(), np.where(mask, D + alpha * W, D))


@pytest.mark.cudasim
def test_cuda_pair_products_equal_cpu_twin():
    """A dense block alone takes the active-pair products (count, fill, forward with the eight-lane
    shuffle tree and a tail of m % 8 features, backward, residual): the CPU twin's values on a
    column subset and a fold group, and the structure is rebuilt after an accepted step."""
    from numba import cuda

    from gputext.linear.cuda_ops import CudaSvmOps
    Xd, _, y = problem(12, n=18, m=10, n_classes=3)
    blocks = make_blocks(Xd, bias=1.0)
    cols = make_columns(y, 3, (np.arange(18) % 2).astype(np.int32), groups=(0, -1))
    cpu, dev = CpuSvmOps(blocks, cols), CudaSvmOps(blocks, cols)
    assert dev.use_pairs
    rng = np.random.default_rng(13)
    scale = np.linspace(0.5, 2.0, cols.k)
    sub = np.array([1, 3, 4])
    for step in range(2):
        W = rng.normal(size=(blocks.n_features, cols.k)) * 0.4
        D = rng.normal(size=W.shape)
        mask = np.ones(cols.k, bool)
        dev.evaluate(cuda.to_device(W), None)
        cpu.evaluate(W, None)
        dev.accept(mask)
        cpu.accept(mask)
        for name, arg in (("grad", W), ("hess", D)):
            a, b = np.zeros_like(W), dev.zeros()
            getattr(cpu, name)(arg, scale, sub, a)
            getattr(dev, name)(cuda.to_device(arg), scale, sub, b)
            np.testing.assert_allclose(b.copy_to_host()[:, sub], a[:, sub], rtol=1e-12, atol=1e-13)
        assert dev.pairs_built == step + 1
    ptr, rows = cpu._pairs(np.arange(cols.k))
    np.testing.assert_array_equal(np.diff(ptr), dev.pair_counts)
    np.testing.assert_array_equal(dev.d_rows.copy_to_host()[:rows.size], rows)


@pytest.mark.cudasim
def test_cuda_training_equals_cpu_twin():
    from gputext.backend import resolve
    Xd, _, y = problem(10, n=16, m=2, n_classes=2)
    a = train_path(Xd, y, 2, [1.0], tol=1e-3, device="cpu")
    b = train_path(Xd, y, 2, [1.0], tol=1e-3, device=resolve("cuda"))
    np.testing.assert_allclose(b.weights[1.0], a.weights[1.0], rtol=1e-9, atol=1e-12)
    assert a.info["iterations"] == b.info["iterations"]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["dense", "sparse", "both"])
def test_gpu_training_equals_cpu_twin(kind):
    """On a real GPU, at a size with several GEMM tiles and split-K chunks: the same optimum as the
    CPU twin (objective per column to 1e-9) and the same fold accuracies and choice of C."""
    Xd, Xs, y = problem(11, n=3000, m=150, ms=900, n_classes=5)
    X = {"dense": Xd, "sparse": Xs, "both": (Xs, Xd)}[kind]
    folds = (np.arange(3000) % 3).astype(np.int32)
    a = train_path(X, y, 5, [0.25, 4.0], folds=folds, n_folds=3, tol=1e-8, device="cpu")
    b = train_path(X, y, 5, [0.25, 4.0], folds=folds, n_folds=3, tol=1e-8, device="cuda")
    Xb = with_bias(X)
    for C in (0.25, 4.0):
        for c in range(5):
            fa, fb = primal(Xb, y, a.weights[C][:, c], C, c), primal(Xb, y, b.weights[C][:, c], C, c)
            assert abs(fa - fb) <= 1e-9 * fa
        assert a.fold_accuracy[C] == pytest.approx(b.fold_accuracy[C], abs=2 / 1000)
    assert a.C == b.C


def test_estimator_takes_sklearns_parameters_and_refuses_what_tron_cannot_honour():
    from sklearn.svm import LinearSVC as SkLinearSVC
    Xd, Xs, y = problem(12)
    for params in (dict(class_weight="balanced"), dict(penalty="l1", dual=False), dict(loss="hinge", dual=True),
                   dict(multi_class="crammer_singer"), dict(dual=True, max_iter=50, tol=1e-3)):
        params["random_state"] = 0  # LIBLINEAR shuffles (coordinate descent) and seeds from it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter=50
            ours = LinearSVC(device="cpu", **params).fit((Xs, Xd), y)
            ref = SkLinearSVC(**params).fit(sp.hstack([Xs, sp.csr_matrix(Xd)], format="csr"), y)
        assert ours.solver_ == "liblinear" and ours.device_ == "cpu"
        np.testing.assert_array_equal(ours.coef_, ref.coef_)
        np.testing.assert_array_equal(ours.predict((Xs, Xd)), ref.predict(sp.hstack([Xs, sp.csr_matrix(Xd)])))
    with pytest.raises(ValueError, match="TRON .* cannot honour class_weight='balanced'"):
        LinearSVC(class_weight="balanced", solver="tron", device="cpu").fit(Xd, y)
    with pytest.raises(ValueError, match="combination of penalty='l1' and loss='hinge' is not supported"):
        LinearSVC(penalty="l1", loss="hinge", device="cpu").fit(Xd, y)
    tron = LinearSVC(dual=True, random_state=3, solver="tron", device="cpu").fit(Xd, y)  # one optimum: dual ignored
    assert tron.solver_ == "tron" and np.array_equal(tron.coef_, LinearSVC(solver="tron", device="cpu").fit(Xd, y).coef_)


def test_stratified_test_folds_equal_scikit_learns():
    """gputext.linear.folds gives StratifiedKFold(shuffle=True)'s folds without importing scikit-learn
    (the CLI's C grid search then chooses the same C)."""
    import warnings

    from sklearn.model_selection import StratifiedKFold

    from gputext.linear.folds import fold_splits, stratified_test_folds

    rng = np.random.default_rng(3)
    for _ in range(30):
        n, c, f, seed = int(rng.integers(10, 300)), int(rng.integers(2, 9)), int(rng.integers(2, 6)), int(rng.integers(1000))
        y = rng.choice([f"c{i}" for i in range(c)], size=n, p=rng.dirichlet(np.ones(c)))
        if np.all(np.unique(y, return_counts=True)[1] < f):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = list(StratifiedKFold(f, shuffle=True, random_state=seed).split(np.zeros(n), y))
        for (a_tr, a_te), (b_tr, b_te) in zip(ref, fold_splits(stratified_test_folds(y, f, seed), f)):
            assert np.array_equal(a_tr, b_tr) and np.array_equal(a_te, b_te)


def test_auto_solver_on_the_cpu_follows_the_problems_shape():
    Xd, Xs, y = problem(13)
    assert LinearSVC(device="cpu").fit(Xd, y).solver_ == "tron"  # more samples than features: the primal
    wide = sp.hstack([Xs, sp.random(Xs.shape[0], 200, density=0.05, random_state=1, format="csr")], format="csr")
    assert LinearSVC(device="cpu").fit(wide, y).solver_ == "liblinear"  # more features: LIBLINEAR's dual
    assert LinearSVC(device="cpu", dual=True).fit(Xd, y).solver_ == "liblinear"
    assert LinearSVC(device="cpu", class_weight="balanced").fit(Xd, y).solver_ == "liblinear"


def test_tron_default_fit_ends_within_1e_5_of_the_optimum():
    """The default stop (TRON_TOL_SCALE * tol) against the tol-1e-10 optimum, per class, on the
    sparse and dense blocks side by side (scripts/svm_defaults.py measures it on 20NG)."""
    Xd, Xs, y = problem(14, n=400)
    Xb = with_bias((Xs, Xd))
    default = LinearSVC(solver="tron", device="cpu").fit((Xs, Xd), y)
    optimum = LinearSVC(solver="tron", tol=1e-10, device="cpu").fit((Xs, Xd), y)
    for c in range(4):
        w = np.append(default.coef_[c], default.intercept_[c])
        w_star = np.append(optimum.coef_[c], optimum.intercept_[c])
        f, f_star = primal(Xb, y, w, 1.0, c), primal(Xb, y, w_star, 1.0, c)
        assert -1e-12 <= (f - f_star) / f_star <= 1e-5


@pytest.mark.gpu
def test_gpu_default_fit_is_tron_within_1e_5_of_the_optimum():
    """On a real GPU: solver "auto" runs TRON on the device, and its default stop ends within 1e-5
    of the CPU twin's tol-1e-10 optimum per class (scripts/svm_defaults.py --device cuda: 20NG)."""
    Xd, Xs, y = problem(15, n=3000, m=150, ms=900, n_classes=5)
    Xb = with_bias((Xs, Xd))
    default = LinearSVC(device="cuda").fit((Xs, Xd), y)
    optimum = LinearSVC(solver="tron", tol=1e-10, device="cpu").fit((Xs, Xd), y)
    assert default.solver_ == "tron" and default.device_ == "cuda"
    for c in range(5):
        f = primal(Xb, y, np.append(default.coef_[c], default.intercept_[c]), 1.0, c)
        f_star = primal(Xb, y, np.append(optimum.coef_[c], optimum.intercept_[c]), 1.0, c)
        assert -1e-9 <= (f - f_star) / f_star <= 1e-5
