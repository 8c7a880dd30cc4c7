#!/usr/bin/env bash
# The first answer of each command a user types (issue 31), on the GPU host: fresh processes timed
# from outside, cold (empty kernel cache) then warm (3 runs), a profile breakdown of a warm run, the
# CUDA context's parts, `doctor --compile`, and the library call in a fresh Python process.
# Usage (after gpu_round.sh's set-up, from the checkout):  bash scripts/first_answer.sh DATA OUT
#   DATA: ng/train.h5, ng/test.h5 (20NG as `corpus build` makes it) and letor-sample/
set -u
DATA=${1:-.data}; OUT=${2:-out/first}
mkdir -p "$OUT"; W=/tmp/fa; rm -rf $W; mkdir -p $W
G="python3 -m gputext"
python3 -m gputext corpus build $DATA/letor-sample/rank.train --query-groups $DATA/letor-sample/rank.train.query -o $W/letor.h5 -q
now() { date +%s.%N; }
# name, device, args...: cold run in a new cache, then 3 warm runs; one line each
measure() {
  local name=$1; shift
  export GPUTEXT_CACHE_DIR=$W/cache-$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_')
  rm -rf "$GPUTEXT_CACHE_DIR"
  local line="$name:"
  for i in 0 1 2 3; do
    local t0=$(now)
    $G "$@" > $W/stdout.txt 2> $W/stderr.txt || { echo "$name FAILED: $(tail -3 $W/stderr.txt)"; return; }
    local t1=$(now)
    line="$line $(python3 -c "print(f'{$t1-$t0:.3f}')")"
  done
  echo "$line   (cold warm warm warm, s)"
}
NG="--index $DATA/ng/train.h5 --queries $DATA/ng/test.h5"
CL="--train $DATA/ng/train.h5 --test $DATA/ng/test.h5"
echo "=== fresh processes $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
measure "knn search cuda" knn search $NG -k 30 -o $W/nn.h5 -q --device cuda
measure "knn search cpu" knn search $NG -k 30 -o $W/nn.h5 -q --device cpu
measure "knn classify svm meta" knn classify $CL --model svm --features meta -q --device cuda
measure "knn classify vote" knn classify $CL -k 30 -q --device cuda
measure "cluster star" cluster star $DATA/ng/train.h5 -o $W/star.h5 -q --device cuda
measure "cluster stream" cluster stream $DATA/ng/train.h5 -o $W/stream.h5 -q --device cuda
measure "rank train" rank train $W/letor.h5 -o $W/model.h5 -q --device cuda
measure "gputext --help" --help
echo "=== CUDA context parts"
python3 - <<'EOF'
import time
t = [time.perf_counter()]
from cuda.bindings import driver as cu; t.append(time.perf_counter())
cu.cuInit(0); t.append(time.perf_counter())
err, dev = cu.cuDeviceGet(0); err, name = cu.cuDeviceGetName(64, dev); t.append(time.perf_counter())
err, ctx = cu.cuDevicePrimaryCtxRetain(dev); cu.cuCtxSetCurrent(ctx); t.append(time.perf_counter())
import numba.cuda; t.append(time.perf_counter())
from numba import cuda; cuda.current_context(); t.append(time.perf_counter())
parts = ["import cuda.bindings", "cuInit", "device name", "primary context", "import numba.cuda", "numba context"]
for p, a, b in zip(parts, t, t[1:]):
    print(f"  {p:<22} {b - a:.3f} s")
EOF
echo "=== breakdown of warm runs (cProfile)"
export GPUTEXT_CACHE_DIR=$W/cache-knn_search_cuda
python3 -m benchmarks.breakdown --out $OUT --top 40 -- knn search $NG -k 30 -o $W/nn.h5 -q --device cuda
export GPUTEXT_CACHE_DIR=$W/cache-knn_classify_svm_meta
python3 -m benchmarks.breakdown --out $OUT --top 40 -- knn classify $CL --model svm --features meta -q --device cuda
export GPUTEXT_CACHE_DIR=$W/cache-cluster_star
python3 -m benchmarks.breakdown --out $OUT --top 25 -- cluster star $DATA/ng/train.h5 -o $W/star.h5 -q --device cuda
export GPUTEXT_CACHE_DIR=$W/cache-rank_train
python3 -m benchmarks.breakdown --out $OUT --top 25 -- rank train $W/letor.h5 -o $W/model.h5 -q --device cuda
echo "=== library call in a fresh process (warm cache of knn search)"
export GPUTEXT_CACHE_DIR=$W/cache-knn_search_cuda
for i in 1 2; do
t0=$(now)
python3 - "$DATA" <<'EOF'
import sys, time
t = time.perf_counter()
from gputext import NearestNeighbors
from gputext.io import read_corpus
train, test = read_corpus(sys.argv[1] + "/ng/train.h5"), read_corpus(sys.argv[1] + "/ng/test.h5")
d, i = NearestNeighbors(n_neighbors=30, metric="cosine").fit(train.X).kneighbors(test.X)
print(f"  in process {time.perf_counter() - t:.3f} s, shape {i.shape}")
EOF
t1=$(now); python3 -c "print(f'  NearestNeighbors fresh process: {$t1-$t0:.3f} s')"
done
echo "=== doctor --compile (empty cache)"
export GPUTEXT_CACHE_DIR=$W/cache-doctor
t0=$(now); python3 -m gputext doctor --compile 2>&1 | tail -25; t1=$(now)
python3 -c "print(f'  doctor --compile: {$t1-$t0:.1f} s')"
t0=$(now); python3 -m gputext knn search $NG -k 30 -o $W/nn.h5 -q --device cuda; t1=$(now)
python3 -c "print(f'  knn search after doctor --compile: {$t1-$t0:.3f} s')"
