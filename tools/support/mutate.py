"""Mutation harness: plant named bugs in kernel sources, rebuild, run a suite, report which were caught.

    python -m tools.support.mutate --suite emu  [--plants a,b] [--set generic]   # gfx950 through the emulator
    python -m tools.support.mutate --suite cuda [--plants a,b] [--set generic]   # sm_90a on a GPU
    python -m tools.support.mutate --suite cuda --set sm90a                      # the sm_90a wgmma kernel's plants
    python -m tools.support.mutate --suite cuda --set sm90a_fold                 # the sm_90a fold kernel's plants
    python -m tools.support.mutate --suite emu --set gfx950                      # the gfx950 MFMA kernel's plants
    python -m tools.support.mutate --suite emu --set decode                      # the generic decode kernel's plants
    python -m tools.support.mutate --suite emu --set cache                       # the paged-cache kernels' plants
    python -m tools.support.mutate --suite emu --set topk                        # the top-k kernel's plants
    python -m tools.support.mutate --suite emu --set paged_topk                  # the decode top-k's own kernels
    python -m tools.support.mutate --suite cuda --set paged_topk_fused           # the fused decode top-k kernel
    python -m tools.support.mutate --suite emu --set paged_topk_fused_mfma       # the gfx950 fused decode top-k kernel
    python -m tools.support.mutate --suite cuda --set sm90a_decode_tma           # the sm_90a decode kernel's plants
    python -m tools.support.mutate --suite emu --set gfx950_decode               # the gfx950 MFMA decode kernels
    python -m tools.support.mutate --suite cuda --set launch_overlap             # kernels that wait for the grid before
    python -m tools.support.mutate --suite cuda --set sm90a --builds DIR --build-only   # compile here ...
    python -m tools.support.mutate --suite cuda --set sm90a --builds DIR --prebuilt     # ... run on the GPU machine

Each plant is a text substitution on a copy of hsaco_src/ (the shipped sources
carry no plant hooks); the copy is built into the kernels/ folder of a copy of
the hipindexer package (tools/support/package_copy.py), starting from the unplanted
build's objects (which start from the checkout's own build, where there is one)
so only the kernels whose sources the plant touched recompile (for the emulated
suite, only their emulated twins: build.py --emu-only),
and the set's suite (SET_CMDS, a hipindexer command, or SET_TESTS, a test file run
by pytest) runs on that package copy. A plant is caught when the suite fails or
crashes; an unmodified build must pass the whole suite first. A planted run
stops at its first failed case (check --fail-fast, pytest -x): one is enough; a test
set's plant first runs the test named for it in FIRST_CASES, then, if that passes, the whole file (a command
set's plant in FIRST_ARGS, its command with fewer sampled cases, then the whole command).
Once the unmodified tree is built, --jobs plants build and run at once, the first beside its suite.
"""
from __future__ import annotations

import functools
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import click

from tools.support.package_copy import PackageCopy

ROOT = Path(__file__).resolve().parents[2]


MFMA_DECODE = "gfx950/paged_mqa_logits_mfma.hip"
MFMA_UNIT = "gfx950/decode_unit.h"  # the unit both gfx950 decode kernels run


@dataclass(frozen=True)
class Plant:
    name: str
    file: str   # relative to hsaco_src/
    old: str    # must occur exactly once
    new: str


def _rows_cut_plants(prefix: str) -> list[Plant]:
    """The candidate rows cut side by side (common/topk_rows.h, common/topk_select.h): a cut that keeps one entry
    too few (the buffer's count still top_k), the second row's bins counted above by the first row's sum, both
    rows' kept entries appended at one fill."""
    return [Plant(f"{prefix}_cut_one_short", "common/topk_rows.h", "hx_group_cut_rows<G, R, U>(t, bar, e, n, top_k,",
                  "hx_group_cut_rows<G, R, U>(t, bar, e, n, top_k - 1,"),
            Plant(f"{prefix}_rows_second_above_the_first", "common/topk_select.h", "(above_all >> (FIELD * r))",
                  "(above_all >> 0)"),
            Plant(f"{prefix}_rows_one_fill", "common/topk_select.h", "hx_keep_tile(mine[r], cut[r], fill + r, e[r]);",
                  "hx_keep_tile(mine[r], cut[r], fill, e[r]);")]


# Bugs in the decode index math every decode kernel shares (common/decode_work.h, common/paged_cache.h): each
# decode set plants them and runs its own kernel around them.
DECODE_COMMON = {p.name: p for p in [
    Plant("next_n_blind_bound", "common/decode_work.h",
          "r.first_end = (hx_i64)s.ctx - s.live + 1;", "r.first_end = (hx_i64)s.ctx;"),
    Plant("split_boundary_one_block_late", "common/decode_work.h",
          "r.lo = (hx_i32)((a + s.live - 1) / s.live);",
          "r.lo = (hx_i32)((a + s.live - 1) / s.live) + (a > 0 && a < (hx_i64)s.blocks * s.live);"),
    Plant("preshuffle_16_and_D_swapped", "common/paged_cache.h",
          "(d / 16) * 256 + (t % 16) * 16 + d % 16", "(d / 16) * 16 + (t % 16) * D + d % 16"),
    Plant("scale_of_the_next_token", "common/paged_cache.h",
          "return (hx_i64)block_size * D + 4 * (hx_i64)t;",
          "return (hx_i64)block_size * D + 4 * (hx_i64)((t + 1) % block_size);"),
    Plant("dead_ragged_row_computed", "common/decode_work.h", "r.rows = s.live;", "r.rows = 8;"),
]}

