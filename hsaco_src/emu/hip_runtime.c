// libamdhip64.so for the emulated MI355X: the HIP calls hip-python and
// hipindexer's runtime make, over host memory and the emulated kernels.
// One device; every operation completes before it returns (streams only
// order what is already ordered), so events time the host clock.
//
// Exactness rules: a launch unpacks `extra` as the GPU would (the buffer
// bytes are the kernarg segment, its size must be the kernel's param struct
// size); device allocations sit right before a PROT_NONE page (data ends at
// the guard, rounded to 16 bytes) with another one before them, so stray
// accesses fault; hipModuleLoadData takes the real gfx950 code object and
// finds its emulated twin by sha256 in registry.txt (written by build.py).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hip_props.h"
#include "hx_emu.h"
#include "sha256.h"

#define API __attribute__((visibility("default")))

typedef int hipError_t;
enum {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  hipErrorNotInitialized = 3,
  hipErrorInvalidDeviceFunction = 98,
  hipErrorNoDevice = 100,
  hipErrorInvalidDevice = 101,
  hipErrorInvalidImage = 200,
  hipErrorNoBinaryForGpu = 209,
  hipErrorSharedObjectSymbolNotFound = 302,
  hipErrorInvalidHandle = 400,
  hipErrorNotFound = 500,
  hipErrorNotReady = 600,
  hipErrorLaunchFailure = 719,
  hipErrorNotSupported = 801,
};

#define NUM_CUS 256
#define MI355X_MEM (288ull << 30)
#define HIP_VERSION_ 71526333  // HIP 7.15 (what hip-python 10.0 was generated against)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread hipError_t g_last;
static char g_msg[8192];  // why the last failing call failed (hxEmuLastErrorMessage)

static hipError_t fail(hipError_t e, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static hipError_t fail(hipError_t e, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_msg, sizeof g_msg, fmt, ap);
  va_end(ap);
  g_last = e;
  return e;
}
#define OK return hipSuccess

API const char* hxEmuLastErrorMessage(void) { return g_msg; }

// ------------------------------------------------------------- host memory
// Device allocations are host memory, and fresh ones are written through (poisoned) before hipMalloc
// returns: one larger than the host can give would be killed by the operating system's OOM killer
// instead of failing. So the device reports no more memory than the host has (a cgroup's limit
// included), and hipMalloc refuses, with hipErrorOutOfMemory, what the host cannot give now.

// The number in a file such as /sys/fs/cgroup/memory.max; 0 when it is missing or says "max".
static unsigned long long read_number(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  unsigned long long v = 0;
  if (fscanf(f, "%llu", &v) != 1) v = 0;
  fclose(f);
  return v;
}

// The cgroup's limit and what it has in use (v2, else v1); limit 0: none.
static void cgroup_memory(unsigned long long* limit, unsigned long long* used) {
  *limit = read_number("/sys/fs/cgroup/memory.max");
  *used = read_number("/sys/fs/cgroup/memory.current");
  if (!*limit) {
    *limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    *used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
}

static unsigned long long min_nonzero(unsigned long long a, unsigned long long b) { return !b || a < b ? a : b; }

// What the emulated device reports as its memory: the MI355X's, or the host's where that is less.
static size_t total_mem(void) {
  static size_t total;
  if (!total) {
    unsigned long long limit, used;
    cgroup_memory(&limit, &used);
    unsigned long long phys = (unsigned long long)sysconf(_SC_PHYS_PAGES) * (unsigned long long)sysconf(_SC_PAGESIZE);
    total = (size_t)min_nonzero(min_nonzero(MI355X_MEM, phys), limit);
  }
  return total;
}

// What the host can give now: /proc/meminfo's MemAvailable (free pages where it is missing), within the
// cgroup's limit, within total_mem().
static size_t available_mem(void) {
  unsigned long long avail = 0, kb;
  char line[256];
  FILE* f = fopen("/proc/meminfo", "r");
  if (f) {
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) { avail = kb << 10; break; }
    fclose(f);
  }
  if (!avail) avail = (unsigned long long)sysconf(_SC_AVPHYS_PAGES) * (unsigned long long)sysconf(_SC_PAGESIZE);
  unsigned long long limit, used;
  cgroup_memory(&limit, &used);
  if (limit) avail = min_nonzero(avail, limit > used ? limit - used : 1);
  return (size_t)min_nonzero(avail, total_mem());
}

