// gfx950 wave primitives: the only way gfx950 kernels reach builtins.
//
// On the device each is a thin inline wrapper (a builtin, or inline asm where
// the compiler is wrong). Under HX_EMU the same names call the host emulator
// (hsaco_src/emu), which runs the 64 lanes of a wave as fibers and completes
// a wave primitive only when all 64 lanes reach the same call site: wave
// primitives must be wave-uniform (no primitive inside lane-divergent
// control flow). Lane layouts: docs/gfx950.md ("Lane layouts of the wave primitives").
//
// Blocks are 1-D (hx_wave_id and the lane numbering assume it).
#pragma once
#include "platform.h"

#if defined(HX_EMU)
#include "hx_emu_platform.h"
// Call site of a primitive, from a default argument evaluated in the caller.
#define HX_SITE0 const char* hx_file_ = __builtin_FILE(), int hx_line_ = __builtin_LINE()
#define HX_SITE , HX_SITE0
#define HX_AT0 hx_file_, hx_line_
#define HX_AT , HX_AT0
#define HX_WAVE_FN static inline __attribute__((always_inline))
#elif defined(HX_AMDGPU)
#define HX_SITE0
#define HX_SITE
#define HX_AT0
#define HX_AT
#define HX_WAVE_FN static inline __attribute__((always_inline)) __device__
#else
#error "wave.h is gfx950 device code: compile with --offload-arch=gfx950, or for the host emulator with -DHX_EMU"
#endif

typedef int hx_v8i __attribute__((ext_vector_type(8)));      // 32 fp8 bytes: one MFMA operand per lane
typedef float hx_v16f __attribute__((ext_vector_type(16)));  // 32x32 accumulator per lane
typedef float hx_v4f __attribute__((ext_vector_type(4)));    // 16x16 accumulator per lane
typedef hx_u32 hx_v2u __attribute__((ext_vector_type(2)));
typedef hx_u32 hx_v4u __attribute__((ext_vector_type(4)));

// ------------------------------------------------------------------ ids

HX_WAVE_FN hx_u32 hx_lane_id() { return hx_lane(); }

#if defined(HX_EMU)
HX_WAVE_FN hx_u32 hx_wave_id() { return hx_emu_cur->wave; }
#else
// Wave-uniform by construction; readfirstlane puts it in an SGPR.
HX_WAVE_FN hx_u32 hx_wave_id() { return __builtin_amdgcn_readfirstlane(hx_thread_x() >> 6); }
#endif

// ------------------------------------------------------------------ MFMA
// A, B: 32 fp8 e4m3fn bytes per lane; lane layouts in docs/gfx950.md (32x32x64:
// row/column lane % 32, K = 16*(lane/32) + 32*i + j for byte 16*i + j;
// C element 4*i + j is row 8*i + 4*(lane/32) + j, column lane % 32).
// Scales are E8M0 and must come from a VGPR: the hardware misreads inline or
// scalar constants (llvm-project pull request 158117), so 0x7F goes through a v_mov the
// compiler cannot fold.

#if defined(HX_EMU)
HX_WAVE_FN int hx_unit_scale() { return 0x7F; }
HX_WAVE_FN hx_v16f hx_mfma_32x32x64_fp8_scaled(hx_v8i a, hx_v8i b, hx_v16f c, int sa, int sb HX_SITE) {
  hx_v16f d;
  hx_emu_mfma_32x32x64_fp8(&a, &b, (const float*)&c, (float*)&d, sa, sb HX_AT);
  return d;
}
HX_WAVE_FN hx_v4f hx_mfma_16x16x128_fp8_scaled(hx_v8i a, hx_v8i b, hx_v4f c, int sa, int sb HX_SITE) {
  hx_v4f d;
  hx_emu_mfma_16x16x128_fp8(&a, &b, (const float*)&c, (float*)&d, sa, sb HX_AT);
  return d;
}
#else
HX_WAVE_FN int hx_unit_scale() {
  int s;
  asm("v_mov_b32 %0, 0x7f" : "=v"(s));  // not volatile: one v_mov serves every MFMA after CSE
  return s;
}
// fmtA = fmtB = 0 (OCP e4m3), op_sel 0.
HX_WAVE_FN hx_v16f hx_mfma_32x32x64_fp8_scaled(hx_v8i a, hx_v8i b, hx_v16f c, int sa, int sb) {
  return __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a, b, c, 0, 0, 0, sa, 0, sb);
}
HX_WAVE_FN hx_v4f hx_mfma_16x16x128_fp8_scaled(hx_v8i a, hx_v8i b, hx_v4f c, int sa, int sb) {
  return __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(a, b, c, 0, 0, 0, sa, 0, sb);
}
#endif

