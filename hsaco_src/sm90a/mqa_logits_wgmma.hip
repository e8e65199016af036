// sm_90a prefill logits on fp8 wgmma, H in {32, 64} (-DHX_HEADS), D = 128.
//
// Swap-AB: keys are the wgmma M side, the row block's (query row, head)
// pairs the N side: BQ = 256 / H query rows x H heads = 256 columns, so one
// m64n256k32 e4m3 x e4m3 -> f32 product per 32 bytes of D and one K stream
// serves every row of the row block.
//
// Persistent grid (gridDim.x <= SMs), 640 threads (384 with two math
// warpgroups), warp-specialised:
//   warpgroup 0: warps 0 and 1 load (cp.async 16 B, 128-byte swizzle written
//                by the lanes at fixed offsets, published on mbarriers after a
//                group wait and a proxy fence, LAG stages behind the copies;
//                each copies half of every K stage, warp 0 also Q, the weights
//                and the unit record), warps 2-3 write the -inf fill of the
//                unit's columns outside its work range (clean only); registers
//                cut to 56 (setmaxnreg).
//   warpgroups 1-4: math, warpgroup (g, h) takes keys [64g, 64g + 64) of every
//                128-key stage times the query rows of half h (m64n128), registers
//                raised to 104; relu x weight (query row 0's weights in
//                registers for the unit, the rest read from shared memory),
//                head sum in registers and a quad transpose-reduce, kv_scale once
//                per key, predicated stores with the -inf of rows outside their
//                own window fused. Four math warps per scheduler: one's epilogue
//                runs under another's MMAs. Two stages per iteration put one's
//                stores under the next's MMA (HX_PIPE2). Built with HX_FOLD (H = 64, the
//                catalog's mqa_logits_wgmma_fold) the linear half of
//                2 relu(x) = x + |x| is the MMA's (m64n136: the extra columns
//                hold sum_h w_h q_h per query row, computed at a unit's start),
//                so the epilogue is one FFMA per accumulator.
//   Two math warpgroups instead (HX_MATH_WGS = 2, the fold kernel): warpgroup g
//                runs both halves of its keys, each half's MMA a commit group of
//                its own (the first half summed under the second's MMA), with
//                registers raised to 224: every weight stays in registers, so
//                no shared loads in the epilogue. At 640 threads the weight loads
//                were 17% of the shared-memory pipe (ncu), which the MMA operands
//                otherwise keep 84-89% busy; with two warpgroups the warps wait
//                longer on their MMAs, which only the fold's shorter epilogue
//                repays (H200: fold +2-4%, plain H = 64 +2%, H = 32 -1%).
// Work units are (row block, part of the key split) (hx_prefill_split owns
// every column of a row block exactly once), high row blocks first when
// reverse_rows; CTA b takes units b, then 2G-1-b, ... (snake order over
// the grid), and every role walks the same unit sequence.
#include "index_math.h"
#include "hx_params.h"
#include "hopper.h"

#ifndef HX_HEADS
#error "define HX_HEADS (32 or 64)"
#endif
#ifndef HX_MATH_WGS
#define HX_MATH_WGS 4
#endif
#ifndef HX_WREG
#define HX_WREG (HX_MATH_WGS == 2 ? 128 / HX_HEADS : 1)
#endif
#ifndef HX_FOLD
#define HX_FOLD 0
#endif
// Two stages per loop iteration: one's stores run under the next's MMA (+2-3% measured at H = 32 and with
// the fold); the plain H = 64 kernel spills a stage's scale across the MMA that way, so it keeps one.
#ifndef HX_PIPE2
#define HX_PIPE2 (HX_HEADS == 32 || HX_FOLD || HX_MATH_WGS == 2)
#endif

