#!/usr/bin/env python3
"""Benchmark of exact sparse kNN (gputext's engine) against peers, in one run.

Corpora: gputext.datasets.synth.make_corpus (Zipf terms, ~60 distinct terms a document,
200,000-term vocabulary, tf-idf); queries are further documents of the same model weighted with
the index's idf. For each corpus size and query batch size, with k = 30 cosine:

  gputext cuda      end to end: queries host->device, scoring, top-k, results back (index built
                    once beforehand, its build time reported apart)
  gputext cpu       our CPU twin (numba parallel), on a subset of queries, reported as queries/s
  cupy spmm         cuSPARSE SpMM of the index (CSR) against a dense block of queries, then top-k
  cupy spgemm       cuSPARSE SpGEMM of queries (CSR) x index^T (CSR), densified, then top-k
  torch spmm        PyTorch sparse CSR x dense, then torch.topk
  sklearn brute     NearestNeighbors(metric="cosine", algorithm="brute", n_jobs=-1) on the CPU,
                    on a subset of queries, reported as queries/s

GPU times are medians of repeats after a warm-up, synchronised (the calls return host arrays).
Exactness: gputext cuda == gputext cpu bit for bit on a subset, and both equal a float64
reference (scipy) up to ties. Bandwidth: bytes that must move = 8 per posting touched (doc id +
weight) + 16 per (query, document) score (written once, read once), over the time; the fraction
is against a device-to-device copy measured in the same run.

  python scripts/bench_knn.py --quick                  # small, a minute, any machine
  python scripts/bench_knn.py --sizes 1e5,1e6,1e7      # the GPU host (writes JSON + markdown to --out)
  python scripts/bench_knn.py --latency --out DIR      # single-query latency at 10^6 (see latency())
  python scripts/bench_knn.py --methods rows,blocked   # also the blocked top-k (issue 19; see other_methods())
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import warnings
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

warnings.filterwarnings("ignore")
sys.path.insert(1, os.path.join(harness.ROOT, "tests"))  # engine_reference


def parse_args():
    p = harness.parser(__doc__, quick="small sizes: 2e4 docs, 20k terms, queries 1,100",
                       out=os.environ.get("OUT") or "out/bench_knn")
    p.add_argument("--sizes", default="1e5,1e6", help="corpus sizes (documents), comma-separated")
    p.add_argument("--queries", default="1,100,10000", help="query batch sizes")
    p.add_argument("--k", type=int, default=30)
    p.add_argument("--terms", type=int, default=200_000)
    p.add_argument("--terms-per-doc", type=float, default=60)
    p.add_argument("--peers", default="cupy_spmm,cupy_spgemm,torch_spmm,sklearn,cpu")
    p.add_argument("--cpu-queries", type=int, default=200, help="queries timed on the CPU peers")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--check", type=int, default=50, help="queries checked against the float64 reference")
    p.add_argument("--reference-docs", type=float, default=2e7,
                   help="largest corpus whose --check queries are also scored by the float64 reference (scipy, "
                        "one thread: ~3.5 s a million documents); above it they are checked against the CPU twin only")
    p.add_argument("--profile", action="store_true", help="cProfile one warm single-query search per size")
    p.add_argument("--latency", action="store_true",
                   help="single-query latency mode: p50 over --singles warm single queries (ours with pre-marshalled "
                        "and with numba-dispatched launches, CuPy SpMM + top-k), and the 10,000-query batch")
    p.add_argument("--singles", type=int, default=300, help="single queries timed in --latency mode")
    p.add_argument("--geometries", default="",
                   help="--latency: also time these engine geometries, ';'-separated 'name:key=value,...' "
                        "(gputext.engine.Geometry fields), e.g. 'sorted:sorted_postings=1;items8:accumulate_items=8'")
    p.add_argument("--methods", default="rows",
                   help="engine top-k methods timed (search_topk method=): rows (the default, always run) and blocked")
    a = p.parse_args()
    if a.quick:
        a.sizes, a.queries, a.terms, a.cpu_queries, a.repeats = "2e4", "1,100", 20_000, 100, 2
        a.singles = min(a.singles, 50)
    a.sizes = [int(float(s)) for s in a.sizes.split(",")]
    a.queries = [int(float(s)) for s in a.queries.split(",")]
    a.peers = [s for s in a.peers.split(",") if s]
    a.methods = [m for m in a.methods.split(",") if m and m != "rows"]
    return a


def median_time(fn, repeats):
    """Median host seconds of a synchronous call (it returns host arrays) after one warm-up."""
    return harness.wall_runs(fn, repeats)[0]


class PeakMemory:
    """Samples device memory in use every 2 ms (cudaMemGetInfo through torch, if present)."""

    def __init__(self):
        try:
            import torch
            self._info = torch.cuda.mem_get_info if torch.cuda.is_available() else None
        except Exception:
            self._info = None
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self):
        if self._info:
            free, total = self._info()
            self.base = total - free
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            free, total = self._info()
            self.peak = max(self.peak, total - free - self.base)
            time.sleep(0.002)

    def __exit__(self, *exc):
        self._stop.set()
        if self._info:
            self._thread.join()


# ------------------------------------------------------------------------------------ peers
# Each returns a synchronous call that answers the k best (indices, scores) of every query.

def _blocks_topk(Q, n_docs, k, scores_of, xp, host):
    """Top-k of score blocks of at most 2 GB (``scores_of(lo, hi)``: queries lo..hi against every
    document, on the device), by argpartition + sort of the k (xp: the array library)."""
    step = max(1, min(Q.shape[0], int(2e9 // (4 * n_docs))))
    out_i, out_s = [], []
    for lo in range(0, Q.shape[0], step):
        S = scores_of(lo, lo + step)
        part = xp.argpartition(-S, k - 1, axis=1)[:, :k]
        vals = xp.take_along_axis(S, part, 1)
        order = xp.argsort(-vals, axis=1)
        out_i.append(host(xp.take_along_axis(part, order, 1)))
        out_s.append(host(xp.take_along_axis(vals, order, 1)))
    return np.vstack(out_i), np.vstack(out_s)


@harness.peer("knn.cupy_spmm", needs=("cupy",), gpu=True)
def peer_cupy_spmm(index, X, Q, k):
    """cuSPARSE SpMM of the index (CSR) against a dense block of queries, then top-k (CuPy)."""
    import cupy as cp
    import cupyx.scipy.sparse as csp
    dX = csp.csr_matrix(X)
    return lambda: _blocks_topk(Q, X.shape[0], k, lambda lo, hi: (dX @ cp.asarray(Q[lo:hi].toarray().T)).T, cp,
                                cp.asnumpy)


@harness.peer("knn.cupy_spgemm", needs=("cupy",), gpu=True)
def peer_cupy_spgemm(index, X, Q, k):
    """cuSPARSE SpGEMM of queries (CSR) x index^T (CSR), densified, then top-k (CuPy)."""
    import cupy as cp
    import cupyx.scipy.sparse as csp
    dXT = csp.csr_matrix(X.T.tocsr())
    return lambda: _blocks_topk(Q, X.shape[0], k, lambda lo, hi: (csp.csr_matrix(Q[lo:hi]) @ dXT).toarray(), cp,
                                cp.asnumpy)


@harness.peer("knn.torch_spmm", needs=("torch",), gpu=True)
def peer_torch_spmm(index, X, Q, k):
    """PyTorch sparse CSR x dense, then torch.topk."""
    import torch
    dev = torch.device("cuda")
    dX = torch.sparse_csr_tensor(torch.from_numpy(X.indptr.astype(np.int64)), torch.from_numpy(X.indices.astype(np.int64)),
                                 torch.from_numpy(X.data), size=X.shape, device=dev)
    step = max(1, min(Q.shape[0], int(2e9 // (4 * X.shape[0]))))

    def run():
        out_i, out_s = [], []
        for lo in range(0, Q.shape[0], step):
            dQ = torch.from_numpy(Q[lo:lo + step].toarray().T.copy()).to(dev)
            S = (dX @ dQ).T
            vals, idx = torch.topk(S, k, dim=1)
            out_i.append(idx.cpu().numpy())
            out_s.append(vals.cpu().numpy())
        torch.cuda.synchronize()
        return np.vstack(out_i), np.vstack(out_s)
    return run


@harness.peer("knn.cpu")
def peer_cpu(index, X, Q, k):
    """our CPU twin (numba parallel), the engine's search_topk on the CPU."""
    from gputext.engine import search_topk
    return lambda: search_topk(index, Q, k, "cosine", "cpu")


