// The producer warpgroup's roles besides its page warps' copies: the deal (which pieces of the batch the unit takes),
// block-table entries, each segment's query rows and weights into a Q slot (the Q warp), and the -inf fill.
// Included after the layout (decode_tma_cta.h), whose Q slots, claim ring, records and rings it uses.
#pragma once

namespace {

// The batch's total work and fill, summed by the producer warpgroup (thread tid of its 128, every one of which
// gets both) through the layout's TOT_OFF words; malformed sequences (per-row lengths: a negative row) reported
// once, by unit 0.
template <class P>
HX_INLINE __device__ void batch_totals(const P& p, const Smem& sm, hx_i32 tid, hx_i64& total_work,
                                       hx_i64& total_fill) {
  const hx_i32 warp = tid >> 5, lane = tid & 31;
  hx_i64 work = 0, fill = 0;
  bool malformed = false;
  for (hx_i32 b = tid; b < p.B; b += 128) {
    const hx_decode_seq s = hx_decode_sequence_of(p, b);
    malformed |= s.malformed;
    work += work_price<P>(s);
    fill += hx_decode_fill(s, p.max_model_len);
  }
  if (malformed && hx_block_x() == 0 && p.errors) hx_atomic_or(p.errors, ERR_LENGTH);
#pragma unroll
  for (int x = 16; x >= 1; x >>= 1) {
    work += shfl_xor_i64(work, x);
    fill += shfl_xor_i64(fill, x);
  }
  hx_i64* tot = (hx_i64*)(sm.ptr + TOT_OFF);
  if (lane == 0) {
    tot[2 * warp] = work;
    tot[2 * warp + 1] = fill;
  }
  hx_bar_sync(1, 128);
  total_work = tot[0] + tot[2] + tot[4] + tot[6];
  total_fill = tot[1] + tot[3] + tot[5] + tot[7];
}

// The same for a batch of at most 32 sequences, by every warp of the producer alone: its chunk of the walk (read
// with the work price, kept for the walk's first chunk) gives the total work, so no warp waits on another before
// its first piece; the fill's total is summed only where asked (the fill warp).
template <class P>
HX_INLINE __device__ ChunkLane chunk_totals(const P& p, hx_i32 warp, hx_i32 lane, hx_i64& total_work, bool want_fill,
                                            hx_i64& total_fill) {
  const ChunkLane c = read_chunk(p, 0, lane, work_price<P>);
  total_work = hx_shfl_idx_i64(c.incl, 31);
  const hx_decode_seq s = chunk_sequence(p, c.ctx, c.live, c.negative, c.own_rows, lane);
  const bool malformed = lane < p.B && s.malformed;
  if (hx_ballot(malformed) && warp == 0 && lane == 0 && hx_block_x() == 0 && p.errors)
    hx_atomic_or(p.errors, ERR_LENGTH);
  if (want_fill) {
    hx_i64 fill = lane < p.B ? hx_decode_fill(s, p.max_model_len) : 0;
#pragma unroll
    for (int x = 16; x >= 1; x >>= 1) fill += shfl_xor_i64(fill, x);
    total_fill = fill;
  }
  return c;
}

// Block-table column col of a row (entries [0, hi) exist for this segment): the block id, or -1 for a column
// past hi (not read) or an entry naming no block (never read through: error bit 0).
template <class P>
HX_INLINE __device__ hx_i32 table_entry(const P& p, const hx_i32* row, hx_i32 col, hx_i32 hi) {
  if (col >= hi) return -1;
  const hx_i32 id = col < p.max_blocks ? row[col] : -1;
  const bool ok = col < p.max_blocks && id >= 0 && (hx_i64)id < p.num_blocks;
  if (!ok && p.errors) hx_atomic_or(p.errors, ERR_BLOCK_ID);
  return ok ? id : -1;
}

// Where weight (row r, head h = 8 jj + 2 t + c) sits in a Q slot's weights.
HX_INLINE __device__ hx_i32 weight_slot(hx_i32 idx) {
  const hx_i32 r = idx / H, hh = idx % H;
  return r * WROW + ((hh >> 1) & 3) * WGROUP + 2 * (hh >> 3) + (hh & 1);
}

// ------------------------------------------------------------------ the deal
// A unit's work as pieces of the batch's prefix of prices, taken in order: its static part, a balanced share of
// all but the tail, then, when the launch deals the tail, each chunk of it that the unit claims. SMs stream keys
// at different rates, so equal static parts end apart; chunks taken as units come free end them together. The claims
// are one launch's pair of words: [0] the next chunk, [1] the units that have seen the chunks run out. The last
// of those returns both to zero, so the pair is zero between launches; launches that may run at once use
// different pairs (hipindexer/ops/claims.py).
struct Deal {
  hx_range64 own;        // the static part
  hx_i64 tail_lo, tail;  // the dealt tail: work [tail_lo, tail_lo + tail)
  hx_i32 chunks;         // its chunks (0: nothing dealt)
  hx_u32* claims;

