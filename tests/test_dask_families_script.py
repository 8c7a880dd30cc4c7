"""scripts/gpu_dask_families.py's parts that decide what a GPU round measures, on the CPU without a
cluster: the budget (which sections start, when second runs and the star's full size are left
out), bit-for-bit equality, and a worker's first answer with its compilations counted (numba's
compile events; loads from the kernel cache are not compilations). The whole script runs with
--quick --device cpu in about a minute (not here)."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import scipy.sparse as sp

from gputext.io.corpus import Corpus, write_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load():
    path = os.path.join(ROOT, "scripts", "gpu_dask_families.py")
    spec = importlib.util.spec_from_file_location("gpu_dask_families_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_budget_starts_sections_in_order_and_keeps_time_for_the_later_ones(monkeypatch):
    fam = load()
    sections = ["first-answer", "meta", "kill", "rank", "star"]
    assert fam.Budget(0, sections, quick=False).why_not("star") == ""  # 0: no limit
    assert fam.Budget(0, sections, quick=False).spare("meta") == float("inf")
    b = fam.Budget(300, sections, quick=False)
    monkeypatch.setattr(fam, "T_START", fam.time.monotonic() - 100)  # 200 s left
    assert b.after("meta") == fam.WANT["kill"] + fam.WANT["rank"] + fam.WANT["star"]
    assert b.after("star") == 0 and 199 < b.left() <= 200
    assert b.why_not("meta") == ""  # started: it is more important than what follows
    monkeypatch.setattr(fam, "T_START", fam.time.monotonic() - 280)  # 20 s left
    assert "not started: 20 s of the 300 s budget were left, it needs at least ~35 s" in b.why_not("kill")


def test_star_size_follows_the_square_of_the_documents():
    fam = load()
    assert fam.docs_that_fit(10**6, 2 * 10**5, 2.0, float("inf")) == 10**6
    assert fam.docs_that_fit(10**6, 2 * 10**5, 2.0, 50.0) == 10**6  # (10^6 / 2*10^5)^2 x 2 s = 50 s
    assert fam.docs_that_fit(10**6, 2 * 10**5, 2.0, 18.0) == 6 * 10**5  # 3x the probe: 18 s
    assert fam.docs_that_fit(10**6, 2 * 10**5, 2.0, -5.0) == 0


def test_bits_equal_is_bit_for_bit():
    fam = load()
    a = np.array([0.0, 1.5, np.nan], np.float32)
    assert fam.bits_equal(a, a.copy()) and not fam.bits_equal(a, a.astype(np.float64))
    assert not fam.bits_equal(np.array([0.0], np.float32), np.array([-0.0], np.float32))
    assert not fam.bits_equal(a, a[:2]) and fam.bits_equal(None, None) and not fam.bits_equal(a, None)
    X = sp.random(5, 7, density=0.4, format="csr", dtype=np.float32, random_state=0)
    Y = X.copy()
    assert fam.csr_bits_equal(X, Y)
    Y.data[0] = -Y.data[0]
    assert not fam.csr_bits_equal(X, Y)


def test_compile_counter_counts_compilations_not_calls():
    import numba
    fam = load()

    @numba.njit
    def twice(x):
        return 2 * x

    rec = fam.compile_counter()
    try:
        before = rec.snapshot()
        twice(3)
        first = rec.snapshot()
        twice(4)
        second = rec.snapshot()
    finally:
        rec.stop()
    delta = fam.compile_delta(before, first)
    assert delta["compiles"] == 1 and delta["names"][0].endswith(".twice") and delta["seconds"] > 0
    assert fam.compile_delta(first, second) == {"compiles": 0, "seconds": 0.0, "names": [], "cache_entries_added": 0}
    twice(2.5)  # stopped: a new specialisation is not recorded
    assert rec.snapshot()["compiles"] == 1


def test_worker_first_answer_on_the_cpu(tmp_path):
    """What each Dask worker runs in the first-answer section, called here: rows of two files, the
    build, two searches; the second search compiles nothing."""
    from gputext.distributed.shards import file_source
    fam = load()
    rng = np.random.default_rng(3)
    paths = []
    for i in range(2):
        X = sp.random(60, 30, density=0.2, format="csr", dtype=np.float32, random_state=i)
        X.data = rng.random(X.nnz, dtype=np.float32) + 0.1
        paths.append(str(tmp_path / f"part{i}.h5"))
        write_corpus(Corpus(X), paths[-1], compression=None)
    source, _ = file_source(paths)
    out = fam.worker_first_answer(source, 40, 100, X[:1], "cpu")
    assert out["rows"] == [40, 100] and out["bytes"] > 0 and out["read_gb_s"] > 0
    assert set(out["compiled"]) == {"read", "build", "first_call", "second_call"}
    assert out["compiled"]["second_call"]["compiles"] == 0
    assert all(out[k] >= 0 for k in ("read_s", "build_s", "first_call_s", "second_call_s"))
