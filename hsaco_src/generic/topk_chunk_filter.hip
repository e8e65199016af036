// A step of the composed top-k ops (hipindexer/ops/prefill_topk.py): between the
// logits of a key chunk and the selection, keep only the chunk's columns that can
// still enter the row's top_k. Every target.
//
// W's row holds the running candidates' values in [0, lead) (lead = top_k) and
// the chunk's logits in [lead, lead + width). Every key of the chunk comes after
// every candidate's, so it loses a tie with one: once the candidates are full
// (no invalid one) a column enters only with a key strictly above the smallest
// candidate key T, else any valid column does. Those columns are compacted in
// index order to [lead, lead + kept) (values) and cols[0, kept) (their chunk
// columns), and lengths[row] = lead + kept. In place: a tile's columns are read
// into registers before a barrier and written at or below where they were read,
// never into a later tile. W-space order stays key order, so the selection's
// ties by lower W column are still ties by lower key.
#include "topk_select.h"

#define FILTER_ITEMS 8  // consecutive columns per thread per tile

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_chunk_filter(const HX_GRID_CONSTANT TopkFilterParams p) {
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  const hx_u32 tid = hx_thread_x();
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    float* const w = p.w + row * p.w_stride;
    hx_i32* const cols = p.cols + row * p.cols_stride;

    // T: the smallest candidate key, 0 while any candidate is invalid (key 0: take every valid column)
    hx_u32 low = 0xFFFFFFFFu;
    for (hx_i32 i = (hx_i32)tid; i < p.lead; i += HX_BLOCK) {
      const hx_u32 k = hx_topk_key(w[i], false);
      low = k < low ? k : low;
    }
    scan[tid] = low;
    hx_barrier();
    for (hx_u32 half = HX_BLOCK / 2; half > 0; half /= 2) {
      if (tid < half && scan[tid + half] < scan[tid]) scan[tid] = scan[tid + half];
      hx_barrier();
    }
    const hx_u32 T = p.lead ? scan[0] : 0u;
    hx_barrier();  // scan is the exclusive sum's buffer below

    hx_u32 kept = 0;  // over the tiles done
    for (hx_i32 base = 0; base < p.width; base += HX_BLOCK * FILTER_ITEMS) {
      const hx_i32 i0 = base + (hx_i32)tid * FILTER_ITEMS;
      float v[FILTER_ITEMS];
      hx_u32 mine = 0, mask = 0;
      for (int t = 0; t < FILTER_ITEMS; ++t) {
        v[t] = i0 + t < p.width ? w[p.lead + i0 + t] : 0.f;
        const bool in = i0 + t < p.width && hx_topk_key(v[t], false) > T;
        mask |= (hx_u32)in << t;
        mine += in;
      }
      hx_u32 total;
      hx_u32 at = kept + hx_block_exclusive_sum(mine, scan, &total);  // its barriers order every read before a write
      for (int t = 0; t < FILTER_ITEMS; ++t) {
        if (!((mask >> t) & 1u)) continue;
        w[p.lead + at] = v[t];
        cols[at] = i0 + t;
        ++at;
      }
      kept += total;
    }
    if (tid == 0) p.lengths[row] = p.lead + (hx_i32)kept;
    hx_barrier();  // scan is rewritten by the next row
  }
}
