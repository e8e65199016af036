// The shared-memory layout of the sm_90a paged decode kernel paged_mqa_logits_wgmma.hip, on decode_common.h: its
// raw ring (whole pages as the cache holds them), its A ring (swizzled stages), their records, the Q slots and the
// barriers, and the setup that lays them over the dynamic shared memory.
#pragma once
#include "decode_common.h"

namespace {

constexpr hx_u32 STAGE_BYTES = SK * (D + 4);    // one block of 64 or four of 16, keys and scales
constexpr hx_u32 A_BYTES = SK * D;              // a swizzled A stage
constexpr int SA = 4;                           // A stages: two per math warpgroup
constexpr hx_u32 SRMAX = 24;                    // raw stages at most
constexpr hx_i32 END = 1;                       // a raw stage record's flag: no more stages

// Dynamic shared memory from a 1024-aligned base: the fixed part, then two Q slots and the raw ring, whose sizes
// follow next_n (setup()).
constexpr hx_u32 A_OFF = 0;                               // SA x [64 keys][128 B], swizzled
constexpr hx_u32 W_OFF = A_OFF + SA * A_BYTES;            // 2 Q slots' weights: NEXT_N_MAX rows x WROW f32
constexpr hx_u32 W_SLOT = NEXT_N_MAX * WROW * 4;
constexpr hx_u32 ASC_OFF = W_OFF + 2 * W_SLOT;            // SA x 64 f32 kv_scale
constexpr hx_u32 AREC_OFF = ASC_OFF + SA * SK * 4;        // SA x stage record (below)
constexpr hx_u32 RREC_OFF = AREC_OFF + SA * 16;           // SRMAX x stage record
constexpr hx_u32 QREC_OFF = RREC_OFF + SRMAX * 16;        // 2 x segment record (below)
constexpr hx_u32 QREC_BYTES = 64;
constexpr hx_u32 TOT_OFF = QREC_OFF + 2 * QREC_BYTES;     // 4 warps x (work, fill) partial totals
constexpr hx_u32 BAR_OFF = TOT_OFF + 4 * 16;
constexpr hx_u32 BAR_BYTES = 8 * (2 * SRMAX + 2 * SA + 4);
constexpr hx_u32 Q_OFF = (BAR_OFF + BAR_BYTES + 1023u) & ~1023u;  // 2 x [next_n x H rows][128 B], swizzled
static_assert(Q_OFF + 2u * NEXT_N_MAX * H * D + 2u * STAGE_BYTES + 1024u <= HX_SMEM, "two raw stages at next_n = 8");
// A stage record (raw and A rings): the stage's first column, one past its last, the blocks whose ids are out of
// range (bit i: block i of the stage), and END. A segment record (Q slots): stages (0: no more), sequence, live
// rows, then each row's bound (valid columns [0, bound); 0 for dead rows) at word 8.

static_assert(HX_BLOCK == 512, "four warpgroups");

struct Smem {
  hx_u8* ptr;       // the 1024-aligned base, generic
  hx_u32 base;      // and as a shared address
  hx_u32 qslot;     // bytes of a Q slot: next_n x H x 128
  hx_u32 raw;       // offset of raw stage 0
  hx_u32 S;         // raw stages
};

HX_INLINE __device__ hx_u32 raw_full(const Smem& s, hx_u32 slot) { return s.base + BAR_OFF + 8 * slot; }
HX_INLINE __device__ hx_u32 raw_empty(const Smem& s, hx_u32 slot) { return s.base + BAR_OFF + 8 * (SRMAX + slot); }
HX_INLINE __device__ hx_ring<SA> a_ring(const Smem& s) {
  const hx_u32 b = s.base + BAR_OFF + 16 * SRMAX;
  return {b, b + 8 * SA};
}
HX_INLINE __device__ hx_ring<2> q_ring(const Smem& s) {
  const hx_u32 b = s.base + BAR_OFF + 16 * SRMAX + 16 * SA;
  return {b, b + 16};
}

// A place in the raw ring, whose depth is known at run time.
struct RawPos {
  hx_u32 slot = 0, phase = 0;
  __device__ void next(hx_u32 S) {
    const bool wrap = slot + 1 == S;
    slot = wrap ? 0 : slot + 1;
    phase ^= wrap;
  }
};

// The layout over the dynamic shared memory for this launch's next_n; thread 0 initialises the barriers and the
// CTA meets.
HX_INLINE __device__ Smem setup(hx_u8* raw, const DecodeParams& p) {
  const hx_u32 r = hx_smem_u32(raw), base = (r + 1023u) & ~1023u;
  Smem s;
  s.ptr = raw + (base - r);
  s.base = base;
  s.qslot = (hx_u32)(p.next_n * H * D);
  s.raw = Q_OFF + 2 * s.qslot;
  const hx_u32 fit = (HX_SMEM - 1024u - s.raw) / STAGE_BYTES;
  s.S = fit < SRMAX ? fit : SRMAX;
  if (hx_thread_x() == 0) {
    for (hx_u32 i = 0; i < SRMAX; ++i) {
      hx_mbar_init(raw_full(s, i), 1);      // the page warp's one arrival, plus the stage's bulk bytes
      hx_mbar_init(raw_empty(s, i), 128);   // the repack warpgroup
    }
    a_ring(s).init(128, 128);               // the repack warpgroup; the math warpgroup that takes the stage
    q_ring(s).init(32, 256);                // the Q warp's lanes; both math warpgroups
    hx_mbar_init_fence();
  }
  hx_barrier();
  return s;
}

}  // namespace
