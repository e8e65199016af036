// sm_90a paged decode logits on fp8 wgmma: H in {32, 64} (-DHX_HEADS), D = 128, block_size 16 or 64, both cache
// layouts, next_n 1..8 and ragged next_n_lens, or a length per row (context_lens [B, next_n]); fp8 tensor-core
// accumulation class.
//
// The MMA (swap-AB, as in prefill): a stage of 64 keys is the M side (A, 64 x 128 bytes, K-major), a pass's live
// query rows x H heads the N side (B, N = rows x H <= 128, K-major), m64nNk32 e4m3 x e4m3 -> f32 in four k32 steps
// over D = 128. Both fp8 operands must be K-major, which D-contiguous keys and query heads already are; what the
// cache does not give is the 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)) or the 16-byte-row core
// matrices of the unswizzled layout: block-flat rows are 128 bytes apart, and a preshuffled block keeps 16-token
// groups 2048 bytes apart, so no one descriptor stride reaches the eight 8-row groups of an m64 operand. Hence a
// repack: whole blocks land in shared memory as they lie in the cache (one bulk copy each, keys and scales
// together), and a warpgroup rewrites each stage into the 128-byte swizzle the prefill kernels' operands use.
// Block-flat and preshuffled stages become the same bytes in the same order before any MMA, so both layouts give
// bitwise identical logits. Each layout has its own thread-to-chunk map, both free of bank conflicts: 8 lanes
// read 128 contiguous bytes (one key's 8 chunks, or one chunk of 8 consecutive keys) and write 8 distinct
// 16-byte bank groups of the swizzle.
//
// 512 threads, four warpgroups, each its own role, 128 registers per thread (ptxas holds all code to the launch
// bound's count, setmaxnreg or not; that caps a pass at N = 128, 64 accumulators):
//   0                 warp 0: block-table entries (32 per load, the next 32 loaded under the current ones' stages)
//                     and one cp.async.bulk per block into the raw ring, 64 keys a stage (one block of 64 or four
//                     of 16, 8448 bytes either way), each stage's record (columns, out-of-range blocks) beside it;
//                     warp 1: each sequence's live query rows (cp.async into the 128-byte swizzle), their weights
//                     and row bounds into one of two Q slots; warps 2-3: the -inf fill of columns no key reaches.
//   1                 repack: raw stage -> swizzled A stage (4 x 16 bytes per thread) with its 64 scales and its
//                     record; the raw stage is released as soon as it is read.
//   2, 3              math: stages alternate between them. Per stage, per pass of at most 128 / H live rows: the
//                     MMA (N = rows x H, one instantiation per row count: dead rows cost nothing), then
//                     relu x weight summed over each thread's heads, the quad reduce, kv_scale and predicated
//                     stores with the -inf of positions outside a row's bound fused; dead rows only get their -inf.
//                     The math warpgroups write no shared memory (no proxy fence: one here would wait for their
//                     own logits stores).
//
// Bytes in flight: one SM must stream about 4.2 TB/s / 132 = 32 GB/s, and a loaded HBM read takes about 1 to
// 1.5 us, so 32-48 KB must be on the way per SM (Little's law). The raw ring takes the shared memory the Q slots
// leave (2 x next_n x H x 128 bytes): 20 stages (169 KB) at next_n = 1 and H = 64, 18 at next_n = 2, 7 (59 KB) at
// next_n = 8 where the MMA, not memory, sets the pace.
//
// Work: a grid of units planned on the host from shapes alone; each unit owns one contiguous piece of the batch's
// blocks, found on the device from the lengths it reads (decode_work.h), each block priced by what it costs here:
// its bytes while the MMA keeps up, its MMA time at more live rows (block_price). A unit's blocks of one sequence
// are a segment: the Q warp loads the segment's queries once, the page warp streams its blocks, and every live
// row of the sequence comes out of that one read of its keys. The fill warps own one piece of the batch's fill
// columns the same way. Untrusted device values as in the generic kernel: a block id outside [0, num_blocks) (or
// a table column past max_blocks) is never read through, its keys come out -inf and error bit 0 is set; a
// malformed sequence is all -inf (fill) with bit 2, and so is a row of negative length alone (its bound is 0; every
// row is live with per-row lengths, each masked to its own bound, the table read up to the longest row). Offsets
// into the cache, the queries and the output are 64-bit.
//
// What both decode kernels share (constants, walk, the math pass): decode_common.h; the layout: decode_cta.h;
// warpgroups 0 and 1: decode_loader.h and decode_feed.h.
#include "decode_loader.h"

