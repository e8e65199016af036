#!/bin/bash
# One device call for the sm_90a decode kernel ($KERNEL: paged_mqa_logits_wgmma_tma, the default) on an H200,
# from the repository root with hipindexer/kernels and the plant builds carried. Each step under `timeout`, logs in
# $OUT (8 files at most), the summary printed last. Correctness first: the benchmark runs only when every
# correctness step passed.
#   build     the carried sm_90a objects current (built here if not)
#   probe     eight small cases, each in its own process under a short timeout, so that a deadlock or a crash
#             names the path it took (head count, block size, layout, passes, units) before anything longer runs;
#             a probe that times out skips every later GPU step
#   sass      QGMMA count and local memory (LDL/STL) of both objects with this machine's cuobjdump, the hot loop's
#             mix (tools/support/sass_mix.py), and the CPU tests of tests/test_sm90a_decode.py against these objects
#   tests     the decode GPU tests (graph replay and bad block tables with the new kernel in the plan, caches past
#             4 GiB, untrusted values on the generic kernel and this one)
#   check     hipindexer check decode --kernel $KERNEL: the sampled design within its shapes (H 32/64,
#             D 128, block_size 16/64, both layouts), layouts bitwise equal, untrusted values, reruns, 4 GiB offsets
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on one small case per head count
#   stress    60 back-to-back calls at (64, 131072), next_n 1, H 32 and 64, block 64 (a race between the ring's
#             producers and consumers shows there first, as a launch failure), then one gated small call
#   mutate    the kernel's plant set ($SET: sm90a_decode_tma) on the carried builds ($PLANTS), in two
#             lanes beside the sanitizer
#   bench     bench decode: H 64 and 32, next_n 1, 2, 4, 8, block 64 at (64, 131072) and (16, 32768), one block-16
#             row, and the generic kernel on one row, against the read ceiling of the same run
#   profile   ncu at (64, 131072), H 64: DRAM bytes read and written per call at next_n 1, 2, 4 and 8 (K read once:
#             equal to the key + scale bytes), and the full section set at next_n 1 with its per-instruction
#             stall samples (profile_src.csv.gz)
#   stages    the stage-removal builds of tools/measure/stage_variants.py ($VARIANTS, made with --build-only) timed
#             beside the shipped build on the same rows
# The benchmark runs only when build, probe, sass, tests and check passed; the sanitizer and the plants are reported
# beside it; profile and stages run only when named. Env: KERNEL, STEPS (default all but those two), OUT (default
# /tmp/hx-out), PLANTS (default build/plants/$SET, made with `python -m tools.support.mutate --suite cuda --set $SET --builds
# build/plants/$SET --build-only`; CARRY, a pack of them made by `python -m tools.support.plant_carry pack`, is
# unpacked into PLANTS first), VARIANTS (default build/variants/$SET, made with `python -m tools.measure.stage_variants
# --set $SET --builds build/variants/$SET --build-only`), CHECK_ARGS / BENCH_ARGS (extra options), BUDGET_S
# (default 470: every timeout is cut to what is left of it).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"build probe sass tests check stress sanitize mutate bench"}  # profile and stages: on request
KERNEL=${KERNEL:-paged_mqa_logits_wgmma_tma}
SET=${SET:-sm90a_decode_tma}
PLANTS=${PLANTS:-build/plants/$SET}
VARIANTS=${VARIANTS:-build/variants/$SET}
PY=${PY:-python3}
K=hipindexer/kernels/sm_90a
export KERNEL
T0=$(date +%s); BUDGET_S=${BUDGET_S:-470}
S=$OUT/summary.txt; : > "$S"
FAILED=0   # a functional step failed: no benchmark
HUNG=0     # a probe timed out: no later GPU step
has() { [[ " $STEPS " == *" $1 "* ]]; }
lim() { local l=$(( T0 + BUDGET_S - 15 - $(date +%s) )); [ $l -lt 5 ] && l=5; [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" >> "$S"; }
run() {  # name seconds log command...: exit status and time in the summary; a failure marks the run failed
  local name=$1 secs=$(lim $2) log=$3 s rc; shift 3
  s=$(date +%s)
  timeout "$secs" "$@" >> "$log" 2>&1; rc=$?
  say "== $name: exit $rc after $(( $(date +%s) - s )) s$([ $rc = 124 ] && echo " (timed out at $secs s)")"
  [ $rc = 0 ] || FAILED=1
  return $rc
}
tool() {
  command -v "$1" 2>/dev/null && return
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done
}
say "$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
say "steps: $STEPS; plants: $PLANTS"

if has build; then
  if $PY build.py --check --target sm_90a > "$OUT/tests.log" 2>&1; then say "== build: sm_90a objects current"
  else run build 240 "$OUT/tests.log" $PY build.py --target sm_90a --quiet; fi
fi

if has probe; then
  for cfg in "64 64 0 1 0 0 3" "64 64 0 1 1 0 3" "32 16 0 2 0 1 3" "64 16 1 5 1 1 3" "32 64 1 8 0 1 3" \
             "64 64 0 8 0 2 3" "32 16 0 3 0 0 1" "64 64 0 2 0 1 64"; do
    s=$(date +%s)
    timeout $(lim 25) $PY - $cfg >> "$OUT/tests.log" 2>&1 <<'EOF'
import os
import sys
import numpy as np
from hipindexer import fp8_paged_mqa_logits, testing
from hipindexer.cache import shuffle_cache
from hipindexer.gate import gate_decode
from hipindexer.runtime import DeviceArray
H, bs, shuf, next_n, split, mode, B = (int(x) for x in sys.argv[1:8])
ctx = 1 if B == 1 else (2000 if B == 64 else 700)
case = testing.DecodeCase(B, next_n, H, 128, bs, False, mean_context=ctx, ragged=mode > 0, zero_contexts=B // 3,
                          live_min=1 if mode == 1 else 0)
inp = testing.decode_inputs(np.random.default_rng(1), case)
if shuf:
    inp = testing.DecodeInputs(inp.q, shuffle_cache(inp.kv_cache, 128), *inp.args()[2:7], True)
clean = mode != 2
errors = DeviceArray.from_numpy(np.zeros(1, np.int32), "cuda:0")
out = DeviceArray.empty((B * next_n, inp.max_model_len), np.float32, "cuda:0").fill(np.nan)
fp8_paged_mqa_logits(*inp.args(), split_kv=split or None, clean_logits=clean, errors=errors, out=out,
                     kernel=os.environ["KERNEL"], device="cuda:0")
g = gate_decode(out.numpy(), inp, clean, "fp8_tc")
flags = int(errors.numpy()[0])
print(f"probe H={H} bs={bs} shuf={shuf} next_n={next_n} split={split} mode={mode} B={B}: "
      f"{'ok' if g and not flags else 'WRONG'} flags={flags} {g.message}")
sys.exit(0 if g and not flags else 1)
EOF
    rc=$?
    say "probe $cfg: $([ $rc = 0 ] && echo ok || { [ $rc = 124 ] && echo HUNG || echo "FAILED (exit $rc)"; }) in $(( $(date +%s) - s )) s"
    [ $rc = 0 ] || FAILED=1
    [ $rc = 124 ] && HUNG=1
  done
  grep -E '^probe .*WRONG' "$OUT/tests.log" | cut -c1-300 | head -4 >> "$S"
  [ $HUNG = 1 ] && say "== a probe hung: every later GPU step skipped"
fi

if has sass; then
  CUOBJDUMP=$(tool cuobjdump)
  if [ -z "$CUOBJDUMP" ]; then say "== sass: no cuobjdump here"; FAILED=1; else
    for h in 32 64; do
      f=$K/$KERNEL.HX_HEADS-$h.cubin
      "$CUOBJDUMP" -sass "$f" > "$OUT/sass_h$h.sass" 2>&1
      say "sass H=$h: $(grep -c QGMMA "$OUT/sass_h$h.sass") QGMMA ($(grep -oE 'QGMMA\.[0-9x]+' "$OUT/sass_h$h.sass" | sort -u | tr '\n' ' ')), $(grep -cE '\b(LDL|STL)' "$OUT/sass_h$h.sass") LDL/STL"
    done
    timeout $(lim 30) $PY -m tools.support.sass_mix "$OUT/sass_h32.sass" "$OUT/sass_h64.sass" > "$OUT/sass.txt" 2>&1
    rm -f "$OUT"/sass_h*.sass
    grep -E 'loop|max R' "$OUT/sass.txt" | head -4 >> "$S"
    CUOBJDUMP=$CUOBJDUMP run cputests 60 "$OUT/sass.txt" $PY -m pytest -q -p no:cacheprovider tests/test_sm90a_decode.py
    say "$(tail -1 "$OUT/sass.txt")"
  fi
fi

if has tests && [ $HUNG = 0 ]; then
  run tests 150 "$OUT/tests.log" $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_decode_gpu.py
  say "$(grep -E ' (passed|failed|error)' "$OUT/tests.log" | tail -1)"
  say "$(grep -E '^(FAILED|ERROR)' "$OUT/tests.log" | cut -c1-300 | head -6)"
fi

if has check && [ $HUNG = 0 ]; then
  run check 200 "$OUT/check.log" $PY -m hipindexer.cli check decode --device cuda:0 --kernel $KERNEL \
    --max-context 32768 --cases 16 --reruns 5 $CHECK_ARGS
  say "$(grep -E '^FAIL' "$OUT/check.log" | cut -c1-400 | head -6)"
  say "$(grep -A6 -E '^op ' "$OUT/check.log" | head -8)"
fi

if has stress && [ $HUNG = 0 ]; then
  for h in 32 64; do
    s=$(date +%s)
    timeout $(lim 60) $PY - $h >> "$OUT/tests.log" 2>&1 <<'EOF'
import os
import sys
import numpy as np
from hipindexer import fp8_paged_mqa_logits, testing
from hipindexer.gate import gate_decode
from hipindexer.runtime import Device, DeviceArray
H = int(sys.argv[1])
dev = Device("cuda:0")
case = testing.DecodeCase(64, 1, H, 128, 64, False, mean_context=131072, spread="equal", key_codes=True)
inp = testing.decode_inputs(np.random.default_rng(0), case)
args = [DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a for a in inp.args()]
out = DeviceArray.empty((64, inp.max_model_len), np.float32, dev)
for _ in range(60):
    fp8_paged_mqa_logits(*args, out=out, kernel=os.environ["KERNEL"], device=dev)
dev.synchronize()
small = testing.decode_inputs(np.random.default_rng(1), testing.DecodeCase(4, 1, H, 128, 64, False, mean_context=4096))
o = fp8_paged_mqa_logits(*small.args(), kernel=os.environ["KERNEL"], device=dev)
g = gate_decode(o.numpy(), small, True, "fp8_tc")
print(f"stress H={H}: 60 calls at (64, 131072) ok; then {g.message}")
sys.exit(0 if g else 1)
EOF
    rc=$?
    say "stress H=$h: $([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)") in $(( $(date +%s) - s )) s"
    [ $rc = 0 ] || FAILED=1
  done
fi

# compute-sanitizer on one small case per head count: ragged rows, a padding sequence, both block sizes and
# layouts, one unit per sequence and the default grid.
sanitize() {
  local CS=$(tool compute-sanitizer) fail=0
  [ -z "$CS" ] && { echo "no compute-sanitizer"; return 1; }
  for tl in memcheck racecheck synccheck; do
    for hb in "32 64 1" "64 16 0"; do
      set -- $hb
      echo "=== $tl H=$1 block_size=$2 preshuffle=$3"
      "$CS" --tool $tl --error-exitcode 9 $PY - $1 $2 $3 > "$OUT/san.tmp" 2>&1 <<'EOF' || fail=1
import os
import sys
import numpy as np
from hipindexer import fp8_paged_mqa_logits, testing
from hipindexer.gate import gate_decode
H, bs, shuf = (int(x) for x in sys.argv[1:4])
case = testing.DecodeCase(3, 3, H, 128, bs, bool(shuf), mean_context=300, ragged=True, zero_contexts=1)
inp = testing.decode_inputs(np.random.default_rng(0), case)
for split in (None, 1):
    out = fp8_paged_mqa_logits(*inp.args(), split_kv=split, kernel=os.environ["KERNEL"], device="cuda:0")
    g = gate_decode(out.numpy(), inp, True, "fp8_tc")
    print("gate", split, bool(g), g.message)
    assert g
EOF
      grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|^gate|Error|error' "$OUT/san.tmp" | head -6
    done
  done
  rm -f "$OUT/san.tmp"
  return $fail
}

if has mutate && [ -n "$CARRY" ]; then
  run unpack 60 "$OUT/mutate.log" $PY -m tools.support.plant_carry unpack --carry "$CARRY" --builds "$PLANTS"
fi

if [ $HUNG = 0 ] && { has sanitize || has mutate; }; then
  FUNCTIONAL=$FAILED
  export -f sanitize tool; export OUT PY
  pids=()
  if has sanitize; then
    ( run sanitize 180 "$OUT/sanitize.log" bash -c sanitize ) & pids+=($!)
  fi
  if has mutate; then
    if [ -f "$PLANTS/clean/pkg/hipindexer/kernels/manifest.json" ]; then
      names=$($PY -c "from tools.support.mutate import PLANTS
n = [p.name for p in PLANTS['$SET']]; print(','.join(n[0::2])); print(','.join(n[1::2]))")
      a=$(echo "$names" | sed -n 1p); b=$(echo "$names" | sed -n 2p)
      ( run mutate_a 180 "$OUT/mutate.log" $PY -m tools.support.mutate --suite cuda --set $SET --builds "$PLANTS" \
          --prebuilt --plants "$a" ) & pids+=($!)
      # lane b on its own copy: a suite run rewrites its build's package files (PackageCopy.refresh)
      PLANTS_B=$(mktemp -d); cp -r "$PLANTS"/. "$PLANTS_B"/
      ( run mutate_b 180 "$OUT/mutate_b.tmp" $PY -m tools.support.mutate --suite cuda --set $SET --builds "$PLANTS_B" \
          --prebuilt --plants "$b" ) & pids+=($!)
    else
      say "== mutate: no plant builds in $PLANTS"; FAILED=1
    fi
  fi
  for p in "${pids[@]}"; do wait $p || LANES_FAILED=1; done
  FAILED=$FUNCTIONAL  # the sanitizer's and the plants' verdicts are reported, they do not hold the benchmark back
  [ -f "$OUT/mutate_b.tmp" ] && { echo "--- lane b"; cat "$OUT/mutate_b.tmp"; } >> "$OUT/mutate.log" && rm -f "$OUT/mutate_b.tmp"
  grep -E 'plants caught|MISSED|unmodified' "$OUT/mutate.log" >> "$S" 2>/dev/null
  grep -hE '^===|SUMMARY|^gate' "$OUT/sanitize.log" 2>/dev/null | paste - - - | cut -c1-200 >> "$S"
fi

if has bench; then
  if [ $FAILED != 0 ] || [ $HUNG != 0 ]; then say "== bench: skipped (a correctness step failed)"; else
    B="$PY -m hipindexer.cli bench decode --device cuda:0 --clean true --repeats 5 --json"
    bench() {  # name seconds options...: JSON to $OUT/name.tmp, progress to bench.txt
      local name=$1 secs=$(lim $2) s rc; shift 2
      s=$(date +%s)
      timeout "$secs" $B "$@" > "$OUT/$name.tmp" 2>> "$OUT/bench.txt"; rc=$?
      say "== $name: exit $rc after $(( $(date +%s) - s )) s$([ $rc = 124 ] && echo " (timed out at $secs s)")"
    }
    bench bench 150 --rows equal:64x131072,equal:16x32768 --heads 64,32 --next-n 1,2,4,8 --kernel $KERNEL $BENCH_ARGS
    bench bench16 60 --rows equal:64x32768 --heads 64 --next-n 1,8 --block-size 16 --kernel $KERNEL
    bench bench_generic 60 --rows equal:16x32768 --heads 64 --next-n 1 --kernel paged_mqa_logits_generic
    $PY - "$OUT" >> "$OUT/bench.txt" 2>&1 <<'EOF2'
import json, os, sys
d = sys.argv[1]
docs = []
for name in ("bench", "bench16", "bench_generic"):
    try:
        docs.append(json.load(open(os.path.join(d, name + ".tmp"))))
    except (OSError, ValueError) as e:
        print(f"{name}: no result ({e})")
json.dump(docs, open(os.path.join(d, "bench.json"), "w"), indent=1)
print(f"  B    ctx  H bs  n kernel                         us   graph key GB/s of read TFLOP/s units")
for doc in docs:
    print(f"# read ceiling {doc['read_GBps']:.0f} GB/s, copy {doc['copy_GBps']:.0f} GB/s, driver {doc.get('driver')}")
    for c in doc["cases"]:
        g = f"{c['us_graph']:.1f}" if c.get("us_graph") else "-"
        print(f"{c['B']:3d} {c['ctx']:6d} {c['H']:2d} {c['block_size']:2d} {c['next_n']:>2} {c['kernel']:24s} "
              f"{c['us']:8.1f} {g:>7} {c['GBps']:8.0f} {100 * c['of_read']:6.1f}% {c['tflops']:7.1f} {c['units']:5d}")
EOF2
    rm -f "$OUT"/bench*.tmp
    sed -n '/^  B /,$p' "$OUT/bench.txt" | head -30 >> "$S"
  fi
fi

if has profile && [ $FAILED = 0 ] && [ $HUNG = 0 ]; then
  NCU=$(tool ncu)
  if [ -z "$NCU" ]; then say "== profile: no ncu here"; else
    P="$PY -m tools.measure.profile_op decode --shape 64x131072 --heads 64 --kernel $KERNEL"
    NCUK="$NCU --clock-control none -k regex:$KERNEL --launch-skip 1 --launch-count 1"
    for n in 1 2 4 8; do
      timeout $(lim 90) $NCUK --csv --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        $P --next-n $n > "$OUT/ncu.tmp" 2>&1
      say "ncu next_n=$n: $(grep -E 'dram__bytes|gpu__time' "$OUT/ncu.tmp" | awk -F'","' '{gsub(/"/,"",$NF); printf "%s %s %s; ", $(NF-2), $(NF-1), $NF}')"
      cat "$OUT/ncu.tmp" >> "$OUT/profile.txt"
    done
    say "  (key + scale bytes per call: $(( 64 * 131072 * 132 )))"
    timeout $(lim 240) $NCUK --set full --import-source no -o "$OUT/dec_n1" -f $P --next-n 1 >> "$OUT/profile.txt" 2>&1
    timeout $(lim 60) "$NCU" --import "$OUT/dec_n1.ncu-rep" --page details >> "$OUT/profile.txt" 2>&1
    timeout $(lim 60) "$NCU" --import "$OUT/dec_n1.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$OUT/profile_src.csv.gz"
    rm -f "$OUT/ncu.tmp" "$OUT/dec_n1.ncu-rep"
    grep -E 'DRAM Throughput|Memory Throughput|Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible' "$OUT/profile.txt" | head -8 >> "$S"
  fi
fi

if has stages && [ $HUNG = 0 ]; then
  run stages 300 "$OUT/stages.txt" $PY -m tools.measure.stage_variants --set $SET --builds "$VARIANTS" --prebuilt -- \
    bench decode --device cuda:0 --rows equal:64x131072 --heads 64 --next-n 1,2,8 --clean true --repeats 5
  grep -A8 '^case' "$OUT/stages.txt" >> "$S"
fi

say "== total $(( $(date +%s) - T0 )) s; $([ $FAILED = 0 ] && [ -z "$LANES_FAILED" ] && echo 'every step passed' || echo 'SOMETHING FAILED')"
cat "$S"
