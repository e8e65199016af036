// Index math shared by every target's kernels and by host code (CPU emulator,
// tests): windows, splits, causal bounds, 64-bit offsets. int32 inputs over
// their whole range never overflow here.
#pragma once
#include "platform.h"

struct hx_range {
  hx_i32 lo, hi;  // [lo, hi); always 0 <= lo <= hi <= n when made by hx_clamp_window
};

HX_INLINE HX_HD hx_i32 hx_min_i32(hx_i32 a, hx_i32 b) { return a < b ? a : b; }
HX_INLINE HX_HD hx_i32 hx_max_i32(hx_i32 a, hx_i32 b) { return a > b ? a : b; }
HX_INLINE HX_HD hx_i32 hx_range_len(hx_range r) { return r.hi > r.lo ? r.hi - r.lo : 0; }

// Row window [ks, ke) clamped to [0, n), n >= 0. ks < 0, ke > n and ke <= ks
// are all legal; an empty window comes back as lo == hi (so hi - lo is a
// length, never negative), with lo also clamped into [0, n].
HX_INLINE HX_HD hx_range hx_clamp_window(hx_i32 ks, hx_i32 ke, hx_i32 n) {
  hx_range r;
  r.lo = hx_min_i32(hx_max_i32(ks, 0), n);
  r.hi = hx_max_i32(hx_min_i32(ke, n), r.lo);
  return r;
}

// Part s of S near-equal parts of [t0, t1), floor-based:
//   [t0 + floor(s*len/S), t0 + floor((s+1)*len/S)).
// Parts are contiguous, cover [t0, t1) exactly, differ in length by at most
// one, and are all non-empty when len >= S (the shorter ones come first).
// 64-bit products: s*len overflows int32 for long contexts.
HX_INLINE HX_HD hx_range hx_split_part(hx_i32 t0, hx_i32 t1, hx_i32 parts, hx_i32 s) {
  hx_i64 len = t1 > t0 ? (hx_i64)t1 - t0 : 0;
  hx_range r;
  r.lo = (hx_i32)(t0 + (hx_i64)s * len / parts);
  r.hi = (hx_i32)(t0 + ((hx_i64)s + 1) * len / parts);
  return r;
}

HX_INLINE HX_HD hx_i32 hx_ceil_div(hx_i32 a, hx_i32 b) { return (hx_i32)(((hx_i64)a + b - 1) / b); }

// Decode causal bound for query row j (0-based) of a sequence with
// context_len tokens of which `live` are this step's queries: column n is
// valid iff n <= context_len - live + j and n < max_model_len. Returns the
// number of valid columns [0, count), clamped to [0, max_model_len].
HX_INLINE HX_HD hx_i32 hx_decode_valid_cols(hx_i32 context_len, hx_i32 live, hx_i32 j, hx_i32 max_model_len) {
  hx_i64 count = (hx_i64)context_len - live + j + 1;
  if (count < 0) count = 0;
  if (count > max_model_len) count = max_model_len;
  return (hx_i32)count;
}

// Element offsets in 64 bits: any tensor past 2 GiB needs them, and int32
// row * stride is the classic silent-corruption bug.
HX_INLINE HX_HD hx_i64 hx_offset2(hx_i64 i, hx_i64 stride_i, hx_i64 j) { return i * stride_i + j; }
HX_INLINE HX_HD hx_i64 hx_offset3(hx_i64 i, hx_i64 stride_i, hx_i64 j, hx_i64 stride_j, hx_i64 k) {
  return i * stride_i + j * stride_j + k;
}
template <typename T>
HX_INLINE HX_HD T* hx_ptr_add_bytes(T* p, hx_i64 bytes) {
  return (T*)((char*)p + bytes);
}

// Work of one CTA of a prefill row block under a key split.
// The row block's rows have clamped windows whose union is [lo, hi) (lo == hi
// when every row is empty). Keys [lo, hi) are cut at tile granularity into
// `parts` contiguous pieces; the columns outside the union, [0, lo) and
// [hi, n), are cut into `parts` pieces too, so part s owns one piece of each:
// every column of the row block belongs to exactly one part, whether it is
// computed or only filled with -inf.
struct hx_prefill_part {
  hx_range work;    // keys to compute (rows outside their own window still get -inf here)
  hx_range fill_lo; // a piece of [0, lo)
  hx_range fill_hi; // a piece of [hi, n)
};

// Part s's ownership once its tiles [ta, tb) of the union are chosen: their keys clipped to [lo, hi), and its share
// of each fill piece.
HX_INLINE HX_HD hx_prefill_part hx_prefill_part_of_tiles(hx_i32 lo, hx_i32 hi, hx_i32 n, hx_i32 tile, hx_i32 parts,
                                                         hx_i32 s, hx_i64 ta, hx_i64 tb) {
  hx_prefill_part p;
  p.work.lo = hx_min_i32(hx_max_i32(lo, (hx_i32)(ta * tile)), hi);
  p.work.hi = hx_max_i32(hx_min_i32(hi, (hx_i32)(tb * tile)), p.work.lo);
  p.fill_lo = hx_split_part(0, lo, parts, s);
  p.fill_hi = hx_split_part(hi, n, parts, s);
  return p;
}

HX_INLINE HX_HD hx_prefill_part hx_prefill_split(hx_i32 lo, hx_i32 hi, hx_i32 n, hx_i32 tile, hx_i32 parts,
                                                 hx_i32 s) {
  const hx_i32 t0 = lo / tile, t1 = hx_ceil_div(hi, tile);
  const hx_range t = hx_split_part(t0, t1, parts, s);
  return hx_prefill_part_of_tiles(lo, hi, n, tile, parts, s, t.lo, t.hi);
}

// The same ownership with the union's tiles cut in whole quanta of q = ceil(tiles / parts) from its first tile
// (part s: tiles [t0 + s q, t0 + (s + 1) q) within the union; the last parts shorter or empty). The longest part is
// the balanced cut's, and unions whose tile counts give the same q start every part at the same key: a kernel can
// stage a part's first keys for the union [0, n) before it has read the windows, and be right for a union from key 0
// that ends within the row's last `parts` tiles (gfx950/mqa_logits_mfma.hip).
HX_INLINE HX_HD hx_prefill_part hx_prefill_split_quanta(hx_i32 lo, hx_i32 hi, hx_i32 n, hx_i32 tile, hx_i32 parts,
                                                        hx_i32 s) {
  const hx_i64 t0 = lo / tile, t1 = hx_ceil_div(hi, tile);
  const hx_i64 q = t1 > t0 ? (t1 - t0 + parts - 1) / parts : 0;
  const hx_i64 ta = t0 + s * q < t1 ? t0 + s * q : t1, tb = ta + q < t1 ? ta + q : t1;
  return hx_prefill_part_of_tiles(lo, hi, n, tile, parts, s, ta, tb);
}
