// sm_90a paged decode logits on fp8 wgmma, keys brought by the tensor copy engine: H in {32, 64} (-DHX_HEADS),
// D = 128, block_size 16 or 64, both cache layouts, next_n 1..8 and ragged next_n_lens, or a length per row
// (context_lens [B, next_n]); fp8 tensor-core accumulation class.
//
// The MMA (swap-AB, as in prefill): a stage of 64 keys is the M side (A, 64 x 128 bytes, K-major), a pass's live
// query rows x H heads the N side (B, N = rows x H <= 128, K-major, in the 128-byte swizzle), m64nNk32 e4m3 x
// e4m3 -> f32 in four k32 steps over D = 128. The keys come through a tensor map of the cache that the host
// encodes once per cache (hipindexer/kv_map.py) and passes by value in the parameters (a map in global memory would
// need each CTA to acquire it first, a fence that stalls the whole SM), and land in a layout the MMA reads as they
// are: block-flat pages
// in the 128-byte swizzle, preshuffled pages as the unswizzled layout's core matrices (a 16-token group's chunk c
// of 8 tokens is 128 contiguous bytes already), so nothing rewrites a stage and both layouts feed the MMA the same
// keys in the same order: bitwise identical logits.
//
// 512 threads, four warpgroups; setmaxnreg gives the producer 80 registers and the math warpgroups 144 (a pass's
// 64 accumulators at N = 128 and, for one-pass segments, the rows' weights):
//   0                 warps 0 and 2: block-table entries (32 per load, the next 32 loaded under the current ones'
//                     stages) and the copies of alternate stages, 64 keys a stage (one block of 64 or four of 16):
//                     one tensor copy per block of its keys, and of its scales too where the page is whole 128-byte
//                     rows (block-flat 64: 66 rows), else one bulk copy of them; each stage's record beside it. A
//                     warp issues one copy at a time, so two keep more in flight. Warp 1: each sequence's live query
//                     rows (cp.async into the 128-byte swizzle), their weights and row bounds into one of two Q
//                     slots. Warp 3: the -inf fill of columns no key reaches, then, for 16-token blocks (eight
//                     copies a stage), a third page warp.
//   1, 2, 3           math: stage i to warpgroup i % 3. Per stage, per pass of at most 128 / H live rows: the MMA
//                     (N = rows x H, one instantiation per row count: dead rows cost nothing), then relu x weight
//                     summed over each thread's heads, the quad reduce, kv_scale and predicated stores with the
//                     -inf of positions outside a row's bound fused; dead rows only get their -inf.
// The ring's depth is a multiple of 6, so a slot always has the same page warp and the same math warpgroup: its
// consumer meets its rounds in order. The CTA leaves together: a warp must not leave with copies in flight.
//
// Bytes in flight: one SM must stream about 4.2 TB/s / 132 = 32 GB/s, and a loaded HBM read takes about 1 to
// 1.5 us, so 32-48 KB must be on the way per SM (Little's law). The ring takes the shared memory the Q slots
// leave (2 x next_n x H x 128 bytes): 18 stages (152 KB) at next_n = 1 and H = 64, 6 (50 KB) at next_n = 8 where
// the MMA, not memory, sets the pace.
//
// Work: a grid of units planned on the host from shapes alone; each unit owns one contiguous piece of the batch's
// blocks, found on the device from the lengths it reads (decode_work.h), each block priced by what it costs here: its
// bytes while the MMA keeps up, its MMA time at more live rows (block_price). A unit's blocks of one sequence are a
// segment: the Q warp loads the segment's queries once, the page warps stream its blocks, and every live row of the
// sequence comes out of that one read of its keys. A launch may deal the last part of the batch's work instead
// (deal_share, deal_grain): each unit owns its piece of the rest, then claims chunks of that tail from a counter as it
// comes free, so units that stream at different rates end together (decode_feed.h, each_piece). The fill warp owns one
// piece of the batch's fill columns the same way. Untrusted device values as in the generic kernel: a block id outside
// [0, num_blocks) (or a table column past max_blocks) is never read through, its keys come out -inf and error bit 0 is
// set; a malformed sequence is all -inf (fill) with bit 2, and so is a row of negative length alone (its bound is 0;
// every row is live with per-row lengths, each masked to its own bound, the table read up to the longest row). Offsets
// into the cache, the queries and the output are 64-bit.
//
// What it shares with the fused top-k kernel (constants, walk, the math pass): decode_common.h; the layout:
// decode_tma_cta.h; warpgroup 0: decode_tma_loader.h and decode_feed.h.
#include "decode_tma_loader.h"

