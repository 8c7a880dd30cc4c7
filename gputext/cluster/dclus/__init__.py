"""DClustR / CUDA-DClus: updating overlapping star clusters after documents are added.

The star result file and its update, one module per job:

    store.py    the graph stored in a cluster file (format 2: PCC-grouped owner rows, each edge
                once), writing it, reading its small arrays and the rows of chosen PCCs
    result.py   writing a fresh result (``write_result``: what ``gputext cluster star`` writes)
    update.py   ``update``: the stages below in order, with the report and stage timers
    read.py     stage 1, read: the cluster file and the corpus to add, selectively, checked
    score.py    stage 2, score: the new documents' edges as the new vertices' owner rows
    pccs.py     stage 3, PCCs: new PCCs and links, degrees, the touched components
    local.py    stage 4, local graph: the touched components' stored rows, made symmetric
    cover.py    stages 5-6, cover and improve: DClustR's cover update, OClustR's improvement
    write.py    stage 7, append: the union's clusters, written by a crash-safe in-place append
    host.py     the compiled (numba) loops of stages 3-4 and of the store

What "equal to DClustR" means here and how it is checked (tests/test_star_dclus.py): the update
is compared with an independent set-based implementation of section 2.2 over the whole graph in
memory (tests/test_star_reference.py), on random corpora and random additions; clusters of
components without new documents equal a from-scratch OClustR of the union (the rules are
component-local); components made only of new documents equal OClustR too (C' is empty there);
the paper's Table 1 + Table 2 additions give the PCCs of its Figures 9-16 and the clusters worked
out by hand in the test; the graph after additions equals the graph of the union built from
scratch (edges, weights, stored degrees and fixed-point sums); the old edge datasets are an
unchanged prefix of the new ones.  docs/star.md has the whole story.
"""
from ...io.commit import TMP_PREFIX
from ..star_host import star_reduce
from .cover import dclustr_cover, dclustr_graph, dclustr_lists
from .host import symmetric_from_owner
from .pccs import PCCs, assign_pcc, build_pccs
from .result import star_params, write_result
from .store import GRAPH_FORMAT_VERSION, GRAPH_KEY, STAR_KEY, id_hashes, read_stored_graph
from .update import UpdateReport, update

__all__ = ["GRAPH_FORMAT_VERSION", "GRAPH_KEY", "PCCs", "STAR_KEY", "TMP_PREFIX", "UpdateReport", "assign_pcc",
           "build_pccs", "dclustr_cover", "dclustr_graph", "dclustr_lists", "id_hashes", "read_stored_graph",
           "star_params", "star_reduce", "symmetric_from_owner", "update", "write_result"]
