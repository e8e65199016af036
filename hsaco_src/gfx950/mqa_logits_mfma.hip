// gfx950 prefill logits (docs/ops.md) for H = HX_HEADS in {32, 64}, D = 128,
// on the scaled 32x32x64 fp8 MFMA, written on the wave primitives (wave.h).
//
// Layout of the work. A workgroup of NW waves owns BM = NW * RW query rows (a
// row block; high rows first when reverse_rows) and one part of the row
// block's key split (hx_prefill_split_quanta: every column of the block has exactly
// one owner, which computes it or fills it with -inf, so the fill is fused).
// Wave w holds rows m0 + 2w and m0 + 2w + 1: their Q (A operands) and head
// weights stay in VGPRs for the whole key loop. K is staged through LDS by
// global->LDS DMA (buffer_load_dwordx4 ... lds, 16 bytes a lane) in chunks of
// CT tiles of 32 keys, double-buffered, each wave fetching 1/NW of a chunk:
// one K load serves all BM rows of the block, and the rows a block shares K
// across no longer cost registers in any single wave (4 rows of Q and
// weights in one wave need about 194 VGPRs: 2 waves/SIMD, and 8 rows spill).
//
// Per 32-key tile and row, C[head][key] = Q_row [32 heads x 128] . K^T
// [128 x 32 keys] is two MFMAs per 32-head tile (A = Q, B = K^T: each lane
// reads 16 contiguous bytes of one key row). Lane l holds key l % 32 for the
// heads 8i + 4g + j (g = l / 32, accumulator 4i + j), so the head reduction
// is in-lane (a packed ReLU, then a packed fma with the head weight: two
// elements per VALU operation in both, see hx_head_sums) plus one
// v_permlane32_swap + add per row pair, which leaves row a's sums in lanes 0-31 and row b's in lanes 32-63:
// every lane stores (one 128-byte row segment per half). kv_scale (>= 0; ReLU is positive-homogeneous)
// multiplies once per key, after the head sum. Stores are buffer stores
// over [n0, min(n0 + 32, work end)) of each row (uniform 64-bit base, 32-bit
// lane offset): the range check drops the keys another part owns.
//
// At H = 32 the tile loop is software-pipelined over two accumulator sets
// (the MFMAs of tile t + 1 are issued before the epilogue of tile t, which
// fills their result latency); at H = 64 a second set does not fit in 256
// VGPRs next to Q and the weights (64 + 64 + 64 + K), so the other resident
// wave covers it. tools/support/isa_report.py gives the hot loop's figures.
//
// K operand order: with unit scales any permutation of the 128 K indices
// applied to A and B alike gives the same product; we use the documented
// layout (byte 16i + j of k-step s is D index 64s + 32i + 16g + j). The LDS
// tile is chunk-major: 16-byte slot 64q + L (q = 2s + i) holds key L % 32,
// D bytes [16 (2q + L / 32), +16), so DMA instruction q and the MFMA read
// of operand half q are both 1 KiB contiguous (no bank conflicts).
//
// Built with -DHX_TOPK_FILTER=1 it is the fused prefill top-k's filter
// (hx_mqa_topk_mfma, PrefillTopkParams): a key whose logit's order key reaches
// its row's floor is appended to the row's region of the block's part (the
// floors' cut, common/topk_regions.h), at a place counted in LDS (the block's
// rows' counts, written out at its end). The two stores a tile stay two
// (8-byte entries at the lane's place; the region's buffer range drops a place
// past it), so the count the DMA wait relies on holds.
#include "index_math.h"
#include "prefill_build.h"
#include "wave.h"
#include "topk_select.h"
#if HX_FILTER
#include "topk_regions.h"
#endif

#if !defined(HX_HEADS) || (HX_HEADS != 32 && HX_HEADS != 64)
#error "mqa_logits_mfma.hip: build with -DHX_HEADS=32 or -DHX_HEADS=64"
#endif

