#!/usr/bin/env python
"""The families on several GPUs of one host (issue 34), each against one GPU without Dask, results
identical, with the speed-up; and each worker's time to its first answer.

    python scripts/gpu_dask_families.py [--quick] [--sections first-answer,meta,star,rank] [--gpus 4]
                                        [--out DIR] [--data-dir DIR] [--chunk N]

One local cluster of --gpus workers, one per GPU (gputext.distributed.connect("local:N")); "1
GPU" is the same call without a client, in this process (GPU 0). Each family is warmed up first
(kernels compiled on a slice, here and on every worker), then timed once (wall clock).

first-answer  2*10^7 documents (gpu_dask_multi.py's chunk files): on 1 worker, then on each of
              --gpus workers at once (a shard each, as DistributedIndex cuts them), the worker's
              read of its rows (bytes, s, GB/s), the index build (Index + term maxima), its
              first search of one query (postings built and uploaded, kernels loaded) and a
              second one; the bounds: read at `dd`'s rate on the same files (measured here,
              page cache as it is), first call against 37.0 s at 2*10^7 on 1 GPU (issue 34).
meta          meta-features (k = 30, cosine/L1/L2 + centroids) of 10,000 queries against 10^7
              training documents with 20 classes: compute_metafeatures(train_rows=False).
star          the star graph and clustering of 1.25*10^6 documents (one chunk file), beta 0.25:
              cluster_star of the matrix in one process, of the file's path on the workers.
rank          RankSVM on 10x the MSLR-WEB30K training shape (189,190 queries, ~2.27*10^7 rows x
              136 dense features, 5 levels), C = 1, eps = 1e-5: train_data; weights bit for bit.

Writes dask_families.json (+ dask_families.md) under --out. Sizes: --quick shrinks each (about a
minute on any machine; without GPUs the workers run the CPU twin and "1 GPU" is the CPU twin).
Expected on 4 H100s (estimates, 2026-11-27, from the measured rates in docs/distributed.md):
first-answer + meta + star ~5 min with the 2*10^7 corpus generated, rank ~4 min.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import gpu_dask_multi as multi  # noqa: E402

log = harness.log
SIZES = {"first_answer_docs": 2e7, "meta_docs": 1e7, "meta_queries": 10_000, "star_docs": 1.25e6,
         "rank_queries": 189_190, "chunk": 1.25e6}
QUICK = {"first_answer_docs": 2e5, "meta_docs": 1e5, "meta_queries": 500, "star_docs": 2e4, "rank_queries": 400,
         "chunk": 5e4}


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


# ----------------------------------------------------------------------------- first answer

def worker_first_answer(paths, lo, hi, query, device):
    """On a worker: read rows [lo, hi) of the chunk files, build the Index and the term maxima,
    then two searches of one query; seconds and bytes of each step."""
    from gputext.distributed.shards import file_source, read_source_rows
    from gputext.engine import Index, search_topk_keys
    from gputext.kernels import scoring
    from gputext.io.corpus import csr_arrays
    source, _ = file_source(paths)
    X, read_s = timed(lambda: read_source_rows(source, lo, hi))
    nbytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes

    def build():
        index = Index.from_csr(X)
        _, indices, data = csr_arrays(X)
        return index.with_term_maxabs(scoring.term_maxabs_cpu(indices, data, source.n_terms))

    index, build_s = timed(build)
    _, first_s = timed(lambda: search_topk_keys(index, query, 30, "cosine", device, quiet=True))
    _, second_s = timed(lambda: search_topk_keys(index, query, 30, "cosine", device, quiet=True))
    return {"rows": [lo, hi], "bytes": nbytes, "read_s": read_s, "read_gb_s": nbytes / read_s / 1e9,
            "build_s": build_s, "first_call_s": first_s, "second_call_s": second_s}


def dd_rate(paths) -> dict:
    """`dd` of the chunk files to /dev/null (16 MiB blocks): bytes, seconds, GB/s."""
    total, t = 0, time.perf_counter()
    for path in paths:
        subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M"], capture_output=True, check=True)
        total += os.path.getsize(path)
    seconds = time.perf_counter() - t
    return {"bytes": total, "seconds": seconds, "gb_s": total / seconds / 1e9}


def first_answer(a, client, workers, report):
    from gputext.distributed.run import gather
    from gputext.io.corpus import read_rows
    from gputext.distributed.shards import file_source, plan_bounds
    paths, gen_s, _, _ = multi.generate_chunks(int(a.sizes["first_answer_docs"]), int(a.sizes["chunk"]), a.data_dir,
                                               a.gen_procs or multi.default_procs())
    out = {"generate_s": gen_s, "dd": dd_rate(paths)}
    _, indptr = file_source(paths)
    query = read_rows(paths[0], 0, 1)
    for g in sorted({1, len(workers)}):
        bounds = plan_bounds(indptr, g)
        futures = [client.submit(worker_first_answer, paths, int(bounds[i]), int(bounds[i + 1]), query, a.device,
                                 workers=[workers[i]], pure=False) for i in range(g)]
        rows = gather(client, futures, "the first answers")
        out[f"{g}_workers"] = rows
        slowest = max(rows, key=lambda r: r["read_s"] + r["build_s"] + r["first_call_s"])
        report.row("first answer", f"{g} worker(s), slowest", f"read {slowest['read_s']:.1f} s "
                   f"({slowest['read_gb_s']:.2f} GB/s), build {slowest['build_s']:.1f} s, first call "
                   f"{slowest['first_call_s']:.1f} s, second {slowest['second_call_s']:.3f} s",
                   f"dd {out['dd']['gb_s']:.2f} GB/s; 1 GPU at 2*10^7 was 24.6 s + 37.0 s")
    return out


# ----------------------------------------------------------------------------- families

def compare(name, report, direct, dask_run, same, g):
    """Times both (the first call of each after the warm-ups), checks identical, records speed-up."""
    want, t1 = timed(direct)
    gc.collect()
    got, tg = timed(dask_run)
    identical = bool(same(want, got))
    report.row(name, f"1 GPU / {g} GPUs", f"{t1:.2f} s / {tg:.2f} s", f"speed-up {t1 / tg:.2f}x; identical: {identical}")
    return {"one_gpu_s": t1, "gpus": g, "dask_s": tg, "speedup": t1 / tg, "identical": identical}


def meta(a, client, workers, report):
    from gputext.knn.metafeatures import compute_metafeatures
    paths, gen_s, df, ref_docs = multi.generate_chunks(int(a.sizes["meta_docs"]), int(a.sizes["chunk"]), a.data_dir,
                                                       a.gen_procs or multi.default_procs())
    (X, y), read_s = timed(lambda: read_all(paths))
    a.queries = int(a.sizes["meta_queries"])
    Q = multi.queries(a, df, ref_docs)
    n_classes = int(y.max()) + 1
    run = lambda X_, Q_, client_: compute_metafeatures(X_, y[:X_.shape[0]], n_classes, Q_, k=30, method="inverted",  # noqa: E731
                                                       device=a.device, train_rows=False, client=client_)
    run(X[:20000], Q[:50], None), run(X[:20000], Q[:50], client)  # warm-ups: compile here and on the workers
    out = compare("meta-features", report, lambda: run(X, Q, None), lambda: run(X, Q, client),
                  lambda w, g: np.array_equal(w.queries, g.queries), len(workers))
    out.update(generate_s=gen_s, read_s=read_s, docs=X.shape[0], queries=Q.shape[0])
    return out


def read_all(paths):
    """(X CSR, labels int64) of the chunk files, in order."""
    from gputext.io.corpus import read_corpus
    parts = [read_corpus(p) for p in paths]
    X = sp.vstack([c.X for c in parts], format="csr") if len(parts) > 1 else parts[0].X
    y = np.concatenate([np.asarray(c.obs["label"].codes) for c in parts]).astype(np.int64)
    return X, y


def star(a, client, workers, report):
    from gputext.cluster.star import cluster_star
    from gputext.io.corpus import read_rows
    paths, gen_s, _, _ = multi.generate_chunks(int(a.sizes["star_docs"]), int(a.sizes["star_docs"]), a.data_dir,
                                               a.gen_procs or multi.default_procs())
    path = paths[0]
    warm = read_rows(path, 0, 5000)
    cluster_star(warm, 0.25, a.device), cluster_star(warm, 0.25, a.device, client=client)  # warm-ups

    def same(w, g):
        graph = all(np.array_equal(getattr(w.graph, n), getattr(g.graph, n))
                    for n in ("indptr", "indices", "weights", "degree", "weight_sum"))
        M, N = w.membership, g.membership
        return graph and np.array_equal(w.centers, g.centers) and (M != N).nnz == 0

    X = read_rows(path, 0, int(a.sizes["star_docs"]))  # one process: the matrix; the workers: the path
    out = compare("star", report, lambda: cluster_star(X, 0.25, a.device),
                  lambda: cluster_star(path, 0.25, a.device, client=client), same, len(workers))
    out.update(generate_s=gen_s, docs=int(a.sizes["star_docs"]))
    return out


def rank(a, client, workers, report):
    from gputext.distributed.rank import part_of
    from gputext.rank.api import train_data
    from gputext.rank.bench import preset_params
    from gputext.rank.data import from_corpus
    from gputext.datasets.ltr import make_ltr
    params = preset_params("mslr-web30k", int(a.sizes["rank_queries"]))
    corpus, gen_s = timed(lambda: make_ltr(**{**params, "seed": 0, "model_seed": 0}, threads=os.cpu_count()))
    data, prep_s = timed(lambda: from_corpus(corpus, "10x MSLR-WEB30K"))
    del corpus
    small = part_of(data, 0, min(200, data.n_queries))
    train_data(small, device=a.device, max_iter=2), train_data(small, device=a.device, max_iter=2, client=client)
    train = lambda client_: train_data(data, C=1.0, eps=1e-5, device=a.device, client=client_)  # noqa: E731
    out = compare("RankSVM", report, lambda: train(None), lambda: train(client),
                  lambda w, g: np.array_equal(w.w, g.w) and w.iterations == g.iterations, len(workers))
    out.update(generate_s=gen_s, prepare_s=prep_s, docs=data.n_docs, queries=data.n_queries,
               features=data.n_features)
    return out


SECTIONS = {"first-answer": first_answer, "meta": meta, "star": star, "rank": rank}


def main():
    p = harness.parser(__doc__, quick="small sizes of every section (about a minute)")
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--data-dir", default=os.path.join("out", "dask-multi-data"))
    p.add_argument("--gen-procs", type=int, default=0, help="generator processes (0: gpu_dask_multi.default_procs())")
    p.add_argument("--chunk", type=float, default=0,
                   help="documents per chunk file of first-answer and meta (0: 1.25*10^6; the same as "
                        "gpu_dask_multi.py's --chunk shares its files)")
    a = p.parse_args()
    a.sizes = dict(QUICK if a.quick else SIZES)
    if a.chunk < 0 or a.chunk != int(a.chunk):
        p.error(f"--chunk {a.chunk:g}: expected a whole number of documents >= 1 (0: the default)")
    if a.chunk:
        a.sizes["chunk"] = int(a.chunk)
    unknown = [name for name in a.sections.split(",") if name not in SECTIONS]
    if unknown:
        p.error(f"--sections: unknown {', '.join(unknown)} (expected some of {', '.join(SECTIONS)})")
    from gputext.backend import resolve
    from gputext.distributed import connect
    from gputext.distributed.client import describe_cluster
    from gputext.distributed.run import worker_addresses
    backend = resolve(a.device)
    a.device = backend.name
    report = harness.Report(a.out, {"probe": harness.probe(backend), "args": {k: v for k, v in vars(a).items()}})
    with connect(f"local:{a.gpus}", quiet=False) as client:
        workers = worker_addresses(client)
        report.results["workers"] = describe_cluster(client)
        for name in a.sections.split(","):
            report.section(name, SECTIONS[name], a, client, workers, report, timed=True)
            gc.collect()
    report.write("dask_families.json", "## gputext families over GPUs\n\n" + report.rows_md(), "dask_families.md")


if __name__ == "__main__":
    main()