namespace {

// ------------------------------------------------------------------ math warpgroups
// Math warpgroup m (0, 1): stages it with it % 2 == m, of every segment in order.
HX_INLINE __device__ void math_warpgroup(const DecodeParams& p, const Smem& sm, hx_i32 mt, hx_i32 m) {
  const hx_i32 w = mt >> 5, l = mt & 31;
  const hx_i32 b1 = l & 1, b2 = (l >> 1) & 1;
  const hx_i32 key = 16 * w + (l >> 2) + 8 * b1;  // this lane's key of the stage after the quad reduce
  const hx_ring<2> q = q_ring(sm);
  const hx_ring<SA> a = a_ring(sm);
  const float ninf = hx_bits_to_f32(0xFF800000u);
  hx_ring_pos<SA> at;
  hx_u32 it = 0;
  for (hx_u32 qit = 0;; ++qit) {
    q.wait_full(qit);
    const hx_u32 qb = qit & 1, rec = sm.base + QREC_OFF + qb * QREC_BYTES;
    const hx_i32 ns = hx_uniform_i32(lds_i32(rec));
    if (ns == 0) break;
    const hx_i32 b = hx_uniform_i32(lds_i32(rec + 4));
    const hx_i32 live = hx_uniform_i32(lds_i32(rec + 8));
    const hx_u32 qtile = sm.base + Q_OFF + qb * sm.qslot;
    const hx_u32 wt = sm.base + W_OFF + qb * W_SLOT + 4 * (l & 3) * WGROUP;
    float* const seq_out = p.out + (hx_i64)b * p.next_n * p.out_stride;
    for (hx_i32 s = 0; s < ns; ++s, ++it, at.next()) {
      if ((hx_i32)(it & 1) != m) continue;
      a.wait_full(at);
      const hx_u32 arec = sm.base + AREC_OFF + at.slot * 16;
      Pass c;
      const hx_i32 cs = hx_uniform_i32(lds_i32(arec));
      const hx_i32 ce = hx_uniform_i32(lds_i32(arec + 4));
      const hx_i32 badmask = hx_uniform_i32(lds_i32(arec + 8));
      c.n = cs + key;
      c.in = c.n < ce;
      c.bad = (badmask >> (key / p.block_size)) & 1;
      c.clean = p.clean != 0;
      c.scale = 0.5f * lds_f32(sm.base + ASC_OFF + at.slot * (SK * 4) + 4 * key);
      c.stride = p.out_stride;
      c.astep = 2;
      c.adesc = hx_wgmma_desc_sw128(sm.base + A_OFF + at.slot * A_BYTES);
      for (hx_i32 pb = 0; pb < live; pb += RMAX) {
        const hx_i32 R = hx_min_i32(RMAX, live - pb);
        c.bdesc = hx_wgmma_desc_sw128(qtile + pb * (H * D));
        c.wt = wt + 4 * pb * WROW;
        c.bounds = rec + 32 + 4 * pb;
        c.out = seq_out + pb * p.out_stride + c.n;
        hx_static_for<RMAX>([&](auto i) {
          if (R == i + 1) pass<i + 1>(c, b1, b2);
        });
      }
      a.arrive_empty(at);
      // Dead rows: nothing computed, -inf where a row's bound (0) leaves the column, when clean.
      for (hx_i32 j = live + b2; j < p.next_n; j += 2) {
        const bool valid = c.n < lds_i32(rec + 32 + 4 * j);
        hx_store_f32_if(c.in && (valid || c.clean), seq_out + j * p.out_stride + c.n, ninf);
      }
    }
    q.arrive_empty(qit);
  }
}

}  // namespace

HX_KERNEL __launch_bounds__(HX_BLOCK, 1) void hx_paged_mqa_logits_wgmma(const HX_GRID_CONSTANT DecodeParams p) {
  extern __shared__ __align__(1024) hx_u8 smem_raw[];
  const hx_i32 tid = (hx_i32)hx_thread_x();
  const hx_i32 wg = hx_uniform_i32(tid / 128);
  const Smem sm = setup(smem_raw, p);
  if (wg == 0) producer_warpgroup(p, sm, tid);
  else if (wg == 1) repack_warpgroup(p, sm, tid - 128);
  else math_warpgroup(p, sm, tid - 128 * wg, wg - 2);
}