#define H HX_HEADS
#define HT (H / 32)           // 32-head tiles
// Waves a SIMD holds. At H = 32 the compiler fits the kernel in 168 VGPRs when asked (512 / 3), so a CU holds
// three workgroups: a wave's tile is mostly waiting (LDS, the next chunk, the MFMA results), which a third wave
// fills, and the SIMD's MFMA pipe, a third of it idle at two, nears full. H = 64 stays at two (asked for three,
// it spills); asked for two it fits the next tile's keys beside the epilogue's live values in 256 VGPRs, where
// left to itself it takes AGPRs too and one wave. The planner sizes the key split to the CU's workgroups
// (hipindexer/plan/prefill.py).
#if H == 32
#define HX_MFMA_BOUNDS HX_LAUNCH_BOUNDS_WAVES(HX_BLOCK, 3)
#else
#define HX_MFMA_BOUNDS HX_LAUNCH_BOUNDS_WAVES(HX_BLOCK, 2)
#endif
#define D 128
#define TN 32                 // keys per MFMA tile
#define NW (HX_BLOCK / 64)    // waves per workgroup
#define RW 2                  // rows per wave: one permlane pair
#define BM (NW * RW)          // rows per block sharing every K load
#define CT 4                  // tiles per LDS chunk
#define CK (CT * TN)          // keys per chunk
#define SLOTS (CT * 4 * 64)   // 16-byte LDS slots per chunk buffer
#define STORES_PER_CHUNK (2 * CT)  // vector memory instructions of a full chunk's tiles (hx_tile_store)
#define HX_OOB 0x80000000u    // a store offset past any tile's range: the buffer drops it
#ifndef HX_PIPE               // MFMAs of tile t + 1 before the epilogue of tile t (needs a second
#define HX_PIPE (HT == 1)     // set of accumulators: 32 VGPRs at H = 32, 64 at H = 64, which spills)
#endif

// The packed ReLU is a clamp to [0, 1] of acc * 2^-25: an accumulator is a sum of D = 128 products of e4m3
// values (|x| <= 448), so |acc| < 128 * 448^2 < 2^25 and the clamp only cuts the negative side; a nonzero
// |acc| is at least 2^-18 (the smallest e4m3 product), so acc * 2^-25 stays normal and exact. The weights
// carry the 2^25 back (exact below |w| = 2^103): every product and sum is the unscaled one, bit for bit.
#define HX_RELU_SCALE 0x1p-25f
#define HX_RELU_UNSCALE 0x1p25f
static_assert(D * 448.0f * 448.0f * HX_RELU_SCALE < 1.0f, "the clamp to [0, 1] must not cut a positive logit");

static_assert(NW >= 1 && (CT * 4) % NW == 0, "each wave stages an equal share of a chunk");
static_assert(CT % 2 == 0, "the pipelined tile loop takes tiles in pairs");
static_assert((BM & (BM - 1)) == 0 && BM <= 64, "the window union's shuffles pair lanes l and l ^ d, d < BM");
static_assert(CK % 64 == 0, "kv_scale is staged 64 keys per DMA instruction");

// Stage keys [c0, c0 + CK) (keys >= N read as 0) into one chunk buffer: this
// wave's share of the 16-byte K DMA slots and of the kv_scale words.
HX_WAVE_FN void hx_stage(const Params& p, hx_v4u* kb, float* sb, hx_i32 c0, hx_u32 w, hx_u32 lane) {
  const hx_u32 live = (hx_u32)hx_min_i32(p.N - c0, CK);  // 64-bit base, small 32-bit offsets
  const hx_rsrc kr = hx_make_buffer_rsrc(p.k + (hx_i64)c0 * D, live * D);
  for (hx_u32 s = 0; s < CT * 4 / NW; s++) {
    const hx_u32 q = s * NW + w;  // slot group q: tile q / 4, operand half q % 4
    hx_lds_load_b128(kr, kb + 64 * q, (TN * (q / 4) + lane % 32) * D + 16 * (2 * (q % 4) + lane / 32), 0);
  }
  const hx_rsrc sr = hx_make_buffer_rsrc(p.kv_scale + c0, live * 4);
  for (hx_u32 s = w; s < CK / 64; s += NW) hx_lds_load_b32(sr, sb + 64 * s, 4 * (64 * s + lane), 0);
}

