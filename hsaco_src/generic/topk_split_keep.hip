// Split top-k, kernel 2 (common/topk_split.h): block item b = row * parts + part reads its part of the row once, as
// float4s, and appends every selectable key at or above the row's floor to the row's kept entries: one global atomic
// a wave a tile for the wave's places in the row's list. With select_in_place, the last block to finish a part of a
// row then selects the row (hx_split_select_row): under the other rows' reads, where the blocks take several rounds;
// otherwise the finish kernel does, a block an SM.
//
// Few keys reach a floor (about 1.75 top_k of a row's), so a slot's test is what the reads spend their issue on: a
// float comparison with the floor's value (hx_split_floor_value), a bit of the thread's mask; the keys and columns of
// the kept slots alone are worked out, at their stores. The list's order is arbitrary; the selection does not depend
// on it.
#include "topk_split.h"

namespace {

// Part s of its row: the keys at or above the floor appended to the row's list.
HX_INLINE HX_DEV void keep_part(const TopkSplitParams& p, const HxSplitPart& s, hx_u32* rec, bool by_lengths) {
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
      if (mine >> e & 1u) {  // counted past cap, so the selection sees the overflow
        if (at < (hx_u32)p.cap) kept[at] = hx_topk_entry(hx_topk_key(val[e], by_lengths), hx_split_col(s, t, e));
        ++at;
      }
  }
}

}  // namespace

HX_KERNEL HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 2) void hx_topk_split_keep(const HX_GRID_CONSTANT TopkSplitParams p) {
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 3);
  HX_SHARED(hx_u32, last, 1);
  HX_DYNAMIC_SHARED(hx_u64, e);
  const bool by_lengths = p.lengths != 0;
  const hx_i64 items = (hx_i64)p.rows * p.parts;
  for (hx_i64 item = hx_block_x(); item < items; item += hx_grid_dim_x()) {
    const HxSplitPart s = hx_split_part(p, item);
    hx_u32* const rec = (hx_u32*)hx_split_row(p, s.row);
    keep_part(p, s, rec, by_lengths);
    if (!p.select_in_place) continue;  // uniform
    hx_fence_release_device();
    hx_barrier();  // every append of this part visible before the part counts as done
    if (hx_thread_x() == 0) last[0] = hx_atomic_add_acq_rel((hx_i32*)&rec[2], 1) == p.parts - 1;
    hx_barrier();
    if (last[0]) hx_split_select_row<HX_SMEM / 8>(p, s.row, hist, scan, found, e);  // uniform; sees every append
    hx_barrier();  // the shared arrays are the next item's
  }
}