PLANTS = {
    "generic": [
        Plant("causal_off_by_one", "generic/mqa_logits.hip",
              "if (n >= r.lo && n < r.hi) *dst = acc[i];", "if (n >= r.lo && n <= r.hi) *dst = acc[i];"),
        Plant("dropped_kv_scale", "generic/mqa_logits.hip",
              "const float scale = p.kv_scale[n];", "const float scale = 1.0f;"),
        Plant("wrong_head_weight", "generic/mqa_logits.hip",
              "p.weights[(hx_i64)(m + r) * p.H + h]", "p.weights[(hx_i64)(m + r) * p.H + (h + 1) % p.H]"),
        Plant("floor_for_ceil_split", "common/index_math.h",
              "const hx_i32 t0 = lo / tile, t1 = hx_ceil_div(hi, tile);",
              "const hx_i32 t0 = lo / tile, t1 = hi / tile;"),
        Plant("write_outside_window", "generic/mqa_logits.hip",
              "else if (p.clean) *dst = neg_inf;", "else *dst = neg_inf;"),
        Plant("row_ignores_row_block", "generic/mqa_logits.hip",
              "const hx_i32 m0 = rb * p.rows_per_block;", "const hx_i32 m0 = 0 * rb;"),
        # One logit 1% off in rows of 65,536 keys: no row's calc_diff moves by 1e-5; the per-element bound sees it.
        Plant("one_wrong_element", "generic/mqa_logits.hip",
              "for (int r = 0; r < HX_RG; ++r) acc[r] *= scale;",
              "for (int r = 0; r < HX_RG; ++r) acc[r] *= scale * (n == 40000 ? 1.01f : 1.f);"),
    ],
    # sm_90a wgmma prefill kernels (H in {32, 64}, D = 128): the plain kernel's own plants; those in the pieces both
    # kernels share (prefill_cta.h) are added below to both sets. Run with --suite cuda --set sm90a.
    "sm90a": [
        Plant("swapped_warpgroup_tile", "sm90a/mqa_logits_wgmma.hip",
              "const hx_u64 adesc0 = stage0_keys(sm, g);", "const hx_u64 adesc0 = stage0_keys(sm, 1 - g);"),
        # One wrong element in a long row: the logit at key column 40000 of every row, 10% off. A row's calc_diff
        # moves by less than 1e-5 at N = 65536 (the suite's 4x65536 shape); only the per-element bound sees it.
        Plant("wrong_element_in_long_row", "sm90a/mqa_logits_wgmma.hip",
              "reduce_store(p, t, v, e, scale, ml.b1, ml.b2);",
              "reduce_store(p, t, v, e, scale * (e + u.work_hi == 40000 ? 1.1f : 1.f), ml.b1, ml.b2);"),
    ],
    # The fold kernel (mqa_logits_wgmma_fold, H = 64): the linear term's B rows, their scales, the term itself, the
    # second half's MMA of a warpgroup, and the plain kernel's own plants at their place in this source. Run with
    # --suite cuda --set sm90a_fold.
    "sm90a_fold": [
        Plant("fold_rows_swapped", "sm90a/mqa_logits_wgmma_fold.hip",
              "const hx_u32 row = NQ / 2 + 2 * t + g;", "const hx_u32 row = NQ / 2 + 2 * t + (1 - g);"),
        Plant("fold_term_scale_wrong", "sm90a/mqa_logits_wgmma_fold.hip", "s *= 1.f / 16.f;", "s *= 1.f / 4.f;"),
        Plant("fold_linear_term_dropped", "sm90a/mqa_logits_wgmma_fold.hip",
              "sum = __fmaf_rn(acc[NACC - 4 + 2 * i + q], term_scale[q], sum);", "sum = sum;"),
        Plant("halves_swapped_in_mma", "sm90a/mqa_logits_wgmma_fold.hip",
              "hx_wgmma_desc_sw128(qtile + hh * QHALF_BYTES)", "hx_wgmma_desc_sw128(qtile + (1 - hh) * QHALF_BYTES)"),
        Plant("swapped_warpgroup_tile", "sm90a/mqa_logits_wgmma_fold.hip",
              "const hx_u64 adesc0 = stage0_keys(sm, g);", "const hx_u64 adesc0 = stage0_keys(sm, 1 - g);"),
        Plant("wrong_element_in_long_row", "sm90a/mqa_logits_wgmma_fold.hip",
              "reduce_store(p, t[hh], v[hh], e, scale, ml.b1, ml.b2, slot);",
              "reduce_store(p, t[hh], v[hh], e, scale * (e + u.work_hi == 40000 ? 1.1f : 1.f), ml.b1, ml.b2, slot);"),
    ],
    # gfx950 scaled-MFMA prefill kernel (H in {32, 64}, D = 128): run with --suite emu --set gfx950.
    "gfx950": [
        Plant("wrong_lane_half", "gfx950/mqa_logits_mfma.hip", "r.lo_half = g == 0;", "r.lo_half = g != 0;"),
        Plant("wrong_accumulator_head_weight", "gfx950/mqa_logits_mfma.hip",
              "4 * (32 * ht + 8 * i + 4 * (lane / 32))", "4 * (32 * ht + 8 * ((i + 1) % 4) + 4 * (lane / 32))"),
        Plant("permlane_swap_wrong_pair", "gfx950/mqa_logits_mfma.hip", "hx_permlane32_swap(x, y);", "hx_permlane32_swap(y, x);"),
        Plant("split_one_tile_short", "gfx950/mqa_logits_mfma.hip", "r.whi = part.work.hi;",
              "r.whi = hx_max_i32(part.work.lo, part.work.hi - p.tile);"),
        Plant("row_block_tail_overrun", "gfx950/mqa_logits_mfma.hip", "const hx_i32 m1 = hx_min_i32(p.M, m0 + BM);",
              "const hx_i32 m1 = m0 + BM;"),
        Plant("dropped_kv_scale_gfx950", "gfx950/mqa_logits_mfma.hip", "(x + y) * kvs", "(x + y)"),
        Plant("lds_buffers_swapped", "gfx950/mqa_logits_mfma.hip", "<false>(p, r, c, wlo, kbuf1, sbuf1, kbuf0, sbuf0",
              "<false>(p, r, c, wlo, kbuf0, sbuf0, kbuf1, sbuf1"),
        Plant("one_wrong_element_gfx950", "gfx950/mqa_logits_mfma.hip", "__builtin_fminf((x + y) * kvs, lim)",
              "__builtin_fminf((x + y) * kvs * (n0 + (hx_i32)(r.toff / 4) == 10000 ? 1.01f : 1.f), lim)"),
        # the first chunk staged before the windows: a wrong guess never staged again, or the guess taken as right
        # whatever the windows say
        Plant("wrong_guess_kept", "gfx950/mqa_logits_mfma.hip",
              "if (chunks > 0) hx_stage(p, kbuf0, sbuf0, wlo, w, lane);",
              "if (chunks > 0 && !guessed) hx_stage(p, kbuf0, sbuf0, wlo, w, lane);"),
        Plant("guess_taken_as_right", "gfx950/mqa_logits_mfma.hip", "guessed && chunks > 0 && wlo == guess.work.lo",
              "guessed && chunks > 0"),
        # the window union from the first half of the block's rows only
        Plant("union_of_half_the_rows", "gfx950/mqa_logits_mfma.hip", "for (hx_u32 d = 1; d < BM; d *= 2) {",
              "for (hx_u32 d = 1; d < BM / 2; d *= 2) {"),
        # the keys read under a tile's epilogue (H = 64) are that tile's again, not the next one's
        Plant("next_tile_keys_of_this_tile", "gfx950/mqa_logits_mfma.hip",
              "if (tt + 1 < CT) k = hx_read_tile_keys(kc + 256 * (tt + 1) + lane);",
              "if (tt + 1 < CT) k = hx_read_tile_keys(kc + 256 * tt + lane);"),
    ],
    # The generic paged decode kernel and the decode index math (both targets): run with --set decode.
    "decode": [
        DECODE_COMMON["next_n_blind_bound"],
        Plant("batch_blind_row", "generic/paged_mqa_logits.hip",
              "const hx_i64 r = (hx_i64)b * p.next_n + j;", "const hx_i64 r = j;"),
        DECODE_COMMON["split_boundary_one_block_late"],
        Plant("block_table_column_off_by_one", "generic/paged_mqa_logits.hip",
              "const hx_i32 col = first + t;", "const hx_i32 col = first + t + 1;"),
        DECODE_COMMON["preshuffle_16_and_D_swapped"],
        DECODE_COMMON["scale_of_the_next_token"],
        DECODE_COMMON["dead_ragged_row_computed"],
        Plant("out_of_range_block_clamped", "generic/paged_mqa_logits.hip",
              "s.block[t] = ok ? (hx_i64)id * hx_block_bytes(p.block_size, p.D) : -1;",
              "s.block[t] = (hx_i64)(id < 0 ? 0 : (id >= p.num_blocks ? p.num_blocks - 1 : id)) * "
              "hx_block_bytes(p.block_size, p.D);"),
    ],
    # The paged-cache kernels and the quantisation they share (both targets; the portable f32 -> e4m3 rounding
    # is what gfx950 and the emulator run, sm_90a converts with cvt.rn.satfinite): run with --set cache.
    "cache": [
        Plant("ties_away_from_zero", "common/fp8_quant.h",
              "code = ((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - (120u << 3);",
              "code = ((a + 0x80000u) >> 20) - (120u << 3);"),
        Plant("subnormal_ties_up", "common/fp8_quant.h",
              "(m + (1u << (shift - 1)) - 1u + ((m >> shift) & 1u)) >> shift",
              "(m + (1u << (shift - 1))) >> shift"),
        Plant("reciprocal_instead_of_division", "common/fp8_quant.h",
              "for (int i = 0; i < 16; ++i) q[i] = v[i] / scale;",
              "for (int i = 0; i < 16; ++i) q[i] = v[i] * (1.0f / scale);"),
        Plant("no_saturation", "common/fp8_quant.h", "    code = 0x7Eu;", "    code = 0x7Fu;"),
        Plant("signed_amax", "common/fp8_quant.h",
              "return hx_f32_to_bits(x) & 0x7FFFFFFFu;", "return hx_f32_to_bits(x) & 0xFFFFFFFFu;"),
        Plant("power_of_two_rounded_down", "common/fp8_quant.h",
              "? (b & 0x7F800000u) + 0x00800000u : b;", "? (b & 0x7F800000u) : b;"),
        Plant("zero_row_keeps_scale_zero", "common/fp8_quant.h",
              "return b == 0 ? 1.0f : hx_bits_to_f32(b);", "return hx_bits_to_f32(b);"),
        Plant("f16_subnormals_flushed", "common/fp8_quant.h",
              "if (e == 0) return hx_bits_to_f32(sign | hx_f32_to_bits((float)m * 5.9604644775390625e-08f));",
              "if (e == 0) return hx_bits_to_f32(sign);"),
        Plant("f16_read_as_bf16", "common/fp8_quant.h",
              "v[8 * i + 2 * j] = dtype == HX_KEY_BF16 ? hx_bf16_to_f32(lo) : hx_f16_to_f32(lo);",
              "v[8 * i + 2 * j] = hx_bf16_to_f32(lo);"),
        Plant("amax_of_own_chunk_only", "generic/cache_write.hip",
              "for (hx_i32 j = 0; j < G; ++j) {", "for (hx_i32 j = 0; j < 0; ++j) {"),
        Plant("flat_lanes_reduce_a_column", "generic/cache_write.hip",
              "amax[kRowLanes ? lane_token * G + j : lane_token + j * tt]", "amax[lane_token + j * tt]"),
        Plant("int32_slots_read_as_int64", "generic/cache_write.hip",
              "return p.slots64 ? ((const hx_i64*)p.slots)[t]", "return 1 ? ((const hx_i64*)p.slots)[t]"),
        Plant("bad_slot_clamped", "generic/cache_write.hip",
              "const hx_i64 slot = mine && t < p.T ? hx_slot_of(p, t) : -1;",
              "const hx_i64 slot = mine && t < p.T ? (hx_slot_of(p, t) >= p.num_slots ? p.num_slots - 1 "
              ": hx_slot_of(p, t)) : -1;"),
        Plant("writer_ignores_preshuffle", "generic/cache_write.hip",
              "hx_key_offset(shuffled, off, 16 * c0, p.D)", "hx_key_offset(false, off, 16 * c0, p.D)"),
        Plant("request_boundary_off_by_one", "generic/cache_gather.hip",
              "if (cu[mid] <= n) lo = mid;", "if (cu[mid] < n) lo = mid;"),
        Plant("bad_block_read_through", "generic/cache_gather.hip",
              "if (block < 0 || block >= p.num_blocks) {", "if (block < 0) {"),
        Plant("scale_of_the_next_token_gathered", "common/paged_cache.h",
              "return (hx_i64)block_size * D + 4 * (hx_i64)t;",
              "return (hx_i64)block_size * D + 4 * (hx_i64)((t + 1) % block_size);"),
        Plant("window_excludes_own_key", "generic/prefill_windows.hip",
              "ke = bad ? ks : k_end - q_r + j + 1;", "ke = bad ? ks : k_end - q_r + j;"),
        Plant("tile_carry_lost", "generic/prefill_windows.hip",
              "    row0 += rows[HX_BLOCK - 1];\n", "\n"),
    ],
    # The gfx950 MFMA decode kernels (both builds of paged_mqa_logits_mfma.hip, on decode_unit.h) with the decode
    # index math they share: the decode set's bugs at their place in this source or in the shared headers, and the kernel's own
    # (its head reduction's lane halves, its layouts' strides, its page pipeline). Run with --set gfx950_decode.
    "gfx950_decode": [
        DECODE_COMMON["next_n_blind_bound"],
        Plant("batch_blind_row", MFMA_DECODE,
              "p.out + (hx_i64)c.b * p.next_n * p.out_stride + n0", "p.out + (hx_i64)0 * p.next_n * p.out_stride + n0"),
        DECODE_COMMON["split_boundary_one_block_late"],
        Plant("block_table_column_off_by_one", MFMA_UNIT,
              "col = ng >> log2bs;", "col = (ng >> log2bs) + 1;"),
        Plant("block_table_column_off_by_one_bs1", MFMA_UNIT,
              "n < hi ? 4u * (hx_u32)n : OFF_NONE", "n < hi ? 4u * (hx_u32)(n + 1) : OFF_NONE"),
        DECODE_COMMON["preshuffle_16_and_D_swapped"],
        DECODE_COMMON["scale_of_the_next_token"],
        DECODE_COMMON["dead_ragged_row_computed"],
        Plant("out_of_range_block_clamped", MFMA_UNIT,
              "const hx_i32 id = e.id[tt];", "const hx_i32 id = hx_max_i32(0, hx_min_i32(e.id[tt], (hx_i32)p.num_blocks - 1));"),
        Plant("out_of_range_block_clamped_bs1", MFMA_UNIT,
              "const hx_i32 id = (hx_i32)en.e[tt];",
              "const hx_i32 id = hx_max_i32(0, hx_min_i32((hx_i32)en.e[tt], (hx_i32)p.num_blocks - 1));"),
        Plant("wrong_lane_half_in_head_reduction", MFMA_UNIT,
              "hx_permlane32_swap(x0, x2);", "hx_permlane32_swap(x2, x0);"),
        Plant("preshuffle_strides_swapped", MFMA_UNIT,
              "const bool shuffled = p.preshuffle != 0;", "const bool shuffled = p.preshuffle == 0;"),
        Plant("permlane16_pair_swapped", MFMA_UNIT,
              "hx_permlane16_swap(y02, y13);", "hx_permlane16_swap(y13, y02);"),
        Plant("q_operand_half_misplaced", MFMA_UNIT,
              "(j * H + 16 * ht) * D + 64 * h + qlane", "(j * H + 16 * ht) * D + 32 * h + qlane"),
        Plant("prefetched_page_swapped", MFMA_UNIT, "page(PG(i + 1), kb);", "page(PG(i + 1), ka);"),
        Plant("scale_of_another_group", MFMA_UNIT,
              "g == (hx_u32)tt && mine ? 4 * t : OFF_NONE", "g == (hx_u32)(tt ^ 1) && mine ? 4 * t : OFF_NONE"),
        Plant("wrong_head_weight", MFMA_UNIT,
              "s.w[(j * H + 16 * ht + 4 * (lane / 16)) / 4]", "s.w[(j * H + 16 * ((ht + 1) % HT) + 4 * (lane / 16)) / 4]"),
        Plant("dead_rows_not_filled", MFMA_DECODE,
              "voff[j] = p.clean || valid ?", "voff[j] = (p.clean && bound[j] > 0) || valid ?"),
        Plant("causal_bound_one_past", MFMA_DECODE, "const bool valid = col < bound[j];",
              "const bool valid = col <= bound[j];"),
        # [B, next_n] lengths: every row bounded by the affine rule of the longest row's length (the [B] form's),
        # and each row's length read from the mirror row; the [B] form is untouched by either
        Plant("per_row_lengths_ignored", MFMA_UNIT,
              "hx_decode_row_bound(seq, (hx_i32)lane, p.max_model_len)",
              "hx_decode_row_bound(hx_decode_sequence(seq.ctx, seq.live, p.next_n, p.max_model_len, p.block_size), "
              "(hx_i32)lane, p.max_model_len)"),
        Plant("row_length_of_another_row", "common/decode_work.h",
              "hx_max_i32(s.row_lens[j], 0)", "hx_max_i32(s.row_lens[s.live - 1 - j], 0)"),
        Plant("bs1_second_key_piece_misplaced", MFMA_UNIT, "hx_global_load_b128(key + 64);",
              "hx_global_load_b128(key + 32);"),
        # One logit 1% off in a row of 32,768 keys: the per-element bound sees it, a row's calc_diff hardly moves.
        Plant("one_wrong_element", MFMA_DECODE,
              "valid && key_ok ? z * scale : neg_inf",
              "valid && key_ok ? z * scale * (n0 + (hx_i32)c.lane == 20000 ? 1.01f : 1.f) : neg_inf"),
    ],
    # The standalone top-k (generic/topk_logits.hip and common/topk_select.h, both targets): the tie rule of the
    # sorted order reversed, a row's last column never considered, negative keys in reverse order, -0.0 below
    # +0.0 (the tie becomes an order), -inf inside lengths dropped, the compaction's count of earlier tiles lost,
    # the rows past the grid never taken, a radix pass's cut a bin late.
    # Run with --set topk (its suite is tests/emu/topk_cases.py, SET_TESTS).
    "topk": [
        Plant("sorted_ties_by_higher_index", "common/topk_select.h",
              "  return ((hx_u64)key << 32) | (hx_u64)(~(hx_u32)index);\n}\n"
              "HX_INLINE HX_HD hx_i32 hx_topk_entry_index(hx_u64 e) { return (hx_i32)(~(hx_u32)e); }",
              "  return ((hx_u64)key << 32) | (hx_u64)((hx_u32)index);\n}\n"
              "HX_INLINE HX_HD hx_i32 hx_topk_entry_index(hx_u64 e) { return (hx_i32)((hx_u32)e); }"),
        Plant("last_column_skipped", "common/topk_select.h", "if (!lengths) return N;", "if (!lengths) return N - 1;"),
        Plant("negatives_in_reverse_order", "common/topk_select.h",
              "return u ^ ((hx_u32)((hx_i32)u >> 31) | 0x80000000u);",
              "return u ^ 0x80000000u;"),
        Plant("minus_zero_below_plus_zero", "common/topk_select.h", "  u = u == 0x80000000u ? 0u : u;\n", ""),
        Plant("minus_inf_never_selectable", "common/topk_select.h",
              "const hx_u32 lowest = minus_inf_selectable ? 0x007FFFFFu : 0x00800000u;",
              "const hx_u32 lowest = 0x00800000u;"),
        Plant("tile_carry_lost", "common/topk_select.h", "    gt_before += tile_total >> 16;\n", ""),
        # the block scan's shuffle steps stop one short: lanes past the wave's middle miss the first half's counts
        Plant("wave_scan_stops_a_step_short", "common/platform.h",
              "for (hx_u32 d = 1; d < HX_WAVE_SIZE; d *= 2) {\n    const hx_u32 y = hx_wave_shfl_u32(v,",
              "for (hx_u32 d = 1; d < HX_WAVE_SIZE / 2; d *= 2) {\n    const hx_u32 y = hx_wave_shfl_u32(v,"),
        Plant("rows_past_the_grid_dropped", "generic/topk_logits.hip", "row < p.rows; row += hx_grid_dim_x()",
              "row < p.rows; row += p.rows"),
        # the radix passes' walk down a thread's bins (hx_owned_bins_find) passes over the bin whose last key is the
        # want-th, so that the cut lands in the bin after it
        Plant("bin_walk_past_its_last_key", "common/topk_select.h", "    if (above + c >= want) {\n      found[0]",
              "    if (above + c > want) {\n      found[0]"),
        # The split path (common/topk_split.h, generic/topk_split_*.hip): a part's last float4 never read, a kept
        # entry naming the next column, a row's count of kept keys left from the last call, a finish that trusts a
        # row whose floor kept fewer than top_k keys, or one whose kept keys passed the workspace's cap.
        Plant("part_last_float4_skipped", "common/topk_split.h", "    if (v < s.nvec) {", "    if (v + 1 < s.nvec) {"),
        Plant("kept_entry_a_column_late", "generic/topk_split_gather.hip", "hx_split_col(s, t, e));",
              "hx_split_col(s, t, e) + 1);"),
        Plant("kept_count_not_zeroed", "generic/topk_split_floor.hip", "tid == 0 ? floor : 0u;",
              "tid == 0 ? floor : ((hx_u32*)hx_split_row(p, row))[1];"),
        Plant("split_finish_trusts_a_short_row", "generic/topk_split_finish.hip", "(count >= top_k || floor == 0u)",
              "(true || floor == 0u)"),
        Plant("split_finish_trusts_an_overflowed_row", "generic/topk_split_finish.hip",
              "if (count <= (hx_u32)p.cap && ", "if ("),
        # The row-wise path (generic/topk_rowwise.hip): a kept entry naming the next column, a row whose floor kept
        # fewer than top_k keys trusted, or read again on top of what its first reading kept.
        Plant("rowwise_entry_a_column_late", "generic/topk_rowwise.hip", "hx_split_col(s, t, k));",
              "hx_split_col(s, t, k) + 1);"),
        Plant("rowwise_trusts_a_short_row", "generic/topk_rowwise.hip", "if (f.have >= f.top_k || fl == 0u) break;",
              "break;"),
        Plant("rowwise_second_reading_on_the_first", "generic/topk_rowwise.hip", "    f.have = 0;\n    f.cut = 0;\n",
              ""),
        # A held row (hx_rowwise_held): an entry named by its neighbour slot's column, the values in shared memory
        # read from the thread's next float4 of them, a value equal to the floor left out of what the cut chooses from.
        Plant("rowwise_held_entry_names_its_neighbour", "generic/topk_rowwise.hip",
              "w[0] = ~(hx_u32)hx_split_col(s, t, k);", "w[0] = ~(hx_u32)hx_split_col(s, t, k ^ 1);"),
        Plant("rowwise_held_shared_keys_read_a_float4_late", "generic/topk_rowwise.hip",
              "const hx_f32x4 q = spill[spill_at(t, j)];", "const hx_f32x4 q = spill[spill_at(t, (j + 1) % HX_SPLIT_VEC)];"),
        Plant("rowwise_held_floor_key_left_out", "generic/topk_rowwise.hip", "    if (v >= least) {",
              "    if (v > least) {"),
        # The resident path's steps (common/topk_resident.h, which the cluster path shares): a misaligned row's
        # last column read as none, a radix pass counting keys outside the digits found so far, a wave's later runs
        # placed as if its first had one key fewer, keys equal to the cut never taken.
        Plant("resident_tail_column_dropped", "common/topk_resident.h",
              "e[c] = col >= 0 && col < n ? x[col] : nan;", "e[c] = col >= 0 && col < n - 1 ? x[col] : nan;"),
        Plant("resident_pass_blind_to_the_digits_found", "common/topk_resident.h",
              "if ((ks[c] & fixed) == want_bits && ks[c] >= lo)", "if (ks[c] >= lo)"),
        Plant("resident_wave_run_base_a_lane_short", "common/topk_resident.h",
              "r.base += hx_wave_shfl_u32(incl, HX_WAVE_SIZE - 1);",
              "r.base += hx_wave_shfl_u32(incl, HX_WAVE_SIZE - 2);"),
        Plant("resident_keys_equal_to_the_cut_left_out", "common/topk_resident.h",
              "eq = ks[j] == T && ks[j] != 0u;", "eq = ks[j] == T && ks[j] == 0u;"),
        Plant("resident_next_counts_left_uncleared", "common/topk_resident.h",
              "for (hx_u32 b = tid; b < RESIDENT_BINS; b += HX_BLOCK) hist[(buf ^ 1u) * RESIDENT_BINS + b] = 0u;",
              "for (hx_u32 b = tid; b < 0u; b += HX_BLOCK) hist[(buf ^ 1u) * RESIDENT_BINS + b] = 0u;"),
        Plant("resident_bin_search_blind_to_the_chunks_above", "common/topk_resident.h",
              "above = hx_wave_shfl_u32(upto - s, c);", "above = hx_wave_shfl_u32(upto - s, c) * 0u;"),
        Plant("sort_register_steps_stop_a_stride_short", "common/topk_select.h",
              "for (hx_u32 stride = span == span_lo ? first : span / 2; stride > 0; stride /= 2) {",
              "for (hx_u32 stride = span == span_lo ? first : span / 2; stride > 1; stride /= 2) {"),
        Plant("resident_chunk_sums_miss_the_lower_bins", "common/topk_resident.h",
              "hx_wave_inclusive_sum(pair_hi(b0) + pair_lo(b0))", "hx_wave_inclusive_sum(pair_hi(b0))"),
    ],
    # The composed decode top-k's own step (generic/paged_topk_step.hip, the merge of common/topk_chunks.h): the
    # merge's chunk base a block late (16 keys), the candidates' keys read from the wrong end (their order
    # reversed), a chunk's table columns one block late, its lengths not shifted to the chunk, or blind to
    # next_n_lens; the staged selection's indices left in staged space, or a staged column named one late. Run with
    # --set paged_topk (its suite is tests/emu/paged_topk_cases.py, SET_TESTS).
    "paged_topk": [
        Plant("staged_selection_unmapped", "common/topk_chunks.h", "sel[s] = sel[s] >= 0 ? ix_s[sel[s]] : -1;",
              "sel[s] = sel[s];"),
        Plant("staged_column_one_late", "common/topk_chunks.h", "ix_s[at] = i0 + t;", "ix_s[at] = i0 + t + 1;"),
        Plant("merge_chunk_base_one_block_late", "common/topk_chunks.h", ": base + (cols ? (hx_i64)cols[col]",
              ": base + 16 + (cols ? (hx_i64)cols[col]"),
        Plant("candidates_reversed", "common/topk_chunks.h", "i < lead ? (hx_i64)idx[i]",
              "i < lead ? (hx_i64)idx[lead - 1 - i]"),
        Plant("chunk_table_one_block_late", "generic/paged_topk_step.hip", "const hx_i64 col = first_block + e;",
              "const hx_i64 col = first_block + 1 + e;"),
        Plant("chunk_lengths_not_shifted", "generic/paged_topk_step.hip", "const hx_i64 local = len - first_key;",
              "const hx_i64 local = len;"),
        Plant("chunk_lengths_blind_to_next_n_lens", "generic/paged_topk_step.hip",
              "const hx_i64 live = p.next_n_lens ? (hx_i64)p.next_n_lens[b] : (hx_i64)p.next_n;",
              "const hx_i64 live = (hx_i64)p.next_n;"),
        # The fused path's merge (generic/paged_topk_merge.hip; merge_of_written_pieces runs it on the emulator):
        # a sequence's last listed piece left out, a round's entries loaded over the selection so far, a piece
        # that straddles two rounds read again from its start in the second, a first level's merged piece left
        # with its old count, a last level reading every entry instead of the groups', a bitmap place one late (the
        # order it shares with the other selections, common/topk_finish.h), a sequence's list never emptied, a
        # piece's first entry read from the piece before (the walk over narrow pieces).
        Plant("merge_last_piece_left_out", "generic/paged_topk_merge.hip",
              "listed > p.units ? (hx_u32)p.units : (hx_u32)listed;",
              "listed > p.units ? (hx_u32)p.units : (hx_u32)listed - 1u;"),
        Plant("merge_round_overwrites_the_selection", "generic/paged_topk_merge.hip", "if (tid == 0) found[2] = have;",
              "if (tid == 0) found[2] = 0u;"),
        Plant("merge_round_restarts_its_piece", "generic/paged_topk_merge.hip", "+ (at - piece_at[q])];",
              "+ (at - (piece_at[q] > lo ? piece_at[q] : lo))];"),
        Plant("merge_first_level_count_kept", "generic/paged_topk_merge.hip",
              "if (tid == 0) p.part_counts[slot * p.next_n + j] = (hx_i32)have;", ""),
        Plant("merge_last_level_reads_every_entry", "generic/paged_topk_merge.hip",
              "const hx_u32 step = p.group > 0 || p.stride < 1 ? 1u : (hx_u32)p.stride;", "const hx_u32 step = 1u;"),
        Plant("merge_place_one_late", "common/topk_finish.h", "if (mine[k]) e[hx_bitmap_rank(",
              "if (mine[k]) e[1u + hx_bitmap_rank("),
        Plant("merge_list_not_emptied", "generic/paged_topk_merge.hip", "      p.seq_nparts[b] = 0;\n", ""),
        # The whole-row path's slots (generic/topk_slots.hip; the_whole_row_path runs it): a row's sequence taken
        # as the row itself (next_n ignored), a key's offset in its block left out (hx_cache_slot, common/paged_cache.h,
        # which every decode top-k's slots share).
        Plant("slots_row_as_sequence", "generic/topk_slots.hip", "p.block_tables + row / p.next_n * p.max_blocks",
              "p.block_tables + row * p.max_blocks"),
        Plant("slots_block_offset_left_out", "common/paged_cache.h", "(hx_i32)(id * block_size + n % block_size)",
              "(hx_i32)(id * block_size)"),
        Plant("merge_walk_a_piece_short", "generic/paged_topk_merge.hip", "while (piece_at[q + 1] <= at) ++q;",
              "while (piece_at[q + 1] < at) ++q;"),
    ],
    # The fused decode top-k kernel (sm90a/paged_mqa_topk_wgmma_tma.hip), on the GPU (its suite is
    # tests/test_paged_topk_fused.py, SET_TESTS): every row filtered by the first row's floor, the rows cut's three
    # (a cut one entry short, the second row's bins counted above by the first row's sum, both rows' kept entries at
    # one fill), a trim that never falls back to the exact cut, a piece's slot the unit's alone (a unit's two pieces
    # on a sequence boundary then share it), each stage's last key never offered.
    "paged_topk_fused": [
        Plant("fused_floor_of_the_first_row", "sm90a/paged_mqa_topk_wgmma_tma.hip",
              "if (key <= (jr ? floor1 : floor0)) return;", "if (key <= floor0) return;"),
        *_rows_cut_plants("fused"),
        Plant("fused_trim_never_exact", "common/topk_rows.h", "hx_cand_cut_rows<G, R, U>(k, t, bar, top_k, half);",
              "hx_cand_cut_rows<G, R, U>(k, t, bar, top_k, 0xFFFFFFF0u);"),
        Plant("fused_slot_of_the_unit_alone", "sm90a/paged_mqa_topk_wgmma_tma.hip", "p.seq_nparts, u + seg.b, seg.b,",
              "p.seq_nparts, u, seg.b,"),
        Plant("fused_stage_last_key_not_offered", "sm90a/paged_mqa_topk_wgmma_tma.hip", "          c.clean = false;\n",
              "          c.clean = false;\n"
              "          c.in = c.in && c.n + 1 < lds_i32(sm.base + REC_OFF + at.slot * 16 + 4);\n"),
    ],
    # The gfx950 fused decode top-k kernel (gfx950/paged_mqa_topk_mfma.hip) on the emulator (its suite is
    # tests/emu/paged_topk_fused_cases.py, SET_TESTS): every row filtered by the first row's floor, keys the unit
    # did not read (its last page's tail, a bad block's) offered as zeros, each page's last key never offered, a round's flag
    # never raised (rows pass their buffers), the meeting reading the next round's flag, a sequence's end cut one
    # entry short, its second row's bins counted above by the first row's sum, both rows' kept entries appended at
    # one fill, a trim that never falls back to the exact cut (a row of equal keys then stays full), a piece's slot
    # the unit's alone.
    "paged_topk_fused_mfma": [
        Plant("mfma_fused_floor_of_the_first_row", "gfx950/paged_mqa_topk_mfma.hip", "const bool take = key > floor[j];",
              "const bool take = key > floor[0];"),
        Plant("mfma_fused_unread_keys_offered", "gfx950/paged_mqa_topk_mfma.hip",
              "const bool ours = hx_key_ok(kp, c.lane);", "const bool ours = true;"),
        Plant("mfma_fused_page_last_key_not_offered", "gfx950/paged_mqa_topk_mfma.hip",
              "const bool ours = hx_key_ok(kp, c.lane);", "const bool ours = hx_key_ok(kp, c.lane) && c.lane != 63u;"),
        Plant("mfma_fused_flag_never_raised", "gfx950/paged_mqa_topk_mfma.hip", "if (base + n > high) {",
              "if (base + n > high + 0x40000000u) {"),
        Plant("mfma_fused_meeting_reads_the_next_flag", "gfx950/paged_mqa_topk_mfma.hip",
              "hx_readfirstlane(flags[r % 3])", "hx_readfirstlane(flags[(r + 1) % 3])"),
        *_rows_cut_plants("mfma_fused"),
        Plant("mfma_fused_trim_never_exact", "common/topk_rows.h", "if (kept > top_k + (high - top_k) / 2)",
              "if (kept > 0xFFFFFFF0u)"),
        Plant("mfma_fused_slot_of_the_unit_alone", "gfx950/paged_mqa_topk_mfma.hip", "hx_block_x() + b, b,",
              "hx_block_x(), b,"),
    ],
    # The sm_90a fused prefill top-k's filters (sm90a/prefill_cta.h, FILTER), on the GPU (its suite is
    # tests/emu/prefill_topk_cases.py, SET_TESTS): at H = 64 (STAGED, the filter warps) a window taking the key past
    # its end instead of its first, every part's count written over the first part's, two passing lanes of a column
    # placed on one entry; at H = 32 (the math warpgroups' appends) an entry naming the next key, and the counts
    # flushed as kept (from 2^31 - cap) rather than as appends: every part then looks overflowed and is recomputed.
    "prefill_topk_sm90a": [
        Plant("staged_window_a_key_late", "sm90a/prefill_cta.h", "pass[c] = (d + c < len[r]) & (x[c] >= floor[r]);",
              "pass[c] = (d + c - 1u < len[r]) & (x[c] >= floor[r]);"),
        Plant("staged_counts_of_the_first_part", "sm90a/prefill_cta.h",
              "p.cand_counts[(hx_i64)(m0 + row) * p.split + part]", "p.cand_counts[(hx_i64)(m0 + row) * p.split]"),
        Plant("staged_places_collide", "sm90a/prefill_cta.h", "const hx_u32 at_row = count[r] + hx_popc(b[c] & below);",
              "const hx_u32 at_row = count[r] + hx_popc(b[c] & below) / 2u;"),
        Plant("sm90a_filter_entry_a_key_late", "sm90a/prefill_cta.h",
              "p.cand[t.region0[kq] + at] = hx_topk_entry(key, e + t.work_hi);",
              "p.cand[t.region0[kq] + at] = hx_topk_entry(key, e + t.work_hi + 1);"),
        Plant("sm90a_filter_counts_flushed_from_their_start", "sm90a/prefill_cta.h",
              "rec[REC_COUNT + lane] - (STAGED ? 0 :", "rec[REC_COUNT + lane] - (true ? 0 :"),
    ],
    # Launches that overlap the grid before them: the copy kernel not waiting for it, so a copy launched behind a
    # slow fill reads the words the fill has not written yet. Run with --suite cuda --set launch_overlap (its suite
    # is tests/test_launch_overlap.py, SET_TESTS).
    "launch_overlap": [
        Plant("copy_reads_before_the_fill_is_done", "generic/copy.hip", "  hx_grid_dependency_wait();\n", ""),
    ],
    # The composed prefill top-k's own step (generic/topk_chunk_step.hip and the filter of common/topk_chunks.h):
    # the next chunk's windows not shifted to it, every window starting a key late, the relative shift read from
    # the next row, the filter's threshold the largest candidate rather than the smallest, its kept columns' chunk
    # columns one late, the selection blind to the last kept column, the first staged column over the last
    # candidate, a chunk too wide to stage selected one column short. Run with --set prefill_topk (its suite is
    # tests/emu/prefill_topk_cases.py, SET_TESTS).
    "prefill_topk": [
        Plant("staged_over_the_last_candidate", "common/topk_chunks.h", "hx_u32 staged = (hx_u32)lead;",
              "hx_u32 staged = (hx_u32)lead - 1u;"),
        Plant("unstaged_selection_one_short", "common/topk_chunks.h", "hx_topk_select(w, n, false",
              "hx_topk_select(w, n - 1, false"),
        Plant("prefill_chunk_windows_not_shifted", "generic/topk_chunk_step.hip",
              "const hx_i64 local = (hx_i64)end - first_key;", "const hx_i64 local = (hx_i64)end;"),
        Plant("prefill_chunk_window_starts_a_key_late", "generic/topk_chunk_step.hip",
              "hx_chunk_end(p.ks[row], p.next_key", "hx_chunk_end(p.ks[row] + 1, p.next_key"),
        Plant("relative_shift_of_the_next_row", "generic/topk_chunk_step.hip", "p.rel + row",
              "p.rel + (row + 1 < p.rows ? row + 1 : row)"),
        Plant("filter_threshold_the_largest_candidate", "common/topk_chunks.h",
              "if (tid < half && scan[tid + half] < scan[tid])", "if (tid < half && scan[tid + half] > scan[tid])"),
        Plant("filter_kept_column_one_late", "common/topk_chunks.h", "cols[at] = i0 + t;", "cols[at] = i0 + t + 1;"),
        Plant("selection_blind_to_the_last_kept", "common/topk_chunks.h", "p.top_k + (hx_i32)kept,",
              "p.top_k + (hx_i32)kept - (kept > 0),"),
        # the fused path: a finish that trusts a row whose floor kept fewer than top_k keys, that places every
        # region's entries at the first one's place, that ranks an ascending entry one place late; a generic filter
        # whose entries name the next key; the gfx950 filter writing every part's count over the first part's; floors
        # at each row's largest sample (exact still, through the recompute: the floors' own case catches it);
        Plant("fused_finish_trusts_a_short_row", "generic/prefill_topk_finish.hip", "(total < top_k && floor != 0u)",
              "(false && floor != 0u)"),
        Plant("fused_finish_list_not_counted", "common/topk_finish.h", "    have += n;\n", "\n"),
        Plant("fused_finish_rank_one_late", "common/topk_select.h",
              "hx_popc(bits[last] & ((1u << (b % 32)) - 1u))", "hx_popc(bits[last] & ((2u << (b % 32)) - 1u))"),
        Plant("fused_filter_entry_a_key_late", "generic/mqa_logits.hip",
              "p.cand[g.base + at] = hx_topk_entry(key, n);", "p.cand[g.base + at] = hx_topk_entry(key, n + 1);"),
        Plant("fused_mfma_counts_of_the_first_part", "gfx950/mqa_logits_mfma.hip",
              "p.cand_counts[((hx_i64)m0 + hx_thread_x()) * p.split + hx_block_y()]",
              "p.cand_counts[((hx_i64)m0 + hx_thread_x()) * p.split]"),
        Plant("fused_floor_at_the_largest_sample", "common/topk_floor.h",
              "hx_topk_find_bin(hist, HX_FLOOR_BINS, r, scan, found);",
              "hx_topk_find_bin(hist, HX_FLOOR_BINS, 1u, scan, found);"),
        # the floors' cut of a row's entries: blind to where the sample's keys lie (even shares: the crowded rows'
        # case catches the recompute), every region at the row's first entry; the finish reading the next part's
        # region, and recomputing the next part's keys for a part that passed its region
        Plant("fused_cut_blind_to_the_sample", "generic/prefill_topk_floor.hip",
              "s + HX_CUT_SIGMAS * hx_isqrt_u32(s) + HX_CUT_PAD", "HX_CUT_PAD"),
        # the shares without the sample's spread (the floors' cut checked against its formula catches it)
        Plant("fused_cut_without_the_samples_spread", "generic/prefill_topk_floor.hip",
              "s + HX_CUT_SIGMAS * hx_isqrt_u32(s) + HX_CUT_PAD", "s + HX_CUT_PAD"),
        # the floor's last pass counting every sample, not those at the floor, by part (shares by where all samples
        # lie: the crowded rows' case catches the recompute)
        Plant("fused_cut_counts_every_sample", "common/topk_floor.h", "if (b >= at) kept(k, where...);",
              "kept(k, where...);"),
        Plant("fused_cut_regions_at_the_rows_first", "generic/prefill_topk_floor.hip",
              "p.cand_base[m * p.parts + tid] = a;", "p.cand_base[m * p.parts + tid] = 0u;"),
        # a row's samples held in registers, each counted by part as if it were the thread's first one
        Plant("fused_floor_held_samples_counted_at_the_first", "generic/prefill_topk_floor.hip",
              "if (held[b]) f(held[b], w.lo + (hx_i32)tid + b * HX_BLOCK);",
              "if (held[b]) f(held[b], w.lo + (hx_i32)tid);"),
        # the finish's kept list as one: an entry at a part's first place read from the part before; every slice
        # of the list after the first read from the list's start again
        Plant("fused_finish_list_entry_of_the_part_before", "common/topk_finish.h",
              "src(j) + (i - before[j])", "src(j > 0 && before[j] == i ? j - 1 : j) + (i - before[j])"),
        Plant("fused_finish_slices_from_the_lists_start", "common/topk_finish.h",
              "const hx_u32 i = lo + i0 + b * HX_BLOCK,", "const hx_u32 i = i0 + b * HX_BLOCK,"),
        # ... and taken a list a part (a row of few parts): the last part's list left out
        Plant("fused_finish_apart_without_the_last_part", "generic/prefill_topk_finish.hip",
              "for (hx_i32 j = 0; j < p.parts; ++j)\n          if ((hx_u32)tab->count[j] <= tab->cap[j]) f.take_",
              "for (hx_i32 j = 0; j < p.parts - 1; ++j)\n          if ((hx_u32)tab->count[j] <= tab->cap[j]) f.take_"),
        Plant("fused_finish_region_of_the_next_part", "generic/prefill_topk_finish.hip",
              "hx_topk_region(p, m, p.parts, (hx_i32)tid);",
              "hx_topk_region(p, m, p.parts, ((hx_i32)tid + 1) % p.parts);"),
        Plant("fused_finish_recomputes_the_next_part", "generic/prefill_topk_finish.hip", "split.keys(j);",
              "split.keys((j + 1) % p.parts);"),
    ],
}
# The pieces both sm_90a kernels share (prefill_cta.h): each set plants them and runs its own kernel around them.
SM90A_SHARED = [
    Plant("wrong_accumulator_head", "sm90a/prefill_cta.h",
          "(hx_lane_reread() & 3) * WGROUP;", "((hx_lane_reread() + 1) & 3) * WGROUP;"),
    Plant("split_boundary_one_tile_short", "sm90a/prefill_cta.h",
          "w.t.part = hx_prefill_split(lo, hi, p.N, p.tile, p.split, part);",
          "w.t.part = hx_prefill_split(lo, hi, p.N, p.tile, p.split, part); "
          "w.t.part.work.hi = hx_max_i32(w.t.part.work.lo, w.t.part.work.hi - p.tile);"),
    Plant("wrong_row_in_row_block", "sm90a/prefill_cta.h",
          "t.row[kq] = p.out + (hx_i64)(m0 + r) * p.out_stride + n;",
          "t.row[kq] = p.out + (hx_i64)(m0 + (r + 1) % BQ) * p.out_stride + n;"),
    Plant("dropped_kv_scale_sm90a", "sm90a/prefill_cta.h", "inside ? z * scale : ninf", "inside ? z : ninf"),
]
PLANTS["sm90a"] += SM90A_SHARED
# The cluster path of topk_logits (sm90a/topk_cluster.hip; its suite tests/test_topk_cluster.py, on an sm_90a
# GPU): a bin's count summed without the last block's, a block's selection placed after its own counts as well as
# those of the blocks before it, a block's part of the row a float4 short.
PLANTS["topk_cluster"] = [
    Plant("cluster_counts_leave_out_the_last_block", "sm90a/topk_cluster.hip",
          "for (hx_u32 r = 0; r < HX_CLUSTER; ++r) {\n          const hx_u32x4 c",
          "for (hx_u32 r = 0; r < HX_CLUSTER - 1; ++r) {\n          const hx_u32x4 c"),
    Plant("cluster_places_after_its_own_counts", "sm90a/topk_cluster.hip",
          "const hx_u32 theirs = lane < rank ? peers(3) : 0u;", "const hx_u32 theirs = lane <= rank ? peers(3) : 0u;"),
    Plant("cluster_part_a_slot_short", "sm90a/topk_cluster.hip", "ve = vb + per < m4 ? vb + per : m4",
          "ve = vb + per - 1 < m4 ? vb + per - 1 : m4"),
]
PLANTS["sm90a_fold"] += SM90A_SHARED
# The sm_90a tensor-core decode kernel (paged_mqa_logits_wgmma_tma, keys by the tensor copy engine): the decode
# set's plants at their place in the kernel (the index math of decode_work.h as is), a swapped next_n row in the
# MMA's operand, a block-table entry read from the wrong column or prefetched from it, a batch-blind output row and
# a second MMA pass reading the first pass's rows; then its own (below). Run with --suite cuda --set
# sm90a_decode_tma.
SM90A_FEED = "sm90a/decode_feed.h"  # the block-table entries, the Q warp and the fill of its producer warpgroup
SM90A_TMA = "sm90a/paged_mqa_logits_wgmma_tma.hip"
SM90A_TMA_LOADER = "sm90a/decode_tma_loader.h"  # its page warps
SM90A_TMA_CTA = "sm90a/decode_tma_cta.h"  # its layout and a math lane's stage (shared with the fused top-k kernel)
PLANTS["sm90a_decode_tma"] = [
    DECODE_COMMON["next_n_blind_bound"],
    Plant("batch_blind_row", SM90A_TMA, "float* const seq_out = p.out + (hx_i64)seg.b * p.next_n * p.out_stride;",
          "float* const seq_out = p.out + (hx_i64)0 * seg.b * p.next_n * p.out_stride;"),
    Plant("split_boundary_one_block_late", "common/decode_work.h",
          "r.lo = (hx_i32)((a + per_block - 1) / per_block);",
          "r.lo = (hx_i32)((a + per_block - 1) / per_block) + (a > 0 && a < (hx_i64)blocks * per_block);"),
    Plant("block_table_column_off_by_one", SM90A_TMA_LOADER,
          "hx_i32 cur = table_entry(p, row, blk.lo + lane, blk.hi);",
          "hx_i32 cur = table_entry(p, row, blk.lo + lane + 1, blk.hi);"),
    DECODE_COMMON["dead_ragged_row_computed"],
    Plant("out_of_range_block_clamped", SM90A_FEED, "return ok ? id : -1;",
          "return ok ? id : (id < 0 ? 0 : (hx_i32)(p.num_blocks - 1));"),
    Plant("swapped_next_n_row_in_operand", SM90A_FEED, "qsrc + (hx_i64)j * H * D, (hx_u32)lane);",
          "qsrc + (hx_i64)(s.live > 1 && j < 2 ? 1 - j : j) * H * D, (hx_u32)lane);"),
    Plant("page_prefetched_from_wrong_column", SM90A_TMA_LOADER, "table_entry(p, row, c0 + 32 + lane, blk.hi);",
          "table_entry(p, row, c0 + 31 + lane, blk.hi);"),
    Plant("second_pass_reads_first_rows", SM90A_TMA, "c.bdesc = hx_wgmma_desc_sw128(seg.qtile + pb * (H * D));",
          "c.bdesc = hx_wgmma_desc_sw128(seg.qtile + 0 * pb * (H * D));"),
]
# Its own: the cache layout reaches it through the host's tensor map, so paged_cache.h's layout plants have no text
# here (tests/test_kv_map.py and the layout checks cover kv_map.py); a stage's keys copied from the next block, its
# scales from the next token (or, from a whole page, read past the swizzle), the keys read as unswizzled and the
# preshuffled keys' core matrices read along the wrong axes; the dealt tail's claims.
PLANTS["sm90a_decode_tma"] += [
    Plant("keys_of_the_next_block", SM90A_TMA_LOADER, "copy_keys(p, keys + lane * kbytes, id, full);",
          "copy_keys(p, keys + lane * kbytes, id + (id + 1 < p.num_blocks), full);"),
    Plant("whole_page_scale_read_unswizzled", SM90A_TMA_CTA, "((((ml.key % 32) / 4) ^ (ml.key / 32)) << 4)",
          "(((ml.key % 32) / 4) << 4)"),
    Plant("scales_of_the_next_token", SM90A_TMA_LOADER, "p.kv_cache + (hx_i64)id * page + kbytes,",
          "p.kv_cache + (hx_i64)id * page + kbytes + 16,"),
    Plant("keys_read_unswizzled", SM90A_TMA_CTA, ": hx_wgmma_desc_sw128(stage);",
          ": hx_wgmma_desc_sw128(stage) & ~((hx_u64)3 << 62);"),
    Plant("preshuffled_core_matrix_strides_swapped", SM90A_TMA_CTA, "hx_wgmma_desc_plain(stage, 128, 1024)",
          "hx_wgmma_desc_plain(stage, 1024, 128)"),
    # the dealt tail (decode_feed.h, each_piece): the claim pair never returned to zero, so the next launch on the
    # stream finds the chunks gone; a claimed chunk's range shifted by one chunk, so one is computed twice and the
    # first never
    Plant("claim_pair_left_counted", SM90A_FEED, "            atomicExch(d.claims, 0u);\n", ""),
    Plant("claimed_chunk_one_late", SM90A_FEED, "d.chunk((hx_i32)got);",
          "d.chunk((hx_i32)(got + 1 < (hx_u32)d.chunks ? got + 1 : got));"),
    # a batch of one chunk (decode_feed.h, chunk_totals; decode_common.h, walk): its total work taken without the
    # last sequence's price (an exclusive prefix), so no unit owns that sequence's blocks; a sequence's owned blocks
    # shuffled from its neighbouring lane's
    Plant("one_chunk_total_without_the_last_sequence", SM90A_FEED, "total_work = hx_shfl_idx_i64(c.incl, 31);",
          "total_work = hx_shfl_idx_i64(c.incl - c.w, p.B - 1);"),
    Plant("owned_blocks_of_the_neighbouring_lane", "sm90a/decode_common.h",
          "f(b0 + k, s, hx_range{hx_shfl_idx_i32(r.lo, k), hx_shfl_idx_i32(r.hi, k)});",
          "f(b0 + k, s, hx_range{hx_shfl_idx_i32(r.lo, k ^ 1), hx_shfl_idx_i32(r.hi, k ^ 1)});"),
    # a one-pass segment's weights held in registers: every row given row 0's
    Plant("one_pass_rows_share_row_zero_weights", SM90A_TMA, "        load_row_weights<R>(seg.wt, w2);\n",
          "        load_row_weights<R>(seg.wt, w2);\n"
          "        for (int jr = 1; jr < R; ++jr) for (int x = 0; x < 2 * JQ; ++x) w2[jr][x] = w2[0][x];\n"),
]
# The suite each set needs by default (the plants live in kernels only these shapes reach).
SET_CMDS = {
    "cache": "check cache --quick",
    # the first 14 cases of the quick pairwise decode sample plus the layout and untrusted-value checks
    "decode": "check decode --quick --cases 14 --reruns 0 --kernel paged_mqa_logits_generic",
    # the quick shapes plus one whose parts span two LDS chunks under a key split of 8
    "generic": "check prefill --heads 16,32 --dims 64 --shapes 1x1,1x113,17x76,64x128,61x256,2x65536 --reruns 0 "
               "--kernel mqa_logits_generic",
    # the quick pairwise decode sample at the MFMA kernels' shapes (every block size and layout they serve) plus
    # the layout, untrusted-value and [B, next_n] length checks there
    "gfx950_decode": "check decode --quick --heads 32,64 --dims 128 --cases 8 --reruns 0",
    # the quick shapes plus a row long enough to be split (the one wrong element of a long row)
    "gfx950": "check prefill --heads 32,64 --dims 128 --shapes 1x113,17x76,64x128,61x256,2x16384,128x2048 --reruns 0 "
              "--kernel mqa_logits_mfma",
    # sm_90a: small shapes for the tails and splits, 4x65536 for one wrong element in a long row
    "sm90a": "check prefill --heads 32,64 --dims 128 --shapes 17x76,61x1024,128x2048,1024x1560,4x65536 --reruns 0 "
             "--kernel mqa_logits_wgmma",
    "sm90a_fold": "check prefill --heads 64 --dims 128 --shapes 17x76,61x1024,128x2048,1024x1560,4x65536 --reruns 0 "
                  "--kernel mqa_logits_wgmma_fold",
    # the kernel's shapes (H 32/64, D 128, block_size 16/64), contexts up to 8192; the layout check runs on one unit
    # (segments of 47 blocks: the prefetched table entries) and the untrusted-value check at block_size 16
    "sm90a_decode_tma": "check decode --kernel paged_mqa_logits_wgmma_tma --max-context 8192 --cases 12 --reruns 0",
}

