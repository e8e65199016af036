// Proves the host's packed EchoParams and the compiler's layout agree, field
// by field. out must hold 2 * sizeof(EchoParams) zeroed bytes:
//   out[0, size):      every field re-stored from its TYPED value at its C
//                      offset (a host offset that differs from C's makes the
//                      kernel read a different value: mismatch);
//   out[size, 2*size): the struct copied byte for byte (kernarg transport).
// The host compares both halves with the bytes it packed.
#include "index_math.h"  // not used here: keeps it compiling for every target
#include "hx_params.h"

#define HX_ECHO_AT(T, field) (*(T*)(o + __builtin_offsetof(EchoParams, field)) = p.field)

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_echo_params(const HX_GRID_CONSTANT EchoParams p) {
  hx_grid_dependency_wait();
  hx_u8* o = p.out;
  const hx_u32 t = hx_thread_x();
  if (hx_block_x() == 0 && t == 0) {
    HX_ECHO_AT(hx_u8*, out);
    HX_ECHO_AT(hx_u8, a_u8);
    HX_ECHO_AT(hx_i32, b_i32);
    HX_ECHO_AT(hx_u32, c_u32);
    HX_ECHO_AT(hx_i64, d_i64);
    HX_ECHO_AT(hx_u64, e_u64);
    HX_ECHO_AT(float, f_f32);
    HX_ECHO_AT(double, g_f64);
    HX_ECHO_AT(void*, h_ptr);
    HX_ECHO_AT(hx_u8, tail_u8);
  }
  // The blob as 16-byte typed loads: only valid if it really is 16-aligned.
  const hx_u32 n16 = sizeof(p.blob) / 16;
  if (hx_block_x() == 0 && t < n16)
    ((hx_u32x4*)(o + __builtin_offsetof(EchoParams, blob)))[t] = ((const hx_u32x4*)p.blob)[t];
  const hx_u8* raw = (const hx_u8*)&p;
  for (hx_u32 i = t; i < sizeof(EchoParams); i += HX_BLOCK)
    if (hx_block_x() == 0) o[sizeof(EchoParams) + i] = raw[i];
}
