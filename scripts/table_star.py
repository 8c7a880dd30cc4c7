#!/usr/bin/env python3
"""Reproduce the CUDA-OClus / CUDA-DClus paper's Tables 4-5 and Figures 17-19 with gputext.

Collections: Reuters-v2 shapes of the paper's Table 3 (presets reu-10k .. reu-70k of
gputext.datasets: documents, terms and average terms a document as printed, tf weights, 20
overlapping classes) and 20 Newsgroups (../shared/datasets, train part, tf-idf) when present.
"device" is --device (the GPU when usable); "cpu" is the CPU twin (numba, all cores).

  table4  clustering agreement: device vs CPU twin (FBcubed, overlapping NMI; 1.0 expected since
          the results are identical), and the order dependence the paper averages over: the
          documents shuffled --shuffles times, each clustering compared with the unshuffled one.
  table5  DClustR chain (paper 4.1): cluster 30K documents, add 20K, then 10K (one Reu-30K-shaped
          model, so the vocabulary is shared): device vs CPU twin agreement at each step, and the
          update vs a full recluster of the same documents.
  fig17   clustering time vs collection size (Reu-10K..70K, 20NG), beta 0.25 and 0.35, device vs
          CPU twin (graph, relevance, cover and improvement; no file I/O).
  fig18   update time (DClustR, from a file, in place) when N = 5,000 or 10,000 documents are
          added to a Reu-50K-shaped collection, --steps times in a row, vs a full recluster of the
          union (end to end: read, cluster, write; the update path compiled before).  --fig18-additions newtopics (the default, the
          paper's scenario: Tdt-65K documents, other topics, added to Reu-50K; see
          gpu_dclus.corpus) or same (additions drawn from Reu-50K's own topics: most of the graph
          is one touched component, so the update re-covers most of it).
  fig19   connected components (and PCCs, vertices) loaded by each of those updates vs all of
          them for the full recluster (from the fig18 runs).

Each part writes out/star/<part>.json; the markdown tables (out/star/tables.md) and the PNG plots
(fig17.png, fig18.png, fig19.png) are rendered from whatever JSON is there, so parts can run in
separate invocations:

  python scripts/table_star.py --quick --device cpu            # small, any machine (about a minute)
  python scripts/table_star.py --parts table4,fig17 --cpu-max-docs 30000
  python scripts/table_star.py --parts table5,fig18            # then fig19 renders from fig18's runs
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402
from gpu_dclus import NEW_TOPICS, corpus as dclus_corpus  # noqa: E402
from gpu_star import log, reu_corpus  # noqa: E402

warnings.filterwarnings("ignore")

PARTS = ("table4", "table5", "fig17", "fig18")
SIZES = (10000, 20000, 30000, 40000, 50000, 60000, 70000)
PRESET_OF = {n: f"reu-{n // 1000}k" for n in SIZES}


def parse_args():
    p = harness.parser(__doc__, quick="sizes / 10 (1K..7K docs), 3 shuffles, small updates",
                       out=os.path.join(os.environ.get("OUT", "out"), "star"))
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    p.add_argument("--betas", default="0.25,0.35")
    p.add_argument("--sizes", help="fig17 sizes (default the paper's 10K..70K; table4 uses those <= 50K)")
    p.add_argument("--shuffles", type=int, help="document orders per size and beta in table4 (default 20; quick 3)")
    p.add_argument("--cpu-max-docs", type=int, default=70000, help="largest collection the CPU twin runs on")
    p.add_argument("--steps", type=int, help="additions in a row for fig18 (default 3; quick 2)")
    p.add_argument("--fig18-additions", choices=["newtopics", "same"], default="newtopics",
                   help="fig18's added documents: other topics (the paper's Tdt-65K into Reu-50K) or Reu-50K's own")
    p.add_argument("--render-only", action="store_true", help="only render tables and plots from the JSON in --out")
    a = p.parse_args()
    scale = 10 if a.quick else 1
    a.sizes = [int(float(x)) for x in a.sizes.split(",")] if a.sizes else [n // scale for n in SIZES]
    a.betas = [float(b) for b in a.betas.split(",")]
    a.shuffles = a.shuffles if a.shuffles is not None else (3 if a.quick else 20)
    a.steps = a.steps or (2 if a.quick else 3)
    a.scale = scale
    a.parts = [x for x in a.parts.split(",") if x]
    for part in a.parts:
        if part not in PARTS + ("fig19",):
            p.error(f"unknown part {part!r}")
    return a


def corpus_of(n_docs, scale, seed=0):
    """The Reu shape closest to n_docs (its preset at n_docs * scale), with n_docs documents."""
    preset = PRESET_OF.get(min(SIZES, key=lambda s: abs(s - n_docs * scale)))
    return reu_corpus(n_docs, seed=seed, preset=preset), preset


class Runs:
    """Clusterings computed in this invocation, reused across parts: key (name, beta, device)."""

    def __init__(self):
        self.cache = {}

    def get(self, name, X, beta, backend):
        from gputext.cluster.star import cluster_star
        key = (name, beta, backend.name)
        if key not in self.cache:
            self.cache[key] = cluster_star(X, beta, backend)
            s = self.cache[key].stats
            log(f"{name} beta {beta} {backend.name}: {s['seconds_total']:.2f} s, {s['n_edges']} edges, "
                f"{s['n_clusters']} clusters")
        return self.cache[key]


def agreement(a, b):
    from gputext.cluster import metrics
    f = metrics.fbcubed(a, b)["f"]
    o = metrics.onmi(a, b)
    return {"fbcubed": f, "nmi_lfk": o["lfk"], "nmi_max": o["max"]}


def part_table4(a, dev, cpu, runs):
    from gputext.cluster.star import cluster_star
    rows = []
    for n in [s for s in a.sizes if s * a.scale <= 50000]:
        c, preset = corpus_of(n, a.scale)
        for beta in a.betas:
            base = runs.get(f"{preset}@{n}", c.X, beta, dev)
            row = {"docs": n, "preset": preset, "beta": beta, "device": dev.name}
            if dev.name != "cpu" and n <= a.cpu_max_docs:
                twin = runs.get(f"{preset}@{n}", c.X, beta, cpu)
                row["twin"] = agreement(base.membership, twin.membership)
                row["twin_identical"] = bool((base.membership != twin.membership).nnz == 0
                                             and np.array_equal(base.centers, twin.centers))
            rng = np.random.default_rng(1234)
            orders = []
            for _ in range(a.shuffles):
                perm = rng.permutation(n)
                res = cluster_star(c.X[perm], beta, dev)
                back = res.membership[np.argsort(perm)]
                orders.append(agreement(back, base.membership))
            if orders:
                row["orders"] = {k: {"mean": float(np.mean([o[k] for o in orders])), "min": float(np.min([o[k] for o in orders]))}
                                 for k in orders[0]}
            rows.append(row)
            log(f"table4 {preset}@{n} beta {beta}: {row.get('twin')} orders {row.get('orders')}")
    return rows


def part_table5(a, dev, cpu):
    from gputext.cluster import dclus, metrics
    from gputext.cluster.star import cluster_star
    sizes = [30000 // a.scale, 20000 // a.scale, 10000 // a.scale]
    whole = reu_corpus(sum(sizes), seed=5, preset="reu-30k")
    bounds = np.cumsum([0] + sizes)
    rows = []
    with tempfile.TemporaryDirectory(prefix="table5_") as tmp:
        for beta in a.betas:
            paths = {}
            for be in dict.fromkeys([dev, cpu]).keys():
                first = whole.take(np.arange(bounds[1]))
                res = cluster_star(first.X, beta, be)
                p = os.path.join(tmp, f"{be.name}_0.h5")
                dclus.write_result(first, res, p, beta, be.name, compression=None)
                paths[be.name] = [p]
                for step in (1, 2):
                    q = os.path.join(tmp, f"{be.name}_{step}.h5")
                    dclus.update(paths[be.name][-1], whole.take(np.arange(bounds[step], bounds[step + 1])), q, be,
                                 compression=None)
                    paths[be.name].append(q)
            for step in range(3):
                n = int(bounds[step + 1])
                got = metrics.load_clustering(paths[dev.name][step], "clusters").membership
                row = {"beta": beta, "step": step, "docs": n, "label": ["30K", "30K+20K", "30K+20K+10K"][step]}
                if dev.name != "cpu":
                    twin = metrics.load_clustering(paths["cpu"][step], "clusters").membership
                    row["twin"] = agreement(got, twin)
                full = cluster_star(whole.X[:n], beta, dev).membership
                row["vs_full_recluster"] = agreement(got, full)
                rows.append(row)
                log(f"table5 beta {beta} step {step}: {row}")
    return rows


def part_fig17(a, dev, cpu, runs):
    rows = []
    targets = [(f"{corpus_of(n, a.scale)[1]}@{n}", n) for n in a.sizes]
    for name, n in targets:
        c, preset = corpus_of(n, a.scale)
        for beta in a.betas:
            for be in dict.fromkeys([dev, cpu]).keys():
                if be.name == "cpu" and n > a.cpu_max_docs:
                    continue
                s = runs.get(name, c.X, beta, be).stats
                rows.append({"collection": preset.replace("reu-", "Reu-").replace("k", "K"), "docs": n, "beta": beta,
                             "device": be.name, "key": name, "seconds": s["seconds_total"], "graph": s["seconds_graph"],
                             "relevance": s["seconds_relevance"], "cover": s["seconds_cover"], "edges": s["n_edges"],
                             "clusters": s["n_clusters"]})
    ddir = harness.datasets()
    ng = ddir / "20newsgroups" / "20newsgroups-train.tab" if ddir else None
    if ng is not None and ng.exists():
        from gputext.io.ingest import build_corpus
        c = build_corpus(str(ng))
        if a.quick:
            c = c.take(np.arange(c.n_docs // a.scale))
        for beta in a.betas:
            for be in dict.fromkeys([dev, cpu]).keys():
                s = runs.get("20NG", c.X, beta, be).stats
                rows.append({"collection": "20NG", "docs": c.n_docs, "beta": beta, "device": be.name, "key": "20NG",
                             "seconds": s["seconds_total"], "graph": s["seconds_graph"], "relevance": s["seconds_relevance"],
                             "cover": s["seconds_cover"], "edges": s["n_edges"], "clusters": s["n_clusters"]})
    if dev.name != "cpu":
        for r in rows:
            a_, b_ = runs.cache.get((r["key"], r["beta"], dev.name)), runs.cache.get((r["key"], r["beta"], "cpu"))
            if a_ is not None and b_ is not None:
                r["identical"] = bool(np.array_equal(a_.centers, b_.centers) and (a_.membership != b_.membership).nnz == 0
                                      and np.array_equal(a_.graph.weights, b_.graph.weights))
    return rows


def part_fig18(a, dev):
    from gputext.cluster import dclus
    from gputext.cluster.star import cluster_star
    from gputext.io import read_corpus, write_corpus
    base_n = 50000 // a.scale
    rows = []
    with tempfile.TemporaryDirectory(prefix="fig18_") as tmp:
        for n_add in (5000 // a.scale, 10000 // a.scale):
            n_all = base_n + a.steps * n_add
            if a.fig18_additions == "same":
                whole = reu_corpus(n_all, seed=7, preset="reu-50k")
            else:
                whole = dclus_corpus(n_all, "reu-50k" + NEW_TOPICS, seed=7, n_base=base_n)
            for beta in a.betas:
                cur = os.path.join(tmp, "cur.h5")
                first = whole.take(np.arange(base_n))
                dclus.write_result(first, cluster_star(first.X, beta, dev), cur, beta, dev.name, compression=None)
                for step in range(a.steps):
                    lo, hi = base_n + step * n_add, base_n + (step + 1) * n_add
                    add_path = os.path.join(tmp, "add.h5")
                    union_path = os.path.join(tmp, "union.h5")
                    write_corpus(whole.take(np.arange(lo, hi)), add_path, compression=None)
                    write_corpus(whole.take(np.arange(hi)), union_path, compression=None)
                    t = time.perf_counter()
                    # in place (-o = --update), the added corpus read from its path: as the CLI does
                    rep = dclus.update(cur, add_path, cur, dev, compression=None)
                    upd = time.perf_counter() - t
                    t = time.perf_counter()
                    u = read_corpus(union_path)
                    full = cluster_star(u.X, beta, dev)
                    pccs = dclus.write_result(u, full, os.path.join(tmp, "full.h5"), beta, dev.name, compression=None)
                    full_t = time.perf_counter() - t
                    total_components = int(len(np.unique(pccs.components())))
                    rows.append({"n_add": n_add, "beta": beta, "additions": a.fig18_additions, "step": step + 1, "docs_before": lo, "docs_after": hi,
                                 "update_seconds": upd, "full_seconds": full_t,
                                 "update_compute": rep.stats["seconds_scoring"] + rep.stats["seconds_load"] + rep.stats["seconds_cluster"],
                                 "full_compute": full.stats["seconds_total"],
                                 "components_loaded": rep.components_touched, "components_total": rep.components_total,
                                 "components_full": total_components, "pccs_loaded": rep.pccs_loaded,
                                 "pccs_total": rep.pccs_total, "vertices_loaded": rep.vertices_loaded, "device": dev.name})
                    log(f"fig18 N={n_add} beta {beta} step {step + 1}: update {upd:.2f} s, full {full_t:.2f} s, "
                        f"components {rep.components_touched}/{rep.components_total}")
    return rows


# ----------------------------------------------------------------------------- rendering

def load(out, part):
    path = os.path.join(out, f"{part}.json")
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def f3(x):
    return "n/a" if x is None else f"{x:.3f}"


def pair(agree, *keys):
    """'F / NMI ...' of an agreement dict, n/a when there is none."""
    return " / ".join(f3(agree[k]) for k in keys) if agree else "n/a"


def mean_min(orders, key):
    return f"{f3(orders[key]['mean'])} ({f3(orders[key]['min'])})" if orders else "n/a"


def render(out):
    md = harness.md_table
    lines = ["# Star clustering: the paper's tables and figures, reproduced", ""]
    t4 = load(out, "table4")
    if t4:
        meta = t4["meta"]
        lines += [f"## Table 4: CUDA-OClus vs the sequential algorithm ({meta['device']} vs CPU twin; {meta['shuffles']} "
                  "document orders)", "", md(
                      ["collection", "beta", "device vs CPU twin: FBcubed / NMI (LFK)", "identical",
                       "other orders vs given order: FBcubed mean (min)", "NMI LFK mean (min)"],
                      [[f"{r['preset']} ({r['docs']:,})", r["beta"], pair(r.get("twin"), "fbcubed", "nmi_lfk"),
                        r.get("twin_identical", "n/a"), mean_min(r.get("orders"), "fbcubed"),
                        mean_min(r.get("orders"), "nmi_lfk")] for r in t4["rows"]], "lrllll"), ""]
    t5 = load(out, "table5")
    if t5:
        lines += [f"## Table 5: CUDA-DClus chain ({t5['meta']['device']} vs CPU twin, and vs a full recluster)", "", md(
            ["step", "docs", "beta", "device vs CPU twin: FBcubed / NMI (LFK)",
             "update vs full recluster: FBcubed / NMI (LFK) / NMI (max)"],
            [[r["label"], f"{r['docs']:,}", r["beta"], pair(r.get("twin"), "fbcubed", "nmi_lfk"),
              pair(r["vs_full_recluster"], "fbcubed", "nmi_lfk", "nmi_max")] for r in t5["rows"]], "lrrll"), ""]
    f17 = load(out, "fig17")
    if f17:
        rows = f17["rows"]
        lines += [f"## Figure 17: clustering time vs collection size ({f17['meta']['host']})", "", md(
            ["collection", "docs", "beta", "device", "seconds", "graph", "relevance", "cover", "edges", "clusters",
             "same as CPU twin"],
            [[r["collection"], f"{r['docs']:,}", r["beta"], r["device"], f3(r["seconds"]), f3(r["graph"]),
              f3(r["relevance"]), f3(r["cover"]), f"{r['edges']:,}", f"{r['clusters']:,}", r.get("identical", "")]
             for r in rows], "lrrlrrrrrrl"), ""]
        if harness.have_pyplot():
            plot17(rows, os.path.join(out, "fig17.png"))
    f18 = load(out, "fig18")
    if f18:
        rows = f18["rows"]
        added = rows[0].get("additions", "same") if rows else "same"
        about = {"newtopics": "additions about other topics, the paper's scenario",
                 "same": "additions from the collection's own topics"}.get(added, added)
        lines += [f"## Figure 18: update time after N additions vs a full recluster ({f18['meta']['device']}; {about})", "",
                  md(["N", "beta", "step", "docs", "update s (compute)", "full recluster s (compute)", "ratio"],
                     [[f"{r['n_add']:,}", r["beta"], r["step"], f"{r['docs_before']:,} -> {r['docs_after']:,}",
                       f"{f3(r['update_seconds'])} ({f3(r['update_compute'])})",
                       f"{f3(r['full_seconds'])} ({f3(r['full_compute'])})",
                       f"{r['update_seconds'] / r['full_seconds']:.3f}"] for r in rows], "r" * 7), "",
                  "## Figure 19: connected components loaded by each update (the full recluster loads them all)", "",
                  md(["N", "beta", "step", "components loaded", "components (all)", "PCCs loaded / all", "vertices loaded"],
                     [[f"{r['n_add']:,}", r["beta"], r["step"], f"{r['components_loaded']:,}", f"{r['components_total']:,}",
                       f"{r['pccs_loaded']:,} / {r['pccs_total']:,}", f"{r['vertices_loaded']:,}"] for r in rows],
                     "rrrrrlr"), ""]
        if harness.have_pyplot():
            plot18(rows, os.path.join(out, "fig18.png"), os.path.join(out, "fig19.png"))
    path = os.path.join(out, "tables.md")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return "\n".join(lines)


def plot17(rows, path):
    betas = sorted({r["beta"] for r in rows})
    with harness.figure(path, 1, len(betas), (5.5 * len(betas), 4)) as (fig, axes):
        for ax, beta in zip(axes[0], betas):
            for dev, style in (("cuda", "o-"), ("cpu", "s--")):
                name = "GPU" if dev == "cuda" else "CPU twin"
                pts = sorted((r["docs"], r["seconds"]) for r in rows
                             if r["beta"] == beta and r["device"] == dev and r["collection"] != "20NG")
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name)
                for r in rows:
                    if r["beta"] == beta and r["device"] == dev and r["collection"] == "20NG":
                        ax.plot([r["docs"]], [r["seconds"]], "k*" if dev == "cuda" else "kx", label=f"20NG ({name[:3]})")
            harness.style(ax, f"beta = {beta}", "documents", "seconds (graph + relevance + cover)", logy=True, legend=8)


def plot18(rows, path18, path19):
    """Figure 18 (update vs full recluster, seconds) and Figure 19 (components loaded), one panel
    per (N, beta), one pair of bars per step."""
    keys = sorted({(r["n_add"], r["beta"]) for r in rows})
    for path, (upd, full), (lab_u, lab_f), ylabel, logy in (
            (path18, ("update_seconds", "full_seconds"), ("DClustR update", "full recluster"), "seconds (end to end)", False),
            (path19, ("components_loaded", "components_total"), ("update (DClustR)", "full recluster (all)"),
             "connected components loaded", True)):
        with harness.figure(path, 1, len(keys), (4.2 * len(keys), 3.8)) as (fig, axes):
            for ax, (n, beta) in zip(axes[0], keys):
                rs = sorted((r for r in rows if r["n_add"] == n and r["beta"] == beta), key=lambda r: r["step"])
                x = np.arange(len(rs))
                ax.bar(x - 0.2, [r[upd] for r in rs], 0.4, label=lab_u)
                ax.bar(x + 0.2, [r[full] for r in rs], 0.4, label=lab_f)
                ticks = ([f"step {r['step']}" for r in rs] if logy else
                         [f"+{r['docs_after'] - r['docs_before']}\n({r['docs_after']:,})" for r in rs])
                ax.set_xticks(x, ticks, fontsize=8 if logy else 7)
                harness.style(ax, f"N = {n:,}, beta = {beta}", ylabel=ylabel, logy=logy, legend=7, grid=False)


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    if not a.render_only:
        from gputext.backend import resolve
        dev, cpu = resolve(a.device), resolve("cpu")
        meta = {"device": dev.name, "describe": dev.describe(), "quick": a.quick, "betas": a.betas,
                "shuffles": a.shuffles, "host": f"{dev.describe()}", "date": time.strftime("%Y-%m-%d %H:%M"),
                "argv": sys.argv[1:], "env": harness.probe(dev)}
        meta["cpu_threads"] = meta["env"]["numba_threads"]
        runs = Runs()
        from gputext.cluster.star import cluster_star
        warm = reu_corpus(600, seed=9)  # compile every kernel before anything is timed
        for be in dict.fromkeys([dev, cpu]).keys():
            cluster_star(warm.X, a.betas[0], be)
        if "fig18" in a.parts:  # the update path (scoring of additions, local cover, writer) too
            from gputext.cluster import dclus
            with tempfile.TemporaryDirectory(prefix="fig18_warm_") as tmp:
                w = os.path.join(tmp, "w.h5")
                first = warm.take(np.arange(400))
                dclus.write_result(first, cluster_star(first.X, a.betas[0], dev), w, a.betas[0], dev.name, compression=None)
                dclus.update(w, warm.take(np.arange(400, 600)), w, dev, compression=None)
        for part in a.parts:
            t = time.perf_counter()
            if part == "table4":
                rows = part_table4(a, dev, cpu, runs)
            elif part == "table5":
                rows = part_table5(a, dev, cpu)
            elif part == "fig17":
                rows = part_fig17(a, dev, cpu, runs)
            elif part == "fig18":
                rows = part_fig18(a, dev)
            else:  # fig19 comes from fig18's runs
                continue
            harness.write_json(os.path.join(a.out, f"{part}.json"),
                               {"meta": {**meta, "seconds": time.perf_counter() - t}, "rows": rows}, indent=2)
            log(f"{part} done in {time.perf_counter() - t:.1f} s")
    print(render(a.out))


if __name__ == "__main__":
    main()
