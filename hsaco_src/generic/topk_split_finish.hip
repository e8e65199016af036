// Split top-k, kernel 3 of 3 (common/topk_split.h): one block per row (rows
// block_x, block_x + grid, ...). From the row's cut it takes every certain
// entry and, among the candidates, the top_k - above largest (key, index)
// entries: a radix select over their low 53 bits (the rest of the key, then
// the complemented index), which stops at the first digit whose bin the
// selection takes whole. Entries are unique, so the selection is exact and
// equal values go by lower index. Then one bitonic sort in shared memory
// orders it: sorted, by entry (value descending, index ascending); unsorted,
// by index ascending (the order the single-block kernel gives). A row whose
// candidates overflowed the workspace runs the single-block algorithm
// (hx_topk_row). Last, the row's histogram and counts are zeroed for the next
// call.
#include "topk_split.h"

HX_INLINE HX_DEV hx_u32 hx_split_digit_shift(int pass) {
  return pass == 0 ? 42u : (pass == 1 ? 32u : (pass == 2 ? 21u : (pass == 3 ? 10u : 0u)));
}

// The want-th largest of cand[0, count) (1 <= want <= count), all of whose top
// 11 bits are `digit`: every entry >= it is selected, and there are want of
// them.
HX_INLINE HX_DEV hx_u64 hx_split_threshold(const hx_u64* cand, hx_u32 count, hx_u32 want, hx_u32 digit,
                                           hx_u32* hist, hx_u32* scan, hx_u32* found) {
  const hx_u32 tid = hx_thread_x();
  hx_u64 prefix = (hx_u64)digit << 53;
  for (int pass = 0;; ++pass) {
    // digits of 11, 10, 11, 11 and 10 bits below bit 53: no histogram past the 2048 bins of hist
    const hx_u32 high = pass == 0 ? 53u : hx_split_digit_shift(pass - 1), shift = hx_split_digit_shift(pass);
    const hx_u32 bins = 1u << (high - shift);
    for (hx_u32 b = tid; b < bins; b += HX_BLOCK) hist[b] = 0u;
    hx_barrier();
    for (hx_u32 s = tid; s < count; s += HX_BLOCK) {
      const hx_u64 e = cand[s];
      if ((e >> high) == (prefix >> high)) hx_atomic_add_u32(&hist[(hx_u32)(e >> shift) & (bins - 1u)], 1u);
    }
    hx_barrier();
    hx_topk_find_bin(hist, bins, want, scan, found);
    const hx_u32 bin = found[0];
    prefix |= (hx_u64)bin << shift;
    want = found[1];
    const bool whole = hist[bin] == want;  // uniform: shared values after the barrier
    hx_barrier();  // hist and found are rewritten by the next pass
    if (whole || shift == 0u) return prefix;
  }
}

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_split_finish(const HX_GRID_CONSTANT TopkSplitParams p) {
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 2);
  HX_SHARED(hx_u64, entries, MAX_TOP_K);
  HX_SHARED(hx_u32, taken, 1);
  const hx_u32 tid = hx_thread_x();
  const hx_u32 top_k = (hx_u32)p.top_k;
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    hx_u8* const w = hx_split_row(p, row);
    hx_u32* const row_hist = (hx_u32*)w;
    const HxTopkCut cut = hx_topk_cut(row_hist, top_k, (hx_u32)p.cap, scan, found);
    if (cut.mode == HX_CUT_OVERFLOW) {
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
      hx_topk_row(q, row, hist, scan, found, entries);
    } else {
      const hx_u64* const cert = (const hx_u64*)(w + p.cert_off);
      const hx_u64* const cand = (const hx_u64*)(w + p.cand_off);
      for (hx_u32 s = tid; s < cut.above; s += HX_BLOCK) entries[s] = cert[s];
      hx_u32 selected = cut.above;
      if (cut.mode == HX_CUT_SPLIT) {
        const hx_u64 T = hx_split_threshold(cand, cut.count, top_k - cut.above, cut.digit, hist, scan, found);
        if (tid == 0u) taken[0] = 0u;
        hx_barrier();
        for (hx_u32 s = tid; s < cut.count; s += HX_BLOCK) {
          const hx_u64 e = cand[s];
          if (e >= T) entries[cut.above + hx_atomic_add_u32(&taken[0], 1u)] = e;
        }
        selected = top_k;
      }
      hx_barrier();  // every entry is in place
      if (!p.sorted) {  // by index ascending: the entry of key 0 keeps only the complemented index
        for (hx_u32 s = tid; s < selected; s += HX_BLOCK) entries[s] = hx_topk_entry(0u, hx_topk_entry_index(entries[s]));
        hx_barrier();
      }
      hx_topk_sort_desc(entries, selected);
      hx_barrier();
      const float* const x = p.logits + row * p.logits_stride;
      hx_i32* const out_idx = p.indices + row * p.indices_stride;
      float* const out_val = p.values ? p.values + row * p.values_stride : 0;
      for (hx_u32 s = tid; s < selected; s += HX_BLOCK) {
        const hx_i32 i = hx_topk_entry_index(entries[s]);
        out_idx[s] = i;
        if (out_val) out_val[s] = x[i];
      }
      const float neg_inf = hx_bits_to_f32(0xFF800000u);
      for (hx_u32 s = selected + tid; s < top_k; s += HX_BLOCK) {
        out_idx[s] = -1;
        if (out_val) out_val[s] = neg_inf;
      }
    }
    hx_barrier();  // the histogram is read by every thread until here
    for (hx_u32 b = tid; b < HX_TOPK_MAX_BINS + 2u; b += HX_BLOCK) row_hist[b] = 0u;
    hx_barrier();  // the shared arrays are reused by the next row
  }
}
