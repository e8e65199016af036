"""Where a kernel's time goes, without counters: builds of it with one stage left out, timed side by side.

    python -m tools.measure.stage_variants --set sm90a_decode_tma --builds DIR --build-only    # compile here ...
    python -m tools.measure.stage_variants --set sm90a_decode_tma --builds DIR --prebuilt \\
        -- bench decode --device cuda:0 --rows equal:64x131072 --heads 64 --next-n 1,2 --repeats 5   # ... time there

A variant is a list of text substitutions on a copy of hsaco_src/, like a plant of tools/support/mutate.py, but its
outputs are wrong on purpose: only its time means anything. Each variant is built into its own package copy
(tools/support/package_copy.py), starting from the shipped build's objects, and the command after `--` (a
`hipindexer.cli` command that prints --json, or with --module a tools/ script that does) runs on each copy in turn;
the table lists each case's median microseconds per variant (--field of each case: `us`, or for
tools.measure.prefill_topk_bench say `us_stage_filter`, for tools.measure.topk_bench `rowwise_floor_us`) and the
fraction of the shipped build's time.

    python -m tools.measure.stage_variants --set sm90a_prefill_filter --builds DIR --prebuilt \
        --module tools.measure.prefill_topk_bench --field us_stage_filter -- --heads 64 --stages

Run a copy only through this script or from the copy's root: `python -m` puts its working folder ahead of
PYTHONPATH, so a command started in the checkout imports the checkout's package and its shipped objects, whatever
PYTHONPATH says.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import click

from tools.support.mutate import Plant, build_planted
from tools.support.package_copy import ROOT, PackageCopy

TMA = "sm90a/paged_mqa_logits_wgmma_tma.hip"
TMA_CTA = "sm90a/decode_tma_cta.h"
TMA_LOADER = "sm90a/decode_tma_loader.h"
COMMON = "sm90a/decode_common.h"  # the math pass the decode logits and fused top-k kernels share
FOLD = "sm90a/mqa_logits_wgmma_fold.hip"
PLAIN = "sm90a/mqa_logits_wgmma.hip"
PEAK = "sm90a/wgmma_peak.hip"
FUSED = "sm90a/paged_mqa_topk_wgmma_tma.hip"


def _mma_only() -> Plant:
    """The MMA kept, its epilogue reduced to one add and a store that never happens."""
    return Plant("mma_only", COMMON, "  hx_wgmma_wait<0>();\n  hx_fence_regs(acc);\n",
                 "  hx_wgmma_wait<0>();\n  hx_fence_regs(acc);\n"
                 "  if (c.n == -7) hx_store_f32_if(true, c.out, acc[0] + acc[NACC - 1]);\n  if (c.n != -8) return;\n")


def _peak_at(n: int) -> list[Plant]:
    """The fp8 peak loop on m64nNk32 instead of m64n256k32 (its reported TFLOP/s still count N = 256)."""
    return [Plant(f"peak_n{n}_acc", PEAK, "float acc[128];", f"float acc[{n // 2}];"),
            Plant(f"peak_n{n}_zero", PEAK, "for (int i = 0; i < 128; ++i) acc[i] = 0.f;",
                  f"for (int i = 0; i < {n // 2}; ++i) acc[i] = 0.f;"),
            Plant(f"peak_n{n}_sum", PEAK, "for (int i = 0; i < 128; ++i) s += acc[i];",
                  f"for (int i = 0; i < {n // 2}; ++i) s += acc[i];"),
            Plant(f"peak_n{n}_mma", PEAK, "hx_wgmma_m64n256k32_e4m3(acc,", f"hx_wgmma_m64n{n}k32_e4m3(acc,")]


_RELU_FMAX = Plant("relu_fmax", COMMON, "sum = __fmaf_rn(x + __builtin_fabsf(x), w2[jr][2 * jj + cc], sum);",
                   "sum = __fmaf_rn(fmaxf(x, 0.f), w2[jr][2 * jj + cc], sum);")
_RELEASE_EARLY = [
    Plant("release_field", COMMON, "  bool in, bad, clean;", "  hx_u32 rel = 0;\n  bool in, bad, clean;"),
    Plant("release_after_mma", COMMON, "  hx_wgmma_wait<0>();\n  hx_fence_regs(acc);\n",
          "  hx_wgmma_wait<0>();\n  hx_fence_regs(acc);\n  if (c.rel) hx_mbar_arrive(c.rel);\n"),
    Plant("release_not_after_rows", TMA, "        rows(c);\n        hx_mbar_arrive(stage_empty(sm, at.slot));",
          "        c.rel = stage_empty(sm, at.slot);\n        rows(c);"),
]
# Each CTA's %globaltimer at entry and exit, its clock64 cycles between them and its SM, as four u64 a CTA in the
# row after the out rows: for tools/measure/cta_times.py, which allocates that row (the bench does not: a bench
# row at next_n 8 would be written past).
_CTA_CLOCK = [
    Plant("cta_clock_start", TMA_LOADER, "  const hx_i32 tid = (hx_i32)hx_thread_x();\n  const hx_i32 wg = hx_uniform_i32(tid / 128);\n",
          "  const hx_i32 tid = (hx_i32)hx_thread_x();\n  const hx_i32 wg = hx_uniform_i32(tid / 128);\n"
          "  hx_u64 hx_t0;\n  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(hx_t0));\n  const long long hx_c0 = clock64();\n"),
    # in the body both TMA kernels run: the fused top-k kernel's out is 0, so only the logits kernel writes
    Plant("cta_clock_end", TMA_LOADER, "  else math(sm, tid - 128 * wg, wg - 1);\n  hx_barrier();\n}\n",
          "  else math(sm, tid - 128 * wg, wg - 1);\n"
          "  hx_barrier();\n  if (tid == 0 && p.out) {\n    hx_u64 t1;\n    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t1));\n"
          "    const long long c1 = clock64();\n    hx_u32 smid;\n    asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(smid));\n"
          "    hx_u64* o = (hx_u64*)(p.out + (hx_i64)p.B * p.next_n * p.out_stride) + 4 * hx_block_x();\n"
          "    o[0] = hx_t0;\n    o[1] = t1;\n    o[2] = (hx_u64)(c1 - hx_c0);\n    o[3] = smid;\n  }\n}\n"),
]
# Where a small call's time goes before and after its keys stream: each CTA's %globaltimer at entry and exit, its
# SM, and its clock64 at the steps of its chain (tools/measure/decode_chain.py's STEPS names each word), 32 u64 a CTA
# in the rows after the out rows, which decode_chain.py allocates.
_CHAIN_HELPER = (
    "template <class P>\nHX_INLINE __device__ void hx_chain_at(const P& p, int k, hx_u64 v) {\n"
    "  if (p.out) ((hx_u64*)(p.out + (hx_i64)p.B * p.next_n * p.out_stride))[32 * hx_block_x() + k] = v;\n}\n"
    "template <class P>\nHX_INLINE __device__ void hx_chain_clock(const P& p, int k) { hx_chain_at(p, k, (hx_u64)clock64()); }\n")
_GLOBALTIMER = "    hx_u64 t;\n    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"


def _after(name: str, file: str, anchor: str, added: str) -> Plant:
    """Lines added right after the anchor's text."""
    return Plant(name, file, anchor, anchor + added)


def _clock_after(name: str, file: str, anchor: str, who: str, word) -> Plant:
    """Thread(s) `who` (a condition) write the clock to word `word` (a number or an expression), right after the
    anchor (a line; inside the block it opens, if it opens one)."""
    indent = anchor[:len(anchor) - len(anchor.lstrip())] + ("  " if anchor.rstrip().endswith("{") else "")
    return _after(name, file, anchor, f"{indent}if ({who}) hx_chain_clock(p, {word});\n")


