// The steps of a selection over keys resident in shared memory (hx_topk_key order keys, a float4 of them a slot),
// shared by the resident path's block (generic/topk_resident.hip: a row in one block) and the cluster path's
// (sm90a/topk_cluster.hip: a row's slots cut among the blocks of a cluster). A group here is the whole block
// (HX_BLOCK threads); `meet(buf)` is the meeting after which the counts of a pass (in buffer buf) are whole where
// `count` reads them (the block's barrier; or the cluster's, then the blocks' sums of every block's counts, then the
// cluster's again), `count(buf, t)` the whole count of bin t of the pass in buffer buf.
#pragma once
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

// The row's float4 slots [vb, ve) as keys into keys4[0, ve - vb): slot s holds column s - a of x (a: the row's
// misalignment in floats, so that xa = x - a is 16-byte aligned and the row's inner slots are one 16-byte load
// each; the head and the tail column by column, nothing outside [0, n) read). Slots without a column hold key 0,
// which nothing selects. A thread's count of selectable keys and its least and greatest key come back in mine, lo,
// hi.
HX_INLINE HX_DEV void hx_resident_keys_in(const float* x, hx_i32 a, hx_i32 n, hx_u32 vb, hx_u32 ve, bool by_lengths,
                                          hx_u32x4* keys4, hx_u32 tid, hx_u32& mine, hx_u32& lo, hx_u32& hi) {
  const float* const xa = x - a;
  mine = 0;
  lo = 0xFFFFFFFFu;
  hi = 0u;
  const auto keys_in = [&](auto loads) {  // J float4 loads a thread in flight
    constexpr int J = decltype(loads)::value;
    for (hx_u32 v0 = vb; v0 < ve; v0 += HX_BLOCK * J) {
      hx_f32x4 q[J];
      HX_UNROLL
      for (int j = 0; j < J; ++j) {
        const hx_i32 v = (hx_i32)(v0 + tid + (hx_u32)j * HX_BLOCK);
        const float nan = hx_bits_to_f32(0x7FC00000u);
        if (v >= (hx_i32)ve) {  // past the range (the loop's last batch)
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
        if (v < ve) {
          const hx_u32 ks[4] = {hx_topk_key(q[j].x, by_lengths), hx_topk_key(q[j].y, by_lengths),
                                hx_topk_key(q[j].z, by_lengths), hx_topk_key(q[j].w, by_lengths)};
          HX_UNROLL
          for (int c = 0; c < 4; ++c) {
            mine += ks[c] != 0u;
            lo = ks[c] != 0u && ks[c] < lo ? ks[c] : lo;
            hi = ks[c] > hi ? ks[c] : hi;
          }
          keys4[v - vb] = {ks[0], ks[1], ks[2], ks[3]};
        }
      }
    }
  };
  if (ve - vb <= 2 * HX_BLOCK) {  // short ranges: fewer loads past the range to skip
    keys_in(hx_resident_loads<2>{});
  } else if (ve - vb <= 4 * HX_BLOCK) {
    keys_in(hx_resident_loads<4>{});
  } else {
    keys_in(hx_resident_loads<RESIDENT_LOADS>{});
  }
}

// T, the top_k-th largest of the selectable keys (V > top_k of them, lo the least and hi the greatest, over every
// holder), and `need`, how many keys equal to T the selection takes (the lowest-indexed), by a radix select over
// the 32-bit keys keys4[0, m) this block holds: digits of up to RESIDENT_BITS bits from the highest bit in which lo
// and hi differ (the bits above it are every key's, and a first digit there would crowd the keys into a few bins,
// whose increments then queue on one shared word), each pass counting the keys that match the digits found so far
// into hist's buffer buf. A pass meets twice: `meet` once the counts are whole (each wave then sums a chunk of the
// bins through `count`), the block's barrier once the chunk sums are; every wave then finds the chunk and the bin of
// the need-th key by itself. The buffers alternate, each cleared during the pass before its own (after `meet`, when
// no holder reads it any more), so no pass waits for a clearing; buffer 0 must be clear on entry. scan comes back as
// the chunk sums that the last pass does not read (free for the caller).
template <class Meet, class Count>
HX_INLINE HX_DEV void hx_resident_cut(hx_u32 tid, const hx_u32x4* keys4, hx_u32 m, hx_u32 lo, hx_u32 hi,
                                      hx_u32 top_k, hx_u32* hist, hx_u32* sums, const Meet& meet, const Count& count,
                                      hx_u32& T, hx_u32& need, hx_u32*& scan) {
  constexpr hx_u32 W = HX_BLOCK / HX_WAVE_SIZE;
  const hx_u32 lane = tid % HX_WAVE_SIZE, wave = tid / HX_WAVE_SIZE;
  int top = lo == hi ? -1 : 31 - __builtin_clz(lo ^ hi);  // the highest bit left to resolve
  T = top >= 31 ? 0u : lo >> (top + 1) << (top + 1);
  need = top_k;
  for (hx_u32 buf = 0; top >= 0; buf ^= 1u) {
    const int shift = top >= RESIDENT_BITS - 1 ? top - (RESIDENT_BITS - 1) : 0;
    const hx_u32 bins = 1u << (top - shift + 1), fixed = top >= 31 ? 0u : ~0u << (top + 1);
    hx_u32* const h = hist + buf * RESIDENT_BINS;
    const hx_u32 want_bits = T & fixed;
    for (hx_u32 v = tid; v < m; v += HX_BLOCK) {
      const hx_u32x4 k = keys4[v];
      const hx_u32 ks[4] = {k.x, k.y, k.z, k.w};
      HX_UNROLL
      for (int c = 0; c < 4; ++c)  // key 0 never matches: T >= lo > 0 above the bits left
        if ((ks[c] & fixed) == want_bits && ks[c] >= lo) hx_atomic_add_u32(&h[(ks[c] >> shift) & (bins - 1u)], 1u);
    }
    meet(buf);  // the pass's counts are whole; the other buffer's readers are done
    for (hx_u32 b = tid; b < RESIDENT_BINS; b += HX_BLOCK) hist[(buf ^ 1u) * RESIDENT_BINS + b] = 0u;
    // W chunks of `per` bins from the top: chunk c is bins (top - (c + 1) per, top - c per], lane l of a wave
    // reading the chunk's bins `2 l` and `2 l + 1` below its top (per <= 2 x the wave: bins <= RESIDENT_BINS)
    const hx_u32 per = bins > W ? bins / W : 1u;
    const auto pair_top = [&](hx_u32 c) { return (hx_i32)bins - 1 - (hx_i32)(c * per) - 2 * (hx_i32)lane; };
    const auto pair_hi = [&](hx_i32 t) { return 2 * lane < per && t >= 0 ? count(buf, (hx_u32)t) : 0u; };
    const auto pair_lo = [&](hx_i32 t) { return 2 * lane + 1 < per && t >= 1 ? count(buf, (hx_u32)(t - 1)) : 0u; };
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

// The compaction in index order, in two halves so that a block holding part of a row can learn what the blocks
// before it take in between. The block's slots [0, m) are cut into a run of consecutive slots a wave; each wave
// counts (keys > T, keys == T) over its run, and a block scan of the waves' counts places the runs (through scan, a
// word a wave). Counts are packed (keys > T) << 16 | (keys == T): a block holds fewer than 65,536 keys.
struct hx_resident_run {
  hx_u32 first, last;  // the wave's run of slots
  hx_u32 base;         // the packed counts of the waves before this one
  hx_u32 all;          // the block's packed counts
};
HX_INLINE HX_DEV hx_resident_run hx_resident_runs(hx_u32 tid, const hx_u32x4* keys4, hx_u32 m, hx_u32 T,
                                                  hx_u32* scan) {
  constexpr hx_u32 W = HX_BLOCK / HX_WAVE_SIZE;
  const hx_u32 lane = tid % HX_WAVE_SIZE, wave = tid / HX_WAVE_SIZE;
  const hx_u32 per = (m + W - 1) / W;
  hx_resident_run r;
  r.first = wave * per;
  r.last = r.first + per < m ? r.first + per : m;
  hx_u32 count = 0;
  for (hx_u32 v = r.first + lane; v < r.last; v += HX_WAVE_SIZE) count += hx_resident_counts(keys4[v], T);
  hx_block_bar bar;
  const hx_u32 run = hx_wave_inclusive_sum(count);  // the wave's counts in its last lane
  r.base = hx_group_exclusive_sum<HX_BLOCK>(tid, bar, lane == HX_WAVE_SIZE - 1 ? run : 0u, scan, &r.all);
  r.base = hx_wave_shfl_u32(r.base, HX_WAVE_SIZE - 1);
  return r;
}

// The selection's keys of a wave's run: key i of the block lands at gt0 + (keys > T before it) +
// min(eq0 + (keys == T before it), need), gt0 and eq0 the keys > T and == T of the holders before this block (0 for
// a block holding its whole row), and put(slot, column, key) takes it (column 4 v + j - a for key j of slot v, a
// the row's misalignment less the block's first slot's columns). Branch-free: one put a key taken; within a wave a
// lane's keys follow the lanes' before it.
template <class Put>
HX_INLINE HX_DEV void hx_resident_place(hx_u32 tid, const hx_u32x4* keys4, hx_resident_run r, hx_i32 a, hx_u32 T,
                                        hx_u32 need, hx_u32 gt0, hx_u32 eq0, const Put& put) {
  const hx_u32 lane = tid % HX_WAVE_SIZE;
  for (hx_u32 v0 = r.first; v0 < r.last; v0 += HX_WAVE_SIZE) {  // uniform within the wave
    const hx_u32 v = v0 + lane;
    const hx_u32x4 k = v < r.last ? keys4[v] : hx_u32x4{0u, 0u, 0u, 0u};
    const hx_u32 c = hx_resident_counts(k, T), incl = hx_wave_inclusive_sum(c);
    hx_u32 g = gt0 + ((r.base + incl - c) >> 16), e = eq0 + ((r.base + incl - c) & 0xFFFFu);
    const hx_u32 ks[4] = {k.x, k.y, k.z, k.w};
    HX_UNROLL
    for (int j = 0; j < 4; ++j) {
      const bool gt = ks[j] > T, eq = ks[j] == T && ks[j] != 0u;
      const hx_u32 slot = g + (e < need ? e : need);
      if (gt || (eq && e < need)) put(slot, (hx_i32)(4 * v + j) - a, ks[j]);
      g += gt ? 1u : 0u;
      e += eq ? 1u : 0u;
    }
    r.base += hx_wave_shfl_u32(incl, HX_WAVE_SIZE - 1);
  }
}
