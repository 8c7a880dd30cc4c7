"""scripts/gpu_star.py: its report renders every GPU-only field (so a GPU round cannot lose its
table at the last step), and its per-stage breakdown reads the stats of both graph paths."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
from procs import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_run(total):
    stages = {k: 0.01 for k in ("index", "scoring", "counting", "writing", "release", "csr", "relevance",
                                "transfer", "host_assembly", "cover", "host_relevance")}
    return {"total": total, "graph": total / 2, "relevance": 0.0, "cover": 0.1, "graph_relevance": total / 2,
            "stages": stages, "assembly": "device", "spills": 0}


def fake_results():
    main = {"preset": "reu-70k", "docs": 70000, "nnz": 5, "edges": 185_698_658, "density": 0.076, "clusters": 7235,
            "isolated": 3, "cuda": gpu_run(2.0), "cpu": {**gpu_run(21.0), "assembly": "host"}, "identical": True,
            "checks": {}, "speedup_graph_relevance": 10.5, "speedup_total": 10.5,
            "relevance_kernel": {"seconds": 0.003, "bytes": 6e9, "gbps": 2000.0, "fraction_of_copy": 0.66},
            "transfer": {"bytes": 3e9, "seconds": 0.2, "gbps": 15.0},
            "engine_path": {"graph_relevance": 5.6, "identical_graph": True},
            "transfer_modes": {m: {"total": 2.0, "graph_relevance": 1.0, "transfer": 0.2}
                               for m in ("staged", "pageable", "pinned")}}
    peers = {"cupy": {"docs": 70000, "seconds": 2.5, "edges": 1, "edges_ours": 1, "ours_graph_seconds": 1.0,
                      "ours_speedup": 2.5},
             "torch": {"error": "RuntimeError: nope"},
             "sklearn": {"docs": 20000, "seconds": 5.7, "edges": 2, "ours": {"cuda": {"graph": 0.5, "edges": 2}}}}
    upd = {"n_base": 50000, "n_add": 10000, "update": {"total": 1.0, "compute": 0.5},
           "full": {"total": 2.0, "compute": 1.5}, "ratio_total": 0.5, "ratio_compute": 0.33,
           "components_touched": 1, "components_total": 2, "pccs_loaded": 1, "pccs_total": 2,
           "agreement_fbcubed": 1.0, "agreement_onmi_max": 1.0, "fbcubed_vs_labels_update": 0.3,
           "fbcubed_vs_labels_full": 0.3}
    return {"env": {"gpu": "NVIDIA H100", "backend": "cuda", "cpu_threads": 16, "copy_gbps": 3000.0},
            "beta": 0.25, "date": "today", "presets": {"reu-70k": {"main": main, "peers": peers},
                                                        "reu-70k-tfidf": {"main": main, "peers": {}}},
            "big": {"docs": 120000, "ok": True, "edges": 5, "clusters": 2, "seconds": 9.0}, "update": [upd]}


def test_gpu_star_report_renders_gpu_fields():
    gs = load("gpu_star")
    text = gs.markdown(fake_results(), [("goal", "<= 5 s", "2.00 s", True)], "cuda")
    assert "| reu-70k | cuda | device | 0.010 |" in text
    assert "transfer pinned" in text and "previous path (engine selector, host assembly)" in text
    assert "| torch | reu-70k | | error: RuntimeError: nope" in text
    assert "| goal | <= 5 s | 2.00 s | yes |" in text


def test_stage_times_reads_both_paths():
    gs = load("gpu_star")
    dev = {"graph_device_graph": True, "graph_device_seconds": {"scoring": 0.5, "csr": 0.1},
           "graph_host_seconds": {"scoring": 0.6}, "seconds_relevance": 0.0, "seconds_cover": 0.2}
    st = gs.stage_times(dev)
    assert st["scoring"] == 0.5 and st["csr"] == 0.1 and st["cover"] == 0.2 and st["writing"] == 0.0
    host = {"graph_device_graph": False, "graph_seconds_scoring": 3.0, "graph_seconds_assembly": 1.0,
            "seconds_relevance": 0.1, "seconds_cover": 0.2}
    st = gs.stage_times(host)
    assert st["scoring"] == 3.0 and st["host_assembly"] == 1.0 and st["relevance"] == 0.1
    assert np.isclose(sum(st.values()), 4.3)


def test_profile_dclus_runs_and_times_every_step(tmp_path):
    """scripts/profile_dclus.py on the CPU at a small size: every wrapped step is timed and the
    median table is written."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "profile_dclus.py"), "--device", "cpu",
                          "--preset", "reu-10k:newtopics", "--base", "600", "--add", "150", "--beta", "0.2",
                          "--repeats", "1", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                         env=child_env())
    assert out.returncode == 0, out.stderr[-2000:]
    med = json.load(open(tmp_path / "profile_dclus.json"))["median"]
    for step in ("fn addition_rows", "fn symmetric_from_owner", "fn cover_candidates", "fn improve_centers",
                 "stage total", "relevance on cpu (local graph)"):
        assert step in med and med[step] >= 0, step
    assert "| fn dclustr_lists |" in out.stdout


def test_real_scenario_puts_20ng_first(shared_datasets, monkeypatch):
    """gpu_dclus.py's 20ng+r52 preset: all of 20 Newsgroups first, then Reuters R52, one vocabulary."""
    monkeypatch.setenv("GPUTEXT_DATASETS", str(shared_datasets))
    whole, n_20ng = load("gpu_dclus").real_corpus("20ng+r52")
    names = np.asarray(whole.obs["label"].categories)[np.asarray(whole.obs["label"].codes)]
    assert n_20ng == 18821 and whole.n_docs == 18821 + 9100
    assert all("." in x for x in names[:n_20ng]) and not any("." in x for x in names[n_20ng:])
    assert whole.params["weighting"] == "tf"
