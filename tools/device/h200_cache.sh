#!/bin/bash
# One device call for the paged-cache ops on an H200, run from the repository root with the built kernels
# carried (hipindexer/kernels): each step under `timeout`, logs under $OUT (at most 7 files), the summary
# printed last.
#   STEPS (default "build tests check bench sanitize", about 4 minutes):
#     build     the carried sm_90a objects checked against the sources (rebuilt only where nvcc exists)
#     tests     tests/test_cache_gpu.py (a captured graph replayed with new device values, pools past 4 GiB)
#               and tests/emu/cache_cases.py on the GPU (bit for bit, errors, flags, the end-to-end path)
#     check     hipindexer check cache (the full sweep, bit for bit against numpy)
#     bench     hipindexer bench cache --json, and its table
#     sanitize  compute-sanitizer memcheck, then racecheck, on the quick sweep (cut to the time left)
#   BUDGET_S (default 235): every step's timeout is cut to what is left, so the summary always prints.
#   DEVICE=emu:gfx950 rehearses the script without a GPU.
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"build tests check bench sanitize"}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda:0}
S=$OUT/summary.txt; : > "$S"
T0=$(date +%s); BUDGET_S=${BUDGET_S:-235}
say() { echo "$*" >> "$S"; }
lim() { local l=$(( T0 + BUDGET_S - 10 - $(date +%s) )); [ $l -lt 5 ] && l=5; [ $l -lt $1 ] && echo $l || echo $1; }
run() {  # name seconds command...: output appended to $OUT/name.log, exit status and time in the summary
  local name=$1 secs s rc; secs=$(lim $2); shift 2
  s=$(date +%s)
  timeout "$secs" "$@" >> "$OUT/$name.log" 2>&1; rc=$?
  say "== $name: exit $rc after $(( $(date +%s) - s )) s$([ $rc = 124 ] && echo " (timed out at $secs s)")"
}
tool() {
  command -v "$1" 2>/dev/null && return
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done
}
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
say "python $($PY -c 'import sys; print(sys.version.split()[0])'); nvcc: $(command -v nvcc || echo none); DEVICE=$DEVICE"
for step in $STEPS; do case $step in
build)
  if $PY build.py --check --target sm_90a > "$OUT/build.log" 2>&1; then say "== build: sm_90a kernels current"
  elif [ -n "$(command -v nvcc)" ]; then run build 120 $PY build.py --target sm_90a --quiet
  else say "== build: STALE sm_90a kernels and no nvcc here ($(tail -1 "$OUT/build.log"))"; fi ;;
tests)
  [ "$DEVICE" = emu:gfx950 ] && EMU="-p emu_session" && export PYTHONPATH=.:tests/emu
  run tests 100 $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_cache_gpu.py
  run tests 100 $PY -m pytest -q -p no:cacheprovider $EMU tests/emu/cache_cases.py
  export PYTHONPATH=.
  say "$(grep -E ' (passed|failed|skipped|error)' "$OUT/tests.log" | grep -E ' in [0-9.]+s' | tail -2)"
  say "$(grep -E '^(FAILED|ERROR|SKIPPED)' "$OUT/tests.log" | cut -c1-240 | head -8)" ;;
check)
  run check 100 $PY -m hipindexer.cli check cache --device $DEVICE
  say "$(grep -E '^FAIL' "$OUT/check.log" | cut -c1-400 | head -5)"
  say "$(grep -A6 -E '^op ' "$OUT/check.log" | head -7)"
  say "$(grep -E '^not applicable' "$OUT/check.log" | head -2)" ;;
bench)
  s=$(date +%s); secs=$(lim 90)
  timeout $secs $PY -m hipindexer.cli bench cache --device $DEVICE --json > "$OUT/bench.json" 2> "$OUT/bench.err"; rc=$?
  say "== bench: exit $rc after $(( $(date +%s) - s )) s$([ $rc = 124 ] && echo " (timed out at $secs s)")"
  $PY - "$OUT/bench.json" >> "$S" 2>&1 <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
print(f"copy ceiling {doc['copy_GBps']:.0f} GB/s (read + write); driver {doc.get('driver')}"
      + ("; EMULATED: not speeds" if doc.get("emulated") else ""))
print(f"{'op':12s} {'layout':11s} {'scale':8s} {'tokens':>7s} {'us':>8s} {'graph us':>8s} {'GB/s':>6s} {'of copy':>7s} {'host us':>7s}")
for r in doc["cases"]:
    scale = {True: "pow2", False: "amax/448"}.get(r["power_of_two"], "-")
    graph = f"{r['us_graph']:8.2f}" if r["us_graph"] else f"{'-':>8s}"
    print(f"{r['op']:12s} {'preshuf' if r['preshuffle'] else 'flat':11s} {scale:8s} {r['tokens']:7d} {r['us']:8.2f} "
          f"{graph} {r['GBps']:6.0f} {100 * r['of_copy']:6.1f}% {r['host_us']:7.1f}")
EOF
  ;;
sanitize)
  CS=$(tool compute-sanitizer)
  if [ -z "$CS" ] || [ "$DEVICE" = emu:gfx950 ]; then say "== sanitize: skipped (no compute-sanitizer, or no GPU)"; else
    for t in memcheck racecheck; do
      run sanitize 120 "$CS" --tool $t --error-exitcode 9 $PY -m hipindexer.cli check cache --device $DEVICE --quick
      say "   $t: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize.log" | tail -1)"
    done
  fi ;;
esac; done
say "== total $(( $(date +%s) - T0 )) s"
cat "$S"
