"""RankSVM's CUDA ops on a real GPU (run on the GPU host: make test-gpu) with the production
geometry: objective, gradient, Hessian products and the pair statistics equal the CPU twin's,
for the dense and the sparse path, with queries long enough for the global-memory sort."""
import numpy as np
import pytest

from gputext.rank.data import prepare
from gputext.rank.objective import RankObjective
from test_rank_reference import random_problem

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("density", [1.0, 0.4])
def test_gpu_objective_equals_cpu_twin(density):
    # queries of up to 3,000 documents: those above sort_capacity (2,048) take the global sort
    X, qid, rel, w = random_problem(21, n_queries=60, max_docs=3000, n_features=40, n_levels=5, density=density)
    data = prepare(X, qid, rel)
    gpu = RankObjective(data, 0.5, "cuda")
    cpu = RankObjective(data, 0.5, "cpu")
    rng = np.random.default_rng(22)
    for step in range(3):  # several points: the launches' arguments change between calls
        point = w + 0.25 * step * rng.normal(size=w.size)
        fg, gg = gpu.fun_grad(point)
        fc, gc = cpu.fun_grad(point)
        assert fg == pytest.approx(fc, rel=1e-12)
        np.testing.assert_allclose(gg, gc, rtol=1e-10, atol=1e-9)
        v = rng.normal(size=w.size)
        np.testing.assert_allclose(gpu.hess_vec(v), cpu.hess_vec(v), rtol=1e-10, atol=1e-9)
        sg, sc = gpu.ops.statistics(), cpu.ops.statistics()
        for key in ("beta_minus", "beta_plus", "order", "lo", "hi"):
            np.testing.assert_array_equal(sg[key], sc[key], err_msg=key)
        # X w sums 40 products in another order on the device: a score near 0 differs by a few
        # ulps of the largest score (H100, 2026-11-27: 2.7e-15 against scores up to 13), not of itself
        cs = cpu.scores(point)
        np.testing.assert_allclose(gpu.scores(point), cs, rtol=1e-12, atol=1e-13 * np.abs(cs).max())
