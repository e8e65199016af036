// The split path of hipindexer.topk_logits (generic/topk_split_*.hip): a long row's floor taken from a sample of
// it, the row cut into `parts` column ranges so that rows x parts blocks fill the device and each read once to keep
// the keys at or above the floor, then one block per row selecting among the kept keys.
//
// A floor is an order key (hx_topk_key) at or below the r-th largest sampled key (common/topk_floor.h): about
// SAMPLE_MARGIN top_k of a long row's keys reach it. Any floor keeps the selection exact as long as the kept keys
// number at least top_k (the top_k-th key then reaches the floor, so every key of the top_k was kept, ties at the
// top_k-th included) or the floor is 0 (every key kept); a row that fails that, or whose kept keys pass `cap`, is
// selected by the single-block algorithm in the last kernel: exact, slower.
//
// The workspace (hipindexer.ops.topk lays it out; the kernels get its offsets) holds per row, at row * row_bytes:
//   [0, 4)               u32 floor
//   [4, 8)               u32 keys kept (counted past cap, stored up to it)
//   [cand_off, +8 cap)   u64 kept entries (hx_topk_entry), in no particular order
// The first kernel writes a row's floor and zeroes its count, so a call needs no zeroed workspace.
#pragma once
#include "topk_select.h"
#if defined(HX_BLOCK)
#include "topk_floor.h"
#endif

#define HX_SPLIT_VEC 4  // float4 loads in flight per thread per tile
#define HX_SPLIT_SLOTS (4 * HX_SPLIT_VEC + 2)  // a thread's columns per tile: its float4s, one head and one tail column

HX_INLINE HX_DEV hx_u8* hx_split_row(const TopkSplitParams& p, hx_i64 row) { return p.work + row * p.row_bytes; }

// The floor as a float threshold: a value v is kept (its key selectable and at or above the floor) exactly when
// v >= the threshold. Key order is float order (-0 and +0 one key, as they compare equal); a NaN fails every
// comparison; -inf is selectable only with lengths, and then keys lowest. A floor of 0 keeps every selectable value.
HX_INLINE HX_DEV float hx_split_floor_value(hx_u32 floor, bool by_lengths) {
  if (floor) return hx_topk_value(floor);
  return by_lengths ? hx_bits_to_f32(0xFF800000u) : -hx_bits_to_f32(0x7F7FFFFFu);
}

// Sample i of a row, at step s (columns i for s = 1): runs of 8 consecutive columns (a 32-byte sector of float32),
// one every 8 s columns; a row of n columns holds hx_split_samples(n, s) of them.
HX_INLINE HX_DEV hx_i64 hx_split_sample_col(hx_i64 i, hx_i64 s) { return (i / 8) * 8 * s + i % 8; }
HX_INLINE HX_DEV hx_i64 hx_split_samples(hx_i64 n, hx_i64 s) {
  const hx_i64 rest = n % (8 * s);
  return n / (8 * s) * 8 + (rest < 8 ? rest : 8);
}

#if defined(HX_BLOCK)
#define HX_SPLIT_FLOOR_BATCH 16  // samples a thread loads at once: a row of 131072 columns at top_k >= 2048 in one batch

// The floor of row x (n columns) from its sample at rank p.r, by the whole block (common/topk_floor.h's shared arrays).
HX_INLINE HX_DEV hx_u32 hx_split_row_floor(const TopkSplitParams& p, const float* x, hx_i64 n, hx_u32* hist,
                                           hx_u32* scan, hx_u32* found, hx_u32* ext) {
  return hx_block_floor_of<HX_SPLIT_FLOOR_BATCH>(
      (hx_i64)0, hx_split_samples(n, p.step), [&](hx_i64 i) { return x[hx_split_sample_col(i, p.step)]; },
      p.lengths != 0, (hx_u32)p.r, hist, scan, found, ext);
}
#endif

