// The exact top-k of each row of a float32 logits array (hipindexer.topk_logits;
// numpy: hipindexer.reference.topk_logits): per row the top_k selectable
// positions by value, equal values by lower index; a row with V < top_k of them
// returns its V indices then -1 (value -inf). Every target.
//
// One block per row (a block takes several when rows outnumber the grid), in four
// steps, every one deterministic (atomics only count):
// 1. Radix select on order-preserving keys (common/topk_select.h): per digit a
//    shared histogram of the keys that match the digits found so far, then a
//    block scan from the top bin finds the digit holding the top_k-th key. After
//    three digits T is that key exactly and `need` says how many keys equal to T
//    belong to the top_k. A row with V <= top_k skips the passes: it takes every
//    selectable key (T = 0, the key of nothing selectable, need = 0).
// 2. Compaction in index order: tiles of HX_BLOCK * ITEMS consecutive columns,
//    each thread a run of ITEMS, a block scan of (keys > T, keys == T) counts.
//    Column i lands at slot (keys > T before i) + min(keys == T before i, need),
//    so the equal keys taken are the lowest-indexed `need`. Unsorted output is
//    this index order.
// 3. sorted: the selected entries (key, complemented index) in shared memory,
//    bitonic-sorted descending: descending value, equal values by lower index.
// 4. Slots past the selection get -1 and -inf.
// Reads stay inside [0, extent) of the row; row offsets are 64-bit.
#include "topk_select.h"
#include "hx_params.h"

#define ITEMS 8  // consecutive columns per thread per compaction tile
#define MAX_TOP_K 4096  // hipindexer.arguments.MAX_TOP_K: the sort buffer's entries
#define NO_SLOT 0xFFFFFFFFu
static_assert(HX_BLOCK * ITEMS < 65536, "tile counts are packed as two 16-bit halves");
static_assert(HX_TOPK_MAX_BINS % HX_BLOCK == 0 && 1024 % HX_BLOCK == 0, "every thread owns whole bins");

// Exclusive prefix sum of v over the block's threads in order (Hillis-Steele in
// shared memory); *total is the sum over all threads. buf is free again on return.
HX_INLINE HX_DEV hx_u32 hx_block_exclusive_sum(hx_u32 v, hx_u32* buf, hx_u32* total) {
  const hx_u32 tid = hx_thread_x();
  buf[tid] = v;
  for (hx_u32 d = 1; d < HX_BLOCK; d *= 2) {
    hx_barrier();
    const hx_u32 a = tid >= d ? buf[tid - d] : 0u;
    hx_barrier();
    buf[tid] += a;
  }
  hx_barrier();
  const hx_u32 inclusive = buf[tid];
  *total = buf[HX_BLOCK - 1];
  hx_barrier();
  return inclusive - v;
}

