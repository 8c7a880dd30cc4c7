#!/usr/bin/env python
"""Stream clustering on a real GPU: exactness at size, latency vs clusters, throughput on a
PubMed-shaped stream, peers, HBM bandwidth. Prints a markdown summary last; writes JSON.

    python scripts/gpu_stream.py --quick                 # < 1 minute
    python scripts/gpu_stream.py                         # full, ~6 minutes on an H100
    python scripts/gpu_stream.py --device cpu --quick     # the same code paths on the CPU (no peers)

Sections (each one's failure is recorded in the JSON and the others still run):

1. env        GPU, driver, measured device-to-device copy bandwidth (the HBM reference).
2. exactness  a PubMed-shaped stream (gputext.cluster.stream_synth) clustered on the GPU with
              batch sizes 1 and 32/64, compared document by document (cluster, similarity bits)
              with the CPU (inverted index) and, on a prefix, with the float64 reference.
3. latency    the paper's Figure 3: per-document latency (batch size 1) against M clusters, M up
              to 3.2M (K = 35), GPU vs CPU (index and scan twin). The state of M clusters is M
              PubMed-shaped documents that each started a cluster (gputext.datasets.synth,
              tf-icf). Scan kernel time by CUDA events -> achieved bandwidth (bytes of the term
              columns the scan must read; weights are read only on hits) as a fraction of the
              measured copy bandwidth. Peers on the same state: cuSPARSE SpMV + argmax (CuPy),
              torch.sparse CSR mv + argmax, float32 (their argmax agreement with ours is reported),
              and SciPy CSR matvec on the CPU. Goal: <= 0.5 ms per document at 1.6M clusters.
4. throughput --n-docs of the PubMed-shaped stream (default 5.5M; 64% start a cluster at T = 0.6,
              as the paper's run), K = 35, T = 0.6, batch size 32; generation runs in a thread
              and is not timed (as in the paper). Stops cleanly at --time-budget seconds and
              extrapolates the rest from the measured cost per document as a linear function of
              the number of clusters (the scan is linear in it), saying so. Goal: 5.5M in <= 30 min.
"""
from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from gputext.backend import resolve  # noqa: E402
from gputext.cluster import stream_host as H  # noqa: E402
from gputext.cluster.stream import StreamClusterer  # noqa: E402
from gputext.cluster.stream_reference import reference_cluster  # noqa: E402
from gputext.cluster.stream_synth import StreamSpec, pubmed_stream, reference_df  # noqa: E402

log, pct = harness.log, harness.percentiles_ms
K, T = 35, 0.6
GEOMETRY: dict = {}  # StreamClusterer launch geometry (only --tiny shrinks it, for the CUDA simulator)
SIZES = {"quick": {"exact": (4000, 2000, 800), "latency": ([2000, 10_000], 100, 30)},
         "full": {"exact": (200_000, 20_000, 2000),
                  "latency": ([50_000, 200_000, 400_000, 800_000, 1_600_000, 3_200_000], 500, 100)},
         "tiny": {"exact": (60, 20, 60), "latency": ([40], 4, 4)}}


# ----------------------------------------------------------------------------- 1. env

def env(backend, mode="full"):
    out = harness.probe(backend)
    if backend.is_cuda:  # 1 GiB of float32 (the simulator: 64 KiB)
        out["copy_tbs"] = round(harness.copy_bandwidth(1 << (16 if mode == "tiny" else 30)) / 1e12, 3)
    return out


# ----------------------------------------------------------------------------- helpers

def stream_matrix(n_docs, seed=0, reference=None):
    parts = list(pubmed_stream(n_docs, seed, chunk_docs=65536, reference=reference))
    return sp.vstack([p[1] for p in parts]).tocsr()


def same(a, b):
    return {"identical": bool(np.array_equal(a.cluster, b.cluster) and np.array_equal(a.similarity, b.similarity)),
            "cluster_mismatches": int((a.cluster != b.cluster).sum()),
            "similarity_mismatches": int((a.similarity != b.similarity).sum())}


