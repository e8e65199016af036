// What the fused decode top-k kernels share (sm90a/paged_mqa_topk_wgmma_tma.hip, gfx950/paged_mqa_topk_mfma.hip):
// each live row of the segment in hand keeps a buffer of cap candidate entries in shared memory (hx_topk_entry: the
// key above the complemented column, so entries order as the selection does, ties to the lower column) and a floor
// that a key must pass to enter. A group of G threads (whole waves meeting at bar()) cuts a row that fills up to its
// top_k and raises its floor to the cut's key; a later column equal to that key loses the tie to every kept entry
// (all have lower columns: a unit takes a segment's keys in column order, meeting between rounds), so the floor
// filters exactly. At the segment's end each row's top_k goes to the workspace at slot u + b (unit u's piece of
// sequence b: units own contiguous pieces of the batch's work, so no two pieces share a slot) with its count, and
// the slot is listed for sequence b, which generic/paged_topk_merge.hip reads and empties.
#pragma once
#include "topk_select.h"

struct hx_cand_rows {
  hx_u64* e;      // row jr's entries at e + jr * stride, cap of them at most
  hx_u32 stride, cap;
  hx_u32* hist;   // the cut's scratch: 2048 words, a word a wave, 3 words a row
  hx_u32* scan;
  hx_u32* found;  // hx_group_cut's found[0..1] and fill found[2]; hx_group_cut_rows' 2 R and R after them
  hx_u32* count;  // a word a row
  hx_u32* floor;  // a key enters row jr only above floor[jr]
};

// The rows' buffers empty and their floors 0, by the group's first threads (a meeting follows before any use).
HX_INLINE HX_DEV void hx_cand_reset(const hx_cand_rows& k, hx_u32 t, hx_u32 rows) {
  if (t < rows) {
    k.count[t] = 0u;
    k.floor[t] = 0u;
  }
}

// Rows [0, R) holding more than top_k entries (and more than `over`) cut to their top_k and their floors raised,
// side by side (hx_group_cut_rows: one set of meetings a radix pass for the rows together; rows past the live ones
// hold no entries); by every thread of the group, after a meeting that made every append visible. With `passes` = 1
// a row keeps its top_k and the rest of the first digit's bin. U: the entries a thread's radix passes read at once.
// found holds 3 R words.
template <hx_u32 G, hx_u32 R, int U = 1, class Bar>
HX_INLINE HX_DEV void hx_cand_cut_rows(const hx_cand_rows& k, hx_u32 t, Bar& bar, hx_u32 top_k, hx_u32 over = 0,
                                       int passes = 64) {
  hx_u64* e[R];
  hx_u32 n[R];
  hx_u64 cut[R];
  HX_UNROLL
  for (hx_u32 r = 0; r < R; ++r) {
    e[r] = k.e + r * k.stride;
    n[r] = k.count[r];  // read by all between two meetings (each a compiler fence)
    n[r] = n[r] > over ? n[r] : 0u;
  }
  hx_group_cut_rows<G, R, U>(t, bar, e, n, top_k, k.hist, k.scan, k.found, k.found + 2 * R, cut, passes);
  if (t == 0) {
    HX_UNROLL
    for (hx_u32 r = 0; r < R; ++r)
      if (cut[r] != 0ull) {
        k.count[r] = n[r];
        k.floor[r] = (hx_u32)(cut[r] >> 32);
      }
  }
  bar();
}

// The same at a meeting mid-segment, where the rows need only lose most of their entries: once any row is past
// `high`, every row past halfway from top_k to high keeps the entries at or above the lowest of the first radix
// digit's bin that holds its top_k-th (its top_k and the rest of that bin: one pass over the entries where the exact
// cut takes two or more; rows that fill alike are trimmed at one meeting rather than a meeting apart), its floor
// that bin's lowest key. A later key equal to it comes after every kept entry, which all rank above it, so the floor
// still filters exactly, and the segment's end cuts exactly. A row that keeps more than the halfway mark is cut
// exactly after all.
template <hx_u32 G, hx_u32 R, int U = 1, class Bar>
HX_INLINE HX_DEV void hx_cand_trim_rows(const hx_cand_rows& k, hx_u32 t, Bar& bar, hx_u32 top_k, hx_u32 high) {
  const hx_u32 half = top_k + (high - top_k) / 2;
  hx_cand_cut_rows<G, R, U>(k, t, bar, top_k, half, 1);
  hx_cand_cut_rows<G, R, U>(k, t, bar, top_k, half);
}

// The trim a row at a time, each row past `high` on its own (and cut exactly past halfway), for a loop whose scalar
// registers are scarce (gfx950's page loop): there the rows' side-by-side state, live across the passes, would push
// the loop's own scalars out to vector-register lanes, reloaded on every page.
template <hx_u32 G, int U = 1, class Bar>
HX_INLINE HX_DEV void hx_cand_trim(const hx_cand_rows& k, hx_u32 t, Bar& bar, hx_i32 live, hx_u32 top_k, hx_u32 high) {
  for (hx_i32 jr = 0; jr < live; ++jr) {
    const hx_u32 n = k.count[jr];
    if (n <= high) continue;  // uniform: read by all between two meetings (each a compiler fence)
    hx_u64* e = k.e + jr * k.stride;
    hx_u64 cut;
    hx_u32 kept = hx_group_cut<G, U>(t, bar, e, n, top_k, k.hist, k.scan, k.found, k.found + 2, cut, 1);
    if (kept > top_k + (high - top_k) / 2)
      kept = hx_group_cut<G, U>(t, bar, e, kept, top_k, k.hist, k.scan, k.found, k.found + 2, cut);
    if (t == 0) {
      k.count[jr] = kept;
      k.floor[jr] = (hx_u32)(cut >> 32);
    }
    bar();
  }
}

// The segment's rows (cut to top_k) written to slot `slot` of parts / part_counts (next_n rows of top_k entries a
// slot; rows past live get count 0), and the slot appended to sequence b's list (seq_parts: units words a sequence).
template <hx_u32 G>
HX_INLINE HX_DEV void hx_cand_write(const hx_cand_rows& k, hx_u32 t, hx_u64* parts, hx_i32* part_counts,
                                    hx_i32* seq_parts, hx_i32* seq_nparts, hx_i64 slot, hx_i32 b, hx_i32 next_n,
                                    hx_i32 live, hx_u32 top_k, hx_i64 units) {
  for (hx_i32 jr = 0; jr < next_n; ++jr) {
    const hx_u32 n = jr < live ? k.count[jr] : 0u;
    hx_u64* dst = parts + (slot * next_n + jr) * (hx_i64)top_k;
    for (hx_u32 i = t; i < n; i += G) dst[i] = k.e[jr * k.stride + i];
    if (t == 0) part_counts[slot * next_n + jr] = (hx_i32)n;
  }
  if (t == 0) {
    const hx_u32 pos = hx_atomic_add_u32((hx_u32*)seq_nparts + b, 1u);
    seq_parts[(hx_i64)b * units + pos] = (hx_i32)slot;
  }
}
