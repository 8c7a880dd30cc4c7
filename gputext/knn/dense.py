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
top k (gputext.knn.dense_certificate); the rare query where it cannot is redone with 4x more candidates, and
in the end with every document scored exactly. The CPU backend scores every document exactly in
the same canonical order, so CPU and CUDA results are identical (gputext.kernels.dense_knn).
Scores are float32(float64 value), e.g. cosine = dot / (sqrt(|q|^2) sqrt(|d|^2)), 0 for an all-zero
row; l2 = sqrt(max(|q|^2 + |d|^2 - 2 q.d, 0)) as the engine defines it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..backend import Backend, as_backend
from ..engine.index import check_weights
from ..engine.query import excluded_docs
from ..errors import InputError
from ..progress import progress
from ..similarity import METRICS as METRIC_CODES
from ..similarity import metric_code
from .dense_certificate import BoundInputs as _BoundInputs
from .dense_certificate import certified as _certified  # noqa: F401 (the reference the tests use, by this name)
from .dense_certificate import doc_stats as _stats
from .dense_certificate import zero_rule as _zero_rule

METRICS = tuple(METRIC_CODES)
__all__ = ["METRICS", "DenseGeometry", "DenseIndex", "dense_fits", "search_dense"]

# dense pays on the GPU when the matrix is small or not very sparse; see dense_fits
DENSE_SMALL_BYTES = 64 << 20
DENSE_MIN_DENSITY = 0.005
HOST_DENSE_MAX_BYTES = 2 << 30
SERIAL_NORM_ROWS = 64  # batches up to this many rows get their norms without a parallel-region launch
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
    # rows per thread of the matvec kernel (one shared-memory tree for all of them); H200, 2,000,000
    # x 1024, 2026-11-25: R=4 2.190 ms (3740 GB/s) vs R=1 2.854 ms (benchmarks/knn_classify_h200.json)
    matvec_rows: int = 4
    # synchronise the matvec tree per warp (a row's lanes sit in one warp when threads_per_row <= 32)
    # instead of per block: H200, same run, 2026-11-25 07:00: 0.920x vs 0.881x cuBLAS gemv at this
    # geometry (scripts/gpu_matvec_grid.py, benchmarks/matvec_grid_h200_1125_warp.json)
    matvec_warp_sync: bool = True
    matvec_blocks: int = 0
    # GEMM tiles (make_gemm_kernel): block queries, block docs, block terms, thread queries, thread docs
    # [, warp_docs]; batches of at most gemm_small_queries rows take gemm_small_tile
    gemm_tile: tuple = (128, 128, 16, 8, 8)
    gemm_small_tile: tuple = (64, 128, 8, 8, 8)
    gemm_small_queries: int = 64
    gemm_min_queries: int = 16  # batches with fewer queries use the matrix-vector kernel
    gemm_pipelined: bool = True  # double-buffered shared tiles, next slice's loads in flight (make_gemm_kernel)
    gemm_registers: int = 0  # register cap per thread of the GEMM kernel (0: the compiler's choice)
    select_threads: int = 256
    select_buffer: int = 2048  # keys >= the bound L0 kept in shared memory per block (8 bytes each)
    select_blocks: int = 0
    max_slice_candidates: int = 16384  # per query: slices * k' listed by the select kernel
    finish_threads: int = 256
    # register caps per thread of the select / finish kernels (0: the compiler's choice, ~230-250 at
    # 256 threads = one block per multiprocessor, so the 2 x SMs slices of one query ran in two
    # waves); 128: two blocks per multiprocessor, a few hundred bytes spilled (ptxas sm_90)
    select_registers: int = 128
    # the select kernel's cap for batches of at least gemm_min_queries rows (one slice or a few per
    # row): H200, 2026-11-25 08:15, select alone 0.376 / 0.926 / 3.435 ms at 64 / 256 / 1024 queries
    # with 64 registers vs 0.588 / 1.471 / 5.515 with 128 (benchmarks/knn_classify_h200_1125_gemm.json)
    select_registers_batch: int = 64
    finish_registers: int = 128
    finish_unroll: int = 8  # float64 loads per lane in flight while rescoring (no local memory: PTX checked)
    rescore_threads: int = 256  # exact fallback only
    max_candidates: int = 2048  # k' per query (shared memory of the finish kernel: 12 bytes each)
    extra_candidates: int = 16
    min_docs_per_slice: int = 2048  # slices (blocks per query in the selection) when there are few queries
    keys_bytes: int = 1 << 30  # float32 key buffer per batch of queries
    query_bytes: int = 256 << 20  # dense query rows per batch (host and device)
    # "numba": our matvec/GEMM kernels make the float32 keys; "cublas": CuPy's matmul (cuBLAS
    # GEMV/SGEMM, TF32 off) makes them for cosine/dot/l2, and the rest of the pipeline (select,
    # float64 rescoring, certificate) is unchanged, so answers stay exact; "auto": cuBLAS when CuPy
    # imports on a real GPU (not the simulator), else ours. CuPy stays optional.
    key_backend: str = "auto"


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
    check_weights(D.ravel(), name.removeprefix("the "))  # finite, |w| < 2^40: float32 squared norms stay finite
    return D


