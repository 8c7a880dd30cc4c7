#!/usr/bin/env python3
"""GPU round for overlapping star clustering (OClustR / CUDA-OClus, DClustR / CUDA-DClus).

One run, on the GPU host (numba-cuda kernels + the engine's CUDA path), with peers measured in the
same run:

  1. exactness at size, per preset (--presets; default reu-70k, the paper's tf weighting, and
     reu-70k-tfidf, the same corpus shape with a much sparser graph): clustered on cuda and by the
     CPU twin (numba, all cores): graph (indptr, indices, weights), relevance and clusters must be
     identical, bit for bit.  Per-stage breakdown of the device graph build from CUDA events
     (index, scoring, counting, writing, csr, relevance, transfer) and of the cover.
  2. speed: graph + relevance, GPU vs CPU twin (goal >= 50x at 70,000 documents); the whole
     clustering (graph, relevance, cover, improvement; no file I/O) on the GPU (goal <= 5 s on an
     H100); medians of --repeats runs after a warm-up.  The relevance kernel alone is timed with
     CUDA events; its bandwidth = bytes it must move (indptr, indices, the degree and AIS of every
     neighbour, outputs) / time, as a fraction of a device-to-device copy measured in the run
     (H100 ~3.0 TB/s, H200 ~4.3 TB/s).
  3. peers for the thresholded cosine graph (all pairs with cos >= beta): CuPy cuSPARSE SpGEMM of
     row blocks of the L2-normalised matrix against its transpose, PyTorch sparse CSR x CSR on
     the GPU, scikit-learn radius_neighbors_graph (cosine, n_jobs=-1) on the CPU at a smaller
     size; edge counts are compared with ours (the peers compute in float32 and find a few pairs
     just below beta; ours equal a float64 brute force, tests/test_star.py).
  4. 100,000+ documents (default 120,000, Reu-70K shape) on the GPU without running out of
     device memory.
  5. DClustR: cluster 50,000 documents, add 10,000 (and 5,000) with `update`, against a full
     recluster of the union (goal: update <= 1/5 of the full recluster's time); agreement
     (FBcubed, overlapping NMI) of the update with the recluster and with the labels.

  python scripts/gpu_star.py --quick --device cpu     # smoke test anywhere (< 1 minute)
  python scripts/gpu_star.py --quick                   # small, on the GPU
  python scripts/gpu_star.py --out out/gpu             # full (about 6 minutes on an H100)

Prints a markdown table last and writes gpu_star.json into --out (default $OUT or out/).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

warnings.filterwarnings("ignore")
log, median = harness.log, harness.median


def parse_args():
    p = harness.parser(__doc__)
    p.add_argument("--beta", type=float, default=0.25)
    p.add_argument("--docs", type=int, help="documents of the main corpus (default 70000; quick 4000)")
    p.add_argument("--big-docs", type=int, help="documents of the large run (default 120000; quick 8000)")
    p.add_argument("--update-base", type=int, help="documents clustered before additions (default 50000; quick 3000)")
    p.add_argument("--adds", help="additions, comma-separated (default 5000,10000; quick 500,1000)")
    p.add_argument("--sklearn-docs", type=int, help="documents for the scikit-learn peer (default 20000; quick 2000)")
    p.add_argument("--peers", default="cupy,torch,sklearn")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-cpu", action="store_true", help="no CPU twin at the main size (no exactness check)")
    p.add_argument("--presets", default="reu-70k,reu-70k-tfidf",
                   help="corpus presets of the main comparison, comma-separated (the first also runs the large, "
                        "scikit-learn and update parts); default: the paper's Reu-70K shape (tf weighting, 7.6%% of "
                        "pairs are edges at beta 0.25) and the same shape with tf-idf (a sparse graph)")
    p.add_argument("--skip-update", action="store_true", help="no DClustR update benchmark")
    p.add_argument("--sweep", action="store_true",
                   help="graph variants on the first preset: host-side index build, no page prefault, 8 / 128 MiB staging, eager weights")
    p.add_argument("--skip-extras", action="store_true",
                   help="no previous-path (engine selector) run and no pageable/pinned transfer runs")
    args = p.parse_args()
    q = args.quick
    args.docs = args.docs or (4000 if q else 70000)
    args.big_docs = args.big_docs or (8000 if q else 120000)
    args.update_base = args.update_base or (3000 if q else 50000)
    args.adds = [int(x) for x in (args.adds or ("500,1000" if q else "5000,10000")).split(",")]
    args.sklearn_docs = args.sklearn_docs or (2000 if q else 20000)
    return args


def reu_corpus(n_docs, seed=0, preset="reu-70k"):
    from gputext.datasets.presets import resolve
    from gputext.datasets.synth import make_corpus
    _, params = resolve(preset, n_docs=n_docs)
    return make_corpus(seed=seed, **params)


def device_info(backend):
    info = harness.probe(backend, copy_bytes=1 << 30)
    gbps = info.get("copy_bytes_per_s")
    gpu = info.get("gpu")
    return {**info, "cpu_threads": info["numba_threads"], "gpu": gpu, "copy_gbps": gbps / 1e9 if gbps else None,
            "nominal_gbps": 3000.0 if "H100" in (gpu or "") else 4300.0 if "H200" in (gpu or "") else None}


def same_result(a, b):
    """Bitwise identity of two StarResults (graph, relevance, clusters)."""
    checks = {
        "graph": (np.array_equal(a.graph.indptr, b.graph.indptr) and np.array_equal(a.graph.indices, b.graph.indices)
                  and np.array_equal(a.graph.weights, b.graph.weights)),
        "relevance": np.array_equal(a.relevance, b.relevance),
        "centers": np.array_equal(a.centers, b.centers),
        "membership": a.membership.shape == b.membership.shape and (a.membership != b.membership).nnz == 0,
    }
    return all(checks.values()), checks


STAGES = ("index", "scoring", "counting", "writing", "release", "csr", "relevance", "transfer", "host_assembly")
INDEX_PARTS = ("index_slice", "index_build", "index_query_stats")  # parts of "index" (graph_cuda._fold)


def stage_times(stats):
    """Per-stage seconds of one cluster_star run: CUDA events for the device graph build
    (graph_device_seconds; host clock for a host assembly), host clock for the CPU twin."""
    if stats.get("graph_device_graph"):
        dev = dict(stats.get("graph_device_seconds") or {})
        host = stats.get("graph_host_seconds") or {}
        if not dev:  # simulator: no event timings
            dev = dict(host)
        if "host_assembly" in host:
            dev["host_assembly"] = host["host_assembly"]
        out = {k: dev.get(k, 0.0) for k in STAGES + INDEX_PARTS}
        out["host_relevance"] = stats["seconds_relevance"]
    else:
        out = {k: 0.0 for k in STAGES}
        out["scoring"] = stats.get("graph_seconds_scoring", 0.0)
        out["host_assembly"] = stats.get("graph_seconds_assembly", 0.0)
        out["relevance"] = stats["seconds_relevance"]
    out["cover"] = stats["seconds_cover"]
    return out


def time_cluster(X, beta, backend, repeats):
    from gputext.cluster.star import cluster_star
    runs = []
    result = None
    for _ in range(repeats):
        result = cluster_star(X, beta, backend)
        s = result.stats
        runs.append({"total": s["seconds_total"], "graph": s["seconds_graph"], "relevance": s["seconds_relevance"],
                     "cover": s["seconds_cover"], "stages": stage_times(s)})
    med = {k: median([r[k] for r in runs]) for k in runs[0] if k != "stages"}
    med["graph_relevance"] = median([r["graph"] + r["relevance"] for r in runs])
    med["stages"] = {k: median([r["stages"][k] for r in runs]) for k in runs[0]["stages"]}
    med["assembly"] = result.stats.get("graph_assembly")
    med["spills"] = result.stats.get("graph_spills", 0)
    return result, med


def relevance_events(graph, repeats=10, lanes=32, vertices=8):
    """The relevance kernel alone, CUDA events, device-resident inputs: (seconds, bytes moved)."""
    from numba import cuda
    from gputext.kernels import star as kstar
    n = graph.n
    kernel = kstar.relevance_kernel(lanes, vertices)
    d = [cuda.to_device(x) for x in (graph.indptr, graph.indices, graph.degree, graph.ais)]
    count = cuda.device_array(n, np.int32)
    rel = cuda.device_array(n, np.float64)
    blocks = max(1, min(65536, (n + vertices - 1) // vertices))
    ms = harness.gpu_ms(lambda: kernel[blocks, (lanes, vertices)](*d, count, rel), repeats, warmup=1)
    nnz = int(graph.indptr[-1])
    moved = 8 * (n + 1) + nnz * (4 + 4 + 8) + n * (4 + 8) + n * (4 + 8)
    return ms / 1e3, moved


def upper_edge_count(graph):
    coo = graph.to_scipy().tocoo()
    return int((coo.row < coo.col).sum())


def normalized(X):
    X = sp.csr_matrix(X, dtype=np.float32)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1
    return sp.csr_matrix(sp.diags(1.0 / norms).astype(np.float32) @ X, dtype=np.float32)


@harness.peer("star.cupy", needs=("cupy",), gpu=True)
def peer_cupy(X, beta, block=2048, repeats=2):
    """CuPy cuSPARSE SpGEMM of row blocks of the L2-normalised matrix against its transpose."""
    import cupy as cp
    import cupyx.scipy.sparse as cpsp
    Xn = normalized(X)
    A = cpsp.csr_matrix(Xn)
    AT = cpsp.csr_matrix(Xn.T.tocsr())
    n = Xn.shape[0]
    edges = []

    def run():
        count = 0
        for lo in range(0, n, block):
            hi = min(n, lo + block)
            S = A[lo:hi] @ AT
            rows = cp.repeat(cp.arange(lo, hi, dtype=cp.int32), cp.diff(S.indptr).astype(cp.int64))
            count += int(((S.data >= beta) & (S.indices > rows)).sum())
            del S, rows
        edges.append(count)

    ms = harness.gpu_ms(run, repeats, warmup=1, clock="cupy")
    cp.get_default_memory_pool().free_all_blocks()
    return {"seconds": ms / 1e3, "edges": edges[-1]}


@harness.peer("star.torch", needs=("torch",), gpu=True)
def peer_torch(X, beta, block=2048, repeats=2):
    """PyTorch sparse CSR x CSR (torch.sparse.mm) of row blocks against the transpose."""
    import torch
    Xn = normalized(X)
    n = Xn.shape[0]
    dev = torch.device("cuda")

    def csr(M):
        M = sp.csr_matrix(M)
        return torch.sparse_csr_tensor(torch.from_numpy(M.indptr.astype(np.int64)), torch.from_numpy(M.indices.astype(np.int64)),
                                       torch.from_numpy(M.data), size=M.shape, device=dev)

    B = csr(Xn.T.tocsr())
    blocks = [csr(Xn[lo:min(n, lo + block)]) for lo in range(0, n, block)]
    edges = []

    def run():
        count = 0
        for b, A in enumerate(blocks):
            S = torch.sparse.mm(A, B).to_sparse_coo().coalesce()
            r, c = S.indices()
            count += int(((S.values() >= beta) & (c > r + b * block)).sum())
        edges.append(count)

    ms = harness.gpu_ms(run, repeats, warmup=1, clock="torch")
    del blocks, B
    torch.cuda.empty_cache()
    return {"seconds": ms / 1e3, "edges": edges[-1]}


@harness.peer("star.sklearn", needs=("sklearn",))
def peer_sklearn(X, beta):
    """scikit-learn radius_neighbors_graph (cosine, n_jobs=-1) on the CPU."""
    from sklearn.neighbors import radius_neighbors_graph
    t = time.perf_counter()
    G = radius_neighbors_graph(X, radius=1.0 - beta, metric="cosine", mode="distance", n_jobs=-1)
    seconds = time.perf_counter() - t
    coo = G.tocoo()
    return {"seconds": seconds, "edges": int((coo.row < coo.col).sum())}


def update_benchmark(args, backend, tmp, preset):
    """Cluster update_base documents, add N, compare with a full recluster of the union."""
    from gputext.cluster import dclus, metrics
    from gputext.cluster.star import cluster_star
    from gpu_dclus import write_additions

    from gputext.io import read_corpus
    out = []
    total = args.update_base + max(args.adds)
    whole = reu_corpus(total, seed=2, preset=preset.replace("70k", "50k"))
    base = whole.take(np.arange(args.update_base))
    base_path = os.path.join(tmp, "base.h5")
    t = time.perf_counter()
    res = cluster_star(base.X, args.beta, backend)
    dclus.write_result(base, res, base_path, args.beta, backend.name, compression=None)
    log(f"update: base of {args.update_base} clustered and written in {time.perf_counter() - t:.2f} s")
    for n_add in args.adds:
        _, union, add_path, union_path = write_additions(whole, args.update_base, n_add, tmp)
        upd_runs, full_runs = [], []
        for rep in range(max(1, args.repeats - 1)):
            t0 = time.perf_counter()
            added = read_corpus(add_path)
            rep_ = dclus.update(base_path, added, os.path.join(tmp, "updated.h5"), backend, compression=None)
            t1 = time.perf_counter()
            st = rep_.stats
            upd_runs.append({"total": t1 - t0, "compute": st["seconds_scoring"] + st["seconds_load"] + st["seconds_cluster"],
                             "scoring": st["seconds_scoring"], "load": st["seconds_load"], "cluster": st["seconds_cluster"],
                             "write": st["seconds_write"]})
            t0 = time.perf_counter()
            u = read_corpus(union_path)
            full = cluster_star(u.X, args.beta, backend)
            dclus.write_result(u, full, os.path.join(tmp, "full.h5"), args.beta, backend.name, compression=None)
            full_runs.append({"total": time.perf_counter() - t0, "compute": full.stats["seconds_total"]})
        upd = {k: median([r[k] for r in upd_runs]) for k in upd_runs[0]}
        fl = {k: median([r[k] for r in full_runs]) for k in full_runs[0]}
        updated = metrics.load_clustering(os.path.join(tmp, "updated.h5"), "clusters")
        full_c = metrics.load_clustering(os.path.join(tmp, "full.h5"), "clusters")
        agree_f = metrics.fbcubed(updated.membership, full_c.membership)["f"]
        agree_n = metrics.onmi(updated.membership, full_c.membership)
        truth = union.obsm.get("labels", union.obs["label"])
        q_upd = metrics.fbcubed(updated.membership, truth)["f"]
        q_full = metrics.fbcubed(full_c.membership, truth)["f"]
        row = {"n_base": args.update_base, "n_add": n_add, "update": upd, "full": fl,
               "ratio_total": upd["total"] / fl["total"], "ratio_compute": upd["compute"] / fl["compute"],
               "components_touched": rep_.components_touched, "components_total": rep_.components_total,
               "pccs_loaded": rep_.pccs_loaded, "pccs_total": rep_.pccs_total, "vertices_loaded": rep_.vertices_loaded,
               "new_edges": rep_.n_new_edges, "clusters_update": rep_.n_clusters, "clusters_full": full.n_clusters,
               "agreement_fbcubed": agree_f, "agreement_onmi_lfk": agree_n["lfk"], "agreement_onmi_max": agree_n["max"],
               "fbcubed_vs_labels_update": q_upd, "fbcubed_vs_labels_full": q_full}
        log(f"update +{n_add}: {upd['total']:.2f} s vs full {fl['total']:.2f} s (ratio {row['ratio_total']:.3f}); "
            f"touched {rep_.components_touched}/{rep_.components_total} components")
        out.append(row)
    return out


def run_preset(args, preset, first, backend, cpu, gpu, env, goals):
    """Exactness and speed on one preset at args.docs documents, with the graph peers."""
    t = time.perf_counter()
    corpus = reu_corpus(args.docs, seed=0, preset=preset)
    X = corpus.X
    log(f"[{preset}] corpus: {X.shape[0]} docs, {X.nnz} nnz ({time.perf_counter() - t:.1f} s to generate)")
    dev_res, dev_t = time_cluster(X, args.beta, backend, args.repeats if gpu else 1)
    n = X.shape[0]
    main = {"preset": preset, "docs": n, "nnz": int(X.nnz), "edges": dev_res.graph.n_edges,
            "density": dev_res.graph.n_edges / max(1, n * (n - 1) // 2), "clusters": dev_res.n_clusters,
            "isolated": dev_res.stats["n_isolated"], backend.name: dev_t}
    log(f"[{preset}] {backend.name}: {dev_t}")
    if not dev_res.graph.weights_on_host:  # weights left on the device: the copy the clustering did not need
        t = time.perf_counter()
        dev_res.graph.weights
        main["weights_fetch"] = {"seconds": time.perf_counter() - t, "bytes": 4 * int(dev_res.graph.indptr[-1])}
        main["graph_relevance_with_weights"] = dev_t["graph_relevance"] + main["weights_fetch"]["seconds"]
        log(f"[{preset}] weights fetched afterwards: {main['weights_fetch']}")
    if gpu and not args.skip_cpu:
        cpu_res, cpu_t = time_cluster(X, args.beta, cpu, 1)
        main["cpu"] = cpu_t
        ok, checks = same_result(dev_res, cpu_res)
        main["identical"] = ok
        main["checks"] = checks
        main["speedup_graph_relevance"] = cpu_t["graph_relevance"] / dev_t["graph_relevance"]
        main["speedup_total"] = cpu_t["total"] / dev_t["total"]
        if "graph_relevance_with_weights" in main:
            main["speedup_graph_relevance_with_weights"] = cpu_t["graph_relevance"] / main["graph_relevance_with_weights"]
        log(f"[{preset}] cpu twin: {cpu_t}; identical: {checks}")
        del cpu_res
        goals.append((f"[{preset}] GPU == CPU twin at {n} docs (graph, relevance, clusters)", "identical",
                      "yes" if ok else f"NO {checks}", ok))
        if n >= 70000:
            goals.append((f"[{preset}] graph + relevance, GPU vs CPU twin ({env['cpu_threads']} cores)", ">= 50x",
                          f"{main['speedup_graph_relevance']:.1f}x", main["speedup_graph_relevance"] >= 50))
    if gpu and n >= 70000:
        goals.append((f"[{preset}] whole clustering of Reu-70K shape on the GPU", "<= 5 s", f"{dev_t['total']:.2f} s",
                      dev_t["total"] <= 5.0))
    if gpu:
        sec, moved = relevance_events(dev_res.graph)
        main["relevance_kernel"] = {"seconds": sec, "bytes": moved, "gbps": moved / sec / 1e9,
                                    "fraction_of_copy": (moved / sec / 1e9) / env["copy_gbps"]}
        nnz = int(dev_res.graph.indptr[-1])
        # indices (4 bytes an entry), plus the weights (4 more) only when they came with them
        moved_t = 8 * (n + 1) + (4 if "weights_fetch" in main else 8) * nnz + (4 + 8 + 4 + 8) * n
        tr = dev_t["stages"].get("transfer", 0.0)
        main["transfer"] = {"bytes": moved_t, "seconds": tr, "gbps": moved_t / tr / 1e9 if tr else None}
        log(f"[{preset}] relevance kernel: {main['relevance_kernel']}; transfer: {main['transfer']}")
    if gpu and not args.skip_extras:  # the previous path: engine threshold selector, edges assembled on the host
        from gputext.cluster.graph import build_graph
        from gputext.cluster.star import compute_relevance
        t = time.perf_counter()
        g_old = build_graph(X, args.beta, backend, device_graph=False)
        compute_relevance(g_old, backend)
        main["engine_path"] = {"graph_relevance": time.perf_counter() - t,
                               "identical_graph": bool(np.array_equal(g_old.indptr, dev_res.graph.indptr)
                                                       and np.array_equal(g_old.indices, dev_res.graph.indices)
                                                       and np.array_equal(g_old.weights, dev_res.graph.weights))}
        del g_old
        log(f"[{preset}] engine path (host assembly): {main['engine_path']}")
    if gpu and not args.skip_extras:  # the other transfer modes (default: staged through two page-locked buffers)
        from gputext.cluster.graph_cuda import DeviceGraphGeometry
        from gputext.cluster.star import cluster_star
        main["transfer_modes"] = {"staged": {"total": dev_t["total"], "graph_relevance": dev_t["graph_relevance"],
                                             "transfer": dev_t["stages"]["transfer"]}}
        for mode in ("pageable", "pinned"):
            runs = []
            for _ in range(2):
                r = cluster_star(X, args.beta, backend, graph_geometry=DeviceGraphGeometry(transfer=mode))
                runs.append((r.stats["seconds_total"], r.stats["seconds_graph"] + r.stats["seconds_relevance"],
                             stage_times(r.stats)["transfer"]))
                del r
            main["transfer_modes"][mode] = {"total": median([x[0] for x in runs]),
                                            "graph_relevance": median([x[1] for x in runs]),
                                            "transfer": median([x[2] for x in runs])}
        log(f"[{preset}] transfer modes: {main['transfer_modes']}")
    if gpu and args.sweep and first:  # the device graph's options, each against the defaults of this run
        from gputext.cluster.graph_cuda import DeviceGraphGeometry
        from gputext.cluster.star import cluster_star
        variants = {"default": {}, "index=host": {"index": "host"}, "prefault=False": {"prefault": False},
                    "staging 8 MiB": {"staging_bytes": 8 << 20}, "staging 128 MiB": {"staging_bytes": 128 << 20},
                    "weights=eager": {"weights": "eager"}}
        main["sweep"] = {}
        for name, kw in variants.items():
            runs = []
            for _ in range(3):
                r = cluster_star(X, args.beta, backend, graph_geometry=DeviceGraphGeometry(**kw))
                st = stage_times(r.stats)
                runs.append((r.stats["seconds_graph"] + r.stats["seconds_relevance"], st["index"], st["transfer"]))
                del r
            main["sweep"][name] = {"graph_relevance": median([x[0] for x in runs]), "index": median([x[1] for x in runs]),
                                   "transfer": median([x[2] for x in runs])}
        log(f"[{preset}] sweep: {main['sweep']}")
    ours_edges = upper_edge_count(dev_res.graph)
    wanted = [p for p in args.peers.split(",") if p]
    peers = harness.run_peers([p for p in wanted if p != "sklearn"], X, args.beta, has_gpu=gpu, prefix="star.")
    for name, got in peers.items():
        if "seconds" in got:
            peers[name] = {"docs": n, **got, "edges_ours": ours_edges, "ours_graph_seconds": dev_t["graph"],
                           "ours_speedup": got["seconds"] / dev_t["graph"]}
        log(f"[{preset}] peer {name}: {peers[name]}")
    if "sklearn" in wanted and first:  # at a smaller size, against ours on the same documents
        Xs = X[:args.sklearn_docs]
        got = harness.run_peers(["sklearn"], Xs, args.beta, prefix="star.")["sklearn"]
        if "seconds" in got:
            ours = {}
            for be in ([backend, cpu] if gpu else [cpu]):
                r, tt = time_cluster(Xs, args.beta, be, 1)
                ours[be.name] = {"graph": tt["graph"], "edges": upper_edge_count(r.graph)}
            got = {"docs": Xs.shape[0], **got, "ours": ours}
        peers["sklearn"] = got
        log(f"[{preset}] peer sklearn: {got}")
    return {"main": main, "peers": peers}


def main():
    args = parse_args()
    from gputext.backend import resolve
    from gputext.cluster.star import cluster_star

    backend = resolve(args.device)
    gpu = backend.is_cuda and not backend.simulator
    cpu = resolve("cpu")
    env = device_info(backend)
    results = {"script": "scripts/gpu_star.py", "argv": sys.argv[1:], "date": env["date"], "quick": args.quick,
               "beta": args.beta, "env": env}
    log(f"device: {results['env']}")
    goals = []

    # warm-up (compiles every kernel of the path)
    small = reu_corpus(600, seed=9, preset=args.presets.split(",")[0])
    cluster_star(small.X, args.beta, backend)
    cluster_star(small.X, args.beta, cpu)

    # 1-3. per preset: exactness, speed with the per-stage breakdown, graph peers
    presets = [p for p in args.presets.split(",") if p]
    results["presets"] = {}
    for pi, preset in enumerate(presets):
        results["presets"][preset] = run_preset(args, preset, pi == 0, backend, cpu, gpu, results["env"], goals)
    first = results["presets"][presets[0]]
    results["main"] = first["main"]
    results["peers"] = first["peers"]

    # 4. 100,000+ documents on the device
    try:
        big = reu_corpus(args.big_docs, seed=1, preset=presets[0])
        t = time.perf_counter()
        big_res = cluster_star(big.X, args.beta, backend)
        results["big"] = {"docs": big.X.shape[0], "nnz": int(big.X.nnz), "edges": big_res.graph.n_edges,
                          "clusters": big_res.n_clusters, "seconds": time.perf_counter() - t, "ok": True}
        del big, big_res
    except Exception as exc:
        results["big"] = {"docs": args.big_docs, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    log(f"big: {results['big']}")
    if gpu and args.big_docs >= 100000:
        goals.append((f"{args.big_docs:,} documents on the GPU", "no out-of-memory",
                      f"{results['big'].get('seconds', 0):.2f} s" if results["big"]["ok"] else results["big"]["error"][:60],
                      results["big"]["ok"]))

    # 5. DClustR additions vs full recluster
    results["update"] = []
    if not args.skip_update:
        with tempfile.TemporaryDirectory(prefix="gpu_star_") as tmp:
            results["update"] = update_benchmark(args, backend, tmp, presets[0])
    for row in results["update"]:
        if row["n_add"] == 10000 and row["n_base"] == 50000:
            goals.append(("add 10,000 to 50,000 vs full recluster (end to end)", "<= 0.20",
                          f"{row['ratio_total']:.3f} (compute only {row['ratio_compute']:.3f})", row["ratio_total"] <= 0.2))

    harness.Report(args.out, results).write("gpu_star.json", markdown(results, goals, backend.name), indent=2)


def fmt(x, digits=3):
    return "n/a" if x is None else f"{x:.{digits}f}"


def markdown(r, goals, dev):
    env = r["env"]
    lines = [f"### gputext star clustering ({env.get('gpu') or env['backend']}, {env['cpu_threads']} CPU threads, "
             f"beta {r['beta']}, {r['date']})", ""]
    lines += ["| preset | run | docs | edges | density | clusters | graph s | relevance s | cover s | total s | "
              "graph+rel vs twin |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for preset, pr in r["presets"].items():
        m = pr["main"]
        for name in dict.fromkeys((dev, "cpu")):
            if name in m and isinstance(m[name], dict):
                t = m[name]
                sp_ = f"{m['speedup_graph_relevance']:.1f}x" if name == dev and "speedup_graph_relevance" in m else ""
                lines.append(f"| {preset} | {name} | {m['docs']:,} | {m['edges']:,} | {100 * m['density']:.2f}% | "
                             f"{m['clusters']:,} | {fmt(t['graph'])} | {fmt(t['relevance'])} | {fmt(t['cover'])} | "
                             f"{fmt(t['total'])} | {sp_} |")
    lines += ["", "Per-stage seconds (GPU: CUDA events of the device graph build; CPU twin: host clock). index = "
              "index build + query stats, scoring = segments upload + accumulate, counting = threshold counts + "
              "scan + total, writing = edge write + AIS atomics, release = freeing score rows, csr = symmetric CSR, "
              "transfer = CSR + relevance to the host, host asm = host assembly (CPU twin / fallback).", "",
              "| preset | run | assembly | index | scoring | counting | writing | release | csr | relevance | transfer | "
              "host asm | cover |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for preset, pr in r["presets"].items():
        m = pr["main"]
        for name in dict.fromkeys((dev, "cpu")):
            if name in m and isinstance(m[name], dict):
                st = m[name]["stages"]
                asm = m[name].get("assembly") or "host"
                if m[name].get("spills"):
                    asm += f" ({m[name]['spills']} spills)"
                lines.append(f"| {preset} | {name} | {asm} | " + " | ".join(
                    fmt(st.get(k, 0.0)) for k in ("index", "scoring", "counting", "writing", "release", "csr",
                                                  "relevance", "transfer", "host_assembly", "cover")) + " |")
    for preset, pr in r["presets"].items():
        m = pr["main"]
        if "speedup_graph_relevance" in m:
            lines.append(f"\n[{preset}] GPU vs CPU twin: graph + relevance {m['speedup_graph_relevance']:.1f}x, whole "
                         f"clustering {m['speedup_total']:.1f}x; identical results: {m['identical']}")
        if "weights_fetch" in m:
            wf = m["weights_fetch"]
            extra = (f"; graph + relevance with that copy {m['speedup_graph_relevance_with_weights']:.1f}x the CPU twin"
                     if "speedup_graph_relevance_with_weights" in m else "")
            lines.append(f"[{preset}] edge weights left on the device (the clustering does not read them), copied "
                         f"afterwards: {wf['bytes'] / 1e9:.2f} GB in {wf['seconds']:.3f} s{extra}")
        if "sweep" in m:
            lines.append(f"[{preset}] device graph options (median of 3; graph + relevance / index / transfer s): " + "; ".join(
                f"{k} {v['graph_relevance']:.3f} / {v['index']:.3f} / {v['transfer']:.3f}" for k, v in m["sweep"].items()))
        if "relevance_kernel" in m:
            k = m["relevance_kernel"]
            lines.append(f"[{preset}] relevance kernel: {k['seconds'] * 1e3:.2f} ms, {k['gbps']:.0f} GB/s = "
                         f"{100 * k['fraction_of_copy']:.0f}% of the measured copy bandwidth ({fmt(env['copy_gbps'], 0)} GB/s)")
        if m.get("transfer", {}).get("gbps"):
            tr = m["transfer"]
            what = "CSR without weights" if "weights_fetch" in m else "CSR"
            lines.append(f"[{preset}] {what} + relevance to the host: {tr['bytes'] / 1e9:.2f} GB in {fmt(tr['seconds'])} s "
                         f"= {tr['gbps']:.1f} GB/s (staged)")
        if "engine_path" in m:
            ep = m["engine_path"]
            lines.append(f"[{preset}] previous path (engine selector, host assembly): graph + relevance "
                         f"{fmt(ep['graph_relevance'])} s; same graph: {ep['identical_graph']}")
        for mode, tm in m.get("transfer_modes", {}).items():
            lines.append(f"[{preset}] transfer {mode}: {fmt(tm['transfer'])} s "
                         f"({m['transfer']['bytes'] / max(tm['transfer'], 1e-9) / 1e9:.1f} GB/s), graph + relevance "
                         f"{fmt(tm['graph_relevance'])} s, total {fmt(tm['total'])} s")
    lines += ["", "| graph peer | preset | docs | seconds | edges (i<j) | ours: edges | ours: graph s | ours faster by |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for preset, pr in r["presets"].items():
        for name, p in pr["peers"].items():
            if "error" in p or "skipped" in p:
                why = f"error: {p['error'][:80]}" if "error" in p else f"skipped: {p['skipped']}"
                lines.append(f"| {name} | {preset} | | {why} | | | | |")
            elif name == "sklearn":
                best = min(v["graph"] for v in p["ours"].values())
                e = next(iter(p["ours"].values()))["edges"]
                lines.append(f"| sklearn radius_neighbors_graph (CPU) | {preset} | {p['docs']:,} | {fmt(p['seconds'])} | "
                             f"{p['edges']:,} | {e:,} | {fmt(best)} | {p['seconds'] / best:.1f}x |")
            else:
                lines.append(f"| {name} | {preset} | {p['docs']:,} | {fmt(p['seconds'])} | {p['edges']:,} | "
                             f"{p['edges_ours']:,} | {fmt(p['ours_graph_seconds'])} | {p['ours_speedup']:.1f}x |")
    b = r["big"]
    lines.append(f"\nLarge run: {b['docs']:,} documents: " + (f"{b['edges']:,} edges, {b['clusters']:,} clusters in "
                                                            f"{b['seconds']:.2f} s" if b["ok"] else f"FAILED {b['error']}"))
    lines += ["", "| update | base | added | update s (compute) | full recluster s (compute) | ratio | components touched | "
              "PCCs loaded | agreement F / NMI_max | F vs labels upd / full |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for u in r["update"]:
        lines.append(f"| DClustR | {u['n_base']:,} | {u['n_add']:,} | {fmt(u['update']['total'], 2)} ({fmt(u['update']['compute'], 2)}) | "
                     f"{fmt(u['full']['total'], 2)} ({fmt(u['full']['compute'], 2)}) | {u['ratio_total']:.3f} | "
                     f"{u['components_touched']:,} / {u['components_total']:,} | {u['pccs_loaded']:,} / {u['pccs_total']:,} | "
                     f"{u['agreement_fbcubed']:.3f} / {u['agreement_onmi_max']:.3f} | "
                     f"{u['fbcubed_vs_labels_update']:.3f} / {u['fbcubed_vs_labels_full']:.3f} |")
    if goals:
        lines += ["", "| goal | target | measured | met |", "| --- | --- | --- | --- |"]
        lines += [f"| {g} | {t} | {v} | {'yes' if ok else 'NO'} |" for g, t, v, ok in goals]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
