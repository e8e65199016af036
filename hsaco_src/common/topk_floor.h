// A row's floor from a sample of its keys, by one block (generic/prefill_topk_floor.hip,
// generic/topk_split_floor.hip): an order key (hx_topk_key) at or below the r-th largest sampled key, or 0 when the
// sample holds at most r keys (every key then passes).
//
// The floor is the lowest key of the histogram bin that holds the r-th largest, with bins even in value between the
// sample's smallest and largest. A radix digit of the key would bin by exponent: a row's keys then crowd a few dozen
// bins, and the increments queue on their shared words. A bin of the value spreads them over the bins, and any floor
// at or below the r-th serves: a bin only lets in its own few samples' worth of keys more. The bin is monotone in the
// value (a subtraction and a product by a positive constant, each rounded), so the bins' counts from the top find
// the bin of the r-th as the order would.
#pragma once
#include "topk_select.h"

#define HX_FLOOR_BINS HX_TOPK_MAX_BINS
#define HX_FLOOR_WAVES (HX_BLOCK / HX_WAVE_SIZE)
// The shared words of hx_block_floor (hist, scan, found, ext), declared at a floor kernel's scope.
#define HX_FLOOR_SHARED                         \
  HX_SHARED(hx_u32, hist, HX_FLOOR_BINS);       \
  HX_SHARED(hx_u32, scan, HX_FLOOR_WAVES);      \
  HX_SHARED(hx_u32, found, 2);                  \
  HX_SHARED(hx_u32, ext, 2 * HX_FLOOR_WAVES)

// The smallest and largest of v over the block (every thread gets both): by shuffles within a wave, then through
// ext (2 words a wave), read after a meeting; ext is free again after the caller's next meeting.
HX_INLINE HX_DEV void hx_floor_extremes(hx_u32& lo, hx_u32& hi, hx_u32* ext) {
  const hx_u32 lane = hx_thread_x() % HX_WAVE_SIZE;
  hx_wave_extremes(lane, lo, hi);
  if (lane == 0) {
    ext[2 * (hx_thread_x() / HX_WAVE_SIZE)] = lo;
    ext[2 * (hx_thread_x() / HX_WAVE_SIZE) + 1] = hi;
  }
  hx_barrier();
  hx_waves_extremes<HX_FLOOR_WAVES>(lane, ext, lo, hi);
}

// The floor of the keys each(f) visits (f(key, at...) for every nonzero key of this thread's share of the sample,
// the same keys on every call: it is called three times; at... is whatever each tells of where the key lies, passed
// on to kept). kept(key, at...) sees, on the last pass, every key at or above the floor it returns (the floor is its
// bin's least key and the bin is monotone in the key, so those are the keys of that bin and above), none when the
// floor is 0. Shared: hist (HX_FLOOR_BINS words), scan (a word a wave), found (2), ext (2 words a wave); free again
// after the caller's next meeting.
struct hx_floor_keeps_none {
  template <class... A>
  HX_MEMBER HX_DEV void operator()(A...) const {}
};
template <class Each, class Kept = hx_floor_keeps_none>
HX_INLINE HX_DEV hx_u32 hx_block_floor(Each&& each, hx_u32 r, hx_u32* hist, hx_u32* scan, hx_u32* found,
                                       hx_u32* ext, Kept&& kept = {}) {
  const hx_u32 tid = hx_thread_x();
  hx_u32 mine = 0, lo = 0xFFFFFFFFu, hi = 0u;
  each([&](hx_u32 k, auto...) {
    ++mine;
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
  });
  hx_floor_extremes(lo, hi, ext);
  hx_u32 count;
  hx_block_exclusive_sum(mine, scan, &count);  // its meetings also free ext
  if (count <= r) return 0u;                   // uniform
  const float vlo = hx_topk_value(lo), span = hx_topk_value(hi) - vlo;
  // below HX_FLOOR_BINS for every sample; 0 when the span overflows (every finite sample then in bin 0)
  const float per = span > 0.f ? (float)HX_FLOOR_BINS / span * 0.9999f : 0.f;
  auto bin = [&](hx_u32 k) -> hx_u32 {
    const float x = (hx_topk_value(k) - vlo) * per;
    return x < (float)HX_FLOOR_BINS ? (x > 0.f ? (hx_u32)x : 0u) : HX_FLOOR_BINS - 1u;  // NaN (inf x 0): the top
  };
  for (hx_u32 b = tid; b < HX_FLOOR_BINS; b += HX_BLOCK) hist[b] = 0u;
  hx_barrier();
  each([&](hx_u32 k, auto...) { hx_atomic_add_u32(&hist[bin(k)], 1u); });
  hx_barrier();
  hx_topk_find_bin(hist, HX_FLOOR_BINS, r, scan, found);
  const hx_u32 at = found[0];
  hx_u32 least = 0xFFFFFFFFu, unused = 0u;
  each([&](hx_u32 k, auto... where) {
    const hx_u32 b = bin(k);
    least = b == at && k < least ? k : least;
    if (b >= at) kept(k, where...);
  });
  hx_floor_extremes(least, unused, ext);
  return least;
}

// The floor of the float32 samples load(i), i in [lo, hi) (a NaN, or -inf unless minus_inf_selectable, is not
// selectable), thread t taking samples lo + t, lo + t + HX_BLOCK, ...: BATCH of them loaded at once before any is used
// (the histogram's shared atomics would otherwise wait on each load in turn), on each of the floor's three passes.
// kept(key, i) as hx_block_floor's. I: the samples' index type (hx_i32 where it holds them).
template <int BATCH, class I, class Load, class Kept = hx_floor_keeps_none>
HX_INLINE HX_DEV hx_u32 hx_block_floor_of(I lo, I hi, Load&& load, bool minus_inf_selectable, hx_u32 r, hx_u32* hist,
                                          hx_u32* scan, hx_u32* found, hx_u32* ext, Kept&& kept = {}) {
  auto each = [&](auto&& f) {
    for (I i0 = lo + (I)hx_thread_x(); i0 < hi; i0 += BATCH * HX_BLOCK) {
      float v[BATCH];
      HX_UNROLL
      for (int b = 0; b < BATCH; ++b) {
        const I i = i0 + b * HX_BLOCK;
        v[b] = i < hi ? load(i) : hx_bits_to_f32(0x7FC00000u);
      }
      HX_UNROLL
      for (int b = 0; b < BATCH; ++b) {
        const hx_u32 key = hx_topk_key(v[b], minus_inf_selectable);
        if (key) f(key, i0 + b * HX_BLOCK);
      }
    }
  };
  return hx_block_floor(each, r, hist, scan, found, ext, kept);
}
