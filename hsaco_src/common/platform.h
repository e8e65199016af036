// Freestanding device platform: one kernel source compiles as device code with
// clang (-x hip --cuda-device-only -nogpulib -nogpuinc, gfx950), with nvcc
// (-x cu, sm_90a), and as plain host C++ (a CPU emulator / header tests).
// No hip_runtime.h or CUDA headers: every toolchain must build identically.
#pragma once

#if defined(__HIP__) && defined(__AMDGPU__)
#define HX_AMDGPU 1
#elif defined(__CUDACC__)
#define HX_NVIDIA 1
#else
#define HX_HOST 1
#endif

typedef unsigned char hx_u8;
typedef unsigned short hx_u16;
typedef int hx_i32;
typedef unsigned int hx_u32;
typedef long long hx_i64;
typedef unsigned long long hx_u64;
static_assert(sizeof(hx_u64) == 8 && sizeof(void*) == 8, "LP64 expected");

#if defined(HX_AMDGPU)
// -nogpuinc drops the header that normally spells these.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define HX_LAUNCH_BOUNDS(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
#define HX_LAUNCH_BOUNDS_NV(n, blocks) HX_LAUNCH_BOUNDS(n)
// Also the fewest waves a SIMD must hold: a cap on the VGPRs a lane may take (512 / waves).
#define HX_LAUNCH_BOUNDS_WAVES(n, waves) __attribute__((amdgpu_flat_work_group_size(1, n), amdgpu_waves_per_eu(waves)))
#define HX_UNROLL _Pragma("unroll")
#define HX_GRID_CONSTANT
#define HX_HD __host__ __device__
#define HX_DEV __device__
#elif defined(HX_NVIDIA)
#define HX_LAUNCH_BOUNDS(n) __launch_bounds__(n)
// Also the fewest resident blocks per SM ptxas must allow: a cap on its registers (gfx950 takes no such hint).
#define HX_LAUNCH_BOUNDS_NV(n, blocks) __launch_bounds__(n, blocks)
#define HX_LAUNCH_BOUNDS_WAVES(n, waves) HX_LAUNCH_BOUNDS(n)
#define HX_UNROLL _Pragma("unroll")
// Keeps a by-value param struct in param space (no local copy), so &params
// and TMA descriptors inside it stay valid.
#define HX_GRID_CONSTANT __grid_constant__
#define HX_HD __host__ __device__
#define HX_DEV __device__
#else
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __constant__
#define HX_LAUNCH_BOUNDS(n)
#define HX_LAUNCH_BOUNDS_NV(n, blocks)
#define HX_LAUNCH_BOUNDS_WAVES(n, waves)
#define HX_UNROLL  // host builds (the tests' g++) take no unroll pragma
#define HX_GRID_CONSTANT
#define HX_HD
#define HX_DEV
#endif

#define HX_KERNEL extern "C" __global__
#define HX_RESTRICT __restrict__
#define HX_INLINE static inline __attribute__((always_inline))
#define HX_MEMBER inline __attribute__((always_inline))  // HX_INLINE for a member function