#define GIB(x) ((double)(x) / (double)(1ull << 30))

// ------------------------------------------------------------- device info
static int g_device;

API hipError_t hipInit(unsigned flags) { (void)flags; OK; }
API hipError_t hipDriverGetVersion(int* v) { if (!v) return fail(hipErrorInvalidValue, "null"); *v = HIP_VERSION_; OK; }
API hipError_t hipRuntimeGetVersion(int* v) { if (!v) return fail(hipErrorInvalidValue, "null"); *v = HIP_VERSION_; OK; }
API hipError_t hipGetDeviceCount(int* n) { if (!n) return fail(hipErrorInvalidValue, "null"); *n = 1; OK; }
static hipError_t check_dev(int d) {
  return d == 0 ? hipSuccess : fail(hipErrorInvalidDevice, "device %d: the emulator has one device (0)", d);
}
API hipError_t hipSetDevice(int d) { if (check_dev(d)) return g_last; g_device = d; OK; }
API hipError_t hipGetDevice(int* d) { if (!d) return fail(hipErrorInvalidValue, "null"); *d = g_device; OK; }
API hipError_t hipDeviceGet(int* dev, int ordinal) { if (check_dev(ordinal)) return g_last; *dev = ordinal; OK; }
API hipError_t hipDeviceTotalMem(size_t* bytes, int d) { if (check_dev(d)) return g_last; *bytes = total_mem(); OK; }
API hipError_t hipDeviceSynchronize(void) { OK; }

API hipError_t hipGetDevicePropertiesR0600(hx_hipDeviceProp_t* p, int d) {
  if (!p) return fail(hipErrorInvalidValue, "null props");
  if (check_dev(d)) return g_last;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "AMD Instinct MI355X (emulated)");
  snprintf(p->gcnArchName, sizeof p->gcnArchName, "gfx950:sramecc+:xnack-");
  p->totalGlobalMem = total_mem();
  p->sharedMemPerBlock = 160 * 1024;
  p->sharedMemPerBlockOptin = 160 * 1024;
  p->sharedMemPerMultiprocessor = 160 * 1024;
  p->maxSharedMemoryPerMultiProcessor = 160 * 1024;
  p->regsPerBlock = 512 * 64;
  p->regsPerMultiprocessor = 512 * 64 * 4;
  p->warpSize = 64;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = p->maxThreadsDim[2] = 1024;
  p->maxGridSize[0] = 0x7FFFFFFF;
  p->maxGridSize[1] = p->maxGridSize[2] = 65536;
  p->clockRate = 2400000;
  p->major = 9;
  p->minor = 5;
  p->multiProcessorCount = NUM_CUS;
  p->l2CacheSize = 4 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->concurrentKernels = 1;
  p->unifiedAddressing = 1;
  p->memoryPoolsSupported = 1;
  p->maxBlocksPerMultiProcessor = 32;
  p->memoryBusWidth = 8192;
  p->memoryClockRate = 2000000;
  return hipSuccess;
}
API hipError_t hipGetDeviceProperties(hx_hipDeviceProp_t* p, int d) { return hipGetDevicePropertiesR0600(p, d); }

