// OCP fp8 e4m3fn <-> f32, bit-exact models of what the gfx950 wrappers do.
//
// e4m3fn: bias 7, 3 mantissa bits, no infinities; 0x7F / 0xFF are the only
// NaNs, 0x7E = 448 is the largest finite value, exponent field 0 is
// subnormal (m * 2^-9).
//
// f32 -> fp8 (hx_f32_to_fp8) is round-to-nearest-even with SATURATION: every
// finite or infinite |x| above 448 gives +-448. That is the wrapper's
// contract, not the bare instruction's: v_cvt_pk_fp8_f32 without clamp is
// not documented to saturate (CK clamps before it too), so wave.h clamps to
// +-448 first on the device. NaN gives 0x7F with the sign of the input here;
// on the device, NaN inputs are unspecified (inputs never hold NaN, and
// -fno-honor-nans lets the clamp drop them). Subnormal results are kept
// (no flush). ml_dtypes differs only above 448 (it rounds 448..464 to 448
// and turns larger values into NaN).
#include <string.h>

#include "hx_emu.h"

float hx_emu_fp8_to_f32(unsigned byte) {
  unsigned sign = (byte & 0x80u) << 24, e = (byte >> 3) & 0xFu, m = byte & 7u;
  unsigned u;
  float f;
  if (e == 0xF && m == 7) {
    u = sign | 0x7FC00000u;
  } else if (e == 0) {
    f = (float)m / 512.0f;  // exact
    memcpy(&u, &f, 4);
    u |= sign;
  } else {
    u = sign | ((e + 120u) << 23) | (m << 20);
  }
  memcpy(&f, &u, 4);
  return f;
}

unsigned hx_emu_f32_to_fp8(float x) {
  unsigned u;
  memcpy(&u, &x, 4);
  unsigned sign = (u >> 24) & 0x80u, mag = u & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return sign | 0x7Fu;  // NaN
  if (mag >= 0x43E00000u) return sign | 0x7Eu;  // |x| >= 448 (incl. inf): saturate
  float a;
  memcpy(&a, &mag, 4);
  if (a < 0.015625f) {  // below 2^-6: subnormal grid of 2^-9
    float q = a * 512.0f;  // exact, < 8
    unsigned i = (unsigned)q;
    float frac = q - (float)i;
    if (frac > 0.5f || (frac == 0.5f && (i & 1))) i++;
    return sign | i;  // i == 8 is exactly the smallest normal, 0x08
  }
  int e = (int)(mag >> 23) - 127;  // -6..8
  unsigned m = mag & 0x7FFFFFu, r = m >> 20, rem = m & 0xFFFFFu;
  if (rem > 0x80000u || (rem == 0x80000u && (r & 1))) r++;
  if (r == 8) {
    r = 0;
    e++;
  }
  unsigned code = ((unsigned)(e + 7) << 3) | r;
  if (code > 0x7Eu) code = 0x7Eu;  // 448 < |x| < 464 rounded up past 448
  return sign | code;
}
