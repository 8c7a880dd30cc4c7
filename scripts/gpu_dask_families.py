#!/usr/bin/env python
"""The families on several GPUs of one host (issue 34), each against one GPU without Dask, results
identical bit for bit, with the speed-up; each worker's time to its first answer; a worker killed
mid-search.

    python scripts/gpu_dask_families.py [--quick] [--sections first-answer,meta,kill,rank,star]
                                        [--gpus 4] [--budget SECONDS] [--out DIR] [--data-dir DIR]
                                        [--chunk N] [--gen-procs N] [--star-beta B]

One local cluster of --gpus workers, one per GPU (gputext.distributed.connect("local:N")); "1
GPU" is the same call without a client, in this process (GPU 0). Each family is warmed up first
(kernels compiled or loaded on a slice, here and on every worker), then timed: the first run of
each side and, while --budget leaves time, a second one (steady). Every run of the cluster's side
is compared with the one-GPU result, field by field, bit for bit (array bytes). Peak GPU memory
per device (nvidia-smi, the whole device, every 0.5 s) is recorded for each side; after each run
this process and the workers drop their cached device buffers (gputext.device.memory.trim).

first-answer  2*10^7 documents (gpu_dask_multi.py's chunk files, made here by --gen-procs
              processes when missing): `dd` of the files (page cache as it is), then on 1 worker
              (a process that has run nothing), then, after the workers are restarted, on each of
              --gpus fresh workers at once (a shard each, as DistributedIndex cuts them): the read
              of its rows (gputext.io.corpus.read_row_pieces: bytes, s, GB/s), the build (Index +
              term maxima), the first search of one query (postings built and uploaded, kernels
              loaded) and a second one; for each step, numba's compilations in the worker (its
              numba:compile events: names and seconds; cache loads are not compilations) and the
              kernel cache's entries before and after (gputext.kernels.jit.cache_folder(), shared
              by every process of the host). Bounds: the read at `dd`'s rate, 24.6 s + 37.0 s at
              2*10^7 on 1 GPU (issue 34).
meta          meta-features (k = 30, cosine/L1/L2 + centroids) of 10,000 queries against 10^7
              training documents (the first chunk files of first-answer's corpus) with 20 classes:
              compute_metafeatures(train_rows=False), on the cluster with train_path (each worker reads
              its rows and orders them by class); read (this process, read_row_pieces + labels).
kill          a worker killed mid-search on the cluster: DistributedIndex.from_path over the 10^7
              documents, 10,000 queries in batches of 500 (read, first call, steady), then the same
              search again with one worker SIGKILLed a third of the way in (its tasks re-run on the
              others, which read its shard from the files): identical to the undisturbed run; the
              nanny restarts the worker before the next section.
rank          RankSVM on 10x the MSLR-WEB30K training shape (189,190 queries, ~2.27*10^7 rows x
              136 dense features, 5 levels), C = 1, eps = 1e-5: train_data; weights, iterations
              and objective bit for bit; wall time and TRON's own (train_seconds: the rest is
              moving the data to the device or the workers). The set is written to a file in
              --data-dir once (uncompressed), and the workers read their parts from it (source=).
star          the star graph and clustering of 10^6 documents (the first rows of the chunk files,
              written to one file for the workers), beta --star-beta (0.12: this corpus model has
              no pair of documents at cosine >= 0.25; at 0.12 about 3 neighbours a document):
              cluster_star of the matrix in one process, of the file's path on the workers. A probe
              of 2*10^5 documents is timed first on both sides; when --budget cannot hold the full
              size (time ~ documents^2) the section runs on the most documents it can hold, down to
              --star-min-docs (2.5*10^5), and says so.

--budget S: seconds from the script's start. The sections run in the order given, the earlier the
more important: each starts only when its least need is left (START, seconds on 4 H100s estimated
from docs/distributed.md's rates), else it is recorded as skipped, with why; its second runs (and
the star's full size) happen only when the time the later sections want (WANT) is kept. The JSON
is rewritten after every section, so a run cut off by a time limit keeps what it measured.

Writes dask_families.json (+ dask_families.md) under --out. --quick shrinks every size (a few
minutes on a 2-core machine; without GPUs the workers run the CPU twin and "1 GPU" is the CPU twin
in this process).
"""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

