"""DClustR / CUDA-DClus: the update, as named stages (each a function of gputext.cluster.dclus).

    inputs  = read.read_inputs(...)            read additions + the cluster file, checked
    rows    = score.score(...)                 owner rows of the new vertices
    pccs    = pccs.pccs_of_additions(...)      new PCCs, links, degrees, touched components
    loaded  = local.load_rows(...)             stored rows of the touched PCCs
    graph   = local.local_graph(...)           symmetric graph of the touched components
    covered = cover.cover(...)                 relevance + DClustR's cover update
    result  = cover.improve(...)               OClustR's improvement: the new clusters
    union   = write.union_clusters(...)        untouched clusters + the new ones
    write.append_update(...) / write.write_new(...)

Relevance runs on the host, where the local graph is: shipping its adjacency to the device
costs more than the host's parallel pass over it (measured: docs/star.md, "DClustR update").
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field

import numpy as np

from ...backend import Backend, as_backend
from ...io.corpus import Corpus, atomic_output, canonical_csr
from ...progress import info
from .cover import cover, improve
from .local import load_rows, local_graph
from .pccs import pccs_of_additions
from .read import Inputs, read_inputs
from .result import star_params
from .score import score
from .store import GRAPH_FORMAT_VERSION
from .write import Updated, append_update, merge_obs, merge_obsm, union_clusters, write_new


@dataclass
class UpdateReport:
    n_old: int
    n_new: int
    n_new_edges: int
    components_total: int
    components_touched: int
    pccs_total: int
    pccs_loaded: int
    vertices_loaded: int
    entries_loaded: int
    n_clusters: int
    stats: dict = field(default_factory=dict)
    # which strings the update decoded (old_ids, old_terms, added_terms: bool); not written to the file
    decoded: dict = field(default_factory=dict)

    def line(self) -> str:
        return (f"added {self.n_new} documents to {self.n_old} ({self.n_new_edges} new edges); touched "
                f"{self.components_touched} of {self.components_total} connected components "
                f"({self.pccs_loaded} of {self.pccs_total} old PCCs, {self.vertices_loaded} vertices loaded); "
                f"{self.n_clusters} clusters")


def _updated(inputs: Inputs, rows, pccs, union, report: UpdateReport, backend_name: str, quiet: bool) -> Updated:
    """The union's obs, obsm and uns (the run's parameters and the report) for the append stage."""
    old, added = inputs.old.parts, inputs.added
    obs, dropped = merge_obs(old.obs, added.obs, inputs.n_old, inputs.n_new)
    if dropped and not quiet:
        info(f"obs columns not in both corpora (dropped from the output): {', '.join(dropped)}", quiet)
    obsm = {"clusters": union.membership, **merge_obsm(old.obsm, added.obsm)}
    uns = dict(old.uns)
    gp = dict(uns.get("gputext", {}))
    prev = gp.get("star_updates", 0)
    stats_out = {k: v for k, v in report.stats.items() if isinstance(v, (int, float, str))}
    gp["star"] = star_params(inputs.beta, backend_name, union.centers, extra={
        "update": {k: v for k, v in report.__dict__.items() if k not in ("stats", "decoded")} | stats_out})
    gp["star_updates"] = int(prev) + 1
    uns["gputext"] = gp
    return Updated(inputs, rows, pccs, canonical_csr(added.X), obs, obsm, uns)


def update(clusters_path: str, added: Corpus | str, output: str, device: str | Backend = "auto",
           beta: float | None = None, batch_size: int | None = None, quiet: bool = True, engine_geometry=None,
           compression: str | None = "gzip", edges=None, write: str = "append") -> UpdateReport:
    """DClustR / CUDA-DClus: add the documents of ``added`` to the clustering in ``clusters_path``
    (a file written by ``cluster star``) and write the updated clustering of the union to
    ``output``.  Returns the report (components touched, PCCs loaded, seconds per stage).
    ``edges`` = (new_old, new_new) as returned by ``graph.score_additions`` replaces the scoring
    (tests feed the paper's hand-made similarities).  ``added``: a Corpus, or the path of a
    corpus file (read selectively: its terms are not decoded when its stored vocabulary digest
    equals the cluster file's; what the CLI passes).  The cluster file's document ids and terms
    are decoded only when needed (``report.decoded`` lists what was).

    Writing (``write="append"``): with ``output`` the same file as ``clusters_path`` the file is
    updated in place (write.append_update: crash-safe, committed by one final small write; an
    exception rolls it back); with another path the old file is copied at OS speed
    (shutil.copyfile) to a temporary file next to ``output``, appended to the same way, and
    renamed.  ``write="new"`` writes the whole union into a new file (tests compare the two)."""
    if write not in ("append", "new"):
        raise ValueError(f"write must be 'append' or 'new', not {write!r}")
    backend = as_backend(device)
    t0 = time.perf_counter()
    # the new-file writer rewrites the union's ids and terms: it needs them decoded
    inputs = read_inputs(clusters_path, added, beta, decode_old=write == "new")
    old, meta, n_old, n_new = inputs.old, inputs.old.meta, inputs.n_old, inputs.n_new
    t_read = time.perf_counter()
    rows = score(old.parts.X, inputs.added.X, inputs.beta, backend, batch_size, quiet, engine_geometry, edges)
    t_score = time.perf_counter()
    pccs = pccs_of_additions(meta, rows)
    t_pcc = time.perf_counter()
    loaded = load_rows(clusters_path, meta, pccs, rows)
    t_load = time.perf_counter()
    local = local_graph(meta, pccs, rows, loaded)
    t_local = time.perf_counter()
    old_center = np.zeros(local.graph.n, bool)
    in_local = old.centers[local.local_of[old.centers] >= 0] if len(old.centers) else old.centers
    old_center[local.local_of[in_local]] = True
    res = improve(local.graph, cover(local.graph, old_center, "cpu", vertex_ids=local.vertices), local.vertices)
    t_cluster = time.perf_counter()
    union = union_clusters(old, local, res, n_old + n_new)
    t_members = time.perf_counter()

    report = UpdateReport(n_old, n_new, rows.n_edges, pccs.components_total, pccs.components_touched, meta.n_pcc,
                          int(len(pccs.old_affected)), local.n_old_vertices, loaded.n_entries, int(len(union.centers)))
    report.stats = {**res.stats, **inputs.times, "seconds_scoring": t_score - t_read,
                    # load = PCC assignment + reading rows, cluster = local graph + relevance + cover +
                    # improvement (the same spans as before the finer stages were added)
                    "seconds_pcc": t_pcc - t_score, "seconds_load_rows": t_load - t_pcc, "seconds_load": t_load - t_score,
                    "seconds_local_graph": t_local - t_load, "seconds_cluster": t_cluster - t_load,
                    "seconds_union_clusters": t_members - t_cluster,
                    "affected_vertices": int(local.graph.n), "affected_entries": int(local.graph.indptr[-1]),
                    "backend": backend.name, "graph_format": GRAPH_FORMAT_VERSION}
    u = _updated(inputs, rows, pccs, union, report, backend.name, quiet)
    wstats: dict = {}
    if write == "new":
        write_new(clusters_path, output, u, compression, wstats)
    elif output != "-" and os.path.exists(output) and os.path.samefile(output, clusters_path):
        append_update(clusters_path, u, compression, wstats)
    else:
        with atomic_output(output) as tmp:
            tc = time.perf_counter()
            shutil.copyfile(clusters_path, tmp)  # sendfile / copy_file_range (reflink where the filesystem has it)
            wstats["seconds_copy"] = time.perf_counter() - tc
            append_update(tmp, u, compression, wstats)
    t_end = time.perf_counter()
    report.stats.update(wstats)
    report.stats["seconds_write"] = t_end - t_cluster
    report.stats["seconds_total"] = t_end - t0
    report.decoded = {"old_ids": old.parts.doc_ids is not None, "old_terms": old.parts.terms is not None,
                      "added_terms": inputs.added.path is not None and inputs.added.terms is not None}
    return report