// Values of hipDeviceAttribute_t (checked against hip-python's enum by the tests).
API hipError_t hipDeviceGetAttribute(int* v, int attr, int d) {
  if (!v) return fail(hipErrorInvalidValue, "null");
  if (check_dev(d)) return g_last;
  switch (attr) {
    case 63: *v = NUM_CUS; break;                // MultiprocessorCount
    case 87: *v = 64; break;                     // WarpSize
    case 56: *v = 1024; break;                   // MaxThreadsPerBlock
    case 26: case 27: case 28: *v = 1024; break; // MaxBlockDimX/Y/Z
    case 29: *v = 0x7FFFFFFF; break;             // MaxGridDimX
    case 30: case 31: *v = 65536; break;         // MaxGridDimY/Z
    case 74: *v = 160 * 1024; break;             // MaxSharedMemoryPerBlock
    case 10002: *v = 160 * 1024; break;          // MaxSharedMemoryPerMultiprocessor
    case 23: *v = 9; break;                      // ComputeCapabilityMajor
    case 61: *v = 5; break;                      // ComputeCapabilityMinor
    case 5: *v = 2400000; break;                 // ClockRate (kHz)
    case 19: *v = 4 << 20; break;                // L2CacheSize
    case 57: *v = 2048; break;                   // MaxThreadsPerMultiProcessor
    case 71: *v = 512 * 64; break;               // MaxRegistersPerBlock
    case 88: *v = 1; break;                      // MemoryPoolsSupported
    case 85: *v = 1; break;                      // UnifiedAddressing
    case 8: *v = 1; break;                       // ConcurrentKernels
    case 16: *v = 0; break;                      // Integrated
    case 0: *v = 0; break;                       // EccEnabled
    default: return fail(hipErrorInvalidValue, "hipDeviceGetAttribute: attribute %d is not emulated", attr);
  }
  OK;
}

API hipError_t hipGetLastError(void) { hipError_t e = g_last; g_last = hipSuccess; return e; }
API hipError_t hipPeekAtLastError(void) { return g_last; }
API const char* hipGetErrorName(hipError_t e) {
  switch (e) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorInvalidImage: return "hipErrorInvalidImage";
    case hipErrorNoBinaryForGpu: return "hipErrorNoBinaryForGpu";
    case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
    case hipErrorNotFound: return "hipErrorNotFound";
    case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
    case hipErrorNotSupported: return "hipErrorNotSupported";
    default: return "hipErrorUnknown";
  }
}
API const char* hipGetErrorString(hipError_t e) { return hipGetErrorName(e); }

// ------------------------------------------------------------------ memory
typedef struct alloc {
  struct alloc* next;
  unsigned char* ptr;  // what the caller got
  size_t size;
  unsigned char* map;
  size_t map_size;
  unsigned long long loaded;  // bytes the wave primitives loaded from it while counting
} alloc;
static alloc* g_allocs;

// Load counting (hxEmuCountLoads): every load a wave primitive makes is
// attributed to the allocation it reads; loads from anywhere else (host
// memory a test harness hands in) go to g_unattributed.
static alloc* g_last_hit;
static unsigned long long g_unattributed;

static alloc* find_alloc(const void* p) {
  const unsigned char* c = p;
  if (g_last_hit && c >= g_last_hit->ptr && c < g_last_hit->ptr + g_last_hit->size) return g_last_hit;
  for (alloc* a = g_allocs; a; a = a->next)
    if (c >= a->ptr && c < a->ptr + a->size) return g_last_hit = a;
  return NULL;
}

static void count_load(const void* src, unsigned bytes) {
  alloc* a = find_alloc(src);  // launches run under g_lock: no allocation comes or goes meanwhile
  if (a) a->loaded += bytes;
  else g_unattributed += bytes;
}

// on != 0: zero every allocation's count and count from now on; 0: stop counting (the counts stay).
API void hxEmuCountLoads(int on) {
  pthread_mutex_lock(&g_lock);
  if (on) {
    for (alloc* a = g_allocs; a; a = a->next) a->loaded = 0;
    g_unattributed = 0;
  }
  hx_emu_set_load_hook(on ? count_load : NULL);
  pthread_mutex_unlock(&g_lock);
}

// Bytes loaded from the allocation holding p since counting began; p == NULL: loads from no allocation.
API unsigned long long hxEmuLoadedBytes(const void* p) {
  pthread_mutex_lock(&g_lock);
  unsigned long long n = g_unattributed;
  if (p) {
    alloc* a = find_alloc(p);
    n = a ? a->loaded : 0;
  }
  pthread_mutex_unlock(&g_lock);
  return n;
}

