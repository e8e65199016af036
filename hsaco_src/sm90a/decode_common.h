// What the sm_90a paged decode kernels (the logits of paged_mqa_logits_wgmma_tma.hip, the fused top-k of
// paged_mqa_topk_wgmma_tma.hip) share, on the hopper.h primitives: the constants, the shared loads and stores, each
// sequence's price, the walk that finds the sequences whose piece of the batch's prefix of prices meets a unit's own
// range, and the math warpgroups' pass. H = HX_HEADS, D = 128. Their shared-memory layout and rings:
// decode_tma_cta.h.
#pragma once
#include "decode_work.h"
#include "paged_cache.h"
#include "hx_params.h"
#include "hopper.h"

#if !defined(HX_HEADS) || (HX_HEADS != 32 && HX_HEADS != 64)
#error "the sm_90a decode kernels: build with -DHX_HEADS=32 or -DHX_HEADS=64"
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
constexpr hx_i32 MEMW = 8;                      // block_price of a block while memory sets the pace
constexpr hx_i32 ERR_BLOCK_ID = 1, ERR_LENGTH = 4;

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
HX_INLINE __device__ hx_f32x4 lds_f32x4(hx_u32 a) {
  hx_f32x4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a)
               : "memory");
  return v;
}
HX_INLINE __device__ void sts_i32(hx_u32 a, hx_i32 v) { asm volatile("st.shared.b32 [%0], %1;" :: "r"(a), "r"(v) : "memory"); }
HX_INLINE __device__ hx_i64 lds_i64(hx_u32 a) {
  hx_i64 v;
  asm volatile("ld.shared.b64 %0, [%1];" : "=l"(v) : "r"(a) : "memory");
  return v;
}
HX_INLINE __device__ void sts_i64(hx_u32 a, hx_i64 v) { asm volatile("st.shared.b64 [%0], %1;" :: "r"(a), "l"(v) : "memory"); }
HX_INLINE __device__ hx_i64 shfl_xor_i64(hx_i64 v, int m) {
  const hx_u64 u = (hx_u64)v;
  const hx_u32 lo = (hx_u32)hx_shfl_xor_i32((hx_i32)(hx_u32)u, m), hi = (hx_u32)hx_shfl_xor_i32((hx_i32)(hx_u32)(u >> 32), m);
  return (hx_i64)(((hx_u64)hi << 32) | lo);
}

// A sequence from its [B] lengths (context_lens[b], next_n_lens[b] or next_n) as one lane read them. These kernels
// take blocks of 16 or 64 tokens only (the catalog's), so its blocks come from a shift, not a division: the walk
// to a unit's first sequence is a chain of such steps that every call waits on.
template <class P>
HX_INLINE __device__ hx_decode_seq sequence(const P& p, hx_i32 ctx, hx_i32 live) {
  return p.block_size == SK ? hx_decode_sequence(ctx, live, p.next_n, p.max_model_len, SK)
                            : hx_decode_sequence(ctx, live, p.next_n, p.max_model_len, 16);
}
// What one block of the sequence costs here, in eighths of the time its bytes take to stream in: that (MEMW) while
// the MMA keeps up with them, else two a live row, at either head count. Units balance their pieces of the batch
// by these prices, so rows priced too cheap send the units that land among many-row sequences more than their
// share, and too dear the reverse; docs/benchmarks.md has the ragged batches that chose the weights.
HX_INLINE __device__ hx_i64 block_price(const hx_decode_seq& s) {
  return s.live > 0 ? (hx_i64)hx_max_i32(MEMW, 2 * s.live) : 0;
}
// A sequence's fixed price besides its blocks', for a kernel that spends time on each segment whatever its length
// (the fused top-k's cut at a segment's end): the price sits before the sequence's first block, so a unit whose
// piece crosses into a sequence takes that much less of the blocks. 0 unless a kernel specialises it for its
// parameters.
template <class P>
struct SegmentPrice {
  static constexpr hx_i64 value = 0;
};
template <class P>
HX_INLINE __device__ hx_i64 work_price(const hx_decode_seq& s) {
  const hx_i64 blocks = (hx_i64)s.blocks * block_price(s);
  if constexpr (SegmentPrice<P>::value == 0) return blocks;
  else return s.blocks > 0 ? blocks + SegmentPrice<P>::value : 0;
}
// Blocks [lo, hi) of the sequence whose price starts at `start` that a unit owning [own.lo, own.hi) takes.
// A block priced MEMW (a sequence of at most MEMW / 2 live rows) divides as a shift.
template <class P>
HX_INLINE __device__ hx_range owned_blocks(hx_range64 own, hx_i64 start, const hx_decode_seq& s) {
  const hx_i64 at = start + SegmentPrice<P>::value, per = block_price(s);
  return per == MEMW ? hx_owned_blocks_priced(own, at, s.blocks, MEMW) : hx_owned_blocks_priced(own, at, s.blocks, per);
}

