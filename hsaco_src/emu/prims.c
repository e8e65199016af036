// What each wave primitive does, in the lane layouts of docs/gfx950.md ("Lane layouts").
// Lane-side entry points park their operands on the lane's own stack and
// rendezvous; hx_collective then runs once for the whole wave, reading every
// lane's operands before writing any result (so results may alias operands).
#include <stdio.h>
#include <string.h>

#include "core.h"

// ------------------------------------------------------------------ MFMA
typedef struct {
  const unsigned char* a;  // 32 fp8 bytes of this lane
  const unsigned char* b;
  const float* c;
  float* d;
  int scale_a, scale_b;
} mfma_args;

static void mfma_enter(int kind, const void* a, const void* b, const float* c, float* d, int sa, int sb,
                       const char* file, int line) {
  mfma_args m = {(const unsigned char*)a, (const unsigned char*)b, c, d, sa, sb};
  hx_rendezvous(kind, &m, file, line);
}
void hx_emu_mfma_32x32x64_fp8(const void* a, const void* b, const float* c, float* d, int sa, int sb, const char* file,
                              int line) {
  mfma_enter(PRIM_MFMA32, a, b, c, d, sa, sb, file, line);
}
void hx_emu_mfma_16x16x128_fp8(const void* a, const void* b, const float* c, float* d, int sa, int sb,
                               const char* file, int line) {
  mfma_enter(PRIM_MFMA16, a, b, c, d, sa, sb, file, line);
}

// Shape tables: operand byte -> K, accumulator element -> row. Column (32x32:
// N, 16x16: N) is lane % n for A's row, B's column and C's column alike.
//   32x32x64:  g = lane/32; byte 16i+j -> k = 16g + 32i + j; c[4i+j] -> row 8i + 4g + j
//   16x16x128: g = lane/16; byte 8i+j  -> k = 8g + 32i + j;  c[i]    -> row 4g + i
static int mfma_k(int n, int lane, int byte) {
  if (n == 32) return 16 * (lane / 32) + 32 * (byte / 16) + byte % 16;
  return 8 * (lane / 16) + 32 * (byte / 8) + byte % 8;
}
static int mfma_row(int n, int lane, int e) {
  if (n == 32) return 8 * (e / 4) + 4 * (lane / 32) + e % 4;
  return 4 * (lane / 16) + e;
}

// Every fp8 value as a double. An e4m3fn value is a multiple of 2^-9 below
// 2^9 in magnitude, so a product of two is a multiple of 2^-18 below 2^18, and
// every partial sum of up to 128 of them a multiple of 2^-18 below 2^25: all
// exact in a double, in any order of the additions, fused or not. The one
// rounding is the output's: C plus the sum, to float.
static double g_fp8[256];
static int g_fp8_ready;

// D[i][j] = C[i][j] + sum_k A[i][k] B[k][j] for N x N tiles: each output column
// its own chain of additions over k, eight columns a vector, so nothing is
// reassociated; built for the host's widest vector unit (B 64-byte aligned).
typedef double hx_v8d __attribute__((vector_size(64)));
#define HX_MFMA_PRODUCT(N)                                                                                      \
  __attribute__((target_clones("avx512f", "avx2", "default"))) static void product_##N(                        \
      int K, const double (*A)[128], const double (*B)[32], const double (*C)[32], float (*D)[32]) {            \
    for (int i = 0; i < N; i++) {                                                                              \
      hx_v8d acc[N / 8] = {0};                                                                                 \
      for (int k = 0; k < K; k++) {                                                                            \
        const double x = A[i][k];                                                                              \
        const hx_v8d a = {x, x, x, x, x, x, x, x};                                                             \
        _Pragma("GCC unroll 4") for (int q = 0; q < N / 8; q++) acc[q] += a * *(const hx_v8d*)&B[k][8 * q];  \
      }                                                                                                        \
      for (int j = 0; j < N; j++) D[i][j] = (float)(C[i][j] + acc[j / 8][j % 8]);                              \
    }                                                                                                          \
  }
HX_MFMA_PRODUCT(16)
HX_MFMA_PRODUCT(32)