import gpu_dask_multi as multi  # noqa: E402

log = harness.log
T_START = time.monotonic()
SIZES = {"first_answer_docs": 2e7, "meta_docs": 1e7, "meta_queries": 10_000, "kill_docs": 1e7,
         "kill_queries": 10_000, "kill_batch": 500, "star_docs": 1e6, "star_probe_docs": 2e5, "star_min_docs": 2.5e5,
         "rank_queries": 189_190, "chunk": 6.25e5}
QUICK = {"first_answer_docs": 2e5, "meta_docs": 1e5, "meta_queries": 500, "kill_docs": 1e5, "kill_queries": 2000,
         "kill_batch": 50, "star_docs": 2e4, "star_probe_docs": 5e3, "star_min_docs": 5e3, "rank_queries": 400,
         "chunk": 5e4}
# Seconds of each section at the full sizes on 4 H100s, estimated from docs/distributed.md's rates
# (2*10^7 documents made in ~40 s by 60 processes; a worker's read + build + first call at 2*10^7
# ~55 s, plus ~30 s of compiling on an empty kernel cache): START, the least it is started with;
# WANT, its first runs, which the sections before it keep back from their second (steady) runs
# and the star section from its full size. --quick: QUICK_NEED each.
START = {"first-answer": 120, "meta": 70, "kill": 35, "rank": 70, "star": 50}
WANT = {"first-answer": 170, "meta": 110, "kill": 45, "rank": 110, "star": 110}
QUICK_NEED = 5


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


class Budget:
    """The script's time: ``seconds`` from its start (0: unlimited); ``sections`` in run order, the
    earlier the more important: a section starts when its START need is left; its optional work
    (second runs, the star's full size) only from what the later sections' WANT leaves."""

    def __init__(self, seconds: float, sections: list[str], quick: bool):
        self.seconds, self.sections = float(seconds), list(sections)
        self.start = {s: (QUICK_NEED if quick else START[s]) for s in sections}
        self.want = {s: (QUICK_NEED if quick else WANT[s]) for s in sections}

    def left(self) -> float:
        return float("inf") if not self.seconds else self.seconds - (time.monotonic() - T_START)

    def after(self, name: str) -> float:
        """Seconds the sections after ``name`` want."""
        i = self.sections.index(name)
        return sum(self.want[s] for s in self.sections[i + 1:])

    def spare(self, name: str) -> float:
        """Seconds ``name`` may spend on optional work, the later sections' wants kept back."""
        return self.left() - self.after(name)

    def why_not(self, name: str) -> str:
        """Empty when ``name`` may start; else why not."""
        if self.left() >= self.start[name]:
            return ""
        return (f"not started: {self.left():.0f} s of the {self.seconds:.0f} s budget were left, it needs at least "
                f"~{self.start[name]} s")


def bits_equal(a, b) -> bool:
    """Same shape, dtype and bytes (bit for bit: -0.0 != 0.0, NaN payloads count)."""
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def csr_bits_equal(A, B) -> bool:
    return A.shape == B.shape and all(bits_equal(getattr(A, n), getattr(B, n)) for n in ("indptr", "indices", "data"))


def release_device_memory():
    """This process's cached device buffers and numba's deferred frees (between runs)."""
    gc.collect()
    from gputext.device.memory import trim
    trim(0)


def release_everywhere(client):
    release_device_memory()
    try:
        client.run(release_device_memory)
    except Exception as exc:  # noqa: BLE001 - only housekeeping
        log(f"  (workers' device memory not released: {type(exc).__name__}: {exc})")


def refresh_workers(client, workers: list, n: int) -> None:
    """Wait for n workers (a killed or restarted one comes back under a new address), then
    ``workers[:]`` = their addresses."""
    from gputext.distributed.run import worker_addresses
    client.wait_for_workers(n, timeout=180)
    workers[:] = worker_addresses(client)


def pieces(paths, lo: int, hi: int, sizes=None):
    """(path, start, stop) of rows [lo, hi) across the chunk files."""
    from gputext.io.corpus import corpus_shape
    sizes = sizes or [corpus_shape(p)[0] for p in paths]
    out, first = [], 0
    for path, n in zip(paths, sizes):
        a, b = max(lo, first), min(hi, first + n)
        if a < b:
            out.append((path, a - first, b - first))
        first += n
    return out


