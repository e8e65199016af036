// Runs hx_group_cut_rows (common/topk_select.h), the cut the fused decode kernels give a segment's rows side by side,
// on one block: rows [0, p.rows) of p.cap entries each are copied into shared memory, cut to p.want in at most
// p.passes digits, and each row's kept entries, count and cut written back over the input. Tests compare them with a
// selection in numpy on every target.
// Built at 384 threads, the sm_90a fused kernel's group (its math warpgroups), which owns the bins unevenly where
// gfx950's block of 256 owns them evenly: the block-wide top-k pieces, which need whole bins a thread, are left out.
#define HX_TOPK_KEYS_ONLY
#include "topk_select.h"
#include "hx_params.h"

struct hx_probe_bar {
  HX_MEMBER HX_DEV void operator()() const { hx_barrier(); }
};

template <hx_u32 R>
HX_INLINE HX_DEV void hx_rows_cut_probe_rows(const RowsCutProbeParams& p, hx_u64* e, hx_u32* hist, hx_u32* scan,
                                            hx_u32* found) {
  hx_probe_bar bar;
  const hx_u32 t = hx_thread_x();
  hx_u64* rows[R];
  hx_u32 count[R];
  hx_u64 cut[R];
  for (hx_u32 r = 0; r < R; ++r) {
    rows[r] = e + (hx_i64)r * p.cap;
    const hx_i32 c = p.counts[r];
    count[r] = c < 0 ? 0u : (hx_u32)c > (hx_u32)p.cap ? (hx_u32)p.cap : (hx_u32)c;
    for (hx_u32 i = t; i < count[r]; i += HX_BLOCK) rows[r][i] = p.entries[(hx_i64)r * p.cap + i];
  }
  bar();
  hx_group_cut_rows<HX_BLOCK, R, 4>(t, bar, rows, count, (hx_u32)p.want, hist, scan, found, found + 2 * R, cut,
                                    p.passes);
  for (hx_u32 r = 0; r < R; ++r) {
    for (hx_u32 i = t; i < count[r]; i += HX_BLOCK) p.entries[(hx_i64)r * p.cap + i] = rows[r][i];
    if (t == 0) {
      p.counts[r] = (hx_i32)count[r];
      p.cuts[r] = cut[r];
    }
  }
}

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_rows_cut_probe(const HX_GRID_CONSTANT RowsCutProbeParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, scan, HX_BLOCK / HX_WAVE_SIZE);
  HX_SHARED(hx_u32, found, 6);
  HX_DYNAMIC_SHARED(hx_u64, e);  // p.rows x p.cap entries
  if (p.rows == 1) hx_rows_cut_probe_rows<1>(p, e, hist, scan, found);
  if (p.rows == 2) hx_rows_cut_probe_rows<2>(p, e, hist, scan, found);
}
