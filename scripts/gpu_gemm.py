#!/usr/bin/env python3
"""Tile sweep of our GEMM keys kernel (kernels/dense_knn.make_gemm_kernel) against cuBLAS SGEMM.

One run on the GPU host, the peer in the same run. For each batch of queries (default 64, 256,
1024 rows against X 500,000 x 1024 float32, 2 GiB, random non-negative rows of density 0.05,
L2-normalised, as scripts/gpu_knn_classify.py) and each kernel variant
(block queries, block docs, block terms, thread queries, thread docs, pipelined, register cap
[, warp_docs]):

  * time: median of CUDA-event timings after a warm-up (TFLOP/s counts 2 nq n_docs n_terms);
    cuBLAS SGEMM (CuPy ``Q @ X.T``, TF32 off) timed the same way in the same run;
  * resources: registers and local memory per thread (spills), as the driver reports them;
  * exactness: the keys buffer is poisoned (NaN) before the checked launch and every key must be
    written; all variants must give the same bits (each key is the same sequential fma chain);
    against a float64 reference on 4096 sampled documents every key must lie within the float32
    bound the host certificate uses ((n_terms + 1) u sum_j |q_j d_j| / (|q| |d|)).

  python scripts/gpu_gemm.py --out OUT [--sizes 64,256,1024] [--variants "128,128,8,8,8,1,0;..."]

Writes gemm_sweep{--tag}.json into --out and prints a markdown table last.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

DEFAULT_VARIANTS = (
    "128,128,8,8,8,1,0;128,128,8,8,8,1,128;128,128,8,8,8,0,0;128,128,16,8,8,1,0;128,128,16,8,8,1,128;"
    "64,256,8,8,8,1,0;64,256,8,8,8,1,128;64,128,8,8,8,1,0;64,128,16,8,8,1,0;128,64,8,8,8,1,0;"
    "128,256,8,8,8,1,128;256,128,8,8,8,1,128;64,128,8,8,4,1,0;32,256,8,4,8,1,0"
)


def _one(v):
    """The single value of a {signature: value} dict, or the value itself."""
    if isinstance(v, dict):
        return next(iter(v.values())) if v else None
    return v


def main(argv=None):
    ap = harness.parser(__doc__, quick=None, devices=None)
    ap.add_argument("--sizes", default="64,256,1024")
    ap.add_argument("--docs", type=int, default=500_000)
    ap.add_argument("--terms", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--tag", default="", help="suffix of the JSON file name (gemm_sweep{tag}.json)")
    ap.add_argument("--budget-s", type=float, default=480, help="skip the remaining variants after this many seconds")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    from gputext.backend import resolve
    backend = resolve("auto")
    if not backend.is_cuda or backend.simulator or importlib.util.find_spec("cupy") is None:
        harness.log(f"gpu_gemm needs a GPU and CuPy (cuBLAS SGEMM is the peer): {backend.describe()}")
        return 2

    import cupy as cp
    from numba import cuda

    from gputext.kernels import dense_knn as kd

    gpu_ms = harness.gpu_ms
    variants = [tuple(int(x) for x in v.split(",")) for v in args.variants.split(";") if v.strip()]
    dev_name = harness.device_name()
    n_docs, n_terms = args.docs, args.terms
    # X: random non-negative rows of density 0.05, L2-normalised (generated on the device)
    cp.random.seed(2)
    Xc = cp.empty((n_docs, n_terms), cp.float32)
    step = 65536
    for lo in range(0, n_docs, step):
        hi = min(n_docs, lo + step)
        blk = cp.random.random((hi - lo, n_terms), dtype=cp.float32)
        blk *= cp.random.random((hi - lo, n_terms), dtype=cp.float32) < 0.05
        blk /= cp.maximum(cp.sqrt((blk * blk).sum(1, keepdims=True)), 1e-30)
        Xc[lo:hi] = blk
    X = cuda.as_cuda_array(Xc)
    dd = (Xc.astype(cp.float64) ** 2).sum(1)
    rd = cuda.as_cuda_array(cp.where(dd > 0, 1 / cp.sqrt(dd), 0).astype(cp.float32))
    half = cuda.as_cuda_array((dd / 2).astype(cp.float32))
    rng = np.random.default_rng(3)
    sample = cp.asarray(np.sort(rng.choice(n_docs, 4096, replace=False)))
    Xs64 = Xc[sample].astype(cp.float64)
    u = 2.0 ** -24
    env = harness.probe(backend)
    res = dict(device=dev_name, date=env["date"], command=" ".join(sys.argv), env=env,
               n_docs=n_docs, n_terms=n_terms, repeats=args.repeats, runs={})
    table = []
    print(f"device {dev_name}; X {n_docs:,} x {n_terms} float32; variants {len(variants)}", flush=True)
    for nq in [int(s) for s in args.sizes.split(",")]:
        flops = 2.0 * nq * n_docs * n_terms
        Qc = Xc[cp.asarray(rng.choice(n_docs, nq, replace=False))].copy()
        Qc[:, :5] += 0.05
        qq = (Qc.astype(cp.float64) ** 2).sum(1)
        rq = cuda.as_cuda_array((1 / cp.sqrt(qq)).astype(cp.float32))
        Q = cuda.as_cuda_array(Qc)
        keys_c = cp.empty((nq, n_docs), cp.float32)
        keys = cuda.as_cuda_array(keys_c)
        sgemm_ms = gpu_ms(lambda: Qc @ Xc.T, args.repeats)
        # float64 reference and certificate bound on the sampled documents (cosine keys)
        ref = (Qc.astype(cp.float64) @ Xs64.T) / cp.sqrt(qq)[:, None] / cp.sqrt(dd[sample])[None, :]
        bound = (n_terms + 1) * u * (cp.abs(Qc.astype(cp.float64)) @ cp.abs(Xs64).T) / cp.sqrt(qq)[:, None] \
            / cp.sqrt(dd[sample])[None, :] + 4 * u * cp.abs(ref) + 1e-30
        run = dict(flops=flops, sgemm_ms=sgemm_ms, sgemm_tflops=flops / sgemm_ms / 1e9, variants=[])
        table.append((nq, "cuBLAS SGEMM (CuPy)", f"{sgemm_ms:.3f} ms", f"{flops / sgemm_ms / 1e9:.1f}", "1.00x", "", ""))
        print(f"nq={nq}: SGEMM {sgemm_ms:.3f} ms = {flops / sgemm_ms / 1e9:.1f} TFLOP/s", flush=True)
        first_bits = None
        for var in variants:
            bm, bn, bk, tm, tn, pipe, regs = var[:7]
            wx = var[7] if len(var) > 7 else 0
            name = f"{bm}x{bn}x{bk}/{tm}x{tn}{' pipe' if pipe else ' 1buf'}{f' r{regs}' if regs else ''}{f' w{wx}' if wx else ''}"
            if time.perf_counter() - t_start > args.budget_s:
                print(f"  {name}: skipped (time budget)", flush=True)
                continue
            try:
                kern = kd.make_gemm_kernel(bm, bn, bk, tm, tn, False, bool(pipe), regs, wx)
                blocks, threads = kd.gemm_launch(bm, bn, tm, tn, nq, n_docs)
                keys_c.fill(cp.nan)

                def launch():
                    kern[blocks, threads](X, Q, nq, rq, rd, half, 0, keys)
                launch()
                cuda.synchronize()
                written = bool(cp.isfinite(keys_c).all())
                ks = keys_c[:, sample].astype(cp.float64)
                ratio = float(cp.max(cp.abs(ks - ref) / bound))
                bits = keys_c.view(cp.uint32)
                same = True if first_bits is None else bool((bits == first_bits).all())
                if first_bits is None:
                    first_bits = bits.copy()
                ms = gpu_ms(launch, args.repeats)
                try:
                    nreg = _one(kern.get_regs_per_thread())
                    lmem = _one(kern.get_local_mem_per_thread())
                except Exception as e:  # noqa: BLE001 - resource query is informative only
                    nreg, lmem = None, repr(e)
                v = dict(tile=[bm, bn, bk, tm, tn], pipelined=bool(pipe), max_registers=regs, warp_docs=wx, ms=ms,
                         tflops=flops / ms / 1e9, vs_sgemm=sgemm_ms / ms, registers=nreg, local_bytes=lmem,
                         all_written=written, within_bound=ratio <= 1.0, err_over_bound=ratio,
                         bits_equal_first_variant=same)
                print(f"  {name}: {ms:.3f} ms = {flops / ms / 1e9:.1f} TFLOP/s ({sgemm_ms / ms:.2f}x SGEMM) regs {nreg} "
                      f"local {lmem} written {written} err/bound {ratio:.3f} same bits {same}", flush=True)
                table.append((nq, name, f"{ms:.3f} ms", f"{flops / ms / 1e9:.1f}", f"{sgemm_ms / ms:.2f}x",
                              f"{nreg} / {lmem}", f"{'ok' if written and ratio <= 1 and same else 'FAIL'} ({ratio:.2f})"))
            except Exception as e:  # noqa: BLE001 - a tile the device refuses (registers x threads) is reported
                v = dict(tile=[bm, bn, bk, tm, tn], pipelined=bool(pipe), max_registers=regs, error=repr(e)[:300])
                print(f"  {name}: ERROR {e!r}"[:300], flush=True)
                table.append((nq, name, "error", "", "", "", repr(e)[:80]))
            run["variants"].append(v)
        res["runs"][nq] = run
        del keys_c, keys, Qc, Q, first_bits
        cp.get_default_memory_pool().free_all_blocks()
    res["seconds"] = time.perf_counter() - t_start
    harness.Report(args.out, res).write(f"gemm_sweep{args.tag}.json", f"\n## gpu_gemm ({dev_name}, {res['date']}, "
                                        f"{res['seconds']:.0f} s)\n\n" + harness.md_table(
                                            ["queries", "kernel", "time", "TFLOP/s", "vs SGEMM", "regs / local bytes",
                                             "keys (err/bound)"], table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
