"""scripts/harness: the benchmark harness every script builds on (probe, timing, peers, report)."""
from __future__ import annotations

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import harness  # noqa: E402


def test_probe_says_where_it_ran():
    from gputext.backend import resolve
    env = harness.probe(resolve("cpu"))
    assert env["cpu_count"] >= 1 and env["numba_threads"] >= 1 and env["backend"].startswith("cpu")
    assert env["versions"]["numpy"] and env["versions"]["numba"] and env["date"][:2] == "20"
    assert "gpu" not in env  # no device fields without a real GPU


def test_timing_warms_up_and_takes_the_median(monkeypatch):
    calls, samples = [], []
    ms = harness.gpu_ms(lambda: calls.append(1), repeats=5, warmup=2, clock="host", samples=samples)
    assert len(calls) == 7 and len(samples) == 5 and ms == sorted(samples)[2]
    calls.clear()
    med, _, secs = harness.wall_runs(lambda: calls.append(1), repeats=1, warmup=2)  # short: SHORT_REPEATS runs
    assert len(calls) == 2 + harness.timing.SHORT_REPEATS == 2 + len(secs) and med == sorted(secs)[len(secs) // 2]
    monkeypatch.setattr(harness.timing, "SHORT_S", 0.0)  # as if every call were long: exactly ``repeats``
    seq = iter([0.0, 0.0, 0.03, 0.01, 0.02])
    med, res, secs = harness.wall_runs(lambda: next(seq), repeats=3, warmup=2)
    assert len(secs) == 3 and res in (0.01, 0.02, 0.03) and med == sorted(secs)[1]
    assert harness.percentiles_ms([0.001, 0.002, 0.003]) == {"p50_ms": 2.0, "p95_ms": 2.9, "p99_ms": 2.98}
    with pytest.raises(ValueError):
        harness.gpu_ms(lambda: None, clock="sundial")


def test_peers_missing_failing_and_gpu_only(capsys):
    @harness.peer("test.missing", needs=("no_such_module_xyz",))
    def missing(x):
        """never runs"""
        raise AssertionError

    @harness.peer("test.fails")
    def fails(x, scale=1):
        raise RuntimeError("nope\nsecond line")

    @harness.peer("test.ok")
    def ok(x, scale=1):
        return {"value": x * scale}

    @harness.peer("test.gpu", gpu=True)
    def gpu(x, scale=1):
        return {"gpu": True}

    out = harness.run_peers(["missing", "fails", "ok", "gpu"], 3, scale=2, has_gpu=False, prefix="test.")
    assert out == {"missing": {"skipped": "no_such_module_xyz not installed"}, "fails": {"error": "RuntimeError: nope"},
                   "ok": {"value": 6}}
    assert "peer missing skipped: no_such_module_xyz not installed" in capsys.readouterr().err
    assert harness.run_peers(["gpu"], 1, prefix="test.") == {"gpu": {"gpu": True}}
    assert harness.run_peers(["absent"], prefix="test.") == {}
    assert "peer absent skipped: no such peer" in capsys.readouterr().err


def test_report_records_failures_and_writes_once(tmp_path, capsys):
    import numpy as np
    rep = harness.Report(str(tmp_path / "o"), {"date": "today"})
    rep.section("good", lambda n: {"n": np.int64(n), "a": np.arange(2)}, 3, timed=True)
    rep.section("bad", lambda: 1 / 0, key="sections")
    rep.row("good", "n", 3, "note")
    text = "# title\n\n" + rep.rows_md()
    rep.write("x.json", text, md_name="x.md")
    data = json.loads((tmp_path / "o" / "x.json").read_text())
    assert data["good"] == {"n": 3, "a": [0, 1]} and "good" in data["section_seconds"]
    assert data["sections"]["bad"]["error"].startswith("ZeroDivisionError") and "Traceback" in data["sections"]["bad"]["traceback"]
    assert (tmp_path / "o" / "x.md").read_text() == text + "\n"
    out = capsys.readouterr().out
    assert out.rstrip().endswith("| good | n | 3 | note |") and "| bad | ERROR | ZeroDivisionError" in out


@pytest.mark.cudasim
def test_device_timing_and_copy_bandwidth_in_the_simulator():
    """The CUDA paths of the harness (numba events, device copy) run in the simulator, where the
    numba clock is the host's after a synchronise."""
    from numba import cuda

    from gputext.backend import resolve
    a = cuda.to_device(list(range(64)))
    ms = harness.gpu_ms(lambda: a.copy_to_host(), repeats=3, warmup=1)
    assert ms > 0
    assert harness.copy_bandwidth(1 << 12, repeats=2) > 0
    assert harness.probe(resolve("cuda"))["backend"].startswith("cuda (simulator)")


def run_script(name, *args, timeout=300):
    import subprocess
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", f"{name}.py"), *args], capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


def test_gpu_star_cpu_smoke(tmp_path):
    """gpu_star.py's whole round on the CPU twin at a few hundred documents (no update part)."""
    res = run_script("gpu_star", "--quick", "--device", "cpu", "--docs", "600", "--big-docs", "800", "--sklearn-docs",
                     "200", "--presets", "reu-70k", "--repeats", "1", "--skip-update", "--out", str(tmp_path))
    report = json.loads((tmp_path / "gpu_star.json").read_text())
    assert report["env"]["cpu_threads"] >= 1 and report["main"]["docs"] == 600 and report["big"]["ok"]
    assert report["peers"]["sklearn"]["edges"] == report["peers"]["sklearn"]["ours"]["cpu"]["edges"]
    assert "| reu-70k | cpu |" in res.stdout


def test_gpu_meta_cpu_smoke(tmp_path):
    """gpu_meta.py's synthetic section on the CPU twin (the GPU rows are skipped with a row)."""
    res = run_script("gpu_meta", "--device", "cpu", "--quick", "--skip", "20ng", "--out", str(tmp_path))
    report = json.loads((tmp_path / "gpu_meta.json").read_text())
    assert report["sections"]["synthetic"]["engine_cpu"]["median_s"] > 0 and report["numba_threads"] >= 1
    assert "| device | no GPU | GPU runs skipped |" in res.stdout and "| synthetic | engine grouped search" in res.stdout


def test_bench_synth_smoke(tmp_path):
    res = run_script("bench_synth", "--quick", "--sizes", "2000", "--out", str(tmp_path))
    rows = json.loads((tmp_path / "bench_synth.json").read_text())["rows"]
    assert [r["what"] for r in rows] == ["generate only", "write tf", "write tfidf (2 passes)", "ltr mq2008", "ltr mq2007"]
    assert all(r["docs"] > 0 and r["seconds"] > 0 for r in rows) and "| ltr mq2007 |" in res.stdout


@pytest.mark.slow
@pytest.mark.realdata
def test_bench_ingest_smoke(tmp_path, shared_datasets):
    res = run_script("bench_ingest", "--quick", "--datasets", str(shared_datasets), "--out", str(tmp_path))
    rows = json.loads((tmp_path / "ingest_bench.json").read_text())["rows"]
    assert [r["dataset"] for r in rows] == ["r8-train", "letor-train"] and rows[0]["n_docs"] == 5485
    assert "| r8-train | 5,485 |" in res.stdout


def load_script(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", os.path.join(ROOT, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["gpu_gemm", "gpu_matvec_grid"])
def test_gpu_only_scripts_say_so_without_a_gpu(name, tmp_path, capsys):
    """The two kernel sweeps need a GPU and CuPy (their peer): without them, one line and exit 2."""
    assert load_script(name).main(["--out", str(tmp_path)]) == 2
    assert "needs a GPU and CuPy" in capsys.readouterr().err and not list(tmp_path.iterdir())


@pytest.mark.cudasim
def test_gpu_stream_device_path_in_the_simulator(tmp_path):
    """gpu_stream.py's CUDA-only code (copy bandwidth, event-timed pass, dispatcher pass, peers
    skipped or failing with a record) at the --tiny geometry in the simulator."""
    res = load_script("gpu_stream").main(["--tiny", "--device", "cuda", "--sections", "env,latency", "--latency-repeats", "1",
                       "--out", str(tmp_path)])
    assert res["env"]["copy_tbs"] > 0 and "error" not in res["latency"], res["latency"].get("traceback")
    row = res["latency"]["rows"][0]
    assert row["passes_identical"] and row["timed_pass"]["n"] == 4 and row["dispatcher_pass"]["n"] == 4
    assert set(row["cupy"]) & {"skipped", "error", "per_doc_ms"}
    assert json.loads((tmp_path / "gpu_stream.json").read_text())["latency"]["rows"][0]["clusters"] == 40


def test_bench_knn_cpu_smoke(tmp_path):
    """bench_knn.py --quick on the CPU: the engine against the CPU peers (scikit-learn, our twin),
    exact against the float64 reference; the GPU peers are left out without a GPU."""
    res = run_script("bench_knn", "--quick", "--device", "cpu", "--out", str(tmp_path))
    rows = json.loads((tmp_path / "bench_knn.json").read_text())
    assert [r["n_queries"] for r in rows] == [1, 100] and all(r["equals_float64_reference"] for r in rows)
    assert all(r["cpu_valid"] and r["sklearn_valid"] for r in rows) and "cupy_spmm_s" not in rows[0]
    assert "| 2e+04 | 100 |" in res.stdout


def test_bench_knn_methods_cpu_smoke(tmp_path):
    """bench_knn.py --methods rows,blocked on the CPU: the blocked top-k timed beside rows, with
    its exactness checks (device == rows == CPU twin, its own twin == the CPU twin)."""
    res = run_script("bench_knn", "--device", "cpu", "--sizes", "3e3", "--queries", "1,20", "--terms", "3000",
                     "--peers", "cpu", "--methods", "rows,blocked", "--repeats", "1", "--out", str(tmp_path))
    rows = json.loads((tmp_path / "bench_knn.json").read_text())
    assert all(r["blocked_equals_rows"] and r["blocked_equals_cpu"] and r["blocked_cpu_twin_equals_cpu"] for r in rows)
    assert rows[1]["gputext_blocked_postings"] > 0 and rows[1]["gputext_blocked_segments"] >= 1
    assert "blocked s (x rows, BW frac)" in res.stdout


def test_gpu_dclus_cpu_smoke(tmp_path):
    """gpu_dclus.py's round on the CPU twin: 600 documents, 200 added (in place, copy, new file)."""
    res = run_script("gpu_dclus", "--quick", "--device", "cpu", "--presets", "reu-50k", "--base", "600", "--adds", "200",
                     "--repeats", "1", "--out", str(tmp_path))
    row = json.loads((tmp_path / "gpu_dclus.json").read_text())["update"][0]
    assert row["graph_equals_union"] and row["inplace_equals_new_file"] and row["n_add"] == 200
    assert "| reu-50k | 200 |" in res.stdout


def test_knn_pruning_cpu_smoke(tmp_path):
    """knn_pruning.py --quick on the CPU: the pruned blocked top-k equals the rows method and the
    unpruned one, and what it scored plus what it skipped is what the unpruned run scored."""
    res = run_script("knn_pruning", "--quick", "--device", "cpu", "--k", "10", "--out", str(tmp_path))
    rows = json.loads((tmp_path / "knn_pruning.json").read_text())["rows"]
    assert rows and rows[0]["corpus"].startswith("bench_knn corpus") and all(r["equal_rows_and_unpruned"] for r in rows)
    assert all(r["postings_scored"] + r["postings_skipped"] == r["postings_unpruned"] > 0 for r in rows)
    assert all(0 <= r["fraction_skipped"] < 1 for r in rows) and "| fraction skipped |" in res.stdout