// Row `row`, by the whole block; the shared arrays are free again on return.
HX_INLINE HX_DEV void hx_topk_row(const TopkParams& p, hx_i64 row, hx_u32* hist, hx_u32* scan, hx_u32* found,
                                  hx_u64* entries) {
  const hx_u32 tid = hx_thread_x();
  const float* const x = p.logits + row * p.logits_stride;
  const hx_i32 n = hx_topk_row_extent(p.lengths, row, p.N);
  const bool by_lengths = p.lengths != 0;
  const hx_u32 top_k = (hx_u32)p.top_k;

  // 1. the top_k-th key T, and how many keys equal to T to take
  hx_u32 prefix = 0, want = top_k, T = 0, need = 0, selected = 0;
  for (int pass = 0; pass < HX_TOPK_PASSES; ++pass) {
    const hx_u32 shift = hx_topk_digit_shift(pass), bins = hx_topk_digit_bins(pass);
    const hx_u32 high = pass == 0 ? 32u : hx_topk_digit_shift(pass - 1);  // key >> high: the digits already fixed
    for (hx_u32 b = tid; b < bins; b += HX_BLOCK) hist[b] = 0u;
    hx_barrier();
    for (hx_i64 i = tid; i < n; i += HX_BLOCK) {
      const hx_u32 k = hx_topk_key(x[i], by_lengths);
      if (k != 0u && (high >= 32u || (k >> high) == (prefix >> high))) hx_atomic_add_u32(&hist[(k >> shift) & (bins - 1u)], 1u);
    }
    hx_barrier();
    // Thread t owns `per` bins counted down from the top, so the exclusive sum of
    // the owners' counts is the number of keys in higher bins.
    const hx_u32 per = bins / HX_BLOCK, top = bins - 1u - tid * per;
    hx_u32 mine = 0;
    for (hx_u32 j = 0; j < per; ++j) mine += hist[top - j];
    hx_u32 total;
    hx_u32 above = hx_block_exclusive_sum(mine, scan, &total);
    if (pass == 0 && total <= top_k) {  // V <= top_k: every selectable key (uniform: total is the block's)
      selected = total;
      break;
    }
    if (above < want && above + mine >= want) {
      for (hx_u32 j = 0; j < per; ++j) {
        const hx_u32 c = hist[top - j];
        if (above + c >= want) {
          found[0] = top - j;
          found[1] = want - above;
          break;
        }
        above += c;
      }
    }
    hx_barrier();
    prefix |= found[0] << shift;
    want = found[1];
    hx_barrier();  // found and hist are rewritten by the next pass
    if (pass == HX_TOPK_PASSES - 1) {
      T = prefix;
      need = want;
      selected = top_k;
    }
  }

  // 2. the selected columns in index order
  hx_i32* const out_idx = p.indices + row * p.indices_stride;
  float* const out_val = p.values ? p.values + row * p.values_stride : 0;
  hx_u32 gt_before = 0, eq_before = 0;  // over the tiles done
  for (hx_i64 base = 0; base < n; base += (hx_i64)HX_BLOCK * ITEMS) {
    const hx_i64 i0 = base + (hx_i64)tid * ITEMS;
    hx_u32 gt = 0, eq = 0;
    for (int t = 0; t < ITEMS; ++t) {
      if (i0 + t >= n) break;
      const hx_u32 k = hx_topk_key(x[i0 + t], by_lengths);
      gt += k > T;
      eq += k == T;
    }
    hx_u32 tile_total;
    const hx_u32 before = hx_block_exclusive_sum((gt << 16) | eq, scan, &tile_total);
    hx_u32 g = gt_before + (before >> 16), e = eq_before + (before & 0xFFFFu);
    for (int t = 0; t < ITEMS; ++t) {
      if (i0 + t >= n) break;
      const float v = x[i0 + t];
      const hx_u32 k = hx_topk_key(v, by_lengths);
      hx_u32 slot = NO_SLOT;
      if (k > T) {
        slot = g + (e < need ? e : need);
        ++g;
      } else if (k == T) {
        if (e < need) slot = g + e;
        ++e;
      }
      if (slot == NO_SLOT) continue;
      if (p.sorted) {
        entries[slot] = hx_topk_entry(k, i0 + t);
      } else {
        out_idx[slot] = (hx_i32)(i0 + t);
        if (out_val) out_val[slot] = v;
      }
    }
    gt_before += tile_total >> 16;
    eq_before += tile_total & 0xFFFFu;
    if (gt_before + (eq_before < need ? eq_before : need) >= selected) break;  // uniform: from the block's totals
  }

  // 3. sorted: descending entries, over the selection rounded up to a power of two
  hx_barrier();  // every entry is written
  if (p.sorted && selected > 1u) {
    hx_u32 size = 1;
    while (size < selected) size *= 2;
    for (hx_u32 s = selected + tid; s < size; s += HX_BLOCK) entries[s] = 0ull;
    hx_barrier();
    for (hx_u32 span = 2; span <= size; span *= 2) {
      for (hx_u32 stride = span / 2; stride > 0; stride /= 2) {
        for (hx_u32 t = tid; t < size / 2; t += HX_BLOCK) {
          const hx_u32 a = 2 * t - (t & (stride - 1)), b = a + stride;
          const hx_u64 ea = entries[a], eb = entries[b];
          if ((ea < eb) == ((a & span) == 0)) {  // runs alternate direction until the last span, descending
            entries[a] = eb;
            entries[b] = ea;
          }
        }
        hx_barrier();
      }
    }
  }
  if (p.sorted) {
    for (hx_u32 s = tid; s < selected; s += HX_BLOCK) {
      const hx_i32 i = hx_topk_entry_index(entries[s]);
      out_idx[s] = i;
      if (out_val) out_val[s] = x[i];
    }
  }

  // 4. padding
  const float neg_inf = hx_bits_to_f32(0xFF800000u);
  for (hx_u32 s = selected + tid; s < top_k; s += HX_BLOCK) {
    out_idx[s] = -1;
    if (out_val) out_val[s] = neg_inf;
  }
  hx_barrier();  // the sort buffer is read until here
}

// Rows block_x, block_x + grid, ...: the op caps the grid (hipindexer.ops.topk.MAX_BLOCKS), since a grid of one
// block per row would pass the 2^32 work-items of a gfx950 dispatch at 2^24 rows.
HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_logits(const HX_GRID_CONSTANT TopkParams p) {
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 2);  // the digit holding the top_k-th key, and how many of its keys to take
  HX_SHARED(hx_u64, entries, MAX_TOP_K);
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) hx_topk_row(p, row, hist, scan, found, entries);
}
