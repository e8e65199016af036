// One wave = two query rows x one 32-key tile of fp8 MQA logits (docs/ops.md),
// H = 32 or 64 heads (H / 32 head tiles), D = 128: the first gfx950 kernel
// on the wave primitives, small enough to prove the path end to end.
//
// Per head tile and row, C[head][token] = Q_row[32 heads x 128] . K_tile^T
// [128 x 32 tokens] is two 32x32x64 MFMAs (A = Q as [heads x D], B = K^T,
// so each lane reads a contiguous 16 bytes of one key row: no transpose).
// Lane l then holds token l % 32 for the 16 heads 8i + 4g + j (g = l / 32),
// so the head reduction is in-lane over 16 heads plus one cross-half step:
// v_permlane32_swap of (row 0 partials, row 1 partials) followed by one add
// leaves row 0's sums in lanes 0-31 and row 1's in lanes 32-63, a
// full-width store. kv_scale multiplies after the reduction (one multiply
// per key, not per head).
#include "index_math.h"
#include "hx_params.h"
#include "wave.h"

#define D 128
#define TILE_N 32

// 16 bytes of row `row` starting at byte `col` of a [rows x D] fp8 buffer: K
// index 16*g + 32*i + j of a 64-wide k-step lives at byte 16*i + j of the
// operand, so the two 16-byte halves are D offsets 16g and 16g + 32.
HX_WAVE_FN hx_v8i hx_operand(hx_rsrc r, hx_u32 row, hx_u32 k0, hx_u32 g) {
  const hx_u32 base = row * D + k0 + 16 * g;
  const hx_v4u lo = hx_buffer_load_b128(r, base, 0), hi = hx_buffer_load_b128(r, base + 32, 0);
  return hx_v8i{(int)lo.x, (int)lo.y, (int)lo.z, (int)lo.w, (int)hi.x, (int)hi.y, (int)hi.z, (int)hi.w};
}

// Sum over this lane's 16 heads (of head tile ht) of relu(C) * weight.
HX_WAVE_FN float hx_head_partial(const LogitsTileParams& p, hx_i32 m, hx_u32 ht, hx_u32 g, hx_v8i kb0, hx_v8i kb1) {
  const hx_u32 lane = hx_lane_id();
  // Q row m, head tile ht: heads ht*32 + lane % 32; 64-bit base, 32-bit offsets inside.
  const hx_rsrc qr = hx_make_buffer_rsrc(p.q + ((hx_i64)m * p.H + ht * 32) * D, 32 * D);
  hx_v16f acc = {};
  acc = hx_mfma_32x32x64_fp8(hx_operand(qr, lane % 32, 0, g), kb0, acc);
  acc = hx_mfma_32x32x64_fp8(hx_operand(qr, lane % 32, 64, g), kb1, acc);
  // acc[4i + j] is head 8i + 4g + j: weights j = 0..3 are 16 contiguous bytes.
  const hx_rsrc wr = hx_make_buffer_rsrc(p.weights + (hx_i64)m * p.H + ht * 32, 32 * 4);
  float s = 0.0f;
  for (int i = 0; i < 4; i++) {
    const hx_v4u w = hx_buffer_load_b128(wr, (8 * i + 4 * g) * 4, 0);
    s += __builtin_fmaxf(acc[4 * i + 0], 0.0f) * hx_bits_to_f32(w.x);
    s += __builtin_fmaxf(acc[4 * i + 1], 0.0f) * hx_bits_to_f32(w.y);
    s += __builtin_fmaxf(acc[4 * i + 2], 0.0f) * hx_bits_to_f32(w.z);
    s += __builtin_fmaxf(acc[4 * i + 3], 0.0f) * hx_bits_to_f32(w.w);
  }
  return s;
}

// grid = (ceil(N / 32), ceil(M / 2)), block = 64 (one wave).
HX_KERNEL HX_LAUNCH_BOUNDS(64) void hx_logits_tile(const HX_GRID_CONSTANT LogitsTileParams p) {
  const hx_u32 lane = hx_lane_id(), g = lane / 32;
  const hx_i32 n0 = (hx_i32)hx_block_x() * TILE_N;
  const hx_i32 m0 = 2 * (hx_i32)hx_block_y();
  // An odd M leaves the second row of the last wave without a row: it
  // recomputes row m0 (MFMAs need the whole wave) and stores nothing.
  const hx_i32 m1 = m0 + 1 < p.M ? m0 + 1 : m0;

  // K tile, shared by both rows and all head tiles: tokens past N read as 0.
  const hx_i32 live = hx_min_i32(p.N - n0, TILE_N);
  const hx_rsrc kr = hx_make_buffer_rsrc(p.k + (hx_i64)n0 * D, (hx_u32)live * D);
  const hx_v8i kb0 = hx_operand(kr, lane % 32, 0, g), kb1 = hx_operand(kr, lane % 32, 64, g);

  float x = 0.0f, y = 0.0f;  // row m0 / m1 partial sums for token lane % 32
  for (hx_u32 ht = 0; ht < (hx_u32)p.H / 32; ht++) {
    x += hx_head_partial(p, m0, ht, g, kb0, kb1);
    y += hx_head_partial(p, m1, ht, g, kb0, kb1);
  }
  hx_permlane32_swap(x, y);
  float v = x + y;

  const hx_i32 m = g ? m1 : m0;  // lanes 0-31: row m0, lanes 32-63: row m1
  const hx_i32 n = n0 + (hx_i32)(lane % 32);
  if (n >= p.N || (g && m0 + 1 >= p.M)) return;
  v *= p.kv_scale[n];
  const hx_range w = hx_clamp_window(p.ks[m], p.ke[m], p.N);
  const bool inside = n >= w.lo && n < w.hi;
  float* out = p.out + (hx_i64)m * p.out_stride + n;
  if (inside)
    *out = v;
  else if (p.clean)
    *out = -__builtin_inff();
}
