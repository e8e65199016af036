// Split top-k, kernel 1 of 3 (common/topk_split.h): block item b = row * parts
// + part reads its part of the row once, as float4s, and counts the valid keys
// by their top 11 bits in shared memory; the nonzero bins go to the row's
// histogram in the workspace by integer atomics, whose totals do not depend on
// the order the blocks add them in.
#include "topk_split.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_split_hist(const HX_GRID_CONSTANT TopkSplitParams p) {
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  const hx_u32 tid = hx_thread_x();
  const bool by_lengths = p.lengths != 0;
  const hx_i64 items = (hx_i64)p.rows * p.parts;
  for (hx_i64 item = hx_block_x(); item < items; item += hx_grid_dim_x()) {
    const HxSplitPart s = hx_split_part(p, item);
    for (hx_u32 b = tid; b < HX_TOPK_MAX_BINS; b += HX_BLOCK) hist[b] = 0u;
    hx_barrier();
    for (hx_u32 t = 0; t < s.tiles; ++t) {
      float val[HX_SPLIT_SLOTS];
      hx_i32 col[HX_SPLIT_SLOTS];
      hx_split_load(s, t, val, col);
      HX_UNROLL
      for (int e = 0; e < HX_SPLIT_SLOTS; ++e) {
        const hx_u32 k = hx_topk_key(val[e], by_lengths);
        if (col[e] >= 0 && k != 0u) hx_atomic_add_u32(&hist[k >> 21], 1u);
      }
    }
    hx_barrier();
    hx_u32* const row_hist = (hx_u32*)hx_split_row(p, s.row);
    for (hx_u32 b = tid; b < HX_TOPK_MAX_BINS; b += HX_BLOCK) {
      const hx_u32 c = hist[b];
      if (c) hx_atomic_add_u32(&row_hist[b], c);
    }
    hx_barrier();  // hist is zeroed for the next item
  }
}
