// The unit of the gfx950 paged decode kernels (paged_mqa_logits_mfma.hip: the logits; paged_mqa_topk_mfma.hip:
// each row's top_k on chip) for H = HX_HEADS in {32, 64}, D = 128, on the scaled 16x16x128 fp8 MFMA, written on
// the wave primitives (wave.h): how a unit finds its work, stages a sequence's rows, loads a page's keys and
// computes a row's logits at them. A kernel gives what it does with a page's logits (its page functor), what its
// waves do between rounds of pages (its meeting), and with the columns no key reaches (its fill). HX_ROWS: the
// rows a sequence stages at most (8 unless the kernel says fewer). Two builds of the logits kernel: HX_GATHER 0
// serves block sizes that are powers of two >= 16 in both cache layouts, HX_GATHER 1 block_size 1 (block-flat).
//
// Work. A workgroup of NW waves is one unit of the grid. Units share the
// batch's real work evenly, from the lengths in device memory
// (decode_work.h): each owns a contiguous piece of the key blocks, every
// block weighted by its sequence's live rows, and a piece of the columns
// that hold no key (only filled). For each sequence it works on, the unit
// stages the live rows' Q and head weights in LDS (global->LDS DMA; dead
// rows are never read), then its waves take the sequence's 64-key pages in
// turn. A wave holds one page's keys in VGPRs (each key read from memory
// once, by one wave of one unit) and computes every live row of the sequence
// from them, reading that row's Q from LDS: K is read once for any next_n.
// Which columns a row sees is one bound per row (hx_decode_row_bound: the
// affine rule of [B] lengths, or the row's own count of [B, next_n]
// lengths), put in LDS with the rows: one code path for both forms.
// Keeping Q in LDS, not VGPRs, is what lets one page serve 8 rows of 64 heads
// (64 KiB of Q): two workgroups of 4 waves fit a CU's 160 KiB at H = 64, so
// 2 waves per SIMD; at H = 32 the LDS allows 4.
//
// A page is 4 groups of 16 keys; group tt is the MFMA's 16 columns. Lane l
// holds key 16 tt + l % 16 of group tt and 32 of its 128 bytes, so one MFMA
// covers all of D: C[16 heads][16 keys] += Q[16 heads][128] . K^T. With unit
// scales any K order applied to A and B alike gives the same product; we take
// operand byte b of lane group g = l / 16 as D index 16 g + 64 (b / 16) + b % 16,
// so each lane reads two 16-byte pieces of its key, and in the preshuffled
// layout lanes 0-15 of one load read one 256-byte run (both layouts are one
// choice of per-lane offsets, fixed for the whole kernel). Q is staged in
// LDS in the same operand order: its A operand is one 16-byte ds_read per
// lane per half, 1 KiB contiguous per wave.
//
// Epilogue of a row: lane (t, g) holds heads 4 g + i of each 16-head tile for
// key t of each group: ReLU and the head weight (packed fma) reduce them in
// lane to one partial per group; two permlane32 swaps, one permlane16 swap
// and three adds then sum the 4 lane groups of all 4 groups at once and leave
// key l of the page in lane l. kv_scale (>= 0, and ReLU is positive-
// homogeneous) multiplies after the head sum.
//
// Memory. Buffer loads with wave-uniform 64-bit bases (one per group: a
// group never spans two blocks) and small lane offsets; block_size 1 gathers
// each key through its own 64-bit address. A page's keys are loaded while the
// previous page is computed, and its block-table entries a page before that.
// Keys past the context or past the unit's range are not read (their lanes'
// offsets are out of range), scales are read once per key.
//
// Untrusted device values: a block id outside [0, num_blocks), or a table
// column past max_blocks, is never read through: its keys come out -inf and
// error bit 0 is set; a malformed sequence is all -inf with bit 2, and with
// per-row lengths a negative row alone is (as the generic kernel:
// hsaco_src/generic/paged_mqa_logits.hip).
#pragma once
#include "decode_work.h"
#include "paged_cache.h"
#include "hx_params.h"
#include "wave.h"

#if !defined(HX_HEADS) || (HX_HEADS != 32 && HX_HEADS != 64)
#error "the gfx950 decode kernels: build with -DHX_HEADS=32 or -DHX_HEADS=64"
#endif
#ifndef HX_GATHER
#define HX_GATHER 0
#endif

