// What platform.h provides on the device, for kernel code compiled for the
// host emulator (HX_EMU): thread/block ids from the running lane, the
// workgroup barrier as a block rendezvous. platform.h includes this when
// HX_EMU is defined; wave.h includes it too (pragma once).
#pragma once
#include "hx_emu.h"

#define HX_EMU_PLATFORM 1
#define HX_WAVE_SIZE 64

#define HX_EMU_ID(name, field) \
  static inline __attribute__((always_inline)) hx_u32 name() { return hx_emu_cur->field; }
HX_EMU_ID(hx_thread_x, tid[0])
HX_EMU_ID(hx_thread_y, tid[1])
HX_EMU_ID(hx_thread_z, tid[2])
HX_EMU_ID(hx_block_x, bid[0])
HX_EMU_ID(hx_block_y, bid[1])
HX_EMU_ID(hx_block_z, bid[2])
HX_EMU_ID(hx_block_dim_x, bdim[0])
HX_EMU_ID(hx_block_dim_y, bdim[1])
HX_EMU_ID(hx_block_dim_z, bdim[2])
HX_EMU_ID(hx_grid_dim_x, gdim[0])
HX_EMU_ID(hx_grid_dim_y, gdim[1])
HX_EMU_ID(hx_grid_dim_z, gdim[2])
HX_EMU_ID(hx_lane, lane)
#undef HX_EMU_ID

static inline __attribute__((always_inline)) void hx_barrier(const char* file = __builtin_FILE(),
                                                             int line = __builtin_LINE()) {
  hx_emu_barrier(file, line);
}
