// Generic prefill logits: any H, any D (a multiple of 16), every target.
// One thread per key, scalar fp32 arithmetic, rows taken four at a time so
// each decoded key chunk serves four query rows: correct first, the fallback
// for (H, D) without a fast path. Grid: x = row blocks (high rows first when
// reverse_rows, so long causal rows start early), y = parts of the key split
// (hx_prefill_split: every column of a row block has exactly one owner).
//
// Built with -DHX_TOPK_FILTER=1 it is the fused prefill top-k's generic filter (hx_mqa_topk_generic,
// PrefillTopkParams): each row's logits that reach its floor are appended to the row's region of the block's part
// (the floors' cut, common/topk_regions.h; counted with global atomics, on counts the gather zeroed), nothing else is
// written.
#include "prefill_logit.h"
#include "prefill_build.h"
#include "topk_select.h"
#if HX_FILTER
#include "topk_regions.h"
#endif

#define HX_RG 4  // rows per group sharing one decoded key chunk

// Logits of key n for rows m, m+1, .. (< m_end, at most HX_RG).
HX_INLINE HX_DEV void hx_logits_rows(const Params& p, hx_i32 m, hx_i32 m_end, hx_i32 n, float acc[HX_RG]) {
  const hx_u32x4* k = (const hx_u32x4*)(p.k + (hx_i64)n * p.D);
  const hx_i32 rows = m_end - m;
  for (int r = 0; r < HX_RG; ++r) acc[r] = 0.f;
  for (hx_i32 h = 0; h < p.H; ++h) {
    float dot[HX_RG] = {0.f, 0.f, 0.f, 0.f};
    for (hx_i32 c = 0; c < p.D / 16; ++c) {
      float kf[16];
      hx_unpack16(k[c], kf);
      for (int r = 0; r < HX_RG; ++r) {
        if (r >= rows) break;
        float qf[16];
        hx_unpack16(((const hx_u32x4*)(p.q + ((hx_i64)(m + r) * p.H + h) * p.D))[c], qf);
        for (int i = 0; i < 16; ++i) dot[r] += qf[i] * kf[i];
      }
    }
    for (int r = 0; r < HX_RG && r < rows; ++r) {
      acc[r] += (dot[r] > 0.f ? dot[r] : 0.f) * p.weights[(hx_i64)(m + r) * p.H + h];
    }
  }
  // kv_scale >= 0 and relu is positive-homogeneous: scale once, after the head sum.
  const float scale = p.kv_scale[n];
  for (int r = 0; r < HX_RG; ++r) acc[r] *= scale;
}

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void HX_PREFILL_NAME(hx_mqa_logits_generic, hx_mqa_topk_generic)(const HX_GRID_CONSTANT Params p) {
  hx_grid_dependency_wait();
  const hx_i32 rb = p.reverse_rows ? (hx_i32)hx_grid_dim_x() - 1 - (hx_i32)hx_block_x() : (hx_i32)hx_block_x();
  const hx_i32 m0 = rb * p.rows_per_block;
  const hx_i32 m1 = hx_min_i32(p.M, m0 + p.rows_per_block);
  const float neg_inf = hx_bits_to_f32(0xFF800000u);

  hx_i32 lo = p.N, hi = 0;
  for (hx_i32 m = m0; m < m1; ++m) {
    const hx_range r = hx_clamp_window(p.ks[m], p.ke[m], p.N);
    if (r.hi > r.lo) { lo = hx_min_i32(lo, r.lo); hi = hx_max_i32(hi, r.hi); }
  }
  if (hi <= lo) lo = hi = 0;
  const hx_prefill_part part = hx_prefill_split(lo, hi, p.N, p.tile, p.split, (hx_i32)hx_block_y());
  const hx_i32 t = (hx_i32)hx_thread_x();

  if (p.clean) {
    for (hx_i32 m = m0; m < m1; ++m) {
      float* row = p.out + (hx_i64)m * p.out_stride;
      for (hx_i32 n = part.fill_lo.lo + t; n < part.fill_lo.hi; n += HX_BLOCK) row[n] = neg_inf;
      for (hx_i32 n = part.fill_hi.lo + t; n < part.fill_hi.hi; n += HX_BLOCK) row[n] = neg_inf;
    }
  }
  for (hx_i32 n = part.work.lo + t; n < part.work.hi; n += HX_BLOCK) {
    for (hx_i32 g = m0; g < m1; g += HX_RG) {
      const hx_i32 g_end = hx_min_i32(m1, g + HX_RG);
      bool any = false;
      for (hx_i32 m = g; m < g_end; ++m) {
        const hx_range r = hx_clamp_window(p.ks[m], p.ke[m], p.N);
        any |= n >= r.lo && n < r.hi;
      }
      float acc[HX_RG] = {0.f, 0.f, 0.f, 0.f};
      if (any) hx_logits_rows(p, g, g_end, n, acc);
      for (int i = 0; i < HX_RG; ++i) {  // constant indices keep acc in registers
        const hx_i32 m = g + i;
        if (m >= g_end) break;
        const hx_range r = hx_clamp_window(p.ks[m], p.ke[m], p.N);
#if HX_FILTER
        const hx_u32 key = hx_topk_key(acc[i], false);
        if (n >= r.lo && n < r.hi && key && key >= p.floors[(hx_i64)m * p.floor_stride]) {
          const hx_i64 slot = (hx_i64)m * p.split + (hx_i64)hx_block_y();
          const hx_u32 at = hx_atomic_add_u32((hx_u32*)p.cand_counts + slot, 1u);
          const hx_region g = hx_topk_region(p, m, p.split, (hx_i32)hx_block_y());
          if (at < g.cap) p.cand[g.base + at] = hx_topk_entry(key, n);
        }
#else
        float* dst = p.out + (hx_i64)m * p.out_stride + n;
        if (n >= r.lo && n < r.hi) *dst = acc[i];
        else if (p.clean) *dst = neg_inf;
#endif
      }
    }
  }
}
