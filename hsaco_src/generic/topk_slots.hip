// The cache slots of a decode top-k's selection (hx_cache_slot): slots[r][j] for the key n = indices[r][j] of row r,
// sequence b = r / next_n. Grid-stride over rows x top_k, any grid size.
#include "platform.h"
#include "hx_params.h"
#include "paged_cache.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_slots(const HX_GRID_CONSTANT TopkSlotsParams p) {
  hx_grid_dependency_wait();
  const hx_u64 count = (hx_u64)p.rows * (hx_u64)p.top_k;
  const hx_u64 stride = (hx_u64)hx_grid_dim_x() * HX_BLOCK;
  for (hx_u64 e = (hx_u64)hx_block_x() * HX_BLOCK + hx_thread_x(); e < count; e += stride) {
    const hx_i64 row = (hx_i64)(e / (hx_u64)p.top_k), j = (hx_i64)(e % (hx_u64)p.top_k);
    const hx_i64 n = p.indices[row * p.indices_stride + j];
    p.slots[row * p.slots_stride + j] =
        hx_cache_slot(p.block_tables + row / p.next_n * p.max_blocks, p.max_blocks, p.block_size, p.num_blocks, n);
  }
}
