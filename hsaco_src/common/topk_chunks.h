// The per-row pieces of the composed top-k ops (hipindexer/ops/paged_topk.py,
// prefill_topk.py), which run a logits kernel on one chunk of keys at a time into
// a row of W: the running candidates' values in W[0, lead) (their keys in the
// indices output, ascending), the chunk's logits after them. Built with HX_BLOCK:
// every function is run by a whole block on one row.
#pragma once
#include "topk_select.h"

#define HX_MERGE_SLOTS (MAX_TOP_K / HX_BLOCK)  // a thread's slots of a row: s = tid + k * HX_BLOCK
static_assert(MAX_TOP_K % HX_BLOCK == 0, "every slot has its thread");
#define HX_FILTER_ITEMS 8  // consecutive chunk columns per thread per tile

// The smallest key of the candidates w[0, lead), by the whole block: a later column
// enters the row's top_k only with a key strictly above it (it loses a tie with a
// candidate). 0 while a candidate is invalid, so that every valid column enters.
// scan (HX_BLOCK words) is free again on return.
HX_INLINE HX_DEV hx_u32 hx_candidate_floor(const float* w, hx_i32 lead, hx_u32* scan) {
  const hx_u32 tid = hx_thread_x();
  hx_u32 low = 0xFFFFFFFFu;
  for (hx_i32 i = (hx_i32)tid; i < lead; i += HX_BLOCK) {
    const hx_u32 k = hx_topk_key(w[i], false);
    low = k < low ? k : low;
  }
  scan[tid] = low;
  hx_barrier();
  for (hx_u32 half = HX_BLOCK / 2; half > 0; half /= 2) {
    if (tid < half && scan[tid + half] < scan[tid]) scan[tid] = scan[tid + half];
    hx_barrier();
  }
  const hx_u32 T = lead ? scan[0] : 0u;
  hx_barrier();  // scan is free
  return T;
}

// Keep only the chunk's columns w[lead, lead + width) that can still enter the
// row's top_k, compacted in index order to w[lead, lead + kept) with their chunk
// columns in cols[0, kept); returns kept. Every key of the chunk comes after every
// candidate's, so it loses a tie with one: once the candidates are full (none
// invalid) a column enters only with a key strictly above the smallest candidate
// key, else any valid column does. In place: a tile's columns are read into
// registers before the scan's barriers and written at or below where they were
// read, never into a later tile. W-space order stays key order, so a selection's
// ties by lower W column are still ties by lower key. scan: HX_BLOCK words.
HX_INLINE HX_DEV hx_u32 hx_topk_filter_chunk(float* w, hx_i32 lead, hx_i32 width, hx_i32* cols, hx_u32* scan) {
  const hx_u32 tid = hx_thread_x();
  const hx_u32 T = hx_candidate_floor(w, lead, scan);

  hx_u32 kept = 0;  // over the tiles done
  for (hx_i32 base = 0; base < width; base += HX_BLOCK * HX_FILTER_ITEMS) {
    const hx_i32 i0 = base + (hx_i32)tid * HX_FILTER_ITEMS;
    float v[HX_FILTER_ITEMS];
    hx_u32 mine = 0, mask = 0;
    HX_UNROLL
    for (int t = 0; t < HX_FILTER_ITEMS; ++t) {
      v[t] = i0 + t < width ? w[lead + i0 + t] : 0.f;
      const bool in = i0 + t < width && hx_topk_key(v[t], false) > T;
      mask |= (hx_u32)in << t;
      mine += in;
    }
    hx_u32 total;
    hx_u32 at = kept + hx_block_exclusive_sum(mine, scan, &total);  // its barriers order every read before a write
    HX_UNROLL
    for (int t = 0; t < HX_FILTER_ITEMS; ++t) {
      if (!((mask >> t) & 1u)) continue;
      w[lead + at] = v[t];
      cols[at] = i0 + t;
      ++at;
    }
    kept += total;
  }
  return kept;
}