#define H HX_HEADS
#define HT (H / 16)             // 16-head tiles
#define D 128
#define KB (D + 4)              // bytes of one key and its scale (block_size 1: one block)
#define NW (HX_BLOCK / 64)      // waves per workgroup
#define PAGE 64                 // keys per page: 4 groups of 16
#ifndef HX_ROWS
#define HX_ROWS 8
#endif
#define ROWS HX_ROWS            // next_n at most
#define SLAB 64                 // 16-byte LDS slots of one A-operand half (1 KiB)
#define ERR_BLOCK_ID 1
#define ERR_LENGTH 4
#define OFF_NONE 0x40000000u    // a lane offset past every buffer here: the lane loads or stores nothing

#define ROWS4 ((ROWS + 3) / 4)  // the rows' bounds as 16-byte words

static_assert(NW >= 1 && NW * 64 == HX_BLOCK, "whole waves");

struct hx_lds {
  hx_v4u* q;        // [ROWS][HT][2][SLAB] the live rows' A operands, operand order
  hx_v4f* w;        // [ROWS][H / 4] their head weights
  hx_i64* scan;     // [2 * HX_BLOCK] work / fill prefixes of a chunk of sequences
  hx_v4u* bound;    // [ROWS4] of int32: row j of the sequence sees the columns n < bound[j] (0: none)
};

// One wave's keys of a page: B operands and scales of its 4 groups.
struct hx_kpage {
  hx_v8i k[4];
  hx_u32 sc[4];     // lane l: the scale of key l from load l / 16; 0 from the other three
  hx_u32 ok;        // bit tt: group tt's block is in range (its keys are not -inf)
  bool bad;         // a key this lane reads (block_size 1), or a group the wave reads, has no block in range
};

// What a wave knows of the sequence it works on.
struct hx_seqwork {
  hx_i32 b;
  hx_i32 c_lo, c_hi;    // the unit's columns of the sequence: [c_lo, c_hi)
  hx_i32 load_hi;       // keys at or past it are not read: min(keys, c_hi)
  hx_i32 pages;         // ceil((c_hi - c_lo) / PAGE)
  hx_u32 lane;
  hx_u32 koff[2];       // the lane's byte offsets of its two key pieces inside a 16-key group
  hx_u32 khalf;         // koff[1] - koff[0]: the same for every lane
  hx_u32 nblocks;       // num_blocks, capped at 2^31 (every block id is an int32)
  const hx_u8* kv_lane; // block_size 1: kv_cache + the lane's first key piece
};

// ------------------------------------------------------------------ keys

#if !HX_GATHER
// Block-table entries of page pg's 4 groups, through the scalar cache; -1 where a group has no key to read
// or its column is past the table (that one is flagged at the issue).
struct hx_entries {
  hx_i32 id[4];
};

template <class P>
HX_WAVE_FN hx_entries hx_load_entries(const P& p, const hx_seqwork& c, hx_i32 pg, hx_u32 log2bs) {
  const hx_i32* table = p.block_tables + (hx_i64)c.b * p.max_blocks;
  hx_entries e;
  for (int tt = 0; tt < 4; tt++) {
    const hx_i32 ng = c.c_lo + PAGE * pg + 16 * tt, col = ng >> log2bs;
    e.id[tt] = ng < c.load_hi && col < p.max_blocks ? (hx_i32)hx_scalar_load_b32(table + col) : -1;
  }
  return e;
}

