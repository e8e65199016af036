// Where the fused prefill top-k keeps a row's keys (hipindexer/ops/prefill_topk_fused.py): row m's regions, one a
// part of the filter's key split, share the row's entries [m parts region, (m + 1) parts region) of cand. The
// floors' launch (generic/prefill_topk_floor.hip) cuts them among the parts and writes each region's first entry,
// from the row's first, and its size to cand_base and cand_cap ([M, parts]); the filters that take that cut
// (generic, gfx950) and the finish read them here. The arrays are the workspace's, written earlier in the same call,
// and still checked against the row's entries: a workspace in a bad state costs a recompute, never an access outside
// the row's entries.
#pragma once
#include "platform.h"

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