// Programmatic dependent launch. The CUDA runtime may launch any sm_90a kernel with programmatic stream
// serialization, so that its blocks start while the grid before it in the stream is still running (their launch
// and set-up then hide behind that grid's tail). Every kernel built for sm_90a therefore calls this before it reads
// or writes global memory: it returns once the grid before has completed and its writes are visible, then lets the
// grid after this one start its blocks, which wait here in turn. Launched without the attribute it returns at
// once; the other targets launch in plain stream order and have nothing to wait for.
HX_INLINE HX_DEV void hx_grid_dependency_wait() {
#if defined(HX_NVIDIA)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#if defined(HX_AMDGPU) || defined(HX_NVIDIA)
#if defined(HX_AMDGPU)
// Code object v5 (build.py passes -mcode-object-version=5): the implicit
// kernarg block starts with hidden_block_count_x/y/z (u32) then
// hidden_group_size_x/y/z (u16).
HX_INLINE __device__ const hx_u32* hx__implicit_u32() {
  return (const hx_u32*)__builtin_amdgcn_implicitarg_ptr();
}
HX_INLINE __device__ hx_u32 hx_thread_x() { return __builtin_amdgcn_workitem_id_x(); }
HX_INLINE __device__ hx_u32 hx_thread_y() { return __builtin_amdgcn_workitem_id_y(); }
HX_INLINE __device__ hx_u32 hx_thread_z() { return __builtin_amdgcn_workitem_id_z(); }
HX_INLINE __device__ hx_u32 hx_block_x() { return __builtin_amdgcn_workgroup_id_x(); }
HX_INLINE __device__ hx_u32 hx_block_y() { return __builtin_amdgcn_workgroup_id_y(); }
HX_INLINE __device__ hx_u32 hx_block_z() { return __builtin_amdgcn_workgroup_id_z(); }
HX_INLINE __device__ hx_u32 hx_block_dim_x() { return __builtin_amdgcn_workgroup_size_x(); }
HX_INLINE __device__ hx_u32 hx_block_dim_y() { return __builtin_amdgcn_workgroup_size_y(); }
HX_INLINE __device__ hx_u32 hx_block_dim_z() { return __builtin_amdgcn_workgroup_size_z(); }
HX_INLINE __device__ hx_u32 hx_grid_dim_x() { return hx__implicit_u32()[0]; }
HX_INLINE __device__ hx_u32 hx_grid_dim_y() { return hx__implicit_u32()[1]; }
HX_INLINE __device__ hx_u32 hx_grid_dim_z() { return hx__implicit_u32()[2]; }
HX_INLINE __device__ hx_u32 hx_lane() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
#define HX_WAVE_SIZE 64
// What HIP's __syncthreads does: make LDS/global writes visible across the workgroup.
HX_INLINE __device__ void hx_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
#else
HX_INLINE __device__ hx_u32 hx_thread_x() { return threadIdx.x; }
HX_INLINE __device__ hx_u32 hx_thread_y() { return threadIdx.y; }
HX_INLINE __device__ hx_u32 hx_thread_z() { return threadIdx.z; }
HX_INLINE __device__ hx_u32 hx_block_x() { return blockIdx.x; }
HX_INLINE __device__ hx_u32 hx_block_y() { return blockIdx.y; }
HX_INLINE __device__ hx_u32 hx_block_z() { return blockIdx.z; }
HX_INLINE __device__ hx_u32 hx_block_dim_x() { return blockDim.x; }
HX_INLINE __device__ hx_u32 hx_block_dim_y() { return blockDim.y; }
HX_INLINE __device__ hx_u32 hx_block_dim_z() { return blockDim.z; }
HX_INLINE __device__ hx_u32 hx_grid_dim_x() { return gridDim.x; }
HX_INLINE __device__ hx_u32 hx_grid_dim_y() { return gridDim.y; }
HX_INLINE __device__ hx_u32 hx_grid_dim_z() { return gridDim.z; }
HX_INLINE __device__ hx_u32 hx_lane() { hx_u32 l; asm("mov.u32 %0, %%laneid;" : "=r"(l)); return l; }
#define HX_WAVE_SIZE 32
HX_INLINE __device__ void hx_barrier() { __syncthreads(); }
#endif
#elif defined(HX_EMU)
// gfx950 sources built for the host emulator (hsaco_src/emu, -I there): ids
// and barriers come from the running emulated lane.
#include "hx_emu_platform.h"
#endif  // device

// HX_SHARED(float, tile, 256) declares a workgroup array `tile`. In the
// emulator it is carved from the workgroup's 160 KiB LDS arena, poisoned with
// 0xFF bytes (NaN floats) at each workgroup start; every lane of the block
// gets the same address because each lane's n-th HX_SHARED is the block's
// n-th allocation. Use it at function scope, the same declarations in the
// same order on every path.
#if defined(HX_EMU)
#define HX_SHARED(type, name, count) \
  type* const name = (type*)hx_emu_shared(sizeof(type) * (count), alignof(type), __FILE__, __LINE__)
#elif defined(HX_AMDGPU) || defined(HX_NVIDIA)
#define HX_SHARED(type, name, count) __shared__ type name[count]
#endif
// HX_DYNAMIC_SHARED(type, name): the block's dynamic shared array, as many bytes as the launch gives (the catalog's
// smem, HX_SMEM), declared at function scope after the kernel's HX_SHARED arrays. The emulator carves it from the
// same arena.
#if defined(HX_EMU)
#define HX_DYNAMIC_SHARED(type, name) type* const name = (type*)hx_emu_dynamic_shared(__FILE__, __LINE__)
#elif defined(HX_AMDGPU) || defined(HX_NVIDIA)
#define HX_DYNAMIC_SHARED(type, name) extern __shared__ __attribute__((aligned(16))) type name[]
#endif

// v of lane src_lane of this wave (every lane of the wave takes part, each naming its own source): the
// generic kernels' one cross-lane step. gfx950: ds_bpermute (any pattern, through the LDS crossbar); sm_90a:
// shfl.sync over the full warp; the emulator: its lane-accurate bpermute.
#if defined(HX_EMU)
static inline __attribute__((always_inline)) hx_u32 hx_wave_shfl_u32(hx_u32 v, hx_u32 src_lane,
                                                                    const char* file = __builtin_FILE(),
                                                                    int line = __builtin_LINE()) {
  return hx_emu_bpermute(v, src_lane, file, line);
}
#elif defined(HX_AMDGPU)
HX_INLINE __device__ hx_u32 hx_wave_shfl_u32(hx_u32 v, hx_u32 src_lane) {
  return (hx_u32)__builtin_amdgcn_ds_bpermute((int)(src_lane << 2), (int)v);
}
#elif defined(HX_NVIDIA)
HX_INLINE __device__ hx_u32 hx_wave_shfl_u32(hx_u32 v, hx_u32 src_lane) { return __shfl_sync(0xFFFFFFFFu, v, src_lane); }
#endif

// How many lanes of the wave have p set; every lane of the wave takes part and gets the count.
#if defined(HX_EMU)
static inline __attribute__((always_inline)) hx_u32 hx_wave_count(bool p, const char* file = __builtin_FILE(),
                                                                 int line = __builtin_LINE()) {
  return (hx_u32)__builtin_popcountll(hx_emu_ballot(p, file, line));
}
#elif defined(HX_AMDGPU)
HX_INLINE __device__ hx_u32 hx_wave_count(bool p) { return (hx_u32)__builtin_popcountll(__builtin_amdgcn_ballot_w64(p)); }
#elif defined(HX_NVIDIA)
HX_INLINE __device__ hx_u32 hx_wave_count(bool p) { return (hx_u32)__popc(__ballot_sync(0xFFFFFFFFu, p)); }
#endif

#if defined(HX_EMU) || defined(HX_AMDGPU) || defined(HX_NVIDIA)
// v as lane src_lane has it, in two 32-bit shuffles (every lane taking part).
HX_INLINE HX_DEV hx_u64 hx_wave_shfl_u64(hx_u64 v, hx_u32 src_lane) {
  return (hx_u64)hx_wave_shfl_u32((hx_u32)v, src_lane) | (hx_u64)hx_wave_shfl_u32((hx_u32)(v >> 32), src_lane) << 32;
}

// p as lane 0 of the wave has it. A pointer that went through the shuffles is one ptxas cannot rebuild from its
// parts: a row's output pointer then stays in registers, where ptxas otherwise redoes its 64-bit multiply by the
// row stride at every store of a loop (the stores become generic ones).
template <class T>
HX_INLINE HX_DEV T* hx_wave_pointer(T* p) {
  return (T*)hx_wave_shfl_u64((hx_u64)p, 0);
}
#endif

// *p |= v as one atomic operation (device error flags: several threads may set
// different bits at once). The emulator runs one lane at a time.
#if defined(HX_NVIDIA)
HX_INLINE __device__ void hx_atomic_or(hx_i32* p, hx_i32 v) { atomicOr(p, v); }
#else
HX_INLINE HX_HD void hx_atomic_or(hx_i32* p, hx_i32 v) { __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
#endif

// *p += v in global memory, returning the old value, ordered after every access this thread made before it and
// before every one after it (acquire-release, device scope): the last of several blocks to count in sees all that
// the others did before they counted.
#if defined(HX_NVIDIA)
HX_INLINE __device__ hx_i32 hx_atomic_add_acq_rel(hx_i32* p, hx_i32 v) {
  __threadfence();
  const hx_i32 old = atomicAdd(p, v);
  __threadfence();
  return old;
}
#elif defined(HX_AMDGPU)
HX_INLINE __device__ hx_i32 hx_atomic_add_acq_rel(hx_i32* p, hx_i32 v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
}
#else
HX_INLINE HX_HD hx_i32 hx_atomic_add_acq_rel(hx_i32* p, hx_i32 v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
#endif

// *dst = *src for a 64-bit word from global to shared memory. On sm_90a an asynchronous copy (cp.async): the word
// passes through no register, so a thread's copies are all in flight at once, and they land for it at
// hx_copy_async_wait() (for the block after a barrier behind that); elsewhere a load and a store.
#if defined(HX_NVIDIA)
HX_INLINE __device__ void hx_copy_async_u64(hx_u64* dst, const hx_u64* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"((hx_u32)__cvta_generic_to_shared(dst)), "l"(src)
               : "memory");
}
HX_INLINE __device__ void hx_copy_async_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }
#else
HX_INLINE HX_HD void hx_copy_async_u64(hx_u64* dst, const hx_u64* src) { *dst = *src; }
HX_INLINE HX_HD void hx_copy_async_wait() {}
#endif

// Set bits of v.
#if defined(HX_NVIDIA)
HX_INLINE __device__ hx_u32 hx_popc(hx_u32 v) { return (hx_u32)__popc(v); }
#else
HX_INLINE HX_HD hx_u32 hx_popc(hx_u32 v) { return (hx_u32)__builtin_popcount(v); }
#endif

// A place for every lane of the wave whose `want` is set: the old value of *counter plus the lane's rank among
// those lanes, from one atomic add of their count by the lowest of them. Every lane of the wave calls it at the
// same point (uniform control flow); a lane without `want` gets an unspecified value. One atomic a wave where a
// lane-by-lane add queued up to a wave of increments on one shared word.
#if defined(HX_EMU)
static inline __attribute__((always_inline)) hx_u32 hx_wave_append(bool want, hx_u32* counter,
                                                                  const char* file = __builtin_FILE(),
                                                                  int line = __builtin_LINE()) {
  const hx_u64 set = hx_emu_ballot(want, file, line);
  const hx_u32 lane = hx_lane();
  const hx_u32 leader = set ? (hx_u32)__builtin_ctzll(set) : 0u;
  hx_u32 base = 0;
  if (set && lane == leader) base = __atomic_fetch_add(counter, (hx_u32)__builtin_popcountll(set), __ATOMIC_RELAXED);
  base = hx_emu_bpermute(base, leader, file, line);
  return base + (hx_u32)__builtin_popcountll(set & ((1ull << lane) - 1ull));
}
#elif defined(HX_AMDGPU)
HX_INLINE __device__ hx_u32 hx_wave_append(bool want, hx_u32* counter) {
  const hx_u64 set = __builtin_amdgcn_ballot_w64(want);
  const hx_u32 leader = set ? (hx_u32)__builtin_ctzll(set) : 0u;  // wave-uniform
  hx_u32 base = 0;
  if (set && hx_lane() == leader) base = __atomic_fetch_add(counter, (hx_u32)__builtin_popcountll(set), __ATOMIC_RELAXED);
  base = (hx_u32)__builtin_amdgcn_readlane((int)base, (int)leader);
  return base + __builtin_amdgcn_mbcnt_hi((hx_u32)(set >> 32), __builtin_amdgcn_mbcnt_lo((hx_u32)set, 0u));
}
#elif defined(HX_NVIDIA)
HX_INLINE __device__ hx_u32 hx_wave_append(bool want, hx_u32* counter) {
  const hx_u32 set = __ballot_sync(0xFFFFFFFFu, want);
  const hx_u32 leader = set ? (hx_u32)(__ffs((int)set) - 1) : 0u;
  const hx_u32 lane = hx_lane();
  hx_u32 base = 0;
  if (set && lane == leader) base = atomicAdd(counter, (hx_u32)__popc(set));
  base = __shfl_sync(0xFFFFFFFFu, base, leader);
  return base + (hx_u32)__popc(set & ((1u << lane) - 1u));
}
// The same for N items a lane, one atomic for all of them: at[i] for each want[i], the items' places consecutive
// in item order, then lane order. One round trip to the counter where N calls of the above wait on N in turn.
template <int N>
HX_INLINE __device__ void hx_wave_append_n(const bool (&want)[N], hx_u32* counter, hx_u32 (&at)[N]) {
  const hx_u32 lane = hx_lane(), below = (1u << lane) - 1u;
  hx_u32 set[N], total = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    set[i] = __ballot_sync(0xFFFFFFFFu, want[i]);
    total += (hx_u32)__popc(set[i]);
  }
  hx_u32 base = 0;
  if (total && lane == 0) base = atomicAdd(counter, total);
  base = __shfl_sync(0xFFFFFFFFu, base, 0);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    at[i] = base + (hx_u32)__popc(set[i] & below);
    base += (hx_u32)__popc(set[i]);
  }
}
#endif

