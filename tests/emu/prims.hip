// Test kernels for the gfx950 wave primitives: each moves per-lane operands
// from memory through one primitive and back, so the tests can compare the
// emulator with an independent numpy formulation of the documented layout.
// Also compiled for the real gfx950 (the ISA lint reads its assembly).
#include "wave.h"

struct PrimParams {
  const void* in0;
  const void* in1;
  void* out0;
  void* out1;
  hx_u32 n, x, y, z;
};

#define KERNEL(name) HX_KERNEL HX_LAUNCH_BOUNDS(64) void name(const PrimParams p)

// out0[lane][16] = mfma(A = in0[lane][32 bytes], B = in1[lane][32 bytes], C = out1[lane][16])
KERNEL(hx_t_mfma32) {
  const hx_u32 l = hx_lane_id();
  hx_v8i a = ((const hx_v8i*)p.in0)[l], b = ((const hx_v8i*)p.in1)[l];
  hx_v16f c = ((const hx_v16f*)p.out1)[l];
  ((hx_v16f*)p.out0)[l] = p.x ? hx_mfma_32x32x64_fp8_scaled(a, b, c, (int)p.x, (int)p.y) : hx_mfma_32x32x64_fp8(a, b, c);
}

KERNEL(hx_t_mfma16) {
  const hx_u32 l = hx_lane_id();
  hx_v8i a = ((const hx_v8i*)p.in0)[l], b = ((const hx_v8i*)p.in1)[l];
  hx_v4f c = ((const hx_v4f*)p.out1)[l];
  ((hx_v4f*)p.out0)[l] = hx_mfma_16x16x128_fp8(a, b, c);
}

// x = in0[lane], y = in0[64 + lane] -> out0[lane] = x', out0[64 + lane] = y'
KERNEL(hx_t_permlane) {
  const hx_u32 l = hx_lane_id();
  float x = ((const float*)p.in0)[l], y = ((const float*)p.in0)[64 + l];
  hx_permlane32_swap(x, y);
  ((float*)p.out0)[l] = x;
  ((float*)p.out0)[64 + l] = y;
}

// As hx_t_permlane, through hx_permlane16_swap.
KERNEL(hx_t_permlane16) {
  const hx_u32 l = hx_lane_id();
  float x = ((const float*)p.in0)[l], y = ((const float*)p.in0)[64 + l];
  hx_permlane16_swap(x, y);
  ((float*)p.out0)[l] = x;
  ((float*)p.out0)[64 + l] = y;
}

// out0[lane] = readlane(in0[lane], x): every lane gets lane x's value.
KERNEL(hx_t_readlane) {
  const hx_u32 l = hx_lane_id();
  ((hx_u32*)p.out0)[l] = hx_readlane(((const hx_u32*)p.in0)[l], p.x);
}

// out0[2 lane, 2 lane + 1] = the ballot of in0[lane] != 0 (low, high word); out1[lane] = the lane's place in it.
KERNEL(hx_t_ballot) {
  const hx_u32 l = hx_lane_id();
  const hx_u64 m = hx_ballot(((const hx_u32*)p.in0)[l] != 0u);
  ((hx_u32*)p.out0)[2 * l] = (hx_u32)m;
  ((hx_u32*)p.out0)[2 * l + 1] = (hx_u32)(m >> 32);
  ((hx_u32*)p.out1)[l] = hx_lanes_below(m);
}

// Lane l gathers x bytes (4 or 16) from in0 + in1[l] (a byte offset; lanes whose offset is ~0 load nothing)
// into out0[16 l ..].
KERNEL(hx_t_gather) {
  const hx_u32 l = hx_lane_id();
  const hx_u32 off = ((const hx_u32*)p.in1)[l];
  hx_u32* o = (hx_u32*)p.out0 + 4 * l;
  if (off == ~0u) return;
  const void* src = (const hx_u8*)p.in0 + off;
  if (p.x == 4) {
    o[0] = hx_global_load_b32(src);
  } else {
    const hx_v4u v = hx_global_load_b128(src);
    o[0] = v.x;
    o[1] = v.y;
    o[2] = v.z;
    o[3] = v.w;
  }
}

// out0[lane] = the scalar load of in0 word x (word x + lane when y = 1: not wave-uniform, an error).
KERNEL(hx_t_scalar) {
  const hx_u32 l = hx_lane_id();
  ((hx_u32*)p.out0)[l] = hx_scalar_load_b32((const hx_u32*)p.in0 + p.x + (p.y ? l : 0));
}

// out0[0:64] = shfl_xor(in, x); [64:128] = shfl(in, in1[lane]); [128:192] = readfirstlane;
// [192:256] = wave_sum(in, y)
KERNEL(hx_t_shfl) {
  const hx_u32 l = hx_lane_id();
  const float v = ((const float*)p.in0)[l];
  float* o = (float*)p.out0;
  o[l] = hx_shfl_xor(v, p.x);
  o[64 + l] = hx_shfl(v, ((const hx_u32*)p.in1)[l]);
  o[128 + l] = hx_bits_to_f32(hx_readfirstlane(hx_f32_to_bits(v)));
  o[192 + l] = hx_wave_sum(v, p.y);
}