namespace {

constexpr int H = HX_HEADS;
constexpr int D = 128;           // bytes of one key / query-head row
constexpr int NQ = 256;          // wgmma N: (query row, head) pairs of a row block
constexpr int BQ = NQ / H;       // query rows per row block
constexpr int JQ = H / 8;        // 8-column accumulator groups per query row
// Weights in shared memory: per row, four groups (one per t = l % 4, the reading lane's quad position) of
// that lane's 2 JQ weights, contiguous for 16-byte loads; padded to 20 floats at H = 64 so the four
// groups fall in distinct banks (see weight_slot).
constexpr int WGROUP = 2 * JQ + (JQ == 8 ? 4 : 0);
constexpr int WROW = 4 * WGROUP;
constexpr int FOLD_SCALE = 2 * JQ;  // the fold's term scales, in the padding after a group's weights (H = 64)
constexpr int BK = 128;          // keys per stage, 64 per math warpgroup
constexpr int S = 8;             // stages of the key ring
constexpr hx_u32 LAG = 4;        // stages a loader lane keeps in flight before publishing them
// The folded linear term (HX_FOLD): 2 relu(x) = x + |x|, and sum_h w_h x_h = k . (sum_h w_h q_h) is linear
// in the key, so the MMA computes it against one more B row per query row and term, q_eff = sum_h w_h q_h
// split into four e4m3 terms (scales s, s/16, s/256, s/4096; each term's rounding error is at most 1/16
// of the next scale's range, so the sum holds q_eff to about 2^-16 of its largest element). The epilogue
// then needs one FFMA per accumulator (|x| w) instead of an FADD and an FFMA. Each half's B tile grows by
// one 8-row block: column 8 x 16 + 2t + c holds term t of query row c of the half. A separate kernel
// (opt-in): the MMA's error on the linear term grows with |sum_h w_h x_h| over every head, where the plain
// epilogue's grows with the kept heads' terms only, so rows whose weighted heads cancel fare worse.
constexpr bool FOLD = HX_FOLD;
constexpr int NX = FOLD ? 8 : 0;                  // extra B rows per half
constexpr int FTERMS = 4;
constexpr int QHALF_ROWS = NQ / 2 + NX;
constexpr hx_u32 QHALF_BYTES = QHALF_ROWS * D;   // a multiple of the 1024-byte swizzle atom
constexpr hx_u32 Q_BYTES = 2 * QHALF_BYTES;
constexpr int NACC = QHALF_ROWS / 2;              // accumulators per thread (m64 x QHALF_ROWS)
static_assert(!FOLD || (BQ / 2 == 2 && NX == FTERMS * BQ / 2), "fold: two query rows per half, four terms each");
static_assert(!FOLD || WGROUP >= FOLD_SCALE + 2, "fold: two scales fit in a weight group's padding");
static_assert(QHALF_BYTES % 1024 == 0, "half tiles start on swizzle atoms");
static_assert(H == 32 || H == 64, "heads");
constexpr int MATH_WGS = HX_MATH_WGS;  // 4: (key half g, query half h) of every stage; 2: key half g
constexpr int HALVES = 4 / MATH_WGS;   // query halves per math warpgroup, one wgmma (and accumulator set) each
static_assert(MATH_WGS == 4 || MATH_WGS == 2, "math warpgroups");
static_assert(HX_BLOCK == 128 * (1 + MATH_WGS), "one load/fill warpgroup + the math warpgroups");
// setmaxnreg moves registers inside the block's launch allocation (65536 / 640 -> 96 per thread):
// an increase past what the decrease freed blocks forever.
constexpr int LOAD_REGS = 56, MATH_REGS = MATH_WGS == 4 ? 104 : 224;
static_assert(128 * LOAD_REGS + 128 * MATH_WGS * MATH_REGS <= (65536 / HX_BLOCK / 8 * 8) * HX_BLOCK, "register budget");

// Dynamic shared memory layout, from a 1024-aligned base.
constexpr hx_u32 K_OFF = 0;                          // S x [128 keys][128 B], swizzled
constexpr hx_u32 Q_OFF = K_OFF + S * BK * D;          // 2 x 2 halves x [QHALF_ROWS rows][128 B], swizzled
constexpr hx_u32 SC_OFF = Q_OFF + 2 * Q_BYTES;        // S x 128 f32 kv_scale
constexpr hx_u32 W_OFF = SC_OFF + S * BK * 4;         // 2 x BQ rows of weights (weight_slot)
constexpr hx_u32 W_BYTES = BQ * WROW * 4;
constexpr hx_u32 REC_OFF = W_OFF + 2 * W_BYTES;        // 2 x unit record (int32): stages, m0, work lo, hi, BQ x (lo, hi)
constexpr hx_u32 REC_BYTES = 128;
constexpr hx_u32 FX_OFF = REC_OFF + 2 * REC_BYTES;    // fold: BQ rows x 4 warps x 32 lanes x f32x4 partials
constexpr hx_u32 FX_BYTES = FOLD ? BQ * 4 * 32 * 16 : 0;
constexpr hx_u32 BAR_OFF = FX_OFF + FX_BYTES;         // kfull[S], kempty[S], qfull[2], qempty[2]
constexpr hx_u32 SMEM_USED = BAR_OFF + (2 * S + 4) * 8;
static_assert(SMEM_USED + 1024 <= HX_SMEM, "shared memory layout exceeds the catalog's dynamic size");

struct Unit {
  hx_i32 m0, m1;           // rows [m0, m1) of the row block (m1 <= M)
  hx_prefill_part part;    // this CTA's columns of those rows
};

HX_INLINE __device__ Unit unit_at(const PrefillParams& p, hx_i32 u) {
  const hx_i32 row_blocks = hx_ceil_div(p.M, BQ);
  const hx_i32 rbi = u / p.split, s = u % p.split;
  const hx_i32 rb = p.reverse_rows ? row_blocks - 1 - rbi : rbi;
  Unit t;
  t.m0 = rb * BQ;
  t.m1 = hx_min_i32(p.M, t.m0 + BQ);
  hx_i32 lo = p.N, hi = 0;
  for (hx_i32 m = t.m0; m < t.m1; ++m) {
    const hx_range r = hx_clamp_window(p.ks[m], p.ke[m], p.N);
    if (r.hi > r.lo) { lo = hx_min_i32(lo, r.lo); hi = hx_max_i32(hi, r.hi); }
  }
  if (hi <= lo) lo = hi = 0;
  t.part = hx_prefill_split(lo, hi, p.N, p.tile, p.split, s);
  return t;
}

static_assert((4 + 2 * BQ) * 4 <= REC_BYTES, "unit record");

// Unit of this CTA's k-th turn, or -1 past the end (-2: none this round). 32-bit: the planner keeps
// units below 2^30 (64-bit unit arithmetic cost the load warps registers they do not have).
HX_INLINE __device__ hx_i32 unit_index(hx_i32 units, hx_i32 k) {
  const hx_i32 G = (hx_i32)hx_grid_dim_x(), b = (hx_i32)hx_block_x();
  const hx_i32 base = k * G;
  if (base >= units) return -1;
  const hx_i32 u = base + ((k & 1) ? G - 1 - b : b);
  return u < units ? u : -2;
}

// A whole [ROWS][128 B] tile into the 128-byte swizzle, one warp, one instruction per 16 bytes at fixed
// offsets from two base addresses. Lane l copies column c = l % 8 of rows r0 + 4i (r0 = l / 8); the
// swizzle XORs c with (r0 + 4i) % 8, which is r0 for even i and r0 + 4 for odd i.
template <int I, int N>
struct CopyRowsSw128 {
  __device__ __attribute__((always_inline)) static void run(hx_u32 even, hx_u32 odd, const hx_u8* s) {
    hx_cp_async16_at<512 * I>((I & 1) ? odd : even, s);
    CopyRowsSw128<I + 1, N>::run(even, odd, s);
  }
};
template <int N>
struct CopyRowsSw128<N, N> {
  __device__ __attribute__((always_inline)) static void run(hx_u32, hx_u32, const hx_u8*) {}
};
template <int ROWS>
HX_INLINE __device__ void copy_tile_sw128(hx_u32 dst, const hx_u8* src, hx_i32 lane) {
  const hx_u32 r0 = (hx_u32)lane >> 3, c = (hx_u32)lane & 7u;
  const hx_u32 even = dst + r0 * 128u + ((c ^ r0) << 4), odd = dst + r0 * 128u + ((c ^ r0 ^ 4u) << 4);
  CopyRowsSw128<0, ROWS / 4>::run(even, odd, src + r0 * 128u + c * 16u);
}
static_assert(D == 128, "copy_tile_sw128 assumes 128-byte rows");

// A unit decoded by a loader warp: lane r < BQ reads row m0 + r's window (my), the warp reduces the union.
struct WarpUnit {
  Unit t;
  hx_range my;
  bool row_ok;
};

HX_INLINE __device__ WarpUnit decode_unit(const PrefillParams& p, hx_i32 u, hx_i32 lane) {
  WarpUnit w;
  const hx_i32 row_blocks = hx_ceil_div(p.M, BQ);
  const hx_i32 rbi = u / p.split, part = u % p.split;
  w.t.m0 = (p.reverse_rows ? row_blocks - 1 - rbi : rbi) * BQ;
  w.t.m1 = hx_min_i32(p.M, w.t.m0 + BQ);
  w.my = {0, 0};
  w.row_ok = lane < BQ && w.t.m0 + lane < w.t.m1;
  if (w.row_ok) w.my = hx_clamp_window(p.ks[w.t.m0 + lane], p.ke[w.t.m0 + lane], p.N);
  hx_i32 lo = w.my.hi > w.my.lo ? w.my.lo : p.N, hi = w.my.hi > w.my.lo ? w.my.hi : 0;
#pragma unroll
  for (int x = 1; x < 32; x <<= 1) {
    lo = hx_min_i32(lo, hx_shfl_xor_i32(lo, x));
    hi = hx_max_i32(hi, hx_shfl_xor_i32(hi, x));
  }
  if (hi <= lo) lo = hi = 0;
  w.t.part = hx_prefill_split(lo, hi, p.N, p.tile, p.split, part);
  return w;
}

// Loader warp `half` copies keys [n0 + 64 half, n0 + 64 half + 64) of a stage and their scales: two
// warps share every stage, since one warp's copy issue rate was what bounded the kernel.
HX_INLINE __device__ void load_half_stage(const PrefillParams& p, hx_u32 kdst, hx_u32 sdst, hx_i32 n0, hx_i32 half,
                                          hx_i32 lane) {
  const hx_i32 r_base = half * (BK / 2);
  if (n0 + BK <= p.N) {
    copy_tile_sw128<BK / 2>(kdst + r_base * 128, p.k + (hx_i64)(n0 + r_base) * D, lane);
  } else {
#pragma unroll 8
    for (int i = 0; i < (BK / 2) * D / 16 / 32; ++i) {
      const hx_i32 idx = lane + 32 * i, r = r_base + (idx >> 3), c = idx & 7;
      const bool ok = n0 + r < p.N;
      hx_cp_async16(kdst + hx_sw128_offset(r, c), p.k + (ok ? (hx_i64)(n0 + r) * D + c * 16 : 0), ok ? 16 : 0);
    }
  }
#pragma unroll
  for (int i = 0; i < BK / 2 / 32; ++i) {
    const hx_i32 idx = r_base + lane + 32 * i;
    const bool ok = n0 + idx < p.N;
    hx_cp_async4(sdst + 4 * idx, p.kv_scale + (ok ? n0 + idx : 0), ok ? 4 : 0);
  }
}

HX_INLINE __device__ hx_i32 stage_count(const Unit& t) { return hx_ceil_div(hx_range_len(t.part.work), BK); }

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

// The math warpgroups' view of a unit: this lane's query rows and their windows, per half. Keys are counted
// from the end of the unit's work range (e = n - work.hi, negative inside it), which saves the register
// that held work.hi.
struct Tile {
  float* row[BQ / 4];       // this lane's output rows (query row h RQ + b2 RQ/2 + kq of the block), at its key
  hx_i32 lo[BQ / 4], hi[BQ / 4];  // their windows, minus work.hi
  bool fill[BQ / 4];        // clean and the row exists (hi -1 marks a row past M)
};

// Half h of a stage's product: 64 keys x the query rows [h RQ, (h+1) RQ) of the row block.
HX_INLINE __device__ void mma_k32(float (&acc)[64], hx_u64 a, hx_u64 b, hx_u32 kk) { hx_wgmma_m64n128k32_e4m3(acc, a, b, kk); }
HX_INLINE __device__ void mma_k32(float (&acc)[68], hx_u64 a, hx_u64 b, hx_u32 kk) { hx_wgmma_m64n136k32_e4m3(acc, a, b, kk); }
HX_INLINE __device__ void issue_half(float (&acc)[NACC], hx_u64 adesc, hx_u64 bdesc) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) mma_k32(acc, adesc + 2 * kk, bdesc + 2 * kk, kk);
  hx_wgmma_commit();
}

