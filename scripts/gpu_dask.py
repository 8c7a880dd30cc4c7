#!/usr/bin/env python
"""The Dask path (gputext.distributed) with one worker against the direct engine, and a large
corpus indexed and searched through it (issue 17), in one run.

    python scripts/gpu_dask.py [--quick] [--device auto|cuda|cpu] [--sizes 1e6,1e7] [--queries 10000] [--out DIR]

For each corpus size N (bench_knn.py's corpus: gputext.datasets.synth.make_corpus(N, 200000, 60,
20, seed=1); queries: --queries further documents, seed 2, weighted with the corpus's idf), k = 30
cosine:

  direct   gputext.engine: Index.from_csr, one warm-up search (the index is built and uploaded
           then: timed apart), then the median of --repeats searches of all queries
  dask     a local cluster of ONE worker (the GPU; `local:1`), the corpus written once to
           --data-dir and read by the worker (DistributedIndex.from_path: read + index timed
           apart), one warm-up search, then the median of --repeats searches: queries shipped to
           the worker, the engine there, results back, merged here
  overhead dask / direct - 1 (goal: <= 0.10 at 10^6 documents x 10,000 queries); identical: the
           two give the same indices and scores bit for bit

--skip-direct N (default 10^6): no direct run above N documents (the Dask path alone: "indexed and
searched through it"; --skip-direct 1e7 adds the direct engine at 10^7 for the overhead there too). Writes dask_gpu.json (+ dask_gpu.md) under --out; the markdown table is printed last.
--quick: 2*10^4 documents, 1,000 queries (any machine, a minute).
"""
from __future__ import annotations

import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

log = harness.log


def make_data(n_docs: int, n_queries: int, seed_docs: int = 1):
    from gputext.datasets.synth import make_corpus
    from gputext.io.weighting import Reference
    t = time.perf_counter()
    corpus = make_corpus(n_docs, 200_000, 60, 20, seed=seed_docs)
    reference = Reference(np.asarray(corpus.var["df"]), corpus.n_docs)
    Q = make_corpus(n_queries, 200_000, 60, 20, seed=2, model_seed=seed_docs, reference=reference).X
    return corpus, Q, time.perf_counter() - t


def free_device():
    """Give this process's device memory back (the engine's workspace, deferred frees): the direct
    run's before the worker process needs the GPU (also run on the worker afterwards)."""
    gc.collect()
    try:
        from numba import cuda
        if cuda.is_available():
            from gputext.device.memory import free_deferred, resources
            resources().workspace.release()
            free_deferred()
    except Exception:  # noqa: BLE001 - no GPU here, or nothing to release
        pass


def direct(X, Q, k, device, repeats):
    from gputext.engine import Index, search_topk
    index = Index.from_csr(X)
    t = time.perf_counter()
    search_topk(index, Q[:256], k, "cosine", device)  # build + upload the index, compile
    first = time.perf_counter() - t
    med, (docs, scores), runs = harness.wall_runs(lambda: search_topk(index, Q, k, "cosine", device), repeats, 1)
    del index
    free_device()
    return {"first_call_s": first, "search_s": med, "runs_s": runs}, docs, scores


def through_dask(path, Q, k, device, repeats, client):
    from gputext.distributed import DistributedIndex
    t = time.perf_counter()
    index = DistributedIndex.from_path(path, client)  # the worker reads its rows, term maxima
    built = time.perf_counter() - t
    t = time.perf_counter()
    index.search_topk(Q[:256], k, "cosine", device)  # builds the shard's index (and uploads it) there
    first = time.perf_counter() - t
    med, (docs, scores), runs = harness.wall_runs(lambda: index.search_topk(Q, k, "cosine", device), repeats, 1)
    index.close()
    client.run(free_device)
    return {"read_and_maxima_s": built, "first_call_s": first, "search_s": med, "runs_s": runs,
            "shards": len(index.shards)}, docs, scores


def one_size(n_docs, a, client, report):
    from gputext.io.corpus import Corpus, write_corpus
    corpus, Q, gen = make_data(n_docs, a.queries)
    log(f"N = {n_docs:,}: generated in {gen:.1f} s ({corpus.X.nnz:,} nonzeros)")
    os.makedirs(a.data_dir, exist_ok=True)
    path = os.path.join(a.data_dir, f"dask_bench_{n_docs}.h5")
    t = time.perf_counter()
    write_corpus(Corpus(corpus.X, terms=corpus.terms), path, compression=None)
    out = {"n_docs": n_docs, "nnz": int(corpus.X.nnz), "queries": a.queries, "k": a.k, "generate_s": gen,
           "write_s": time.perf_counter() - t}
    name = f"N={n_docs:.0e}"
    ref = None
    if n_docs <= a.skip_direct:
        out["direct"], d_docs, d_scores = direct(corpus.X, Q, a.k, a.device, a.repeats)
        ref = (d_docs, d_scores)
        report.row(name, "direct engine search", f"{out['direct']['search_s']:.3f} s",
                   f"{a.queries:,} queries, k = {a.k}")
    del corpus
    gc.collect()
    out["dask"], docs, scores = through_dask(path, Q, a.k, a.device, a.repeats, client)
    report.row(name, "dask (1 worker) search", f"{out['dask']['search_s']:.3f} s",
               f"read + maxima {out['dask']['read_and_maxima_s']:.1f} s, first call {out['dask']['first_call_s']:.1f} s")
    if ref is not None:
        out["identical"] = bool(np.array_equal(ref[0], docs) and np.array_equal(ref[1], scores, equal_nan=True))
        out["overhead"] = out["dask"]["search_s"] / out["direct"]["search_s"] - 1.0
        report.row(name, "dask overhead", f"{100 * out['overhead']:.1f} %",
                   f"goal <= 10 % at 10^6; identical: {out['identical']}")
    os.remove(path)
    return out


def main():
    p = harness.parser(__doc__, quick="2*10^4 documents, 1,000 queries")
    p.add_argument("--sizes", default="1e6,1e7", help="corpus sizes (documents), comma-separated")
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("--k", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-direct", type=float, default=1e6, help="no direct run above this many documents")
    p.add_argument("--data-dir", default=os.path.join("out", "dask-data"))
    a = p.parse_args()
    if a.quick:
        a.sizes, a.queries = "2e4", 1000
    a.skip_direct = int(a.skip_direct)
    from gputext.backend import resolve
    from gputext.distributed import connect
    backend = resolve(a.device)
    a.device = backend.name
    report = harness.Report(a.out, {"probe": harness.probe(backend), "args": vars(a)})
    with connect("local:1", quiet=False) as client:
        from gputext.distributed.client import describe_cluster
        report.results["workers"] = describe_cluster(client)
        for size in a.sizes.split(","):
            n = int(float(size))
            report.section(f"{n}", one_size, n, a, client, report, key="sizes", timed=True)
    report.write("dask_gpu.json", "## gputext.distributed, one worker vs the direct engine\n\n" + report.rows_md(),
                 "dask_gpu.md")


if __name__ == "__main__":
    main()
