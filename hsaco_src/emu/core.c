// Scheduler and launch. A workgroup's lanes are fibers on the calling thread.
// Each wave runs lane by lane until every lane waits at a primitive; the
// primitive then executes for the whole wave (prims.c) and the lanes resume.
// A wave that reaches a workgroup barrier (or exits) yields to the next wave;
// when all waves are there, the barrier opens. Lanes never preempt each other,
// so everything between two primitives is plain sequential C for one lane.
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

hx_emu_lane_info* hx_emu_cur;

const char* const hx_prim_names[PRIM_COUNT] = {
    "(none)",         "hx_mfma_32x32x64_fp8", "hx_mfma_16x16x128_fp8", "hx_permlane32_swap", "hx_shfl",
    "hx_readfirstlane", "hx_wave_sync",       "hx_lds_load",           "hx_lds_load_wait",   "hx_workgroup_barrier",
    "hx_permlane16_swap", "hx_scalar_load_b32", "hx_ballot",
};

#define STACK_BYTES (256 * 1024)

static struct {
  hx_lane lanes[HX_EMU_MAX_BLOCK];
  unsigned nfibers;  // lanes[0, nfibers) own a stack
  hx_wave waves[HX_EMU_MAX_BLOCK / HX_EMU_WAVE];
  void* sched_sp;
  hx_lane* cur;
  const hx_emu_kernel* kernel;
  const void* kernarg;
  unsigned char* lds;  // HX_EMU_LDS_BYTES, guard page after
  unsigned long lds_used;
  struct { unsigned long off, bytes; } shared_allocs[256];
  unsigned nshared;
  unsigned long dynamic_shared;  // the launch's dynamic shared bytes: what HX_DYNAMIC_SHARED gets
  int failed;
  unsigned long long switches, prims, lanes_run, launches;
} S;

static char g_error[8192];

const char* hx_emu_last_error(void) { return g_error; }
void hx_emu_set_error(const char* msg) { snprintf(g_error, sizeof g_error, "%s", msg); }

void hx_emu_stats(unsigned long long out[3]) {
  out[0] = S.switches;
  out[1] = S.prims;
  out[2] = S.lanes_run;
}

int hx_error(const char* fmt, ...) {
  if (S.failed) return 1;  // keep the first cause
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof g_error, fmt, ap);
  va_end(ap);
  S.failed = 1;
  return 1;
}

hx_lane* hx_self(void) { return S.cur; }
hx_wave* hx_self_wave(void) { return &S.waves[S.cur->info.wave]; }
unsigned char* hx_lds_base(void) { return S.lds; }
unsigned long hx_lds_used(void) { return S.lds_used; }

static void where(char* buf, size_t n, const hx_lane* l) {
  snprintf(buf, n, "block (%u,%u,%u) wave %u", l->info.bid[0], l->info.bid[1], l->info.bid[2], l->info.wave);
}

void hx_fail_lane(const char* file, int line, const char* fmt, va_list ap) {
  hx_lane* l = S.cur;
  char msg[4096], at[128];
  vsnprintf(msg, sizeof msg, fmt, ap);
  where(at, sizeof at, l);
  hx_error("%s (at %s:%d, %s lane %u, thread (%u,%u,%u))", msg, file, line, at, l->info.lane, l->info.tid[0],
           l->info.tid[1], l->info.tid[2]);
  l->state = LANE_FAILED;
  S.switches++;
  hx_fiber_switch(&l->fiber.sp, S.sched_sp);
  abort();  // a failed lane is never resumed
}

void hx_emu_fail(const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hx_fail_lane(file, line, fmt, ap);
}

// Lane l stops (at a primitive, or for good): the next lane of its wave that
// can run goes on from here, else the scheduler does. Going lane to lane
// rather than through the scheduler halves the switches a primitive costs; the
// scheduler still runs each primitive once all its wave has arrived.
static void yield_lane(hx_lane* l) {
  hx_wave* w = &S.waves[l->info.wave];
  S.switches++;
  for (unsigned i = l->info.lane + 1; i < w->nlanes; i++) {
    hx_lane* next = w->lanes[i];
    if (next->state != LANE_RUN) continue;
    S.cur = next;
    hx_emu_cur = &next->info;
    hx_fiber_switch(&l->fiber.sp, next->fiber.sp);
    return;
  }
  hx_fiber_switch(&l->fiber.sp, S.sched_sp);
}

