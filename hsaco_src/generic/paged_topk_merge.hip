// The last launch of the fused decode top-k (hipindexer.fp8_paged_mqa_topk on a fused kernel,
// hipindexer/ops/paged_topk_fused.py): one block per row merges the pieces the units wrote for it (each the row's top_k
// of one unit's keys, as entries hx_topk_entry) into the row's top_k, orders them (ascending key position, or
// sorted: descending value, ties to the lower position) and writes the indices and, when asked, the values and
// cache slots, -1 (-inf) past the row's valid keys. The last of a sequence's rows to finish empties the
// sequence's list of pieces for the next call. Every target.
//
// The lists live in the op's workspace, written by the fused kernel just before: counts and slots are still
// checked against their ranges, so a workspace in a bad state can only give a wrong selection, never a read or
// write outside it. The pieces' slots and counts are read at once and their entries taken as one list, which
// passes through shared memory in rounds: as many of its entries as the buffer (HX_SMEM bytes) has room for are
// read, a tile of loads at a time per thread, those above the last cut's smallest entry kept, and the buffer cut to
// top_k once half full. Each entry is read from the workspace once, and a long list (many units a row) keeps few.
//
// Where a row's list is long (few sequences over many units), the op launches a first level before: p.groups
// blocks a row, each merging p.group of the listed pieces into the slot of the first of them, and the last level
// then reads every p.group-th entry of the list (p.stride).
//
// The order is common/topk_finish.h's: ascending positions without a sort where the row fits a bitmap in the
// buffer's part past the selection, else (and sorted) a bitonic sort.
#include "topk_finish.h"
#include "paged_cache.h"

#define HX_MAX_PIECES 512                     // units of a fused launch (the op holds them to it)
#define HX_MERGE_CAP (HX_SMEM / 8)              // the list's entries in shared memory at once
#ifndef HX_MERGE_LOADS
#define HX_MERGE_LOADS (8192 / HX_BLOCK)        // list entries a thread loads at once: 8,192 a block in flight
#endif
static_assert(HX_MAX_PIECES <= 2 * HX_BLOCK, "two pieces a thread in the scan");
static_assert(HX_MERGE_CAP >= 2 * MAX_TOP_K, "a selection and as many entries again");

// Output slot s of the row: position n (-1: none) with its key.
HX_INLINE HX_DEV void hx_merge_write(const PagedTopkMergeParams& p, hx_i64 row, hx_i64 b, hx_u32 s, hx_i32 n,
                                     hx_u32 key) {
  p.indices[row * p.indices_stride + s] = n;
  if (p.values) p.values[row * p.values_stride + s] = n >= 0 ? hx_topk_value(key) : hx_bits_to_f32(0xFF800000u);
  if (p.slots)
    p.slots[row * p.slots_stride + s] =
        hx_cache_slot(p.block_tables + b * p.max_blocks, p.max_blocks, p.block_size, p.num_blocks, n);
}

