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
// chunks still go to the lower key. rel (the last step of a prefill call with
// relative=True) shifts the indices written: n - rel[row], the key's position in
// its own request; one that int32 cannot hold is written as -1 (the op refuses
// such windows when it can see them).
#include "platform.h"
#include "hx_params.h"

#define MAX_TOP_K 4096  // hipindexer.arguments.MAX_TOP_K
#define SLOTS (MAX_TOP_K / HX_BLOCK)  // a thread's slots of a row: s = tid + k * HX_BLOCK
static_assert(MAX_TOP_K % HX_BLOCK == 0, "every slot has its thread");

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_merge(const HX_GRID_CONSTANT TopkMergeParams p) {
  const hx_i32 tid = (hx_i32)hx_thread_x();
  const float neg_inf = hx_bits_to_f32(0xFF800000u);
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    hx_i32* const idx = p.indices + row * p.indices_stride;
    float* const w = p.w ? p.w + row * p.w_stride : 0;
    const hx_i32* const ws = p.ws ? p.ws + row * p.ws_stride : 0;
    const hx_i32* const cols = p.cols ? p.cols + row * p.cols_stride : 0;
    hx_i64 key[SLOTS];
    float val[SLOTS];
    HX_UNROLL
    for (int k = 0; k < SLOTS; ++k) {
      const hx_i32 s = tid + k * HX_BLOCK;
      key[k] = -1;
      val[k] = neg_inf;
      if (s >= p.top_k) continue;
      // ws absent: the indices already are global keys (a one-chunk call that only wants its slots, or
      // relative indices)
      const hx_i64 i = ws ? (hx_i64)ws[s] : (hx_i64)idx[s];
      if (i < 0) continue;
      const hx_i64 col = i - p.lead;  // a chunk column, or its place among the filtered ones
      key[k] = !ws ? i : i < p.lead ? (hx_i64)idx[i] : p.base + (p.cols ? (hx_i64)cols[col] : col);
      if (ws) val[k] = w[i];
    }
    hx_barrier();  // every read of the old candidates is done
    const hx_i64 b = row / p.next_n;
    HX_UNROLL
    for (int k = 0; k < SLOTS; ++k) {
      const hx_i32 s = tid + k * HX_BLOCK;
      if (s >= p.top_k) continue;
      const hx_i64 n = key[k];
      if (ws || p.rel) {
        const hx_i64 shifted = p.rel && n >= 0 ? n - (hx_i64)p.rel[row] : n;
        idx[s] = shifted <= 0x7FFFFFFF ? (hx_i32)shifted : -1;  // a valid key n >= ks, so n - ks >= 0
      }
      if (ws) {
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
