// Hopper (sm_90a) primitives as inline PTX, freestanding: the only way sm_90a kernels reach the hardware's
// synchronisation, copy and tensor-core instructions. Each says what it guarantees.
//
// Conventions. Shared-memory operands are 32-bit shared addresses (hx_smem_u32). "Async proxy" is the path
// through which wgmma reads its shared operands and TMA / bulk copies write theirs; st.shared, ld.shared and
// cp.async are the generic proxy: data crossing from one to the other needs hx_fence_proxy_async, except where
// a primitive below says an mbarrier orders it. A warpgroup is 4 consecutive warps starting at a multiple of
// 128 threads; primitives marked "warpgroup" must be reached by all its 128 threads, unpredicated, and (wgmma)
// on a path ptxas sees as convergent: a branch the compiler emits while a wgmma is in flight makes ptxas
// serialise every wgmma of the kernel (build.py fails the build on that warning).
#pragma once
#include "platform.h"
#include "index_math.h"

#if !defined(HX_NVIDIA)
#error "hopper.h is sm_90a device code"
#endif

// ---------------------------------------------------------------- ids, uniform values, shuffles
HX_INLINE __device__ hx_u32 hx_smem_u32(const void* p) { return (hx_u32)__cvta_generic_to_shared(p); }
// *addr += v on a shared word, returning the old value.
HX_INLINE __device__ hx_u32 hx_atom_add_shared_u32(hx_u32 addr, hx_u32 v) {
  hx_u32 old;
  asm volatile("atom.shared.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(addr), "r"(v) : "memory");
  return old;
}

// Lane 0's value for the whole warp: the compiler then knows it is warp-uniform and keeps what derives from it
// (wgmma descriptors, loop bounds, barrier addresses) in uniform registers instead of per-lane ones.
HX_INLINE __device__ hx_i32 hx_uniform_i32(hx_i32 v) {
  hx_i32 r;
  asm volatile("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v));
  return r;
}
// The lane index, read afresh at each use (volatile): a lane-derived value kept live across a math loop is what
// ptxas spills first.
HX_INLINE __device__ hx_u32 hx_lane_reread() {
  hx_u32 l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}
HX_INLINE __device__ float hx_shfl_xor(float v, int m) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(m));
  return r;
}
HX_INLINE __device__ hx_i32 hx_shfl_xor_i32(hx_i32 v, int m) {
  hx_i32 r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(m));
  return r;
}
// Element x of a fold across the lane pair that differs in lane bit `bit`: each lane holds 2n sums, keeps v[x + n]
// (bit set) or v[x] (bit clear) and adds its partner's other half. Folds over bits 1 and 2 reduce a quad's sums.
HX_INLINE __device__ float hx_pair_fold(const float* v, int n, int x, hx_i32 upper, int bit) {
  const float send = upper ? v[x] : v[x + n];
  const float keep = upper ? v[x + n] : v[x];
  return keep + hx_shfl_xor(send, bit);
}
// Lane src's value, every lane of the warp taking part.
HX_INLINE __device__ hx_i32 hx_shfl_idx_i32(hx_i32 v, hx_i32 src) {
  hx_i32 r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(src));
  return r;
}
HX_INLINE __device__ hx_i64 hx_shfl_idx_i64(hx_i64 v, hx_i32 src) {
  const hx_u64 u = (hx_u64)v;
  const hx_u32 lo = (hx_u32)hx_shfl_idx_i32((hx_i32)(hx_u32)u, src), hi = (hx_u32)hx_shfl_idx_i32((hx_i32)(hx_u32)(u >> 32), src);
  return (hx_i64)(((hx_u64)hi << 32) | lo);
}
// Lane l - d's value (lanes below d keep their own).
HX_INLINE __device__ hx_i64 hx_shfl_up_i64(hx_i64 v, hx_i32 d) {
  const hx_u64 u = (hx_u64)v;
  hx_u32 lo, hi;
  asm volatile("shfl.sync.up.b32 %0, %1, %2, 0, 0xffffffff;" : "=r"(lo) : "r"((hx_u32)u), "r"(d));
  asm volatile("shfl.sync.up.b32 %0, %1, %2, 0, 0xffffffff;" : "=r"(hi) : "r"((hx_u32)(u >> 32)), "r"(d));
  return (hx_i64)(((hx_u64)hi << 32) | lo);
}
// Bit l set where lane l's p holds, every lane of the warp taking part.
HX_INLINE __device__ hx_u32 hx_ballot(bool p) {
  hx_u32 r;
  asm volatile("{ .reg .pred q; setp.ne.u32 q, %1, 0; vote.sync.ballot.b32 %0, q, 0xffffffff; }" : "=r"(r) : "r"((hx_u32)p));
  return r;
}

