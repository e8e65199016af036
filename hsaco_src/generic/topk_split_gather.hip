// Split top-k, kernel 2 of 3 (common/topk_split.h): every block of a row finds
// the row's cut from its finished histogram (the same cut in each: the same
// counts, the same scan), re-reads its part and appends, per tile, its certain
// entries (digit above the cut digit) and candidates (the cut digit) to the
// row's lists in the workspace: one shared atomic per thread for its place in
// the tile, one global atomic per tile and list for the tile's place in the
// row. The lists' order is arbitrary; the last kernel sorts them. A row whose
// candidates would not fit (OVERFLOW) is skipped: the last kernel takes it
// whole.
#include "topk_split.h"

HX_KERNEL HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 4) void hx_topk_split_gather(const HX_GRID_CONSTANT TopkSplitParams p) {
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 2);
  HX_SHARED(hx_u32, tile, 4);  // this tile's certain entries and candidates, then their first slots in the row
  const hx_u32 tid = hx_thread_x();
  const bool by_lengths = p.lengths != 0;
  const hx_i64 items = (hx_i64)p.rows * p.parts;
  for (hx_i64 item = hx_block_x(); item < items; item += hx_grid_dim_x()) {
    const HxSplitPart s = hx_split_part(p, item);
    hx_u8* const w = hx_split_row(p, s.row);
    hx_u32* const row_count = (hx_u32*)w + HX_TOPK_MAX_BINS;
    hx_u64* const cert = (hx_u64*)(w + p.cert_off);
    hx_u64* const cand = (hx_u64*)(w + p.cand_off);
    const HxTopkCut cut = hx_topk_cut((const hx_u32*)w, (hx_u32)p.top_k, (hx_u32)p.cap, scan, found);
    if (cut.mode == HX_CUT_OVERFLOW) continue;  // uniform: every thread has the same cut
    for (hx_u32 t = 0; t < s.tiles; ++t) {
      float val[HX_SPLIT_SLOTS];
      hx_i32 col[HX_SPLIT_SLOTS];
      hx_split_load(s, t, val, col);
      if (tid < 2u) tile[tid] = 0u;
      hx_barrier();
      hx_u32 n_cert = 0, n_cand = 0;
      HX_UNROLL
      for (int e = 0; e < HX_SPLIT_SLOTS; ++e) {
        const hx_u32 k = hx_topk_key(val[e], by_lengths);
        const hx_u32 d = k >> 21;
        const bool valid = col[e] >= 0 && k != 0u;
        n_cert += valid && d > cut.digit;
        n_cand += valid && cut.mode == HX_CUT_SPLIT && d == cut.digit;
      }
      const hx_u32 my_cert = n_cert ? hx_atomic_add_u32(&tile[0], n_cert) : 0u;
      const hx_u32 my_cand = n_cand ? hx_atomic_add_u32(&tile[1], n_cand) : 0u;
      hx_barrier();
      if (tid == 0u) {
        tile[2] = tile[0] ? hx_atomic_add_u32(&row_count[0], tile[0]) : 0u;
        tile[3] = tile[1] ? hx_atomic_add_u32(&row_count[1], tile[1]) : 0u;
      }
      hx_barrier();
      hx_u32 at_cert = tile[2] + my_cert, at_cand = tile[3] + my_cand;
      HX_UNROLL
      for (int e = 0; e < HX_SPLIT_SLOTS; ++e) {
        const hx_u32 k = hx_topk_key(val[e], by_lengths);
        const hx_u32 d = k >> 21;
        if (col[e] < 0 || k == 0u) continue;
        // the bounds only guard the workspace: the histogram says these counts fit
        if (d > cut.digit) {
          if (at_cert < (hx_u32)p.top_k) cert[at_cert] = hx_topk_entry(k, col[e]);
          ++at_cert;
        } else if (cut.mode == HX_CUT_SPLIT && d == cut.digit) {
          if (at_cand < (hx_u32)p.cap) cand[at_cand] = hx_topk_entry(k, col[e]);
          ++at_cand;
        }
      }
      hx_barrier();  // tile is reset for the next tile
    }
  }
}