// Lane l loads x bytes (4/8/16) at voffset in1[l], soffset y, from a buffer of
// n bytes over in0, into out0[16 l ..]; with z = 1 it stores out1[16 l ..]
// into the buffer at the same place instead.
KERNEL(hx_t_buffer) {
  const hx_u32 l = hx_lane_id();
  const hx_rsrc r = hx_make_buffer_rsrc(p.in0, p.n);
  const hx_u32 vo = ((const hx_u32*)p.in1)[l];
  hx_u32* o = (hx_u32*)p.out0 + 4 * l;
  const hx_u32* s = (const hx_u32*)p.out1 + 4 * l;
  if (p.z) {
    if (p.x == 4) hx_buffer_store_b32(r, vo, p.y, s[0]);
    if (p.x == 8) hx_buffer_store_b64(r, vo, p.y, hx_v2u{s[0], s[1]});
    if (p.x == 16) hx_buffer_store_b128(r, vo, p.y, hx_v4u{s[0], s[1], s[2], s[3]});
    return;
  }
  if (p.x == 4) o[0] = hx_buffer_load_b32(r, vo, p.y);
  if (p.x == 8) {
    hx_v2u v = hx_buffer_load_b64(r, vo, p.y);
    o[0] = v.x;
    o[1] = v.y;
  }
  if (p.x == 16) {
    hx_v4u v = hx_buffer_load_b128(r, vo, p.y);
    o[0] = v.x;
    o[1] = v.y;
    o[2] = v.z;
    o[3] = v.w;
  }
}

// fp8 -> f32 of in0's n bytes into out0 (floats); f32 -> fp8 of in1's n floats into out1 (bytes).
KERNEL(hx_t_fp8) {
  const hx_u32 l = hx_lane_id();
  for (hx_u32 i = l; i < p.n; i += 64) {
    const hx_u32 word = ((const hx_u32*)p.in0)[i / 4];
    ((float*)p.out0)[i] = hx_fp8_to_f32(word, (int)(i % 4));
    ((hx_u8*)p.out1)[i] = hx_f32_to_fp8(((const float*)p.in1)[i]);
  }
}

// Each lane moves x bytes (4 or 16) of in0 into LDS (at lane * x), waits
// unless y == 1, then lane l copies LDS bytes [16 l, 16 l + 16) to out0.
KERNEL(hx_t_lds) {
  HX_SHARED(hx_u32, tile, 256);
  const hx_u32 l = hx_lane_id();
  const hx_rsrc r = hx_make_buffer_rsrc(p.in0, p.n);
  if (p.x == 16)
    hx_lds_load_b128(r, tile, l * 16, 0);
  else
    hx_lds_load_b32(r, tile, l * 4, 0);
  if (p.y != 1) hx_lds_load_wait();
  hx_workgroup_barrier();
  for (int i = 0; i < 4; i++) ((hx_u32*)p.out0)[4 * l + i] = tile[4 * l + i];
}

// Lane l's 16 bytes of in0 go to LDS, then x buffer stores (one word a lane of
// out1; z == 1: lane 5 issues one more), then a wait by count: vmcnt(1) when
// y == 1, vmcnt(2) when y == 2; then lane l copies LDS bytes [16 l, +16) to
// out0. The DMA has landed only when at least y stores follow it.
KERNEL(hx_t_lds_count) {
  HX_SHARED(hx_u32, tile, 256);
  const hx_u32 l = hx_lane_id();
  hx_lds_load_b128(hx_make_buffer_rsrc(p.in0, p.n), tile, l * 16, 0);
  const hx_rsrc o = hx_make_buffer_rsrc(p.out1, 256);
  for (hx_u32 i = 0; i < p.x; i++) hx_buffer_store_b32(o, 4 * l, 0, i);
  if (p.z == 1 && l == 5) hx_buffer_store_b32(o, 4 * l, 0, 99);
  if (p.y == 1)
    hx_lds_load_wait_count<1>();
  else
    hx_lds_load_wait_count<2>();
  hx_workgroup_barrier();
  for (int i = 0; i < 4; i++) ((hx_u32*)p.out0)[4 * l + i] = tile[4 * l + i];
}

// out0[lane] = hx_pk_mul_clamp01(in0[lane], {in1[0], in1[1]}) (two floats a lane)
KERNEL(hx_t_pk_clamp) {
  const hx_u32 l = hx_lane_id();
  const float* s = (const float*)p.in1;
  ((hx_v2f*)p.out0)[l] = hx_pk_mul_clamp01(((const hx_v2f*)p.in0)[l], hx_v2f{s[0], s[1]});
}

// Misuse the emulator must catch: x = 1: lanes 0-31 and 32-63 reach different
// primitives; x = 2: lane 5 exits before a primitive the others reach; x = 3:
// lanes disagree on the iteration count of a loop holding a primitive.
KERNEL(hx_t_misuse) {
  const hx_u32 l = hx_lane_id();
  float v = (float)l;
  if (p.x == 1) {
    if (l < 32)
      v = hx_shfl_xor(v, 1);
    else
      v = hx_shfl(v, 0);
  }
  if (p.x == 2) {
    if (l == 5) return;
    v = hx_shfl_xor(v, 1);
  }
  if (p.x == 3) {
    for (hx_u32 i = 0; i < (l == 7 ? 2u : 1u); i++) v = hx_shfl_xor(v, 1);
  }
  ((float*)p.out0)[l] = v;
}

// Reads in0[n] (4 bytes) with a plain load: past the end of an n-float allocation.
KERNEL(hx_t_stray) {
  if (hx_lane_id() == 0) ((float*)p.out0)[0] = ((const float*)p.in0)[p.n];
}

// Lane 0 of each workgroup appends its block id to out0 (counter in out1):
// the emulator runs workgroups one at a time, in a seeded random order.
KERNEL(hx_t_order) {
  if (hx_lane_id() == 0) {
    hx_u32* count = (hx_u32*)p.out1;
    ((hx_u32*)p.out0)[(*count)++] = hx_block_x();
  }
}

// Reads a local array nobody wrote: the emulator's locals are pattern-initialised (NaN floats).
KERNEL(hx_t_uninit) {
  float u[4];
  ((float*)p.out0)[hx_lane_id()] = u[hx_lane_id() % p.n];
}
