// A step of the composed prefill top-k (hipindexer.fp8_mqa_topk,
// hipindexer/ops/prefill_topk.py): the windows of key chunk [c0, c0 + width) in
// the form the logits op takes, so that it reads only that chunk's keys. Both ends
// are shifted by c0 in 64 bits and clamped to [0, width]: a window that misses
// the chunk becomes empty (ke' <= ks') and one that meets it keeps exactly its
// columns there. Every target.
#include "platform.h"
#include "hx_params.h"

HX_INLINE HX_DEV hx_i32 hx_chunk_end(hx_i32 end, hx_i64 first_key, hx_i32 width) {
  const hx_i64 local = (hx_i64)end - first_key;
  return local < 0 ? 0 : local > width ? width : (hx_i32)local;
}

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_prefill_topk_chunk(const HX_GRID_CONSTANT PrefillTopkChunkParams p) {
  const hx_i64 stride = (hx_i64)hx_grid_dim_x() * HX_BLOCK;
  for (hx_i64 m = (hx_i64)hx_block_x() * HX_BLOCK + hx_thread_x(); m < p.rows; m += stride) {
    p.chunk_ks[m] = hx_chunk_end(p.ks[m], p.first_key, p.width);
    p.chunk_ke[m] = hx_chunk_end(p.ke[m], p.first_key, p.width);
  }
}
