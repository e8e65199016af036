// gfx950 paged decode top-k: the unit of decode_unit.h keeping each live row's best keys on chip, in the candidate
// rows of common/topk_rows.h, instead of writing its logits. next_n <= 2, top_k <= 2048, block sizes that are
// powers of two >= 16, both layouts; hipindexer/ops/paged_topk_fused.py runs it, then generic/paged_topk_merge.hip.
//
// A page's logits of a row land one key a lane (hx_row_logits); the lanes whose key passes the row's floor take their
// places in the row's buffer from one ballot and one LDS add a wave. The waves meet after every round of NW pages (one
// page a wave): an appender that takes a row past HIGH = cap - SLACK raises the round's flag, and after the meeting
// every wave reads it, so all decide alike whether to trim (hx_cand_trim). A round adds at most SLACK = NW x 64 entries
// a row, so a row at or below HIGH at one meeting stays within cap until the next. Three flags in turn: the one read at
// round r's meeting is raised only by round r's appends, and the first thread clears round r + 2's there (its last
// readers met at r - 1, its first writers start after meeting r + 1). The trim takes a row at a time (its scalar
// state stays small inside the page loop); the sequence's end cuts its live rows side by side (hx_cand_cut_rows).
//
// LDS: the candidates take what the unit's rows and scans leave of half a CU's 160 KiB (the VGPRs hold two units a
// CU, as for the logits kernel), cap entries a row of next_n (p.cap at most, when set). A column past the unit's
// own range (the tail of its last page) or past a row's bound never enters, nor a key behind a bad block id.
#define HX_ROWS 2
#include "decode_unit.h"
#include "topk_rows.h"

#define SLACK (NW * PAGE)
#define UNIT_LDS (80 * 1024)
#define FIXED_LDS (ROWS * HT * 2 * SLAB * 16 + ROWS * H / 4 * 16 + 2 * HX_BLOCK * 8 + ROWS4 * 16 + \
                   4 * HX_TOPK_MAX_BINS + 4 * MISC_WORDS)
#define MISC_WORDS 32  // a word a wave for the cut's scan, each row's found (2) and fill, count and floor, 3 flags
#define CAND_ENTRIES ((UNIT_LDS - FIXED_LDS - 256) / 8 / 64 * 64)

static_assert(NW + 5 * ROWS + 3 <= MISC_WORDS, "the cut's and the rows' words");
static_assert(CAND_ENTRIES / 2 < (1u << (32 / ROWS)), "a row's counts in its field of the rows cut's sums");

#if HX_GATHER
#error "paged_mqa_topk_mfma.hip: block sizes >= 16 only"
#endif

struct hx_unit_bar {
  HX_MEMBER HX_DEV void operator()() const { hx_workgroup_lds_barrier(); }
};

// Page pg's logits of each live row offered to the row's buffer. hot: the flag of the page's round.
HX_WAVE_FN void hx_offer_page(const DecodeTopkParams& p, const hx_lds& s, const hx_seqwork& c, hx_i32 pg,
                              const hx_kpage& kp, int unit, const hx_cand_rows& k, hx_u32 high, hx_u32* hot) {
  const hx_i32 n0 = (hx_i32)hx_readfirstlane((hx_u32)(c.c_lo + PAGE * pg));
  const hx_i32 col = n0 + (hx_i32)c.lane;
  const hx_v4u b03 = s.bound[0];
  const hx_i32 bound[ROWS] = {(hx_i32)b03.x, (hx_i32)b03.y};
  const float scale = hx_bits_to_f32(kp.sc[0] | kp.sc[1] | kp.sc[2] | kp.sc[3]);
  // a unit's range is whole blocks, so a 16-key group past it is one hx_issue_page read nothing for (not ok)
  const bool ours = hx_key_ok(kp, c.lane);
  const hx_u32 floor[ROWS] = {k.floor[0], k.floor[1]};  // read before the MMAs hide their latency
  const hx_u32 low = (hx_u32)hx_topk_entry(0u, col);      // an entry's column half, the same in every row
#pragma unroll
  for (int j = 0; j < ROWS; ++j) {
    const bool valid = col < bound[j];
    // a row's valid columns are a prefix of the page (rows past the live ones have bound 0)
    if (!hx_first_lane_true(valid)) continue;
    HX_ASM_MARK("row");
    const float z = hx_row_logits(s, kp, j, c.lane, unit);
    const hx_u32 key = valid && ours ? hx_topk_key(z * scale, false) : 0u;
    const bool take = key > floor[j];
    const hx_u64 mask = hx_ballot(take);
    if (mask == 0) continue;
    const hx_u32 n = (hx_u32)__builtin_popcountll(mask);
    const hx_u32 base = hx_lds_add_once(&k.count[j], n);
    if (take) k.e[j * k.stride + base + hx_lanes_below(mask)] = ((hx_u64)key << 32) | low;
    if (base + n > high) {  // at most a few pages a round
      HX_ASM_MARK("rare-path");
      *hot = 1u;  // every lane, the same word
    }
  }
}