static hipError_t do_malloc(void** out, size_t size) {
  if (!out) return fail(hipErrorInvalidValue, "hipMalloc: null result pointer");
  if (size == 0) { *out = NULL; OK; }
  size_t avail = available_mem();
  if (size > avail)
    return fail(hipErrorOutOfMemory, "hipMalloc(%zu bytes, %.2f GiB): more than the host can give the emulated device "
                "(%.2f GiB available now of %.2f GiB)", size, GIB(size), GIB(avail), GIB(total_mem()));
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t data = (size + 15) & ~(size_t)15;
  size_t body = (data + page - 1) / page * page;
  size_t total = body + 2 * page;
  unsigned char* m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return fail(hipErrorOutOfMemory, "hipMalloc(%zu): mmap failed", size);
  mprotect(m, page, PROT_NONE);
  mprotect(m + page + body, page, PROT_NONE);
  alloc* a = malloc(sizeof *a);
  a->ptr = m + page + body - data;
  a->size = size;
  a->map = m;
  a->map_size = total;
  a->loaded = 0;
  memset(a->ptr, 0xFF, data);  // fresh device memory is garbage: make it NaN garbage
  pthread_mutex_lock(&g_lock);
  a->next = g_allocs;
  g_allocs = a;
  pthread_mutex_unlock(&g_lock);
  *out = a->ptr;
  OK;
}