HX_WAVE_FN hx_v16f hx_mfma_32x32x64_fp8(hx_v8i a, hx_v8i b, hx_v16f c HX_SITE) {
  const int s = hx_unit_scale();
  return hx_mfma_32x32x64_fp8_scaled(a, b, c, s, s HX_AT);
}
HX_WAVE_FN hx_v4f hx_mfma_16x16x128_fp8(hx_v8i a, hx_v8i b, hx_v4f c HX_SITE) {
  const int s = hx_unit_scale();
  return hx_mfma_16x16x128_fp8_scaled(a, b, c, s, s HX_AT);
}

// ------------------------------------------------------------ packed f32
typedef float hx_v2f __attribute__((ext_vector_type(2)));

// a * b + c on two floats, each fused (v_pk_fma_f32). Inline asm on the device because clang splits the
// packed fma into two v_fma_f32 when an operand is built from two scalar results (a ReLU'd pair), which
// doubles the epilogue's FMAs; the "v" operands of a 64-bit type get the even-aligned VGPR pairs the
// instruction needs. Only for operands no MFMA wrote just before (the asm hides them from the compiler's
// hazard recognizer): VALU results.
HX_WAVE_FN hx_v2f hx_pk_fma(hx_v2f a, hx_v2f b, hx_v2f c) {
#if defined(HX_EMU)
  return __builtin_elementwise_fma(a, b, c);
#else
  asm("v_pk_fma_f32 %0, %1, %2, %0" : "+v"(c) : "v"(a), "v"(b));
  return c;
#endif
}

// a * b on two floats (v_pk_mul_f32), for the same reason and with the same restriction as hx_pk_fma.
HX_WAVE_FN hx_v2f hx_pk_mul(hx_v2f a, hx_v2f b) {
#if defined(HX_EMU)
  return a * b;
#else
  hx_v2f d;
  asm("v_pk_mul_f32 %0, %1, %2" : "=v"(d) : "v"(a), "v"(b));
  return d;
#endif
}

// clamp(a * s) to [0, 1] on two floats (v_pk_mul_f32 ... clamp): a packed ReLU where the caller knows every
// a * s stays under 1 and exact, and folds 1 / s into what it multiplies next (gfx950 has no packed f32
// max). The emulator clamps to [0, 1] as the instruction does, so a product past 1 shows. Inline asm for
// the clamp bit; when `a` is an MFMA result, hx_mfma_result_wait must come first (the asm hides the read
// from the compiler's hazard recognizer). One asm per pair, so the compiler allocates it as any VALU op.
HX_WAVE_FN hx_v2f hx_pk_mul_clamp01(hx_v2f a, hx_v2f s) {
#if defined(HX_EMU)
  // fmaxf(NaN, 0) = 0, as the clamp
  return hx_v2f{__builtin_fminf(__builtin_fmaxf(a.x * s.x, 0.0f), 1.0f),
                __builtin_fminf(__builtin_fmaxf(a.y * s.y, 0.0f), 1.0f)};
#else
  hx_v2f d;
  asm volatile("v_pk_mul_f32 %0, %1, %2 clamp" : "=v"(d) : "v"(a), "v"(s));
  return d;
#endif
}

