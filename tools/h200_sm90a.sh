#!/bin/bash
# One device call for the sm_90a prefill kernels (mqa_logits_wgmma at H = 32 and 64, mqa_logits_wgmma_fold at
# H = 64), run from the repository root on an H200:
#   build     rebuild the sm_90a objects only if `build.py --check` finds them stale (needs nvcc there)
#   sass      SASS of every object and the hot loop's instruction mix (tools/sass_mix.py), beside BEFORE's
#   bench     `hipindexer bench prefill` with each kernel forced, then the same with BEFORE's objects
#   check     `hipindexer check prefill` on small shapes for each kernel
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on small cases of each kernel
#   mutate    the plant sets sm90a and sm90a_fold (tools/mutate.py --suite cuda)
# bench runs alone on the GPU; check, sanitize and the two plant sets then run side by side (correctness only).
#
#   BEFORE=dir   a kernels folder of an earlier build (its manifest.json and sm_90a/*.cubin) to compare with
#   STEPS="..."  a subset of "build sass bench check sanitize mutate" (default: all)
#   OUT=dir      where the logs go (default /tmp/hx-out): summary.txt, mix.txt, sass.tar.gz, bench.txt,
#                check.log, sanitize.log, mutate.log
#   BENCH_ARGS   extra arguments for bench (default: --clean true --repeats 10)
#   BUDGET_S     seconds the whole call may take (default 540): every step's `timeout` is cut to what is left,
#                so the summary table, printed last, always comes back.
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"build sass bench check sanitize mutate"}
BENCH_ARGS=${BENCH_ARGS:-"--clean true --repeats 10"}
K=hipindexer/kernels/sm_90a
OBJECTS="mqa_logits_wgmma.HX_HEADS-32 mqa_logits_wgmma.HX_HEADS-64 mqa_logits_wgmma_fold.HX_HEADS-64 wgmma_peak"
KERNELS="mqa_logits_wgmma:32,64 mqa_logits_wgmma_fold:64"  # kernel:heads
SMALL=1x1,1x113,17x76,61x1024,128x1024,1024x1000,64x8192,128x64,1024x1560
TMP=$(mktemp -d)
T0=$(date +%s); BUDGET_S=${BUDGET_S:-540}
declare -a ROWS

# A step's time limit: $1 seconds, or what is left of the budget less a margin for the summary.
lim() { local l=$(( T0 + BUDGET_S - 20 - $(date +%s) )); [ $l -lt 5 ] && l=5; [ $l -lt $1 ] && echo $l || echo $1; }

has() { [[ " $STEPS " == *" $1 "* ]]; }
row() { ROWS+=("$(printf '%-10s %-7s %5ss  %s' "$1" "$2" "$3" "$4")"); }
# A CUDA tool from PATH, the toolkit, or a pip wheel (nvidia-cuda-* packages keep theirs under nvidia/*/bin).
tool() {
  command -v "$1" 2>/dev/null && return
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done
  python3 - "$1" <<'EOF' 2>/dev/null
import glob, os, sys, sysconfig
for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
    for p in sorted(glob.glob(os.path.join(site, "nvidia", "*", "bin", sys.argv[1]))):
        print(p); sys.exit(0)
EOF
}

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; git log --oneline -1 2>/dev/null
  echo "BEFORE=${BEFORE:-none} STEPS=$STEPS"; } | tee "$OUT/summary.txt"

if has build; then
  t=$(date +%s)
  if timeout $(lim 60) python3 build.py --check --target sm_90a >/dev/null 2>&1; then row build ok $(( $(date +%s) - t )) "objects current"
  elif timeout $(lim 240) python3 build.py --target sm_90a --quiet > "$TMP/build.log" 2>&1; then row build ok $(( $(date +%s) - t )) "rebuilt"
  else row build FAIL $(( $(date +%s) - t )) "$(tail -1 "$TMP/build.log")"; fi
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
    timeout $(lim 60) python3 tools/sass_mix.py ${BEFORE:+--before "$TMP/sass/before"} $(for f in $OBJECTS; do echo "$TMP/sass/after/$f.sass"; done) \
      > "$OUT/mix.txt" 2>&1
    rc=$?; tar -czf "$OUT/sass.tar.gz" -C "$TMP" sass
    local_mem=$(grep -oE '[0-9]+ LDL/STL' "$OUT/mix.txt" | awk '{s += $1} END {print s + 0}')
    row sass $([ $rc = 0 ] && [ "$local_mem" = 0 ] && echo ok || echo FAIL) $(( $(date +%s) - t )) \
      "$(grep -c 'same mix' "$OUT/mix.txt") of $(grep -c 'after - before' "$OUT/mix.txt") hot loops the same mix; $local_mem LDL/STL"
  fi
fi

if has bench; then
  t=$(date +%s); : > "$OUT/bench.txt"; fail=0
  for kh in $KERNELS; do
    k=${kh%%:*}; h=${kh#*:}
    for side in after before; do
      [ $side = before ] && [ -z "$BEFORE" ] && continue
      kdir=; [ $side = before ] && kdir=$BEFORE
      HIPINDEXER_KERNELS=$kdir timeout $(lim 150) python3 -m hipindexer.cli bench prefill --device cuda:0 --heads $h --kernel $k $BENCH_ARGS --json \
        > "$TMP/bench.$k.$side.json" 2>> "$TMP/bench.err" || fail=1
    done
  done
  python3 - "$TMP" >> "$OUT/bench.txt" 2>&1 <<'EOF'
import glob, json, os, sys
def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None
rows, ratios = [], []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "bench.*.after.json"))):
    k = path.split("bench.")[1].rsplit(".after.json")[0]
    new, old = load(path), load(path.replace(".after.", ".before."))
    if new is None:
        print(f"{k}: no result (see the progress lines below)")
        continue
    oc = {(c["M"], c["N"], c["H"], c["clean"]): c for c in (old or {}).get("cases", [])}
    for c in new["cases"]:
        o = oc.get((c["M"], c["N"], c["H"], c["clean"]))
        r = c["tflops"] / o["tflops"] if o else None
        if r:
            ratios.append(r)
        rows.append(f"{k:22s} {c['M']:5d} {c['N']:6d} {c['H']:3d} {c['clean']!s:5s} {c['us']:9.1f} {c['tflops']:8.1f} "
                     f"{o['tflops'] if o else float('nan'):8.1f} {r or float('nan'):6.3f}   "
                     f"{new['matrix_peak_TFLOPs'] or 0:6.0f} {(old or {}).get('matrix_peak_TFLOPs') or float('nan'):6.0f}")
