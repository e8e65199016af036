// gfx950 paged decode logits (docs/ops.md): the unit of decode_unit.h writing every live row's logits at each
// page's keys, values or -inf, and -inf over the columns no key reaches (clean_logits). One source, two builds:
// HX_GATHER 0 serves block sizes that are powers of two >= 16 in both cache layouts, HX_GATHER 1 block_size 1.
#include "decode_unit.h"

// Page pg of the wave's sequence: every row's columns there, values or -inf. The rows are unrolled up to
// ROWS (rows past next_n and rows without a valid column here skip their math) and their stores follow in a
// fixed number, so the vector-memory counter the key loads share with stores counts the same in every page:
// the wait for this page's keys can leave the next page's in flight.
HX_WAVE_FN void hx_compute_page(const DecodeParams& p, const hx_lds& s, const hx_seqwork& c, hx_i32 pg,
                                const hx_kpage& kp, int unit) {
  const float neg_inf = hx_bits_to_f32(0xFF800000u);
  // made visibly uniform: the store ranges are built from it, and the compiler may have kept it in a VGPR
  const hx_i32 n0 = (hx_i32)hx_readfirstlane((hx_u32)(c.c_lo + PAGE * pg));
  const hx_i32 cols = hx_min_i32(PAGE, c.c_hi - n0);  // columns of the page this unit owns (all < max_model_len)
  const hx_i32 col = n0 + (hx_i32)c.lane;             // the lane's column
  // The rows' bounds come from LDS (VGPRs, never SGPRs): 8 wave-uniform bounds held across the pages in
  // SGPRs, with the conditions built from them, would spill the SGPRs.
  const hx_v4u b03 = s.bound[0], b47 = s.bound[1];
  const hx_i32 bound[ROWS] = {(hx_i32)b03.x, (hx_i32)b03.y, (hx_i32)b03.z, (hx_i32)b03.w,
                              (hx_i32)b47.x, (hx_i32)b47.y, (hx_i32)b47.z, (hx_i32)b47.w};
  const float scale = hx_bits_to_f32(kp.sc[0] | kp.sc[1] | kp.sc[2] | kp.sc[3]);
  const bool key_ok = hx_key_ok(kp, c.lane);
  // Rows j < next_n are stored. Written as j + n0 < next_n + n0 in uint32 (no sum wraps: n0 < 2^31), which
  // changes every page and which the compiler cannot fold back to j < next_n: it then keeps none of the 8
  // conditions across pages (hoisted, they would spill the SGPRs).
  const hx_u32 written_e = (hx_u32)p.next_n + (hx_u32)n0;
  float v[ROWS];
  hx_u32 voff[ROWS];  // the lane's store offset; out of range where a raw row has no valid column
#pragma unroll
  for (int j = 0; j < ROWS; ++j) {
    const bool valid = col < bound[j];
    v[j] = neg_inf;
    voff[j] = p.clean || valid ? 4 * c.lane : OFF_NONE;
    // A row's valid columns are a prefix of the page: it has one iff lane 0's is (a scalar test of the
    // compare's mask). Rows past next_n have bound 0.
    if (!hx_first_lane_true(valid)) continue;
    HX_ASM_MARK("row");
    const float z = hx_row_logits(s, kp, j, c.lane, unit);
    v[j] = valid && key_ok ? z * scale : neg_inf;
  }
  float* row = p.out + (hx_i64)c.b * p.next_n * p.out_stride + n0;
#pragma unroll
  for (int j = 0; j < ROWS; ++j) {
    // clean: every row of the sequence, its page segment's `cols` columns; raw: each row's valid columns
    const hx_u32 range = (hx_u32)j + (hx_u32)n0 < written_e ? 4 * (hx_u32)cols : 0u;
    hx_buffer_store_b32(hx_make_buffer_rsrc(row, range), voff[j], 0, hx_f32_to_bits(v[j]));
    row += p.out_stride;
  }
}

#if HX_GATHER
#define HX_DECODE_SYMBOL hx_paged_mqa_logits_mfma_bs1
#else
#define HX_DECODE_SYMBOL hx_paged_mqa_logits_mfma
#endif

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void HX_DECODE_SYMBOL(const HX_GRID_CONSTANT DecodeParams p) {
  HX_SHARED(hx_v4u, q_rows, ROWS * HT * 2 * SLAB);
  HX_SHARED(hx_v4f, w_rows, ROWS * H / 4);
  HX_SHARED(hx_i64, scan, 2 * HX_BLOCK);
  HX_SHARED(hx_v4u, row_bounds, ROWS4);
  const hx_lds s = {q_rows, w_rows, scan, row_bounds};
  const hx_i32 t = (hx_i32)hx_thread_x();
  const hx_u32 lane = hx_lane_id(), w = hx_wave_id();
  const int unit = hx_unit_scale();
  hx_decode_units(
      p, s, p.clean != 0,
      [&](const hx_seqwork& c, const hx_decode_seq& seq, hx_i32 b) {
        const hx_i32 row_bound = hx_stage_rows(p, s, seq, b, w, lane);
        hx_wave_pages(
            p, s, c, w, row_bound, [&](hx_i32 pg, const hx_kpage& kp) { hx_compute_page(p, s, c, pg, kp, unit); },
            [](hx_i32) {});
      },
      [&](hx_i32 b, hx_range cols) {
        const float neg_inf = hx_bits_to_f32(0xFF800000u);
        for (hx_i32 j = 0; j < p.next_n; ++j) {
          float* row = p.out + ((hx_i64)b * p.next_n + j) * p.out_stride;
          for (hx_i32 n = cols.lo + t; n < cols.hi; n += HX_BLOCK) row[n] = neg_inf;
        }
      });
}
