// sm_90a paged decode top-k on fp8 wgmma: the unit of paged_mqa_logits_wgmma_tma.hip (the same producer warpgroup,
// stage ring and MMA pass, on decode_tma_loader.h and decode_common.h) keeping each row's best keys on chip instead
// of writing its logits, in the candidate rows of common/topk_rows.h. next_n <= 2 (a segment's live rows are one MMA
// pass at either head count), top_k <= 2048; hipindexer/ops/paged_topk_fused.py runs it, then
// generic/paged_topk_merge.hip.
//
// A lane whose logit's key is above its row's floor appends it to the row's buffer. The math warpgroups take stages
// i % 3 and meet once a round of three stages (named barrier BAR_MATH, with an OR of "a row of mine is past HIGH"):
// when any row might be, they trim the rows together (hx_cand_trim_rows: a row's top_k and the rest of a radix bin;
// both rows' passes under one set of meetings).
// The slack: a round's check sees every entry appended before the last meeting, and two rounds add at most SLACK = 2
// x 3 x 64 entries a row, so a row that no thread saw past cap - SLACK stays within cap until the next meeting. The
// ring is p.stages deep (fewer where they do not fit) and the buffers take what shared memory it leaves (p.cap
// entries a row at most, when set): fewer stages, fewer trims. At a segment's end the warpgroups meet, cut each live
// row to top_k and write it out.
//
// Nothing is written for columns no key reaches: the merge pads with -1. Block ids and lengths are read, checked
// and flagged exactly as by the logits kernel (its producer warpgroup); keys behind a bad block never enter.
#include "decode_tma_loader.h"
#include "topk_rows.h"

