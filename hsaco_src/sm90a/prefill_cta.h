// What both sm_90a prefill kernels (mqa_logits_wgmma.hip, mqa_logits_wgmma_fold.hip) share, on the hopper.h
// primitives: the shared-memory layout, the walk over work units, the load/fill warpgroup, the weights' layout
// and the epilogue's reduce-and-store. D = 128.
//
// Swap-AB: keys are the wgmma M side, a row block's (query row, head) pairs the N side: BQ = 256 / H query
// rows x H heads = 256 columns in two halves of RQ = BQ / 2 rows, one wgmma N of 128 (plus the fold's extra
// rows) each, so one K stream serves every row of the row block. A stage is 128 keys; math warpgroups take 64.
//
// Work units are (row block, part of the key split): hx_prefill_split owns every column of a row block exactly
// once, computed or filled with -inf. High row blocks first when reverse_rows. The grid is persistent
// (gridDim.x <= SMs): CTA b takes units b, then 2G-1-b, ... (snake order), and every role walks the same units.
//
// Warpgroup 0, registers cut by setmaxnreg: warps 0 and 1 load, each half of every stage of the K ring (cp.async
// 16 B into the 128-byte swizzle), warp 0 also the row block's Q, weights and unit record into one of two Q
// slots; warps 2 and 3 write the -inf of the unit's columns outside its work range (clean_logits only). A K
// stage is published LAG stages after its copies were issued: the lane waits for its own copies (cp.async
// groups), fences them into the async proxy that wgmma reads through, and only then arrives on full, so the
// math warpgroups never fence (a fence there waited on their own output stores).
//
// FILTER (the fused prefill top-k, PrefillTopkParams): no logits are stored and nothing is filled. A logit whose
// order key (hx_topk_key) reaches its row's floor is appended to the row's region for the unit's part of the key
// split, at a place counted in the unit record (a shared atomic: the order of a region's entries is arbitrary, the
// selection after it is not). Warp 0 writes a record's counts to cand_counts once the math warpgroups release its Q
// slot, and zeros for the rows of a unit with no stages; so every (row, part) is written on every call.
//
// STAGED (FILTER at H = 64, the fold kernel): the math warpgroups leave the compare and the appends to warps 2 and 3
// instead. They store each stage's logits to shared memory (a ring of LS slots, [BQ rows][LROW]), and each filter
// warp compares half the row block's rows against their windows and floors (as values, hx_topk_floor_value) and
// appends the passes, one ballot per key column placing the lanes. A row's count is then one warp's register,
// written to cand_counts at the unit's end. The fold's math warpgroups keep every weight in registers, which leaves
// none for the appends; at H = 32, where four math warpgroups share each stage, two filter warps cannot keep up
// (docs/benchmarks.md, "the filter warps").
#pragma once
#include "index_math.h"
#include "prefill_build.h"
#include "hopper.h"
#define HX_TOPK_KEYS_ONLY  // the order keys and entries only: the block-wide selection is not this kernel's
#include "topk_select.h"
#include "topk_regions.h"

// One CTA of a prefill kernel at H heads with MATH_WGS math warpgroups, whose Q halves carry NX B rows beyond
// their RQ x H (query row, head) rows, on parameters Params (PrefillTopkParams when FILTER). A kernel derives from
// it and adds its math warpgroups.
template <int HEADS, int MATH_WARPGROUPS, int EXTRA_ROWS, class Params = PrefillParams, bool FILTER_KEYS = false>
struct PrefillCta {
  static constexpr int H = HEADS, MATH_WGS = MATH_WARPGROUPS, NX = EXTRA_ROWS;
  static constexpr bool FILTER = FILTER_KEYS;
  // FILTER: each logit compared with its row's floor as a value (hx_topk_floor_value), keyed only once it passes.
  // STAGED: by the filter warps (H = 64, the fold kernel), else by the math warpgroups.
  static constexpr bool STAGED = FILTER && H == 64;
  static constexpr int D = 128;        // bytes of one key / query-head row
  static constexpr int NQ = 256;       // (query row, head) pairs of a row block
  static constexpr int BQ = NQ / H;    // query rows per row block
  static constexpr int RQ = BQ / 2;    // query rows per half
  static constexpr int JQ = H / 8;     // 8-column accumulator groups per query row
  static constexpr int BK = 128;       // keys per stage
  static constexpr int S = 8;          // stages of the K ring
  static constexpr hx_u32 LAG = 4;     // stages a loader lane keeps in flight before publishing them
  static constexpr int QHALF_ROWS = NQ / 2 + NX;
  static constexpr hx_u32 QHALF_BYTES = QHALF_ROWS * D;  // a multiple of the 1024-byte swizzle atom
  static constexpr hx_u32 Q_BYTES = 2 * QHALF_BYTES;
  static constexpr int NACC = QHALF_ROWS / 2;            // accumulators per thread of one half (m64 x QHALF_ROWS)
  // Weights in shared memory: per row, four groups (one per t = l % 4, the reading lane's quad position) of that
  // lane's 2 JQ weights, contiguous for 16-byte loads; padded to 20 floats at H = 64 so the four groups fall in
  // distinct banks (weight_slot). The padding holds the fold's term scales.
  static constexpr int WGROUP = 2 * JQ + (JQ == 8 ? 4 : 0);
  static constexpr int WROW = 4 * WGROUP;
  static_assert(H == 32 || H == 64, "heads");
  static_assert(QHALF_BYTES % 1024 == 0, "half tiles start on swizzle atoms");
  static_assert(HX_BLOCK == 128 * (1 + MATH_WGS), "one load/fill warpgroup + the math warpgroups");