// One row's A operands: [head tile][k-step], byte 16i + j = Q[m][32ht + l%32][64s + 32i + 16g + j].
HX_WAVE_FN void hx_load_q(const Params& p, hx_i32 m, hx_u32 lane, hx_v8i q[HT][2]) {
  const hx_rsrc qr = hx_make_buffer_rsrc(p.q + (hx_i64)m * (H * D), H * D);
  for (int ht = 0; ht < HT; ht++)
    for (int s = 0; s < 2; s++) {
      const hx_u32 base = (32 * ht + lane % 32) * D + 64 * s + 16 * (lane / 32);
      const hx_v4u lo = hx_buffer_load_b128(qr, base, 0), hi = hx_buffer_load_b128(qr, base + 32, 0);
      q[ht][s] = hx_v8i{(int)lo.x, (int)lo.y, (int)lo.z, (int)lo.w, (int)hi.x, (int)hi.y, (int)hi.z, (int)hi.w};
    }
}

// One row's head weights in accumulator order, times 2^25 (HX_RELU_UNSCALE):
// w[ht][4i + j] = weights[m][32ht + 8i + 4g + j] * 2^25.
HX_WAVE_FN void hx_load_w(const Params& p, hx_i32 m, hx_u32 lane, hx_v16f w[HT]) {
  const hx_rsrc wr = hx_make_buffer_rsrc(p.weights + (hx_i64)m * H, H * 4);
  for (int ht = 0; ht < HT; ht++)
    for (int i = 0; i < 4; i++) {
      const hx_v4u v = hx_buffer_load_b128(wr, 4 * (32 * ht + 8 * i + 4 * (lane / 32)), 0);
      w[ht][4 * i + 0] = hx_bits_to_f32(v.x) * HX_RELU_UNSCALE;
      w[ht][4 * i + 1] = hx_bits_to_f32(v.y) * HX_RELU_UNSCALE;
      w[ht][4 * i + 2] = hx_bits_to_f32(v.z) * HX_RELU_UNSCALE;
      w[ht][4 * i + 3] = hx_bits_to_f32(v.w) * HX_RELU_UNSCALE;
    }
}

// Row a's and row b's sums over this lane's heads of relu(acc) * weight, two heads per VALU operation: a
// packed ReLU (hx_pk_mul_clamp01, after one wait for both rows' MFMA results per head tile), then a packed
// fma whose operands are VALU results, which hx_pk_fma keeps packed.
HX_WAVE_FN void hx_head_sums(const hx_v16f acc_a[HT], const hx_v16f acc_b[HT], const hx_v16f wa[HT], const hx_v16f wb[HT],
                             float& x, float& y) {
  const hx_v2f s = {HX_RELU_SCALE, HX_RELU_SCALE};
  hx_v2f sa = {0.0f, 0.0f}, sb = {0.0f, 0.0f};
  for (int ht = 0; ht < HT; ht++) {
    hx_mfma_result_wait(acc_a[ht], acc_b[ht]);
    for (int e = 0; e < 16; e += 2) {
      const hx_v2f a = hx_pk_mul_clamp01(hx_v2f{acc_a[ht][e], acc_a[ht][e + 1]}, s);
      const hx_v2f b = hx_pk_mul_clamp01(hx_v2f{acc_b[ht][e], acc_b[ht][e + 1]}, s);
      const hx_v2f u = {wa[ht][e], wa[ht][e + 1]}, v = {wb[ht][e], wb[ht][e + 1]};
      sa = ht == 0 && e == 0 ? hx_pk_mul(a, u) : hx_pk_fma(a, u, sa);
      sb = ht == 0 && e == 0 ? hx_pk_mul(b, v) : hx_pk_fma(b, v, sb);
    }
  }
  x = sa.x + sa.y;
  y = sb.x + sb.y;
}