# Sets whose suite is a test file, run by pytest on the package copy (on the emulator for --suite emu, through
# tests/emu/emu_session.py; on the GPU for --suite cuda) and stopped at its first failure.
SET_TESTS = {"topk": "tests/emu/topk_cases.py", "paged_topk": "tests/emu/paged_topk_cases.py",
             "paged_topk_fused": "tests/test_paged_topk_fused.py",
             "paged_topk_fused_mfma": "tests/emu/paged_topk_fused_cases.py",
             "prefill_topk": "tests/emu/prefill_topk_cases.py",
             "prefill_topk_sm90a": "tests/emu/prefill_topk_cases.py",
             "launch_overlap": "tests/test_launch_overlap.py", "topk_cluster": "tests/test_topk_cluster.py"}

# The kernels (catalog keys) a set's suite launches on the emulator, where they are few of those its plants' files
# reach: a planted tree builds the emulated twins of these alone (most of a plant's time is that build). The
# emulator then loads no other, and a run that tries (NO_TWIN) stops the harness: the clean
# tree is built the same way, so its suite passing proves the list.
SET_KERNELS = {
    "topk": ("topk_logits", "topk_rowwise", "topk_resident", "topk_resident_narrow", "topk_split_floor",
             "topk_split_gather", "topk_split_finish"),
    "paged_topk": ("paged_mqa_logits_generic", "paged_topk_step", "paged_topk_step_wide", "paged_topk_merge",
                   "topk_resident", "topk_slots"),
    "prefill_topk": ("mqa_logits_generic", "mqa_logits_mfma", "mqa_topk_generic", "mqa_topk_mfma",
                     "prefill_topk_sample", "prefill_topk_floor", "prefill_topk_floor_wide", "prefill_topk_finish",
                     "topk_chunk_step", "topk_chunk_step_wide"),
}
NO_TWIN = "hipModuleLoadData failed"  # the emulator's answer to an object its registry lacks

