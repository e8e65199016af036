// The fused prefill top-k's sample of the keys (generic/prefill_topk_sample.hip, prefill_topk_floor.hip): every
// step-th key from 0, so row m's keys [lo, hi) hold samples [ceil(lo / step), ceil(hi / step)).
#pragma once
#include "index_math.h"
#include "hx_params.h"

HX_INLINE HX_DEV hx_range hx_sample_window(const PrefillSampleParams& p, hx_i64 m) {
  const hx_range r = hx_clamp_window(p.ks[m], p.ke[m], p.N);
  if (r.hi <= r.lo) return {0, 0};
  return {(hx_i32)(((hx_i64)r.lo + p.step - 1) / p.step), (hx_i32)(((hx_i64)r.hi + p.step - 1) / p.step)};
}