// Where weight (row r, head h = 8 jj + 2 t + c) sits in shared memory.
HX_INLINE __device__ hx_i32 weight_slot(hx_i32 idx) {
  const hx_i32 r = idx / H, hh = idx % H;
  return r * WROW + ((hh >> 1) & 3) * WGROUP + 2 * (hh >> 3) + (hh & 1);
}

// A whole row block's weights, one warp at fixed offsets: copy i of lane l is weight idx = l + 32 i,
// row i / P and head l + 32 (i % P) (P = H / 32), so its slot is a lane base per i % P plus a constant.
constexpr int WP = H / 32;
template <int I, int N>
struct CopyWeights {
  __device__ __attribute__((always_inline)) static void run(const hx_u32 (&dst)[WP], const float* src) {
    hx_cp_async4_at<4 * (I / WP) * WROW, 4 * 32 * I>(dst[I % WP], src);
    CopyWeights<I + 1, N>::run(dst, src);
  }
};
template <int N>
struct CopyWeights<N, N> {
  __device__ __attribute__((always_inline)) static void run(const hx_u32 (&)[WP], const float*) {}
};
HX_INLINE __device__ void copy_weights(hx_u32 dst, const float* src, hx_i32 lane) {
  hx_u32 d[WP];
#pragma unroll
  for (int k = 0; k < WP; ++k) d[k] = dst + 4 * (hx_u32)weight_slot(lane + 32 * k);
  CopyWeights<0, NQ / 32>::run(d, src + lane);
}

