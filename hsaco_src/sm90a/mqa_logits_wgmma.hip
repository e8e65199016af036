// sm_90a prefill logits on fp8 wgmma, H in {32, 64} (-DHX_HEADS), D = 128: four math warpgroups, each one
// quarter of every stage's product.
//
// The work, its units and the load/fill warpgroup: prefill_cta.h. 640 threads: warpgroup 0 loads and fills;
// math warpgroup (g, h) multiplies keys [64g, 64g + 64) of every 128-key stage by the query rows of half h of
// the row block, m64n128k32 e4m3 x e4m3 -> f32, one commit group per stage. Four math warps per scheduler: one
// warp's epilogue runs under another's MMAs.
//
// Epilogue per stage and thread: relu(x) x weight summed over its heads as (x + |x|) x weight, one FADD and one
// FFMA per accumulator (the factor 2 leaves with kv_scale; an FADD runs on the FMA pipe, where a max would take
// the half-rate ALU pipe); then the quad reduce, kv_scale and the predicated stores (reduce_store). Query row 0's
// weights stay in registers for the unit, the others are read from shared memory per stage: a second row in
// registers spills, 64 accumulators leave no room. At H = 32 two stages per iteration put one's stores under the
// next's MMAs; at H = 64 that spills a stage's scale across the MMA, so one stage per iteration.
#include "prefill_cta.h"

#if !defined(HX_HEADS)
#error "mqa_logits_wgmma.hip: build with -DHX_HEADS=32 or -DHX_HEADS=64"
#endif

namespace {

struct Cta : PrefillCta<HX_HEADS, 4, 0, Params, HX_FILTER> {
  static constexpr bool PAIRS = H == 32;
  // setmaxnreg moves registers inside the block's launch allocation (65536 / 640 -> 96 per thread): an increase
  // past what the decrease freed blocks forever.
  static constexpr int LOAD_REGS = 56, MATH_REGS = 104;
  static_assert(128 * LOAD_REGS + 4 * 128 * MATH_REGS <= (65536 / HX_BLOCK / 8 * 8) * HX_BLOCK, "register budget");
  static constexpr hx_u32 BAR_OFF = FX_OFF;
  static_assert(BAR_OFF + BAR_BYTES + 1024 <= HX_SMEM, "shared memory layout exceeds the catalog's dynamic size");

  // relu(acc) x weight summed over this thread's heads: v[i RQ + q], key row 8i + l/4 of the warp's 16 and query
  // row q of the half. Accumulator column 8j + 2(l%4) + c (j = q JQ + jj) is head 8 jj + 2(l%4) + c of that row,
  // in register 4j + 2i + c. Row 0's weights come in w0, the others from shared memory.
  HX_INLINE __device__ void head_sums(const float (&acc)[NACC], const float (&w0)[2 * JQ], const float* wt,
                                      float (&v)[2 * RQ]) {
#pragma unroll
    for (int q = 0; q < RQ; ++q) {
      float w2[2 * JQ];
      if (q == 0) {
#pragma unroll
        for (int m = 0; m < 2 * JQ; ++m) w2[m] = w0[m];
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
            sum = __fmaf_rn(x + __builtin_fabsf(x), w2[2 * jj + c], sum);
          }
        }
        v[i * RQ + q] = sum;
      }
    }
  }

  // Math warpgroup mw = wg - 1 = (h, g) over every unit of the CTA.
  HX_INLINE __device__ void math_warpgroup(const Params& p, const Smem& sm, hx_i32 tid, hx_i32 wg) {
    hx_setmaxnreg_inc<MATH_REGS>();
    const hx_i32 mw = wg - 1;
    const hx_i32 g = mw & 1, h = mw >> 1;
    const MathLane ml = math_lane(tid, wg);
    float acc[NACC];
    const hx_u64 adesc0 = stage0_keys(sm, g);
    hx_ring_pos<S> at;  // the next K stage
    each_unit(sm, [&](const SlotUnit& u) {
      const hx_i32 n = u.work_lo + 64 * g + ml.key;  // this lane's key in the unit's first stage
      hx_i32 e = n - u.work_hi;
      Tile t;
      make_tile(t, p, sm, u.rec, u.m0, u.work_hi, h, ml.b2, n);
      const float* wt = weights_of(sm, u.qb, h);
      float w0[2 * JQ];
      load_weights(wt, 0, w0);
      const hx_u32 qtile = sm.base + Q_OFF + u.qb * Q_BYTES;

      using V = float[2 * RQ];
      auto issue = [&]() -> float {
        sm.k.wait_full(at);
        const float scale = 0.5f * kv_scale_at(sm, at.slot, 64 * g + ml.key);  // the sums hold 2 relu
        hx_fence_regs(acc);
        hx_wgmma_fence();
        hx_wgmma_k128(acc, adesc0 + (hx_u64)(at.slot * (BK * D / 16)), hx_wgmma_desc_sw128(qtile + h * QHALF_BYTES));
        hx_wgmma_commit();
        return scale;
      };
      auto sum = [&](V& v) {
        hx_wgmma_wait<0>();
        hx_fence_regs(acc);
        head_sums(acc, w0, wt, v);
        sm.k.arrive_empty(at);
        at.next();
      };
      auto store = [&](const V& v, float scale) {
        reduce_store(p, t, v, e, scale, ml.b1, ml.b2);
        e += BK;
      };
      run_stages<PAIRS, V>(u.ns, issue, sum, store);
    });
  }
};

}  // namespace

HX_KERNEL __launch_bounds__(HX_BLOCK, 1) void HX_PREFILL_NAME(hx_mqa_logits_wgmma, hx_mqa_topk_wgmma)(
    const HX_GRID_CONSTANT Params p) {
  hx_grid_dependency_wait();
  hx_prefill_cta<Cta>(p);
}
