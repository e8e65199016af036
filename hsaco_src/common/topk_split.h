// The split path of hipindexer.topk_logits (generic/topk_split_*.hip): a long
// row cut into `parts` column ranges so that rows x parts blocks fill the
// device, each read at most twice, then one block per row finishing over the
// few entries that survive. Every count is an integer atomic (the same in any
// order); every order comes from a sort of unique (key, index) entries.
//
// The workspace (hipindexer.ops.topk lays it out; the kernels get its offsets)
// holds per row, at row * row_bytes:
//   [0, 8192)            u32 hist[2048]: valid keys by their top digit (key >> 21)
//   [8192, 8200)         u32 count[2]: certain entries, candidates written
//   [cert_off, +8 top_k) u64 certain entries: digit above the cut digit d1
//   [cand_off, +8 cap)   u64 candidates: digit d1
// The last kernel zeroes hist and count of every row it finishes, so the next
// call (or a graph replay) starts from zeros without a memset.
#pragma once
#include "topk_select.h"

#define HX_SPLIT_VEC 4  // float4 loads in flight per thread per tile
#define HX_SPLIT_SLOTS (4 * HX_SPLIT_VEC + 2)  // a thread's columns per tile: its float4s, one head and one tail column

enum { HX_CUT_ALL = 0, HX_CUT_SPLIT = 1, HX_CUT_OVERFLOW = 2 };

// Where a row's top_k-th key falls among the top digits, the same in every
// block that computes it, from the row's finished histogram:
//   ALL: V <= top_k valid keys, every one of them selected (above = V);
//   SPLIT: keys of digit > digit (above of them, < top_k) are selected, the
//          top_k - above largest of the `count` keys of digit `digit` too;
//   OVERFLOW: as SPLIT, but count > cap: the candidates do not fit the
//          workspace and the row is left to the single-block algorithm.
struct HxTopkCut {
  hx_u32 mode, digit, above, count;
};

HX_INLINE HX_DEV HxTopkCut hx_topk_cut(const hx_u32* hist, hx_u32 top_k, hx_u32 cap, hx_u32* scan, hx_u32* found) {
  HxTopkCut c;
  const hx_u32 total = hx_topk_find_bin(hist, HX_TOPK_MAX_BINS, top_k, scan, found);
  if (total <= top_k) {
    c.mode = HX_CUT_ALL;
    c.digit = 0u;  // no valid key has digit 0 (key 0 is "invalid"), so digit > 0 is every valid key
    c.above = total;
    c.count = 0u;
  } else {
    c.digit = found[0];
    c.above = top_k - found[1];
    c.count = hist[c.digit];
    c.mode = c.count > cap ? HX_CUT_OVERFLOW : HX_CUT_SPLIT;
  }
  hx_barrier();  // found is read; the caller may reuse it
  return c;
}

HX_INLINE HX_DEV hx_u8* hx_split_row(const TopkSplitParams& p, hx_i64 row) { return p.work + row * p.row_bytes; }

// Block item b = row * parts + part covers columns [lo, hi) of its row's
// extent; their float4 body starts at the first 16-byte aligned column, with
// at most 3 columns before it (head) and 3 after (tail), taken in tile 0.
struct HxSplitPart {
  const float* x;  // the row
  hx_i64 row, lo, hi, body;
  hx_i64 nvec;     // float4s in the body
  hx_u32 tiles;    // >= 1
};

HX_INLINE HX_DEV HxSplitPart hx_split_part(const TopkSplitParams& p, hx_i64 item) {
  HxSplitPart s;
  s.row = item / p.parts;
  s.x = p.logits + s.row * p.logits_stride;
  const hx_i64 n = hx_topk_row_extent(p.lengths, s.row, p.N);
  s.lo = (item % p.parts) * (hx_i64)p.part_len;
  s.hi = s.lo + p.part_len < n ? s.lo + p.part_len : n;
  if (s.hi < s.lo) s.hi = s.lo;
  const hx_i64 misaligned = (hx_i64)((((hx_u64)(s.x + s.lo)) >> 2) & 3u);
  hx_i64 head = (4 - misaligned) & 3;
  if (head > s.hi - s.lo) head = s.hi - s.lo;
  s.body = s.lo + head;
  s.nvec = (s.hi - s.body) / 4;
  const hx_i64 per_tile = (hx_i64)HX_BLOCK * HX_SPLIT_VEC;
  s.tiles = (hx_u32)((s.nvec + per_tile - 1) / per_tile);
  if (s.tiles == 0u) s.tiles = 1u;
  return s;
}

// This thread's columns of tile t (col -1: none), loaded with every float4 in
// flight before any is used. Nothing outside [lo, hi) is read.
HX_INLINE HX_DEV void hx_split_load(const HxSplitPart& s, hx_u32 t, float* val, hx_i32* col) {
  const hx_u32 tid = hx_thread_x();
  HX_UNROLL
  for (int j = 0; j < HX_SPLIT_VEC; ++j) {
    const hx_i64 v = ((hx_i64)t * HX_SPLIT_VEC + j) * HX_BLOCK + tid;
    if (v < s.nvec) {
      const hx_f32x4 q = *(const hx_f32x4*)(s.x + s.body + 4 * v);
      val[4 * j] = q.x;
      val[4 * j + 1] = q.y;
      val[4 * j + 2] = q.z;
      val[4 * j + 3] = q.w;
      const hx_i32 c = (hx_i32)(s.body + 4 * v);
      col[4 * j] = c;
      col[4 * j + 1] = c + 1;
      col[4 * j + 2] = c + 2;
      col[4 * j + 3] = c + 3;
    } else {
      HX_UNROLL
      for (int e = 0; e < 4; ++e) col[4 * j + e] = -1;
    }
  }
  const hx_i64 head = s.body - s.lo, tail0 = s.body + 4 * s.nvec;
  col[4 * HX_SPLIT_VEC] = (t == 0u && (hx_i64)tid < head) ? (hx_i32)(s.lo + tid) : -1;
  col[4 * HX_SPLIT_VEC + 1] = (t == 0u && (hx_i64)tid < s.hi - tail0) ? (hx_i32)(tail0 + tid) : -1;
  val[4 * HX_SPLIT_VEC] = col[4 * HX_SPLIT_VEC] >= 0 ? s.x[col[4 * HX_SPLIT_VEC]] : 0.f;
  val[4 * HX_SPLIT_VEC + 1] = col[4 * HX_SPLIT_VEC + 1] >= 0 ? s.x[col[4 * HX_SPLIT_VEC + 1]] : 0.f;
}
