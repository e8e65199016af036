// Runs the prefill kernels' ownership arithmetic (union window, hx_prefill_split)
// and records it: owner[(s * M + m) * N + n] = 1 + (n is computed, not only
// filled) for every column part s of row m's block owns. Tests sum the layers
// over s: each (m, n) must be owned exactly once, for any shape and split.
#include "index_math.h"
#include "hx_params.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_split_probe(const HX_GRID_CONSTANT SplitProbeParams p) {
  hx_grid_dependency_wait();
  const hx_i32 rb = p.reverse_rows ? (hx_i32)hx_grid_dim_x() - 1 - (hx_i32)hx_block_x() : (hx_i32)hx_block_x();
  const hx_i32 m0 = rb * p.rows_per_block, m1 = hx_min_i32(p.M, m0 + p.rows_per_block);
  hx_i32 lo = p.N, hi = 0;
  for (hx_i32 m = m0; m < m1; ++m) {
    const hx_range r = hx_clamp_window(p.ks[m], p.ke[m], p.N);
    if (r.hi > r.lo) { lo = hx_min_i32(lo, r.lo); hi = hx_max_i32(hi, r.hi); }
  }
  if (hi <= lo) lo = hi = 0;
  const hx_i32 s = (hx_i32)hx_block_y();
  const hx_prefill_part part = hx_prefill_split(lo, hi, p.N, p.tile, p.split, s);
  for (hx_i32 m = m0; m < m1; ++m) {
    hx_i32* row = p.owner + ((hx_i64)s * p.M + m) * p.N;
    for (hx_i32 n = part.fill_lo.lo + (hx_i32)hx_thread_x(); n < part.fill_lo.hi; n += HX_BLOCK) row[n] = 1;
    for (hx_i32 n = part.fill_hi.lo + (hx_i32)hx_thread_x(); n < part.fill_hi.hi; n += HX_BLOCK) row[n] = 1;
    for (hx_i32 n = part.work.lo + (hx_i32)hx_thread_x(); n < part.work.hi; n += HX_BLOCK) row[n] = 2;
  }
}