FEED = "sm90a/decode_feed.h"
_CTA_CHAIN = [
    Plant("chain_helper", COMMON, "// A sequence from its [B] lengths", _CHAIN_HELPER + "// A sequence from its [B] lengths"),
    Plant("chain_entry", TMA_LOADER, "  const Smem sm = setup(smem_raw, p, extra, stages);\n",
          "  if (tid == 0) {\n" + _GLOBALTIMER + "    hx_chain_at(p, 0, t);\n    hx_chain_clock(p, 3);\n  }\n"
          "  const Smem sm = setup(smem_raw, p, extra, stages);\n  if (tid == 0) hx_chain_clock(p, 4);\n"),
    _after("chain_exit", TMA_LOADER, "  else math(sm, tid - 128 * wg, wg - 1);\n  hx_barrier();\n",
           "  if (tid == 0) {\n    hx_chain_clock(p, 12);\n" + _GLOBALTIMER + "    hx_chain_at(p, 1, t);\n"
           "    hx_u32 smid;\n    asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(smid));\n    hx_chain_at(p, 2, smid);\n  }\n"),
    _clock_after("chain_totals", TMA_LOADER, "  else batch_totals(p, sm, tid, total_work, total_fill);\n", "tid == 0", 5),
    _clock_after("chain_dealt", TMA_LOADER, "  const Deal deal = deal_of(total_work, claims, share, grain);\n",
                 "tid == 0", 20),
    Plant("chain_map", TMA_LOADER, "  if (lane < SB) hx_tma_prefetch_map(p.kv_map);",
          "  if (which == 0 && lane == 0) hx_chain_clock(p, 13);\n  if (lane < SB) hx_tma_prefetch_map(p.kv_map);"),
    _clock_after("chain_walk_top", COMMON, "  hx_i64 base = 0;\n", "hx_thread_x() == 32", 24),
    Plant("chain_walk_entry", COMMON, "    const ChunkLane c = b0 == 0 && first.have ? first.c : read_chunk(p, b0, lane, price);\n",
          "    if (hx_thread_x() == 0 && b0 == 0) hx_chain_clock(p, 16);\n"
          "    if (hx_thread_x() == 32 && b0 == 0) hx_chain_clock(p, 23);\n"
          "    const ChunkLane c = b0 == 0 && first.have ? first.c : read_chunk(p, b0, lane, price);\n"
          "    if (hx_thread_x() == 0 && b0 == 0) hx_chain_clock(p, 17);\n"),
    _clock_after("chain_walk_spanned", COMMON,
                 "    const hx_range r = span(own, start, chunk_sequence(p, c.ctx, c.live, c.negative, c.own_rows, b0 + lane));\n",
                 "hx_thread_x() == 0 && b0 == 0", 18),
    _clock_after("chain_walk_hit", COMMON, "                                             b0 + k);\n", "hx_thread_x() == 0", 19),
    _after("chain_first_copy_flag", TMA_LOADER, "  hx_u32 turn = 0;  // the page warp of this stage\n",
           "  bool chain_first = true;\n"),
    _clock_after("chain_walked", TMA_LOADER, "      const hx_i32* row = p.block_tables + (hx_i64)b * p.max_blocks;\n",
                 "which == 0 && lane == 0 && chain_first", 14),
    Plant("chain_first_copy", TMA_LOADER, "          if (ok) {\n",
          "          if (which == 0 && lane == 0 && chain_first) {\n            chain_first = false;\n"
          "            hx_chain_clock(p, 6);\n          }\n          if (ok) {\n"),
    _clock_after("chain_q_entry", FEED, "  hx_u32 qit = 0;\n", "lane == 0", 21),
    _clock_after("chain_q_piece", FEED, "  each_piece(deal, sm, lane, false, [&](hx_range64 own) {\n", "lane == 0", 22),
    _clock_after("chain_q_walked", FEED, "      if (blk.hi <= blk.lo) return;\n", "lane == 0 && qit == 0", 15),
    Plant("chain_q_ready", FEED, "      q.arrive_full(qit);\n      ++qit;\n",
          "      if (lane == 0 && qit == 0) hx_chain_clock(p, 7);\n      q.arrive_full(qit);\n      ++qit;\n"),
    _after("chain_stage_flag", TMA, "  hx_i32 turn = 0;                                // this stage's warpgroup, it % 3\n",
           "  bool chain_first = true;\n"),
    _after("chain_first_stage", TMA, "        hx_mbar_wait(stage_full(sm, at.slot), at.phase);\n",
           "        if (mt == 0 && m == 0 && chain_first) {\n          chain_first = false;\n          hx_chain_clock(p, 8);\n"
           "        }\n"),
    _clock_after("chain_stage_done", TMA, "        hx_mbar_arrive(stage_empty(sm, at.slot));\n", "mt == 0", "9 + m"),
]
# The same steps, with the producer's totals and deal, then page warp 0's walk over its own range, each run twice
# before the real ones (the same code, so the second run finds the instructions, constants and lengths on chip):
# words 25 and 26 end the two totals-and-deal runs, 27/28 and 29/30 begin and end the two walks.
_CHAIN_TWICE = [
    Plant("twice_totals", TMA_LOADER, "  FirstChunk first = {{}, p.B <= 32};",
          "#pragma unroll 1\n  for (int rep = 0; rep < 2; ++rep) {\n    hx_i64 tw = 0, tf = 0;\n"
          "    if (p.B <= 32) {\n      const ChunkLane c0 = chunk_totals(p, warp, lane, tw, warp == 3, tf);\n"
          "      asm volatile(\"\" :: \"l\"(c0.incl));\n    } else batch_totals(p, sm, tid, tw, tf);\n"
          "    const Deal d0 = deal_of(tw, claims, share, grain);\n"
          "    asm volatile(\"\" :: \"l\"(d0.own.lo), \"l\"(d0.own.hi), \"l\"(tf));\n    hx_bar_sync(1, 128);\n"
          "    if (tid == 0) hx_chain_clock(p, 25 + rep);\n  }\n"
          "  FirstChunk first = {{}, p.B <= 32};"),
    Plant("twice_walk", TMA_LOADER, "  each_piece(deal, sm, lane, which == 0, [&](hx_range64 own) {\n",
          "#pragma unroll 1\n  for (int rep = 0; rep < 2; ++rep) {\n"
          "    if (which == 0 && lane == 0) hx_chain_clock(p, 27 + 2 * rep);\n    hx_i32 acc = 0;\n"
          "    walk_work(p, deal.own, lane, first, [&](hx_i32 b, const hx_decode_seq& s, hx_range blk) { acc += blk.lo + b; });\n"
          "    asm volatile(\"\" :: \"r\"(acc));\n"
          "    if (which == 0 && lane == 0) hx_chain_clock(p, 28 + 2 * rep);\n  }\n"
          "  each_piece(deal, sm, lane, which == 0, [&](hx_range64 own) {\n"),
]
_TWO_CHAINS = [
    Plant("two_chains_init", COMMON, "      float sum = 0.f;\n", "      float s2[2] = {0.f, 0.f};\n"),
    Plant("two_chains_fma", COMMON, "          sum = __fmaf_rn(x + __builtin_fabsf(x), w2[jr][2 * jj + cc], sum);",
          "          s2[cc] = __fmaf_rn(x + __builtin_fabsf(x), w2[jr][2 * jj + cc], s2[cc]);"),
    Plant("two_chains_add", COMMON, "      v[i * R + jr] = sum;", "      v[i * R + jr] = s2[0] + s2[1];"),
]


def _two_warpgroups() -> Plant:
    """The peak loop's third warpgroup leaves before the loop."""
    return Plant("peak_2wg", PEAK, "  hx_wgmma_fence();\n  for (hx_i32 it", "  if (wg == 2) return;\n  hx_wgmma_fence();\n  for (hx_i32 it")