static hipError_t do_free(void* p) {
  if (!p) OK;
  pthread_mutex_lock(&g_lock);
  for (alloc** pp = &g_allocs; *pp; pp = &(*pp)->next) {
    if ((*pp)->ptr == p) {
      alloc* a = *pp;
      *pp = a->next;
      if (g_last_hit == a) g_last_hit = NULL;
      pthread_mutex_unlock(&g_lock);
      munmap(a->map, a->map_size);
      free(a);
      OK;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return fail(hipErrorInvalidValue, "hipFree(%p): not a live allocation", p);
}

API hipError_t hipMalloc(void** p, size_t n) { return do_malloc(p, n); }
API hipError_t hipMallocAsync(void** p, size_t n, void* s) { (void)s; return do_malloc(p, n); }
API hipError_t hipFree(void* p) { return do_free(p); }
API hipError_t hipFreeAsync(void* p, void* s) { (void)s; return do_free(p); }
API hipError_t hipMemGetInfo(size_t* free_, size_t* total) {
  if (!free_ || !total) return fail(hipErrorInvalidValue, "hipMemGetInfo: null result pointer");
  *free_ = available_mem();
  *total = total_mem();
  OK;
}

static hipError_t copy(void* d, const void* s, size_t n) {
  if (n && (!d || !s)) return fail(hipErrorInvalidValue, "memcpy of %zu bytes with a null pointer", n);
  if (n) memmove(d, s, n);
  OK;
}
API hipError_t hipMemcpy(void* d, const void* s, size_t n, int kind) { (void)kind; return copy(d, s, n); }
API hipError_t hipMemcpyAsync(void* d, const void* s, size_t n, int kind, void* st) { (void)kind; (void)st; return copy(d, s, n); }
API hipError_t hipMemcpyHtoD(void* d, const void* s, size_t n) { return copy(d, s, n); }
API hipError_t hipMemcpyDtoH(void* d, const void* s, size_t n) { return copy(d, s, n); }
API hipError_t hipMemcpyDtoD(void* d, const void* s, size_t n) { return copy(d, s, n); }
API hipError_t hipMemcpyHtoDAsync(void* d, const void* s, size_t n, void* st) { (void)st; return copy(d, s, n); }
API hipError_t hipMemcpyDtoHAsync(void* d, const void* s, size_t n, void* st) { (void)st; return copy(d, s, n); }
API hipError_t hipMemcpyDtoDAsync(void* d, const void* s, size_t n, void* st) { (void)st; return copy(d, s, n); }

static hipError_t set(void* d, const void* pat, size_t w, size_t count) {
  if (count && !d) return fail(hipErrorInvalidValue, "memset with a null pointer");
  unsigned char* p = d;
  for (size_t i = 0; i < count; i++) memcpy(p + i * w, pat, w);
  OK;
}
API hipError_t hipMemset(void* d, int v, size_t n) { unsigned char b = (unsigned char)v; return set(d, &b, 1, n); }
API hipError_t hipMemsetAsync(void* d, int v, size_t n, void* s) { (void)s; return hipMemset(d, v, n); }
API hipError_t hipMemsetD8(void* d, unsigned char v, size_t n) { return set(d, &v, 1, n); }
API hipError_t hipMemsetD8Async(void* d, unsigned char v, size_t n, void* s) { (void)s; return set(d, &v, 1, n); }
API hipError_t hipMemsetD16(void* d, unsigned short v, size_t n) { return set(d, &v, 2, n); }
API hipError_t hipMemsetD16Async(void* d, unsigned short v, size_t n, void* s) { (void)s; return set(d, &v, 2, n); }
API hipError_t hipMemsetD32(void* d, int v, size_t n) { return set(d, &v, 4, n); }
API hipError_t hipMemsetD32Async(void* d, int v, size_t n, void* s) { (void)s; return set(d, &v, 4, n); }

// ------------------------------------------------------- streams, events
#define STREAM_MAGIC 0x5354524Du
#define EVENT_MAGIC 0x4556544Eu
typedef struct { unsigned magic; } stream;
typedef struct { unsigned magic, flags; int recorded; double t_ms; } event;

static int bad_stream(void* s) { return s && ((stream*)s)->magic != STREAM_MAGIC; }
static hipError_t new_stream(void** out) {
  if (!out) return fail(hipErrorInvalidValue, "null");
  stream* s = malloc(sizeof *s);
  s->magic = STREAM_MAGIC;
  *out = s;
  OK;
}
API hipError_t hipStreamCreate(void** s) { return new_stream(s); }
API hipError_t hipStreamCreateWithFlags(void** s, unsigned f) { (void)f; return new_stream(s); }
API hipError_t hipStreamDestroy(void* s) {
  if (!s || bad_stream(s)) return fail(hipErrorInvalidHandle, "hipStreamDestroy(%p): not a stream", s);
  ((stream*)s)->magic = 0;
  free(s);
  OK;
}
API hipError_t hipStreamSynchronize(void* s) { return bad_stream(s) ? fail(hipErrorInvalidHandle, "bad stream %p", s) : hipSuccess; }
API hipError_t hipStreamQuery(void* s) { return hipStreamSynchronize(s); }

static int bad_event(void* e) { return !e || ((event*)e)->magic != EVENT_MAGIC; }
static hipError_t new_event(void** out, unsigned flags) {
  if (!out) return fail(hipErrorInvalidValue, "null");
  event* e = calloc(1, sizeof *e);
  e->magic = EVENT_MAGIC;
  e->flags = flags;
  *out = e;
  OK;
}
API hipError_t hipEventCreate(void** e) { return new_event(e, 0); }
API hipError_t hipEventCreateWithFlags(void** e, unsigned f) { return new_event(e, f); }
API hipError_t hipEventDestroy(void* e) {
  if (bad_event(e)) return fail(hipErrorInvalidHandle, "hipEventDestroy(%p): not an event", e);
  ((event*)e)->magic = 0;
  free(e);
  OK;
}
API hipError_t hipEventRecord(void* e, void* s) {
  if (bad_event(e) || bad_stream(s)) return fail(hipErrorInvalidHandle, "hipEventRecord(%p, %p)", e, s);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ((event*)e)->t_ms = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  ((event*)e)->recorded = 1;
  OK;
}
API hipError_t hipEventSynchronize(void* e) { return bad_event(e) ? fail(hipErrorInvalidHandle, "bad event") : hipSuccess; }
API hipError_t hipEventQuery(void* e) { return hipEventSynchronize(e); }
API hipError_t hipEventElapsedTime(float* ms, void* a, void* b) {
  if (!ms || bad_event(a) || bad_event(b)) return fail(hipErrorInvalidHandle, "hipEventElapsedTime: bad event");
  event *x = a, *y = b;
  if ((x->flags | y->flags) & 2) return fail(hipErrorInvalidHandle, "hipEventElapsedTime: event without timing");
  if (!x->recorded || !y->recorded) return fail(hipErrorInvalidHandle, "hipEventElapsedTime: event never recorded");
  *ms = (float)(y->t_ms - x->t_ms);
  OK;
}
API hipError_t hipStreamWaitEvent(void* s, void* e, unsigned f) {
  (void)f;
  if (bad_stream(s) || bad_event(e)) return fail(hipErrorInvalidHandle, "hipStreamWaitEvent(%p, %p)", s, e);
  OK;
}

// ------------------------------------------------------------------ modules
// registry.txt, one line per kernel of each real code object:
//   <sha256 of the gfx950 object> <symbol> <param_size> <emulated .so, relative to the registry>
typedef struct module {
  unsigned magic;
  char sha[65];
} module;
typedef struct function {
  unsigned magic;
  const hx_emu_kernel* k;
  char name[256];
} function;
#define MODULE_MAGIC 0x4D4F444Cu
#define FUNCTION_MAGIC 0x46554E43u

static char g_root[4096];  // directory holding registry.txt: the parent of this library's lib/

static const char* root_dir(void) {
  if (!g_root[0]) {
    Dl_info info;
    if (dladdr((void*)&hipInit, &info) && info.dli_fname) {
      snprintf(g_root, sizeof g_root, "%s", info.dli_fname);
      for (int up = 0; up < 2; up++) {  // .../emu-gfx950/lib/libamdhip64.so -> .../emu-gfx950
        char* slash = strrchr(g_root, '/');
        if (slash) *slash = 0;
      }
    }
  }
  return g_root;
}

// The size of an ELF64 image from its headers alone: hipModuleLoadData gets no length.
static size_t elf_size(const unsigned char* p) {
  if (memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2) return 0;
  uint64_t phoff, shoff;
  uint16_t phentsize, phnum, shentsize, shnum;
  memcpy(&phoff, p + 0x20, 8);
  memcpy(&shoff, p + 0x28, 8);
  memcpy(&phentsize, p + 0x36, 2);
  memcpy(&phnum, p + 0x38, 2);
  memcpy(&shentsize, p + 0x3A, 2);
  memcpy(&shnum, p + 0x3C, 2);
  size_t end = shoff + (size_t)shentsize * shnum;
  if (phoff + (size_t)phentsize * phnum > end) end = phoff + (size_t)phentsize * phnum;
  for (unsigned i = 0; i < shnum; i++) {
    const unsigned char* sh = p + shoff + (size_t)i * shentsize;
    uint32_t type;
    uint64_t off, size;
    memcpy(&type, sh + 4, 4);
    memcpy(&off, sh + 0x18, 8);
    memcpy(&size, sh + 0x20, 8);
    if (type != 8 /* SHT_NOBITS */ && off + size > end) end = off + size;
  }
  for (unsigned i = 0; i < phnum; i++) {
    const unsigned char* ph = p + phoff + (size_t)i * phentsize;
    uint64_t off, filesz;
    memcpy(&off, ph + 8, 8);
    memcpy(&filesz, ph + 0x20, 8);
    if (off + filesz > end) end = off + filesz;
  }
  return end;
}

// Finds (sha, symbol) in the registry; fills the library path and param size. 0 = found.
static int registry_find(const char* sha, const char* symbol, char* lib, size_t nlib, unsigned* param_size,
                         int* sha_known) {
  char path[4200];
  snprintf(path, sizeof path, "%s/registry.txt", root_dir());
  FILE* f = fopen(path, "r");
  *sha_known = 0;
  if (!f) return -1;
  char line[8192], s[80], sym[512], rel[4096];
  unsigned ps;
  int rc = 1;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "%79s %511s %u %4095s", s, sym, &ps, rel) != 4 || strcmp(s, sha) != 0) continue;
    *sha_known = 1;
    if (symbol && strcmp(sym, symbol) == 0) {
      snprintf(lib, nlib, "%s/%s", root_dir(), rel);
      *param_size = ps;
      rc = 0;
      break;
    }
  }
  fclose(f);
  return rc;
}