# The test of a SET_TESTS file that catches each plant, run before the rest of the file (run_tests): a planted
# run stops at its first failure anyway, so naming it saves the cases before it. A plant its first case misses
# still runs the whole file (and says so); a name the file lacks stops the harness.
FIRST_CASES = {
    "topk": {
        "sorted_ties_by_higher_index": "test_topk_case[wide_rows_top1_unsorted-rowwise]",
        "last_column_skipped": "test_topk_case[wide_rows_top2048_unsorted-single]",
        "negatives_in_reverse_order": "test_topk_case[short_and_empty_rows-single]",
        "minus_zero_below_plus_zero": "test_topk_case[ties_decide_the_cut-single]",
        "minus_inf_never_selectable": "test_topk_case[lengths_mask_the_columns-single]",
        "tile_carry_lost": "test_topk_case[wide_rows_top512_unsorted-single]",
        "wave_scan_stops_a_step_short": "test_topk_case[wide_rows_top1_unsorted-split]",
        "rows_past_the_grid_dropped": "test_topk_case[more_rows_than_blocks-single]",
        "part_last_float4_skipped": "test_topk_case[wide_rows_top7_unsorted-split]",
        "kept_entry_a_column_late": "test_topk_case[wide_rows_top1_unsorted-split]",
        "kept_count_not_zeroed": "test_topk_case[wide_rows_top7_unsorted-split]",
        "split_finish_trusts_a_short_row": "test_topk_case[rows_the_floor_cannot_serve_are_selected_whole-split]",
        "split_finish_trusts_an_overflowed_row": "test_topk_case[rows_as_long_as_a_block_holds-split]",
        "rowwise_entry_a_column_late": "test_topk_case[wide_rows_top1_unsorted-rowwise_floor]",
        "rowwise_trusts_a_short_row": "test_topk_case[rows_the_floor_cannot_serve_are_selected_whole-rowwise]",
        "rowwise_second_reading_on_the_first":
            "test_topk_case[rows_the_floor_cannot_serve_are_selected_whole-rowwise]",
        "rowwise_held_entry_names_its_neighbour": "test_topk_case[wide_rows_top1_unsorted-rowwise]",
        "rowwise_held_shared_keys_read_a_float4_late": "test_topk_case[wide_rows_top4096_unsorted-rowwise]",
        "rowwise_held_floor_key_left_out": "test_topk_case[wide_rows_top1_unsorted-rowwise]",
        "resident_tail_column_dropped": "test_topk_case[rows_as_long_as_a_block_holds-resident]",
        "resident_pass_blind_to_the_digits_found": "test_topk_case[wide_rows_top512_unsorted-resident]",
        "resident_wave_run_base_a_lane_short": "test_topk_case[wide_rows_top2048_unsorted-resident]",
        "resident_keys_equal_to_the_cut_left_out": "test_topk_case[ties_decide_the_cut-resident]",
        "resident_next_counts_left_uncleared": "test_topk_case[wide_rows_top512_unsorted-resident]",
        "resident_bin_search_blind_to_the_chunks_above": "test_topk_case[wide_rows_top512_unsorted-resident]",
        "resident_chunk_sums_miss_the_lower_bins": "test_topk_case[wide_rows_top512_unsorted-resident]",
        "sort_register_steps_stop_a_stride_short": "test_topk_case[wide_rows_top512_sorted-single]",
    },
    "topk_cluster": {
        "cluster_counts_leave_out_the_last_block": "test_cluster_rows_on_the_gpu[unsorted-16-32768]",
        "cluster_places_after_its_own_counts": "test_cluster_rows_on_the_gpu[unsorted-16-32768]",
        "cluster_part_a_slot_short": "test_cluster_rows_on_the_gpu[unsorted-16-32768]",
    },
    "paged_topk": {
        "staged_selection_unmapped": "test_paged_topk_case[wide_rows_top7_bs16_seqlens]",
        "staged_column_one_late": "test_paged_topk_case[wide_rows_top7_bs16_seqlens]",
        "merge_chunk_base_one_block_late": "test_paged_topk_case[wide_rows_top7_bs16_seqlens]",
        "candidates_reversed": "test_paged_topk_case[wide_rows_top7_bs16_seqlens]",
        "chunk_table_one_block_late": "test_paged_topk_case[wide_rows_top7_bs16_seqlens]",
        "chunk_lengths_not_shifted": "test_paged_topk_case[wide_rows_top64_bs64_seqlens]",
        "chunk_lengths_blind_to_next_n_lens": "test_paged_topk_case[short_empty_and_dead_rows]",
        "merge_last_piece_left_out": "test_paged_topk_case[merge_of_written_pieces]",  # the emulator crashes
        "merge_round_overwrites_the_selection": "test_paged_topk_case[merge_of_written_pieces]",
        "merge_round_restarts_its_piece": "test_paged_topk_case[merge_of_written_pieces]",
        "merge_first_level_count_kept": "test_paged_topk_case[merge_of_written_pieces]",
        "merge_last_level_reads_every_entry": "test_paged_topk_case[merge_of_written_pieces]",
        "merge_place_one_late": "test_paged_topk_case[merge_of_written_pieces]",
        "merge_list_not_emptied": "test_paged_topk_case[merge_of_written_pieces]",
        "slots_row_as_sequence": "test_paged_topk_case[the_whole_row_path]",  # the emulator crashes
        "slots_block_offset_left_out": "test_paged_topk_case[wide_rows_top7_bs16_seqlens]",
        "merge_walk_a_piece_short": "test_paged_topk_case[merge_of_written_pieces]",
    },
    "prefill_topk": {
        "staged_over_the_last_candidate": "test_prefill_topk_case[fast_path_heads]",
        "unstaged_selection_one_short": "test_prefill_topk_case[chunks_too_wide_to_stage]",
        "prefill_chunk_windows_not_shifted": "test_prefill_topk_case[fast_path_heads]",
        "prefill_chunk_window_starts_a_key_late": "test_prefill_topk_case[every_window_mode]",
        "relative_shift_of_the_next_row": "test_prefill_topk_case[every_window_mode]",
        "filter_threshold_the_largest_candidate": "test_prefill_topk_case[fast_path_heads]",
        "filter_kept_column_one_late": "test_prefill_topk_case[every_window_mode]",
        "selection_blind_to_the_last_kept": "test_prefill_topk_case[fast_path_heads]",
        "fused_finish_trusts_a_short_row": "test_prefill_topk_case[fused_rows_the_sample_misjudges_are_recomputed]",
        "fused_finish_list_not_counted": "test_prefill_topk_case[fused_rows_the_sample_misjudges_are_recomputed]",
        "fused_finish_rank_one_late": "test_prefill_topk_case[fused_rows_the_sample_misjudges_are_recomputed]",
        "fused_filter_entry_a_key_late": "test_prefill_topk_case[fused_rows_the_sample_misjudges_are_recomputed]",
        "fused_mfma_counts_of_the_first_part": "test_prefill_topk_case[fused_floors_let_every_random_row_through]",
        "fused_floor_at_the_largest_sample": "test_prefill_topk_case[fused_floors_let_every_random_row_through]",
        "fused_cut_blind_to_the_sample": "test_prefill_topk_case[fused_floors_cut_by_the_samples_count_and_spread]",
        "fused_cut_without_the_samples_spread":
            "test_prefill_topk_case[fused_floors_cut_by_the_samples_count_and_spread]",
        "fused_cut_counts_every_sample": "test_prefill_topk_case[fused_floors_cut_by_the_samples_count_and_spread]",
        "fused_cut_regions_at_the_rows_first":
            "test_prefill_topk_case[fused_rows_the_sample_misjudges_are_recomputed]",
        "fused_floor_held_samples_counted_at_the_first":
            "test_prefill_topk_case[fused_groups_of_few_rows_on_the_wide_floors]",
        "fused_finish_list_entry_of_the_part_before":
            "test_prefill_topk_case[fused_rows_the_sample_misjudges_are_recomputed]",
        "fused_finish_slices_from_the_lists_start": "test_prefill_topk_case[fused_rows_kept_past_the_finish_buffer]",
        "fused_finish_apart_without_the_last_part": "test_prefill_topk_case[fast_path_heads]",
        "fused_finish_region_of_the_next_part":
            "test_prefill_topk_case[fused_rows_the_sample_misjudges_are_recomputed]",
        "fused_finish_recomputes_the_next_part": "test_prefill_topk_case[fused_rows_whose_best_keys_crowd_one_part]",
    },
}