// Calls f(hx_int<0>{}), ..., f(hx_int<N - 1>{}) in order: the index is a constant expression inside f, so it can
// be an immediate operand ("n") of inline PTX, which a `#pragma unroll` loop index cannot.
template <int I>
struct hx_int {
  static constexpr int value = I;
  __device__ constexpr operator int() const { return I; }
};
template <int I, int N, class F>
HX_INLINE __device__ void hx_static_for_from(F& f) {
  if constexpr (I < N) {
    f(hx_int<I>{});
    hx_static_for_from<I + 1, N>(f);
  }
}
template <int N, class F>
HX_INLINE __device__ void hx_static_for(F&& f) { hx_static_for_from<0, N>(f); }

// ---------------------------------------------------------------- clusters
// A kernel declared with a cluster shape runs its blocks in clusters of that many, co-scheduled on one GPC; each
// block reads the others' shared memory (distributed shared memory) by a shared::cluster address. A block must not
// exit while another may still read its shared memory: it meets the cluster (hx_cluster_sync) after its last read.

// This block's rank in its cluster, its cluster's index in the grid, and the grid's count of clusters (x only).
HX_INLINE __device__ hx_u32 hx_cluster_rank() {
  hx_u32 r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
HX_INLINE __device__ hx_u32 hx_cluster_id_x() {
  hx_u32 r;
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
HX_INLINE __device__ hx_u32 hx_clusters_x() {
  hx_u32 r;
  asm("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster meets (so the block's own threads too): what each wrote to shared
// memory before it (release) is visible to every reader in the cluster after it (acquire).
HX_INLINE __device__ void hx_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The shared::cluster address of the word at shared address `addr` (hx_smem_u32) in the block of rank `rank`: the
// same offset in that block's shared memory, so offsets added to it stay within the block.
HX_INLINE __device__ hx_u32 hx_cluster_map(hx_u32 addr, hx_u32 rank) {
  hx_u32 r;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
HX_INLINE __device__ hx_u32 hx_cluster_load_u32(hx_u32 addr) {
  hx_u32 v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
HX_INLINE __device__ hx_u32x4 hx_cluster_load_u32x4(hx_u32 addr) {
  hx_u32x4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr) : "memory");
  return v;
}
HX_INLINE __device__ void hx_cluster_store_u32x4(hx_u32 addr, const hx_u32x4& v) {
  asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
HX_INLINE __device__ void hx_cluster_store_u64(hx_u32 addr, hx_u64 v) {
  asm volatile("st.shared::cluster.u64 [%0], %1;" :: "r"(addr), "l"(v) : "memory");
}

// ---------------------------------------------------------------- mbarriers
// An mbarrier (8 bytes of shared memory) completes a phase when its pending arrivals reach zero and its
// expected transaction bytes have all landed; it then re-arms with the count it was initialised with. Phase k
// has parity k & 1; a fresh barrier counts as having completed the phase before phase 0 (parity 1). Waiting
// on a completed phase acquires what every arriving thread and every completed transaction wrote before it.

// One thread, before any other use; the CTA then meets (hx_barrier) before anyone waits or arrives.
HX_INLINE __device__ void hx_mbar_init(hx_u32 bar, hx_u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
// After the inits and before the CTA barrier, where the async proxy (TMA / bulk copies) completes transactions
// on these barriers: makes the initialised state visible to it.
HX_INLINE __device__ void hx_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
}
// One arrival (release: this thread's earlier writes are visible to whoever waits on the phase).
HX_INLINE __device__ void hx_mbar_arrive(hx_u32 bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" :: "r"(bar) : "memory");
}
// One arrival that also adds `bytes` to the phase's expected transaction count: the phase cannot complete
// before that many bytes of copies naming this barrier (hx_bulk_g2s, hx_tma_load_*) have landed.
HX_INLINE __device__ void hx_mbar_arrive_expect_tx(hx_u32 bar, hx_u32 bytes) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" :: "r"(bar), "r"(bytes)
               : "memory");
}
// Adds `bytes` to the current phase's expected transactions without arriving.
HX_INLINE __device__ void hx_mbar_expect_tx(hx_u32 bar, hx_u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
// Arrives once every cp.async this thread issued so far has landed (the barrier's count includes these
// arrivals: noinc); its phase then makes those bytes visible to the waiters, in the generic proxy.
HX_INLINE __device__ void hx_cp_async_arrive(hx_u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(bar) : "memory");
}
// Whether the phase of this parity has completed, without blocking.
HX_INLINE __device__ bool hx_mbar_test(hx_u32 bar, hx_u32 parity) {
  hx_u32 ok;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}
// Blocks until the phase of this parity has completed. The retry loop lives inside the asm: a loop the
// compiler sees is a divergent path to ptxas, which then serialises any wgmma in flight across it.
HX_INLINE __device__ void hx_mbar_wait(hx_u32 bar, hx_u32 parity) {
  asm volatile(
      "{\n.reg .pred p;\nHX_MBAR_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra HX_MBAR_WAIT_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}

// ---------------------------------------------------------------- pipeline rings
// S stages of a buffer ring, each guarded by two mbarriers: full[s] completes a phase once stage s holds the
// producer's data, empty[s] once every consumer has released it. Use `it` of the ring (its it-th fill) is
// stage it % S in phase it / S; the producer's first pass finds every empty[s] completed (the fresh
// barrier's previous phase), so it never waits before the ring has wrapped.

// A place in a ring as (stage, parity) instead of a use count: what a consumer's loop carries in two uniform
// registers without a division.
template <int S>
struct hx_ring_pos {
  hx_u32 slot = 0, phase = 0;
  __device__ void next() {
    const bool wrap = slot == S - 1;
    slot = wrap ? 0 : slot + 1;
    phase ^= wrap;
  }
};

template <int S>
struct hx_ring {
  hx_u32 full, empty;  // shared addresses of full[0] and empty[0]: S consecutive 8-byte mbarriers each

  // One thread: full[s] completes after `producers` arrivals (plus any expected bytes), empty[s] after `consumers`.
  __device__ void init(hx_u32 producers, hx_u32 consumers) const {
    for (int s = 0; s < S; ++s) { hx_mbar_init(full + 8 * s, producers); hx_mbar_init(empty + 8 * s, consumers); }
  }
  __device__ static hx_u32 slot(hx_u32 it) { return it % S; }
  __device__ hx_u32 full_at(hx_u32 s) const { return full + 8 * s; }
  __device__ hx_u32 empty_at(hx_u32 s) const { return empty + 8 * s; }

  // Producer: wait until every consumer has released use it - S of the stage (at once in the first pass).
  __device__ void wait_empty(hx_u32 it) const { hx_mbar_wait(empty_at(it % S), ((it / S) & 1) ^ 1); }
  __device__ bool test_empty(hx_u32 it) const { return hx_mbar_test(empty_at(it % S), ((it / S) & 1) ^ 1); }
  // Producer: this thread's share of use it is in place (the writer fenced what wgmma reads).
  __device__ void arrive_full(hx_u32 it) const { hx_mbar_arrive(full_at(it % S)); }
  // Producer of bulk / tensor copies: arrives and expects `bytes` of copies completing on full_at(slot(it)).
  __device__ void arrive_full_expect_tx(hx_u32 it, hx_u32 bytes) const {
    hx_mbar_arrive_expect_tx(full_at(it % S), bytes);
  }
  // Producer at a place: wait until the stage's previous use is released; this thread's share is in place.
  __device__ void wait_empty(const hx_ring_pos<S>& at) const { hx_mbar_wait(empty_at(at.slot), at.phase ^ 1u); }
  __device__ void arrive_full(const hx_ring_pos<S>& at) const { hx_mbar_arrive(full_at(at.slot)); }
  // Consumer: wait until use it (or the stage at a place) is in place; release it when done reading.
  __device__ void wait_full(hx_u32 it) const { hx_mbar_wait(full_at(it % S), (it / S) & 1); }
  __device__ void arrive_empty(hx_u32 it) const { hx_mbar_arrive(empty_at(it % S)); }
  __device__ void wait_full(const hx_ring_pos<S>& at) const { hx_mbar_wait(full_at(at.slot), at.phase); }
  __device__ void arrive_empty(const hx_ring_pos<S>& at) const { hx_mbar_arrive(empty_at(at.slot)); }
};

// ---------------------------------------------------------------- cp.async (generic proxy)
// 16 bytes global -> shared through L2 only; src_bytes 0 writes zeros (and reads nothing).
HX_INLINE __device__ void hx_cp_async16(hx_u32 dst, const void* src, hx_u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// The same copy at a compile-time byte offset from both addresses: one base register pair serves a whole
// unrolled tile ([reg + imm] addressing), where per-copy 64-bit address arithmetic made every copy wait for the
// previous one to release its address registers.
template <int OFF>
HX_INLINE __device__ void hx_cp_async16_at(hx_u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0+%2], [%1+%2], 16;" :: "r"(dst), "l"(src), "n"(OFF) : "memory");
}
// 4 bytes; src_bytes 0 writes zeros.
HX_INLINE __device__ void hx_cp_async4(hx_u32 dst, const void* src, hx_u32 src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// 4 bytes at compile-time offsets (one each side) from two base addresses.
template <int DOFF, int SOFF>
HX_INLINE __device__ void hx_cp_async4_at(hx_u32 dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0+%2], [%1+%3], 4;" :: "r"(dst), "l"(src), "n"(DOFF), "n"(SOFF) : "memory");
}
// Groups of this thread's copies: commit closes one; wait<N> returns once at most N are still in flight
// (groups complete in order) and this thread can read what the others wrote.
HX_INLINE __device__ void hx_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
HX_INLINE __device__ void hx_cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

// The 128-byte swizzle of a K-major tile (rows of 128 bytes, 8-row atoms of 1024 bytes, the tile base
// 1024-aligned): 16-byte chunk c of row r is stored at chunk c ^ (r % 8). This offset, in bytes.
HX_INLINE __device__ hx_u32 hx_sw128_offset(hx_u32 r, hx_u32 c) { return r * 128u + ((c ^ (r & 7u)) << 4); }

// A whole [ROWS][128 B] tile from contiguous global rows into the 128-byte swizzle, by one warp: one cp.async
// per 16 bytes at fixed offsets from two base addresses. Lane l copies chunk c = l % 8 of rows r0 + 4i
// (r0 = l / 8); the swizzle XORs c with (r0 + 4i) % 8, which is r0 for even i and r0 + 4 for odd i.
template <int ROWS>
HX_INLINE __device__ void hx_copy_tile_sw128(hx_u32 dst, const hx_u8* src, hx_u32 lane) {
  static_assert(ROWS % 4 == 0, "a warp copies four rows per step");
  const hx_u32 r0 = lane >> 3, c = lane & 7u;
  const hx_u32 even = dst + r0 * 128u + ((c ^ r0) << 4), odd = dst + r0 * 128u + ((c ^ r0 ^ 4u) << 4);
  const hx_u8* s = src + r0 * 128u + c * 16u;
  hx_static_for<ROWS / 4>([&](auto i) { hx_cp_async16_at<512 * i>((i & 1) ? odd : even, s); });
}
// Rows [row0, row0 + ROWS) of a tensor of `rows` 128-byte rows at `base` as such a tile, by one warp: rows at
// or past `rows` are written as zeros, their copies naming `base` and reading nothing (no address past the
// tensor is formed). A tail path: per-copy addresses, UNROLL copies per loop iteration.
template <int ROWS, int UNROLL>
HX_INLINE __device__ void hx_copy_tile_sw128_rows(hx_u32 dst, const hx_u8* base, hx_i32 row0, hx_i32 rows,
                                                  hx_u32 lane) {
#pragma unroll UNROLL
  for (int i = 0; i < ROWS * 8 / 32; ++i) {
    const hx_i32 idx = (hx_i32)lane + 32 * i, r = idx >> 3, c = idx & 7;
    const bool ok = row0 + r < rows;
    hx_cp_async16(dst + hx_sw128_offset(r, c), base + (ok ? (hx_i64)(row0 + r) * 128 + c * 16 : 0), ok ? 16 : 0);
  }
}

// ---------------------------------------------------------------- bulk and tensor copies (async proxy)
// `bytes` (a multiple of 16; both addresses 16-aligned) global -> shared by the TMA unit, one thread issuing;
// the bytes count as transactions on `bar`, so the phase that expects them (hx_mbar_arrive_expect_tx) completes
// only once they have landed, and its waiters see them (no proxy fence needed for wgmma or ld.shared reads).
HX_INLINE __device__ void hx_bulk_g2s(hx_u32 dst, const void* src, hx_u32 bytes, hx_u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// A box of a tensor described by a CUtensorMap (128 bytes, 64-aligned; a __grid_constant__ kernel parameter
// or global memory, its generic address here) at element coordinates {c0, c1(, c2)}, into shared memory in the
// map's swizzle; out-of-bounds elements are written as zeros. The same transaction accounting as hx_bulk_g2s.
HX_INLINE __device__ void hx_tma_load_2d(hx_u32 dst, const void* map, hx_i32 c0, hx_i32 c1, hx_u32 bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
HX_INLINE __device__ void hx_tma_load_3d(hx_u32 dst, const void* map, hx_i32 c0, hx_i32 c1, hx_i32 c2, hx_u32 bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
HX_INLINE __device__ void hx_tma_load_5d(hx_u32 dst, const void* map, hx_i32 c0, hx_i32 c1, hx_i32 c2, hx_i32 c3,
                                         hx_i32 c4, hx_u32 bar) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
               :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar) : "memory");
}
// Brings a tensor map into the TMA unit's descriptor cache ahead of its first use.
// Brings the line holding `p` into the L2, nothing into registers (no wait).
HX_INLINE __device__ void hx_prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }
HX_INLINE __device__ void hx_tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory");
}

// Orders this thread's earlier generic-proxy shared-memory writes (st.shared, landed cp.async) before its later
// async-proxy accesses (wgmma operand reads, bulk copies): the fence between writing an operand and publishing it.
HX_INLINE __device__ void hx_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---------------------------------------------------------------- global stores
// -inf over columns [a, b) of a row by nt threads (thread t): 16-byte stores where the row allows.
HX_INLINE __device__ void hx_fill_neg_inf(float* row, hx_i32 a, hx_i32 b, hx_i32 t, hx_i32 nt) {
  if (b <= a) return;
  const float ninf = hx_bits_to_f32(0xFF800000u);
  const hx_i32 mis = (hx_i32)(((hx_u64)(row + a) >> 2) & 3u);
  const hx_i32 head = hx_min_i32((4 - mis) & 3, b - a);
  if (t < head) row[a + t] = ninf;
  const hx_i32 v0 = a + head, nv = (b - v0) >> 2;
  hx_f32x4* vp = (hx_f32x4*)(row + v0);
  const hx_f32x4 v = {ninf, ninf, ninf, ninf};
  for (hx_i32 i = t; i < nv; i += nt) vp[i] = v;
  const hx_i32 tail = v0 + 4 * nv;
  if (t < b - tail) row[tail + t] = ninf;
}

// ---------------------------------------------------------------- named barriers
// Barrier `id` (1..15; 0 is hx_barrier's) over `count` threads, whole warps, every participant naming the same
// count. sync waits for all of them; arrive counts this warp in and goes on. Either way, memory accesses a
// participant made before it are visible to the participants that return from sync.
HX_INLINE __device__ void hx_bar_sync(hx_u32 id, hx_u32 count) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
}
HX_INLINE __device__ void hx_bar_arrive(hx_u32 id, hx_u32 count) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(count) : "memory");
}
// sync that also tells every participant whether any of them passed pred true.
HX_INLINE __device__ bool hx_bar_any(hx_u32 id, hx_u32 count, bool pred) {
  hx_u32 r;
  asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 p, %1, 0;\n\tbar.red.or.pred q, %2, %3, p;\n\t"
               "selp.u32 %0, 1, 0, q;\n\t}" : "=r"(r) : "r"((hx_u32)pred), "r"(id), "r"(count) : "memory");
  return r != 0u;
}

