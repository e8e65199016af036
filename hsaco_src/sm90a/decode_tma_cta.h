// What every warpgroup of the sm_90a paged decode kernel (paged_mqa_logits_wgmma_tma.hip) shares, on the hopper.h
// primitives: its constants, the shared-memory layout with its rings and records, the shared loads and stores,
// each sequence's price, and the walk that finds the sequences whose piece of the batch's prefix of prices meets
// a unit's own range. H = HX_HEADS, D = 128.
#pragma once
#include "decode_work.h"
#include "paged_cache.h"
#include "hx_params.h"
#include "hopper.h"

#if !defined(HX_HEADS) || (HX_HEADS != 32 && HX_HEADS != 64)
#error "paged_mqa_logits_wgmma_tma.hip: build with -DHX_HEADS=32 or -DHX_HEADS=64"
#endif

namespace {

constexpr int H = HX_HEADS, D = 128;
constexpr int NEXT_N_MAX = 8;
constexpr int RMAX = 128 / H;        // query rows per MMA pass: N = RMAX x H = 128 (64 accumulators a thread)
constexpr int JQ = H / 8;            // 8-column accumulator groups per query row
// Weights in shared memory, per row: four groups (one per t = l % 4, the reading lane's quad position) of that
// lane's 2 JQ weights, contiguous for 16-byte loads, padded to 20 floats at H = 64 so the four groups fall in
// distinct banks.
constexpr int WGROUP = 2 * JQ + (JQ == 8 ? 4 : 0);
constexpr int WROW = 4 * WGROUP;
constexpr int SK = 64;                          // keys per stage: the MMA's M
constexpr hx_u32 K_BYTES = SK * D;              // a stage's keys
constexpr hx_u32 K_STRIDE = K_BYTES + 1024;     // a key stage with room for a whole page's scales, 1024-aligned
constexpr hx_u32 SC_BYTES = SK * 4;             // a stage's kv_scale in the scale ring
constexpr int MATH_WG = 3;                      // math warpgroups; stage it goes to warpgroup it % 3
constexpr hx_u32 SRMAX = 24;                    // stages at most
constexpr hx_i32 MEMW = 8;                      // block_price of a block while memory sets the pace
constexpr hx_i32 ERR_BLOCK_ID = 1, ERR_LENGTH = 4;

// Dynamic shared memory from a 1024-aligned base: the fixed part, then two Q slots and the key ring, whose sizes
// follow next_n (setup()); both hold 1024-byte swizzle atoms.
constexpr hx_u32 W_OFF = 0;                               // 2 Q slots' weights: NEXT_N_MAX rows x WROW f32
constexpr hx_u32 W_SLOT = NEXT_N_MAX * WROW * 4;
constexpr hx_u32 SC_OFF = W_OFF + 2 * W_SLOT;             // SRMAX x 64 f32 kv_scale
constexpr hx_u32 REC_OFF = SC_OFF + SRMAX * SC_BYTES;     // SRMAX x stage record (below)
constexpr hx_u32 QREC_OFF = REC_OFF + SRMAX * 16;         // 2 x segment record (below)
constexpr hx_u32 QREC_BYTES = 64;
constexpr hx_u32 TOT_OFF = QREC_OFF + 2 * QREC_BYTES;     // 4 warps x (work, fill) partial totals
constexpr hx_u32 BAR_OFF = TOT_OFF + 4 * 16;
constexpr hx_u32 BAR_BYTES = 8 * (2 * SRMAX + 4);
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
  bool whole;       // one tensor copy brings a block's keys and scales (block-flat, pages of whole 128-byte rows)
};

HX_INLINE __device__ hx_u32 stage_full(const Smem& s, hx_u32 slot) { return s.base + BAR_OFF + 8 * slot; }
HX_INLINE __device__ hx_u32 stage_empty(const Smem& s, hx_u32 slot) { return s.base + BAR_OFF + 8 * (SRMAX + slot); }
HX_INLINE __device__ hx_ring<2> q_ring(const Smem& s) {
  const hx_u32 b = s.base + BAR_OFF + 16 * SRMAX;
  return {b, b + 16};
}

// A place in the stage ring, whose depth is known at run time.
struct StagePos {
  hx_u32 slot = 0, phase = 0;
  __device__ void next(hx_u32 S) {
    const bool wrap = slot + 1 == S;
    slot = wrap ? 0 : slot + 1;
    phase ^= wrap;
  }
};

