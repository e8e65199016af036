#!/bin/bash
# One device call for the decode op on an H200: the sm_90a kernels (built if stale), the decode GPU tests,
# the sampled decode sweep, the decode plants and the benchmark, each under `timeout`, logs under $OUT,
# summary.txt last (at most 7 files).
#   STEPS="build tests check mutate bench" (default: all, about 6-8 minutes); BENCH_ARGS adds bench options
#   (e.g. BENCH_ARGS="--heads 64 --next-n 1,2,8" when time is short); CHECK_ARGS adds check options.
#   PLANTS (default build/plants/decode): the decode plant builds, made where the compilers are with
#   `python -m tools.support.mutate --suite cuda --set decode --builds build/plants/decode --build-only` and carried
#   here with hipindexer/kernels.
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"build tests check mutate bench"}
PY=${PY:-python3}
PLANTS=${PLANTS:-build/plants/decode}
DEVICE=${DEVICE:-cuda:0}; SUITE=${SUITE:-cuda}  # DEVICE=emu:gfx950 SUITE=emu rehearses the script without a GPU
S=$OUT/summary.txt; : > "$S"
T0=$(date +%s)
say() { echo "$*" >> "$S"; }
run() {  # name seconds command...: output in $OUT/name.log, exit status and time in the summary
  local name=$1 secs=$2 s rc; shift 2
  s=$(date +%s)
  timeout "$secs" "$@" >> "$OUT/$name.log" 2>&1; rc=$?
  say "== $name: exit $rc after $(( $(date +%s) - s )) s$([ $rc = 124 ] && echo " (timed out at $secs s)")"
}
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1)"
say "python $($PY -c 'import sys; print(sys.version.split()[0])'); nvcc: $(command -v nvcc || echo none)"
for step in $STEPS; do case $step in
build)
  if $PY build.py --check --target sm_90a > "$OUT/build.log" 2>&1; then say "== build: sm_90a kernels current"
  else run build 240 $PY build.py --target sm_90a --quiet; fi ;;
tests)
  run tests 120 $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_decode_gpu.py
  run tests 120 $PY -m pytest -q -p no:cacheprovider tests/emu/decode_cases.py
  say "$(grep -E '(passed|failed|skipped|error)' "$OUT/tests.log" | grep -E '^[0-9=]| in [0-9.]+s' | tail -4)"
  say "$(grep -E '^(FAILED|ERROR|SKIPPED)' "$OUT/tests.log" | cut -c1-240 | head -8)" ;;
check)
  run check 200 $PY -m hipindexer.cli check decode --device $DEVICE $CHECK_ARGS
  say "$(grep -E '^FAIL' "$OUT/check.log" | cut -c1-400 | head -5)"
  say "$(grep -A12 -E '^op ' "$OUT/check.log" | head -12)" ;;
mutate)  # on the plant builds made beside the checkout (no compiler needed here), else built here
  if [ -f "$PLANTS/clean/pkg/hipindexer/kernels/manifest.json" ]; then
    run mutate 200 $PY -m tools.support.mutate --suite $SUITE --set decode --builds "$PLANTS" --prebuilt
  else
    say "(no plant builds in $PLANTS: building them here)"
    run mutate 300 $PY -m tools.support.mutate --suite $SUITE --set decode
  fi
  say "$(tail -9 "$OUT/mutate.log")" ;;
bench)
  s=$(date +%s)
  timeout ${BENCH_S:-150} $PY -m hipindexer.cli bench decode --device $DEVICE --clean true --repeats 5 $BENCH_ARGS \
    --json > "$OUT/bench.json" 2> "$OUT/bench.err"; rc=$?
  say "== bench: exit $rc after $(( $(date +%s) - s )) s$([ $rc = 124 ] && echo ' (timed out)')"
  $PY -m tools.measure.results_table "$OUT/bench.json" >> "$S" 2>&1 ;;
esac; done
say "== total $(( $(date +%s) - T0 )) s"
cat "$S"
