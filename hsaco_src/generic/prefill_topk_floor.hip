// The fused prefill top-k's floors, after the logits op has run on the sample of prefill_topk_sample.hip: a block a
// row writes an order key (hx_topk_key) at or below the r-th largest of the row's sample logits, or 0 when the window
// has at most r samples (every key then enters), and cuts the row's entries among the filter's parts
// (common/topk_regions.h).
//
// The floor itself is common/topk_floor.h's. The cut: even (p.cut 0, or more parts than the block's threads), or
// (1) by where the row's keys at the floor lie. A part's share is what the sample says it keeps, s samples at the
// floor, plus HX_CUT_SIGMAS sqrt(s) and HX_CUT_PAD samples: a row whose best keys crowd one part of the split (recent
// keys scoring high, say) then has room for them there, where even regions would overflow and make the finish
// recompute that part. The square root is the sample's own error: s counts about one key in step of the part's,
// give or take sqrt(s), so a share of s alone leaves the part whose sample fell short a few sqrt(s) without room
// while the others' rooms are that much too large; the same number of those for every part evens the risk (the
// pad serves a part whose sample shows few keys or none). With floor 0 each part gets its keys of the row, exactly,
// and the last part what is left, so every part has room for all it keeps.
#include "topk_sample.h"
#include "topk_regions.h"

#define FLOOR_BATCH 8  // samples a thread loads at once
#define HX_CUT_PAD 8     // samples a part's share starts from
#define HX_CUT_SIGMAS 4  // and the square roots of its samples at the floor it adds

// floor(sqrt(x)), exact: the root's bits from the highest, each kept where its square stays within x.
HX_INLINE HX_DEV hx_u32 hx_isqrt_u32(hx_u32 x) {
  hx_u32 r = 0u;
  for (hx_u32 b = 1u << 15; b; b >>= 1) {
    const hx_u32 t = r | b;  // below 2^16: t t fits
    if (t * t <= x) r = t;
  }
  return r;
}

// The cut's shared words, beside the floor's: each part's first key and its samples at the floor.
struct hx_cut_shared {
  hx_u32 part_lo[HX_BLOCK], part_kept[HX_BLOCK];
};

// The filter's parts of row m's row block, when p.cut and they are at most a thread each, into cut.part_lo, their
// counts zeroed: by the whole block, ahead of the floor, whose last pass counts the samples at the floor by part
// (hx_count_by_part).
HX_INLINE HX_DEV hx_range hx_cut_parts(const PrefillSampleParams& p, hx_i64 m, hx_cut_shared& cut, hx_u32* ext) {
  const hx_u32 tid = hx_thread_x();
  const hx_filter_split split = hx_filter_split_of(p, m, p.parts, ext);
  hx_range mine = {0, 0};
  if (tid < (hx_u32)p.parts) {
    mine = split.keys((hx_i32)tid);
    cut.part_lo[tid] = (hx_u32)mine.lo;
    cut.part_kept[tid] = 0u;
  }
  hx_barrier();  // the parts' first keys seen; ext free
  return mine;
}

// Sample i at the floor counted in the part of its key: the last part whose first key is at or below it.
HX_INLINE HX_DEV void hx_count_by_part(const PrefillSampleParams& p, hx_cut_shared& cut, hx_i32 i) {
  hx_atomic_add_u32(&cut.part_kept[hx_list_of(cut.part_lo, (hx_u32)p.parts, (hx_u32)i * (hx_u32)p.step)], 1u);
}

