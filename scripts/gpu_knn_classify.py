#!/usr/bin/env python3
"""GPU round for dense cosine kNN, kNN classification and kNN meta-features (issue 4).

One run on the GPU host, peers measured in the same run:

  1. dense search, one query (bandwidth): the paper's block-strided matrix-vector kernel (a few
     geometries tried, best kept) and the whole exact search (keys + radix-select + float64
     rescoring + sort + copy back) against CuPy's cuBLAS gemv (X @ q), and gemv + cosine + top-k
     (torch.topk, else cupy argpartition) + copy back. Bandwidth = bytes of X / time, also as a
     fraction of a device-to-device copy measured in the run (H100 ~3.0 TB/s, H200 ~4.3 TB/s).
     Goal: >= 0.9x cuBLAS.
  2. dense search, batches of 64 / 256 / 1024 queries (throughput): our register-tiled GEMM
     kernel (tile geometries tried, best kept) and the whole exact search (top-k included)
     against cuBLAS SGEMM (CuPy, TF32 off) and SGEMM + top-k + copy back. TFLOP/s counts
     2 n_queries n_docs n_terms. Goal: >= 0.8x cuBLAS GEMM, top-k included.
  3. exactness at size: dense search on the GPU (default and tuned geometries, matvec and GEMM
     paths, cosine/l2/l1) must equal the CPU twin bit for bit, and a float64 NumPy reference for
     a few queries.
  4. meta-features of all of 20NG (train leave-one-out + test, k = 30): GPU (engine, inverted
     index) vs our CPU twin on every core of this host, same run; the two must be identical.
     Goal: < 10 s on an H100 and >= 20x the CPU twin.
  5. `--method auto`: dense vs inverted search time on CNAE-9 and 20NG (k = 30, test vs train).

  python scripts/gpu_knn_classify.py --quick --device cpu   # smoke test anywhere (< 1 minute)
  python scripts/gpu_knn_classify.py --quick                # small, on the GPU
  python scripts/gpu_knn_classify.py --datasets DIR         # full (about 5 minutes on an H100)

--datasets: the folder holding 20newsgroups/ and cnae9/ (default $GPUTEXT_DATASETS or
../shared/datasets). Prints a markdown table last and writes gpu_knn_classify.json into --out
(default $OUT or out/).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

warnings.filterwarnings("ignore")

REPORT = harness.Report("out", {"sections": {}})  # --out is given to write_table at the end
RESULTS = REPORT.results
log, row, median = harness.log, REPORT.row, harness.median
gpu_ms = harness.gpu_ms  # median ms of CUDA events after a warm-up (gpu_ms(fn, repeats, warmup=2))


def stage_breakdown(index, Q, k, repeats):
    """Median per-stage milliseconds of index.search(Q, k) (DenseIndex.profile: CUDA events,
    synchronised at each stage's end) and the median host wall time of an unprofiled call."""
    index.profile = True
    runs = []
    for _ in range(repeats + 1):
        index.search(Q, k)
        runs.append(dict(index.last_run.get("stages_ms", {})))
    index.profile = False
    runs = runs[1:]
    stages = {name: median(r.get(name, 0.0) for r in runs) for name in runs[0]}
    walls = []
    for _ in range(repeats):
        t = time.perf_counter()
        index.search(Q, k)
        walls.append((time.perf_counter() - t) * 1e3)
    stages["host_wall_total"] = median(walls)
    stages["rounds"] = index.last_run.get("rounds")
    stages["kernel"] = index.last_run.get("kernel")
    stages["cublas_error"] = getattr(index, "_cublas_broken", "") or None
    return stages


def kernel_replay(index, Q, k, n=20):
    """Each kernel of one search alone: GPU ms per launch and the host's launch overhead (us).

    One profiled search records its launches (DenseIndex.last_run["launches"]: keys, select,
    finish, with their buffers); each is then launched n times back to back (idempotent: same
    inputs, same outputs). Host overhead = wall time of the n launch calls / n. GPU time = CUDA
    events around the n launches, queued behind one keys launch so that the GPU never waits for
    the host (the figure is the kernel's own time, not the launch rate)."""
    from numba import cuda
    index.profile = True
    index.search(Q, k)
    index.profile = False
    launches = dict(index.last_run.get("launches", {}))
    head = launches.get("keys")
    out = {"select_slices": launches.get("select_slices"), "kprime": launches.get("kprime")}
    for name in ("keys", "select", "finish"):
        spec = launches.get(name)
        if spec is None:
            continue
        kern, grid, block, args = spec
        reps = n if name != "keys" else max(3, n // 4)
        kern[grid, block](*args)
        cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            kern[grid, block](*args)
        host_us = (time.perf_counter() - t) / reps * 1e6
        cuda.synchronize()
        if head is not None and name != "keys":
            hk, hg, hb, ha = head
            hk[hg, hb](*ha)  # head start
        start, end = cuda.event(), cuda.event()
        start.record()
        for _ in range(reps):
            kern[grid, block](*args)
        end.record()
        end.synchronize()
        out[name] = {"gpu_ms": start.elapsed_time(end) / reps, "launch_us": host_us}
    return out


SELECT_VARIANTS = [  # (select registers, finish registers, select blocks: 0 = 2 x SMs, -1 = 1 x SMs)
    (0, 0, 0), (128, 128, 0), (64, 128, 0), (0, 0, -1), (128, 128, -1)]


def select_variants(section, index, Q, k, reps, sms):
    """The exact search (the index's current key backend) with each selection geometry of
    SELECT_VARIANTS: register caps of the select / finish kernels (occupancy: uncapped they take
    ~230-250 registers = one block per SM) and the number of slices for few queries; whole search
    (CUDA events) and each kernel alone (replay). The index's geometry is restored afterwards."""
    from dataclasses import replace
    base = index.geometry
    out = []
    for sreg, freg, blocks in SELECT_VARIANTS:
        sel_blocks = sms if blocks == -1 else blocks
        index.geometry = replace(base, select_registers=sreg, select_registers_batch=sreg, finish_registers=freg,
                                 select_blocks=sel_blocks)
        ms = gpu_ms(lambda: index.search(Q, k), reps)
        rep = kernel_replay(index, Q, k, n=8)
        entry = dict(select_registers=sreg, finish_registers=freg, select_blocks=sel_blocks or 2 * sms, search_ms=ms,
                     select_gpu_ms=rep.get("select", {}).get("gpu_ms"), finish_gpu_ms=rep.get("finish", {}).get("gpu_ms"),
                     slices=rep.get("select_slices"))
        out.append(entry)
        row(section, f"selection geometry: registers select {sreg or 'free'} / finish {freg or 'free'}, "
                     f"{entry['select_blocks']} select blocks ({entry['slices']} slices)",
            f"search {ms:.3f} ms", f"select {entry['select_gpu_ms']:.3f} ms, finish {entry['finish_gpu_ms']:.3f} ms (GPU, alone)")
    index.geometry = base
    return out


def replay_row(section, replay):
    parts = ", ".join(f"{name} {v['gpu_ms']:.3f} ms ({v['launch_us']:.0f} us)" for name, v in replay.items()
                      if isinstance(v, dict))
    row(section, "kernels alone, GPU ms per launch (host launch overhead)", parts,
        f"select over {replay.get('select_slices')} slices, k' = {replay.get('kprime')}; the host launches while "
        "the keys run, so only GPU times add up on the critical path")


def breakdown_rows(section, label, stages):
    parts = ", ".join(f"{name} {ms:.3f}" for name, ms in stages.items()
                      if name not in ("host_wall_total", "rounds", "kernel", "cublas_error"))
    row(section, f"stages of {label} (ms, CUDA events)", parts,
        f"keys by {stages.get('kernel')}; rounds {stages.get('rounds')}; unprofiled host wall {stages['host_wall_total']:.3f} ms"
        + (f"; CuPy failed: {stages['cublas_error']}" if stages.get("cublas_error") else ""))


def nominal_bandwidth(name: str) -> float | None:
    name = name.lower()
    if "h200" in name:
        return 4.3e12
    if "h100" in name:
        return 3.0e12
    return None


def free_gpu():
    import gc
    gc.collect()
    try:
        import cupy as cp
        cp.get_default_memory_pool().free_all_blocks()
    except Exception:
        pass
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:
        pass


def dense_corpus(n_docs, n_terms, density, seed, dtype=np.float32):
    """Random non-negative rows, L2-normalised, as a dense C-contiguous float32 array."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n_docs, n_terms), dtype)
    step = 65536
    for lo in range(0, n_docs, step):
        hi = min(n_docs, lo + step)
        block = rng.random((hi - lo, n_terms), dtype=np.float32)
        mask = rng.random((hi - lo, n_terms), dtype=np.float32) < density
        block = np.where(mask, block, 0).astype(np.float32)
        norms = np.sqrt((block.astype(np.float64) ** 2).sum(1))
        block /= np.where(norms > 0, norms, 1)[:, None].astype(np.float32)
        X[lo:hi] = block
    return X


def topk_peer(k: int):
    """(name, fn(scores_cupy 2-d) -> (indices, values) on the host) for the peers' top-k."""
    try:
        import torch

        def run(S):
            t = torch.as_tensor(S, device="cuda")
            v, i = torch.topk(t, k, dim=1)
            return i.cpu().numpy(), v.cpu().numpy()
        return "torch.topk", run
    except Exception:
        import cupy as cp

        def run(S):
            part = cp.argpartition(-S, k - 1, axis=1)[:, :k]
            vals = cp.take_along_axis(S, part, 1)
            order = cp.argsort(-vals, axis=1)
            return cp.asnumpy(cp.take_along_axis(part, order, 1)), cp.asnumpy(cp.take_along_axis(vals, order, 1))
        return "cupy.argpartition", run


# ----------------------------------------------------------------------------- 1. one query


MATVEC_CONFIGS = [(256, 32, 1, 4, 1), (256, 32, 1, 8, 1), (256, 64, 1, 4, 1), (512, 64, 1, 8, 1), (128, 32, 1, 8, 1),
                  (256, 32, 1, 4, 2), (256, 32, 1, 4, 4), (256, 32, 1, 8, 2), (256, 16, 1, 4, 4),
                  (256, 32, 1, 8, 4), (256, 32, 1, 4, 8), (512, 32, 1, 4, 4), (128, 32, 1, 4, 4)]  # (..., rows per thread)
# GEMM tiles tried per batch (block queries, block docs, block terms, thread queries, thread docs, warp_docs);
# scripts/gpu_gemm.py sweeps more of them against cuBLAS SGEMM
# (each tile compiles for ~20 s on the host; H200 2026-11-25: these two, the library's defaults, were the
# best of 30 in scripts/gpu_gemm.py, benchmarks/gemm_sweep_h200_1125*.json)
GEMM_CONFIGS = [(128, 128, 16, 8, 8, 0), (64, 128, 8, 8, 8, 0)]


def bench_one_query(args, dev_name, copy_bw):
    from numba import cuda

    from gputext.kernels import dense_knn as kd
    from gputext.knn.dense import DenseGeometry, DenseIndex

    n_docs, n_terms = (100_000, 512) if args.quick else (2_000_000, 1024)
    log(f"[1] one query: X {n_docs:,} x {n_terms} float32 ({n_docs * n_terms * 4 / 2**30:.2f} GiB)")
    X = dense_corpus(n_docs, n_terms, 0.05, seed=1)
    nbytes = X.nbytes
    q = X[12345:12346].copy()
    q[0, :7] += 0.1
    reps = args.repeats
    best = None
    index = DenseIndex(X, "cuda")  # X uploaded once
    dev = index._device_arrays()
    for tpb, tpr, qpp, unroll, rpt in MATVEC_CONFIGS:
        geom = DenseGeometry(matvec_threads=tpb, threads_per_row=tpr, queries_per_pass=qpp, unroll=unroll,
                             matvec_rows=rpt)
        kern = kd.make_matvec_kernel(tpb, tpr, qpp, unroll, False, rpt)
        qd = cuda.to_device(q)
        rq = cuda.to_device(np.ones(1, np.float32))
        keys = cuda.device_array((1, n_docs), np.float32)
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
        blocks = min(-(-n_docs // ((tpb // tpr) * rpt)), 8 * sms)
        ms = gpu_ms(lambda: kern[blocks, tpb](dev["X"], qd, 1, rq, dev["rd"], dev["half"], 0, keys), reps)
        log(f"    matvec tpb={tpb} tpr={tpr} unroll={unroll} rows/thread={rpt}: {ms:.3f} ms, {nbytes / ms / 1e6:.0f} GB/s")
        if best is None or ms < best[0]:
            best = (ms, geom)
    kernel_ms, geom = best
    from dataclasses import replace
    geom = replace(geom, key_backend="numba")
    index.geometry = geom
    search_ms = gpu_ms(lambda: index.search(q, 30), reps)
    stages_numba = stage_breakdown(index, q, 30, reps)
    replay = kernel_replay(index, q, 30)
    n_sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    variants = select_variants("one query", index, q, 30, reps, n_sms)
    index.geometry = replace(geom, key_backend="cublas")
    search_cublas_ms = gpu_ms(lambda: index.search(q, 30), reps)
    stages_cublas = stage_breakdown(index, q, 30, reps)
    index.geometry = replace(geom, key_backend="auto")
    search_auto_ms = gpu_ms(lambda: index.search(q, 30), reps)
    auto_kernel = index.last_run.get("kernel")
    index.geometry = geom
    import cupy as cp
    Xc = cp.asarray(X)
    norms = cp.sqrt((Xc.astype(cp.float64) ** 2).sum(1)).astype(cp.float32)
    inv = cp.where(norms > 0, 1 / cp.where(norms > 0, norms, 1), 0).astype(cp.float32)
    qc = cp.asarray(q[0])
    gemv_ms = gpu_ms(lambda: Xc @ qc, reps)
    name, topk = topk_peer(30)

    def peer():
        qd = cp.asarray(q[0])
        s = (Xc @ qd) * inv * (1 / float(np.linalg.norm(q[0])))
        return topk(s[None, :])
    peer_ms = gpu_ms(peer, reps)
    ours = index.search(q, 30)
    theirs = peer()
    agree = float(np.mean(np.isin(ours[0][0], theirs[0][0])))
    nominal = nominal_bandwidth(dev_name)
    RESULTS["sections"]["one_query"] = dict(n_docs=n_docs, n_terms=n_terms, bytes=nbytes, kernel_ms=kernel_ms,
                                            geometry=str(geom), search_ms=search_ms, cublas_gemv_ms=gemv_ms,
                                            peer_ms=peer_ms, peer_topk=name, overlap_with_peer=agree,
                                            search_cublas_keys_ms=search_cublas_ms,
                                            search_auto_ms=search_auto_ms, auto_keys=auto_kernel,
                                            stages_numba_keys=stages_numba, stages_cublas_keys=stages_cublas,
                                            kernels_alone=replay, selection_variants=variants, escalated=index.last_run.get("escalated"))
    frac = lambda ms: f"{nbytes / (ms / 1e3) / copy_bw:.0%} of copy" + (f", {nbytes / (ms / 1e3) / nominal:.0%} of nominal" if nominal else "")  # noqa: E731
    row("one query", "matvec kernel (keys only)", f"{kernel_ms:.3f} ms = {nbytes / kernel_ms / 1e6:.0f} GB/s", frac(kernel_ms))
    row("one query", "cuBLAS gemv (CuPy)", f"{gemv_ms:.3f} ms = {nbytes / gemv_ms / 1e6:.0f} GB/s", frac(gemv_ms))
    row("one query", "kernel vs cuBLAS bandwidth", f"{gemv_ms / kernel_ms:.2f}x", "goal >= 0.9x")
    row("one query", "our exact search, top-30 to host", f"{search_ms:.3f} ms", frac(search_ms))
    row("one query", f"cuBLAS gemv + cosine + {name} to host", f"{peer_ms:.3f} ms", frac(peer_ms))
    row("one query", "search vs peer, top-k included", f"{peer_ms / search_ms:.2f}x", f"goal >= 0.9x; top-30 overlap with peer {agree:.0%}")
    row("one query", "our exact search with cuBLAS keys (key_backend='cublas')", f"{search_cublas_ms:.3f} ms",
        f"{peer_ms / search_cublas_ms:.2f}x the peer: the cost of exactness (select, float64 rescoring, certificate)")
    row("one query", "our exact search, default key_backend='auto'", f"{search_auto_ms:.3f} ms",
        f"{peer_ms / search_auto_ms:.2f}x the peer; keys by {auto_kernel}")
    breakdown_rows("one query", "our keys", stages_numba)
    breakdown_rows("one query", "cuBLAS keys", stages_cublas)
    replay_row("one query", replay)
    del Xc, index
    free_gpu()
    return X


# ----------------------------------------------------------------------------- 2. batches


def bench_batches(args, dev_name):
    from numba import cuda

    from gputext.kernels import dense_knn as kd
    from gputext.knn.dense import DenseGeometry, DenseIndex

    n_docs, n_terms = (50_000, 256) if args.quick else (500_000, 1024)
    sizes = (64,) if args.quick else (64, 256, 1024)
    log(f"[2] batches: X {n_docs:,} x {n_terms} float32 ({n_docs * n_terms * 4 / 2**30:.2f} GiB), queries {sizes}")
    X = dense_corpus(n_docs, n_terms, 0.05, seed=2)
    import cupy as cp  # float32 matmul: cuBLAS SGEMM (TF32 only if CUPY_TF32=1 is set, which we do not)
    Xc = cp.asarray(X)
    inv = 1 / cp.sqrt((Xc * Xc).sum(1))
    name, topk = topk_peer(30)
    base = DenseGeometry(keys_bytes=4 << 30, query_bytes=1 << 30)
    index = DenseIndex(X, "cuda", base)
    dev = index._device_arrays()
    rng = np.random.default_rng(3)
    out = {}
    best_geom = None
    for nq in sizes:
        Q = np.ascontiguousarray(X[rng.choice(n_docs, nq, replace=False)])
        Q[:, :5] += 0.05
        flops = 2.0 * nq * n_docs * n_terms
        Qd = cuda.to_device(Q)
        rq = cuda.to_device((1 / np.linalg.norm(Q, axis=1)).astype(np.float32))
        keys = cuda.device_array((nq, n_docs), np.float32)
        best = None
        for bm, bn, bk, tm, tn, wx in GEMM_CONFIGS:
            kern = kd.make_gemm_kernel(bm, bn, bk, tm, tn, False, True, 0, wx)
            grid, threads = kd.gemm_launch(bm, bn, tm, tn, nq, n_docs)
            ms = gpu_ms(lambda: kern[grid, threads](dev["X"], Qd, nq, rq, dev["rd"], dev["half"], 0, keys),
                        max(3, args.repeats // 2))
            log(f"    nq={nq} gemm {bm}x{bn}x{bk}/{tm}x{tn} w{wx}: {ms:.3f} ms = {flops / ms / 1e9:.1f} TFLOP/s")
            if best is None or ms < best[0]:
                best = (ms, (bm, bn, bk, tm, tn, wx))
        kernel_ms, tile = best
        from dataclasses import replace
        # the library's default geometry (no tuning), our keys
        index.geometry = DenseGeometry(keys_bytes=4 << 30, query_bytes=1 << 30, key_backend="numba")
        search_default_ms = gpu_ms(lambda: index.search(Q, 30), args.repeats)
        default_kernel = index.last_run.get("kernel")
        index.geometry = replace(index.geometry, gemm_tile=tile, gemm_small_tile=tile)
        best_geom = index.geometry
        search_ms = gpu_ms(lambda: index.search(Q, 30), args.repeats)
        stages_numba = stage_breakdown(index, Q, 30, max(3, args.repeats // 3))
        replay = kernel_replay(index, Q, 30, n=8)
        variants = select_variants(f"{nq} queries", index, Q, 30, max(3, args.repeats // 3),
                                   cuda.get_current_device().MULTIPROCESSOR_COUNT)
        index.geometry = replace(best_geom, key_backend="cublas")
        search_cublas_ms = gpu_ms(lambda: index.search(Q, 30), args.repeats)
        stages_cublas = stage_breakdown(index, Q, 30, max(3, args.repeats // 3))
        index.geometry = best_geom
        Qc = cp.asarray(Q)
        gemm_ms = gpu_ms(lambda: Qc @ Xc.T, args.repeats)
        qinv = 1 / cp.sqrt((Qc * Qc).sum(1))

        def peer():
            Qd2 = cp.asarray(Q)
            S = (Qd2 @ Xc.T) * qinv[:, None] * inv[None, :]
            return topk(S)
        peer_ms = gpu_ms(peer, args.repeats)
        ours = index.search(Q, 30)
        theirs = peer()
        agree = float(np.mean([np.isin(a, b).mean() for a, b in zip(ours[0], theirs[0])]))
        out[nq] = dict(kernel_ms=kernel_ms, tile=tile, search_ms=search_ms, cublas_gemm_ms=gemm_ms, peer_ms=peer_ms,
                       search_default_geometry_ms=search_default_ms, default_geometry_kernel=default_kernel,
                       search_cublas_keys_ms=search_cublas_ms, stages_numba_keys=stages_numba,
                       stages_cublas_keys=stages_cublas, kernels_alone=replay, selection_variants=variants,
                       escalated=index.last_run.get("escalated"), overlap_with_peer=agree)
        row(f"{nq} queries", f"GEMM kernel {tile} (keys only)", f"{kernel_ms:.2f} ms = {flops / kernel_ms / 1e9:.1f} TFLOP/s")
        row(f"{nq} queries", "cuBLAS SGEMM (CuPy)", f"{gemm_ms:.2f} ms = {flops / gemm_ms / 1e9:.1f} TFLOP/s")
        row(f"{nq} queries", "kernel vs cuBLAS GEMM", f"{gemm_ms / kernel_ms:.2f}x")
        row(f"{nq} queries", "our exact search, top-30 to host", f"{search_ms:.2f} ms = {flops / search_ms / 1e9:.1f} TFLOP/s")
        row(f"{nq} queries", f"SGEMM + cosine + {name} to host", f"{peer_ms:.2f} ms = {flops / peer_ms / 1e9:.1f} TFLOP/s")
        row(f"{nq} queries", "search vs peer, top-k included", f"{peer_ms / search_ms:.2f}x",
            f"goal >= 0.8x; top-30 overlap {agree:.0%}; escalated queries {index.last_run.get('escalated')}")
        row(f"{nq} queries", "our exact search, our keys, the library's default geometry",
            f"{search_default_ms:.2f} ms", f"{peer_ms / search_default_ms:.2f}x the peer; keys by {default_kernel}; goal >= 0.8x")
        row(f"{nq} queries", "our exact search with cuBLAS keys (the default when CuPy imports)", f"{search_cublas_ms:.2f} ms",
            f"{peer_ms / search_cublas_ms:.2f}x the peer; goal >= 0.8x")
        breakdown_rows(f"{nq} queries", "our keys", stages_numba)
        breakdown_rows(f"{nq} queries", "cuBLAS keys", stages_cublas)
        replay_row(f"{nq} queries", replay)
        del keys, Qc
        free_gpu()
    RESULTS["sections"]["batches"] = dict(n_docs=n_docs, n_terms=n_terms, peer_topk=name, runs=out)
    del Xc, index
    free_gpu()
    return best_geom


# ----------------------------------------------------------------------------- 3. exactness


def exactness(args, tuned, has_gpu):
    from gputext.knn.dense import DenseGeometry, DenseIndex

    n_docs, n_terms = (20_000, 300) if args.quick else (200_000, 700)
    log(f"[3] exactness: {n_docs:,} x {n_terms}, GPU vs CPU twin (bit for bit) and float64 reference")
    X = dense_corpus(n_docs, n_terms, 0.05, seed=4)
    X[7] = X[3]  # duplicate rows: ties
    rng = np.random.default_rng(5)
    # (our GEMM keys: 40 and 64 queries take the small-batch tile, 100 and 200 the large one)
    cases = [("cosine", 8), ("cosine", 64), ("l2", 64), ("l1", 8), ("dot", 40), ("l2", 200), ("l1", 100)]
    cpu = DenseIndex(X, "cpu")
    ok_all = True
    results = []
    for metric, nq in cases:
        Q = np.ascontiguousarray(X[rng.choice(n_docs, nq, replace=False)])
        Q[:, ::17] *= 0.5
        t = time.perf_counter()
        want = cpu.search(Q, 30, metric)
        cpu_s = time.perf_counter() - t
        ref_ok = _reference_ok(X, Q[:3], want, metric)
        entry = {"metric": metric, "queries": nq, "cpu_seconds": cpu_s, "reference_ok": ref_ok}
        if has_gpu:
            for label, geom in (("default", DenseGeometry()), ("tuned", tuned),
                                ("numba_keys", DenseGeometry(key_backend="numba")),
                                ("cublas_keys", DenseGeometry(key_backend="cublas"))):
                if geom is None:
                    continue
                gpu = DenseIndex(X, "cuda", geom)
                got = gpu.search(Q, 30, metric)
                same = bool(np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1], equal_nan=True))
                entry[f"gpu_{label}_identical"] = same
                entry[f"gpu_{label}_path"] = gpu.last_run.get("kernel")
                entry[f"gpu_{label}_escalated"] = gpu.last_run.get("escalated")
                ok_all &= same
                del gpu
        ok_all &= ref_ok
        results.append(entry)
        log(f"    {entry}")
    RESULTS["sections"]["exactness"] = dict(n_docs=n_docs, n_terms=n_terms, cases=results)
    row("exactness", f"dense search {n_docs:,} x {n_terms}, {len(cases)} cases",
        "identical to CPU twin and float64 reference" if ok_all else "MISMATCH (see JSON)",
        "GPU default + tuned geometries" if has_gpu else "CPU twin vs reference only")
    free_gpu()


def _reference_ok(X, Q, got, metric) -> bool:
    """Float64 NumPy reference for a few queries: scores within float32 rounding, indices equal
    except inside groups of (nearly) tied scores."""
    A, B = X.astype(np.float64), Q.astype(np.float64)
    if metric in ("cosine", "dot"):
        S = B @ A.T
        if metric == "cosine":
            S /= np.outer(np.linalg.norm(B, axis=1), np.linalg.norm(A, axis=1))
        order = np.argsort(-S, axis=1, kind="stable")[:, :30]
    elif metric == "l2":
        S = np.sqrt(np.maximum((B * B).sum(1)[:, None] + (A * A).sum(1)[None] - 2 * B @ A.T, 0))
        order = np.argsort(S, axis=1, kind="stable")[:, :30]
    else:
        S = np.stack([np.abs(A - b).sum(1) for b in B])
        order = np.argsort(S, axis=1, kind="stable")[:, :30]
    ref = np.take_along_axis(S, order, 1).astype(np.float32)
    if not np.allclose(got[1][: len(Q)], ref, rtol=2e-6, atol=1e-6):
        return False
    for i in range(len(Q)):
        for j in range(30):
            if got[0][i, j] != order[i, j] and np.isclose(ref[i], ref[i, j], rtol=1e-6).sum() < 2:
                return False
    return True


# ----------------------------------------------------------------------------- 4./5. real data


def corpora(args):
    from table_metafeatures import build, datasets_dir
    cache = Path(tempfile.gettempdir()) / "gputext_knn_classify_corpora"
    ddir = datasets_dir(args.datasets)
    return {name: build(name, ddir, cache, args.quick) for name in ("20ng", "cnae9")}


def metafeatures(args, files, has_gpu):
    import numba

    from gputext.io import read_corpus
    from gputext.knn.metafeatures import compute_metafeatures

    tr, te = files["20ng"]
    train, test = read_corpus(tr), read_corpus(te)
    y = np.asarray(train.labels.codes)
    C = len(train.labels.categories)
    log(f"[4] meta-features, 20NG{' (quick subset)' if args.quick else ''}: {train.n_docs:,} train (leave-one-out) + "
        f"{test.n_docs:,} test, {C} classes, k = 30")
    out = {}
    devices = (["cuda"] if has_gpu else []) + ["cpu"]
    for device in devices:
        compute_metafeatures(train.X[:300], y[:300], C, test.X[:30], k=30, method="inverted", device=device)  # warm-up
        t = time.perf_counter()
        mf = compute_metafeatures(train.X, y, C, test.X, k=30, method="inverted", device=device)
        out[device] = (time.perf_counter() - t, mf)
        log(f"    {device}: {out[device][0]:.2f} s")
    cpu_s, cpu_mf = out["cpu"]
    sec = {"n_train": train.n_docs, "n_test": test.n_docs, "cpu_seconds": cpu_s, "cpu_threads": numba.get_num_threads()}
    row("meta-features 20NG", f"CPU twin ({numba.get_num_threads()} threads)", f"{cpu_s:.2f} s")
    if has_gpu:
        gpu_s, gpu_mf = out["cuda"]
        same = bool(np.array_equal(gpu_mf.train, cpu_mf.train) and np.array_equal(gpu_mf.queries, cpu_mf.queries))
        sec.update(gpu_seconds=gpu_s, speedup=cpu_s / gpu_s, identical=same)
        row("meta-features 20NG", "GPU (engine, grouped selector)", f"{gpu_s:.2f} s", "goal < 10 s on an H100")
        row("meta-features 20NG", "GPU vs CPU twin", f"{cpu_s / gpu_s:.1f}x", "goal >= 20x")
        row("meta-features 20NG", "GPU = CPU twin", "identical" if same else
            f"DIFFERENT (max {max(np.abs(gpu_mf.train - cpu_mf.train).max(), np.abs(gpu_mf.queries - cpu_mf.queries).max()):.2e})")
    RESULTS["sections"]["metafeatures_20ng"] = sec


def method_auto(args, files, has_gpu):
    from gputext.engine import Index, search_topk
    from gputext.io import read_corpus
    from gputext.knn.dense import DenseIndex, dense_fits

    log("[5] --method auto: dense vs inverted search (k = 30, test vs train)")
    device = "cuda" if has_gpu else "cpu"
    sec = {}
    for name, (tr, te) in files.items():
        train, test = read_corpus(tr), read_corpus(te)
        free = None
        if has_gpu:
            from numba import cuda
            free = cuda.current_context().get_memory_info()[0]
        choice, reason = dense_fits(train.n_docs, train.n_terms, free, nnz=train.X.nnz)
        entry = {"auto": choice, "reason": reason}
        if train.n_docs * train.n_terms * 4 <= (4 << 30):
            dense = DenseIndex(train.X, device)
            dense.search(test.X[:10], 30)
            t = time.perf_counter()
            a = dense.search(test.X, 30)
            entry["dense_s"] = time.perf_counter() - t
        index = Index.from_corpus(train)
        search_topk(index, test.X[:10], 30, "cosine", device)
        t = time.perf_counter()
        b = search_topk(index, test.X, 30, "cosine", device)
        entry["inverted_s"] = time.perf_counter() - t
        if "dense_s" in entry:
            entry["same_neighbours"] = float(np.mean(a[0] == b[0]))
        sec[name] = entry
        row("method auto", f"{name}: dense / inverted", f"{entry.get('dense_s', float('nan')):.3f} s / {entry['inverted_s']:.3f} s",
            f"auto -> {'dense' if choice else 'inverted'}; same neighbours {entry.get('same_neighbours', float('nan')):.2%}")
    RESULTS["sections"]["method_auto"] = sec


# ----------------------------------------------------------------------------- main


def main():
    ap = harness.parser(__doc__)
    ap.add_argument("--datasets", help="folder with 20newsgroups/ and cnae9/")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--skip", default="", help="comma list of sections to skip: one,batches,exact,meta,auto")
    args = ap.parse_args()
    args.repeats = args.repeats or (5 if args.quick else 15)
    skip = set(filter(None, args.skip.split(",")))

    from gputext.backend import resolve
    backend = resolve(args.device)
    has_gpu = backend.is_cuda and not backend.simulator
    env = harness.probe(backend)
    dev_name = env.get("gpu", backend.reason)
    RESULTS.update(device=dev_name, host=env["host"], cpu_count=env["cpu_count"], quick=args.quick, date=env["date"],
                   command=" ".join(sys.argv), env=env)
    log(f"device: {backend.describe()}; {env['cpu_count']} CPU cores")
    t0 = time.perf_counter()
    tuned = None
    if has_gpu:
        copy_bw = harness.copy_bandwidth(1 << 30, args.repeats)
        RESULTS["copy_bandwidth"] = copy_bw
        row("device", "device-to-device copy", f"{copy_bw / 1e9:.0f} GB/s", dev_name)
        if "one" not in skip:
            bench_one_query(args, dev_name, copy_bw)
        if "batches" not in skip:
            tuned = bench_batches(args, dev_name)
    else:
        row("device", "no GPU", "GPU benchmarks skipped", backend.reason)
    if "exact" not in skip:
        exactness(args, tuned, has_gpu)
    files = corpora(args) if not ({"meta", "auto"} <= skip) else {}
    if "meta" not in skip:
        metafeatures(args, files, has_gpu)
    if "auto" not in skip:
        method_auto(args, files, has_gpu)
    RESULTS["seconds"] = time.perf_counter() - t0
    REPORT.write_table(args.out, "gpu_knn_classify")


if __name__ == "__main__":
    main()
