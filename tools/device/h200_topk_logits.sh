#!/bin/bash
# One device call for topk_logits on an H200, from the repository root with hipindexer/kernels carried, and the
# previous package (its hipindexer with kernels, tools and hsaco_src) under build/old when OLD=1. Each step under
# `timeout`, its log in $OUT, the summary printed last.
#   gpu      the top-k GPU tests (topk_logits, its graph replay, the prefill top-k whose finish shares its code)
#   bench    tools/measure/topk_bench.py; with OLD=1 the previous package's too, in the order new old old new
#   prefill  tools/measure/prefill_topk_bench.py at two rows, this package then the previous one (OLD=1)
#   decode   tools/measure/paged_topk_bench.py at three rows, next_n 1: the fused decode top-k against the logits op
#            followed by topk_logits (this package, then the previous one with OLD=1)
#   stages   ncu's duration of each split-path kernel at the bench's shapes (one unsorted call, the second)
# Env: STEPS (default all), OUT (default /tmp/hx-out), OLD (0), GPU (all: every GPU test), SHAPES (the bench's
# ROWSxN list, default its own), BUDGET_S (default 570).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"gpu bench prefill decode stages"}
PY=${PY:-python3}
BUDGET_S=${BUDGET_S:-570}
. "$(dirname "$0")/steps.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader >> "$S" 2>&1
OLDRUN=(bash -c 'cd build/old && PYTHONPATH=$PWD exec "$@"' old)  # a command run in the previous package
# GPU=all: every GPU test
GPU_TESTS="tests/test_topk_logits.py tests/test_topk_graph_gpu.py tests/test_prefill_topk.py"
[ "${GPU:-}" = all ] && GPU_TESTS=tests
has gpu && run gpu 200 "$OUT/gpu.log" $PY -m pytest -q -x -p no:cacheprovider -m gpu $GPU_TESTS
BENCH_ARGS=${SHAPES:+--shapes $SHAPES}
if has bench; then
  run bench_new1 100 "$OUT/bench_new1.log" $PY -m tools.measure.topk_bench $BENCH_ARGS
  if [ "${OLD:-0}" = 1 ]; then
    run bench_old1 100 "$OUT/bench_old1.log" "${OLDRUN[@]}" $PY -m tools.measure.topk_bench $BENCH_ARGS
    run bench_old2 100 "$OUT/bench_old2.log" "${OLDRUN[@]}" $PY -m tools.measure.topk_bench $BENCH_ARGS
    run bench_new2 100 "$OUT/bench_new2.log" $PY -m tools.measure.topk_bench $BENCH_ARGS
  fi
fi
if has prefill; then
  run prefill_new 100 "$OUT/prefill_new.log" $PY -m tools.measure.prefill_topk_bench --shapes 4096x32768,1024x131072
  [ "${OLD:-0}" = 1 ] && run prefill_old 100 "$OUT/prefill_old.log" "${OLDRUN[@]}" $PY -m tools.measure.prefill_topk_bench \
    --shapes 4096x32768,1024x131072
fi
if has decode; then
  run decode_new 100 "$OUT/decode_new.log" $PY -m tools.measure.paged_topk_bench --rows 64x131072,16x131072,16x32768 \
    --next-n 1
  [ "${OLD:-0}" = 1 ] && run decode_old 100 "$OUT/decode_old.log" "${OLDRUN[@]}" $PY -m tools.measure.paged_topk_bench \
    --rows 64x131072,16x131072,16x32768 --next-n 1
fi
if has stages; then
  for shape in 64x131072 128x32768 512x131072; do
    run "stages_$shape" 60 "$OUT/stages.log" /usr/local/cuda/bin/ncu --clock-control none -k regex:topk_split \
      --launch-skip 3 --launch-count 3 --section SpeedOfLight $PY -m tools.measure.profile_op topk --shape $shape
  done
  grep -E "hx_topk_split|Duration" "$OUT/stages.log" >> "$S"
fi
cat "$S"
