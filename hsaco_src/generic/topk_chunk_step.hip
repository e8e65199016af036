// A step of the composed prefill top-k (hipindexer.fp8_mqa_topk,
// hipindexer/ops/prefill_topk.py), after the logits kernel has written key chunk
// [base, base + width) of a group of rows into W past the candidates: one block
// per row (with cols) filters the chunk by the smallest candidate, selects the
// top_k of the candidates and the chunk's (kept) columns, merges them into the new
// candidates (or, on the last chunk, the outputs), and writes the next chunk's
// windows. Every target.
//
// The first chunk has no candidates: its row starts with them all invalid. The
// next chunk's windows are the row's own shifted by the chunk's first key in 64
// bits and clamped to [0, next_width]: a window that misses the chunk becomes
// empty, one that meets it keeps exactly its columns there. They are written last,
// read by the next logits launch on the stream.
#include "topk_chunks.h"

HX_INLINE HX_DEV hx_i32 hx_chunk_end(hx_i32 end, hx_i64 first_key, hx_i32 width) {
  const hx_i64 local = (hx_i64)end - first_key;
  return local < 0 ? 0 : local > width ? width : (hx_i32)local;
}

// At least three blocks of 256 an SM, or two of 512: ptxas then keeps the merge's slots in registers.
HX_KERNEL HX_LAUNCH_BOUNDS_NV(HX_BLOCK, HX_BLOCK > 256 ? 2 : 3) void hx_topk_chunk_step(const HX_GRID_CONSTANT TopkStepParams p) {
  hx_grid_dependency_wait();
  HX_STEP_SHARED;
  const hx_i32 tid = (hx_i32)hx_thread_x();
  hx_step_rows(p, p.cols, p.cols_stride, hist, scan, found, entries,
               [&](hx_i64 row, float* w, hx_i32* idx, const hx_i32* key, const float* val) {
    const hx_i32* const rel = p.last && p.rel ? p.rel + row : 0;
    float* const values = p.last && p.values ? p.values + row * p.values_stride : 0;
    HX_UNROLL
    for (int k = 0; k < HX_MERGE_SLOTS; ++k) {
      const hx_i32 s = tid + k * HX_BLOCK;
      if (s >= p.top_k) continue;
      idx[s] = hx_merge_index(key[k], rel);
      if (!p.last) w[s] = val[k];
      if (values) values[s] = val[k];
    }
    if (!p.last && tid == 0) {
      p.chunk_ks[row] = hx_chunk_end(p.ks[row], p.next_key, p.next_width);
      p.chunk_ke[row] = hx_chunk_end(p.ke[row], p.next_key, p.next_width);
    }
  });
}
