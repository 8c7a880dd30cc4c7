#!/usr/bin/env bash
# Issue 4's measurement round on the device host (one call, .whl and .data carried): the grouped
# engine's GPU tests, gpu_meta.py on 20NG twice (two separate processes: two runs of the same
# code), and table_metafeatures.py's Tables 4/6 efficiency rows (GPU engine, CPU twin, dense GPU
# brute force; device peak) for CNAE-9, R8, R52 and 20NG. Logs and JSON into $OUT.
set -u
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export OUT
ARGS_meta="--skip synthetic" timeout 150 bash scripts/gpu_round.sh meta | tail -n 45
mv "$OUT/gpu_meta.json" "$OUT/gpu_meta_run1.json"; mv "$OUT/meta.log" "$OUT/meta_run1.log"
export PYTHONPATH=/tmp/site:$PWD:$PWD/tests
(cd /tmp && timeout 120 python3 -m pytest -x -q -p no:cacheprovider -m gpu "$OLDPWD/tests/test_engine_gpu.py" -k grouped) > "$OUT/tests.log" 2>&1
tail -n 5 "$OUT/tests.log"
ARGS_meta="--skip synthetic" timeout 120 bash scripts/gpu_round.sh meta | tail -n 45
mv "$OUT/gpu_meta.json" "$OUT/gpu_meta_run2.json"; mv "$OUT/meta.log" "$OUT/meta_run2.log"
timeout "$(( ${TABLE_END:-570} - SECONDS ))" python3 scripts/table_metafeatures.py --datasets .data --out /tmp/tm --only cnae9,r8,r52,20ng \
  --skip-effectiveness > "$OUT/table_metafeatures.log" 2>&1
echo "table rc=$?"
cp /tmp/tm/table_metafeatures.md /tmp/tm/table_metafeatures.json "$OUT/" 2>/dev/null
tail -n 30 "$OUT/table_metafeatures.log"