// Block item b = row * parts + part covers columns [lo, hi) of its row's
// extent; their float4 body starts at the first 16-byte aligned column, with
// at most 3 columns before it (head) and 3 after (tail), taken in tile 0.
struct HxSplitPart {
  const float* x;   // the row
  hx_i64 row;
  hx_i32 lo, hi, body;  // columns, below N <= INT32_MAX
  hx_i32 nvec;          // float4s in the body
  hx_u32 tiles;         // >= 1
};

HX_INLINE HX_DEV HxSplitPart hx_split_part(const TopkSplitParams& p, hx_i64 item) {
  HxSplitPart s;
  s.row = item / p.parts;
  s.x = p.logits + s.row * p.logits_stride;
  const hx_i64 n = hx_topk_row_extent(p.lengths, s.row, p.N);
  const hx_i64 lo = (item % p.parts) * (hx_i64)p.part_len;
  hx_i64 hi = lo + p.part_len < n ? lo + p.part_len : n;
  if (hi < lo) hi = lo;
  const hx_i64 misaligned = (hx_i64)((((hx_u64)(s.x + lo)) >> 2) & 3u);
  hx_i64 head = (4 - misaligned) & 3;
  if (head > hi - lo) head = hi - lo;
  s.lo = (hx_i32)lo;
  s.hi = (hx_i32)hi;
  s.body = (hx_i32)(lo + head);
  s.nvec = (s.hi - s.body) / 4;
  const hx_i32 per_tile = HX_BLOCK * HX_SPLIT_VEC;
  s.tiles = (hx_u32)((s.nvec + per_tile - 1) / per_tile);
  if (s.tiles == 0u) s.tiles = 1u;
  return s;
}

// The column of this thread's slot e of tile t, -1 for none: slots 4 j .. 4 j + 3 the float4 j, slot 4 HX_SPLIT_VEC a
// head column, the next a tail column (tile 0 only).
HX_INLINE HX_DEV hx_i32 hx_split_col(const HxSplitPart& s, hx_u32 t, int e) {
  const hx_i32 tid = (hx_i32)hx_thread_x();
  if (e < 4 * HX_SPLIT_VEC) {
    const hx_i32 v = ((hx_i32)t * HX_SPLIT_VEC + e / 4) * HX_BLOCK + tid;
    return v < s.nvec ? s.body + 4 * v + e % 4 : -1;
  }
  const hx_i32 head = s.body - s.lo, tail0 = s.body + 4 * s.nvec;
  if (e == 4 * HX_SPLIT_VEC) return (t == 0u && tid < head) ? s.lo + tid : -1;
  return (t == 0u && tid < s.hi - tail0) ? tail0 + tid : -1;
}

// This thread's values of tile t (a slot without a column holds a NaN, whose key is 0: never selectable), loaded
// with every float4 in flight before any is used. Nothing outside [lo, hi) is read.
HX_INLINE HX_DEV void hx_split_load(const HxSplitPart& s, hx_u32 t, float* val) {
  const hx_u32 tid = hx_thread_x();
  HX_UNROLL
  for (int j = 0; j < HX_SPLIT_VEC; ++j) {
    const hx_i32 v = ((hx_i32)t * HX_SPLIT_VEC + j) * HX_BLOCK + (hx_i32)tid;
    if (v < s.nvec) {
      const hx_f32x4 q = *(const hx_f32x4*)(s.x + s.body + 4 * v);
      val[4 * j] = q.x;
      val[4 * j + 1] = q.y;
      val[4 * j + 2] = q.z;
      val[4 * j + 3] = q.w;
    } else {
      HX_UNROLL
      for (int e = 0; e < 4; ++e) val[4 * j + e] = hx_bits_to_f32(0x7FC00000u);
    }
  }
  HX_UNROLL
  for (int e = 4 * HX_SPLIT_VEC; e < HX_SPLIT_SLOTS; ++e) {
    const hx_i32 c = hx_split_col(s, t, e);
    val[e] = c >= 0 ? s.x[c] : hx_bits_to_f32(0x7FC00000u);
  }
}