// Issue the loads of page pg's keys and scales.
template <class P>
HX_WAVE_FN void hx_issue_page(const P& p, const hx_seqwork& c, hx_i32 pg, const hx_entries& e,
                              hx_u32 log2bs, hx_kpage& kp) {
  const hx_i32 n0 = (hx_i32)hx_readfirstlane((hx_u32)(c.c_lo + PAGE * pg));  // as in hx_compute_page
  const hx_i64 bb = hx_block_bytes(p.block_size, D);
  const hx_u32 t = c.lane % 16, g = c.lane / 16;
  bool bad = false;
  kp.ok = 0;
  for (int tt = 0; tt < 4; tt++) {
    const hx_i32 ng = n0 + 16 * tt;  // the group's first key: groups never straddle a block
    const hx_i32 id = e.id[tt];
    const bool live = ng < c.load_hi;
    const bool ok = live && (hx_u32)id < c.nblocks;  // a negative id is past every pool
    bad |= live && !ok;
    kp.ok |= ok ? 1u << tt : 0u;
    const hx_i32 tin = ng & ((1 << log2bs) - 1);
    const hx_u8* blk = p.kv_cache + (ok ? (hx_i64)id * bb : 0);
    // keys past load_hi (and every key of a block out of range) read nothing
    const hx_rsrc kr = hx_make_buffer_rsrc(blk + (hx_i64)tin * D, ok ? 16u * D : 0u);
    const bool mine = ng + (hx_i32)t < c.load_hi;
    // the second piece is a fixed distance on in both layouts: the scalar offset adds it (both pieces are in
    // range, or neither is, with or without it)
    const hx_u32 off = mine ? c.koff[0] : OFF_NONE;
    const hx_v4u lo = hx_buffer_load_b128(kr, off, 0), hi = hx_buffer_load_b128(kr, off, c.khalf);
    kp.k[tt] = hx_v8i{(int)lo.x, (int)lo.y, (int)lo.z, (int)lo.w, (int)hi.x, (int)hi.y, (int)hi.z, (int)hi.w};
    const hx_rsrc sr = hx_make_buffer_rsrc(blk + hx_scale_offset(p.block_size, D, tin), ok ? 64u : 0u);
    kp.sc[tt] = hx_buffer_load_b32(sr, g == (hx_u32)tt && mine ? 4 * t : OFF_NONE, 0);
  }
  kp.bad = bad;
}
#else
// Block-table entries of page pg: entry tt of the lane is that of key 16 tt + l % 16 (0 past the table row).
struct hx_entries {
  hx_u32 e[4];
};

template <class P>
HX_WAVE_FN hx_entries hx_load_entries(const P& p, const hx_seqwork& c, hx_i32 pg, hx_u32) {
  const hx_i32 hi = hx_min_i32(c.load_hi, p.max_blocks);
  const hx_rsrc tr = hx_make_buffer_rsrc(p.block_tables + (hx_i64)c.b * p.max_blocks, 4u * (hx_u32)p.max_blocks);
  hx_entries e;
  for (int tt = 0; tt < 4; tt++) {
    const hx_i32 n = c.c_lo + PAGE * pg + 16 * tt + (hx_i32)(c.lane % 16);
    e.e[tt] = hx_buffer_load_b32(tr, n < hi ? 4u * (hx_u32)n : OFF_NONE, 0);
  }
  return e;
}

// block_size 1: each key is its own block, found through its own 64-bit address. A key that is not read
// keeps whatever its registers held: its column of every MFMA is its own, and its logits come out -inf.
template <class P>
HX_WAVE_FN void hx_issue_page(const P& p, const hx_seqwork& c, hx_i32 pg, const hx_entries& en,
                              hx_u32, hx_kpage& kp) {
  const hx_i32 n0 = c.c_lo + PAGE * pg;
  const hx_u32 t = c.lane % 16, g = c.lane / 16;
  const hx_i32 in_table = hx_min_i32(c.load_hi, p.max_blocks);  // keys past it have no entry (flagged)
  bool bad = false;
  kp.ok = 0;
  for (int tt = 0; tt < 4; tt++) {
    const hx_i32 n = n0 + 16 * tt + (hx_i32)t;
    const hx_i32 id = (hx_i32)en.e[tt];
    const bool mine = n < c.load_hi;
    const bool ok = n < in_table && (hx_u32)id < c.nblocks;  // a negative id is past every pool
    bad |= mine && !ok;
    hx_u32 sc = 0;
    if (ok) {
      // the lane's first piece (16 g); the second 64 bytes on, the scale at D: immediate offsets of one address
      const hx_u8* key = c.kv_lane + (hx_i64)(hx_u32)id * KB;
      const hx_v4u lo = hx_global_load_b128(key), hi = hx_global_load_b128(key + 64);
      kp.k[tt] = hx_v8i{(int)lo.x, (int)lo.y, (int)lo.z, (int)lo.w, (int)hi.x, (int)hi.y, (int)hi.z, (int)hi.w};
      if (g == (hx_u32)tt) sc = hx_global_load_b32(key + D - 16 * tt);
    }
    kp.sc[tt] = sc;
    if (g == (hx_u32)tt) kp.ok = ok ? 1u : 0u;  // lane l's own key (group l / 16): bit 0 here
  }
  kp.bad = bad;
}
#endif

