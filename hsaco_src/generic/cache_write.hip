// Quantise key rows and write them into the paged cache by slot
// (hipindexer.quantize_and_cache_keys): numpy's quantize_keys + write_cache,
// bit for bit (fp8_quant.h), in either layout (paged_cache.h), every target.
//
// Work items are (token, 16-value chunk). A block owns tt = HX_BLOCK / G
// consecutive tokens, G = min(D / 16, HX_BLOCK) threads each ("the lanes of a
// token"); a thread takes one token and its chunks c0, c0 + G, c0 + 2G, ...,
// so the row's amax is a max over the token's G entries of a shared array,
// after one barrier. Which lanes share a token depends on the layout, so that
// stores land whole where the layout puts a token's bytes:
//   block-flat: a token's lanes are G adjacent threads; its row is D
//     contiguous bytes, so a warp stores whole rows (whole 128-byte lines at
//     D = 128) wherever the slots point;
//   preshuffled: a token's lanes are tt apart and adjacent threads hold the
//     same chunk of consecutive tokens, whose 16-byte pieces are contiguous in
//     a 256-byte run: 16 threads whose slots are 16 consecutive ones of a page
//     store one whole run.
// The store path is chosen once per block (a template argument), so that the
// compiler keeps the 16-byte vector store: a cache with block_size % 4 != 0
// leaves key chunks only 4-byte aligned, and a shared store sequence for both
// cases would be four word stores everywhere.
//
// Slots: slot_mapping[t] = block * block_size + offset, int64 or int32; -1
// skips the token. Any other slot outside [0, num_slots) comes from device
// memory the host never saw: it is never written through (no clamping onto
// another block) and sets error bit 1.
#include "fp8_quant.h"
#include "paged_cache.h"
#include "hx_params.h"

#define ERR_SLOT 2

HX_INLINE HX_DEV hx_i64 hx_slot_of(const CacheWriteParams& p, hx_i64 t) {
  return p.slots64 ? ((const hx_i64*)p.slots)[t] : (hx_i64)((const hx_i32*)p.slots)[t];
}

// Chunk c (16 values) of key row t: 16-byte aligned (k is, and a row is D * 2 or D * 4 bytes, D % 16 == 0).
HX_INLINE HX_DEV const void* hx_key_chunk(const CacheWriteParams& p, hx_i64 t, hx_i32 c) {
  const hx_i64 elem = p.dtype == HX_KEY_F32 ? 4 : 2;
  return (const hx_u8*)p.k + (t * p.D + 16 * (hx_i64)c) * elem;
}

template <bool kAligned16>
HX_INLINE HX_DEV void hx_store_chunk(hx_u8* dst, hx_u32x4 v) {
  if (kAligned16) {
    *(hx_u32x4*)dst = v;
  } else {
    hx_u32* w = (hx_u32*)dst;
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
  }
}

// One block's tokens. kRowLanes: a token's lanes are adjacent threads (block-flat), else tt apart (preshuffled).
template <bool kRowLanes, bool kAligned16>
HX_INLINE HX_DEV void hx_quantize_tokens(const CacheWriteParams& p, hx_u32* amax) {
  const hx_i32 tid = (hx_i32)hx_thread_x();
  const hx_i32 chunks = p.D / 16, G = chunks < HX_BLOCK ? chunks : HX_BLOCK, tt = HX_BLOCK / G;
  const hx_i32 lane_token = kRowLanes ? tid / G : tid % tt, c0 = kRowLanes ? tid % G : tid / tt;
  const bool mine = lane_token < tt && c0 < G;  // HX_BLOCK % G threads have no work
  const hx_i64 t = (hx_i64)hx_block_x() * tt + lane_token;
  const hx_i64 slot = mine && t < p.T ? hx_slot_of(p, t) : -1;
  const bool write = slot >= 0 && slot < p.num_slots;
  if (slot != -1 && !write && c0 == 0 && p.errors) hx_atomic_or(p.errors, ERR_SLOT);

  float v[16];
  hx_u32 m = 0;
  if (write) {
    hx_load_keys16(hx_key_chunk(p, t, c0), p.dtype, v);
    m = hx_amax16_bits(v);
    for (hx_i32 c = c0 + G; c < chunks; c += G) {
      float w[16];
      hx_load_keys16(hx_key_chunk(p, t, c), p.dtype, w);
      const hx_u32 b = hx_amax16_bits(w);
      m = b > m ? b : m;
    }
  }
  amax[tid] = m;
  hx_barrier();
  if (!write) return;
  for (hx_i32 j = 0; j < G; ++j) {
    const hx_u32 b = amax[kRowLanes ? lane_token * G + j : lane_token + j * tt];
    m = b > m ? b : m;
  }

  const float scale = hx_key_scale(m, p.power_of_two != 0);
  const float recip = hx_exact_reciprocal(scale);
  const hx_i32 off = (hx_i32)(slot % p.block_size);
  hx_u8* const base = p.kv_cache + slot / p.block_size * hx_block_bytes(p.block_size, p.D);
  const bool shuffled = !kRowLanes;
  hx_store_chunk<kAligned16>(base + hx_key_offset(shuffled, off, 16 * c0, p.D), hx_quantize16(v, scale, recip));
  for (hx_i32 c = c0 + G; c < chunks; c += G) {
    float w[16];
    hx_load_keys16(hx_key_chunk(p, t, c), p.dtype, w);
    hx_store_chunk<kAligned16>(base + hx_key_offset(shuffled, off, 16 * c, p.D), hx_quantize16(w, scale, recip));
  }
  if (c0 == 0) *(float*)(base + hx_scale_offset(p.block_size, p.D, off)) = scale;
}

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_quantize_and_cache(const HX_GRID_CONSTANT CacheWriteParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_u32, amax, HX_BLOCK);
  // Preshuffled needs block_size % 16 == 0, so its chunks are always 16-byte aligned (paged_cache.h).
  if (p.preshuffle) hx_quantize_tokens<false, true>(p, amax);
  else if (hx_block_bytes(p.block_size, p.D) % 16 == 0) hx_quantize_tokens<true, true>(p, amax);
  else hx_quantize_tokens<true, false>(p, amax);
}
