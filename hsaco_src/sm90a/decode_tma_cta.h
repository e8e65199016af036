// The shared-memory layout of the sm_90a paged decode kernels (paged_mqa_logits_wgmma_tma.hip and the fused top-k's
// paged_mqa_topk_wgmma_tma.hip), on decode_common.h: their stage ring (keys in the MMA's layout, scales, records),
// the Q slots and the barriers, the setup that lays them over the dynamic shared memory, and the math warpgroups'
// walk over the segments in the Q slots.
#pragma once
#include "decode_common.h"

namespace {

constexpr hx_u32 K_BYTES = SK * D;              // a stage's keys
constexpr hx_u32 K_STRIDE = K_BYTES + 1024;     // a key stage with room for a whole page's scales, 1024-aligned
constexpr hx_u32 SC_BYTES = SK * 4;             // a stage's kv_scale in the scale ring
constexpr int MATH_WG = 3;                      // math warpgroups; stage it goes to warpgroup it % 3
constexpr hx_u32 SRMAX = 18;                    // stages at most (the shared memory left at next_n 1 holds 22)
// Registers per thread after setmaxnreg, within the launch allocation of 128 (65536 / 512), all of it: the math
// warpgroups hold a pass's accumulators (64 at N = 128) and, for one-pass segments, its rows' weights (32 at H = 64)
// across the segment's stages; the producer's warps hold a batch of one chunk (its lengths and prices) across their
// pieces.
constexpr int LOAD_REGS = 80, MATH_REGS = 144;
static_assert(128 * LOAD_REGS + MATH_WG * 128 * MATH_REGS <= (65536 / HX_BLOCK / 8 * 8) * HX_BLOCK, "register budget");

// Dynamic shared memory from a 1024-aligned base: the fixed part, then two Q slots and the key ring, whose sizes
// follow next_n (setup()); both hold 1024-byte swizzle atoms.
constexpr hx_u32 W_OFF = 0;                               // 2 Q slots' weights: NEXT_N_MAX rows x WROW f32
constexpr hx_u32 W_SLOT = NEXT_N_MAX * WROW * 4;
constexpr hx_u32 SC_OFF = W_OFF + 2 * W_SLOT;             // SRMAX x 64 f32 kv_scale
constexpr hx_u32 REC_OFF = SC_OFF + SRMAX * SC_BYTES;     // SRMAX x stage record (below)
constexpr hx_u32 QREC_OFF = REC_OFF + SRMAX * 16;         // 2 x segment record (below)
constexpr hx_u32 QREC_BYTES = 64;
constexpr hx_u32 TOT_OFF = QREC_OFF + 2 * QREC_BYTES;     // 4 warps x (work, fill) partial totals
constexpr hx_u32 CLAIM_R = 4;                             // claimed chunks on their way to the other warps
constexpr hx_u32 CLAIM_OFF = TOT_OFF + 4 * 16;            // CLAIM_R ranges of work (decode_feed.h, each_piece)
constexpr hx_u32 BAR_OFF = CLAIM_OFF + 16 * CLAIM_R;
constexpr hx_u32 BAR_BYTES = 8 * (2 * SRMAX + 4 + 2 * CLAIM_R);
constexpr hx_u32 Q_OFF = (BAR_OFF + BAR_BYTES + 1023u) & ~1023u;  // 2 x [next_n x H rows][128 B], swizzled
static_assert(Q_OFF + 2u * NEXT_N_MAX * H * D + 6u * K_STRIDE + 1024u <= HX_SMEM, "six stages at next_n = 8");
static_assert(SRMAX % 6 == 0, "whole rounds of page warps and math warpgroups");
// A stage record: the stage's first column, one past its last, and the blocks whose ids are out of range (bit i:
// block i of the stage). A segment record (Q slots): stages (0: no more), sequence, live rows, then
// each row's bound (valid columns [0, bound); 0 for dead rows) at word 8.

static_assert(HX_BLOCK == 128 * (1 + MATH_WG), "a producer warpgroup and the math warpgroups");

struct Smem {
  hx_u8* ptr;       // the 1024-aligned base, generic
  hx_u32 base;      // and as a shared address
  hx_u32 qslot;     // bytes of a Q slot: next_n x H x 128
  hx_u32 keys;      // offset of the key ring
  hx_u32 S;         // stages
  hx_u32 tail;      // offset of what the ring leaves (setup's extra bytes)
  bool whole;       // one tensor copy brings a block's keys and scales (block-flat, pages of whole 128-byte rows)
};

HX_INLINE __device__ hx_u32 stage_full(const Smem& s, hx_u32 slot) { return s.base + BAR_OFF + 8 * slot; }
HX_INLINE __device__ hx_u32 stage_empty(const Smem& s, hx_u32 slot) { return s.base + BAR_OFF + 8 * (SRMAX + slot); }
HX_INLINE __device__ hx_ring<2> q_ring(const Smem& s) {
  const hx_u32 b = s.base + BAR_OFF + 16 * SRMAX;
  return {b, b + 16};
}
HX_INLINE __device__ hx_ring<CLAIM_R> claim_ring(const Smem& s) {
  const hx_u32 b = s.base + BAR_OFF + 8 * (2 * SRMAX + 4);
  return {b, b + 8 * CLAIM_R};
}
// A math warpgroup's segments in turn, each between the wait on its Q slot and the slot's release: body(segment)
// with the slot's record as uniform values, its Q tile and the weight group of lane l's column pair.
struct Segment {
  hx_u32 rec, qtile, wt;  // shared addresses
  hx_i32 ns, b, live;     // stages, sequence, live rows
};
template <class Body>
HX_INLINE __device__ void each_segment(const Smem& sm, hx_i32 l, Body&& body) {
  const hx_ring<2> q = q_ring(sm);
  for (hx_u32 qit = 0;; ++qit) {
    q.wait_full(qit);
    const hx_u32 qb = qit & 1;
    Segment g;
    g.rec = sm.base + QREC_OFF + qb * QREC_BYTES;
    g.ns = hx_uniform_i32(lds_i32(g.rec));
    if (g.ns == 0) break;
    g.b = hx_uniform_i32(lds_i32(g.rec + 4));
    g.live = hx_uniform_i32(lds_i32(g.rec + 8));
    g.qtile = sm.base + Q_OFF + qb * sm.qslot;
    g.wt = sm.base + W_OFF + qb * W_SLOT + 4 * (l & 3) * WGROUP;
    body(g);
    q.arrive_empty(qit);
  }
}
// The producer's page warps: two, or three for 16-token blocks (a stage of four blocks is eight copies).
template <class P>
HX_INLINE __device__ hx_u32 page_warps(const P& p) { return p.block_size < SK ? 3 : 2; }

// A place in the stage ring, whose depth is known at run time.
struct StagePos {
  hx_u32 slot = 0, phase = 0;
  __device__ void next(hx_u32 S) {
    const bool wrap = slot + 1 == S;
    slot = wrap ? 0 : slot + 1;
    phase ^= wrap;
  }
};

// The layout over the dynamic shared memory for this launch's next_n, the ring (at most `stages` deep, when not 0)
// leaving at least `extra` bytes after it (at offset `tail`); thread 0 initialises the barriers and the CTA meets.
template <class P>
HX_INLINE __device__ Smem setup(hx_u8* raw, const P& p, hx_u32 extra = 0, hx_u32 stages = 0) {
  const hx_u32 r = hx_smem_u32(raw), base = (r + 1023u) & ~1023u;
  Smem s;
  s.ptr = raw + (base - r);
  s.base = base;
  s.qslot = (hx_u32)(p.next_n * H * D);
  s.keys = Q_OFF + 2 * s.qslot;
  const hx_u32 fit = (HX_SMEM - 1024u - s.keys - extra) / K_STRIDE;
  // A multiple of 6: slot i is always filled by page warp i % 2 and read by math warpgroup i % 3, so each slot's
  // one consumer meets its rounds in order and never waits on a round while the one before is still landing (an
  // mbarrier's parity names a phase only while it is at most one phase ahead).
  const hx_u32 most = stages && stages < SRMAX ? stages : SRMAX;
  s.S = (fit < most ? fit : most) / 6 * 6;
  s.tail = s.keys + s.S * K_STRIDE;
  s.whole = !p.preshuffle && hx_block_bytes(p.block_size, D) % 128 == 0;
  if (hx_thread_x() == 0) {
    for (hx_u32 i = 0; i < SRMAX; ++i) {
      hx_mbar_init(stage_full(s, i), 1);     // the page warp's one arrival, plus the stage's copied bytes
      hx_mbar_init(stage_empty(s, i), 128);  // the math warpgroup that takes the stage
    }
    q_ring(s).init(32, 128 * MATH_WG);       // the Q warp's lanes; every math warpgroup
    claim_ring(s).init(1, page_warps(p));    // the claiming page warp; the other page warps and the Q warp
    hx_mbar_init_fence();
  }
  hx_barrier();
  return s;
}

// A math thread's place in a stage (mt: its thread in the warpgroup): after the MMA pass's quad reduce it holds key
// `key` of the stage for rows of parity b2 (b1: which key of its pair).
struct MathLane {
  hx_i32 l, b1, b2, key, kblock;
  hx_u32 sc_whole;  // the key's scale in a whole page: byte 4 key past the keys, in 128-byte rows 64 and 65 under
                    // the swizzle
};
template <class P>
HX_INLINE __device__ MathLane math_lane(const P& p, hx_i32 mt) {
  MathLane ml;
  const hx_i32 w = mt >> 5;
  ml.l = mt & 31;
  ml.b1 = ml.l & 1;
  ml.b2 = (ml.l >> 1) & 1;
  ml.key = 16 * w + (ml.l >> 2) + 8 * ml.b1;
  ml.kblock = ml.key / p.block_size;
  ml.sc_whole = K_BYTES + (ml.key / 32) * 128 + ((((ml.key % 32) / 4) ^ (ml.key / 32)) << 4) + (ml.key & 3) * 4;
  return ml;
}

// The pass of stage `slot` for this lane, once the stage has landed: its key's column, whether it exists and its
// block was in range, its scale, and the A operand. The caller sets the rows' side (bdesc, bounds, out, stride,
// clean).
template <class P>
HX_INLINE __device__ Pass stage_pass(const P& p, const Smem& sm, const MathLane& ml, hx_u32 slot) {
  const hx_u32 stage = sm.base + sm.keys + slot * K_STRIDE;
  const hx_u32 srec = sm.base + REC_OFF + slot * 16;
  Pass c;
  const hx_i32 cs = hx_uniform_i32(lds_i32(srec));
  const hx_i32 ce = hx_uniform_i32(lds_i32(srec + 4));
  const hx_i32 badmask = hx_uniform_i32(lds_i32(srec + 8));
  c.n = cs + ml.key;
  c.in = c.n < ce;
  c.bad = (badmask >> ml.kblock) & 1;
  c.scale = 0.5f * lds_f32(sm.whole ? stage + ml.sc_whole : sm.base + SC_OFF + slot * SC_BYTES + 4 * ml.key);
  c.astep = p.preshuffle ? 16u : 2u;
  c.adesc = p.preshuffle ? hx_wgmma_desc_plain(stage, 128, 1024) : hx_wgmma_desc_sw128(stage);
  return c;
}

}  // namespace
