// The first launch of the fused prefill top-k (hipindexer/ops/prefill_topk_fused.py), every target: the sample of
// the keys its floors come from (common/topk_sample.h), gathered with its scales and each row's window over it, for
// the prefill logits op to run on (and the filter's counts zeroed, for a filter that adds to them); prefill_topk_floor.hip then takes each row's floor from those logits. A floor is
// a lower bound on the logit a key needs to be among its row's top_k: any floor at or below the row's true top_k-th
// keeps the selection exact, since the filter then keeps at least top_k keys, which prefill_topk_finish checks row
// by row.
#include "topk_sample.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_prefill_topk_sample(const HX_GRID_CONSTANT PrefillSampleParams p) {
  hx_grid_dependency_wait();
  const hx_i64 per = p.D / 16;                  // 16-byte words of a key
  const hx_i64 words = (hx_i64)p.samples * per;  // of the sample
  const hx_i64 total = words > p.M ? words : (hx_i64)p.M;
  const hx_i64 threads = (hx_i64)hx_grid_dim_x() * HX_BLOCK;
  for (hx_i64 i = (hx_i64)hx_block_x() * HX_BLOCK + hx_thread_x(); i < total; i += threads) {
    if (i < words) {
      const hx_i64 j = i / per, c = i % per;
      ((hx_u32x4*)(p.sample_k + j * p.D))[c] = ((const hx_u32x4*)(p.k + j * p.step * p.D))[c];
    }
    if (i < p.samples) p.sample_scale[i] = p.kv_scale[i * p.step];
    if (i < p.M) {
      const hx_range w = hx_sample_window(p, i);
      p.sample_ks[i] = w.lo;
      p.sample_ke[i] = w.hi;
      for (hx_i32 j = 0; j < p.parts; ++j) p.cand_counts[i * p.parts + j] = 0;
    }
  }
}
