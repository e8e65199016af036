// The selection of the floor-filtered top-k paths (generic/prefill_topk_finish.hip, generic/topk_split_finish.hip;
// its order also generic/paged_topk_merge.hip's), by one block a row: the keys a row's filter kept pass through the
// dynamic shared buffer e (CAP entries), are cut to its top_k, and are written in order.
//
// A list that fits the buffer is loaded at once and cut once. A longer one goes in rounds: as many entries as the
// buffer has room for, those above the last cut's smallest kept, the buffer cut to top_k once half full and at the
// end. The order: ascending key position without a sort where the row's window fits a bitmap in the buffer's part
// past the selection (the selection sets bits over the window, and an entry's place is the count of set bits below
// it); otherwise, and for sorted, a bitonic sort (sorted: descending value, ties to the lower position).
#pragma once
#include "topk_select.h"

// SEL: the largest top_k (the selection's entries, at the front of e); CAP: e's entries, at least 2 SEL; BITS: the
// cut's radix digit (hx_group_select).
template <hx_u32 SEL, hx_u32 CAP, int BITS = 11>
struct HxFinishRow {
  static_assert(CAP >= 2 * SEL && SEL % HX_BLOCK == 0, "a selection and as many entries again");
  static constexpr hx_u32 PER = SEL / HX_BLOCK;        // a thread's entries of a selection
  static constexpr hx_u32 WORDS = (CAP - SEL) * 2;     // the words after the selection: the bitmap, then its counts
  hx_u64* e;
  hx_u32 *hist, *scan, *found;  // found: 3 words
  hx_u32 top_k;
  hx_u32 have = 0;  // entries in e[0, have)
  hx_u64 cut = 0;   // every entry kept is above it

