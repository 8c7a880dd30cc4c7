"""The update's append stage: the clusters and annotations of the union, written to the file.

The clusters of untouched components are copied unchanged; the affected components' new ones
replace theirs (``union_clusters``).  The file is written by appending (``append_update``,
through gputext.io.append.CorpusAppend): the added rows go after /X's rows, the new ids after
/obs/_index and the new owner rows after the edge datasets (resize + write of the tail only);
the small per-document arrays (obs columns, obsm, uns with the graph's small arrays) are written
under temporary names; then one small write commits it all (gputext.io.commit), and the
temporary groups are moved in place.  Killed at any point, the file reads as the old result or
the new one, and the next update succeeds.  ``write_new`` writes the whole union into a new file
instead (the writer before 2026-11-25; tests check both give the same datasets).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ...io.append import CorpusAppend, growable
from ...io.commit import TMP_PREFIX
from ...io.corpus import Categorical, Corpus, atomic_output, write_corpus
from ...io.h5file import h5_output
from ..star import StarResult
from .local import LocalGraph
from .pccs import UnionPCCs
from .read import Inputs, OldResult
from .score import OwnerRows
from .store import GRAPH_KEY, TRACKED, graph_group, growable_copy, updated_layout, write_small, write_updated_graph


@dataclass
class UnionClusters:
    """Clusters of the union: centers int32 (k,) ascending, membership CSR float32 (n_total, k)."""

    centers: np.ndarray
    membership: sp.csr_matrix


@dataclass
class Updated:
    """Everything the append stage writes, computed (and checked) before the first write:
    the inputs, the new owner rows, the union's PCCs, canonical rows of the added documents and
    the union's obs columns, obsm (clusters included) and uns."""

    inputs: Inputs
    rows: OwnerRows
    pccs: UnionPCCs
    X_add: sp.csr_matrix
    obs: dict
    obsm: dict
    uns: dict


def _step(name: str) -> None:
    """A named point of the in-place append (tests replace it to inject a failure there)."""


def union_clusters(old: OldResult, local: LocalGraph, result: StarResult, n_total: int) -> UnionClusters:
    """Untouched old clusters + the affected components' new ones, columns by ascending center."""
    old_centers, local_of, vertices = old.centers, local.local_of, local.vertices
    keep = local_of[old_centers] < 0 if len(old_centers) else np.zeros(0, bool)
    kept_cols = np.flatnonzero(keep)
    kept_centers = old_centers[kept_cols]
    kept = old.membership[:, kept_cols].tocoo()
    new_coo = result.membership.tocoo()
    centers = np.concatenate([kept_centers, vertices[result.centers]]).astype(np.int64)
    corder = np.argsort(centers, kind="stable")
    rank = np.empty(len(centers), np.int64)
    rank[corder] = np.arange(len(centers))
    docs = np.concatenate([kept.row.astype(np.int64), vertices[new_coo.row]])
    cols = np.concatenate([rank[kept.col], rank[len(kept_centers) + new_coo.col]])
    M = sp.csr_matrix((np.ones(len(docs), np.float32), (docs, cols)), shape=(n_total, len(centers)))
    M.sort_indices()
    return UnionClusters(centers[corder].astype(np.int32), M)


def merge_obs(old: dict, new: dict, n_old: int, n_new: int) -> tuple[dict, list[str]]:
    """obs columns of the union: columns both have (categoricals get the union of categories)."""
    out, dropped = {}, []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a is None or b is None:
            dropped.append(key)
            continue
        if isinstance(a, Categorical) and isinstance(b, Categorical):
            cats = list(a.categories) + [c for c in b.categories if c not in set(a.categories)]
            where = {c: i for i, c in enumerate(cats)}
            remap = np.array([where[c] for c in b.categories] + [-1], np.int32)
            codes_b = remap[np.where(b.codes >= 0, b.codes, len(b.categories))]
            out[key] = Categorical(np.concatenate([a.codes, codes_b]).astype(np.int32), np.array(cats, dtype=object))
        elif not isinstance(a, Categorical) and not isinstance(b, Categorical) and np.asarray(a).dtype.kind == np.asarray(b).dtype.kind:
            out[key] = np.concatenate([np.asarray(a), np.asarray(b)])
        else:
            dropped.append(key)
    return out, dropped


