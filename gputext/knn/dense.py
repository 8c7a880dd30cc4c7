"""Dense exact kNN: the documents as a dense float32 matrix on the device (the CNAE paper's method).

    from gputext.knn.dense import search_dense, DenseIndex
    indices, scores = search_dense(X, Q, k=30, metric="cosine", device="auto")
    index = DenseIndex(X, device="cuda")          # upload once, search many times
    indices, scores = index.search(Q, k=30)

Output contract = gputext.engine.search_topk: indices int32 (n_queries, k) and scores float32
(n_queries, k), best first (similarity for cosine/dot, distance for l2/l1), ties broken by lower
document index, -1 / NaN where fewer than k documents exist. Metrics: cosine, dot, l2, l1.

How it stays exact at float32 speed (CUDA): a float32 pass (the paper's block-strided
matrix-vector kernel for a few queries, a register-tiled GEMM kernel for many) ranks every
document approximately; a radix select keeps k' = k + extra candidates per query (per document
slice); the candidates are rescored in float64 in a fixed canonical order and sorted on the device.
The host then proves from the float32 rounding-error bound that no other document can enter the
top k (see ``_certified``); the rare query where it cannot is redone with 4x more candidates, and
in the end with every document scored exactly. The CPU backend scores every document exactly in
the same canonical order, so CPU and CUDA results are identical (gputext.kernels.dense_knn).
Scores are float32(float64 value), e.g. cosine = dot / (sqrt(|q|^2) sqrt(|d|^2)), 0 for an all-zero
row; l2 = sqrt(max(|q|^2 + |d|^2 - 2 q.d, 0)) as the engine defines it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..backend import Backend, resolve
from ..errors import InputError
from ..progress import progress

METRICS = ("cosine", "dot", "l2", "l1")
_CODE = {"cosine": 0, "dot": 1, "l2": 2, "l1": 3}
_U32 = 2.0 ** -24  # unit roundoff of float32

# dense pays on the GPU when the matrix is small or not very sparse; see dense_fits
DENSE_SMALL_BYTES = 64 << 20
DENSE_MIN_DENSITY = 0.005
HOST_DENSE_MAX_BYTES = 2 << 30
CPU_DENSE_MIN_DENSITY = 0.25


@dataclass(frozen=True)
class DenseGeometry:
    """Launch geometry of the CUDA path (tests shrink it for the simulator; the benchmark tunes it).

    0 for a block count means "a multiple of the device's multiprocessors".
    """

    matvec_threads: int = 256
    threads_per_row: int = 32
    queries_per_pass: int = 4
    unroll: int = 4
    matvec_blocks: int = 0
    gemm_tile: tuple = (128, 128, 8, 8, 8)  # block queries, block docs, block terms, thread queries, thread docs
    gemm_min_queries: int = 16  # batches with fewer queries use the matrix-vector kernel
    select_threads: int = 256
    select_items: int = 8
    histogram_copies: int = 32
    select_blocks: int = 0
    rescore_threads: int = 256
    rescore_blocks: int = 0
    sort_threads: int = 256
    max_candidates: int = 2048  # per query, over all slices (shared memory of the sort: 12 bytes each)
    extra_candidates: int = 16
    min_docs_per_slice: int = 2048  # slices (blocks per query in the selection) when there are few queries
    keys_bytes: int = 1 << 30  # float32 key buffer per batch of queries
    query_bytes: int = 256 << 20  # dense query rows per batch (host and device)
    # "numba": our matvec/GEMM kernels make the float32 keys; "cublas": CuPy's matmul (cuBLAS
    # SGEMM/GEMV, TF32 off) makes them for cosine/dot/l2, and the rest of the pipeline (select,
    # float64 rescoring, certificate) is unchanged, so answers stay exact. Needs CuPy.
    key_backend: str = "numba"


def dense_fits(n_docs: int, n_terms: int, device_free_bytes: int | None, nnz: int | None = None) -> tuple[bool, str]:
    """(use dense?, one-line reason) for ``knn search --method auto``.

    GPU (``device_free_bytes`` given): dense when the float32 matrix (plus per-document arrays)
    takes at most half of the free device memory *and* it pays: the matrix is small (<= 64 MiB,
    where the dense kernels' regular access beats the inverted index's per-query work), or the
    density nnz / (n_docs n_terms) is at least 0.5% (e.g. CNAE-9: 1,080 x 856, 0.78%). These two
    thresholds are decisions; scripts/gpu_knn_classify.py measures both methods on CNAE-9 and 20NG.
    CPU (None): the CPU twin scores every document in float64, which measured 36 ms against the
    engine's 1 ms for CNAE-9's test set (2 cores), so dense only when the matrix fits
    HOST_DENSE_MAX_BYTES and its density is at least 25%.
    """
    dense_bytes = 4 * int(n_docs) * int(n_terms)
    need = dense_bytes + 16 * int(n_docs)
    where = "device" if device_free_bytes is not None else "host"
    budget = device_free_bytes // 2 if device_free_bytes is not None else HOST_DENSE_MAX_BYTES
    if need > budget:
        return False, f"inverted: the dense matrix ({dense_bytes / 2**20:.0f} MiB) does not fit the {where} budget ({budget / 2**20:.0f} MiB)"
    density = (nnz / max(1, n_docs * n_terms)) if nnz is not None else 1.0
    if device_free_bytes is None:
        if density >= CPU_DENSE_MIN_DENSITY:
            return True, f"dense: density {density:.1%} >= {CPU_DENSE_MIN_DENSITY:.0%} (CPU)"
        return False, f"inverted: density {density:.2%} < {CPU_DENSE_MIN_DENSITY:.0%} (on the CPU the dense twin scores every document)"
    if dense_bytes <= DENSE_SMALL_BYTES:
        return True, f"dense: the dense matrix is small ({dense_bytes / 2**20:.1f} MiB, density {density:.2%})"
    if density >= DENSE_MIN_DENSITY:
        return True, f"dense: the matrix fits ({dense_bytes / 2**20:.0f} MiB) and is dense enough ({density:.2%} >= {DENSE_MIN_DENSITY:.1%})"
    return False, f"inverted: density {density:.3%} < {DENSE_MIN_DENSITY:.1%} (the inverted index does less work)"


# ----------------------------------------------------------------------------- validation


def _as_dense(A, name: str) -> np.ndarray:
    if sp.issparse(A):
        D = A.toarray()
    elif hasattr(A, "X") and sp.issparse(getattr(A, "X")):  # a Corpus or an engine Index
        D = A.X.toarray()
    else:
        D = np.asarray(A)
    if D.ndim != 2:
        raise InputError(f"{name} must be a 2-d matrix (n, n_terms), got shape {D.shape}")
    if D.dtype.kind not in "fiub":
        raise InputError(f"{name} must be numeric, got dtype {D.dtype}")
    D = np.ascontiguousarray(D, dtype=np.float32)
    if D.size and not np.all(np.isfinite(D)):
        raise InputError(f"{name} contains NaN or infinite values")
    return D


def _rows_dense(Q, lo: int, hi: int, n_alloc: int) -> np.ndarray:
    out = np.zeros((n_alloc, Q.shape[1]), np.float32)
    if sp.issparse(Q):
        out[: hi - lo] = Q[lo:hi].toarray()
    else:
        out[: hi - lo] = Q[lo:hi]
    return out


def _self_docs(exclude_self, n_queries: int, n_docs: int) -> np.ndarray:
    if exclude_self is None or exclude_self is False:
        return np.full(n_queries, -1, np.int64)
    if exclude_self is True:
        if n_queries != n_docs:
            raise InputError(f"exclude_self needs the queries to be the indexed documents: expected {n_docs} "
                             f"queries, got {n_queries}")
        return np.arange(n_queries, dtype=np.int64)
    docs = np.asarray(exclude_self, dtype=np.int64)
    if docs.shape != (n_queries,):
        raise InputError(f"exclude_self array must have one entry per query ({n_queries}), got shape {docs.shape}")
    if docs.size and (docs.max() >= n_docs or docs.min() < -1):
        raise InputError(f"exclude_self entries must be -1 or document indices in [0, {n_docs}), "
                         f"got values in [{docs.min()}, {docs.max()}]")
    return docs


def _metric(metric: str) -> int:
    if metric not in _CODE:
        raise InputError(f"unknown metric {metric!r}: expected one of {', '.join(METRICS)}")
    return _CODE[metric]


# ----------------------------------------------------------------------------- the index


@dataclass
class _DocStats:
    dd: np.ndarray  # float64 canonical |d|^2
    rd: np.ndarray  # float32 1/|d| (0 for an all-zero row)
    half_sqd: np.ndarray  # float32 |d|^2 / 2
    max_norm: float
    max_sq: float
    max_l1: float
    nonneg: bool
    min_pos: float


def _stats(D: np.ndarray) -> _DocStats:
    from ..kernels import dense_knn as kd

    dd = np.empty(D.shape[0], np.float64)
    kd.canonical_sumsq_cpu(D, dd)
    l1 = np.empty(D.shape[0], np.float64)
    kd.row_abs_sums_cpu(D, l1)
    with np.errstate(divide="ignore"):
        rd = np.where(dd > 0, 1.0 / np.sqrt(dd), 0.0).astype(np.float32)
    pos = D[D > 0]
    return _DocStats(dd, rd, (dd / 2).astype(np.float32), float(np.sqrt(dd.max(initial=0.0))),
                     float(dd.max(initial=0.0)), float(l1.max(initial=0.0)),
                     bool(D.size == 0 or D.min() >= 0), float(pos.min()) if pos.size else 1.0)


class DenseIndex:
    """Documents as a dense float32 matrix, on the device when the backend is CUDA.

    X: scipy sparse, numpy 2-d, a Corpus or an engine Index (n_docs, n_terms).
    device: "auto" | "cpu" | "cuda" or a gputext.backend.Backend.
    """

    def __init__(self, X, device: str | Backend = "auto", geometry: DenseGeometry | None = None):
        self.backend = device if isinstance(device, Backend) else resolve(device)
        self.geometry = geometry or DenseGeometry()
        self.X = _as_dense(X, "the document matrix")
        self.n_docs, self.n_terms = self.X.shape
        self.stats = _stats(self.X)
        self._dev = None
        self._bufs: dict = {}
        self.last_run: dict = {}

    @property
    def nbytes(self) -> int:
        return self.X.nbytes

    def _device_arrays(self):
        if self._dev is None:
            from numba import cuda
            self._dev = {"X": cuda.to_device(self.X), "rd": cuda.to_device(self.stats.rd),
                         "half": cuda.to_device(self.stats.half_sqd), "dd": cuda.to_device(self.stats.dd)}
        return self._dev

    def _buffer(self, name: str, shape: tuple, dtype):
        """A device array of ``shape`` reused across calls (numba allocates and frees device memory
        synchronously, which cost more than the small kernels); its first dimension is a capacity."""
        from numba import cuda
        key = (name, tuple(shape[1:]), np.dtype(dtype).str)
        buf = self._bufs.get(key)
        if buf is None or buf.shape[0] < shape[0]:
            self._bufs = {k_: v for k_, v in self._bufs.items() if k_[0] != name}
            buf = cuda.device_array((max(1, shape[0]),) + tuple(shape[1:]), dtype)
            self._bufs[key] = buf
        return buf[: shape[0]]

    def _upload(self, name: str, array: np.ndarray):
        buf = self._buffer(name, array.shape, array.dtype)
        buf.copy_to_device(np.ascontiguousarray(array))
        return buf

    def search(self, Q, k: int, metric: str = "cosine", exclude_self=False, quiet: bool = True):
        """(indices int32 (n_queries, k), scores float32 (n_queries, k)); see the module doc."""
        code = _metric(metric)
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise InputError(f"k must be a positive integer, got {k!r}")
        k = int(k)
        if sp.issparse(Q):
            Q = sp.csr_matrix(Q)
            if Q.nnz and not np.all(np.isfinite(Q.data)):
                raise InputError("queries contain NaN or infinite values")
        else:
            Q = _as_dense(Q, "the query matrix")
        if Q.shape[1] != self.n_terms:
            raise InputError(f"queries have {Q.shape[1]} terms but the documents have {self.n_terms}: "
                             "build the queries with --vocab-from the indexed corpus")
        n_q = Q.shape[0]
        self_doc = _self_docs(exclude_self, n_q, self.n_docs)
        out_idx = np.full((n_q, k), -1, np.int32)
        out_score = np.full((n_q, k), np.nan, np.float32)
        if n_q == 0 or self.n_docs == 0:
            return out_idx, out_score
        self.last_run = {"backend": self.backend.name, "escalated": 0, "fallback_exact": 0, "kernel": None}
        if self.backend.is_cuda:
            self._search_cuda(Q, k, code, self_doc, out_idx, out_score, quiet)
        else:
            self._search_cpu(Q, k, code, self_doc, out_idx, out_score, quiet)
        return out_idx, out_score

    # ------------------------------------------------------------------ CPU

    def _search_cpu(self, Q, k, code, self_doc, out_idx, out_score, quiet):
        from ..kernels import dense_knn as kd

        g = self.geometry
        batch = max(1, min(Q.shape[0], g.query_bytes // max(1, 4 * self.n_terms), 8192))
        self.last_run["kernel"] = "exact_topk_cpu"
        with progress(Q.shape[0] if Q.shape[0] > batch else 0, "dense search (cpu)", quiet) as bar:
            for lo in range(0, Q.shape[0], batch):
                hi = min(Q.shape[0], lo + batch)
                Qb = _rows_dense(Q, lo, hi, hi - lo)
                qq = np.empty(hi - lo, np.float64)
                kd.canonical_sumsq_cpu(Qb, qq)
                kd.exact_topk_cpu(self.X, Qb, hi - lo, qq, self.stats.dd, code, k, self_doc[lo:hi],
                                  out_idx[lo:hi], out_score[lo:hi])
                bar.update(hi - lo)

    # ------------------------------------------------------------------ CUDA

    def _search_cuda(self, Q, k, code, self_doc, out_idx, out_score, quiet):
        from numba import cuda

        from ..kernels import dense_knn as kd

        g = self.geometry
        dev = self._device_arrays()
        n_docs, n_terms = self.n_docs, self.n_terms
        sms = _multiprocessors()
        qpp = g.queries_per_pass
        by_keys = max(1, g.keys_bytes // (4 * n_docs))
        by_rows = max(1, g.query_bytes // max(1, 4 * n_terms))
        batch = max(1, min(Q.shape[0], by_keys, by_rows))
        with progress(Q.shape[0] if Q.shape[0] > batch else 0, "dense search (cuda)", quiet) as bar:
            for lo in range(0, Q.shape[0], batch):
                hi = min(Q.shape[0], lo + batch)
                nb = hi - lo
                n_alloc = -(-nb // qpp) * qpp
                Qb = _rows_dense(Q, lo, hi, n_alloc)
                qq = np.empty(n_alloc, np.float64)
                kd.canonical_sumsq_cpu(Qb, qq)
                with np.errstate(divide="ignore"):
                    rq = np.where(qq > 0, 1.0 / np.sqrt(qq), 0.0).astype(np.float32)
                sd = np.full(n_alloc, -1, np.int64)
                sd[:nb] = self_doc[lo:hi]
                q_dev = self._upload("Q", Qb)
                qq_dev = self._upload("qq", qq)
                sd_dev = self._upload("self", sd)
                rq_dev = self._upload("rq", rq)
                keys = self._buffer("keys", (n_alloc, n_docs), np.float32)
                is_l1 = code == 3
                if g.key_backend == "cublas" and not is_l1 and _cublas_keys(dev, q_dev, nb, rq_dev, code, keys):
                    chain = kd.chain_length("gemm", n_terms)
                    self.last_run["kernel"] = "cublas"
                elif nb < g.gemm_min_queries:
                    kern = kd.make_matvec_kernel(g.matvec_threads, g.threads_per_row, qpp, g.unroll, is_l1)
                    blocks = g.matvec_blocks or min(-(-n_docs // (g.matvec_threads // g.threads_per_row)), 8 * sms)
                    kern[blocks, g.matvec_threads](dev["X"], q_dev, nb, rq_dev, dev["rd"], dev["half"], code, keys)
                    chain = kd.chain_length("matvec", n_terms, g.threads_per_row)
                    self.last_run["kernel"] = "matvec"
                else:
                    bm, bn, bk, tm, tn = g.gemm_tile
                    kern = kd.make_gemm_kernel(bm, bn, bk, tm, tn, is_l1)
                    grid = (-(-n_docs // bn), -(-nb // bm))
                    kern[grid, (bm // tm) * (bn // tn)](dev["X"], q_dev, nb, rq_dev, dev["rd"], dev["half"], code, keys)
                    chain = kd.chain_length("gemm", n_terms)
                    self.last_run["kernel"] = "gemm"
                bound = _BoundInputs(code, chain, Qb[:nb], qq[:nb], self.stats, n_terms)
                self._select_rescore(keys, q_dev, qq_dev, sd_dev, nb, k, code, bound, sms,
                                     out_idx[lo:hi], out_score[lo:hi])
                bar.update(nb)

    def _select_rescore(self, keys, q_dev, qq_dev, sd_dev, nb, k, code, bound, sms, out_idx, out_score):
        from numba import cuda

        from ..kernels import dense_knn as kd

        g = self.geometry
        n_docs = self.n_docs
        dev = self._device_arrays()
        key_bits = keys.view(np.uint32)
        larger = code <= 1
        pending = np.arange(nb, dtype=np.int32)
        kprime = min(k + g.extra_candidates, n_docs)
        select = kd.make_select_kernel(g.select_threads, g.select_items, g.histogram_copies)
        rescore = kd.make_rescore_kernel(g.rescore_threads)
        sort = kd.make_sort_kernel(g.sort_threads, g.max_candidates)
        while pending.size:
            if kprime > g.max_candidates:
                self._exact_rows(pending, q_dev, qq_dev, sd_dev, k, code, out_idx, out_score)
                self.last_run["fallback_exact"] += int(pending.size)
                return
            n_rows = int(pending.size)
            target = g.select_blocks or 2 * sms
            n_slices = max(1, min(-(-target // n_rows), g.max_candidates // kprime, n_docs // max(2 * kprime, g.min_docs_per_slice)))
            rows_dev = self._upload("rows", pending)
            cand_idx = self._buffer("cand_idx", (n_rows, n_slices, kprime), np.int32)
            cand_count = self._buffer("cand_count", (n_rows, n_slices), np.int32)
            cand_complete = self._buffer("cand_complete", (n_rows, n_slices), np.int32)
            cand_thr = self._buffer("cand_thr", (n_rows, n_slices), np.int64)
            cand_score = self._buffer("cand_score", (n_rows, n_slices, kprime), np.float64)
            o_idx = self._buffer("o_idx", (n_rows, k), np.int32)
            o_score = self._buffer("o_score", (n_rows, k), np.float64)
            select[(min(n_rows, 65535), n_slices), g.select_threads](
                key_bits, rows_dev, kprime, sd_dev, cand_idx, cand_count, cand_complete, cand_thr)
            groups = g.rescore_threads // kd.EXACT_LANES
            rblocks = g.rescore_blocks or max(1, min(-(-(n_rows * n_slices * kprime) // groups), 16 * sms))
            rescore[rblocks, g.rescore_threads](dev["X"], q_dev, rows_dev, cand_idx, cand_count, qq_dev, dev["dd"],
                                                code, cand_score)
            sort[min(n_rows, 65535), g.sort_threads](cand_idx, cand_count, cand_score, k, larger, o_idx, o_score)
            idx_h, score_h = o_idx.copy_to_host(), o_score.copy_to_host()
            complete_h, thr_h = cand_complete.copy_to_host(), cand_thr.copy_to_host()
            ok = _certified(code, bound, pending, idx_h, score_h, complete_h, thr_h, k,
                            lambda: cand_idx.copy_to_host(), n_docs, n_slices, sd_dev)
            out_idx[pending[ok]] = idx_h[ok]
            out_score[pending[ok]] = score_h[ok].astype(np.float32)
            pending = pending[~ok]
            if pending.size:
                self.last_run["escalated"] += int(pending.size)
                kprime = min(kprime * 4, n_docs)

    def _exact_rows(self, rows, q_dev, qq_dev, sd_dev, k, code, out_idx, out_score):
        """Score every document of these query rows exactly (rare), select on the host."""
        from numba import cuda

        from ..kernels import dense_knn as kd

        g = self.geometry
        dev = self._device_arrays()
        n_docs = self.n_docs
        sd = sd_dev.copy_to_host()
        rescore = kd.make_rescore_kernel(g.rescore_threads)
        group = max(1, (256 << 20) // (8 * n_docs))
        larger = code <= 1
        for s in range(0, rows.size, group):
            part = rows[s:s + group]
            cand = np.broadcast_to(np.arange(n_docs, dtype=np.int32), (part.size, 1, n_docs)).copy()
            count = np.full((part.size, 1), n_docs, np.int32)
            scores = cuda.device_array((part.size, 1, n_docs), np.float64)
            blocks = max(1, min(-(-(part.size * n_docs) // (g.rescore_threads // kd.EXACT_LANES)), 65535))
            rescore[blocks, g.rescore_threads](dev["X"], q_dev, cuda.to_device(part), cuda.to_device(cand),
                                               cuda.to_device(count), qq_dev, dev["dd"], code, scores)
            S = scores.copy_to_host()[:, 0, :]
            for i, row in enumerate(part):
                s_row = S[i].copy()
                keep = np.ones(n_docs, bool)
                if sd[row] >= 0:
                    keep[sd[row]] = False
                docs = np.nonzero(keep)[0]
                vals = s_row[keep]
                order = np.argsort(-vals if larger else vals, kind="stable")[:k]
                out_idx[row] = -1
                out_score[row] = np.nan
                out_idx[row, :order.size] = docs[order]
                out_score[row, :order.size] = vals[order].astype(np.float32)


def _cublas_keys(dev, q_dev, nb, rq_dev, code, keys) -> bool:
    """float32 keys by CuPy (cuBLAS) into ``keys``; False when CuPy is missing or TF32 is on
    (TF32 rounds the inputs to 10 bits, outside the certificate's float32 error bound)."""
    import os
    if os.environ.get("CUPY_TF32", "0") not in ("", "0"):
        return False
    try:
        import cupy as cp
    except ImportError:
        return False
    X = cp.asarray(dev["X"])
    Q = cp.asarray(q_dev)[:nb]
    out = cp.asarray(keys)[:nb]
    cp.matmul(Q, X.T, out=out)
    if code == 0:
        out *= cp.asarray(rq_dev)[:nb, None]
        out *= cp.asarray(dev["rd"])[None, :]
    elif code == 2:
        out -= cp.asarray(dev["half"])[None, :]
    out += cp.float32(0.0)  # -0.0 -> +0.0, as the numba kernels do
    return True


def _multiprocessors() -> int:
    try:
        from numba import cuda
        return int(getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1) or 1)
    except Exception:
        return 1