// The wait states before inline asm reads the results of the MFMAs that wrote `a` and `b`: 20, a 16-pass XDL
// result read by the VALU on gfx950 (what clang inserts for the same read). Taking them as operands keeps it
// after those MFMAs; volatile keeps it before the asm that reads them.
HX_WAVE_FN void hx_mfma_result_wait(const hx_v16f& a, const hx_v16f& b) {
#if !defined(HX_EMU)
  asm volatile("s_nop 15\n\ts_nop 3" ::"v"(a), "v"(b));
#endif
}

// ------------------------------------------------------------ cross-lane

// After it, lanes 32-63 of `a` hold the old lanes 0-31 of `b`, and lanes 0-31
// of `b` hold the old lanes 32-63 of `a`: a + b then has row r's pair-sum in
// lanes 0-31 and row r+1's in 32-63. Inline asm because clang 22.1.8's
// builtin returned one register for both results; the s_nop covers the 2
// wait states after a VALU write of a source (isa_lint checks both).
HX_WAVE_FN void hx_permlane32_swap(float& a, float& b HX_SITE) {
#if defined(HX_EMU)
  hx_emu_permlane32_swap((hx_u32*)&a, (hx_u32*)&b HX_AT);
#else
  asm volatile("s_nop 1\n\tv_permlane32_swap_b32 %0, %1" : "+v"(a), "+v"(b));
#endif
}

// Rows are 16 lanes. After it, the odd rows of `a` (lanes 16-31, 48-63) hold
// the old even rows of `b` (0-15, 32-47) and the even rows of `b` hold the old
// odd rows of `a`: a's row 1 trades with b's row 0, a's row 3 with b's row 2.
// Inline asm and the s_nop for the same reasons as hx_permlane32_swap.
HX_WAVE_FN void hx_permlane16_swap(float& a, float& b HX_SITE) {
#if defined(HX_EMU)
  hx_emu_permlane16_swap((hx_u32*)&a, (hx_u32*)&b HX_AT);
#else
  asm volatile("s_nop 1\n\tv_permlane16_swap_b32 %0, %1" : "+v"(a), "+v"(b));
#endif
}

// Value of `v` in lane src_lane & 63 (ds_bpermute: any pattern, one LDS-crossbar op).
HX_WAVE_FN hx_u32 hx_shfl_u32(hx_u32 v, hx_u32 src_lane HX_SITE) {
#if defined(HX_EMU)
  return hx_emu_bpermute(v, src_lane HX_AT);
#else
  return (hx_u32)__builtin_amdgcn_ds_bpermute((int)(src_lane << 2), (int)v);
#endif
}
HX_WAVE_FN float hx_shfl(float v, hx_u32 src_lane HX_SITE) {
  return hx_bits_to_f32(hx_shfl_u32(hx_f32_to_bits(v), src_lane HX_AT));
}
HX_WAVE_FN float hx_shfl_xor(float v, hx_u32 mask HX_SITE) { return hx_shfl(v, hx_lane_id() ^ mask HX_AT); }

// Sum over the lanes l ^ m for m < width (width a power of two <= 64):
// every lane gets the total of its group. log2(width) shuffles.
HX_WAVE_FN float hx_wave_sum(float v, hx_u32 width HX_SITE) {
  for (hx_u32 m = width >> 1; m; m >>= 1) v += hx_shfl_xor(v, m HX_AT);
  return v;
}

// Lane 0's value (all lanes are active in our kernels), in an SGPR on the device.
HX_WAVE_FN hx_u32 hx_readfirstlane(hx_u32 v HX_SITE) {
#if defined(HX_EMU)
  return hx_emu_readfirstlane(v HX_AT);
#else
  return (hx_u32)__builtin_amdgcn_readfirstlane((int)v);
#endif
}

// Lane 0's predicate, wave-uniform. On the device it is bit 0 of the ballot:
// a predicate from a compare is already that compare's lane mask in SGPRs, so
// testing it is scalar work (no VALU op, unlike hx_readfirstlane of a bool).
HX_WAVE_FN bool hx_first_lane_true(bool p HX_SITE) {
#if defined(HX_EMU)
  return hx_emu_readfirstlane((hx_u32)p HX_AT) != 0;
#else
  return (__builtin_amdgcn_ballot_w64(p) & 1) != 0;
#endif
}

