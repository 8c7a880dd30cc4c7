"""The update's read stage: the cluster file and the corpus to add, read selectively and checked.

Reading decodes none of the old file's strings when it carries the vocabulary digest and the id
hashes (``check_vocabulary``, ``check_new_ids``): X, the obs columns, obsm and uns come through
the partial reader (gputext.io.partial), the graph's small arrays from the graph store; the
graph's edges stay on disk (the local graph stage reads the rows it needs).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import h5py
import numpy as np
import scipy.sparse as sp

from ...errors import FormatError, InputError
from ...io.corpus import Corpus, str_values, terms_digest, vocabulary_error
from ...io.partial import CorpusParts, read_parts
from ..graph import check_beta
from .store import STAR_KEY, GraphOnDisk, id_hashes, read_graph_meta


@dataclass
class OldResult:
    """The cluster file as the update reads it: its corpus parts (ids and terms decoded only on
    demand), centers int64 (k,) ascending, membership CSC (n_old, k) without the clusters in
    obsm, and the stored graph's small arrays (the edges stay on disk)."""

    path: str
    parts: CorpusParts
    centers: np.ndarray
    membership: sp.csc_matrix
    meta: GraphOnDisk


@dataclass
class Inputs:
    """The read stage's result: the old result, the corpus to add, the stored beta, the added
    ids (str) and the union's id hashes (uint64 (n_old + n_new,)), the vocabulary digest to store
    on the old file when it lacks one (None: nothing to store), seconds of each read."""

    old: OldResult
    added: CorpusParts
    beta: float
    new_ids: list
    id_hash: np.ndarray
    store_digest: str | None
    times: dict = field(default_factory=dict)

    @property
    def n_old(self) -> int:
        return self.old.parts.n_docs

    @property
    def n_new(self) -> int:
        return self.added.n_docs


def read_old(path: str, times: dict, ids: bool = False, terms: bool = False) -> OldResult:
    """The non-graph parts of a cluster file, read selectively, and its graph's small arrays.
    ``times`` gets seconds_read_{X, obs, var, obsm_uns, graph_meta}."""
    t = {}
    parts = read_parts(path, ids=ids, terms=terms, uns=True, uns_skip=("gputext/star",), times=t)
    t0 = time.perf_counter()
    with h5py.File(path, "r") as f:
        if STAR_KEY not in f or "centers" not in f[STAR_KEY]:
            raise InputError(f"{path}: /{STAR_KEY}/centers is missing: the file was not written by `gputext cluster star`")
        centers = f[f"{STAR_KEY}/centers"][()].astype(np.int64)
        t1 = time.perf_counter()
        meta = read_graph_meta(f, path, parts.n_docs)
    times["seconds_read_X"], times["seconds_read_obs"], times["seconds_read_var"] = (
        t["seconds_read_X"], t["seconds_read_obs"], t["seconds_read_var"])
    times["seconds_read_obsm_uns"] = t["seconds_read_obsm"] + t["seconds_read_uns"] + t1 - t0
    times["seconds_read_graph_meta"] = time.perf_counter() - t1
    n_docs = parts.n_docs
    if "clusters" not in parts.obsm or not sp.issparse(parts.obsm["clusters"]):
        raise InputError(f"{path}: /obsm/clusters is missing or not a CSR matrix")
    M = parts.obsm.pop("clusters")
    if M.shape != (n_docs, len(centers)):
        raise FormatError(f"{path}: /obsm/clusters has shape {M.shape}, expected ({n_docs}, {len(centers)}) "
                          "(n_docs x number of centers)")
    if len(centers) and (centers.min() < 0 or centers.max() >= n_docs or np.any(np.diff(centers) <= 0)):
        raise FormatError(f"{path}: /{STAR_KEY}/centers must be ascending document indices in [0, {n_docs})")
    return OldResult(path, parts, centers, sp.csc_matrix(M), meta)