def _rows_dense(Q, lo: int, hi: int, n_alloc: int) -> np.ndarray:
    out = np.zeros((n_alloc, Q.shape[1]), np.float32)
    if sp.issparse(Q):
        out[: hi - lo] = Q[lo:hi].toarray()
    else:
        out[: hi - lo] = Q[lo:hi]
    return out


def _self_docs(exclude_self, n_queries: int, n_docs: int) -> np.ndarray:
    docs = excluded_docs(exclude_self, n_queries, n_docs, "indexed documents")
    if docs.size and (docs.max() >= n_docs or docs.min() < -1):
        raise InputError(f"exclude_self entries must be -1 or document indices in [0, {n_docs}), "
                         f"got values in [{docs.min()}, {docs.max()}]")
    return docs


def _metric(metric: str) -> int:
    return metric_code(metric)


# ----------------------------------------------------------------------------- the index


class DenseIndex:
    """Documents as a dense float32 matrix, on the device when the backend is CUDA.

    X: scipy sparse, numpy 2-d, a Corpus or an engine Index (n_docs, n_terms).
    device: "auto" | "cpu" | "cuda" or a gputext.backend.Backend.
    """

    def __init__(self, X, device: str | Backend = "auto", geometry: DenseGeometry | None = None):
        self.backend = as_backend(device)
        self.geometry = geometry or DenseGeometry()
        self.X = _as_dense(X, "the document matrix")
        self.n_docs, self.n_terms = self.X.shape
        self.stats = _stats(self.X)
        self._dev = None
        self._work = None  # gputext.device Workspace and PinnedPool of this index (made on first use)
        self._pinned_pool = None
        self._views: dict = {}
        self._cupy_views: dict = {}
        self._cublas_broken = ""
        self._stage: dict = {}
        self.profile = False  # True: last_run["stages_ms"] gets per-stage CUDA-event times
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

    def _pinned(self, name: str, shape: tuple, dtype) -> np.ndarray:
        """Page-locked host staging of ``shape`` reused across calls (async copies need it)."""
        if self._pinned_pool is None:
            from ..device.memory import PinnedPool
            self._pinned_pool = PinnedPool()
        return self._pinned_pool.get(name, shape, dtype, headroom=0.0)

    def _buffer(self, name: str, shape: tuple, dtype):
        """A device array of ``shape`` from this index's workspace (gputext.device.Workspace),
        reused across calls; its view is cached too."""
        if self._work is None:
            from ..device.memory import Workspace
            self._work = Workspace()
        return self._work.get(name, shape, dtype)

    def _staging(self, n_alloc: int):
        """Host and device views of the packed per-batch query inputs, cached per ``n_alloc``.

        One page-locked byte buffer holds, at 8-byte aligned offsets, Q (n_alloc, n_terms) f32,
        qq (n_alloc,) f64, rq (n_alloc,) f32 and self_doc (n_alloc,) i64; a device byte buffer has
        the same layout, so a batch's inputs go up in one asynchronous copy (before: four copies,
        each tens of microseconds of host work). Returns (host views dict, device views dict,
        host bytes, device bytes) with the byte views cut to the used length."""
        hit = self._stage.get(n_alloc)
        if hit is not None:
            return hit
        offs = {}
        pos = 0
        for name, shape, dt in (("Q", (n_alloc, self.n_terms), np.float32), ("qq", (n_alloc,), np.float64),
                                ("rq", (n_alloc,), np.float32), ("self", (n_alloc,), np.int64)):
            offs[name] = (pos, shape, np.dtype(dt))
            pos += -(-int(np.prod(shape)) * np.dtype(dt).itemsize // 8) * 8
        nbytes = pos
        stage_host = self._pinned("stage", (max(nbytes, 1 << 16),), np.uint8)
        stage_dev = self._buffer("stage", (max(nbytes, 1 << 16),), np.uint8)
        host, dev = {}, {}
        for name, (o, shape, dt) in offs.items():
            size = int(np.prod(shape)) * dt.itemsize
            host[name] = stage_host[o:o + size].view(dt).reshape(shape)
            dev[name] = stage_dev[o:o + size].view(dt).reshape(shape)
        hit = (host, dev, stage_host[:nbytes], stage_dev[:nbytes])
        self._stage = {n_alloc: hit}  # one batch size at a time (a new size may have replaced the buffers)
        return hit

    def _upload(self, name: str, array: np.ndarray, stream=0):
        buf = self._buffer(name, array.shape, array.dtype)
        buf.copy_to_device(array, stream=stream)
        return buf

    def _constant(self, name: str, n: int, value, dtype):
        """Device array (n,) of ``value`` (None: 0, 1, ..., n-1), uploaded once per capacity."""
        view_key = (name, (n,), np.dtype(dtype).str)
        view = self._views.get(view_key)
        if view is None:
            cap = max(n, 1024)
            host = np.arange(cap, dtype=dtype) if value is None else np.full(cap, value, dtype)
            full = self._buffer(name + "_full", (cap,), dtype)
            full.copy_to_device(host)
            view = full[:n]
            self._views[view_key] = view
        return view

    def _view(self, name: str, keys):
        """uint32 view of the float32 key buffer, cached (the cached entry keeps ``keys`` alive and
        is checked by identity, so a new buffer never gets an old view)."""
        key = (name, tuple(keys.shape), id(keys))
        hit = self._views.get(key)
        if hit is None or hit[0] is not keys:
            hit = (keys, keys.view(np.uint32))
            self._views[key] = hit
        return hit[1]

    def _cp(self, arr):
        """CuPy view of a numba device array, cached (cupy.asarray costs tens of microseconds)."""
        import cupy as cp
        hit = self._cupy_views.get(id(arr))
        if hit is None or hit[0] is not arr:
            hit = (arr, cp.asarray(arr))
            if len(self._cupy_views) > 64:  # views of replaced buffers: keep the dict small
                self._cupy_views.clear()
            self._cupy_views[id(arr)] = hit
        return hit[1]

    def _cublas_keys_or_note(self, dev, q_dev, nb, rq_dev, code, keys) -> bool:
        """_cublas_keys, but a CuPy failure (e.g. its kernels cannot compile on this host) is noted
        in last_run["cublas_error"] and this index goes back to our kernels (answers unchanged)."""
        if self._cublas_broken:
            return False
        try:
            return self._cublas_keys(dev, q_dev, nb, rq_dev, code, keys)
        except Exception as exc:  # CuPy is optional: never let it break a search
            self._cublas_broken = f"{type(exc).__name__}: {exc}"
            self.last_run["cublas_error"] = self._cublas_broken
            return False

    def _cublas_keys(self, dev, q_dev, nb, rq_dev, code, keys) -> bool:
        """float32 keys by cuBLAS (CuPy) into ``keys``: gemv (X @ q) for one query, SGEMM
        (Q @ X.T) for more, then one fused elementwise pass applies the metric's finish
        (cosine: * 1/|q| * 1/|d|; l2: - |d|^2/2; + 0.0 turns -0.0 into +0.0). False when CuPy is
        missing or TF32 is on (TF32 rounds the inputs to 10 bits, outside the certificate's
        float32 error bound)."""
        fin = _cupy_finish()
        if fin is None:
            return False
        import cupy as cp
        X = self._cp(dev["X"])
        Q = self._cp(q_dev)
        out = self._cp(keys)
        if nb == 1:
            cp.matmul(X, Q[0], out=out[0])
        else:
            cp.matmul(Q[:nb], X.T, out=out[:nb])
        if code == 0:
            fin["cos"](self._cp(rq_dev)[:nb, None], self._cp(dev["rd"])[None, :], out[:nb])
        elif code == 2:
            fin["l2"](self._cp(dev["half"])[None, :], out[:nb])
        else:
            fin["dot"](out[:nb])
        return True

    def search(self, Q, k: int, metric: str = "cosine", exclude_self=False, quiet: bool = True):
        """(indices int32 (n_queries, k), scores float32 (n_queries, k)); see the module doc."""
        import time
        t_enter = time.perf_counter()
        code = _metric(metric)
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise InputError(f"k must be a positive integer, got {k!r}")
        k = int(k)
        if sp.issparse(Q):
            Q = sp.csr_matrix(Q)
            check_weights(Q.data, "query matrix")
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
            self._search_cuda(Q, k, code, self_doc, out_idx, out_score, quiet, t_enter)
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

    def _search_cuda(self, Q, k, code, self_doc, out_idx, out_score, quiet, t_enter=None):
        from numba import cuda

        from ..kernels import dense_knn as kd

        from ..device.memory import resources
        from ..device.timer import StageTimer

        g = self.geometry
        dev = self._device_arrays()
        n_docs, n_terms = self.n_docs, self.n_terms
        sms = resources().multiprocessors
        by_keys = max(1, g.keys_bytes // (4 * n_docs))
        by_rows = max(1, g.query_bytes // max(1, 4 * n_terms))
        batch = max(1, min(Q.shape[0], by_keys, by_rows))
        stream = cuda.default_stream()
        # per-stage milliseconds when profiling: CUDA events on the default stream around each stage,
        # synchronised at each stage's end (a stage's figure is its GPU time plus the host work that
        # fed it); 'certificate' and 'prepare' are host wall time
        prof = StageTimer(on=self.profile, sync=True)
        stages = self.last_run["stages_ms"] = {}
        if prof.on and t_enter is not None:
            import time
            stages["prepare"] = (time.perf_counter() - t_enter) * 1e3  # validation, outputs (host)
        is_l1 = code == 3
        use_cublas = not is_l1 and _want_cublas(g.key_backend)
        with progress(Q.shape[0] if Q.shape[0] > batch else 0, "dense search (cuda)", quiet) as bar:
            for lo in range(0, Q.shape[0], batch):
                hi = min(Q.shape[0], lo + batch)
                nb = hi - lo
                # a batch smaller than queries_per_pass (one query) gets a matvec kernel for exactly
                # its rows: no multiplications by zero padding rows
                qpp = min(g.queries_per_pass, nb)
                n_alloc = -(-nb // qpp) * qpp
                prof.restart()
                # host side of the batch, packed into one pinned buffer (rows, canonical |q|^2,
                # 1/|q|, left-out documents) and sent up in one asynchronous copy
                host, devv, hbytes, dbytes = self._staging(n_alloc)
                Qh, qq, rq, sdh = host["Q"], host["qq"], host["rq"], host["self"]
                if sp.issparse(Q):
                    Qh[:nb] = Q[lo:hi].toarray()
                else:
                    Qh[:nb] = Q[lo:hi]
                if n_alloc > nb:
                    Qh[nb:] = 0
                if n_alloc <= SERIAL_NORM_ROWS:
                    kd.query_norms_serial(Qh, nb, qq, rq)
                else:
                    kd.canonical_sumsq_cpu(Qh, qq)
                    with np.errstate(divide="ignore"):
                        rq[:] = np.where(qq > 0, 1.0 / np.sqrt(qq), 0.0)
                sdh[:nb] = self_doc[lo:hi]
                if n_alloc > nb:
                    sdh[nb:] = -1
                dbytes.copy_to_device(hbytes, stream=stream)
                q_dev, qq_dev, rq_dev, sd_dev = devv["Q"], devv["qq"], devv["rq"], devv["self"]
                prof.mark("upload")
                keys = self._buffer("keys", (n_alloc, n_docs), np.float32)
                if use_cublas and self._cublas_keys_or_note(dev, q_dev, nb, rq_dev, code, keys):
                    chain = kd.chain_length("gemm", n_terms)
                    self.last_run["kernel"] = "cublas"
                elif nb < g.gemm_min_queries:
                    kern = kd.make_matvec_kernel(g.matvec_threads, g.threads_per_row, qpp, g.unroll, is_l1,
                                                 g.matvec_rows, g.matvec_warp_sync and g.threads_per_row <= 32)
                    rows_per_block = (g.matvec_threads // g.threads_per_row) * g.matvec_rows
                    blocks = g.matvec_blocks or min(-(-n_docs // rows_per_block), 8 * sms)
                    keys_launch = (kern, blocks, g.matvec_threads,
                                   (dev["X"], q_dev, nb, rq_dev, dev["rd"], dev["half"], code, keys))
                    _launch(keys_launch)
                    chain = kd.chain_length("matvec", n_terms, g.threads_per_row)
                    self.last_run["kernel"] = "matvec"
                else:
                    tile = g.gemm_small_tile if nb <= g.gemm_small_queries else g.gemm_tile
                    bm, bn, bk, tm, tn = tile[:5]
                    kern = kd.make_gemm_kernel(bm, bn, bk, tm, tn, is_l1, g.gemm_pipelined, g.gemm_registers,
                                               tile[5] if len(tile) > 5 else 0)
                    blocks, threads = kd.gemm_launch(bm, bn, tm, tn, nb, n_docs)
                    keys_launch = (kern, blocks, threads,
                                   (dev["X"], q_dev, nb, rq_dev, dev["rd"], dev["half"], code, keys))
                    _launch(keys_launch)
                    chain = kd.chain_length("gemm", n_terms)
                    self.last_run["kernel"] = "gemm"
                if prof.on and self.last_run["kernel"] != "cublas":
                    self.last_run.setdefault("launches", {})["keys"] = keys_launch
                prof.mark("keys")
                bound = _BoundInputs(code, chain, Qh[:nb], qq[:nb], self.stats, n_terms)
                self._select_rescore(keys, q_dev, qq_dev, sd_dev, nb, k, code, bound, sms,
                                     out_idx[lo:hi], out_score[lo:hi], self_doc[lo:hi], stream, prof)
                bar.update(nb)
        if prof.on:
            stages.update(prof.device_ms())
            stages.update({name: ms for name, ms in prof.host_ms.items() if name == "certificate"})

    def _select_rescore(self, keys, q_dev, qq_dev, sd_dev, nb, k, code, bound, sms, out_idx, out_score, self_doc,
                        stream, prof):
        """Candidates, exact rescoring and sort on the device; certificate on the host.

        Per round: two launches (select over (rows, slices), then one block per row merging the
        slices, rescoring in float64 and sorting) and one device-to-host copy of the packed
        results (pinned); rows that the certificate cannot prove go round again with 4x k'.
        """
        from ..kernels import dense_knn as kd

        g = self.geometry
        n_docs = self.n_docs
        dev = self._device_arrays()
        key_bits = self._view("key_bits", keys)
        pending = np.arange(nb, dtype=np.int32)
        kprime = min(k + g.extra_candidates, n_docs)
        sreg = g.select_registers_batch if nb >= g.gemm_min_queries else g.select_registers
        select = kd.make_select_kernel(g.select_threads, g.select_buffer, g.max_candidates, sreg)
        finish = kd.make_finish_kernel(g.finish_threads, g.select_buffer, g.max_candidates, g.finish_unroll,
                                       g.finish_registers)
        width_res = 2 * k + kd.RES_EXTRA
        first = True
        while pending.size:
            if kprime > g.max_candidates:
                self._exact_rows(pending, q_dev, qq_dev, sd_dev, k, code, out_idx, out_score)
                self.last_run["fallback_exact"] += int(pending.size)
                return
            n_rows = int(pending.size)
            target = g.select_blocks or 2 * sms
            n_slices = max(1, min(-(-target // n_rows), g.max_slice_candidates // kprime,
                                  n_docs // max(2 * kprime, g.min_docs_per_slice)))
            if first:
                rows_dev = self._constant("arange", n_rows, None, np.int32)
            else:
                rows_h = self._pinned("rows", (n_rows,), np.int32)
                rows_h[:] = pending
                rows_dev = self._upload("rows", rows_h, stream)
            first = False
            cand_idx = self._buffer("cand_idx", (n_rows, n_slices * kprime), np.int32)
            cand_key = self._buffer("cand_key", (n_rows, n_slices * kprime), np.uint32)
            cand_count = self._buffer("cand_count", (n_rows, n_slices), np.int32)
            cand_complete = self._buffer("cand_complete", (n_rows, n_slices), np.int32)
            cand_thr = self._buffer("cand_thr", (n_rows, n_slices), np.int64)
            res = self._buffer("res", (n_rows, width_res), np.float64)
            final_idx = self._buffer("final_idx", (n_rows, kprime), np.int32)
            prof.restart()
            sel_launch = (select, (min(n_rows, 65535), n_slices), g.select_threads,
                          (key_bits, rows_dev, kprime, sd_dev, cand_idx, cand_key, cand_count, cand_complete, cand_thr))
            fin_launch = (finish, min(n_rows, 65535), g.finish_threads,
                          (dev["X"], q_dev, rows_dev, cand_idx, cand_key, cand_count, cand_complete, cand_thr, kprime,
                           qq_dev, dev["dd"], code, k, res, final_idx))
            _launch(sel_launch)
            prof.mark("select")
            _launch(fin_launch)
            prof.mark("merge_rescore_sort")
            if prof.on:  # kept for replays (scripts/gpu_knn_classify.py times each kernel alone)
                self.last_run.setdefault("launches", {}).update(select=sel_launch, finish=fin_launch,
                                                                 select_slices=n_slices, kprime=kprime)
            res_h = self._pinned("res", (n_rows, width_res), np.float64)
            res.copy_to_host(res_h, stream=stream)
            stream.synchronize()
            prof.mark("copy_to_host")
            # certificate and unpacking of the proved rows in one compiled call (the NumPy form,
            # _certified, is the reference it is tested against)
            status = np.empty(n_rows, np.int8)
            kd.certify_unpack_cpu(res_h, k, code, bound.gamma, bound.nonneg, bound.nq, bound.qq,
                                  bound.docs.max_norm, bound.docs.max_sq, bound.tiny, pending, out_idx, out_score,
                                  status)
            if (status == 2).any():
                zero = np.nonzero(status == 2)[0]
                ok_z = _zero_rule(pending, zero, res_h[:, k - 1].astype(np.int64), res_h[:, 2 * k - 1],
                                  final_idx.copy_to_host(), n_docs, self_doc)
                for r in zero[ok_z]:
                    out_idx[pending[r]] = res_h[r, :k].astype(np.int32)
                    out_score[pending[r]] = res_h[r, k:2 * k].astype(np.float32)
                    status[r] = 1
            pending = pending[status != 1]
            prof.host("certificate")
            self.last_run["rounds"] = self.last_run.get("rounds", 0) + 1
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


def _launch(spec):
    """Launch (kernel, grid, block, args) as recorded in last_run["launches"] when profiling."""
    kern, grid, block, args = spec
    kern[grid, block](*args)


def _cupy_finish():
    """CuPy's fused finish kernels, or None when CuPy cannot be used (missing, or TF32 on)."""
    import os
    if os.environ.get("CUPY_TF32", "0") not in ("", "0"):
        return None
    return _cupy_finish_kernels()


@functools.lru_cache(maxsize=1)
def _cupy_finish_kernels():
    """The kernels, made once per process (None when CuPy does not import or cannot compile)."""
    try:
        import cupy as cp
        return {
            "cos": cp.ElementwiseKernel("float32 rq, float32 rd", "float32 y", "y = y * rq * rd + 0.0f",
                                        "gputext_dense_finish_cos"),
            "l2": cp.ElementwiseKernel("float32 half", "float32 y", "y = y - half + 0.0f", "gputext_dense_finish_l2"),
            "dot": lambda y: cp.add(y, cp.float32(0.0), out=y),
        }
    except Exception:
        return None


def _want_cublas(key_backend: str) -> bool:
    """key_backend 'cublas' always tries CuPy; 'auto' takes it on a real GPU when CuPy imports."""
    if key_backend == "numba":
        return False
    if key_backend == "cublas":
        return True
    from ..backend import simulator_enabled
    if simulator_enabled():
        return False
    return _cupy_finish() is not None


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
