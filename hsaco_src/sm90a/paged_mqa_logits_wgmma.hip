// sm_90a paged decode logits on fp8 wgmma: H in {32, 64} (-DHX_HEADS), D = 128, block_size 16 or 64, both cache
// layouts, next_n 1..8 and ragged next_n_lens; fp8 tensor-core accumulation class.
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
// malformed sequence is all -inf (fill) with bit 2. Offsets into the cache, the queries and the output are 64-bit.
#include "decode_work.h"
#include "paged_cache.h"
#include "hx_params.h"
#include "hopper.h"

#if !defined(HX_HEADS) || (HX_HEADS != 32 && HX_HEADS != 64)
#error "paged_mqa_logits_wgmma.hip: build with -DHX_HEADS=32 or -DHX_HEADS=64"
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
constexpr hx_u32 STAGE_BYTES = SK * (D + 4);    // one block of 64 or four of 16, keys and scales
constexpr hx_u32 A_BYTES = SK * D;              // a swizzled A stage
constexpr int SA = 4;                           // A stages: two per math warpgroup
constexpr hx_u32 SRMAX = 24;                    // raw stages at most
constexpr hx_i32 MEMW = 8;                      // block_price of a block while memory sets the pace
constexpr hx_i32 ERR_BLOCK_ID = 1, ERR_LENGTH = 4;
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