# Turn-taking on two named barriers, which no shipped kernel uses: the timing variants that try it plant these
# definitions into hopper.h after the named barriers they build on (TURN_PRIMITIVES), and the hopper.h probe
# (tests/test_sm90a_prefill.py) assembles them from here.
_BAR_ARRIVE = ("HX_INLINE __device__ void hx_bar_arrive(hx_u32 id, hx_u32 count) {\n"
               "  asm volatile(\"bar.arrive %0, %1;\" :: \"r\"(id), \"r\"(count) : \"memory\");\n}\n")
TURN_TEXT = r"""// Two sides w = 0, 1 (a warpgroup each, or as many warps as `count` / 2) taking turns at a section (issuing
// their MMAs, say, so that one's epilogue runs under the other's) on barriers base and base + 1: between
// hx_turn_wait and hx_turn_pass the other side is outside its own section, and it sees this one's earlier
// memory accesses once its own wait returns. Side 0 goes first (hx_turn_start, once, by both); both take the
// same number of turns, then hx_turn_end (by both) takes side 1's last pass, so no barrier is left part-way.
HX_INLINE __device__ void hx_turn_start(hx_u32 base, hx_u32 w, hx_u32 count = 256) {
  if (w == 1) hx_bar_arrive(base, count);
}
HX_INLINE __device__ void hx_turn_wait(hx_u32 base, hx_u32 w, hx_u32 count = 256) { hx_bar_sync(base + w, count); }
HX_INLINE __device__ void hx_turn_pass(hx_u32 base, hx_u32 w, hx_u32 count = 256) {
  hx_bar_arrive(base + (w ^ 1u), count);
}
HX_INLINE __device__ void hx_turn_end(hx_u32 base, hx_u32 w, hx_u32 count = 256) {
  if (w == 0) hx_bar_sync(base, count);
}
"""
TURN_PRIMITIVES = Plant("turn_primitives", "sm90a/hopper.h", _BAR_ARRIVE, _BAR_ARRIVE + TURN_TEXT)


def _pingpong(f: str, side: str, threads: int, start: str, before_fence: str, pass_after: str) -> list[Plant]:
    """The math warpgroups of `f` in two sides (`side`: 0 or 1) taking turns at the tensor cores on barriers 4
    and 5 (hx_turn_*, planted with TURN_PRIMITIVES): a side waits for its turn before issuing a stage's MMAs and
    passes it on after the text `pass_after` (its issue, or the wait that retires its MMAs: strict turns)."""
    arg = f"4, (hx_u32){side}, {threads}"
    end = "(u.ns, issue, sum, store);\n    });\n  }\n"
    return [TURN_PRIMITIVES,
            Plant("turn_start", f, start, f"{start}    hx_turn_start({arg});\n"),
            Plant("turn_wait", f, before_fence, before_fence.replace("hx_wgmma_fence();", f"hx_turn_wait({arg});\n        hx_wgmma_fence();")),
            Plant("turn_pass", f, pass_after, f"{pass_after}        hx_turn_pass({arg});\n"),
            Plant("turn_end", f, end, end.replace("    });\n  }\n", f"    }});\n    hx_turn_end({arg});\n  }}\n"))]


_FOLD_START, _FOLD_FENCE = "const hx_i32 g = wg - 1;\n", "        hx_fence_regs(acc[1]);\n        hx_wgmma_fence();"
_FOLD_ISSUED = "          hx_wgmma_commit();\n        }\n"  # the end of the fold's issue of a stage's two groups
_PLAIN_START, _PLAIN_FENCE = "    const hx_i32 g = mw & 1, h = mw >> 1;\n", "        hx_fence_regs(acc);\n        hx_wgmma_fence();"
PRE_CTA = "sm90a/prefill_cta.h"
_NO_KCOPY = [Plant("no_kcopy", PRE_CTA, "    if (n0 + BK <= p.N) hx_copy_tile_sw128<BK / 2>(",
                   "    if (n0 < 0) hx_copy_tile_sw128<BK / 2>("),
             Plant("no_kcopy_tail", PRE_CTA, "    else hx_copy_tile_sw128_rows<BK / 2, 8>(",
                   "    else if (n0 < -1) hx_copy_tile_sw128_rows<BK / 2, 8>(")]
# the keys of a whole 128-key stage by one bulk copy per loader warp (8 KB, unswizzled: wrong logits, the copy
# engine's cost), counted on the stage's full barrier; the scales and the last partial stage as shipped
_BULK_KEYS = [Plant("bulk_keys_off", PRE_CTA, "    if (n0 + BK <= p.N) hx_copy_tile_sw128<BK / 2>(",
                    "    if (n0 + BK <= p.N) {} else if (n0 < 0) hx_copy_tile_sw128<BK / 2>("),
              Plant("bulk_keys", PRE_CTA, "        load_half_stage(p, s.base + K_OFF + slot * (BK * D),",
                    "        if (lane == 0 && wu.t.part.work.lo + st * BK + BK <= p.N) {\n"
                    "          hx_mbar_expect_tx(s.k.full_at(slot), BK / 2 * D);\n"
                    "          hx_bulk_g2s(s.base + K_OFF + slot * (BK * D) + warp * (BK / 2 * D),\n"
                    "                      p.k + (hx_i64)(wu.t.part.work.lo + st * BK + warp * (BK / 2)) * D, BK / 2 * D,\n"
                    "                      s.k.full_at(slot));\n"
                    "        }\n"
                    "        load_half_stage(p, s.base + K_OFF + slot * (BK * D),")]

# every stage's keys copied from the tensor's first 128 rows: L2 hits (`same_src`), or L1 hits with the 16-byte
# copies cached in L1 (`same_src_l1`: the stage's bytes still written to shared memory, almost none read from L2)
_SAME_SRC = Plant("same_src", PRE_CTA, "hx_copy_tile_sw128<BK / 2>(kdst + r_base * 128, p.k + (hx_i64)(n0 + r_base) * D, lane);",
                  "hx_copy_tile_sw128<BK / 2>(kdst + r_base * 128, p.k + (hx_i64)r_base * D, lane);")
_COPY_L1 = Plant("copy_l1", "sm90a/hopper.h", "cp.async.cg.shared.global [%0+%2], [%1+%2], 16;",
                 "cp.async.ca.shared.global [%0+%2], [%1+%2], 16;")

# no key copies, but each loader warp reads its half of the stage from shared memory instead (8 KB, the bytes its
# copies would have written): the shared-memory traffic of the key stream without the copies
_STAGE_READS = Plant("stage_reads", PRE_CTA, "  HX_INLINE __device__ void load_half_stage(const Params& p, hx_u32 kdst, hx_u32 sdst, hx_i32 n0,\n"
                     "                                            hx_i32 half, hx_i32 lane) {\n",
                     "  HX_INLINE __device__ void load_half_stage(const Params& p, hx_u32 kdst, hx_u32 sdst, hx_i32 n0,\n"
                     "                                            hx_i32 half, hx_i32 lane) {\n"
                     "#pragma unroll\n    for (int i = 0; i < 16; ++i) {\n      hx_u32 a, b, c, d;\n"
                     "      asm volatile(\"ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\" : \"=r\"(a), \"=r\"(b), \"=r\"(c), \"=r\"(d)\n"
                     "                   : \"r\"(kdst + half * (BK / 2) * 128 + (hx_u32)(lane + 32 * i) * 16));\n    }\n")

_PREFILL_STAGES = {
    # every stage's logits stored over the unit's first stage's (the same instructions, no new lines)
    "same_addr_store": [Plant("same_addr", PRE_CTA, "for (int kq = 0; kq < RQ / 2; ++kq) t.row[kq] += BK;",
                              "for (int kq = 0; kq < RQ / 2; ++kq) t.row[kq] += 0;")],
    # the logits stored with the evict-first hint
    "store_cs": [Plant("store_cs", "sm90a/hopper.h", "@p st.global.f32 [%0], %1;", "@p st.global.cs.f32 [%0], %1;")],
    # the loader warps copy no keys (the math reads stale stages; scales still copied)
    "no_kcopy": _NO_KCOPY,
    "bulk_keys": _BULK_KEYS,
    "same_src": [_SAME_SRC],
    "same_src_l1": [_SAME_SRC, _COPY_L1],
    "no_kcopy_stage_reads": [*_NO_KCOPY, _STAGE_READS],
}