// Row m's regions in proportion to the parts' shares (after hx_cut_parts and the floor; mine: this thread's part's
// keys).
HX_INLINE HX_DEV void hx_cut_by_sample(const PrefillSampleParams& p, hx_i64 m, hx_range mine, hx_u32 floor,
                                       const hx_cut_shared& cut, hx_u32* scan) {
  const hx_u32 tid = hx_thread_x();
  // the share of each part: its samples at the floor, their spread and the pad, or (floor 0) its keys of the row's
  // window. The shares' sum stays within 32 bits: the samples (at most 2^31) and, by Cauchy-Schwarz, HX_CUT_SIGMAS
  // sqrt(parts x samples) (parts <= HX_BLOCK) and the pads.
  const hx_range keys = hx_clamp_window(p.ks[m], p.ke[m], p.N);
  hx_u32 share = 0u;
  if (tid < (hx_u32)p.parts) {
    const hx_u32 s = cut.part_kept[tid];
    share = floor != 0u ? s + HX_CUT_SIGMAS * hx_isqrt_u32(s) + HX_CUT_PAD
                        : (hx_u32)hx_max_i32(hx_min_i32(mine.hi, keys.hi) - hx_max_i32(mine.lo, keys.lo), 0);
  }
  hx_u32 all;
  const hx_u32 before = hx_block_exclusive_sum(share, scan, &all);
  if (tid < (hx_u32)p.parts) {
    const hx_u32 pool = (hx_u32)p.parts * (hx_u32)p.region;  // at most HX_BLOCK parts of 8 top_k entries each
    hx_u32 a = tid * (hx_u32)p.region, b = a + (hx_u32)p.region;  // even, where no share says otherwise
    if (floor == 0u && all <= pool) {  // each part its keys, the last also what is left
      a = before;
      b = tid + 1u == (hx_u32)p.parts ? pool : before + share;
    } else if (all) {
      // entries [pool S_j / all, pool S_(j+1) / all) of the row, S_j the shares before part j: one rounding for both
      // ends, monotone in S, so the regions meet and fill the pool (float: no 64-bit division)
      const float per = (float)pool / (float)all;
      auto at = [&](hx_u32 s) {
        const hx_u32 x = (hx_u32)((float)s * per);
        return s >= all || x > pool ? pool : x;
      };
      a = at(before);
      b = at(before + share);
    }
    p.cand_base[m * p.parts + tid] = a;
    p.cand_cap[m * p.parts + tid] = b - a;
  }
}

// 1,536 threads an SM on sm_90a (40 registers a thread; twelve blocks of 128): the floor's own path needs no more,
// and the cut's fits them without spilling.
HX_KERNEL HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 1536 / HX_BLOCK) void hx_prefill_topk_floor(
    const HX_GRID_CONSTANT PrefillSampleParams p) {
  hx_grid_dependency_wait();
  HX_FLOOR_SHARED;
  HX_SHARED(hx_cut_shared, cut, 1);
  const hx_u32 tid = hx_thread_x();
  const bool by_sample = p.cut != 0 && p.parts <= HX_BLOCK;  // uniform
  for (hx_i64 m = hx_block_x(); m < p.M; m += hx_grid_dim_x()) {
    const hx_range w = hx_sample_window(p, m);
    const float* row = p.logits + m * p.samples;
    const hx_range mine = by_sample ? hx_cut_parts(p, m, *cut, ext) : hx_range{0, 0};
    auto load = [&](hx_i32 i) { return row[i]; };
    auto count = [&](hx_u32, hx_i32 i) { hx_count_by_part(p, *cut, i); };
    hx_u32 floor;
    if (w.hi - w.lo <= FLOOR_BATCH * HX_BLOCK) {  // uniform: a batch a thread holds the row's samples, whose keys
      hx_u32 held[FLOOR_BATCH];                   // the floor's three passes then read from registers
      HX_UNROLL
      for (int b = 0; b < FLOOR_BATCH; ++b) {
        const hx_i32 i = w.lo + (hx_i32)tid + b * HX_BLOCK;
        held[b] = i < w.hi ? hx_topk_key(load(i), false) : 0u;
      }
      auto each = [&](auto&& f) {
        HX_UNROLL
        for (int b = 0; b < FLOOR_BATCH; ++b)
          if (held[b]) f(held[b], w.lo + (hx_i32)tid + b * HX_BLOCK);
      };
      floor = by_sample ? hx_block_floor(each, (hx_u32)p.r, hist, scan, found, ext, count)
                        : hx_block_floor(each, (hx_u32)p.r, hist, scan, found, ext);
    } else {
      floor = by_sample ? hx_block_floor_of<FLOOR_BATCH>(w.lo, w.hi, load, false, (hx_u32)p.r, hist, scan, found,
                                                         ext, count)
                        : hx_block_floor_of<FLOOR_BATCH>(w.lo, w.hi, load, false, (hx_u32)p.r, hist, scan, found,
                                                         ext);
    }
    if (tid == 0) p.floors[m] = floor;
    hx_barrier();  // the floor's shared words are free, the parts' counts whole
    if (by_sample) {
      hx_cut_by_sample(p, m, mine, floor, *cut, scan);
    } else {
      for (hx_i32 j = (hx_i32)tid; j < p.parts; j += HX_BLOCK) {
        p.cand_base[m * p.parts + j] = (hx_u32)j * (hx_u32)p.region;
        p.cand_cap[m * p.parts + j] = (hx_u32)p.region;
      }
    }
    hx_barrier();  // the shared arrays are the next row's
  }
}
