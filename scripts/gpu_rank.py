#!/usr/bin/env python
"""RankSVM on a real GPU: exactness at scale, then the issue-7 goals and peers, in one run.

    python scripts/gpu_rank.py [--quick] [--device auto|cuda|cpu] [--out DIR]

What it does (full mode: MSLR-WEB30K shape, 2,270,296 x 136 dense, 18,919 queries, 5 levels):

1. Data: gputext.datasets preset ``mslr-web30k`` (train) + a test set of the same hidden model.
2. Exactness, GPU vs CPU twin at w = 0, a random w and the trained w: f, gradient and H v
   (relative differences), beta+/- per document (must be equal), and a brute-force O(n^2)
   float64 check of beta+/- and z on 200 sampled queries (plus the longest) from the GPU's scores.
3. Training to eps = 1e-5 (C = 1) on the GPU (kernels compiled first on a slice of the data, so
   compile time is reported apart) and on the CPU twin with all host cores in the same run. The
   CPU twin runs to the same eps when its estimated time fits --cpu-budget seconds, else for
   --cpu-iterations Newton steps, and then the speed-up is per CG step / per function evaluation
   (said in the table). Pairwise accuracy of both models on train and test.
4. Per-operation timings with CUDA events (median of repeats after warm-up): X v, X^T u, the
   per-query structure (sort + binary searches + wavelet levels), the per-CG statistics, a whole
   H v; peers in the same run: cuBLAS gemv through CuPy and PyTorch (same bytes of X), a segmented
   sort (two stable sorts, CuPy lexsort / PyTorch) and H v by explicit pair enumeration in
   PyTorch (gather + index_add over all ~10^8 pairs). Fraction of the measured device-to-device
   copy bandwidth reached.
5. scikit-learn LinearSVC (LIBLINEAR primal TRON, squared hinge, no intercept) on the explicit
   pair differences of the MQ2008 shape: the same objective, solved independently: its f against
   ours, and its time.

Prints a compact markdown table last; writes rank_gpu.json under --out (default $OUT or out/).
--quick uses 600 queries of the MSLR-WEB30K shape (about 72,000 rows) and ends in about a minute.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

from gputext.backend import cpu_threads, resolve  # noqa: E402
from gputext.rank.bench import preset_split, timed_train  # noqa: E402
from gputext.rank.data import from_corpus  # noqa: E402
from gputext.rank.metrics import pairwise_accuracy  # noqa: E402
from gputext.rank.objective import RankObjective  # noqa: E402
from gputext.rank.ops import RankGeometry  # noqa: E402

log = harness.log
REPS_SCALE = 1.0  # --tiny (simulator smoke test): one repeat


def time_ms(fn, reps=10, warmup=2):
    """Median CUDA-event milliseconds of fn() (harness.gpu_ms); one run of each under --tiny."""
    return harness.gpu_ms(fn, 1 if REPS_SCALE < 1 else reps, 1 if REPS_SCALE < 1 else warmup)


# ----------------------------------------------------------------------------- exactness

def brute_force_queries(data, scores, stats, queries):
    """beta-/+ and z by O(n^2) enumeration on the given queries, from the given scores (grouped
    rows); returns (beta mismatches, max |z - z_ref| / max(1, |z_ref|))."""
    mism = 0
    zerr = 0.0
    y = data.label_rank
    for t in queries:
        a, b = int(data.starts[t]), int(data.starts[t + 1])
        s = scores[a:b]
        yy = y[a:b]
        diff = s[:, None] - s[None, :]  # s_i - s_j
        active = (yy[:, None] > yy[None, :]) & (1.0 - diff > 0)  # i above j, pair active
        bm = active.sum(axis=1)
        bp = active.sum(axis=0)
        # z_i = sum_{j in M_i} (s_i - s_j - 1) - sum_{j in P_i} (s_j - s_i - 1)
        terms = np.where(active, diff - 1.0, 0.0)
        zi = terms.sum(axis=1) - terms.sum(axis=0)
        mism += int(np.sum(bm != stats["beta_minus"][a:b]) + np.sum(bp != stats["beta_plus"][a:b]))
        zerr = max(zerr, float(np.max(np.abs(zi - stats["z"][a:b]) / np.maximum(1.0, np.abs(zi)))) if b > a else 0.0)
    return mism, zerr


def compare_at(w, v, gpu, cpu):
    fg, gg = gpu.fun_grad(w)
    fc, gc = cpu.fun_grad(w)
    hg, hc = gpu.hess_vec(v), cpu.hess_vec(v)
    sg, sc = gpu.ops.statistics(), cpu.ops.statistics()
    rel = lambda a, b: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))  # noqa: E731
    return dict(f_gpu=fg, f_cpu=fc, f_rel=abs(fg - fc) / abs(fc), grad_rel=rel(gg, gc), hv_rel=rel(hg, hc),
                beta_mismatch=int(np.sum(sg["beta_minus"] != sc["beta_minus"]) + np.sum(sg["beta_plus"] != sc["beta_plus"])),
                order_mismatch=int(np.sum(sg["order"] != sc["order"])))


# ----------------------------------------------------------------------------- peers

def pair_lists_torch(torch, data, dev, max_candidates=1 << 26):
    """(I, J) int64 tensors of every preference pair, built on the GPU query chunk by query chunk."""
    starts = data.starts
    sizes = np.diff(starts)
    y = torch.as_tensor(data.label_rank, device=dev)
    I, J = [], []
    t = 0
    Q = len(sizes)
    while t < Q:
        u = t
        total = 0
        while u < Q and (total + int(sizes[u]) ** 2 <= max_candidates or u == t):
            total += int(sizes[u]) ** 2
            u += 1
        n = torch.as_tensor(sizes[t:u], device=dev, dtype=torch.int64)
        st = torch.as_tensor(starts[t:u], device=dev, dtype=torch.int64)
        sq = n * n
        q = torch.repeat_interleave(torch.arange(u - t, device=dev), sq)
        off = torch.cumsum(sq, 0) - sq
        local = torch.arange(total, device=dev, dtype=torch.int64) - off[q]
        i = st[q] + local // n[q]
        j = st[q] + local % n[q]
        keep = y[i] > y[j]
        I.append(i[keep])
        J.append(j[keep])
        t = u
    return torch.cat(I), torch.cat(J)


@harness.peer("rank.cupy", needs=("cupy",), gpu=True)
def peer_cupy(peers, ops, data, v, C):
    """cuBLAS gemv (X v, X^T u) and a segmented sort (lexsort) through CuPy; fills ``peers``."""
    import cupy as cp
    L = data.n_docs
    if ops.dense:
        X = cp.asarray(ops.d_X)  # zero-copy view of our float32 matrix
        v32 = cp.asarray(v, dtype=cp.float32)
        u32 = cp.asarray(np.random.default_rng(1).normal(size=L), dtype=cp.float32)
        peers["cupy_gemv_ms"] = time_ms(lambda: X @ v32)
        peers["cupy_gemv_t_ms"] = time_ms(lambda: X.T @ u32)
    s = cp.asarray(ops.d_s)
    qidx = cp.asarray(np.repeat(np.arange(data.n_queries), np.diff(data.starts)).astype(np.int32))
    peers["cupy_segmented_sort_ms"] = time_ms(lambda: cp.lexsort(cp.stack([s, qidx.astype(cp.float64)])), reps=5)
    return {}


@harness.peer("rank.torch", needs=("torch",), gpu=True)
def peer_torch(peers, ops, data, v, C):
    """PyTorch mv (X v, X^T u), two stable sorts, and H v by explicit pair enumeration (gather +
    index_add over every preference pair); fills ``peers``."""
    import torch
    L = data.n_docs
    dev = torch.device("cuda")
    if ops.dense:
        Xt = torch.as_tensor(ops.d_X, device=dev)
        vt = torch.as_tensor(v, device=dev, dtype=torch.float32)
        ut = torch.randn(L, device=dev, dtype=torch.float32)
        peers["torch_mv_ms"] = time_ms(lambda: torch.mv(Xt, vt))
        peers["torch_mv_t_ms"] = time_ms(lambda: torch.mv(Xt.t(), ut))
    else:
        Xt = torch.sparse_csr_tensor(torch.as_tensor(data.X.indptr.astype(np.int64)), torch.as_tensor(data.X.indices.astype(np.int64)),
                                     torch.as_tensor(data.X.data), size=data.X.shape).to(dev)
    st = torch.as_tensor(ops.d_s, device=dev)
    qt = torch.as_tensor(np.repeat(np.arange(data.n_queries), np.diff(data.starts)), device=dev)

    def seg_sort():
        o1 = torch.sort(st, stable=True).indices
        o2 = torch.sort(qt[o1], stable=True).indices
        return o1[o2]
    peers["torch_segmented_sort_ms"] = time_ms(seg_sort, reps=5)
    # H v by explicit pairs
    t0 = time.perf_counter()
    I, J = pair_lists_torch(torch, data, dev)
    torch.cuda.synchronize()
    peers["torch_pairs"] = int(I.numel())
    peers["torch_pair_build_s"] = time.perf_counter() - t0
    active = (1.0 - (st[I] - st[J])) > 0
    Ia, Ja = I[active], J[active]
    peers["torch_active_pairs"] = int(Ia.numel())
    Xf = Xt if ops.dense else Xt
    vt = torch.as_tensor(v, device=dev, dtype=torch.float32)

    def pair_hv():
        a = torch.mv(Xf, vt) if ops.dense else (Xf @ vt.unsqueeze(1)).squeeze(1)
        d = a[Ia] - a[Ja]
        u = torch.zeros(L, device=dev, dtype=torch.float32)
        u.index_add_(0, Ia, d)
        u.index_add_(0, Ja, -d)
        return vt + 2.0 * C * (torch.mv(Xf.t(), u) if ops.dense else (Xf.t() @ u.unsqueeze(1)).squeeze(1))
    peers["torch_pair_hv_ms"] = time_ms(pair_hv, reps=5)
    hv_peer = pair_hv().double().cpu().numpy()
    peers["torch_pair_hv_max_rel_diff"] = None  # filled by the caller against ours
    peers["_hv_peer"] = hv_peer
    peers["torch_pair_bytes"] = int(I.numel()) * 16
    del I, J, Ia, Ja, active
    torch.cuda.empty_cache()
    return {}


def run_peers(ops, data, v, C, report):
    """The registered peers (CuPy, PyTorch) on our device arrays; a peer that is missing or fails
    leaves ``{name}_error`` beside what it measured before it stopped."""
    peers = {}
    for name, got in harness.run_peers(("cupy", "torch"), peers, ops, data, v, C, prefix="rank.").items():
        if "error" in got or "skipped" in got:
            peers[f"{name}_error"] = got.get("error") or got["skipped"]
    report["peers"] = {k: v for k, v in peers.items() if not k.startswith("_")}
    return peers


def sklearn_peer(report, args):
    """LinearSVC on explicit pair differences of the MQ2008 shape, against our TRON (CPU and GPU)."""
    try:
        from sklearn.svm import LinearSVC
    except Exception as exc:
        report["sklearn"] = {"error": str(exc)}
        return
    train, _ = preset_split("mq2008", seed=3)
    data = from_corpus(train, "mq2008")
    Xd = train.X.toarray().astype(np.float64)
    qid, rel = np.asarray(train.obs["qid"]), np.asarray(train.obs["relevance"])
    I, J = [], []
    for q in np.unique(qid):
        rows = np.flatnonzero(qid == q)
        a, b = np.meshgrid(rows, rows, indexing="ij")
        keep = rel[a] > rel[b]
        I.append(a[keep])
        J.append(b[keep])
    I, J = np.concatenate(I), np.concatenate(J)
    D = Xd[I] - Xd[J]
    ylab = np.ones(len(D))
    ylab[1::2] = -1
    D[1::2] *= -1  # two classes, same loss terms
    t = time.perf_counter()
    svc = LinearSVC(C=args.C, loss="squared_hinge", dual=False, fit_intercept=False, tol=1e-6, max_iter=10000).fit(D, ylab)
    t_svc = time.perf_counter() - t
    w_svc = svc.coef_.ravel().astype(np.float64)
    obj = RankObjective(data, args.C, "cpu")
    f_svc = obj.fun(w_svc)
    out = {"pairs": int(len(D)), "sklearn_seconds": t_svc, "f_sklearn": f_svc}
    for name in (["cpu"] + (["cuda"] if args.gpu else [])):
        r = timed_train(data, args.C, args.eps, backend=name)
        out[f"{name}_seconds"] = r["seconds"]
        out[f"f_{name}"] = r["result"].f
        out[f"f_rel_diff_{name}_vs_sklearn"] = (r["result"].f - f_svc) / abs(f_svc)
    report["sklearn"] = out


# ----------------------------------------------------------------------------- main

def main(argv=None):
    p = harness.parser(__doc__.split("\n\n")[0], quick="600 queries of the MSLR-WEB30K shape; about a minute")
    p.add_argument("--preset", default="mslr-web30k")
    p.add_argument("--n-queries", type=int, default=None, help="scale the preset to this many queries")
    p.add_argument("--C", type=float, default=1.0)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--cpu-budget", type=float, default=None, help="seconds the CPU twin may train (default 200, quick 30)")
    p.add_argument("--cpu-iterations", type=int, default=3, help="Newton steps of the CPU twin when over budget")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--tiny", action="store_true", help=harness.SUPPRESS)  # simulator smoke test of this script
    args = p.parse_args(argv)
    if args.tiny:
        global REPS_SCALE
        REPS_SCALE = 0.0
        args.eps = 0.3
    backend = resolve(args.device)
    args.gpu = backend.is_cuda
    n_queries = args.n_queries or (600 if args.quick else None)
    cpu_budget = args.cpu_budget if args.cpu_budget is not None else (30.0 if args.quick else 200.0)
    os.makedirs(args.out, exist_ok=True)
    env = harness.probe(backend)
    report = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": env["host"],
              "cpu_threads": cpu_threads(), "backend": backend.describe(), "quick": args.quick, "preset": args.preset,
              "C": args.C, "eps": args.eps, "env": env}
    log(f"backend: {backend.describe()}; CPU twin threads: {cpu_threads()}")
    if args.gpu:
        nbytes = (1 << 16) if args.tiny else (1 << 28) if args.quick else (1 << 30)
        report["copy_bandwidth"] = harness.copy_bandwidth(nbytes, repeats=1 if args.tiny else 10)
        log(f"device-to-device copy bandwidth: {report['copy_bandwidth'] / 1e12:.2f} TB/s")

    # 1. data
    t = time.perf_counter()
    train, test = preset_split(args.preset, n_queries, seed=0)
    data = from_corpus(train, "train")
    report["data"] = dict(n_docs=data.n_docs, n_features=data.n_features, n_queries=data.n_queries,
                          levels=len(data.levels), n_pairs=data.n_pairs, max_query_docs=data.max_query_docs,
                          dense=data.is_dense, test_docs=test.n_docs, seconds=time.perf_counter() - t)
    log(f"data: {report['data']}")
    geometry = RankGeometry()
    if args.tiny:
        geometry = RankGeometry(query_threads=8, sort_capacity=16, matvec_threads=8, tile_cols=4, rows_per_block=8,
                                reduce_threads=8, csr_threads=8, csr_group=2, elementwise_blocks=2)
    rng = np.random.default_rng(0)
    v = rng.normal(size=data.n_features)

    # compile on a slice first (device kernels; the CPU twin when numba's cache is cold)
    qid_sorted = np.all(np.diff(np.asarray(train.obs["qid"])) >= 0)
    small = from_corpus(train.take(np.arange(int(data.starts[min(50, data.n_queries)]))), "slice") if qid_sorted else data
    t = time.perf_counter()
    timed_train(small, args.C, 1e-2, max_iter=2, backend="cpu", geometry=geometry)
    report["cpu_compile_seconds"] = time.perf_counter() - t

    # 2 + 3 (GPU): training (exactness after the CPU twin has trained)
    if args.gpu:
        t = time.perf_counter()
        timed_train(small, args.C, 1e-2, max_iter=2, backend=backend, geometry=geometry)
        report["compile_seconds"] = time.perf_counter() - t
        log(f"compiled kernels in {report['compile_seconds']:.1f} s")
        t = time.perf_counter()
        gpu = timed_train(data, args.C, args.eps, backend=backend, geometry=geometry)
        res = gpu["result"]
        report["gpu_train"] = dict(seconds=gpu["seconds"], setup_seconds=gpu["setup_seconds"], iterations=res.iterations,
                                   cg=res.cg_iterations, f=res.f, grad_ratio=res.grad_norm / res.grad_norm0,
                                   converged=res.converged, stop=res.stop_reason, fun_seconds=gpu["fun_seconds"],
                                   grad_seconds=gpu["grad_seconds"], hess_seconds=gpu["hess_seconds"],
                                   n_fun=gpu["n_fun"], n_hess=gpu["n_hess"],
                                   history=[(h["time"], h["f"]) for h in res.history])
        log(f"GPU training: {gpu['seconds']:.2f} s, {res.iterations} Newton, {res.cg_iterations} CG, f={res.f:.10e}")
        gobj = gpu["objective"]
        w_gpu = res.w

    # CPU twin training (budgeted)
    cpu_probe = timed_train(data, args.C, args.eps, max_iter=1, backend="cpu", geometry=geometry)
    per_fun = cpu_probe["fun_seconds"] / max(cpu_probe["n_fun"], 1)
    per_hess = cpu_probe["hess_seconds"] / max(cpu_probe["n_hess"], 1)
    if args.gpu:
        estimate = gpu["n_fun"] * per_fun + gpu["n_hess"] * per_hess + res.iterations * per_hess
    else:
        estimate = 0.0
    full_cpu = (not args.gpu) or estimate <= cpu_budget
    log(f"CPU twin: {per_fun * 1e3:.1f} ms per f, {per_hess * 1e3:.1f} ms per Hv; estimated full run {estimate:.0f} s "
        f"-> {'full run' if full_cpu else f'{args.cpu_iterations} Newton iterations'}")
    cpu = timed_train(data, args.C, args.eps, max_iter=1000 if full_cpu else args.cpu_iterations, backend="cpu",
                      geometry=geometry)
    cres = cpu["result"]
    report["cpu_train"] = dict(seconds=cpu["seconds"], iterations=cres.iterations, cg=cres.cg_iterations, f=cres.f,
                               grad_ratio=cres.grad_norm / cres.grad_norm0, converged=cres.converged, full=full_cpu,
                               fun_seconds=cpu["fun_seconds"], hess_seconds=cpu["hess_seconds"], n_fun=cpu["n_fun"],
                               n_hess=cpu["n_hess"], estimate_full_seconds=estimate,
                               history=[(h["time"], h["f"]) for h in cres.history])
    log(f"CPU training: {cpu['seconds']:.2f} s, {cres.iterations} Newton, {cres.cg_iterations} CG")

    # pairwise accuracy (host metrics on float64 scores)
    tq, tr = np.asarray(test.obs["qid"]), np.asarray(test.obs["relevance"])
    Xtest = test.X.astype(np.float64)
    pa = {"cpu_test": pairwise_accuracy(Xtest @ cres.w, tq, tr)[0]}
    if args.gpu:
        pa["gpu_test"] = pairwise_accuracy(Xtest @ w_gpu, tq, tr)[0]
        pa["gpu_train"] = pairwise_accuracy(train.X.astype(np.float64) @ w_gpu, train.obs["qid"], train.obs["relevance"])[0]
        pa["w_rel_diff"] = float(np.linalg.norm(w_gpu - cres.w) / np.linalg.norm(cres.w)) if full_cpu else None
    pa["cpu_train"] = pairwise_accuracy(train.X.astype(np.float64) @ cres.w, train.obs["qid"], train.obs["relevance"])[0]
    report["pairwise_accuracy"] = pa

    if args.gpu:
        # 2. exactness at three points
        cobj = RankObjective(data, args.C, "cpu", geometry)
        scale = 1.0 / max(1e-12, float(np.sqrt(np.mean(data.X.data.astype(np.float64) ** 2))) * np.sqrt(data.n_features))
        points = {"w=0": np.zeros(data.n_features), "w=random": rng.normal(size=data.n_features) * scale, "w=trained": w_gpu}
        exact = {}
        for name, w in points.items():
            exact[name] = compare_at(w, v, gobj, cobj)
            stats = gobj.ops.statistics()
            scores = gobj.ops.scores(w)
            sizes = np.diff(data.starts)
            qs = np.unique(np.concatenate([rng.choice(data.n_queries, size=min(200, data.n_queries), replace=False),
                                           [int(np.argmax(sizes))]]))
            mism, zerr = brute_force_queries(data, scores, stats, qs)
            exact[name].update(brute_force_queries=len(qs), brute_force_beta_mismatch=mism, brute_force_z_rel=zerr)
            log(f"exactness {name}: {exact[name]}")
        report["exactness"] = exact

        # 4. per-operation timings (CUDA events) and peers
        ops = gobj.ops
        gobj.fun(w_gpu)
        gobj.accept()
        S = ops.slots[ops.current]
        g = geometry
        d_v = ops._send(v)
        timings = {}
        timings["xv_ms"] = time_ms(lambda: ops._matvec(d_v, ops.d_a[0]))
        # X^T u per query block, the blocks added in order on the device and read back, as every TRON product
        timings["xtu_ms"] = time_ms(lambda: (ops._rmatvec(ops.d_u), ops._in_order(ops.d_out, ops.d_sum)))
        T = ops.trial
        St = ops.slots[T]
        timings["structure_ms"] = time_ms(lambda: ops.k_structure[ops.Q, g.query_threads](
            ops.d_starts, ops.d_s, ops.d_lrank, ops.n_levels, ops.d_goff, ops.d_gkeys, ops.d_gidx, St["order"],
            St["ssorted"], ops.d_sweights, St["vsorted"], St["lo"], St["hi"], St["seqrow"], St["rank0"], ops.d_vbuf,
            ops.d_rbuf, St["beta_minus"], St["beta_plus"]), reps=5)
        timings["cg_stats_ms"] = time_ms(lambda: ops.k_sums[ops.Q, g.query_threads](
            ops.d_starts, S["order"], S["vsorted"], S["lo"], S["hi"], S["seqrow"], S["rank0"], ops.n_levels, ops.d_a, 1,
            ops.d_W0, ops.d_W1, ops.d_alpha_minus, ops.d_alpha_plus))
        timings["hv_ms"] = time_ms(lambda: gobj.hess_vec(v))
        timings["fun_ms"] = time_ms(lambda: gobj.fun(w_gpu), reps=5)
        bw = report["copy_bandwidth"]
        x_bytes = data.n_docs * data.n_features * 4 if ops.dense else data.X.nnz * 8
        timings["xv_bw_fraction"] = x_bytes / (timings["xv_ms"] / 1e3) / bw
        timings["xtu_bw_fraction"] = x_bytes / (timings["xtu_ms"] / 1e3) / bw
        timings["hv_x_bw_fraction"] = 2 * x_bytes / (timings["hv_ms"] / 1e3) / bw
        report["timings"] = timings
        log(f"timings: {timings}")
        if not args.no_peers:
            peers = run_peers(ops, data, v, args.C, report)
            if "_hv_peer" in peers:
                ours = gobj.hess_vec(v)
                report["peers"]["torch_pair_hv_max_rel_diff"] = float(np.max(np.abs(peers["_hv_peer"] - ours)) /
                                                                      np.max(np.abs(ours)))
            log(f"peers: {report['peers']}")

    # 5. scikit-learn on explicit pairs (MQ2008 shape)
    if not args.no_peers:
        sklearn_peer(report, args)
        log(f"sklearn: {report.get('sklearn')}")

    harness.Report(args.out, report).write("rank_gpu.json", summary_table(report))


def summary_table(r: dict) -> str:
    d = r["data"]
    rows = [f"RankSVM, {r['preset']} shape: {d['n_docs']:,} x {d['n_features']} ({'dense' if d['dense'] else 'sparse'}), "
            f"{d['n_queries']:,} queries, {d['n_pairs']:,} pairs; C = {r['C']}, eps = {r['eps']}; {r['backend']}; "
            f"CPU twin on {r['cpu_threads']} threads", "",
            "| measure | GPU | CPU twin | ratio / note |", "| --- | --- | --- | --- |"]
    c = r["cpu_train"]
    g = r.get("gpu_train")
    pa = r["pairwise_accuracy"]
    if g:
        full = c["full"]
        ratio = c["seconds"] / g["seconds"] if full else None
        per_cg = (c["hess_seconds"] / max(c["n_hess"], 1)) / (g["hess_seconds"] / max(g["n_hess"], 1))
        per_f = (c["fun_seconds"] / max(c["n_fun"], 1)) / (g["fun_seconds"] / max(g["n_fun"], 1))
        rows.append(f"| train to eps (s) | {g['seconds']:.2f} | {c['seconds']:.2f}{'' if full else ' (capped)'} | "
                    + (f"{ratio:.1f}x (goal >= 20x; GPU goal <= 30 s)" if full else
                       f"CPU capped at {c['iterations']} Newton steps; est. full {c['estimate_full_seconds']:.0f} s "
                       f"-> {c['estimate_full_seconds'] / g['seconds']:.1f}x") + " |")
        rows.append(f"| Newton / CG steps | {g['iterations']} / {g['cg']} | {c['iterations']} / {c['cg']} | "
                    f"GPU converged: {g['converged']} |")
        rows.append(f"| per H v (ms) | {g['hess_seconds'] / max(g['n_hess'], 1) * 1e3:.2f} | "
                    f"{c['hess_seconds'] / max(c['n_hess'], 1) * 1e3:.2f} | {per_cg:.1f}x |")
        rows.append(f"| per f eval (ms) | {g['fun_seconds'] / max(g['n_fun'], 1) * 1e3:.2f} | "
                    f"{c['fun_seconds'] / max(c['n_fun'], 1) * 1e3:.2f} | {per_f:.1f}x |")
        rows.append(f"| f at end | {g['f']:.10e} | {c['f']:.10e} | |")
        rows.append(f"| pairwise acc. test | {pa['gpu_test']:.6f} | {pa['cpu_test']:.6f} | "
                    f"diff {abs(pa['gpu_test'] - pa['cpu_test']):.1e} |")
        rows.append(f"| pairwise acc. train | {pa['gpu_train']:.6f} | {pa['cpu_train']:.6f} | |")
        rows.append(f"| kernel compile (s) | {r['compile_seconds']:.1f} | | excluded from training time |")
    else:
        rows.append(f"| train to eps (s) | (no GPU) | {c['seconds']:.2f} | CPU twin only |")
        rows.append(f"| Newton / CG steps | | {c['iterations']} / {c['cg']} | |")
        rows.append(f"| pairwise acc. test | | {pa['cpu_test']:.6f} | |")
    if "exactness" in r:
        for name, e in r["exactness"].items():
            rows.append(f"| exact {name} | f rel {e['f_rel']:.1e}, grad rel {e['grad_rel']:.1e}, Hv rel {e['hv_rel']:.1e} | "
                        f"beta mismatches {e['beta_mismatch']} | brute force on {e['brute_force_queries']} queries: "
                        f"{e['brute_force_beta_mismatch']} beta mismatches, z rel {e['brute_force_z_rel']:.1e} |")
    if "timings" in r:
        t = r["timings"]
        peers = r.get("peers", {})
        rows.append(f"| X v (ms) | {t['xv_ms']:.3f} ({t['xv_bw_fraction']:.0%} of copy BW) | | cuBLAS sgemv: CuPy "
                    f"{peers.get('cupy_gemv_ms', float('nan')):.3f}, PyTorch {peers.get('torch_mv_ms', float('nan')):.3f} |")
        rows.append(f"| X^T u (ms) | {t['xtu_ms']:.3f} ({t['xtu_bw_fraction']:.0%}) | | cuBLAS: CuPy "
                    f"{peers.get('cupy_gemv_t_ms', float('nan')):.3f}, PyTorch {peers.get('torch_mv_t_ms', float('nan')):.3f} |")
        rows.append(f"| sort + structure (ms) | {t['structure_ms']:.3f} | | segmented sort alone: CuPy lexsort "
                    f"{peers.get('cupy_segmented_sort_ms', float('nan')):.3f}, PyTorch 2 stable sorts "
                    f"{peers.get('torch_segmented_sort_ms', float('nan')):.3f} |")
        rows.append(f"| CG statistics (ms) | {t['cg_stats_ms']:.3f} | | |")
        rows.append(f"| whole H v (ms) | {t['hv_ms']:.3f} (X passes at {t['hv_x_bw_fraction']:.0%}) | | PyTorch explicit "
                    f"pairs ({peers.get('torch_pairs', 0):,}): {peers.get('torch_pair_hv_ms', float('nan')):.3f} |")
    if "sklearn" in r and "error" not in r["sklearn"]:
        s = r["sklearn"]
        rows.append(f"| MQ2008 shape, {s['pairs']:,} pairs | {s.get('cuda_seconds', float('nan')):.2f} s | "
                    f"{s['cpu_seconds']:.2f} s | scikit-learn LinearSVC on explicit pairs {s['sklearn_seconds']:.2f} s; "
                    f"f ours vs sklearn: {s['f_rel_diff_cpu_vs_sklearn']:+.1e} (negative: ours lower) |")
    if "copy_bandwidth" in r:
        rows.append(f"\ncopy bandwidth {r['copy_bandwidth'] / 1e12:.2f} TB/s (device-to-device, measured)")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