// Everything a wave keeps across the key loop.
struct hx_wave_rows {
  hx_v8i qa[HT][2], qb[HT][2];  // A operands of rows ma, mb
  hx_v16f wa[HT], wb[HT];       // their head weights, accumulator order
  int unit;                     // E8M0 1.0 in a VGPR, shared by every MFMA
  hx_u32 tlo, len;              // this lane's row (lanes 0-31: ma, 32-63: mb): key n is inside its
                                // window iff n + tlo < len (len = 0 for a row past M)
  bool fill;                    // the lane writes -inf outside the window (clean_logits, row < M)
  float* out_a;                 // output rows ma and mb (uniform)
  float* out_b;
  bool lo_half;                 // lane < 32
  hx_u32 toff;                  // 4 * (lane % 32): the lane's byte offset in a 32-key tile
  hx_u32 off_a, off_b;          // the lane's store offset in row ma's / mb's tile: toff, or HX_OOB
  hx_i32 whi;                   // end of this part's work range
#if HX_FILTER
  hx_rsrc ca, cb;               // rows ma's and mb's regions of this part (empty for a row past M)
  float floor;                  // the lane's row's floor as a value (hx_topk_floor_value; NaN past M)
  hx_u32* count;                // and its count in LDS
#endif
};

// A tile's B operands (its 32 keys, both k-steps) from the LDS chunk at kt (this lane's slot of the tile).
struct hx_tile_keys {
  hx_v8i kb0, kb1;
};
HX_WAVE_FN hx_tile_keys hx_read_tile_keys(const hx_v4u* kt) {
  const hx_v4u k0 = kt[0], k1 = kt[64], k2 = kt[128], k3 = kt[192];
  return {hx_v8i{(int)k0.x, (int)k0.y, (int)k0.z, (int)k0.w, (int)k1.x, (int)k1.y, (int)k1.z, (int)k1.w},
          hx_v8i{(int)k2.x, (int)k2.y, (int)k2.z, (int)k2.w, (int)k3.x, (int)k3.y, (int)k3.z, (int)k3.w}};
}

HX_WAVE_FN void hx_tile_mfmas(const hx_wave_rows& r, const hx_tile_keys& k, hx_v16f acc_a[HT], hx_v16f acc_b[HT]) {
  for (int ht = 0; ht < HT; ht++) {
    const hx_v16f zero = {};
    acc_a[ht] = hx_mfma_32x32x64_fp8_scaled(r.qa[ht][0], k.kb0, zero, r.unit, r.unit);
    acc_b[ht] = hx_mfma_32x32x64_fp8_scaled(r.qb[ht][0], k.kb0, zero, r.unit, r.unit);
    acc_a[ht] = hx_mfma_32x32x64_fp8_scaled(r.qa[ht][1], k.kb1, acc_a[ht], r.unit, r.unit);
    acc_b[ht] = hx_mfma_32x32x64_fp8_scaled(r.qb[ht][1], k.kb1, acc_b[ht], r.unit, r.unit);
  }
}
HX_WAVE_FN void hx_tile_mfmas(const hx_wave_rows& r, const hx_v4u* kt, hx_v16f acc_a[HT], hx_v16f acc_b[HT]) {
  hx_tile_mfmas(r, hx_read_tile_keys(kt), acc_a, acc_b);
}

