#!/usr/bin/env python3
"""GPU round for issue 4's meta-feature goal: all of 20NG (train leave-one-out + test, k = 30,
cosine/L1/L2 lists + centroid features) in < 10 s on an H100 and >= 20x our CPU twin on the
host's cores, same run.

What it runs (gputext.knn.metafeatures.compute_metafeatures, inverted method = the engine's
grouped top-k selector, one index over the training documents ordered by class):

  1. 20NG: cuda and cpu (CPU twin, every core), each warmed up on the full problem first (the
     first call compiles), then median of --repeats runs (wall clock, the call is synchronous).
     GPU == CPU twin bit for bit, and both equal a float64 reference on sampled rows.
     Per-stage breakdown of the median run: index (permute + Index), host prep (query scales and
     norms), index upload, query upload, fused scoring + selection, merge, finishing, copy back
     (CUDA events), centroid features (host, float64).
  2. synthetic (Zipf vocabulary, 20 groups, 50k documents, 200k queries): the engine's grouped
     search on the GPU for all queries and on the CPU twin for a slice (per-query rates compared;
     identical on the slice), then GPU meta-features end to end with their stages.

  python scripts/gpu_meta.py --device cpu --quick    # smoke test without a GPU (< 1 minute)
  python scripts/gpu_meta.py --quick                 # small, on the GPU
  python scripts/gpu_meta.py --datasets .data        # full (a few minutes on an H100)

--datasets: the folder holding 20newsgroups/ (default .data/ when present, else $GPUTEXT_DATASETS or
../shared/datasets).
Prints a markdown table last and writes gpu_meta.json into --out (default $OUT or out/).
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
log, row, timed_runs, median = harness.log, REPORT.row, harness.wall_runs, harness.median


def reference_rows(Xtr, y, n_classes, Q, rows, n_train, k):
    """float64 meta-features of query rows ``rows`` of Q (training rows left out of their class),
    straight from the definition with sparse products (independent of the engine)."""
    A = sp.csr_matrix(Xtr, dtype=np.float64)
    d_sq = np.asarray(A.multiply(A).sum(1)).ravel()
    d_l1 = np.asarray(abs(A).sum(1)).ravel()
    out = np.zeros((len(rows), (3 * k + 2) * n_classes))
    for r, i in enumerate(rows):
        x = np.asarray(Q[i].todense(), dtype=np.float64).ravel()
        dot = A @ x
        nx2 = x @ x
        xa = x[A.indices]
        corr = np.abs(xa - A.data) - np.abs(xa) - np.abs(A.data)
        l1 = np.abs(x).sum() + d_l1 + np.add.reduceat(np.append(corr, 0.0), A.indptr[:-1]) * (np.diff(A.indptr) > 0)
        l2 = np.sqrt(np.maximum(nx2 + d_sq - 2 * dot, 0.0))
        den = np.sqrt(nx2) * np.sqrt(d_sq)
        cos = np.where(den > 0, dot / np.where(den > 0, den, 1.0), 0.0)
        for c in range(n_classes):
            members = np.nonzero(y == c)[0]
            if i < n_train:
                members = members[members != i]
            cols = []
            for vals, larger, empty in ((cos, True, 0.0), (l1, False, np.abs(x).sum()), (l2, False, np.sqrt(nx2))):
                v = np.sort(vals[members])
                v = list((v[::-1] if larger else v)[:k])
                while len(v) < k:
                    v.append(v[-1] if v else empty)
                cols += v
            if members.size:
                cen = np.asarray(A[members].mean(0)).ravel()
                nc = np.linalg.norm(cen)
                cols += [x @ cen / (np.sqrt(nx2) * nc) if nx2 * nc > 0 else 0.0, np.linalg.norm(x - cen)]
            else:
                cols += [0.0, np.sqrt(nx2)]
            out[r, c * (3 * k + 2):(c + 1) * (3 * k + 2)] = cols
    return out


def stage_rows(section, device, info, total_s):
    st = info.get("stages", {})
    order = [("prepare_ms", "prepare (validation, stacking train + test)"),
             ("index_ms", "index (permute by class + Index)"), ("search.host_prep_ms", "host prep (scales, norms, segments)"),
             ("search.index_build_ms", "of which postings built on the host"),
             ("search.query_info_ms", "of which query scales and norms (host)"),
             ("search.index_upload_ms", "index upload"), ("search.query_upload_ms", "query upload"),
             ("search.score_select_ms", "scoring + selection (cpu twin)"),
             ("search.kernels_ms", "kernels: scoring + selection + merge + finishing"),
             ("search.copy_back_ms", "copy back (host wall, overlaps the next batch's kernels)"),
             ("centroid_ms", "centroid features (host; on cuda while the first batch computes)"),
             ("assembly_ms", "centroid columns into the matrix")]
    parts = []
    for key, label in order:
        if key in st:
            parts.append(f"{label} {st[key]:.1f}")
    if "search_ms" in st:
        other = (1e3 * total_s - st.get("prepare_ms", 0.0) - st.get("index_ms", 0.0) - st["search_ms"]
                 - st.get("assembly_ms", 0.0))
        parts.append(f"other (result assembly, timing noise) {other:.1f}")
        inside = st["search_ms"] - sum(st.get(key, 0.0) for key in (
            "search.host_prep_ms", "search.score_select_ms", "search.kernels_ms", "search.copy_back_ms"))
        parts.append(f"search wall not in its stages {inside:.1f}")
    if "search.batches" in st:
        parts.append(f"in {st['search.batches']} batches")
    row(section, f"{device} stages (ms)", "; ".join(parts), f"total {1e3 * total_s:.1f} ms")
    return st


def twenty_ng(args, has_gpu, threads):
    from table_metafeatures import build, datasets_dir

    from gputext.io import read_corpus
    from gputext.knn.metafeatures import _vstack, compute_metafeatures

    cache = Path(tempfile.gettempdir()) / "gputext_knn_classify_corpora"
    ddir = args.datasets or (".data" if Path(".data/20newsgroups").is_dir() else None)  # the lead's carried copy
    tr, te = build("20ng", datasets_dir(ddir), cache, args.quick)
    train, test = read_corpus(tr), read_corpus(te)
    y = np.asarray(train.labels.codes)
    C = len(train.labels.categories)
    sec = {"n_train": train.n_docs, "n_test": test.n_docs, "n_classes": C, "k": 30, "cpu_threads": threads}
    log(f"[1] 20NG{' (quick subset)' if args.quick else ''}: {train.n_docs:,} train (leave-one-out) + "
        f"{test.n_docs:,} test, {C} classes, k = 30")
    out = {}
    for device in (["cuda"] if has_gpu else []) + ["cpu"]:
        run = lambda: compute_metafeatures(train.X, y, C, test.X, k=30, method="inverted", device=device)  # noqa: E731
        try:
            med, mf, secs = timed_runs(run, args.repeats)
        except Exception as exc:
            if device != "cuda":
                raise
            # keep the round useful: report, then retry without the pipelined copies, the pinned
            # staging and the segment table (the plainest grouped path)
            import traceback
            traceback.print_exc()
            row("20NG", "cuda ERROR (default path)", f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}",
                "retried with pipeline=1, staging_bytes=0, segment_table_bytes=0, packed_upload=False")
            from gputext.engine import Geometry
            from gputext.engine import search as engine_search
            plain = Geometry(pipeline=1, staging_bytes=0, segment_table_bytes=0, packed_upload=False)
            engine_search.Geometry = lambda: plain
            med, mf, secs = timed_runs(run, args.repeats)
            sec["cuda_fallback_geometry"] = True
        out[device] = (med, mf)
        sec[device] = {"median_s": med, "runs_s": secs, "stages_ms": mf.info.get("stages"),
                       "search": mf.info.get("search")}
        row("20NG", f"{device} total (median of {len(secs)})", f"{med:.3f} s",
            "goal < 10 s on an H100" if device == "cuda" else f"{threads} threads")
        stage_rows("20NG", device, mf.info, med)
    cpu_s, cpu_mf = out["cpu"]
    if has_gpu:
        geometry_sweep(train.X, y, C, test.X, sec, cpu_mf)
        gpu_s, gpu_mf = out["cuda"]
        same = bool(np.array_equal(gpu_mf.train, cpu_mf.train) and np.array_equal(gpu_mf.queries, cpu_mf.queries))
        sec.update(speedup=cpu_s / gpu_s, identical=same)
        row("20NG", "GPU vs CPU twin", f"{cpu_s / gpu_s:.1f}x", "goal >= 20x")
        row("20NG", "GPU = CPU twin", "identical" if same else "DIFFERENT")
    # float64 reference on sampled rows (training and test)
    Q = _vstack(train.X, test.X)
    rng = np.random.default_rng(0)
    n_train = train.n_docs
    rows = np.sort(np.concatenate([rng.choice(n_train, 4, replace=False), n_train + rng.choice(test.n_docs, 4, replace=False)]))
    ref = reference_rows(train.X, y, C, Q, rows, n_train, 30)
    M = np.vstack([cpu_mf.train, cpu_mf.queries])[rows]
    err = float(np.max(np.abs(M - ref) / np.maximum(np.abs(ref), 1e-6)))
    ok = bool(np.allclose(M, ref, rtol=2e-6, atol=2e-7))
    sec.update(reference_rows=rows.tolist(), reference_ok=ok, reference_max_rel_err=err)
    row("20NG", "= float64 reference (8 sampled rows)", "yes" if ok else "NO", f"max rel. error {err:.1e}")
    return sec


def geometry_sweep(Xtr, y, C, Xte, sec, cpu_mf):
    """The fused kernel's launch geometry on 20NG: the engine's grouped search (3 metrics, k = 30,
    the meta-features' call) with a few (block, items) choices; kernel time (CUDA events, median
    of 5) and whether the result is still the CPU twin's."""
    from gputext.engine import Geometry, Index, search_topk_grouped
    from gputext.knn.metafeatures import _vstack

    labelled = np.nonzero(y >= 0)[0]
    order = labelled[np.argsort(y[labelled], kind="stable")]
    group_ptr = np.concatenate([[0], np.cumsum(np.bincount(y[labelled], minlength=C))]).astype(np.int64)
    index = Index.from_csr(Xtr[order])
    Q = _vstack(Xtr, Xte)
    self_doc = np.full(Q.shape[0], -1, np.int64)
    self_doc[order] = np.arange(order.size)
    out = np.empty((Q.shape[0], C, 92), np.float32)
    ref = np.vstack([cpu_mf.train, cpu_mf.queries]).reshape(Q.shape[0], C, 92)[:, :, :90]
    sweep = {}
    # (block, items, segment table, register cap, pipeline batches, selection by counting)
    variants = [(128, 8, True, 64, 4, True), (128, 8, True, 64, 4, False), (128, 8, True, 56, 4, True),
                (128, 8, True, 56, 4, False), (128, 8, True, 80, 4, True), (128, 8, True, 48, 4, True),
                (128, 8, True, 64, 8, True)]
    for block, items, table, regs, pipe, rank in variants:
        geom = Geometry(group_block=block, group_items=items, group_max_registers=regs, pipeline=pipe,
                        group_counting=rank, **({} if table else {"segment_table_bytes": 0}))
        times, walls = [], []
        try:
            for _ in range(6):
                st = {}
                search_topk_grouped(index, Q, 30, group_ptr, ("cosine", "l1", "l2"), "cuda", exclude_self=self_doc,
                                    pad="last", out=out, return_docs=False, geometry=geom, stats=st)
                times.append(st["stages"]["kernels_ms"])
                walls.append(1e3 * st["seconds"])
        except Exception as exc:
            row("20NG geometry", f"block {block} x items {items}, max registers {regs}{'' if table else ', binary search'}",
                f"ERROR {type(exc).__name__}: {str(exc)[:120]}")
            continue
        same = bool(np.array_equal(out[:, :, :90], ref))
        ms = median(times[1:])
        wall = median(walls[1:])
        sweep[f"{block}x{items}-r{regs}-p{pipe}-{'count' if rank else 'sort'}{'' if table else '-search'}"] = {
            "kernel_ms": ms, "search_wall_ms": wall, "batches": st["stages"]["batches"], "segments": st["segments"],
            "identical": same}
        row("20NG geometry", f"block {block} x items {items}, max registers {regs or 'none'}, pipeline {pipe}, "
            f"selection by {'counting' if rank else 'bitonic sorts'} "
            f"({st['segments']} segments, {st['stages']['batches']} batches"
            f"{'' if table else ', binary search instead of the segment table'})", f"{ms:.2f} ms",
            f"kernels (all batches); search wall {wall:.1f} ms (host prep, query upload, copies; index already on the device); "
            + ("= CPU twin" if same else "DIFFERENT"))
    sec["geometry_sweep"] = sweep
    # where the kernel time goes: the default kernel with fewer metrics (one accumulation for
    # cosine/l2, one more for l1; one selection per metric)
    parts = {}
    for metrics in (("cosine",), ("l1",), ("cosine", "l2")):
        o = np.empty((Q.shape[0], C, 30 * len(metrics)), np.float32)
        times = []
        try:
            for _ in range(6):
                st = {}
                search_topk_grouped(index, Q, 30, group_ptr, metrics, "cuda", exclude_self=self_doc, pad="last",
                                    out=o, return_docs=False, stats=st)
                times.append(st["stages"]["kernels_ms"])
        except Exception as exc:
            row("20NG kernel", "+".join(metrics), f"ERROR {type(exc).__name__}: {str(exc)[:120]}")
            continue
        parts["+".join(metrics)] = median(times[1:])
    sec["kernel_by_metrics_ms"] = parts
    row("20NG kernel", "kernels ms by metrics searched (default geometry)",
        "; ".join(f"{key} {v:.2f}" for key, v in parts.items()),
        "cosine+l1+l2 is the meta-features' call (the sweep row with the default register cap)")


