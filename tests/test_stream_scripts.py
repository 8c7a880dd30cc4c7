"""The stream benchmark and table scripts run end to end on the CPU (their GPU paths are smoke
tested in the simulator with `gpu_stream.py --tiny --device cuda`, and run for real by the lead)."""
import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_stream_script_runs_on_the_cpu_and_checks_exactness(tmp_path, capsys):
    _load("gpu_stream").main(["--tiny", "--device", "cpu", "--out", str(tmp_path)])
    res = json.loads((tmp_path / "gpu_stream.json").read_text())
    for name in ("env", "exactness", "latency", "throughput"):
        assert "error" not in res[name], res[name].get("traceback")
    assert res["exactness"]["all_identical"] is True
    assert res["throughput"]["docs_clustered"] == 100
    assert res["latency"]["rows"][0]["cpu_index_latency"]["p50_ms"] > 0
    assert "| clusters |" in capsys.readouterr().out


@pytest.mark.slow
def test_table_stream_quick_writes_tables_and_plots(tmp_path):
    _load("table_stream").main(["--quick", "--device", "cpu", "--out", str(tmp_path)])
    text = (tmp_path / "table_stream.md").read_text()
    assert "Figure 3" in text and "Figure 4a" in text and "Figure 4b" in text
    for png in ("fig3_latency.png", "fig4a_threshold.png", "fig4b_k.png"):
        assert (tmp_path / png).stat().st_size > 1000