# The same for a SET_CMDS set: the arguments that replace its command's --cases for a plant that only the check's
# fixed cases (layouts, untrusted values, lengths per row: they follow the sampled design) catch, so that its
# planted run reaches them after one sampled case. A plant they miss still runs the set's whole command.
FIRST_ARGS = {
    "gfx950_decode": dict.fromkeys(("per_row_lengths_ignored", "row_length_of_another_row",
                                    "out_of_range_block_clamped", "out_of_range_block_clamped_bs1"), "--cases 1"),
}

SUITES = {
    "emu": {"targets": ["gfx950", "emu-gfx950"], "device": "emu:gfx950"},
    "cuda": {"targets": ["sm_90a"], "device": "cuda:0"},
}


def apply(src: Path, plant: Plant) -> None:
    path = src / plant.file
    text = path.read_text()
    count = text.count(plant.old)
    if count != 1:
        raise SystemExit(f"plant {plant.name}: expected its text once in {plant.file}, found it {count} times")
    path.write_text(text.replace(plant.old, plant.new))


def build_planted(d: Path, clean: Path, plants: list[Plant], targets: list[str],
                  kernels: tuple | None = None) -> subprocess.CompletedProcess:
    """A copy of hsaco_src/ with `plants` applied, built into the package copy d/pkg. A planted build starts from
    the clean build's objects (clean/pkg), the clean build from the checkout's own where there is one, so
    build.py recompiles only the kernels whose sources differ from what it starts from. `kernels` (catalog keys,
    for the emulator): the emulated twins of these alone, and the emulator loads no other kernel."""
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(ROOT / "hsaco_src", d / "src")
    for plant in plants:
        apply(d / "src", plant)
    pkg = PackageCopy(d / "pkg")
    if plants:
        pkg.seed(PackageCopy(clean / "pkg").kernels)
    else:
        pkg.seed()
    only = ["--emu-kernels", ",".join(kernels)] if kernels and "emu-gfx950" in targets else []
    if plants and "emu-gfx950" in targets:
        # The emulated suite runs the emulated twins alone: a planted tree rebuilds only those (their gfx950
        # ISA compiles were most of a plant's build), over the clean gfx950 objects, which nothing runs.
        return pkg.refresh().build([], src=d / "src", extra=["--emu-only", *only])
    b = pkg.refresh().build(targets, src=d / "src")
    if b.returncode or not only:
        return b
    return pkg.build([], src=d / "src", extra=["--emu-only", *only])  # the clean tree's suite proves the list


