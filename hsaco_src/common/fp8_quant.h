// Quantising key rows to OCP fp8 e4m3fn bit for bit as hipindexer.cache.quantize_keys
// does it in numpy (docs/ops.md, "Writing keys"):
//   scale = amax(|k|) / 448 in float32, rounded up to a power of two on request,
//           1 for a row whose scale is 0;
//   code  = k / scale in float32, rounded to nearest even, saturated at +-448.
// Host (emulator, header tests) and both device targets run this same code;
// only the f32 -> e4m3 step has an sm_90a instruction, which rounds and
// saturates the same way. Inputs are finite (numpy refuses others; on the
// device a row holding NaN or Inf gets an unspecified scale and codes).
#pragma once
#include "platform.h"

// Key element types of the k argument (the kernel's `dtype` field).
#define HX_KEY_F32 0
#define HX_KEY_F16 1
#define HX_KEY_BF16 2

// |x| as bits. For finite floats the unsigned order of these bits is the order
// of the magnitudes, so amax is an integer max: exact, and independent of how
// the target treats denormals.
HX_INLINE HX_HD hx_u32 hx_abs_bits(float x) { return hx_f32_to_bits(x) & 0x7FFFFFFFu; }

// float16 bits -> f32, exact (subnormal halves are m * 2^-24, normal in f32).
HX_INLINE HX_HD float hx_f16_to_f32(hx_u32 h) {
  const hx_u32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1Fu) return hx_bits_to_f32(sign | 0x7F800000u | (m << 13));
  if (e == 0) return hx_bits_to_f32(sign | hx_f32_to_bits((float)m * 5.9604644775390625e-08f));
  return hx_bits_to_f32(sign | ((e + 112u) << 23) | (m << 13));
}

HX_INLINE HX_HD float hx_bf16_to_f32(hx_u32 h) { return hx_bits_to_f32((h & 0xFFFFu) << 16); }

// Smallest power of two >= the float with bits b (b > 0, finite). A subnormal
// 2^k * 2^-149 has bits 1 << k, so for subnormals (and the step up to the
// smallest normal, bits 1 << 23) the next power of two of the bits is the answer.
HX_INLINE HX_HD hx_u32 hx_pow2_ceil_bits(hx_u32 b) {
  if (b >= 0x00800000u) return (b & 0x007FFFFFu) ? (b & 0x7F800000u) + 0x00800000u : b;
  hx_u32 p = 1;
  while (p < b) p <<= 1;
  return p;
}

// The row's scale from its amax bits (hx_abs_bits). The division is IEEE
// float32 (correctly rounded), as numpy's amax / np.float32(448) is.
HX_INLINE HX_HD float hx_key_scale(hx_u32 amax_bits, bool power_of_two) {
  hx_u32 b = hx_f32_to_bits(hx_bits_to_f32(amax_bits) / 448.0f);
  if (power_of_two && b != 0) b = hx_pow2_ceil_bits(b);
  return b == 0 ? 1.0f : hx_bits_to_f32(b);
}

// What each value is multiplied by instead of divided: a power-of-two scale
// whose reciprocal is a normal float gives x * (1 / scale) == x / scale
// exactly (both round the same real number); otherwise 0, meaning divide.
HX_INLINE HX_HD float hx_exact_reciprocal(float scale) {
  const hx_u32 b = hx_f32_to_bits(scale);
  if ((b & 0x007FFFFFu) != 0 || b < 0x00800000u || b > 0x7E800000u) return 0.0f;
  return hx_bits_to_f32(0x7F000000u - b);  // 2^-e: exponent field 254 - E
}