def zipf_corpus(n_docs, n_terms, terms_per_doc, seed, offset=5.0):
    """Random corpus, tf-idf-like weights, L2-normalised rows; term t drawn with probability
    proportional to 1 / (t + 1 + offset) (a Zipf law without its stopword head: each query meets
    about 4 postings per document, as 20NG's 4.3)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(terms_per_doc // 2, terms_per_doc * 3 // 2, n_docs)
    p = 1.0 / (np.arange(1, n_terms + 1) + offset)
    p /= p.sum()
    cols = rng.choice(n_terms, int(lengths.sum()), p=p).astype(np.int32)
    indptr = np.zeros(n_docs + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    X = sp.csr_matrix((rng.random(cols.size).astype(np.float32) + 0.05, cols, indptr), shape=(n_docs, n_terms))
    X.sum_duplicates()
    X.sort_indices()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel())
    X = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X
    return sp.csr_matrix(X, dtype=np.float32)


def synthetic(args, has_gpu, threads):
    """A larger index and many more queries: the engine's grouped search (the meta-features'
    core: 3 metrics, 20 groups, k = 30) on the GPU for all queries and on the CPU twin for a slice
    (per-query rates compared, identical on the slice), then the GPU meta-features end to end."""
    from gputext.engine import Index, search_topk_grouped
    from gputext.knn.metafeatures import compute_metafeatures

    n_train, n_queries, n_terms, C = (3000, 4000, 5000, 20) if args.quick else (50_000, 200_000, 50_000, 20)
    cpu_queries = 500 if args.quick else 4000
    k = 30
    log(f"[2] synthetic: {n_train:,} training documents in {C} groups, {n_queries:,} queries, {n_terms:,} terms, k = {k}")
    Xtr = zipf_corpus(n_train, n_terms, 60, 1)
    Xq = zipf_corpus(n_queries, n_terms, 60, 2)
    y = np.sort(np.random.default_rng(3).integers(0, C, n_train))
    group_ptr = np.concatenate([[0], np.cumsum(np.bincount(y, minlength=C))]).astype(np.int64)
    index = Index.from_csr(Xtr)
    df = np.diff(index.cpu().term_ptr)
    per_q = float((df[Xq.indices]).sum() / n_queries)
    sec = {"n_train": n_train, "n_queries": n_queries, "n_terms": n_terms, "n_classes": C, "cpu_queries": cpu_queries,
           "postings_per_query": per_q}
    metrics = ("cosine", "l1", "l2")
    width = 3 * k + 2

    def engine(device, Q):
        out = np.empty((Q.shape[0], C, width), np.float32)
        st = {}
        search_topk_grouped(index, Q, k, group_ptr, metrics, device, pad="last", out=out, return_docs=False, stats=st)
        return out, st

    sl = Xq[:cpu_queries]
    med_c, (out_c, st_c), secs_c = timed_runs(lambda: engine("cpu", sl), 1)
    rate_c = med_c / cpu_queries
    sec["engine_cpu"] = {"median_s": med_c, "queries": cpu_queries, "stages_ms": st_c.get("stages")}
    row("synthetic", f"engine grouped search, cpu twin, {cpu_queries:,} queries", f"{med_c:.3f} s",
        f"{1e6 * rate_c:.1f} us a query, {per_q / n_train:.1f} postings a document ({threads} threads)")
    if has_gpu:
        med_g, (out_g, st_g), secs_g = timed_runs(lambda: engine("cuda", Xq), max(1, args.repeats - 1))
        rate_g = med_g / n_queries
        same = bool(np.array_equal(out_g[:cpu_queries], out_c))
        sec["engine_cuda"] = {"median_s": med_g, "runs_s": secs_g, "stages_ms": st_g.get("stages"),
                              "search": {kk: v for kk, v in st_g.items() if kk != "stages"}}
        sec.update(identical_on_slice=same, engine_speedup_per_query=rate_c / rate_g,
                   postings_per_second=per_q * n_queries / med_g)
        row("synthetic", f"engine grouped search, cuda, {n_queries:,} queries", f"{med_g:.3f} s",
            f"{1e6 * rate_g:.2f} us a query; {per_q * n_queries / med_g / 1e9:.1f} G postings/s")
        row("synthetic", "cuda stages (ms)", "; ".join(f"{kk.replace('_ms', '')} {v:.1f}" for kk, v in st_g.get("stages", {}).items()))
        row("synthetic", "GPU vs CPU twin, per query", f"{rate_c / rate_g:.1f}x", "")
        row("synthetic", "GPU = CPU twin (slice)", "identical" if same else "DIFFERENT")
        del out_g
        med, mf, secs = timed_runs(lambda: compute_metafeatures(Xtr, y, C, Xq, k=k, method="inverted", device="cuda"), 1)
        sec["metafeatures_cuda"] = {"median_s": med, "stages_ms": mf.info.get("stages")}
        row("synthetic", f"meta-features end to end, cuda ({n_train:,} + {n_queries:,} queries)", f"{med:.3f} s", "")
        stage_rows("synthetic", "cuda", mf.info, med)
    return sec


def main():
    ap = harness.parser(__doc__)
    ap.add_argument("--datasets", help="folder with 20newsgroups/")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma list of sections to skip: 20ng,synthetic")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    from gputext.backend import resolve
    backend = resolve(args.device)
    has_gpu = backend.is_cuda and not backend.simulator
    env = harness.probe(backend)
    dev_name = env.get("gpu", backend.reason)
    threads = env["numba_threads"]
    RESULTS.update(device=dev_name, host=env["host"], cpu_count=env["cpu_count"], numba_threads=threads,
                   quick=args.quick, date=env["date"], command=" ".join(sys.argv), env=env)
    log(f"device: {backend.describe()}; {env['cpu_count']} CPU cores, numba threads {threads}")
    if not has_gpu:
        row("device", "no GPU", "GPU runs skipped", backend.reason)
    t0 = time.perf_counter()
    for name, section in (("20ng", twenty_ng), ("synthetic", synthetic)):
        if name not in skip:
            REPORT.section(name, section, args, has_gpu, threads, key="sections")
    RESULTS["seconds"] = time.perf_counter() - t0
    REPORT.write_table(args.out, "gpu_meta")


if __name__ == "__main__":
    main()