def with_cases(argv: list[str], args: str) -> list[str]:
    """argv with its --cases option (it must have one) replaced by `args`."""
    at = argv.index("--cases")
    return argv[:at] + args.split() + argv[at + 2:]


def run_suite(pkg: PackageCopy, suite: dict, cmd: list[str], timeout: int) -> tuple[bool, str]:
    try:
        p = pkg.run(["-m", "hipindexer.cli", *cmd, "--device", suite["device"], "--json"],
                    emulated=suite["device"].startswith("emu"), timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout} s"
    _no_twin(p, " ".join(cmd))
    try:
        doc = json.loads(p.stdout)
        failed = [c for c in doc["cases"] if c["status"] == "failed"]
        runs = sum(t["run"] for t in doc["summary"].values())
        first = f": {failed[0]['case']}: {failed[0]['message']}" if failed else ""
        return p.returncode == 0 and not failed, f"{len(failed)}/{runs} cases failed{first}"
    except (json.JSONDecodeError, KeyError):
        return False, f"suite crashed (exit {p.returncode}): {(p.stderr or p.stdout).strip().splitlines()[-1:]}"


def run_tests(pkg: PackageCopy, suite: dict, tests: str, timeout: int, first: str | None = None) -> tuple[bool, str]:
    """pytest on `tests` with the package copy's hipindexer first on the path (tests/emu/emu_harness.py's
    run_child_pytest does the same for the tests): (passed, the first failure or the count). `first`, a test of
    that file (FIRST_CASES), runs alone before it: its failure is the suite's, and only if it passes does the
    whole file run."""
    if first:
        rc, how = _pytest(pkg, suite, f"{ROOT / tests}::{first}", timeout)
        if rc in (4, 5):  # pytest found no such test: a stale FIRST_CASES entry must not pass for a catch
            raise SystemExit(f"FIRST_CASES names {first}, which {tests} does not have ({how})")
        if rc != 0:
            return False, how
        rc, how = _pytest(pkg, suite, ROOT / tests, timeout)
        return rc == 0, how + ("" if rc == 0 else f" (its first case, {first}, passed)")
    rc, how = _pytest(pkg, suite, ROOT / tests, timeout)
    return rc == 0, how


