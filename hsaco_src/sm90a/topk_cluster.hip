// topk_logits' cluster path (sm_90a): a cluster of HX_CLUSTER blocks a row, the row's float4 slots cut into
// HX_CLUSTER consecutive ranges, each block holding its range's keys in its shared memory for the whole selection.
// Where the resident path runs a row's every step on one unit, this one spreads a row's loads, counts and
// placement over HX_CLUSTER units; what crosses the blocks goes through distributed shared memory, at a cluster
// meeting (hx_cluster_sync) a step:
// 1. each block's range of keys in (hx_resident_keys_in, common/topk_resident.h); each block's count of selectable
//    keys, least and greatest key to a word of its shared memory (peer); a meeting; every block reads the others'
//    and reduces them to the row's;
// 2. T and need by the radix passes (hx_resident_cut) over the keys each block holds, a pass's counts in each
//    block's own histogram; at a pass's meeting the blocks sum the bins over every block's histogram, an eighth of
//    them each, and write the sums into every block, so that all find the same T and need from their own copy;
// 3. each block's counts (keys > T, keys == T) to peer; a meeting; a block places its selection
//    (hx_resident_place) after those of the blocks before it, which hold the row's lower columns;
// 4. sorted: each block writes its entries into the shared memory of the cluster's first block instead, which
//    sorts them after a meeting and writes the row (hx_topk_write_sorted); the first block pads the row.
// Buffers read or written by other blocks are rewritten only after a meeting that every reader reaches after its
// reads: a pass's histogram two passes later, total4 a pass later, peer's words a step later, and the sort's entries
// a row later.
// The block's dynamic shared memory: cluster_slots(N) float4s of keys, then (sorted, used in the first block)
// 8 pow2(min(top_k, N)) bytes of entries (hipindexer.plan.topk.cluster_smem). A block's keys are fewer than
// 65,536, for hx_resident_place's counts (hipindexer.plan.topk.cluster_fits).
#include "topk_resident.h"
#include "hopper.h"

// Float4 slots of a row of up to N columns each block of the cluster holds.
HX_INLINE HX_DEV hx_u32 hx_cluster_slots(hx_i32 N) { return (hx_resident_words(N) / 4u + HX_CLUSTER - 1) / HX_CLUSTER; }

