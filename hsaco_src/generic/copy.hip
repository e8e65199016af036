// dst[i] = src[i] over n16 16-byte vectors, grid-stride: the benchmark's own
// bandwidth ceiling (read + write), built for every target.
#include "platform.h"
#include "hx_params.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_copy_u32x4(const HX_GRID_CONSTANT CopyParams p) {
  hx_grid_dependency_wait();
  const hx_u64 stride = (hx_u64)hx_grid_dim_x() * HX_BLOCK;
  for (hx_u64 i = (hx_u64)hx_block_x() * HX_BLOCK + hx_thread_x(); i < p.n16; i += stride) ((hx_u32x4*)p.dst)[i] = ((const hx_u32x4*)p.src)[i];
}