def state_from_docs(X, k=K, t=T):
    """The cluster state after len(X) documents that each started a cluster (at most k terms
    each, threshold t): ELL arrays, as StreamClusterer.restore takes them."""
    indptr, terms, weights, mag = H.prepare_docs(X.indptr.astype(np.int64), X.indices.astype(np.int32),
                                                 X.data.astype(np.float64), k)
    n = len(mag)
    lengths = np.diff(indptr)
    ell_t = np.full((n, k), -1, np.int32)
    ell_w = np.zeros((n, k), np.float32)
    slot = np.arange(len(terms)) - np.repeat(indptr[:-1], lengths)
    rows = np.repeat(np.arange(n), lengths)
    ell_t[rows, slot] = terms
    ell_w[rows, slot] = weights
    return {"ell_terms": np.ascontiguousarray(ell_t.T), "ell_weights": np.ascontiguousarray(ell_w.T),
            "magnitude": mag, "size": np.ones(n, np.int64), "threshold": t, "max_terms": k, "n_docs_seen": n}


def centroid_csr(sc, n_terms):
    n = sc.n_clusters
    lengths = sc.c_len[:n].astype(np.int64)
    mask = np.arange(K)[None, :] < lengths[:, None]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return sp.csr_matrix((sc.c_weights[:n][mask], sc.c_terms[:n][mask], indptr), shape=(n, n_terms))


# ----------------------------------------------------------------------------- 2. exactness

def exactness(backend, mode):
    n, n_b1, n_ref = SIZES[mode]["exact"]
    ref_stats = reference_df(StreamSpec(n, reference_docs=min(n, 100_000)))
    X = stream_matrix(n, reference=ref_stats)
    out = {"n_docs": n, "K": K, "threshold": T}
    t = time.perf_counter()
    cpu = StreamClusterer(T, K, device="cpu", batch_size=64, candidates="index").partial_fit(X)
    out["cpu_index_seconds"] = round(time.perf_counter() - t, 2)
    out["n_clusters"] = int(cpu.new_cluster.sum())
    for bs in ((4, 8) if mode == "tiny" else (32, 64)):
        sc = StreamClusterer(T, K, backend=backend, batch_size=bs, candidates="scan", **GEOMETRY)
        sc.warm_up()
        r = sc.partial_fit(X)
        out[f"{backend.name}_batch{bs}"] = {**same(r, cpu), "seconds": round(r.seconds, 2),
                                            "restarts": sc.stats.restarts, "launches": sc.stats.launches}
        if bs in (4, 32):
            terms, weights = sc.device_matrix()
            cents = sc.centroids()
            out["device_matrix_equals_host"] = bool(np.array_equal(terms, cents["ell_terms"])
                                                    and np.array_equal(weights, cents["ell_weights"]))
    sc = StreamClusterer(T, K, backend=backend, batch_size=1, candidates="scan", **GEOMETRY)
    sc.warm_up()
    r = sc.partial_fit(X[:n_b1])
    sub = type(cpu)(cpu.cluster[:n_b1], cpu.similarity[:n_b1], cpu.new_cluster[:n_b1], cpu.latency_s[:n_b1])
    out[f"{backend.name}_batch1_first{n_b1}"] = {**same(r, sub), "seconds": round(r.seconds, 2)}
    cl, sims, _, _ = reference_cluster(X[:n_ref], T, K)
    out[f"reference_first{n_ref}_equals_cpu"] = bool(np.array_equal(cl, cpu.cluster[:n_ref])
                                                     and np.array_equal(sims, cpu.similarity[:n_ref]))
    out["all_identical"] = bool(out[f"reference_first{n_ref}_equals_cpu"] and out["device_matrix_equals_host"]
                                and all(v["identical"] for k, v in out.items() if isinstance(v, dict)))
    return out


# ----------------------------------------------------------------------------- 3. latency vs clusters

