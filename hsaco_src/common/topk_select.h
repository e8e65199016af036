// The pieces of an exact top-k over float32 logits that every target shares
// (hsaco_src/generic/topk_logits.hip, generic/topk_split_*.hip): the
// order-preserving key of a logit, the radix digits the selection walks, and,
// for code built with HX_BLOCK (a kernel), the block-wide pieces both the
// single-block kernel and the split path's last kernel run: the bin holding
// the top_k-th key, the bitonic sort of the selection, and a whole row by one
// block (hx_topk_row), which the split path falls back to.
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
// is then float order, -inf < ... < -0 = +0 < ... < +inf. Every finite value
// and +inf then lands in [0x00800000, 0xFF800000], -inf just below (0x007FFFFF)
// and a NaN outside both ends, so one range test says what is selectable
// (branch-free: the fused kernels key every logit they compute).
// hx_topk_order_key is the order alone, for a value known to be selectable (a filter whose value test left NaN and
// -inf out): the same key for those.
HX_INLINE HX_HD hx_u32 hx_topk_order_key(float v) {
  hx_u32 u = hx_f32_to_bits(v);
  u = u == 0x80000000u ? 0u : u;
  return u ^ ((hx_u32)((hx_i32)u >> 31) | 0x80000000u);
}
HX_INLINE HX_HD hx_u32 hx_topk_key(float v, bool minus_inf_selectable) {
  const hx_u32 key = hx_topk_order_key(v);
  const hx_u32 lowest = minus_inf_selectable ? 0x007FFFFFu : 0x00800000u;
  return key - lowest <= 0xFF800000u - lowest ? key : 0u;
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
// A key's float value: hx_topk_key inverted (key 0 never reaches here).
HX_INLINE HX_HD float hx_topk_value(hx_u32 key) {
  return hx_bits_to_f32((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// The least value whose key (hx_topk_key(., false)) reaches `floor`: a selectable logit x has a key >= floor exactly
// when x >= it (keys follow values, -0 and +0 share one, hx_topk_value inverts a key), and NaN and -inf never reach
// it; so a filter compares each logit once and keys only those that pass. A floor at or below the lowest
// selectable key gives the lowest finite value, one above the highest key a NaN (nothing passes).
HX_INLINE HX_HD float hx_topk_floor_value(hx_u32 floor) {
  if (floor <= 0x00800000u) return hx_bits_to_f32(0xFF7FFFFFu);
  if (floor > 0xFF800000u) return hx_bits_to_f32(0x7FC00000u);
  return hx_topk_value(floor);
}

// *p += v from many threads at once, returning the old value: a count is the
// same in any order, and a slot handed out this way only says where an entry
// waits for a sort, so the output stays deterministic. The emulator runs one
// lane at a time.
#if defined(HX_NVIDIA)
HX_INLINE __device__ hx_u32 hx_atomic_add_u32(hx_u32* p, hx_u32 v) { return atomicAdd(p, v); }
#else
HX_INLINE HX_HD hx_u32 hx_atomic_add_u32(hx_u32* p, hx_u32 v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
#endif

// ---------------------------------------------------------------- a group's selection
// Pieces run by a group of G threads (thread t of 0..G-1, whole waves) that meet at bar(): a whole block, or the
// math warpgroups of a kernel at a named barrier.

// The smallest lo and the largest hi over a wave's lanes, every lane getting both: shuffles only.
HX_INLINE HX_DEV void hx_wave_extremes(hx_u32 lane, hx_u32& lo, hx_u32& hi) {
  for (hx_u32 d = 1; d < HX_WAVE_SIZE; d *= 2) {
    const hx_u32 l2 = hx_wave_shfl_u32(lo, lane ^ d), h2 = hx_wave_shfl_u32(hi, lane ^ d);
    lo = l2 < lo ? l2 : lo;
    hi = h2 > hi ? h2 : hi;
  }
}

// What crosses the waves of a group below goes through a word (or two) a wave in shared memory and comes back by
// one read a lane and a wave's shuffles: a thread's steps grow with log2 of the wave, not with the group's count of
// waves (32 in a block of 1,024 threads, each of whose threads would otherwise loop over all of them). Hence at most
// a wave of waves.

// The smallest lo and largest hi over a group of W waves, every thread getting both: each wave's pair, reduced
// within the wave, at ext[2 w] and ext[2 w + 1] (written by the caller before its meeting).
template <hx_u32 W>
HX_INLINE HX_DEV void hx_waves_extremes(hx_u32 lane, const hx_u32* ext, hx_u32& lo, hx_u32& hi) {
  static_assert(W >= 1 && W <= HX_WAVE_SIZE, "at most a wave of waves");
  lo = lane < W ? ext[2 * lane] : 0xFFFFFFFFu;
  hi = lane < W ? ext[2 * lane + 1] : 0u;
  hx_wave_extremes(lane, lo, hi);
}

// Exclusive prefix sum of v over the group's threads in order; *total is the sum over all of them. Within each wave
// by shuffles, then across waves through buf (a word a wave), scanned by every wave's lanes: two meetings. buf is
// free again on return.
template <hx_u32 G, class Bar>
HX_INLINE HX_DEV hx_u32 hx_group_exclusive_sum(hx_u32 t, Bar& bar, hx_u32 v, hx_u32* buf, hx_u32* total) {
  static_assert(G % HX_WAVE_SIZE == 0 && G / HX_WAVE_SIZE <= HX_WAVE_SIZE, "whole waves, at most a wave of them");
  constexpr hx_u32 W = G / HX_WAVE_SIZE;
  const hx_u32 lane = t % HX_WAVE_SIZE, wave = t / HX_WAVE_SIZE;
  const hx_u32 inclusive = hx_wave_inclusive_sum(v);
  if (lane == HX_WAVE_SIZE - 1) buf[wave] = inclusive;
  bar();
  const hx_u32 x = lane < W ? buf[lane] : 0u;  // lane w holds wave w's sum
  const hx_u32 upto = hx_wave_inclusive_sum(x);
  *total = hx_wave_shfl_u32(upto, W - 1);
  const hx_u32 before = hx_wave_shfl_u32(upto - x, wave);
  bar();
  return before + inclusive - v;
}

// Thread t of a group of G owns ceil(bins / G) bins of hist[0, bins), counted down from the top, so that the
// exclusive sum of the owners' counts, in thread order, is the number of keys in higher bins. hx_owned_bins_sum
// counts a thread's bins; hx_owned_bins_find, called by the thread whose bins hold the want-th largest key (above <
// want <= above + its count, above its exclusive sum), writes found[0] = that key's bin and found[1] = how many of
// the bin's keys the top `want` take (1..hist[bin]).
template <hx_u32 G>
HX_INLINE HX_DEV hx_u32 hx_owned_bins_sum(hx_u32 t, const hx_u32* hist, hx_u32 bins) {
  const hx_u32 per = (bins + G - 1) / G;
  const hx_i32 top = (hx_i32)bins - 1 - (hx_i32)(t * per);
  hx_u32 mine = 0;
  for (hx_i32 j = 0; j < (hx_i32)per && top - j >= 0; ++j) mine += hist[(hx_u32)(top - j)];
  return mine;
}
template <hx_u32 G>
HX_INLINE HX_DEV void hx_owned_bins_find(hx_u32 t, const hx_u32* hist, hx_u32 bins, hx_u32 want, hx_u32 above,
                                         hx_u32* found) {
  const hx_u32 per = (bins + G - 1) / G;
  const hx_i32 top = (hx_i32)bins - 1 - (hx_i32)(t * per);
  for (hx_i32 j = 0; j < (hx_i32)per && top - j >= 0; ++j) {
    const hx_u32 c = hist[(hx_u32)(top - j)];
    if (above + c >= want) {
      found[0] = (hx_u32)(top - j);
      found[1] = want - above;
      break;
    }
    above += c;
  }
}

// The bin of hist[0, bins) that holds the want-th largest of the counted keys, in found as hx_owned_bins_find
// writes it; returns the count over every bin, and writes found only when that is >= want. found is read after the
// closing meeting and must not be rewritten before the next.
template <hx_u32 G, class Bar>
HX_INLINE HX_DEV hx_u32 hx_group_find_bin(hx_u32 t, Bar& bar, const hx_u32* hist, hx_u32 bins, hx_u32 want,
                                          hx_u32* scan, hx_u32* found) {
  const hx_u32 mine = hx_owned_bins_sum<G>(t, hist, bins);
  hx_u32 total;
  const hx_u32 above = hx_group_exclusive_sum<G>(t, bar, mine, scan, &total);
  if (above < want && above + mine >= want) hx_owned_bins_find<G>(t, hist, bins, want, above, found);
  bar();
  return total;
}

// The smallest entry of the top `want` of the entries each(f) visits (hx_topk_entry: by key, equal keys by lower
// index; no two equal, none 0; more than want of them): each(f) calls f(x) for every entry thread t owns, every
// thread calling it. A radix select over the 64-bit entries, most significant digit first, up to BITS bits a pass
// (at most 11: fewer bins to clear and scan a pass, more keys to a bin): first the key bits below the prefix every
// key shares (found from the smallest and largest key, so that the first pass spreads the keys over its bins
// instead of piling them into a few, whose increments would queue on one shared word), then, only while equal keys
// straddle the cut, the complemented index's; it stops at the first digit whose bin is taken whole, or after
// `passes` digits: the cut is then the lowest entry of its bin, and the entries at or above it the top `want` and
// the rest of that bin. Shared: hist (2048 words), scan (a word a wave), found (2); free again on return.
// `range` is the keys' range: the least and greatest key of the entries thread t owns (hx_group_cut_value reads
// them; a caller that kept them as it stored the entries passes them, so that nothing reads the entries for them).
struct hx_key_range {
  hx_u32 lo = 0xFFFFFFFFu, hi = 0u;
  HX_MEMBER HX_HD void add(hx_u64 x) {
    const hx_u32 k = (hx_u32)(x >> 32);
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
  }
};
template <hx_u32 G, int BITS = 11, class Bar, class Each>
HX_INLINE HX_DEV hx_u64 hx_group_select(hx_u32 t, Bar& bar, const Each& each, hx_key_range range, hx_u32 want,
                                           hx_u32* hist, hx_u32* scan, hx_u32* found, int passes = 64) {
  static_assert(BITS >= 1 && BITS <= 11, "a pass's bins fit hist (HX_TOPK_MAX_BINS)");
  // the keys' range: the bits above its highest differing bit are every entry's
  hx_u32 lo = range.lo, hi = range.hi;
  hx_wave_extremes(t % HX_WAVE_SIZE, lo, hi);
  if (t % HX_WAVE_SIZE == 0) {
    hist[2 * (t / HX_WAVE_SIZE)] = lo;
    hist[2 * (t / HX_WAVE_SIZE) + 1] = hi;
  }
  bar();
  hx_waves_extremes<G / HX_WAVE_SIZE>(t % HX_WAVE_SIZE, hist, lo, hi);
  bar();  // hist is cleared next
  int top = 32 + (lo == hi ? -1 : 31 - __builtin_clz(lo ^ hi));  // the highest bit left to resolve
  hx_u64 cut = top >= 63 ? 0ull : ((hx_u64)lo << 32) >> (top + 1) << (top + 1);
  hx_u32 need = want;
  while (top >= 0 && passes-- > 0) {
    const int shift = top >= BITS - 1 ? top - (BITS - 1) : 0;
    const hx_u32 bins = 1u << (top - shift + 1), high = (hx_u32)top + 1u;
    for (hx_u32 b = t; b < bins; b += G) hist[b] = 0u;
    bar();
    each([&](hx_u64 x) {
      if (high >= 64 || (x >> high) == (cut >> high)) hx_atomic_add_u32(&hist[(hx_u32)(x >> shift) & (bins - 1u)], 1u);
    });
    bar();
    hx_group_find_bin<G>(t, bar, hist, bins, need, scan, found);
    const hx_u32 bin = found[0], take = found[1], whole = take == hist[bin];
    cut |= (hx_u64)bin << shift;
    need = take;
    top = shift - 1;
    bar();  // found and hist are rewritten by the next pass
    if (whole) break;  // uniform: every thread read the same found and hist
  }
  return cut;
}

// The top `want` of the entries e[0, count) (as hx_group_select takes them), kept in e[0, min(count, want)) in no
// particular order; returns that count, and in cut the smallest entry an entry must reach to be kept (when count >
// want; kept: e >= cut). hx_group_select finds the cut (in `passes` digits at most: then the entries kept are the
// top want and the rest of the cut's bin, and their count is what it returns); then every entry at or above it is
// moved down, a tile of HX_CUT_ITEMS entries a thread at a time (read before any is written, and no write goes
// past the tile). The select's passes read U entries a thread at a time, a digit of BITS bits a pass. Shared: hist,
// scan and found as hx_group_select's, fill (1); all free again on return.
// hx_group_cut_value finds the cut alone (0 where count <= want: every entry is kept; from the threads' `range`
// where `known`), hx_group_keep moves the entries at or above a cut down, and hx_group_cut
// is the two, as above.
#define HX_CUT_ITEMS 8
// f(x) for each entry e[i] of e[0, count) that thread t of a group of G owns (i = t, t + G, ...), U loads in flight
// before the first is used.
template <hx_u32 G, int U, class F>
HX_INLINE HX_DEV void hx_each_owned(hx_u32 t, const hx_u64* e, hx_u32 count, F&& f) {
  hx_u32 i = t;
  if constexpr (U > 1) {
    for (; i + (hx_u32)(U - 1) * G < count; i += (hx_u32)U * G) {
      hx_u64 x[U];
      HX_UNROLL
      for (int k = 0; k < U; ++k) x[k] = e[i + (hx_u32)k * G];
      HX_UNROLL
      for (int k = 0; k < U; ++k) f(x[k]);
    }
  }
  for (; i < count; i += G) f(e[i]);
}
template <hx_u32 G, int U = 1, int BITS = 11, class Bar>
HX_INLINE HX_DEV hx_u64 hx_group_cut_value(hx_u32 t, Bar& bar, const hx_u64* e, hx_u32 count, hx_u32 want,
                                           hx_u32* hist, hx_u32* scan, hx_u32* found, int passes = 64,
                                           bool known = false, hx_key_range range = {}) {
  if (count <= want) return 0ull;
  const auto each = [&](auto&& f) { hx_each_owned<G, U>(t, e, count, f); };
  if (!known) each([&](hx_u64 x) { range.add(x); });
  return hx_group_select<G, BITS>(t, bar, each, range, want, hist, scan, found, passes);
}
// A thread's tile of entries (0: none) appended at *fill where at or above cut, each written to e at its place.
HX_INLINE HX_DEV void hx_keep_tile(const hx_u64 (&mine)[HX_CUT_ITEMS], hx_u64 cut, hx_u32* fill, hx_u64* e) {
  bool keep[HX_CUT_ITEMS];
  hx_u32 at[HX_CUT_ITEMS];
  HX_UNROLL
  for (int k = 0; k < HX_CUT_ITEMS; ++k) keep[k] = mine[k] >= cut && mine[k] != 0ull;
  hx_append_each(keep, fill, at);
  HX_UNROLL
  for (int k = 0; k < HX_CUT_ITEMS; ++k)
    if (keep[k]) e[at[k]] = mine[k];
}
template <hx_u32 G, class Bar>
HX_INLINE HX_DEV hx_u32 hx_group_keep(hx_u32 t, Bar& bar, hx_u64* e, hx_u32 count, hx_u64 cut, hx_u32* fill) {
  if (t == 0) *fill = 0u;
  for (hx_u32 base = 0; base < count; base += G * HX_CUT_ITEMS) {
    hx_u64 mine[HX_CUT_ITEMS];
    HX_UNROLL
    for (int k = 0; k < HX_CUT_ITEMS; ++k) {
      const hx_u32 i = base + t + (hx_u32)k * G;
      mine[k] = i < count ? e[i] : 0ull;
    }
    bar();  // the tile is read before any of it is overwritten; fill stays within it
    hx_keep_tile(mine, cut, fill, e);
  }
  bar();
  const hx_u32 kept = *fill;  // want, unless the passes stopped short
  bar();                      // read by all before fill is reused
  return kept;
}
template <hx_u32 G, int U = 1, int BITS = 11, class Bar>
HX_INLINE HX_DEV hx_u32 hx_group_cut(hx_u32 t, Bar& bar, hx_u64* e, hx_u32 count, hx_u32 want, hx_u32* hist,
                                     hx_u32* scan, hx_u32* found, hx_u32* fill, hx_u64& cut, int passes = 64) {
  cut = 0;
  if (count <= want) return count;
  cut = hx_group_cut_value<G, U, BITS>(t, bar, e, count, want, hist, scan, found, passes);
  return hx_group_keep<G>(t, bar, e, count, cut, fill);
}

// R rows cut side by side (a fused decode segment's live rows): for every row with more than `want` entries, what
// hx_group_cut does (with passes = 1, the top want and the rest of the first digit's bin), each row with its own
// digits, cut and count, but the rows' steps under one set of meetings, since a pass costs its meetings and its
// scan of the bins more than its entries. Row r: entries e[r][0, count[r]) (on return, those kept: count[r] the
// kept count, cut[r] the least kept entry, 0 where the row was not cut). Each row counts its digits in its own
// HX_TOPK_MAX_BINS / R words of hist (digits of up to 11 - log2 R bits), and the rows' counts cross the group in
// one exclusive sum, 32 / R bits a row: a row holds fewer than 2^(32 / R) entries. scan: a word a wave; found: 2 R
// words; fill: R words; all free again on return.
template <hx_u32 G, hx_u32 R, int U = 1, class Bar>
HX_INLINE HX_DEV void hx_group_cut_rows(hx_u32 t, Bar& bar, hx_u64* const (&e)[R], hx_u32 (&count)[R], hx_u32 want,
                                        hx_u32* hist, hx_u32* scan, hx_u32* found, hx_u32* fill, hx_u64 (&cut)[R],
                                        int passes = 64) {
  static_assert(R == 1 || R == 2, "a row's counts in half a word at most");
  constexpr hx_u32 ROW_BINS = HX_TOPK_MAX_BINS / R, W = G / HX_WAVE_SIZE, FIELD = 32 / R;
  constexpr int BITS = R == 1 ? 11 : 10;
  static_assert(2 * W <= ROW_BINS, "each row's waves' extremes in its bins");
  const hx_u32 lane = t % HX_WAVE_SIZE, wave = t / HX_WAVE_SIZE;
  bool on[R], cutting[R], some = false;
  int top[R];
  hx_u32 need[R];
  HX_UNROLL
  for (hx_u32 r = 0; r < R; ++r) {
    cutting[r] = on[r] = count[r] > want;
    some |= on[r];
    cut[r] = 0;
  }
  if (!some) return;  // uniform: every thread holds the same counts
  HX_UNROLL
  for (hx_u32 r = 0; r < R; ++r) {  // the keys' ranges, as hx_group_select's
    need[r] = want;
    top[r] = -1;
    hx_key_range g;
    if (on[r]) hx_each_owned<G, U>(t, e[r], count[r], [&](hx_u64 x) { g.add(x); });
    hx_wave_extremes(lane, g.lo, g.hi);
    if (lane == 0) {
      hist[r * ROW_BINS + 2 * wave] = g.lo;
      hist[r * ROW_BINS + 2 * wave + 1] = g.hi;
    }
  }
  bar();
  HX_UNROLL
  for (hx_u32 r = 0; r < R; ++r) {
    if (!on[r]) continue;
    hx_u32 lo, hi;
    hx_waves_extremes<W>(lane, hist + r * ROW_BINS, lo, hi);
    top[r] = 32 + (lo == hi ? -1 : 31 - __builtin_clz(lo ^ hi));
    cut[r] = top[r] >= 63 ? 0ull : ((hx_u64)lo << 32) >> (top[r] + 1) << (top[r] + 1);
  }
  bar();  // hist is cleared next
  while (passes-- > 0) {
    bool any = false;
    int shift[R];
    hx_u32 bins[R];
    HX_UNROLL
    for (hx_u32 r = 0; r < R; ++r) {
      any |= on[r];
      shift[r] = top[r] >= BITS - 1 ? top[r] - (BITS - 1) : 0;
      bins[r] = on[r] ? 1u << (top[r] - shift[r] + 1) : 0u;
      for (hx_u32 b = t; b < bins[r]; b += G) hist[r * ROW_BINS + b] = 0u;
    }
    if (!any) break;  // uniform: every thread holds the same rows' states
    bar();
    HX_UNROLL
    for (hx_u32 r = 0; r < R; ++r) {
      if (!on[r]) continue;
      const hx_u32 high = (hx_u32)top[r] + 1u, s = (hx_u32)shift[r];
      const hx_u64 prefix = cut[r];
      hx_u32* h = hist + r * ROW_BINS;
      hx_each_owned<G, U>(t, e[r], count[r], [&](hx_u64 x) {
        if (high >= 64 || (x >> high) == (prefix >> high)) hx_atomic_add_u32(&h[(hx_u32)(x >> s) & (bins[r] - 1u)], 1u);
      });
    }
    bar();
    // each row's bin holding its need-th, as hx_group_find_bin's (the row's bins owned as hx_owned_bins_sum's), but
    // one exclusive sum of the owners' counts, a field a row, gives every row the keys above
    hx_u32 mine[R], packed = 0;
    HX_UNROLL
    for (hx_u32 r = 0; r < R; ++r) {
      mine[r] = 0;
      const hx_u32 per = (bins[r] + G - 1) / G;
      const hx_i32 hi = (hx_i32)bins[r] - 1 - (hx_i32)(t * per);
      for (hx_i32 j = 0; j < (hx_i32)per && hi - j >= 0; ++j) mine[r] += hist[r * ROW_BINS + (hx_u32)(hi - j)];
      packed |= mine[r] << (FIELD * r);
    }
    hx_u32 total;
    const hx_u32 above_all = hx_group_exclusive_sum<G>(t, bar, packed, scan, &total);
    HX_UNROLL
    for (hx_u32 r = 0; r < R; ++r) {
      const hx_u32 above = R == 1 ? above_all : (above_all >> (FIELD * r)) & ((1u << FIELD % 32) - 1u);
      if (on[r] && above < need[r] && above + mine[r] >= need[r])
        hx_owned_bins_find<G>(t, hist + r * ROW_BINS, bins[r], need[r], above, found + 2 * r);
    }
    bar();
    HX_UNROLL
    for (hx_u32 r = 0; r < R; ++r) {
      if (!on[r]) continue;
      const hx_u32 bin = found[2 * r], take = found[2 * r + 1];
      cut[r] |= (hx_u64)bin << shift[r];
      need[r] = take;
      top[r] = shift[r] - 1;
      on[r] = take != hist[r * ROW_BINS + bin] && top[r] >= 0;
    }
    bar();  // found and hist are rewritten by the next pass
  }
  // every row's entries at or above its cut moved down, as hx_group_keep's, the rows' tiles side by side
  hx_u32 most = 0;
  HX_UNROLL
  for (hx_u32 r = 0; r < R; ++r) {
    if (cutting[r] && count[r] > most) most = count[r];
    if (t == 0) fill[r] = 0u;
  }
  for (hx_u32 base = 0; base < most; base += G * HX_CUT_ITEMS) {
    hx_u64 mine[R][HX_CUT_ITEMS];
    HX_UNROLL
    for (hx_u32 r = 0; r < R; ++r) {
      HX_UNROLL
      for (int k = 0; k < HX_CUT_ITEMS; ++k) {
        const hx_u32 i = base + t + (hx_u32)k * G;
        mine[r][k] = cutting[r] && i < count[r] ? e[r][i] : 0ull;
      }
    }
    bar();  // the tiles are read before any of them is overwritten; each fill stays within its row's tile
    HX_UNROLL
    for (hx_u32 r = 0; r < R; ++r) {
      if (cutting[r]) hx_keep_tile(mine[r], cut[r], fill + r, e[r]);
    }
  }
  bar();
  HX_UNROLL
  for (hx_u32 r = 0; r < R; ++r)
    if (cutting[r]) count[r] = fill[r];  // want, unless the passes stopped short
  bar();  // read by all before fill is reused
}

// A bitmap whose words a group's threads own `per` at a time (thread t: words [t per, t per + per)), each thread's run
// stored `pitch` words after the one before: an odd pitch where the room allows (`cap` words), since with an even one
// the runs of a wave's threads start in a few banks, which then serve the wave's accesses one after another.
struct hx_bitmap_runs {
  hx_u32 per, pitch;
  HX_MEMBER HX_HD hx_u32 at(hx_u32 v) const { return v / per * pitch + v % per; }
};
HX_INLINE HX_HD hx_bitmap_runs hx_bitmap_runs_for(hx_u32 words, hx_u32 threads, hx_u32 cap) {
  const hx_u32 per = (words + threads - 1) / threads;
  return {per, (per & 1u) == 0u && threads * (per + 1u) <= cap ? per + 1u : per};
}

// The place of bit b among the set bits of such a bitmap: where an entry goes when a selection is written in
// ascending position (the decode merge, the prefill finish). From counted[v], the set bits of the words before word
// v, where given; else from below[t], those before thread t's words (an exclusive sum), and the thread's words
// before b's, walked.
HX_INLINE HX_DEV hx_u32 hx_bitmap_rank(const hx_u32* bits, const hx_u32* below, const hx_bitmap_runs& r, hx_u32 b,
                                       const hx_u32* counted = nullptr) {
  const hx_u32 v = b / 32, t = v / r.per, first = t * r.pitch, last = first + (v - t * r.per);
  const hx_u32 part = hx_popc(bits[last] & ((1u << (b % 32)) - 1u));
  if (counted) return counted[v] + part;
  hx_u32 rank = below[t] + part;
  for (hx_u32 u = first; u < last; ++u) rank += hx_popc(bits[u]);
  return rank;
}

// Which of n lists laid end to end holds entry v, given where each starts (ascending, starts[0] <= v): the last j
// < n whose starts[j] is at or below v (an empty list starts where the next does, and is passed over). A binary
// search, log2(n) reads of starts; 0 for n <= 1.
HX_INLINE HX_HD hx_u32 hx_list_of(const hx_u32* starts, hx_u32 n, hx_u32 v) {
  hx_u32 j = 0;
  for (hx_u32 span = n; span > 1u;) {
    const hx_u32 half = span / 2u;
    if (starts[j + half] <= v) j += half;
    span -= half;
  }
  return j;
}

#if defined(HX_BLOCK) && !defined(HX_TOPK_KEYS_ONLY)
#include "hx_params.h"

#define ITEMS 8  // consecutive columns per thread per compaction tile
#define MAX_TOP_K 4096  // hipindexer.arguments.MAX_TOP_K: the sort buffer's entries
#define NO_SLOT 0xFFFFFFFFu
static_assert(HX_BLOCK * ITEMS < 65536, "tile counts are packed as two 16-bit halves");
static_assert(HX_TOPK_MAX_BINS % HX_BLOCK == 0 && 1024 % HX_BLOCK == 0, "every thread owns whole bins");

// The group pieces above run by the whole block (HX_BLOCK threads at hx_barrier).
struct hx_block_bar {
  HX_MEMBER HX_DEV void operator()() const { hx_barrier(); }
};
HX_INLINE HX_DEV hx_u32 hx_block_exclusive_sum(hx_u32 v, hx_u32* buf, hx_u32* total) {
  hx_block_bar bar;
  return hx_group_exclusive_sum<HX_BLOCK>(hx_thread_x(), bar, v, buf, total);
}

HX_INLINE HX_DEV hx_u32 hx_topk_find_bin(const hx_u32* hist, hx_u32 bins, hx_u32 want, hx_u32* scan, hx_u32* found) {
  hx_block_bar bar;
  return hx_group_find_bin<HX_BLOCK>(hx_thread_x(), bar, hist, bins, want, scan, found);
}

// Slots [from, top_k) of a row's outputs, where the selection ended: -1, and -inf for the value. By the whole block.
HX_INLINE HX_DEV void hx_topk_pad(hx_i32* out_idx, float* out_val, hx_u32 from, hx_u32 top_k) {
  for (hx_u32 s = from + hx_thread_x(); s < top_k; s += HX_BLOCK) {
    out_idx[s] = -1;
    if (out_val) out_val[s] = hx_bits_to_f32(0xFF800000u);
  }
}

// One compare-exchange step of a bitonic network (span, stride < the wave) on an entry a lane holds at index i,
// its partner at i ^ stride in lane ^ stride: the pair's lower index keeps the larger entry where the span runs
// descending ((lower index & span) == 0), the smaller where it runs ascending.
HX_INLINE HX_DEV hx_u64 hx_sort_exchange(hx_u64 v, hx_u32 i, hx_u32 lane, hx_u32 span, hx_u32 stride) {
  const hx_u64 w = hx_wave_shfl_u64(v, lane ^ stride);
  const bool lower = (i & stride) == 0, descending = ((i & ~stride) & span) == 0;
  return (lower == descending) == (v > w) ? v : w;
}

// The steps of spans [span_lo, span_hi] (strides from `first` at span_lo, from span / 2 at the others, down to 1)
// within each chunk of 2 x the wave's entries, in registers: lane l of the chunk's wave holds entries l and l + the
// wave. The chunks are the waves' in turn; every lane of a wave takes part.
HX_INLINE HX_DEV void hx_sort_chunks(hx_u64* entries, hx_u32 size, hx_u32 span_lo, hx_u32 span_hi, hx_u32 first) {
  constexpr hx_u32 WS = HX_WAVE_SIZE, W = HX_BLOCK / HX_WAVE_SIZE;
  const hx_u32 lane = hx_thread_x() % WS;
  for (hx_u32 c = hx_thread_x() / WS; c < size / (2 * WS); c += W) {  // uniform within the wave
    const hx_u32 i0 = 2 * WS * c + lane, i1 = i0 + WS;
    hx_u64 x0 = entries[i0], x1 = entries[i1];
    for (hx_u32 span = span_lo; span <= span_hi; span *= 2) {
      for (hx_u32 stride = span == span_lo ? first : span / 2; stride > 0; stride /= 2) {
        if (stride == WS) {  // both entries of the pair in this lane
          const bool descending = (i0 & span) == 0;
          const hx_u64 hi = x0 > x1 ? x0 : x1, lo = x0 > x1 ? x1 : x0;
          x0 = descending ? hi : lo;
          x1 = descending ? lo : hi;
        } else {
          x0 = hx_sort_exchange(x0, i0, lane, span, stride);
          x1 = hx_sort_exchange(x1, i1, lane, span, stride);
        }
      }
    }
    entries[i0] = x0;
    entries[i1] = x1;
  }
}

// entries[0, count) sorted descending in place, by the whole block (bitonic, over
// count rounded up to a power of two, the slots past count filled with entry 0,
// which sorts last): entries must hold that many. The steps whose pairs lie within
// a chunk of 2 x the wave's entries run in registers by shuffles (hx_sort_chunks),
// the block meeting once per chunk pass; the wider steps through shared memory, a
// meeting each. A kernel that defines HX_TOPK_SORT_BY_WAVES 0 before including this
// header takes every step through shared memory (fewer registers).
#ifndef HX_TOPK_SORT_BY_WAVES
#define HX_TOPK_SORT_BY_WAVES 1
#endif
HX_INLINE HX_DEV void hx_topk_sort_desc(hx_u64* entries, hx_u32 count) {
  constexpr hx_u32 CHUNK = 2 * HX_WAVE_SIZE;
  const hx_u32 tid = hx_thread_x();
  if (count <= 1u) return;
  hx_u32 size = 1;
  while (size < count) size *= 2;
  for (hx_u32 s = count + tid; s < size; s += HX_BLOCK) entries[s] = 0ull;
  hx_barrier();
  const auto shared_step = [&](hx_u32 span, hx_u32 stride) {
    for (hx_u32 t = tid; t < size / 2; t += HX_BLOCK) {
      const hx_u32 a = 2 * t - (t & (stride - 1)), b = a + stride;
      const hx_u64 ea = entries[a], eb = entries[b];
      if ((ea < eb) == ((a & span) == 0)) {  // runs alternate direction until the last span, descending
        entries[a] = eb;
        entries[b] = ea;
      }
    }
    hx_barrier();
  };
  if (!HX_TOPK_SORT_BY_WAVES || size < CHUNK) {
    for (hx_u32 span = 2; span <= size; span *= 2)
      for (hx_u32 stride = span / 2; stride > 0; stride /= 2) shared_step(span, stride);
    return;
  }
  hx_sort_chunks(entries, size, 2, CHUNK, 1);
  hx_barrier();
  for (hx_u32 span = 2 * CHUNK; span <= size; span *= 2) {
    for (hx_u32 stride = span / 2; stride >= CHUNK; stride /= 2) shared_step(span, stride);
    hx_sort_chunks(entries, size, span, span, HX_WAVE_SIZE);
    hx_barrier();
  }
}

// A selection's entries[0, selected), written by the whole block before its last meeting, sorted descending and
// written in that order: each entry's index to out_idx, and (unless out_val is 0) the logit x[index] to out_val.
HX_INLINE HX_DEV void hx_topk_write_sorted(hx_u64* entries, hx_u32 selected, hx_i32* out_idx, float* out_val,
                                           const float* x) {
  hx_topk_sort_desc(entries, selected);
  for (hx_u32 s = hx_thread_x(); s < selected; s += HX_BLOCK) {
    const hx_i32 i = hx_topk_entry_index(entries[s]);
    out_idx[s] = i;
    if (out_val) out_val[s] = x[i];
  }
}

// The top_k of x[0, n) (minus_inf_selectable: -inf is a value, not a gap), by the
// whole block, into out_idx (and out_val unless 0): index order, or descending
// value when sorted; -1 (-inf) past the selection. The shared arrays are free
// again on return.
HX_INLINE HX_DEV void hx_topk_select(const float* x, hx_i32 n, bool by_lengths, hx_u32 top_k, bool sorted,
                                     hx_i32* out_idx, float* out_val, hx_u32* hist, hx_u32* scan, hx_u32* found,
                                     hx_u64* entries) {
  const hx_u32 tid = hx_thread_x();

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
    const hx_u32 total = hx_topk_find_bin(hist, bins, want, scan, found);
    if (pass == 0 && total <= top_k) {  // V <= top_k: every selectable key (uniform: total is the block's)
      selected = total;
      break;
    }
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
      if (sorted) {
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
  if (sorted) hx_topk_write_sorted(entries, selected, out_idx, out_val, x);

  // 4. padding
  hx_topk_pad(out_idx, out_val, selected, top_k);
  hx_barrier();  // the sort buffer is read until here
}

// Row `row` of a TopkParams array, by the whole block.
HX_INLINE HX_DEV void hx_topk_row(const TopkParams& p, hx_i64 row, hx_u32* hist, hx_u32* scan, hx_u32* found,
                                  hx_u64* entries) {
  hx_topk_select(p.logits + row * p.logits_stride, hx_topk_row_extent(p.lengths, row, p.N), p.lengths != 0,
                 (hx_u32)p.top_k, p.sorted != 0, p.indices + row * p.indices_stride,
                 p.values ? p.values + row * p.values_stride : 0, hist, scan, found, entries);
}
#endif  // HX_BLOCK
