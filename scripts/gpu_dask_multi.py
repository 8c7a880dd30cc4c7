#!/usr/bin/env python
"""Scaling of the Dask path over GPUs (issue 17): 10^8 documents, 10,000 queries, k = 30, on 1, 2
and 4 GPUs of one host, results identical to 1 GPU, in one run.

    python scripts/gpu_dask_multi.py [--quick] [--docs 1e8] [--gpus 1,2,4] [--queries 10000] [--out DIR]

1. A local cluster of max(--gpus) workers, one per GPU (gputext.distributed.connect("local:N"):
   dask-cuda when installed, else one process per GPU through CUDA_VISIBLE_DEVICES).
2. The corpus: --docs documents of bench_knn.py's model (200,000 terms, ~60 a document,
   tf-idf), cut into chunks of --chunk documents, each generated and written (uncompressed) by a
   worker in parallel to --data-dir as chunk_00000.h5, ...: chunk c is make_corpus(chunk,
   seed=1000+c, model_seed=1) weighted with chunk 0's document frequencies, so the corpus is the
   same whatever the number of workers. Files already there (same name) are reused, so a second
   call on a warm machine skips this step (--generate-only: this step alone).
3. Queries: --queries documents of the same model (seed 2), on this process.
4. For g in --gpus: DistributedIndex.from_path(all chunk files, workers = the first g): g shards
   balanced by postings, each read and indexed by its worker (timed: read + term maxima, then the
   first search that builds and uploads each shard's index), then the median of --repeats
   searches of all queries. Speed-up t(1)/t(g), efficiency t(1)/(g t(g)) (goal: >= 0.85 at 4,
   i.e. >= 3.4x), and identical: indices and scores bit for bit those of the first g.

Writes dask_multi.json (+ dask_multi.md) under --out. --quick: 2*10^5 documents in chunks of
5*10^4, 1,000 queries (any machine: without GPUs the workers run the CPU twin).
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

log = harness.log
TERMS, PER_DOC, CLASSES = 200_000, 60, 20


def write_chunk(path: str, n_docs: int, seed: int, df, ref_docs) -> str:
    """On a worker: one chunk of the corpus written to path (uncompressed); returns path."""
    from gputext.datasets.synth import make_corpus
    from gputext.io.corpus import Corpus, write_corpus
    from gputext.io.weighting import Reference
    reference = None if df is None else Reference(np.asarray(df), int(ref_docs))
    corpus = make_corpus(n_docs, TERMS, PER_DOC, CLASSES, seed=seed, model_seed=1, reference=reference)
    tmp = path + ".tmp.h5"
    write_corpus(Corpus(corpus.X, terms=corpus.terms, var={"df": np.asarray(corpus.var["df"])}), tmp,
                 compression=None)
    os.replace(tmp, path)
    return path


def chunk_files(a, client, workers):
    """(chunk paths, seconds, chunk 0's df, its documents): the files made in parallel on the
    workers where missing."""
    from gputext.distributed.run import gather
    os.makedirs(a.data_dir, exist_ok=True)
    n_chunks = -(-a.docs // a.chunk)
    paths = [os.path.join(a.data_dir, f"chunk_{a.docs}_{a.chunk}_{c:05d}.h5") for c in range(n_chunks)]
    sizes = [min(a.chunk, a.docs - c * a.chunk) for c in range(n_chunks)]
    t = time.perf_counter()
    if not os.path.exists(paths[0]):
        write_chunk(paths[0], sizes[0], 1000, None, 0)
    from gputext.io.corpus import read_corpus
    first = read_corpus(paths[0])
    df, ref_docs = np.asarray(first.var["df"]), first.n_docs
    todo = [c for c in range(1, n_chunks) if not os.path.exists(paths[c])]
    futures = [client.submit(write_chunk, paths[c], sizes[c], 1000 + c, df, ref_docs, workers=[workers[i % len(workers)]],
                             allow_other_workers=True, pure=False) for i, c in enumerate(todo)]
    if futures:
        gather(client, futures, "writing the corpus chunks")
    return paths, time.perf_counter() - t, df, ref_docs


def queries(a, df, ref_docs):
    from gputext.datasets.synth import make_corpus
    from gputext.io.weighting import Reference
    return make_corpus(a.queries, TERMS, PER_DOC, CLASSES, seed=2, model_seed=1,
                       reference=Reference(np.asarray(df), int(ref_docs))).X


def run_gpus(g, paths, Q, a, client, workers, reference, report):
    from gputext.distributed import DistributedIndex
    t = time.perf_counter()
    index = DistributedIndex.from_path(paths, client, workers=workers[:g])
    read_s = time.perf_counter() - t
    t = time.perf_counter()
    index.search_topk(Q[:256], a.k, "cosine", a.device)  # each worker builds and uploads its shard
    build_s = time.perf_counter() - t
    med, (docs, scores), runs = harness.wall_runs(lambda: index.search_topk(Q, a.k, "cosine", a.device), a.repeats, 1)
    shards = [(s.lo, s.hi, s.worker) for s in index.shards]
    index.close()
    out = {"gpus": g, "shards": shards, "read_and_maxima_s": read_s, "first_call_s": build_s, "search_s": med,
           "runs_s": runs, "queries_per_s": a.queries / med}
    if reference:
        out["identical_to_first"] = bool(np.array_equal(reference[0], docs)
                                         and np.array_equal(reference[1], scores, equal_nan=True))
    else:
        reference.extend([docs, scores])
    report.row(f"{g} GPU(s)", "search", f"{med:.3f} s", f"{a.queries / med:,.0f} queries/s; read {read_s:.1f} s, "
               f"first call {build_s:.1f} s" + (f"; identical: {out['identical_to_first']}" if "identical_to_first" in out else ""))
    return out


def main():
    p = harness.parser(__doc__, quick="2*10^5 documents in chunks of 5*10^4, 1,000 queries")
    p.add_argument("--docs", type=float, default=1e8)
    p.add_argument("--chunk", type=float, default=2.5e6, help="documents per generated chunk file")
    p.add_argument("--gpus", default="1,2,4")
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("--k", type=int, default=30)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--data-dir", default=os.path.join("out", "dask-multi-data"))
    p.add_argument("--generate-only", action="store_true", help="write the chunk files, then stop")
    a = p.parse_args()
    if a.quick:
        a.docs, a.chunk, a.queries = 2e5, 5e4, 1000
    a.docs, a.chunk = int(a.docs), int(a.chunk)
    gpus = [int(g) for g in a.gpus.split(",")]
    from gputext.backend import resolve
    from gputext.distributed import connect
    from gputext.distributed.run import worker_addresses
    backend = resolve(a.device)
    a.device = backend.name
    report = harness.Report(a.out, {"probe": harness.probe(backend), "args": vars(a)})
    with connect(f"local:{max(gpus)}", quiet=False) as client:
        from gputext.distributed.client import describe_cluster
        workers = worker_addresses(client)
        report.results["workers"] = describe_cluster(client)
        paths, gen_s, df, ref_docs = chunk_files(a, client, workers)
        report.row("corpus", "chunk files", f"{len(paths)} x {a.chunk:,} documents", f"{gen_s:.1f} s (0: reused)")
        report.results["generate_s"] = gen_s
        if not a.generate_only:
            Q = queries(a, df, ref_docs)
            reference: list = []
            runs = report.results.setdefault("runs", {})
            for g in gpus:
                report.section(str(g), run_gpus, g, paths, Q, a, client, workers, reference, report, key="runs")
            t1 = runs.get(str(gpus[0]), {}).get("search_s")
            for g in gpus[1:]:
                r = runs.get(str(g), {})
                if t1 and "search_s" in r:
                    r["speedup"] = t1 / r["search_s"]
                    r["efficiency"] = t1 * gpus[0] / (g * r["search_s"])
                    report.row(f"{g} GPU(s)", "speed-up / efficiency", f"{r['speedup']:.2f}x / {r['efficiency']:.2f}",
                               "goal at 4: >= 3.4x / >= 0.85")
    report.write("dask_multi.json", "## gputext.distributed over GPUs\n\n" + report.rows_md(), "dask_multi.md")


if __name__ == "__main__":
    main()
