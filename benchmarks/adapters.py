"""Figures out of the family scripts' JSON: each adapter reads one script's report (scripts/bench_knn.py,
gpu_meta.py, gpu_svm.py, gpu_star.py, gpu_stream.py, gpu_rank.py) and returns the registry entries'
in-process figures, {entry name: {"seconds": s, "device": name, ...}}. The runner uses them on a
fresh report; they also converted the reports behind the README's figures into records (the
"source" of those records names the file and its commit).

An adapter returns only what the report has (a peer that was skipped or failed gives nothing).
"""
from __future__ import annotations

from .named import registrar

ADAPTERS: dict = {}
adapter = registrar(ADAPTERS)  # @adapter("name"): the adapter of script report ``name``


def _device(text: str | None) -> str:
    """A GPU's name out of a device description ("NVIDIA H100 80GB HBM3, compute capability 9.0, ...")."""
    return (text or "").split(",")[0].strip() or "unknown"


def _gpu_of(report: dict) -> str | None:
    """The GPU a script's report ran on: env.gpu / env.device / device, else the name in its backend
    line ("cuda: auto chose the GPU: NVIDIA H200, compute capability 9.0, ..."); None for the CPU."""
    env = report.get("env") or {}
    name = env.get("gpu") or env.get("device") or report.get("device")
    if name:
        return _device(name)
    backend = env.get("backend") or report.get("backend") or ""
    return _device(backend.split("GPU:", 1)[1]) if "GPU:" in backend else None


def _size_tag(n_docs: int) -> str:
    """knn-1e6 for 1,000,000 documents (the bench_knn corpus of that size)."""
    exp = len(str(int(n_docs))) - 1
    return f"knn-1e{exp}" if int(n_docs) == 10 ** exp else f"knn-{int(n_docs)}"


@adapter("bench_knn")
def bench_knn(rows: list) -> dict:
    """scripts/bench_knn.py's rows: 10,000 (or 1,000) queries -> knn-search/<size>/..., one query ->
    knn-query/<size>/...; gputext and every peer timed in the same run."""
    out = {}
    for r in rows:
        family = "knn-query" if r["n_queries"] == 1 else "knn-search"
        base = f"{family}/{_size_tag(r['n_docs'])}"
        dev = _device(r.get("device")) if r.get("gputext_backend") == "cuda" else None
        extra = {"n_queries": r["n_queries"], "k": r["k"], "nnz": r["nnz"]}
        out[f"{base}/gputext"] = {"seconds": r["gputext_s"], "device": dev, "params": {**extra,
                                  "exact": bool(r.get("equals_float64_reference"))}}
        for peer, key in (("cupy-spmm", "cupy_spmm_s"), ("torch-spmm", "torch_spmm_s"), ("sklearn-brute", "sklearn_s_est")):
            if r.get(key):
                out[f"{base}/{peer}"] = {"seconds": r[key], "device": dev if peer != "sklearn-brute" else None,
                                         "params": extra}
    return out


@adapter("gpu_meta")
def gpu_meta(report: dict) -> dict:
    """scripts/gpu_meta.py: 20NG meta-features (training leave-one-out + test), GPU and CPU twin."""
    sec = report.get("sections", {}).get("20ng", {})
    out = {}
    if "cuda" in sec:
        out["metafeatures/20ng/gputext"] = {"seconds": sec["cuda"]["median_s"], "device": _gpu_of(report),
                                            "runs": sec["cuda"].get("runs_s")}
    if "cpu" in sec:
        out["metafeatures/20ng/cpu-twin"] = {"seconds": sec["cpu"]["median_s"], "device": _gpu_of(report),
                                             "runs": sec["cpu"].get("runs_s"),
                                             "params": {"cpu_threads": sec.get("cpu_threads")}}
    return out


@adapter("gpu_svm")
def gpu_svm(report: dict) -> dict:
    """scripts/gpu_svm.py's liblinear section: one primal fit at the chosen C on 20NG meta-features,
    our TRON on the device and LinearSVC in the same run."""
    sec = report.get("sections", {}).get("liblinear", {})
    dev = _gpu_of(report)
    if "tron_seconds" not in sec:
        return {}
    params = {"C": sec.get("C")}
    return {"svm/20ng-meta/gputext": {"seconds": sec["tron_seconds"], "device": dev, "params": params},
            "svm/20ng-meta/sklearn-linearsvc": {"seconds": sec["liblinear_seconds"], "device": dev, "params": params}}


@adapter("gpu_star")
def gpu_star(report: dict) -> dict:
    """scripts/gpu_star.py: the similarity graph of the reu-70k preset (our device graph + relevance
    against CuPy's SpGEMM graph)."""
    preset = report.get("presets", {}).get("reu-70k") or report
    main, peers = preset.get("main", {}), preset.get("peers", {})
    dev = _gpu_of(report)
    out = {}
    if "cuda" in main:
        out["star-graph/reu-70k/gputext"] = {"seconds": main["cuda"]["graph_relevance"], "device": dev,
                                             "params": {"edges": main.get("edges"), "beta": report.get("beta")}}
    if peers.get("cupy", {}).get("seconds"):
        out["star-graph/reu-70k/cupy-spgemm"] = {"seconds": peers["cupy"]["seconds"], "device": dev}
    return out


@adapter("gpu_stream")
def gpu_stream(report: dict) -> dict:
    """scripts/gpu_stream.py's latency section: mean latency per document at 1.6M clusters (ours,
    then torch.sparse SpMV + argmax in the same run)."""
    rows = report.get("latency", {}).get("rows", [])
    dev = _gpu_of(report)
    out = {}
    for row in rows[:1]:
        if "ours_latency" in row:
            out["stream-latency/1.6m-clusters/gputext"] = {"seconds": row["ours_latency"]["mean_ms"] / 1e3, "device": dev}
        if row.get("torch", {}).get("per_doc_ms"):
            out["stream-latency/1.6m-clusters/torch-spmv"] = {"seconds": row["torch"]["per_doc_ms"] / 1e3, "device": dev}
    return out


@adapter("gpu_rank")
def gpu_rank(report: dict) -> dict:
    """scripts/gpu_rank.py: RankSVM to eps on the preset's shape, GPU and CPU twin in the same run."""
    dev = _gpu_of(report)
    out = {}
    if "gpu_train" in report:
        out["rank-train/mslr-web30k/gputext"] = {"seconds": report["gpu_train"]["seconds"], "device": dev}
    if "cpu_train" in report:
        out["rank-train/mslr-web30k/cpu-twin"] = {"seconds": report["cpu_train"]["seconds"], "device": dev,
                                                  "params": {"cpu_threads": report.get("cpu_threads")}}
    return out