API hipError_t hipModuleLoadData(void** out, const void* image) {
  if (!out || !image) return fail(hipErrorInvalidValue, "hipModuleLoadData: null");
  const unsigned char* p = image;
  size_t n = elf_size(p);
  if (!n) return fail(hipErrorInvalidImage, "hipModuleLoadData: not an ELF64 code object");
  uint16_t machine;
  memcpy(&machine, p + 0x12, 2);
  uint32_t eflags;
  memcpy(&eflags, p + 0x30, 4);
  if (machine != 224 || (eflags & 0xFF) != 0x4F)
    return fail(hipErrorNoBinaryForGpu, "hipModuleLoadData: e_machine %u mach 0x%x is not a gfx950 code object",
                machine, eflags & 0xFF);
  module* m = calloc(1, sizeof *m);
  m->magic = MODULE_MAGIC;
  hx_sha256_hex(p, n, m->sha);
  char lib[4300];
  unsigned ps;
  int known;
  registry_find(m->sha, NULL, lib, sizeof lib, &ps, &known);
  if (!known) {
    fail(hipErrorInvalidImage, "hipModuleLoadData: no emulated twin for gfx950 code object sha256 %s (%zu bytes) in "
         "%s/registry.txt: rebuild (python build.py)", m->sha, n, root_dir());
    free(m);
    return g_last;
  }
  *out = m;
  OK;
}

