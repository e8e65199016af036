// Reads src[0, n16) as 16-byte vectors, grid-stride, and writes one word per
// block (the XOR of everything it read, so no read can be dropped): the
// benchmark's read ceiling, which a memory-bound decode kernel is judged by
// (the copy kernel also pays for writing as much as it reads).
#include "platform.h"
#include "hx_params.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_stream_read_u32x4(const HX_GRID_CONSTANT StreamReadParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_u32, partial, HX_BLOCK);
  const hx_u64 stride = (hx_u64)hx_grid_dim_x() * HX_BLOCK;
  const hx_u32x4* src = (const hx_u32x4*)p.src;
  hx_u32 acc = 0;
  for (hx_u64 i = (hx_u64)hx_block_x() * HX_BLOCK + hx_thread_x(); i < p.n16; i += stride) {
    const hx_u32x4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  partial[hx_thread_x()] = acc;
  hx_barrier();
  if (hx_thread_x() == 0) {
    hx_u32 x = 0;
    for (int i = 0; i < HX_BLOCK; ++i) x ^= partial[i];
    p.out[hx_block_x()] = x;
  }
}
