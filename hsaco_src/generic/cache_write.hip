// Quantise key rows and write them into the paged cache by slot
// (hipindexer.quantize_and_cache_keys): numpy's quantize_keys + write_cache,
// bit for bit (fp8_quant.h), in either layout (paged_cache.h), every target.
//
// Work items are (token, 16-value chunk). A block owns tokens_per_block (tt)
// consecutive tokens, a power of two dividing the block chosen so that every
// thread has a chunk when D <= 16 * HX_BLOCK; thread i takes token i % tt and
// chunks i / tt, i / tt + HX_BLOCK / tt, ... of it. So all of a thread's
// chunks belong to one token (the row's amax is a max over one column of a
// shared array, after one barrier), and consecutive threads hold the same
// chunk of consecutive tokens: in the preshuffled layout 16 of them whose
// slots are 16 consecutive ones of a page store one whole 256-byte run, and
// a warp's loads take whole 32-byte sectors of 32 rows. A thread keeps its
// first chunk in registers across the barrier and reloads any further one.
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

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_quantize_and_cache(const HX_GRID_CONSTANT CacheWriteParams p) {
  HX_SHARED(hx_u32, amax, HX_BLOCK);
  const hx_i32 tid = (hx_i32)hx_thread_x();
  const hx_i32 tt = p.tokens_per_block, step = HX_BLOCK / tt, chunks = p.D / 16;
  const hx_i64 t = (hx_i64)hx_block_x() * tt + tid % tt;
  const hx_i32 c0 = tid / tt;
  const hx_i64 slot = t < p.T ? hx_slot_of(p, t) : -1;
  const bool write = slot >= 0 && slot < p.num_slots;
  if (slot != -1 && !write && c0 == 0 && p.errors) hx_atomic_or(p.errors, ERR_SLOT);

  float v[16];
  hx_u32 m = 0;
  if (write && c0 < chunks) {
    hx_load_keys16(hx_key_chunk(p, t, c0), p.dtype, v);
    m = hx_amax16_bits(v);
    for (hx_i32 c = c0 + step; c < chunks; c += step) {
      float w[16];
      hx_load_keys16(hx_key_chunk(p, t, c), p.dtype, w);
      const hx_u32 b = hx_amax16_bits(w);
      m = b > m ? b : m;
    }
  }
  amax[tid] = m;
  hx_barrier();
  if (!write || c0 >= chunks) return;
  for (hx_i32 j = tid % tt; j < HX_BLOCK; j += tt) m = amax[j] > m ? amax[j] : m;

  const float scale = hx_key_scale(m, p.power_of_two != 0);
  const float recip = hx_exact_reciprocal(scale);
  const hx_i64 block_bytes = hx_block_bytes(p.block_size, p.D);
  const bool aligned16 = block_bytes % 16 == 0;
  const hx_i32 off = (hx_i32)(slot % p.block_size);
  hx_u8* const base = p.kv_cache + slot / p.block_size * block_bytes;
  hx_store16(base + hx_key_offset(p.preshuffle, off, 16 * c0, p.D), hx_quantize16(v, scale, recip), aligned16);
  for (hx_i32 c = c0 + step; c < chunks; c += step) {
    float w[16];
    hx_load_keys16(hx_key_chunk(p, t, c), p.dtype, w);
    hx_store16(base + hx_key_offset(p.preshuffle, off, 16 * c, p.D), hx_quantize16(w, scale, recip), aligned16);
  }
  if (c0 == 0) *(float*)(base + hx_scale_offset(p.block_size, p.D, off)) = scale;
}
