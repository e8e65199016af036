// dst[i] = value for i in [0, count): grid-stride, any grid size works.
#include "platform.h"
#include "hx_params.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_fill_u32(const HX_GRID_CONSTANT FillParams p) {
  hx_grid_dependency_wait();
  const hx_u64 stride = (hx_u64)hx_grid_dim_x() * HX_BLOCK;
  for (hx_u64 i = (hx_u64)hx_block_x() * HX_BLOCK + hx_thread_x(); i < p.count; i += stride)
    p.dst[i] = p.value;
}
