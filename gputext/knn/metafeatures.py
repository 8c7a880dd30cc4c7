"""kNN meta-features (Gopal & Yang 2010, generated on the GPU by GT-kNN).

    from gputext.knn.metafeatures import compute_metafeatures
    mf = compute_metafeatures(X_train, y_train, n_classes, X_test, k=30)
    mf.train   # float32 (n_train, (3k+2) n_classes), each training document left out of its own lists
    mf.queries # float32 (n_test, (3k+2) n_classes)
    mf.names   # column names, in order

For a document x and each class c (in category order) the block of 3k + 2 columns is

    c:cos@1 .. c:cos@k      cosine similarities to x's k most similar training documents of c, best first
    c:l1@1  .. c:l1@k       L1 distances to x's k L1-nearest training documents of c, nearest first
    c:l2@1  .. c:l2@k       L2 distances to x's k L2-nearest training documents of c, nearest first
    c:cos_centroid          cosine similarity to c's centroid (mean of c's training vectors)
    c:l2_centroid           L2 distance to c's centroid

Each metric has its own k nearest documents (they differ for L1). Inverted method: one engine
Index over the labelled training documents ordered by class (each class a contiguous group) and
one grouped search (gputext.engine.search_topk_grouped) for every query (training and test
documents together), every class and the three metrics, written straight into the matrix; the
centroid columns follow for all classes at once (kernels.centroids.centroid_features_cpu, on the
host for both backends so that they agree bit for bit). Dense method: one dense index per class.
A training document of c is left out of c's lists (exclude_self) *and* out of c's centroid
(the centroid of the other n_c - 1 documents), so that training and test meta-features are
computed alike. info["stages"] gives the time of each stage in ms (search.* from the engine).

Padding (a class with fewer than k documents, or k - 1 for a left-out training document): the
missing entries repeat the last (farthest) neighbour's value; when a class has no document to
offer at all, the values are those of an empty (all-zero) document: cosine 0, L1 = |x|_1,
L2 = |x|_2. A centroid that does not exist (empty class, or a class whose only document is x) is
likewise the zero vector: cosine 0, L2 = |x|_2.

All values are float32 roundings of exact values: the lists come from exact search (engine or dense
kernels), the centroid features are computed in float64.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..backend import Backend, as_backend
from ..errors import InputError
from ..io.corpus import canonical_csr
from ..progress import progress

KNN_METRICS = ("cosine", "l1", "l2")


def column_names(categories, k: int) -> list[str]:
    names = []
    for c in categories:
        c = str(c)
        for m in ("cos", "l1", "l2"):
            names += [f"{c}:{m}@{i}" for i in range(1, k + 1)]
        names += [f"{c}:cos_centroid", f"{c}:l2_centroid"]
    return names


@dataclass
class MetaFeatures:
    train: np.ndarray  # float32 (n_train, (3k+2) n_classes)
    queries: np.ndarray  # float32 (n_queries, (3k+2) n_classes)
    names: list[str]
    k: int
    info: dict = field(default_factory=dict)


def _pad(block: np.ndarray, empty: np.ndarray) -> np.ndarray:
    """Replace NaN padding (a suffix of each row) by the row's last value, or ``empty`` (n,)."""
    valid = (~np.isnan(block)).sum(axis=1)
    last = np.where(valid > 0, block[np.arange(block.shape[0]), np.maximum(valid - 1, 0)], empty.astype(np.float32))
    return np.where(np.isnan(block), last[:, None], block).astype(np.float32)