// One lane's sequence of a chunk of 32 (sequence b0 + lane, none past B): its lengths as read, its price, and the
// chunk's prices summed up to it. With per-row lengths the lane keeps the ctx and live hx_decode_sequence_at gives
// (the longest row's keys and the rows up to the last with keys), from which sequence() gives the same keys, blocks
// and fill, whether a row is negative, and whether the rows need their own bounds.
struct ChunkLane {
  hx_i32 ctx, live;
  bool negative, own_rows;
  hx_i64 w, incl;
};
template <class P, class Price>
HX_INLINE __device__ ChunkLane read_chunk(const P& p, hx_i32 b0, hx_i32 lane, Price&& price) {
  ChunkLane c = {0, 0, false, false, 0, 0};
  const hx_i32 b = b0 + lane;
  if (b < p.B) {
    if (p.lens_per_row) {
      const hx_decode_seq s = hx_decode_sequence_of(p, b);
      c.ctx = s.ctx;
      c.live = s.live;
      c.negative = s.malformed;
      c.own_rows = s.row_lens != nullptr;
    } else {
      c.ctx = p.context_lens[b];
      c.live = p.next_n_lens ? p.next_n_lens[b] : p.next_n;
    }
    c.w = price(sequence(p, c.ctx, c.live));
  }
  c.incl = c.w;
#pragma unroll
  for (int x = 1; x < 32; x <<= 1) {
    const hx_i64 y = hx_shfl_up_i64(c.incl, x);
    if (lane >= x) c.incl += y;
  }
  return c;
}
// Chunk 0 of the batch as a caller already read it with the work price (have: the batch is that one chunk), for the
// walk to take instead of reading it again.
struct FirstChunk {
  ChunkLane c;
  bool have;
};
// The sequence b of a chunk's lane, as the walk hands it on: with per-row lengths that need their own bounds it
// points at its rows' lengths (the Q warp's row bounds read them), else it follows the [B] form's affine rule.
template <class P>
HX_INLINE __device__ hx_decode_seq chunk_sequence(const P& p, hx_i32 ctx, hx_i32 live, bool negative, bool own_rows,
                                                  hx_i32 b) {
  hx_decode_seq s = sequence(p, ctx, live);
  if (p.lens_per_row && own_rows) {
    s.malformed = negative;
    s.row_lens = p.context_lens + (hx_i64)b * p.next_n;
  }
  return s;
}

// Calls f(b, seq, range) for each sequence b, in order, whose piece [start, start + price(seq)) of the batch's
// prefix of prices meets [own.lo, own.hi), range being span(own, start, seq), what the unit owns of it: one warp,
// every lane making the same calls. Each lane reads, prices and spans its own sequence of a chunk of 32 at once, so a
// sequence met costs the warp a few shuffles, not a chain of divisions. Chunk 0 comes from `first` where it has it
// (read with this price).
template <class P, class Price, class Span, class F>
HX_INLINE __device__ void walk(const P& p, hx_range64 own, hx_i32 lane, Price&& price, Span&& span, F&& f,
                               const FirstChunk& first) {
  hx_i64 base = 0;
  for (hx_i32 b0 = 0; b0 < p.B && base < own.hi; b0 += 32) {
    const ChunkLane c = b0 == 0 && first.have ? first.c : read_chunk(p, b0, lane, price);
    const hx_i64 start = base + c.incl - c.w;
    const hx_range r = span(own, start, chunk_sequence(p, c.ctx, c.live, c.negative, c.own_rows, b0 + lane));
    hx_u32 hits = hx_ballot(c.w > 0 && start < own.hi && start + c.w > own.lo);
    while (hits) {
      const hx_i32 k = __ffs(hits) - 1;
      hits &= hits - 1;
      const hx_decode_seq s = chunk_sequence(p, hx_shfl_idx_i32(c.ctx, k), hx_shfl_idx_i32(c.live, k),
                                             hx_shfl_idx_i32(c.negative, k) != 0, hx_shfl_idx_i32(c.own_rows, k) != 0,
                                             b0 + k);
      f(b0 + k, s, hx_range{hx_shfl_idx_i32(r.lo, k), hx_shfl_idx_i32(r.hi, k)});
    }
    base += hx_shfl_idx_i64(c.incl, 31);
  }
}
// The walk of a unit's work: sequences priced by work_price, of which it owns the key blocks owned_blocks gives.
template <class P, class F>
HX_INLINE __device__ void walk_work(const P& p, hx_range64 own, hx_i32 lane, const FirstChunk& first, F&& f) {
  walk(p, own, lane, work_price<P>,
       [](hx_range64 o, hx_i64 start, const hx_decode_seq& s) { return owned_blocks<P>(o, start, s); }, f, first);
}

