#!/usr/bin/env python3
"""GPU round for DClustR / CUDA-DClus updates (issue 5: an update at most a fifth of a full recluster).

One run, on the GPU host, with the peer (a full OClustR recluster of the union, written the same
way) measured in the same run:

  1. for each of --presets (default reu-50k, the tf preset of gpu_star's update benchmark, and
     reu-50k-tfidf, its sparser tf-idf twin) a synthetic corpus (seed 2, as in scripts/gpu_star.py)
     of --base + max(--adds) documents; the first --base documents are
     clustered and written (no compression, like the benchmark of gpu_star.py);
  2. for every N in --adds: ``dclus.update`` adding the next N documents (end to end: reading the
     added corpus, update, writing the result file) against a full recluster of the union (end to
     end: reading the union corpus, cluster_star, write_result); medians of --repeats runs after a
     warm-up, alternating update and recluster;
  3. a per-stage breakdown of both: for the update the stage timers of ``dclus.update`` (read,
     scoring, PCC assignment, load, local graph, relevance, cover, improvement, membership,
     write), for the recluster scoring, assembly, relevance, cover and write.  The device work of
     each stage ends with a device-to-host copy, so host timers include it; the relevance stage is
     additionally timed with CUDA events (kernel only) on the update's local graph;
  4. exactness at size: the update on --device equals the update by the CPU twin bit for bit
     (centers, memberships, every stored graph array) -- skipped with --skip-cpu; the graph stored
     after the update equals the union's graph built by the full recluster (indptr, indices,
     weights); agreement (FBcubed, overlapping NMI) of the update with the full recluster.

  python scripts/gpu_dclus.py --quick --device cpu   # smoke test anywhere (< 1 minute)
  python scripts/gpu_dclus.py --quick                 # small, on the GPU
  python scripts/gpu_dclus.py --out out/gpu           # full (about 4-6 minutes on an H100)

Prints a markdown table last and writes gpu_dclus.json into --out (default $OUT or out/).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

warnings.filterwarnings("ignore")
log = harness.log


def parse_args():
    p = harness.parser(__doc__)
    p.add_argument("--beta", type=float, default=0.25)
    p.add_argument("--presets", default="reu-50k,reu-50k-tfidf",  # PRESET:newtopics, 20ng+r52: see corpus()
                   help="synthetic corpus shapes (gputext corpus synth presets; PRESET:newtopics), or 20ng+r52[:tf|tfidf] "
                        "(real text: Reuters added to 20 Newsgroups; --base 18821), comma-separated; each gets the whole run")
    p.add_argument("--base", type=int, help="documents clustered before the additions (default 50000; quick 3000)")
    p.add_argument("--adds", help="additions, comma-separated (default 5000,10000; quick 500,1000)")
    p.add_argument("--repeats", type=int, help="timed runs of each (default 3; quick 2)")
    p.add_argument("--skip-cpu", action="store_true", help="no CPU-twin update (no device == CPU check)")
    p.add_argument("--only-in-place", action="store_true",
                   help="time only the in-place update (not the copy form and the new-file writer)")
    args = p.parse_args()
    q = args.quick
    args.base = args.base or (3000 if q else 50000)
    args.adds = [int(x) for x in (args.adds or ("500,1000" if q else "5000,10000")).split(",")]
    args.repeats = args.repeats or (2 if q else 3)
    args.presets = [x for x in args.presets.split(",") if x]
    return args


def median(xs):
    """Median of the values that are not None (None when there are none)."""
    return harness.median(x for x in xs if x is not None)


def device_info(backend):
    env = harness.probe(backend)
    return {**env, "cpu_threads": env["numba_threads"], "gpu": env.get("gpu")}


NEW_TOPICS = ":newtopics"


REAL = "20ng+r52"


def real_corpus(preset):
    """``20ng+r52[:WEIGHTING]`` (tf by default, the paper's weighting; or tfidf): the paper's
    scenario on real text: the 18,821 documents of 20 Newsgroups (train + test) first, then the
    9,100 of Reuters R52, one vocabulary (``gputext corpus build`` of the three files, English
    stopwords).  Read from $GPUTEXT_DATASETS or .data (a copy of ../shared/datasets).  Returns
    (corpus, number of 20NG documents)."""
    from gputext.io.ingest import build_corpus
    weighting = preset.split(":")[1] if ":" in preset else "tf"
    ddir = os.environ.get("GPUTEXT_DATASETS") or (".data" if os.path.isdir(".data") else "../shared/datasets")
    files = [os.path.join(ddir, *f) for f in (("20newsgroups", "20newsgroups-train.tab"),
                                                 ("20newsgroups", "20newsgroups-test.tab"),
                                                 ("reuters-r52", "reuters-r52-train.tab"),
                                                 ("reuters-r52", "reuters-r52-test.tab"))]
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        raise SystemExit(f"{preset}: missing {missing[0]} (set GPUTEXT_DATASETS)")
    whole = build_corpus(files, weighting=weighting, quiet=True)
    label = whole.obs["label"]
    names = np.asarray(label.categories)[np.asarray(label.codes)]
    n_20ng = int(sum(1 for x in names if "." in x))  # 20NG's labels are dotted (comp.graphics), R52's not
    if not np.all([("." in x) for x in names[:n_20ng]]):
        raise SystemExit(f"{preset}: the 20NG documents do not come first")
    return whole, n_20ng


def corpus(n_docs, preset, seed=2, n_base=None):
    """A synthetic corpus of a preset's shape (or ``20ng+r52``: real_corpus, its first n_docs).  ``PRESET:newtopics`` (the paper's scenario of
    Tdt-65K documents added to Reu-50K: the additions are about other topics): the preset's shape
    with 40 single-label classes, the first n_base documents from classes 0-19, the rest from
    classes 20-39 (drawn from one corpus of about twice the size, so vocabulary and idf are shared)."""
    from gputext.datasets.presets import resolve
    from gputext.datasets.synth import make_corpus
    if preset.split(":")[0] == REAL:
        whole, n_20ng = real_corpus(preset)
        if n_base is not None and n_base != n_20ng:
            raise SystemExit(f"{preset}: --base must be {n_20ng} (all of 20NG)")
        return whole.take(np.arange(min(n_docs, whole.n_docs)))
    if not preset.endswith(NEW_TOPICS):
        _, params = resolve(preset, n_docs=n_docs)
        return make_corpus(seed=seed, **params)
    n_base = n_docs if n_base is None else n_base
    _, params = resolve(preset[:-len(NEW_TOPICS)], n_docs=int(2.2 * max(n_base, n_docs - n_base)) + 100)
    params.update(n_classes=40, multilabel=False)
    whole = make_corpus(seed=seed, **params)
    label = np.asarray(whole.obs["label"].codes if hasattr(whole.obs["label"], "codes") else whole.obs["label"])
    old = np.flatnonzero(label < 20)[:n_base]
    new = np.flatnonzero(label >= 20)[:n_docs - n_base]
    if len(old) < n_base or len(new) < n_docs - n_base:
        raise SystemExit(f"{preset}: not enough documents per topic half")
    return whole.take(np.concatenate([old, new]))


def read_result(path):
    """(centers int64, membership CSR) of a result file, selectively."""
    import h5py
    from gputext.cluster import metrics
    c = metrics.load_clustering(path, "clusters")
    with h5py.File(path, "r") as f:
        centers = f["uns/gputext/star/centers"][()]
    return centers, c.membership


def graph_arrays(path):
    """Every dataset of the stored graph group (for bitwise comparison of two result files)."""
    import h5py
    from gputext.cluster import dclus
    out = {}
    with h5py.File(path, "r") as f:
        g = f[dclus.GRAPH_KEY]
        for k in g.keys():
            if isinstance(g[k], h5py.Dataset):
                out[k] = g[k][()]
    return out


def same_files(a, b):
    ca, ma = read_result(a)
    cb, mb = read_result(b)
    checks = {"centers": np.array_equal(ca, cb),
              "membership": ma.shape == mb.shape and (ma != mb).nnz == 0}
    ga, gb = graph_arrays(a), graph_arrays(b)
    checks["graph"] = ga.keys() == gb.keys() and all(np.array_equal(ga[k], gb[k]) for k in ga)
    return all(checks.values()), checks


def same_datasets(a, b):
    """Every dataset and attribute of two result files equal (timings left out): X, obs, obsm, uns, graph."""
    import h5py

    def snap(path):
        out = {}

        def visit(name, obj):
            if "seconds" in name.rsplit("/", 1)[-1] or name.endswith("write_mode"):
                return
            attrs = sorted((k, repr(v.tolist() if hasattr(v, "tolist") else v)) for k, v in obj.attrs.items())
            value = None
            if isinstance(obj, h5py.Dataset):
                v = obj[()]
                value = (str(obj.dtype), v.tobytes() if isinstance(v, np.ndarray) and v.dtype.kind != "O"
                         else repr(v.tolist() if isinstance(v, np.ndarray) else v))
            out[name] = (value, attrs)
        with h5py.File(path, "r") as f:
            f.visititems(visit)
        return out
    sa, sb = snap(a), snap(b)
    return sa == sb


def file_growth(args, whole, base_path, backend, tmp, n_add, parts=4):
    """File size after ``parts`` successive in-place updates of n_add/parts documents each, against
    the new-file writer's file after the same updates (HDF5 does not reuse the space of deleted
    groups after the file is closed)."""
    from gputext.cluster import dclus
    a, b = os.path.join(tmp, "grow_inplace.h5"), os.path.join(tmp, "grow_new.h5")
    shutil.copyfile(base_path, a)
    shutil.copyfile(base_path, b)
    sizes = []
    step = n_add // parts
    for k in range(parts):
        add = whole.take(np.arange(args.base + k * step, args.base + (k + 1) * step))
        dclus.update(a, add, a, backend, compression=None)
        dclus.update(b, add, b, backend, compression=None, write="new")
        sizes.append({"docs": args.base + (k + 1) * step, "in_place_bytes": os.path.getsize(a),
                      "new_file_bytes": os.path.getsize(b)})
    equal = same_datasets(a, b)
    os.remove(a)
    os.remove(b)
    return {"parts": parts, "docs_each": step, "sizes": sizes, "equal": equal}


def same_graph(update_path, full_path):
    """The graph stored after the update equals the union's graph of the full recluster."""
    from gputext.cluster import dclus
    g1, _ = dclus.read_stored_graph(update_path)
    g2, _ = dclus.read_stored_graph(full_path)
    return bool(np.array_equal(g1.indptr, g2.indptr) and np.array_equal(g1.indices, g2.indices)
                and np.array_equal(g1.weights, g2.weights)), int(g2.n_edges)