#if HX_FILTER
// A region's entries past this many are never stored: 8 bytes each, their offsets stay within a buffer's 32-bit range.
#define HX_REGION_MAX 0x1FFFFFFFu
// Row m's region of this block's part as a buffer (its range drops every store past the region); empty for a row
// past M (m1).
HX_WAVE_FN hx_rsrc hx_region_rsrc(const Params& p, hx_i32 m, hx_i32 m1) {
  const hx_region g = m < m1 ? hx_topk_region(p, m, p.split, (hx_i32)hx_block_y()) : hx_region{0, 0u};
  return hx_make_buffer_rsrc(p.cand + g.base, 8u * (g.cap < HX_REGION_MAX ? g.cap : HX_REGION_MAX));
}
#endif

// Head reduction, kv_scale (this lane's key's, kvs), window and ownership of keys [n0, n0 + 32) for the row pair.
HX_WAVE_FN void hx_tile_store(const Params& p, const hx_wave_rows& r, const hx_v16f acc_a[HT],
                              const hx_v16f acc_b[HT], float kvs, hx_i32 n0, hx_u32 t) {
  float x, y;
  hx_head_sums(acc_a, acc_b, r.wa, r.wb, x, y);
  hx_permlane32_swap(x, y);  // lanes 0-31: row ma's two halves, lanes 32-63: row mb's
  const hx_u32 rel = (hx_u32)n0 + r.tlo;
  const bool inside = rel < r.len;
  // A min, not a select: a select of the kv_scale read becomes a branch around
  // it, behind which the compiler merges the last chunk's tile stores with a
  // base it no longer sees as uniform (a waterfall loop).
  const float lim = hx_bits_to_f32(inside ? 0x7F800000u : 0xFF800000u);  // +inf inside, -inf outside
#if HX_FILTER
  (void)lim;
  const float z = kvs * (x + y);
  const bool take = inside && z >= r.floor;  // inside: also before the part's end (len); no NaN or -inf passes
  const hx_u32 key = hx_topk_order_key(z);   // a lane that does not take stores nowhere
  hx_u32 off = HX_OOB;
  if (take) {
    const hx_u32 at = hx_atomic_add_u32(r.count, 1u);
    // past the region (the buffer's range): counted, not stored (the finish recomputes)
    off = at < HX_REGION_MAX ? 8u * at : HX_OOB;
  }
  const hx_u64 ent = hx_topk_entry(key, (hx_i64)n0 + t);
  const hx_v2u ev = {(hx_u32)ent, (hx_u32)(ent >> 32)};
  hx_buffer_store_b64(r.ca, r.lo_half ? off : HX_OOB, 0, ev);
  hx_buffer_store_b64(r.cb, r.lo_half ? HX_OOB : off, 0, ev);
  return;
#endif
  const float v = __builtin_fminf((x + y) * kvs, lim);
  // Buffer stores over [n0, min(n0 + 32, whi)) of each row: a uniform
  // 64-bit base, the lane's 32-bit offset, and the range check drops the keys
  // past this part's work range (another part owns them). Two stores a tile,
  // issued by every lane whatever it writes (a lane that writes nothing gives an
  // offset past the range): the wait for the next K chunk counts them.
  const bool store = inside | r.fill;
  const hx_u32 bytes = 4 * (hx_u32)hx_min_i32(r.whi - n0, TN);
  const hx_rsrc ra = hx_make_buffer_rsrc(r.out_a + n0, bytes), rb = hx_make_buffer_rsrc(r.out_b + n0, bytes);
  hx_buffer_store_b32(ra, store ? r.off_a : HX_OOB, 0, hx_f32_to_bits(v));
  hx_buffer_store_b32(rb, store ? r.off_b : HX_OOB, 0, hx_f32_to_bits(v));
}

