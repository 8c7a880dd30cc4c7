"""benchmarks/: the registry is whole, the records follow the schema, the published tables are the ones
the records render to, fresh-process timing measures a child from outside with the cache folders
set, and the runner runs a CPU entry end to end (tiny, a few seconds)."""
from __future__ import annotations

import json
import sys

import pytest

from benchmarks import adapters, fresh, library, records, render, run
from benchmarks.registry import ENTRIES, ENTRY, NOT_SCRIPTS, SCRIPTS, ROOT, STUDIES, entries


def test_rendered_tables_are_up_to_date_with_the_records():
    """README.md, docs/*.md and benchmarks/RESULTS.md: every results region is what
    `python -m benchmarks.render` makes from benchmarks/records/ (run it after adding records)."""
    recs = records.load()
    paths = render.files()
    assert any(p.name == "README.md" for p in paths) and any(p.name == "RESULTS.md" for p in paths)
    stale = [str(p) for p in paths if render.render_text(p.read_text(), recs) != p.read_text()]
    assert stale == [], "out of date (python -m benchmarks.render): " + ", ".join(stale)


def test_every_published_figure_has_a_record_with_device_date_and_command():
    recs = records.load()
    for _, ours, peer, _ in render.README_ROWS:
        for name in (ours, peer):
            rec = records.newest(recs, name, "kernel", gpu=True)
            assert rec is not None, name
            assert rec["device"] and rec["date"][:4] == "2026" and (rec["command"] or rec["command_note"])
    unknown = {r["entry"] for r in recs if r["entry"] not in ENTRY and r["family"] not in STUDIES}
    assert not unknown, f"records of entries the registry does not have: {sorted(unknown)}"


def test_registry_is_whole():
    for e in ENTRIES:
        assert e.cli or e.library or e.snippet or e.script, e.name
        assert e.library is None or e.library in library.CALLS, e.name
        assert e.script is None or SCRIPTS[e.script].adapter in adapters.ADAPTERS, e.name
        assert set(e.devices) <= {"cpu", "cuda"} and e.suites, e.name
    for suite in ("readme", "cli", "full", "smoke"):
        assert entries(suite, "cuda")[0], suite
    cpu, skipped = entries("readme", "cpu")
    assert all("cpu" in e.devices for e in cpu) and all("cpu" not in e.devices for e in skipped) and skipped
    # the fresh-process timings issue 31 asks for, on 20 Newsgroups and on a synthetic corpus
    for fam in ("knn-search", "knn-classify-svm", "knn-classify-vote", "star", "stream"):
        assert ENTRY[f"{fam}/20ng/gputext"].cli and ENTRY[f"{fam}/synth-20ng/gputext"].cli
    assert ENTRY["rank-train/letor-sample/gputext"].cli and ENTRY["library-knn/20ng/gputext"].snippet


def test_record_check_names_the_problem():
    entry = ENTRY["startup/none/gputext"]
    rec = records.record(entry, "cli-warm", 0.2, "CPU, 2 cores", "python -m gputext --help", cpu_seconds=0.19)
    assert rec["schema"] == records.SCHEMA and rec["date"].endswith("Z") and rec["cpu_seconds"] == 0.19
    for change, words in (({"measure": "fast"}, "measure"), ({"command": None}, "no command"), ({"seconds": 0}, "seconds"),
                          ({"schema": 2}, "schema")):
        with pytest.raises(ValueError, match=words):
            records.check({**rec, **change})
    bad = dict(rec)
    del bad["device"]
    with pytest.raises(ValueError, match="missing device"):
        records.check(bad)


def test_adapters_read_the_scripts_reports():
    rows = [{"n_docs": 1000000, "nnz": 5, "n_queries": n, "k": 30, "device": "NVIDIA H100 80GB HBM3, compute capability 9.0",
             "gputext_backend": "cuda", "gputext_s": s, "cupy_spmm_s": 10 * s, "equals_float64_reference": True}
            for n, s in ((1, 0.0003), (10000, 0.25))]
    figs = adapters.ADAPTERS["bench_knn"](rows)
    assert figs["knn-search/knn-1e6/gputext"]["seconds"] == 0.25 and figs["knn-query/knn-1e6/cupy-spmm"]["seconds"] == pytest.approx(0.003)
    assert figs["knn-search/knn-1e6/gputext"]["device"] == "NVIDIA H100 80GB HBM3"
    rank = {"backend": "cuda: auto chose the GPU: NVIDIA H200, compute capability 9.0", "gpu_train": {"seconds": 0.05},
            "cpu_train": {"seconds": 1.1}, "cpu_threads": 16}
    figs = adapters.ADAPTERS["gpu_rank"](rank)
    assert figs["rank-train/mslr-web30k/gputext"] == {"seconds": 0.05, "device": "NVIDIA H200"}
    assert adapters.ADAPTERS["gpu_star"]({"presets": {}}) == {}  # a report without the figures gives none


