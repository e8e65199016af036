// A step of the composed decode top-k (hipindexer.fp8_paged_mqa_topk,
// hipindexer/ops/paged_topk.py), after the logits op has written key chunk
// [base, base + width) of every row into W past the candidates: one block per row
// selects the top_k of the candidates and the chunk, merges them into the new
// candidates (on the last chunk: the indices, values and cache slots asked for),
// and writes the row's length for the next chunk and, from a sequence's first
// row, that sequence's columns of the block table for it. Every target.
//
// The first chunk has no candidates: its row starts with them all invalid. The
// next chunk's inputs are in the form the logits op takes, so that it reads only
// that chunk: the row's own length minus the chunk's first key, and the chunk's
// columns of the block table (a table of its own, since the logits kernels read
// max_blocks as the table's row stride). A malformed length (negative, or
// next_n_lens outside 0..next_n) becomes -1 on every row it governs, so that the
// logits op raises its own flag and -infs those rows on every chunk, as it would on
// the whole row; table columns past the caller's table become -1, which the logits
// op flags only if a length reaches them, as it would have for the missing column
// itself. Both are written last, read by the next logits launch on the stream.
// Its sorts take every step through shared memory: the register steps (topk_select.h) would take this kernel past
// the VGPRs of three blocks a gfx950 unit.
#define HX_TOPK_SORT_BY_WAVES 0
#include "topk_chunks.h"
#include "paged_cache.h"

// Row (b, j)'s key count from key first_key on (0 when none; -1 for a malformed length).
HX_INLINE HX_DEV hx_i32 hx_chunk_length(const PagedTopkStepParams& p, hx_i64 row, hx_i64 first_key) {
  const hx_i64 b = row / p.next_n, j = row % p.next_n;
  hx_i64 len;
  bool bad;
  if (p.lens_per_row) {
    len = p.context_lens[row];
    bad = len < 0;
  } else {
    const hx_i64 ctx = p.context_lens[b];
    const hx_i64 live = p.next_n_lens ? (hx_i64)p.next_n_lens[b] : (hx_i64)p.next_n;
    bad = ctx < 0 || live < 0 || live > p.next_n;
    len = j < live ? ctx - live + j + 1 : 0;  // <= 0: a live row before the context's first key
  }
  const hx_i64 local = len - first_key;
  return bad ? -1 : local > 0 ? (hx_i32)local : 0;
}

// At least three blocks of 256 an SM, or two of 512: ptxas then keeps the merge's slots in registers.
HX_KERNEL HX_LAUNCH_BOUNDS_NV(HX_BLOCK, HX_BLOCK > 256 ? 2 : 3) void hx_paged_topk_step(const HX_GRID_CONSTANT PagedTopkStepParams p) {
  hx_grid_dependency_wait();
  HX_STEP_SHARED;
  const hx_i32 tid = (hx_i32)hx_thread_x();
  hx_step_rows(p, (hx_i32*)0, 0, hist, scan, found, entries,
               [&](hx_i64 row, float* w, hx_i32* idx, const hx_i32* key, const float* val) {
    const hx_i64 b = row / p.next_n;
    HX_UNROLL
    for (int k = 0; k < HX_MERGE_SLOTS; ++k) {
      const hx_i32 s = tid + k * HX_BLOCK;
      if (s >= p.top_k) continue;
      const hx_i64 n = key[k];
      idx[s] = (hx_i32)n;
      if (!p.last) {
        w[s] = val[k];
        continue;
      }
      if (p.values) p.values[row * p.values_stride + s] = val[k];
      if (p.slots)
        p.slots[row * p.slots_stride + s] =
            hx_cache_slot(p.block_tables + b * p.max_blocks, p.max_blocks, p.block_size, p.num_blocks, n);
    }
    if (!p.last) {
      if (tid == 0) p.chunk_lens[row] = hx_chunk_length(p, row, p.next_key);
      if (row % p.next_n == 0) {
        const hx_i64 first_block = p.next_key / p.block_size;
        for (hx_i32 e = tid; e < p.chunk_blocks; e += HX_BLOCK) {
          const hx_i64 col = first_block + e;
          p.chunk_table[b * p.chunk_blocks + e] = col < p.max_blocks ? p.block_tables[b * p.max_blocks + col] : -1;
        }
      }
    }
  });
}
