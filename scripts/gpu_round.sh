#!/usr/bin/env bash
# One GPU round on the device host: environment probe, GPU tests, then benchmarks.
# Usage (device tool, carry .whl):  bash scripts/gpu_round.sh [STEP ...]
#   steps: compile-probe resident-profile probe tests tests-only tests-a tests-b tests-par tests-dist table-meta knn-l2 knn-tiles knn-tiles-1e7 knn-ncu-1e7 knn-issue19 knn-growth knn-latency knn-shard-sweep knn-5e7 knn-ncu stream-sanitizer pruning bench-cli server-modes tests-all bench-readme bench-knn-quick bench-knn bench-knn-1e6 bench-knn-1e7 estimators rank star stream knn_classify multi-1e8 multi-1e8-one multi-families multi-rank first-answer-1gpu
#   (knn_classify reads the real datasets from .data/, an ignored copy of ../shared/datasets carried along)
# Logs go to $OUT (default out/gpu). Each step has its own time limit so one slow step cannot eat the round.
set -u
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
# WHEELS: the carried wheel folder (default .whl; the multi-* steps need dask and distributed too,
# e.g. a folder with .whl's numpy and the wheels of ../shared/gpu-host/wheels.sh dask distributed)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${WHEELS:-.whl}"/*.whl >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
# run from the checkout (this is the device's copy of it): map kernels/ and datasets/ into the
# package as setup.py does, so scripts that put the checkout on sys.path import the same code
ln -sfn ../kernels gputext/kernels
ln -sfn ../datasets gputext/datasets
export PYTHONPATH=/tmp/site:$PWD:$PWD/tests
export PYTHONUNBUFFERED=1
steps=("$@")
DASK_MEMORY_OFF=(DASK_DISTRIBUTED__WORKER__MEMORY__TARGET=False DASK_DISTRIBUTED__WORKER__MEMORY__SPILL=False
                 DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE=False DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE=False)
