"""The kNN weight bound (docs/knn_search.md, "Weights"): |w| >= 2^40 is refused before any
scoring, on the CPU twin and on the device path (the CUDA simulator), for the index and for the
queries, by the sparse engine and by the dense kernels; weights below it are scored."""
import numpy as np
import pytest
import scipy.sparse as sp

from gputext.engine import Index, search_topk
from gputext.engine.index import MAX_ABS_WEIGHT
from gputext.errors import InputError


def _matrix(big: float | None, seed: int = 0) -> sp.csr_matrix:
    X = sp.random(12, 10, density=0.5, random_state=seed, format="csr", dtype=np.float32)
    X.data[:] = np.linspace(0.1, 1.0, X.nnz, dtype=np.float32)
    if big is not None:
        X.data[2] = big
    return X


def _refuses(device: str) -> None:
    with pytest.raises(InputError, match="indexed matrix has a weight of magnitude 3e\\+38"):
        search_topk(Index.from_csr(_matrix(3e38)), _matrix(None, 1), 3, device=device)
    with pytest.raises(InputError, match="query matrix has a weight of magnitude 1e\\+20"):
        search_topk(Index.from_csr(_matrix(None)), _matrix(1e20, 1), 3, device=device)


def test_weight_bound_on_the_cpu_twin():
    _refuses("cpu")
    indices, _ = search_topk(Index.from_csr(_matrix(MAX_ABS_WEIGHT / 2)), _matrix(None, 1), 3, device="cpu")
    assert indices.shape == (12, 3) and (indices >= 0).all()


def test_weight_bound_in_the_dense_kernels():
    from gputext.knn.dense import search_dense
    with pytest.raises(InputError, match="document matrix has a weight of magnitude 3e\\+38"):
        search_dense(_matrix(3e38), _matrix(None, 1), 3, device="cpu")
    with pytest.raises(InputError, match="query matrix has a weight of magnitude 3e\\+38"):
        search_dense(_matrix(None), _matrix(3e38, 1), 3, device="cpu")


@pytest.mark.gpu
def test_weight_bound_on_a_real_gpu():
    _refuses("cuda")
    indices, _ = search_topk(Index.from_csr(_matrix(MAX_ABS_WEIGHT / 2)), _matrix(None, 1), 3, device="cuda")
    cpu, _ = search_topk(Index.from_csr(_matrix(MAX_ABS_WEIGHT / 2)), _matrix(None, 1), 3, device="cpu")
    assert np.array_equal(indices, cpu)


@pytest.mark.cudasim
def test_weight_bound_on_the_device_path():
    """Refused before any kernel runs (searching below the bound in the simulator is
    tests/test_engine.py's business; it costs ~40 s of simulated threads)."""
    _refuses("cuda")