def _spmv_peer(lib, A_host, Q_dense, ours_rows, batch=32):
    """Per-document SpMV + argmax (float32; CUDA events of the library, one document a timing,
    median after the first two) and one SpMM + argmax of ``batch`` documents, on our centroids."""
    if lib == "cupy":
        import cupy as cp
        import cupyx.scipy.sparse as csp
        A, Qd = csp.csr_matrix(A_host), cp.asarray(Q_dense)
        column, argmax, to_host = (lambda i: Qd[:, i].copy()), cp.argmax, cp.asnumpy  # noqa: E731
        block = Qd[:, :batch].copy()
    else:
        import torch
        Ac = A_host.tocsr()
        A = torch.sparse_csr_tensor(torch.from_numpy(Ac.indptr.astype(np.int64)),
                                    torch.from_numpy(Ac.indices.astype(np.int64)),
                                    torch.from_numpy(Ac.data.astype(np.float32)), size=Ac.shape, device="cuda")
        Qd = torch.from_numpy(Q_dense).cuda()
        column, to_host = (lambda i: Qd[:, i:i + 1].contiguous()), (lambda x: x.cpu().numpy())  # noqa: E731
        argmax = lambda x, axis=None: torch.argmax(x) if axis is None else torch.argmax(x, dim=axis)  # noqa: E731
        block = Qd[:, :batch].contiguous()
    argmax(A @ column(0))  # warm-up: library handles, plans
    rows, times = [], []
    for i in range(Q_dense.shape[1]):
        x, best = column(i), []
        times.append(harness.gpu_ms(lambda: best.append(argmax(A @ x)), 1, warmup=0, clock=lib))  # noqa: B023
        rows.append(int(to_host(best[0])))
    t_batch = harness.gpu_ms(lambda: argmax(A @ block, axis=0), 1, warmup=1, clock=lib)
    return {"per_doc_ms": round(float(np.median(times[2:] or times)), 4),
            "batch32_per_doc_ms": round(t_batch / batch, 4),
            "argmax_agreement": round(float(np.mean(np.array(rows) == ours_rows[:len(rows)])), 4)}


@harness.peer("stream.cupy", needs=("cupy",), gpu=True)
def peer_cupy(A_host, Q_dense, ours_rows):
    """cuSPARSE SpMV / SpMM + argmax through CuPy."""
    return _spmv_peer("cupy", A_host, Q_dense, ours_rows)


@harness.peer("stream.torch", needs=("torch",), gpu=True)
def peer_torch(A_host, Q_dense, ours_rows):
    """torch.sparse CSR mv / mm + argmax."""
    return _spmv_peer("torch", A_host, Q_dense, ours_rows)


class GcWatch:
    """Python garbage collections (count, seconds) while active: gc.callbacks."""

    def __init__(self):
        self.events, self._t = [], None

    def __call__(self, phase, info):
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            self.events.append((info.get("generation"), time.perf_counter() - self._t))

    def __enter__(self):
        import gc
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc):
        import gc
        gc.callbacks.remove(self)

    def summary(self):
        return {"collections": len(self.events), "by_generation": {str(g): sum(1 for e in self.events if e[0] == g)
                                                                   for g in (0, 1, 2)},
                "seconds": round(sum(e[1] for e in self.events), 6)}