void hx_rendezvous(int kind, void* args, const char* file, int line) {
  hx_lane* l = S.cur;
  l->kind = kind;
  l->args = args;
  l->file = file;
  l->line = line;
  l->state = kind == PRIM_BARRIER ? LANE_BARRIER : LANE_WAVE;
  yield_lane(l);
  l->seq++;
}

void hx_emu_barrier(const char* file, int line) { hx_rendezvous(PRIM_BARRIER, NULL, file, line); }
void hx_emu_wave_sync(const char* file, int line) { hx_rendezvous(PRIM_WAVE_SYNC, NULL, file, line); }

void* hx_emu_shared(unsigned long bytes, unsigned long align, const char* file, int line) {
  hx_lane* l = S.cur;
  unsigned n = l->shared_n++;
  if (n >= sizeof S.shared_allocs / sizeof S.shared_allocs[0]) hx_emu_fail(file, line, "too many HX_SHARED arrays");
  if (n == S.nshared) {  // first lane to get here places it; the others must ask for the same
    unsigned long off = (S.lds_used + align - 1) / align * align;
    if (off + bytes > HX_EMU_LDS_BYTES)
      hx_emu_fail(file, line, "HX_SHARED: %lu bytes at offset %lu exceed the %u bytes of LDS", bytes, off,
                  HX_EMU_LDS_BYTES);
    S.shared_allocs[n].off = off;
    S.shared_allocs[n].bytes = bytes;
    S.lds_used = off + bytes;
    S.nshared++;
  } else if (S.shared_allocs[n].bytes != bytes) {
    hx_emu_fail(file, line, "HX_SHARED #%u: this lane asks for %lu bytes, another lane got %lu (lanes must declare "
                "the same shared arrays in the same order)", n, bytes, S.shared_allocs[n].bytes);
  }
  return S.lds + S.shared_allocs[n].off;
}

void* hx_emu_dynamic_shared(const char* file, int line) {
  if (!S.dynamic_shared) hx_emu_fail(file, line, "HX_DYNAMIC_SHARED in a launch with no dynamic shared memory");
  return hx_emu_shared(S.dynamic_shared, 16, file, line);
}

static void lane_main(void* arg) {
  hx_lane* l = (hx_lane*)arg;
  S.kernel->lane(S.kernarg);
  l->state = LANE_EXIT;
  yield_lane(l);
  abort();  // an exited lane is never resumed
}

// Runs l and the lanes of its wave after it that can run (yield_lane), until
// the scheduler is switched back to: 1 if a lane failed.
static int run_lane(hx_lane* l) {
  S.cur = l;
  hx_emu_cur = &l->info;
  S.switches++;
  hx_fiber_switch(&S.sched_sp, l->fiber.sp);
  return S.failed;
}

// "lanes 0-31,40" style list of the lanes of w for which pick() holds.
static void lane_list(char* buf, size_t n, const hx_wave* w, int (*pick)(const hx_lane*, const hx_lane*),
                      const hx_lane* ref) {
  size_t len = 0;
  buf[0] = 0;
  for (unsigned i = 0; i < w->nlanes;) {
    if (!pick(w->lanes[i], ref)) { i++; continue; }
    unsigned j = i;
    while (j + 1 < w->nlanes && pick(w->lanes[j + 1], ref)) j++;
    len += snprintf(buf + len, n > len ? n - len : 0, len ? ",%u" : "%u", i);
    if (j > i) len += snprintf(buf + len, n > len ? n - len : 0, "-%u", j);
    i = j + 1;
  }
}

static int same_site(const hx_lane* a, const hx_lane* b) {
  return a->state == b->state && a->kind == b->kind && a->line == b->line && a->seq == b->seq &&
         (a->file == b->file || strcmp(a->file, b->file) == 0);
}
static int is_exited(const hx_lane* a, const hx_lane* b) { (void)b; return a->state == LANE_EXIT; }

static void describe(char* buf, size_t n, const hx_lane* l) {
  if (l->state == LANE_EXIT)
    snprintf(buf, n, "exited");
  else
    snprintf(buf, n, "at %s (%s:%d, primitive #%lu of the lane)", hx_prim_names[l->kind], l->file, l->line, l->seq);
}

