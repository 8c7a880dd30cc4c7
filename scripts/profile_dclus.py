#!/usr/bin/env python3
"""Where a DClustR update's time goes, function by function (issue 5's update ratio).

Clusters --base documents of a synthetic preset (scripts/gpu_dclus.py's corpora, e.g.
``reu-50k:newtopics``), writes them uncompressed, then runs ``dclus.update`` adding --add documents
in place, --repeats times from a fresh copy, with a wall-clock timer around each named step
(``dclus.update``'s own stage timers and the functions its stages call: PCC assignment, row loading, the
symmetric transpose, relevance, DClustR's lists, the ordered cover, the improvement, ...).  It
also times the relevance of the update's local graph on the device (upload + kernel + copy back)
against the host twin, and the scoring's device stages (graph_cuda's clock).  Medians are printed
as one markdown table and written to profile_dclus.json in --out.

  python scripts/profile_dclus.py --device cpu --base 8000 --add 2000      # anywhere
  python scripts/profile_dclus.py --base 50000 --add 10000 --beta 0.25     # GPU host
"""
from __future__ import annotations

import collections
import importlib
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)

# (module of gputext.cluster.dclus that calls it, name): the stage functions and what they call
WRAPPED = [("score", "addition_rows"), ("pccs", "assign_pcc"), ("pccs", "add_owner_stats"),
           ("pccs", "components_of_pccs"), ("local", "load_pcc_rows"), ("local", "symmetric_from_owner"),
           ("cover", "compute_relevance"), ("cover", "dclustr_lists"), ("cover", "covered_by"),
           ("cover", "candidate_order"), ("cover", "cover_candidates"), ("cover", "degree_order"),
           ("cover", "improve_centers"), ("cover", "membership_matrix"), ("update", "append_update")]


def main():
    p = harness.parser(__doc__, quick=None)
    p.add_argument("--preset", default="reu-50k:newtopics")
    p.add_argument("--base", type=int, default=50000)
    p.add_argument("--add", type=int, default=10000)
    p.add_argument("--beta", type=float, default=0.25)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()

    from gpu_dclus import corpus
    from gputext.backend import resolve
    from gputext.cluster import dclus
    from gputext.cluster import graph_cuda
    from gputext.cluster.star import cluster_star, compute_relevance
    from gputext.io.corpus import write_corpus

    backend = resolve(a.device)
    times = collections.defaultdict(float)
    for module, name in WRAPPED:
        owner = importlib.import_module(f"gputext.cluster.dclus.{module}")
        f = getattr(owner, name)

        def timed(*args, _f=f, _n=name, **kw):
            t = time.perf_counter()
            try:
                return _f(*args, **kw)
            finally:
                times[_n] += time.perf_counter() - t
        setattr(owner, name, timed)
    scoring_stats = []
    build = graph_cuda.build_graph_cuda

    def build_logged(*args, **kw):
        out = build(*args, **kw)
        if out is not None:
            scoring_stats.append(out[-1])
        return out
    graph_cuda.build_graph_cuda = build_logged
    local_graphs = []
    stage_update = importlib.import_module("gputext.cluster.dclus.update")
    local_graph = stage_update.local_graph

    def keep_local(*args, **kw):
        out = local_graph(*args, **kw)
        local_graphs.append(out.graph)
        return out
    stage_update.local_graph = keep_local

    whole = corpus(a.base + a.add, a.preset, n_base=a.base)
    base, add = whole.take(list(range(a.base))), whole.take(list(range(a.base, a.base + a.add)))
    tmp = tempfile.mkdtemp()
    base_path, add_path, work = (os.path.join(tmp, x) for x in ("base.h5", "add.h5", "work.h5"))
    res = cluster_star(base, beta=a.beta, device=backend)
    dclus.write_result(base, res, base_path, a.beta, backend.name, compression=None)
    write_corpus(add, add_path, compression=None)
    runs = []
    for rep in range(a.repeats + 1):  # the first run compiles
        times.clear()
        local_graphs.clear()
        shutil.copyfile(base_path, work)
        r = dclus.update(work, add_path, work, device=backend, compression=None)
        row = {f"stage {k[8:]}": v for k, v in r.stats.items() if k.startswith("seconds_") and isinstance(v, float)}
        row.update({f"fn {k}": v for k, v in times.items()})
        g = local_graphs[-1]
        for where in (["cpu", backend] if backend.is_cuda else ["cpu"]):
            t = time.perf_counter()
            compute_relevance(g, where)
            row[f"relevance on {getattr(where, 'name', where)} (local graph)"] = time.perf_counter() - t
        if scoring_stats:
            st = scoring_stats[-1]
            for k, v in {**st.get("device_seconds", {}), **st.get("host_seconds", {})}.items():
                row[f"scoring {k}"] = v
        if rep:
            runs.append(row)
        harness.log(f"run {rep}: total {r.stats['seconds_total']:.3f} s")
    shutil.rmtree(tmp)
    keys = list(runs[0])
    med = {k: harness.median(r.get(k, 0.0) for r in runs) for k in keys}
    facts = {"preset": a.preset, "base": a.base, "add": a.add, "beta": a.beta, "backend": backend.describe(),
             "affected_vertices": r.stats["affected_vertices"], "affected_entries": r.stats["affected_entries"],
             "date": time.strftime("%Y-%m-%d %H:%M"), "env": harness.probe(backend)}
    harness.Report(a.out, {"facts": facts, "median": med, "runs": runs}).write("profile_dclus.json", (
        f"### DClustR update profile: {a.preset} {a.base:,} + {a.add:,}, beta {a.beta}, {facts['backend']}, "
        f"{facts['affected_vertices']:,} vertices / {facts['affected_entries']:,} entries in touched components\n\n"
        + harness.md_table(["step", "median s"], [[k, f"{med[k]:.4f}"] for k in keys], "lr")))

if __name__ == "__main__":
    main()
