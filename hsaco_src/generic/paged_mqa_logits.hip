// Generic paged decode logits: any H, D % 16 == 0 (D <= 1024),
// any block_size, both cache layouts, every target; scalar fp32 FMAs.
//
// Grid: one block per unit, units planned on the host from shapes alone; each
// unit finds its share of the batch's real work from the lengths in device
// memory (decode_work.h), so the grid is graph-safe and a skewed batch stays
// balanced. A unit walks its key blocks a tile at a time (whole blocks when a
// block fits in a tile, so each block-table entry a unit reads is loaded once;
// a block longer than a tile has its entry loaded once per tile of it): the
// tile's keys and scales are staged in shared memory once, and then every
// live row's every head reads them there, 16 (row, head) pairs per pass with
// those pairs' queries as f32 in shared memory. So a sequence's keys are read
// from memory once whatever next_n x H x D is. Thread t owns key t of the
// tile: it converts each 16-byte chunk of its key once per pass and
// multiplies it with the pass's queries, which every thread reads at the same
// address (a broadcast). Dead rows (j >= live) and columns no row sees get
// -inf without any work; the unit's fill columns too (clean_logits).
// Untrusted device values: a block id outside [0, num_blocks), or a table
// column past max_blocks, is never read through: its keys come out -inf and
// error bit 0 is set; a malformed sequence (negative length, live rows
// outside 0..next_n) is all -inf with bit 2, and with per-row lengths a
// negative row alone.
#include "decode_work.h"
#include "paged_cache.h"
#include "hx_params.h"

#define KT HX_BLOCK            // most keys in a tile: one per thread
#define KROW_MAX (128 + 16)    // shared bytes of a key row at D = 128, padded so 16-byte reads of
                               // consecutive keys fall in distinct banks
#define PASS 16                // (row, head) pairs per pass
#define QF_MAX (PASS * 128)    // f32 query values staged per pass
#define ERR_BLOCK_ID 1
#define ERR_LENGTH 4

HX_INLINE HX_DEV void hx_unpack16(hx_u32x4 v, float f[16]) {
  hx_fp8x4_to_f32(v.x, f);
  hx_fp8x4_to_f32(v.y, f + 4);
  hx_fp8x4_to_f32(v.z, f + 8);
  hx_fp8x4_to_f32(v.w, f + 12);
}

struct hx_decode_smem {
  hx_u32x4* k;      // [KT][krow16] staged key rows
  hx_f32x4* q;      // [PASS][D / 4] the pass's queries
  float* w;         // [PASS] their head weights (0 past the pass's last pair)
  float* scale;     // [KT] the tile's scales
  hx_i64* block;    // [KT] byte offsets of the tile's blocks; -1: out of range (their keys are -inf)
  hx_i64* scan;     // [2 * HX_BLOCK] work / fill prefixes of a chunk of sequences
};

struct hx_decode_tiling {
  hx_i32 krow16;    // 16-byte chunks per staged key row (D / 16 + 1)
  hx_i32 tile;      // keys per tile: whole blocks when a block fits, else a 16-key multiple of one
  hx_i32 pass;      // pairs per pass: PASS, halved until the pass's queries fit for D > 128
  bool aligned16;   // every key chunk 16-byte aligned (block bytes % 16 == 0)
};

HX_INLINE HX_DEV hx_decode_tiling hx_tiling(const DecodeParams& p) {
  hx_decode_tiling g;
  g.krow16 = p.D / 16 + 1;
  hx_i32 kt = hx_min_i32(KT, (KT * KROW_MAX) / (16 * g.krow16));
  kt -= kt % 16;  // whole 16-token groups: a preshuffled tile starts on one
  g.tile = p.block_size <= kt ? (kt / p.block_size) * p.block_size : kt;
  g.pass = PASS;
  while (g.pass > 2 && g.pass * p.D > QF_MAX) g.pass /= 2;
  g.aligned16 = hx_block_bytes(p.block_size, p.D) % 16 == 0;
  return g;
}

