#!/bin/bash
# One device call for the sm_90a wgmma prefill kernel: SASS check, correctness, benchmark.
#   STEPS="sass check bench full mutate" (default: sass check bench full); logs under $OUT.
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"sass check bench full"}
K=hipindexer/kernels/sm_90a
KARG="--kernel mqa_logits_wgmma"  # the plain wgmma kernel at both H (the planner picks the fold at H = 64)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for s in $STEPS; do case $s in
sass)
  for f in $K/mqa_logits_wgmma.HX_HEADS-32.cubin $K/mqa_logits_wgmma.HX_HEADS-64.cubin \
           $K/mqa_logits_wgmma_fold.HX_HEADS-64.cubin $K/wgmma_peak.cubin; do
    cuobjdump -sass $f > $OUT/$(basename $f .cubin).sass
    echo "SASS $(basename $f): QGMMA $(grep -c QGMMA $OUT/$(basename $f .cubin).sass)" \
         "LDL/STL $(grep -cE '\bLDL|\bSTL' $OUT/$(basename $f .cubin).sass)" \
         "$(grep -m1 -oE 'QGMMA[^;]*' $OUT/$(basename $f .cubin).sass)"
  done ;;
check)
  timeout ${CHECK_S:-150} python3 -m hipindexer.cli check prefill --device cuda:0 --heads 32,64 --dims 128 --reruns 0 $KARG \
    --shapes 1x1,1x113,17x76,61x1024,128x1024,1024x1000,64x8192,128x64,1024x1560 2>&1 | tee $OUT/check_small.log | grep -vE '^\[' | tail -8
  timeout 60 python3 -m hipindexer.cli check prefill --device cuda:0 --quick --heads 16 --dims 64 2>&1 | tail -3 ;;
bench)
  timeout ${BENCH_S:-200} python3 -m hipindexer.cli bench prefill --device cuda:0 --clean ${CLEAN:-true} $KARG ${BENCH_ARGS} \
    2>$OUT/bench.err | tee $OUT/bench.txt ;;
full)
  timeout ${FULL_S:-240} python3 -m hipindexer.cli check prefill --device cuda:0 --heads 32,64 --dims 128 --reruns 20 $KARG \
    2>&1 | tee $OUT/check_full.log | grep -vE '^\[' | tail -8 ;;
mutate)
  timeout ${MUT_S:-400} python3 tools/mutate.py --suite cuda --set sm90a 2>&1 | tee $OUT/mutate.log | tail -8
  timeout ${MUT_S:-400} python3 tools/mutate.py --suite cuda --set sm90a_fold 2>&1 | tee $OUT/mutate_fold.log | tail -5 ;;
esac; done