def latency_pass(backend, state, queries, fast=True, tpb=None, timing=False, **variant):
    """One measured pass: a fresh clusterer restored to ``state``, batch size 1, every query in
    order. Returns (summary dict, clusterer). Timing (CUDA events) only when asked: the latency
    passes run without events."""
    geo = {**GEOMETRY, **variant}
    if tpb:
        geo["threads_per_block"] = tpb
    sc = StreamClusterer(T, K, backend=backend, batch_size=1, candidates="scan", fast_launch=fast, **geo)
    sc.warm_up()
    sc.restore(state)
    if sc.scanner is not None and backend.is_cuda:
        sc.scanner.timing = timing
        sc.scanner.kernel_ms.clear()
        sc.scanner.score_ms.clear()
    with GcWatch() as gcw:
        r = sc.partial_fit(queries)
    lat = np.asarray(r.latency_s)
    n = len(lat)
    slow = np.argsort(lat)[::-1][:8]
    out = {**pct(lat), "mean_ms": round(float(lat.mean()) * 1e3, 4), "max_ms": round(float(lat.max()) * 1e3, 4),
           "seconds_per_doc_ms": round(r.seconds / n * 1e3, 4), "n": n,
           "first5_ms": [round(float(x) * 1e3, 4) for x in lat[:5]],
           "slowest": [{"doc": int(i), "ms": round(float(lat[i]) * 1e3, 4), "new_cluster": bool(r.new_cluster[i])}
                       for i in slow],
           "new_clusters": int(r.new_cluster.sum()), "gc": gcw.summary()}
    if timing and sc.scanner is not None and len(sc.scanner.kernel_ms) == n:
        # batch size 1: one launch per document -> split each latency into GPU (events) and host
        kms = np.asarray(sc.scanner.kernel_ms)
        host = lat * 1e3 - kms
        q = lambda x: {f"p{p}": round(float(np.percentile(x, p)), 4) for p in (50, 95, 99, 100)}  # noqa: E731
        out["kernel_ms"] = q(kms)
        out["host_ms"] = q(host)
        for e in out["slowest"]:
            e["kernel_ms"] = round(float(kms[e["doc"]]), 4)
            e["host_ms"] = round(float(host[e["doc"]]), 4)
        out["first5_kernel_ms"] = [round(float(x), 4) for x in kms[:5]]
    if sc.scanner is not None:
        out.update(launch_mode=sc.scanner.launch_mode, rows_per_block=sc.tpb, device_grows=sc.scanner.grows,
                   grow_ms=[round(x * 1e3, 3) for x in sc.scanner.grow_seconds])
        raw = getattr(sc.scanner, "_raw_score", None)
        if raw is not None and raw.regs is not None:
            out["scan_registers"] = int(raw.regs)
    return out, sc, r


def hits_per_doc(state, Xq, n_terms):
    """Centroid slots that hold one of each query's (top-K) terms: the scan's hash hits, the work
    that varies from document to document (each hit reads a weight and adds a product)."""
    terms = state["ell_terms"]
    df = np.bincount(terms[terms >= 0].ravel(), minlength=n_terms)
    di, dt, _, _ = H.prepare_docs(Xq.indptr.astype(np.int64), Xq.indices.astype(np.int32),
                                  Xq.data.astype(np.float64), K)
    return np.array([int(df[dt[di[j]:di[j + 1]]].sum()) for j in range(Xq.shape[0])])


