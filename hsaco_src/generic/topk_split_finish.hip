// Split top-k, kernel 3 (common/topk_split.h), when the keep kernel does not select in place: one block per row
// (rows block_x, block_x + grid, ...) selects the row's top_k among its kept entries (hx_split_select_row). Where the
// keep kernel's blocks are one round, the rows' selections would all come at its end, two an SM at most; here they
// come a block an SM.
#include "topk_split.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_split_finish(const HX_GRID_CONSTANT TopkSplitParams p) {
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 3);
  HX_DYNAMIC_SHARED(hx_u64, e);
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    hx_split_select_row<HX_SMEM / 8>(p, row, hist, scan, found, e);
    hx_barrier();  // the shared arrays are the next row's
  }
}
