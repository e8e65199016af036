// The last launch of the fused prefill top-k (hipindexer/ops/prefill_topk_fused.py), every target: a block a row
// selects the row's top_k from the keys the filter kept (PrefillTopkParams: a region and a count per part of the
// key split) and writes them in order (ascending key row, or sorted: descending value, ties to the lower row), as
// key rows or, relative, n - ks[m] (-1 where int32 cannot hold it), with their values when asked; -1 (-inf) past
// the row's selectable keys.
//
// The kept keys hold the row's exact top_k when no region overflowed and either at least top_k came in or the floor
// was 0 (every key came in). A row that fails that (the sample misjudged it), and every row when recompute_all,
// recomputes its logits here instead, in scalar fp32 (hx_prefill_logit): slow, but exact within that class. The
// counts are range-checked, so a workspace in a bad state can only cost a recompute, never a read outside it.
//
// Kept keys that fit the buffer are placed at once (each region's at its count's prefix) and cut to top_k. A longer
// list, and a recomputed row, passes through shared memory in rounds, as in paged_topk_merge.hip: as many entries as
// the buffer has room for, those above the last cut's smallest kept, the buffer cut to top_k once half full and at
// the end. Ascending key rows without a sort where the row's window fits a bitmap in the buffer's free part: the
// selection sets bits over the window, and an entry's place is the count of set bits below it.
#include "prefill_logit.h"
#include "topk_select.h"

