#!/bin/bash
# One device call for the prefill op on an H200, run from the repository root (code objects carried, built
# here). Steps (STEPS, default all), bench alone on the GPU first, then the correctness lanes side by side:
#   gputests  pytest -m gpu (the runtime and op tests that need a real GPU)
#   sass      SASS of the sm_90a objects and their hot loops' instruction mix (tools/support/sass_mix.py), beside BEFORE's
#   bench     hipindexer bench prefill: the default kernels (host us per call too), each wgmma kernel forced on
#             this build and on BEFORE's, and accumulation=fp32 on two shapes; the fp8 peak loop in each run
#   sweep     hipindexer check prefill, the full sweep with the defaults, one lane per head count
#   fp32      the full sweep at H = 32, 64, D = 128 with accumulation=fp32
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck on small cases of every sm_90a prefill kernel
#   mutate    the plant sets generic, sm90a, sm90a_fold on builds made here (PLANTS=dir from
#             `python -m tools.support.mutate --suite cuda --set S --builds dir/S --build-only`)
# Env: BEFORE=dir (an earlier kernels/ folder), PLANTS=dir, OUT=dir (logs; at most 8 files come back),
# BUDGET_S (default 560): every step's timeout is cut to what is left, so the summary always prints last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"gputests sass bench sweep fp32 sanitize mutate"}
K=hipindexer/kernels/sm_90a
OBJECTS="mqa_logits_wgmma.HX_HEADS-32 mqa_logits_wgmma.HX_HEADS-64 mqa_logits_wgmma_fold.HX_HEADS-64 wgmma_peak"
KERNELS="mqa_logits_wgmma:32,64 mqa_logits_wgmma_fold:64"  # kernel:heads
TMP=$(mktemp -d)
T0=$(date +%s); BUDGET_S=${BUDGET_S:-560}
declare -a ROWS
lim() { local l=$(( T0 + BUDGET_S - 25 - $(date +%s) )); [ $l -lt 5 ] && l=5; [ $l -lt $1 ] && echo $l || echo $1; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
row() { ROWS+=("$(printf '%-14s %-5s %5ss  %s' "$1" "$2" "$3" "$4")"); }
tool() {
  command -v "$1" 2>/dev/null && return
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done
}
# A copy of the package whose kernels/ is another build: python started in its root finds that build.
pkg_with() {
  mkdir -p "$2"; cp -r hipindexer "$2/"; rm -rf "$2/hipindexer/kernels"; cp -r "$1" "$2/hipindexer/kernels"
}
summary_of() { awk '$1 == "prefill" {print $3 "/" $2 " passed, " $4 " failed"}' "$1" | tail -1; }

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  echo "BEFORE=${BEFORE:-none} PLANTS=${PLANTS:-none} STEPS=$STEPS"; } | tee "$OUT/summary.txt"

if has gputests; then
  t=$(date +%s)
  timeout $(lim 120) python3 -m pytest -q -m gpu -p no:cacheprovider > "$TMP/gputests.log" 2>&1; rc=$?
  cp "$TMP/gputests.log" "$OUT/gputests.log"
  row gputests $([ $rc = 0 ] && echo ok || echo FAIL) $(( $(date +%s) - t )) "$(tail -1 "$TMP/gputests.log")"
fi

if has sass; then
  t=$(date +%s); CUOBJDUMP=$(tool cuobjdump)
  if [ -z "$CUOBJDUMP" ]; then row sass skip 0 "no cuobjdump"; else
    mkdir -p "$TMP/sass/after" "$TMP/sass/before"
    for f in $OBJECTS; do
      "$CUOBJDUMP" -sass "$K/$f.cubin" > "$TMP/sass/after/$f.sass" 2>/dev/null
      [ -n "$BEFORE" ] && [ -f "$BEFORE/sm_90a/$f.cubin" ] &&
        "$CUOBJDUMP" -sass "$BEFORE/sm_90a/$f.cubin" > "$TMP/sass/before/$f.sass" 2>/dev/null
    done
    timeout $(lim 60) python3 -m tools.support.sass_mix ${BEFORE:+--before "$TMP/sass/before"} \
      $(for f in $OBJECTS; do echo "$TMP/sass/after/$f.sass"; done) > "$TMP/mix.txt" 2>&1; rc=$?
    local_mem=$(grep -oE '[0-9]+ LDL/STL' "$TMP/mix.txt" | awk '{s += $1} END {print s + 0}')
    row sass $([ $rc = 0 ] && [ "$local_mem" = 0 ] && echo ok || echo FAIL) $(( $(date +%s) - t )) \
      "$(grep -c 'same mix' "$TMP/mix.txt") of $(grep -c 'after - before' "$TMP/mix.txt") hot loops the same mix; $local_mem LDL/STL"
  fi
