// The exact top-k of each row of a float32 logits array (hipindexer.topk_logits;
// numpy: hipindexer.reference.topk_logits): per row the top_k selectable
// positions by value, equal values by lower index; a row with V < top_k of them
// returns its V indices then -1 (value -inf). Every target.
//
// One block per row (a block takes several when rows outnumber the grid), in four
// steps (hx_topk_row in common/topk_select.h, which the split path's last kernel
// also runs for a row whose candidates overflow its workspace), every one deterministic (atomics only count):
// 1. Radix select on order-preserving keys (common/topk_select.h): per digit a
//    shared histogram of the keys that match the digits found so far, then a
//    block scan from the top bin finds the digit holding the top_k-th key. After
//    three digits T is that key exactly and `need` says how many keys equal to T
//    belong to the top_k. A row with V <= top_k skips the passes: it takes every
//    selectable key (T = 0, the key of nothing selectable, need = 0).
// 2. Compaction in index order: tiles of HX_BLOCK * ITEMS consecutive columns,
//    each thread a run of ITEMS, a block scan of (keys > T, keys == T) counts.
//    Column i lands at slot (keys > T before i) + min(keys == T before i, need),
//    so the equal keys taken are the lowest-indexed `need`. Unsorted output is
//    this index order.
// 3. sorted: the selected entries (key, complemented index) in shared memory,
//    bitonic-sorted descending: descending value, equal values by lower index.
// 4. Slots past the selection get -1 and -inf.
// Reads stay inside [0, extent) of the row; row offsets are 64-bit.
#include "topk_select.h"

// Rows block_x, block_x + grid, ...: the op caps the grid (hipindexer.ops.topk.MAX_BLOCKS), since a grid of one
// block per row would pass the 2^32 work-items of a gfx950 dispatch at 2^24 rows.
HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_topk_logits(const HX_GRID_CONSTANT TopkParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK);
  HX_SHARED(hx_u32, found, 2);  // the digit holding the top_k-th key, and how many of its keys to take
  HX_SHARED(hx_u64, entries, MAX_TOP_K);
  for (hx_i64 row = hx_block_x(); row < p.rows; row += hx_grid_dim_x()) hx_topk_row(p, row, hist, scan, found, entries);
}
