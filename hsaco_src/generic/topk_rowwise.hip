// topk_logits' row-wise path: one block a row, one launch, the kept keys in the block's shared memory instead of a
// workspace. A row of at most p.held tiles (ROWWISE_HELD_TILES at most: 32,768 columns at 512 threads) is read once
// and held in the block (hx_rowwise_held): its floor from its held sample, then the values that reach it kept, with
// no further read, and (unsorted) the selection written in column order from the held values themselves, placed by
// counts over the block instead of the finish's compaction and bitmap. A longer row does the split path's three steps (common/topk_split.h):
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
#define HX_ROWWISE_NOT_HELD (-1)  // hx_rowwise_held: the row read the long way instead
#define HX_ROWWISE_APPENDED (-2)  // hx_rowwise_held: its top_k's candidates appended for the caller's cut and order

// A held row's columns in chunks, each a run of columns that the block's threads hold in thread order (a thread's
// values of a chunk in column order): the head column, then each float4 of each tile, then the tail column. So a
// chosen value's place in the row's selection is the chosen of the chunks before its own, of the threads before it
// in its own, and of its thread's values before it there.
#define ROWWISE_CHUNKS (2u + ROWWISE_HELD_TILES * HX_SPLIT_VEC)
#define ROWWISE_CHUNK_WORDS ((ROWWISE_CHUNKS + 1u) / 2u)  // a chunk's count in 16 bits (at most 4 a thread)
static constexpr hx_u32 ROWWISE_WAVES = HX_BLOCK / HX_WAVE_SIZE;
static_assert((ROWWISE_WAVES & (ROWWISE_WAVES - 1)) == 0, "waves a block: a power of two");
static_assert(HX_TOPK_MAX_BINS >= 2 * ROWWISE_WAVES * ROWWISE_CHUNK_WORDS + ROWWISE_CHUNK_WORDS, "the places' sums");
HX_INLINE HX_DEV hx_u32 hx_rowwise_chunk(hx_u32 t, int k) {
  if (k < 4 * HX_SPLIT_VEC) return 1u + t * HX_SPLIT_VEC + (hx_u32)k / 4u;
  return k == 4 * HX_SPLIT_VEC ? 0u : ROWWISE_CHUNKS - 1u;  // head and tail: tile 0 only
}

// The thread's counts of chosen values a chunk (two 16-bit halves a word, word w at next[w HX_BLOCK]) replaced by
// the slot of its first one there, by the whole block; returns the count over the block. Counts over a wave stay
// under 2^16 (4 a thread); the sums over waves are taken by a thread a (wave, word) in hist, free again on return.
HX_INLINE HX_DEV hx_u32 hx_rowwise_places(hx_u32* next, hx_u32* hist) {
  const hx_u32 tid = hx_opaque_u32(hx_thread_x()), wave = tid / HX_WAVE_SIZE, lane = hx_lane();
  hx_u32* const waves = hist;                                        // [word][wave]: the wave's counts
  hx_u32* const before = hist + ROWWISE_WAVES * ROWWISE_CHUNK_WORDS;  // [word][wave]: the waves' before it
  hx_u32* const all = before + ROWWISE_WAVES * ROWWISE_CHUNK_WORDS;   // [word]: the block's
  for (hx_u32 w = 0; w < ROWWISE_CHUNK_WORDS; ++w) {
    const hx_u32 mine = next[w * HX_BLOCK], inclusive = hx_wave_inclusive_sum(mine);
    if (lane == HX_WAVE_SIZE - 1) waves[w * ROWWISE_WAVES + wave] = inclusive;
    next[w * HX_BLOCK] = inclusive - mine;
  }
  hx_barrier();
  if (tid < ROWWISE_WAVES * ROWWISE_CHUNK_WORDS) {
    const hx_u32 v = tid % ROWWISE_WAVES;  // of word tid / ROWWISE_WAVES
    hx_u32 sum = 0;
    for (hx_u32 u = 0; u < v; ++u) sum += waves[tid - v + u];
    before[tid] = sum;
    if (v == ROWWISE_WAVES - 1) all[tid / ROWWISE_WAVES] = sum + waves[tid];
  }
  hx_barrier();
  hx_u32 at = 0;  // the chosen of the chunks before
  for (hx_u32 c = 0; c < ROWWISE_CHUNKS; ++c) {
    const hx_u32 w = c / 2, shift = 16 * (c % 2);
    next[w * HX_BLOCK] += (at + (before[w * ROWWISE_WAVES + wave] >> shift & 0xFFFFu)) << shift;
    at += all[w] >> shift & 0xFFFFu;
  }
  hx_barrier();  // hist is free again
  return at;
}