// Chunk c (keys [c0, c0 + CK)) from the LDS buffers (kc, sc). FULL: not the
// last chunk of the part, so all CT tiles are inside the work range and the
// DMA of chunk c + 1 goes out into (kn, sn). The two buffers are distinct LDS
// arrays, named statically at each call: the compiler then waits on the DMA
// of the buffer a ds_read touches only, not on the prefetch of the other.
// Every wave runs every tile of its chunks, a wave past the block's rows
// included (its stores all fall outside the range), so that between the DMA
// of chunk c + 1 and its wait stand exactly the STORES_PER_CHUNK stores of a
// full chunk on every path the compiler sees.
template <bool FULL>
HX_WAVE_FN void hx_chunk(const Params& p, const hx_wave_rows& r, hx_i32 c, hx_i32 wlo, const hx_v4u* kc,
                         const float* sc, hx_v4u* kn, float* sn, hx_u32 w, hx_u32 lane) {
  // Our DMA of chunk c has landed; after the barrier everyone's has, and
  // every wave is done reading the other buffer (chunk c - 1). The DMA went
  // out before chunk c - 1's tiles (a full chunk), so waiting for it by count
  // leaves those tiles' stores in flight.
  if (c > 0)
    hx_lds_load_wait_count<STORES_PER_CHUNK>();
  else
    hx_lds_load_wait();
  hx_workgroup_barrier();
  const hx_i32 c0 = wlo + c * CK;
  if (FULL) hx_stage(p, kn, sn, c0 + CK, w, lane);
  const hx_u32 t = lane % 32;
  // Software pipeline: the MFMAs of tile tt + 1 are issued before the
  // epilogue of tile tt, which fills the MFMA result latency.
#if HX_PIPE
  // Two accumulator sets in turn (static names after unrolling: no copies).
  hx_v16f a0[HT], b0[HT], a1[HT], b1[HT];
  hx_tile_mfmas(r, kc + lane, a0, b0);
  for (hx_i32 tt = 0; tt < CT; tt += 2) {
    const hx_i32 n0 = c0 + TN * tt;
    const bool more1 = FULL || n0 + TN < r.whi;
    if (more1) hx_tile_mfmas(r, kc + 256 * (tt + 1) + lane, a1, b1);
    hx_tile_store(p, r, a0, b0, sc[TN * tt + t], n0, t);
    if (!more1) break;
    const bool more2 = tt + 2 < CT && (FULL || n0 + 2 * TN < r.whi);
    if (more2) hx_tile_mfmas(r, kc + 256 * (tt + 2) + lane, a0, b0);
    hx_tile_store(p, r, a1, b1, sc[TN * (tt + 1) + t], n0 + TN, t);
    if (!more2) break;
  }
#else
  // One accumulator set: the keys of tile tt + 1 are read from LDS once tile tt's MFMAs are issued, so their
  // round trip passes under tile tt's epilogue instead of before tile tt + 1's first MFMA.
  hx_tile_keys k = hx_read_tile_keys(kc + lane);
  for (hx_i32 tt = 0; tt < CT; tt++) {
    const hx_i32 n0 = c0 + TN * tt;
    if (!FULL && n0 >= r.whi) break;
    hx_v16f acc_a[HT], acc_b[HT];
    hx_tile_mfmas(r, k, acc_a, acc_b);
    const float kvs = sc[TN * tt + t];  // read before the next keys: the epilogue's wait for it leaves them out
    if (tt + 1 < CT) k = hx_read_tile_keys(kc + 256 * (tt + 1) + lane);
    hx_tile_store(p, r, acc_a, acc_b, kvs, n0, t);
  }
#endif
}