print(f"{'kernel':22s} {'M':>5s} {'N':>6s} {'H':>3s} {'clean':5s} {'us':>9s} {'TFLOP/s':>8s} {'before':>8s} {'ratio':>6s}"
      f"   {'peak':>6s} {'peak-b':>6s}   (peak: our fp8 peak loop, same run)")
print("\n".join(rows))
print(f"new/old TFLOP/s: min {min(ratios):.3f} max {max(ratios):.3f} over {len(ratios)} cases" if ratios else "no before")
EOF
  note=$(tail -1 "$OUT/bench.txt" | cut -c1-80)
  { echo "--- progress"; cat "$TMP/bench.err"; } >> "$OUT/bench.txt" 2>/dev/null
  row bench $([ $fail = 0 ] && echo ok || echo FAIL) $(( $(date +%s) - t )) "$note"
fi

# Correctness lanes, side by side.
lane_check() {
  local t=$(date +%s) fail=0 notes=""
  for kh in $KERNELS; do
    k=${kh%%:*}; h=${kh#*:}
    timeout $(lim 200) python3 -m hipindexer.cli check prefill --device cuda:0 --heads $h --dims 128 --reruns 0 --kernel $k \
      --shapes $SMALL > "$TMP/check.$k.log" 2>&1 || fail=1
    cat "$TMP/check.$k.log" >> "$OUT/check.log"
    notes="$notes ${k#mqa_logits_}: $(awk '$1 == "prefill" {print $3 "/" $2 " passed, " $4 " failed"}' "$TMP/check.$k.log" | tail -1);"
  done
  echo "check $([ $fail = 0 ] && echo ok || echo FAIL) $(( $(date +%s) - t ))$notes" > "$TMP/lane.check"
}
lane_sanitize() {
  local t=$(date +%s) fail=0 notes="" CS=$(tool compute-sanitizer)
  [ -z "$CS" ] && { echo "sanitize skip 0 no compute-sanitizer" > "$TMP/lane.sanitize"; return; }
  for tl in memcheck racecheck synccheck; do
    for kh in $KERNELS; do
      k=${kh%%:*}; h=${kh#*:}
      echo "=== $tl $k H=$h" >> "$OUT/sanitize.log"
      timeout $(lim 150) "$CS" --tool $tl --error-exitcode 9 python3 -m hipindexer.cli check prefill --device cuda:0 \
        --shapes 17x76,61x1024 --heads $h --dims 128 --reruns 0 --kernel $k > "$TMP/san.log" 2>&1
      rc=$?; tail -25 "$TMP/san.log" >> "$OUT/sanitize.log"
      s=$(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$TMP/san.log" | tail -1 | sed 's/^=* *//')
      [ $rc = 0 ] || fail=1
      notes="$notes $tl/${k#mqa_logits_}: ${s:-rc $rc};"
    done
  done
  echo "sanitize $([ $fail = 0 ] && echo ok || echo FAIL) $(( $(date +%s) - t ))$notes" > "$TMP/lane.sanitize"
}
lane_mutate() {  # $1: the plant set
  local t=$(date +%s)
  timeout $(lim 480) python3 tools/mutate.py --suite cuda --set $1 > "$TMP/mutate.$1.log" 2>&1
  rc=$?
  echo "mutate:$1 $([ $rc = 0 ] && echo ok || echo FAIL) $(( $(date +%s) - t )) $(tail -1 "$TMP/mutate.$1.log" | cut -c1-90)" \
    > "$TMP/lane.mutate.$1"
}
export OMP_NUM_THREADS=5 OPENBLAS_NUM_THREADS=5 MKL_NUM_THREADS=5  # three lanes share the host's cores
pids=()
has check && { lane_check & pids+=($!); }
has sanitize && { lane_sanitize & pids+=($!); }
has mutate && { lane_mutate sm90a & pids+=($!); lane_mutate sm90a_fold & pids+=($!); }
for p in "${pids[@]}"; do wait $p; done
has mutate && cat "$TMP/mutate.sm90a.log" "$TMP/mutate.sm90a_fold.log" > "$OUT/mutate.log" 2>/dev/null
for f in "$TMP"/lane.check "$TMP"/lane.sanitize "$TMP"/lane.mutate.sm90a "$TMP"/lane.mutate.sm90a_fold; do
  [ -f "$f" ] && { read -r name st secs note < "$f"; row "$name" "$st" "$secs" "$note"; }
done

{ echo; [ -f "$OUT/bench.txt" ] && sed '/^--- progress/,$d' "$OUT/bench.txt"; echo
  grep -E 'after - before|^\S.*loop' "$OUT/mix.txt" 2>/dev/null; echo
  printf '%-10s %-7s %6s  %s\n' step status time note; printf '%s\n' "${ROWS[@]}"
  echo "total $(( $(date +%s) - T0 )) s"; } | tee -a "$OUT/summary.txt"
rm -rf "$TMP"
