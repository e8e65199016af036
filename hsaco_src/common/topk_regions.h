// Where the fused prefill top-k keeps a row's keys (hipindexer/ops/prefill_topk_fused.py): row m's regions, one a
// part of the filter's key split, share the row's entries [m parts region, (m + 1) parts region) of cand. The
// floors' launch (generic/prefill_topk_floor.hip) cuts them among the parts and writes each region's first entry,
// from the row's first, and its size to cand_base and cand_cap ([M, parts]); the filters and the finish read them
// here. The arrays are the workspace's, written earlier in the same call, and still checked against the row's
// entries: a workspace in a bad state costs a recompute, never an access outside the row's entries.
#pragma once
#include "index_math.h"

struct hx_region {
  hx_i64 base;  // the region's first entry, from cand
  hx_u32 cap;   // its entries
};

// The region of row m's part j (P: the parameters of a launch that holds cand_base, cand_cap and region); empty
// where the table points outside the row's entries.
template <class P>
HX_INLINE HX_DEV hx_region hx_topk_region(const P& p, hx_i64 m, hx_i32 parts, hx_i32 j) {
  const hx_i64 pool = (hx_i64)parts * p.region, slot = m * parts + j;
  const hx_i64 at = p.cand_base[slot], cap = p.cand_cap[slot];
  const bool ok = at <= pool && cap <= pool - at;
  return {m * pool + (ok ? at : 0), ok ? (hx_u32)cap : 0u};
}

#if defined(HX_BLOCK)
#include "topk_floor.h"

// The filter's key split of row m's row block, as the filter makes it: the union [lo, hi) of the windows of the
// block's rows (rows_per_block of them from a multiple of it, up to M), cut in `parts` (quanta:
// hx_prefill_split_quanta, gfx950; else hx_prefill_split, sm_90a and generic).
struct hx_filter_split {
  hx_i32 lo, hi, N, tile, parts;
  bool quanta;
  HX_MEMBER HX_DEV hx_range keys(hx_i32 j) const {  // the keys part j computes
    return (quanta ? hx_prefill_split_quanta(lo, hi, N, tile, parts, j) : hx_prefill_split(lo, hi, N, tile, parts, j))
        .work;
  }
};
// By the whole block, every thread getting it (ext: 2 words a wave, free again after the caller's next meeting).
template <class P>
HX_INLINE HX_DEV hx_filter_split hx_filter_split_of(const P& p, hx_i64 m, hx_i32 parts, hx_u32* ext) {
  const hx_i64 m0 = m - m % p.rows_per_block, m1 = m0 + p.rows_per_block < p.M ? m0 + p.rows_per_block : p.M;
  hx_u32 lo = (hx_u32)p.N, hi = 0u;
  for (hx_i64 i = m0 + hx_thread_x(); i < m1; i += HX_BLOCK) {
    const hx_range u = hx_clamp_window(p.ks[i], p.ke[i], p.N);
    lo = u.hi > u.lo && (hx_u32)u.lo < lo ? (hx_u32)u.lo : lo;
    hi = u.hi > u.lo && (hx_u32)u.hi > hi ? (hx_u32)u.hi : hi;
  }
  hx_floor_extremes(lo, hi, ext);
  if (hi <= lo) lo = hi = 0u;
  return {(hx_i32)lo, (hx_i32)hi, p.N, p.tile, parts, p.quanta != 0};
}
#endif