// The lanes whose p holds: bit l for lane l, the same mask in every lane (an SGPR pair on the device).
HX_WAVE_FN hx_u64 hx_ballot(bool p HX_SITE) {
#if defined(HX_EMU)
  return hx_emu_ballot((hx_u32)p HX_AT);
#else
  return __builtin_amdgcn_ballot_w64(p);
#endif
}

// The set bits of mask below this lane's (v_mbcnt): the lane's place among the lanes of a ballot.
HX_WAVE_FN hx_u32 hx_lanes_below(hx_u64 mask) {
#if defined(HX_EMU)
  return (hx_u32)__builtin_popcountll(mask & ((1ull << hx_lane_id()) - 1ull));
#else
  return __builtin_amdgcn_mbcnt_hi((hx_u32)(mask >> 32), __builtin_amdgcn_mbcnt_lo((hx_u32)mask, 0u));
#endif
}

// Lane `lane`'s value (a wave-uniform lane index), in an SGPR on the device
// (v_readlane): what makes a value loaded by the lanes usable as a buffer base.
HX_WAVE_FN hx_u32 hx_readlane(hx_u32 v, hx_u32 lane HX_SITE) {
#if defined(HX_EMU)
  return hx_emu_readfirstlane(hx_emu_bpermute(v, lane HX_AT) HX_AT);
#else
  return (hx_u32)__builtin_amdgcn_readlane((int)v, (int)lane);
#endif
}

// Lanes of one wave exchanging data through LDS without a workgroup barrier
// need this between the write and the read (lockstep on the device).
HX_WAVE_FN void hx_wave_sync(HX_SITE0) {
#if defined(HX_EMU)
  hx_emu_wave_sync(HX_AT0);
#else
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#endif
}

// All waves of the workgroup; LDS and global writes before it are visible after it.
HX_WAVE_FN void hx_workgroup_barrier(HX_SITE0) {
#if defined(HX_EMU)
  hx_emu_barrier(HX_AT0);
#else
  hx_barrier();
#endif
}

// The same for LDS alone: loads from memory still in flight stay so (no vmcnt wait), for waves that meet while
// their next keys are on the way.
HX_WAVE_FN void hx_workgroup_lds_barrier(HX_SITE0) {
#if defined(HX_EMU)
  hx_emu_barrier(HX_AT0);
#else
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup", "local");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup", "local");
#endif
}

// Marks for tools/support/isa_report.py, assembly comments (nothing on the emulator) at the start of a branch whose
// blocks the report classes by what dominates them: HX_ASM_MARK("row") one live row's work on a page (its share of
// a page's figures grows with the live rows), HX_ASM_MARK("rare-path") a branch the hot loop rarely takes (a fused
// kernel's cut: left out of the per-page figures).
#if defined(HX_EMU)
#define HX_ASM_MARK(name) ((void)0)
#else
#define HX_ASM_MARK(name) asm volatile(";hx-" name)
#endif

// ------------------------------------------------------------ shared memory
// HX_SHARED(type, name, count) comes from platform.h (every target uses it).

// ---------------------------------------------------------------- buffers
// A raw buffer (stride 0) over [ptr, ptr + num_records bytes). Offsets are
// 32-bit: voffset per lane, soffset wave-uniform. Out-of-range loads return
// 0 and out-of-range stores are dropped, per access; an access that
// straddles num_records has no documented result and is an emulator error,
// as is one whose range result depends on whether soffset is range-checked.
#if defined(HX_EMU)
typedef hx_emu_rsrc hx_rsrc;
HX_WAVE_FN hx_rsrc hx_make_buffer_rsrc(const void* p, hx_u32 num_records) {
  hx_rsrc r = {(const unsigned char*)p, num_records};
  return r;
}
#define HX_BUF_LOAD(T, n) \
  T v;                   \
  hx_emu_buffer_load(r, voffset, soffset, &v, n HX_AT); \
  return v;
