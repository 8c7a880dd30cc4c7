"""Writing a fresh star result: the clusters of a corpus and its graph, stored as PCCs.

The file an update (gputext.cluster.dclus.update) starts from: a corpus file (X, doc ids, obs
and var of the input) with obsm/clusters, the parameters under uns/gputext/star and the graph
under uns/gputext/star/graph (gputext.cluster.dclus.store), /X and /obs/_index growable so
that updates append rows in place.
"""
from __future__ import annotations

import numpy as np

from ...io.corpus import Corpus, atomic_output, write_corpus
from ...io.h5file import h5_output
from ..star import StarResult
from .pccs import PCCs, build_pccs
from .store import id_hashes, write_graph


def star_params(beta: float, backend: str, centers: np.ndarray, extra: dict | None = None) -> dict:
    return {"centers": np.asarray(centers, np.int32), "beta": float(beta), "metric": "cosine",
            "algorithm": "OClustR/DClustR (CUDA-OClus, CUDA-DClus)", "backend": backend,
            "n_clusters": int(len(centers)), **(extra or {})}


def write_result(corpus: Corpus, result: StarResult, output: str, beta: float, backend: str,
                 compression: str | None = "gzip") -> PCCs:
    """Write the clusters of ``corpus`` (a result file that is also a corpus file: X, doc ids,
    obs and var of the input) with the graph as PCCs, atomically.  Returns the PCCs."""
    if result.graph is None:
        raise AssertionError("write_result needs the graph")
    pccs = build_pccs(result.graph)
    obsm = {k: v for k, v in corpus.obsm.items() if k != "clusters"}
    obsm["clusters"] = result.membership
    uns = {k: v for k, v in corpus.uns.items()}
    gp = {k: v for k, v in uns.get("gputext", {}).items() if k not in ("star", "star_updates")}
    stats = {k: v for k, v in result.stats.items() if isinstance(v, (int, float, str))}
    gp["star"] = star_params(beta, backend, result.centers, {"stats": stats})
    uns["gputext"] = gp
    out = Corpus(corpus.X, corpus.doc_ids, corpus.terms, dict(corpus.obs), dict(corpus.var), obsm, uns)
    with atomic_output(output) as tmp:
        write_corpus(out, tmp, compression=compression, growable=True)  # X, ids growable: updates append rows
        with h5_output(tmp, "a") as f:
            write_graph(f, result.graph, pccs, beta, id_hashes(out.doc_ids))
    return pccs