// A distinct place at *counter for each of a lane's N items with want[i] set (at[i]; unspecified where unset), for
// writers to whom a place only says where an item waits (a sort puts the items in order later). On sm_90a one
// atomic add a warp (hx_wave_append_n); on gfx950 and its emulation one add an item by its lane, whose code is the
// shorter, and the code of hx_group_cut, its user, lands inside the fused decode kernel's page loop there.
#if defined(HX_NVIDIA)
template <int N>
HX_INLINE __device__ void hx_append_each(const bool (&want)[N], hx_u32* counter, hx_u32 (&at)[N]) {
  hx_wave_append_n(want, counter, at);
}
#elif defined(HX_EMU) || defined(HX_AMDGPU)
template <int N>
HX_INLINE HX_HD void hx_append_each(const bool (&want)[N], hx_u32* counter, hx_u32 (&at)[N]) {
  HX_UNROLL
  for (int i = 0; i < N; ++i) at[i] = want[i] ? __atomic_fetch_add(counter, 1u, __ATOMIC_RELAXED) : 0u;
}
#endif

#if defined(HX_EMU) || defined(HX_AMDGPU) || defined(HX_NVIDIA)
// v summed over this lane and the lanes below it, by shuffles (every lane of the wave taking part).
HX_INLINE HX_DEV hx_u32 hx_wave_inclusive_sum(hx_u32 v) {
  const hx_u32 lane = hx_lane();
  for (hx_u32 d = 1; d < HX_WAVE_SIZE; d *= 2) {
    const hx_u32 y = hx_wave_shfl_u32(v, lane >= d ? lane - d : lane);
    if (lane >= d) v += y;
  }
  return v;
}