// This lane's weights for query row q of the half: w2[2 jj + c] is head 8 jj + 2 t + c (see weight_slot),
// t = l % 4 picks wt = wrow + t WGROUP. 16-byte loads that 8 lanes share.
constexpr int RQ = BQ / 2;  // query rows of a half
HX_INLINE __device__ void load_weights(const float* wt, hx_i32 q, float (&w2)[2 * JQ]) {
#pragma unroll
  for (int m = 0; m < JQ / 2; ++m) {
    const hx_f32x4 wv = *(const hx_f32x4*)(wt + q * WROW + 4 * m);
    w2[4 * m] = wv.x;
    w2[4 * m + 1] = wv.y;
    w2[4 * m + 2] = wv.z;
    w2[4 * m + 3] = wv.w;
  }
}
// Query rows whose weights stay in registers for a whole unit; the rest are read per stage. Per-stage reads
// cost the math loop 2 JQ / 4 shared loads per row; with four math warpgroups a second row in registers
// spills (64 accumulators, 68 with the fold, leave no room), with two every row fits.
constexpr int WREG = HX_WREG;

// relu(acc) x weight summed over this thread's heads: v[i * RQ + q], key row 8i + l/4 of the warp's 16,
// query row q of the half. Accumulator column 8j + 2(l%4) + c (j = q JQ + jj): head 8 jj + 2(l%4) + c of
// that row, in register 4j + 2i + c.
HX_INLINE __device__ void head_sums(const float (&acc)[NACC], const float (&wq)[WREG > 0 ? WREG : 1][2 * JQ],
                                    const float* wt, float (&v)[2 * RQ]) {
#pragma unroll
  for (int q = 0; q < RQ; ++q) {
    float w2[2 * JQ];
    if (q < WREG) {
#pragma unroll
      for (int m = 0; m < 2 * JQ; ++m) w2[m] = wq[q < WREG ? q : 0][m];
    } else {
      load_weights(wt, q, w2);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = 0.f;
#pragma unroll
      for (int jj = 0; jj < JQ; ++jj) {
        const int j = q * JQ + jj;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float x = acc[4 * j + 2 * i + c];
          // 2 relu(x) = x + |x|: with the fold, the x w part is the MMA's and |x| w is one FFMA with an
          // |operand|; without it x + |x| is one FADD (FMA pipe, where a max would take the half-rate ALU
          // pipe). The factor 2 leaves with the kv_scale.
          if constexpr (FOLD) sum = __fmaf_rn(__builtin_fabsf(x), w2[2 * jj + c], sum);
          else sum = __fmaf_rn(x + __builtin_fabsf(x), w2[2 * jj + c], sum);
        }
      }
      // This lane's term t = l % 4 of query row q (column 128 + 2t + q), times that term's scale.
      if constexpr (FOLD) sum = __fmaf_rn(acc[NACC - 4 + 2 * i + q], wt[FOLD_SCALE + q], sum);
      v[i * RQ + q] = sum;
    }
  }
}