def _pytest(pkg: PackageCopy, suite: dict, target, timeout: int) -> tuple[int, str]:
    """pytest -x on `target` (a file or one test of it): (its exit status, the first failure or the count)."""
    emu = ["-p", "emu_session"] if suite["device"].startswith("emu") else []
    pythonpath = shlex.join([str(pkg.root), str(ROOT / "tests"), str(ROOT / "tests" / "emu"), str(ROOT)])
    argv = ["-m", "pytest", "-q", "-x", *emu, "-p", "no:cacheprovider", "-m", "", "--rootdir", ROOT,
            "-c", ROOT / "pyproject.toml", "-o", f"pythonpath={pythonpath}", target]
    try:
        p = pkg.run(argv, ROOT / "tests" / "emu", emulated=bool(emu), timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout} s"
    _no_twin(p, target)
    lines = p.stdout.strip().splitlines()
    failed = [line.split("::", 1)[-1] for line in lines if line.startswith(("FAILED", "ERROR"))]
    return p.returncode, (f"failed: {failed[0]}" if failed else (lines[-1] if lines else f"exit {p.returncode}"))


def _no_twin(p: subprocess.CompletedProcess, what) -> None:
    """A run that launched a kernel its tree has no emulated twin of (outside its set's SET_KERNELS) proves
    nothing either way: it stops the harness instead of counting as a catch."""
    if NO_TWIN in p.stdout or NO_TWIN in p.stderr:
        raise SystemExit(f"{what}: a kernel outside the set's SET_KERNELS was launched ({NO_TWIN}); add it there")