#define HX_BUF_STORE(n) hx_emu_buffer_store(r, voffset, soffset, &v, n HX_AT);
#else
typedef __amdgpu_buffer_rsrc_t hx_rsrc;
// Word 3 0x00020000: DATA_FORMAT 32 (what CK uses on gfx9 / CDNA); raw,
// no swizzle, range checked against num_records in bytes.
HX_WAVE_FN hx_rsrc hx_make_buffer_rsrc(const void* p, hx_u32 num_records) {
  return __builtin_amdgcn_make_buffer_rsrc((void*)p, (short)0, (int)num_records, 0x00020000);
}
#endif

#if defined(HX_EMU)
HX_WAVE_FN hx_u32 hx_buffer_load_b32(hx_rsrc r, hx_u32 voffset, hx_u32 soffset HX_SITE) { HX_BUF_LOAD(hx_u32, 4) }
HX_WAVE_FN hx_v2u hx_buffer_load_b64(hx_rsrc r, hx_u32 voffset, hx_u32 soffset HX_SITE) { HX_BUF_LOAD(hx_v2u, 8) }
HX_WAVE_FN hx_v4u hx_buffer_load_b128(hx_rsrc r, hx_u32 voffset, hx_u32 soffset HX_SITE) { HX_BUF_LOAD(hx_v4u, 16) }
HX_WAVE_FN void hx_buffer_store_b32(hx_rsrc r, hx_u32 voffset, hx_u32 soffset, hx_u32 v HX_SITE) { HX_BUF_STORE(4) }
HX_WAVE_FN void hx_buffer_store_b64(hx_rsrc r, hx_u32 voffset, hx_u32 soffset, hx_v2u v HX_SITE) { HX_BUF_STORE(8) }
HX_WAVE_FN void hx_buffer_store_b128(hx_rsrc r, hx_u32 voffset, hx_u32 soffset, hx_v4u v HX_SITE) { HX_BUF_STORE(16) }
#undef HX_BUF_LOAD
#undef HX_BUF_STORE
#else
HX_WAVE_FN hx_u32 hx_buffer_load_b32(hx_rsrc r, hx_u32 voffset, hx_u32 soffset) {
  return __builtin_amdgcn_raw_buffer_load_b32(r, voffset, soffset, 0);
}
HX_WAVE_FN hx_v2u hx_buffer_load_b64(hx_rsrc r, hx_u32 voffset, hx_u32 soffset) {
  return __builtin_amdgcn_raw_buffer_load_b64(r, voffset, soffset, 0);
}
HX_WAVE_FN hx_v4u hx_buffer_load_b128(hx_rsrc r, hx_u32 voffset, hx_u32 soffset) {
  return __builtin_amdgcn_raw_buffer_load_b128(r, voffset, soffset, 0);
}
HX_WAVE_FN void hx_buffer_store_b32(hx_rsrc r, hx_u32 voffset, hx_u32 soffset, hx_u32 v) {
  __builtin_amdgcn_raw_buffer_store_b32(v, r, voffset, soffset, 0);
}
HX_WAVE_FN void hx_buffer_store_b64(hx_rsrc r, hx_u32 voffset, hx_u32 soffset, hx_v2u v) {
  __builtin_amdgcn_raw_buffer_store_b64(v, r, voffset, soffset, 0);
}
HX_WAVE_FN void hx_buffer_store_b128(hx_rsrc r, hx_u32 voffset, hx_u32 soffset, hx_v4u v) {
  __builtin_amdgcn_raw_buffer_store_b128(v, r, voffset, soffset, 0);
}
#endif