// ---------------------------------------------------------------- register reallocation (warpgroup)
// The warpgroup's registers per thread become N (a multiple of 8 in [24, 256]), moved within the CTA's launch
// allocation: a decrease returns registers to the pool, an increase blocks until the pool holds them, so
// every increase must be covered by the launch allocation plus decreases elsewhere, or it blocks forever.
template <int N>
HX_INLINE __device__ void hx_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N)); }
template <int N>
HX_INLINE __device__ void hx_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N)); }

// ---------------------------------------------------------------- fp8 e4m3, predicated stores
// Four e4m3 bytes (byte 0 first) to f32, exactly (through f16, which holds every e4m3 value).
HX_INLINE __device__ void hx_e4m3x4_to_f32(hx_u32 v, float (&x)[4]) {
  asm("{\n.reg .b16 lo, hi, a0, a1, b0, b1;\n.reg .b32 a, b;\n"
      "mov.b32 {lo, hi}, %4;\n"
      "cvt.rn.f16x2.e4m3x2 a, lo;\n"
      "cvt.rn.f16x2.e4m3x2 b, hi;\n"
      "mov.b32 {a0, a1}, a;\n"
      "mov.b32 {b0, b1}, b;\n"
      "cvt.f32.f16 %0, a0;\ncvt.f32.f16 %1, a1;\ncvt.f32.f16 %2, b0;\ncvt.f32.f16 %3, b1;\n}"
      : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3]) : "r"(v));
}
// Four f32 to e4m3 (round to nearest, saturating to +-448), byte 0 from x[0].
HX_INLINE __device__ hx_u32 hx_f32_to_e4m3x4(const float (&x)[4]) {
  hx_u32 v;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}"
      : "=r"(v) : "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3]));
  return v;
}
// A conditional store as one predicated instruction: no branch for ptxas to see while a wgmma is in flight.
HX_INLINE __device__ void hx_store_f32_if(bool c, float* dst, float v) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0; @p st.global.f32 [%0], %1; }"
               :: "l"(dst), "f"(v), "r"((hx_u32)c) : "memory");
}
HX_INLINE __device__ void hx_store_u64_if(bool c, hx_u64* dst, hx_u64 v) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0; @p st.global.u64 [%0], %1; }"
               :: "l"(dst), "l"(v), "r"((hx_u32)c) : "memory");
}