HX_KERNEL __cluster_dims__(HX_CLUSTER, 1, 1) HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 2)
void hx_topk_cluster(const HX_GRID_CONSTANT TopkParams p) {
  hx_grid_dependency_wait();
  constexpr hx_u32 W = HX_BLOCK / HX_WAVE_SIZE;
  HX_SHARED(hx_u32x4, hist4, 2 * RESIDENT_BINS / 4);  // two passes' counts: one cleared while the other is read
  HX_SHARED(hx_u32x4, total4, RESIDENT_BINS / 4);     // the pass's whole counts, the sum of every block's
  HX_SHARED(hx_u32, sums, 2 * W);               // the passes' chunk sums, likewise; then the compaction's scan
  HX_SHARED(hx_u32, ext, 3 * W);                // the waves' least and greatest key and count
  HX_SHARED(hx_u32, peer, 4);                   // the block's: least, greatest, count; then its placement counts
  HX_DYNAMIC_SHARED(hx_u32x4, keys4);
  const hx_u32 slots = hx_cluster_slots(p.N);
  hx_u64* const sel = (hx_u64*)(keys4 + slots);
  const hx_u32 tid = hx_thread_x(), lane = tid % HX_WAVE_SIZE, wave = tid / HX_WAVE_SIZE;
  const hx_u32 rank = hx_cluster_rank(), top_k = (hx_u32)p.top_k;
  const bool by_lengths = p.lengths != 0, sorted = p.sorted != 0;
  hx_u32* const hist = (hx_u32*)hist4;
  const hx_u32 hist_at = hx_smem_u32(hist4), total_at = hx_smem_u32(total4), peer_at = hx_smem_u32(peer);
  // lane l < HX_CLUSTER's word w of block l's peer (0 for other lanes)
  const auto peers = [&](hx_u32 w) { return lane < HX_CLUSTER ? hx_cluster_load_u32(hx_cluster_map(peer_at + 4u * w, lane)) : 0u; };
  for (hx_i64 row = hx_cluster_id_x(); row < p.rows; row += hx_clusters_x()) {
    const float* const x = p.logits + row * p.logits_stride;
    const hx_i32 n = hx_topk_row_extent(p.lengths, row, p.N);
    const hx_i32 a = (hx_i32)((((hx_u64)x) >> 2) & 3u);  // slot s holds column s - a
    const hx_u32 m4 = (hx_u32)(a + n + 3) / 4u;          // float4 slots of the row
    const hx_u32 per = (m4 + HX_CLUSTER - 1) / HX_CLUSTER;
    const hx_u32 vb = rank * per < m4 ? rank * per : m4, ve = vb + per < m4 ? vb + per : m4, m = ve - vb;

    // 1. keys in; the row's count, least and greatest
    hx_u32 mine, lo, hi;
    hx_resident_keys_in(x, a, n, vb, ve, by_lengths, keys4, tid, mine, lo, hi);
    hx_wave_extremes(lane, lo, hi);
    mine = hx_wave_shfl_u32(hx_wave_inclusive_sum(mine), HX_WAVE_SIZE - 1);
    if (lane == 0) {
      ext[3 * wave] = lo;
      ext[3 * wave + 1] = hi;
      ext[3 * wave + 2] = mine;
    }
    for (hx_u32 b = tid; b < RESIDENT_BINS; b += HX_BLOCK) hist[b] = 0u;
    hx_barrier();  // the keys, the waves' words and the first pass's cleared counts
    lo = lane < W ? ext[3 * lane] : 0xFFFFFFFFu;
    hi = lane < W ? ext[3 * lane + 1] : 0u;
    mine = hx_wave_shfl_u32(hx_wave_inclusive_sum(lane < W ? ext[3 * lane + 2] : 0u), HX_WAVE_SIZE - 1);
    hx_wave_extremes(lane, lo, hi);
    if (tid == 0) {
      peer[0] = lo;
      peer[1] = hi;
      peer[2] = mine;
    }
    hx_cluster_sync();  // every block's words
    lo = lane < HX_CLUSTER ? peers(0) : 0xFFFFFFFFu;
    hi = peers(1);
    const hx_u32 V = hx_wave_shfl_u32(hx_wave_inclusive_sum(peers(2)), HX_WAVE_SIZE - 1);
    hx_wave_extremes(lane, lo, hi);

    // 2. T and need over the cluster's counts
    hx_u32 T = 0u, need = 0u;  // V <= top_k: every selectable key (all > 0)
    hx_u32* scan = sums;
    // A pass's meeting: the blocks' counts are whole; block r sums the bins' float4 groups r, r + HX_CLUSTER, ...
    // over every block's counts and writes each sum into every block's total4 (16-byte reads and writes: the
    // cluster's shared memory is slow to small ones); then every total4 is whole.
    const auto gather = [&](hx_u32 buf) {
      hx_cluster_sync();
      for (hx_u32 i = rank + HX_CLUSTER * tid; i < RESIDENT_BINS / 4; i += HX_CLUSTER * HX_BLOCK) {
        const hx_u32 at = hist_at + 16u * (buf * (RESIDENT_BINS / 4) + i);
        hx_u32x4 s = {0u, 0u, 0u, 0u};
        HX_UNROLL
        for (hx_u32 r = 0; r < HX_CLUSTER; ++r) {
          const hx_u32x4 c = hx_cluster_load_u32x4(hx_cluster_map(at, r));
          s = {s.x + c.x, s.y + c.y, s.z + c.z, s.w + c.w};
        }
        HX_UNROLL
        for (hx_u32 r = 0; r < HX_CLUSTER; ++r) hx_cluster_store_u32x4(hx_cluster_map(total_at + 16u * i, r), s);
      }
      hx_cluster_sync();
    };
    if (V > top_k)  // uniform over the cluster
      hx_resident_cut(
          tid, keys4, m, lo, hi, top_k, hist, sums, gather,
          [&](hx_u32, hx_u32 t) { return ((const hx_u32*)total4)[t]; }, T, need, scan);
    const hx_u32 selected = V < top_k ? V : top_k;

    // 3. this block's counts; the blocks' before it; the placement
    const hx_resident_run run = hx_resident_runs(tid, keys4, m, T, scan);
    if (tid == 0) peer[3] = run.all;
    hx_cluster_sync();  // every block's counts; no block reads peer's first words any more
    const hx_u32 theirs = lane < rank ? peers(3) : 0u;
    const hx_u32 gt0 = hx_wave_shfl_u32(hx_wave_inclusive_sum(theirs >> 16), HX_WAVE_SIZE - 1),
                 eq0 = hx_wave_shfl_u32(hx_wave_inclusive_sum(theirs & 0xFFFFu), HX_WAVE_SIZE - 1);
    hx_i32* const out_idx = hx_wave_pointer(p.indices + row * p.indices_stride);
    float* const out_val = p.values ? p.values + row * p.values_stride : 0;
    const hx_i32 a_block = a - 4 * (hx_i32)vb;  // the block's slot v holds column 4 v - a_block
    if (sorted) {
      const hx_u32 sel_at = hx_cluster_map(hx_smem_u32(sel), 0u);
      hx_resident_place(tid, keys4, run, a_block, T, need, gt0, eq0, [&](hx_u32 slot, hx_i32 col, hx_u32 key) {
        hx_cluster_store_u64(sel_at + 8u * slot, hx_topk_entry(key, col));
      });
    } else if (out_val) {
      hx_resident_place(tid, keys4, run, a_block, T, need, gt0, eq0, [&](hx_u32 slot, hx_i32 col, hx_u32) {
        out_idx[slot] = col;
        out_val[slot] = x[col];  // the logit itself: -0.0 keys as +0.0
      });
    } else {
      hx_resident_place(tid, keys4, run, a_block, T, need, gt0, eq0,
                        [&](hx_u32 slot, hx_i32 col, hx_u32) { out_idx[slot] = col; });
    }

    // 4. sorted: the first block sorts every block's entries; the first block pads
    if (sorted) hx_cluster_sync();  // uniform over the cluster: every entry is written
    if (rank == 0) {
      if (sorted) hx_topk_write_sorted(sel, selected, out_idx, out_val, x);
      hx_topk_pad(out_idx, out_val, selected, top_k);
    }
    hx_barrier();  // the keys and the entries are the next row's
  }
  hx_cluster_sync();  // no block exits while another may read its shared memory
}
