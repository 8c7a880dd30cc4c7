"""Where a request runs: the device is decided once (a Backend passed down), and a method that
cannot serve a request on the device ``auto`` chose hands it to one that can, in one line."""
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.backend import Backend, as_backend
from gputext.engine import Index, search_topk, search_topk_grouped
from gputext.errors import InputError


def _problem():
    rng = np.random.default_rng(3)
    X = sp.random(60, 40, density=0.2, format="csr", dtype=np.float32, random_state=rng)
    Q = sp.random(4, 40, density=0.3, format="csr", dtype=np.float32, random_state=rng)
    return Index.from_csr(X), Q


def test_as_backend_keeps_a_backend_and_resolves_a_name():
    b = Backend("cuda", True, "given")
    assert as_backend(b) is b
    assert as_backend("cpu").name == "cpu" and not as_backend("cpu").auto


def test_auto_cuda_serves_k_above_the_selector_with_the_cpu_twin(capsys):
    index, Q = _problem()
    auto_gpu = Backend("cuda", False, "auto chose the GPU (test)", auto=True)  # no kernel runs: k is too large
    stats = {}
    got = search_topk(index, Q, 1100, "cosine", auto_gpu, quiet=False, stats=stats)
    want = search_topk(index, Q, 1100, "cosine", "cpu")
    assert np.array_equal(got[0], want[0]) and np.array_equal(np.isnan(got[1]), np.isnan(want[1]))
    assert np.array_equal(got[1][~np.isnan(got[1])], want[1][~np.isnan(want[1])])
    assert stats["backend"] == "cpu" and "CPU twin" in stats["fallback"] and "1024" in stats["fallback"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CPU twin" in err
    gp = np.array([0, 30, 60])
    stats = {}
    search_topk_grouped(index, Q, 600, gp, device=auto_gpu, stats=stats)
    assert stats["backend"] == "cpu" and "512" in stats["fallback"]


def test_explicit_cuda_above_the_selector_is_an_error():
    index, Q = _problem()
    with pytest.raises(InputError, match="at most 1024"):
        search_topk(index, Q, 1025, "cosine", Backend("cuda", False, "requested"))