HX_INLINE __device__ hx_i32 lds_i32(hx_u32 a) {
  hx_i32 v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
  return v;
}
HX_INLINE __device__ float lds_f32(hx_u32 a) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
  return v;
}
HX_INLINE __device__ hx_u32x4 lds_128(hx_u32 a) {
  hx_u32x4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a)
               : "memory");
  return v;
}
HX_INLINE __device__ hx_f32x4 lds_f32x4(hx_u32 a) {
  hx_f32x4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a)
               : "memory");
  return v;
}
HX_INLINE __device__ void sts_i32(hx_u32 a, hx_i32 v) { asm volatile("st.shared.b32 [%0], %1;" :: "r"(a), "r"(v) : "memory"); }
HX_INLINE __device__ void sts_f32(hx_u32 a, float v) { asm volatile("st.shared.f32 [%0], %1;" :: "r"(a), "f"(v) : "memory"); }
HX_INLINE __device__ void sts_128(hx_u32 a, hx_u32x4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
HX_INLINE __device__ hx_i64 shfl_xor_i64(hx_i64 v, int m) {
  const hx_u64 u = (hx_u64)v;
  const hx_u32 lo = (hx_u32)hx_shfl_xor_i32((hx_i32)(hx_u32)u, m), hi = (hx_u32)hx_shfl_xor_i32((hx_i32)(hx_u32)(u >> 32), m);
  return (hx_i64)(((hx_u64)hi << 32) | lo);
}

// The layout over the dynamic shared memory for this launch's next_n; thread 0 initialises the barriers and the
// CTA meets.
HX_INLINE __device__ Smem setup(hx_u8* raw, const DecodeTmaParams& p) {
  const hx_u32 r = hx_smem_u32(raw), base = (r + 1023u) & ~1023u;
  Smem s;
  s.ptr = raw + (base - r);
  s.base = base;
  s.qslot = (hx_u32)(p.next_n * H * D);
  s.keys = Q_OFF + 2 * s.qslot;
  const hx_u32 fit = (HX_SMEM - 1024u - s.keys) / K_STRIDE;
  // A multiple of 6: slot i is always filled by page warp i % 2 and read by math warpgroup i % 3, so each slot's
  // one consumer meets its rounds in order and never waits on a round while the one before is still landing (an
  // mbarrier's parity names a phase only while it is at most one phase ahead).
  s.S = (fit < SRMAX ? fit : SRMAX) / 6 * 6;
  s.whole = !p.preshuffle && hx_block_bytes(p.block_size, D) % 128 == 0;
  if (hx_thread_x() == 0) {
    for (hx_u32 i = 0; i < SRMAX; ++i) {
      hx_mbar_init(stage_full(s, i), 1);     // the page warp's one arrival, plus the stage's copied bytes
      hx_mbar_init(stage_empty(s, i), 128);  // the math warpgroup that takes the stage
    }
    q_ring(s).init(32, 128 * MATH_WG);       // the Q warp's lanes; every math warpgroup
    hx_mbar_init_fence();
  }
  hx_barrier();
  return s;
}

HX_INLINE __device__ hx_decode_seq sequence(const DecodeTmaParams& p, hx_i32 ctx, hx_i32 live) {
  return hx_decode_sequence(ctx, live, p.next_n, p.max_model_len, p.block_size);
}
HX_INLINE __device__ hx_decode_seq sequence_at(const DecodeTmaParams& p, hx_i32 b) {
  return sequence(p, p.context_lens[b], p.next_n_lens ? p.next_n_lens[b] : p.next_n);
}
// What one block of the sequence costs here: its bytes (MEMW) while the MMA keeps up with them, its MMA time once
// more live rows make that the longer (H = 64 past 4 rows), in the same unit (the MMA time of one row at H = 32).
HX_INLINE __device__ hx_i64 block_price(const hx_decode_seq& s) {
  return s.live > 0 ? (hx_i64)hx_max_i32(MEMW, s.live * (H / 32)) : 0;
}
HX_INLINE __device__ hx_i64 work_price(const hx_decode_seq& s) { return (hx_i64)s.blocks * block_price(s); }

// Calls f(b, seq, start) for each sequence b, in order, whose piece [start, start + price(seq)) of the batch's
// prefix of prices meets [own.lo, own.hi): one warp, every lane making the same calls.
template <class Price, class F>
HX_INLINE __device__ void walk(const DecodeTmaParams& p, hx_range64 own, hx_i32 lane, Price&& price, F&& f) {
  hx_i64 base = 0;
  for (hx_i32 b0 = 0; b0 < p.B && base < own.hi; b0 += 32) {
    const hx_i32 b = b0 + lane;
    hx_i32 ctx = 0, live = 0;
    if (b < p.B) {
      ctx = p.context_lens[b];
      live = p.next_n_lens ? p.next_n_lens[b] : p.next_n;
    }
    const hx_i64 w = b < p.B ? price(sequence(p, ctx, live)) : 0;
    hx_i64 incl = w;
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) {
      const hx_i64 y = hx_shfl_up_i64(incl, x);
      if (lane >= x) incl += y;
    }
    const hx_i64 start = base + incl - w;
    hx_u32 hits = hx_ballot(w > 0 && start < own.hi && start + w > own.lo);
    while (hits) {
      const hx_i32 k = __ffs(hits) - 1;
      hits &= hits - 1;
      f(b0 + k, sequence(p, hx_shfl_idx_i32(ctx, k), hx_shfl_idx_i32(live, k)), hx_shfl_idx_i64(start, k));
    }
    base += hx_shfl_idx_i64(incl, 31);
  }
}

}  // namespace