// grid = (row blocks, split), block = HX_BLOCK (NW waves).
HX_KERNEL HX_MFMA_BOUNDS void HX_PREFILL_NAME(hx_mqa_logits_mfma, hx_mqa_topk_mfma)(const HX_GRID_CONSTANT Params p) {
  HX_SHARED(hx_v4u, kbuf0, SLOTS);
  HX_SHARED(hx_v4u, kbuf1, SLOTS);
  HX_SHARED(float, sbuf0, CK);
  HX_SHARED(float, sbuf1, CK);
#if HX_FILTER
  HX_SHARED(hx_u32, counts, BM);  // the block's rows' appends, row m0 + i at i
#endif
  const hx_u32 lane = hx_lane_id(), g = lane / 32, w = hx_wave_id();
  const hx_i32 rb = p.reverse_rows ? (hx_i32)hx_grid_dim_x() - 1 - (hx_i32)hx_block_x() : (hx_i32)hx_block_x();
  const hx_i32 m0 = rb * BM;
  const hx_i32 m1 = hx_min_i32(p.M, m0 + BM);
  const float neg_inf = hx_bits_to_f32(0xFF800000u);

  // The part is cut from the union of the block's windows, which only the device holds. Its first chunk goes out
  // before they are read, for the part of a union spanning every key, which is also the part of any union from key
  // 0 that ends within the row's last p.split tiles (the rows of a short causal chunk against its whole context):
  // right, the DMA, the rows' Q and weights and the windows wait one latency together instead of the DMA waiting
  // behind the windows; wrong, it is staged again below.
  const hx_prefill_part guess = hx_prefill_split_quanta(0, p.N, p.N, p.tile, p.split, (hx_i32)hx_block_y());
  const bool guessed = guess.work.hi > guess.work.lo;  // uniform
  if (guessed) hx_stage(p, kbuf0, sbuf0, guess.work.lo, w, lane);

  // This wave's row pair; lanes 0-31 store row ma, lanes 32-63 row mb. Rows past M (a tail block) compute on row
  // M - 1's data and store nothing.
  const hx_i32 ma = m0 + RW * (hx_i32)w, mb = ma + 1;
  const hx_i32 qa_row = hx_min_i32(ma, p.M - 1), qb_row = hx_min_i32(mb, p.M - 1);
  hx_wave_rows r;
  hx_load_q(p, qa_row, lane, r.qa);
  hx_load_q(p, qb_row, lane, r.qb);
  hx_load_w(p, qa_row, lane, r.wa);
  hx_load_w(p, qb_row, lane, r.wb);

  // Union of the block's clamped windows; its key range is what the split cuts. Lane l loads the window of row
  // m0 + l % BM (a row past M: row m1 - 1's), one vector load behind the guess's DMA and the rows' Q and weights
  // (scalar loads of the rows one by one would each wait their round trip), and the lanes' extremes meet by
  // shuffles.
  const hx_i32 mu = hx_min_i32(m0 + (hx_i32)(lane % BM), m1 - 1);
  const hx_range wu = hx_clamp_window(p.ks[mu], p.ke[mu], p.N);
  hx_u32 ulo = wu.hi > wu.lo ? (hx_u32)wu.lo : (hx_u32)p.N, uhi = wu.hi > wu.lo ? (hx_u32)wu.hi : 0u;
  for (hx_u32 d = 1; d < BM; d *= 2) {
    const hx_u32 olo = hx_shfl_u32(ulo, lane ^ d), ohi = hx_shfl_u32(uhi, lane ^ d);
    ulo = olo < ulo ? olo : ulo;
    uhi = ohi > uhi ? ohi : uhi;
  }
  hx_i32 lo = (hx_i32)hx_readfirstlane(ulo), hi = (hx_i32)hx_readfirstlane(uhi);
  if (hi <= lo) lo = hi = 0;
  const hx_prefill_part part = hx_prefill_split_quanta(lo, hi, p.N, p.tile, p.split, (hx_i32)hx_block_y());

  const hx_i32 ml = g ? mb : ma;
  const bool row_ok = ml < m1;
  const hx_range win = row_ok ? hx_clamp_window(p.ks[ml], p.ke[ml], p.N) : hx_range{0, 0};
  r.tlo = (hx_u32)(lane % 32) - (hx_u32)win.lo;
  r.len = (hx_u32)(win.hi - win.lo);
  r.out_a = p.out + (hx_i64)ma * p.out_stride;
  r.out_b = r.out_a + p.out_stride;
  r.fill = row_ok && p.clean;
  r.lo_half = g == 0;
  r.toff = 4 * (lane % 32);
  r.off_a = r.lo_half ? r.toff : HX_OOB;
  r.off_b = r.lo_half ? HX_OOB : r.toff;
  r.whi = part.work.hi;
  r.unit = hx_unit_scale();
#if HX_FILTER
  r.ca = hx_region_rsrc(p, ma, m1);
  r.cb = hx_region_rsrc(p, mb, m1);
  const hx_u32 fl = row_ok ? p.floors[(hx_i64)ml * p.floor_stride] : 0xFFFFFFFFu;
  r.floor = hx_topk_floor_value(fl);
  // the part's end folded into the window (parts end on whole tiles, so this only guards a split that did not)
  r.len = (hx_u32)hx_max_i32(hx_min_i32(win.hi, part.work.hi) - win.lo, 0);
  r.count = &counts[RW * w + g];
  if (hx_thread_x() < BM) counts[hx_thread_x()] = 0u;  // seen after the first chunk's barrier
#endif

  if (p.clean) {  // this part's share of the columns outside the block's union
    for (hx_i32 m = ma; m < ma + RW && m < m1; ++m) {
      float* row = p.out + (hx_i64)m * p.out_stride;
      for (hx_i32 n = part.fill_lo.lo + (hx_i32)lane; n < part.fill_lo.hi; n += 64) row[n] = neg_inf;
      for (hx_i32 n = part.fill_hi.lo + (hx_i32)lane; n < part.fill_hi.hi; n += 64) row[n] = neg_inf;
    }
  }

  const hx_i32 wlo = part.work.lo, whi = part.work.hi;
  const hx_i32 chunks = whi > wlo ? hx_ceil_div(whi - wlo, CK) : 0;
  if (!(guessed && chunks > 0 && wlo == guess.work.lo)) {  // uniform
    // This wave's DMA of the guess has landed before its own DMA of the same slots goes out (or before the block
    // ends with nothing to stage).
    if (guessed) hx_lds_load_wait();
    if (chunks > 0) hx_stage(p, kbuf0, sbuf0, wlo, w, lane);
  }
  // Chunk 0, then pairs of chunks (kbuf1, then kbuf0); the part's last chunk
  // leaves the loop. Entered from a full chunk or its own back edge, the loop's
  // first wait has a full chunk's stores after its DMA on both.
  if (chunks == 1) hx_chunk<false>(p, r, 0, wlo, kbuf0, sbuf0, kbuf1, sbuf1, w, lane);
  if (chunks > 1) {
    hx_chunk<true>(p, r, 0, wlo, kbuf0, sbuf0, kbuf1, sbuf1, w, lane);
    for (hx_i32 c = 1;; c += 2) {
      if (c + 1 == chunks) {
        hx_chunk<false>(p, r, c, wlo, kbuf1, sbuf1, kbuf0, sbuf0, w, lane);
        break;
      }
      hx_chunk<true>(p, r, c, wlo, kbuf1, sbuf1, kbuf0, sbuf0, w, lane);
      if (c + 2 == chunks) {
        hx_chunk<false>(p, r, c + 1, wlo, kbuf0, sbuf0, kbuf1, sbuf1, w, lane);
        break;
      }
      hx_chunk<true>(p, r, c + 1, wlo, kbuf0, sbuf0, kbuf1, sbuf1, w, lane);
    }
  }
#if HX_FILTER
  hx_workgroup_barrier();  // every append counted (and the counts zeroed where no chunk ran)
  if (hx_thread_x() < BM && m0 + (hx_i32)hx_thread_x() < m1)
    p.cand_counts[((hx_i64)m0 + hx_thread_x()) * p.split + hx_block_y()] = (hx_i32)counts[hx_thread_x()];
#endif
}
