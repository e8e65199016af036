#!/bin/bash
# One device call for the decode top-k on an H200, from the repository root with hipindexer/kernels and the plant
# and variant builds carried (build/dev). Each step under `timeout`, its log in $OUT, the summary printed last.
#   gpu       every GPU test (pytest -m gpu), stopped at the first failure
#   plants    the fused kernel's plant set (tools/support/mutate.py --suite cuda --set paged_topk_fused) on the
#             carried builds ($PLANTS, made with --build-only)
#   bench     tools/measure/paged_topk_bench.py: the default path, each path forced, the logits op alone, at the
#             issue's rows, next_n 1 and 2
#   variants  tools/measure/stage_variants.py --set sm90a_fused ($VARIANTS, made with --build-only) timed by
#             `bench topk` at (64, 131072) and (16, 131072)
#   sanitize  compute-sanitizer memcheck, synccheck and racecheck on two cases of the tests (tools/support/run_case.py):
#             the fused decode top-k at both head counts and layouts beside its composed path (paged_topk_step), and
#             the prefill top-k's fast paths (both sm_90a filters, the composed path's topk_chunk_step)
# Env: STEPS (default all), OUT (default /tmp/hx-out), PLANTS (build/dev/pf), VARIANTS (build/dev/var), VSHAPES
# (the variants' rows, default 64x131072,16x131072), BUDGET_S
# (default 570: every timeout is cut to what is left of it).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hx-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"gpu plants bench variants sanitize"}
PLANTS=${PLANTS:-build/dev/pf}
VARIANTS=${VARIANTS:-build/dev/var}
PY=${PY:-python3}
BUDGET_S=${BUDGET_S:-570}
. "$(dirname "$0")/steps.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader >> "$S" 2>&1
has gpu && run gpu 260 "$OUT/gpu.log" $PY -m pytest -q -x -p no:cacheprovider -m gpu tests
has plants && run plants 150 "$OUT/plants.log" $PY -m tools.support.mutate --suite cuda --set paged_topk_fused \
  --builds "$PLANTS" --prebuilt
has bench && run bench 150 "$OUT/bench.log" $PY -m tools.measure.paged_topk_bench \
  --rows 64x131072,64x32768,16x131072,16x32768,4x8192 --next-n 1,2
has variants && run variants 120 "$OUT/variants.log" $PY -m tools.measure.stage_variants --set sm90a_fused \
  --builds "$VARIANTS" --prebuilt -- bench topk --device cuda:0 --shapes "${VSHAPES:-64x131072,16x131072}" --next-n 1,2
if has sanitize; then
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -z "$CS" ] && echo "== sanitize: no compute-sanitizer" >> "$S"
  for tl in memcheck synccheck racecheck; do
    for mc in "paged_topk_fused_cases rows_of_every_kind_pass_the_gate_and_match_the_composed_path" \
              "prefill_topk_cases fast_path_heads"; do
      set -- $mc
      [ -n "$CS" ] && run "$tl $2" 90 "$OUT/sanitize_$tl.log" "$CS" --tool $tl --error-exitcode 9 \
        $PY -m tools.support.run_case $1 $2
    done
  done
fi
cat "$S"
