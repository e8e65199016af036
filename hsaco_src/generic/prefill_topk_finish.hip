// The last launch of the fused prefill top-k (hipindexer/ops/prefill_topk_fused.py), every target: a block a row
// selects the row's top_k from the keys the filter kept (a region per part of the key split, common/topk_regions.h,
// and a count) and writes them in order (ascending key row, or sorted: descending value, ties to the lower row), as
// key rows or, relative, n - ks[m] (-1 where int32 cannot hold it), with their values when asked; -1 (-inf) past
// the row's selectable keys.
//
// The kept keys hold the row's exact top_k when either at least top_k came in or the floor was 0 (every key came
// in): every key at the floor is then kept, but in a part whose keys passed its region. A row whose floor let fewer
// in (the sample misjudged it), and every row when recompute_all, recomputes its logits here instead, in scalar fp32
// (hx_prefill_logit): slow, but exact within that class; a part that passed its region recomputes its own keys alone
// (the filter's split, common/topk_regions.h), its values then of that class too. The counts and regions are
// range-checked, so a workspace in a bad state can only cost a recompute, never a read outside it.
//
// The kept keys (each region's after the last) or the recomputed row go through common/topk_finish.h.
#include "prefill_logit.h"
#include "topk_finish.h"
#include "topk_regions.h"

#define HX_FINISH_CAP (HX_SMEM / 8)  // entries in shared memory at once
// The cut's digit: a row keeps a few thousand keys, which 256 bins a pass leave few to a bin after two passes, and a
// pass clears and scans an eighth of the bins that 11 bits would.
#define HX_FINISH_BITS 8
// A row split in at most this many parts takes its kept parts a list at a time where they fit the buffer together:
// each list is then a thousand entries or more, copied in runs with no search for each entry's part, and every
// list's copies in flight before the row waits on them (take_unsettled, then settle); more parts, each short, go as
// one list, whose batches of copies cross the parts.
#define HX_FINISH_APART 3
using Finish = HxFinishRow<MAX_TOP_K / 2, HX_FINISH_CAP, HX_FINISH_BITS>;  // top_k <= MAX_TOP_K / 2

// A row's parts: each one's count and region (common/topk_regions.h), read by a thread each, so that a row waits on
// one round of loads for them all, where a part's region would wait on its count and its keys on the region; and
// the kept entries of the parts ahead of each, for their keys taken as one list.
struct hx_finish_parts {
  hx_i64 base[HX_BLOCK];
  hx_i32 count[HX_BLOCK];
  hx_u32 cap[HX_BLOCK], before[HX_BLOCK];
};