  // Cut e[0, have) to the top_k (every thread calls it).
  HX_MEMBER HX_DEV void cut_to_top_k() {
    hx_block_bar bar;
    hx_u64 c;
    have = hx_group_cut<HX_BLOCK, 1, BITS>(hx_thread_x(), bar, e, have, top_k, hist, scan, found, found + 2, c);
    have = have < top_k ? have : top_k;
    cut = c > cut ? c : cut;
  }
  // One round: the entries get(i), i < n (n <= CAP - have), that pass the last cut, appended; cut to top_k once
  // over half full, or when `last`.
  template <class Get>
  HX_MEMBER HX_DEV void round(hx_u32 n, bool last, Get&& get) {
    hx_block_bar bar;
    const hx_u32 tid = hx_thread_x();
    if (tid == 0) found[2] = have;
    bar();
    for (hx_u32 i0 = 0; i0 < n; i0 += HX_BLOCK) {  // uniform: the appends go a wave at a time
      const hx_u32 i = i0 + tid;
      const hx_u64 x = i < n ? get(i) : 0ull;
      const bool keep = x > cut;
      const hx_u32 at = hx_wave_append(keep, &found[2]);
      if (keep) e[at] = x;
    }
    bar();
    have = found[2];
    bar();  // found[2] is read by all before the cut takes it
    if (have > CAP / 2 || last) cut_to_top_k();
  }
  // The list src[0, count) appended (count <= CAP - have) by copies (hx_copy_async_u64, a batch a thread at a
  // time: where a copy is a load and a store, the batch's loads go before its stores), which land at settle():
  // several lists taken so wait on one round of loads, not one each.
  HX_MEMBER HX_DEV void take_unsettled(const hx_u64* src, hx_u32 count) {
    const hx_u32 tid = hx_thread_x();
    for (hx_u32 i0 = tid; i0 < count; i0 += HX_CUT_ITEMS * HX_BLOCK) {
      HX_UNROLL
      for (int b = 0; b < HX_CUT_ITEMS; ++b)
        if (i0 + b * HX_BLOCK < count) hx_copy_async_u64(e + have + i0 + b * HX_BLOCK, src + i0 + b * HX_BLOCK);
    }
    have += count;
  }
  // The entries taken are in place for every thread (before a cut reads them).
  HX_MEMBER HX_DEV void settle() {
    hx_copy_async_wait();
    hx_barrier();
  }
  // The list src[0, count): at once where it fits, else in rounds.
  HX_MEMBER HX_DEV void take(const hx_u64* src, hx_u32 count) {
    if (count <= CAP - have) {  // uniform
      take_unsettled(src, count);
      settle();
      return;
    }
    for (hx_u32 lo = 0; lo < count;) {
      const hx_u32 n = count - lo < CAP - have ? count - lo : CAP - have;
      round(n, false, [&](hx_u32 i) { return src[lo + i]; });
      lo += n;
    }
  }
  // Entries [lo, lo + n) of the lists of the parts of a row as one (n <= CAP - have): entry i of them all is part
  // j's src(j)[i - before[j]], j the last part whose before[j] (the entries of the parts ahead of it, ascending from
  // before[0] = 0, in shared memory; `parts` of them) is at or below i. Copied as take_unsettled copies, whichever
  // parts a batch's entries come from, so a row's kept keys come in one round of loads; settled on return.
  template <class Src>
  HX_MEMBER HX_DEV void take_parts(const hx_u32* before, hx_u32 parts, hx_u32 lo, hx_u32 n, Src&& src) {
    const hx_u32 tid = hx_thread_x();
    for (hx_u32 i0 = tid; i0 < n; i0 += HX_CUT_ITEMS * HX_BLOCK) {
      HX_UNROLL
      for (int b = 0; b < HX_CUT_ITEMS; ++b) {
        const hx_u32 i = lo + i0 + b * HX_BLOCK, j = hx_list_of(before, parts, i);
        if (i0 + b * HX_BLOCK < n) hx_copy_async_u64(e + have + i0 + b * HX_BLOCK, src(j) + (i - before[j]));
      }
    }
    have += n;
    settle();
  }
  // The selection e[0, have) (at most top_k, positions in [lo, lo + len)) in order: write(s, position, key) for each
  // slot s; returns the slots written. Positions outside the window (only a bad workspace holds them) are dropped.
  template <class Write>
  HX_MEMBER HX_DEV hx_u32 write_in_order(hx_i64 lo, hx_i64 len, bool sorted, Write&& write) {
    const hx_u32 tid = hx_thread_x();
    // a window past the room counts one word too many, so that the test below sends it to the sort
    const hx_u32 words = len > (hx_i64)WORDS * 32 ? WORDS + 1u : (hx_u32)((len + 31) / 32);
    const hx_bitmap_runs runs = hx_bitmap_runs_for(words, HX_BLOCK, WORDS);
    if (sorted || HX_BLOCK * runs.pitch > WORDS) {
      if (!sorted)  // ascending position: the complemented position above the key sorts descending
        for (hx_u32 i = tid; i < have; i += HX_BLOCK) {
          const hx_u64 x = e[i];
          e[i] = ((hx_u64)(0xFFFFFFFFu - (hx_u32)hx_topk_entry_index(x)) << 32) | (x >> 32);
        }
      hx_barrier();
      hx_topk_sort_desc(e, have);
      for (hx_u32 s = tid; s < have; s += HX_BLOCK) {
        const hx_u64 x = e[s];
        if (sorted) write(s, (hx_i64)hx_topk_entry_index(x), (hx_u32)(x >> 32));
        else write(s, (hx_i64)(0xFFFFFFFFu - (hx_u32)(x >> 32)), (hx_u32)x);
      }
      return have;
    }
    hx_u32* const bits = (hx_u32*)(e + SEL);
    const hx_u32 own = tid * runs.per, first = tid * runs.pitch;  // the thread's words, and where they lie
    for (hx_u32 i = 0; i < runs.per && own + i < words; ++i) bits[first + i] = 0u;
    hx_barrier();
    hx_u64 mine[PER];
    HX_UNROLL
    for (hx_u32 k = 0; k < PER; ++k) {
      const hx_u32 i = tid + k * HX_BLOCK;
      mine[k] = i < have ? e[i] : 0ull;
      if ((hx_u32)(hx_topk_entry_index(mine[k]) - lo) / 32 >= words) mine[k] = 0ull;  // only a bad workspace
      if (mine[k]) {
        const hx_u32 b = (hx_u32)(hx_topk_entry_index(mine[k]) - lo);
        hx_atomic_or((hx_i32*)&bits[runs.at(b / 32)], (hx_i32)(1u << (b % 32)));
      }
    }
    hx_barrier();
    hx_u32 mine_bits = 0;
    for (hx_u32 i = 0; i < runs.per && own + i < words; ++i) mine_bits += hx_popc(bits[first + i]);
    hx_u32 all;
    const hx_u32 below = hx_block_exclusive_sum(mine_bits, scan, &all);
    hist[tid] = below;
    // where the room after the bitmap holds a word a word, each word's count of set bits before it: a place is then
    // two reads, where it would walk the thread's words before it
    hx_u32* const counted = runs.pitch * HX_BLOCK + words <= WORDS ? bits + runs.pitch * HX_BLOCK : nullptr;
    if (counted)
      for (hx_u32 i = 0, n = below; i < runs.per && own + i < words; ++i) {
        counted[own + i] = n;
        n += hx_popc(bits[first + i]);
      }
    hx_barrier();
    // each entry to its place in e (whose entries every thread holds by now), then the row written in slot order: a
    // warp's stores land in a few sectors, where stores at the ranks spread over the row's
    HX_UNROLL
    for (hx_u32 k = 0; k < PER; ++k)
      if (mine[k]) e[hx_bitmap_rank(bits, hist, runs, (hx_u32)(hx_topk_entry_index(mine[k]) - lo), counted)] = mine[k];
    hx_barrier();
    // set bits: fewer than the entries only where a bad workspace repeated or misplaced one
    for (hx_u32 s = tid; s < all; s += HX_BLOCK) write(s, (hx_i64)hx_topk_entry_index(e[s]), (hx_u32)(e[s] >> 32));
    return all;
  }
};
