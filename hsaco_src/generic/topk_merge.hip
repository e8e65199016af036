// A step of the composed top-k ops (hipindexer.fp8_paged_mqa_topk and
// fp8_mqa_topk, hipindexer/ops/paged_topk.py and prefill_topk.py), which run a
// logits op on one chunk of keys at a time and topk_logits over the running
// candidates followed by that chunk. Every target.
//
// topk_logits selected in W, the candidates' values (columns [0, lead))
// followed by the chunk's logits; W-space index i maps to the global key
// i < lead ? cand[i] : base + i - lead (-1 stays -1). The new candidates are
// written over the old ones in place, so a row is merged in two phases across a
// barrier: every thread first reads what its slots need into registers, then
// writes. Candidates are kept in ascending global order (topk_logits' unsorted
// output is index order), so W-space order is global order and ties across
// chunks still go to the lower key. rel (a one-chunk prefill call with
// relative=True) shifts the indices written (hx_merge_index).
#include "topk_chunks.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_merge(const HX_GRID_CONSTANT TopkMergeParams p) {
  const hx_i32 tid = (hx_i32)hx_thread_x();
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    hx_i32* const idx = p.indices + row * p.indices_stride;
    float* const w = p.w ? p.w + row * p.w_stride : 0;
    hx_i32 key[HX_MERGE_SLOTS];
    float val[HX_MERGE_SLOTS];
    if (p.ws) {
      hx_merge_gather(p.ws + row * p.ws_stride, idx, w, 0, p.lead, p.base, p.top_k, key, val);
    } else {  // the indices already are global keys (a one-chunk call that only wants its slots, or relative ones)
      HX_UNROLL
      for (int k = 0; k < HX_MERGE_SLOTS; ++k) {
        const hx_i32 s = tid + k * HX_BLOCK;
        key[k] = s < p.top_k ? idx[s] : -1;
      }
    }
    hx_barrier();  // every read of the old candidates is done
    const hx_i64 b = row / p.next_n;
    const hx_i32* const rel = p.rel ? p.rel + row : 0;
    HX_UNROLL
    for (int k = 0; k < HX_MERGE_SLOTS; ++k) {
      const hx_i32 s = tid + k * HX_BLOCK;
      if (s >= p.top_k) continue;
      const hx_i64 n = key[k];
      if (p.ws || rel) idx[s] = hx_merge_index(n, rel);
      if (p.ws) {
        if (p.write_w) w[s] = val[k];
        if (p.values) p.values[row * p.values_stride + s] = val[k];
      }
      if (p.slots) {
        // a selected key had a finite logit, so its table column exists and named a block; checked anyway
        const hx_i64 col = n >= 0 ? n / p.block_size : 0;
        const hx_i64 id = n >= 0 && col < p.max_blocks ? (hx_i64)p.block_tables[b * p.max_blocks + col] : -1;
        p.slots[row * p.slots_stride + s] = id >= 0 ? (hx_i32)(id * p.block_size + n % p.block_size) : -1;
      }
    }
  }
}