// 1,024 threads an SM on sm_90a (64 registers a thread; four blocks of 256: a block a row waits on its loads, and
// the rows in flight hide them): ptxas keeps a row's list length and address in local memory for it, read once a
// slice of the list.
HX_KERNEL HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 1024 / HX_BLOCK) void hx_prefill_topk_finish(
    const HX_GRID_CONSTANT PrefillTopkFinishParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK / HX_WAVE_SIZE);
  HX_SHARED(hx_u32, found, 3);
  HX_SHARED(hx_u32, ext, 2 * (HX_BLOCK / HX_WAVE_SIZE));  // the filter's split, for a part recomputed alone
  HX_SHARED(hx_finish_parts, tab, 1);
  HX_DYNAMIC_SHARED(hx_u64, e);
  hx_block_bar bar;
  const hx_u32 tid = hx_thread_x();
  const hx_u32 top_k = (hx_u32)p.top_k;
  if (top_k > MAX_TOP_K / 2) return;  // the op never launches it so
  for (hx_i64 m = hx_block_x(); m < p.M; m += hx_grid_dim_x()) {
    const hx_range w = hx_clamp_window(p.ks[m], p.ke[m], p.N);
    const hx_u32 floor = p.recompute_all ? 0u : p.floors[m * p.floor_stride];
    // the row's keys [lo, hi) recomputed into the selection, every one entered
    Finish f{e, hist, scan, found, top_k};
    auto recompute = [&](hx_i32 lo, hx_i32 hi) {
      while (lo < hi) {  // uniform
        const hx_u32 left = (hx_u32)(hi - lo);
        const hx_u32 n = left < HX_FINISH_CAP - f.have ? left : HX_FINISH_CAP - f.have;
        f.round(n, false, [&](hx_u32 i) {
          const hx_i64 key_row = (hx_i64)lo + i;
          const hx_u32 key = hx_topk_key(hx_prefill_logit(p, m, key_row), false);
          return key ? hx_topk_entry(key, key_row) : 0ull;
        });
        lo += (hx_i32)n;
      }
    };
    // 1. the row's parts, a thread each: count and region (the op keeps the parts to HX_BLOCK; more, which only
    //    bad parameters hold, recompute the row). Do the kept keys hold the row's top_k: every count sound, and at
    //    least top_k in (counted past a region too) or the floor 0. Else the row is recomputed whole.
    bool whole = p.recompute_all != 0 || p.parts > HX_BLOCK;
    if (!whole && tid < (hx_u32)p.parts) {
      const hx_region g = hx_topk_region(p, m, p.parts, (hx_i32)tid);
      tab->count[tid] = p.cand_counts[m * p.parts + tid];
      tab->base[tid] = g.base;
      tab->cap[tid] = g.cap;
    }
    hx_barrier();
    hx_i64 total = 0;
    for (hx_i32 j = 0; !whole && j < p.parts; ++j) {
      const hx_i32 c = tab->count[j];
      whole = c < 0;
      total += c;
    }
    whole = whole || total > hx_range_len(w) || (total < top_k && floor != 0u);
    // 2. the row's top_k, in e: the kept parts' keys as one list (or a list a part), as much of it at once as the
    //    buffer holds (the buffer cut to top_k between such slices), then each part whose keys passed its region
    //    recomputed alone, or (whole) the row recomputed. A kept part's count is at most its cap, within the row's
    //    parts x region entries (2^22 at most: the op's regions, 256 parts of at most 8 x 2048), so the sum of 256
    //    of them does not wrap.
    hx_u32 all = 0;
    if (!whole) {  // uniform
      const bool kept = tid < (hx_u32)p.parts && (hx_u32)tab->count[tid] <= tab->cap[tid];
      tab->before[tid] = hx_block_exclusive_sum(kept ? (hx_u32)tab->count[tid] : 0u, scan, &all);
      hx_barrier();
    }
    for (hx_u32 lo = 0;;) {  // uniform
      const hx_u32 n = all - lo < HX_FINISH_CAP - f.have ? all - lo : HX_FINISH_CAP - f.have;
      if (n && n == all && p.parts <= HX_FINISH_APART) {  // uniform; lo is 0
        for (hx_i32 j = 0; j < p.parts; ++j)
          if ((hx_u32)tab->count[j] <= tab->cap[j]) f.take_unsettled(p.cand + tab->base[j], (hx_u32)tab->count[j]);
        f.settle();
      } else if (n) {
        f.take_parts(tab->before, (hx_u32)p.parts, lo, n, [&](hx_u32 j) { return p.cand + tab->base[j]; });
      }
      lo += n;
      if (lo == all && whole) recompute(w.lo, w.hi);
      hx_filter_split split{};  // parts 0 until worked out
      for (hx_i32 j = 0; lo == all && !whole && j < p.parts; ++j) {
        if ((hx_u32)tab->count[j] <= tab->cap[j]) continue;  // uniform
        if (split.parts == 0) split = hx_filter_split_of(p, m, p.parts, ext);
        const hx_range k = split.keys(j);
        recompute(hx_max_i32(k.lo, w.lo), hx_min_i32(k.hi, w.hi));
      }
      f.cut_to_top_k();
      if (lo == all) break;
    }
    // 3. the outputs in order
    hx_i32* const idx = p.indices + m * p.indices_stride;
    float* const val = p.values ? p.values + m * p.values_stride : 0;
    auto write = [&](hx_u32 s, hx_i64 n, hx_u32 key) {  // slot s: key row n (-1: none) and its key
      const hx_i64 out = n >= 0 && p.relative ? n - (hx_i64)p.ks[m] : n;
      idx[s] = out <= 0x7FFFFFFF ? (hx_i32)out : -1;
      if (val) val[s] = n >= 0 ? hx_topk_value(key) : hx_bits_to_f32(0xFF800000u);
    };
    const hx_u32 have = f.write_in_order(w.lo, hx_range_len(w), p.sorted, write);
    for (hx_u32 s = have + tid; s < top_k; s += HX_BLOCK) write(s, -1, 0u);
    bar();  // the shared arrays are the next row's
  }
}
