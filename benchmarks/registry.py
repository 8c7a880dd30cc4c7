"""The benchmark registry: every benchmark is an entry (family x dataset x peer), in the manner of
ann-benchmarks' algorithm definitions and cuML's ``cuml.benchmark.algorithms``.

An entry is measured one of three ways:

  cli      a gputext command (``cli``: its arguments after ``gputext``, with {train}, {test}, {out}
           and {device} filled in), timed in fresh processes from outside (benchmarks/fresh.py):
           "cli-cold" (empty kernel cache) and "cli-warm"; the same work is also timed in process,
           warm ("kernel"), by the library call named in ``library`` (benchmarks/library.py);
  library  only in process ("kernel"): a peer (scikit-learn, our CPU twin) or a library call, or a
           fresh Python process running a snippet (``snippet``: "library-cold" / "library-warm");
  script   a family script of scripts/ (``script``: a Script below) whose JSON report an adapter
           (benchmarks/adapters.py) turns into the figures of one or more entries.

Entries run in the order of ENTRIES (the runner's --budget cuts the tail): the fresh-process
timings on the real data first, then the README's kernel rows, then the synthetic corpora.

Beside the entries, every family script of scripts/ is registered as a Script (SCRIPTS): the paper
tables (suite "papers") and the scripts' other studies (suite "tools": kNN latency and geometry
sweeps, every peer of bench_knn, pruning, DClustR, Dask, ingest, ...), each run by name with
``python -m benchmarks.run --script NAME [--args "..."]`` (their JSON and markdown go to --out).

Suites pick entries: "readme" (every figure of the README's and docs' rendered tables), "cli" (the
fresh-process timings alone), "full" (readme plus the long peers), "papers" (the paper-table
reproductions of scripts/table_*.py; their tables go to --out, not to records), "smoke" (tiny
synthetic sizes, CPU: what CI runs). ``devices`` says where an entry runs: an entry for "cuda"
only is skipped with one line on a machine without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Script:
    """A family script run once per round; ``args`` may hold {out}, {datasets}, {device}."""

    name: str
    path: str  # under scripts/
    args: tuple
    report: str  # the JSON file it writes into --out
    adapter: str | None  # benchmarks/adapters.py name; None: the script's own tables are the output
    seconds: int  # rough wall time on the GPU host (the runner's budget uses it)
    devices: tuple = ("cuda",)
    suites: tuple = ()
    needs_data: bool = False  # reads the real datasets


@dataclass(frozen=True)
class Entry:
    """One benchmark: ``name`` is "<family>/<dataset>/<peer>"."""

    family: str
    dataset: str
    peer: str
    workload: str
    suites: tuple
    devices: tuple = ("cpu", "cuda")
    cli: tuple | None = None
    library: str | None = None
    snippet: str | None = None
    script: str | None = None
    device_arg: str | None = None  # the --device a cli entry passes (default: the runner's device)
    imports: str | None = None  # the library module a cli entry's command imports (its "import" record)

    @property
    def name(self) -> str:
        return f"{self.family}/{self.dataset}/{self.peer}"


SCRIPTS = {s.name: s for s in (
    Script("knn-1e6", "bench_knn.py", ("--device", "cuda", "--sizes", "1e6", "--queries", "1,10000", "--peers", "cupy_spmm",
                                       "--repeats", "1", "--check", "5", "--out", "{out}"), "bench_knn.json", "bench_knn",
           120, suites=("readme", "full")),
    Script("knn-1e7", "bench_knn.py", ("--device", "cuda", "--sizes", "1e7", "--queries", "1,10000", "--peers", "",
                                       "--repeats", "1", "--check", "2", "--out", "{out}"), "bench_knn.json", "bench_knn",
           150, suites=("readme", "full")),
    Script("knn-1e7-cupy", "bench_knn.py", ("--device", "cuda", "--sizes", "1e7", "--queries", "1,10000", "--peers",
                                            "cupy_spmm", "--repeats", "1", "--check", "2", "--out", "{out}"),
           "bench_knn.json", "bench_knn", 560, suites=("full",)),
    Script("knn-cpu-1e5", "bench_knn.py", ("--device", "cpu", "--sizes", "1e5", "--queries", "1,1000", "--peers", "sklearn",
                                           "--cpu-queries", "1000", "--out", "{out}"), "bench_knn.json", "bench_knn", 120,
           devices=("cpu",), suites=("readme", "full")),
    Script("meta-20ng", "gpu_meta.py", ("--device", "cuda", "--skip", "synthetic", "--datasets", "{datasets}", "--out",
                                        "{out}"), "gpu_meta.json", "gpu_meta", 90, suites=("readme", "full"), needs_data=True),
    Script("svm-20ng", "gpu_svm.py", ("--device", "cuda", "--datasets", "{datasets}", "--sections", "liblinear", "--out",
                                      "{out}"), "gpu_svm.json", "gpu_svm", 150, suites=("readme", "full"), needs_data=True),
    Script("star-reu70k", "gpu_star.py", ("--device", "cuda", "--presets", "reu-70k", "--peers", "cupy", "--skip-update",
                                          "--skip-extras", "--skip-cpu", "--repeats", "3", "--out", "{out}"),
           "gpu_star.json", "gpu_star", 150, suites=("readme", "full")),
    Script("stream-1.6m", "gpu_stream.py", ("--device", "cuda", "--sections", "env,latency", "--latency-sizes", "1600000",
                                            "--latency-repeats", "2", "--cpu-queries", "0", "--out", "{out}"),
           "gpu_stream.json", "gpu_stream", 150, suites=("readme", "full")),
    Script("rank-mslr30k", "gpu_rank.py", ("--device", "cuda", "--out", "{out}"), "rank_gpu.json", "gpu_rank", 150,
           suites=("readme", "full")),
    # the paper tables (the Makefile's table-* targets): markdown and PNG under --out, no records
    Script("table-metafeatures", "table_metafeatures.py", ("--out", "{out}"), "table_metafeatures.json", None, 560,
           devices=("cpu", "cuda"), suites=("papers",), needs_data=True),
    Script("table-cnae", "table_cnae.py", ("--out", "{out}"), "table_cnae.json", None, 300, devices=("cpu", "cuda"),
           suites=("papers",), needs_data=True),
    Script("table-star", "table_star.py", ("--out", "{out}"), "table_star.json", None, 560, devices=("cpu", "cuda"),
           suites=("papers",)),
    Script("table-stream", "table_stream.py", ("--out", "{out}"), "table_stream.json", None, 300, devices=("cpu", "cuda"),
           suites=("papers",)),
    Script("table-rank", "table_rank.py", ("--out", "{out}"), "table_rank.json", None, 560, devices=("cpu", "cuda"),
           suites=("papers",)),
    # the family scripts' other studies, run one at a time: python -m benchmarks.run --script NAME [--args "..."]
    *(Script(name, path, args + ("--out", "{out}"), report, None, seconds, devices=devices, suites=("tools",),
             needs_data=data)
      for name, path, args, report, seconds, devices, data in (
          ("knn-latency", "bench_knn.py", ("--latency", "--device", "{device}", "--sizes", "1e6", "--queries", "10000",
                                           "--singles", "300", "--repeats", "3", "--check", "5"), "bench_knn.json", 200,
           ("cuda",), False),
          ("knn-geometries", "bench_knn.py", ("--latency", "--device", "{device}", "--sizes", "1e6", "--queries",
                                              "1000,10000", "--geometries", "t1:tile_rows=1;t6:tile_rows=6"),
           "bench_knn.json", 420, ("cuda",), False),
          ("knn-peers", "bench_knn.py", ("--device", "{device}", "--sizes", "1e5,1e6", "--queries", "1,100,10000",
                                         "--peers", "cupy_spmm,torch_spmm,sklearn,cpu"), "bench_knn.json", 560,
           ("cpu", "cuda"), False),
          ("knn-pruning", "knn_pruning.py", ("--device", "{device}", "--datasets", "{datasets}"), "knn_pruning.json", 400,
           ("cpu", "cuda"), True),
          ("knn-classify-round", "gpu_knn_classify.py", ("--device", "{device}", "--datasets", "{datasets}"),
           "gpu_knn_classify.json", 560, ("cpu", "cuda"), True),
          ("svm-round", "gpu_svm.py", ("--device", "{device}", "--datasets", "{datasets}"), "gpu_svm.json", 300,
           ("cpu", "cuda"), True),
          ("meta-round", "gpu_meta.py", ("--device", "{device}",), "gpu_meta.json", 200, ("cpu", "cuda"), False),
          ("rank-parts-io", "rank_parts_io.py", ("--queries", "2000"), "rank_parts_io.json", 60, ("cpu", "cuda"), False),
          ("gemm-sweep", "gpu_gemm.py", (), "gpu_gemm.json", 300, ("cuda",), False),
          ("matvec-grid", "gpu_matvec_grid.py", (), "matvec_grid.json", 300, ("cuda",), False),
          ("star-round", "gpu_star.py", ("--device", "{device}",), "gpu_star.json", 400, ("cpu", "cuda"), False),
          ("dclus-round", "gpu_dclus.py", ("--device", "{device}",), "gpu_dclus.json", 560, ("cpu", "cuda"), False),
          ("dclus-profile", "profile_dclus.py", ("--device", "{device}",), "profile_dclus.json", 300, ("cpu", "cuda"),
           False),
          ("stream-round", "gpu_stream.py", ("--device", "{device}",), "gpu_stream.json", 560, ("cpu", "cuda"), False),
          ("rank-round", "gpu_rank.py", ("--device", "{device}",), "rank_gpu.json", 300, ("cpu", "cuda"), False),
          ("estimators", "bench_estimators.py", ("--device", "{device}",), "bench_estimators.json", 300, ("cpu", "cuda"),
           False),
          ("dask", "gpu_dask.py", (), "dask_gpu.json", 300, ("cuda",), False),
          ("dask-multi", "gpu_dask_multi.py", (), "dask_multi.json", 300, ("cuda",), False),
          ("dask-families", "gpu_dask_families.py", (), "dask_families.json", 560, ("cuda",), False),
          ("ingest", "bench_ingest.py", ("--datasets", "{datasets}"), "ingest_bench.json", 200, ("cpu", "cuda"), True),
          ("synth", "bench_synth.py", (), "bench_synth.json", 200, ("cpu", "cuda"), False),
          ("svm-defaults", "svm_defaults.py", ("--device", "{device}", "--datasets", "{datasets}"), "svm_defaults.json",
           300, ("cpu", "cuda"), True),
          ("svm-exactness", "svm_exactness.py", ("--device", "{device}", "--datasets", "{datasets}"),
           "svm_exactness.json", 560, ("cpu", "cuda"), True),
      )),
)}

K = 30
READ = ("readme", "full", "cli")
_CLI = {  # family -> (gputext arguments, the in-process library call, workload, the library module it imports)
    "knn-search": (("knn", "search", "--index", "{train}", "--queries", "{test}", "-k", str(K), "-o", "{out}/nn.h5"),
                   "knn_search", f"exact kNN, k = {K}, cosine: every test document against the training set", "gputext.knn.search"),
    "knn-classify-svm": (("knn", "classify", "--train", "{train}", "--test", "{test}", "-k", str(K), "--model", "svm",
                          "--features", "meta", "-o", "{out}/svm.h5"), "svm_classify",
                         f"kNN meta-features (k = {K}) + linear SVM, C by 5-fold CV, test predicted", "gputext.knn.svm"),
    "knn-classify-vote": (("knn", "classify", "--train", "{train}", "--test", "{test}", "-k", str(K), "-o", "{out}/pred.h5"),
                          "knn_vote", f"kNN vote, k = {K}: every test document classified", "gputext.knn.classify"),
    "star": (("cluster", "star", "{train}", "--beta", "0.25", "-o", "{out}/star.h5"), "star",
             "overlapping star clustering of the training set, beta 0.25", "gputext.cluster.star"),
    "stream": (("cluster", "stream", "{train}", "--threshold", "0.6", "--max-terms", "35", "-o", "{out}/stream.h5"),
               "stream", "stream clustering of the training set, T = 0.6, K = 35, one pass", "gputext.cluster.stream"),
    "rank-train": (("rank", "train", "{train}", "-C", "1", "--eps", "1e-5", "-o", "{out}/model.h5"), "rank_train",
                   "linear RankSVM, C = 1, to eps = 1e-5", "gputext.rank.api"),
}


def _cli_entries(dataset: str, families: tuple, suites: tuple) -> list:
    out = []
    for fam in families:
        args, library, workload, module = _CLI[fam]
        out.append(Entry(fam, dataset, "gputext", workload, suites, cli=args, library=library, imports=module))
    return out


KNN_SNIPPET = ("import sys; from gputext import NearestNeighbors; from gputext.io import read_corpus; "
               "X = read_corpus(sys.argv[1]).X; Q = read_corpus(sys.argv[2]).X; "
               "NearestNeighbors(n_neighbors=30, device=sys.argv[3]).fit(X).kneighbors(Q)")

CLASSIFY_SNIPPET = ("import sys; from gputext import KNeighborsClassifier; from gputext.io import read_corpus; "
                    "train = read_corpus(sys.argv[1]); test = read_corpus(sys.argv[2]); "
                    "KNeighborsClassifier(n_neighbors=30, metric='cosine', weights='similarity', device=sys.argv[3])"
                    ".fit(train.X, train.obs['label'].values()).predict(test.X)")

# (family, dataset, peer, script, workload, suites, devices) of the entries whose figures a family script measures
GPU, CPU, R = ("cuda",), ("cpu",), ("readme",)
SCRIPT_FIGURES = [
    ("knn-search", "knn-1e6", "gputext", "knn-1e6", "10^6 documents (72M nonzeros), 10,000 queries, k = 30, cosine", R, GPU),
    ("knn-search", "knn-1e6", "cupy-spmm", "knn-1e6", "CuPy SpMM + top-k, 10^6 documents, 10,000 queries, k = 30", R, GPU),
    ("knn-query", "knn-1e6", "gputext", "knn-1e6", "one query, 10^6 documents, k = 30 (median of many single queries)", R, GPU),
    ("knn-query", "knn-1e6", "cupy-spmm", "knn-1e6", "CuPy SpMM + top-k, one query, 10^6 documents", R, GPU),
    ("knn-search", "knn-1e7", "gputext", "knn-1e7", "10^7 documents (718M nonzeros), 10,000 queries, k = 30, cosine", R, GPU),
    ("knn-search", "knn-1e7", "cupy-spmm", "knn-1e7-cupy", "CuPy SpMM + top-k, 10^7 documents, 10,000 queries, k = 30",
     ("full",), GPU),
    ("knn-query", "knn-1e7", "gputext", "knn-1e7", "one query, 10^7 documents, k = 30 (median of many single queries)", R, GPU),
    ("knn-query", "knn-1e7", "cupy-spmm", "knn-1e7-cupy", "CuPy SpMM + top-k, one query, 10^7 documents", ("full",), GPU),
    ("knn-search", "knn-1e5", "gputext", "knn-cpu-1e5", "CPU twin, 10^5 documents (7.2M nonzeros), 1,000 queries, k = 30",
     R, CPU),
    ("knn-search", "knn-1e5", "sklearn-brute", "knn-cpu-1e5", "scikit-learn brute force, 10^5 documents, 1,000 queries, "
     "k = 30", R, CPU),
    ("metafeatures", "20ng", "gputext", "meta-20ng", "20 Newsgroups, k = 30: 11,293 training (leave-one-out) + 7,528 test "
     "documents", R, GPU),
    ("metafeatures", "20ng", "cpu-twin", "meta-20ng", "our CPU twin (all host cores), same work", R, GPU),
    ("svm", "20ng-meta", "gputext", "svm-20ng", "20 Newsgroups kNN meta-features (11,293 x 1,840), one-vs-rest L2-loss "
     "SVM, one primal fit at C = 0.25", R, GPU),
    ("svm", "20ng-meta", "sklearn-linearsvc", "svm-20ng", "LinearSVC (dual=False), same fit", R, GPU),
    ("star-graph", "reu-70k", "gputext", "star-reu70k", "Reu-70K shape (70,000 documents, beta 0.25): the similarity "
     "graph, 185.7M edges", R, GPU),
    ("star-graph", "reu-70k", "cupy-spgemm", "star-reu70k", "CuPy SpGEMM graph, same corpus", R, GPU),
    ("stream-latency", "1.6m-clusters", "gputext", "stream-1.6m", "1.6M clusters, K = 35, one document at a time: mean "
     "latency per document", R, GPU),
    ("stream-latency", "1.6m-clusters", "torch-spmv", "stream-1.6m", "torch.sparse SpMV + argmax, same state", R, GPU),
    ("rank-train", "mslr-web30k", "gputext", "rank-mslr30k", "MSLR-WEB30K shape (2.27M x 136, 18,919 queries) to "
     "eps = 1e-5", R, GPU),
    ("rank-train", "mslr-web30k", "cpu-twin", "rank-mslr30k", "our CPU twin (all host cores), same training", R, GPU),
]

# the parts of a process's CUDA start, each printed (the cuda-start entries' figures)
CUDA_START_SNIPPET = """
import time
t = [time.perf_counter()]
from cuda.bindings import driver as cu; t.append(time.perf_counter())
cu.cuInit(0); t.append(time.perf_counter())
err, dev = cu.cuDeviceGet(0); err, ctx = cu.cuDevicePrimaryCtxRetain(dev); cu.cuCtxSetCurrent(ctx); t.append(time.perf_counter())
import numba.cuda; t.append(time.perf_counter())
for part, a, b in zip(("import-cuda.bindings", "cuInit", "primary-context", "import-numba.cuda"), t, t[1:]):
    print(part, b - a)
