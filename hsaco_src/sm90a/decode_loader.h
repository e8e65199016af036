// The two warpgroups of the sm_90a paged decode kernel (paged_mqa_logits_wgmma.hip) that feed its math
// warpgroups, on decode_cta.h and decode_feed.h. Warpgroup 0: the block-table walk and one bulk copy per block into
// the raw ring (warp 0), each segment's query rows and weights into a Q slot (warp 1), the -inf fill (warps 2 and
// 3). Warpgroup 1: the repack of each raw stage into a swizzled A stage, with one thread-to-chunk map per cache
// layout.
#pragma once
#include "decode_cta.h"
#include "decode_feed.h"

namespace {

// ------------------------------------------------------------------ warpgroup 0
// Warp 0: every segment's blocks into the raw ring, a stage at a time, then the END stage.
HX_INLINE __device__ void page_warp(const DecodeParams& p, const Smem& sm, hx_range64 own, hx_i32 lane) {
  const hx_i32 bs = p.block_size, SB = SK / bs;  // blocks per stage: 1 or 4
  const hx_u32 page = (hx_u32)hx_block_bytes(bs, D);
  RawPos at;
  walk(p, own, lane, work_price, [&](hx_i32 b, const hx_decode_seq& s, hx_i64 start) {
    const hx_range blk = hx_owned_blocks_priced(own, start, s.blocks, block_price(s));
    const hx_i32* row = p.block_tables + (hx_i64)b * p.max_blocks;
    hx_i32 cur = table_entry(p, row, blk.lo + lane, blk.hi);  // lane i: column blk.lo + c0 + i of this batch
    for (hx_i32 c0 = blk.lo; c0 < blk.hi; c0 += 32) {
      const hx_i32 nxt = table_entry(p, row, c0 + 32 + lane, blk.hi);  // in flight under this batch's stages
      const hx_i32 nb = hx_min_i32(32, blk.hi - c0);
      for (hx_i32 k = 0; k < nb; k += SB) {
        const hx_i32 id = hx_shfl_idx_i32(cur, (k + lane) & 31);
        const bool mine = lane < SB && k + lane < nb;
        const bool ok = mine && id >= 0;
        const hx_u32 good = hx_ballot(ok), used = hx_ballot(mine);
        hx_mbar_wait(raw_empty(sm, at.slot), at.phase ^ 1);
        const hx_u32 full = raw_full(sm, at.slot), dst = sm.base + sm.raw + at.slot * STAGE_BYTES;
        if (lane == 0) {
          const hx_i64 cs = (hx_i64)(c0 + k) * bs;
          hx_i64 ce = cs + (hx_i64)SK;
          ce = ce < (hx_i64)blk.hi * bs ? ce : (hx_i64)blk.hi * bs;
          ce = ce < p.max_model_len ? ce : p.max_model_len;
          const hx_u32 rec = sm.base + RREC_OFF + at.slot * 16;
          sts_i32(rec, (hx_i32)cs);
          sts_i32(rec + 4, (hx_i32)ce);
          sts_i32(rec + 8, (hx_i32)(used & ~good));
          sts_i32(rec + 12, 0);
          hx_mbar_arrive_expect_tx(full, (hx_u32)__popc(good) * page);  // releases the record
        }
        if (ok) hx_bulk_g2s(dst + lane * page, p.kv_cache + (hx_i64)id * page, page, full);
        at.next(sm.S);
      }
      cur = nxt;
    }
  });
  hx_mbar_wait(raw_empty(sm, at.slot), at.phase ^ 1);
  if (lane == 0) {
    sts_i32(sm.base + RREC_OFF + at.slot * 16 + 12, END);
    hx_mbar_arrive(raw_full(sm, at.slot));
  }
}

HX_INLINE __device__ void producer_warpgroup(const DecodeParams& p, const Smem& sm, hx_i32 tid) {
  const hx_i32 warp = tid >> 5, lane = tid & 31;
  hx_i64 total_work, total_fill;
  batch_totals(p, sm, tid, total_work, total_fill);
  const hx_i64 units = hx_grid_dim_x(), u = hx_block_x();
  if (warp == 0) page_warp(p, sm, hx_balanced_part(total_work, units, u), lane);
  else if (warp == 1) query_warp(p, sm, hx_balanced_part(total_work, units, u), lane);
  else if (p.clean) fill_columns(p, hx_balanced_part(total_fill, units, u), tid - 64, 64);
}

// ------------------------------------------------------------------ warpgroup 1
// Raw stages -> swizzled A stages, in order, until the END stage. Thread T copies chunks i = 0..3: block-flat,
// chunk c = l % 8 of key 4 (4 v + i) + l / 8 (8 lanes: one key's 128 contiguous bytes); preshuffled, chunk
// (4 (4 v + i) + l / 8) % 8 of key 8 ((4 (4 v + i) + l / 8) / 8) + l % 8 (8 lanes: one chunk of 8 consecutive
// keys, 128 contiguous bytes). Either way the 8 lanes write 8 distinct chunk positions of the swizzle.
HX_INLINE __device__ void repack_warpgroup(const DecodeParams& p, const Smem& sm, hx_i32 T) {
  const hx_i32 v = T >> 5, l = T & 31, bs = p.block_size;
  const hx_i64 page = hx_block_bytes(bs, D);
  hx_u32 src[4], dst[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const hx_i32 k = 4 * v + i, item = 4 * k + (l >> 3);
    const hx_i32 r = p.preshuffle ? 8 * (item >> 3) + (l & 7) : item;
    const hx_i32 c = p.preshuffle ? item & 7 : l & 7;
    src[i] = (hx_u32)((r / bs) * page + hx_key_offset(p.preshuffle != 0, r % bs, 16 * c, D));
    dst[i] = hx_sw128_offset((hx_u32)r, (hx_u32)c);
  }
  const hx_u32 ssrc = T < SK ? (hx_u32)((T / bs) * page + hx_scale_offset(bs, D, T % bs)) : 0u;
  const hx_ring<SA> a = a_ring(sm);
  RawPos at;
  for (hx_u32 it = 0;; ++it) {
    hx_mbar_wait(raw_full(sm, at.slot), at.phase);
    const hx_u32 rrec = sm.base + RREC_OFF + at.slot * 16;
    if (hx_uniform_i32(lds_i32(rrec + 12)) == END) break;
    const hx_u32 stage = sm.base + sm.raw + at.slot * STAGE_BYTES;
    hx_u32x4 x[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = lds_128(stage + src[i]);
    const float sc = T < SK ? lds_f32(stage + ssrc) : 0.f;
    const hx_i32 rv = T < 4 ? lds_i32(rrec + 4 * T) : 0;
    const hx_u32 slot = it % SA;
    a.wait_empty(it);
    const hx_u32 atile = sm.base + A_OFF + slot * A_BYTES;
#pragma unroll
    for (int i = 0; i < 4; ++i) sts_128(atile + dst[i], x[i]);
    if (T < SK) sts_f32(sm.base + ASC_OFF + slot * (SK * 4) + 4 * T, sc);
    if (T < 4) sts_i32(sm.base + AREC_OFF + slot * 16 + 4 * T, rv);
    hx_mbar_arrive(raw_empty(sm, at.slot));  // after the stores that consumed what was read
    hx_fence_proxy_async();                  // the A stage is read by wgmma (async proxy)
    a.arrive_full(it);
    at.next(sm.S);
  }
}

}  // namespace