static int mfma(hx_wave* w, int n) {
  const int K = n == 32 ? 64 : 128, NC = n == 32 ? 16 : 4;
  double A[32][128], B[128][32] __attribute__((aligned(64))), C[32][32];
  if (!g_fp8_ready) {
    for (int i = 0; i < 256; i++) g_fp8[i] = hx_emu_fp8_to_f32((unsigned)i);
    g_fp8_ready = 1;
  }
  for (int l = 0; l < HX_EMU_WAVE; l++) {
    hx_lane* ln = w->lanes[l];
    mfma_args* m = (mfma_args*)ln->args;
    if (m->scale_a != 0x7F || m->scale_b != 0x7F)
      return hx_error("%s (%s:%d): lane %u has E8M0 scales A=0x%x B=0x%x; the emulator supports only unit scales (0x7F)",
                      hx_prim_names[ln->kind], ln->file, ln->line, l, m->scale_a, m->scale_b);
    int col = l % n;
    for (int byte = 0; byte < 32; byte++) {
      int k = mfma_k(n, l, byte);
      A[col][k] = g_fp8[m->a[byte]];
      B[k][col] = g_fp8[m->b[byte]];
    }
    for (int e = 0; e < NC; e++) C[mfma_row(n, l, e)][col] = m->c[e];
  }
  float D[32][32];
  if (n == 32)
    product_32(K, A, B, C, D);
  else
    product_16(K, A, B, C, D);
  for (int l = 0; l < HX_EMU_WAVE; l++) {
    mfma_args* m = (mfma_args*)w->lanes[l]->args;
    for (int e = 0; e < NC; e++) m->d[e] = D[mfma_row(n, l, e)][l % n];
  }
  return 0;
}

// ------------------------------------------------------- cross-lane moves
typedef struct { unsigned *x, *y; } swap_args;
void hx_emu_permlane32_swap(unsigned* x, unsigned* y, const char* file, int line) {
  swap_args s = {x, y};
  hx_rendezvous(PRIM_PERMLANE32_SWAP, &s, file, line);
}
void hx_emu_permlane16_swap(unsigned* x, unsigned* y, const char* file, int line) {
  swap_args s = {x, y};
  hx_rendezvous(PRIM_PERMLANE16_SWAP, &s, file, line);
}
// v_permlane32_swap and v_permlane16_swap vX, vY, rows of `row` lanes (32 or 16): the odd rows of X trade places with
// the even rows of Y, X's row 1 with Y's row 0, X's row 3 with Y's row 2 (for 32: X's lanes 32-63 with Y's 0-31).
static int permlane_swap(hx_wave* w, int row) {
  unsigned x[64], y[64];
  for (int l = 0; l < 64; l++) {
    swap_args* s = (swap_args*)w->lanes[l]->args;
    x[l] = *s->x;
    y[l] = *s->y;
  }
  for (int l = 0; l < 64; l++) {
    swap_args* s = (swap_args*)w->lanes[l]->args;
    if ((l / row) % 2) *s->x = y[l - row];
    else *s->y = x[l + row];
  }
  return 0;
}

typedef struct { unsigned value, src, out; } lane_args;
unsigned hx_emu_bpermute(unsigned value, unsigned src_lane, const char* file, int line) {
  lane_args a = {value, src_lane, 0};
  hx_rendezvous(PRIM_BPERMUTE, &a, file, line);
  return a.out;
}
unsigned hx_emu_readfirstlane(unsigned value, const char* file, int line) {
  lane_args a = {value, 0, 0};
  hx_rendezvous(PRIM_READFIRSTLANE, &a, file, line);
  return a.out;
}
// ds_bpermute_b32: lane l reads lane (addr >> 2) & 63 of the source.
static int bpermute(hx_wave* w) {
  unsigned v[64];
  for (int l = 0; l < 64; l++) v[l] = ((lane_args*)w->lanes[l]->args)->value;
  for (int l = 0; l < 64; l++) {
    lane_args* a = (lane_args*)w->lanes[l]->args;
    a->out = v[a->src & 63];
  }
  return 0;
}
typedef struct { unsigned pred; unsigned long long out; } ballot_args;
unsigned long long hx_emu_ballot(unsigned pred, const char* file, int line) {
  ballot_args a = {pred != 0, 0};
  hx_rendezvous(PRIM_BALLOT, &a, file, line);
  return a.out;
}
static int ballot(hx_wave* w) {
  unsigned long long m = 0;
  for (unsigned l = 0; l < w->nlanes; l++) m |= (unsigned long long)((ballot_args*)w->lanes[l]->args)->pred << l;
  for (unsigned l = 0; l < w->nlanes; l++) ((ballot_args*)w->lanes[l]->args)->out = m;
  return 0;
}
static int readfirstlane(hx_wave* w) {
  unsigned v = ((lane_args*)w->lanes[0]->args)->value;  // every lane is active: the first is lane 0
  for (int l = 0; l < 64; l++) ((lane_args*)w->lanes[l]->args)->out = v;
  return 0;
}