// ---------------------------------------------------------------- wgmma (warpgroup)
// D[64 x N] (+)= A[64 x K] B[N x K]^T, e4m3 x e4m3 -> f32, A and B K-major tiles in shared memory, D in
// registers: thread (warp w, lane l) holds rows 16w + l/4 + 8i (i = 0, 1) of columns 8j + 2(l%4) + c in
// register 4j + 2i + c. The MMA reads its operands through the async proxy, some time between its issue and
// the wait that retires its group: their writers fence first (hx_fence_proxy_async, or a transaction
// mbarrier), and nobody may overwrite them before that wait.

// Matrix descriptor of a K-major tile in the 128-byte swizzle (hx_sw128_offset). Stepping K by 32 bytes inside
// the atom adds 2 to it (the address field counts 16 bytes; shared addresses stay below 2^18, no carry out).
HX_INLINE __device__ hx_u64 hx_wgmma_desc_sw128(hx_u32 smem_addr) {
  return (hx_u64)((smem_addr & 0x3FFFFu) >> 4) | ((hx_u64)1 << 16) | ((hx_u64)(1024 >> 4) << 32) | ((hx_u64)1 << 62);
}
// Matrix descriptor of a K-major tile without swizzle, in core matrices of 8 rows x 16 bytes (128 contiguous
// bytes): `k_stride` bytes from one core matrix to the next along K, `m_stride` along M (or N). A k32 step is two
// core matrices along K: 2 k_stride bytes, k_stride / 8 in the address field.
HX_INLINE __device__ hx_u64 hx_wgmma_desc_plain(hx_u32 smem_addr, hx_u32 k_stride, hx_u32 m_stride) {
  return (hx_u64)((smem_addr & 0x3FFFFu) >> 4) | ((hx_u64)(k_stride >> 4) << 16) | ((hx_u64)(m_stride >> 4) << 32);
}
// Before a warpgroup's first wgmma on registers it wrote (or after it read them): orders those accesses
// before the MMA's.
HX_INLINE __device__ void hx_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Closes a group of this warpgroup's issued wgmma; wait<N> returns once at most N groups are in flight (groups
// retire in order), and then the retired groups' accumulators may be read and their operands overwritten.
HX_INLINE __device__ void hx_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
HX_INLINE __device__ void hx_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
// Pins accumulator registers at this point: the compiler moves no read or write of them across it, so none
// lands between an issue and the wait that retires it.
template <int R>
HX_INLINE __device__ void hx_fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// D[64 x 256] (+)= A[64 x 32] * B[256 x 32]^T, e4m3 x e4m3 -> f32, both operands K-major in shared memory.
// accumulate == 0 overwrites D.
HX_INLINE __device__ void hx_wgmma_m64n256k32_e4m3(float (&d)[128], hx_u64 a, hx_u64 b, hx_u32 accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(accumulate));
}

