// topk_logits' resident path: one block a row, the row's keys resident in the block's shared memory for the whole
// selection, so the row is read from memory once and every later step runs on chip. Every target.
// 1. the row's keys in (hx_resident_keys_in, common/topk_resident.h), with the block's count of selectable keys
//    and their least and greatest;
// 2. T and need by the radix passes (hx_resident_cut), the block's barrier the meeting of each; a row with
//    V <= top_k selectable keys takes them all;
// 3. the compaction in index order (hx_resident_place), as the single-block kernel's; unsorted output is this index
//    order (the other paths' too);
// 4. sorted: the selection's entries in shared memory after the keys, bitonic-sorted descending; then -1 padding.
// Two builds: 1,024 threads (on sm_90a a unit's whole register file, one block a unit) and 512 (two blocks a unit,
// one issuing while the other waits at a barrier); hipindexer.plan.topk.resident_narrow says which a call takes.
// The block's dynamic shared memory: resident_words(N) keys, then (sorted) 8 pow2(min(top_k, N)) bytes of entries;
// the planner (hipindexer.plan.topk.resident_fits) takes the path only where that fits the build's HX_SMEM, and
// only for N < 65,536, so that the counts of step 3 fit 16 bits each.
#include "topk_resident.h"

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_resident(const HX_GRID_CONSTANT TopkParams p) {
  hx_grid_dependency_wait();
  constexpr hx_u32 W = HX_BLOCK / HX_WAVE_SIZE;
  HX_SHARED(hx_u32, hist, 2 * RESIDENT_BINS);  // two passes' counts: one is cleared while the other is read
  HX_SHARED(hx_u32, sums, 2 * W);               // the passes' chunk sums, likewise; then the compaction's scan
  HX_DYNAMIC_SHARED(hx_u32x4, keys4);
  hx_u64* const sel = (hx_u64*)(keys4 + hx_resident_words(p.N) / 4u);
  const hx_u32 tid = hx_thread_x(), lane = tid % HX_WAVE_SIZE, wave = tid / HX_WAVE_SIZE;
  const hx_u32 top_k = (hx_u32)p.top_k;
  const bool by_lengths = p.lengths != 0, sorted = p.sorted != 0;
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    const float* const x = p.logits + row * p.logits_stride;
    const hx_i32 n = hx_topk_row_extent(p.lengths, row, p.N);
    const hx_i32 a = (hx_i32)((((hx_u64)x) >> 2) & 3u);  // slot s holds column s - a
    const hx_u32 m4 = (hx_u32)(a + n + 3) / 4u;          // float4 slots of the row

    // 1. keys in: their count, the least and the greatest
    hx_u32 mine, lo, hi;
    hx_resident_keys_in(x, a, n, 0u, m4, by_lengths, keys4, tid, mine, lo, hi);
    hx_wave_extremes(lane, lo, hi);
    mine = hx_wave_shfl_u32(hx_wave_inclusive_sum(mine), HX_WAVE_SIZE - 1);
    hx_u32* const ext = hist + RESIDENT_BINS;  // the second counts, cleared by the first pass after these are read
    if (lane == 0) {
      ext[3 * wave] = lo;
      ext[3 * wave + 1] = hi;
      ext[3 * wave + 2] = mine;
    }
    for (hx_u32 b = tid; b < RESIDENT_BINS; b += HX_BLOCK) hist[b] = 0u;
    hx_barrier();  // publishes the keys, the waves' extremes and the first pass's cleared counts
    lo = lane < W ? ext[3 * lane] : 0xFFFFFFFFu;
    hi = lane < W ? ext[3 * lane + 1] : 0u;
    const hx_u32 V = hx_wave_shfl_u32(hx_wave_inclusive_sum(lane < W ? ext[3 * lane + 2] : 0u), HX_WAVE_SIZE - 1);
    hx_wave_extremes(lane, lo, hi);

    // 2. T and need: every key > T and the first `need` keys == T are the selection
    hx_u32 T = 0u, need = 0u;  // V <= top_k: every selectable key (all > 0)
    hx_u32* scan = sums;       // the compaction's: the chunk sums the last pass does not read
    if (V > top_k)             // uniform
      hx_resident_cut(
          tid, keys4, m4, lo, hi, top_k, hist, sums, [](hx_u32) { hx_barrier(); },
          [&](hx_u32 buf, hx_u32 t) { return hist[buf * RESIDENT_BINS + t]; }, T, need, scan);
    const hx_u32 selected = V < top_k ? V : top_k;

    // 3. the selection in index order
    const hx_resident_run run = hx_resident_runs(tid, keys4, m4, T, scan);
    hx_i32* const out_idx = hx_wave_pointer(p.indices + row * p.indices_stride);
    float* const out_val = p.values ? p.values + row * p.values_stride : 0;
    if (sorted) {
      hx_resident_place(tid, keys4, run, a, T, need, 0u, 0u,
                        [&](hx_u32 slot, hx_i32 col, hx_u32 key) { sel[slot] = hx_topk_entry(key, col); });
    } else if (out_val) {
      hx_resident_place(tid, keys4, run, a, T, need, 0u, 0u, [&](hx_u32 slot, hx_i32 col, hx_u32) {
        out_idx[slot] = col;
        out_val[slot] = x[col];  // the logit itself: -0.0 keys as +0.0
      });
    } else {
      hx_resident_place(tid, keys4, run, a, T, need, 0u, 0u,
                        [&](hx_u32 slot, hx_i32 col, hx_u32) { out_idx[slot] = col; });
    }

    // 4. sorted: descending entries; then padding
    if (sorted) {
      hx_barrier();  // every entry is written
      hx_topk_write_sorted(sel, selected, out_idx, out_val, x);
    }
    hx_topk_pad(out_idx, out_val, selected, top_k);
    hx_barrier();  // the keys and the entries are the next row's
  }
}
