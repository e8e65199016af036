// The fused prefill top-k's floors, after the logits op has run on the sample of prefill_topk_sample.hip: a block a
// row writes an order key (hx_topk_key) at or below the r-th largest of the row's sample logits, or 0 when the window
// has at most r samples (every key then enters).
//
// The floor itself is common/topk_floor.h's.
#include "topk_sample.h"
#include "topk_floor.h"

#define FLOOR_BATCH 8  // samples a thread loads at once

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_prefill_topk_floor(const HX_GRID_CONSTANT PrefillSampleParams p) {
  HX_FLOOR_SHARED;
  const hx_u32 tid = hx_thread_x();
  for (hx_i64 m = hx_block_x(); m < p.M; m += hx_grid_dim_x()) {
    const hx_range w = hx_sample_window(p, m);
    const float* row = p.logits + m * p.samples;
    const hx_u32 floor = hx_block_floor_of<FLOOR_BATCH>(w.lo, w.hi, [&](hx_i32 i) { return row[i]; }, false,
                                                        (hx_u32)p.r, hist, scan, found, ext);
    if (tid == 0) p.floors[m] = floor;
    hx_barrier();  // the shared arrays are the next row's
  }
}