[ ${#steps[@]} -eq 0 ] && steps=(probe tests bench-knn)
run() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s) $(date +%H:%M:%S)"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.log"
  echo "=== $name rc=$rc"
}
ng20() {  # 20 Newsgroups as the cli suite builds it, in /tmp/bench/data/20ng-1, unless there already
  local d=/tmp/bench/data/20ng-1 src="${GPUTEXT_DATASETS:-.data}/20newsgroups"
  [ -f $d/test.h5 ] && return 0
  mkdir -p $d && GPUTEXT_DAEMON=0 python3 -m gputext corpus build "$src/20newsgroups-train.tab" -o $d/train.h5 -q &&
    GPUTEXT_DAEMON=0 python3 -m gputext corpus build "$src/20newsgroups-test.tab" --vocab-from $d/train.h5 -o $d/test.h5 -q
}
for step in "${steps[@]}"; do
  case $step in server-modes|compile-probe|resident-profile) ng20 || echo "no 20 Newsgroups (carry .data)";; esac
  case $step in
    probe) run probe 120 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; (cd scripts && python3 -m harness); cd /tmp && python3 -m gputext doctor' ;;
    tests) run tests 330 bash -c "cd /tmp && python3 -m pytest -x -q -p no:cacheprovider -m gpu $PWD/tests" ;;
    # pytest -m gpu in two halves that each fit one device call on a fresh machine (most of the
    # time is compiling); one process each, test names and failures printed (-rA). Under
    # pytest-xdist the suite did not exit within a call (2026-11-25): run it like this instead.
    tests-a) run tests-a 560 bash -c "cd /tmp && python3 -m pytest -q -rfE -p no:cacheprovider -m gpu --durations=10 $PWD/tests/test_engine_gpu.py $PWD/tests/test_engine_weights.py $PWD/tests/test_engine_blocked.py $PWD/tests/test_device_runtime.py $PWD/tests/test_star_crash.py" ;;
    tests-b) run tests-b 560 bash -c "cd /tmp && python3 -m pytest -q -rfE -p no:cacheprovider -m gpu --durations=10 $PWD/tests/test_linear_svm.py $PWD/tests/test_estimators.py $PWD/tests/test_distributed.py $PWD/tests/test_stream_gpu.py $PWD/tests/test_rank_gpu.py" ;;
    # pytest -m gpu on the host's cores (pytest-xdist, carried in .whl), every outcome and failure
    # written to $OUT/tests.live as it happens (tests/conftest.py) so that a run cut off by the
    # call's limit still names its failures; Dask's tests (a LocalCluster of their own) apart.
    tests-par) run tests-par "${LIMIT_tests_par:-380}" bash -c "cd /tmp && GPUTEXT_TEST_LOG=$OUT/tests.live python3 -m pytest -q -rfE -p no:cacheprovider -m gpu -n ${WORKERS:-8} --durations=15 $PWD/tests --ignore=$PWD/tests/test_distributed.py" ;;
    # chosen test files only: TESTS_ONLY="tests/test_rank_gpu.py ..." (paths from the checkout)
    tests-only) run tests-only "${LIMIT_tests_only:-400}" bash -c "cd /tmp && GPUTEXT_TEST_LOG=$OUT/tests.live python3 -m pytest -q -rfE -p no:cacheprovider -m gpu --durations=5 $(for t in ${TESTS_ONLY:-}; do printf '%s ' "$PWD/$t"; done)" ;;
    tests-dist) run tests-dist "${LIMIT_tests_dist:-150}" bash -c "cd /tmp && GPUTEXT_TEST_LOG=$OUT/tests.live python3 -m pytest -q -rfE -p no:cacheprovider -m gpu --durations=5 $PWD/tests/test_distributed.py" ;;
    # the GT-kNN Tables 2/3 with the SVM trained by our TRON on the GPU (issue 18), every dataset
    # (its corpora are cached outside $OUT: only the table comes back)
    table-meta) run table-meta "${LIMIT_table_meta:-560}" bash -c "python3 scripts/table_metafeatures.py --device cuda --skip-efficiency --solvers tron --datasets ${GPUTEXT_DATASETS:-.data} --out /tmp/table-meta ${ARGS_table_meta:-}; rc=\$?; cp /tmp/table-meta/table_metafeatures.* $OUT/; exit \$rc" ;;
    # single query and 10,000 queries at 10^7 with and without the L2-sized resident shards (issue 19)
    knn-l2) run knn-l2 560 python3 scripts/bench_knn.py --latency --device cuda --sizes 1e7 --queries 10000 --singles 50 --check 5 --repeats 1 --geometries "l2:shard_docs=-1" --out "$OUT" ;;
    # the blocked top-k's safe pruning: postings skipped at k = 10 and 100, bench corpus and 20NG (issue 19)
    pruning) run pruning 400 python3 scripts/knn_pruning.py --device cuda --docs 1e6 --queries 1000 --datasets "${GPUTEXT_DATASETS:-.data}" --out "$OUT" ;;
    # shards at 10^6 too: is it the batch's concurrently live score rows, not one row, that spills L2? (issues 15/19)
    knn-shard-sweep) run knn-shard-sweep 560 python3 scripts/bench_knn.py --latency --device cuda --sizes 1e6 --queries 100,1000,10000 --singles 50 --check 5 --repeats 3 --geometries "s500k:shard_docs=500000;s250k:shard_docs=250000;s125k:shard_docs=125000" --out "$OUT" ;;
    # tiles of the rows top-k (issues 15/19): score rows of a few queries kept in L2 and selected there, segments by term
    knn-tiles) run knn-tiles "${LIMIT_knn_tiles:-420}" python3 scripts/bench_knn.py --latency --profile --device cuda --sizes 1e6 --queries 1000,10000 --singles 200 --check 5 --repeats 3 --geometries "${GEOMS_1e6:-legacy:tile_rows=0,tile_term_order=0;t1:tile_rows=1;t3q:tile_term_order=0;t6:tile_rows=6;t12:tile_rows=12;s250k:shard_docs=250000;s125k:shard_docs=125000;mw:merge_width_small=2048}" --out "$OUT" ;;
    knn-tiles-1e7) run knn-tiles-1e7 "${LIMIT_knn_tiles_1e7:-560}" python3 scripts/bench_knn.py --latency --device cuda --sizes 1e7 --queries 10000 --singles 30 --check 3 --repeats 1 --geometries "${GEOMS_1e7:-u16:unit_threads=16;u32:unit_threads=32;g8:tile_rows=8;nr:block_ranges=0}" --out "$OUT" ;;
    # Nsight Compute at 10^7 (issue 19's growth: DRAM bytes a posting against 10^6's knn-ncu), 100 queries in grid tiles
    knn-ncu-1e7) run knn-ncu-1e7 "${LIMIT_knn_ncu_1e7:-420}" bash -c "ncu --clock-control none --target-processes all -k 'regex:accumulate|unit_topk|block_ranges' --launch-skip ${NCU_SKIP:-60} --launch-count ${NCU_COUNT:-6} --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats -f -o $OUT/knn_ncu_1e7 python3 scripts/bench_knn.py --device cuda --sizes 1e7 --queries 100 --peers '' --repeats 1 --check 1 --out /tmp/ncu-bench-1e7; ncu --import $OUT/knn_ncu_1e7.ncu-rep --page details > $OUT/knn_ncu_1e7.txt" ;;
    # the issue-19 command (same run: CuPy SpMM + top-k) and the single-query latency at 10^6 (issue 15);
    # give it a call of its own: at 10^7 CuPy's 10,000 queries take a minute a run, warm-up and timed
    # (2026-11-27: 410 s did not reach the end of the 10^7 row, 235 s for 10^7 alone did not either,
    # while the peer's check still ran it a third time)
    knn-issue19) run knn-issue19 "${LIMIT_knn_issue19:-590}" python3 scripts/bench_knn.py --device cuda --sizes ${SIZES_issue19:-1e6,1e7} --queries 1,10000 --peers cupy_spmm --repeats 1 --check 5 --out "$OUT" ;;
    # the issue-19 growth from 10^6 to 10^7 documents alone (10,000 queries, no peers: about 150 s)
    knn-growth) run knn-growth "${LIMIT_knn_growth:-200}" python3 scripts/bench_knn.py --device cuda --sizes "${SIZES_growth:-1e6,1e7}" --queries 10000 --peers "" --repeats 1 --check 2 --out "$OUT/growth" ;;
    knn-latency) run knn-latency "${LIMIT_knn_latency:-200}" python3 scripts/bench_knn.py --latency --device cuda --sizes 1e6 --queries 10000 --singles 300 --repeats 3 --check 5 --out "$OUT" ;;
    # Nsight Compute on the rows top-k's kernels in a 1,000-query batch at 10^6 documents (steady state:
    # the first NCU_SKIP matching launches are left out); the report's details go to knn_ncu.txt
    knn-ncu) run knn-ncu "${LIMIT_knn_ncu:-400}" bash -c "ncu --clock-control none --target-processes all -k 'regex:accumulate|select_topk|merge_topk|unit_topk|block_ranges' --launch-skip ${NCU_SKIP:-300} --launch-count ${NCU_COUNT:-12} --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats -f -o $OUT/knn_ncu python3 scripts/bench_knn.py --device cuda --sizes 1e6 --queries 1000 --peers '' --repeats 1 --check 1 --out /tmp/ncu-bench; ncu --import $OUT/knn_ncu.ncu-rep --page details > $OUT/knn_ncu.txt" ;;
    # the stream clusterer's batch-size-1 GPU tests (which failed under pytest-xdist) under compute-sanitizer:
    # initcheck (reads of device memory never written), then racecheck (shared-memory races)
    stream-sanitizer) run stream-sanitizer "${LIMIT_stream_sanitizer:-500}" bash -c "cd /tmp && for tool in initcheck racecheck; do echo == \$tool; compute-sanitizer --tool \$tool --target-processes all --print-limit 20 python3 -m pytest -q -p no:cacheprovider -m gpu $PWD/tests/test_stream_gpu.py -k '1-False or restore'; done" ;;
    # 5x10^7 documents (3.6G nonzeros; about 29 GB of postings) on one GPU, 1 and 1,000 queries (issue 19)
    knn-5e7) run knn-5e7 "${LIMIT_knn_5e7:-590}" python3 scripts/bench_knn.py --device cuda --sizes 5e7 --queries ${QUERIES_5e7:-1,1000} --peers "" --repeats 1 --check 2 --out "$OUT" ;;
    bench-knn-quick) run bench-knn-quick 200 python3 scripts/bench_knn.py --quick --device cuda --out "$OUT" ;;
    bench-knn) run bench-knn 560 python3 scripts/bench_knn.py --sizes 1e5,1e6 --queries 1,100,10000 --device cuda --profile --out "$OUT" ;;
    bench-knn-1e6) run bench-knn-1e6 500 python3 scripts/bench_knn.py --sizes 1e6 --queries 1,100,10000 --peers cupy_spmm,torch_spmm,sklearn,cpu --cpu-queries 100 --profile --device cuda --out "$OUT" ;;
    bench-knn-1e7) run bench-knn-1e7 560 python3 scripts/bench_knn.py --sizes 1e7 --queries 1,100,10000 --peers cupy_spmm,cpu --device cuda --repeats 1 --out "$OUT" ;;
    # the benchmark registry's README suite (benchmarks/run.py): the fresh-process CLI timings (cold and
    # warm kernel cache) on 20NG and LETOR first, then the README's kernel rows, then the synthetic
    # corpora, one record a line appended to $OUT/records.jsonl as each is measured; entries that do
    # not fit the budget are skipped, and running the step again (--resume) measures only those
    # (the copy has no .git: GPUTEXT_BENCH_COMMIT=$(git rev-parse --short=12 HEAD) names the commit);
    # --breakdown: one more warm run of each command under cProfile, its parts in the record's stages
    # issue 31's rounds (2026-11-27): the command-line suite (cold, warm through the warm server, warm in its
    # own process) on 20NG and the LETOR sample, then knn search both ways on GPU and CPU with outputs compared
    bench-cli) run bench-cli "${LIMIT_bench_cli:-420}" python3 -m benchmarks.run --suite cli --device cuda --datasets "${GPUTEXT_DATASETS:-.data}" --repeats 3 --only "${ONLY_bench_cli:-/20ng/,letor-sample,startup}" --budget "${BUDGET_bench_cli:-330}" --out /tmp/bench --records "$OUT/records.jsonl" ;;
    server-modes) run server-modes 180 python3 -m benchmarks.server_modes --train /tmp/bench/data/20ng-1/train.h5 --test /tmp/bench/data/20ng-1/test.h5 --runs 5 --out "$OUT/modes.json" --work /tmp/modes ;;
    # what a command compiles or loads, per kernel (benchmarks/compile_probe.py): one process, an empty
    # kernel cache, 20NG's knn search twice, with k = 10, then synthetic corpora of 5x10^4 to 8x10^5
    # documents (does a new size class compile with a filled cache?) -> $OUT/probe.json; after bench-cli
    # (its 20NG files, else ng20). The corpora are made in parallel and waited for by pid: a bare `wait` would also
    # wait for a caller's `exec > >(tee ...)` (2026-11-27: two rounds hung on it until their limit).
    compile-probe) DEVICE_probe=${DEVICE_probe:-cuda} run compile-probe "${LIMIT_compile_probe:-300}" bash -c '
      set -e; TR=/tmp/bench/data/20ng-1/train.h5; TE=/tmp/bench/data/20ng-1/test.h5; mkdir -p /tmp/sz; pids=()
      for n in 50000 200000 800000; do GPUTEXT_DAEMON=0 python3 -m gputext corpus synth --preset demo --n-docs $n -q -o /tmp/sz/i$n.h5 & pids+=($!); done
      wait "${pids[@]}"
      GPUTEXT_DAEMON=0 python3 -m gputext corpus synth --preset demo --n-docs 2000 --seed 1 --idf-from /tmp/sz/i50000.h5 -q -o /tmp/sz/q.h5
      K="knn search --device ${DEVICE_probe:-cuda} -q"
      GPUTEXT_DAEMON=0 GPUTEXT_CACHE_DIR=/tmp/probe-cache python3 -m benchmarks.compile_probe --out '"$OUT"'/probe.json -- \
        $K -k 30 --index $TR --queries $TE -o /tmp/p1.h5 ";;" $K -k 30 --index $TR --queries $TE -o /tmp/p2.h5 ";;" \
        $K -k 10 --index $TR --queries $TE -o /tmp/p3.h5 ";;" $K -k 30 --index /tmp/sz/i50000.h5 --queries /tmp/sz/q.h5 -o /tmp/p4.h5 ";;" \
        $K -k 30 --index /tmp/sz/i200000.h5 --queries /tmp/sz/q.h5 -o /tmp/p5.h5 ";;" \
        $K -k 30 --index /tmp/sz/i800000.h5 --queries /tmp/sz/q.h5 -o /tmp/p6.h5 ";;" \
        $K -k 30 --index /tmp/sz/i800000.h5 --queries /tmp/sz/i50000.h5 -o /tmp/p7.h5' ;;
    # knn search in the server's resident under cProfile (its second command), GPU and CPU -> two JSONs.
    # server-modes, compile-probe and resident-profile build 20NG first when bench-cli has not (carry .data)
    resident-profile) run resident-profile 120 bash -c '
      TR=/tmp/bench/data/20ng-1/train.h5; TE=/tmp/bench/data/20ng-1/test.h5; python3 -m gputext daemon start
      for dev in cuda cpu; do python3 -m gputext knn search --index $TR --queries $TE -k 30 --device $dev -q -o /tmp/w.h5
        python3 -m benchmarks.breakdown --server --top 30 --out '"$OUT"' --name resident_${dev}_20ng -- knn search --index $TR --queries $TE -k 30 --device $dev -q -o /tmp/w.h5; done
      python3 -m gputext daemon status; python3 -m gputext daemon stop' ;;
    # the whole pytest -m gpu, Dask's tests included, on the host's cores: WHEELS a folder with
    # pytest-xdist and dask/distributed together (405 s with 16 workers on an H100, 2026-11-27);
    # TESTS_IGNORE="tests/a.py ..." leaves files out (e.g. test_linear_svm.py, 180 s of one worker)
    tests-all) run tests-all "${LIMIT_tests_all:-560}" bash -c "cd /tmp && GPUTEXT_TEST_LOG=$OUT/tests.live python3 -m pytest -q -rfE -p no:cacheprovider -m gpu -n ${WORKERS:-16} --durations=15 $PWD/tests $(for t in ${TESTS_IGNORE:-}; do printf -- '--ignore=%s ' "$PWD/$t"; done)" ;;
    bench-readme) run bench-readme "${LIMIT_bench_readme:-590}" python3 -m benchmarks.run --suite readme --device cuda --datasets "${GPUTEXT_DATASETS:-.data}" --repeats "${REPEATS_bench:-3}" --budget "${BUDGET_bench_readme:-450}" --breakdown --resume --out /tmp/bench --records "$OUT/records.jsonl" ${ARGS_bench_readme:-} ;;
    estimators) run estimators 300 python3 scripts/bench_estimators.py --device cuda --out "$OUT" ${ARGS_estimators:-} ;;
    # issue 34 on a 4-GPU host (kind nvidia-h100-x4 or nvidia-h200-x4; WHEELS with dask and distributed).
    # The corpus chunk files stay in /tmp/dask-multi-data for later steps on the same machine (the 10^8
    # corpus's first 32 chunks of 6.25*10^5 are multi-families' 2*10^7 ones, its first 16 the 10^7 ones).
    # Dask's worker memory thresholds are off in these steps (DASK_MEMORY_OFF): the cluster has 4 workers,
    # each limited to a quarter of the host's memory, and a 2-GPU run puts half the corpus on each of two
    # (the read's copies peak above a quarter; the pause at 80% would stall the run, the kill at 95% end it).
    # multi-1e8: 10^8 documents generated once by the host's cores (~67 GB), 10,000 queries, k = 30, on 2
    # and 4 GPUs (one H100 cannot hold 10^8: 59 GB of index above its 45% share), identical to the base
    # run, efficiency, read and first call, peak memory per GPU -> $OUT/dask_multi.json (rewritten as it
    # goes), .md; the base run's lists in /tmp/dask-multi-ref.npz. GPUS_1e8=2,4,1: one GPU last (H200s).
    multi-1e8) run multi-1e8 "${LIMIT_multi_1e8:-590}" env "${DASK_MEMORY_OFF[@]}" python3 scripts/gpu_dask_multi.py --device cuda --docs 1e8 --chunk "${CHUNK_1e8:-6.25e5}" --gpus "${GPUS_1e8:-2,4}" --queries "${QUERIES_1e8:-10000}" --repeats "${REPEATS_1e8:-1}" --gen-procs "${GEN_PROCS:-0}" --data-dir /tmp/dask-multi-data --reference /tmp/dask-multi-ref.npz --out "$OUT" ;;
    # 10^8 on one GPU alone, compared with multi-1e8's base lists and time (after it, same machine: the files)
    multi-1e8-one) run multi-1e8-one "${LIMIT_multi_1e8_one:-590}" env "${DASK_MEMORY_OFF[@]}" python3 scripts/gpu_dask_multi.py --device cuda --docs 1e8 --chunk "${CHUNK_1e8:-6.25e5}" --gpus 1 --queries "${QUERIES_1e8:-10000}" --repeats "${REPEATS_1e8:-1}" --gen-procs "${GEN_PROCS:-0}" --data-dir /tmp/dask-multi-data --reference /tmp/dask-multi-ref.npz --out "$OUT/one" ;;
    # multi-families (issue 34, one call of at most 570 s with the wheel install): scripts/gpu_dask_families.py's
    # sections in order of importance, each started only while its least time is left of the budget (the step's
    # limit less 25 s), second (steady) runs only where the later sections' time is kept: first-answer (2*10^7
    # documents made by GEN_PROCS processes; dd, then 1 worker, then 4 fresh workers: read / build / first call and
    # the compilations of each), meta (10^7 x 10,000 queries), kill (a worker SIGKILLed mid-search: same answer),
    # rank (10x MSLR-WEB30K), star (10^6 documents, beta 0.12, cut to what the budget holds, down to 2.5*10^5);
    # 1 GPU (this process) against 4, bit for bit -> $OUT/dask_families.json (rewritten after each section), .md.
    # Two calls instead: SECTIONS_families=first-answer,meta,kill, then SECTIONS_families=rank,star.
    multi-families) run multi-families "${LIMIT_multi_families:-530}" env "${DASK_MEMORY_OFF[@]}" python3 scripts/gpu_dask_families.py --device cuda --gpus "${GPUS_families:-4}" --sections "${SECTIONS_families:-first-answer,meta,kill,rank,star}" --chunk "${CHUNK_1e8:-6.25e5}" --gen-procs "${GEN_PROCS:-0}" --budget "$(( ${LIMIT_multi_families:-530} - 25 ))" --data-dir /tmp/dask-multi-data --out "$OUT" ;;
    # issue 31's Dask figure on one GPU: 2x10^7 documents (GEN_PROCS processes make them), one worker's
    # read / build / first call, twice: on the empty kernel cache of a fresh host, then with a fresh
    # cluster and worker on the cache the first pass filled -> $OUT/first-answer-{empty,warm}/dask_families.json
    first-answer-1gpu) for pass in empty warm; do run "first-answer-$pass" "${LIMIT_first_answer:-200}" env "${DASK_MEMORY_OFF[@]}" python3 scripts/gpu_dask_families.py --device cuda --gpus 1 --sections first-answer --chunk "${CHUNK_1e8:-6.25e5}" --gen-procs "${GEN_PROCS:-0}" --budget 0 --data-dir /tmp/dask-multi-data --out "$OUT/first-answer-$pass"; done ;;
    # multi-rank: RankSVM on 10x the MSLR-WEB30K training shape on 1 GPU and on 4, weights bit for bit (rank alone)
    multi-rank) run multi-rank "${LIMIT_multi_rank:-400}" env "${DASK_MEMORY_OFF[@]}" python3 scripts/gpu_dask_families.py --device cuda --gpus "${GPUS_families:-4}" --sections rank --budget "$(( ${LIMIT_multi_rank:-400} - 25 ))" --data-dir /tmp/dask-multi-data --out "$OUT/rank" ;;
    knn_classify) run knn_classify 560 python3 scripts/gpu_knn_classify.py --device cuda --datasets "${GPUTEXT_DATASETS:-.data}" --out "$OUT" ${ARGS_knn_classify:-} ;;
    # extra arguments for a scripts/gpu_<step>.py step: ARGS_<step>="..." (e.g. ARGS_stream="--sections env,latency")
    *) extra="ARGS_$step"; if [ -f "scripts/gpu_$step.py" ]; then run "$step" 560 python3 "scripts/gpu_$step.py" --out "$OUT" ${!extra:-}; else echo "unknown step $step"; fi ;;
  esac
done