def _free_run(f: str) -> list[Plant]:
    """The math warpgroups of `f` never wait for a K stage and the loader neither waits for a free one nor copies
    keys: the math's own pace (MMAs, sums, stores) without the ring between them."""
    return [*_NO_KCOPY,
            Plant("no_wait_full", f, "        sm.k.wait_full(at);\n", "\n"),
            Plant("no_wait_empty", PRE_CTA, "        s.k.wait_empty(kit);\n", "\n")]


def _light_sums(f: str) -> Plant:
    """The head sums of `f` over one head pair of each lane's JQ instead of all of them."""
    return Plant("light_sums", f, "for (int jj = 0; jj < JQ; ++jj) {", "for (int jj = 0; jj < 1; ++jj) {")


_PLAIN_NO_FADD = Plant("no_fadd", PLAIN, "sum = __fmaf_rn(x + __builtin_fabsf(x), w2[2 * jj + c], sum);",
                       "sum = __fmaf_rn(__builtin_fabsf(x), w2[2 * jj + c], sum);")
_NO_STORE = Plant("no_store", PRE_CTA, "const bool store = (e < 0) & (inside | t.fill[kq]);",
                  "const bool store = (e == -1234567) & (inside | t.fill[kq]);")


def _no_math() -> Plant:
    """The decode kernel's math warpgroups take each stage and give it back (its stages run their passes through
    rows(c))."""
    return Plant("no_math", TMA, "        rows(c);\n", "        if (seg.live < 0) rows(c);\n")


_ONE_PAGE_WARP = Plant("one_pw", TMA_LOADER, "if (turn != which) continue;", "if (which) break;")
# two page warps at every block size (16-token blocks take a third, warp 3 after its -inf fill)
_TWO_PAGE_WARPS = Plant("two_pw", TMA_CTA, "return p.block_size < SK ? 3 : 2;", "return 2;")
_RING_12 = Plant("ring_12", TMA_CTA, "constexpr hx_u32 SRMAX = 18;", "constexpr hx_u32 SRMAX = 12;")
_NO_SCALES = [Plant("no_scale_copy", TMA_LOADER, "hx_bulk_g2s(sm.base + SC_OFF", "if (false) hx_bulk_g2s(sm.base + SC_OFF"),
              Plant("keys_bytes", TMA_LOADER, "(hx_u32)__popc(good) * page);", "(hx_u32)__popc(good) * kbytes);")]

# The fused decode top-k: each warp's appends to a row taken by one shared-memory add (a ballot of the lanes that
# pass the floor) instead of one add a lane.
_WARP_APPEND = Plant("warp_append", FUSED, """\
    if (!(row && c.in && valid && !c.bad)) return;
    const hx_u32 key = hx_topk_key(z * c.scale, false);
    if (key <= (jr ? floor1 : floor0)) return;
    const hx_u32 at = hx_atomic_add_u32(&k.count[jr], 1u);
    k.e[jr * k.stride + at] = hx_topk_entry(key, c.n);
""", """\
    const hx_u32 key = row && c.in && valid && !c.bad ? hx_topk_key(z * c.scale, false) : 0u;
    const bool take = key > (row && jr ? floor1 : floor0);
    const hx_u32 m = __ballot_sync(0xFFFFFFFFu, take);
    if (m == 0u) return;
    const hx_u32 lane = threadIdx.x & 31u;
    const hx_u32 mine = m & ((lane & 2u) ? 0xCCCCCCCCu : 0x33333333u);  // the lanes of my row (lane bit 1)
    const hx_u32 lead = mine ? (hx_u32)(__ffs(mine) - 1) : lane;
    hx_u32 base = 0u;
    if (take && lane == lead) base = hx_atomic_add_u32(&k.count[jr], (hx_u32)__popc(mine));
    base = __shfl_sync(0xFFFFFFFFu, base, lead);
    if (take) k.e[jr * k.stride + base + (hx_u32)__popc(mine & ((1u << lane) - 1u))] = hx_topk_entry(key, c.n);
""")

# ... and its math warpgroups meeting every other round (twice the slack a row).
_MEET_TWO_ROUNDS = [Plant("slack_two_rounds", FUSED, "constexpr hx_u32 SLACK = 2 * MATH_WG * SK;",
                          "constexpr hx_u32 SLACK = 4 * MATH_WG * SK;"),
                    Plant("meet_two_rounds", FUSED, "        if (turn == MATH_WG - 1) {",
                          "        if (turn == MATH_WG - 1 && (++rounds & 1u) == 0u) {"),
                    Plant("round_count", FUSED, "  hx_i32 turn = 0;", "  hx_i32 turn = 0;\n  hx_u32 rounds = 0;")]

# ... and its rows cut exactly at the meetings, as at a segment's end, instead of trimmed.
_EXACT_AT_MEETINGS = Plant("exact_at_meetings", FUSED, "hx_cand_trim_rows<GROUP, R, CUT_READS>(k, gt, bar, top_k, high);",
                           "hx_cand_cut_rows<GROUP, R, CUT_READS>(k, gt, bar, top_k);")

# ... and the parts of its selection left out one at a time: the trims (a row's appends past cap dropped, its count
# held to cap for the end's cut), the end's exact cut (a row's first top_k entries written), every append (the
# logits engine and the meetings alone), and the meetings too (the engine with no selection at all).
_APPEND_GUARD = Plant("append_guard", FUSED, "    k.e[jr * k.stride + at] = hx_topk_entry(key, c.n);\n",
                      "    if (at < k.cap) k.e[jr * k.stride + at] = hx_topk_entry(key, c.n);\n")


def _count_to(name: str, most: str) -> Plant:
    return Plant(name, FUSED, "      bar();\n      hx_cand_cut_rows<GROUP, R, CUT_READS>(k, gt, bar, top_k);\n",
                 f"      bar();\n      if (gt < TOPK_ROWS && k.count[gt] > {most}) k.count[gt] = {most};\n      bar();\n"
                 "      hx_cand_cut_rows<GROUP, R, CUT_READS>(k, gt, bar, top_k);\n")


_TRIMS_NEVER = Plant("no_trims", FUSED, "if (hx_bar_any(BAR_MATH, GROUP, hot)) {", "if (hot && !hot) {")
_NO_TRIMS = [_APPEND_GUARD, _count_to("count_to_cap", "k.cap"), _TRIMS_NEVER]
_NO_END_CUT = [_count_to("count_to_top_k", "top_k"),
               Plant("no_end_cut", FUSED, "      hx_cand_cut_rows<GROUP, R, CUT_READS>(k, gt, bar, top_k);\n    });",
                     "    });")]
_NO_APPENDS = Plant("no_appends", FUSED, "    if (key <= (jr ? floor1 : floor0)) return;\n", "    if (key != 12345u) return;\n")
# ... and each row's floor seeded from a word a row at `out` (the fused launch passes out = 0, which seeds nothing;
# tools/measure/seeded_floor_probe.py passes floors there): a key enters only above both the seed and the row's own
# floor. What a floor from a sample of the keys would save, given a good one; a seed too high loses keys.
_SEEDED = [
    Plant("seed_field", FUSED, "  hx_u32 floor0, floor1;", "  hx_u32 floor0, floor1, s0, s1;"),
    Plant("seed_test", FUSED, "    if (key <= (jr ? floor1 : floor0)) return;\n",
          "    if (key <= (jr ? floor1 : floor0) || key <= (jr ? s1 : s0)) return;\n"),
    Plant("seed_load", FUSED, "  each_segment(sm, ml.l, [&](const Segment& seg) {\n",
          "  each_segment(sm, ml.l, [&](const Segment& seg) {\n"
          "    const hx_u32* sdp = (const hx_u32*)p.out;\n"
          "    const hx_u32 sd0 = sdp ? sdp[(hx_i64)seg.b * p.next_n] : 0u;\n"
          "    const hx_u32 sd1 = sdp && seg.live > 1 ? sdp[(hx_i64)seg.b * p.next_n + 1] : 0u;\n"),
    Plant("seed_pass", FUSED, "Append{k, k.floor[0], R > 1 ? k.floor[1] : 0u}",
          "Append{k, k.floor[0], R > 1 ? k.floor[1] : 0u, sd0, sd1}"),
]
_NO_MEETINGS = Plant("no_meetings", FUSED, "        if (turn == MATH_WG - 1) {  // a round's end",
                     "        if (turn == MATH_WG + 7) {  // a round's end")