def read_labelled(paths):
    """(X CSR, labels int64) of the chunk files, in order (read_row_pieces: one allocation)."""
    import h5py

    from gputext.io.corpus import corpus_shape, read_row_pieces
    X = read_row_pieces([(p, 0, corpus_shape(p)[0]) for p in paths])
    codes, categories = [], None
    for p in paths:
        with h5py.File(p, "r") as f:
            cats = [c.decode() if isinstance(c, bytes) else str(c) for c in f["obs/label/categories"][()]]
            if categories is not None and cats != categories:
                raise ValueError(f"{p}: label categories differ from {paths[0]}'s")
            categories = cats
            codes.append(np.asarray(f["obs/label/codes"][()], np.int64))
    return X, np.concatenate(codes), len(categories)


# ----------------------------------------------------------------------------- on the workers
# (self-contained: cloudpickle ships these by value; the workers import gputext, not scripts/)

def compile_counter():
    """A started recorder of numba:compile events in this process (CPU twins and CUDA kernels;
    loads from the kernel cache are not compilations; a compilation's nested ones, its callees,
    are part of it): .snapshot() -> {compiles, seconds, names, cache_entries}; .stop()."""
    from numba.core import event

    from gputext.kernels.jit import cache_folder
    from gputext.warmup import cache_entries

    class Recorder(event.Listener):
        def __init__(self):
            self.lock, self.depth, self.t0, self.seconds, self.names = threading.Lock(), 0, 0.0, 0.0, []

        def on_start(self, ev):
            data = ev.data if isinstance(ev.data, dict) else {}
            fn = getattr(data.get("dispatcher"), "py_func", None)
            with self.lock:
                if self.depth == 0:  # a compilation of its own (the nested ones are its callees)
                    self.t0 = time.perf_counter()
                    self.names.append(getattr(fn, "__qualname__", "?"))
                self.depth += 1

        def on_end(self, ev):
            with self.lock:
                self.depth -= 1
                if self.depth == 0:
                    self.seconds += time.perf_counter() - self.t0

        def snapshot(self):
            with self.lock:
                return {"compiles": len(self.names), "seconds": self.seconds, "names": list(self.names),
                        "cache_entries": cache_entries(folder)}

        def stop(self):
            event.unregister("numba:compile", self)

    folder = cache_folder()
    rec = Recorder()
    event.register("numba:compile", rec)
    return rec


def compile_delta(before: dict, after: dict) -> dict:
    return {"compiles": after["compiles"] - before["compiles"], "seconds": round(after["seconds"] - before["seconds"], 3),
            "names": sorted(set(after["names"][before["compiles"]:])),
            "cache_entries_added": after["cache_entries"] - before["cache_entries"]}


def worker_first_answer(source, lo, hi, query, device):
    """On a worker: read rows [lo, hi) of the source's files, build the Index and the term maxima,
    then two searches of one query; seconds, bytes and compilations of each step."""
    from gputext.distributed.client import limit_threads
    from gputext.distributed.shards import read_source_rows
    from gputext.engine import Index, search_topk_keys
    from gputext.kernels.jit import cache_folder
    limit_threads()
    rec = compile_counter()
    steps, snaps = {}, [rec.snapshot()]
    try:
        t = time.perf_counter()
        X = read_source_rows(source, lo, hi)
        steps["read_s"] = time.perf_counter() - t
        snaps.append(rec.snapshot())
        t = time.perf_counter()
        index = Index.from_csr(X)
        index = index.with_term_maxabs(index.term_maxabs)  # from the weights' check at this size (one parallel pass)
        steps["build_s"] = time.perf_counter() - t
        snaps.append(rec.snapshot())
        for name in ("first_call_s", "second_call_s"):
            t = time.perf_counter()
            search_topk_keys(index, query, 30, "cosine", device, quiet=True)
            steps[name] = time.perf_counter() - t
            snaps.append(rec.snapshot())
    finally:
        rec.stop()
    nbytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    out = {"rows": [lo, hi], "pid": os.getpid(), "bytes": nbytes, **steps, "read_gb_s": nbytes / steps["read_s"] / 1e9,
           "cache_folder": str(cache_folder()),
           "compiled": {step: compile_delta(snaps[i], snaps[i + 1])
                        for i, step in enumerate(("read", "build", "first_call", "second_call"))}}
    del index, X
    release_device_memory()
    return out


