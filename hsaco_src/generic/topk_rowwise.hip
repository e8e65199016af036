// topk_logits' row-wise path: one block a row, one launch, the kept keys in the block's shared memory instead of a
// workspace. A row of at most p.held tiles (ROWWISE_HELD_TILES at most: 32,768 columns at 512 threads) is read once
// and held in the block (hx_rowwise_held): its floor from its held sample, then the values that reach it kept, with
// no further read. A longer row does the split path's three steps (common/topk_split.h):
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
#define ROWWISE_HELD_TILES 4  // tiles of a row a block holds: HX_SPLIT_SLOTS values a thread each,
#define ROWWISE_REG_TILES 2   // the first this many in registers, the rest in the thread's own words of e's end
#define ROWWISE_SAMPLES 4     // floor samples a thread holds (2,048 at 512 threads: a step-16 sample of 32,768)
static constexpr hx_u32 ROWWISE_SHARED_VALUES = (ROWWISE_HELD_TILES - ROWWISE_REG_TILES) * 4 * HX_SPLIT_VEC * HX_BLOCK;
static constexpr hx_u32 ROWWISE_HELD_ROOM = ROWWISE_CAP - ROWWISE_SHARED_VALUES / 2;  // entries an append may fill
static_assert(ROWWISE_HELD_ROOM >= 2 * MAX_TOP_K, "the values at e's end leave room for a selection and its bitmap");

// The top_k of row s (at most ROWWISE_HELD_TILES tiles) by the whole block, read once with every load in flight
// and its values held: the floor from the row's sample (held too where it is at most ROWWISE_SAMPLES a thread, so
// that its three passes load nothing), then every value at or above it appended to e[0, f.have) for the caller's
// cut; where fewer than top_k reach it, every selectable value. Returns false, having appended nothing, where more
// than ROWWISE_HELD_ROOM reach it (a row of many equal values): the caller then reads the row as a long one. Values
// past the register tiles wait in e's last ROWWISE_SHARED_VALUES words, which only their thread reads (16-byte runs,
// a thread's after the thread before's: no bank is met twice a wave), so that the block fits its registers.
HX_INLINE HX_DEV bool hx_rowwise_held(const TopkSplitParams& p, const HxSplitPart& s, const float* x, hx_i32 n,
                                      bool by_lengths, Finish& f, hx_u32* hist, hx_u32* scan, hx_u32* found,
                                      hx_u32* ext) {
  const hx_u32 tid = hx_thread_x();
  const hx_i64 samples = hx_split_samples(n, p.step);
  const bool sample_held = samples <= (hx_i64)ROWWISE_SAMPLES * HX_BLOCK;  // uniform
  float smp[ROWWISE_SAMPLES];
  HX_UNROLL
  for (int b = 0; b < ROWWISE_SAMPLES; ++b) {
    const hx_i64 i = tid + b * HX_BLOCK;
    smp[b] = sample_held && i < samples ? x[hx_split_sample_col(i, p.step)] : hx_bits_to_f32(0x7FC00000u);
  }
  hx_f32x4* const spill = (hx_f32x4*)(f.e + ROWWISE_HELD_ROOM);
  auto spill_at = [&](hx_u32 t, int j) { return ((t - ROWWISE_REG_TILES) * HX_SPLIT_VEC + j) * HX_BLOCK + tid; };
  float val[ROWWISE_REG_TILES][HX_SPLIT_SLOTS];
  {
    float all[ROWWISE_HELD_TILES][HX_SPLIT_SLOTS];
    HX_UNROLL
    for (hx_u32 t = 0; t < ROWWISE_HELD_TILES; ++t) {
      if (t < s.tiles) {
        hx_split_load(s, t, all[t]);
      } else {
        HX_UNROLL
        for (int k = 0; k < HX_SPLIT_SLOTS; ++k) all[t][k] = hx_bits_to_f32(0x7FC00000u);
      }
    }
    HX_UNROLL
    for (hx_u32 t = 0; t < ROWWISE_HELD_TILES; ++t) {
      if (t < ROWWISE_REG_TILES) {
        HX_UNROLL
        for (int k = 0; k < HX_SPLIT_SLOTS; ++k) val[t][k] = all[t][k];
      } else {  // past tile 0: no head or tail column
        HX_UNROLL
        for (int j = 0; j < HX_SPLIT_VEC; ++j)
          spill[spill_at(t, j)] = {all[t][4 * j], all[t][4 * j + 1], all[t][4 * j + 2], all[t][4 * j + 3]};
      }
    }
  }
  auto values = [&](auto&& g) {  // g(t, k, value) for each slot (a NaN where it has no column)
    HX_UNROLL
    for (hx_u32 t = 0; t < ROWWISE_HELD_TILES; ++t) {
      if (t < ROWWISE_REG_TILES) {
        HX_UNROLL
        for (int k = 0; k < HX_SPLIT_SLOTS; ++k) g(t, k, val[t][k]);
      } else {
        HX_UNROLL
        for (int j = 0; j < HX_SPLIT_VEC; ++j) {
          const hx_f32x4 q = spill[spill_at(t, j)];
          g(t, 4 * j, q.x);
          g(t, 4 * j + 1, q.y);
          g(t, 4 * j + 2, q.z);
          g(t, 4 * j + 3, q.w);
        }
      }
    }
  };
  const hx_u32 floor = sample_held ? hx_block_floor([&](auto&& g) {
    HX_UNROLL
    for (int b = 0; b < ROWWISE_SAMPLES; ++b) {
      const hx_u32 key = hx_topk_key(smp[b], by_lengths);
      if (key) g(key);
    }
  }, (hx_u32)p.r, hist, scan, found, ext) : hx_split_row_floor(p, x, n, hist, scan, found, ext);
  float least;
  hx_u32 mine, reach;
  for (hx_u32 fl = floor;; fl = 0u) {  // uniform: the floor and the count are the block's
    least = hx_split_floor_value(fl, by_lengths);
    mine = 0;
    values([&](hx_u32, int, float v) { mine += v >= least; });  // a NaN: never
    hx_block_exclusive_sum(mine, scan, &reach);  // its meetings also free the floor's arrays
    if (reach >= f.top_k || fl == 0u) break;
  }
  if (reach > ROWWISE_HELD_ROOM) return false;  // uniform
  if (tid == 0) found[2] = 0u;  // the appends' count
  hx_barrier();
  hx_u32 at = hx_wave_append_count(mine, &found[2]);
  values([&](hx_u32 t, int k, float v) {  // hx_topk_entry's two words (little-endian) stored apart: as one 8-byte
    if (v >= least) {                     // store (a register pair a value) the block spilled its registers
      hx_u32* const w = (hx_u32*)&f.e[at++];
      w[0] = ~(hx_u32)hx_split_col(s, t, k);
      w[1] = hx_topk_key(v, by_lengths);
    }
  });
  hx_barrier();
  f.have = found[2];
  hx_barrier();  // found[2] is read by all before the finish reuses it
  return true;
}