// Stage columns [c0, c0 + nk) of sequence b (all < its keys): block ids, key rows, scales.
HX_INLINE HX_DEV void hx_stage_tile(const DecodeParams& p, const hx_decode_tiling& g, const hx_decode_smem& s,
                                    hx_i32 b, hx_i32 c0, hx_i32 nk) {
  const hx_i32 t = (hx_i32)hx_thread_x();
  const hx_i32 first = c0 / p.block_size, nblk = (c0 + nk - 1) / p.block_size - first + 1;
  hx_barrier();  // the previous tile's readers are done with the shared arrays
  if (t < nblk) {  // each block-table entry of the tile read once
    const hx_i32 col = first + t;
    const hx_i32 id = col < p.max_blocks ? p.block_tables[(hx_i64)b * p.max_blocks + col] : -1;
    const bool ok = col < p.max_blocks && id >= 0 && (hx_i64)id < p.num_blocks;
    s.block[t] = ok ? (hx_i64)id * hx_block_bytes(p.block_size, p.D) : -1;
    if (!ok && p.errors) hx_atomic_or(p.errors, ERR_BLOCK_ID);
  }
  hx_barrier();
  const hx_i32 chunks = p.D / 16;
  // Consecutive threads read consecutive 16-byte chunks of the cache in both layouts (a preshuffled
  // tile is whole 16-token groups, the last one partly past nk).
  const hx_i32 pieces = p.preshuffle ? hx_ceil_div(nk, 16) * 16 * chunks : nk * chunks;
  for (hx_i32 i = t; i < pieces; i += HX_BLOCK) {
    hx_i32 kl, c;
    if (p.preshuffle) {
      const hx_i32 r = i % p.D;
      kl = (i / p.D) * 16 + r % 16;
      c = r / 16;
      if (kl >= nk) continue;
    } else {
      kl = i / chunks;
      c = i % chunks;
    }
    const hx_i32 n = c0 + kl;
    const hx_i64 base = s.block[n / p.block_size - first];
    hx_u32x4 v = {0u, 0u, 0u, 0u};
    if (base >= 0) {
      v = hx_load16(p.kv_cache + base + hx_key_offset(p.preshuffle, n % p.block_size, 16 * c, p.D), g.aligned16);
    }
    s.k[kl * g.krow16 + c] = v;
  }
  if (t < nk) {
    const hx_i32 n = c0 + t;
    const hx_i64 base = s.block[n / p.block_size - first];
    s.scale[t] = base >= 0 ? *(const float*)(p.kv_cache + base + hx_scale_offset(p.block_size, p.D, n % p.block_size))
                           : 0.f;
  }
  hx_barrier();
}

// sum over the pass's NP pairs of relu(q . k) * w at this thread's key k. Every pair, padding ones too
// (zero queries and weights): a branch-free body whose NP chains of FMAs the compiler can interleave,
// with constant indices that keep acc in registers.
template <int NP>
HX_INLINE HX_DEV float hx_pass_logit(const hx_u32x4* k, const hx_decode_smem& s, hx_i32 chunks) {
  float acc[NP];
  for (int pp = 0; pp < NP; ++pp) acc[pp] = 0.f;
  for (hx_i32 c = 0; c < chunks; ++c) {
    float kf[16];
    hx_unpack16(k[c], kf);
    const hx_f32x4* qc = s.q + 4 * c;
    for (int pp = 0; pp < NP; ++pp) {
      const hx_f32x4* qv = qc + pp * 4 * chunks;
      float a = acc[pp];
      for (int e = 0; e < 4; ++e) {
        const hx_f32x4 x = qv[e];
        a += x.x * kf[4 * e];
        a += x.y * kf[4 * e + 1];
        a += x.z * kf[4 * e + 2];
        a += x.w * kf[4 * e + 3];
      }
      acc[pp] = a;
    }
  }
  float logit = 0.f;
  for (int pp = 0; pp < NP; ++pp) logit += (acc[pp] > 0.f ? acc[pp] : 0.f) * s.w[pp];
  return logit;
}

// Row r's logit at this thread's key: sum over heads of relu(q . k) * w, pass by pass.
HX_INLINE HX_DEV float hx_row_logit(const DecodeParams& p, const hx_decode_tiling& g, const hx_decode_smem& s,
                                    hx_i64 r, bool has_key) {
  const hx_i32 t = (hx_i32)hx_thread_x(), chunks = p.D / 16, d4 = p.D / 4;
  float logit = 0.f;  // heads summed in order, pass after pass
  for (hx_i32 h0 = 0; h0 < p.H; h0 += g.pass) {
    const hx_i32 pc = hx_min_i32(g.pass, p.H - h0);
    for (hx_i32 i = t; i < g.pass * chunks; i += HX_BLOCK) {
      const hx_i32 pp = i / chunks, c = i % chunks;
      float f[16];
      for (int e = 0; e < 16; ++e) f[e] = 0.f;
      if (pp < pc) hx_unpack16(*(const hx_u32x4*)(p.q + ((r * p.H + h0 + pp) * p.D + 16 * c)), f);
      hx_f32x4* dst = s.q + pp * d4 + 4 * c;
      for (int e = 0; e < 4; ++e) dst[e] = hx_f32x4{f[4 * e], f[4 * e + 1], f[4 * e + 2], f[4 * e + 3]};
    }
    if (t < PASS) s.w[t] = t < pc ? p.weights[r * p.H + h0 + t] : 0.f;
    hx_barrier();
    if (has_key) {
      const hx_u32x4* k = s.k + t * g.krow16;
      if (g.pass == 16) logit += hx_pass_logit<16>(k, s, chunks);
      else if (g.pass == 8) logit += hx_pass_logit<8>(k, s, chunks);
      else if (g.pass == 4) logit += hx_pass_logit<4>(k, s, chunks);
      else logit += hx_pass_logit<2>(k, s, chunks);
    }
    hx_barrier();  // the next pass overwrites the queries
  }
  return logit;
}