// Every lane of w waits somewhere (none runnable). 1 = a wave primitive completed,
// 0 = the wave is at a barrier or done, -1 = error.
static int settle_wave(hx_wave* w) {
  hx_lane* first = NULL;
  for (unsigned i = 0; i < w->nlanes; i++)
    if (w->lanes[i]->state == LANE_WAVE) { first = w->lanes[i]; break; }
  if (!first) return 0;
  char at[128];
  where(at, sizeof at, first);
  for (unsigned i = 0; i < w->nlanes; i++) {
    hx_lane* l = w->lanes[i];
    if (same_site(l, first)) continue;
    char a[256], b[256], la[512], lb[512];
    describe(a, sizeof a, first);
    describe(b, sizeof b, l);
    lane_list(la, sizeof la, w, same_site, first);
    if (l->state == LANE_EXIT)
      lane_list(lb, sizeof lb, w, is_exited, l);
    else
      lane_list(lb, sizeof lb, w, same_site, l);
    hx_error("%s: %s while lanes %s wait %s: wave primitives must be reached by all 64 lanes at the same site",
             at, l->state == LANE_EXIT ? "exited lane" : "divergent wave primitive", la, a);
    char tail[1200];
    snprintf(tail, sizeof tail, "; lanes %s are %s", lb, b);
    strncat(g_error, tail, sizeof g_error - strlen(g_error) - 1);
    return -1;
  }
  if (w->nlanes != HX_EMU_WAVE)
    return -(hx_error("%s: %s (%s:%d) in a partial wave of %u lanes (block size not a multiple of 64)", at,
                      hx_prim_names[first->kind], first->file, first->line, w->nlanes) != 0);
  S.prims++;
  if (hx_collective(first->kind, w)) return -1;
  return 1;
}

static int run_block(unsigned nthreads) {
  unsigned nwaves = (nthreads + HX_EMU_WAVE - 1) / HX_EMU_WAVE;
  for (;;) {
    int any_barrier = 0;
    for (unsigned wi = 0; wi < nwaves; wi++) {
      hx_wave* w = &S.waves[wi];
      for (;;) {
        for (unsigned i = 0; i < w->nlanes; i++) {
          hx_lane* l = w->lanes[i];
          if (l->state == LANE_RUN && run_lane(l)) return 1;
        }
        int r = settle_wave(w);
        if (r < 0) return 1;
        if (r == 0) break;
        for (unsigned i = 0; i < w->nlanes; i++) w->lanes[i]->state = LANE_RUN;
      }
      for (unsigned i = 0; i < w->nlanes; i++) any_barrier |= w->lanes[i]->state == LANE_BARRIER;
    }
    if (!any_barrier) return 0;
    S.prims++;
    for (unsigned i = 0; i < nthreads; i++)
      if (S.lanes[i].state == LANE_BARRIER) S.lanes[i].state = LANE_RUN;
  }
}

