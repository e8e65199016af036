#include "fiber.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void hx_fiber_start(void);

// Stacks are mapped a whole number of pages apart, so without an offset every
// fiber's top (its hot frames) would fall in the same sets of a cache indexed
// by the address's low bits: a block's 64 to 1024 lanes would evict each other
// on every switch. Fiber n's top sits COLOR_STEP * n bytes lower, modulo
// COLOR_SPAN, plus one cache line per wrap.
#define COLOR_STEP 2048
#define COLOR_SPAN (128 * 1024)

int hx_fiber_alloc(hx_fiber* f, size_t stack_bytes) {
  static size_t fibers;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t n = fibers++;
  f->color = n * COLOR_STEP % COLOR_SPAN + n * COLOR_STEP / COLOR_SPAN % 64 * 64;
  size_t size = (stack_bytes + f->color + page - 1) / page * page + page;
  void* m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return -1;
  if (mprotect(m, page, PROT_NONE) != 0) {  // stacks grow down: the guard sits below
    munmap(m, size);
    return -1;
  }
  f->map = (char*)m;
  f->map_size = size;
  f->sp = NULL;
  return 0;
}

void hx_fiber_free(hx_fiber* f) {
  if (f->map) munmap(f->map, f->map_size);
  f->map = NULL;
}

void hx_fiber_reset(hx_fiber* f, void (*entry)(void*), void* arg) {
  uintptr_t top = ((uintptr_t)(f->map + f->map_size - f->color)) & ~(uintptr_t)15;
  uint64_t* s = (uint64_t*)top - 8;  // the frame fiber.S pops, see its header
  uint32_t mxcsr;
  uint16_t fpucw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(fpucw));
  s[0] = (uint64_t)mxcsr | ((uint64_t)fpucw << 32);
  s[1] = 0;                          // r15
  s[2] = 0;                          // r14
  s[3] = (uint64_t)(uintptr_t)entry; // r13
  s[4] = (uint64_t)(uintptr_t)arg;   // r12
  s[5] = 0;                          // rbx
  s[6] = 0;                          // rbp
  s[7] = (uint64_t)(uintptr_t)hx_fiber_start;
  f->sp = s;
}
