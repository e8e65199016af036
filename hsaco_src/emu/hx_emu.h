// The C ABI between emulated kernel code (wave.h under HX_EMU, compiled by
// clang for the host) and the emulator core (libhxemu.so). Freestanding: no
// libc headers, so kernel translation units stay exactly as freestanding as
// their device build.
//
// Every wave primitive takes the call site (file, line) from a default
// argument evaluated in the kernel, so a divergence report names kernel
// lines, and lanes are matched by site AND by how many primitives each has
// completed (a lane one loop iteration ahead is caught too).
#pragma once

#ifdef __cplusplus
extern "C" {
#endif
// Built with -fvisibility=hidden: these are the library's whole interface.
#pragma GCC visibility push(default)

typedef struct hx_emu_lane_info {
  unsigned tid[3], bid[3], bdim[3], gdim[3];
  unsigned lane;  // 0..63 within the wave
  unsigned wave;  // wave index within the workgroup (linear thread id / 64)
} hx_emu_lane_info;

// The lane now running (set by the scheduler before every switch into a lane).
extern hx_emu_lane_info* hx_emu_cur;

// A buffer resource as the emulator sees it: base address + num_records
// (bytes; stride 0 raw buffer). The device form is __amdgpu_buffer_rsrc_t.
typedef struct hx_emu_rsrc {
  const unsigned char* base;
  unsigned num_records;
} hx_emu_rsrc;

// ---- wave primitives: complete when all 64 lanes of the wave arrive
void hx_emu_mfma_32x32x64_fp8(const void* a, const void* b, const float* c, float* d, int scale_a, int scale_b,
                              const char* file, int line);
void hx_emu_mfma_16x16x128_fp8(const void* a, const void* b, const float* c, float* d, int scale_a, int scale_b,
                               const char* file, int line);
void hx_emu_permlane32_swap(unsigned* x, unsigned* y, const char* file, int line);
void hx_emu_permlane16_swap(unsigned* x, unsigned* y, const char* file, int line);
unsigned hx_emu_bpermute(unsigned value, unsigned src_lane, const char* file, int line);
unsigned hx_emu_readfirstlane(unsigned value, const char* file, int line);
// Bit l of the result: lane l's pred was nonzero (every lane gets the whole mask).
unsigned long long hx_emu_ballot(unsigned pred, const char* file, int line);
void hx_emu_wave_sync(const char* file, int line);
// Global -> LDS: lane l's `bytes` land at lds + l * bytes (lds is wave-uniform).
// The source is read now; LDS is written only at hx_emu_lds_wait.
void hx_emu_lds_load(hx_emu_rsrc r, void* lds, unsigned voffset, unsigned soffset, unsigned bytes, const char* file,
                     int line);
void hx_emu_lds_wait(const char* file, int line);
// s_waitcnt vmcnt(n): the loads to LDS issued before this wave's last n vector memory instructions (buffer
// and global loads, buffer stores, loads to LDS, counted per lane) land; every lane must have issued the same
// number of them, or the count is not the hardware's.
void hx_emu_lds_wait_count(unsigned n, const char* file, int line);

// ---- workgroup: all non-exited lanes of the block
void hx_emu_barrier(const char* file, int line);
// Same address for every lane of the block: allocation n of each lane is
// allocation n of every other lane (sizes must agree).
void* hx_emu_shared(unsigned long bytes, unsigned long align, const char* file, int line);
void* hx_emu_dynamic_shared(const char* file, int line);  // the launch's dynamic bytes, after the HX_SHARED arrays

// ---- per-lane operations
void hx_emu_buffer_load(hx_emu_rsrc r, unsigned voffset, unsigned soffset, void* dst, unsigned bytes, const char* file,
                        int line);
void hx_emu_buffer_store(hx_emu_rsrc r, unsigned voffset, unsigned soffset, const void* src, unsigned bytes,
                         const char* file, int line);
// s_load_dword: every lane's address must be the same; counted once.
unsigned hx_emu_scalar_load(const void* src, const char* file, int line);
// A plain per-lane load from a 64-bit address (counted like the buffer loads).
void hx_emu_global_load(const void* src, void* dst, unsigned bytes, const char* file, int line);
float hx_emu_fp8_to_f32(unsigned byte);  // v_cvt_f32_fp8 (OCP e4m3fn)
unsigned hx_emu_f32_to_fp8(float x);     // saturating RNE (see fp8.c)
// Abort the launch from inside a lane; never returns.
void hx_emu_fail(const char* file, int line, const char* fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));

// ---- launch (used by the emulated HIP runtime and by test harnesses)
typedef struct hx_emu_kernel {
  const char* symbol;
  unsigned param_size;  // sizeof the by-value param struct = the kernarg bytes the kernel reads
  unsigned max_block;   // launch bounds
  void (*lane)(const void* kernarg);  // runs the kernel body for the current lane
} hx_emu_kernel;

// 0 on success; otherwise the launch was aborted and hx_emu_last_error() says why.
int hx_emu_launch(const hx_emu_kernel* k, const void* kernarg, unsigned long kernarg_size, const unsigned grid[3],
                  const unsigned block[3], unsigned long dynamic_shared);
const char* hx_emu_last_error(void);
void hx_emu_set_error(const char* msg);
// Bytes loaded from device memory by the wave primitives (buffer loads and
// global->LDS loads in range, 64-bit gathers): while a hook is set, each such
// load calls it with its source address and size (the emulated HIP runtime
// attributes them to its allocations). NULL stops the calls.
typedef void (*hx_emu_load_hook)(const void* src, unsigned bytes);
void hx_emu_set_load_hook(hx_emu_load_hook hook);
// Counters since load: lane switches, completed wave primitives, lanes run.
void hx_emu_stats(unsigned long long out[3]);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