#define HX_FINISH_CAP (HX_SMEM / 8)  // entries in shared memory at once
#define HX_FINISH_PER (MAX_TOP_K / 2 / HX_BLOCK)  // a thread's entries of a selection (top_k <= MAX_TOP_K / 2)
// the bitmap's words, after a selection of MAX_TOP_K / 2 entries
#define HX_FINISH_WORDS ((HX_FINISH_CAP - MAX_TOP_K / 2) * 2)
static_assert(HX_FINISH_CAP >= MAX_TOP_K, "a selection (top_k <= MAX_TOP_K / 2) and as many entries again");

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_prefill_topk_finish(const HX_GRID_CONSTANT PrefillTopkFinishParams p) {
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK / HX_WAVE_SIZE);
  HX_SHARED(hx_u32, found, 3);
  HX_DYNAMIC_SHARED(hx_u64, e);
  hx_block_bar bar;
  const hx_u32 tid = hx_thread_x();
  const hx_u32 top_k = (hx_u32)p.top_k;
  if (top_k > MAX_TOP_K / 2) return;  // the op never launches it so
  for (hx_i64 m = hx_block_x(); m < p.M; m += hx_grid_dim_x()) {
    const hx_range w = hx_clamp_window(p.ks[m], p.ke[m], p.N);
    // 1. do the kept keys hold the row's top_k
    bool kept = !p.recompute_all;
    hx_u32 total = 0;
    for (hx_i32 j = 0; kept && j < p.parts; ++j) {
      const hx_i32 c = p.cand_counts[m * p.parts + j];
      kept = c >= 0 && c <= p.region;
      total += kept ? (hx_u32)c : 0u;
    }
    kept = kept && total <= (hx_u32)hx_range_len(w) && (total >= top_k || p.floors[m * p.floor_stride] == 0u);
    // 2. the row's top_k, through e: each round appends the entries get(i), i < n, that pass the last cut
    hx_u32 have = 0;
    hx_u64 cut = 0;
    auto round = [&](hx_u32 n, bool last, auto&& get) {
      if (tid == 0) found[2] = have;
      bar();
      for (hx_u32 i0 = 0; i0 < n; i0 += HX_BLOCK) {  // uniform: the appends go a wave at a time
        const hx_u32 i = i0 + tid;
        const hx_u64 x = i < n ? get(i) : 0ull;
        const bool keep = x > cut;
        const hx_u32 at = hx_wave_append(keep, &found[2]);
        if (keep) e[at] = x;
      }
      bar();
      have = found[2];
      bar();  // found[2] is read by all before the cut takes it
      if (have > HX_FINISH_CAP / 2 || last) {
        hx_u64 c;
        have = hx_group_cut<HX_BLOCK>(tid, bar, e, have, top_k, hist, scan, found, found + 2, c);
        have = have < top_k ? have : top_k;
        cut = c > cut ? c : cut;
      }
    };
    if (kept && total <= HX_FINISH_CAP) {  // uniform: every region's entries at once, then one cut
      hx_u32 at = 0;
      for (hx_i32 j = 0; j < p.parts; ++j) {
        const hx_u32 c = (hx_u32)p.cand_counts[m * p.parts + j];
        const hx_u64* src = p.cand + (m * p.parts + j) * (hx_i64)p.region;
        for (hx_u32 i0 = tid; i0 < c; i0 += HX_CUT_ITEMS * HX_BLOCK) {  // a batch's loads issued before its stores
          hx_u64 x[HX_CUT_ITEMS];
          HX_UNROLL
          for (int b = 0; b < HX_CUT_ITEMS; ++b) x[b] = i0 + b * HX_BLOCK < c ? src[i0 + b * HX_BLOCK] : 0ull;
          HX_UNROLL
          for (int b = 0; b < HX_CUT_ITEMS; ++b)
            if (i0 + b * HX_BLOCK < c) e[at + i0 + b * HX_BLOCK] = x[b];
        }
        at += c;
      }
      bar();
      have = total;
      hx_u64 c;
      have = hx_group_cut<HX_BLOCK>(tid, bar, e, have, top_k, hist, scan, found, found + 2, c);
      have = have < top_k ? have : top_k;
    } else if (kept) {
      hx_u32 seen = 0;
      for (hx_i32 j = 0; j < p.parts; ++j) {
        const hx_u32 c = (hx_u32)p.cand_counts[m * p.parts + j];
        const hx_u64* src = p.cand + (m * p.parts + j) * (hx_i64)p.region;
        for (hx_u32 lo = 0; lo < c;) {
          const hx_u32 n = c - lo < HX_FINISH_CAP - have ? c - lo : HX_FINISH_CAP - have;
          seen += n;
          round(n, seen == total, [&](hx_u32 i) { return src[lo + i]; });
          lo += n;
        }
      }
    } else {
      for (hx_i32 lo = w.lo; lo < w.hi;) {
        const hx_u32 left = (hx_u32)(w.hi - lo);
        const hx_u32 n = left < HX_FINISH_CAP - have ? left : HX_FINISH_CAP - have;
        round(n, n == left, [&](hx_u32 i) {
          const hx_i64 key_row = (hx_i64)lo + i;
          const hx_u32 key = hx_topk_key(hx_prefill_logit(p, m, key_row), false);
          return key ? hx_topk_entry(key, key_row) : 0ull;
        });
        lo += (hx_i32)n;
      }
    }
    // 3. the outputs in order
    hx_i32* const idx = p.indices + m * p.indices_stride;
    float* const val = p.values ? p.values + m * p.values_stride : 0;
    auto write = [&](hx_u32 s, hx_i64 n, hx_u32 key) {  // slot s: key row n (-1: none) and its key
      const hx_i64 out = n >= 0 && p.relative ? n - (hx_i64)p.ks[m] : n;
      idx[s] = out <= 0x7FFFFFFF ? (hx_i32)out : -1;
      if (val) val[s] = n >= 0 ? hx_topk_value(key) : hx_bits_to_f32(0xFF800000u);
    };
    const hx_u32 words = ((hx_u32)hx_range_len(w) + 31u) / 32u;
    if (p.sorted || words > HX_FINISH_WORDS) {
      if (!p.sorted)  // ascending key row: the complemented row above the key sorts descending
        for (hx_u32 i = tid; i < have; i += HX_BLOCK) {
          const hx_u64 x = e[i];
          e[i] = ((hx_u64)(0xFFFFFFFFu - (hx_u32)hx_topk_entry_index(x)) << 32) | (x >> 32);
        }
      bar();
      hx_topk_sort_desc(e, have);
      for (hx_u32 s = tid; s < have; s += HX_BLOCK) {
        const hx_u64 x = e[s];
        if (p.sorted) write(s, hx_topk_entry_index(x), (hx_u32)(x >> 32));
        else write(s, (hx_i64)(0xFFFFFFFFu - (hx_u32)(x >> 32)), (hx_u32)x);
      }
    } else {
      hx_u32* const bits = (hx_u32*)(e + MAX_TOP_K / 2);
      const hx_u32 per = (words + HX_BLOCK - 1) / HX_BLOCK;
      for (hx_u32 v = tid * per; v < (tid + 1) * per && v < words; ++v) bits[v] = 0u;
      bar();
      hx_u64 mine[HX_FINISH_PER];
      HX_UNROLL
      for (int k = 0; k < HX_FINISH_PER; ++k) {
        const hx_u32 i = tid + (hx_u32)k * HX_BLOCK;
        mine[k] = i < have ? e[i] : 0ull;
        if ((hx_u32)(hx_topk_entry_index(mine[k]) - w.lo) / 32 >= words) mine[k] = 0ull;  // only a bad workspace
        if (mine[k]) {
          const hx_u32 b = (hx_u32)(hx_topk_entry_index(mine[k]) - w.lo);
          hx_atomic_or((hx_i32*)&bits[b / 32], (hx_i32)(1u << (b % 32)));
        }
      }
      bar();
      hx_u32 mine_bits = 0;
      for (hx_u32 v = tid * per; v < (tid + 1) * per && v < words; ++v) mine_bits += hx_popc(bits[v]);
      hx_u32 all;
      hist[tid] = hx_block_exclusive_sum(mine_bits, scan, &all);
      bar();
      // each entry to its place in e (whose entries every thread holds by now), then the row written in slot
      // order: a warp's stores land in a few sectors, where stores at the ranks spread over the row's
      HX_UNROLL
      for (int k = 0; k < HX_FINISH_PER; ++k)
        if (mine[k]) e[hx_bitmap_rank(bits, hist, per, (hx_u32)(hx_topk_entry_index(mine[k]) - w.lo))] = mine[k];
      bar();
      have = all;  // set bits: fewer than the entries only where a bad workspace repeated or misplaced one
      for (hx_u32 s = tid; s < have; s += HX_BLOCK) write(s, hx_topk_entry_index(e[s]), (hx_u32)(e[s] >> 32));
    }
    for (hx_u32 s = have + tid; s < top_k; s += HX_BLOCK) write(s, -1, 0u);
    bar();  // the shared arrays are the next row's
  }
}