// ---------------------------------------------------------------- buffers
// Raw buffer (stride 0): an access of `bytes` at offset voffset + soffset is
// in range when it ends at or before num_records and out of range when it
// starts at or after it. No authoritative rule covers a straddle, nor says
// for certain whether soffset takes part in the check on gfx950: both are
// errors here (a kernel must clamp or pad so each access is wholly in or out,
// whichever way soffset is counted).
int hx_buffer_in_range(hx_emu_rsrc r, unsigned voffset, unsigned soffset, unsigned bytes, const char* what,
                       const char* file, int line) {
  unsigned long long off = (unsigned long long)voffset + soffset, n = r.num_records;
  int in = off + bytes <= n, out = off >= n;
  if (!in && !out)
    hx_emu_fail(file, line, "%s of %u bytes at offset %llu (voffset %u + soffset %u) straddles num_records %u", what,
                bytes, off, voffset, soffset, r.num_records);
  if (soffset) {
    unsigned long long v = voffset;
    int in2 = v + bytes <= n;
    if (in2 != in)
      hx_emu_fail(file, line, "%s at voffset %u + soffset %u: in range only if soffset is %s the range check "
                  "(num_records %u); keep such accesses wholly in or out either way", what, voffset, soffset,
                  in ? "part of" : "left out of", r.num_records);
  }
  return in;
}

hx_emu_load_hook hx_load_hook;
void hx_emu_set_load_hook(hx_emu_load_hook hook) { hx_load_hook = hook; }

static void check_size(unsigned bytes, const char* what, const char* file, int line) {
  if (bytes != 4 && bytes != 8 && bytes != 16) hx_emu_fail(file, line, "%s of %u bytes (4, 8 or 16 only)", what, bytes);
}

void hx_emu_buffer_load(hx_emu_rsrc r, unsigned voffset, unsigned soffset, void* dst, unsigned bytes,
                        const char* file, int line) {
  hx_self()->vmops++;
  check_size(bytes, "buffer load", file, line);
  if (hx_buffer_in_range(r, voffset, soffset, bytes, "buffer load", file, line)) {
    memcpy(dst, r.base + voffset + soffset, bytes);
    if (hx_load_hook) hx_load_hook(r.base + voffset + soffset, bytes);
  } else
    memset(dst, 0, bytes);
}

void hx_emu_buffer_store(hx_emu_rsrc r, unsigned voffset, unsigned soffset, const void* src, unsigned bytes,
                         const char* file, int line) {
  hx_self()->vmops++;
  check_size(bytes, "buffer store", file, line);
  if (hx_buffer_in_range(r, voffset, soffset, bytes, "buffer store", file, line))
    memcpy((unsigned char*)r.base + voffset + soffset, src, bytes);
}

typedef struct {
  const void* src;
  unsigned out;
} scalar_args;
unsigned hx_emu_scalar_load(const void* src, const char* file, int line) {
  scalar_args a = {src, 0};
  hx_rendezvous(PRIM_SCALAR_LOAD, &a, file, line);
  return a.out;
}
static int scalar_load(hx_wave* w) {
  hx_lane* l0 = w->lanes[0];
  const void* src = ((scalar_args*)l0->args)->src;
  for (int l = 1; l < 64; l++)
    if (((scalar_args*)w->lanes[l]->args)->src != src)
      return hx_error("hx_scalar_load_b32 (%s:%d): the address must be wave-uniform; lane 0 has %p, lane %d %p",
                      l0->file, l0->line, src, l, ((scalar_args*)w->lanes[l]->args)->src);
  if ((unsigned long)src % 4)
    return hx_error("hx_scalar_load_b32 (%s:%d): %p is not dword aligned", l0->file, l0->line, src);
  unsigned v;
  memcpy(&v, src, 4);
  if (hx_load_hook) hx_load_hook(src, 4);
  for (int l = 0; l < 64; l++) ((scalar_args*)w->lanes[l]->args)->out = v;
  return 0;
}

// A gather from a 64-bit address: 4 or 16 bytes, dword aligned (what
// global_load_dword[x4] takes in unaligned access mode).
void hx_emu_global_load(const void* src, void* dst, unsigned bytes, const char* file, int line) {
  hx_self()->vmops++;
  if (bytes != 4 && bytes != 16) hx_emu_fail(file, line, "global load of %u bytes (4 or 16 only)", bytes);
  if ((unsigned long)src % 4) hx_emu_fail(file, line, "global load of %u bytes at %p: not dword aligned", bytes, src);
  memcpy(dst, src, bytes);
  if (hx_load_hook) hx_load_hook(src, bytes);
}

// ------------------------------------------------------ global -> LDS
typedef struct {
  unsigned char* lds;
  unsigned bytes;
  unsigned char data[16];  // read at issue
} lds_args;