@harness.peer("knn.sklearn", needs=("sklearn",))
def peer_sklearn(index, X, Q, k):
    """scikit-learn NearestNeighbors(metric="cosine", algorithm="brute", n_jobs=-1) on the CPU."""
    from sklearn.neighbors import NearestNeighbors
    nn = NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute", n_jobs=-1).fit(X)

    def run():
        dist, idx = nn.kneighbors(Q, return_distance=True)
        return idx, 1.0 - dist  # cosine similarity, to compare with ours
    return run


# ------------------------------------------------------------------------------------ main

def other_methods(a, index, Q, sub, rows_result, cpu_result, row, bw):
    """Time every --methods method besides rows on the same queries (median of --repeats, 1 at
    10,000 queries) into row[gputext_{m}_*]: seconds, speedup over rows, postings scored and
    skipped by the safe pruning (blocked, cosine/dot; the probe pass's postings not counted), device
    geometry (block, items, tile) and document blocks; bytes moved = 8 a posting touched (doc id +
    weight; a tile's queries sharing a term read its range once from HBM, so this is the upper
    bound) + 24 x k a (query, document block) (its list written, then read by the merge; the
    accumulators stay in shared memory); the bandwidth fraction of that against the copy
    bandwidth. Exactness: the method on the device == the rows method and the CPU twin on the
    --check subset ({m}_equals_rows, {m}_equals_cpu), and the method's own CPU twin == the CPU
    twin on 8 of them ({m}_cpu_twin_equals_cpu). A method that fails is recorded as
    gputext_{m}_error (the run goes on)."""
    for m in a.methods:
        try:
            time_method(a, m, index, Q, sub, rows_result, cpu_result, row, bw)
        except Exception as exc:
            row[f"gputext_{m}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            harness.log(f"  {m}: {row[f'gputext_{m}_error']}")


def time_method(a, m, index, Q, sub, rows_result, cpu_result, row, bw):
    """One method of other_methods."""
    from gputext.engine import search_topk

    n_q = Q.shape[0]
    stats = {}
    t = median_time(lambda: search_topk(index, Q, a.k, "cosine", a.backend, stats=stats, method=m),
                    a.repeats if n_q < 10000 else 1)
    postings, n_seg = stats.get("postings", 0), stats.get("segments") or 0
    moved = 8 * postings + 24 * n_q * n_seg * a.k
    row.update({f"gputext_{m}_s": t, f"gputext_{m}_speedup_vs_rows": row["gputext_s"] / t,
                f"gputext_{m}_postings": postings, f"gputext_{m}_postings_skipped": stats.get("postings_skipped"),
                f"gputext_{m}_geometry": str(stats.get("geometry")),
                f"gputext_{m}_segments": n_seg, f"gputext_{m}_batch_size": stats.get("batch_size"),
                f"gputext_{m}_bytes_moved": moved})
    if bw:
        row[f"gputext_{m}_bandwidth_fraction"] = moved / t / bw
    gi, gs = search_topk(index, sub, a.k, "cosine", a.backend, method=m)
    row[f"{m}_equals_rows"] = bool(np.array_equal(gi, rows_result[0]) and np.array_equal(gs, rows_result[1]))
    row[f"{m}_equals_cpu"] = bool(np.array_equal(gi, cpu_result[0]) and np.array_equal(gs, cpu_result[1]))
    few = min(8, sub.shape[0])
    ti, ts = search_topk(index, sub[:few], a.k, "cosine", "cpu", method=m)
    row[f"{m}_cpu_twin_equals_cpu"] = bool(np.array_equal(ti, cpu_result[0][:few]) and
                                           np.array_equal(ts, cpu_result[1][:few]))
    harness.log(f"  {m}: {t:.4f} s ({row['gputext_s'] / t:.2f}x rows), geometry {stats.get('geometry')}, "
                f"postings scored {postings} skipped {stats.get('postings_skipped')}, "
                f"{n_seg} document blocks, exact {row[f'{m}_equals_cpu'] and row[f'{m}_cpu_twin_equals_cpu']}")


def peer_agrees(result, our_scores, n):
    """A peer counts only if its best scores match ours (float32 tolerance) on the first n queries;
    ``result`` is what its timed run returned (until 2026-11-27 the check ran the peer once more: a
    third minute of CuPy's 10,000 queries at 10^7, after its warm-up and timed run)."""
    idx, vals = result if isinstance(result, tuple) else (result, None)
    vals = np.asarray(vals, dtype=np.float64)[:n]
    ours = np.asarray(our_scores, dtype=np.float64)[: len(vals)]
    k = min(vals.shape[1], ours.shape[1])
    return bool(np.allclose(vals[:, :k], ours[:, :k], rtol=1e-4, atol=1e-5))


def profile_one_query(index, q, k, backend, out):
    """cProfile of one warm single-query search: where the fixed cost goes."""
    import cProfile
    import pstats
    from gputext.engine import search_topk
    search_topk(index, q, k, "cosine", backend)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        search_topk(index, q, k, "cosine", backend)
    prof.disable()
    with open(out, "w") as f:
        pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(45)

CHUNK_DOCS = 5_000_000  # larger corpora are generated and weighted in chunks of this many documents


def make_data(n_docs, n_queries, a):
    """The bench corpus (tf-idf, seed 1) and queries weighted with its idf (seed 2, same model).
    Above CHUNK_DOCS documents the corpus is generated in chunks (seeds 1001, 2001, ...; the same
    model) of raw counts, then each chunk is weighted with the whole corpus's document
    frequencies: at 5x10^7 documents the one-piece generator's float64 temporaries pass the GPU
    host's 128 GB (killed, 2026-11-27)."""
    from gputext.datasets.synth import make_corpus
    from gputext.io.weighting import Reference
    t = time.perf_counter()
    if n_docs <= CHUNK_DOCS:
        corpus = make_corpus(n_docs, a.terms, a.terms_per_doc, 20, seed=1)
        X, reference = corpus.X, Reference(np.asarray(corpus.var["df"]), corpus.n_docs)
    else:
        X, reference = chunked_corpus(n_docs, a)
    Q = make_corpus(n_queries, a.terms, a.terms_per_doc, 20, seed=2, model_seed=1, reference=reference).X
    return X, Q, time.perf_counter() - t


def chunked_corpus(n_docs, a):
    """(X float32 CSR, Reference) of make_data's chunked corpus. The weighted chunks are written
    straight into the corpus's preallocated arrays (no scipy vstack: at 5x10^7 documents it held
    a second 29 GB copy and took most of two minutes)."""
    import scipy.sparse as sp
    from gputext.datasets.synth import make_corpus, weight_rows
    from gputext.io.weighting import Reference
    parts, df = [], np.zeros(a.terms, np.int64)
    for i, lo in enumerate(range(0, n_docs, CHUNK_DOCS)):
        counts = make_corpus(min(CHUNK_DOCS, n_docs - lo), a.terms, a.terms_per_doc, 20, seed=1 + 1000 * (i + 1),
                             model_seed=1, weighting="none").X
        df += np.bincount(counts.indices, minlength=a.terms)
        parts.append(counts)
        harness.log(f"  generated documents {lo:,} .. {lo + counts.shape[0]:,}")
    nnz = sum(c.nnz for c in parts)
    indptr = np.zeros(n_docs + 1, np.int64)
    indices = np.empty(nnz, np.int32)
    data = np.empty(nnz, np.float32)
    row = at = 0
    for i in range(len(parts)):
        counts = parts[i]
        parts[i] = None
        c_ptr, c_ind, c_dat = weight_rows(counts.indptr, counts.indices, counts.data, "tfidf", df, n_docs)
        n, m = counts.shape[0], int(c_ptr[-1])
        indptr[row + 1:row + n + 1] = at + c_ptr[1:].astype(np.int64)  # chunk offsets may be int32
        indices[at:at + m] = c_ind
        data[at:at + m] = c_dat
        row, at = row + n, at + m
        del counts, c_ptr, c_ind, c_dat
    X = sp.csr_matrix((data, indices, indptr), shape=(n_docs, a.terms))
    X.has_sorted_indices = True
    return X, Reference(df, n_docs)


def cosine_reference(X, Q, rows: int = 2_000_000) -> np.ndarray:
    """float64 cosine similarities (n_queries, n_docs) of Q against X, computed over blocks of
    ``rows`` documents (a float64 copy of one block at a time: the whole corpus as float64 would
    need 12 bytes a nonzero more, 43 GB at 5x10^7 documents)."""
    Qd = Q.astype(np.float64)
    nq = np.sqrt(np.asarray(Qd.multiply(Qd).sum(1)).ravel())
    S = np.zeros((Q.shape[0], X.shape[0]))
    for lo in range(0, X.shape[0], rows):
        B = X[lo:lo + rows].astype(np.float64)
        nx = np.sqrt(np.asarray(B.multiply(B).sum(1)).ravel())
        den = np.outer(nq, nx)
        dots = (Qd @ B.T).toarray()
        S[:, lo:lo + B.shape[0]] = np.where(den > 0, dots / np.where(den > 0, den, 1), 0)
    return S


def percentiles(values) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {"p50": float(np.percentile(v, 50)), "p90": float(np.percentile(v, 90)), "min": float(v.min()), "n": int(v.size)}


class _NoEvent:
    """Stands in for CUDA events on the CPU backend (no device figure)."""

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return float("nan")


def time_singles(call, singles, event_pair):
    """Host wall and event milliseconds of each call(q) over the single queries (warm-up first)."""
    for q in singles[:20]:
        call(q)
    host, dev = [], []
    for q in singles:
        start, end = event_pair()
        start.record()
        t = time.perf_counter()
        call(q)
        host.append(1e3 * (time.perf_counter() - t))
        end.record()
        end.synchronize()
        dev.append(float(start.elapsed_time(end)) if hasattr(start, "elapsed_time") else
                   float(__import__("cupy").cuda.get_elapsed_time(start, end)))
    return host, dev


def cupy_single(X, k):
    """CuPy SpMM + top-k for one query at a time (the peer of the latency goal), index uploaded once."""
    import cupy as cp
    import cupyx.scipy.sparse as csp
    dX = csp.csr_matrix(X)
    return lambda q: _blocks_topk(q, X.shape[0], k, lambda lo, hi: (dX @ cp.asarray(q[lo:hi].toarray().T)).T, cp,
                                  cp.asnumpy)


def parse_geometry(spec: str):
    """'name:key=value,...' -> (name, Geometry); values are ints, floats or 0/1 for booleans."""
    from dataclasses import fields

    from gputext.engine import Geometry
    name, _, body = spec.partition(":")
    kinds = {f.name: f.type for f in fields(Geometry)}
    kw = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        kw[key] = bool(int(value)) if "bool" in str(kinds[key]) else (float(value) if "." in value else int(value))
    return name, Geometry(**kw)


def sweep_geometries(a, X, singles, Q, backend, events) -> dict:
    """p50 single-query latency and the batch's median time for each --geometries entry (each on
    its own Index, so a geometry that changes the device index builds its own), every result
    checked against the default geometry's."""
    from gputext.engine import Index, search_topk
    base = Index.from_csr(X)
    ref = [search_topk(base, q, a.k, "cosine", backend) for q in singles[: a.check]]
    ref_batch = search_topk(base, Q, a.k, "cosine", backend)
    out = {}
    for spec in a.geometries.split(";"):
        name, geom = parse_geometry(spec)
        index = Index.from_csr(X)
        t = time.perf_counter()
        search_topk(index, singles[0], a.k, "cosine", backend, geometry=geom)
        first = time.perf_counter() - t
        host, dev = time_singles(lambda q: search_topk(index, q, a.k, "cosine", backend, geometry=geom),
                                 singles, events)
        stages = stage_times(index, singles, a.k, backend, geom) if backend.is_cuda else {}
        same = all(np.array_equal(search_topk(index, q, a.k, "cosine", backend, geometry=geom)[0], r[0])
                   for q, r in zip(singles[: a.check], ref))
        batch = search_topk(index, Q, a.k, "cosine", backend, geometry=geom)
        same &= bool(np.array_equal(batch[0], ref_batch[0]) and np.array_equal(batch[1], ref_batch[1], equal_nan=True))
        batches = batch_times(a, index, Q, backend, geom)
        out[name] = {"spec": spec, "host_ms": percentiles(host), "events_ms": percentiles(dev), "first_call_s": first,
                     **{f"queries_{n}_s": secs for n, secs in batches.items()}, "equal_default": same,
                     "stages_ms": stages}
        print(f"geometry {name}: single p50 {np.median(host):.3f} ms host / {np.median(dev):.3f} ms events, "
              + ", ".join(f"{n} queries {secs:.4f} s" for n, secs in batches.items())
              + f", first call {first:.2f} s, equal {same}; stages "
              + ", ".join(f"{key} {v:.4f}" for key, v in stages.items() if key not in ("postings", "segments")),
              flush=True)
        del index
    return out


def stage_times(index, singles, k, backend, geom) -> dict:
    """CUDA-event milliseconds (p50 of 50) of each launch of one warm single query's TopkPlan,
    each launch repeated on its own after a real search set its inputs (the repeated accumulation
    only adds more into the score rows; they are re-zeroed before the next real search)."""
    from numba import cuda

    from gputext.device.launch import blocks
    from gputext.engine import search_topk
    stats = {}
    search_topk(index, singles[0], k, "cosine", backend, geometry=geom, stats=stats)
    shard = index.device_cache.get("shard") or next(v for key, v in index.device_cache.items()
                                                     if isinstance(key, tuple) and key[0] == "shards")[0]
    plan = next(p for p in shard.plans.values() if p.rows >= 1)  # the first shard's (of several: stats' postings are all shards')
    lane = plan.lanes[0]
    # the accumulation's own grid: one block a document range for the shared accumulation (before
    # 2026-11-27 06:30 this step launched the atomics' grid, blocks(postings, 4,096), for it too)
    grid = lane.acc_grid or blocks(stats["postings"], lane.acc_block * lane.acc_items)
    steps = [("ranges", lambda: lane.ranges(grid=blocks(lane.acc_grid * lane.ranges.args[6], lane.ranges.block)))
             ] if getattr(lane, "ranges", None) is not None else []
    steps += [("accumulate", lambda: lane.accumulate(grid=grid)),
             ("select", lambda: lane.select(grid=(1,) if plan.unit else (plan.n_seg, 1)))]  # unit select: one block
    steps += [(f"merge{i}", (lambda L=L, g=g: L(grid=(g, 1)))) for i, (L, g) in enumerate(plan.merges)]
    if not plan.unit:  # the unit select's keys rows are overwritten whole by the next accumulation
        steps.append(("zero_rows", lambda: shard.zero_rows(lane.acc, lane.acc_block)))
    out = {"postings": int(stats["postings"]), "segments": int(plan.n_seg)}
    for name, fn in steps:
        times = []
        for _ in range(50):
            s, e = cuda.event(), cuda.event()
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(cuda.event_elapsed_time(s, e))
        out[name] = float(np.median(times))
    shard.rows_dirty = True
    return out


def batch_times(a, index, Q, backend, geom) -> dict:
    """{n: median seconds of the first n query rows} for each --queries size above 1."""
    from gputext.engine import search_topk
    return {n: median_time(lambda n=n: search_topk(index, Q[:n], a.k, "cosine", backend, geometry=geom), a.repeats)
            for n in sorted(set(a.queries)) if n > 1}


def latency(a, backend, out: Path) -> None:
    """Single exact query at the first --sizes corpus (10^6 by default): p50 of host wall and CUDA
    events over --singles warm single queries, each a different query row, for our engine with
    pre-marshalled launches (Geometry.fast_launch, the default) and with numba's dispatcher, and for
    CuPy SpMM + top-k in the same run; then each --queries batch above 1 (median of --repeats). Exactness:
    every single query's result equals the CPU twin's on the first --check queries."""
    from numba import cuda

    from gputext.engine import Geometry, Index, search_topk

    n_docs = a.sizes[0]
    n_batch = max(a.queries)
    X, Qall, gen_s = make_data(n_docs, max(n_batch, a.singles), a)
    singles = [Qall[i:i + 1] for i in range(a.singles)]
    index = Index.from_csr(X)
    report = {"device": backend.reason, "n_docs": n_docs, "nnz": X.nnz, "k": a.k, "singles": a.singles,
              "generated_s": gen_s, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    numba_events = (lambda: (cuda.event(), cuda.event())) if backend.is_cuda else (lambda: (_NoEvent(), _NoEvent()))
    for mode, geom in (("fast", Geometry()), ("dispatcher", Geometry(fast_launch=False))):
        stats = {}
        try:
            host, dev = time_singles(lambda q: search_topk(index, q, a.k, "cosine", backend, geometry=geom,
                                                           stats=stats), singles, numba_events)
        except Exception as exc:  # keep the round useful: record, go on with the other mode
            report[f"gputext_{mode}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            print(f"gputext single query ({mode}) failed: {report[f'gputext_{mode}_error']}", flush=True)
            continue
        report[f"gputext_{mode}_host_ms"] = percentiles(host)
        report[f"gputext_{mode}_events_ms"] = percentiles(dev)
        report[f"gputext_{mode}_launch"] = stats.get("launch")
        print(f"gputext single query ({mode}, launch {stats.get('launch')}): p50 {np.median(host):.3f} ms host, "
              f"{np.median(dev):.3f} ms events", flush=True)
    geom = Geometry(fast_launch="gputext_fast_error" not in report)  # the rest runs on a mode that works
    same = True
    for q in singles[: a.check]:
        g = search_topk(index, q, a.k, "cosine", backend, geometry=geom)
        c = search_topk(index, q, a.k, "cosine", "cpu")
        same &= bool(np.array_equal(g[0], c[0]) and np.array_equal(np.nan_to_num(g[1]), np.nan_to_num(c[1])))
    report["singles_equal_cpu_twin"] = same
    try:
        import cupy as cp
        run = cupy_single(X, a.k)
        host, dev = time_singles(run, singles, lambda: (cp.cuda.Event(), cp.cuda.Event()))
        report["cupy_spmm_host_ms"] = percentiles(host)
        report["cupy_spmm_events_ms"] = percentiles(dev)
        print(f"cupy spmm single query: p50 {np.median(host):.3f} ms host", flush=True)
    except Exception as exc:  # a peer that cannot run is reported, not fatal
        report["cupy_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    Q = Qall[:n_batch]
    if a.profile:
        profile_one_query(index, singles[0], a.k, backend, out / "profile_latency.txt")
    if backend.is_cuda:
        report["stages_ms"] = stage_times(index, singles, a.k, backend, geom)
        print("stages of one query (events, p50 of 50):", report["stages_ms"], flush=True)
    if a.geometries:
        report["geometries"] = sweep_geometries(a, X, singles, Q, backend, numba_events)
    for n, secs in batch_times(a, index, Q, backend, geom).items():
        report[f"gputext_{n}_queries_s"] = secs
        print(f"gputext {n} queries: {secs:.4f} s (median of {a.repeats})", flush=True)
    harness.write_json(str(out / f"bench_knn_latency_{int(n_docs)}.json"), {**report, "env": harness.probe(backend)})
    print(json.dumps(report, indent=1))


def main():
    a = parse_args()
    from gputext.backend import resolve
    from gputext.engine import Index, search_topk
    from engine_reference import same_up_to_ties

    backend = a.backend = resolve(a.device)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.latency:
        print(f"# bench_knn --latency on {backend.describe()}", flush=True)
        latency(a, backend, out)
        return
    env = harness.probe(backend, copy_bytes=1 << 31)  # 2 GiB copy on a real GPU
    bw = env.get("copy_bytes_per_s")
    device_name = backend.reason
    harness.log(f"bench_knn on {backend.describe()}" + (f"; copy bandwidth {bw / 1e12:.2f} TB/s" if bw else ""))
    rows = []
    for n_docs in a.sizes:
        X, Qall, gen_s = make_data(n_docs, max(a.queries), a)
        nnz = X.nnz
        harness.log(f"{n_docs} docs, {a.terms} terms, {nnz} nonzeros ({nnz / n_docs:.1f} a doc); generated in {gen_s:.1f} s")
        index = Index.from_csr(X)
        t = time.perf_counter()
        if backend.is_cuda:
            from numba import cuda
            from gputext.engine.device_index import build_shard
            from gputext.engine.search import Geometry
            build_shard(index.X, 0, min(1000, index.n_docs), Geometry())  # compile the build kernels first
            cuda.synchronize()
            t = time.perf_counter()
            # as search_topk's first call does: the rows uploaded and the sorted lists built on the
            # device (device_index.sorted_postings_device; the host's build uploaded where that
            # does not fit)
            index.device_cache["shard"] = build_shard(index.X, 0, index.n_docs, Geometry())
            cuda.synchronize()
        build_s = time.perf_counter() - t
        t = time.perf_counter()
        index.cpu()  # the CPU twin's postings, for the --check's CPU twin
        cpu_build_s = time.perf_counter() - t
        harness.log(f"  CPU twin's index built in {cpu_build_s:.1f} s")
        harness.log(f"  device index built in {build_s:.1f} s")
        for n_q in a.queries:
            Q = Qall[:n_q]
            row = {"n_docs": n_docs, "nnz": nnz, "n_queries": n_q, "k": a.k, "device": device_name,
                   "index_build_s": build_s, "cpu_index_build_s": cpu_build_s}
            stats = {}
            run_ours = lambda: search_topk(index, Q, a.k, "cosine", backend, stats=stats)
            with PeakMemory() as pm:
                row["gputext_s"] = median_time(run_ours, a.repeats if n_q < 10000 else max(1, a.repeats))
            row["gputext_peak_device_bytes"] = pm.peak or None
            row.update({f"gputext_{key}": v for key, v in stats.items() if isinstance(v, (int, float, str))})
            row["gputext_qps"] = n_q / row["gputext_s"]
            harness.log(f"  {n_q} queries searched in {row['gputext_s']:.3f} s")
            postings = stats.get("postings", 0)
            moved = 8 * postings + 16 * n_q * n_docs
            row["bytes_moved"] = moved
            if bw:
                row["bandwidth_fraction"] = moved / row["gputext_s"] / bw
            # exactness on a subset: cuda == cpu bit for bit, both == float64 reference up to ties
            sub = Q[: min(n_q, a.check)]
            gi, gs = search_topk(index, sub, a.k, "cosine", backend)
            ci, cs = search_topk(index, sub, a.k, "cosine", "cpu")
            row["cuda_equals_cpu"] = bool(np.array_equal(gi, ci) and np.array_equal(gs, cs))
            harness.log(f"  {sub.shape[0]} queries checked against the CPU twin: {row['cuda_equals_cpu']}")
            if n_docs <= a.reference_docs:
                S = cosine_reference(X, sub)
                order = np.lexsort((np.broadcast_to(np.arange(n_docs), S.shape), -S), axis=1)[:, :a.k]
                row["equals_float64_reference"] = bool(same_up_to_ties(gi, gs, order, np.take_along_axis(S, order, 1)))
                del S
            else:  # the CPU twin (equal above) is the reference's stand-in; tests check it against float64
                row["equals_float64_reference"] = None
            other_methods(a, index, Q, sub, (gi, gs), (ci, cs), row, bw)
            if n_q == 1 and a.profile:
                profile_one_query(index, Q, a.k, backend, out / f"profile_{n_docs}.txt")
            for peer in a.peers:
                cpu_side = peer in ("cpu", "sklearn")  # timed on a subset, reported as queries/s
                m = min(n_q, a.cpu_queries) if cpu_side else n_q
                made = harness.run_peers([peer], index, X, Q[:m], a.k, has_gpu=backend.is_cuda, prefix="knn.")
                if peer not in made:  # a GPU peer without a GPU
                    continue
                try:
                    fn = made[peer]
                    if not callable(fn):
                        raise RuntimeError(fn.get("error") or fn["skipped"])
                    if cpu_side:
                        s, result, _ = harness.wall_runs(fn, 1 if m > 20 else a.repeats)
                        row[f"{peer}_valid"] = peer_agrees(result, gs, a.check)
                        row[f"{peer}_qps"] = m / s
                        row[f"{peer}_s_est"] = n_q / row[f"{peer}_qps"]
                    else:
                        row[f"{peer}_s"], result, _ = harness.wall_runs(fn, 1 if n_q >= 10000 else a.repeats)
                        row[f"{peer}_valid"] = peer_agrees(result, gs, a.check)
                except Exception as exc:  # a peer that cannot run at this size is reported, not fatal
                    row[f"{peer}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    harness.log(f"  {peer}: {row[f'{peer}_error']}")
            peer_times = {p: row.get(f"{p}_s", row.get(f"{p}_s_est")) for p in a.peers if row.get(f"{p}_valid")}
            peer_times = {p: t for p, t in peer_times.items() if t}
            if peer_times:
                fastest = min(peer_times, key=peer_times.get)
                row["fastest_peer"] = fastest
                row["speedup_vs_fastest_peer"] = peer_times[fastest] / row["gputext_s"]
            rows.append(row)
            harness.log(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}))
            harness.write_json(os.path.join(a.out, "bench_knn.json"), rows)  # after every row: a cut-short round keeps them
    harness.write_json(os.path.join(a.out, "bench_knn_env.json"), env)
    harness.Report(a.out, rows).write("bench_knn.json", markdown(rows, a.peers, a.methods), md_name="bench_knn.md")


def markdown(rows, peers, methods=()):
    head = (["docs", "queries", "gputext s", "q/s", "peak dev MiB", "BW frac"] + [f"{m} s (x rows, BW frac)" for m in methods]
            + [f"{p}" for p in peers] + ["x fastest", "exact"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r['n_docs']:.0e}", str(r["n_queries"]), f"{r['gputext_s']:.4f}", f"{r['gputext_qps']:.0f}",
                 f"{(r.get('gputext_peak_device_bytes') or 0) / 2**20:.0f}", f"{r.get('bandwidth_fraction', float('nan')):.2f}"]
        for m in methods:
            if f"gputext_{m}_s" not in r:
                cells.append("failed" if f"gputext_{m}_error" in r else "-")
                continue
            cells.append(f"{r[f'gputext_{m}_s']:.4f} ({r[f'gputext_{m}_speedup_vs_rows']:.2f}x, "
                         f"{r.get(f'gputext_{m}_bandwidth_fraction', float('nan')):.2f})")
        for p in peers:
            if f"{p}_s" in r:
                cells.append(f"{r[p + '_s']:.3f} s ({r[p + '_s'] / r['gputext_s']:.1f}x)")
            elif f"{p}_qps" in r:
                cells.append(f"{r[p + '_qps']:.0f} q/s ({r[p + '_s_est'] / r['gputext_s']:.1f}x)")
            else:
                cells.append("-")
        cells.append(f"{r.get('speedup_vs_fastest_peer', float('nan')):.1f} ({r.get('fastest_peer', '-')})")
        bad = [p for p in peers if r.get(f"{p}_valid") is False]
        if bad:
            cells[-1] += " [wrong results: " + ", ".join(bad) + "]"
        exact = r["cuda_equals_cpu"] and r["equals_float64_reference"] is not False
        exact &= all(r.get(f"{m}_equals_cpu") and r.get(f"{m}_cpu_twin_equals_cpu") for m in methods)
        cells.append(("yes" if r["equals_float64_reference"] else "yes (== CPU twin)") if exact else "NO")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