// The first of n consecutive places at *counter for each lane's n items: one atomic add of the wave's total, by
// its last lane; the lanes' runs in lane order. Every lane of the wave calls it at the same point. Every target.
HX_INLINE HX_DEV hx_u32 hx_wave_append_count(hx_u32 n, hx_u32* counter) {
  const hx_u32 lane = hx_lane(), last = HX_WAVE_SIZE - 1;
  const hx_u32 inclusive = hx_wave_inclusive_sum(n);
  hx_u32 base = 0;
#if defined(HX_NVIDIA)
  if (lane == last && inclusive) base = atomicAdd(counter, inclusive);
#else
  if (lane == last && inclusive) base = __atomic_fetch_add(counter, inclusive, __ATOMIC_RELAXED);
#endif
  return hx_wave_shfl_u32(base, last) + inclusive - n;
}
#endif

struct alignas(16) hx_u32x4 { hx_u32 x, y, z, w; };
struct alignas(8) hx_u32x2 { hx_u32 x, y; };
struct alignas(16) hx_f32x4 { float x, y, z, w; };
struct alignas(8) hx_f32x2 { float x, y; };

HX_INLINE HX_HD float hx_bits_to_f32(hx_u32 u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
HX_INLINE HX_HD hx_u32 hx_f32_to_bits(float f) { hx_u32 u; __builtin_memcpy(&u, &f, 4); return u; }

// OCP fp8 e4m3fn -> f32, exact: bias 7, no infinities, 0x7F/0xFF are NaN,
// exponent field 0 is subnormal (m * 2^-9), max normal 0x7E = 448.
// Portable bit arithmetic; a gfx950 fast path (v_cvt_f32_fp8) can replace
// it once the emulator proves them equal.
HX_INLINE HX_HD float hx_fp8e4m3_to_f32(hx_u8 b) {
  hx_u32 sign = (hx_u32)(b & 0x80u) << 24;
  hx_u32 exp = (b >> 3) & 0xFu;
  hx_u32 man = b & 0x7u;
  if (exp == 0xFu && man == 0x7u) return hx_bits_to_f32(sign | 0x7FC00000u);
  if (exp == 0) {
    // m * 2^-9 is exact in f32; the sign survives for -0.
    float mag = (float)man * 0.001953125f;
    return hx_bits_to_f32(sign | hx_f32_to_bits(mag));
  }
  return hx_bits_to_f32(sign | ((exp + 120u) << 23) | (man << 20));
}

// Four packed e4m3fn bytes (byte i = element i) -> f32, exact. NVIDIA has a
// converter to f16x2 (every e4m3fn value is exact in f16); elsewhere the
// portable decode (gfx950 kernels use the wave primitives' converters).
#if defined(HX_NVIDIA)
HX_INLINE __device__ void hx_fp8x4_to_f32(hx_u32 v, float out[4]) {
  hx_u32 h01, h23;
  asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n cvt.rn.f16x2.e4m3x2 %1, hi; }"
      : "=r"(h01), "=r"(h23) : "r"(v));
  asm("{ .reg .f16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b; }"
      : "=f"(out[0]), "=f"(out[1]) : "r"(h01));
  asm("{ .reg .f16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b; }"
      : "=f"(out[2]), "=f"(out[3]) : "r"(h23));
}
#else
HX_INLINE HX_HD void hx_fp8x4_to_f32(hx_u32 v, float out[4]) {
  for (int i = 0; i < 4; ++i) out[i] = hx_fp8e4m3_to_f32((hx_u8)(v >> (8 * i)));
}
#endif
