// topk_logits' row-wise path: one block a row does the split path's three steps (common/topk_split.h) in one
// launch, with the kept keys in the block's shared memory instead of a workspace:
// 1. the row's floor from its sample (runs of 8 columns, a step-th of the row) at rank r, as topk_split_floor;
// 2. the row read once as float4s, every key at or above the floor appended to the buffer e, as topk_split_gather;
//    e is cut to its top_k before a tile that might not fit (common/topk_finish.h), so any number of kept keys is
//    exact;
// 3. the selection cut and written in order, as topk_split_finish.
// A floor that kept fewer than top_k keys (a sample that misjudged the row) is exact only at 0, so such a row is
// read again keeping every selectable key. No launch stands between the steps and nothing but the output is
// written: what the split path's small-row calls pay for is the launches' latencies.
#include "topk_split.h"
#include "topk_finish.h"

using Finish = HxFinishRow<MAX_TOP_K, HX_SMEM / 8>;
static constexpr hx_u32 ROWWISE_CAP = HX_SMEM / 8;
static constexpr hx_u32 TILE_KEYS = HX_BLOCK * HX_SPLIT_SLOTS;  // the most a tile appends
static_assert(ROWWISE_CAP >= MAX_TOP_K + TILE_KEYS, "a selection and a whole tile fit the buffer");

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_rowwise(const HX_GRID_CONSTANT TopkSplitParams p) {
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 3);
  HX_SHARED(hx_u32, ext, 2 * HX_FLOOR_WAVES);
  HX_DYNAMIC_SHARED(hx_u64, e);
  const hx_u32 tid = hx_thread_x();
  const hx_u32 top_k = (hx_u32)p.top_k;
  const bool by_lengths = p.lengths != 0;
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    const float* const x = p.logits + row * p.logits_stride;
    const hx_i32 n = hx_topk_row_extent(p.lengths, row, p.N);
    const hx_u32 floor = hx_split_row_floor(p, x, n, hist, scan, found, ext);
    hx_barrier();  // the floor's shared arrays are the selection's
    const HxSplitPart s = hx_split_part(p, row);  // parts = 1: the whole row
    Finish f{e, hist, scan, found, top_k};
    for (hx_u32 fl = floor;; fl = 0u) {  // uniform: the floor is the block's
      const float least = hx_split_floor_value(fl, by_lengths);
      f.have = 0;
      f.cut = 0;
      float val[HX_SPLIT_SLOTS], next[HX_SPLIT_SLOTS];
      hx_split_load(s, 0, next);
      for (hx_u32 t = 0; t < s.tiles; ++t) {
        HX_UNROLL
        for (int k = 0; k < HX_SPLIT_SLOTS; ++k) val[k] = next[k];
        if (t + 1 < s.tiles) hx_split_load(s, t + 1, next);  // in flight under this tile's appends
        if (f.have > ROWWISE_CAP - TILE_KEYS) f.cut_to_top_k();  // uniform
        if (tid == 0) found[2] = f.have;
        hx_barrier();
        hx_u32 mine = 0;
        hx_u64 ent[HX_SPLIT_SLOTS];
        HX_UNROLL
        for (int k = 0; k < HX_SPLIT_SLOTS; ++k) {
          ent[k] = 0ull;
          if (val[k] >= least) {  // a NaN (or no column): never
            ent[k] = hx_topk_entry(hx_topk_key(val[k], by_lengths), hx_split_col(s, t, k));
            mine |= (hx_u32)(ent[k] > f.cut) << k;
          }
        }
        hx_u32 at = hx_wave_append_count(hx_popc(mine), &found[2]);
        HX_UNROLL
        for (int k = 0; k < HX_SPLIT_SLOTS; ++k)
          if (mine >> k & 1u) e[at++] = ent[k];
        hx_barrier();
        f.have = found[2];
        hx_barrier();  // found[2] is read by all before a cut takes it
      }
      if (f.have >= top_k || fl == 0u) break;
    }
    f.cut_to_top_k();
    hx_i32* const out_idx = p.indices + row * p.indices_stride;
    float* const out_val = p.values ? p.values + row * p.values_stride : 0;
    const hx_u32 have = f.write_in_order(0, n, p.sorted, [&](hx_u32 slot, hx_i64 i, hx_u32) {
      out_idx[slot] = (hx_i32)i;
      if (out_val) out_val[slot] = x[i];  // the logit itself: -0.0 keys as +0.0
    });
    for (hx_u32 slot = have + tid; slot < top_k; slot += HX_BLOCK) {
      out_idx[slot] = -1;
      if (out_val) out_val[slot] = hx_bits_to_f32(0xFF800000u);
    }
    hx_barrier();  // the shared arrays are the next row's
  }
}
