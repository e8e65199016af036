// A step of the composed decode top-k (hipindexer.fp8_paged_mqa_topk,
// hipindexer/ops/paged_topk.py), which runs the logits op on one chunk of keys at
// a time and topk_logits over the running candidates followed by that chunk.
// Every target.
//
// The inputs of key chunk [c0, c0 + C) in the form the logits op takes, so that
// it reads only that chunk: each row's own length minus c0 ([B, next_n] lengths),
// and the chunk's columns of the block table (a table of its own, since the
// logits kernels read max_blocks as the table's row stride). A malformed length
// (negative, or next_n_lens outside 0..next_n) becomes -1 on every row it
// governs, so that the logits op raises its own flag and -infs those rows on
// every chunk, as it would on the whole row; table columns past the caller's
// table become -1, which the logits op flags only if a length reaches them, as
// it would have for the missing column itself.
#include "platform.h"
#include "hx_params.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_paged_topk_chunk(const HX_GRID_CONSTANT PagedTopkChunkParams p) {
  const hx_i64 rows = (hx_i64)p.B * p.next_n, entries = (hx_i64)p.B * p.chunk_blocks;
  const hx_i64 stride = (hx_i64)hx_grid_dim_x() * HX_BLOCK;
  for (hx_i64 t = (hx_i64)hx_block_x() * HX_BLOCK + hx_thread_x(); t < rows + entries; t += stride) {
    if (t < rows) {
      const hx_i64 b = t / p.next_n, j = t % p.next_n;
      hx_i64 len;
      bool bad;
      if (p.lens_per_row) {
        len = p.context_lens[t];
        bad = len < 0;
      } else {
        const hx_i64 ctx = p.context_lens[b];
        const hx_i64 live = p.next_n_lens ? (hx_i64)p.next_n_lens[b] : (hx_i64)p.next_n;
        bad = ctx < 0 || live < 0 || live > p.next_n;
        len = j < live ? ctx - live + j + 1 : 0;  // <= 0: a live row before the context's first key
      }
      const hx_i64 local = len - p.first_key;
      p.chunk_lens[t] = bad ? -1 : local > 0 ? (hx_i32)local : 0;
    } else {
      const hx_i64 e = t - rows, b = e / p.chunk_blocks, col = p.first_block + e % p.chunk_blocks;
      p.chunk_table[e] = col < p.max_blocks ? p.block_tables[b * p.max_blocks + col] : -1;
    }
  }
}
