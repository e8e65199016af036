// Lane fibers: an mmap'd stack with a PROT_NONE guard page below it (a
// runaway kernel stack faults instead of corrupting a neighbour) and the
// hand-rolled switch of fiber.S.
#pragma once
#include <stddef.h>

typedef struct hx_fiber {
  void* sp;          // saved stack pointer while suspended
  char* map;         // whole mapping, guard page included
  size_t map_size;
  size_t color;      // bytes left unused above the stack's top (see hx_fiber_alloc)
} hx_fiber;

#ifdef __cplusplus
extern "C" {
#endif
int hx_fiber_alloc(hx_fiber* f, size_t stack_bytes);  // 0 on success
void hx_fiber_free(hx_fiber* f);
// Make f start entry(arg) at its next switch-in (discarding whatever it was doing).
void hx_fiber_reset(hx_fiber* f, void (*entry)(void*), void* arg);
void hx_fiber_switch(void** save_sp, void* load_sp);
#ifdef __cplusplus
}
#endif
