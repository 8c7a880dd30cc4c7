#!/usr/bin/env python
"""Scaling of the Dask path over GPUs (issues 17, 34): 10^8 documents, 10,000 queries, k = 30, on 1,
2 and 4 GPUs of one host, results identical to the base run, in one run.

    python scripts/gpu_dask_multi.py [--quick] [--docs 1e8] [--gpus 1,2,4] [--queries 10000] [--out DIR]
                                     [--gen-procs N] [--reference FILE.npz]

1. The corpus: --docs documents of bench_knn.py's model (200,000 terms, ~72 stored a document,
   tf-idf, 20 classes in obs/label), cut into chunks of --chunk documents written (uncompressed)
   to --data-dir as chunk_v2_CHUNK_00000_SIZE.h5, ...: chunk c is make_corpus(chunk,
   seed=1000+c, model_seed=1) weighted with chunk 0's document frequencies, so the corpus is the
   same whatever makes it. Chunk 0 here, the others by --gen-procs processes of this host (the
   generator is single-threaded numpy; the Dask workers, one per GPU, would be 4 of 64 cores).
   Files already there (same name) are reused, so a second call on a warm machine skips this step
   (--generate-only: this step alone). Timed: generate_s.
2. A local cluster of max(--gpus) workers, one per GPU (gputext.distributed.connect("local:N"):
   dask-cuda when installed, else one process per GPU through CUDA_VISIBLE_DEVICES).
3. Queries: --queries documents of the same model (seed 2), on this process.
4. For g in --gpus: DistributedIndex.from_path(all chunk files, workers = the first g): g shards
   balanced by postings, each read and indexed by its worker (timed: read + term maxima, then the
   first search that builds and uploads each shard's index), then the median of --repeats
   searches of all queries, and each GPU's peak memory in use during the run (nvidia-smi, whole
   device, sampled every 0.5 s). Speed-up t(base)/t(g), efficiency base t(base)/(g t(g)) (goal:
   >= 0.85 at 4), and identical: indices and scores bit for bit those of the base run, the first
   g, or --reference (an .npz this script wrote: a base run measured by an earlier call, e.g. 1
   GPU at 10^8 in a call of its own; written when the file does not exist yet, with the base run's
   search time). Speed-up and efficiency are against the smallest GPU count measured (this run's
   or the reference's), so --gpus 2,4,1 measures the 2-GPU base first and one GPU last.
   dask_multi.json is rewritten after the corpus and after each GPU count (a run cut off by a
   time limit keeps what it measured); the read and first-call times are logged as they end.

Memory: the engine's index takes 8 bytes a posting (~5.9 GB a 10^7 documents) and may use 45% of
a GPU's free memory (docs/knn_search.md): 10^8 documents (~59 GB) stay whole on 2 H100s (29.5 GB
each), not on one (its index is then cut in shards streamed from host memory, a slower path);
one H200 (141 GB) holds them.

Writes dask_multi.json (+ dask_multi.md) under --out. --quick: 2*10^5 documents in chunks of
5*10^4, 1,000 queries (any machine: without GPUs the workers run the CPU twin).
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

log = harness.log
TERMS, PER_DOC, CLASSES = 200_000, 60, 20


def write_chunk(path: str, n_docs: int, seed: int, df, ref_docs) -> str:
    """One chunk of the corpus written to path (uncompressed, with obs/label); returns path."""
    from gputext.datasets.synth import make_corpus
    from gputext.io.corpus import Corpus, write_corpus
    from gputext.io.weighting import Reference
    reference = None if df is None else Reference(np.asarray(df), int(ref_docs))
    corpus = make_corpus(n_docs, TERMS, PER_DOC, CLASSES, seed=seed, model_seed=1, reference=reference)
    tmp = path + ".tmp.h5"
    write_corpus(Corpus(corpus.X, obs={"label": corpus.obs["label"]}, terms=corpus.terms,
                        var={"df": np.asarray(corpus.var["df"])}), tmp, compression=None)
    os.replace(tmp, path)
    return path


def generate_chunks(docs: int, chunk: int, data_dir: str, procs: int):
    """(chunk paths, seconds, chunk 0's df, its documents): the chunk files of a corpus of ``docs``
    documents, made where missing by ``procs`` processes of this host."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from gputext.io.corpus import read_corpus
    os.makedirs(data_dir, exist_ok=True)
    n_chunks = -(-docs // chunk)
    sizes = [min(chunk, docs - c * chunk) for c in range(n_chunks)]
    # a chunk depends on its size, its number and chunk 0 (the df), not on the corpus's total:
    # the first 8 chunks of 1.25*10^6 of the 10^8 corpus are the 10^7 one, files shared
    paths = [os.path.join(data_dir, f"chunk_v2_{chunk}_{c:05d}_{sizes[c]}.h5") for c in range(n_chunks)]
    t = time.perf_counter()
    if not os.path.exists(paths[0]):
        write_chunk(paths[0], sizes[0], 1000, None, 0)
    first = read_corpus(paths[0])
    df, ref_docs = np.asarray(first.var["df"]), first.n_docs
    todo = [c for c in range(1, n_chunks) if not os.path.exists(paths[c])]
    if todo:
        with ProcessPoolExecutor(max(1, min(procs, len(todo))), mp_context=get_context("spawn")) as pool:
            for done in pool.map(write_chunk, [paths[c] for c in todo], [sizes[c] for c in todo],
                                 [1000 + c for c in todo], [df] * len(todo), [ref_docs] * len(todo)):
                pass
    return paths, time.perf_counter() - t, df, ref_docs


def default_procs() -> int:
    """Generator processes: the host's cores less four, at most one per 6 GB of memory (a chunk of
    1.25*10^6 documents takes ~3 GB while made)."""
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gb = 16
    return max(1, min((os.cpu_count() or 2) - 4, int(mem_gb // 6)))


class GpuMemoryPeaks:
    """Each GPU's largest memory in use (MiB, nvidia-smi: the whole device) while the ``with`` runs,
    sampled every ``every`` seconds; ``peaks`` is {} without nvidia-smi."""

    def __init__(self, every: float = 0.5):
        self.every, self.peaks = every, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                return
            for line in out.strip().splitlines():
                gpu, used = (int(x) for x in line.split(","))
                self.peaks[gpu] = max(self.peaks.get(gpu, 0), used)
            self._stop.wait(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=15)


def queries(a, df, ref_docs):
    from gputext.datasets.synth import make_corpus
    from gputext.io.weighting import Reference
    return make_corpus(a.queries, TERMS, PER_DOC, CLASSES, seed=2, model_seed=1,
                       reference=Reference(np.asarray(df), int(ref_docs))).X


def run_gpus(g, paths, Q, a, client, workers, reference, report):
    from gputext.distributed import DistributedIndex
    with GpuMemoryPeaks() as memory:
        t = time.perf_counter()
        index = DistributedIndex.from_path(paths, client, workers=workers[:g])
        read_s = time.perf_counter() - t
        log(f"[{g} GPU(s)] read and term maxima: {read_s:.1f} s")
        t = time.perf_counter()
        index.search_topk(Q[:256], a.k, "cosine", a.device)  # each worker builds and uploads its shard
        build_s = time.perf_counter() - t
        log(f"[{g} GPU(s)] first call (256 queries: build, upload, kernels): {build_s:.1f} s")
        med, (docs, scores), runs = harness.wall_runs(lambda: index.search_topk(Q, a.k, "cosine", a.device),
                                                      a.repeats, 1)
        shards = [(s.lo, s.hi, s.worker) for s in index.shards]
        index.close()
    out = {"gpus": g, "shards": shards, "read_and_maxima_s": read_s, "first_call_s": build_s, "search_s": med,
           "runs_s": runs, "queries_per_s": a.queries / med, "peak_memory_mib": memory.peaks}
    if reference:
        out["identical_to_base"] = bool(np.array_equal(reference[0], docs)
                                        and np.array_equal(reference[1], scores, equal_nan=True))
        out["base"] = reference[2]
    else:
        reference.extend([docs, scores, f"{g} GPU(s), this run", g, med])
        if a.reference and not os.path.exists(a.reference):
            np.savez(a.reference, docs=docs, scores=scores, gpus=g, docs_n=a.docs, queries=a.queries, k=a.k,
                     search_s=med)
    peaks = ", ".join(f"GPU {i}: {v / 1024:.1f} GiB" for i, v in sorted(memory.peaks.items()))
    report.row(f"{g} GPU(s)", "search", f"{med:.3f} s", f"{a.queries / med:,.0f} queries/s; read {read_s:.1f} s, "
               f"first call {build_s:.1f} s; peak memory {peaks or 'n/a'}"
               + (f"; identical to {out['base']}: {out['identical_to_base']}" if "identical_to_base" in out else ""))
    return out


def load_reference(a) -> list:
    """[docs, scores, what] of --reference when it exists (same corpus size, queries and k), else []."""
    if not a.reference or not os.path.exists(a.reference):
        return []
    ref = np.load(a.reference)
    if (int(ref["docs_n"]), int(ref["queries"]), int(ref["k"])) != (a.docs, a.queries, a.k):
        raise SystemExit(f"{a.reference} is for {int(ref['docs_n'])} documents, {int(ref['queries'])} queries, "
                         f"k {int(ref['k'])}: not this run")
    search_s = float(ref["search_s"]) if "search_s" in ref.files else None
    return [ref["docs"], ref["scores"], f"{int(ref['gpus'])} GPU(s), {a.reference}", int(ref["gpus"]), search_s]


def scaling(runs: dict, reference: list) -> dict:
    """Speed-up and efficiency of every measured GPU count against the smallest one measured (this
    run's or the reference's, whose search time the .npz keeps): {gpus: {search_s, speedup, efficiency}}."""
    times = {int(g): r["search_s"] for g, r in runs.items() if isinstance(r, dict) and "search_s" in r}
    if len(reference) >= 5 and reference[4] is not None:
        times.setdefault(int(reference[3]), float(reference[4]))
    if not times:
        return {}
    base = min(times)
    return {str(g): {"search_s": t, "against_gpus": base, "speedup": times[base] / t,
                     "efficiency": times[base] * base / (g * t)} for g, t in sorted(times.items())}


def main():
    p = harness.parser(__doc__, quick="2*10^5 documents in chunks of 5*10^4, 1,000 queries")
    p.add_argument("--docs", type=float, default=1e8)
    p.add_argument("--chunk", type=float, default=1.25e6, help="documents per generated chunk file")
    p.add_argument("--gpus", default="1,2,4")
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("--k", type=int, default=30)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--data-dir", default=os.path.join("out", "dask-multi-data"))
    p.add_argument("--gen-procs", type=int, default=0, help="generator processes (0: default_procs())")
    p.add_argument("--reference", default="", help="base run's results (.npz): compared with, or written")
    p.add_argument("--generate-only", action="store_true", help="write the chunk files, then stop")
    a = p.parse_args()
    if a.quick:
        a.docs, a.chunk, a.queries = 2e5, 5e4, 1000
    a.docs, a.chunk = int(a.docs), int(a.chunk)
    try:
        gpus = [int(g) for g in a.gpus.split(",")]
    except ValueError:
        gpus = []
    if not gpus or min(gpus) < 1 or len(set(gpus)) != len(gpus):
        p.error(f"--gpus {a.gpus!r}: expected distinct GPU counts >= 1 separated by commas, e.g. 2,4,1")
    if a.docs < 1 or a.chunk < 1 or a.queries < 1 or a.k < 1:
        p.error("--docs, --chunk, --queries and --k must be >= 1")
    from gputext.backend import resolve
    from gputext.distributed import connect
    from gputext.distributed.run import worker_addresses
    backend = resolve(a.device)
    a.device = backend.name
    report = harness.Report(a.out, {"probe": harness.probe(backend), "args": vars(a)})
    paths, gen_s, df, ref_docs = generate_chunks(a.docs, a.chunk, a.data_dir, a.gen_procs or default_procs())
    report.row("corpus", "chunk files", f"{len(paths)} x {a.chunk:,} documents",
               f"{gen_s:.1f} s with {a.gen_procs or default_procs()} processes (~0: reused)")
    report.results["generate_s"] = gen_s
    from gputext.io.corpus import corpus_shape
    shapes = [corpus_shape(path) for path in paths]
    report.results["corpus"] = {"files": len(paths), "docs": sum(n for n, _, _ in shapes),
                                "nnz": sum(z for _, _, z in shapes), "bytes": sum(os.path.getsize(p) for p in paths),
                                "generator_processes": a.gen_procs or default_procs()}
    harness.write_json(os.path.join(a.out, "dask_multi.json"), report.results)  # partial, as it goes
    if not a.generate_only:
        with connect(f"local:{max(gpus)}", quiet=False) as client:
            from gputext.distributed.client import describe_cluster
            workers = worker_addresses(client)
            report.results["workers"] = describe_cluster(client)
            Q = queries(a, df, ref_docs)
            reference = load_reference(a)
            runs = report.results.setdefault("runs", {})
            for g in gpus:
                report.section(str(g), run_gpus, g, paths, Q, a, client, workers, reference, report, key="runs")
                report.results["scaling"] = scaling(runs, reference)
                harness.write_json(os.path.join(a.out, "dask_multi.json"), report.results)  # partial, as it goes
            for g, r in report.results["scaling"].items():
                if int(g) != r["against_gpus"]:
                    report.row(f"{g} GPU(s)", f"speed-up / efficiency against {r['against_gpus']}",
                               f"{r['speedup']:.2f}x / {r['efficiency']:.2f}", "goal at 4: efficiency >= 0.85")
    report.write("dask_multi.json", "## gputext.distributed over GPUs\n\n" + report.rows_md(), "dask_multi.md")


if __name__ == "__main__":
    main()