// D[64 x 128] (+)= A[64 x 32] * B[128 x 32]^T, the same operand layouts; half the accumulators of the n256 form.
HX_INLINE __device__ void hx_wgmma_m64n128k32_e4m3(float (&d)[64], hx_u64 a, hx_u64 b, hx_u32 accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(accumulate));
}

// D[64 x 136] (+)= A[64 x 32] * B[136 x 32]^T: the n128 form plus one 8-column block.
HX_INLINE __device__ void hx_wgmma_m64n136k32_e4m3(float (&d)[68], hx_u64 a, hx_u64 b, hx_u32 accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67}, %68, %69, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
      : "l"(a), "l"(b), "r"(accumulate));
}

// The narrower N of the m64nNk32 form that decode's (query row, head) columns take, N = rows x H at H in {32, 64}:
// the same operand layouts, N / 2 accumulators per thread.
HX_INLINE __device__ void hx_wgmma_m64n32k32_e4m3(float (&d)[16], hx_u64 a, hx_u64 b, hx_u32 accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(accumulate));
}
HX_INLINE __device__ void hx_wgmma_m64n64k32_e4m3(float (&d)[32], hx_u64 a, hx_u64 b, hx_u32 accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate));
}
HX_INLINE __device__ void hx_wgmma_m64n96k32_e4m3(float (&d)[48], hx_u64 a, hx_u64 b, hx_u32 accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, %48, %49, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "l"(a), "l"(b), "r"(accumulate));
}