def relevance_events(graph, repeats=5):
    """Relevance kernel alone on a graph, CUDA events, median (seconds)."""
    from numba import cuda
    from gputext.kernels import star as kstar
    kernel = kstar.relevance_kernel(32, 8)
    d = [cuda.to_device(a) for a in (graph.indptr, graph.indices if len(graph.indices) else np.zeros(1, np.int32),
                                     graph.degree, graph.ais)]
    cnt = cuda.device_array(graph.n, np.int32)
    rel = cuda.device_array(graph.n, np.float64)
    blocks = max(1, min(65536, (graph.n + 7) // 8))
    return harness.gpu_ms(lambda: kernel[blocks, (32, 8)](*d, cnt, rel), repeats, warmup=1) / 1e3


UPDATE_STAGES = ("read", "scoring", "pcc", "load_rows", "local_graph", "relevance", "cover", "improve", "membership",
                 "union_clusters", "copy", "write_corpus", "write_graph", "swap")


READ_PARTS = ("read_X", "read_obs", "read_var", "read_obsm_uns", "read_graph_meta", "read_checks")  # JSON only
# read_obs / read_var: without decoding the ids / terms since 2026-11-25 08:00 (stored id hashes and
# vocabulary digest); read_checks: vocabulary and duplicate-id checks


def update_stages(stats):
    out = {s: stats.get(f"seconds_{s}") for s in UPDATE_STAGES + READ_PARTS}
    if out["write_corpus"] is None and out["write_graph"] is None:  # format 1 (before the finer stages)
        out["write_graph"] = stats.get("seconds_write")
        out["load_rows"] = stats.get("seconds_load")
    return out


def write_additions(whole, n_base, n_add, tmp):
    """The n_add documents after the first n_base of ``whole`` and the union of both, written
    uncompressed into tmp: (add, union, add_path, union_path)."""
    from gputext.io import write_corpus
    add, union = whole.take(np.arange(n_base, n_base + n_add)), whole.take(np.arange(n_base + n_add))
    add_path, union_path = os.path.join(tmp, f"add{n_add}.h5"), os.path.join(tmp, f"union{n_add}.h5")
    write_corpus(add, add_path, compression=None)
    write_corpus(union, union_path, compression=None)
    return add, union, add_path, union_path


def run(args, preset, backend, cpu, tmp):
    from gputext.cluster import dclus
    from gputext.cluster.star import cluster_star
    from gputext.io import read_corpus

    rows = []
    total = args.base + max(args.adds)
    t = time.perf_counter()
    whole = corpus(total, preset, n_base=args.base)
    log(f"corpus: {total} docs, {whole.X.nnz} nnz ({time.perf_counter() - t:.1f} s)")
    base = whole.take(np.arange(args.base))
    base_path = os.path.join(tmp, "base.h5")
    t = time.perf_counter()
    res = cluster_star(base.X, args.beta, backend)
    dclus.write_result(base, res, base_path, args.beta, backend.name, compression=None)
    base_info = {"preset": preset, "docs": args.base, "edges": res.graph.n_edges, "clusters": res.n_clusters,
                 "seconds": time.perf_counter() - t, "file_bytes": os.path.getsize(base_path)}
    log(f"base: {base_info}")
    del res
    for n_add in args.adds:
        _, _, add_path, union_path = write_additions(whole, args.base, n_add, tmp)
        upd_path, full_path = os.path.join(tmp, "updated.h5"), os.path.join(tmp, "full.h5")
        inplace_path, new_path = os.path.join(tmp, "inplace.h5"), os.path.join(tmp, "newfile.h5")
        upd_runs, full_runs, copy_runs, new_runs = [], [], [], []
        report = None

        def timed_update(src, dst, runs, write="append"):
            # end to end from the added corpus's file, as the CLI does: update() reads it selectively
            # (its stage seconds_read_added; before 2026-11-25 08:00 this read_corpus'd it first)
            t0 = time.perf_counter()
            rep_ = dclus.update(src, add_path, dst, backend, compression=None, write=write)
            t1 = time.perf_counter()
            st = rep_.stats
            stages = update_stages(st)
            stages["read_added"] = st.get("seconds_read_added")
            # compute = scoring + load + cluster, the spans scripts/gpu_star.py reported before
            compute = sum(st.get(k, 0.0) for k in ("seconds_scoring", "seconds_load", "seconds_cluster"))
            runs.append({"total": t1 - t0, "compute": compute, **stages})
            return rep_

        for rep in range(args.repeats + 1):  # run 0 is the warm-up
            # the update as it is used: in place (-o = --update); the base is copied first, untimed
            shutil.copyfile(base_path, inplace_path)
            report = timed_update(inplace_path, inplace_path, upd_runs)
            if not args.only_in_place:
                timed_update(base_path, upd_path, copy_runs)  # -o another file: OS copy + append
                timed_update(base_path, new_path, new_runs, write="new")  # the whole union into a new file
            t0 = time.perf_counter()
            u = read_corpus(union_path)
            t_read = time.perf_counter() - t0
            full = cluster_star(u.X, args.beta, backend)
            t_cl = time.perf_counter()
            dclus.write_result(u, full, full_path, args.beta, backend.name, compression=None)
            t2 = time.perf_counter()
            fs = full.stats
            full_runs.append({"total": t2 - t0, "compute": fs["seconds_total"], "read": t_read,
                              "scoring": fs.get("graph_seconds_scoring"), "assembly": fs.get("graph_seconds_assembly"),
                              "relevance": fs.get("seconds_relevance"), "cover": fs.get("seconds_cover"),
                              "write": t2 - t_cl})
            log(f"+{n_add} run {rep}: update {upd_runs[-1]['total']:.2f} s, full {full_runs[-1]['total']:.2f} s")
        upd = {k: median([r[k] for r in upd_runs[1:]]) for k in upd_runs[0]}
        fl = {k: median([r[k] for r in full_runs[1:]]) for k in full_runs[0]}
        forms = {}
        for name, runs in (("copy", copy_runs), ("new_file", new_runs)):
            if runs:
                forms[name] = {k: median([r[k] for r in runs[1:]]) for k in runs[0]}
                forms[name]["ratio_total"] = forms[name]["total"] / fl["total"]
        row = {"preset": preset, "n_base": args.base, "n_add": n_add, "update": upd, "full": fl,
               "update_form": "in place (-o = --update)", "other_forms": forms,
               "ratio_total": upd["total"] / fl["total"], "ratio_compute": upd["compute"] / fl["compute"],
               # each timed update with the recluster that ran right after it (same host state), median
               "ratio_paired_median": median([a["total"] / b["total"] for a, b in zip(upd_runs[1:], full_runs[1:])]),
               "runs_total": {"update": [r["total"] for r in upd_runs], "full": [r["total"] for r in full_runs]},
               # everything but scoring, on both sides: the host and I/O work the update still does
               "ratio_without_scoring": (upd["total"] - (upd["scoring"] or 0.0)) / (fl["total"] - (fl["scoring"] or 0.0)),
               "components_touched": report.components_touched, "components_total": report.components_total,
               "pccs_loaded": report.pccs_loaded, "pccs_total": report.pccs_total,
               "vertices_loaded": report.vertices_loaded, "entries_loaded": report.entries_loaded,
               "affected_vertices": report.stats.get("affected_vertices"), "new_edges": report.n_new_edges,
               "decoded": getattr(report, "decoded", None),  # strings the in-place update had to decode
               "clusters_update": report.n_clusters, "clusters_full": full.n_clusters, "edges_full": full.graph.n_edges,
               "file_bytes_update": os.path.getsize(inplace_path), "file_bytes_full": os.path.getsize(full_path),
               "file_bytes_base": os.path.getsize(base_path)}
        if not args.only_in_place:
            row["file_bytes_copy"] = os.path.getsize(upd_path)
            row["file_bytes_new_file"] = os.path.getsize(new_path)
            row["inplace_equals_new_file"] = same_datasets(inplace_path, new_path)
            row["copy_equals_new_file"] = same_datasets(upd_path, new_path)
        upd_path = inplace_path  # the checks below read the in-place result
        # exactness: graph after the update == union graph; agreement with the recluster
        row["graph_equals_union"], _ = same_graph(upd_path, full_path)
        from gputext.cluster import metrics
        cu, mu = read_result(upd_path)
        cf, mf = read_result(full_path)
        row["agreement_fbcubed"] = metrics.fbcubed(mu, mf)["f"]
        row["agreement_onmi_max"] = metrics.onmi(mu, mf)["max"]
        row["same_clusters_as_full"] = bool(np.array_equal(cu, cf) and mu.shape == mf.shape and (mu != mf).nnz == 0)
        if backend.is_cuda and not backend.simulator:
            try:
                g, _ = dclus.read_stored_graph(upd_path)
                row["relevance_kernel_union_s"] = relevance_events(g)
                del g
            except Exception as exc:  # informative only
                row["relevance_kernel_union_s"] = f"{type(exc).__name__}: {exc}"[:200]
        if backend.name != "cpu" and not args.skip_cpu and n_add == max(args.adds):
            t = time.perf_counter()
            cpu_path = os.path.join(tmp, "updated_cpu.h5")
            dclus.update(base_path, read_corpus(add_path), cpu_path, cpu, compression=None)
            row["cpu_update_seconds"] = time.perf_counter() - t
            row["device_equals_cpu"], row["device_equals_cpu_checks"] = same_files(upd_path, cpu_path)
            os.remove(cpu_path)
        log(f"+{n_add}: ratio {row['ratio_total']:.3f} (compute {row['ratio_compute']:.3f}); "
            f"touched {row['components_touched']}/{row['components_total']}; graph == union: {row['graph_equals_union']}")
        if n_add == max(args.adds) and not args.only_in_place:
            row["file_growth"] = file_growth(args, whole, base_path, backend, tmp, n_add)
            log(f"file growth: {row['file_growth']}")
        rows.append(row)
        for pth in (add_path, union_path, upd_path, full_path, os.path.join(tmp, "updated.h5"), new_path):
            if os.path.exists(pth):
                os.remove(pth)
    return base_info, rows


def fmt(x, digits=3):
    return "n/a" if not isinstance(x, (int, float)) else f"{x:.{digits}f}"


def markdown(r):
    env = r["env"]
    lines = [f"### gputext DClustR update vs full recluster ({env.get('gpu') or env['backend']}, "
             f"{env['cpu_threads']} CPU threads, beta {r['beta']}, graph format {r['graph_format']}, {r['date']})", ""]
    for b in r["base"]:
        lines.append(f"Base ({b['preset']}): {b['docs']:,} documents, {b['edges']:,} edges, {b['clusters']:,} clusters, "
                     f"file {b['file_bytes'] / 2**20:.0f} MiB, clustered + written in {b['seconds']:.2f} s")
    lines += ["", "| preset | added | update s (compute) | full s (compute) | ratio end to end (compute; without scoring) | components touched | "
              "PCCs loaded | vertices in touched components | new edges | union edges | graph == union | "
              "same clusters as full / F | device == CPU twin |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for u in r["update"]:
        lines.append(f"| {u['preset']} | {u['n_add']:,} | {fmt(u['update']['total'], 2)} ({fmt(u['update']['compute'], 2)}) | "
                     f"{fmt(u['full']['total'], 2)} ({fmt(u['full']['compute'], 2)}) | {u['ratio_total']:.3f} "
                     f"({u['ratio_compute']:.3f}; {u['ratio_without_scoring']:.3f}) | {u['components_touched']:,} / {u['components_total']:,} | "
                     f"{u['pccs_loaded']:,} / {u['pccs_total']:,} | {u.get('affected_vertices') or 0:,} | "
                     f"{u['new_edges']:,} | {u['edges_full']:,} | {u['graph_equals_union']} | "
                     f"{u['same_clusters_as_full']} / {u['agreement_fbcubed']:.3f} | {u.get('device_equals_cpu', 'n/a')} |")
    if any(u.get("other_forms") for u in r["update"]):
        lines += ["", "Update written in place (the rows above), into another file (OS copy of the old file + the same "
                  "append), and as a whole new file (the writer before 2026-11-25); file sizes after one update:", "",
                  "| preset | added | in place s (ratio) | copy s (ratio) | new file s (ratio) | MiB: base / in place / copy / new file / full | equal files |",
                  "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
        for u in r["update"]:
            o = u.get("other_forms") or {}
            cell = lambda k: f"{fmt(o[k]['total'])} ({o[k]['ratio_total']:.3f})" if k in o else "n/a"
            mib = " / ".join(fmt(u.get(k, 0) / 2**20, 1) for k in ("file_bytes_base", "file_bytes_update", "file_bytes_copy",
                                                                  "file_bytes_new_file", "file_bytes_full"))
            lines.append(f"| {u['preset']} | {u['n_add']:,} | {fmt(u['update']['total'])} ({u['ratio_total']:.3f}) | {cell('copy')} | "
                         f"{cell('new_file')} | {mib} | {u.get('inplace_equals_new_file', 'n/a')} / {u.get('copy_equals_new_file', 'n/a')} |")
        lines += ["", "Stages of the copy form: " + "; ".join(
            f"{u['preset']} +{u['n_add']:,}: copy {fmt(u['other_forms']['copy'].get('copy'))} s, write corpus "
            f"{fmt(u['other_forms']['copy'].get('write_corpus'))} s, write graph {fmt(u['other_forms']['copy'].get('write_graph'))} s"
            for u in r["update"] if "copy" in (u.get("other_forms") or {}))]
    for u in r["update"]:
        g = u.get("file_growth")
        if g:
            lines.append("")
            lines.append(f"File growth, {u['preset']}: {g['parts']} successive in-place updates of {g['docs_each']:,} documents: "
                         + ", ".join(f"{z['docs']:,} docs {z['in_place_bytes'] / 2**20:.1f} MiB (new file "
                                     f"{z['new_file_bytes'] / 2**20:.1f})" for z in g["sizes"]) + f"; same datasets: {g['equal']}")
    lines += ["", "Update stages (median seconds): " + ", ".join(["read added corpus"] + [s.replace("_", " ") for s in UPDATE_STAGES]),
              "", "| preset | added | read added | " + " | ".join(s.replace("_", " ") for s in UPDATE_STAGES) + " | total |",
              "| --- " + "| ---: " * (len(UPDATE_STAGES) + 3) + "|"]
    for u in r["update"]:
        s = u["update"]
        lines.append(f"| {u['preset']} | {u['n_add']:,} | {fmt(s.get('read_added'))} | " + " | ".join(fmt(s.get(k)) for k in UPDATE_STAGES)
                     + f" | {fmt(s['total'])} |")
    lines += ["", "| preset | full recluster of | read | scoring | assembly | relevance | cover | write | total |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for u in r["update"]:
        s = u["full"]
        lines.append(f"| {u['preset']} | {u['n_base'] + u['n_add']:,} | " + " | ".join(fmt(s.get(k)) for k in
                                                                  ("read", "scoring", "assembly", "relevance", "cover", "write"))
                     + f" | {fmt(s['total'])} |")
    if any("relevance_kernel_union_s" in u for u in r["update"]):
        lines.append("")
        for u in r["update"]:
            k = u.get("relevance_kernel_union_s")
            if isinstance(k, float):
                lines.append(f"Relevance kernel on the union graph ({u['preset']}, +{u['n_add']:,}, CUDA events): {k * 1e3:.2f} ms")
    lines += ["", "| goal | target | measured | met |", "| --- | --- | --- | --- |"]
    for u in r["update"]:
        if u["n_add"] == 10000 and u["n_base"] == 50000:
            paired = u.get("ratio_paired_median")
            lines.append(f"| {u['preset']}: add 10,000 to 50,000 vs full recluster (end to end) | <= 0.20 | {u['ratio_total']:.3f} "
                         f"(compute {u['ratio_compute']:.3f}; median of paired runs {fmt(paired)}) | "
                         f"{'yes' if u['ratio_total'] <= 0.2 else 'NO'} |")
    for u in r["update"]:
        ok = u["graph_equals_union"] and u.get("device_equals_cpu", True)
        lines.append(f"| {u['preset']} +{u['n_add']:,}: stored graph == union graph; device == CPU twin | identical | "
                     f"{u['graph_equals_union']} / {u.get('device_equals_cpu', 'not run')} | {'yes' if ok else 'NO'} |")
    return "\n".join(lines)


def main():
    args = parse_args()
    from gputext.backend import resolve
    from gputext.cluster import dclus
    from gputext.cluster.star import cluster_star

    backend = resolve(args.device)
    cpu = resolve("cpu")
    t_start = time.perf_counter()
    env = device_info(backend)
    results = {"script": "scripts/gpu_dclus.py", "argv": sys.argv[1:], "date": env["date"], "quick": args.quick,
               "beta": args.beta, "presets": args.presets, "env": env,
               "graph_format": getattr(dclus, "GRAPH_FORMAT_VERSION", 1)}
    log(f"device: {results['env']}")
    # warm-up: compile every kernel and jitted helper of both paths
    with tempfile.TemporaryDirectory(prefix="gpu_dclus_warm_") as tmp:
        small = corpus(700, args.presets[0], seed=9)
        for be in dict.fromkeys([backend, cpu]):
            a, b = small.take(np.arange(500)), small.take(np.arange(500, 700))
            res = cluster_star(a.X, args.beta, be)
            dclus.write_result(a, res, os.path.join(tmp, "w.h5"), args.beta, be.name, compression=None)
            dclus.update(os.path.join(tmp, "w.h5"), b, os.path.join(tmp, "w2.h5"), be, compression=None)
    results["base"], results["update"] = [], []
    for preset in args.presets:
        with tempfile.TemporaryDirectory(prefix="gpu_dclus_") as tmp:
            base_info, rows = run(args, preset, backend, cpu, tmp)
        results["base"].append(base_info)
        results["update"] += rows
    results["seconds"] = time.perf_counter() - t_start
    harness.Report(args.out, results).write("gpu_dclus.json", markdown(results), indent=2)

if __name__ == "__main__":
    main()