fi

if has bench; then
  t=$(date +%s); fail=0
  timeout $(lim 200) python3 -m hipindexer.cli bench prefill --device cuda:0 --clean both --json \
    > "$OUT/bench_default.json" 2>> "$TMP/bench.err" || fail=1
  for kh in $KERNELS; do
    k=${kh%%:*}; h=${kh#*:}
    timeout $(lim 90) python3 -m hipindexer.cli bench prefill --device cuda:0 --heads $h --kernel $k --clean true \
      --json > "$TMP/bench.$k.after.json" 2>> "$TMP/bench.err" || fail=1
    if [ -n "$BEFORE" ]; then
      [ -d "$TMP/before" ] || pkg_with "$BEFORE" "$TMP/before"
      (cd "$TMP/before" && PYTHONPATH=$TMP/before timeout $(lim 90) python3 -m hipindexer.cli bench prefill \
        --device cuda:0 --heads $h --kernel $k --clean true --json) > "$TMP/bench.$k.before.json" 2>> "$TMP/bench.err" || fail=1
    fi
  done
  timeout $(lim 90) python3 -m hipindexer.cli bench prefill --device cuda:0 --accumulation fp32 --clean true \
    --shapes 128x32768,4096x32768 --repeats 3 --json > "$TMP/bench.fp32.json" 2>> "$TMP/bench.err" || fail=1
  python3 - "$TMP" > "$TMP/bench.txt" 2>&1 <<'EOF'
import glob, json, os, sys
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
d = sys.argv[1]
rows, ratios = [], []
for path in sorted(glob.glob(os.path.join(d, "bench.*.after.json"))):
    k = path.split("bench.")[1].rsplit(".after.json")[0]
    new, old = load(path), load(path.replace(".after.", ".before."))
    if new is None:
        print(f"{k}: no result"); continue
    oc = {(c["M"], c["N"], c["H"], c["clean"]): c for c in (old or {}).get("cases", [])}
    for c in new["cases"]:
        o = oc.get((c["M"], c["N"], c["H"], c["clean"]))
        r = c["tflops"] / o["tflops"] if o else None
        if r: ratios.append(r)
        rows.append(f"{k:22s} {c['M']:5d} {c['N']:6d} {c['H']:3d} {c['us']:9.1f} {c['tflops']:8.1f} "
                    f"{o['tflops'] if o else float('nan'):8.1f} {r or float('nan'):6.3f} {new['matrix_peak_TFLOPs'] or 0:6.0f} "
                    f"{(old or {}).get('matrix_peak_TFLOPs') or float('nan'):6.0f}")
print(f"{'kernel forced':22s} {'M':>5s} {'N':>6s} {'H':>3s} {'us':>9s} {'TFLOP/s':>8s} {'before':>8s} {'ratio':>6s} {'peak':>6s} {'peak-b':>6s}")
print("\n".join(rows))
print(f"after/before TFLOP/s: min {min(ratios):.3f} max {max(ratios):.3f} over {len(ratios)} cases" if ratios else "no before")
for name in ("bench_default", "bench.fp32"):
    doc = load(os.path.join(d, name + ".json")) or load(os.path.join(os.environ.get("OUT", ""), name + ".json"))
    if not doc:
        print(f"{name}: no result"); continue
    print(f"\n{name}: copy {doc['copy_GBps']:.0f} GB/s, peak loop {doc['matrix_peak_TFLOPs'] or 0:.0f} TFLOP/s, driver {doc.get('driver')}")
    for c in doc["cases"]:
        print(f"  {c['M']:5d} {c['N']:6d} H={c['H']:2d} clean={c['clean']!s:5s} {c['kernel']:22s} {c['us']:9.1f} us "
              f"{c['tflops']:7.1f} TFLOP/s {100 * (c['of_matrix_peak'] or 0):5.1f}% host {c['host_us']:5.1f} us")
EOF
  cp "$TMP/bench.fp32.json" "$OUT/bench_fp32.json" 2>/dev/null
  { cat "$TMP/bench.txt"; echo "--- progress"; cat "$TMP/bench.err"; } > "$OUT/bench.txt"
  row bench $([ $fail = 0 ] && echo ok || echo FAIL) $(( $(date +%s) - t )) "$(grep -m1 'after/before' "$TMP/bench.txt")"
fi

# Correctness lanes, side by side (the GPU work is small; the float64 reference is the cost).
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2
lane() {  # name, command...: runs under the budget, leaves "name status secs note" in $TMP/lane.name
  local name=$1; shift; local t=$(date +%s)
  timeout $(lim 520) "$@" > "$TMP/$name.log" 2>&1; local rc=$?
  local note=$(summary_of "$TMP/$name.log"); [ -z "$note" ] && note=$(tail -1 "$TMP/$name.log" | cut -c1-100)
  echo "$name $([ $rc = 0 ] && echo ok || echo FAIL) $(( $(date +%s) - t )) rc $rc; $note" > "$TMP/lane.$name"
}
sanitize() {
  local CS=$(tool compute-sanitizer)
  [ -z "$CS" ] && { echo "no compute-sanitizer"; return 1; }
  local fail=0
  for tl in memcheck racecheck synccheck; do
    for kh in $KERNELS mqa_logits_generic:16; do
      k=${kh%%:*}
      for h in $(echo ${kh#*:} | tr , ' '); do
        echo "=== $tl $k H=$h"
        "$CS" --tool $tl --error-exitcode 9 python3 -m hipindexer.cli check prefill --device cuda:0 \
          --shapes 17x76,61x1024 --heads $h --dims 128 --reruns 0 --kernel $k > "$TMP/san.log" 2>&1 || fail=1
        grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|^prefill ' "$TMP/san.log" | tail -2
      done
    done
  done
  return $fail
}
pids=()
CHECK="python3 -m hipindexer.cli check prefill --device cuda:0"
if has sweep; then
  for h in 64 32 16; do lane sweep_h$h $CHECK --heads $h --reruns $([ $h = 64 ] && echo 20 || echo 0) & pids+=($!); done
fi
has fp32 && { lane fp32 $CHECK --heads 32,64 --dims 128 --accumulation fp32 --reruns 0 & pids+=($!); }
export -f sanitize tool; export TMP KERNELS
has sanitize && { lane sanitize bash -c sanitize & pids+=($!); }
if has mutate && [ -n "$PLANTS" ]; then
  for s in generic sm90a sm90a_fold; do
    lane mutate_$s python3 -m tools.support.mutate --suite cuda --set $s --builds "$PLANTS/$s" --prebuilt & pids+=($!)
  done
fi
for p in "${pids[@]}"; do wait $p; done
for f in "$TMP"/lane.*; do [ -f "$f" ] && { read -r name st secs note < "$f"; row "$name" "$st" "$secs" "$note"; }; done
# The sweeps' tables (per-kernel error figures), the plants' verdicts, the sanitizer summaries.
{ for h in 64 32 16; do echo "== sweep H=$h"; grep -vE '^\[|^FAIL' "$TMP/sweep_h$h.log" 2>/dev/null | head -12
    grep -E '^FAIL' "$TMP/sweep_h$h.log" 2>/dev/null | head -5; done
  echo "== fp32"; grep -vE '^\[' "$TMP/fp32.log" 2>/dev/null | head -12
  for s in generic sm90a sm90a_fold; do echo "== mutate $s"; grep -vE ': (CAUGHT|missed) \(' "$TMP/mutate_$s.log" 2>/dev/null | tail -14; done
  echo "== sanitize"; cat "$TMP/sanitize.log" 2>/dev/null; } > "$OUT/correctness.txt"
cat "$TMP"/sweep_h*.log "$TMP/fp32.log" 2>/dev/null | gzip > "$OUT/sweeps.log.gz"

{ echo; grep -E 'after - before|^\S.*loop' "$TMP/mix.txt" 2>/dev/null | head -12; echo
  printf '%-14s %-5s %6s  %s\n' step status time note; printf '%s\n' "${ROWS[@]}"
  echo "total $(( $(date +%s) - T0 )) s"; } | tee -a "$OUT/summary.txt"
rm -rf "$TMP"