// One k32 step at the shape the accumulator array names (N = 2 x its length).
HX_INLINE __device__ void hx_wgmma_k32(float (&d)[64], hx_u64 a, hx_u64 b, hx_u32 acc) {
  hx_wgmma_m64n128k32_e4m3(d, a, b, acc);
}
HX_INLINE __device__ void hx_wgmma_k32(float (&d)[68], hx_u64 a, hx_u64 b, hx_u32 acc) {
  hx_wgmma_m64n136k32_e4m3(d, a, b, acc);
}
HX_INLINE __device__ void hx_wgmma_k32(float (&d)[128], hx_u64 a, hx_u64 b, hx_u32 acc) {
  hx_wgmma_m64n256k32_e4m3(d, a, b, acc);
}
HX_INLINE __device__ void hx_wgmma_k32(float (&d)[16], hx_u64 a, hx_u64 b, hx_u32 acc) {
  hx_wgmma_m64n32k32_e4m3(d, a, b, acc);
}
HX_INLINE __device__ void hx_wgmma_k32(float (&d)[32], hx_u64 a, hx_u64 b, hx_u32 acc) {
  hx_wgmma_m64n64k32_e4m3(d, a, b, acc);
}
HX_INLINE __device__ void hx_wgmma_k32(float (&d)[48], hx_u64 a, hx_u64 b, hx_u32 acc) {
  hx_wgmma_m64n96k32_e4m3(d, a, b, acc);
}
// D = A[64 x 128] B[N x 128]^T over 128-byte rows: four k32 steps, the first overwriting D, each 32 bytes further
// into B (in the 128-byte swizzle) and a_step descriptor units (16 bytes each) further into A: 2 in the swizzle,
// k_stride / 8 for hx_wgmma_desc_plain. Issued, not committed.
template <int R>
HX_INLINE __device__ void hx_wgmma_k128(float (&d)[R], hx_u64 a, hx_u64 b, hx_u32 a_step = 2) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) hx_wgmma_k32(d, a + (hx_u64)(a_step * kk), b + 2 * kk, kk);
}
