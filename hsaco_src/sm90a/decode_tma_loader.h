// The warpgroup of the sm_90a paged decode kernel (paged_mqa_logits_wgmma_tma.hip) that feeds its math warpgroups,
// on decode_tma_cta.h and decode_feed.h: the block-table walk and, per block, the tensor copy of its keys (with its
// scales where the page allows, else one bulk copy of them besides), stages in turn by warps 0 and 2 (and 3 after
// its fill, for 16-token blocks); each segment's query rows and weights into a Q slot (warp 1); the -inf fill (warp 3).
// Then the body both TMA decode kernels run, this warpgroup beside their math warpgroups (hx_decode_tma_cta).
#pragma once
#include "decode_tma_cta.h"
#include "decode_feed.h"

namespace {

// ------------------------------------------------------------------ warpgroup 0
// Block id's keys (block_size x 128 bytes) to dst through the host's tensor map of the cache (hipindexer/kv_map.py),
// which the launch carries by value in its parameters.
// Block-flat: [blocks][rows][128 bytes], one box a block, landing as token-major 128-byte rows in the 128-byte
// swizzle; where a page is whole 128-byte rows (block_size 64: 66), the box is the page, its scales rows 64 and
// 65. Preshuffled: a 16-token group's chunk c of tokens 8h..8h+7 is 128 contiguous bytes, a core matrix of the
// unswizzled operand layout; one box a block, [group][h][chunk][128 bytes], so 8-token group g8 = 2 g + h lands at
// g8 x 1024 and chunk c at c x 128 within it. The box's innermost dimension is that 128-byte run: the copy engine
// reads a box as runs of its innermost dimension, and one token's 16-byte chunk as the run would make 8x as many.
// Either way the MMA sees the same keys (the math's descriptor follows the layout).
template <class P>
HX_INLINE __device__ void copy_keys(const P& p, hx_u32 dst, hx_i32 id, hx_u32 bar) {
  if (p.preshuffle) hx_tma_load_5d(dst, p.kv_map, 0, 0, 0, 0, id, bar);
  else hx_tma_load_3d(dst, p.kv_map, 0, 0, id, bar);
}

// Page warp `which` of `warps` (2, or 3 for 16-token blocks): of every segment's blocks, 64 keys a stage, stages
// which, which + warps, ... into the stage ring, the other page warps the rest. A warp issues one copy at a time, and
// a stage of four 16-token blocks is eight copies (each block's keys and scales), which two warps issue more slowly
// than the cache streams; the ring's depth, a multiple of 6, gives each slot one page warp either way.
template <class P>
HX_INLINE __device__ void page_warp(const P& p, const Smem& sm, const Deal& deal, hx_i32 lane, hx_u32 which,
                                    hx_u32 warps, const FirstChunk& first) {
  const hx_i32 bs = p.block_size, SB = bs == SK ? 1 : SK / 16;  // blocks per stage: 1 or 4
  const hx_u32 page = (hx_u32)hx_block_bytes(bs, D), kbytes = (hx_u32)bs * D;
  if (lane < SB) hx_tma_prefetch_map(p.kv_map);  // the map rides in the parameters: nothing to acquire
  StagePos at;
  hx_u32 turn = 0;  // the page warp of this stage
  each_piece(deal, sm, lane, which == 0, [&](hx_range64 own) {
    walk_work(p, own, lane, first, [&](hx_i32 b, const hx_decode_seq& s, hx_range blk) {
      const hx_i32* row = p.block_tables + (hx_i64)b * p.max_blocks;
      hx_i32 cur = table_entry(p, row, blk.lo + lane, blk.hi);  // lane i: column blk.lo + c0 + i of this batch
      for (hx_i32 c0 = blk.lo; c0 < blk.hi; c0 += 32) {
        const hx_i32 nxt = table_entry(p, row, c0 + 32 + lane, blk.hi);  // in flight under this batch's stages
        const hx_i32 nb = hx_min_i32(32, blk.hi - c0);
        for (hx_i32 k = 0; k < nb; k += SB, turn = turn + 1 == warps ? 0 : turn + 1, at.next(sm.S)) {
          if (turn != which) continue;
          const hx_i32 id = hx_shfl_idx_i32(cur, (k + lane) & 31);
          const bool mine = lane < SB && k + lane < nb;
          const bool ok = mine && id >= 0;
          const hx_u32 good = hx_ballot(ok), used = hx_ballot(mine);
          hx_mbar_wait(stage_empty(sm, at.slot), at.phase ^ 1);
          const hx_u32 full = stage_full(sm, at.slot), keys = sm.base + sm.keys + at.slot * K_STRIDE;
          if (lane == 0) {
            const hx_i64 cs = (hx_i64)(c0 + k) * bs;
            hx_i64 ce = cs + (hx_i64)SK;
            ce = ce < (hx_i64)blk.hi * bs ? ce : (hx_i64)blk.hi * bs;
            ce = ce < p.max_model_len ? ce : p.max_model_len;
            const hx_u32 rec = sm.base + REC_OFF + at.slot * 16;
            sts_i32(rec, (hx_i32)cs);
            sts_i32(rec + 4, (hx_i32)ce);
            sts_i32(rec + 8, (hx_i32)(used & ~good));
            hx_mbar_arrive_expect_tx(full, (hx_u32)__popc(good) * page);  // releases the record
          }
          if (ok) {
            copy_keys(p, keys + lane * kbytes, id, full);
            if (!sm.whole)
              hx_bulk_g2s(sm.base + SC_OFF + at.slot * SC_BYTES + lane * 4 * bs,
                          p.kv_cache + (hx_i64)id * page + kbytes, 4 * bs, full);
          }
        }
        cur = nxt;
      }
    });
  });
}

// The producer warpgroup; a launch that deals its tail (deal_of) passes its claims, else null.
template <class P>
HX_INLINE __device__ void producer_warpgroup(const P& p, const Smem& sm, hx_i32 tid, hx_u32* claims = nullptr,
                                             hx_i32 share = 0, hx_i32 grain = 0) {
  hx_setmaxnreg_dec<LOAD_REGS>();
  const hx_i32 warp = tid >> 5, lane = tid & 31;
  hx_i64 total_work = 0, total_fill = 0;
  FirstChunk first = {{}, p.B <= 32};  // uniform: every warp takes the same branch
  if (first.have) first.c = chunk_totals(p, warp, lane, total_work, warp == 3, total_fill);
  else batch_totals(p, sm, tid, total_work, total_fill);
  const Deal deal = deal_of(total_work, claims, share, grain);
  const hx_u32 warps = page_warps(p);
  if (warp == 0 || warp == 2) page_warp(p, sm, deal, lane, warp >> 1, warps, first);
  else if (warp == 1) query_warp(p, sm, deal, lane, first);
  else {
    prefetch_tail_tables(p, deal, lane, first);
    if (p.clean) fill_columns(p, hx_balanced_part(total_fill, hx_grid_dim_x(), hx_block_x()), lane, 32);
    if (warps == 3) page_warp(p, sm, deal, lane, 2, warps, first);  // after its fill: a third page warp
  }
}

// A TMA decode kernel's body: the layout (setup(p, extra, stages)), then warpgroup 0 runs producer(sm, tid) and math
// warpgroup mw = wg - 1 runs math(sm, its thread in the warpgroup, mw). The page warps finish issuing long before
// their last copies land: a warp must not leave with its tensor copies in flight (seen on the H200 as a launch
// failure of a later kernel), so the CTA leaves together.
template <class P, class Producer, class Math>
HX_INLINE __device__ void hx_decode_tma_cta(const P& p, hx_u32 extra, hx_u32 stages, Producer&& producer, Math&& math) {
  extern __shared__ __align__(1024) hx_u8 smem_raw[];
  const hx_i32 tid = (hx_i32)hx_thread_x();
  const hx_i32 wg = hx_uniform_i32(tid / 128);
  const Smem sm = setup(smem_raw, p, extra, stages);
  if (wg == 0) producer(sm, tid);
  else math(sm, tid - 128 * wg, wg - 1);
  hx_barrier();
}

}  // namespace
