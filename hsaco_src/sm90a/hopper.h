// Hopper (sm_90a) tile primitives as inline PTX, freestanding: mbarriers,
// cp.async with zero-fill, the async-proxy fence, wgmma (fence / issue /
// commit / wait) with its shared-memory matrix descriptor, setmaxnreg,
// warp shuffles, named barriers and e4m3 <-> f32 conversions. NVIDIA-only:
// include from sm90a kernels.
#pragma once
#include "platform.h"

#if !defined(HX_NVIDIA)
#error "hopper.h is sm_90a device code"
#endif

HX_INLINE __device__ hx_u32 hx_smem_u32(const void* p) {
  return (hx_u32)__cvta_generic_to_shared(p);
}

// ---------------------------------------------------------------- mbarrier
HX_INLINE __device__ void hx_mbar_init(hx_u32 bar, hx_u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
HX_INLINE __device__ void hx_mbar_arrive(hx_u32 bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" :: "r"(bar) : "memory");
}
// Whether the phase with the given parity (0/1) has completed, without blocking.
HX_INLINE __device__ bool hx_mbar_test(hx_u32 bar, hx_u32 parity) {
  hx_u32 ok;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}
// Blocks until the phase with the given parity (0/1) has completed. The retry loop lives inside the asm:
// a loop the compiler sees is a divergent path to ptxas, which then serialises any wgmma in flight across it.
HX_INLINE __device__ void hx_mbar_wait(hx_u32 bar, hx_u32 parity) {
  asm volatile(
      "{\n.reg .pred p;\nHX_MBAR_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra HX_MBAR_WAIT_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}
// Arrive on `bar` once every cp.async this thread issued so far has landed
// (does not raise the expected count: the barrier counts these arrivals).
HX_INLINE __device__ void hx_cp_async_arrive(hx_u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(bar) : "memory");
}

// ---------------------------------------------------------------- cp.async
// 16 bytes global -> shared through L2 only; src_bytes 0 writes zeros (and reads nothing).
HX_INLINE __device__ void hx_cp_async16(hx_u32 dst, const void* src, hx_u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// The same copy at a compile-time byte offset from both addresses: one base register pair serves a
// whole unrolled tile ([reg + imm] addressing), where per-copy 64-bit address arithmetic made every
// copy wait for the previous one to release its address registers.
template <int OFF>
HX_INLINE __device__ void hx_cp_async16_at(hx_u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0+%2], [%1+%2], 16;" :: "r"(dst), "l"(src), "n"(OFF) : "memory");
}
// 4 bytes at compile-time offsets (one each side) from two base addresses.
template <int DOFF, int SOFF>
HX_INLINE __device__ void hx_cp_async4_at(hx_u32 dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0+%2], [%1+%3], 4;" :: "r"(dst), "l"(src), "n"(DOFF), "n"(SOFF) : "memory");
}
HX_INLINE __device__ void hx_cp_async4(hx_u32 dst, const void* src, hx_u32 src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// cp.async bookkeeping by groups: commit closes a group of this thread's copies; wait<N> returns once
// at most N of its groups are still in flight (groups complete in order).
HX_INLINE __device__ void hx_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
HX_INLINE __device__ void hx_cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
// Generic-proxy writes (cp.async, st.shared) made visible to the async proxy (wgmma operand reads).
HX_INLINE __device__ void hx_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Named barrier `id` (1..15; 0 is the block barrier) over `count` threads, whole warps.
HX_INLINE __device__ void hx_named_barrier(hx_u32 id, hx_u32 count) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
}

// ---------------------------------------------------------------- fp8 e4m3
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

// ---------------------------------------------------------------- registers
template <int N>
HX_INLINE __device__ void hx_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N)); }
template <int N>
HX_INLINE __device__ void hx_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N)); }

HX_INLINE __device__ float hx_shfl_xor(float v, int m) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(m));
  return r;
}

// Lane 0's value for the whole warp: the compiler then knows it is warp-uniform and keeps what derives
// from it (wgmma descriptors, loop bounds) in uniform registers instead of per-lane ones.
HX_INLINE __device__ hx_i32 hx_uniform_i32(hx_i32 v) {
  hx_i32 r;
  asm volatile("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v));
  return r;
}

// The lane index, read afresh at each use (volatile): a lane-derived value kept live across the math loop
// is what ptxas spills first.
HX_INLINE __device__ hx_u32 hx_lane_reread() {
  hx_u32 l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

HX_INLINE __device__ hx_i32 hx_shfl_xor_i32(hx_i32 v, int m) {
  hx_i32 r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(m));
  return r;
}

// ---------------------------------------------------------------- branch-free forms
// While a wgmma is in flight, a branch the compiler emits is a divergent path to ptxas, which then
// serialises every wgmma of the kernel: a conditional store as one predicated instruction.
HX_INLINE __device__ void hx_store_f32_if(bool c, float* dst, float v) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0; @p st.global.f32 [%0], %1; }"
               :: "l"(dst), "f"(v), "r"((hx_u32)c) : "memory");
}

// ---------------------------------------------------------------- wgmma
// Shared-memory matrix descriptor, K-major operand in the 128-byte swizzle:
// rows of 128 bytes, 8-row atoms of 1024 bytes (the tile base 1024-aligned),
// 16-byte chunk c of row r stored at chunk c ^ (r % 8). Stepping K by 32
// bytes inside the atom adds 2 to the address field.
HX_INLINE __device__ hx_u64 hx_wgmma_desc_sw128(hx_u32 smem_addr) {
  return (hx_u64)((smem_addr & 0x3FFFFu) >> 4) | ((hx_u64)1 << 16) | ((hx_u64)(1024 >> 4) << 32) | ((hx_u64)1 << 62);
}
// Byte offset of 16-byte chunk c of row r inside such a tile.
HX_INLINE __device__ hx_u32 hx_sw128_offset(hx_u32 r, hx_u32 c) { return r * 128u + ((c ^ (r & 7u)) << 4); }

HX_INLINE __device__ void hx_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
HX_INLINE __device__ void hx_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
HX_INLINE __device__ void hx_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

// Pins accumulator registers at this point (no compiler motion of reads or writes across it).
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