// Is key l of the page (lane l) in a block that is in range?
HX_WAVE_FN bool hx_key_ok(const hx_kpage& kp, hx_u32 lane) {
#if HX_GATHER
  (void)lane;
  return kp.ok != 0;
#else
  return (kp.ok >> (lane / 16)) & 1u;
#endif
}

// ------------------------------------------------------------------ rows

// One 16-head tile of row j against the page's 4 groups: C[16 heads][16 keys] per group.
HX_WAVE_FN void hx_tile_mfmas(const hx_lds& s, const hx_kpage& kp, hx_i32 j, int ht, hx_u32 lane, int unit,
                              hx_v4f acc[4]) {
  const hx_v4u* slab = s.q + (hx_i64)(j * HT + ht) * 2 * SLAB;
  const hx_v4u a0 = slab[lane], a1 = slab[SLAB + lane];
  const hx_v8i a = {(int)a0.x, (int)a0.y, (int)a0.z, (int)a0.w, (int)a1.x, (int)a1.y, (int)a1.z, (int)a1.w};
  const hx_v4f zero = {};
  for (int tt = 0; tt < 4; tt++) acc[tt] = hx_mfma_16x16x128_fp8_scaled(a, kp.k[tt], zero, unit, unit);
}

// part[tt] += relu(acc[tt]) * the lane's 4 head weights of tile ht (heads 16 ht + 4 g + i), two per packed fma.
HX_WAVE_FN void hx_tile_epilogue(const hx_lds& s, hx_i32 j, int ht, hx_u32 lane, const hx_v4f acc[4],
                                 hx_v2f part[4]) {
  const hx_v4f w = s.w[(j * H + 16 * ht + 4 * (lane / 16)) / 4];
  for (int tt = 0; tt < 4; tt++) {
    const hx_v2f lo = {__builtin_fmaxf(acc[tt].x, 0.0f), __builtin_fmaxf(acc[tt].y, 0.0f)};
    const hx_v2f hi = {__builtin_fmaxf(acc[tt].z, 0.0f), __builtin_fmaxf(acc[tt].w, 0.0f)};
    part[tt] = ht == 0 ? hx_pk_mul(lo, hx_v2f{w.x, w.y}) : hx_pk_fma(lo, hx_v2f{w.x, w.y}, part[tt]);
    part[tt] = hx_pk_fma(hi, hx_v2f{w.z, w.w}, part[tt]);
  }
}

// Row j's logits at the page's keys, before kv_scale: lane l gets key l's. The MFMAs of tile ht + 1 are
// issued before the epilogue of tile ht, which fills their result latency (two accumulator sets in turn).
HX_WAVE_FN float hx_row_logits(const hx_lds& s, const hx_kpage& kp, hx_i32 j, hx_u32 lane, int unit) {
  hx_v2f part[4];
  hx_v4f acc0[4], acc1[4];
  hx_tile_mfmas(s, kp, j, 0, lane, unit, acc0);
  for (int ht = 0; ht < HT; ht += 2) {
    hx_tile_mfmas(s, kp, j, ht + 1, lane, unit, acc1);
    hx_tile_epilogue(s, j, ht, lane, acc0, part);
    if (ht + 2 < HT) hx_tile_mfmas(s, kp, j, ht + 2, lane, unit, acc0);
    hx_tile_epilogue(s, j, ht + 1, lane, acc1, part);
  }
  float x0 = part[0].x + part[0].y, x1 = part[1].x + part[1].y;
  float x2 = part[2].x + part[2].y, x3 = part[3].x + part[3].y;
  // Lane group g of x_tt holds heads 4g.. of group tt's keys: sum the 4 lane groups of all 4 at once.
  hx_permlane32_swap(x0, x2);  // x0: groups 0 | 2 rows 0-1 of each; x2: rows 2-3
  hx_permlane32_swap(x1, x3);
  float y02 = x0 + x2, y13 = x1 + x3;  // lane groups: (0+2, 1+3) of group 0 | 2, and of 1 | 3
  hx_permlane16_swap(y02, y13);
  return y02 + y13;                    // lane group g: group g's sum over every head
}

