// The fused prefill top-k's floors, after the logits op has run on the sample of prefill_topk_sample.hip: a block a
// row writes an order key (hx_topk_key) at or below the r-th largest of the row's sample logits, or 0 when the window
// has at most r samples (every key then enters).
//
// The key is the lowest of the histogram bin that holds the r-th largest, with bins even in value between the row's
// smallest and largest sample. A radix digit of the key would bin by exponent: a row's logits then crowd a few dozen
// bins, and the increments queue on their shared words. A bin of the value spreads a row's samples over the bins,
// and any floor at or below the r-th serves: a bin only lets in its own few samples' worth of keys more. The bin is
// monotone in the value (a subtraction and a product by a positive constant, each rounded), so the bins' counts
// from the top find the bin of the r-th as the order would.
#include "topk_sample.h"
#include "topk_select.h"

#define FLOOR_BATCH 8               // samples a thread loads at once
#define FLOOR_BINS HX_TOPK_MAX_BINS
#define FLOOR_WAVES (HX_BLOCK / HX_WAVE_SIZE)

// The smallest and largest of v over the block (every thread gets both): by shuffles within a wave, then through
// ext (2 words a wave), read after a meeting; ext is free again after the caller's next meeting.
HX_INLINE HX_DEV void floor_extremes(hx_u32& lo, hx_u32& hi, hx_u32* ext) {
  const hx_u32 lane = hx_thread_x() % HX_WAVE_SIZE;
  for (hx_u32 d = 1; d < HX_WAVE_SIZE; d *= 2) {
    const hx_u32 l2 = hx_wave_shfl_u32(lo, lane ^ d), h2 = hx_wave_shfl_u32(hi, lane ^ d);
    lo = l2 < lo ? l2 : lo;
    hi = h2 > hi ? h2 : hi;
  }
  if (lane == 0) {
    ext[2 * (hx_thread_x() / HX_WAVE_SIZE)] = lo;
    ext[2 * (hx_thread_x() / HX_WAVE_SIZE) + 1] = hi;
  }
  hx_barrier();
  for (hx_u32 w = 0; w < FLOOR_WAVES; ++w) {
    lo = ext[2 * w] < lo ? ext[2 * w] : lo;
    hi = ext[2 * w + 1] > hi ? ext[2 * w + 1] : hi;
  }
}

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_prefill_topk_floor(const HX_GRID_CONSTANT PrefillSampleParams p) {
  HX_SHARED(hx_u32, hist, FLOOR_BINS);
  HX_SHARED(hx_u32, scan, FLOOR_WAVES);
  HX_SHARED(hx_u32, found, 2);
  HX_SHARED(hx_u32, ext, 2 * FLOOR_WAVES);
  const hx_u32 tid = hx_thread_x();
  for (hx_i64 m = hx_block_x(); m < p.M; m += hx_grid_dim_x()) {
    const hx_range w = hx_sample_window(p, m);
    const float* row = p.logits + m * p.samples;
    // f(key) for each selectable sample of the thread's (a NaN logit keys 0 and is left out). A batch's loads are
    // issued before any of its keys is used: shared-memory atomics would otherwise wait on each load in turn.
    auto each = [&](auto&& f) {
      for (hx_i32 i0 = w.lo + (hx_i32)tid; i0 < w.hi; i0 += FLOOR_BATCH * HX_BLOCK) {
        float x[FLOOR_BATCH];
        HX_UNROLL
        for (int b = 0; b < FLOOR_BATCH; ++b) {
          const hx_i32 i = i0 + b * HX_BLOCK;
          x[b] = i < w.hi ? row[i] : hx_bits_to_f32(0x7FC00000u);
        }
        HX_UNROLL
        for (int b = 0; b < FLOOR_BATCH; ++b) {
          const hx_u32 key = hx_topk_key(x[b], false);
          if (key) f(key);
        }
      }
    };
    hx_u32 mine = 0, lo = 0xFFFFFFFFu, hi = 0u;
    each([&](hx_u32 k) {
      ++mine;
      lo = k < lo ? k : lo;
      hi = k > hi ? k : hi;
    });
    floor_extremes(lo, hi, ext);
    hx_u32 count;
    hx_block_exclusive_sum(mine, scan, &count);  // its meetings also free ext
    hx_u32 floor = 0u;
    if (count > (hx_u32)p.r) {  // uniform
      const float vlo = hx_topk_value(lo), span = hx_topk_value(hi) - vlo;
      // below FLOOR_BINS for every sample; 0 when the span overflows (every finite sample then in bin 0)
      const float per = span > 0.f ? (float)FLOOR_BINS / span * 0.9999f : 0.f;
      auto bin = [&](hx_u32 k) -> hx_u32 {
        const float x = (hx_topk_value(k) - vlo) * per;
        return x < (float)FLOOR_BINS ? (x > 0.f ? (hx_u32)x : 0u) : FLOOR_BINS - 1u;  // NaN (inf x 0): the top
      };
      for (hx_u32 b = tid; b < FLOOR_BINS; b += HX_BLOCK) hist[b] = 0u;
      hx_barrier();
      each([&](hx_u32 k) { hx_atomic_add_u32(&hist[bin(k)], 1u); });
      hx_barrier();
      hx_topk_find_bin(hist, FLOOR_BINS, (hx_u32)p.r, scan, found);
      const hx_u32 at = found[0];
      hx_u32 least = 0xFFFFFFFFu, unused = 0u;
      each([&](hx_u32 k) { least = bin(k) == at && k < least ? k : least; });
      floor_extremes(least, unused, ext);
      floor = least;
    }
    if (tid == 0) p.floors[m] = floor;
    hx_barrier();  // the shared arrays are the next row's
  }
}
