// Who computes and who fills what in paged decode: the work of
// one sequence as read from device memory, and how a grid of units planned
// from host shapes alone shares a batch's real work evenly.
//
// Every sequence b owns next_n output rows of max_model_len columns. Its
// columns [0, fill_from) are cut into key blocks of block_size columns; each
// block is computed by exactly one unit (values where a row is valid, -inf
// elsewhere). Its columns [fill_from, max_model_len) hold no key of any row
// and are only filled. A unit owns one contiguous piece of the batch's
// concatenated block work, each block weighted by its sequence's live rows
// (what computing it costs), and one contiguous piece of the concatenated
// fill columns: each unit finds its pieces from an in-kernel prefix over the
// lengths, so a skewed batch keeps every unit equally busy without a
// schedule kernel or a host sync. Int32 lengths over their whole range never
// overflow here (work sums are 64-bit).
#pragma once
#include "index_math.h"

#define HX_MAX_NEXT_N 8  // query rows per sequence the op takes (the planner refuses more)

struct hx_decode_seq {
  hx_i32 ctx;        // context length as read (per-row lengths: the longest row's)
  hx_i32 live;       // query rows computed; 0 when the sequence is malformed
  hx_i32 keys;       // columns holding a key some live row sees: min(ctx, max_model_len), 0 without live rows
  hx_i32 blocks;     // key blocks computed: ceil(keys / block_size)
  hx_i32 fill_from;  // min(max_model_len, blocks * block_size): every column from here on is -inf in every row
  bool malformed;    // a length out of range (error bit 2): with [B] lengths (ctx < 0, or live outside
                     // 0..next_n) the whole sequence is -inf; with per-row lengths only a negative row is
  const hx_i32* row_lens;  // per-row lengths: row j sees row_lens[j] keys; null for [B] lengths
};

// live_in: next_n_lens[b], or next_n when the op has none.
HX_INLINE HX_HD hx_decode_seq hx_decode_sequence(hx_i32 ctx, hx_i32 live_in, hx_i32 next_n, hx_i32 max_model_len,
                                                 hx_i32 block_size) {
  hx_decode_seq s;
  s.ctx = ctx;
  s.malformed = ctx < 0 || live_in < 0 || live_in > next_n;
  s.live = s.malformed ? 0 : live_in;
  s.keys = s.live > 0 ? hx_min_i32(ctx, max_model_len) : 0;
  s.blocks = hx_ceil_div(s.keys, block_size);
  s.fill_from = (hx_i32)((hx_i64)s.blocks * block_size < max_model_len ? (hx_i64)s.blocks * block_size
                                                                          : max_model_len);
  s.row_lens = nullptr;
  return s;
}

// Sequence b as the op's lengths give it. [B] context_lens: context_lens[b] with next_n_lens[b] (next_n
// when null). Per-row lengths (context_lens [B, next_n], DeepGEMM's form): row j sees its own
// context_lens[b * next_n + j] keys, the rows up to the last one with keys are computed (those after it are
// dead, as ragged rows are), the table is read up to the longest row, and a negative row is that row's error
// alone (-inf, bit 2), not the sequence's. Rows that step by one key from the first (each draft token seeing
// one more than the one before, DeepGEMM's usual lengths) are the [B] form's affine rule and are handed on as
// such, so no kernel reads their bounds again.
HX_INLINE HX_HD hx_decode_seq hx_decode_sequence_at(const hx_i32* context_lens, const hx_i32* next_n_lens,
                                                    hx_i32 per_row, hx_i32 b, hx_i32 next_n,
                                                    hx_i32 max_model_len, hx_i32 block_size) {
  if (!per_row)
    return hx_decode_sequence(context_lens[b], next_n_lens ? next_n_lens[b] : next_n, next_n, max_model_len,
                              block_size);
  const hx_i32* lens = context_lens + (hx_i64)b * next_n;
  hx_i32 row[HX_MAX_NEXT_N];  // read together: the loads go out at once, not each after the last
HX_UNROLL
  for (hx_i32 j = 0; j < HX_MAX_NEXT_N; ++j) row[j] = j < next_n ? lens[j] : 0;
  const hx_i64 first = row[0];
  hx_i32 longest = 0, live = 0, stepped = 0;  // stepped: rows [0, stepped) step by one key from the first
  bool negative = false;
HX_UNROLL
  for (hx_i32 j = 0; j < HX_MAX_NEXT_N; ++j) {
    const hx_i32 n = row[j];
    longest = n > longest ? n : longest;
    live = n > 0 ? j + 1 : live;
    negative |= n < 0;
    stepped = stepped == j && (hx_i64)n == first + j ? j + 1 : stepped;
  }
  if (!negative && stepped >= live)
    return hx_decode_sequence(live > 0 ? (hx_i32)(first + live - 1) : 0, live, next_n, max_model_len, block_size);
  hx_decode_seq s = hx_decode_sequence(longest, live, next_n, max_model_len, block_size);
  s.malformed = negative;
  s.row_lens = lens;
  return s;
}