# ... and the radix passes' histogram increments combined per warp (the lanes of one bin by match.any, one shared
# add a bin), in every selection of the build.
SELECT = "common/topk_select.h"
_HIST_BY_MATCH = Plant("hist_by_match", SELECT, """\
      if (high >= 64 || (x >> high) == (cut >> high)) hx_atomic_add_u32(&hist[(hx_u32)(x >> shift) & (bins - 1u)], 1u);
""", """\
#if defined(HX_NVIDIA)
      const bool in = high >= 64 || (x >> high) == (cut >> high);
      const hx_u32 bin = in ? (hx_u32)(x >> shift) & (bins - 1u) : 0xFFFFFFFFu;
      const hx_u32 peers = __match_any_sync(__activemask(), bin);
      if (in && (threadIdx.x & 31u) == (hx_u32)(__ffs(peers) - 1)) hx_atomic_add_u32(&hist[bin], (hx_u32)__popc(peers));
#else
      if (high >= 64 || (x >> high) == (cut >> high)) hx_atomic_add_u32(&hist[(hx_u32)(x >> shift) & (bins - 1u)], 1u);
#endif
""")


# The fused path's merge (generic/paged_topk_merge.hip): its gather with fewer or more list entries a thread in
# flight than its build's (8 at sm_90a's 1,024 threads, 16 at gfx950's 512).
MERGE = "generic/paged_topk_merge.hip"


def _merge_loads(n: int) -> Plant:
    """The decode merge's gather with n list entries a thread in flight (HX_MERGE_LOADS)."""
    return Plant(f"merge_loads_{n}", MERGE, "#define HX_MERGE_LOADS (8192 / HX_BLOCK)", f"#define HX_MERGE_LOADS {n}")


def _merge_cut(name: str, args: str) -> Plant:
    """The merge's cut with other template arguments after the block (loads in flight, then the digit's bits)."""
    return Plant(name, MERGE, "hx_group_cut_value<HX_BLOCK, 4>(", f"hx_group_cut_value<HX_BLOCK, {args}>(")


# The merge's phases each left out (outputs wrong): the list's loads (entries made up from their place in it, their
# positions inside the row), the cuts to top_k, the ordered write (every slot -1), all of the row's work (the
# lists still emptied); and its cuts by 8-bit digits or one entry a thread in flight (outputs right).
_MERGE_LOAD = "x[k] = p.parts[((hx_i64)piece_slot[q] * p.next_n + j) * (hx_i64)top_k + (at - piece_at[q])];"
MERGE_VARIANTS = {
    "shipped": [],
    "loads_4": [_merge_loads(4)],
    "loads_16": [_merge_loads(16)],
    "no_loads": [Plant("no_loads", MERGE, _MERGE_LOAD,
                       "x[k] = hx_topk_entry((at + 1u) * 2654435761u | 1u, (hx_i64)(at % (hx_u32)p.max_model_len)); "
                       "(void)piece_slot[q];")],
    "no_cuts": [Plant("no_cuts", MERGE, "const hx_u64 c = hx_group_cut_value<HX_BLOCK, 4>(",
                      "const hx_u64 c = 0ull; if (p.top_k < 0) hx_group_cut_value<HX_BLOCK, 4>("),
                Plant("no_keep", MERGE, "if (have > top_k) have = hx_group_keep<HX_BLOCK>(",
                      "if (p.top_k < 0) have = hx_group_keep<HX_BLOCK>(")],
    "no_order": [Plant("no_order", MERGE, "const hx_u32 wrote = f.write_in_order(",
                       "const hx_u32 wrote = 0u;\n    if (p.top_k < 0) f.write_in_order(")],
    "cut_bits_8": [_merge_cut("cut_bits_8", "4, 8")],
    "cut_loads_1": [_merge_cut("cut_loads_1", "1")],
    "launch_only": [Plant("launch_only", MERGE, "  hx_grid_dependency_wait();\n",
                          "  hx_grid_dependency_wait();\n  if (p.top_k > 0) {\n"
                          "    for (hx_i64 b = hx_block_x() * HX_BLOCK + hx_thread_x(); b < p.B; "
                          "b += (hx_i64)hx_grid_dim_x() * HX_BLOCK) p.seq_nparts[b] = 0;\n    return;\n  }\n")],
}


# A warp's one arrival (lane 0, after the warp's shared stores are ordered by bar.warp.sync), predicated: no branch
# for ptxas to see while a wgmma is in flight.
def _warp_arrive(bar: str) -> str:
    return ('__syncwarp(); asm volatile("{ .reg .pred p; .reg .b64 st; setp.eq.u32 p, %1, 0; '
            '@p mbarrier.arrive.shared::cta.b64 st, [%0]; }" :: "r"(' + bar + '), "r"(hx_lane_reread()) : "memory");')


_K_WARP_ARRIVALS = [Plant("k_init_warps", PRE_CTA, "      s.k.init(64, 128 * MATH_WGS);", "      s.k.init(64, 4 * MATH_WGS);"),
                    Plant("k_arrive_warp", FOLD, "        sm.k.arrive_empty(at);\n",
                          "        " + _warp_arrive("sm.k.empty_at(at.slot)") + "\n")]

