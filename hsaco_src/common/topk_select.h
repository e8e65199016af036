// The pieces of an exact top-k over float32 logits that every target shares
// (hsaco_src/generic/topk_logits.hip): the order-preserving key of a logit
// and the radix digits the selection walks.
#pragma once
#include "platform.h"

// Key 0 is "not selectable"; every selectable logit maps above it, in the
// order of its value, so a radix select over keys is a select over values:
//   NaN: 0 (the reference raises for a NaN at a valid position; the device
//        cannot raise, so it leaves the NaN out, as if the position were
//        invalid);
//   -inf: 0 when -inf marks the invalid positions (no lengths), else the
//        smallest selectable key 0x007FFFFF (with lengths a -inf inside the
//        row is a value like any other);
//   -0.0 and +0.0: one key, since they compare equal and the tie then goes to
//        the lower index, as the reference's float64 comparison does.
// Positives get the sign bit set, negatives are complemented: unsigned order
// is then float order, -inf < ... < -0 = +0 < ... < +inf.
HX_INLINE HX_HD hx_u32 hx_topk_key(float v, bool minus_inf_selectable) {
  hx_u32 u = hx_f32_to_bits(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0u;
  if (u == 0xFF800000u && !minus_inf_selectable) return 0u;
  if (u == 0x80000000u) u = 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The three digits of a key, most significant first: 11 + 11 + 10 bits, so a
// pass's histogram has at most 2048 bins and fits in shared memory with room
// for the sort buffer.
#define HX_TOPK_PASSES 3
#define HX_TOPK_MAX_BINS 2048
HX_INLINE HX_HD hx_u32 hx_topk_digit_shift(int pass) { return pass == 0 ? 21u : (pass == 1 ? 10u : 0u); }
HX_INLINE HX_HD hx_u32 hx_topk_digit_bins(int pass) { return pass == 2 ? 1024u : 2048u; }

// The rows's selectable columns [0, n): the whole row, or lengths[row]
// clipped to [0, N]. A negative length only the device holds selects nothing
// (the op checks host lengths and raises for a negative one).
HX_INLINE HX_HD hx_i32 hx_topk_row_extent(const hx_i32* lengths, hx_i64 row, hx_i32 N) {
  if (!lengths) return N;
  const hx_i32 len = lengths[row];
  return len < 0 ? 0 : (len > N ? N : len);
}

// One entry of the sort buffer: the key above the complemented index, so a
// descending sort of entries is descending value, equal values by lower
// index. Entry 0 (key 0) sorts after every selected element.
HX_INLINE HX_HD hx_u64 hx_topk_entry(hx_u32 key, hx_i64 index) {
  return ((hx_u64)key << 32) | (hx_u64)(~(hx_u32)index);
}
HX_INLINE HX_HD hx_i32 hx_topk_entry_index(hx_u64 e) { return (hx_i32)(~(hx_u32)e); }

// hist[bin] += 1 from many threads at once: the count is the same in any
// order, so the output stays deterministic. The emulator runs one lane at a
// time.
#if defined(HX_NVIDIA)
HX_INLINE __device__ void hx_atomic_add_u32(hx_u32* p, hx_u32 v) { atomicAdd(p, v); }
#else
HX_INLINE HX_HD void hx_atomic_add_u32(hx_u32* p, hx_u32 v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
#endif