// The wave's pages of the sequence (pages w, w + NW, ...), each page's keys loaded while the one
// before is computed and its table entries loaded before that. Two register sets in turn (static
// names after unrolling: no copies between them). row_bound: from hx_stage_rows. page(pg, kp) does the
// kernel's work on page pg; meet(r) follows round r (the unit's pages r NW .. r NW + NW - 1), called by every
// wave for every round of the sequence, whether or not it had a page in it.
template <class P, class Page, class Meet>
HX_WAVE_FN void hx_wave_pages(const P& p, const hx_lds& s, const hx_seqwork& c, hx_u32 w, hx_i32 row_bound,
                              Page&& page, Meet&& meet) {
  const hx_i32 mine = c.pages > (hx_i32)w ? hx_ceil_div(c.pages - (hx_i32)w, NW) : 0;  // this wave's pages
  const hx_i32 rounds = hx_ceil_div(c.pages, NW);                                     // mine or mine + 1
  const hx_u32 log2bs = (hx_u32)__builtin_ctz((unsigned)p.block_size);
#define PG(i) ((hx_i32)w + NW * (i))
  // The first page's loads go out while the rows' Q and weights are still landing (hx_stage_rows issued them):
  // a unit's start waits for both at once, not one after the other.
  hx_entries e0, e1;
  hx_kpage ka, kb;
  if (mine > 0) {
    e0 = hx_load_entries(p, c, PG(0), log2bs);
    e1 = mine > 1 ? hx_load_entries(p, c, PG(1), log2bs) : e0;
    hx_issue_page(p, c, PG(0), e0, log2bs, ka);
    if (mine > 2) e0 = hx_load_entries(p, c, PG(2), log2bs);
  }
  hx_lds_load_wait();      // our share of the rows (and the first page) has landed
  // the row bounds' lengths, read by hx_stage_rows, have landed with them: no wait of their own
  if (w == 0 && c.lane < ROWS) ((hx_i32*)s.bound)[c.lane] = row_bound;
  hx_workgroup_barrier();  // ... and every wave's share
  if (mine == 0) {
    for (hx_i32 r = 0; r < rounds; ++r) meet(r);
    return;
  }
  // The loads of a page past the wave's last are still issued, all out of range (they move nothing): the
  // same count of vector-memory operations on every path, so waiting for a page's keys never waits for the
  // next page's.
  bool bad = ka.bad;  // flagged once per wave and sequence, after the pages
  for (hx_i32 i = 0; i < mine; i += 2) {
    hx_issue_page(p, c, PG(i + 1), e1, log2bs, kb);
    bad |= kb.bad;
    if (i + 3 < mine) e1 = hx_load_entries(p, c, PG(i + 3), log2bs);
    page(PG(i), ka);
    meet(i);
    if (i + 1 >= mine) break;
    hx_issue_page(p, c, PG(i + 2), e0, log2bs, ka);
    bad |= ka.bad;
    if (i + 4 < mine) e0 = hx_load_entries(p, c, PG(i + 4), log2bs);
    page(PG(i + 1), kb);
    meet(i + 1);
  }
  if (bad && p.errors) hx_atomic_or(p.errors, ERR_BLOCK_ID);
  if (mine < rounds) meet(mine);
#undef PG
}

// Issue the DMA of sequence b's live rows' Q and weights into LDS (every wave's share). Returns row `lane`'s
// bound (hx_decode_row_bound) in lanes 0..ROWS-1 of wave 0, for hx_wave_pages to put in LDS: a per-row length
// is read here, before the DMA, and has landed by the time hx_wave_pages waits for the rows.
template <class P>
HX_WAVE_FN hx_i32 hx_stage_rows(const P& p, const hx_lds& s, const hx_decode_seq& seq, hx_i32 b,
                                hx_u32 w, hx_u32 lane) {
  hx_workgroup_barrier();  // the previous sequence's readers are done with the rows and their bounds
  const hx_i32 live = seq.live;
  const hx_i32 row_bound = w == 0 && lane < ROWS ? hx_decode_row_bound(seq, (hx_i32)lane, p.max_model_len) : 0;
  const hx_rsrc qr = hx_make_buffer_rsrc(p.q + (hx_i64)b * p.next_n * H * D, (hx_u32)(live * H * D));
  // slab (j, ht, h): lane l's 16 bytes are Q[j][16 ht + l % 16][16 (l / 16) + 64 h, +16)
  const hx_u32 qlane = (lane % 16) * D + 16 * (lane / 16);
  for (hx_i32 sl = (hx_i32)w; sl < live * HT * 2; sl += NW) {
    const hx_u32 j = (hx_u32)sl / (2 * HT), ht = ((hx_u32)sl / 2) % HT, h = (hx_u32)sl % 2;
    hx_lds_load_b128(qr, s.q + SLAB * sl, (j * H + 16 * ht) * D + 64 * h + qlane, 0);
  }
  const hx_rsrc wr = hx_make_buffer_rsrc(p.weights + (hx_i64)b * p.next_n * H, (hx_u32)(live * H * 4));
  for (hx_i32 k = (hx_i32)w; k < hx_ceil_div(live * H, 64); k += NW)
    hx_lds_load_b32(wr, s.w + 16 * k, 4 * (64 * (hx_u32)k + lane), 0);
  // hx_wave_pages waits for them, after issuing its first page
  return row_bound;
}