// What the sequence adds to the batch's block work and to its fill columns.
HX_INLINE HX_HD hx_i64 hx_decode_work(hx_decode_seq s) { return (hx_i64)s.blocks * s.live; }
HX_INLINE HX_HD hx_i64 hx_decode_fill(hx_decode_seq s, hx_i32 max_model_len) {
  return (hx_i64)max_model_len - s.fill_from;
}

struct hx_range64 {
  hx_i64 lo, hi;
};

// Every unit's first pass: the batch's total block work (lo) and fill (hi). Thread t of the unit's `block` sums
// every block-th sequence into scan[t] and scan[block + t] (2 * block slots), then every thread adds them all up
// after barrier(); the unit that reports (one, so a flag is OR-ed once per call) sets err_bit for malformed
// sequences.
template <class Params, class Barrier>
HX_INLINE HX_HD hx_range64 hx_decode_totals(const Params& p, hx_i32 t, hx_i32 block, bool reports, hx_i32 err_bit,
                                            hx_i64* scan, Barrier barrier) {
  hx_i64 work = 0, fill = 0;
  for (hx_i32 b = t; b < p.B; b += block) {
    const hx_decode_seq seq = hx_decode_sequence_of(p, b);
    if (seq.malformed && reports && p.errors) hx_atomic_or(p.errors, err_bit);
    work += hx_decode_work(seq);
    fill += hx_decode_fill(seq, p.max_model_len);
  }
  scan[t] = work;
  scan[block + t] = fill;
  barrier();
  hx_range64 total = {0, 0};
  for (hx_i32 i = 0; i < block; ++i) {
    total.lo += scan[i];
    total.hi += scan[block + i];
  }
  return total;
}

// Part u of `parts` near-equal contiguous parts of [0, total): the first
// total % parts parts are one longer. No product of total and u is formed,
// so any int64 total works.
HX_INLINE HX_HD hx_range64 hx_balanced_part(hx_i64 total, hx_i64 parts, hx_i64 u) {
  const hx_i64 q = total / parts, r = total % parts;
  hx_range64 p;
  p.lo = u * q + (u < r ? u : r);
  p.hi = p.lo + q + (u < r ? 1 : 0);
  return p;
}

HX_INLINE HX_HD hx_i64 hx_clamp_i64(hx_i64 x, hx_i64 lo, hx_i64 hi) { return x < lo ? lo : (x > hi ? hi : x); }

// Key blocks [lo, hi) of a sequence whose block work starts at `start` of the
// batch's, for a unit owning work [own.lo, own.hi): block i (worth `live`)
// belongs to the unit where its first unit of work, start + i * live, falls.
HX_INLINE HX_HD hx_range hx_owned_blocks(hx_range64 own, hx_i64 start, hx_decode_seq s) {
  hx_range r;
  if (s.live <= 0) {
    r.lo = r.hi = 0;
    return r;
  }
  const hx_i64 a = hx_clamp_i64(own.lo - start, 0, (hx_i64)s.blocks * s.live);
  const hx_i64 e = hx_clamp_i64(own.hi - start, 0, (hx_i64)s.blocks * s.live);
  r.lo = (hx_i32)((a + s.live - 1) / s.live);
  r.hi = (hx_i32)((e + s.live - 1) / s.live);
  return r;
}

// The same for a kernel whose cost per block is not its live rows: each of
// the sequence's `blocks` blocks priced `per_block` (> 0), the batch's work
// being the sum of these prices. Block i belongs to the unit where
// start + i * per_block falls.
HX_INLINE HX_HD hx_range hx_owned_blocks_priced(hx_range64 own, hx_i64 start, hx_i32 blocks, hx_i64 per_block) {
  hx_range r;
  if (per_block <= 0 || blocks <= 0) {
    r.lo = r.hi = 0;
    return r;
  }
  const hx_i64 a = hx_clamp_i64(own.lo - start, 0, (hx_i64)blocks * per_block);
  const hx_i64 e = hx_clamp_i64(own.hi - start, 0, (hx_i64)blocks * per_block);
  r.lo = (hx_i32)((a + per_block - 1) / per_block);
  r.hi = (hx_i32)((e + per_block - 1) / per_block);
  return r;
}

