// Byte layout of the paged indexer K cache, shared by every
// kernel that reads or writes it. A physical block of block_size tokens is
// block_size * D fp8 key bytes, then block_size float32 scales; its keys are
// token-major (block-flat) or in the 16x16 preshuffled order. Offsets are
// 64-bit: pools past 4 GiB are real (block id * block bytes overflows 32 bits).
#pragma once
#include "platform.h"

// Bytes of one physical block: block_size * (D + 4). A multiple of 16 (so
// every key chunk of every block is 16-byte aligned) iff block_size % 4 == 0.
HX_INLINE HX_HD hx_i64 hx_block_bytes(hx_i32 block_size, hx_i32 D) { return (hx_i64)block_size * (D + 4); }

// The cache slot of key n of a sequence whose block-table row is `table` (max_blocks columns): the block id of
// n's column times block_size plus n % block_size. -1 for n < 0, and for a column past the row or a block id outside
// [0, num_blocks): a decode top-k selects only keys whose logits were computed, so both exist, but the table is
// only the device's and is checked anyway. The op keeps num_blocks * block_size within int32.
HX_INLINE HX_HD hx_i32 hx_cache_slot(const hx_i32* table, hx_i32 max_blocks, hx_i32 block_size, hx_i64 num_blocks,
                                     hx_i64 n) {
  const hx_i64 col = n >= 0 ? n / block_size : 0;
  const hx_i64 id = n >= 0 && col < max_blocks ? (hx_i64)table[col] : -1;
  return id >= 0 && id < num_blocks ? (hx_i32)(id * block_size + n % block_size) : -1;
}

// Offset of key byte d of in-block token t, block-flat: token t's key at t * D.
HX_INLINE HX_HD hx_i64 hx_flat_key_offset(hx_i32 t, hx_i32 d, hx_i32 D) { return (hx_i64)t * D + d; }

// Offset of key byte d of in-block token t, preshuffled (block_size % 16 == 0,
// D % 16 == 0): each group of 16 tokens is a 16 * D-byte tile of D / 16 chunks
// of 256 bytes, chunk j holding bytes [16j, 16j + 16) of the 16 tokens,
// token-major, so 16 lanes reading one chunk of 16 consecutive tokens touch
// 256 contiguous bytes.
HX_INLINE HX_HD hx_i64 hx_preshuffled_key_offset(hx_i32 t, hx_i32 d, hx_i32 D) {
  return (hx_i64)(t / 16) * (16 * D) + (d / 16) * 256 + (t % 16) * 16 + d % 16;
}

HX_INLINE HX_HD hx_i64 hx_key_offset(bool preshuffled, hx_i32 t, hx_i32 d, hx_i32 D) {
  return preshuffled ? hx_preshuffled_key_offset(t, d, D) : hx_flat_key_offset(t, d, D);
}

// Offset of in-block token t's float32 scale: after the block's key section, in both layouts.
HX_INLINE HX_HD hx_i64 hx_scale_offset(hx_i32 block_size, hx_i32 D, hx_i32 t) {
  return (hx_i64)block_size * D + 4 * (hx_i64)t;
}

// 16 key bytes at p: one vector load when the layout keeps them 16-byte
// aligned (block_size % 4 == 0, see hx_block_bytes), else four words (every
// key chunk is 4-byte aligned in any layout of a 4-byte-aligned cache).
HX_INLINE HX_HD hx_u32x4 hx_load16(const hx_u8* p, bool aligned16) {
  if (aligned16) return *(const hx_u32x4*)p;
  const hx_u32* w = (const hx_u32*)p;
  hx_u32x4 v = {w[0], w[1], w[2], w[3]};
  return v;
}
