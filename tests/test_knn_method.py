"""gputext.knn.method.choose_method: the one decision of --method auto (CPU rules; the GPU rules
need device memory and are exercised by the gpu tests)."""
import pytest

from gputext.backend import Backend
from gputext.errors import InputError
from gputext.knn.method import METHODS, choose_method

CPU = Backend("cpu", False, "test")


def test_requested_methods_are_taken_and_unknown_ones_refused():
    assert choose_method("inverted", 10, 10, 100, CPU) == ("inverted", "requested")
    assert choose_method("dense", 10, 10, 1, CPU) == ("dense", "requested")
    with pytest.raises(InputError, match="unknown method"):
        choose_method("brute", 10, 10, 1, CPU)
    assert METHODS == ("inverted", "dense", "auto")


def test_auto_on_the_cpu_keeps_a_built_index_and_otherwise_asks_dense_fits():
    # half full: dense_fits' host rule says dense, unless the caller already holds the inverted index
    assert choose_method("auto", 1000, 100, 50_000, CPU)[0] == "dense"
    assert choose_method("auto", 1000, 100, 50_000, CPU, index_built=True)[0] == "inverted"
    # sparse text (CNAE-9's shape): inverted either way
    assert choose_method("auto", 1080, 856, 7233, CPU)[0] == "inverted"
    assert choose_method("auto", 1080, 856, 7233, CPU, k=5000, index_built=True)[0] == "inverted"


def test_auto_takes_the_grouped_inverted_search_for_several_classes():
    # the meta-features: half-full training rows would be dense for one search, not for 52 classes
    assert choose_method("auto", 1000, 100, 50_000, CPU, groups=1)[0] == "dense"
    method, reason = choose_method("auto", 1000, 100, 50_000, CPU, k=30, groups=52)
    assert method == "inverted" and "52 classes" in reason
    GPU = Backend("cuda", False, "test")
    assert choose_method("auto", 1000, 100, 50_000, GPU, k=30, groups=52)[0] == "inverted"
    assert choose_method("dense", 1000, 100, 50_000, GPU, k=30, groups=52) == ("dense", "requested")
