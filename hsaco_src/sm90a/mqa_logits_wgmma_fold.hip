// sm_90a prefill logits on fp8 wgmma, H = 64 (-DHX_HEADS=64), D = 128, with the linear half of the ReLU folded
// into the MMA: two math warpgroups, each running both query halves of its keys.
//
// The fold: 2 relu(x) = x + |x|, and sum_h w_h x_h = k . (sum_h w_h q_h) is linear in the key, so the MMA computes
// it against one more B row per query row and term: q_eff = sum_h w_h q_h, split into four e4m3 terms (scales s,
// s/16, s/256, s/4096; each term's rounding error is at most 1/16 of the next scale's range, so the sum holds
// q_eff to about 2^-16 of its largest element). Each half's B tile grows by one 8-row block (m64n136): column
// 128 + 2t + c holds term t of the half's query row c. The epilogue then needs one FFMA per accumulator (|x| w)
// instead of an FADD and an FFMA. The MMA's error on the linear term grows with |sum_h w_h x_h| over every head,
// where the plain kernel's grows with the kept heads' terms only: rows whose weighted heads cancel fare worse,
// inside the same accumulation class.
//
// The work, its units and the load/fill warpgroup: prefill_cta.h. 384 threads: warpgroup 0 loads and fills;
// math warpgroup g multiplies keys [64g, 64g + 64) of every 128-key stage by both halves of the row block, one
// commit group per half, the first half's head sums under the second's MMAs, two stages per iteration (one's
// stores under the next's MMAs). With registers raised to 224 every weight stays in registers: no shared loads
// in the epilogue but the term scales, which leaves the shared-memory pipe to the MMA operands. At a unit's start
// warpgroup g computes q_eff of query row g of both halves (fold_query); the two warpgroups then meet.
//
// Built with -DHX_TOPK_FILTER=1 it is the fused prefill top-k's filter (hx_mqa_topk_wgmma_fold, PrefillTopkParams):
// the same unit staging its logits for warpgroup 0's filter warps instead of storing them (prefill_cta.h, STAGED).
#include "prefill_cta.h"

#if !defined(HX_HEADS) || HX_HEADS != 64
#error "mqa_logits_wgmma_fold.hip: build with -DHX_HEADS=64"
#endif

namespace {

constexpr int FTERMS = 4;  // e4m3 terms of q_eff

struct Cta : PrefillCta<HX_HEADS, 2, FTERMS * 2, Params, HX_FILTER> {
  static_assert(RQ == 2 && NX == FTERMS * RQ, "two query rows per half, four terms each");
  static constexpr int LOAD_REGS = 56, MATH_REGS = 224;
  static_assert(128 * LOAD_REGS + 2 * 128 * MATH_REGS <= (65536 / HX_BLOCK / 8 * 8) * HX_BLOCK, "register budget");
  // Term t's scales of a half's two rows, in the padding after lane t's weight group of the half's row 0.
  static constexpr int FOLD_SCALE = 2 * JQ;
  static_assert(WGROUP >= FOLD_SCALE + 2, "two scales fit in a weight group's padding");
  static constexpr hx_u32 FX_BYTES = BQ * 4 * 32 * 16;  // q_eff partials: BQ rows x 4 warps x 32 lanes x f32x4
  static constexpr hx_u32 BAR_OFF = FX_OFF + FX_BYTES;
  static_assert(BAR_OFF + BAR_BYTES + 1024 <= HX_SMEM, "shared memory layout exceeds the catalog's dynamic size");
  static constexpr hx_u32 BAR_PARTIALS = 1;  // + math warpgroup: its four warps' q_eff partials are written
  static constexpr hx_u32 BAR_TERMS = 3;     // both math warpgroups: every term row is written