// Quad transpose-reduce of the head sums (lane bit 0 keeps key row b1, bit 1 keeps query quarter b2),
// kv_scale, stores with the -inf of rows outside their own window fused; branch-free (predicated stores).
HX_INLINE __device__ void reduce_store(const Tile& t, const float (&v)[2 * RQ], hx_i32 e, float scale, hx_i32 b1,
                                       hx_i32 b2) {
  float h1[RQ];
#pragma unroll
  for (int x = 0; x < RQ; ++x) {
    const float send = b1 ? v[x] : v[x + RQ];
    const float keep = b1 ? v[x + RQ] : v[x];
    h1[x] = keep + hx_shfl_xor(send, 1);
  }
  const float ninf = hx_bits_to_f32(0xFF800000u);
#pragma unroll
  for (int kq = 0; kq < RQ / 2; ++kq) {
    const float send = b2 ? h1[kq] : h1[kq + RQ / 2];
    const float keep = b2 ? h1[kq + RQ / 2] : h1[kq];
    const float z = keep + hx_shfl_xor(send, 2);
    const bool inside = (e >= t.lo[kq]) & (e < t.hi[kq]);
    const bool store = (e < 0) & (inside | t.fill[kq]);
    hx_store_f32_if(store, t.row[kq], inside ? z * scale : ninf);
  }
}
static_assert(BQ >= 4, "two halves of at least two query rows");

// The fold's B rows for query row rb of the row block (row g of half h), by one math warpgroup at a unit's
// start: q_eff[d] = sum over heads of w[head] q[head][d], warp w over heads [16w, 16w + 16) and lane l over d
// in [4l, 4l + 4); warp 0 adds the four warps' partials, takes the row's scale s (a power of two with
// max |q_eff| / s <= 448) and writes the four e4m3 terms into rows 128 + 2t + g of the half. Term t's scales
// of both rows (s_c 16^-t for row c) go where lane t's weights of the half's first row end (FOLD_SCALE, in
// the padding of weight_slot's groups), read with the weights. The caller then meets every warpgroup that
// multiplies the half.
HX_INLINE __device__ void fold_query(hx_u8* sbase, hx_u32 qtile, hx_u32 qb, hx_i32 rb, hx_i32 mw) {
  const hx_i32 g = rb % RQ, h = rb / RQ;
  const hx_u32 qhalf = qtile + h * QHALF_BYTES;
  const hx_u32 l = hx_lane_reread(), w = (hx_u32)hx_uniform_i32((hx_i32)(hx_thread_x() / 32) & 3);
  const float* wrow = (const float*)(sbase + W_OFF + qb * W_BYTES) + rb * WROW + 4 * w;
  const hx_u32 row0 = (hx_u32)(g * H + 16 * w);  // tile row of head 16w, a multiple of 8
  float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    // weight_slot: the float4 at (row, t WGROUP + 4w) holds heads 16w + {2t, 2t + 1, 8 + 2t, 9 + 2t}.
    const hx_f32x4 wv = *(const hx_f32x4*)(wrow + t * WGROUP);
    const float wh[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int hh = 2 * t + (e & 1) + 8 * (e >> 1);  // head 16w + hh
      hx_u32 word;
      asm volatile("ld.shared.u32 %0, [%1];" : "=r"(word) : "r"(qhalf + hx_sw128_offset(row0 + hh, l >> 2) + (l & 3u) * 4u));
      float x[4];
      hx_e4m3x4_to_f32(word, x);
#pragma unroll
      for (int i = 0; i < 4; ++i) part[i] = __fmaf_rn(wh[e], x[i], part[i]);
    }
  }
  hx_f32x4* fx = (hx_f32x4*)(sbase + FX_OFF + rb * (4 * 32 * 16));
  fx[w * 32 + l] = hx_f32x4{part[0], part[1], part[2], part[3]};
  hx_named_barrier(1 + mw, 128);
  if (w == 0) {
    float qe[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ww = 0; ww < 4; ++ww) {
      const hx_f32x4 p4 = fx[ww * 32 + l];
      qe[0] += p4.x; qe[1] += p4.y; qe[2] += p4.z; qe[3] += p4.w;
    }
    float m = fmaxf(fmaxf(__builtin_fabsf(qe[0]), __builtin_fabsf(qe[1])), fmaxf(__builtin_fabsf(qe[2]), __builtin_fabsf(qe[3])));
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) m = fmaxf(m, hx_shfl_xor(m, x));
    // The smallest power of two s with m / s <= 448 (m / 448 rounded up to a power of two); 1 for a zero row.
    const hx_u32 mb = __float_as_uint(m * (1.f / 448.f));
    float s = mb == 0 ? 1.f : __uint_as_float((mb + 0x7FFFFFu) & 0xFF800000u);
    float* wpad = (float*)(sbase + W_OFF + qb * W_BYTES) + h * RQ * WROW + FOLD_SCALE + g;
    if (l < 4) wpad[l * WGROUP] = s * __uint_as_float((127u - 4u * l) << 23);  // s 16^-l