def merge_obsm(old: dict, new: dict) -> dict:
    """obsm entries both corpora have with compatible shapes, stacked (others are dropped)."""
    out = {}
    for key in set(old) & set(new):
        a, b = old[key], new[key]
        if sp.issparse(a) and sp.issparse(b) and a.shape[1] == b.shape[1]:
            out[key] = sp.vstack([a, b]).tocsr()
        elif not sp.issparse(a) and not sp.issparse(b) and np.ndim(a) == np.ndim(b) and np.shape(a)[1:] == np.shape(b)[1:]:
            out[key] = np.concatenate([a, b])
    return out


def append_update(path: str, u: Updated, compression: str | None, stats: dict) -> None:
    """Write an update into the cluster file ``path`` in place (see the module docstring).

    Appended: /X's data, indices and indptr (an older file's fixed-size X is rewritten once as
    growable datasets), /obs/_index (likewise) and the graph's adj_indices / adj_weights (a
    fixed-size one is copied once into a growable one).  Rewritten under temporary names, moved
    in place at the commit: obs, obsm, uns (with the graph's small arrays; the appended ids and
    edge datasets are moved into the new groups).  A file without the vocabulary digest gets it
    on /var/_index.  An exception rolls the file back to its old contents.
    ``stats`` gets seconds_write_corpus (X, obs, obsm, uns), seconds_write_graph, seconds_swap."""
    old, meta, p = u.inputs.old, u.inputs.old.meta, u.pccs
    order, pcc_indptr, adj_indptr, tail_idx, tail_w = updated_layout(meta, p.pcc_of, p.n_pcc, u.rows.ptr, u.rows.idx,
                                                                     u.rows.w)
    with CorpusAppend(path, meta.n_docs, TRACKED, step=lambda name: _step(name)) as app:
        t0 = time.perf_counter()
        app.step("start")
        app.append_rows(lambda: old.parts.X, u.X_add, compression)
        app.append_ids(u.inputs.new_ids, None if old.parts.doc_ids is None else (lambda: old.parts.doc_ids))
        app.write_dataframe("obs", u.obs)
        app.write_dict("obsm", u.obsm)
        app.write_dict("uns", u.uns, uns=True)
        app.step("corpus")
        t1 = time.perf_counter()
        new_graph = TMP_PREFIX + GRAPH_KEY
        g = graph_group(app.f, new_graph)
        write_small(g, p.pcc_of, order, pcc_indptr, adj_indptr, p.degree, p.weight_sum, p.links, p.n_pcc,
                    u.inputs.beta, u.inputs.id_hash)
        for name, values in (("adj_indices", tail_idx), ("adj_weights", tail_w)):
            if growable(app.f[GRAPH_KEY][name]):
                app.append(f"/{GRAPH_KEY}/{name}", values)
                app.step(name)
                app.move_at_commit(f"/{GRAPH_KEY}/{name}", f"/{new_graph}/{name}")
            else:  # not growable: copied through memory into a growable dataset
                growable_copy(g, name, app.f[GRAPH_KEY][name], int(meta.adj_indptr[-1]), values)
        app.step("graph")
        t2 = time.perf_counter()
        if u.inputs.store_digest is not None:
            app.store_terms_digest(u.inputs.store_digest, u.X_add.shape[1])
        app.commit()
    stats["seconds_write_corpus"] = t1 - t0
    stats["seconds_write_graph"] = t2 - t1
    stats["seconds_swap"] = time.perf_counter() - t2
    stats["write_mode"] = "append"


def write_new(clusters_path: str, output: str, u: Updated, compression: str | None, stats: dict) -> None:
    """The whole union into a new file ``output`` (atomically): the union corpus, then the graph
    (old edge datasets copied raw, the new owner rows appended).  Needs the old ids and terms
    decoded (read_inputs(decode_old=True))."""
    import h5py

    old, p = u.inputs.old, u.pccs
    t0 = time.perf_counter()
    X = sp.vstack([old.parts.X, u.X_add]).tocsr()
    doc_ids = np.concatenate([old.parts.doc_ids, np.asarray(u.inputs.new_ids, dtype=object)])
    corpus = Corpus(X, doc_ids, old.parts.terms, u.obs, dict(old.parts.var), u.obsm, u.uns)
    with atomic_output(output) as tmp:
        write_corpus(corpus, tmp, compression=compression)
        t1 = time.perf_counter()
        with h5py.File(clusters_path, "r") as src, h5_output(tmp, "a") as dst:
            write_updated_graph(src, dst, old.meta, p.pcc_of, p.n_pcc, p.links, p.degree, p.weight_sum, u.rows.ptr,
                                u.rows.idx, u.rows.w, u.inputs.beta, u.inputs.id_hash)
    stats["seconds_write_corpus"] = t1 - t0
    stats["seconds_write_graph"] = time.perf_counter() - t1