// The unit's share of the batch: its pieces of the key blocks (each block weighted by its sequence's live rows)
// and, when `fill`, of the columns no key reaches. For each sequence whose blocks it owns, work(c, seq) (c: the
// sequence's columns here, at least one page); for each whose empty columns it owns, fill(b, cols). Every thread
// of the unit runs it; work and fill are whole-unit steps.
template <class P, class Work, class Fill>
HX_WAVE_FN void hx_decode_units(const P& p, const hx_lds& s, bool fill_columns, Work&& work, Fill&& fill) {
  const hx_i32 t = (hx_i32)hx_thread_x();
  const hx_u32 lane = hx_lane_id();
  const hx_i64 units = hx_grid_dim_x(), u = hx_block_x();

  // Pass 1: the batch's total block work and fill.
  const hx_range64 totals = hx_decode_totals(p, t, HX_BLOCK, u == 0, ERR_LENGTH, s.scan, [] { hx_workgroup_barrier(); });
  const hx_i64 total_work = totals.lo, total_fill = totals.hi;
  const hx_range64 own_work = hx_balanced_part(total_work, units, u);
  const hx_range64 own_fill = fill_columns ? hx_balanced_part(total_fill, units, u) : hx_range64{0, 0};

  // The lane's two key pieces inside a 16-key group (operand bytes 0-15 and 16-31).
  hx_seqwork c;
  c.lane = lane;
  c.nblocks = (hx_u32)(p.num_blocks < ((hx_i64)1 << 31) ? p.num_blocks : ((hx_i64)1 << 31));
  {
    const hx_u32 tk = lane % 16, g = lane / 16;
#if HX_GATHER
    c.koff[0] = 16 * g;
    c.koff[1] = 64 + 16 * g;
    c.kv_lane = p.kv_cache + c.koff[0];
#else
    const bool shuffled = p.preshuffle != 0;  // the layout is only this choice of offsets
    c.koff[0] = (hx_u32)hx_key_offset(shuffled, (hx_i32)tk, (hx_i32)(16 * g), D);
    c.koff[1] = (hx_u32)hx_key_offset(shuffled, (hx_i32)tk, (hx_i32)(64 + 16 * g), D);
    c.khalf = (hx_u32)(hx_key_offset(shuffled, 0, 64, D) - hx_key_offset(shuffled, 0, 0, D));
#endif
  }

  // Pass 2: walk the sequences in chunks, with running prefixes, and do what falls in this unit's pieces.
  hx_decode_walk(
      p, t, HX_BLOCK, own_work, own_fill, s.scan, [] { hx_workgroup_barrier(); },
      [&](hx_i32 bb, const hx_decode_seq& seq, hx_range blocks) {
        // Every value a buffer base or range is made from must be visibly wave-uniform (an SGPR), or the
        // compiler loops over the lanes' values at each buffer access.
        c.b = (hx_i32)hx_readfirstlane((hx_u32)bb);
        const hx_i64 lo = (hx_i64)blocks.lo * p.block_size, hi = (hx_i64)blocks.hi * p.block_size;
        c.c_lo = (hx_i32)hx_readfirstlane((hx_u32)(lo < p.max_model_len ? lo : p.max_model_len));
        c.c_hi = (hx_i32)hx_readfirstlane((hx_u32)(hi < p.max_model_len ? hi : p.max_model_len));
        c.load_hi = (hx_i32)hx_readfirstlane((hx_u32)hx_min_i32(c.c_hi, seq.keys));
        c.pages = c.c_hi > c.c_lo ? hx_ceil_div(c.c_hi - c.c_lo, PAGE) : 0;
        if (c.pages > 0) work(c, seq, bb);
      },
      fill);
}
