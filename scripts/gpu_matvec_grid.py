"""GPU host: the one-query matvec kernel's grid size and geometry against cuBLAS gemv (CuPy) on
2,000,000 x 1024 float32, medians of 21 by CUDA events after a warm-up; prints one line a variant
and writes them to OUT/matvec_grid.json.  `bash scripts/gpu_round.sh matvec_grid` (carry .whl).
Each geometry with block-wide or warp-level synchronisation of the tree (warp_sync).
Grid: 4 / 8 / 16 / 32 blocks per multiprocessor (grid-stride loop) or "full" (one block per row
group).  The library's default is min(full, 8 x SMs) (gputext/knn/dense.py)."""
import argparse, json, os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.environ.get("OUT") or "out")
args = ap.parse_args()
from gpu_knn_classify import gpu_ms, dense_corpus
from numba import cuda
import cupy as cp
from gputext.kernels import dense_knn as kd
n_docs, n_terms = 2_000_000, 1024
X = dense_corpus(n_docs, n_terms, 0.05, seed=1)
nbytes = X.nbytes
Xd = cuda.to_device(X); q = X[12345:12346].copy()
qd = cuda.to_device(q); rq = cuda.to_device(np.ones(1, np.float32))
rd = cuda.to_device(np.ones(n_docs, np.float32)); half = cuda.to_device(np.zeros(n_docs, np.float32))
keys = cuda.device_array((1, n_docs), np.float32)
sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
Xc = cp.asarray(Xd); qc = cp.asarray(qd)[0]
out = cp.empty(n_docs, cp.float32)
def gemv():
    cp.matmul(Xc, qc, out=out)
reps = 21
g_ms = gpu_ms(gemv, reps, 5)
print(f"cublas gemv {g_ms:.3f} ms {nbytes/g_ms/1e6:.0f} GB/s", flush=True)
res = []
for tpb, tpr, unroll, rpt, ws in [(128,32,4,4,0),(256,32,4,4,0),(128,32,4,4,1),(256,32,4,4,1),(512,32,4,4,1),(256,32,8,4,1),
                                  (256,32,4,2,1),(128,32,4,2,1),(256,16,4,4,1),(256,32,2,8,1)]:
    kern = kd.make_matvec_kernel(tpb, tpr, 1, unroll, False, rpt, bool(ws))
    rows = (tpb // tpr) * rpt
    full = -(-n_docs // rows)
    for mult in (4, 8, 16, 32, 0):
        blocks = full if mult == 0 else min(full, mult * sms)
        ms = gpu_ms(lambda: kern[blocks, tpb](Xd, qd, 1, rq, rd, half, 0, keys), reps, 3)
        res.append((ms, tpb, tpr, unroll, rpt, mult, ws))
        print(f"warp_sync={ws} tpb={tpb} tpr={tpr} unroll={unroll} rpt={rpt} blocks={'full' if mult==0 else str(mult)+'xSM'}({blocks}): {ms:.3f} ms {nbytes/ms/1e6:.0f} GB/s = {g_ms/ms:.3f}x gemv", flush=True)
res.sort()
print("best", res[:5])
# verify the best keys against cublas
ms, tpb, tpr, unroll, rpt, mult, ws = res[0]
kern = kd.make_matvec_kernel(tpb, tpr, 1, unroll, False, rpt, bool(ws))
rows = (tpb // tpr) * rpt; full = -(-n_docs // rows)
blocks = full if mult == 0 else min(full, mult * sms)
kern[blocks, tpb](Xd, qd, 1, rq, rd, half, 0, keys); gemv(); cuda.synchronize()
diff = float(np.abs(keys.copy_to_host()[0] - cp.asnumpy(out)).max())
print("max abs diff vs gemv", diff)
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "matvec_grid.json"), "w") as fh:
    json.dump({"device": cuda.get_current_device().name.decode() if isinstance(cuda.get_current_device().name, bytes)
               else str(cuda.get_current_device().name), "gemv_ms": g_ms, "bytes": nbytes, "max_abs_diff": diff,
               "variants": [dict(zip(("ms", "threads", "threads_per_row", "unroll", "rows_per_thread",
                                      "blocks_per_sm", "warp_sync"), r)) for r in res]}, fh, indent=1)