// f32 -> e4m3fn code, rounded to nearest even, saturated at +-448 (what
// numpy's clip(x, -448, 448).astype(float8_e4m3fn) gives). Portable integer
// rounding: normal codes round the f32 mantissa at bit 20; below 2^-6 the
// code is RNE(|x| * 2^9) in 0..8 (8 is 0x08, the smallest normal).
HX_INLINE HX_HD hx_u32 hx_f32_to_e4m3_sat(float x) {
  const hx_u32 u = hx_f32_to_bits(x);
  const hx_u32 sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
  hx_u32 code;
  if (a >= 0x43E00000u) {  // >= 448
    code = 0x7Eu;
  } else if (a >= 0x3C800000u) {  // >= 2^-6
    code = ((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
  } else {
    const hx_u32 e = a >> 23, shift = 141u - e;  // |x| * 2^9 = mantissa * 2^-shift, shift >= 21
    const hx_u32 m = (a & 0x007FFFFFu) | 0x00800000u;
    code = (e == 0 || shift > 24u) ? 0u : (m + (1u << (shift - 1)) - 1u + ((m >> shift) & 1u)) >> shift;
  }
  return sign | code;
}

// Four values -> four e4m3fn codes, value i in byte i.
#if defined(HX_NVIDIA)
// cvt.rn.satfinite.e4m3x2.f32 rounds to nearest even and saturates finite
// values to +-448: the same codes as hx_f32_to_e4m3_sat, one instruction per
// pair. It puts its first operand in the high byte.
HX_INLINE __device__ hx_u32 hx_f32x4_to_e4m3_sat(const float v[4]) {
  hx_u32 lo, hi;
  asm("{ .reg .b16 t;\n cvt.rn.satfinite.e4m3x2.f32 t, %2, %1;\n cvt.u32.u16 %0, t; }"
      : "=r"(lo) : "f"(v[0]), "f"(v[1]));
  asm("{ .reg .b16 t;\n cvt.rn.satfinite.e4m3x2.f32 t, %2, %1;\n cvt.u32.u16 %0, t; }"
      : "=r"(hi) : "f"(v[2]), "f"(v[3]));
  return lo | (hi << 16);
}
#else
HX_INLINE HX_HD hx_u32 hx_f32x4_to_e4m3_sat(const float v[4]) {
  return hx_f32_to_e4m3_sat(v[0]) | (hx_f32_to_e4m3_sat(v[1]) << 8) | (hx_f32_to_e4m3_sat(v[2]) << 16) |
         (hx_f32_to_e4m3_sat(v[3]) << 24);
}
#endif

// Sixteen values of one row chunk -> their sixteen codes: v / scale, or
// v * recip when recip != 0 (hx_exact_reciprocal).
HX_INLINE HX_HD hx_u32x4 hx_quantize16(const float v[16], float scale, float recip) {
  float q[16];
  if (recip != 0.0f) {  // one branch per chunk: the division's instructions only where they are needed
    for (int i = 0; i < 16; ++i) q[i] = v[i] * recip;
  } else {
    for (int i = 0; i < 16; ++i) q[i] = v[i] / scale;
  }
  hx_u32x4 out;
  out.x = hx_f32x4_to_e4m3_sat(q);
  out.y = hx_f32x4_to_e4m3_sat(q + 4);
  out.z = hx_f32x4_to_e4m3_sat(q + 8);
  out.w = hx_f32x4_to_e4m3_sat(q + 12);
  return out;
}

// Sixteen key values of `dtype` from 16-byte-aligned memory, exactly as f32.
HX_INLINE HX_HD void hx_load_keys16(const void* src, hx_i32 dtype, float v[16]) {
  if (dtype == HX_KEY_F32) {
    const hx_f32x4* p = (const hx_f32x4*)src;
    for (int i = 0; i < 4; ++i) {
      const hx_f32x4 w = p[i];
      v[4 * i] = w.x; v[4 * i + 1] = w.y; v[4 * i + 2] = w.z; v[4 * i + 3] = w.w;
    }
    return;
  }
  const hx_u32x4* p = (const hx_u32x4*)src;
  for (int i = 0; i < 2; ++i) {
    const hx_u32x4 w = p[i];
    const hx_u32 words[4] = {w.x, w.y, w.z, w.w};
    for (int j = 0; j < 4; ++j) {
      const hx_u32 lo = words[j] & 0xFFFFu, hi = words[j] >> 16;
      v[8 * i + 2 * j] = dtype == HX_KEY_BF16 ? hx_bf16_to_f32(lo) : hx_f16_to_f32(lo);
      v[8 * i + 2 * j + 1] = dtype == HX_KEY_BF16 ? hx_bf16_to_f32(hi) : hx_f16_to_f32(hi);
    }
  }
}

// The largest hx_abs_bits of sixteen values.
HX_INLINE HX_HD hx_u32 hx_amax16_bits(const float v[16]) {
  hx_u32 m = 0;
  for (int i = 0; i < 16; ++i) {
    const hx_u32 b = hx_abs_bits(v[i]);
    m = b > m ? b : m;
  }
  return m;
}
