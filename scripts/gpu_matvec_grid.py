"""GPU host: the one-query matvec kernel's grid size and geometry against cuBLAS gemv (CuPy) on
2,000,000 x 1024 float32, medians of 21 by CUDA events after a warm-up; prints one line a variant
and writes them to OUT/matvec_grid.json.  `bash scripts/gpu_round.sh matvec_grid` (carry .whl).
Each geometry with block-wide or warp-level synchronisation of the tree (warp_sync).
Grid: 4 / 8 / 16 / 32 blocks per multiprocessor (grid-stride loop) or "full" (one block per row
group).  The library's default is min(full, 8 x SMs) (gputext/knn/dense.py)."""
import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts the checkout first on sys.path)
import numpy as np  # noqa: E402

# (threads per block, threads per row, unroll, rows per thread, warp_sync)
GEOMETRIES = [(128, 32, 4, 4, 0), (256, 32, 4, 4, 0), (128, 32, 4, 4, 1), (256, 32, 4, 4, 1), (512, 32, 4, 4, 1),
              (256, 32, 8, 4, 1), (256, 32, 4, 2, 1), (128, 32, 4, 2, 1), (256, 16, 4, 4, 1), (256, 32, 2, 8, 1)]
FIELDS = ("ms", "threads", "threads_per_row", "unroll", "rows_per_thread", "blocks_per_sm", "warp_sync")


def launch(kd, sms, n_docs, tpb, tpr, unroll, rpt, mult, ws):
    """The kernel of one geometry and its grid: every row group (mult 0) or mult blocks an SM."""
    kern = kd.make_matvec_kernel(tpb, tpr, 1, unroll, False, rpt, bool(ws))
    full = -(-n_docs // ((tpb // tpr) * rpt))
    return kern, full if mult == 0 else min(full, mult * sms)


def main(argv=None):
    args = harness.parser(__doc__, quick=None, devices=None).parse_args(argv)
    from gputext.backend import resolve
    backend = resolve("auto")
    if not backend.is_cuda or backend.simulator or importlib.util.find_spec("cupy") is None:
        harness.log(f"gpu_matvec_grid needs a GPU and CuPy (cuBLAS gemv is the peer): {backend.describe()}")
        return 2
    import cupy as cp
    from gpu_knn_classify import dense_corpus
    from numba import cuda

    from gputext.kernels import dense_knn as kd
    n_docs, n_terms, reps = 2_000_000, 1024, 21
    X = dense_corpus(n_docs, n_terms, 0.05, seed=1)
    nbytes = X.nbytes
    Xd, qd = cuda.to_device(X), cuda.to_device(X[12345:12346].copy())
    rq, rd = cuda.to_device(np.ones(1, np.float32)), cuda.to_device(np.ones(n_docs, np.float32))
    half = cuda.to_device(np.zeros(n_docs, np.float32))
    keys = cuda.device_array((1, n_docs), np.float32)
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    Xc, qc = cp.asarray(Xd), cp.asarray(qd)[0]
    out = cp.empty(n_docs, cp.float32)

    def gemv():
        cp.matmul(Xc, qc, out=out)
    g_ms = harness.gpu_ms(gemv, reps, 5)
    print(f"cublas gemv {g_ms:.3f} ms {nbytes / g_ms / 1e6:.0f} GB/s", flush=True)
    res = []
    for tpb, tpr, unroll, rpt, ws in GEOMETRIES:
        for mult in (4, 8, 16, 32, 0):
            kern, blocks = launch(kd, sms, n_docs, tpb, tpr, unroll, rpt, mult, ws)
            ms = harness.gpu_ms(lambda: kern[blocks, tpb](Xd, qd, 1, rq, rd, half, 0, keys), reps, 3)  # noqa: B023
            res.append((ms, tpb, tpr, unroll, rpt, mult, ws))
            print(f"warp_sync={ws} tpb={tpb} tpr={tpr} unroll={unroll} rpt={rpt} "
                  f"blocks={'full' if mult == 0 else str(mult) + 'xSM'}({blocks}): {ms:.3f} ms "
                  f"{nbytes / ms / 1e6:.0f} GB/s = {g_ms / ms:.3f}x gemv", flush=True)
    res.sort()
    print("best", res[:5])
    # verify the best keys against cublas
    ms, tpb, tpr, unroll, rpt, mult, ws = res[0]
    kern, blocks = launch(kd, sms, n_docs, tpb, tpr, unroll, rpt, mult, ws)
    kern[blocks, tpb](Xd, qd, 1, rq, rd, half, 0, keys)
    gemv()
    cuda.synchronize()
    diff = float(np.abs(keys.copy_to_host()[0] - cp.asnumpy(out)).max())
    print("max abs diff vs gemv", diff)
    harness.write_json(os.path.join(args.out, "matvec_grid.json"), {
        "device": harness.device_name(), "env": harness.probe(backend), "gemv_ms": g_ms, "bytes": nbytes,
        "max_abs_diff": diff, "variants": [dict(zip(FIELDS, r)) for r in res]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