// Fill columns [lo, hi) of a sequence whose fill starts at `start` of the
// batch's, for a unit owning fill [own.lo, own.hi).
HX_INLINE HX_HD hx_range hx_owned_fill(hx_range64 own, hx_i64 start, hx_decode_seq s, hx_i32 max_model_len) {
  const hx_i64 f = hx_decode_fill(s, max_model_len);
  hx_range r;
  r.lo = s.fill_from + (hx_i32)hx_clamp_i64(own.lo - start, 0, f);
  r.hi = s.fill_from + (hx_i32)hx_clamp_i64(own.hi - start, 0, f);
  return r;
}

// The same from a decode parameter struct (DecodeParams, DecodeTmaParams).
template <class Params>
HX_INLINE HX_HD hx_decode_seq hx_decode_sequence_of(const Params& p, hx_i32 b) {
  return hx_decode_sequence_at(p.context_lens, p.next_n_lens, p.lens_per_row, b, p.next_n, p.max_model_len,
                               p.block_size);
}

// Every unit's second pass: the sequences in chunks of `block` (thread t reads sequence b0 + t into scan[t] and
// scan[block + t], after barrier()), with running prefixes of their work and fill; a sequence b where the unit's
// pieces own_work and own_fill meet it goes to work(b, seq, its blocks of the unit) and fill(b, its fill columns of
// the unit), each only where that piece meets it. Every thread walks the same sequences (uniform).
template <class Params, class Barrier, class Work, class Fill>
HX_INLINE HX_HD void hx_decode_walk(const Params& p, hx_i32 t, hx_i32 block, hx_range64 own_work, hx_range64 own_fill,
                                    hx_i64* scan, Barrier&& barrier, Work&& work, Fill&& fill) {
  hx_i64 work_base = 0, fill_base = 0;
  for (hx_i32 b0 = 0; b0 < p.B; b0 += block) {
    if (work_base >= own_work.hi && fill_base >= own_fill.hi) break;  // this unit's pieces are done
    const hx_i32 b = b0 + t;
    hx_decode_seq mine = {};
    if (b < p.B) mine = hx_decode_sequence_of(p, b);
    barrier();  // the previous chunk's readers are done with scan[]
    scan[t] = b < p.B ? hx_decode_work(mine) : 0;
    scan[block + t] = b < p.B ? hx_decode_fill(mine, p.max_model_len) : 0;
    barrier();
    const hx_i32 count = hx_min_i32(block, p.B - b0);
    for (hx_i32 i = 0; i < count; ++i) {  // every thread reads the same prefixes
      const hx_i64 w = scan[i], f = scan[block + i];
      const bool in_work = w > 0 && work_base < own_work.hi && work_base + w > own_work.lo;
      const bool in_fill = f > 0 && fill_base < own_fill.hi && fill_base + f > own_fill.lo;
      if (in_work || in_fill) {
        const hx_i32 bb = b0 + i;
        const hx_decode_seq seq = hx_decode_sequence_of(p, bb);
        if (in_work) work(bb, seq, hx_owned_blocks(own_work, work_base, seq));
        if (in_fill) fill(bb, hx_owned_fill(own_fill, fill_base, seq, p.max_model_len));
      }
      work_base += w;
      fill_base += f;
    }
  }
}

// Which columns the rows of a sequence with [B] lengths see, as one affine rule: row j < rows sees the
// columns n < first_end + j (and n < max_model_len), each new token its own position and every key before
// it (docs/ops.md); rows j >= rows (dead ragged rows) see none. first_end is 64-bit: ctx - live + 1 passes
// int32 when there are no live rows. Per-row lengths follow no such rule: hx_decode_row_bound reads them.
struct hx_decode_rows {
  hx_i32 rows;
  hx_i64 first_end;
};

HX_INLINE HX_HD hx_decode_rows hx_decode_row_span(hx_decode_seq s) {
  hx_decode_rows r;
  r.rows = s.live;
  r.first_end = (hx_i64)s.ctx - s.live + 1;
  return r;
}

// Valid columns [0, bound) of row j of the sequence (0 for rows past its live ones, and for a negative
// per-row length).
HX_INLINE HX_HD hx_i32 hx_decode_row_bound(hx_decode_seq s, hx_i32 j, hx_i32 max_model_len) {
  if (s.row_lens) return j < s.live ? hx_min_i32(hx_max_i32(s.row_lens[j], 0), max_model_len) : 0;
  const hx_decode_rows r = hx_decode_row_span(s);
  return j < r.rows ? (hx_i32)hx_clamp_i64(r.first_end + j, 0, max_model_len) : 0;
}