# The fused prefill top-k's filters (the sm_90a kernels built with HX_TOPK_FILTER, prefill_cta.h). At H = 32, where
# the math warpgroups append: the appends left out (every logit still compared), their global stores left out, their
# shared atomics left out, the entries stored to shared memory. At H = 64 (STAGED), where the filter warps append:
# their appends left out (every staged logit still read and compared), and the staged stages released unread (the
# math warpgroups' side alone). Those that leave rows short of top_k have their finish recompute them: time those
# by the filter launch alone (tools/measure/prefill_topk_bench.py --stages), not by the op.
CTA_P = "sm90a/prefill_cta.h"
_FILTER_TEST = "        if (pass) {\n"
_FILTER_STORE = "if ((hx_i32)at >= 0)"
_FILTER_ATOM = "const hx_u32 at = hx_atom_add_shared_u32(t.count0 + 4 * kq, 1u);"
_FILTER_GLOBAL = "p.cand[t.region0[kq] + at] = hx_topk_entry(key, e + t.work_hi);"
FILTER_VARIANTS = {
    "shipped": [],
    "no_appends": [Plant("no_appends", CTA_P, _FILTER_TEST, "        if (pass & (x == -12345.0f)) {\n")],
    "no_global_store": [Plant("no_global_store", CTA_P, _FILTER_STORE, "if (at > 0xFFFFFFF0u)")],
    "no_atomic": [Plant("no_atomic", CTA_P, _FILTER_ATOM, "const hx_u32 at = (hx_u32)(e & 1023);")],
    # the appends' entries stored to shared memory (the fold's scratch) instead of the regions
    "staged_no_appends": [Plant("staged_no_appends", CTA_P, "pass[c] = (d + c < len[r]) & (x[c] >= floor[r]);",
                                "pass[c] = (d + c < len[r]) & (x[c] == -12345.0f);")],
    "staging_alone": [Plant("staging_alone", CTA_P, "        for (int r = 0; r < FR; ++r) {\n          const hx_f32x4 x4",
                            "        for (int r = 0; r < 0; ++r) {\n          const hx_f32x4 x4")],
    # ... and with no ring between them either (the math warpgroups' stores alone)
    "staging_unsynced": [
        Plant("staging_alone", CTA_P, "        for (int r = 0; r < FR; ++r) {\n          const hx_f32x4 x4",
              "        for (int r = 0; r < 0; ++r) {\n          const hx_f32x4 x4"),
        Plant("no_wait_empty", CTA_P, "      s.lg.wait_empty(at);\n      return at.slot * LG_BYTES;",
              "      return at.slot * LG_BYTES;"),
        Plant("no_wait_full", CTA_P, "        s.lg.wait_full(at);\n        const hx_i32 n = work_lo", "        const hx_i32 n = work_lo")],
    # the filter warps' waits backing off (nanosleep) instead of spinning
    "filter_waits_sleep": [
        Plant("q_sleep", CTA_P, "      s.q.wait_full(qit);\n      const hx_i32* rec = record(s, s.q.slot(qit));\n      const hx_i32 ns = rec[0];\n      if (ns == 0) break;\n      const hx_i32 m0 = rec[1], work_lo",
              "      while (!hx_mbar_test(s.q.full_at(s.q.slot(qit)), (qit / 2) & 1)) __nanosleep(100);\n      const hx_i32* rec = record(s, s.q.slot(qit));\n      const hx_i32 ns = rec[0];\n      if (ns == 0) break;\n      const hx_i32 m0 = rec[1], work_lo"),
        Plant("lg_sleep", CTA_P, "        s.lg.wait_full(at);\n        const hx_i32 n = work_lo",
              "        while (!hx_mbar_test(s.lg.full_at(at.slot), at.phase)) __nanosleep(100);\n        const hx_i32 n = work_lo")],
    # the staged stages published by one arrival a warp (and the K ring's stages released so too)
    "warp_arrivals": [
        Plant("lg_init_warps", CTA_P, "s.lg.init(128 * MATH_WGS, FILTER_THREADS);", "s.lg.init(4 * MATH_WGS, FILTER_THREADS);"),
        Plant("lg_arrive_warp", CTA_P, "      s.lg.arrive_full(at);\n      at.next();",
              "      " + _warp_arrive("s.lg.full_at(at.slot)") + "\n      at.next();")],
    "all_warp_arrivals": [
        Plant("lg_init_warps", CTA_P, "s.lg.init(128 * MATH_WGS, FILTER_THREADS);", "s.lg.init(4 * MATH_WGS, FILTER_THREADS);"),
        Plant("lg_arrive_warp", CTA_P, "      s.lg.arrive_full(at);\n      at.next();",
              "      " + _warp_arrive("s.lg.full_at(at.slot)") + "\n      at.next();"),
        *_K_WARP_ARRIVALS],
    # H = 32: the math warpgroups' appends with no branch, the shared atomic and the store predicated (485 loop
    # instructions against 509, cuobjdump; 16 bytes spilled against 8): a candidate build, its output correct
    "predicated_appends": [Plant("predicated_appends", CTA_P, """        if (pass) {
          const hx_u32 key = hx_topk_order_key(x);  // passed a finite floor: selectable
          const hx_u32 at = hx_atom_add_shared_u32(t.count0 + 4 * kq, 1u);
          if ((hx_i32)at >= 0)
            p.cand[t.region0[kq] + at] = hx_topk_entry(key, e + t.work_hi);
        }
""", """        hx_u32 at = 0xFFFFFFFFu;
        asm volatile("{ .reg .pred q; setp.ne.b32 q, %3, 0; @q atom.shared.add.u32 %0, [%1], %2; }"
                     : "+r"(at) : "r"(t.count0 + 4 * kq), "r"(1u), "r"((hx_u32)pass) : "memory");
        hx_store_u64_if(pass & ((hx_i32)at >= 0), p.cand + (t.region0[kq] + at),
                        hx_topk_entry(hx_topk_order_key(x), e + t.work_hi));
""")],
    # H = 64: a passing logit keyed as v + 0.f (IEEE addition folds -0 into +0, denormals kept), without the order
    # key's compare: 157 filter-warp instructions a stage against 163 (cuobjdump); a candidate build, output correct
    "plus0_key": [Plant("plus0_key", CTA_P, "hx_topk_entry(hx_topk_order_key(x[c]), n + c));",
                        "hx_topk_entry(hx_topk_order_key_plus0(x[c]), n + c));"),
                  Plant("plus0_helper", CTA_P, "  HX_INLINE __device__ void filter_warp(",
                        """  HX_INLINE __device__ hx_u32 hx_topk_order_key_plus0(float v) {
    const hx_u32 u = hx_f32_to_bits(v + 0.f);
    return u ^ ((hx_u32)((hx_i32)u >> 31) | 0x80000000u);
  }
  HX_INLINE __device__ void filter_warp(""")],
    "shared_store": [Plant("shared_store", CTA_P, _FILTER_GLOBAL,
                           'asm volatile("st.shared.u64 [%0], %1;" :: "r"((t.count0 & ~255u) + 256u + (at & 511u) * 8u), '
                           '"l"(hx_topk_entry(key, e + t.work_hi)) : "memory");')],
}

ROWWISE = "generic/topk_rowwise.hip"
_ROWWISE_FLOOR = "  const hx_u32 floor = hx_split_row_floor(p, x, n, hist, scan, found, ext);\n"

# The fused prefill top-k's finish (generic/prefill_topk_finish.hip), a block a row, by its phases: the kept keys
# taken without the cut to top_k (the row truncated to its first top_k instead), written in the order they were
# taken instead of key order, and both (not taking the keys at all is no phase to time: a row that kept fewer
# than top_k is recomputed). The selections of all but the shipped build are wrong; time them by the finish launch
# alone (tools/measure/prefill_topk_bench.py --stages, --field us_stage_finish).
FINISH = "generic/prefill_topk_finish.hip"
_FINISH_CUT = Plant("no_cut", FINISH, "    f.cut_to_top_k();\n", "    f.have = f.have < top_k ? f.have : top_k;\n")
_FINISH_ORDER = Plant("no_order", FINISH,
                      "    const hx_u32 have = f.write_in_order(w.lo, hx_range_len(w), p.sorted, write);\n",
                      "    const hx_u32 have = f.have;\n"
                      "    for (hx_u32 s = tid; s < have; s += HX_BLOCK)\n"
                      "      write(s, (hx_i64)hx_topk_entry_index(e[s]), (hx_u32)(e[s] >> 32));\n")
# ... and one that is right, not wrong: the cut's passes over the buffer with four loads a thread in flight (the
# shipped build waits on each before the next: U = 1), its time against the shipped build's the question
_FINISH_CUT_U4 = Plant("cut_u4", "common/topk_finish.h", "hx_group_cut<HX_BLOCK, 1, BITS>(",
                       "hx_group_cut<HX_BLOCK, 4, BITS>(")
# ... and the finish at three blocks an SM, not four (ptxas then keeps a row's list state in registers)
_FINISH_THREE_BLOCKS = Plant("three_blocks", FINISH, "HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 1024 / HX_BLOCK)",
                             "HX_LAUNCH_BOUNDS_NV(HX_BLOCK, 3 * 256 / HX_BLOCK)")
