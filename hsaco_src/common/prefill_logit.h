// One prefill logit in scalar fp32, the generic kernels' arithmetic: sum over heads of relu(q[m, h] . k[n]) x
// weights[m, h], times kv_scale[n]. P is any parameter struct with q, k, kv_scale, weights, H and D (a multiple
// of 16).
#pragma once
#include "index_math.h"

HX_INLINE HX_DEV void hx_unpack16(hx_u32x4 v, float f[16]) {
  hx_fp8x4_to_f32(v.x, f);
  hx_fp8x4_to_f32(v.y, f + 4);
  hx_fp8x4_to_f32(v.z, f + 8);
  hx_fp8x4_to_f32(v.w, f + 12);
}

template <class P>
HX_INLINE HX_DEV float hx_prefill_logit(const P& p, hx_i64 m, hx_i64 n) {
  const hx_u32x4* k = (const hx_u32x4*)(p.k + n * p.D);
  float acc = 0.f;
  for (hx_i32 h = 0; h < p.H; ++h) {
    const hx_u32x4* q = (const hx_u32x4*)(p.q + (m * p.H + h) * p.D);
    float dot = 0.f;
    for (hx_i32 c = 0; c < p.D / 16; ++c) {
      float kf[16], qf[16];
      hx_unpack16(k[c], kf);
      hx_unpack16(q[c], qf);
      for (int i = 0; i < 16; ++i) dot += qf[i] * kf[i];
    }
    acc += (dot > 0.f ? dot : 0.f) * p.weights[m * p.H + h];
  }
  // kv_scale >= 0 and relu is positive-homogeneous: scale once, after the head sum.
  return acc * p.kv_scale[n];
}