HX_KERNEL HX_LAUNCH_BOUNDS(HX_BLOCK) void hx_paged_mqa_topk_mfma(const HX_GRID_CONSTANT DecodeTopkParams p) {
  HX_SHARED(hx_v4u, q_rows, ROWS * HT * 2 * SLAB);
  HX_SHARED(hx_v4f, w_rows, ROWS * H / 4);
  HX_SHARED(hx_i64, scan, 2 * HX_BLOCK);
  HX_SHARED(hx_v4u, row_bounds, ROWS4);
  HX_SHARED(hx_u32, hist, HX_TOPK_MAX_BINS);
  HX_SHARED(hx_u32, misc, MISC_WORDS);
  HX_SHARED(hx_u64, entries, CAND_ENTRIES);
  const hx_lds s = {q_rows, w_rows, scan, row_bounds};
  const hx_u32 t = hx_thread_x(), lane = hx_lane_id(), w = hx_wave_id();
  const int unit = hx_unit_scale();
  const hx_u32 room = CAND_ENTRIES / (hx_u32)p.next_n;  // row 1 starts at CAND_ENTRIES / 2 (next_n 2)
  hx_u32* flags = misc + NW + 5 * ROWS;  // three
  const hx_cand_rows k = {entries, CAND_ENTRIES / 2, p.cap > 0 && (hx_u32)p.cap < room ? (hx_u32)p.cap : room, hist,
                          misc, misc + NW, misc + NW + 3 * ROWS, misc + NW + 4 * ROWS};
  const hx_u32 high = k.cap - SLACK;
  hx_unit_bar bar;
  hx_cand_reset(k, t, ROWS);
  if (t < 3) flags[t] = 0u;  // the first sequence's hx_stage_rows meets before any use
  hx_decode_units(
      p, s, false,
      [&](const hx_seqwork& c, const hx_decode_seq& seq, hx_i32 b) {
        const hx_i32 row_bound = hx_stage_rows(p, s, seq, b, w, lane);
        hx_wave_pages(
            p, s, c, w, row_bound,
            [&](hx_i32 pg, const hx_kpage& kp) {
              hx_offer_page(p, s, c, pg, kp, unit, k, high, flags + (pg / NW) % 3);  // page pg is of round pg / NW
            },
            [&](hx_i32 r) {
              hx_workgroup_lds_barrier();
              const bool hot = hx_readfirstlane(flags[r % 3]) != 0u;
              if (t == 0) flags[(r + 2) % 3] = 0u;
              if (hot) {
                HX_ASM_MARK("rare-path");
                hx_cand_trim<HX_BLOCK>(k, t, bar, ROWS, (hx_u32)p.top_k, high);  // rows past the live ones hold none
              }
            });
        // The sequence's end: its rows cut to top_k and written to slot u + b, the slot listed for sequence b.
        hx_workgroup_barrier();
        if (seq.live == ROWS)  // uniform: the sequence's
          hx_cand_cut_rows<HX_BLOCK, ROWS>(k, t, bar, (hx_u32)p.top_k);
        else
          hx_cand_cut_rows<HX_BLOCK, 1>(k, t, bar, (hx_u32)p.top_k);  // rows past the live ones hold none
        hx_cand_write<HX_BLOCK>(k, t, p.parts, p.part_counts, p.seq_parts, p.seq_nparts, hx_block_x() + b, b,
                                p.next_n, seq.live, (hx_u32)p.top_k, hx_grid_dim_x());
        hx_workgroup_barrier();  // every entry and flag is read before the rows start again
        hx_cand_reset(k, t, ROWS);
        if (t < 3) flags[t] = 0u;
      },
      [](hx_i32, hx_range) {});
}
