// Split top-k, kernel 1 of 3 (common/topk_split.h): a block a row takes the row's floor from its sample (runs of 8
// columns, one every 8 step columns: a step-th of the row) at rank r (common/topk_floor.h), writes it to the row's
// workspace and zeroes the row's count of kept keys. A row's three passes over its sample wait on their loads, and
// few rows are all the grid has: 512 threads a row, each pass a batch or two of loads.
#include "topk_split.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_split_floor(const HX_GRID_CONSTANT TopkSplitParams p) {
  hx_grid_dependency_wait();
  HX_FLOOR_SHARED;
  const hx_u32 tid = hx_thread_x();
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    const float* const x = p.logits + row * p.logits_stride;
    const hx_u32 floor = hx_split_row_floor(p, x, hx_topk_row_extent(p.lengths, row, p.N), hist, scan, found, ext);
    if (tid < 2) ((hx_u32*)hx_split_row(p, row))[tid] = tid == 0 ? floor : 0u;
    hx_barrier();  // the shared arrays are the next row's
  }
}
