// Split top-k, kernel 2 of 2 (common/topk_split.h): block item b = row * parts + part reads its part of the row once,
// as float4s, and appends every selectable key at or above the row's floor to the row's kept entries: one global
// atomic a wave a tile for the wave's places in the row's list. The last block to finish a part of a row then
// selects the row's top_k among its kept entries through shared memory (common/topk_finish.h) and writes them in
// order: sorted, by descending value, equal values by lower index; unsorted, by ascending index (the order the
// single-block kernel gives). A row is selected as soon as its own parts are read, under the other rows' reads, and
// no launch stands between the two.
//
// Few keys reach a floor (about 1.75 top_k of a row's), so a slot's test is what the reads spend their issue on: a
// float comparison with the floor's value (hx_split_floor_value), a bit of the thread's mask; the keys and columns of
// the kept slots alone are worked out, at their stores. The list's order is arbitrary; the selection does not depend
// on it. A row whose kept entries cannot hold its top_k (fewer than top_k above a floor above 0, more than cap, more
// than its columns: a floor the sample misjudged or a workspace in a bad state) runs the single-block algorithm
// (hx_topk_row) instead.
#include "topk_split.h"
#include "topk_finish.h"

using Finish = HxFinishRow<MAX_TOP_K, HX_SMEM / 8>;

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

// The row's top_k from its kept entries, or by the single-block algorithm when they cannot hold it.
HX_INLINE HX_DEV void select_row(const TopkSplitParams& p, hx_i64 row, const hx_u32* rec, hx_u32* hist, hx_u32* scan,
                                 hx_u32* found, hx_u64* e) {
  const hx_u32 tid = hx_thread_x();
  const hx_u32 top_k = (hx_u32)p.top_k;
  const hx_u32 floor = rec[0], count = rec[1];
  const hx_i32 n = hx_topk_row_extent(p.lengths, row, p.N);
  const float* const x = p.logits + row * p.logits_stride;
  hx_i32* const out_idx = p.indices + row * p.indices_stride;
  float* const out_val = p.values ? p.values + row * p.values_stride : 0;
  if (count <= (hx_u32)p.cap && count <= (hx_u32)n && (count >= top_k || floor == 0u)) {  // uniform
    Finish f{e, hist, scan, found, top_k};
    f.take((const hx_u64*)((const hx_u8*)rec + p.cand_off), count);
    f.cut_to_top_k();
    const hx_u32 have = f.write_in_order(0, n, p.sorted, [&](hx_u32 s, hx_i64 i, hx_u32 key) {
      out_idx[s] = (hx_i32)i;  // the logit itself, not the key's value: -0.0 keys as +0.0
      if (out_val) out_val[s] = (hx_u64)i < (hx_u64)n ? x[i] : hx_topk_value(key);
    });
    for (hx_u32 s = have + tid; s < top_k; s += HX_BLOCK) {
      out_idx[s] = -1;
      if (out_val) out_val[s] = hx_bits_to_f32(0xFF800000u);
    }
    return;
  }
  TopkParams q;
  q.logits = p.logits;
  q.lengths = p.lengths;
  q.indices = p.indices;
  q.values = p.values;
  q.logits_stride = p.logits_stride;
  q.indices_stride = p.indices_stride;
  q.values_stride = p.values_stride;
  q.rows = p.rows;
  q.N = p.N;
  q.top_k = p.top_k;
  q.sorted = p.sorted;
  hx_topk_row(q, row, hist, scan, found, e);
}

}  // namespace

HX_KERNEL HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 2) void hx_topk_split_select(const HX_GRID_CONSTANT TopkSplitParams p) {
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
    hx_fence_release_device();
    hx_barrier();  // every append of this part visible before the part counts as done
    if (hx_thread_x() == 0) last[0] = hx_atomic_add_acq_rel((hx_i32*)&rec[2], 1) == p.parts - 1;
    hx_barrier();
    if (last[0]) select_row(p, s.row, rec, hist, scan, found, e);  // uniform; sees every part's appends
    hx_barrier();  // the shared arrays are the next item's
  }
}
