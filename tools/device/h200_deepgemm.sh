#!/bin/bash
# One device call: DeepGEMM built on the H200 from the source tools/device/stage_deepgemm.sh staged (carry build/deepgemm),
# timed on the decode and prefill benchmark shapes (tools/measure/deepgemm_bench.py), and hipindexer's benchmark of the
# same shapes in the same call; the ratios (DeepGEMM time / ours: above 1, ours is faster) in $OUT/summary.txt.
# Env: OUT (default /tmp/hx-out), KERNELS (decode kernels of ours to time, default the sm_90a one), ROWS, SHAPES,
# NEXT_N (decode, default 1,2; above 2 DeepGEMM runs as a stack runs it, tools/measure/deepgemm_bench.py), HEADS
# (decode, default 64), STEPS (default "build decode prefill").
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
KERNELS=${KERNELS:-paged_mqa_logits_wgmma_tma}
ROWS=${ROWS:-64x131072,64x32768,16x131072,16x32768}
SHAPES=${SHAPES:-4096x32768,2048x65536,1024x131072,8192x8192,128x32768}
STEPS=${STEPS:-"build decode prefill"}
NEXT_N=${NEXT_N:-1,2}; HEADS=${HEADS:-64}
S=$OUT/summary.txt; : > "$S"
say() { echo "$*" >> "$S"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
ROOT=$PWD; T=/tmp/deepgemm
# Every kernel call of DeepGEMM's JIT crashed in std::regex until the system libstdc++ was loaded first (seen on
# this image with torch's bundled libraries): preload it.
PRE=$(ls /usr/lib/x86_64-linux-gnu/libstdc++.so.6 2>/dev/null)
DG="env LD_PRELOAD=$PRE PYTHONPATH=$T/DeepGEMM:$ROOT python3 -m tools.measure.deepgemm_bench"
HX="env PYTHONPATH=$ROOT python3 -m hipindexer.cli"
if has build; then
  rm -rf "$T"; mkdir -p "$T"; tar -xzf build/deepgemm/deepgemm.tar.gz -C "$T"; cat "$T/DeepGEMM/STAGED" >> "$S"
  ( cd "$T/DeepGEMM" && ln -sf "$PWD/third-party/cutlass/include/cutlass" deep_gemm/include &&
    ln -sf "$PWD/third-party/cutlass/include/cute" deep_gemm/include &&
    DG_USE_LOCAL_VERSION=0 timeout 600 python3 setup.py build > "$OUT/deepgemm_build.log" 2>&1 &&
    ln -sf "$PWD/$(find build -name '*.so' -type f | head -1)" deep_gemm/ )
  rc=$?; say "== DeepGEMM build: exit $rc"; [ $rc = 0 ] || { tail -20 "$OUT/deepgemm_build.log" >> "$S"; cat "$S"; exit 1; }
fi
if has decode; then
  timeout 400 $DG decode --rows "$ROWS" --heads "$HEADS" --next-n "$NEXT_N" > "$OUT/dg_decode.json" 2>> "$OUT/bench.log"
  say "== DeepGEMM decode: exit $?"
  for k in $KERNELS; do
    timeout 300 $HX bench decode --device cuda:0 --rows $(echo "$ROWS" | sed 's/[^,]*/equal:&/g') --heads "$HEADS" \
      --next-n "$NEXT_N" --clean true --repeats 5 --kernel $k --json > "$OUT/hx_decode_$k.json" 2>> "$OUT/bench.log"
    say "== ours, $k: exit $?"
  done
fi
if has prefill; then
  timeout 400 $DG prefill --shapes "$SHAPES" --heads 64,32 > "$OUT/dg_prefill.json" 2>> "$OUT/bench.log"
  say "== DeepGEMM prefill: exit $?"
  timeout 400 $HX bench prefill --device cuda:0 --shapes "$SHAPES" --heads 64,32 --clean true --json \
    > "$OUT/hx_prefill.json" \
    2>> "$OUT/bench.log"
  say "== ours, prefill: exit $?"
fi
python3 - "$OUT" >> "$S" 2>&1 <<'PY'
import glob, json, os, sys
d = sys.argv[1]
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
dg = {}
for name in ("dg_decode.json", "dg_prefill.json"):
    doc = load(os.path.join(d, name))
    for c in (doc or {}).get("cases", []):
        key = (c["op"], c.get("B"), c.get("ctx"), c.get("M"), c.get("N"), c["H"], str(c.get("next_n", "")))
        dg[key] = c
for p in sorted(glob.glob(os.path.join(d, "hx_*.json"))):
    doc = load(p)
    for c in (doc or {}).get("cases", []):
        op = c.get("op", "decode" if "ctx" in c else "prefill")
        key = (op, c.get("B"), c.get("ctx"), c.get("M"), c.get("N"), c["H"], str(c.get("next_n", "")))
        g = dg.get(key)
        if g:
            shape = f"({c['B']}, {c['ctx']}) n={c['next_n']}" if op == "decode" else f"({c['M']}, {c['N']})"
            extra = f", DeepGEMM kernel alone {g['us_kernel']:.1f} us" if "us_kernel" in g else ""
            extra += f", DeepGEMM as {g['mode']}" if g.get("mode", "native") != "native" else ""
            print(f"{op} {shape} H={c['H']} {c['kernel']}: ours {c['us']:.1f} us, DeepGEMM {g['us']:.1f} us{extra}: "
                  f"{g['us'] / c['us']:.2f}x")
PY
cat "$S"