def read_inputs(clusters_path: str, added: Corpus | str, beta: float | None, decode_old: bool) -> Inputs:
    """Read and check both inputs of an update: the corpus to add (a path: read selectively,
    its ids decoded, its terms only when the vocabulary digests differ; or a Corpus), then the
    cluster file (its ids and terms decoded only with ``decode_old``, or when a check needs them).
    Refuses a beta other than the stored one, another vocabulary, zero added documents and added
    ids that already exist."""
    if clusters_path == "-":
        raise InputError("--update needs a cluster file on disk (random access to its graph), not stdin")
    t0 = time.perf_counter()
    add = read_parts(added, ids=True, require_format=True) if isinstance(added, str) else CorpusParts.of_corpus(added)
    t_added = time.perf_counter()
    times: dict = {"seconds_read_added": t_added - t0}
    old = read_old(clusters_path, times, ids=decode_old, terms=decode_old)
    t_parts = time.perf_counter()
    stored_beta = check_beta(old.meta.beta)
    if beta is not None and abs(check_beta(beta) - stored_beta) > 0:
        raise InputError(f"--beta {beta} differs from the beta {stored_beta} the clusters in {clusters_path} were built "
                         "with: an update keeps the original threshold (leave --beta out)")
    store_digest = check_vocabulary(old.parts, add)
    if add.n_docs == 0:
        raise InputError("the corpus to add has zero documents")
    new_ids = str_values(add.doc_ids)
    new_hash = check_new_ids(old.parts, old.meta.doc_id_hash, new_ids, clusters_path)
    # the union's id hashes (a file without stored hashes had its ids decoded by the check)
    old_hash = old.meta.doc_id_hash if old.meta.doc_id_hash is not None else id_hashes(old.parts.load_ids())
    t_read = time.perf_counter()
    times.update({"seconds_read_checks": t_read - t_parts, "seconds_read": t_read - t_added})
    return Inputs(old, add, stored_beta, new_ids, np.concatenate([old_hash, new_hash]), store_digest, times)


def check_vocabulary(old: CorpusParts, added: CorpusParts) -> str | None:
    """The added corpus must have the clustered corpus's terms.  Equal stored digests (both files
    written by gputext: TERMS_DIGEST_ATTR of /var/_index) settle it without decoding a term;
    otherwise the added terms are decoded and digested, and only if that does not match the
    stored digest are the old terms decoded and compared string by string (files without a
    digest, or a vocabulary that differs: the error).  Returns the digest to store on the old
    file's /var/_index when it has none (or a wrong one), else None."""
    if old.n_terms != added.n_terms:
        raise vocabulary_error(old.n_terms, added.n_terms, "clustered", "added")
    if old.terms_digest is not None and added.terms_digest == old.terms_digest:
        return None
    added_terms = added.load_terms()
    if old.terms_digest is not None and terms_digest(added_terms) == old.terms_digest:
        return None
    if not np.array_equal(old.load_terms(), added_terms):
        raise vocabulary_error(old.n_terms, added.n_terms, "clustered", "added")
    digest = terms_digest(old.terms)
    return digest if digest != old.terms_digest else None


def check_new_ids(old: CorpusParts, old_hash: np.ndarray | None, new_ids: list, path: str) -> np.ndarray:
    """Refuse added ids that already exist in the cluster file; returns id_hashes(new_ids).  The
    stored hashes (uint64, one per old document) answer it when no added id's hash is among them;
    otherwise (or when the file has no hashes) the old ids are decoded and compared as strings."""
    new_hash = id_hashes(new_ids)
    if old_hash is not None and not np.isin(new_hash, old_hash).any():
        return new_hash
    clash = set(old.load_ids().tolist()) & set(new_ids)
    if clash:
        raise InputError(f"{len(clash)} added document ids already exist in {path} (e.g. {sorted(clash)[0]!r}): "
                         "document ids must stay unique")
    return new_hash
