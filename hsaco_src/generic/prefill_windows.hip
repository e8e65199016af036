// The packed prefill windows of one chunk (hipindexer.packed_prefill_windows;
// numpy: hipindexer.cache.packed_prefill_windows). Request r has
// query_lens[r] rows, the last ones of its context_lens[r] tokens, and its
// keys sit at [K_r, K_r + context_lens[r]) of the gathered buffer, K_r the sum
// of the earlier context lengths. Its row j sees its keys up to its own
// position:
//   cu_seqlen_ks = K_r,  cu_seqlen_ke = K_r + context_lens[r] - query_lens[r] + j + 1.
// Rows are packed in request order; rows past the last request's get the
// empty window [0, 0).
//
// One thread per row. Every block scans the lengths a tile of HX_BLOCK
// requests at a time (inclusive 64-bit sums in shared memory) and each thread
// finds its request in the tile holding its row by a binary search: one
// kernel, no host sync, so a captured graph replays with new lengths.
//
// Untrusted device values: a negative length, query_lens above context_lens,
// or a window past int32 sets error bit 2; such a request counts
// max(length, 0) rows and keys, and its rows get the empty window [K_r, K_r)
// ([0, 0) past int32).
#include "platform.h"
#include "hx_params.h"

#define ERR_LENGTH 4
#define HX_I32_MAX 2147483647LL

HX_INLINE HX_DEV bool hx_malformed(hx_i32 q, hx_i32 len) { return q < 0 || len < 0 || q > len; }

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_packed_prefill_windows(const HX_GRID_CONSTANT WindowsParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_i64, rows, HX_BLOCK);  // inclusive sums of the tile's query rows
  HX_SHARED(hx_i64, keys, HX_BLOCK);  // and of its context lengths
  const hx_i32 tid = (hx_i32)hx_thread_x();
  const hx_i64 m = (hx_i64)hx_block_x() * HX_BLOCK + tid;
  hx_i64 ks = 0, ke = 0, row0 = 0, key0 = 0;  // row0, key0: rows and keys before the tile
  bool found = false, bad = false;
  for (hx_i32 start = 0; start < p.R; start += HX_BLOCK) {
    const hx_i32 i = start + tid;
    const hx_i32 q = i < p.R ? p.query_lens[i] : 0, len = i < p.R ? p.context_lens[i] : 0;
    if (i < p.R && hx_malformed(q, len) && hx_block_x() == 0 && p.errors) hx_atomic_or(p.errors, ERR_LENGTH);
    hx_barrier();  // the previous tile's sums are read
    rows[tid] = q > 0 ? q : 0;
    keys[tid] = len > 0 ? len : 0;
    for (hx_i32 d = 1; d < HX_BLOCK; d *= 2) {
      hx_barrier();
      const hx_i64 a = tid >= d ? rows[tid - d] : 0, b = tid >= d ? keys[tid - d] : 0;
      hx_barrier();
      rows[tid] += a;
      keys[tid] += b;
    }
    hx_barrier();
    if (!found && m < row0 + rows[HX_BLOCK - 1]) {
      hx_i32 lo = 0, hi = HX_BLOCK - 1;  // the first request whose rows end past m
      while (lo < hi) {
        const hx_i32 mid = (lo + hi) / 2;
        if (row0 + rows[mid] > m) hi = mid;
        else lo = mid + 1;
      }
      const hx_i64 q_end = row0 + rows[lo], k_end = key0 + keys[lo];
      const hx_i64 q_r = rows[lo] - (lo ? rows[lo - 1] : 0), len_r = keys[lo] - (lo ? keys[lo - 1] : 0);
      const hx_i64 j = m - (q_end - q_r);
      ks = k_end - len_r;
      bad = hx_malformed(p.query_lens[start + lo], p.context_lens[start + lo]);
      ke = bad ? ks : k_end - q_r + j + 1;
      found = true;
    }
    row0 += rows[HX_BLOCK - 1];
    key0 += keys[HX_BLOCK - 1];
  }
  if (m >= p.M) return;
  if (ke > HX_I32_MAX || ks > HX_I32_MAX) {
    if (p.errors) hx_atomic_or(p.errors, ERR_LENGTH);
    ks = ke = 0;
  }
  p.ks[m] = (hx_i32)ks;
  p.ke[m] = (hx_i32)ke;
}
