#!/bin/bash
# One device call for the prefill top-k on an H200, from the repository root with hipindexer/kernels built. Each
# step under `timeout`, its log in $OUT, the summary printed last.
#   cases   the prefill top-k GPU cases (tests/test_prefill_topk.py -m gpu)
#   gpu     every GPU test (pytest -m gpu)
#   bench   tools/measure/prefill_topk_bench.py at the issue's rows (H = 64), the op's default path, the composed
#           path, the logits op alone and followed by topk_logits; --million adds (4096, 1048576)
# Env: STEPS (default "cases bench"), OUT (default /tmp/hx-out), SHAPES, HEADS (default 64), MILLION (1: add it),
# STAGES (1: time each launch of a fused call alone too), BUDGET_S (default 570: every timeout is cut to what is
# left of it).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"cases bench"}
PY=${PY:-python3}
BUDGET_S=${BUDGET_S:-570}
. "$(dirname "$0")/steps.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader >> "$S" 2>&1
has cases && run cases 200 "$OUT/cases.log" $PY -m pytest -q -x -p no:cacheprovider -m gpu tests/test_prefill_topk.py
has gpu && run gpu 260 "$OUT/gpu.log" $PY -m pytest -q -x -p no:cacheprovider -m gpu tests
has bench && run bench 300 "$OUT/bench.log" $PY -m tools.measure.prefill_topk_bench \
  --shapes "${SHAPES:-4096x32768,2048x65536,1024x131072,128x32768}" --heads "${HEADS:-64}" \
  $([ "${MILLION:-0}" = 1 ] && echo --million) $([ "${STAGES:-0}" = 1 ] && echo --stages)
cat "$S"