// The claim pairs of launches that deal the tail of their work (decode_feed.h, each_piece): the host hands each
// stream one (hipindexer/ops/claims.py). Zero when the driver loads the module, and zero again after every launch.
extern "C" {
__device__ hx_u32 hx_claim_pairs[2 * 1024];
}

namespace {

// ------------------------------------------------------------------ math warpgroups
// Math warpgroup m (0, 1, 2): stages i with i % 3 == m, of every segment in order. A segment of one pass (live
// rows <= RMAX: next_n 1 and 2 at H = 64, up to 4 at H = 32) keeps its rows' weights in registers for all its
// stages, so the epilogue's only shared reads are a stage's scales and the rows' bounds; the MMA's operand reads
// then have the shared-memory pipe to themselves. Longer segments read each pass's weights afresh.
HX_INLINE __device__ void math_warpgroup(const DecodeTmaParams& p, const Smem& sm, hx_i32 mt, hx_i32 m) {
  hx_setmaxnreg_inc<MATH_REGS>();
  const MathLane ml = math_lane(p, mt);
  const hx_i32 l = ml.l, b1 = ml.b1, b2 = ml.b2;
  const float ninf = hx_bits_to_f32(0xFF800000u);
  StagePos at;
  hx_i32 turn = 0;                                // this stage's warpgroup, it % 3
  each_segment(sm, l, [&](const Segment& seg) {
    float* const seq_out = p.out + (hx_i64)seg.b * p.next_n * p.out_stride;
    // This warpgroup's stages of the segment: each waited for, its passes run by rows(c), released, and the -inf
    // of its dead rows stored.
    auto stages = [&](auto&& rows) {
      for (hx_i32 s = 0; s < seg.ns; ++s, at.next(sm.S), turn = turn == MATH_WG - 1 ? 0 : turn + 1) {
        if (turn != m) continue;
        hx_mbar_wait(stage_full(sm, at.slot), at.phase);
        Pass c = stage_pass(p, sm, ml, at.slot);
        c.clean = p.clean != 0;
        c.stride = p.out_stride;
        rows(c);
        hx_mbar_arrive(stage_empty(sm, at.slot));
        // Dead rows: nothing computed, -inf where a row's bound (0) leaves the column, when clean.
        for (hx_i32 j = seg.live + b2; j < p.next_n; j += 2) {
          const bool valid = c.n < lds_i32(seg.rec + 32 + 4 * j);
          hx_store_f32_if(c.in && (valid || c.clean), seq_out + j * p.out_stride + c.n, ninf);
        }
      }
    };
    if (seg.live <= RMAX) {
      hx_static_for<RMAX>([&](auto i) {
        constexpr int R = i + 1;
        if (seg.live != R) return;
        float w2[R][2 * JQ];
        load_row_weights<R>(seg.wt, w2);
        stages([&](Pass& c) {
          c.bdesc = hx_wgmma_desc_sw128(seg.qtile);
          c.bounds = seg.rec + 32;
          c.out = seq_out + c.n;
          pass<R>(c, b1, b2, w2);
        });
      });
    } else {
      stages([&](Pass& c) {
        for (hx_i32 pb = 0; pb < seg.live; pb += RMAX) {
          const hx_i32 R = hx_min_i32(RMAX, seg.live - pb);
          c.bdesc = hx_wgmma_desc_sw128(seg.qtile + pb * (H * D));
          c.wt = seg.wt + 4 * pb * WROW;
          c.bounds = seg.rec + 32 + 4 * pb;
          c.out = seq_out + pb * p.out_stride + c.n;
          hx_static_for<RMAX>([&](auto i) {
            if (R == i + 1) pass<i + 1>(c, b1, b2);
          });
        }
      });
    }
  });
}

}  // namespace

HX_KERNEL __launch_bounds__(HX_BLOCK, 1) void hx_paged_mqa_logits_wgmma_tma(const HX_GRID_CONSTANT DecodeTmaParams p) {
  hx_grid_dependency_wait();
  hx_decode_tma_cta(
      p, 0, 0,
      [&](const Smem& sm, hx_i32 tid) { producer_warpgroup(p, sm, tid, p.claims, p.deal_share, p.deal_grain); },
      [&](const Smem& sm, hx_i32 mt, hx_i32 mw) { math_warpgroup(p, sm, mt, mw); });
}