# ... and three more that are right, the shipped choices' alternatives: every row's kept parts taken as one list, or
# a list a part only up to two parts; the cut's radix digits of 11 bits, as the other selections' (8 shipped)
_FINISH_ONE_LIST = Plant("one_list", FINISH, "#define HX_FINISH_APART 3", "#define HX_FINISH_APART 0")
_FINISH_APART_2 = Plant("apart_2", FINISH, "#define HX_FINISH_APART 3", "#define HX_FINISH_APART 2")
_FINISH_BITS_11 = Plant("bits_11", FINISH, "#define HX_FINISH_BITS 8", "#define HX_FINISH_BITS 11")
FINISH_VARIANTS = {"shipped": [], "no_cut": [_FINISH_CUT], "no_order": [_FINISH_ORDER],
                   "no_cut_no_order": [_FINISH_CUT, _FINISH_ORDER],
                   "cut_u4": [_FINISH_CUT_U4], "three_blocks": [_FINISH_THREE_BLOCKS],
                   "one_list": [_FINISH_ONE_LIST], "apart_2": [_FINISH_APART_2], "bits_11": [_FINISH_BITS_11],
                   "one_list_bits_11": [_FINISH_ONE_LIST, _FINISH_BITS_11]}

RESIDENT, RESIDENT_STEPS = "generic/topk_resident.hip", "common/topk_resident.h"
# topk_logits' resident kernel (tools/measure/topk_bench.py --paths resident, field resident_graph_us): its steps
# left out one at a time (the steps' header is the cluster path's too: a build of these also changes that kernel);
# the outputs are wrong, only the times mean anything.
RESIDENT_VARIANTS = {
    "shipped": [],
    "no_pass_atomics": [Plant("no_pass_atomics", RESIDENT_STEPS,
                              "hx_atomic_add_u32(&h[(ks[c] >> shift) & (bins - 1u)], 1u);",
                              "h[(ks[c] >> shift) & (bins - 1u)] = 1u;")],
    "one_pass": [Plant("one_pass", RESIDENT_STEPS, "if (whole) break;  // uniform",
                       "if (whole || true) break;  // uniform")],
    "no_passes": [Plant("no_passes", RESIDENT, "    if (V > top_k)             // uniform",
                        "    if (V > top_k && V == 12345u)  // uniform")],
    "no_writes": [Plant("no_writes", RESIDENT_STEPS, "if (gt || (eq && e < need)) put(",
                        "if ((gt || (eq && e < need)) && slot == ~0u) put(")],
    "no_compaction": [Plant("no_compaction", RESIDENT_STEPS,
                            "for (hx_u32 v0 = r.first; v0 < r.last; v0 += HX_WAVE_SIZE) {",
                            "for (hx_u32 v0 = r.first; v0 < r.first; v0 += HX_WAVE_SIZE) {")],
}

CLUSTER = "sm90a/topk_cluster.hip"
# topk_logits' cluster kernel (tools/measure/topk_bench.py --paths cluster, field cluster_graph_us): the radix
# passes with each block's own counts and barrier instead of the cluster's (what the exchange costs), a pass's
# gathered counts without the meeting after them, and no passes at all; the outputs are wrong, only the times mean
# anything.
CLUSTER_VARIANTS = {
    "shipped": [],
    "passes_alone": [Plant("passes_alone", CLUSTER,
                           "hist, sums, gather,\n          [&](hx_u32, hx_u32 t) { return ((const hx_u32*)total4)[t]; }",
                           "hist, sums, [](hx_u32) { hx_barrier(); },\n"
                           "          [&](hx_u32 buf, hx_u32 t) { return hist[buf * RESIDENT_BINS + t]; }")],
    "one_meeting_a_pass": [Plant("one_meeting_a_pass", CLUSTER, "      }\n      hx_cluster_sync();\n    };",
                                 "      }\n    };")],
    "no_passes": [Plant("no_passes", CLUSTER, "if (V > top_k)  // uniform over the cluster",
                        "if (V > top_k && V == 12345u)  // uniform over the cluster")],
}

