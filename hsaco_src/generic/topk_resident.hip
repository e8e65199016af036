// topk_logits' resident path: one block a row, the row's keys resident in the block's shared memory for the whole
// selection, so the row is read from memory once and every later step runs on chip. Every target.
//
// 1. The row's keys (hx_topk_key) land in shared memory at their column plus the row's misalignment in floats, so
//    the row's aligned float4s are one 16-byte load and one 16-byte store each (the head and the tail column by
//    column; nothing outside [0, n) is read). Slots without a column hold key 0, which nothing selects. On the way
//    the block counts the selectable keys and finds the least and the greatest.
// 2. T, the top_k-th largest key, and `need`, how many keys equal to T the selection takes (the lowest-indexed), by a
//    radix select over the 32-bit keys: digits of up to 10 bits from the highest bit in which the least and the
//    greatest key differ (the bits above it are every key's, and a first digit there would crowd the keys into a few
//    bins, whose increments then queue on one shared word), each pass counting the keys that match the digits found
//    so far. A row with V <= top_k selectable keys takes them all. A pass meets the block twice: once its counts
//    are whole (each wave then sums a chunk of the bins), once the chunk sums are; every wave then finds the chunk
//    and the bin of the need-th key by itself. The passes' counts alternate between two buffers, each cleared during
//    the pass before its own, so no pass waits for a clearing.
// 3. Compaction in index order, as the single-block kernel's: each wave owns a run of consecutive float4 slots and
//    counts (keys > T, keys == T) over it, a block scan of the waves' counts places the runs, and within a wave a
//    lane's keys follow the lanes' before it; key i lands at (keys > T before i) + min(keys == T before i, need).
//    Unsorted output is this index order (the other paths' too).
// 4. sorted: the selection's entries in shared memory after the keys, bitonic-sorted descending; then -1 padding.
// Two builds: 1,024 threads (on sm_90a a unit's whole register file, one block a unit) and 512 (two blocks a unit,
// one issuing while the other waits at a barrier); hipindexer.plan.topk.resident_narrow says which a call takes.
// The block's dynamic shared memory: resident_words(N) keys, then (sorted) 8 pow2(min(top_k, N)) bytes of entries;
// the planner (hipindexer.plan.topk.resident_fits) takes the path only where that fits the build's HX_SMEM, and
// only for N < 65,536, so that the counts of step 3 fit 16 bits each.
#include "topk_select.h"

#define RESIDENT_LOADS 8  // float4 loads a thread issues before any of them is keyed
#define RESIDENT_BITS 10  // a radix pass's digit: two passes' counts in the 8 KiB the single-block kernel's one takes
#define RESIDENT_BINS (1u << RESIDENT_BITS)
static_assert(RESIDENT_BINS <= 2 * HX_BLOCK, "a pass's bins are two a lane of the block's waves at most");

template <int N>
struct hx_resident_loads {
  static constexpr int value = N;
};

// Key slots a row of up to N columns needs: its misalignment (up to 3) and its columns, in whole float4s.
HX_INLINE HX_DEV hx_u32 hx_resident_words(hx_i32 N) { return ((hx_u32)N + 7u) & ~3u; }