// The first half of a merge: what each of this thread's slots of a selection in
// W-space (sel, -1 past it) names, read before anything is written, since the
// new candidates go over the old ones in place. W-space index i maps to the key
// i < lead ? idx[i] : base + (cols ? cols[i - lead] : i - lead) and the value
// w[i]; -1 stays -1 (-inf). Keys fit int32: the ops hold N and max_model_len to it.
HX_INLINE HX_DEV void hx_merge_gather(const hx_i32* sel, const hx_i32* idx, const float* w, const hx_i32* cols,
                                      hx_i32 lead, hx_i64 base, hx_i32 top_k, hx_i32 (&key)[HX_MERGE_SLOTS],
                                      float (&val)[HX_MERGE_SLOTS]) {
  const hx_i32 tid = (hx_i32)hx_thread_x();
  HX_UNROLL
  for (int k = 0; k < HX_MERGE_SLOTS; ++k) {
    const hx_i32 s = tid + k * HX_BLOCK;
    key[k] = -1;
    val[k] = hx_bits_to_f32(0xFF800000u);
    if (s >= top_k) continue;
    const hx_i64 i = (hx_i64)sel[s];
    if (i < 0) continue;
    const hx_i64 col = i - lead;
    key[k] = (hx_i32)(i < lead ? (hx_i64)idx[i] : base + (cols ? (hx_i64)cols[col] : col));
    val[k] = w[i];
  }
}

// A step's row begins: on the first chunk (base 0) its candidates are all invalid (-inf).
HX_INLINE HX_DEV void hx_step_begin(float* w, hx_i32 top_k, hx_i64 base) {
  if (base != 0) return;
  for (hx_i32 i = (hx_i32)hx_thread_x(); i < top_k; i += HX_BLOCK) w[i] = hx_bits_to_f32(0xFF800000u);
  hx_barrier();
}

// A row's selection in shared memory: the candidates W[0, lead) and, of the later
// W-space columns [lead, n), those above the candidates' floor, in W order, as
// values in x_s and W-space indices in ix_s. Once the candidates are full, few
// columns of a chunk pass the floor, and the selection's passes then read shared
// memory, not the whole chunk four times. Returns the count staged, or
// HX_STAGE_CAP + 1 when more would pass (nothing staged is used then). Loads of a
// tile are read before the scan's barriers, as the filter's are.
#define HX_STAGE_CAP MAX_TOP_K  // x_s and ix_s share the sort buffer's bytes: 4096 of each
HX_INLINE HX_DEV hx_u32 hx_stage_row(const float* w, hx_i32 lead, hx_i32 n, float* x_s, hx_i32* ix_s, hx_u32* scan) {
  const hx_u32 tid = hx_thread_x();
  if (lead > HX_STAGE_CAP) return HX_STAGE_CAP + 1u;
  const hx_u32 T = hx_candidate_floor(w, lead, scan);
  for (hx_i32 i = (hx_i32)tid; i < lead; i += HX_BLOCK) {
    x_s[i] = w[i];
    ix_s[i] = i;
  }
  hx_u32 staged = (hx_u32)lead;
  for (hx_i32 base = lead; base < n; base += HX_BLOCK * HX_FILTER_ITEMS) {
    const hx_i32 i0 = base + (hx_i32)tid * HX_FILTER_ITEMS;
    float v[HX_FILTER_ITEMS];
    hx_u32 mine = 0, mask = 0;
    HX_UNROLL
    for (int t = 0; t < HX_FILTER_ITEMS; ++t) {
      v[t] = i0 + t < n ? w[i0 + t] : 0.f;
      const bool in = i0 + t < n && hx_topk_key(v[t], false) > T;
      mask |= (hx_u32)in << t;
      mine += in;
    }
    hx_u32 total;
    hx_u32 at = staged + hx_block_exclusive_sum(mine, scan, &total);
    if (staged + total > HX_STAGE_CAP) return HX_STAGE_CAP + 1u;  // uniform: the block's total
    HX_UNROLL
    for (int t = 0; t < HX_FILTER_ITEMS; ++t) {
      if (!((mask >> t) & 1u)) continue;
      x_s[at] = v[t];
      ix_s[at] = i0 + t;
      ++at;
    }
    staged += total;
  }
  hx_barrier();  // every staged entry is written
  return staged;
}

