// Emulator core internals shared by core.c (scheduler, launch) and prims.c
// (what each wave primitive does once its 64 lanes have arrived).
#pragma once
#include <stdarg.h>
#include <stddef.h>

#include "fiber.h"
#include "hx_emu.h"

#define HX_EMU_WAVE 64
#define HX_EMU_MAX_BLOCK 1024
#define HX_EMU_LDS_BYTES (160 * 1024)  // gfx950: 160 KiB addressable per workgroup
#define HX_EMU_MAX_PENDING 63          // vmcnt is 6 bits on gfx9

enum hx_lane_state { LANE_RUN, LANE_WAVE, LANE_BARRIER, LANE_EXIT, LANE_FAILED };

enum hx_prim_kind {
  PRIM_NONE,
  PRIM_MFMA32,
  PRIM_MFMA16,
  PRIM_PERMLANE32_SWAP,
  PRIM_BPERMUTE,
  PRIM_READFIRSTLANE,
  PRIM_WAVE_SYNC,
  PRIM_LDS_LOAD,
  PRIM_LDS_WAIT,
  PRIM_BARRIER,
  PRIM_PERMLANE16_SWAP,
  PRIM_SCALAR_LOAD,
  PRIM_BALLOT,
  PRIM_COUNT
};

typedef struct hx_lane {
  hx_fiber fiber;
  hx_emu_lane_info info;
  int state;
  int kind;            // primitive it waits at
  const char* file;    // its call site
  int line;
  unsigned long seq;   // primitives this lane has completed in this workgroup
  void* args;          // the primitive's operands, on the lane's own stack
  unsigned shared_n;   // next HX_SHARED allocation index
  unsigned long vmops; // vector memory instructions this lane has issued in this workgroup (vmcnt's count)
} hx_lane;

// One outstanding global->LDS load of one wave: data already read, written at the wait.
typedef struct hx_pending {
  unsigned char* dst;
  unsigned bytes;
  unsigned long vmop;   // its place in the wave's vector memory instructions (lane 0's vmops at issue)
  unsigned char data[HX_EMU_WAVE * 16];
} hx_pending;

typedef struct hx_wave {
  hx_lane* lanes[HX_EMU_WAVE];
  unsigned nlanes;     // < 64 only for the last wave of a block whose size is not a multiple of 64
  hx_pending pending[HX_EMU_MAX_PENDING];
  unsigned npending;
} hx_wave;

extern const char* const hx_prim_names[PRIM_COUNT];

// Suspend the calling lane at a primitive until all its wave (or block) arrives.
void hx_rendezvous(int kind, void* args, const char* file, int line);
// The current lane / its wave.
hx_lane* hx_self(void);
hx_wave* hx_self_wave(void);
// LDS arena of the running workgroup, and the bytes handed out so far.
unsigned char* hx_lds_base(void);
unsigned long hx_lds_used(void);
// Abort the launch: from a lane (switches away for good) or from the scheduler.
void hx_fail_lane(const char* file, int line, const char* fmt, va_list ap) __attribute__((noreturn));
int hx_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Runs primitive `kind` for a wave whose lanes all arrived; 0 ok, else hx_error was called.
int hx_collective(int kind, hx_wave* w);
// Buffer range rule shared by buffer loads and global->LDS loads:
// 1 = wholly in range, 0 = wholly out of range; a straddle aborts the lane.
// The load hook (hx_emu_set_load_hook): called by every counted load; NULL when nobody counts.
extern hx_emu_load_hook hx_load_hook;
int hx_buffer_in_range(hx_emu_rsrc r, unsigned voffset, unsigned soffset, unsigned bytes, const char* what,
                       const char* file, int line);