// (keys > T) << 16 | (keys == T) over a float4 of keys.
HX_INLINE HX_DEV hx_u32 hx_resident_counts(const hx_u32x4& k, hx_u32 T) {
  return (((hx_u32)(k.x > T) + (k.y > T) + (k.z > T) + (k.w > T)) << 16) +
         ((hx_u32)(k.x == T) + (k.y == T) + (k.z == T) + (k.w == T));
}

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
  hx_block_bar bar;
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    const float* const x = p.logits + row * p.logits_stride;
    const hx_i32 n = hx_topk_row_extent(p.lengths, row, p.N);
    const hx_i32 a = (hx_i32)((((hx_u64)x) >> 2) & 3u);  // slot s holds column s - a
    const hx_u32 m4 = (hx_u32)(a + n + 3) / 4u;          // float4 slots of the row
    const float* const xa = x - a;                       // 16-byte aligned: float4 v covers slots 4v .. 4v + 3

    // 1. keys in: their count, the least and the greatest
    hx_u32 mine = 0, lo = 0xFFFFFFFFu, hi = 0u;
    const auto keys_in = [&](auto loads) {  // J float4 loads a thread in flight
      constexpr int J = decltype(loads)::value;
      for (hx_u32 v0 = 0; v0 < m4; v0 += HX_BLOCK * J) {
        hx_f32x4 q[J];
        HX_UNROLL
        for (int j = 0; j < J; ++j) {
          const hx_i32 v = (hx_i32)(v0 + tid + (hx_u32)j * HX_BLOCK);
          const float nan = hx_bits_to_f32(0x7FC00000u);
          if (v >= (hx_i32)m4) {  // past the row (the loop's last batch)
            q[j] = {nan, nan, nan, nan};
          } else if (4 * v >= a && 4 * v + 4 <= a + n) {
            q[j] = *(const hx_f32x4*)(xa + 4 * v);
          } else {  // the head or the tail: column by column, NaN (key 0) where there is none
            float e[4];
            HX_UNROLL
            for (int c = 0; c < 4; ++c) {
              const hx_i32 col = 4 * v + c - a;
              e[c] = col >= 0 && col < n ? x[col] : nan;
            }
            q[j] = {e[0], e[1], e[2], e[3]};
          }
        }
        HX_UNROLL
        for (int j = 0; j < J; ++j) {
          const hx_u32 v = v0 + tid + (hx_u32)j * HX_BLOCK;
          if (v < m4) {
            const hx_u32 ks[4] = {hx_topk_key(q[j].x, by_lengths), hx_topk_key(q[j].y, by_lengths),
                                  hx_topk_key(q[j].z, by_lengths), hx_topk_key(q[j].w, by_lengths)};
            HX_UNROLL
            for (int c = 0; c < 4; ++c) {
              mine += ks[c] != 0u;
              lo = ks[c] != 0u && ks[c] < lo ? ks[c] : lo;
              hi = ks[c] > hi ? ks[c] : hi;
            }
            keys4[v] = {ks[0], ks[1], ks[2], ks[3]};
          }
        }
      }
    };
    if (m4 <= 2 * HX_BLOCK) {  // short rows: fewer loads past the row to skip
      keys_in(hx_resident_loads<2>{});
    } else if (m4 <= 4 * HX_BLOCK) {
      keys_in(hx_resident_loads<4>{});
    } else {
      keys_in(hx_resident_loads<RESIDENT_LOADS>{});
    }
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
    if (V > top_k) {           // uniform
      int top = lo == hi ? -1 : 31 - __builtin_clz(lo ^ hi);  // the highest bit left to resolve
      T = top >= 31 ? 0u : lo >> (top + 1) << (top + 1);
      need = top_k;
      for (hx_u32 buf = 0; top >= 0; buf ^= 1u) {
        const int shift = top >= RESIDENT_BITS - 1 ? top - (RESIDENT_BITS - 1) : 0;
        const hx_u32 bins = 1u << (top - shift + 1), fixed = top >= 31 ? 0u : ~0u << (top + 1);
        hx_u32* const h = hist + buf * RESIDENT_BINS;
        const hx_u32 want_bits = T & fixed;
        for (hx_u32 v = tid; v < m4; v += HX_BLOCK) {
          const hx_u32x4 k = keys4[v];
          const hx_u32 ks[4] = {k.x, k.y, k.z, k.w};
          HX_UNROLL
          for (int c = 0; c < 4; ++c)  // key 0 never matches: T >= lo > 0 above the bits left
            if ((ks[c] & fixed) == want_bits && ks[c] >= lo) hx_atomic_add_u32(&h[(ks[c] >> shift) & (bins - 1u)], 1u);
        }
        hx_barrier();  // the pass's counts are whole; the other buffer's readers are done
        for (hx_u32 b = tid; b < RESIDENT_BINS; b += HX_BLOCK) hist[(buf ^ 1u) * RESIDENT_BINS + b] = 0u;
        // W chunks of `per` bins from the top: chunk c is bins (top - (c + 1) per, top - c per], lane l of a wave
        // reading the chunk's bins `2 l` and `2 l + 1` below its top (per <= 2 x the wave: bins <= RESIDENT_BINS)
        const hx_u32 per = bins > W ? bins / W : 1u;
        const auto pair_top = [&](hx_u32 c) { return (hx_i32)bins - 1 - (hx_i32)(c * per) - 2 * (hx_i32)lane; };
        const auto pair_hi = [&](hx_i32 t) { return 2 * lane < per && t >= 0 ? h[t] : 0u; };
        const auto pair_lo = [&](hx_i32 t) { return 2 * lane + 1 < per && t >= 1 ? h[t - 1] : 0u; };
        const hx_i32 b0 = pair_top(wave);
        const hx_u32 chunk = hx_wave_shfl_u32(hx_wave_inclusive_sum(pair_hi(b0) + pair_lo(b0)), HX_WAVE_SIZE - 1);
        if (lane == 0) sums[buf * W + wave] = chunk;
        hx_barrier();  // the chunk sums are whole
        // every wave alike: the chunk holding the need-th key, then its bin
        const hx_u32 s = lane < W ? sums[buf * W + lane] : 0u, upto = hx_wave_inclusive_sum(s);
        const hx_u32 c = hx_wave_count(upto < need), above = hx_wave_shfl_u32(upto - s, c);
        const hx_i32 t0 = pair_top(c);
        const hx_u32 hc = pair_hi(t0), lc = pair_lo(t0);
        const hx_u32 pair = hc + lc, through = above + hx_wave_inclusive_sum(pair);
        const hx_u32 L = hx_wave_count(through < need);
        const hx_u32 before = hx_wave_shfl_u32(through - pair, L), hcL = hx_wave_shfl_u32(hc, L),
                     lcL = hx_wave_shfl_u32(lc, L);
        const bool upper = before + hcL >= need;  // the pair's higher bin holds it
        const hx_u32 bin = (hx_u32)((hx_i32)bins - 1 - (hx_i32)(c * per) - 2 * (hx_i32)L) - (upper ? 0u : 1u);
        const hx_u32 take = need - (upper ? before : before + hcL), whole = take == (upper ? hcL : lcL);
        T |= bin << shift;
        need = take;
        top = shift - 1;
        scan = sums + (buf ^ 1u) * W;
        if (whole) break;  // uniform: T is the bin's least key, and every key of the bin is taken
      }
    }
    const hx_u32 selected = V < top_k ? V : top_k;

    // 3. the selection in index order: wave w's run of float4 slots [first, last)
    const hx_u32 per = (m4 + W - 1) / W;
    const hx_u32 first = wave * per, last = first + per < m4 ? first + per : m4;
    hx_u32 count = 0;
    for (hx_u32 v = first + lane; v < last; v += HX_WAVE_SIZE) count += hx_resident_counts(keys4[v], T);
    hx_u32 all;
    const hx_u32 run = hx_wave_inclusive_sum(count);  // the wave's counts in its last lane
    hx_u32 base = hx_group_exclusive_sum<HX_BLOCK>(tid, bar, lane == HX_WAVE_SIZE - 1 ? run : 0u, scan, &all);
    base = hx_wave_shfl_u32(base, HX_WAVE_SIZE - 1);  // the counts of the waves before this one
    hx_i32* const out_idx = hx_wave_pointer(p.indices + row * p.indices_stride);
    float* const out_val = p.values ? p.values + row * p.values_stride : 0;
    // A key lands at (keys > T before it) + min(keys == T before it, need): branch-free, one store a key taken.
    const auto place = [&](auto put) {
      for (hx_u32 v0 = first; v0 < last; v0 += HX_WAVE_SIZE) {  // uniform within the wave
        const hx_u32 v = v0 + lane;
        const hx_u32x4 k = v < last ? keys4[v] : hx_u32x4{0u, 0u, 0u, 0u};
        const hx_u32 c = hx_resident_counts(k, T), incl = hx_wave_inclusive_sum(c);
        hx_u32 g = (base + incl - c) >> 16, e = (base + incl - c) & 0xFFFFu;
        const hx_u32 ks[4] = {k.x, k.y, k.z, k.w};
        HX_UNROLL
        for (int j = 0; j < 4; ++j) {
          const bool gt = ks[j] > T, eq = ks[j] == T && ks[j] != 0u;
          const hx_u32 slot = g + (e < need ? e : need);
          if (gt || (eq && e < need)) put(slot, (hx_i32)(4 * v + j) - a, ks[j]);
          g += gt ? 1u : 0u;
          e += eq ? 1u : 0u;
        }
        base += hx_wave_shfl_u32(incl, HX_WAVE_SIZE - 1);
      }
    };
    if (sorted) {
      place([&](hx_u32 slot, hx_i32 col, hx_u32 key) { sel[slot] = hx_topk_entry(key, col); });
    } else if (out_val) {
      place([&](hx_u32 slot, hx_i32 col, hx_u32) {
        out_idx[slot] = col;
        out_val[slot] = x[col];  // the logit itself: -0.0 keys as +0.0
      });
    } else {
      place([&](hx_u32 slot, hx_i32 col, hx_u32) { out_idx[slot] = col; });
    }

    // 4. sorted: descending entries; then padding
    if (sorted) {
      hx_barrier();  // every entry is written
      hx_topk_sort_desc(sel, selected);
      for (hx_u32 s = tid; s < selected; s += HX_BLOCK) {
        const hx_i32 i = hx_topk_entry_index(sel[s]);
        out_idx[s] = i;
        if (out_val) out_val[s] = x[i];
      }
    }
    hx_topk_pad(out_idx, out_val, selected, top_k);
    hx_barrier();  // the keys and the entries are the next row's
  }
}