  // Dynamic shared memory, from a 1024-aligned base.
  static constexpr hx_u32 K_OFF = 0;                      // S x [128 keys][128 B], swizzled
  static constexpr hx_u32 Q_OFF = K_OFF + S * BK * D;     // 2 slots x 2 halves x [QHALF_ROWS][128 B], swizzled
  static constexpr hx_u32 SC_OFF = Q_OFF + 2 * Q_BYTES;   // S x 128 f32 kv_scale
  static constexpr hx_u32 W_OFF = SC_OFF + S * BK * 4;    // 2 slots x BQ rows of weights (weight_slot)
  static constexpr hx_u32 W_BYTES = BQ * WROW * 4;
  static constexpr hx_u32 REC_OFF = W_OFF + 2 * W_BYTES;  // 2 slots x unit record (record())
  static constexpr hx_u32 REC_BYTES = 128;
  // STAGED: LS slots of staged logits, row r's key k at r LROW + k. A math store instruction's 32 lanes hold 16
  // consecutive keys of rows r and r + RQ / 2 (lane bit 1): LROW puts the two rows 16 banks apart.
  static constexpr int LS = 4;
  static constexpr int LROW = BK + 16 / (RQ / 2);
  static constexpr hx_u32 LG_BYTES = BQ * LROW * 4;
  static_assert(((RQ / 2) * LROW) % 32 == 16 && (LROW * 4) % 16 == 0, "staged rows: conflict-free, 16-byte rows");
  static constexpr hx_u32 LG_OFF = REC_OFF + 2 * REC_BYTES;
  static constexpr hx_u32 FX_OFF = LG_OFF + (STAGED ? LS * LG_BYTES : 0);  // then a kernel's own scratch, then the
                                                                           // barriers
  static constexpr int FILTER_THREADS = STAGED ? 64 : 0;  // warps 2 and 3
  static constexpr int REC_PART = 4 + 2 * BQ, REC_COUNT = REC_PART + 1;  // FILTER: the unit's part, its rows' counts
  static_assert((REC_COUNT + BQ) * 4 <= REC_BYTES, "unit record");

  struct Smem {
    hx_u8* ptr;      // the 1024-aligned base, generic
    hx_u32 base;     // and as a shared address
    hx_ring<S> k;    // K (and kv_scale) stages: full after both loader warps, empty after every math thread
    hx_ring<2> q;    // Q slots (Q, weights, unit record): full after warp 0 and its copies, empty after every
                     // math (and STAGED: filter) thread
    hx_ring<LS> lg;  // STAGED: staged logits, full after every math thread, empty after the filter warps
  };
  // The layout over the dynamic shared memory, its barriers after `bar_off`; thread 0 initialises them and the
  // CTA meets.
  HX_INLINE __device__ Smem setup(hx_u8* raw, hx_u32 bar_off) {
    const hx_u32 r = hx_smem_u32(raw), base = (r + 1023u) & ~1023u;
    const hx_u32 kbar = base + bar_off, qbar = kbar + 16 * S, lbar = qbar + 32;
    const Smem s{raw + (base - r), base, {kbar, kbar + 8 * S}, {qbar, qbar + 16}, {lbar, lbar + 8 * LS}};
    if (hx_thread_x() == 0) {
      s.k.init(64, 128 * MATH_WGS);
      s.q.init(64, 128 * MATH_WGS + FILTER_THREADS);
      if constexpr (STAGED) s.lg.init(128 * MATH_WGS, FILTER_THREADS);
    }
    hx_barrier();
    return s;
  }
  static constexpr hx_u32 BAR_BYTES = (2 * S + 4 + (STAGED ? 2 * LS : 0)) * 8;