namespace {

constexpr hx_u32 TOPK_ROWS = 2;              // live rows of a segment: next_n <= 2
constexpr hx_u32 GROUP = 128 * MATH_WG;      // the math warpgroups' threads
constexpr hx_u32 BAR_MATH = 2;               // their named barrier (1: the producer warpgroup's)
constexpr hx_u32 SLACK = 2 * MATH_WG * SK;
constexpr hx_u32 CAP_MAX = 16384;            // a row's entries on chip, at most
static_assert(CAP_MAX < (1u << (32 / TOPK_ROWS)), "a row's counts in its field of the cuts' sums");
constexpr int CUT_READS = 4;                 // entries a thread's radix passes read at once in the trims and cuts
static_assert(TOPK_ROWS <= (hx_u32)RMAX, "a segment's rows are one pass");

// Besides its blocks, a segment costs this kernel its end (the rows' exact cut and write) and, its rows starting
// empty with their floors at 0, a trim more than the same keys would cost a unit already under way: together about
// what 48 blocks' keys take to stream in (docs/benchmarks.md has the prices timed), so a unit whose piece crosses
// into a sequence takes that many fewer blocks.
constexpr hx_i64 SEGMENT_BLOCKS = 48;
template <>
struct SegmentPrice<DecodeTopkParams> {
  static constexpr hx_i64 value = SEGMENT_BLOCKS * MEMW;
};

// The selection's shared memory after the ring: the cut's scratch and each row's count and floor, then next_n
// rows of cap entries.
constexpr hx_u32 T_HIST = 0;                         // 2048 words
constexpr hx_u32 T_SCAN = T_HIST + 4 * HX_TOPK_MAX_BINS;  // a word a wave
constexpr hx_u32 T_FOUND = T_SCAN + 4 * (GROUP / 32);     // 2 words a row, then a row's fill each
constexpr hx_u32 T_COUNT = T_FOUND + 32;             // TOPK_ROWS words
static_assert(3 * TOPK_ROWS <= 8, "the rows' found and fill words");
constexpr hx_u32 T_FLOOR = T_COUNT + 4 * TOPK_ROWS;  // TOPK_ROWS words
constexpr hx_u32 T_ENTRIES = (T_FLOOR + 4 * TOPK_ROWS + 15u) & ~15u;
// The ring leaves room for at least the scratch and, a row, top_k entries and twice the slack: a cut always frees
// what two rounds can add.
HX_INLINE __device__ hx_u32 topk_bytes(hx_i32 next_n, hx_i32 top_k) {
  return T_ENTRIES + (hx_u32)next_n * (((hx_u32)top_k + 2 * SLACK + 63u) / 64u * 64u) * 8u;
}

HX_INLINE __device__ hx_cand_rows cands(const Smem& sm, hx_i32 next_n, hx_i32 cap) {
  hx_u8* t = sm.ptr + sm.tail;
  hx_u32 room = (HX_SMEM - 1024u - sm.tail - T_ENTRIES) / (8u * (hx_u32)next_n) / 64u * 64u;
  room = room < CAP_MAX ? room : CAP_MAX;
  const hx_u32 rows = cap > 0 && (hx_u32)cap < room ? (hx_u32)cap : room;
  return {(hx_u64*)(t + T_ENTRIES), rows, rows, (hx_u32*)(t + T_HIST), (hx_u32*)(t + T_SCAN), (hx_u32*)(t + T_FOUND),
          (hx_u32*)(t + T_COUNT), (hx_u32*)(t + T_FLOOR)};
}

// The pass's emit: a valid key's logit, if its key is above the row's floor, appended to the row's buffer. The
// floors change only in a meeting's trims, so the math warpgroups keep them in registers from one to the next (a
// shared load in every lane's path of every pass, else).
struct Append {
  hx_cand_rows k;
  hx_u32 floor0, floor1;  // rows 0 and 1's floors as the last meeting left them
  HX_MEMBER __device__ void operator()(const Pass& c, hx_i32 jr, bool row, bool valid, float z) const {
    if (!(row && c.in && valid && !c.bad)) return;
    const hx_u32 key = hx_topk_key(z * c.scale, false);
    if (key <= (jr ? floor1 : floor0)) return;
    const hx_u32 at = hx_atomic_add_u32(&k.count[jr], 1u);
    k.e[jr * k.stride + at] = hx_topk_entry(key, c.n);
  }
};

struct MathBar {
  HX_MEMBER __device__ void operator()() const { hx_bar_sync(BAR_MATH, GROUP); }
};

template <class P>
HX_INLINE __device__ void math_warpgroup(const P& p, const Smem& sm, hx_i32 mt, hx_i32 m) {
  hx_setmaxnreg_inc<MATH_REGS>();
  const MathLane ml = math_lane(p, mt);
  const hx_u32 gt = (hx_u32)(128 * m + mt);
  const hx_u32 top_k = (hx_u32)p.top_k;
  const hx_i64 u = hx_block_x();
  const hx_cand_rows k = cands(sm, p.next_n, p.cap);
  const hx_u32 high = k.cap - SLACK;
  MathBar bar;
  hx_cand_reset(k, gt, TOPK_ROWS);
  bar();
  StagePos at;
  hx_i32 turn = 0;  // this stage's warpgroup, it % 3
  each_segment(sm, ml.l, [&](const Segment& seg) {
    hx_static_for<TOPK_ROWS>([&](auto i) {
      constexpr int R = i + 1;
      if (seg.live != R) return;
      float w2[R][2 * JQ];
      load_row_weights<R>(seg.wt, w2);
      const auto floors = [&]() { return Append{k, k.floor[0], R > 1 ? k.floor[1] : 0u}; };
      Append emit = floors();  // after the meeting that reset the rows
      for (hx_i32 s = 0; s < seg.ns; ++s, at.next(sm.S), turn = turn == MATH_WG - 1 ? 0 : turn + 1) {
        if (turn == m) {
          hx_mbar_wait(stage_full(sm, at.slot), at.phase);
          Pass c = stage_pass(p, sm, ml, at.slot);
          c.clean = false;
          c.stride = 0;
          c.out = nullptr;
          c.bdesc = hx_wgmma_desc_sw128(seg.qtile);
          c.bounds = seg.rec + 32;
          pass<R>(c, ml.b1, ml.b2, w2, emit);
          hx_mbar_arrive(stage_empty(sm, at.slot));
        }
        if (turn == MATH_WG - 1) {  // a round's end: every warpgroup meets here, whoever took the stage
          bool hot = false;
          for (hx_i32 jr = 0; jr < R; ++jr) hot |= ((volatile hx_u32*)k.count)[jr] > high;
          if (hx_bar_any(BAR_MATH, GROUP, hot)) {
            hx_cand_trim_rows<GROUP, R, CUT_READS>(k, gt, bar, top_k, high);
            emit = floors();  // its closing meeting made the new floors visible
          }
        }
      }
      // The segment's end: its rows cut to top_k.
      bar();
      hx_cand_cut_rows<GROUP, R, CUT_READS>(k, gt, bar, top_k);
    });
    // Written to slot u + b, the slot listed for its sequence b.
    hx_cand_write<GROUP>(k, gt, p.parts, p.part_counts, p.seq_parts, p.seq_nparts, u + seg.b, seg.b, p.next_n, seg.live,
                         top_k, hx_grid_dim_x());
    bar();  // every entry is read before the rows start again
    hx_cand_reset(k, gt, TOPK_ROWS);
    bar();
  });
}

}  // namespace

HX_KERNEL __launch_bounds__(HX_BLOCK, 1) void hx_paged_mqa_topk_wgmma_tma(const HX_GRID_CONSTANT DecodeTopkParams p) {
  hx_grid_dependency_wait();
  hx_decode_tma_cta(
      p, topk_bytes(p.next_n, p.top_k), (hx_u32)p.stages,
      [&](const Smem& sm, hx_i32 tid) { producer_warpgroup(p, sm, tid); },
      [&](const Smem& sm, hx_i32 mt, hx_i32 mw) { math_warpgroup(p, sm, mt, mw); });
}
