#!/bin/bash
# One device call timing the sm_90a decode kernel over its cache layouts and block sizes on an H200, from the
# repository root with hipindexer/kernels carried, and with OLD=1 the previous package too (its hipindexer with
# kernels under build/old; its Python may be this one's, so that both take the same bench options). Each
# `hipindexer bench decode` run measures its own read ceiling; with OLD=1 the block-16 block-flat row runs in the
# order new old old new, the others new old. Logs in $OUT, the summary printed last.
# Env: ROWS (default equal:64x131072,equal:16x32768), NEXT_N (default 1,8), HEADS (default 64), OUT, BUDGET_S
# (default 570: every timeout is cut to what is left of it).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
PY=${PY:-python3}
BUDGET_S=${BUDGET_S:-570}
ROWS=${ROWS:-equal:64x131072,equal:16x32768}
. "$(dirname "$0")/steps.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader >> "$S" 2>&1
OLDRUN=(bash -c 'cd build/old && PYTHONPATH=$PWD exec "$@"' old)  # a command run in the previous package
bench() {  # tag block_size layout [old]: one bench decode run, its JSON in $OUT/tag.json
  local tag=$1 bs=$2 layout=$3 pre=()
  [ "$4" = old ] && pre=("${OLDRUN[@]}")
  run "$tag" 150 "$OUT/$tag.log" "${pre[@]}" $PY -m hipindexer.cli bench decode --device cuda:0 --rows "$ROWS" \
    --heads "${HEADS:-64}" --next-n "${NEXT_N:-1,8}" --clean true --repeats 5 --block-size "$bs" --layout "$layout" \
    --json
  sed -n '/^{/,$p' "$OUT/$tag.log" > "$OUT/$tag.json"
}
bench new16f 16 block-flat
[ "${OLD:-0}" = 1 ] && bench old16f 16 block-flat old && bench old16f2 16 block-flat old
bench new16f2 16 block-flat
bench new64f 64 block-flat
bench new16p 16 preshuffled
[ "${OLD:-0}" = 1 ] && bench old16p 16 preshuffled old
bench new64p 64 preshuffled
[ "${OLD:-0}" = 1 ] && bench old64p 64 preshuffled old
$PY - "$OUT" >> "$S" 2>&1 <<'EOF'
import glob, json, os, sys
print(f"{'run':8s} {'read GB/s':>9s}  B    ctx  H bs layout       n       us  of read")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        doc = json.load(open(f))
    except ValueError as e:
        print(os.path.basename(f), "no result", e)
        continue
    for c in doc["cases"]:
        lay = "preshuffled" if c["preshuffle"] else "block-flat"
        print(f"{os.path.basename(f)[:-5]:8s} {doc['read_GBps']:9.0f} {c['B']:3d} {c['ctx']:6d} {c['H']:2d} "
              f"{c['block_size']:2d} {lay:12s} {c['next_n']:>2} {c['us']:8.1f} {100 * c['of_read']:6.1f}%")
EOF
cat "$S"