  // ------------------------------------------------------------------ the unit walk
  struct Unit {
    hx_i32 m0, m1;         // rows [m0, m1) of the row block (m1 <= M)
    hx_prefill_part part;  // this CTA's columns of those rows
  };
  HX_INLINE __device__ hx_i32 units(const Params& p) { return hx_ceil_div(p.M, BQ) * p.split; }
  // Unit of this CTA's k-th turn, or -1 past the end (-2: none this round). 32-bit: the planner keeps units below
  // 2^30 (64-bit unit arithmetic cost the load warps registers they do not have).
  HX_INLINE __device__ hx_i32 unit_index(hx_i32 units, hx_i32 k) {
    const hx_i32 G = (hx_i32)hx_grid_dim_x(), b = (hx_i32)hx_block_x();
    const hx_i32 base = k * G;
    if (base >= units) return -1;
    const hx_i32 u = base + ((k & 1) ? G - 1 - b : b);
    return u < units ? u : -2;
  }
  HX_INLINE __device__ hx_i32 row_block_m0(const Params& p, hx_i32 u) {
    const hx_i32 rbi = u / p.split;
    return (p.reverse_rows ? hx_ceil_div(p.M, BQ) - 1 - rbi : rbi) * BQ;
  }
  // A unit decoded by one thread (the fill warps).
  HX_INLINE __device__ Unit unit_at(const Params& p, hx_i32 u) {
    Unit t;
    t.m0 = row_block_m0(p, u);
    t.m1 = hx_min_i32(p.M, t.m0 + BQ);
    hx_i32 lo = p.N, hi = 0;
    for (hx_i32 m = t.m0; m < t.m1; ++m) {
      const hx_range r = hx_clamp_window(p.ks[m], p.ke[m], p.N);
      if (r.hi > r.lo) { lo = hx_min_i32(lo, r.lo); hi = hx_max_i32(hi, r.hi); }
    }
    if (hi <= lo) lo = hi = 0;
    t.part = hx_prefill_split(lo, hi, p.N, p.tile, p.split, u % p.split);
    return t;
  }
  // A unit decoded by a loader warp: lane r < BQ reads row m0 + r's window (my), the warp reduces the union.
  struct WarpUnit {
    Unit t;
    hx_range my;
    bool row_ok;
    hx_i32 j;  // the part of the key split
  };
  HX_INLINE __device__ WarpUnit decode_unit(const Params& p, hx_i32 u, hx_i32 lane) {
    WarpUnit w;
    const hx_i32 part = u % p.split;
    w.t.m0 = row_block_m0(p, u);
    w.t.m1 = hx_min_i32(p.M, w.t.m0 + BQ);
    w.my = {0, 0};
    w.row_ok = lane < BQ && w.t.m0 + lane < w.t.m1;
    if (w.row_ok) w.my = hx_clamp_window(p.ks[w.t.m0 + lane], p.ke[w.t.m0 + lane], p.N);
    hx_i32 lo = w.my.hi > w.my.lo ? w.my.lo : p.N, hi = w.my.hi > w.my.lo ? w.my.hi : 0;
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) {
      lo = hx_min_i32(lo, hx_shfl_xor_i32(lo, x));
      hi = hx_max_i32(hi, hx_shfl_xor_i32(hi, x));
    }
    if (hi <= lo) lo = hi = 0;
    w.t.part = hx_prefill_split(lo, hi, p.N, p.tile, p.split, part);
    w.j = part;
    return w;
  }
  HX_INLINE __device__ hx_i32 stage_count(const Unit& t) { return hx_ceil_div(hx_range_len(t.part.work), BK); }

  // ------------------------------------------------------------------ weights
  // Where weight (row r, head h = 8 jj + 2 t + c) sits in a slot.
  HX_INLINE __device__ hx_i32 weight_slot(hx_i32 idx) {
    const hx_i32 r = idx / H, hh = idx % H;
    return r * WROW + ((hh >> 1) & 3) * WGROUP + 2 * (hh >> 3) + (hh & 1);
  }
  // A whole row block's weights by one warp at fixed offsets: copy i of lane l is weight idx = l + 32 i, row
  // i / P and head l + 32 (i % P) (P = H / 32), so its slot is a lane base per i % P plus a constant.
  HX_INLINE __device__ void copy_weights(hx_u32 dst, const float* src, hx_i32 lane) {
    constexpr int P = H / 32;
    hx_u32 d[P];
#pragma unroll
    for (int k = 0; k < P; ++k) d[k] = dst + 4 * (hx_u32)weight_slot(lane + 32 * k);
    src += lane;
    hx_static_for<NQ / 32>([&](auto i) { hx_cp_async4_at<4 * (i / P) * WROW, 4 * 32 * i>(d[i % P], src); });
  }
  // This lane's weights of half `half` in slot qb: wt[q WROW + 2 jj + c] is head 8 jj + 2 t + c of the half's
  // query row q, t = l % 4 (lane read afresh: ptxas spills a lane-derived address kept across the unit loop).
  HX_INLINE __device__ const float* weights_of(const Smem& s, hx_u32 qb, hx_i32 half) {
    return (const float*)(s.ptr + W_OFF + qb * W_BYTES) + half * RQ * WROW + (hx_lane_reread() & 3) * WGROUP;
  }
  // Query row q's 2 JQ weights of this lane: 16-byte loads that 8 lanes share.
  HX_INLINE __device__ void load_weights(const float* wt, hx_i32 q, float (&w2)[2 * JQ]) {
#pragma unroll
    for (int m = 0; m < JQ / 2; ++m) {
      const hx_f32x4 wv = *(const hx_f32x4*)(wt + q * WROW + 4 * m);
      w2[4 * m] = wv.x;
      w2[4 * m + 1] = wv.y;
      w2[4 * m + 2] = wv.z;
      w2[4 * m + 3] = wv.w;
    }
  }

  // ------------------------------------------------------------------ warpgroup 0
  // Loader warp `half` copies keys [n0 + 64 half, n0 + 64 half + 64) of a stage and their scales: two warps
  // share every stage, since one warp's copy issue rate alone would bound the kernel.
  HX_INLINE __device__ void load_half_stage(const Params& p, hx_u32 kdst, hx_u32 sdst, hx_i32 n0,
                                            hx_i32 half, hx_i32 lane) {
    const hx_i32 r_base = half * (BK / 2);
    if (n0 + BK <= p.N) hx_copy_tile_sw128<BK / 2>(kdst + r_base * 128, p.k + (hx_i64)(n0 + r_base) * D, lane);
    else hx_copy_tile_sw128_rows<BK / 2, 8>(kdst + r_base * 128, p.k, n0 + r_base, p.N, lane);
#pragma unroll
    for (int i = 0; i < BK / 2 / 32; ++i) {
      const hx_i32 idx = r_base + lane + 32 * i;
      const bool ok = n0 + idx < p.N;
      hx_cp_async4(sdst + 4 * idx, p.kv_scale + (ok ? n0 + idx : 0), ok ? 4 : 0);
    }
  }

  // Warp 0's part of a unit's start: its record, Q and weights as use qit of the Q slots. A whole row block at
  // fixed offsets: this warp also copies half of every K stage, which waits behind these copies (per-copy
  // address arithmetic would make a unit's start cost about two stages).
  HX_INLINE __device__ void load_unit(const Params& p, const Smem& s, hx_u32 qit, const WarpUnit& wu,
                                      hx_i32 ns, hx_i32 lane) {
    const Unit& t = wu.t;
    const hx_u32 qb = s.q.slot(qit);
    hx_i32* rec = (hx_i32*)(s.ptr + REC_OFF + qb * REC_BYTES);
    if (lane == 0) { rec[0] = ns; rec[1] = t.m0; rec[2] = t.part.work.lo; rec[3] = t.part.work.hi; }
    if (lane < BQ) { rec[4 + 2 * lane] = wu.my.lo; rec[5 + 2 * lane] = wu.row_ok ? wu.my.hi : -1; }
    if constexpr (FILTER) {
      if (lane == 0) rec[REC_PART] = wu.j;
      __syncwarp();  // the part and the windows, which count_start reads
      if (lane < BQ) rec[REC_COUNT + lane] = STAGED ? 0 : (hx_i32)count_start(p, rec, t.m0, lane);
    }
    s.q.arrive_full(qit);  // releases the record; the copies arrive below
    const hx_u32 qdst = s.base + Q_OFF + qb * Q_BYTES, wdst = s.base + W_OFF + qb * W_BYTES;
    const hx_u8* qsrc = p.q + (hx_i64)t.m0 * H * D;
    const float* wsrc = p.weights + (hx_i64)t.m0 * H;
    const hx_i32 qrows = (t.m1 - t.m0) * H;  // rows of the tile that exist
    if (qrows == NQ) {
      hx_copy_tile_sw128<NQ / 2>(qdst, qsrc, lane);
      hx_copy_tile_sw128<NQ / 2>(qdst + QHALF_BYTES, qsrc + (NQ / 2) * D, lane);
      copy_weights(wdst, wsrc, lane);
    } else {
      hx_copy_tile_sw128_rows<NQ / 2, 1>(qdst, qsrc, 0, qrows, lane);
      hx_copy_tile_sw128_rows<NQ / 2, 1>(qdst + QHALF_BYTES, qsrc, NQ / 2, qrows, lane);
#pragma unroll 1
      for (int i = 0; i < NQ / 32; ++i) {
        const hx_i32 idx = lane + 32 * i;
        const bool ok = idx < qrows;
        hx_cp_async4(wdst + 4 * weight_slot(idx), wsrc + (ok ? idx : 0), ok ? 4 : 0);
      }
    }
    hx_cp_async_arrive(s.q.full_at(qb));
  }

  // FILTER: row r's region of the unit whose record is rec (empty past M). The math warpgroups' appends (not
  // STAGED) count from 2^31 - cap instead of 0, and their region's first entry is shifted back as far: an append is
  // then inside its region exactly when its place is below 2^31, a sign test, so that a lane holds no cap and no
  // bound across its key loop (the math warpgroups' registers at H = 32 have room for neither). The count flushed is
  // the appends, from that start.
  HX_INLINE __device__ hx_region unit_region(const Params& p, const hx_i32* rec, hx_i32 m0, hx_i32 r) {
    return rec[5 + 2 * r] >= 0 ? hx_topk_region(p, (hx_i64)(m0 + r), p.split, rec[REC_PART]) : hx_region{0, 0u};
  }
  HX_INLINE __device__ hx_u32 count_start(const Params& p, const hx_i32* rec, hx_i32 m0, hx_i32 r) {
    return 0x80000000u - unit_region(p, rec, m0, r).cap;
  }
  // FILTER, warp 0: the counts of the unit whose record is in Q slot qb, once the math warpgroups released it.
  HX_INLINE __device__ void flush_counts(const Params& p, const Smem& s, hx_u32 qb, hx_i32 lane) {
    const volatile hx_i32* rec = (const volatile hx_i32*)(s.ptr + REC_OFF + qb * REC_BYTES);
    if (lane < BQ && rec[5 + 2 * lane] >= 0)
      p.cand_counts[((hx_i64)rec[1] + lane) * p.split + rec[REC_PART]] =
          rec[REC_COUNT + lane] - (STAGED ? 0 : (hx_i32)count_start(p, (const hx_i32*)rec, rec[1], lane));
  }

  // Warps 0 and 1: every unit's K stages, warp 0 also its Q slot; then an end record with no stages.
  HX_INLINE __device__ void load_warps(const Params& p, const Smem& s, hx_i32 warp, hx_i32 lane) {
    hx_u32 kit = 0, qit = 0, published = 0;  // K ring uses issued and published, Q slot uses
    auto publish_upto = [&](hx_u32 end) {    // every K use before `end`, all copies landed
      hx_fence_proxy_async();
      for (; published < end; ++published) s.k.arrive_full(published);
    };
    const hx_i32 nu = units(p);
    for (hx_i32 k = 0;; ++k) {
      const hx_i32 u = unit_index(nu, k);
      if (u == -1) break;
      if (u < 0) continue;
      const WarpUnit wu = decode_unit(p, u, lane);
      const hx_i32 ns = stage_count(wu.t);
      if constexpr (FILTER) {
        if (ns == 0 && warp == 0 && wu.row_ok) p.cand_counts[((hx_i64)wu.t.m0 + lane) * p.split + wu.j] = 0;
      }
      if (ns == 0) continue;
      if (warp == 0) {
        if (!s.q.test_empty(qit)) {
          // The math warpgroups may need this warp's unpublished stages to release the slot.
          hx_cp_async_wait<0>();
          publish_upto(kit);
          s.q.wait_empty(qit);
        }
        if constexpr (FILTER && !STAGED) {
          if (qit >= 2) flush_counts(p, s, s.q.slot(qit), lane);
        }
        load_unit(p, s, qit, wu, ns, lane);  // Q rides in the copy group of the unit's first stage
        ++qit;
      }
      for (hx_i32 st = 0; st < ns; ++st, ++kit) {
        const hx_u32 slot = s.k.slot(kit);
        s.k.wait_empty(kit);
        load_half_stage(p, s.base + K_OFF + slot * (BK * D), s.base + SC_OFF + slot * (BK * 4),
                        wu.t.part.work.lo + st * BK, warp, lane);
        hx_cp_async_commit();
        if (kit + 1 > LAG) {
          hx_cp_async_wait<LAG>();
          publish_upto(kit + 1 - LAG);
        }
      }
    }
    hx_cp_async_wait<0>();
    publish_upto(kit);
    if (warp == 0) {  // the end marker: a record with no stages, both of warp 0's arrivals
      s.q.wait_empty(qit);
      if constexpr (FILTER && !STAGED) {  // the last two units' counts (uses qit - 2 and qit - 1)
        if (qit >= 2) flush_counts(p, s, s.q.slot(qit), lane);
        if (qit >= 1) {
          s.q.wait_empty(qit + 1);
          flush_counts(p, s, s.q.slot(qit + 1), lane);
        }
      }
      if (lane == 0) ((hx_i32*)(s.ptr + REC_OFF + s.q.slot(qit) * REC_BYTES))[0] = 0;
      s.q.arrive_full(qit);
      s.q.arrive_full(qit);
    }
    hx_cp_async_wait<0>();  // every issued copy lands before the CTA may exit
  }

  // Warps 2 and 3 (threads ft of 64): the -inf of every unit's columns outside its work range.
  HX_INLINE __device__ void fill_warps(const Params& p, hx_i32 ft) {
    const hx_i32 nu = units(p);
    for (hx_i32 k = 0;; ++k) {
      const hx_i32 u = unit_index(nu, k);
      if (u == -1) break;
      if (u < 0) continue;
      const Unit t = unit_at(p, u);
      for (hx_i32 m = t.m0; m < t.m1; ++m) {
        float* row = p.out + (hx_i64)m * p.out_stride;
        hx_fill_neg_inf(row, t.part.fill_lo.lo, t.part.fill_lo.hi, ft, 64);
        hx_fill_neg_inf(row, t.part.fill_hi.lo, t.part.fill_hi.hi, ft, 64);
      }
    }
  }

  // STAGED, warp 2 + fw: rows [fw FR, fw FR + FR) of every unit, FR = BQ / 2. Lane l reads keys [4l, 4l + 4) of a
  // staged stage's rows (16-byte loads); a key passes inside its row's window and the unit's work range when its
  // logit reaches the row's floor value. One ballot per key column places the passing lanes after the row's count;
  // entries past the region are counted, not stored (the finish recomputes that row). The loop is straight-line
  // (every store predicated, a row's four ballots taken before their counts are summed): these warps issue on the
  // math warpgroups' schedulers, and at H = 64 they must keep pace with them.
  HX_INLINE __device__ void filter_warp(const Params& p, const Smem& s, hx_i32 fw, hx_i32 lane) {
    constexpr int FR = BQ / 2;
    const hx_u32 below = (1u << lane) - 1u;
    const float none = hx_bits_to_f32(0x7FC00000u);  // a NaN floor: nothing passes
    hx_ring_pos<LS> at;
    for (hx_u32 qit = 0;; ++qit) {
      s.q.wait_full(qit);
      const hx_i32* rec = record(s, s.q.slot(qit));
      const hx_i32 ns = rec[0];
      if (ns == 0) break;
      const hx_i32 m0 = rec[1], work_lo = rec[2], work_hi = rec[3], part = rec[REC_PART];
      // Row r: its window [lo, lo + len) within the work range (len 0 past M), floor value, the entry index of its
      // region (32 bits, as the math warpgroups' filter keeps it) and its count.
      hx_i32 lo[FR];
      hx_u32 len[FR], region0[FR], count[FR], cap[FR];
      float floor[FR];
#pragma unroll
      for (int r = 0; r < FR; ++r) {
        const hx_i32 row = fw * FR + r, hi = rec[5 + 2 * row];
        lo[r] = rec[4 + 2 * row];
        len[r] = (hx_u32)hx_max_i32(hx_min_i32(hi, work_hi) - lo[r], 0);
        floor[r] = hi >= 0 ? hx_topk_floor_value(p.floors[(hx_i64)(m0 + row) * p.floor_stride]) : none;
        const hx_region g = hi >= 0 ? hx_topk_region(p, (hx_i64)(m0 + row), p.split, part) : hx_region{0, 0u};
        region0[r] = (hx_u32)g.base;
        cap[r] = g.cap;
        count[r] = 0;
      }
      for (hx_i32 st = 0; st < ns; ++st) {
        s.lg.wait_full(at);
        const hx_i32 n = work_lo + st * BK + 4 * lane;
        const float* lg = (const float*)(s.ptr + LG_OFF + at.slot * LG_BYTES) + fw * FR * LROW + 4 * lane;
#pragma unroll
        for (int r = 0; r < FR; ++r) {
          const hx_f32x4 x4 = *(const hx_f32x4*)(lg + r * LROW);
          const float x[4] = {x4.x, x4.y, x4.z, x4.w};
          const hx_u32 d = (hx_u32)(n - lo[r]);  // n + c in the window: d + c < len, one unsigned compare
          bool pass[4];
          hx_u32 b[4];
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            pass[c] = (d + c < len[r]) & (x[c] >= floor[r]);
            b[c] = hx_ballot(pass[c]);
          }
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const hx_u32 at_row = count[r] + hx_popc(b[c] & below);
            count[r] += hx_popc(b[c]);
            hx_store_u64_if(pass[c] & (at_row < cap[r]), p.cand + (region0[r] + at_row),
                            hx_topk_entry(hx_topk_order_key(x[c]), n + c));
          }
        }
        s.lg.arrive_empty(at);
        at.next();
      }