HX_INLINE __device__ hx_decode_seq sequence(const DecodeParams& p, hx_i32 ctx, hx_i32 live) {
  return hx_decode_sequence(ctx, live, p.next_n, p.max_model_len, p.block_size);
}
HX_INLINE __device__ hx_decode_seq sequence_at(const DecodeParams& p, hx_i32 b) {
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
HX_INLINE __device__ void walk(const DecodeParams& p, hx_range64 own, hx_i32 lane, Price&& price, F&& f) {
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

// ------------------------------------------------------------------ warpgroup 0
// Block-table column col of a row (entries [0, hi) exist for this segment): the block id, or -1 for a column
// past hi (not read) or an entry naming no block (never read through: error bit 0).
HX_INLINE __device__ hx_i32 table_entry(const DecodeParams& p, const hx_i32* row, hx_i32 col, hx_i32 hi) {
  if (col >= hi) return -1;
  const hx_i32 id = col < p.max_blocks ? row[col] : -1;
  const bool ok = col < p.max_blocks && id >= 0 && (hx_i64)id < p.num_blocks;
  if (!ok && p.errors) hx_atomic_or(p.errors, ERR_BLOCK_ID);
  return ok ? id : -1;
}

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

// Where weight (row r, head h = 8 jj + 2 t + c) sits in a Q slot's weights.
HX_INLINE __device__ hx_i32 weight_slot(hx_i32 idx) {
  const hx_i32 r = idx / H, hh = idx % H;
  return r * WROW + ((hh >> 1) & 3) * WGROUP + 2 * (hh >> 3) + (hh & 1);
}

// Warp 1: each segment's record, live query rows and weights into the next Q slot, then the end record. The lane
// waits for its own copies and fences them into the async proxy the MMA reads through before it arrives.
HX_INLINE __device__ void query_warp(const DecodeParams& p, const Smem& sm, hx_range64 own, hx_i32 lane) {
  const hx_ring<2> q = q_ring(sm);
  const hx_i32 SB = SK / p.block_size;
  hx_u32 qit = 0;
  walk(p, own, lane, work_price, [&](hx_i32 b, const hx_decode_seq& s, hx_i64 start) {
    const hx_range blk = hx_owned_blocks_priced(own, start, s.blocks, block_price(s));
    if (blk.hi <= blk.lo) return;
    const hx_u32 slot = qit & 1, rec = sm.base + QREC_OFF + slot * QREC_BYTES;
    q.wait_empty(qit);
    if (lane == 0) {
      sts_i32(rec, hx_ceil_div(blk.hi - blk.lo, SB));
      sts_i32(rec + 4, b);
      sts_i32(rec + 8, s.live);
    }
    if (lane < p.next_n) sts_i32(rec + 32 + 4 * lane, hx_decode_row_bound(s, lane, p.max_model_len));
    const hx_u32 qdst = sm.base + Q_OFF + slot * sm.qslot, wdst = sm.base + W_OFF + slot * W_SLOT;
    const hx_u8* qsrc = p.q + (hx_i64)b * p.next_n * H * D;
    const float* wsrc = p.weights + (hx_i64)b * p.next_n * H;
    for (hx_i32 j = 0; j < s.live; ++j) hx_copy_tile_sw128<H>(qdst + j * (H * D), qsrc + (hx_i64)j * H * D, (hx_u32)lane);
    for (hx_i32 idx = lane; idx < s.live * H; idx += 32) hx_cp_async4(wdst + 4 * weight_slot(idx), wsrc + idx, 4);
    hx_cp_async_commit();
    hx_cp_async_wait<0>();
    hx_fence_proxy_async();
    q.arrive_full(qit);
    ++qit;
  });
  q.wait_empty(qit);
  if (lane == 0) sts_i32(sm.base + QREC_OFF + (qit & 1) * QREC_BYTES, 0);
  q.arrive_full(qit);
}

// -inf over columns [a, b) of a row by nt threads (thread t): 16-byte stores where the row allows.
HX_INLINE __device__ void fill_neg_inf(float* row, hx_i32 a, hx_i32 b, hx_i32 t, hx_i32 nt) {
  if (b <= a) return;
  const float ninf = hx_bits_to_f32(0xFF800000u);
  const hx_i32 mis = (hx_i32)(((hx_u64)(row + a) >> 2) & 3u);
  const hx_i32 head = hx_min_i32((4 - mis) & 3, b - a);
  if (t < head) row[a + t] = ninf;
  const hx_i32 v0 = a + head, nv = (b - v0) >> 2;
  hx_f32x4* vp = (hx_f32x4*)(row + v0);
  const hx_f32x4 v = {ninf, ninf, ninf, ninf};
  for (hx_i32 i = t; i < nv; i += nt) vp[i] = v;
  const hx_i32 tail = v0 + 4 * nv;
  if (t < b - tail) row[tail + t] = ninf;
}

// Warps 2 and 3 (thread ft of 64): the -inf of this unit's piece of the batch's fill columns, every row.
HX_INLINE __device__ void fill_warps(const DecodeParams& p, hx_range64 own, hx_i32 ft) {
  walk(p, own, ft & 31, [&](const hx_decode_seq& s) { return hx_decode_fill(s, p.max_model_len); },
       [&](hx_i32 b, const hx_decode_seq& s, hx_i64 start) {
         const hx_range cols = hx_owned_fill(own, start, s, p.max_model_len);
         for (hx_i32 j = 0; j < p.next_n; ++j)
           fill_neg_inf(p.out + ((hx_i64)b * p.next_n + j) * p.out_stride, cols.lo, cols.hi, ft, 64);
       });
}

HX_INLINE __device__ void producer_warpgroup(const DecodeParams& p, const Smem& sm, hx_i32 tid) {
  const hx_i32 warp = tid >> 5, lane = tid & 31;
  // The batch's total work and fill, by the four warps; malformed sequences reported once, by unit 0.
  hx_i64 work = 0, fill = 0;
  bool malformed = false;
  for (hx_i32 b = tid; b < p.B; b += 128) {
    const hx_decode_seq s = sequence_at(p, b);
    malformed |= s.malformed;
    work += work_price(s);
    fill += hx_decode_fill(s, p.max_model_len);
  }
  if (malformed && hx_block_x() == 0 && p.errors) hx_atomic_or(p.errors, ERR_LENGTH);
#pragma unroll
  for (int x = 16; x >= 1; x >>= 1) {
    work += shfl_xor_i64(work, x);
    fill += shfl_xor_i64(fill, x);
  }
  hx_i64* tot = (hx_i64*)(sm.ptr + TOT_OFF);
  if (lane == 0) {
    tot[2 * warp] = work;
    tot[2 * warp + 1] = fill;
  }
  hx_bar_sync(1, 128);
  const hx_i64 total_work = tot[0] + tot[2] + tot[4] + tot[6], total_fill = tot[1] + tot[3] + tot[5] + tot[7];
  const hx_i64 units = hx_grid_dim_x(), u = hx_block_x();
  if (warp == 0) page_warp(p, sm, hx_balanced_part(total_work, units, u), lane);
  else if (warp == 1) query_warp(p, sm, hx_balanced_part(total_work, units, u), lane);
  else if (p.clean) fill_warps(p, hx_balanced_part(total_fill, units, u), tid - 64);
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

// ------------------------------------------------------------------ math warpgroups
// One pass: rows [pb, pb + R) of a segment against one A stage.
struct Pass {
  hx_u64 adesc, bdesc;  // the A stage; the Q slot at the pass's first row
  hx_u32 wt;            // shared address of this lane's weight group of the pass's first row
  hx_u32 bounds;        // shared address of the pass's first row's bound
  float* out;           // the pass's first row at this lane's key
  hx_i64 stride;        // out row stride
  hx_i32 n;             // this lane's key column
  float scale;          // kv_scale / 2 (the sums hold 2 relu)
  bool in, bad, clean;  // the key's column exists in this stage; its block id was out of range; clean_logits
};

// The MMA of R rows (N = R H), then: v[i R + jr] = sum over this thread's heads of relu(acc) x weight for key row
// 8i + l/4 of the warp's 16 and row jr. Accumulator column 8J + 2(l%4) + c (J = jr JQ + jj) is head 8 jj + 2(l%4) + c
// of row jr, in register 4J + 2i + c; relu(x) x w as (x + |x|) x w, one FADD and one FFMA (the 2 leaves with the
// scale). The quad then reduces: lane bit 0 keeps key row b1, bit 1 keeps rows [b2 RP/2, b2 RP/2 + RP/2) (R padded
// to even with a zero row), and each lane stores its RP/2 sums, predicated.
template <int R>
HX_INLINE __device__ void pass(const Pass& c, hx_i32 b1, hx_i32 b2) {
  constexpr int NACC = R * H / 2, RP = R + (R & 1);
  float acc[NACC];
  hx_fence_regs(acc);
  hx_wgmma_fence();
  hx_wgmma_k128(acc, c.adesc, c.bdesc);
  hx_wgmma_commit();
  hx_wgmma_wait<0>();
  hx_fence_regs(acc);
  float v[2 * R];
#pragma unroll
  for (int jr = 0; jr < R; ++jr) {
    float w2[2 * JQ];
#pragma unroll
    for (int m = 0; m < JQ / 2; ++m) {
      const hx_f32x4 wv = lds_f32x4(c.wt + 4 * (jr * WROW + 4 * m));
      w2[4 * m] = wv.x;
      w2[4 * m + 1] = wv.y;
      w2[4 * m + 2] = wv.z;
      w2[4 * m + 3] = wv.w;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = 0.f;
#pragma unroll
      for (int jj = 0; jj < JQ; ++jj) {
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          const float x = acc[4 * (jr * JQ + jj) + 2 * i + cc];
          sum = __fmaf_rn(x + __builtin_fabsf(x), w2[2 * jj + cc], sum);
        }
      }
      v[i * R + jr] = sum;
    }
  }
  float h1[RP];
#pragma unroll
  for (int jr = 0; jr < R; ++jr) {
    const float send = b1 ? v[jr] : v[R + jr];
    const float keep = b1 ? v[R + jr] : v[jr];
    h1[jr] = keep + hx_shfl_xor(send, 1);
  }
  if (R & 1) h1[RP - 1] = 0.f;
  const float ninf = hx_bits_to_f32(0xFF800000u);
#pragma unroll
  for (int k = 0; k < RP / 2; ++k) {
    const float send = b2 ? h1[k] : h1[RP / 2 + k];
    const float keep = b2 ? h1[RP / 2 + k] : h1[k];
    const float z = keep + hx_shfl_xor(send, 2);
    const hx_i32 jr = b2 * (RP / 2) + k;
    const bool row = jr < R;
    const hx_i32 bound = row ? lds_i32(c.bounds + 4 * jr) : 0;
    const bool valid = c.n < bound;
    hx_store_f32_if(row && c.in && (valid || c.clean), c.out + jr * c.stride, valid && !c.bad ? z * c.scale : ninf);
  }
}

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