void hx_emu_lds_load(hx_emu_rsrc r, void* lds, unsigned voffset, unsigned soffset, unsigned bytes, const char* file,
                     int line) {
  hx_self()->vmops++;
  lds_args a;
  a.lds = (unsigned char*)lds;
  a.bytes = bytes;
  if (bytes != 4 && bytes != 16) hx_emu_fail(file, line, "global->LDS load of %u bytes (gfx950: 4 or 16)", bytes);
  if (hx_buffer_in_range(r, voffset, soffset, bytes, "global->LDS load", file, line)) {
    memcpy(a.data, r.base + voffset + soffset, bytes);
    if (hx_load_hook) hx_load_hook(r.base + voffset + soffset, bytes);
  } else
    memset(a.data, 0, bytes);
  hx_rendezvous(PRIM_LDS_LOAD, &a, file, line);
}

void hx_emu_lds_wait(const char* file, int line) { hx_rendezvous(PRIM_LDS_WAIT, NULL, file, line); }
void hx_emu_lds_wait_count(unsigned n, const char* file, int line) { hx_rendezvous(PRIM_LDS_WAIT, &n, file, line); }

static int lds_load(hx_wave* w) {
  hx_lane* l0 = w->lanes[0];
  lds_args* a0 = (lds_args*)l0->args;
  for (int l = 1; l < 64; l++) {
    lds_args* a = (lds_args*)w->lanes[l]->args;
    if (a->lds != a0->lds || a->bytes != a0->bytes)
      return hx_error("hx_lds_load (%s:%d): the LDS address / size must be wave-uniform (M0); lane 0 has %p/%u, "
                      "lane %d has %p/%u", l0->file, l0->line, (void*)a0->lds, a0->bytes, l, (void*)a->lds, a->bytes);
  }
  unsigned span = 64 * a0->bytes;
  if (a0->lds < hx_lds_base() || a0->lds + span > hx_lds_base() + hx_lds_used())
    return hx_error("hx_lds_load (%s:%d): LDS destination [%ld, %ld) is outside the HX_SHARED arrays [0, %lu)",
                    l0->file, l0->line, (long)(a0->lds - hx_lds_base()), (long)(a0->lds - hx_lds_base()) + span,
                    hx_lds_used());
  if (w->npending == HX_EMU_MAX_PENDING)
    return hx_error("hx_lds_load (%s:%d): more than %d loads outstanding without hx_lds_load_wait", l0->file,
                    l0->line, HX_EMU_MAX_PENDING);
  hx_pending* p = &w->pending[w->npending++];
  p->dst = a0->lds;
  p->vmop = l0->vmops;
  p->bytes = span;
  for (int l = 0; l < 64; l++) memcpy(p->data + l * a0->bytes, ((lds_args*)w->lanes[l]->args)->data, a0->bytes);
  return 0;
}

static int lds_wait(hx_wave* w) {
  hx_lane* l0 = w->lanes[0];
  if (!l0->args) {  // vmcnt(0)
    for (unsigned i = 0; i < w->npending; i++) memcpy(w->pending[i].dst, w->pending[i].data, w->pending[i].bytes);
    w->npending = 0;
    return 0;
  }
  const unsigned n = *(const unsigned*)l0->args;
  for (unsigned l = 1; l < w->nlanes; l++) {
    const hx_lane* ln = w->lanes[l];
    if (!ln->args || *(const unsigned*)ln->args != n)
      return hx_error("hx_lds_load_wait_count (%s:%d): the count must be wave-uniform", l0->file, l0->line);
    if (ln->vmops != l0->vmops)
      return hx_error("hx_lds_load_wait_count (%s:%d): lane 0 has issued %lu vector memory instructions, lane %u "
                      "%lu; a counted wait needs every lane to issue each one", l0->file, l0->line, l0->vmops, l,
                      ln->vmops);
  }
  // In issue order: what is older than the last n instructions has landed, the rest stays in flight.
  unsigned kept = 0;
  for (unsigned i = 0; i < w->npending; i++) {
    hx_pending* p = &w->pending[i];
    if (p->vmop + n <= l0->vmops)
      memcpy(p->dst, p->data, p->bytes);
    else if (kept++ != i)
      w->pending[kept - 1] = *p;
  }
  w->npending = kept;
  return 0;
}

int hx_collective(int kind, hx_wave* w) {
  switch (kind) {
    case PRIM_MFMA32: return mfma(w, 32);
    case PRIM_MFMA16: return mfma(w, 16);
    case PRIM_PERMLANE32_SWAP: return permlane_swap(w, 32);
    case PRIM_PERMLANE16_SWAP: return permlane_swap(w, 16);
    case PRIM_SCALAR_LOAD: return scalar_load(w);
    case PRIM_BPERMUTE: return bpermute(w);
    case PRIM_READFIRSTLANE: return readfirstlane(w);
    case PRIM_BALLOT: return ballot(w);
    case PRIM_WAVE_SYNC: return 0;
    case PRIM_LDS_LOAD: return lds_load(w);
    case PRIM_LDS_WAIT: return lds_wait(w);
  }
  return hx_error("internal: unknown primitive %d", kind);
}
