// Split top-k, kernel 2 of 3 (common/topk_split.h): block item b = row * parts + part reads its part of the row once,
// as float4s, and appends every selectable key at or above the row's floor to the row's kept entries: one global
// atomic a wave a tile for the wave's places in the row's list. The list's order is arbitrary; the last kernel's
// selection does not depend on it.
//
// Few keys reach a floor (about 1.75 top_k of a row's), so a slot's test is what the kernel spends its issue on: a
// float comparison with the floor's value (hx_split_floor_value), a bit of the thread's mask; the keys and columns of
// the kept slots alone are worked out, at their stores.
#include "topk_split.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_split_gather(const HX_GRID_CONSTANT TopkSplitParams p) {
  hx_grid_dependency_wait();
  const bool by_lengths = p.lengths != 0;
  const hx_i64 items = (hx_i64)p.rows * p.parts;
  for (hx_i64 item = hx_block_x(); item < items; item += hx_grid_dim_x()) {
    const HxSplitPart s = hx_split_part(p, item);
    hx_u32* const rec = (hx_u32*)hx_split_row(p, s.row);
    hx_u64* const kept = (hx_u64*)((hx_u8*)rec + p.cand_off);
    const float floor = hx_split_floor_value(rec[0], by_lengths);
    float val[HX_SPLIT_SLOTS], next[HX_SPLIT_SLOTS];
    hx_split_load(s, 0, next);
    for (hx_u32 t = 0; t < s.tiles; ++t) {
      // tile t + 1's loads in flight under tile t's appends, whose global atomic waits a round trip
      HX_UNROLL
      for (int e = 0; e < HX_SPLIT_SLOTS; ++e) val[e] = next[e];
      if (t + 1 < s.tiles) hx_split_load(s, t + 1, next);
      hx_u32 mine = 0;
      HX_UNROLL
      for (int e = 0; e < HX_SPLIT_SLOTS; ++e) mine |= (hx_u32)(val[e] >= floor) << e;  // a NaN (or no column): never
      hx_u32 at = hx_wave_append_count(hx_popc(mine), &rec[1]);
      HX_UNROLL
      for (int e = 0; e < HX_SPLIT_SLOTS; ++e)
        if (mine >> e & 1u) {  // counted past cap, so the last kernel sees the overflow
          if (at < (hx_u32)p.cap) kept[at] = hx_topk_entry(hx_topk_key(val[e], by_lengths), hx_split_col(s, t, e));
          ++at;
        }
    }
  }
}