API hipError_t hipModuleUnload(void* mod) {
  module* m = mod;
  if (!m || m->magic != MODULE_MAGIC) return fail(hipErrorInvalidHandle, "hipModuleUnload: bad module");
  m->magic = 0;
  free(m);  // the emulated libraries stay loaded: function handles hold no reference to them
  OK;
}

API hipError_t hipModuleGetFunction(void** out, void* mod, const char* name) {
  module* m = mod;
  if (!out || !name) return fail(hipErrorInvalidValue, "hipModuleGetFunction: null");
  if (!m || m->magic != MODULE_MAGIC) return fail(hipErrorInvalidHandle, "hipModuleGetFunction: bad module");
  char lib[4300];
  unsigned ps;
  int known;
  if (registry_find(m->sha, name, lib, sizeof lib, &ps, &known))
    return fail(hipErrorNotFound, "hipModuleGetFunction: no kernel %s in code object %.16s...", name, m->sha);
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) return fail(hipErrorSharedObjectSymbolNotFound, "hipModuleGetFunction: %s", dlerror());
  char sym[400];
  snprintf(sym, sizeof sym, "hx_emu_kernel_%s", name);
  const hx_emu_kernel* k = dlsym(h, sym);
  if (!k) return fail(hipErrorNotFound, "hipModuleGetFunction: %s has no %s", lib, sym);
  if (k->param_size != ps)
    return fail(hipErrorInvalidImage, "hipModuleGetFunction: %s: registry says %u param bytes, library says %u", name,
                ps, k->param_size);
  function* f = calloc(1, sizeof *f);
  f->magic = FUNCTION_MAGIC;
  f->k = k;
  snprintf(f->name, sizeof f->name, "%s", name);
  *out = f;
  OK;
}

API hipError_t hipModuleLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shared, void* st, void** kernelParams, void** extra) {
  function* f = fn;
  if (!f || f->magic != FUNCTION_MAGIC) return fail(hipErrorInvalidHandle, "hipModuleLaunchKernel: bad function");
  if (bad_stream(st)) return fail(hipErrorInvalidHandle, "hipModuleLaunchKernel: bad stream %p", st);
  if (kernelParams)
    return fail(hipErrorNotSupported, "hipModuleLaunchKernel(%s): kernelParams are not emulated; pass the packed "
                "struct through `extra`", f->name);
  if (!extra) return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): no `extra`", f->name);
  // extra = {HIP_LAUNCH_PARAM_BUFFER_POINTER (1), buf, HIP_LAUNCH_PARAM_BUFFER_SIZE (2), &size, HIP_LAUNCH_PARAM_END (3)}
  const void* buf = NULL;
  const size_t* size = NULL;
  for (int i = 0;; i += 2) {
    uintptr_t tag = (uintptr_t)extra[i];
    if (tag == 3) break;
    if (i > 16) return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): `extra` has no END", f->name);
    if (tag == 1) buf = extra[i + 1];
    else if (tag == 2) size = (const size_t*)extra[i + 1];
    else return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): unknown `extra` tag %lu", f->name, (unsigned long)tag);
  }
  if (!buf || !size) return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): `extra` lacks the buffer or its size", f->name);
  if (*size != f->k->param_size)
    return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): kernarg buffer of %zu bytes, the kernel's parameter "
                "struct is %u", f->name, *size, f->k->param_size);
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  pthread_mutex_lock(&g_lock);
  int rc = hx_emu_launch(f->k, buf, *size, grid, block, shared);
  if (rc) fail(hipErrorLaunchFailure, "%s", hx_emu_last_error());
  pthread_mutex_unlock(&g_lock);
  return rc ? hipErrorLaunchFailure : hipSuccess;
}