@dataclass
class _BoundInputs:
    """What the certificate needs about one batch: the float32 error bound per query."""

    code: int
    chain: int
    Qb: np.ndarray
    qq: np.ndarray
    docs: _DocStats
    n_terms: int
    gamma: float = field(init=False)
    nonneg: np.ndarray = field(init=False)
    nq: np.ndarray = field(init=False)

    def __post_init__(self):
        self.gamma = (self.chain + 8) * _U32 * 1.01
        self.nq = np.sqrt(self.qq)
        if self.Qb.shape[0]:
            q_min = self.Qb.min(axis=1)
            q_minpos = np.where(self.Qb > 0, self.Qb, np.inf).min(axis=1)
        else:
            q_min = q_minpos = np.zeros(0)
        safe = np.minimum(q_minpos, np.float64(np.inf)) * self.docs.min_pos >= 2.0 ** -100
        self.nonneg = (q_min >= 0) & self.docs.nonneg & (safe | ~np.isfinite(q_minpos))


def _certified(code, b: _BoundInputs, rows, idx, score, complete, thr_ord, k, cand_idx_fn, n_docs, n_slices, sd_dev):
    """True per row when no document outside the candidates can enter the top k.

    Non-candidates of an incomplete slice have float32 key <= thr (that slice's k'-th key). The
    float32 key differs from the exact value by at most gamma = (chain + 8) u (relative to the
    score for non-negative data, else to |q| |d|), giving a bound U on any non-candidate's exact
    score; the row is certified when its k-th float64 score is strictly better than U. For
    non-negative data with thr = 0, every non-candidate scores exactly 0 and has a higher index than
    the zero-key candidates of its slice, which is checked directly.
    """
    from ..kernels.dense_knn import ordered_to_float32

    n = rows.size
    ok = np.zeros(n, bool)
    incomplete = complete == 0
    all_complete = ~incomplete.any(axis=1)
    ok |= all_complete
    if ok.all():
        return ok
    thr = np.where(incomplete, ordered_to_float32(thr_ord).astype(np.float64), -np.inf).max(axis=1)
    s_k = score[:, k - 1]  # float64 from the sort kernel
    q = rows
    gamma = b.gamma
    nonneg = b.nonneg[q]
    tiny = b.n_terms * 2.0 ** -140
    if code in (0, 1):
        scale = np.ones(n) if code == 0 else b.nq[q] * b.docs.max_norm
        U = np.where(nonneg & (thr > 0), thr / (1 - gamma), thr + gamma * scale) + tiny
        U = U + np.abs(U) * 1e-12
        ok |= (~all_complete) & (s_k > U)
        zero = (~ok) & nonneg & (thr == 0)
        if zero.any():
            cand = cand_idx_fn()
            sd = sd_dev.copy_to_host()
            per = -(-n_docs // n_slices)
            for r in np.nonzero(zero)[0]:
                if s_k[r] > 0:
                    ok[r] = True
                    continue
                first_out = n_docs
                for sl in np.nonzero(incomplete[r])[0]:
                    lo, hi = sl * per, min(n_docs, (sl + 1) * per)
                    listed = set(cand[r, sl][cand[r, sl] >= 0].tolist())
                    for j in range(lo, hi):
                        if j != sd[q[r]] and j not in listed:
                            first_out = min(first_out, j)
                            break
                ok[r] = idx[r, k - 1] < first_out
    elif code == 2:
        E = gamma * (b.nq[q] * b.docs.max_norm + 0.5 * b.docs.max_sq) + tiny
        slack = 1e-12 * (b.qq[q] + b.docs.max_sq + 2 * b.nq[q] * b.docs.max_norm)
        L = np.sqrt(np.maximum(0.0, b.qq[q] - 2 * (thr + E) - slack))
        ok |= (~all_complete) & (s_k < L)
    else:
        L = (-thr) / (1 + gamma)
        L = L - np.abs(L) * 1e-12 - tiny
        ok |= (~all_complete) & (s_k < L)
    return ok


def search_dense(X, Q, k: int, metric: str = "cosine", device: str | Backend = "auto", exclude_self=False,
                 quiet: bool = True, geometry: DenseGeometry | None = None):
    """Exact k nearest documents of every query row by the dense method.

    X: documents (n_docs, n_terms); Q: queries (n_queries, n_terms), same vocabulary; scipy sparse,
    numpy arrays, Corpus or engine Index. metric: cosine | dot | l2 | l1. exclude_self: False,
    True (query i is document i) or an int array (n_queries,) of documents to leave out (-1 none).
    Returns (indices int32 (n_queries, k), scores float32 (n_queries, k)) exactly as
    gputext.engine.search_topk does.
    """
    _metric(metric)
    return DenseIndex(X, device, geometry).search(Q, k, metric, exclude_self, quiet)