def test_fresh_process_timing_sets_the_cache_folders_and_measures_cpu(tmp_path):
    """The cold run sees an empty folder named by GPUTEXT_CACHE_DIR = NUMBA_CACHE_DIR and the warm
    runs the same folder, filled; CPU time is the child's (a busy loop shows it)."""
    seen = tmp_path / "seen.txt"
    code = ("import os, time; d = os.environ['GPUTEXT_CACHE_DIR']; assert os.environ['NUMBA_CACHE_DIR'] == d; "
            "n = len(os.listdir(d)); open(os.path.join(d, 'x%d' % n), 'w').close(); "
            f"open({str(seen)!r}, 'a').write(d + ' %d\\n' % n); t = time.process_time()\n"
            "while time.process_time() - t < 0.05: pass")
    timing = fresh.cold_and_warm([sys.executable, "-c", code], repeats=2)
    lines = seen.read_text().split("\n")[:3]
    assert [line.split()[1] for line in lines] == ["0", "1", "2"] and len({line.split()[0] for line in lines}) == 1
    assert timing.cold.rc == 0 and len(timing.own_runs) == 2 and timing.warm_cpu >= 0.04 and timing.warm >= timing.warm_cpu * 0.5
    with pytest.raises(RuntimeError, match="exited with 3"):
        fresh.cold_and_warm([sys.executable, "-c", "import sys; sys.exit(3)"], repeats=1)


def test_runner_measures_cpu_entries_and_skips_gpu_ones(tmp_path, capsys):
    """`python -m benchmarks.run --suite smoke --only ...` on the CPU: the start-up entry (fresh
    processes, cold and warm) and scikit-learn's peer in process on a tiny synthetic corpus;
    records appended and valid."""
    out = tmp_path / "records.jsonl"
    rc = run.main(["--suite", "readme", "--device", "cpu", "--only", "startup,knn-search/synth-20ng/sklearn,knn-search/knn-1e6",
                   "--scale", "0.01", "--repeats", "1", "--breakdown", "--out", str(tmp_path / "work"), "--records", str(out)])
    assert rc == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["entry"], r["measure"]) for r in recs] == [
        ("startup/none/gputext", "cli-cold"), ("startup/none/gputext", "cli-warm-own"),
        ("startup/none/gputext", "cli-warm"), ("knn-search/synth-20ng/sklearn-brute", "kernel")]
    assert recs[0]["command"].endswith("-m gputext --help") and recs[1]["cpu_seconds"] > 0
    assert recs[1]["stages"]["profile.imports"] > 0  # --breakdown: a profiled warm run's parts
    assert "server" in recs[2]["params"]  # through the warm server, started and stopped by the runner
    assert all(r["device"].startswith("CPU") for r in recs)
    err = capsys.readouterr().err
    assert "skipped knn-search/knn-1e6/gputext: runs on cuda, this machine is cpu" in err
    # --resume: a second call skips what the file already has
    assert run.main(["--suite", "readme", "--device", "cpu", "--only", "startup", "--resume", "--out",
                     str(tmp_path / "work"), "--records", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 4


def test_every_family_script_is_reachable_from_the_registry():
    """Each scripts/*.py that measures something is a registered Script (or says why not); the
    helpers (svm_exactness's features are imported by gpu_svm) count through their callers."""
    registered = {spec.path for spec in SCRIPTS.values()}
    scripts = {p.name for p in (ROOT / "scripts").glob("*.py")}
    left_out = scripts - registered - set(NOT_SCRIPTS)
    assert left_out == set(), f"register {sorted(left_out)} in benchmarks/registry.py (SCRIPTS, suite tools) or NOT_SCRIPTS"
    assert all(p.startswith("table_") for p in {s.path for s in SCRIPTS.values() if "papers" in s.suites})


def test_runner_runs_a_registered_script_by_name(tmp_path):
    assert run.main(["--script", "synth", "--args", "--quick --sizes 300", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "scripts" / "synth" / "bench_synth.json").read_text())["rows"]
    assert rows and rows[0]["docs"] > 0


def test_compile_probe_counts_what_a_command_compiles_or_loads(tmp_path):
    """benchmarks.compile_probe: a command's first run in a fresh process compiles or loads its CPU
    twins (numba's own counters), the same command again in that process neither; a bad command is
    reported with its exit code and the next one still runs."""
    import subprocess
    corpus = tmp_path / "c.h5"
    subprocess.run([sys.executable, "-m", "gputext", "corpus", "synth", "--preset", "demo", "-q", "-o", str(corpus)],
                   check=True, cwd=ROOT)
    knn = ["knn", "search", "--index", str(corpus), "--exclude-self", "-k", "3", "--device", "cpu", "-q", "-o"]
    out = tmp_path / "probe.json"
    r = subprocess.run([sys.executable, "-m", "benchmarks.compile_probe", "--out", str(out), "--",
                        *knn, str(tmp_path / "a.h5"), ";;", "corpus", "info", str(tmp_path / "missing.h5"), ";;",
                        *knn, str(tmp_path / "b.h5")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    first, bad, second = json.loads(out.read_text())["commands"]
    assert first["rc"] == 0 and sum(v["count"] for v in first["entries"].values()) > 0
    assert bad["rc"] == 2 and "missing.h5" in r.stderr
    assert second["rc"] == 0 and second["entries"] == {}