// ------------------------------------------------------------------ the math pass
// One pass: rows [pb, pb + R) of a segment against one A stage.
struct Pass {
  hx_u64 adesc, bdesc;  // the A stage; the Q slot at the pass's first row
  hx_u32 astep;         // A's k32 step in descriptor units
  hx_u32 wt;            // shared address of this lane's weight group of the pass's first row
  hx_u32 bounds;        // shared address of the pass's first row's bound
  float* out;           // the pass's first row at this lane's key
  hx_i64 stride;        // out row stride
  hx_i32 n;             // this lane's key column
  float scale;          // kv_scale / 2 (the sums hold 2 relu)
  bool in, bad, clean;  // the key's column exists in this stage; its block id was out of range; clean_logits
};

// This lane's 2 JQ weights of each of R rows from its weight group at wt (16-byte loads).
template <int R>
HX_INLINE __device__ void load_row_weights(hx_u32 wt, float (&w)[R][2 * JQ]) {
#pragma unroll
  for (int jr = 0; jr < R; ++jr) {
#pragma unroll
    for (int m = 0; m < JQ / 2; ++m) {
      const hx_f32x4 wv = lds_f32x4(wt + 4 * (jr * WROW + 4 * m));
      w[jr][4 * m] = wv.x;
      w[jr][4 * m + 1] = wv.y;
      w[jr][4 * m + 2] = wv.z;
      w[jr][4 * m + 3] = wv.w;
    }
  }
}

// The MMA of R rows (N = R H), then: v[i R + jr] = sum over this thread's heads of relu(acc) x weight for key row
// 8i + l/4 of the warp's 16 and row jr. Accumulator column 8J + 2(l%4) + c (J = jr JQ + jj) is head 8 jj + 2(l%4) + c
// of row jr, in register 4J + 2i + c; relu(x) x w as (x + |x|) x w, one FADD and one FFMA (the 2 leaves with the
// scale). The quad then reduces: lane bit 0 keeps key row b1, bit 1 keeps rows [b2 RP/2, b2 RP/2 + RP/2) (R padded
// to even with a zero row), and each lane hands its RP/2 sums to emit (StoreLogits: stores them, predicated). w2:
// this lane's weights of the R rows (load_row_weights).
struct StoreLogits {
  // Row jr of the pass (row: it exists), this lane's sum z before kv_scale, and whether the row's bound holds the key.
  HX_MEMBER __device__ void operator()(const Pass& c, hx_i32 jr, bool row, bool valid, float z) const {
    const float ninf = hx_bits_to_f32(0xFF800000u);
    hx_store_f32_if(row && c.in && (valid || c.clean), c.out + jr * c.stride, valid && !c.bad ? z * c.scale : ninf);
  }
};
template <int R, class Emit = StoreLogits>
HX_INLINE __device__ void pass(const Pass& c, hx_i32 b1, hx_i32 b2, const float (&w2)[R][2 * JQ],
                               const Emit& emit = Emit()) {
  constexpr int NACC = R * H / 2, RP = R + (R & 1);
  float acc[NACC];
  hx_fence_regs(acc);
  hx_wgmma_fence();
  hx_wgmma_k128(acc, c.adesc, c.bdesc, c.astep);
  hx_wgmma_commit();
  hx_wgmma_wait<0>();
  hx_fence_regs(acc);
  float v[2 * R];
#pragma unroll
  for (int jr = 0; jr < R; ++jr) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = 0.f;
#pragma unroll
      for (int jj = 0; jj < JQ; ++jj) {
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          const float x = acc[4 * (jr * JQ + jj) + 2 * i + cc];
          sum = __fmaf_rn(x + __builtin_fabsf(x), w2[jr][2 * jj + cc], sum);
        }
      }
      v[i * R + jr] = sum;
    }
  }
  float h1[RP];
#pragma unroll
  for (int jr = 0; jr < R; ++jr) h1[jr] = hx_pair_fold(v, R, jr, b1, 1);
  if (R & 1) h1[RP - 1] = 0.f;
#pragma unroll
  for (int k = 0; k < RP / 2; ++k) {
    const float z = hx_pair_fold(h1, RP / 2, k, b2, 2);
    const hx_i32 jr = b2 * (RP / 2) + k;
    const bool row = jr < R;
    const hx_i32 bound = row ? lds_i32(c.bounds + 4 * jr) : 0;
    emit(c, jr, row, c.n < bound, z);
  }
}
// The same, the weights read from the pass's rows' weight groups first.
template <int R, class Emit = StoreLogits>
HX_INLINE __device__ void pass(const Pass& c, hx_i32 b1, hx_i32 b2, const Emit& emit = Emit()) {
  float w2[R][2 * JQ];
  load_row_weights<R>(c.wt, w2);
  pass<R>(c, b1, b2, w2, emit);
}

}  // namespace