static int ensure_fibers(unsigned n) {
  while (S.nfibers < n) {
    if (hx_fiber_alloc(&S.lanes[S.nfibers].fiber, STACK_BYTES)) return hx_error("cannot map a lane stack");
    S.nfibers++;
  }
  if (!S.lds) {
    long page = sysconf(_SC_PAGESIZE);
    size_t bytes = (HX_EMU_LDS_BYTES + page - 1) / page * page;
    unsigned char* m = mmap(NULL, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return hx_error("cannot map the LDS arena");
    mprotect(m + bytes, page, PROT_NONE);  // running off the end of LDS faults
    S.lds = m + bytes - HX_EMU_LDS_BYTES;
  }
  return 0;
}

// splitmix64: the workgroup order generator.
static unsigned long long mix(unsigned long long* s) {
  unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static unsigned long long seed_for_launch(void) {
  const char* e = getenv("HX_EMU_SEED");
  unsigned long long seed = e && *e ? strtoull(e, NULL, 0) : 0x5EEDull;
  return seed ^ (S.launches * 0xD1B54A32D192ED03ull);
}

int hx_emu_launch(const hx_emu_kernel* k, const void* kernarg, unsigned long kernarg_size, const unsigned grid[3],
                  const unsigned block[3], unsigned long dynamic_shared) {
  S.failed = 0;
  g_error[0] = 0;
  unsigned long long nthreads = (unsigned long long)block[0] * block[1] * block[2];
  unsigned long long nblocks = (unsigned long long)grid[0] * grid[1] * grid[2];
  if (kernarg_size != k->param_size)
    return hx_error("%s: kernarg buffer is %lu bytes, the kernel's parameter struct is %u", k->symbol, kernarg_size,
                    k->param_size);
  if (nthreads == 0 || nblocks == 0) return hx_error("%s: empty grid or block", k->symbol);
  if (nthreads > k->max_block)
    return hx_error("%s: block of %llu threads exceeds the kernel's launch bounds (%u)", k->symbol, nthreads,
                    k->max_block);
  if (dynamic_shared > HX_EMU_LDS_BYTES)
    return hx_error("%s: %lu bytes of dynamic shared memory exceed the %u bytes of LDS", k->symbol, dynamic_shared,
                    HX_EMU_LDS_BYTES);
  S.dynamic_shared = dynamic_shared;
  if (ensure_fibers((unsigned)nthreads)) return 1;

  // The kernarg segment: 64-aligned like the largest param alignment we declare.
  static unsigned char __attribute__((aligned(64))) kbuf[4096];
  if (kernarg_size > sizeof kbuf) return hx_error("%s: kernarg of %lu bytes is too large", k->symbol, kernarg_size);
  memcpy(kbuf, kernarg, kernarg_size);
  S.kernel = k;
  S.kernarg = kbuf;

  unsigned long long seed = seed_for_launch();
  S.launches++;
  unsigned* order = malloc(sizeof(unsigned) * nblocks);
  if (!order) return hx_error("out of memory for %llu workgroups", nblocks);
  for (unsigned long long i = 0; i < nblocks; i++) order[i] = (unsigned)i;
  for (unsigned long long i = nblocks; i > 1; i--) {
    unsigned long long j = mix(&seed) % i;
    unsigned t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }

  unsigned nwaves = (unsigned)((nthreads + HX_EMU_WAVE - 1) / HX_EMU_WAVE);
  int rc = 0;
  for (unsigned long long bi = 0; bi < nblocks && !rc; bi++) {
    unsigned b = order[bi];
    unsigned bid[3] = {b % grid[0], (b / grid[0]) % grid[1], b / (grid[0] * grid[1])};
    memset(S.lds, 0xFF, HX_EMU_LDS_BYTES);  // poison: uninitialised LDS reads as NaN
    S.lds_used = 0;
    S.nshared = 0;
    for (unsigned wi = 0; wi < nwaves; wi++) {
      S.waves[wi].nlanes = 0;
      S.waves[wi].npending = 0;
    }
    for (unsigned t = 0; t < nthreads; t++) {
      hx_lane* l = &S.lanes[t];
      hx_emu_lane_info* in = &l->info;
      in->tid[0] = t % block[0];
      in->tid[1] = (t / block[0]) % block[1];
      in->tid[2] = t / (block[0] * block[1]);
      for (int d = 0; d < 3; d++) {
        in->bid[d] = bid[d];
        in->bdim[d] = block[d];
        in->gdim[d] = grid[d];
      }
      in->lane = t % HX_EMU_WAVE;
      in->wave = t / HX_EMU_WAVE;
      l->state = LANE_RUN;
      l->seq = 0;
      l->shared_n = 0;
      l->vmops = 0;
      l->kind = PRIM_NONE;
      hx_fiber_reset(&l->fiber, lane_main, l);
      hx_wave* w = &S.waves[in->wave];
      w->lanes[w->nlanes++] = l;
    }
    S.lanes_run += nthreads;
    rc = run_block((unsigned)nthreads);
  }
  free(order);
  S.cur = NULL;
  hx_emu_cur = NULL;
  if (rc && !S.failed) hx_error("%s: launch failed", k->symbol);
  if (rc) {
    char tail[160];
    snprintf(tail, sizeof tail, " [kernel %s, HX_EMU_SEED=0x%llx launch %llu]", k->symbol,
             (unsigned long long)(getenv("HX_EMU_SEED") ? strtoull(getenv("HX_EMU_SEED"), NULL, 0) : 0x5EEDull),
             S.launches - 1);
    strncat(g_error, tail, sizeof g_error - strlen(g_error) - 1);
  }
  return rc;
}