// ------------------------------------------------------- scalar loads
// A 4-byte load every lane makes from the same address, through the scalar
// cache (s_load_dword): it waits on lgkmcnt, not on the vector-memory
// counter that key loads and stores share. The memory must not change during
// the kernel (it is read as constant). The emulator checks the address is
// wave-uniform and counts the load once per wave.
#if defined(HX_EMU)
HX_WAVE_FN hx_u32 hx_scalar_load_b32(const void* p HX_SITE) { return hx_emu_scalar_load(p HX_AT); }
#else
typedef __attribute__((address_space(4))) const hx_u32 hx_constant_u32;
HX_WAVE_FN hx_u32 hx_scalar_load_b32(const void* p) { return *(hx_constant_u32*)p; }
#endif

// ------------------------------------------------------- 64-bit gathers
// Per-lane loads from a full 64-bit address, for gathers no buffer base can
// cover (each lane's own block of a pool past 4 GiB). Only 4-byte alignment
// is assumed: the 16-byte load is one global_load_dwordx4 on gfx950, whose
// unaligned access mode (what ROCm sets up) takes dword-aligned addresses.
// Not a wave primitive: lanes may skip it. The emulator counts its bytes.
#if defined(HX_EMU)
HX_WAVE_FN hx_u32 hx_global_load_b32(const void* p HX_SITE) {
  hx_u32 v;
  hx_emu_global_load(p, &v, 4 HX_AT);
  return v;
}
HX_WAVE_FN hx_v4u hx_global_load_b128(const void* p HX_SITE) {
  hx_v4u v;
  hx_emu_global_load(p, &v, 16 HX_AT);
  return v;
}
#else
typedef hx_v4u hx_v4u_dword_aligned __attribute__((aligned(4)));
typedef __attribute__((address_space(1))) const hx_u32 hx_global_u32;
typedef __attribute__((address_space(1))) const hx_v4u_dword_aligned hx_global_v4u;
HX_WAVE_FN hx_u32 hx_global_load_b32(const void* p) { return *(hx_global_u32*)p; }
HX_WAVE_FN hx_v4u hx_global_load_b128(const void* p) { return *(hx_global_v4u*)p; }
#endif

// ---------------------------------------------------------- global -> LDS
// Each lane's 4 or 16 bytes (buffer range rules as above) land at
// lds + lane * bytes; `lds` must be wave-uniform (it goes to M0). The data
// is only there after hx_lds_load_wait (vmcnt(0)); before it, the emulator's
// LDS still holds its poison. Other waves need a workgroup barrier as well.
// hx_lds_load_wait_count<N> (vmcnt(N)) waits only for what was issued before
// the wave's last N vector memory instructions (loads, stores and loads to LDS
// share one in-order count): the caller must issue exactly N after the load it
// waits for, in every lane (no store skipped under a branch; the emulator
// counts each lane's and requires them equal).
#if defined(HX_EMU)
HX_WAVE_FN void hx_lds_load_b32(hx_rsrc r, void* lds, hx_u32 voffset, hx_u32 soffset HX_SITE) {
  hx_emu_lds_load(r, lds, voffset, soffset, 4 HX_AT);
}
HX_WAVE_FN void hx_lds_load_b128(hx_rsrc r, void* lds, hx_u32 voffset, hx_u32 soffset HX_SITE) {
  hx_emu_lds_load(r, lds, voffset, soffset, 16 HX_AT);
}
HX_WAVE_FN void hx_lds_load_wait(HX_SITE0) { hx_emu_lds_wait(HX_AT0); }
template <unsigned N> HX_WAVE_FN void hx_lds_load_wait_count(HX_SITE0) { hx_emu_lds_wait_count(N HX_AT); }
#else
typedef __attribute__((address_space(3))) void hx_lds_void;
HX_WAVE_FN void hx_lds_load_b32(hx_rsrc r, void* lds, hx_u32 voffset, hx_u32 soffset) {
  __builtin_amdgcn_raw_ptr_buffer_load_lds(r, (hx_lds_void*)lds, 4, voffset, soffset, 0, 0);
}
HX_WAVE_FN void hx_lds_load_b128(hx_rsrc r, void* lds, hx_u32 voffset, hx_u32 soffset) {
  __builtin_amdgcn_raw_ptr_buffer_load_lds(r, (hx_lds_void*)lds, 16, voffset, soffset, 0, 0);
}
HX_WAVE_FN void hx_lds_load_wait() { asm volatile("s_waitcnt vmcnt(0)" ::: "memory"); }
// The builtin, not asm: the compiler then knows what it waited for and adds no wait of its own.
template <unsigned N> HX_WAVE_FN void hx_lds_load_wait_count() {
  static_assert(N < 64, "vmcnt is 6 bits");
  __builtin_amdgcn_s_waitcnt((N & 15) | (N >> 4) << 14 | 0x7 << 4 | 0xF << 8);  // expcnt, lgkmcnt: no wait
}
#endif