#pragma unroll
    for (int t = 0; t < FTERMS; ++t) {
      const float inv = 1.f / s;  // exact: s is a power of two
      float y[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) y[i] = qe[i] * inv;
      const hx_u32 word = hx_f32_to_e4m3x4(y);
      float back[4];
      hx_e4m3x4_to_f32(word, back);
#pragma unroll
      for (int i = 0; i < 4; ++i) qe[i] = __fmaf_rn(-s, back[i], qe[i]);
      const hx_u32 row = NQ / 2 + 2 * t + g;
      asm volatile("st.shared.u32 [%0], %1;" :: "r"(qhalf + hx_sw128_offset(row, l >> 2) + (l & 3u) * 4u), "r"(word)
                   : "memory");
      s *= 1.f / 16.f;
    }
    hx_fence_proxy_async();  // the terms are read by wgmma (async proxy)
  }
}

}  // namespace

HX_KERNEL __launch_bounds__(HX_BLOCK, 1) void hx_mqa_logits_wgmma(const HX_GRID_CONSTANT PrefillParams p) {
  extern __shared__ __align__(1024) hx_u8 smem_raw[];
  const hx_u32 raw = hx_smem_u32(smem_raw);
  const hx_u32 base = (raw + 1023u) & ~1023u;
  hx_u8* const sbase = smem_raw + (base - raw);
  const hx_u32 kfull = base + BAR_OFF, kempty = kfull + 8 * S, qfull = kempty + 8 * S, qempty = qfull + 16;
  const hx_i32 tid = (hx_i32)hx_thread_x();
  const hx_i32 wg = hx_uniform_i32(tid / 128);
  if (tid == 0) {
    for (int s = 0; s < S; ++s) { hx_mbar_init(kfull + 8 * s, 64); hx_mbar_init(kempty + 8 * s, 128 * MATH_WGS); }
    for (int b = 0; b < 2; ++b) { hx_mbar_init(qfull + 8 * b, 64); hx_mbar_init(qempty + 8 * b, 128 * MATH_WGS); }
  }
  hx_barrier();
  const hx_i32 units = hx_ceil_div(p.M, BQ) * p.split;

  if (wg == 0) {
    hx_setmaxnreg_dec<LOAD_REGS>();
    const hx_i32 warp = tid / 32, lane = tid % 32;
    if (warp < 2) {
      // ------------------------------------------------------------ loaders: warp 0 also owns Q, the weights
      // and the unit record; both copy half of every K stage.
      // A stage is published LAG stages after its copies were issued: the lane waits for its own copies
      // (cp.async groups), fences them into the async proxy that wgmma reads through, and only then arrives
      // on kfull, so the math warpgroups never fence (a fence there waited on their own output stores).
      // Q rides in the group of its unit's first stage.
      hx_u32 kit = 0, qit = 0, published = 0;
      auto publish_upto = [&](hx_u32 end) {  // every stage before `end`, all copies landed
        hx_fence_proxy_async();
        for (; published < end; ++published) hx_mbar_arrive(kfull + 8 * (published % S));
      };
      for (hx_i32 k = 0;; ++k) {
        const hx_i32 u = unit_index(units, k);
        if (u == -1) break;
        if (u < 0) continue;
        const WarpUnit wu = decode_unit(p, u, lane);
        const Unit& t = wu.t;
        const hx_i32 ns = stage_count(t);
        if (ns == 0) continue;
        if (warp == 0) {
          const hx_u32 qb = qit & 1;
          if (!hx_mbar_test(qempty + 8 * qb, ((qit >> 1) & 1) ^ 1)) {
            // The math warpgroups may need this warp's unpublished stages to release the buffer.
            hx_cp_async_wait<0>();
            publish_upto(kit);
            hx_mbar_wait(qempty + 8 * qb, ((qit >> 1) & 1) ^ 1);
          }
          hx_i32* rec = (hx_i32*)(sbase + REC_OFF + qb * REC_BYTES);
          if (lane == 0) { rec[0] = ns; rec[1] = t.m0; rec[2] = t.part.work.lo; rec[3] = t.part.work.hi; }
          if (lane < BQ) { rec[4 + 2 * lane] = wu.my.lo; rec[5 + 2 * lane] = wu.row_ok ? wu.my.hi : -1; }
          hx_mbar_arrive(qfull + 8 * qb);  // releases the record; the copies arrive below
          const hx_u32 qdst = base + Q_OFF + qb * Q_BYTES;
          const hx_u8* qsrc = p.q + (hx_i64)t.m0 * H * D;
          const hx_i32 qrows = (t.m1 - t.m0) * H;  // rows of the tile that exist
          const hx_u32 wdst = base + W_OFF + qb * W_BYTES;
          const float* wsrc = p.weights + (hx_i64)t.m0 * H;
          // A whole row block at fixed offsets: this warp also copies half of every K stage, which waits
          // behind these copies (per-copy address arithmetic made a unit's start cost about two stages).
          if (qrows == NQ) {
            copy_tile_sw128<NQ / 2>(qdst, qsrc, lane);
            copy_tile_sw128<NQ / 2>(qdst + QHALF_BYTES, qsrc + (NQ / 2) * D, lane);
            copy_weights(wdst, wsrc, lane);
          } else {
#pragma unroll 1
            for (int i = 0; i < NQ * D / 16 / 32; ++i) {
              const hx_i32 idx = lane + 32 * i, r = idx >> 3, c = idx & 7;
              const bool ok = r < qrows;
              hx_cp_async16(qdst + (r >= NQ / 2 ? QHALF_BYTES : 0) + hx_sw128_offset(r % (NQ / 2), c),
                            qsrc + (ok ? (hx_i64)r * D + c * 16 : 0), ok ? 16 : 0);
            }
#pragma unroll 1
            for (int i = 0; i < NQ / 32; ++i) {
              const hx_i32 idx = lane + 32 * i;
              const bool ok = idx < qrows;
              hx_cp_async4(wdst + 4 * weight_slot(idx), wsrc + (ok ? idx : 0), ok ? 4 : 0);
            }
          }
          hx_cp_async_arrive(qfull + 8 * qb);
          ++qit;
        }
        for (hx_i32 st = 0; st < ns; ++st, ++kit) {
          const hx_u32 s = kit % S;
          hx_mbar_wait(kempty + 8 * s, ((kit / S) & 1) ^ 1);
          load_half_stage(p, base + K_OFF + s * (BK * D), base + SC_OFF + s * (BK * 4), t.part.work.lo + st * BK,
                          warp, lane);
          hx_cp_async_commit();
          if (kit + 1 > LAG) {
            hx_cp_async_wait<LAG>();
            publish_upto(kit + 1 - LAG);
          }
        }
      }
      hx_cp_async_wait<0>();
      publish_upto(kit);
      if (warp == 0) {
        // End marker for the math warpgroups: a record with no stages.
        const hx_u32 qb = qit & 1;
        hx_mbar_wait(qempty + 8 * qb, ((qit >> 1) & 1) ^ 1);
        if (lane == 0) ((hx_i32*)(sbase + REC_OFF + qb * REC_BYTES))[0] = 0;
        hx_mbar_arrive(qfull + 8 * qb);
        hx_mbar_arrive(qfull + 8 * qb);
      }
      // Every issued copy must land before the CTA may exit.
      hx_cp_async_wait<0>();
    } else if (p.clean) {
      // ------------------------------------------------------------ -inf fill outside the work range
      const hx_i32 ft = tid - 64, nft = 64;
      for (hx_i32 k = 0;; ++k) {
        const hx_i32 u = unit_index(units, k);
        if (u == -1) break;
        if (u < 0) continue;
        const Unit t = unit_at(p, u);
        for (hx_i32 m = t.m0; m < t.m1; ++m) {
          float* row = p.out + (hx_i64)m * p.out_stride;
          fill_neg_inf(row, t.part.fill_lo.lo, t.part.fill_lo.hi, ft, nft);
          fill_neg_inf(row, t.part.fill_hi.lo, t.part.fill_hi.hi, ft, nft);
        }
      }
    }
    return;
  }

  // -------------------------------------------------------------- math warpgroups
  // Warpgroup (g, h) multiplies keys [64g, 64g + 64) of every stage by the query rows of half h of the
  // row block (m64n128): four math warps per scheduler, so one's epilogue hides another's MMAs.
  hx_setmaxnreg_inc<MATH_REGS>();
  const hx_i32 mw = wg - 1;
  const hx_i32 g = mw & 1, h = mw >> 1;
  const hx_i32 mt = tid - 128 * wg;        // thread in the warpgroup
  const hx_i32 w = mt / 32, l = mt % 32;
  const hx_i32 b1 = l & 1, b2 = (l >> 1) & 1;
  const hx_i32 key = 16 * w + (l >> 2) + 8 * b1;   // this lane's key of the 64 after the quad reduce
  float acc[HALVES][NACC];
  // Stage s's A descriptor is stage 0's plus s * BK * D / 16 in its address field (shared addresses stay
  // below 2^18: no carry out of the field).
  const hx_u64 adesc0 = hx_wgmma_desc_sw128(base + K_OFF + g * (64 * D));
  hx_u32 s = 0, phase = 0, qit = 0;  // the slot of the next K stage and its mbarrier parity
  for (;;) {
    const hx_u32 qb = qit & 1;
    hx_mbar_wait(qfull + 8 * qb, (qit >> 1) & 1);
    const hx_i32* rec = (const hx_i32*)(sbase + REC_OFF + qb * REC_BYTES);
    const hx_i32 ns = hx_uniform_i32(rec[0]);
    if (ns == 0) break;
    Tile t[HALVES];
    const hx_i32 m0 = hx_uniform_i32(rec[1]);
    const hx_i32 work_hi = hx_uniform_i32(rec[3]);
    const hx_i32 n = hx_uniform_i32(rec[2]) + 64 * g + key;  // this lane's key in the stage
    hx_i32 e = n - work_hi;
#pragma unroll
    for (int hh = 0; hh < HALVES; ++hh) {
#pragma unroll
      for (int kq = 0; kq < RQ / 2; ++kq) {
        const hx_i32 r = (h + hh) * RQ + b2 * (RQ / 2) + kq;
        t[hh].fill[kq] = p.clean && rec[5 + 2 * r] >= 0;
        t[hh].lo[kq] = rec[4 + 2 * r] - work_hi;
        t[hh].hi[kq] = rec[5 + 2 * r] - work_hi;
        t[hh].row[kq] = p.out + (hx_i64)(m0 + r) * p.out_stride + n;
      }
    }
    // This lane's weights (lane read afresh: a lane-derived address kept across the unit loop was spilled).
    const float* wt[HALVES];
    float wq[HALVES][WREG > 0 ? WREG : 1][2 * JQ];
#pragma unroll
    for (int hh = 0; hh < HALVES; ++hh) {
      wt[hh] = (const float*)(sbase + W_OFF + qb * (W_BYTES)) + (h + hh) * RQ * WROW + (hx_lane_reread() & 3) * WGROUP;
#pragma unroll
      for (int q = 0; q < WREG; ++q) load_weights(wt[hh], q, wq[hh][q]);
    }
    const hx_u32 qtile = base + Q_OFF + qb * Q_BYTES;
    if constexpr (FOLD) {
      // Warpgroup (g, h) computes query row (h + hh) RQ + g of each of its halves; then every warpgroup that
      // multiplies those rows meets.
#pragma unroll
      for (int hh = 0; hh < HALVES; ++hh) fold_query(sbase, qtile, qb, (h + hh) * RQ + g, mw);
      hx_named_barrier(5 + h, 256);
    }
    // One stage: wait for it, issue its MMAs (one group per half); then its head sums (freeing the slot),
    // the first half's under the second's MMA; then its stores.
    auto issue_stage = [&]() -> float {
      hx_mbar_wait(kfull + 8 * s, phase);
      const float scale = 0.5f * ((const float*)(sbase + SC_OFF + s * (BK * 4)))[64 * g + key];  // sums hold 2 relu
#pragma unroll
      for (int hh = 0; hh < HALVES; ++hh) hx_fence_regs(acc[hh]);
      hx_wgmma_fence();
#pragma unroll
      for (int hh = 0; hh < HALVES; ++hh)
        issue_half(acc[hh], adesc0 + (hx_u64)(s * (BK * D / 16)), hx_wgmma_desc_sw128(qtile + (h + hh) * QHALF_BYTES));
      return scale;
    };
    auto sum_stage = [&](float (&v)[HALVES][2 * RQ]) {
#pragma unroll
      for (int hh = 0; hh < HALVES; ++hh) {
        if (hh + 1 < HALVES) hx_wgmma_wait<1>();
        else hx_wgmma_wait<0>();
        hx_fence_regs(acc[hh]);
        head_sums(acc[hh], wq[hh], wt[hh], v[hh]);
      }
      hx_mbar_arrive(kempty + 8 * s);
      const bool wrap = s == S - 1;
      s = wrap ? 0 : s + 1;
      phase ^= wrap;
    };
    auto store_stage = [&](const float (&v)[HALVES][2 * RQ], float scale) {
#pragma unroll
      for (int hh = 0; hh < HALVES; ++hh) {
        reduce_store(t[hh], v[hh], e, scale, b1, b2);
#pragma unroll
        for (int kq = 0; kq < RQ / 2; ++kq) t[hh].row[kq] += BK;
      }
      e += BK;
    };
    hx_i32 st = 0;
#if HX_PIPE2
    // Two stages per iteration: the first's stores run under the second's MMA, and nothing is in flight at
    // the back-edge (ptxas serialises every wgmma when one is in flight across a loop's branch).
    for (; st + 2 <= ns; st += 2) {
      float v0[HALVES][2 * RQ], v1[HALVES][2 * RQ];
      const float scale0 = issue_stage();
      sum_stage(v0);
      const float scale1 = issue_stage();
      store_stage(v0, scale0);
      sum_stage(v1);
      store_stage(v1, scale1);
    }
#endif
    for (; st < ns; ++st) {
      float v[HALVES][2 * RQ];
      const float scale = issue_stage();
      sum_stage(v);
      store_stage(v, scale);
    }
    // qb afresh (a shuffle): the value kept across the unit was what ptxas spilled.
    hx_mbar_arrive(qempty + 8 * ((hx_u32)hx_uniform_i32((hx_i32)qit) & 1u));
    ++qit;
  }
}
