"""The device runtime (gputext.device): workspaces, pinned buffers, packed uploads, staged
copy-back, the launch layer and the stage timer.

Simulator tests check the dispatcher path of ``Launch`` and the memory helpers; the ``gpu`` tests
check the raw path (one cuLaunchKernel per launch, arguments rewritten in place) against numba's
dispatcher and the engine's single-query plan against the CPU twin, on the GPU host.
"""
import numpy as np
import pytest
import scipy.sparse as sp
from numba import cuda

from gputext.device.timer import RunReport, StageTimer


@cuda.jit
def axpy(x, a, b, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a * x[i] + b


@cuda.jit
def rows_sum(m, out):
    r = cuda.blockIdx.y
    i = cuda.threadIdx.x
    if i == 0:
        s = 0.0
        for j in range(m.shape[1]):
            s += m[r, j]
        out[r] = s


def test_run_report_stats_view_and_host_timer():
    timer = StageTimer(on=True, device=False)
    timer.mark("a")
    timer.host("b")
    timer.mark("a")
    assert set(timer.host_ms) == {"a", "b"} and all(v >= 0 for v in timer.host_ms.values())
    assert timer.device_ms() == {}
    report = RunReport(backend="cpu", seconds=1.5)
    report.host_ms.update(timer.host_ms)
    stats = {"other": 1}
    report.into(stats)
    assert stats["backend"] == "cpu" and stats["seconds"] == 1.5 and stats["other"] == 1
    assert "stages_ms" not in stats and set(stats["host_ms"]) == {"a", "b"}
    off = StageTimer(on=False)
    off.mark("x")
    assert off.host_ms == {} and off.device_ms() == {}


def test_blocks_and_next_pow2():
    from gputext.device.launch import blocks, next_pow2
    assert [blocks(n, 4) for n in (0, 1, 4, 5, 9)] == [1, 1, 1, 2, 3]
    assert [next_pow2(n) for n in (0, 1, 2, 3, 17, 1024)] == [1, 1, 2, 4, 32, 1024]


@pytest.mark.cudasim
def test_workspace_reuses_grows_and_zeroes():
    from gputext.device.memory import Workspace
    work = Workspace()
    a = work.get("acc", (3, 4), np.int64, zeroed=True)
    assert a.shape == (3, 4) and np.all(a.copy_to_host() == 0)
    flat = work.array("acc")
    assert work.get("acc", (3, 4), np.int64) is a  # the cached view
    b = work.get("acc", (2, 5), np.int64)  # smaller: same buffer, another view
    assert work.array("acc") is flat and b.shape == (2, 5)
    work.get("acc", (10, 10), np.int64, zeroed=True)  # larger: a new buffer, zeroed
    assert work.array("acc") is not flat and work.array("acc").size == 100
    assert np.all(work.array("acc").copy_to_host() == 0)
    work.release(larger_than=0)
    assert work.array("acc") is None and work.nbytes == 0


@pytest.mark.cudasim
def test_upload_packed_and_copy_back_round_trip():
    from gputext.device.memory import Resources, Workspace
    res = Resources(simulator=True)
    work = Workspace()
    arrays = (np.arange(5, dtype=np.int64), np.arange(6, dtype=np.int32).reshape(3, 2), np.linspace(0, 1, 7).astype(np.float32))
    views = res.upload_packed(arrays, into=work, name="up")
    for host, dev in zip(arrays, views):
        assert dev.shape == host.shape and dev.dtype == host.dtype
        assert np.array_equal(dev.copy_to_host(), host)
    rows = np.arange(40, dtype=np.float64).reshape(10, 4)
    d_rows = cuda.to_device(rows)
    for staging in (0, 64, 1 << 20):  # plain, chunks of 2 rows through two pinned buffers, one chunk
        out = np.empty_like(rows)
        res.copy_back(d_rows, out, staging)
        assert np.array_equal(out, rows)


@pytest.mark.cudasim
def test_launch_dispatcher_path_and_set():
    from gputext.device.launch import Launch
    x = cuda.to_device(np.arange(8, dtype=np.float64))
    out = cuda.device_array(8, np.float64)
    launch = Launch(axpy, 1, 8, (x, 2.0, 1.0, out))
    assert launch.mode == "dispatcher"  # the simulator has no driver
    launch()
    assert np.array_equal(out.copy_to_host(), 2 * np.arange(8) + 1)
    launch.set(1, 3.0)
    launch.set(0, cuda.to_device(np.ones(8)))
    launch()
    assert np.array_equal(out.copy_to_host(), np.full(8, 4.0))
    m = cuda.to_device(np.arange(12, dtype=np.float64).reshape(3, 4))
    sums = cuda.device_array(3, np.float64)
    Launch(rows_sum, (1, 3), 4, (m, sums))()
    assert np.array_equal(sums.copy_to_host(), np.arange(12).reshape(3, 4).sum(1))


@pytest.mark.gpu
def test_raw_launch_equals_dispatcher_and_rewrites_arguments():
    from gputext.device.launch import Launch, device_address
    x = cuda.to_device(np.arange(1000, dtype=np.float64))
    out = cuda.device_array(1000, np.float64)
    launch = Launch(axpy, 4, 256, (x, 2.0, 1.0, out))
    assert launch.mode == "raw", launch.why_not_raw
    launch()
    cuda.synchronize()
    assert np.array_equal(out.copy_to_host(), 2 * np.arange(1000) + 1)
    launch.set(1, -0.5)  # a float64 scalar slot
    launch.set(0, cuda.to_device(np.full(1000, 4.0)))  # another array of the same type
    launch()
    cuda.synchronize()
    assert np.array_equal(out.copy_to_host(), np.full(1000, -1.0))
    big = cuda.to_device(np.arange(40, dtype=np.float64).reshape(8, 5))
    sums = cuda.device_array(8, np.float64)
    rs = Launch(rows_sum, (1, 8), 32, (big, sums))
    rs.set_array(0, device_address(big), (4, 10), 8)  # the same memory seen as (4, 10): shape slots rewritten
    rs(grid=(1, 4))
    cuda.synchronize()
    assert np.array_equal(sums.copy_to_host()[:4], np.arange(40).reshape(4, 10).sum(1))


@pytest.mark.gpu
def test_single_query_plan_equals_cpu_over_many_calls():
    # the engine's pre-marshalled top-k plan: one query at a time with varying numbers of terms
    # (upload shapes rewritten per call, the upload buffer grown once), equal to the CPU twin
    from engine_reference import random_corpus
    from gputext.engine import Index, search_topk
    X = random_corpus(30000, 4000, 0.01, seed=41, duplicates=((3, 29999),))
    index = Index.from_csr(X)
    rng = np.random.default_rng(42)
    stats = {}
    for i in range(60):
        n_terms = int(rng.integers(1, 400 if i == 30 else 40))
        cols = np.sort(rng.choice(4000, n_terms, replace=False))
        q = sp.csr_matrix((rng.random(n_terms).astype(np.float32), cols, [0, n_terms]), shape=(1, 4000))
        for metric in ("cosine", "l1"):
            g = search_topk(index, q, 30, metric, device="cuda", stats=stats)
            c = search_topk(index, q, 30, metric, device="cpu")
            assert np.array_equal(g[0], c[0]) and np.array_equal(np.nan_to_num(g[1], nan=7), np.nan_to_num(c[1], nan=7))
    assert stats["launch"] == "raw"


@pytest.mark.cudasim
def test_single_query_plan_in_simulator_grows_its_upload_and_stays_exact():
    # one query at a time through the engine's TopkPlan (dispatcher path): a query with many more
    # terms than the first grows the plan's upload buffer; results equal the CPU twin every time
    from engine_reference import random_corpus
    from gputext.engine import Geometry, Index, search_topk
    tiny = Geometry(accumulate_block=32, accumulate_items=2, select_block=32, select_items=2, merge_block=32,
                    merge_width=64, build_block=32, scan_block=32, scan_items=2)
    X = random_corpus(150, 1200, 0.01, seed=43)
    index = Index.from_csr(X)
    rng = np.random.default_rng(44)
    for n_terms in (3, 2, 1100, 5):
        cols = np.sort(rng.choice(1200, n_terms, replace=False))
        q = sp.csr_matrix((rng.random(n_terms).astype(np.float32), cols, [0, n_terms]), shape=(1, 1200))
        g = search_topk(index, q, 4, "cosine", device="cuda", geometry=tiny)
        c = search_topk(index, q, 4, "cosine", device="cpu")
        assert np.array_equal(g[0], c[0]) and np.array_equal(g[1], c[1])
    shard = index.device_cache["shard"]
    assert len(shard.plans) == 1 and shard.work.array("plan_upload").size >= 1100 * 20