// The top_k of W-space [0, n) (the candidates, then the chunk's columns or, with cols, those kept), into sel,
// and what this thread's slots of it name (hx_merge_gather): on return every read of the old candidates is
// done, so the new ones may be written over them. sorted: sel in descending value, from W in global memory;
// else in index order, from the row staged in shared memory (hx_stage_row, over the sort buffer `entries`)
// when it fits, else from W. The shared arrays are hx_topk_select's.
HX_INLINE HX_DEV void hx_step_select(const float* w, const hx_i32* idx, hx_i32* sel, const hx_i32* cols, hx_i32 top_k,
                                     hx_i32 n, hx_i64 base, bool sorted, hx_u32* hist, hx_u32* scan, hx_u32* found,
                                     hx_u64* entries, hx_i32 (&key)[HX_MERGE_SLOTS], float (&val)[HX_MERGE_SLOTS]) {
  float* const x_s = (float*)entries;
  hx_i32* const ix_s = (hx_i32*)(x_s + HX_STAGE_CAP);
  // A first chunk wider than the stage overflows it: its candidates are all invalid, so every valid column passes.
  const bool stage = !sorted && (base != 0 || n <= (hx_i32)HX_STAGE_CAP);
  const hx_u32 staged = stage ? hx_stage_row(w, top_k, n, x_s, ix_s, scan) : HX_STAGE_CAP + 1u;
  if (staged <= HX_STAGE_CAP) {
    hx_topk_select(x_s, (hx_i32)staged, false, (hx_u32)top_k, false, sel, 0, hist, scan, found, entries);
    // its closing barrier: sel is written; each thread maps its own slots to W-space
    for (hx_i32 s = (hx_i32)hx_thread_x(); s < top_k; s += HX_BLOCK) sel[s] = sel[s] >= 0 ? ix_s[sel[s]] : -1;
  } else {
    hx_topk_select(w, n, false, (hx_u32)top_k, sorted, sel, 0, hist, scan, found, entries);
  }
  hx_barrier();  // the selection's slots are written
  hx_merge_gather(sel, idx, w, cols, top_k, base, top_k, key, val);
  hx_barrier();  // every read of the old candidates is done, and of the staged row
}

// The workgroup arrays of a step kernel, declared first in its body: hx_step_rows' hist, scan, found and entries.
#define HX_STEP_SHARED                       \
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS); \
  HX_SHARED(hx_u32, scan, HX_BLOCK);         \
  HX_SHARED(hx_u32, found, 2);               \
  HX_SHARED(hx_u64, entries, MAX_TOP_K)

// A step kernel's rows (P: TopkStepParams or PagedTopkStepParams), one block a row in turn: the row's candidates and
// its chunk (with cols, only the chunk's columns above the candidates' floor, filtered into cols + row cols_stride)
// merged into this thread's slots s = tid + k HX_BLOCK < top_k, key[k] and val[k] (hx_step_select); then
// emit(row, w, idx, key, val) writes the slots and the step's other outputs of the row.
template <class P, class Emit>
HX_INLINE HX_DEV void hx_step_rows(const P& p, hx_i32* cols, hx_i64 cols_stride, hx_u32* hist, hx_u32* scan,
                                   hx_u32* found, hx_u64* entries, Emit&& emit) {
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) {
    float* const w = p.w + row * p.w_stride;
    hx_i32* const idx = p.indices + row * p.indices_stride;
    hx_step_begin(w, p.top_k, p.base);
    hx_i32* const row_cols = cols ? cols + row * cols_stride : 0;
    const hx_u32 kept = row_cols ? hx_topk_filter_chunk(w, p.top_k, p.width, row_cols, scan) : (hx_u32)p.width;
    hx_i32 key[HX_MERGE_SLOTS];
    float val[HX_MERGE_SLOTS];
    hx_step_select(w, idx, p.ws + row * p.ws_stride, row_cols, p.top_k, p.top_k + (hx_i32)kept, p.base,
                   p.last && p.sorted, hist, scan, found, entries, key, val);
    emit(row, w, idx, key, val);
    hx_barrier();  // the shared arrays and W are the next row's
  }
}

// The key a slot is written as: n, or with rel n - rel (a key's position in its own
// request: a valid key n >= rel, so >= 0; one int32 cannot hold is written -1).
HX_INLINE HX_HD hx_i32 hx_merge_index(hx_i64 n, const hx_i32* rel) {
  const hx_i64 shifted = rel && n >= 0 ? n - (hx_i64)*rel : n;
  return shifted <= 0x7FFFFFFF ? (hx_i32)shifted : -1;
}