def latency(backend, mode, copy_tbs, repeats=2, n_cpu_override=None, peers=True, tpb_sweep=()):
    sizes, n_query, n_cpu = SIZES[mode]["latency"]
    if n_cpu_override is not None:
        n_cpu = n_cpu_override
    from gputext.datasets.synth import make_corpus
    t = time.perf_counter()
    base = make_corpus(max(sizes) + n_query, 141_043, 55, 50, seed=3, weighting="tficf").X.astype(np.float32)
    log(f"[latency] {base.shape[0]} base documents in {time.perf_counter() - t:.1f} s")
    queries = base[max(sizes):]
    Q_dense = np.zeros((base.shape[1], min(n_query, 64)), np.float32)
    for i in range(Q_dense.shape[1]):
        row = queries[i]
        Q_dense[row.indices, i] = row.data
    out = {"K": K, "threshold": T, "n_query": n_query, "repeats": repeats, "rows": []}
    for M in sizes:
        state = state_from_docs(base[:M])
        row = {"clusters": M}
        Xq = queries[:n_query]
        # latency passes (no CUDA events): the fast launch path `repeats` times, then numba's
        # dispatcher once (the previous code path, same run); every pass identical results
        passes, results = [], []
        for rep in range(repeats):
            summ, sc, r = latency_pass(backend, state, Xq, fast=True)
            passes.append(summ)
            results.append(r)
            del sc
        if backend.is_cuda:
            summ, sc, r = latency_pass(backend, state, Xq, fast=False)
            row["dispatcher_pass"] = summ
            results.append(r)
            del sc
        row["passes"] = passes
        row["passes_identical"] = bool(all(np.array_equal(x.cluster, results[0].cluster)
                                           and np.array_equal(x.similarity, results[0].similarity) for x in results))
        row["ours"] = backend.name
        row["ours_latency"] = {k: passes[0][k] for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms")}
        row["ours_docs_per_s"] = round(1e3 / passes[0]["seconds_per_doc_ms"], 1)
        ours_rows = None
        if backend.is_cuda:
            # a separate pass with CUDA events around the kernels (raw launches: GPU time only)
            summ, sc, _ = latency_pass(backend, state, Xq, fast=True, timing=True)
            row["timed_pass"] = summ
            kms = np.median(sc.scanner.kernel_ms)
            sms = float(np.median(sc.scanner.score_ms)) if sc.scanner.score_ms else kms
            slots = int((state["ell_terms"] >= 0).sum()) + int((state["ell_terms"][-1] < 0).sum())
            terms_bytes = 4 * slots
            row["scan_kernel_ms"] = round(float(kms), 4)
            row["scan_only_kernel_ms"] = round(float(sms), 4)
            row["scan_terms_bytes"] = terms_bytes
            row["scan_tbs"] = round(terms_bytes / (kms / 1e3) / 1e12, 3)
            row["scan_only_tbs"] = round(terms_bytes / (sms / 1e3) / 1e12, 3)
            if copy_tbs:
                row["scan_fraction_of_copy_bw"] = round(row["scan_tbs"] / copy_tbs, 3)
                row["scan_only_fraction_of_copy_bw"] = round(row["scan_only_tbs"] / copy_tbs, 3)
            if len(sc.scanner.kernel_ms) == Xq.shape[0]:  # the tail: GPU time against the document's hits
                km = np.asarray(sc.scanner.kernel_ms)
                hits = hits_per_doc(state, Xq, base.shape[1])
                slope, icpt = np.polyfit(hits, km, 1)
                top = hits >= np.percentile(hits, 95)
                row["tail_vs_hits"] = {
                    "pearson_kernel_ms_hits": round(float(np.corrcoef(km, hits)[0, 1]), 3),
                    "fit_kernel_ms": {"intercept_ms": round(float(icpt), 4), "ns_per_hit": round(float(slope) * 1e6, 4)},
                    "hits_p50_p95_max": [int(np.percentile(hits, 50)), int(np.percentile(hits, 95)), int(hits.max())],
                    "kernel_ms_median_top5pct_hits": round(float(np.median(km[top])), 4),
                    "kernel_ms_median_other_docs": round(float(np.median(km[~top])), 4),
                    "slowest_docs_hits": [int(hits[e["doc"]]) for e in summ["slowest"]]}
            del sc
            sweep = {}
            for tpb in tpb_sweep:
                summ, sc, _ = latency_pass(backend, state, Xq[:200], fast=True, tpb=tpb, timing=True)
                sweep[str(tpb)] = {"scan_kernel_ms": round(float(np.median(sc.scanner.kernel_ms)), 4),
                                   "scan_only_ms": round(float(np.median(sc.scanner.score_ms or [0.0])), 4),
                                   "p50_ms": summ["p50_ms"], "registers": summ.get("scan_registers")}
                del sc
            if sweep:
                row["rows_per_block_sweep"] = sweep
        if not peers:
            out["rows"].append(row)
            log(f"[latency] M={M}: {json.dumps(row)}")
            continue
        # our best rows for the peer agreement (the first queries, against the state before them)
        chk = StreamClusterer(T, K, device="cpu", batch_size=1, candidates="index")
        chk.restore(state)
        best = np.empty((2, 1))
        Xq = queries[:Q_dense.shape[1]]
        di, dt, dw, _ = H.prepare_docs(Xq.indptr.astype(np.int64), Xq.indices.astype(np.int32),
                                       Xq.data.astype(np.float64), K)
        ours_rows = []
        for j in range(Xq.shape[0]):
            H.index_score_serial(j, j + 1, di, dt, dw, chk.c_weights, chk.c_version, chk.ix_head, chk.ix_pool,
                                 chk.ix_fill, chk.ix_next, chk.acc[:1], chk.touched[:1], best)
            ours_rows.append(int(best[1, 0]))
        ours_rows = np.array(ours_rows)
        # peers on the same centroids (float32), before the CPU runs change them
        A = centroid_csr(chk, base.shape[1])
        # CPU: inverted index (the clusterer above, its index already built) and the scan twin
        chk.warm_up()
        row["cpu_index_latency"] = pct(chk.partial_fit(queries[:max(n_cpu, 10)]).latency_s)
        c = StreamClusterer(T, K, device="cpu", batch_size=1, candidates="scan")
        c.warm_up()
        c.restore(state)
        row["cpu_scan_latency"] = pct(c.partial_fit(queries[:n_cpu]).latency_s) if n_cpu else None
        del c
        t0 = time.perf_counter()
        for i in range(min(20, Q_dense.shape[1])):
            np.argmax(A @ Q_dense[:, i])
        row["scipy_cpu_spmv_per_doc_ms"] = round((time.perf_counter() - t0) / min(20, Q_dense.shape[1]) * 1e3, 3)
        row.update(harness.run_peers(("cupy", "torch"), A, Q_dense, ours_rows, has_gpu=backend.is_cuda,
                                     prefix="stream."))
        out["rows"].append(row)
        log(f"[latency] M={M}: {json.dumps(row)}")
        del chk
    at = [r for r in out["rows"] if r["clusters"] == 1_600_000]
    if at and backend.is_cuda:
        ps = at[0]["passes"]
        out["goal_0.5ms_at_1.6M"] = {"p50_ms": [p["p50_ms"] for p in ps], "mean_ms": [p["mean_ms"] for p in ps],
                                     "p95_ms": [p["p95_ms"] for p in ps], "p99_ms": [p["p99_ms"] for p in ps],
                                     "met": all(p["p50_ms"] <= 0.5 and p["mean_ms"] <= 0.5 for p in ps)}
    return out


# ----------------------------------------------------------------------------- 4. throughput

def throughput(backend, n_docs, budget, batch_size):
    spec_ref = reference_df(StreamSpec(n_docs, reference_docs=min(n_docs, 100_000)))
    sc = StreamClusterer(T, K, backend=backend, batch_size=batch_size, candidates="scan" if backend.is_cuda else "auto",
                         **GEOMETRY)
    sc.warm_up()
    chunks: queue.Queue = queue.Queue(maxsize=3)
    stop = threading.Event()

    def produce():
        for item in pubmed_stream(n_docs, 0, chunk_docs=65536, reference=spec_ref):
            if stop.is_set():
                break
            chunks.put(item)
        chunks.put(None)

    worker = threading.Thread(target=produce, daemon=True)
    t_wall = time.perf_counter()
    worker.start()
    done, clustering_s, trace, lat = 0, 0.0, [], []
    peak_device = 0
    while True:
        item = chunks.get()
        if item is None:
            break
        start, X, _ = item
        r = sc.partial_fit(X)
        done += X.shape[0]
        clustering_s += r.seconds
        lat.append(r.latency_s)
        trace.append({"docs": done, "clusters": sc.n_clusters, "seconds": round(clustering_s, 3)})
        peak_device = max(peak_device, sc.device_bytes())
        if time.perf_counter() - t_wall > budget and done < n_docs:
            stop.set()
            break
    while not chunks.empty():
        chunks.get_nowait()
    out = {"n_docs_target": n_docs, "batch_size": batch_size, "docs_clustered": done,
           "clustering_seconds": round(clustering_s, 2), "wall_seconds": round(time.perf_counter() - t_wall, 2),
           "docs_per_s": round(done / clustering_s, 1), "clusters": sc.n_clusters,
           "new_cluster_fraction": round(sc.n_clusters / max(done, 1), 4), "latency": pct(np.concatenate(lat)),
           "restarts": sc.stats.restarts, "launches": sc.stats.launches, "device_bytes": sc.device_bytes(),
           "trace": trace}
    if backend.is_cuda:
        from gputext.backend import device_memory
        free, total = device_memory() or (0, 0)
        out["device_memory_used_gib"] = round((total - free) / 2**30, 2)
        out["clusterer_device_gib"] = round(peak_device / 2**30, 3)
    if done < n_docs:
        # cost per document ~ a + b * clusters (the scan is linear in M); fit on the chunks, then
        # walk the remaining documents with clusters growing at the measured new-cluster rate
        d = np.array([0] + [c["docs"] for c in trace], float)
        s = np.array([0] + [c["seconds"] for c in trace], float)
        m = np.array([0] + [c["clusters"] for c in trace], float)
        per_doc = np.diff(s) / np.diff(d)
        mid = (m[1:] + m[:-1]) / 2
        if len(per_doc) >= 2:
            b, a = np.polyfit(mid, per_doc, 1)
        else:
            a, b = float(per_doc[0]), 0.0
        a, b = max(a, 0.0), max(b, 0.0)
        rate = sc.n_clusters / done
        remaining = n_docs - done
        m_end = sc.n_clusters + rate * remaining
        extra = remaining * (a + b * (sc.n_clusters + m_end) / 2)
        out["extrapolated"] = {"note": f"stopped at --time-budget {budget:.0f} s after {done} documents; the rest "
                                       "extrapolated from the measured cost per document a + b * clusters",
                               "a_ms": a * 1e3, "b_ns_per_cluster": b * 1e9,
                               "total_seconds": round(clustering_s + extra, 1),
                               "clusters_at_end": int(m_end),
                               "ell_bytes_at_end": int(m_end * K * 8)}
    total = out.get("extrapolated", {}).get("total_seconds", clustering_s)
    out["goal_30min_for_5.5M"] = {"seconds": total, "met": bool(total <= 1800)} if n_docs >= 5_500_000 else None
    return out


# ----------------------------------------------------------------------------- report

def markdown(res):
    lines = ["", "## gputext stream clustering benchmark", ""]
    e = res.get("env", {})
    lines.append(f"device: {e.get('gpu', e.get('backend'))}; measured copy bandwidth: {e.get('copy_tbs', 'n/a')} TB/s")
    ex = res.get("exactness", {})
    if "all_identical" in ex:
        lines.append(f"exactness ({ex['n_docs']} docs, K={K}, T={T}): identical document by document = "
                     f"**{ex['all_identical']}** ({ex['n_clusters']} clusters)")
    lat = res.get("latency", {})
    if lat.get("rows"):
        lines += ["", f"| clusters | ours ({lat['rows'][0]['ours']}) p50 / p95 / p99 / mean ms, each pass | numba dispatcher "
                  "p50 / mean ms | scan+reduce (scan alone) kernel ms | scan TB/s (of copy) | CPU index p50 ms | "
                  "CPU scan p50 ms | cuSPARSE ms/doc (B=32) | torch ms/doc | SciPy CPU ms/doc |", "|" + "---|" * 10]
        for r in lat["rows"]:
            cu = r.get("cupy") or {}
            th = r.get("torch") or {}
            ps = "; ".join(f"{p['p50_ms']} / {p['p95_ms']} / {p['p99_ms']} / {p['mean_ms']}" for p in r["passes"])
            dp = r.get("dispatcher_pass") or {}
            lines.append(
                f"| {r['clusters']:,} | {ps} | {dp.get('p50_ms', '-')} / {dp.get('mean_ms', '-')} | "
                f"{r.get('scan_kernel_ms', '-')} ({r.get('scan_only_kernel_ms', '-')}) | "
                f"{r.get('scan_tbs', '-')} ({r.get('scan_fraction_of_copy_bw', '-')}) | "
                f"{(r.get('cpu_index_latency') or {}).get('p50_ms', '-')} | "
                f"{(r.get('cpu_scan_latency') or {}).get('p50_ms', '-')} | "
                f"{cu.get('per_doc_ms', '-')} ({cu.get('batch32_per_doc_ms', '-')}) | {th.get('per_doc_ms', '-')} | "
                f"{r.get('scipy_cpu_spmv_per_doc_ms', '-')} |")
        if lat.get("goal_0.5ms_at_1.6M"):
            g = lat["goal_0.5ms_at_1.6M"]
            lines.append(f"\ngoal latency <= 0.5 ms at 1.6M clusters (p50 and mean, every pass): p50 {g['p50_ms']} ms, "
                         f"mean {g['mean_ms']} ms, met = **{g['met']}**")
    tp = res.get("throughput", {})
    if "docs_per_s" in tp:
        lines.append(f"\nthroughput: {tp['docs_clustered']:,} of {tp['n_docs_target']:,} docs in "
                     f"{tp['clustering_seconds']} s ({tp['docs_per_s']:,} docs/s, batch {tp['batch_size']}), "
                     f"{tp['clusters']:,} clusters, device memory {tp.get('device_memory_used_gib', 'n/a')} GiB")
        if "extrapolated" in tp:
            x = tp["extrapolated"]
            lines.append(f"extrapolated (not measured): {x['total_seconds']} s for all {tp['n_docs_target']:,} docs, "
                         f"{x['clusters_at_end']:,} clusters at the end")
        if tp.get("goal_30min_for_5.5M"):
            lines.append(f"goal 5.5M docs <= 30 min: {tp['goal_30min_for_5.5M']['seconds']} s, "
                         f"met = **{tp['goal_30min_for_5.5M']['met']}**")
    for name, sec in res.items():
        if isinstance(sec, dict) and "error" in sec:
            lines.append(f"\n{name}: ERROR {sec['error']}")
    return "\n".join(lines)


def main(argv=None):
    ap = harness.parser(__doc__, quick="small sizes, under a minute")
    ap.add_argument("--n-docs", type=int, default=None, help="throughput stream length (default 5.5M; quick 100K)")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="seconds for the throughput section before it stops and extrapolates (default 200; quick 20)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads-per-block", type=int, default=None, help="scan kernel rows per block (default: the clusterer's)")
    ap.add_argument("--latency-sizes", default=None, help="comma list of cluster counts for the latency section")
    ap.add_argument("--sections", default="env,exactness,latency,throughput")
    ap.add_argument("--latency-repeats", type=int, default=2, help="latency passes of the fast path per size")
    ap.add_argument("--cpu-queries", type=int, default=None, help="documents for the CPU scan twin's latency (0: skip)")
    ap.add_argument("--no-peers", action="store_true", help="latency section: only our GPU passes")
    ap.add_argument("--tpb-sweep", default="", help="latency section: comma list of rows per block to time too")
    ap.add_argument("--exact-sizes", default=None, help="exactness: n_docs,n_batch1,n_reference")
    ap.add_argument("--tiny", action="store_true", help=harness.SUPPRESS)  # CUDA-simulator smoke test of this script
    args = ap.parse_args(argv)
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    if args.tiny:
        GEOMETRY.update(threads_per_block=16, reduce_threads=8)
        args.batch_size = min(args.batch_size, 8)
    if args.threads_per_block:
        GEOMETRY.update(threads_per_block=args.threads_per_block)
    if args.exact_sizes:
        SIZES[mode]["exact"] = tuple(int(float(x)) for x in args.exact_sizes.split(","))
    if args.latency_sizes:
        SIZES[mode]["latency"] = ([int(float(x)) for x in args.latency_sizes.split(",")],) + SIZES[mode]["latency"][1:]
    backend = resolve(args.device)
    log(f"backend: {backend.describe()}")
    rep = harness.Report(args.out, {"args": vars(args), "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    wanted = args.sections.split(",")
    if "env" in wanted:
        rep.section("env", env, backend, mode, timed=True)
    copy_tbs = rep.results.get("env", {}).get("copy_tbs")
    if "exactness" in wanted:
        rep.section("exactness", exactness, backend, mode, timed=True)
    if "latency" in wanted:
        rep.section("latency", latency, backend, mode, copy_tbs, args.latency_repeats, args.cpu_queries,
                    not args.no_peers, [int(x) for x in args.tpb_sweep.split(",") if x], timed=True)
    if "throughput" in wanted:
        n_docs = args.n_docs or {"tiny": 100, "quick": 100_000, "full": 5_500_000}[mode]
        budget = args.time_budget or {"tiny": 5.0, "quick": 20.0, "full": 200.0}[mode]
        rep.section("throughput", throughput, backend, n_docs, budget, args.batch_size, timed=True)
    rep.write("gpu_stream.json", markdown(rep.results))
    return rep.results


if __name__ == "__main__":
    main()