def run_plant(plant, root: Path, spec: dict, plant_set: str, cmd: str, timeout: int, build_only: bool,
              prebuilt: bool) -> dict:
    """Build one plant's tree (None: the unmodified one) under root and run the set's suite on it: its result."""
    name = plant.name if plant else "(none: the suite must pass)"
    d = root / (plant.name if plant else "clean")
    t0 = time.time()
    b = None if prebuilt else build_planted(d, root / "clean", [plant] if plant else [], spec["targets"],
                                            SET_KERNELS.get(plant_set))
    pkg = PackageCopy(d / "pkg")
    if b is not None and b.returncode != 0:
        r = {"plant": name, "caught": bool(plant), "how": "build failed: " + (b.stderr.strip().splitlines() or ["?"])[-1]}
    elif build_only:
        r = {"plant": name, "caught": None, "how": "built"}
    elif not (pkg.kernels / "manifest.json").is_file():
        raise SystemExit(f"--prebuilt: no build of {name} in {d}")
    else:
        argv = cmd.split() + (["--fail-fast"] if plant else [])  # one failed case catches a plant
        first = FIRST_CASES.get(plant_set, {}).get(plant.name) if plant else None
        # (a --cmd of the caller's own without --cases runs whole)
        first_args = FIRST_ARGS.get(plant_set, {}).get(plant.name) if plant and "--cases" in argv else None
        pkg.refresh()
        if plant_set in SET_TESTS:
            ok, how = run_tests(pkg, spec, SET_TESTS[plant_set], timeout, first)
        elif first_args:
            ok, how = run_suite(pkg, spec, with_cases(argv, first_args), timeout)
            if ok:
                ok, how = run_suite(pkg, spec, argv, timeout)
                how += f" (its first run, with {first_args}, passed)"
        else:
            ok, how = run_suite(pkg, spec, argv, timeout)
        r = {"plant": name, "caught": not ok, "how": how}
    r["seconds"] = round(time.time() - t0, 1)
    verdict = {True: "CAUGHT", False: "missed", None: "built"}[r["caught"]]
    click.echo(f"{name}: {verdict} ({r['how']})", err=True)
    return r


@click.command()
@click.option("--suite", type=click.Choice(sorted(SUITES)), required=True)
@click.option("--set", "plant_set", type=click.Choice(sorted(PLANTS)), default="generic", show_default=True)
@click.option("--plants", default=None, help="Comma-separated plant names (default: the whole set).")
@click.option("--cmd", default=None,
              help="The hipindexer command that is the suite, a device check (default: the set's own in SET_CMDS; "
                   "planted runs add --fail-fast).")
@click.option("--timeout", default=900, show_default=True)
@click.option("--builds", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep each plant's build in DIR/<plant>/ (default: a temporary folder).")
@click.option("--build-only", is_flag=True, help="Build every plant into --builds and run no suite.")
@click.option("--prebuilt", is_flag=True,
              help="Run the suites on the builds already in --builds (made by --build-only, e.g. on a machine "
                   "with the compilers); build nothing.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Plants built and run at once once the unmodified tree is built, the first beside its suite "
                   "(default: 2 for --suite emu, whose plants each keep one core busy, 1 for a GPU suite).")
@click.option("--json", "as_json", is_flag=True)
def main(suite, plant_set, plants, cmd, timeout, builds, build_only, prebuilt, jobs, as_json) -> None:
    cmd = cmd or SET_CMDS.get(plant_set, "")
    if plant_set in SET_TESTS and cmd:
        raise click.UsageError(f"--set {plant_set} runs the tests of {SET_TESTS[plant_set]}; it takes no --cmd")
    chosen = [p for p in PLANTS[plant_set] if plants is None or p.name in plants.split(",")]
    spec = SUITES[suite]
    if (build_only or prebuilt) and builds is None:
        raise click.UsageError("--build-only and --prebuilt need --builds DIR")
    jobs = jobs or (2 if suite == "emu" else 1)
    with tempfile.TemporaryDirectory(prefix="hx-mutate-") as tmp:
        root = builds or Path(tmp)
        one = functools.partial(run_plant, root=root, spec=spec, plant_set=plant_set, cmd=cmd, timeout=timeout,
                                build_only=build_only, prebuilt=prebuilt)
        clean_built = not (build_only or prebuilt)
        if clean_built:  # the plants start from its objects; its suite then runs beside the first plants
            b = build_planted(root / "clean", root / "clean", [], spec["targets"], SET_KERNELS.get(plant_set))
            if b.returncode != 0:
                raise SystemExit("the unmodified tree does not build: " + (b.stderr.strip().splitlines() or ["?"])[-1])
        with ThreadPoolExecutor(max_workers=jobs) as pool:  # each plant's work is in child processes
            first = pool.submit(one, None, prebuilt=True) if clean_built else None
            results = [] if first else [one(None)]
            rest = [pool.submit(one, p) for p in chosen]
            if first:
                results.append(first.result())
            if results[0]["caught"]:
                for f in rest:
                    f.cancel()
                raise SystemExit("the unmodified kernels fail the suite; fix that first")
            results += [f.result() for f in rest]
    if build_only:
        click.echo(f"built {len(results)} trees under {builds}")
        return
    planted = results[1:]
    if as_json:
        click.echo(json.dumps(results, indent=1))
    else:
        for r in planted:
            click.echo(f"{r['plant']:28s} {'caught' if r['caught'] else 'MISSED':7s} {r['seconds']:6.1f}s  {r['how']}")
    missed = [r["plant"] for r in planted if not r["caught"]]
    click.echo(f"{len(planted) - len(missed)} of {len(planted)} plants caught" + (f"; missed: {missed}" if missed else ""))
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