HX_KERNEL HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 1) void hx_paged_topk_merge(const HX_GRID_CONSTANT PagedTopkMergeParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK / HX_WAVE_SIZE);
  HX_SHARED(hx_u32, found, 3);
  HX_SHARED(hx_i32, piece_slot, HX_MAX_PIECES);
  HX_SHARED(hx_u32, piece_at, HX_MAX_PIECES + 1);  // each piece's first entry in the row's list; then the total
  HX_DYNAMIC_SHARED(hx_u64, e);                    // HX_MERGE_CAP entries: the selection, then the list's next ones
  hx_block_bar bar;
  const hx_u32 tid = hx_thread_x();
  const hx_u32 top_k = (hx_u32)p.top_k;
  const hx_i64 slots = (hx_i64)p.units + p.B;
  if (top_k > MAX_TOP_K / 2 || p.units > HX_MAX_PIECES) return;  // the op never launches it so
  // A first level (p.group > 0) gives each row p.groups blocks, block g merging list entries [g group, (g + 1)
  // group) into the slot of the first of them; the last level reads every p.stride-th entry of the list.
  const hx_u32 groups = p.group > 0 && p.groups > 0 ? (hx_u32)p.groups : 1u;
  for (hx_i64 item = hx_block_x(); item < (hx_i64)p.B * p.next_n * groups; item += hx_grid_dim_x()) {
    const hx_i64 row = item / groups, b = row / p.next_n, j = row % p.next_n;
    const hx_u32 g = (hx_u32)(item % groups);
    const hx_u32 first = p.group > 0 ? g * (hx_u32)p.group : 0u;
    const hx_u32 step = p.group > 0 || p.stride < 1 ? 1u : (hx_u32)p.stride;
    // 1. the pieces' slots and entry counts, and where each starts in the row's list: the list's words read beside
    //    its length (those past it are left from earlier calls and not taken), so that the counts wait on one read
    hx_i32 listed_slot[2];
    for (hx_u32 k = 0; k < 2; ++k) {
      const hx_u32 at = first + (2 * tid + k) * step;
      listed_slot[k] = at < (hx_u32)p.units ? p.seq_parts[b * p.units + at] : -1;
    }
    const hx_i32 listed = p.seq_nparts[b];
    const hx_u32 nl = listed < 0 ? 0u : listed > p.units ? (hx_u32)p.units : (hx_u32)listed;  // list entries
    const hx_u32 np = p.group > 0 ? (nl > first ? (nl - first < (hx_u32)p.group ? nl - first : (hx_u32)p.group) : 0u)
                                  : (nl + step - 1u) / step;
    if (p.group > 0 && np < 2u) continue;  // uniform: a group of one piece is its own merge
    hx_u32 count[2];
    for (hx_u32 k = 0; k < 2; ++k) {
      const hx_u32 q = 2 * tid + k;
      hx_i64 slot = q < np ? listed_slot[k] : -1;
      slot = slot >= 0 && slot < slots ? slot : -1;
      const hx_i32 c = slot >= 0 ? p.part_counts[slot * p.next_n + j] : 0;
      count[k] = c < 0 ? 0u : (hx_u32)c > top_k ? top_k : (hx_u32)c;
      if (q < HX_MAX_PIECES) piece_slot[q] = (hx_i32)slot;
    }
    hx_u32 total;
    const hx_u32 at = hx_block_exclusive_sum(count[0] + count[1], scan, &total);
    if (2 * tid < HX_MAX_PIECES) piece_at[2 * tid] = at;
    if (2 * tid + 1 < HX_MAX_PIECES) piece_at[2 * tid + 1] = at + count[0];
    if (tid == 0) piece_at[HX_MAX_PIECES] = total;  // pieces past np count 0: piece_at[np] is the total too
    bar();
    // 2. the row's top_k of the list: its entries [lo, hi) that pass the last cut appended to the selection so far,
    //    e[0, have), and the whole cut to top_k in shared memory once it is half full, until the list has passed.
    //    Until the first cut every entry passes, so each goes to its own place, and each thread keeps its entries'
    //    range of keys for that cut.
    // f(x, in, base) for each of this thread's tiles of the list's entries in [lo, hi): x[k] entry base + tid + k
    // HX_BLOCK, in[k] whether it is one (a slot past the range holds 0). Every HX_BLOCK-th entry of the list,
    // HX_MERGE_LOADS of them a thread in flight at once, walking the pieces' starts forward from a search for the first
    // (no search per entry): one walk for wide pieces and narrow ones, a tile spanning as many pieces as it meets.
    // Every thread calls f as often as the others (uniform trip counts), so f may meet its wave.
    auto pieces = [&](hx_u32 lo, hx_u32 hi, auto&& f) {
      hx_u64 x[HX_MERGE_LOADS];
      bool in[HX_MERGE_LOADS];
      hx_u32 q = hx_list_of(piece_at, np, lo + tid);  // the piece of the thread's last entry: its places only grow
      for (hx_u32 base = lo; base < hi; base += HX_BLOCK * HX_MERGE_LOADS) {  // uniform
        HX_UNROLL
        for (int k = 0; k < HX_MERGE_LOADS; ++k) {
          const hx_u32 at = base + tid + (hx_u32)k * HX_BLOCK;
          in[k] = at < hi;
          x[k] = 0ull;
          if (in[k]) {
            while (piece_at[q + 1] <= at) ++q;
            x[k] = p.parts[((hx_i64)piece_slot[q] * p.next_n + j) * (hx_i64)top_k + (at - piece_at[q])];
          }
        }
        f(x, in, base);
      }
    };
    hx_u32 have = 0;
    hx_u64 cut = 0;  // the smallest entry of the last cut's top_k: nothing below it can be among the row's top_k
    hx_key_range range;  // this thread's entries' keys, until the first cut
    for (hx_u32 lo = 0; lo < total;) {  // uniform
      const hx_u32 n = total - lo < HX_MERGE_CAP - have ? total - lo : HX_MERGE_CAP - have;
      if (cut == 0) {  // uniform
        pieces(lo, lo + n, [&](const hx_u64(&x)[HX_MERGE_LOADS], const bool(&in)[HX_MERGE_LOADS], hx_u32 base) {
          HX_UNROLL
          for (int k = 0; k < HX_MERGE_LOADS; ++k)
            if (in[k]) {
              e[have + (base - lo) + tid + (hx_u32)k * HX_BLOCK] = x[k];
              range.add(x[k]);
            }
        });
        have += n;
        bar();
      } else {
        if (tid == 0) found[2] = have;
        bar();
        pieces(lo, lo + n, [&](const hx_u64(&x)[HX_MERGE_LOADS], const bool(&in)[HX_MERGE_LOADS], hx_u32) {
          bool keep[HX_MERGE_LOADS];
          hx_u32 at[HX_MERGE_LOADS];
          HX_UNROLL
          for (int k = 0; k < HX_MERGE_LOADS; ++k) keep[k] = in[k] && x[k] > cut;
          hx_append_each(keep, &found[2], at);  // one add a warp and tile: a lane's add each queued on one word
          HX_UNROLL
          for (int k = 0; k < HX_MERGE_LOADS; ++k)
            if (keep[k]) e[at[k]] = x[k];
        });
        bar();
        have = found[2];
        bar();  // found[2] is read by all before the cut takes it
      }
      lo += n;
      if (have > HX_MERGE_CAP / 2 || lo == total) {  // uniform
        const hx_u64 c = hx_group_cut_value<HX_BLOCK, 4>(tid, bar, e, have, top_k, hist, scan, found, 64,
                                                         cut == 0, range);
        if (have > top_k) have = hx_group_keep<HX_BLOCK>(tid, bar, e, have, c, found + 2);
        have = have < top_k ? have : top_k;  // more only from a workspace in a bad state (equal entries)
        cut = c > cut ? c : cut;
      }
    }
    if (p.group > 0) {  // a first level: the group's top_k in place of its first piece (read whole by now)
      const hx_i64 slot = piece_slot[0];
      if (slot >= 0) {
        hx_u64* dst = p.parts + (slot * p.next_n + j) * (hx_i64)top_k;
        for (hx_u32 i = tid; i < have; i += HX_BLOCK) dst[i] = e[i];
        if (tid == 0) p.part_counts[slot * p.next_n + j] = (hx_i32)have;
      }
      bar();  // the shared arrays are the next item's
      continue;
    }
    // 3. the outputs in order (set bits of the bitmap over positions: fewer than `have` only where a bad workspace
    //    repeated or misplaced an entry)
    HxFinishRow<MAX_TOP_K / 2, HX_MERGE_CAP> f{e, hist, scan, found, top_k};
    f.have = have;
    const hx_u32 wrote = f.write_in_order(0, p.max_model_len, p.sorted, [&](hx_u32 s, hx_i64 n, hx_u32 key) {
      hx_merge_write(p, row, b, s, (hx_i32)n, key);
    });
    for (hx_u32 s = wrote + tid; s < top_k; s += HX_BLOCK) hx_merge_write(p, row, b, s, -1, 0u);
    bar();  // the shared arrays are the next row's; every thread's reads of the sequence's list are done
    // the sequence's last row to finish empties its list (a sequence of one row: this block, with no count)
    if (tid == 0 && (p.next_n == 1 || hx_atomic_add_acq_rel(p.seq_done + b, 1) == p.next_n - 1)) {
      p.seq_nparts[b] = 0;
      p.seq_done[b] = 0;
    }
  }
}