VARIANTS = {
    # topk_logits' row-wise kernel on rows read the long way (tools/measure/topk_bench.py --paths rowwise_floor from
    # each build's package; rows of up to 32,768 columns are held unless told): without its floor (every key kept
    # until the buffer's cuts raise the bar), its floor alone (no row read), and without the held path's code
    "topk_rowwise": {
        "shipped": [],
        "no_floor": [Plant("no_floor", ROWWISE, _ROWWISE_FLOOR, "  const hx_u32 floor = 0u;\n")],
        "floor_alone": [Plant("floor_alone", ROWWISE, "for (hx_u32 t = 0; t < s.tiles; ++t) {",
                              "for (hx_u32 t = 0; t < 0u; ++t) {")],
        # the held path compiled out (every row read the long way): the kernel as it was before rows were held
        "no_held_path": [Plant("no_held_path", ROWWISE, "if (s.tiles > held || !hx_rowwise_held(p, s, x, n, "
                               "by_lengths, f, hist, scan, found, ext))", "if ((void)held, true)")],
    },
    "topk_resident": RESIDENT_VARIANTS,
    "topk_cluster": CLUSTER_VARIANTS,
    "sm90a_prefill_filter": FILTER_VARIANTS,
    "prefill_topk_finish": FINISH_VARIANTS,
    "paged_topk_merge": MERGE_VARIANTS,
    "sm90a_fused": {"shipped": [], "exact_at_meetings": [_EXACT_AT_MEETINGS], "warp_append": [_WARP_APPEND],
                    "meet_two_rounds": _MEET_TWO_ROUNDS, "no_trims": _NO_TRIMS, "no_end_cut": _NO_END_CUT,
                    "no_trims_no_end_cut": [_APPEND_GUARD, _TRIMS_NEVER, *_NO_END_CUT],
                    "no_appends": [_NO_APPENDS], "no_appends_no_meetings": [_NO_APPENDS, _NO_MEETINGS],
                    "hist_by_match": [_HIST_BY_MATCH], "seeded": _SEEDED},
    # mqa_logits_wgmma_fold: its two math warpgroups taking turns at the tensor cores; the loader, the stores and
    # the unit start; the peak loop at the fold's N and the plain kernel's, on three warpgroups and on two
    "sm90a_prefill_fold": {
        "shipped": [],
        "pingpong": _pingpong(FOLD, "g", 256, _FOLD_START, _FOLD_FENCE, _FOLD_ISSUED),
        "pingpong_strict": _pingpong(FOLD, "g", 256, _FOLD_START, _FOLD_FENCE, "        hx_wgmma_wait<0>();\n"),
        # ... passed on once the first half's MMAs retire
        "pingpong_half": _pingpong(FOLD, "g", 256, _FOLD_START, _FOLD_FENCE,
                                   "        hx_wgmma_wait<1>();  // the first half's group: its sums run under the second's MMAs\n"),
        **_PREFILL_STAGES,
        "free_run": _free_run(FOLD),
        # the unit's q_eff terms not computed (the MMA reads stale term rows)
        "no_fold_query": [Plant("no_fold_query", FOLD, "for (int hh = 0; hh < 2; ++hh) fold_query(sm, u.qb, hh, g, g);",
                                "for (int hh = 0; hh < 0; ++hh) fold_query(sm, u.qb, hh, g, g);")],
        # ... with the head sums cut to one head pair of eight (an eighth of the FFMAs), with no pairs of stages
        # (each stage's stores after its own sums), with stores that never happen (same instructions, predicate
        # false), with the two math warpgroups taking turns
        "free_run_light_sums": [*_free_run(FOLD), _light_sums(FOLD)],
        "free_run_single": [*_free_run(FOLD), Plant("single", FOLD, "run_stages<true, V>", "run_stages<false, V>")],
        "free_run_no_store": [*_free_run(FOLD), _NO_STORE],
        # the logits stored to shared memory instead (the first 8 KiB, over the K ring's first stage: wrong logits,
        # the shared-memory pipe's share of a stage as the fused prefill top-k's filter takes it)
        "shared_stores": [Plant("shared_stores", PRE_CTA,
                                "hx_store_f32_if(store, t.row[kq], inside ? z * scale : ninf);",
                                'asm volatile("st.shared.f32 [%0], %1;" :: "r"((hx_u32)(size_t)t.row[kq] & 0x1FFCu), '
                                '"f"(inside ? z * scale : ninf) : "memory");')],
        "no_store": [_NO_STORE],
        # the K ring's stages released by one arrival a warp instead of one a thread
        "k_warp_arrivals": _K_WARP_ARRIVALS,
        "free_run_light_no_store": [*_free_run(FOLD), _light_sums(FOLD), _NO_STORE],
        "free_run_pingpong": [*_free_run(FOLD), *_pingpong(FOLD, "g", 256, _FOLD_START, _FOLD_FENCE, _FOLD_ISSUED)],
        "peak_n136": _peak_at(136),
        "peak_n128": _peak_at(128),
        "peak_n136_2wg": [*_peak_at(136), _two_warpgroups()],
        "peak_n256_2wg": [_two_warpgroups()],
    },
    # mqa_logits_wgmma: the two halves' warpgroup pairs taking turns at the tensor cores; the loader and stores
    "sm90a_prefill_plain": {
        "shipped": [],
        "pingpong": _pingpong(PLAIN, "h", 512, _PLAIN_START, _PLAIN_FENCE, "        hx_wgmma_commit();\n"),
        "pingpong_strict": _pingpong(PLAIN, "h", 512, _PLAIN_START, _PLAIN_FENCE, "        hx_wgmma_wait<0>();\n"),
        "free_run": _free_run(PLAIN),
        # ... with the head sums cut to one head pair in JQ, with |x| w instead of (x + |x|) w (one FP operation an
        # accumulator, as the fold's), with neither sums nor stores; and |x| w with the ring
        "free_run_light_sums": [*_free_run(PLAIN), _light_sums(PLAIN)],
        "free_run_no_fadd": [*_free_run(PLAIN), _PLAIN_NO_FADD],
        "free_run_light_no_store": [*_free_run(PLAIN), _light_sums(PLAIN), _NO_STORE],
        "no_fadd": [_PLAIN_NO_FADD],
        **_PREFILL_STAGES,
    },
    # paged_mqa_logits_wgmma_tma: tensor copies, two page warps, three math warpgroups
    "sm90a_decode_tma": {
        "shipped": [],
        "mma_only": [_mma_only()],
        "no_math": [_no_math()],
        # no scale copies, the stage expecting the keys' bytes alone: block_size 16 only (a 64-token page comes
        # whole with its scales, more bytes than the stage would then expect: the kernel never finishes)
        "no_scales": _NO_SCALES,
        # the loader alone without the scale copies (block_size 16 only)
        "no_math_no_scales": [_no_math(), *_NO_SCALES],
        # one page warp for every stage (warp 2 idle)
        "one_page_warp": [_ONE_PAGE_WARP],
        # two page warps for 16-token blocks too
        "two_page_warps": [_TWO_PAGE_WARPS],
        # the epilogue without the FADD of relu (|x| x w, one FFMA an accumulator: what folding the ReLU's linear
        # half into the MMA would leave)
        "no_relu_fadd": [Plant("no_relu_fadd", COMMON, "sum = __fmaf_rn(x + __builtin_fabsf(x), w2[jr][2 * jj + cc], sum);",
                               "sum = __fmaf_rn(__builtin_fabsf(x), w2[jr][2 * jj + cc], sum);")],
        # every sum, reduce and bound computed, the stores predicated off (their value still an operand, so none of
        # it is dropped): what the logits' stores cost
        "no_store": [Plant("no_store", COMMON, "hx_store_f32_if(row && c.in && (valid || c.clean), c.out",
                           "hx_store_f32_if(row && c.in && (valid || c.clean) && c.n == -7, c.out")],
        # a stage ring of at most 12 stages
        "ring_12": [_RING_12],
        # every CTA's start, end, cycles and SM (tools/measure/cta_times.py only)
        "cta_clock": _CTA_CLOCK,
        # ... in the MMA-only build and the loader alone: the SM clock each ran at
        "mma_only_cta_clock": [_mma_only(), *_CTA_CLOCK],
        "no_math_cta_clock": [_no_math(), *_CTA_CLOCK],
        # the steps of each CTA's chain by its clock (tools/measure/decode_chain.py only), shipped and the loader alone
        "cta_chain": _CTA_CHAIN,
        "no_math_cta_chain": [_no_math(), *_CTA_CHAIN],
        # ... with the totals, the deal and page warp 0's walk run twice first (tools/measure/decode_chain.py --twice)
        "cta_chain_twice": [*_CTA_CHAIN, *_CHAIN_TWICE],
    },
}


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--set", "vset", type=click.Choice(sorted(VARIANTS)), required=True)
@click.option("--builds", type=click.Path(path_type=Path), required=True)
@click.option("--variants", default=None, help="Comma-separated names (default: all of the set).")
@click.option("--build-only", is_flag=True)
@click.option("--prebuilt", is_flag=True)
@click.option("--timeout", default=300)
@click.option("--graph", is_flag=True, help="Compare graph-replay times where the benchmark measured them.")
@click.option("--module", default="hipindexer.cli", help="What the command after -- runs (python -m).")
@click.option("--field", default="us", help="A case's time in the command's --json cases.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def main(vset, builds, variants, build_only, prebuilt, timeout, graph, module, field, cmd):
    chosen = {k: v for k, v in VARIANTS[vset].items() if variants is None or k in variants.split(",") or k == "shipped"}
    if not build_only and not cmd:
        raise click.UsageError("give the command to time after --")
    times: dict[str, dict[str, float]] = {}
    for name, subs in chosen.items():
        d = builds / name
        if not prebuilt:
            b = build_planted(d, builds / "shipped", subs, ["sm_90a"])
            if b.returncode:
                click.echo(f"{name}: build failed: {(b.stderr.strip().splitlines() or ['?'])[-1]}")
                continue
            for junk in ("src", "work"):
                shutil.rmtree(d / junk, ignore_errors=True)
            shutil.rmtree(d / "pkg" / "work", ignore_errors=True)
        if build_only:
            click.echo(f"{name}: built")
            continue
        if not (d / "pkg").is_dir():
            click.echo(f"{name}: not built (in {d})")
            continue
        # the copy's own package files, fresh: a build unpacked by tools/support/plant_carry.py has only kernels/
        r = PackageCopy(d / "pkg").refresh().run(["-m", module, *cmd, "--json"], ROOT, timeout=timeout)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            click.echo(f"{name}: no result (exit {r.returncode}): {r.stderr.strip()[-300:]}")
            continue
        for c in doc.get("cases", doc.get("rows", [])):  # topk_bench prints "rows"
            if "sorted" in c and "H" not in c:  # a topk_logits row
                case = f"topk_logits {c['rows']} x {c['N']}" + (" sorted" if c["sorted"] else "")
            elif doc.get("op") == "prefill":
                case = f"M={c['M']} N={c['N']} H={c['H']} clean={c['clean']}"
            elif "B" not in c:  # a prefill top-k row
                case = f"topk M={c['M']} N={c['N']} H={c['H']}"
            else:
                case = f"B={c['B']} ctx={c['ctx']} H={c['H']} n={c['next_n']} bs={c['block_size']}"
            if field not in c:  # a row the command did not time so (say, a composed row's launches)
                continue
            times.setdefault(case, {})[name] = c["us_graph"] if graph and c.get("us_graph") else c[field]
        if doc.get("matrix_peak_TFLOPs"):  # TFLOP/s, not us: a peak variant's N changes what it means
            times.setdefault("peak loop TFLOP/s (as N = 256)", {})[name] = doc["matrix_peak_TFLOPs"]
        click.echo(f"{name}: done", err=True)
    if times:
        names = list(chosen)
        click.echo(f"{'case':40s}" + "".join(f"{n:>20s}" for n in names))
        for case, row in times.items():
            base = row.get("shipped")
            cells = [f"{row[n]:9.1f} us" + (f" {row[n] / base:5.2f}x" if base else "") if n in row else "-" for n in names]
            click.echo(f"{case:40s}" + "".join(f"{c:>20s}" for c in cells))


if __name__ == "__main__":
    main()