# ----------------------------------------------------------------------------- first answer

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
    from gputext.distributed.shards import file_source, plan_bounds
    from gputext.io.corpus import read_rows
    paths, gen_s, _, _ = multi.generate_chunks(int(a.sizes["first_answer_docs"]), int(a.sizes["chunk"]), a.data_dir,
                                               a.gen_procs or multi.default_procs())
    out = report.results["first-answer"] = {"generate_s": gen_s, "files": len(paths), "dd": dd_rate(paths)}
    source, indptr = file_source(paths)
    out["docs"], out["nnz"] = source.n_docs, source.nnz
    report.row("first answer", "corpus", f"{source.n_docs:,} documents, {source.nnz:,} nonzeros, {len(paths)} files",
               f"made in {gen_s:.1f} s (~0: there already); dd {out['dd']['bytes'] / 1e9:.1f} GB in "
               f"{out['dd']['seconds']:.1f} s ({out['dd']['gb_s']:.2f} GB/s)")
    harness.write_json(os.path.join(a.out, "dask_families.json"), report.results)
    query = read_rows(paths[0], 0, 1)
    n = len(workers)
    for g in sorted({1, n}):
        if g > 1:  # fresh processes for every worker (worker 0 has just served the 1-worker case)
            t = time.perf_counter()
            client.restart()
            refresh_workers(client, workers, n)
            out["restart_s"] = time.perf_counter() - t
        bounds = plan_bounds(indptr, g)
        with multi.GpuMemoryPeaks() as memory:
            t = time.perf_counter()
            futures = [client.submit(worker_first_answer, source, int(bounds[i]), int(bounds[i + 1]), query, a.device,
                                     workers=[workers[i]], pure=False) for i in range(g)]
            rows = gather(client, futures, "the first answers")
            wall = time.perf_counter() - t
        out[f"{g}_workers"] = {"wall_s": wall, "workers": rows, "peak_memory_mib": memory.peaks,
                               "aggregate_read_gb_s": sum(r["bytes"] for r in rows) / max(r["read_s"] for r in rows) / 1e9}
        for i, r in enumerate(rows):
            c = r["compiled"]
            report.row("first answer", f"{g} worker(s): worker {i} ({(r['rows'][1] - r['rows'][0]):,} docs)",
                       f"read {r['read_s']:.1f} s ({r['bytes'] / 1e9:.1f} GB, {r['read_gb_s']:.2f} GB/s), build "
                       f"{r['build_s']:.1f} s, first call {r['first_call_s']:.1f} s, second {r['second_call_s']:.3f} s",
                       "compiled: " + (", ".join(f"{k} {v['compiles']} ({v['seconds']:.1f} s, +{v['cache_entries_added']} "
                                                "cache entries)" for k, v in c.items() if v["compiles"]
                                                or v["cache_entries_added"]) or "nothing"))
        report.row("first answer", f"{g} worker(s)", f"wall {wall:.1f} s",
                   "bound at 2*10^7 on 1 GPU: 24.6 s read + 37.0 s first call (issue 34)")
        harness.write_json(os.path.join(a.out, "dask_families.json"), report.results)
    return out


# ----------------------------------------------------------------------------- families

