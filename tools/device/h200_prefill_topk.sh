#!/bin/bash
# One device call for the prefill top-k on an H200, from the repository root with hipindexer/kernels built. Each
# step under `timeout`, its log in $OUT, the summary printed last.
#   cases   the prefill top-k GPU cases (tests/test_prefill_topk.py -m gpu)
#   gpu     every GPU test (pytest -m gpu)
#   plants  the GPU plants of the sm_90a filters (tools/support/mutate.py --set prefill_topk_sm90a), prebuilt in
#           $PLANTS (default .out/pl: `--builds .out/pl --build-only` here first, then carry .out/pl)
#   bench   tools/measure/prefill_topk_bench.py at the issue's rows (H = 64), the op's default path, the composed
#           path, the logits op alone and followed by topk_logits; --million adds (4096, 1048576). With PREV (a
#           package copy's root: a folder holding a hipindexer/ with its kernels/, carried) the same bench runs
#           from there after each round, for a same-call before and after.
#   variants  tools/measure/stage_variants.py --prebuilt on each set of VSETS ("SET:FIELD ...", default
#           "sm90a_prefill_filter:us_stage_filter prefill_topk_finish:us_stage_finish"), its copies built here in
#           $VBUILDS/SET (default .out/sv: `--set SET --builds .out/sv/SET --build-only`, then carry them), timed by
#           the bench's launches replayed alone at SHAPES and HEADS
# Env: STEPS (default "cases bench"), OUT (default /tmp/hx-out), SHAPES, HEADS (default 64), MILLION (1: add it),
# STAGES (1: time each launch of a fused call alone too), RECENT (the bench's --recent: rows whose best keys are
# their last RECENT), ROUNDS (default 1), PREV, VSETS, VBUILDS, BUDGET_S
# (default 570: every timeout is cut to what is left of it).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"cases bench"}
PY=${PY:-python3}
BUDGET_S=${BUDGET_S:-570}
. "$(dirname "$0")/steps.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader >> "$S" 2>&1
has cases && run cases 200 "$OUT/cases.log" $PY -m pytest -q -x -p no:cacheprovider -m gpu tests/test_prefill_topk.py
has gpu && run gpu 260 "$OUT/gpu.log" $PY -m pytest -q -x -p no:cacheprovider -m gpu tests
has plants && run plants 300 "$OUT/plants.log" $PY -m tools.support.mutate --suite cuda --set prefill_topk_sm90a \
  --builds "${PLANTS:-.out/pl}" --prebuilt
BENCH=(-m tools.measure.prefill_topk_bench --shapes "${SHAPES:-4096x32768,2048x65536,1024x131072,128x32768}"
       --heads "${HEADS:-64}" $([ "${MILLION:-0}" = 1 ] && echo --million) $([ "${STAGES:-0}" = 1 ] && echo --stages)
       --recent "${RECENT:-0}")
ROOT=$PWD
for r in $(seq "${ROUNDS:-1}"); do
  has bench && run "bench round $r" 300 "$OUT/bench.log" $PY "${BENCH[@]}"
  # python -m puts its working folder ahead of PYTHONPATH: the copy runs from its own root
  has bench && [ -n "$PREV" ] && (cd "$PREV" && export PYTHONPATH="$PWD:$ROOT" && run "bench round $r, PREV" 300 \
    "$OUT/bench_prev.log" $PY "${BENCH[@]}")
done
for vs in ${VSETS:-sm90a_prefill_filter:us_stage_filter prefill_topk_finish:us_stage_finish}; do
  has variants && run "variants ${vs%%:*}" 300 "$OUT/variants.log" $PY -m tools.measure.stage_variants \
    --set "${vs%%:*}" --builds "${VBUILDS:-.out/sv}/${vs%%:*}" --prebuilt --module tools.measure.prefill_topk_bench \
    --field "${vs#*:}" -- --shapes "${SHAPES:-4096x32768,2048x65536,1024x131072,128x32768}" --heads "${HEADS:-64}" \
    --stages --repeats 5
done
cat "$S"
