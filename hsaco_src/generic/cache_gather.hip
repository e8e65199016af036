// Gather requests' keys and scales out of the paged cache into the contiguous
// [N, D] fp8 + [N] float32 buffers the prefill op takes
// (hipindexer.gather_cached_keys): rows cu_seq_lens[r] .. cu_seq_lens[r + 1] - 1
// are request r's first tokens, read through block_tables[r]; numpy's
// gather_keys of each request, concatenated, bit for bit. Either layout
// (paged_cache.h); rows come out token-major.
//
// One thread per (row, 16-byte chunk), row-major: the threads of a row write
// it whole and the next row follows, and in the preshuffled layout two
// neighbouring tokens' chunks are one 32-byte sector. A thread finds its
// request by a binary search of cu_seq_lens (R + 1 entries that every thread
// reads, so they stay cached).
//
// Untrusted device values: a block id outside [0, num_blocks) is never read
// through; its rows come out zero (key bytes 0, scale 0: a key that adds 0 to
// every logit) and error bit 0 is set. cu_seq_lens that decrease, start below
// 0 or end past N, or a request longer than its block-table row holds, set
// bit 2; rows past the table's width come out zero too. Rows outside
// [cu_seq_lens[0], cu_seq_lens[R]) are not written.
#include "paged_cache.h"
#include "hx_params.h"

#define ERR_BLOCK_ID 1
#define ERR_LENGTH 4

HX_INLINE HX_DEV void hx_flag(const CacheGatherParams& p, hx_i32 bit) {
  if (p.errors) hx_atomic_or(p.errors, bit);
}

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_gather_cached_keys(const HX_GRID_CONSTANT CacheGatherParams p) {
  hx_grid_dependency_wait();
  const hx_i32 chunks = p.D / 16;
  const hx_i64 w = (hx_i64)hx_block_x() * HX_BLOCK + hx_thread_x();
  const hx_i32* const cu = p.cu_seq_lens;

  // The checks no row may see: every adjacent pair, the first and the last entry.
  const hx_i64 threads = (hx_i64)hx_grid_dim_x() * HX_BLOCK;
  for (hx_i64 i = w; i < p.R; i += threads)
    if (cu[i] > cu[i + 1]) hx_flag(p, ERR_LENGTH);
  if (w == 0 && (cu[0] < 0 || cu[p.R] > p.N)) hx_flag(p, ERR_LENGTH);

  const hx_i64 n = w / chunks;
  const hx_i32 c = (hx_i32)(w % chunks);
  if (n >= p.N || p.R == 0 || n < cu[0] || n >= cu[p.R]) return;
  hx_i32 lo = 0, hi = p.R - 1;  // the last request r with cu[r] <= n
  while (lo < hi) {
    const hx_i32 mid = lo + (hi - lo + 1) / 2;
    if (cu[mid] <= n) lo = mid;
    else hi = mid - 1;
  }
  const hx_i32 r = lo;
  if (n >= cu[r + 1]) return;  // cu_seq_lens out of order (flagged above): no request owns the row

  const hx_i64 token = n - cu[r];
  const hx_i64 j = token / p.block_size;
  const hx_i32 off = (hx_i32)(token % p.block_size);
  hx_u8* const dst = p.out_k + n * p.D + 16 * c;
  hx_i64 block = -1;
  if (j >= p.max_blocks) {
    if (c == 0) hx_flag(p, ERR_LENGTH);
  } else {
    block = p.block_tables[(hx_i64)r * p.max_blocks + j];
    if ((block < 0 || block >= p.num_blocks) && c == 0) hx_flag(p, ERR_BLOCK_ID);
  }
  if (block < 0 || block >= p.num_blocks) {
    const hx_u32x4 zero = {0u, 0u, 0u, 0u};
    *(hx_u32x4*)dst = zero;
    if (c == 0) ((hx_u32*)p.out_scale)[n] = 0u;
    return;
  }
  const hx_i64 block_bytes = hx_block_bytes(p.block_size, p.D);
  const hx_u8* const base = p.kv_cache + block * block_bytes;
  *(hx_u32x4*)dst = hx_load16(base + hx_key_offset(p.preshuffle, off, 16 * c, p.D), block_bytes % 16 == 0);
  // The scale's bits, copied as an integer: whatever the cache holds arrives unchanged.
  if (c == 0) ((hx_u32*)p.out_scale)[n] = *(const hx_u32*)(base + hx_scale_offset(p.block_size, p.D, off));
}