"""

ENTRIES = [
    *_cli_entries("20ng", ("knn-search", "knn-classify-svm", "knn-classify-vote", "star", "stream"), READ),
    *_cli_entries("letor-sample", ("rank-train",), READ),
    # the same commands on the CPU twin of the GPU host: the CLI's GPU figure must beat it
    Entry("knn-search", "20ng", "cpu-twin", _CLI["knn-search"][2], READ, devices=("cuda",), cli=_CLI["knn-search"][0],
          device_arg="cpu"),
    # a fresh Python process: imports, reading the files, fit and kneighbors (issue 31's library figure)
    Entry("library-knn", "20ng", "gputext", "fresh Python process: from gputext import NearestNeighbors; "
          "NearestNeighbors(n_neighbors=30).fit(X).kneighbors(Q), imports and reading the files included", READ,
          snippet=KNN_SNIPPET),
    Entry("library-classify", "20ng", "gputext", "fresh Python process: from gputext import KNeighborsClassifier; "
          "KNeighborsClassifier(n_neighbors=30, metric='cosine', weights='similarity').fit(X, y).predict(Q), imports "
          "and reading the files included", READ, snippet=CLASSIFY_SNIPPET),
    # start-up: the command line's own cost (click only) and the imports of each family's library
    Entry("startup", "none", "gputext", "gputext --help in a fresh process", READ + ("smoke",), cli=("--help",)),
    # the warm-up command (every documented command's kernels into an empty cache) and the parts of
    # a process's CUDA start (records of 2026-11-27 on an H200; suite "tools": run by hand)
    Entry("doctor-compile", "none", "gputext", "gputext doctor --compile into an empty kernel cache", ("tools",),
          devices=("cuda",), cli=("doctor", "--compile")),
    *[Entry("cuda-start", "none", part, f"a fresh Python process's CUDA start: {part}", ("tools",), devices=("cuda",),
            snippet=CUDA_START_SNIPPET)
      for part in ("import-cuda.bindings", "cuInit", "primary-context", "import-numba.cuda")],
    # the README's kernel rows: figures of the family scripts (benchmarks/adapters.py)
    *[Entry(fam, data, peer, what, suites, devices=devices, script=script)
      for fam, data, peer, script, what, suites, devices in SCRIPT_FIGURES],
    # synthetic corpora of 20 Newsgroups' shape (the smoke suite shrinks them with --scale), and peers in process
    *_cli_entries("synth-20ng", ("knn-search", "knn-classify-svm", "knn-classify-vote", "star", "stream"),
                  READ + ("smoke",)),
    *_cli_entries("synth-ltr", ("rank-train",), READ + ("smoke",)),
    Entry("library-knn", "synth-20ng", "gputext", "fresh Python process: NearestNeighbors(n_neighbors=30).fit(X)"
          ".kneighbors(Q), imports and reading the files included", READ + ("smoke",), snippet=KNN_SNIPPET),
    # peers in process on the same files
    Entry("knn-search", "20ng", "sklearn-brute", "scikit-learn NearestNeighbors(algorithm='brute', metric='cosine', "
          "n_jobs=-1), k = 30", ("readme", "full"), library="sklearn_knn"),
    Entry("knn-search", "synth-20ng", "sklearn-brute", "scikit-learn NearestNeighbors(algorithm='brute', "
          "metric='cosine', n_jobs=-1), k = 30", ("readme", "full", "smoke"), library="sklearn_knn"),
]
ENTRY = {e.name: e for e in ENTRIES}
# older studies whose figures docs/ pages show (benchmarks/render.py's study views), family -> what
# measured them; the runner does not run them, and each record names its source, device, date and command
STUDIES = {"linearsvc-defaults": "scripts/svm_defaults.py",
           "clustering-sweep": "gputext.estimators.sweep.sweep_clustering",
           "stream-latency-passes": "scripts/gpu_stream.py", "stream-latency-parts": "scripts/gpu_stream.py",
           "stream-cpu-latency": "scripts/table_stream.py", "star-fig17": "scripts/table_star.py",
           "star-fig18-newtopics": "scripts/table_star.py", "star-fig18-sametopic": "scripts/table_star.py",
           "star-dclus-goal": "scripts/gpu_dclus.py", "star-dclus-split": "scripts/gpu_dclus.py",
           "star-dclus-format2": "scripts/gpu_dclus.py", "classify-table-20ng": "scripts/table_metafeatures.py",
           "classify-svm-h100": "scripts/gpu_svm.py", "svm-tolerance": "scikit-learn LinearSVC fits",
           "meta-method": "scripts/table_metafeatures.py", "meta-20ng-runs": "scripts/gpu_meta.py",
           "dense-one-query": "scripts/gpu_matvec_grid.py, scripts/gpu_knn_classify.py",
           "dense-batched": "scripts/gpu_knn_classify.py", "engine-pruning": "scripts/knn_pruning.py",
           "engine-design": "scripts/bench_knn.py", "knn-5e7": "scripts/bench_knn.py", "ingest": "scripts/bench_ingest.py",
           "synth": "scripts/bench_synth.py", "rank-quick": "scripts/gpu_rank.py"}
# scripts/*.py that are not a Script above, and why
NOT_SCRIPTS = {"startup_times.py": "start-up of --help, corpus info and rank train: the registry's startup, import and "
                                   "rank-train entries measure it (cold and warm) for every command"}
assert len(ENTRY) == len(ENTRIES), "two entries with one name"


def entries(suite: str, device: str) -> tuple[list, list]:
    """(the entries of ``suite`` that run on ``device``, those skipped there)."""
    chosen = [e for e in ENTRIES if suite in e.suites or (suite == "full" and "readme" in e.suites)]
    return [e for e in chosen if device in e.devices], [e for e in chosen if device not in e.devices]


def scripts(suite: str, device: str) -> list:
    """The paper-table scripts of ``suite`` (entries' scripts are run through their entries)."""
    return [s for s in SCRIPTS.values() if suite in s.suites and s.adapter is None and device in s.devices]