def compare(a, section, name, report, one, many, same, details=None):
    """one(), many(): the one-GPU run here and the run on the cluster. Both run once, then again
    (steady) while the budget leaves ``section`` the time; each of many's results is compared with
    one's first (same: {field: bool}); per run: seconds, details(result), peak GPU memory."""
    details = details or (lambda r: {})
    out = {"one": [], "many": [], "gpus": a.gpus, "identical": True, "fields": {}}
    want = None
    for r in range(2):
        if r and a.budget.spare(section) < 1.2 * (out["one"][0]["s"] + out["many"][0]["s"]):
            out["steady_skipped"] = f"no second run: {a.budget.left():.0f} s left of the budget"
            break
        for side, fn in (("one", one), ("many", many)):
            gc.collect()
            with multi.GpuMemoryPeaks() as memory:
                got, seconds = timed(fn)
            run = {"s": seconds, "peak_memory_mib": memory.peaks, **details(got)}
            if side == "one" and want is None:
                want = got
            elif side == "many":
                fields = same(want, got)
                run["identical"] = bool(all(fields.values()))
                out["fields"] = fields if r == 0 else out["fields"]
                out["identical"] = out["identical"] and run["identical"]
            out[side].append(run)
            del got
            release_everywhere(a.client)
            log(f"  [{name}] {side} run {r + 1}: {seconds:.2f} s")
    t1, tg = out["one"][-1]["s"], out["many"][-1]["s"]
    out["speedup"] = t1 / tg
    out["speedup_first"] = out["one"][0]["s"] / out["many"][0]["s"]
    runs = lambda side: " / ".join(f"{x['s']:.2f}" for x in out[side])  # noqa: E731
    report.row(name, f"1 GPU / {a.gpus} GPUs (s: first / steady)", f"{runs('one')} s / {runs('many')} s",
               f"speed-up {out['speedup']:.2f}x (first runs {out['speedup_first']:.2f}x); identical bit for bit: "
               f"{out['identical']}" + ("" if out["identical"] else f" ({out['fields']})"))
    return out


def meta(a, client, workers, report):
    from gputext.knn.metafeatures import compute_metafeatures
    paths, gen_s, df, ref_docs = multi.generate_chunks(int(a.sizes["meta_docs"]), int(a.sizes["chunk"]), a.data_dir,
                                                       a.gen_procs or multi.default_procs())
    (X, y, n_classes), read_s = timed(lambda: read_labelled(paths))
    a.queries = int(a.sizes["meta_queries"])
    Q = multi.queries(a, df, ref_docs)
    run = lambda X_, Q_, client_, path=None: compute_metafeatures(  # noqa: E731
        X_, y[:X_.shape[0]], n_classes, Q_, k=30, method="inverted", device=a.device, train_rows=False, client=client_,
        train_path=path)
    (_, warm_s) = timed(lambda: (run(X[:20000], Q[:50], None), run(X[:20000], Q[:50], client)))  # compile / load
    release_everywhere(client)
    report.row("meta-features", "read (this process) / warm-ups", f"{read_s:.1f} s / {warm_s:.1f} s",
               f"{X.shape[0]:,} documents, {X.nnz:,} nonzeros; {Q.shape[0]:,} queries")

    def same(w, g):
        return {"queries": bits_equal(w.queries, g.queries), "train": bits_equal(w.train, g.train)}

    def details(m):
        st = m.info.get("stages", {})
        return {"stages_ms": {k: round(v, 1) for k, v in st.items() if isinstance(v, (int, float))}}

    # the cluster's workers read their rows from the chunk files and order them by class themselves
    out = compare(a, "meta", "meta-features", report, lambda: run(X, Q, None), lambda: run(X, Q, client, paths), same,
                  details)
    out.update(generate_s=gen_s, read_s=read_s, warmup_s=warm_s, docs=X.shape[0], nnz=X.nnz, queries=Q.shape[0],
               classes=n_classes)
    return out