def _row_norms(Q: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """(|x|_2^2, |x|_1) in float64."""
    Q64 = sp.csr_matrix(Q, dtype=np.float64)
    return np.asarray(Q64.multiply(Q64).sum(axis=1)).ravel(), np.asarray(abs(Q64).sum(axis=1)).ravel()


def centroid_features(Q: sp.csr_matrix, Xc: sp.csr_matrix, own: np.ndarray, sq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cosine, L2) float64 (n_q,) of each query row to the centroid of Xc's rows; for rows with
    own[i] >= 0 (query i is row own[i] of Xc) the centroid of the other rows. ``sq`` = |q|^2."""
    n_c = Xc.shape[0]
    s = np.asarray(sp.csr_matrix(Xc, dtype=np.float64).sum(axis=0)).ravel()
    ss = float(s @ s)
    xs = sp.csr_matrix(Q, dtype=np.float64) @ s
    loo = own >= 0
    n_eff = np.where(loo, n_c - 1, n_c).astype(np.float64)
    safe = np.maximum(n_eff, 1.0)
    dot = np.where(loo, xs - sq, xs) / safe
    cen_sq = np.where(loo, ss - 2 * xs + sq, ss) / (safe * safe)
    cen_sq = np.maximum(cen_sq, 0.0)
    exists = n_eff > 0
    den = np.sqrt(sq) * np.sqrt(cen_sq)
    cos = np.where(exists & (den > 0), dot / np.where(den > 0, den, 1.0), 0.0)
    l2 = np.where(exists, np.sqrt(np.maximum(sq - 2 * dot + cen_sq, 0.0)), np.sqrt(sq))
    return cos, l2


def compute_metafeatures(X_train, y_train, n_classes: int, X_queries=None, k: int = 30, method: str = "auto",
                         device: str | Backend = "auto", categories=None, quiet: bool = True,
                         train_rows: bool = True, client=None, train_path=None) -> MetaFeatures:
    """Meta-features of every training document (left out of its own class) and of every query.
    ``train_rows=False``: the queries' only (MetaFeatures.train is then empty), at the cost of the
    queries alone (gputext.KNNMetaFeatures.transform).

    X_train: CSR (n_train, n_terms); y_train: int codes (n_train,) in [0, n_classes) or -1
    (unlabelled: in no class, still gets meta-features); X_queries: CSR (n_queries, n_terms) or
    None. method: inverted | dense | auto (dense_fits on the training matrix). Returns MetaFeatures.
    client: a dask.distributed Client: the grouped search runs on its workers (the class-ordered
    training rows scattered over them, gputext.distributed), the centroid columns here; identical
    values (inverted method only). train_path: the corpus file (or files, rows in order) X_train
    was read from; with a client each worker then reads its own rows there and orders them by
    class itself (DistributedIndex.from_path with labels), so that nothing is shipped but labels:
    identical values again, since within a class every worker keeps the file's order.
    """
    from .method import choose_method

    t_start = time.perf_counter()
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    X_train = canonical_csr(X_train)
    y = np.asarray(y_train, dtype=np.int64)
    if y.shape != (X_train.shape[0],):
        raise InputError(f"{y.size} training labels for {X_train.shape[0]} training documents")
    if y.size and (y.max() >= n_classes or y.min() < -1):
        raise InputError(f"training label codes must be in [0, {n_classes}) or -1, got [{y.min()}, {y.max()}]")
    if X_queries is None:
        X_queries = sp.csr_matrix((0, X_train.shape[1]), dtype=np.float32)
    X_queries = canonical_csr(X_queries)
    if X_queries.shape[1] != X_train.shape[1]:
        raise InputError(f"queries have {X_queries.shape[1]} terms, the training corpus {X_train.shape[1]}: "
                         "build them with --vocab-from the training corpus")
    if client is not None:
        if method == "dense":
            raise InputError("the dense method does not run on a Dask cluster: use method inverted or auto")
        method = "inverted"
        backend = Backend("cpu", False, "the client; the search runs on the Dask workers")
    else:
        backend = as_backend(device)
    n_train = X_train.shape[0]
    Q = _vstack(X_train, X_queries) if train_rows else X_queries
    lead = n_train if train_rows else 0  # Q's first `lead` rows are the training documents
    # decided on the whole training matrix: per class, the dense method would also densify every
    # query row once per class and metric
    chosen, reason = choose_method(method, max(1, n_train), X_train.shape[1], X_train.nnz, backend, k=k,
                                   groups=n_classes)
    info = {"method": chosen, "method_reason": reason, "backend": backend.name, "k": int(k),
            "n_train": int(n_train), "n_queries": int(X_queries.shape[0]), "n_classes": int(n_classes)}
    t0 = time.perf_counter()
    if chosen == "dense":
        sq, l1 = _row_norms(Q)
        M = _dense_per_class(X_train, y, n_classes, Q, k, backend, sq, l1, quiet, info, lead)
    else:
        M = _grouped(X_train, y, n_classes, Q, k, backend, quiet, info, lead, client, device, train_path)
        info["stages"]["prepare_ms"] = 1e3 * (t0 - t_start)  # validation, stacking, method choice
    info["seconds"] = time.perf_counter() - t0
    names = column_names(categories if categories is not None else range(n_classes), k)
    return MetaFeatures(M[:lead], M[lead:], names, int(k), info)


def _vstack(A: sp.csr_matrix, B: sp.csr_matrix) -> sp.csr_matrix:
    """Rows of A then B (both canonical CSR, as canonical_csr makes them): arrays concatenated,
    no re-sorting or re-validation."""
    indptr = np.concatenate([A.indptr.astype(np.int64), B.indptr[1:].astype(np.int64) + A.nnz])
    out = sp.csr_matrix((np.concatenate([A.data, B.data]), np.concatenate([A.indices, B.indices]), indptr),
                        shape=(A.shape[0] + B.shape[0], A.shape[1]))
    out.has_canonical_format = True  # rows of canonical A and B stay canonical: no second pass
    return out


def _grouped(X_train, y, n_classes, Q, k, backend, quiet, info, lead: int, client=None, device="auto",
             train_path=None) -> np.ndarray:
    """Inverted method: one engine index over the labelled training documents ordered by class
    (classes are contiguous groups), one grouped search for cosine, l1 and l2 at once writing
    straight into the meta-feature matrix, then the centroid columns for all classes at once.
    With a Dask client the index is a gputext.distributed.DistributedIndex (same results)."""
    from ..engine import Index, search_topk_grouped
    from ..io.corpus import csr_arrays
    from ..kernels import centroids as kc
    from ..kernels.csr_rows import take_rows

    n_all = Q.shape[0]
    width = 3 * k + 2
    t = time.perf_counter()
    labelled = np.nonzero(y >= 0)[0]
    order = labelled[np.argsort(y[labelled], kind="stable")]
    counts = np.bincount(y[labelled], minlength=n_classes).astype(np.int64)
    group_ptr = np.zeros(n_classes + 1, np.int64)
    np.cumsum(counts, out=group_ptr[1:])
    if client is None:
        index = Index.from_csr(take_rows(X_train, order))
        search = lambda *a, **kw: search_topk_grouped(index, *a, backend, **kw)  # noqa: E731
    else:
        from ..distributed import DistributedIndex
        from ..distributed.knn import as_device
        if train_path is None:
            index = DistributedIndex.from_csr(take_rows(X_train, order), client, quiet=quiet)
        else:
            index = DistributedIndex.from_path(train_path, client, quiet=quiet, labels=y, n_classes=n_classes)
            if (index.source.n_docs, index.source.n_terms, index.source.nnz) != (X_train.shape[0], X_train.shape[1],
                                                                                  X_train.nnz):
                index.close()
                raise InputError(f"{index.source.name} holds {index.source.n_docs} x {index.source.n_terms} with "
                                 f"{index.source.nnz} nonzeros, the training matrix {X_train.shape[0]} x "
                                 f"{X_train.shape[1]} with {X_train.nnz}: not the file it was read from")
        search = lambda *a, **kw: index.search_topk_grouped(*a, as_device(device), **kw)  # noqa: E731
    self_doc = np.full(n_all, -1, np.int64)
    if lead:
        if client is not None and train_path is not None:
            self_doc[:lead] = index.doc_of_row
        else:
            self_doc[order] = np.arange(order.size)
    M = np.empty((n_all, n_classes, width), np.float32)
    stages = {"index_ms": 1e3 * (time.perf_counter() - t)}
    centroids = np.empty((n_all, n_classes, 2), np.float32)

    def centroid_columns():  # host work, overlapped with the device's on cuda
        t = time.perf_counter()
        ip, ix, dx = csr_arrays(index.X if index.X is not None else take_rows(X_train, order))
        S, ss = kc.group_sums_cpu(ip, ix, dx, group_ptr, index.n_terms)
        own_group = np.full(n_all, -1, np.int64)
        own_group[:lead] = y[:lead]
        kc.centroid_features_cpu(*csr_arrays(Q), S, ss, counts, own_group, centroids, 0, 1)
        stages["centroid_ms"] = 1e3 * (time.perf_counter() - t)

    t = time.perf_counter()
    search_stats: dict = {}
    search(Q, k, group_ptr, KNN_METRICS, exclude_self=self_doc, pad="last", out=M, return_docs=False, quiet=quiet,
           host_work=centroid_columns, **({} if client is not None else {"stats": search_stats}))
    if client is not None:
        index.close()
    stages["search_ms"] = 1e3 * (time.perf_counter() - t)  # includes the centroid features
    t = time.perf_counter()
    kc.set_columns_cpu(M, centroids, 3 * k)
    stages["assembly_ms"] = 1e3 * (time.perf_counter() - t)
    info["search_seconds"] = stages["search_ms"] / 1e3
    info["stages"] = {**stages, **{"search." + key: v for key, v in search_stats.get("stages", {}).items()}}
    info["search"] = {key: v for key, v in search_stats.items() if key != "stages"}
    return M.reshape(n_all, n_classes * width)


def _dense_per_class(X_train, y, n_classes, Q, k, backend, sq, l1, quiet, info, lead: int) -> np.ndarray:
    """Dense method: one dense index per class, three searches each (gputext.knn.dense)."""
    from .dense import DenseIndex

    n_all = Q.shape[0]
    l2n = np.sqrt(sq)
    width = 3 * k + 2
    M = np.empty((n_all, width * n_classes), np.float32)
    searched = 0.0
    with progress(n_classes, "meta-features", quiet) as bar:
        for c in range(n_classes):
            rows = np.nonzero(y == c)[0]
            base = c * width
            own = np.full(n_all, -1, np.int64)
            if lead:
                own[rows] = np.arange(rows.size)
            if rows.size == 0:
                for m, empty in enumerate((np.zeros(n_all), l1, l2n)):
                    M[:, base + m * k: base + (m + 1) * k] = empty[:, None].astype(np.float32)
            else:
                t = time.perf_counter()
                index = DenseIndex(X_train[rows], backend)
                for m, (metric, empty) in enumerate(zip(KNN_METRICS, (np.zeros(n_all), l1, l2n))):
                    _, scores = index.search(Q, k, metric, exclude_self=own)
                    M[:, base + m * k: base + (m + 1) * k] = _pad(scores, empty)
                searched += time.perf_counter() - t
            cos, l2 = centroid_features(Q, X_train[rows], own, sq)
            M[:, base + 3 * k] = cos.astype(np.float32)
            M[:, base + 3 * k + 1] = l2.astype(np.float32)
            bar.update(1)
    info["search_seconds"] = searched
    return M