// *p += n once for the wave (n wave-uniform, p in LDS), every lane getting the old value: lane 0 alone adds, in
// asm so that neither a lane-0 mask nor the compiler's atomic combining costs registers in a hot loop.
#if defined(HX_EMU)
HX_WAVE_FN hx_u32 hx_lds_add_once(hx_u32* p, hx_u32 n HX_SITE) {
  hx_u32 old = 0;
  if (hx_lane_id() == 0) old = __atomic_fetch_add(p, n, __ATOMIC_RELAXED);
  return hx_readfirstlane(old HX_AT);
}
#else
HX_WAVE_FN hx_u32 hx_lds_add_once(hx_u32* p, hx_u32 n) {
  const hx_u32 a = (hx_u32)(hx_u64)(__attribute__((address_space(3))) hx_u32*)p;
  hx_u32 old_v, old_s;
  hx_u64 saved;
  asm volatile("s_mov_b64 %2, exec\n\ts_mov_b64 exec, 1\n\tds_add_rtn_u32 %0, %3, %4\n\ts_waitcnt lgkmcnt(0)\n\t"
               "s_mov_b64 exec, %2\n\tv_readfirstlane_b32 %1, %0"
               : "=&v"(old_v), "=s"(old_s), "=&s"(saved) : "v"(a), "v"(n) : "memory");
  return old_s;
}
#endif

// -------------------------------------------------------------- fp8 e4m3fn
// OCP e4m3fn (gfx950's fp8). fp8 -> f32 is exact. f32 -> fp8 rounds to
// nearest even and saturates to +-448 (the clamp is ours: see emu/fp8.c);
// NaN inputs are unspecified on the device.
#if defined(HX_EMU)
HX_WAVE_FN float hx_fp8_to_f32(hx_u32 packed, int byte) { return hx_emu_fp8_to_f32((packed >> (8 * byte)) & 0xFFu); }
HX_WAVE_FN hx_u32 hx_f32x2_to_fp8x2(float lo, float hi) {
  return hx_emu_f32_to_fp8(lo) | (hx_emu_f32_to_fp8(hi) << 8);
}
#else
// `byte` must fold to a constant after inlining (the builtin's selector is an immediate).
HX_WAVE_FN float hx_fp8_to_f32(hx_u32 packed, int byte) {
  switch (byte) {
    case 0: return __builtin_amdgcn_cvt_f32_fp8((int)packed, 0);
    case 1: return __builtin_amdgcn_cvt_f32_fp8((int)packed, 1);
    case 2: return __builtin_amdgcn_cvt_f32_fp8((int)packed, 2);
    default: return __builtin_amdgcn_cvt_f32_fp8((int)packed, 3);
  }
}
HX_WAVE_FN hx_u32 hx_f32x2_to_fp8x2(float lo, float hi) {
  lo = __builtin_amdgcn_fmed3f(lo, -448.0f, 448.0f);
  hi = __builtin_amdgcn_fmed3f(hi, -448.0f, 448.0f);
  return (hx_u32)__builtin_amdgcn_cvt_pk_fp8_f32(lo, hi, 0, false) & 0xFFFFu;
}
#endif
HX_WAVE_FN hx_u8 hx_f32_to_fp8(float x) { return (hx_u8)(hx_f32x2_to_fp8x2(x, 0.0f) & 0xFFu); }