  __device__ hx_range64 chunk(hx_i32 c) const {
    const hx_range64 r = hx_balanced_part(tail, chunks, c);
    return {tail_lo + r.lo, tail_lo + r.hi};
  }
};

// The deal of this unit over the batch's total work: share / 1024 of it dealt at the end in chunks of at least
// `grain`; nothing when claims is null or share is 0, or when the tail holds fewer chunks than there are units (a
// chunk would then be more than a unit's static part, and whoever took it would end last).
HX_INLINE __device__ Deal deal_of(hx_i64 total, hx_u32* claims, hx_i32 share, hx_i32 grain) {
  Deal d;
  d.claims = claims;
  const hx_i64 tail = claims && share > 0 ? total / 1024 * share + total % 1024 * share / 1024 : 0;
  const hx_i64 chunks = tail / hx_max_i32(grain, 1);
  d.chunks = chunks < (hx_i64)hx_grid_dim_x() ? 0 : (hx_i32)(chunks < (1 << 30) ? chunks : (1 << 30));
  d.tail = d.chunks > 0 ? tail : 0;
  d.tail_lo = total - d.tail;
  d.own = hx_balanced_part(d.tail_lo, hx_grid_dim_x(), hx_block_x());
  return d;
}

// Calls f(piece) for each of the unit's pieces in order, every lane of the warp alike. The claimer (page warp 0)
// keeps one claim on the launch's counter in flight under the piece it is issuing, so its copies never wait on
// the counter's round trip and a unit holds at most one chunk it has not begun; it hands each chunk's range of
// work to the other page warps and the Q warp through the claim ring; an empty range ends every warp's pieces.
template <class F>
HX_INLINE __device__ void each_piece(const Deal& d, const Smem& sm, hx_i32 lane, bool claimer, F&& f) {
  const hx_ring<CLAIM_R> ring = claim_ring(sm);
  hx_range64 piece = d.own;
  hx_u32 ahead = 0;  // lane 0 of the claimer: the claim in flight
  if (claimer && lane == 0 && d.chunks) ahead = atomicAdd(d.claims, 1u);
#pragma unroll 1
  for (hx_u32 k = 0;; ++k) {
    f(piece);  // one call, so one copy of the walk
    if (d.chunks == 0) return;
    const hx_u32 slot = sm.base + CLAIM_OFF + 16 * (k % CLAIM_R);
    if (claimer) {
      ring.wait_empty(k);
      const hx_u32 got = (hx_u32)hx_shfl_idx_i32((hx_i32)ahead, 0);
      const bool last = got >= (hx_u32)d.chunks;
      if (!last && lane == 0) ahead = atomicAdd(d.claims, 1u);  // past the tail once per unit: it never wraps
      piece = last ? hx_range64{0, 0} : d.chunk((hx_i32)got);
      if (lane == 0) {
        sts_i64(slot, piece.lo);
        sts_i64(slot + 8, piece.hi);
        ring.arrive_full(k);
        if (last) {  // this unit's last claim: counted after it, so the last count sees no claim to come
          __threadfence();
          if (atomicAdd(d.claims + 1, 1u) == hx_grid_dim_x() - 1) {
            atomicExch(d.claims, 0u);
            atomicExch(d.claims + 1, 0u);
          }
        }
      }
    } else {
      ring.wait_full(k);
      piece.lo = lds_i64(slot);
      piece.hi = lds_i64(slot + 8);
      __syncwarp();
      if (lane == 0) ring.arrive_empty(k);
    }
    if (piece.hi <= piece.lo) return;
  }
}

// One warp: the block-table entries of this unit's share of the dealt tail brought into the L2 at the start, so
// that whoever claims a chunk of it finds the chunk's first entries there rather than in device memory (with the
// lengths, the lookups a chunk's first copy waits on).
template <class P>
HX_INLINE __device__ void prefetch_tail_tables(const P& p, const Deal& d, hx_i32 lane, const FirstChunk& first) {
  if (d.chunks == 0) return;
  const hx_range64 r = hx_balanced_part(d.tail, hx_grid_dim_x(), hx_block_x());
  const hx_range64 mine = {d.tail_lo + r.lo, d.tail_lo + r.hi};
  walk_work(p, mine, lane, first, [&](hx_i32 b, const hx_decode_seq& s, hx_range blk) {
    const hx_i32* row = p.block_tables + (hx_i64)b * p.max_blocks;
    const hx_i32 hi = hx_min_i32(blk.hi, p.max_blocks);  // entries past the table: never named
    if (hi <= blk.lo) return;
    for (hx_i32 c = blk.lo + 32 * lane; c < hi + 31; c += 32 * 32) hx_prefetch_l2(row + hx_min_i32(c, hi - 1));
  });
}

// Warp 1: each segment's record, live query rows and weights into the next Q slot, then the end record. The lane
// waits for its own copies and fences them into the async proxy the MMA reads through before it arrives.
template <class P>
HX_INLINE __device__ void query_warp(const P& p, const Smem& sm, const Deal& deal, hx_i32 lane,
                                     const FirstChunk& first) {
  const hx_ring<2> q = q_ring(sm);
  const hx_i32 SB = p.block_size == SK ? 1 : SK / 16;
  hx_u32 qit = 0;
  each_piece(deal, sm, lane, false, [&](hx_range64 own) {
    walk_work(p, own, lane, first, [&](hx_i32 b, const hx_decode_seq& s, hx_range blk) {
      if (blk.hi <= blk.lo) return;
      const hx_u32 slot = qit & 1, rec = sm.base + QREC_OFF + slot * QREC_BYTES;
      q.wait_empty(qit);
      if (lane == 0) {
        sts_i32(rec, hx_ceil_div(blk.hi - blk.lo, SB));
        sts_i32(rec + 4, b);
        sts_i32(rec + 8, s.live);
      }
      if (lane < p.next_n) sts_i32(rec + 32 + 4 * lane, hx_decode_row_bound(s, lane, p.max_model_len));
      const hx_u32 qdst = sm.base + Q_OFF + slot * sm.qslot, wdst = sm.base + W_OFF + slot * W_SLOT;
      const hx_u8* qsrc = p.q + (hx_i64)b * p.next_n * H * D;
      const float* wsrc = p.weights + (hx_i64)b * p.next_n * H;
      for (hx_i32 j = 0; j < s.live; ++j)
        hx_copy_tile_sw128<H>(qdst + j * (H * D), qsrc + (hx_i64)j * H * D, (hx_u32)lane);
      for (hx_i32 idx = lane; idx < s.live * H; idx += 32) hx_cp_async4(wdst + 4 * weight_slot(idx), wsrc + idx, 4);
      hx_cp_async_commit();
      hx_cp_async_wait<0>();
      hx_fence_proxy_async();
      q.arrive_full(qit);
      ++qit;
    });
  });
  q.wait_empty(qit);
  if (lane == 0) sts_i32(sm.base + QREC_OFF + (qit & 1) * QREC_BYTES, 0);
  q.arrive_full(qit);
}

// Threads t of nt: the -inf of this unit's piece of the batch's fill columns, every row.
template <class P>
HX_INLINE __device__ void fill_columns(const P& p, hx_range64 own, hx_i32 t, hx_i32 nt) {
  walk(p, own, t & 31, [&](const hx_decode_seq& s) { return hx_decode_fill(s, p.max_model_len); },
       [&](hx_range64 o, hx_i64 start, const hx_decode_seq& s) { return hx_owned_fill(o, start, s, p.max_model_len); },
       [&](hx_i32 b, const hx_decode_seq& s, hx_range cols) {
         for (hx_i32 j = 0; j < p.next_n; ++j)
           hx_fill_neg_inf(p.out + ((hx_i64)b * p.next_n + j) * p.out_stride, cols.lo, cols.hi, t, nt);
       },
       FirstChunk{});
}

}  // namespace
