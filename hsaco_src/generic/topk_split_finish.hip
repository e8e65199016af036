// Split top-k, kernel 3 of 3 (common/topk_split.h): one block per row (rows block_x, block_x + grid, ...) selects
// the row's top_k among its kept entries through shared memory (common/topk_finish.h) and writes them in order:
// sorted, by descending value, equal values by lower index; unsorted, by ascending index (the order the
// single-block kernel gives). A row whose kept entries cannot hold its top_k (fewer than top_k above a floor above
// 0, more than cap, more than its columns: a floor the sample misjudged or a workspace in a bad state) runs the
// single-block algorithm (hx_topk_row) instead.
#include "topk_split.h"
#include "topk_finish.h"

using Finish = HxFinishRow<MAX_TOP_K, HX_SMEM / 8>;

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_split_finish(const HX_GRID_CONSTANT TopkSplitParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 3);
  HX_DYNAMIC_SHARED(hx_u64, e);
  const hx_u32 top_k = (hx_u32)p.top_k;
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    const hx_u32* const rec = (const hx_u32*)hx_split_row(p, row);
    const hx_u32 floor = rec[0], count = rec[1];
    const hx_i32 n = hx_topk_row_extent(p.lengths, row, p.N);
    const float* const x = p.logits + row * p.logits_stride;
    hx_i32* const out_idx = p.indices + row * p.indices_stride;
    float* const out_val = p.values ? p.values + row * p.values_stride : 0;
    if (count <= (hx_u32)p.cap && count <= (hx_u32)n && (count >= top_k || floor == 0u)) {  // uniform
      Finish f{e, hist, scan, found, top_k};
      f.take((const hx_u64*)((const hx_u8*)rec + p.cand_off), count);
      f.cut_to_top_k();
      const hx_u32 have = f.write_in_order(0, n, p.sorted, [&](hx_u32 s, hx_i64 i, hx_u32 key) {
        out_idx[s] = (hx_i32)i;  // the logit itself, not the key's value: -0.0 keys as +0.0
        if (out_val) out_val[s] = (hx_u64)i < (hx_u64)n ? x[i] : hx_topk_value(key);
      });
      hx_topk_pad(out_idx, out_val, have, top_k);
    } else {
      TopkParams q;
      q.logits = p.logits;
      q.lengths = p.lengths;
      q.indices = p.indices;
      q.values = p.values;
      q.logits_stride = p.logits_stride;
      q.indices_stride = p.indices_stride;
      q.values_stride = p.values_stride;
      q.rows = p.rows;
      q.N = p.N;
      q.top_k = p.top_k;
      q.sorted = p.sorted;
      hx_topk_row(q, row, hist, scan, found, e);
    }
    hx_barrier();  // the shared arrays are reused by the next row
  }
}