def docs_that_fit(target: int, n_probe: int, probe_s: float, seconds: float) -> int:
    """Documents (at most ``target``, a multiple of n_probe / 2) whose star runs take ``seconds``
    if a probe of n_probe documents took probe_s and the time grows as documents^2 (every pair
    is scored); the probe's fixed costs are scaled too, so this errs on the small side."""
    if seconds == float("inf"):
        return target
    step = max(1, n_probe // 2)
    fits = n_probe * np.sqrt(max(seconds, 0.0) / max(probe_s, 1e-9))
    return int(min(target, fits // step * step))


def star(a, client, workers, report):
    from gputext.cluster.star import cluster_star
    from gputext.io.corpus import Corpus, read_row_pieces, write_corpus
    chunk, target = int(a.sizes["chunk"]), int(a.sizes["star_docs"])
    n0, floor = int(a.sizes["star_probe_docs"]), int(a.sizes["star_min_docs"])
    paths, gen_s, _, _ = multi.generate_chunks(-(-target // chunk) * chunk, chunk, a.data_dir,
                                               a.gen_procs or multi.default_procs())
    beta = a.star_beta
    one = lambda X_: cluster_star(X_, beta, a.device)  # noqa: E731
    many = lambda X_: cluster_star(X_, beta, a.device, client=client)  # noqa: E731
    probe = read_row_pieces(pieces(paths, 0, n0))
    (_, warm_s) = timed(lambda: (one(probe), many(probe)))  # compile / load
    r1, t1 = timed(lambda: one(probe))
    _, tg = timed(lambda: many(probe))
    release_everywhere(client)
    out = {"beta": beta, "generate_s": gen_s, "warmup_s": warm_s,
           "probe": {"docs": n0, "one_s": t1, "many_s": tg, "edges": r1.graph.n_edges}}
    report.row("star", f"probe: {n0:,} documents, beta {beta:g}", f"1 GPU {t1:.2f} s / {a.gpus} GPUs {tg:.2f} s",
               f"{r1.graph.n_edges:,} edges; warm-ups {warm_s:.1f} s")
    del r1
    room = a.budget.spare("star") - 15  # the file written, the comparison
    n = docs_that_fit(target, n0, t1 + tg, room)
    if n < target:
        out["reduced"] = (f"{target:,} documents need ~{(t1 + tg) * (target / n0) ** 2:.0f} s for one run "
                          f"each side (the probe's time x (n / {n0:,})^2); {room:.0f} s were left")
    if n < floor:
        out["skipped"] = f"{out.get('reduced', '')}; under --star-min-docs {floor:,}: not run"
        report.row("star", "not run", out["skipped"])
        return out
    X, read_s = timed(lambda: read_row_pieces(pieces(paths, 0, n)))
    path = os.path.join(a.data_dir, f"star_{chunk}_{n}.h5")
    if not os.path.exists(path):
        write_corpus(Corpus(X), path + ".tmp.h5", compression=None)
        os.replace(path + ".tmp.h5", path)

    def same(w, g):
        fields = {name: bits_equal(getattr(w.graph, name), getattr(g.graph, name))
                  for name in ("indptr", "indices", "weights", "degree", "weight_sum")}
        fields.update(centers=bits_equal(w.centers, g.centers), membership=csr_bits_equal(w.membership, g.membership),
                      relevance=bits_equal(w.relevance, g.relevance), linked_to=bits_equal(w.linked_to, g.linked_to))
        return fields

    def details(r):
        keep = ("n_edges", "n_clusters", "seconds_graph", "seconds_relevance", "seconds_cover", "seconds_total")
        return {k: r.stats[k] for k in keep if k in r.stats}

    out.update(compare(a, "star", "star", report, lambda: one(X), lambda: many(path), same, details))
    out.update(docs=n, nnz=X.nnz, read_s=read_s, edges=out["one"][0].get("n_edges"))
    return out


def kill(a, client, workers, report):
    from gputext.distributed import DistributedIndex
    chunk = int(a.sizes["chunk"])
    paths, gen_s, df, ref_docs = multi.generate_chunks(int(a.sizes["kill_docs"]), chunk, a.data_dir,
                                                       a.gen_procs or multi.default_procs())
    a.queries = int(a.sizes["kill_queries"])
    Q = multi.queries(a, df, ref_docs)
    batch = int(a.sizes["kill_batch"])
    n = len(workers)
    out = {"generate_s": gen_s, "queries": Q.shape[0], "batch_size": batch, "workers": n}
    search = lambda index: index.search_topk(Q, 30, "cosine", a.device, batch_size=batch)  # noqa: E731
    with multi.GpuMemoryPeaks() as memory:
        index, out["read_s"] = timed(lambda: DistributedIndex.from_path(paths, client))
        try:
            (docs, scores), out["first_call_s"] = timed(lambda: search(index))
            again, out["steady_s"] = timed(lambda: search(index))
            out["steady_identical"] = bits_equal(docs, again[0]) and bits_equal(scores, again[1])
            del again
            shard = index.shards[len(index.shards) // 2]  # not worker 0's (GPU 0 also holds this process)
            victim = shard.worker
            pid = client.run(os.getpid, workers=[victim])[victim]
            result, error = {}, []

            def run():
                try:
                    result["r"] = search(index)
                except Exception as exc:  # noqa: BLE001 - recorded
                    error.append(exc)
            runner = threading.Thread(target=run)
            t = time.perf_counter()
            runner.start()
            time.sleep(max(0.05, out["steady_s"] / 3))
            processing = client.processing(workers=[victim]).get(victim, [])
            os.kill(pid, signal.SIGKILL)
            out["killed"] = {"worker": victim, "pid": pid, "shard_rows": [shard.lo, shard.hi],
                             "at_s": time.perf_counter() - t, "tasks_on_it": len(processing),
                             "search_running": runner.is_alive()}
            log(f"  [kill] SIGKILL to {victim} (pid {pid}) after {out['killed']['at_s']:.2f} s, "
                f"{len(processing)} task(s) on it")
            runner.join(timeout=max(60.0, min(600.0, a.budget.left())))
            if runner.is_alive():
                raise TimeoutError("the search did not end after the kill")
            if error:
                raise error[0]
            out["killed_run_s"] = time.perf_counter() - t
            out["mid_run"] = bool(out["killed"]["search_running"] and out["killed"]["tasks_on_it"])
            got = result["r"]
            out["identical"] = bits_equal(docs, got[0]) and bits_equal(scores, got[1])
        finally:
            index.close()
    out["peak_memory_mib"] = memory.peaks
    t = time.perf_counter()
    refresh_workers(client, workers, n)  # the nanny restarts the killed worker
    out["worker_back_s"] = time.perf_counter() - t
    release_everywhere(client)
    report.row("kill", f"{index.n_docs:,} documents, {Q.shape[0]:,} queries, {n} workers",
               f"read {out['read_s']:.1f} s, first call {out['first_call_s']:.2f} s, steady {out['steady_s']:.2f} s, "
               f"with a worker killed {out['killed_run_s']:.2f} s",
               f"killed mid-run: {out['mid_run']} ({out['killed']['tasks_on_it']} of its tasks running); identical: "
               f"{out['identical']}")
    return out


def rank(a, client, workers, report):
    from gputext.datasets.ltr import make_ltr
    from gputext.distributed.rank import part_of
    from gputext.io.corpus import write_corpus
    from gputext.rank.api import train_data
    from gputext.rank.bench import preset_params
    from gputext.rank.data import from_corpus
    params = preset_params("mslr-web30k", int(a.sizes["rank_queries"]))
    t = time.perf_counter()
    corpus = make_ltr(**{**params, "seed": 0, "model_seed": 0}, threads=os.cpu_count())
    gen_s = time.perf_counter() - t
    # the training file the workers read their parts from (as `rank train FILE --scheduler` does)
    path = os.path.join(a.data_dir, f"rank_{int(a.sizes['rank_queries'])}.h5")
    if not os.path.exists(path):
        write_corpus(corpus, path + ".tmp.h5", compression=None)
        os.replace(path + ".tmp.h5", path)
    write_s = time.perf_counter() - t - gen_s
    data, prep_s = timed(lambda: from_corpus(corpus, "10x MSLR-WEB30K"))
    corpus = None
    gc.collect()
    small = part_of(data, 0, min(200, data.n_queries))
    (_, warm_s) = timed(lambda: (train_data(small, device=a.device, max_iter=2),  # compile / load
                                 train_data(small, device=a.device, max_iter=2, client=client)))
    small = None
    release_everywhere(client)
    report.row("RankSVM", "data: generated / prepared / warm-ups", f"{gen_s:.1f} s / {prep_s:.1f} s / {warm_s:.1f} s",
               f"{data.n_docs:,} x {data.n_features} ({data.X.nnz:,} stored), {data.n_queries:,} queries")
    train = lambda client_: train_data(data, C=1.0, eps=1e-5, device=a.device, client=client_,  # noqa: E731
                                       source=path if client_ is not None else None)

    def same(w, g):
        return {"w": bits_equal(w.w, g.w), "iterations": w.iterations == g.iterations,
                "cg_iterations": w.cg_iterations == g.cg_iterations, "objective": bits_equal(w.objective, g.objective)}

    def details(m):
        return {"train_seconds": m.train_seconds, "iterations": m.iterations, "cg_iterations": m.cg_iterations}

    out = compare(a, "rank", "RankSVM", report, lambda: train(None), lambda: train(client), same, details)
    out["speedup_tron"] = out["one"][-1]["train_seconds"] / out["many"][-1]["train_seconds"]
    report.row("RankSVM", "TRON alone (train_seconds), last runs",
               f"{out['one'][-1]['train_seconds']:.2f} s / {out['many'][-1]['train_seconds']:.2f} s",
               f"speed-up {out['speedup_tron']:.2f}x; the rest of each run moves the data to the device / workers")
    out.update(generate_s=gen_s, write_s=write_s, prepare_s=prep_s, warmup_s=warm_s, docs=data.n_docs,
               queries=data.n_queries, features=data.n_features, nnz=data.X.nnz, parts_from="the file " + path)
    return out


SECTIONS = {"first-answer": first_answer, "meta": meta, "kill": kill, "rank": rank, "star": star}


def main():
    p = harness.parser(__doc__, quick="small sizes of every section (a few minutes on 2 cores)")
    p.add_argument("--sections", default="first-answer,meta,kill,rank,star",
                   help=f"comma-separated, run in this order (some of {', '.join(SECTIONS)})")
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--budget", type=float, default=0, help="seconds from the start (0: no limit); see above")
    p.add_argument("--data-dir", default=os.path.join("out", "dask-multi-data"))
    p.add_argument("--gen-procs", type=int, default=0, help="generator processes (0: gpu_dask_multi.default_procs())")
    p.add_argument("--chunk", type=float, default=0,
                   help="documents per chunk file (0: 6.25*10^5, gpu_dask_multi.py's --chunk of the 10^8 round, "
                        "whose files are then shared)")
    p.add_argument("--star-beta", type=float, default=0.12)
    a = p.parse_args()
    a.sizes = dict(QUICK if a.quick else SIZES)
    if a.chunk < 0 or a.chunk != int(a.chunk):
        p.error(f"--chunk {a.chunk:g}: expected a whole number of documents >= 1 (0: the default)")
    if a.chunk:
        a.sizes["chunk"] = int(a.chunk)
    names = [name for name in a.sections.split(",") if name]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names or len(set(names)) != len(names):
        p.error(f"--sections {a.sections!r}: expected distinct names among {', '.join(SECTIONS)}")
    if a.gpus < 1:
        p.error("--gpus must be >= 1")
    a.budget = Budget(a.budget, names, a.quick)
    from gputext.backend import resolve
    from gputext.distributed import connect
    from gputext.distributed.client import describe_cluster
    from gputext.distributed.run import worker_addresses
    from gputext.kernels.jit import cache_folder
    from gputext.warmup import cache_entries
    backend = resolve(a.device)
    a.device = backend.name
    args = {k: v for k, v in vars(a).items() if k != "budget"}
    report = harness.Report(a.out, {"probe": harness.probe(backend), "args": args, "budget_s": a.budget.seconds,
                                    "kernel_cache": {"folder": str(cache_folder()),
                                                     "entries_at_start": cache_entries(cache_folder())}})
    json_path = os.path.join(a.out, "dask_families.json")
    with connect(f"local:{a.gpus}", quiet=False) as client:
        a.client = client
        workers = worker_addresses(client)
        report.results["workers"] = describe_cluster(client)
        report.results["cluster_ready_s"] = round(time.monotonic() - T_START, 1)
        for name in names:
            why = a.budget.why_not(name)
            if why:
                report.results[name] = {"skipped": why}
                report.row(name, "skipped", why)
            else:
                log(f"[{name}] starting, {a.budget.left():.0f} s of the budget left")
                report.section(name, SECTIONS[name], a, client, workers, report, timed=True)
            gc.collect()
            report.results["kernel_cache"]["entries_now"] = cache_entries(cache_folder())
            report.results["elapsed_s"] = round(time.monotonic() - T_START, 1)
            harness.write_json(json_path, report.results)  # partial, as it goes
    report.results["elapsed_s"] = round(time.monotonic() - T_START, 1)
    report.write("dask_families.json", "## gputext families over GPUs\n\n" + report.rows_md(), "dask_families.md")


if __name__ == "__main__":
    main()