#pragma unroll
      for (int r = 0; r < FR; ++r) {
        const hx_i32 row = fw * FR + r;
        if (lane == 0 && rec[5 + 2 * row] >= 0) p.cand_counts[(hx_i64)(m0 + row) * p.split + part] = (hx_i32)count[r];
      }
      s.q.arrive_empty(qit);
    }
  }

  // Warpgroup 0 with its registers cut to REGS: loads, and fills when clean (STAGED: filters).
  template <int REGS>
  HX_INLINE __device__ void load_fill_warpgroup(const Params& p, const Smem& s, hx_i32 tid) {
    hx_setmaxnreg_dec<REGS>();
    const hx_i32 warp = tid / 32, lane = tid % 32;
    if (warp < 2) load_warps(p, s, warp, lane);
    else if constexpr (STAGED) filter_warp(p, s, warp - 2, lane);
    else if (p.clean) fill_warps(p, tid - 64);
  }

  // ------------------------------------------------------------------ math warpgroups' shared pieces
  // The unit record in Q slot qb: stages (0: the end), m0, work lo, work hi, then (lo, hi) of each row's window
  // (hi -1: the row is past M).
  HX_INLINE __device__ const hx_i32* record(const Smem& s, hx_u32 qb) {
    return (const hx_i32*)(s.ptr + REC_OFF + qb * REC_BYTES);
  }
  // A math thread's place (tid: its thread in the CTA, wg: its warpgroup): after the quad reduce it holds key `key`
  // of its warpgroup's 64 for the query rows of parity b2 (b1: which key of its pair).
  struct MathLane {
    hx_i32 key, b1, b2;
  };
  HX_INLINE __device__ MathLane math_lane(hx_i32 tid, hx_i32 wg) {
    const hx_i32 mt = tid - 128 * wg;  // thread in the warpgroup
    const hx_i32 w = mt / 32, l = mt % 32;
    MathLane m;
    m.b1 = l & 1;
    m.b2 = (l >> 1) & 1;
    m.key = 16 * w + (l >> 2) + 8 * m.b1;
    return m;
  }
  // The A descriptor of keys [64 g, 64 g + 64) of K stage 0; stage s's is s BK D / 16 past it in the address field.
  HX_INLINE __device__ hx_u64 stage0_keys(const Smem& s, hx_i32 g) {
    return hx_wgmma_desc_sw128(s.base + K_OFF + g * (64 * D));
  }
  // A math warpgroup's units in turn, each between the wait on its Q slot and the slot's release: body(u) with the
  // slot and its record, as uniform values.
  struct SlotUnit {
    hx_u32 qb;
    const hx_i32* rec;
    hx_i32 ns, m0, work_lo, work_hi;
  };
  template <class Body>
  HX_INLINE __device__ void each_unit(const Smem& s, Body&& body) {
    for (hx_u32 qit = 0;; ++qit) {
      s.q.wait_full(qit);
      SlotUnit u;
      u.qb = qit & 1;
      u.rec = record(s, u.qb);
      u.ns = hx_uniform_i32(u.rec[0]);
      if (u.ns == 0) break;
      u.m0 = hx_uniform_i32(u.rec[1]);
      u.work_hi = hx_uniform_i32(u.rec[3]);
      u.work_lo = hx_uniform_i32(u.rec[2]);
      body(u);
      // The slot afresh (a shuffle): ptxas spills the value if it is kept across the unit.
      s.q.arrive_empty((hx_u32)hx_uniform_i32((hx_i32)qit));
    }
  }
  // kv_scale of key k (of 128) in K stage `slot`.
  HX_INLINE __device__ float kv_scale_at(const Smem& s, hx_u32 slot, hx_i32 k) {
    return ((const float*)(s.ptr + SC_OFF + slot * (BK * 4)))[k];
  }
  // A math lane's view of one half of a unit: the query rows it stores and their windows. Keys are counted from
  // the end of the unit's work range (e = n - work.hi, negative inside it), which saves the register that held
  // work.hi.
  struct Tile {
    float* row[BQ / 4];             // this lane's output rows (half h: h RQ + b2 RQ/2 + kq), at its key
    hx_i32 lo[BQ / 4], hi[BQ / 4];  // their windows, minus work.hi
    bool fill[BQ / 4];              // clean and the row exists (hi -1 marks a row past M)
    // FILTER: the rows' floors as values, the entry index of each row's region for the unit's part, less its
    // count's start (unit_region, count_start; 32 bits: the op keeps a group's regions below 2^32 entries, and a
    // 64-bit region pointer per row does not fit the math warpgroups' registers), the shared address of the first
    // row's count (the others' follow), and the key of e = 0.
    float floor[BQ / 4];
    hx_u32 region0[BQ / 4];
    hx_u32 count0;
    hx_i32 work_hi;
    hx_u32 staged;  // STAGED: the shared address of its first row's logit in slot 0 of the ring
  };
  HX_INLINE __device__ void make_tile(Tile& t, const Params& p, const Smem& s, const hx_i32* rec, hx_i32 m0,
                                      hx_i32 work_hi, hx_i32 h, hx_i32 b2, hx_i32 n) {
    if constexpr (STAGED) {
      t.staged = s.base + LG_OFF + 4u * (hx_u32)((h * RQ + b2 * (RQ / 2)) * LROW + (n - rec[2]));
    } else {
      make_rows(t, p, rec, m0, work_hi, h, b2, n);
    }
  }
  HX_INLINE __device__ void make_rows(Tile& t, const Params& p, const hx_i32* rec, hx_i32 m0, hx_i32 work_hi,
                                      hx_i32 h, hx_i32 b2, hx_i32 n) {
#pragma unroll
    for (int kq = 0; kq < RQ / 2; ++kq) {
      const hx_i32 r = h * RQ + b2 * (RQ / 2) + kq;
      if constexpr (FILTER) {
        const hx_u32 floor = rec[5 + 2 * r] >= 0 ? p.floors[(hx_i64)(m0 + r) * p.floor_stride] : 0xFFFFFFFFu;
        t.floor[kq] = hx_topk_floor_value(floor);
        const hx_region g = unit_region(p, rec, m0, r);
        t.region0[kq] = (hx_u32)g.base - (0x80000000u - g.cap);
      } else {
        t.fill[kq] = p.clean && rec[5 + 2 * r] >= 0;
      }
      t.lo[kq] = rec[4 + 2 * r] - work_hi;
      t.hi[kq] = rec[5 + 2 * r] - work_hi;
      if constexpr (!FILTER) t.row[kq] = p.out + (hx_i64)(m0 + r) * p.out_stride + n;
    }
    if constexpr (FILTER) {
      t.count0 = hx_smem_u32(rec + REC_COUNT + h * RQ + b2 * (RQ / 2));
      t.work_hi = work_hi;
    }
  }

  // STAGED: a stage's logits go to the ring's next slot once the filter warps released it (returned: its offset),
  // and are published after every half's stores. No-ops otherwise.
  HX_INLINE __device__ hx_u32 stage_slot(const Smem& s, const hx_ring_pos<LS>& at) {
    if constexpr (STAGED) {
      s.lg.wait_empty(at);
      return at.slot * LG_BYTES;
    }
    return 0;
  }
  HX_INLINE __device__ void stage_staged(const Smem& s, hx_ring_pos<LS>& at) {
    if constexpr (STAGED) {
      s.lg.arrive_full(at);
      at.next();
    }
  }

  // The head sums v[i RQ + q] of key row 8i + l/4 of the warp's 16 and query row q of the half, reduced across
  // the quad (lane bit 0 keeps key row b1, bit 1 keeps query quarter b2), times kv_scale, stored with the -inf of
  // rows outside their own window fused; branch-free (predicated stores). Then the next stage's keys. STAGED: every
  // logit staged at slot offset `slot`, the windows and floors left to the filter warps.
  HX_INLINE __device__ void reduce_store(const Params& p, Tile& t, const float (&v)[2 * RQ], hx_i32 e, float scale,
                                         hx_i32 b1, hx_i32 b2, hx_u32 slot = 0) {
    float h1[RQ];
#pragma unroll
    for (int x = 0; x < RQ; ++x) h1[x] = hx_pair_fold(v, RQ, x, b1, 1);
    const float ninf = hx_bits_to_f32(0xFF800000u);
#pragma unroll
    for (int kq = 0; kq < RQ / 2; ++kq) {
      const float z = hx_pair_fold(h1, RQ / 2, kq, b2, 2);
      if constexpr (STAGED) {
        asm volatile("st.shared.f32 [%0], %1;" :: "r"(t.staged + slot + kq * (LROW * 4)), "f"(z * scale) : "memory");
        continue;
      }
      const bool inside = (e >= t.lo[kq]) & (e < t.hi[kq]);
      if constexpr (FILTER) {
        const float x = z * scale;
        const bool pass = (e < 0) & inside & (x >= t.floor[kq]);
        if (pass) {
          const hx_u32 key = hx_topk_order_key(x);  // passed a finite floor: selectable
          const hx_u32 at = hx_atom_add_shared_u32(t.count0 + 4 * kq, 1u);
          if ((hx_i32)at >= 0)
            p.cand[t.region0[kq] + at] = hx_topk_entry(key, e + t.work_hi);
        }
      } else {
        const bool store = (e < 0) & (inside | t.fill[kq]);
        hx_store_f32_if(store, t.row[kq], inside ? z * scale : ninf);
      }
    }
    if constexpr (!FILTER) {
#pragma unroll
      for (int kq = 0; kq < RQ / 2; ++kq) t.row[kq] += BK;
    }
  }
  static_assert(BQ >= 4, "two halves of at least two query rows");

  // A unit's stages: issue() waits for the next stage and issues its MMAs (returning its kv_scale), sum(v) retires
  // them into head sums and releases the stage, store(v, scale) writes its logits. PAIRS takes two stages per
  // iteration, the first's stores under the second's MMAs; either way nothing is in flight at the back-edge
  // (ptxas serialises every wgmma when one is in flight across a loop's branch).
  template <bool PAIRS, class V, class Issue, class Sum, class Store>
  HX_INLINE __device__ void run_stages(hx_i32 ns, Issue&& issue, Sum&& sum, Store&& store) {
    hx_i32 st = 0;
    if constexpr (PAIRS) {
      for (; st + 2 <= ns; st += 2) {
        V v0, v1;
        const float scale0 = issue();
        sum(v0);
        const float scale1 = issue();
        store(v0, scale0);
        sum(v1);
        store(v1, scale1);
      }
    }
    for (; st < ns; ++st) {
      V v;
      const float scale = issue();
      sum(v);
      store(v, scale);
    }
  }
};

// A prefill kernel's body (Cta: a PrefillCta with its LOAD_REGS, BAR_OFF and math_warpgroup): warpgroup 0 loads and
// fills (STAGED: filters), the others multiply.
template <class Cta, class P>
HX_INLINE __device__ void hx_prefill_cta(const P& p) {
  extern __shared__ __align__(1024) hx_u8 smem_raw[];
  const hx_i32 tid = (hx_i32)hx_thread_x();
  const hx_i32 wg = hx_uniform_i32(tid / 128);
  const typename Cta::Smem sm = Cta::setup(smem_raw, Cta::BAR_OFF);
  if (wg == 0) Cta::template load_fill_warpgroup<Cta::LOAD_REGS>(p, sm, tid);
  else Cta::math_warpgroup(p, sm, tid, wg);
}