// The top_k of row s (at most ROWWISE_HELD_TILES tiles) by the whole block, read once with every load in flight
// and its values held: the floor from the row's sample (held too where it is at most ROWWISE_SAMPLES a thread, so
// that its three passes load nothing), then every value at or above it appended to e[0, f.have) (where fewer than
// top_k reach it, every selectable value). Unsorted, the appended entries give the top_k-th's entry, and the held
// values that reach it are written in column order to out_idx (out_val): returns the slots written. Sorted, returns
// HX_ROWWISE_APPENDED for the caller's cut and sort. Returns HX_ROWWISE_NOT_HELD, having appended and written
// nothing, where more than ROWWISE_HELD_ROOM reach the floor (a row of many equal values): the caller then reads the
// row as a long one. Values past the register tiles wait in e's last ROWWISE_SHARED_VALUES words, which only their
// thread reads (16-byte runs, a thread's after the thread before's: no bank is met twice a wave), so that the block
// fits its registers.
HX_INLINE HX_DEV hx_i32 hx_rowwise_held(const TopkSplitParams& p, const HxSplitPart& s, const float* x, hx_i32 n,
                                        bool by_lengths, Finish& f, hx_u32* hist, hx_u32* scan, hx_u32* found,
                                        hx_u32* ext, hx_i32* out_idx, float* out_val) {
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
  if (reach > ROWWISE_HELD_ROOM) return HX_ROWWISE_NOT_HELD;  // uniform
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
  if (p.sorted) return HX_ROWWISE_APPENDED;  // uniform
  // The selection: the values whose entries reach the top_k-th appended one (all of them where top_k or fewer were
  // appended), written in column order from the held values, which hold each chunk's columns in thread order.
  // A value is chosen where its entry (key, then lower column) reaches the cut's: where it is above the cut's value,
  // or equal to it at a column at or below the cut's. A NaN never is.
  hx_block_bar bar;
  float at_least = least;
  hx_i32 last_col = 0x7FFFFFFF;
  if (f.have > f.top_k) {  // uniform
    const hx_u64 cut = hx_group_cut_entry<HX_BLOCK, 4>(tid, bar, f.e, f.have, f.top_k, hist, scan, found);
    at_least = hx_topk_value((hx_u32)(cut >> 32));
    last_col = hx_topk_entry_index(cut);
  }
  auto chosen = [&](hx_u32 t, int k, float v) {
    return v > at_least || (v == at_least && hx_split_col(s, t, k) <= last_col);
  };
  // the thread's chosen values of each chunk, then the slot of its next one there: in the appended entries' room
  // (read by now), word w at w HX_BLOCK, since the registers are the held values'
  hx_u32* const next = (hx_u32*)f.e + tid;
  HX_UNROLL
  for (hx_u32 w = 0; w < ROWWISE_CHUNK_WORDS; ++w) next[w * HX_BLOCK] = 0u;
  values([&](hx_u32 t, int k, float v) {
    const hx_u32 c = hx_rowwise_chunk(t, k);
    if (chosen(t, k, v)) next[c / 2 * HX_BLOCK] += 1u << (16 * (c % 2));
  });
  const hx_u32 total = hx_rowwise_places(next, hist);
  values([&](hx_u32 t, int k, float v) {
    const hx_u32 c = hx_rowwise_chunk(t, k), shift = 16 * (c % 2);
    if (chosen(t, k, v)) {
      const hx_u32 slot = next[c / 2 * HX_BLOCK] >> shift & 0xFFFFu;
      next[c / 2 * HX_BLOCK] += 1u << shift;
      if (slot < f.top_k) {  // always: the chosen are at most top_k
        out_idx[slot] = hx_split_col(s, t, k);
        if (out_val) out_val[slot] = v;
      }
    }
  });
  return (hx_i32)(total < f.top_k ? total : f.top_k);
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
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 3);
  HX_SHARED(hx_u32, ext, 2 * HX_FLOOR_WAVES);
  HX_DYNAMIC_SHARED(hx_u64, e);
  const hx_u32 tid = hx_thread_x();
  const hx_u32 top_k = (hx_u32)p.top_k;
  const bool by_lengths = p.lengths != 0;
  const hx_u32 held = p.held < 0 ? 0u : (p.held > ROWWISE_HELD_TILES ? ROWWISE_HELD_TILES : (hx_u32)p.held);
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    const float* const x = p.logits + row * p.logits_stride;
    const hx_i32 n = hx_topk_row_extent(p.lengths, row, p.N);
    const HxSplitPart s = hx_split_part(p, row);  // parts = 1: the whole row
    Finish f{e, hist, scan, found, top_k};
    hx_i32* const out_idx = p.indices + row * p.indices_stride;
    float* const out_val = p.values ? p.values + row * p.values_stride : 0;
    // uniform: the row's
    const hx_i32 held_row = s.tiles > held ? HX_ROWWISE_NOT_HELD
                                           : hx_rowwise_held(p, s, x, n, by_lengths, f, hist, scan, found, ext,
                                                             out_idx, out_val);
    if (held_row == HX_ROWWISE_NOT_HELD) hx_rowwise_floored(p, s, x, n, by_lengths, f, hist, scan, found, ext);
    hx_u32 have = held_row >= 0 ? (hx_u32)held_row : 0u;
    if (held_row < 0) {  // uniform
      f.cut_to_top_k();
      have = f.write_in_order(0, n, p.sorted, [&](hx_u32 slot, hx_i64 i, hx_u32) {
        out_idx[slot] = (hx_i32)i;
        if (out_val) out_val[slot] = x[i];  // the logit itself: -0.0 keys as +0.0
      });
    }
    for (hx_u32 slot = have + tid; slot < top_k; slot += HX_BLOCK) {
      out_idx[slot] = -1;
      if (out_val) out_val[slot] = hx_bits_to_f32(0xFF800000u);
    }
    hx_barrier();  // the shared arrays are the next row's
  }
}