// The top_k of row s (any length) by the whole block, the split path's three steps: its floor from the sample, then
// its tiles read in turn keeping the keys that reach it in e (cut to top_k whenever a tile might not fit), read again
// keeping every key where the floor kept fewer than top_k. The selection: e[0, f.have), cut to top_k by the caller.
HX_INLINE HX_DEV void hx_rowwise_floored(const TopkSplitParams& p, const HxSplitPart& s, const float* x, hx_i32 n,
                                         bool by_lengths, Finish& f, hx_u32* hist, hx_u32* scan, hx_u32* found,
                                         hx_u32* ext) {
  const hx_u32 tid = hx_thread_x();
  hx_u64* const e = f.e;
  const hx_u32 floor = hx_split_row_floor(p, x, n, hist, scan, found, ext);
  hx_barrier();  // the floor's shared arrays are the selection's
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
    if (f.have >= f.top_k || fl == 0u) break;
  }
}

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_rowwise(const HX_GRID_CONSTANT TopkSplitParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 3);
  HX_SHARED(hx_u32, ext, 2 * HX_FLOOR_WAVES);
  HX_DYNAMIC_SHARED(hx_u64, e);
  const hx_u32 top_k = (hx_u32)p.top_k;
  const bool by_lengths = p.lengths != 0;
  const hx_u32 held = p.held < 0 ? 0u : (p.held > ROWWISE_HELD_TILES ? ROWWISE_HELD_TILES : (hx_u32)p.held);
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    const float* const x = p.logits + row * p.logits_stride;
    const hx_i32 n = hx_topk_row_extent(p.lengths, row, p.N);
    const HxSplitPart s = hx_split_part(p, row);  // parts = 1: the whole row
    Finish f{e, hist, scan, found, top_k};
    if (s.tiles > held || !hx_rowwise_held(p, s, x, n, by_lengths, f, hist, scan, found, ext))  // uniform: the row's
      hx_rowwise_floored(p, s, x, n, by_lengths, f, hist, scan, found, ext);
    f.cut_to_top_k();
    hx_i32* const out_idx = p.indices + row * p.indices_stride;
    float* const out_val = p.values ? p.values + row * p.values_stride : 0;
    const hx_u32 have = f.write_in_order(0, n, p.sorted, [&](hx_u32 slot, hx_i64 i, hx_u32) {
      out_idx[slot] = (hx_i32)i;
      if (out_val) out_val[slot] = x[i];  // the logit itself: -0.0 keys as +0.0
    });
    hx_topk_pad(out_idx, out_val, have, top_k);
    hx_barrier();  // the shared arrays are the next row's
  }
}
