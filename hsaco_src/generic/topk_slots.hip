// The cache slots of a decode top-k's selection: slots[r][j] = block_tables[b][n / block_size] * block_size +
// n % block_size for the key n = indices[r][j] of row r (sequence b = r / next_n), -1 where n is -1. A selected key
// had a finite logit, so its table column exists and names a block of the cache; both are checked anyway, and a key
// whose column or block id is out of range gets -1. Grid-stride over rows x top_k, any grid size.
#include "platform.h"
#include "hx_params.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_slots(const HX_GRID_CONSTANT TopkSlotsParams p) {
  const hx_u64 count = (hx_u64)p.rows * (hx_u64)p.top_k;
  const hx_u64 stride = (hx_u64)hx_grid_dim_x() * HX_BLOCK;
  for (hx_u64 e = (hx_u64)hx_block_x() * HX_BLOCK + hx_thread_x(); e < count; e += stride) {
    const hx_i64 row = (hx_i64)(e / (hx_u64)p.top_k), j = (hx_i64)(e % (hx_u64)p.top_k);
    const hx_i64 n = p.indices[row * p.indices_stride + j];
    const hx_i64 col = n >= 0 ? n / p.block_size : 0;
    const hx_i64 id = n >= 0 && col < p.max_blocks ? (hx_i64)p.block_tables[row / p.next_n * p.max_blocks + col] : -1;
    const bool ok = id >= 0 && id < p.num_blocks;
    p.slots[row * p.slots_stride + j] = ok ? (hx_i32)(id * p.block_size + n % p.block_size) : -1;
  }
}