// Key blocks [blo, bhi) of sequence b: every row's columns there, values or -inf.
HX_INLINE HX_DEV void hx_compute_blocks(const DecodeParams& p, const hx_decode_tiling& g, const hx_decode_smem& s,
                                        hx_i32 b, hx_decode_seq seq, hx_range blocks) {
  const hx_i32 t = (hx_i32)hx_thread_x();
  const float neg_inf = hx_bits_to_f32(0xFF800000u);
  const hx_i32 cend = (hx_i32)(((hx_i64)blocks.hi * p.block_size) < p.max_model_len
                                   ? (hx_i64)blocks.hi * p.block_size : p.max_model_len);
  for (hx_i32 c0 = blocks.lo * p.block_size; c0 < cend; c0 += g.tile) {
    const hx_i32 c1 = hx_min_i32(cend, c0 + g.tile);
    const hx_i32 nk = hx_max_i32(0, hx_min_i32(c1, seq.keys) - c0);
    const hx_i32 first = c0 / p.block_size;  // the tile's first block: s.block[0]
    if (nk > 0) hx_stage_tile(p, g, s, b, c0, nk);
    const hx_i32 n = c0 + t;
    const bool mine = n < c1;
    for (hx_i32 j = 0; j < p.next_n; ++j) {
      const hx_i64 r = (hx_i64)b * p.next_n + j;
      const hx_i32 bound = hx_decode_row_bound(seq, j, p.max_model_len);
      float* dst = p.out + r * p.out_stride + n;
      if (bound <= c0) {  // nothing valid here (dead rows too): fill only
        if (p.clean && mine) *dst = neg_inf;
        continue;
      }
      const float logit = hx_row_logit(p, g, s, r, t < nk);
      if (!mine) continue;
      if (n < bound) {  // a key of a block whose id is out of range is -inf; scale >= 0 commutes with relu
        *dst = s.block[n / p.block_size - first] < 0 ? neg_inf : logit * s.scale[t];
      } else if (p.clean) {
        *dst = neg_inf;
      }
    }
  }
}

// sm_90a: three resident blocks per SM let ptxas keep the unit's walk state in registers across the key loops
// (its default register budget spilled it there); the shared key tile allows no more than seven anyway.
HX_KERNEL HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 3) void hx_paged_mqa_logits_generic(const HX_GRID_CONSTANT DecodeParams p) {
  hx_grid_dependency_wait();
  HX_SHARED(hx_u32x4, k_rows, KT * KROW_MAX / 16);
  HX_SHARED(hx_f32x4, q_pass, QF_MAX / 4);
  HX_SHARED(float, w_pass, PASS);
  HX_SHARED(float, scales, KT);
  HX_SHARED(hx_i64, block_base, KT);
  HX_SHARED(hx_i64, scan, 2 * HX_BLOCK);
  const hx_decode_smem s = {k_rows, q_pass, w_pass, scales, block_base, scan};
  const hx_decode_tiling g = hx_tiling(p);
  const hx_i32 t = (hx_i32)hx_thread_x();
  const hx_i64 units = hx_grid_dim_x(), u = hx_block_x();

  // Pass 1: the batch's total block work and fill.
  const hx_range64 totals = hx_decode_totals(p, t, HX_BLOCK, u == 0, ERR_LENGTH, s.scan, [] { hx_barrier(); });
  const hx_i64 total_work = totals.lo, total_fill = totals.hi;
  const hx_range64 own_work = hx_balanced_part(total_work, units, u);
  const hx_range64 own_fill = p.clean ? hx_balanced_part(total_fill, units, u) : hx_range64{0, 0};

  // Pass 2: walk the sequences in chunks, with running prefixes, and do what falls in this unit's pieces.
  hx_decode_walk(
      p, t, HX_BLOCK, own_work, own_fill, s.scan, [] { hx_barrier(); },
      [&](hx_i32 b, const hx_decode_seq& seq, hx_range blocks) { hx_compute_blocks(p, g, s, b, seq, blocks); },
      [&](hx_i32 b, hx_range cols) {
        const float neg_inf = hx_bits_to_f32(0xFF800000u);
        for (hx_i32 j = 0; j < p.next_n; ++j) {
          float* row = p.out + ((hx_i64)b * p.next_n + j) * p.out_stride;
          for (hx_i32 n = cols.lo + t; n < cols.hi; n += HX_BLOCK) row[n] = neg_inf;
        }
      });
}