  // |acc| x weight summed over this thread's heads plus the linear term: v[i RQ + q], key row 8i + l/4 of the
  // warp's 16 and query row q of the half. Accumulator column 8j + 2(l%4) + c (j = q JQ + jj) is head
  // 8 jj + 2(l%4) + c of that row, in register 4j + 2i + c; column 128 + 2t + q (register NACC - 4 + 2i + q,
  // t = l % 4) is term t of the row's linear part, whose scale sits at wt[FOLD_SCALE + q] (one 8-byte load).
  HX_INLINE __device__ void head_sums(const float (&acc)[NACC], const float (&wq)[RQ][2 * JQ], const float* wt,
                                      float (&v)[2 * RQ]) {
    const hx_f32x2 ts = *(const hx_f32x2*)(wt + FOLD_SCALE);
    const float term_scale[RQ] = {ts.x, ts.y};
#pragma unroll
    for (int q = 0; q < RQ; ++q) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float sum = 0.f;
#pragma unroll
        for (int jj = 0; jj < JQ; ++jj) {
          const int j = q * JQ + jj;
#pragma unroll
          for (int c = 0; c < 2; ++c) sum = __fmaf_rn(__builtin_fabsf(acc[4 * j + 2 * i + c]), wq[q][2 * jj + c], sum);
        }
        sum = __fmaf_rn(acc[NACC - 4 + 2 * i + q], term_scale[q], sum);
        v[i * RQ + q] = sum;
      }
    }
  }

  // The fold's B rows for query row g of half `half` in Q slot qb, by one math warpgroup: q_eff[d] = sum over
  // heads of w[head] q[head][d], warp w over heads [16w, 16w + 16) and lane l over d in [4l, 4l + 4); warp 0 adds
  // the four warps' partials, takes the row's scale s (a power of two with max |q_eff| / s <= 448) and writes the
  // four e4m3 terms into rows 128 + 2t + g of the half, and term t's scale s 16^-t into the padding of lane t's
  // weight group of the half's row 0 (FOLD_SCALE + g). The caller then meets every warpgroup that multiplies the
  // half.
  HX_INLINE __device__ void fold_query(const Smem& sm, hx_u32 qb, hx_i32 half, hx_i32 g, hx_i32 mw) {
    const hx_i32 rb = half * RQ + g;  // row of the row block
    const hx_u32 qhalf = sm.base + Q_OFF + qb * Q_BYTES + half * QHALF_BYTES;
    const hx_u32 l = hx_lane_reread(), w = (hx_u32)hx_uniform_i32((hx_i32)(hx_thread_x() / 32) & 3);
    const float* wrow = (const float*)(sm.ptr + W_OFF + qb * W_BYTES) + rb * WROW + 4 * w;
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
    hx_f32x4* fx = (hx_f32x4*)(sm.ptr + FX_OFF + rb * (4 * 32 * 16));
    fx[w * 32 + l] = hx_f32x4{part[0], part[1], part[2], part[3]};
    hx_bar_sync(BAR_PARTIALS + mw, 128);
    if (w != 0) return;
    float qe[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ww = 0; ww < 4; ++ww) {
      const hx_f32x4 p4 = fx[ww * 32 + l];
      qe[0] += p4.x; qe[1] += p4.y; qe[2] += p4.z; qe[3] += p4.w;
    }
    float m = fmaxf(fmaxf(__builtin_fabsf(qe[0]), __builtin_fabsf(qe[1])),
                    fmaxf(__builtin_fabsf(qe[2]), __builtin_fabsf(qe[3])));
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) m = fmaxf(m, hx_shfl_xor(m, x));
    // The smallest power of two s with m / s <= 448 (m / 448 rounded up to a power of two); 1 for a zero row.
    const hx_u32 mb = __float_as_uint(m * (1.f / 448.f));
    float s = mb == 0 ? 1.f : __uint_as_float((mb + 0x7FFFFFu) & 0xFF800000u);
    float* wpad = (float*)(sm.ptr + W_OFF + qb * W_BYTES) + half * RQ * WROW + FOLD_SCALE + g;
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

  // Math warpgroup g = wg - 1 over every unit of the CTA.
  HX_INLINE __device__ void math_warpgroup(const Params& p, const Smem& sm, hx_i32 tid, hx_i32 wg) {
    hx_setmaxnreg_inc<MATH_REGS>();
    const hx_i32 g = wg - 1;
    const MathLane ml = math_lane(tid, wg);
    float acc[2][NACC];
    const hx_u64 adesc0 = stage0_keys(sm, g);
    hx_ring_pos<S> at;    // the next K stage
    hx_ring_pos<LS> lat;  // STAGED: the next slot of staged logits
    each_unit(sm, [&](const SlotUnit& u) {
      const hx_i32 n = u.work_lo + 64 * g + ml.key;  // this lane's key in the unit's first stage
      hx_i32 e = n - u.work_hi;
      Tile t[2];
      const float* wt[2];
      float wq[2][RQ][2 * JQ];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) make_tile(t[hh], p, sm, u.rec, u.m0, u.work_hi, hh, ml.b2, n);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        wt[hh] = weights_of(sm, u.qb, hh);
#pragma unroll
        for (int q = 0; q < RQ; ++q) load_weights(wt[hh], q, wq[hh][q]);
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) fold_query(sm, u.qb, hh, g, g);
      hx_bar_sync(BAR_TERMS, 256);
      const hx_u32 qtile = sm.base + Q_OFF + u.qb * Q_BYTES;

      using V = float[2][2 * RQ];
      auto issue = [&]() -> float {
        sm.k.wait_full(at);
        const float scale = 0.5f * kv_scale_at(sm, at.slot, 64 * g + ml.key);  // the sums hold 2 relu
        hx_fence_regs(acc[0]);
        hx_fence_regs(acc[1]);
        hx_wgmma_fence();
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          hx_wgmma_k128(acc[hh], adesc0 + (hx_u64)(at.slot * (BK * D / 16)),
                        hx_wgmma_desc_sw128(qtile + hh * QHALF_BYTES));
          hx_wgmma_commit();
        }
        return scale;
      };
      auto sum = [&](V& v) {
        hx_wgmma_wait<1>();  // the first half's group: its sums run under the second's MMAs
        hx_fence_regs(acc[0]);
        head_sums(acc[0], wq[0], wt[0], v[0]);
        hx_wgmma_wait<0>();
        hx_fence_regs(acc[1]);
        head_sums(acc[1], wq[1], wt[1], v[1]);
        sm.k.arrive_empty(at);
        at.next();
      };
      auto store = [&](const V& v, float scale) {
        const hx_u32 slot = stage_slot(sm, lat);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) reduce_store(p, t[hh], v[hh], e, scale, ml.b1, ml.b2, slot);
        stage_staged(sm, lat);
        e += BK;
      };
      run_stages<true, V>(u.ns, issue, sum, store);
    });
  }
};

}  // namespace

HX_KERNEL __launch_bounds__(HX_BLOCK, 1) void HX_PREFILL_NAME(hx_mqa_logits_wgmma_fold, hx_mqa_topk_wgmma_fold)(
    const HX_GRID_CONSTANT Params p) {
  hx_grid_dependency_wait();
  hx_prefill_cta<Cta>(p);
}
