"""The sm_90a wgmma prefill fast path: planner choice, catalog entry and build resources (CPU only).

Its correctness proof is the device sweep (`hipindexer check prefill --device cuda:0`); here only
what a machine without a GPU can check.
"""
import json
import shutil
from pathlib import Path

import pytest

from hipindexer import catalog
from hipindexer.plan import TARGETS, plan_prefill
from hipindexer.plan.prefill import GENERIC, WGMMA_FOLD_SM90, WGMMA_SM90
from hipindexer.runtime.module import DEFAULT_MANIFEST

H200, MI355X = TARGETS["sm_90a"], TARGETS["gfx950"]


@pytest.mark.parametrize("H", [32, 64])
def test_sm90a_h32_h64_d128_take_the_wgmma_kernel_by_name_and_by_default_at_h32(H):
    p = plan_prefill(4096, 32768, H, 128, H200, kernel=WGMMA_SM90.key)
    assert p.kernel == WGMMA_SM90.key and p.variant == {"HX_HEADS": H}
    assert plan_prefill(4096, 32768, H, 128, H200).kernel == (WGMMA_SM90.key if H == 32 else WGMMA_FOLD_SM90.key)
    assert p.accumulation == "fp8_tc"
    assert plan_prefill(4096, 32768, H, 128, H200, accumulation="fp32").kernel == GENERIC.key
    assert p.rows_per_block * H == 256 and p.block == 640 and p.tile == 128


def test_the_fold_kernel_serves_only_h64_d128_where_it_is_the_default():
    p = plan_prefill(4096, 32768, 64, 128, H200, kernel=WGMMA_FOLD_SM90.key)
    assert p.kernel == "mqa_logits_wgmma_fold" and p.variant == {"HX_HEADS": 64} and p.rows_per_block == 4
    assert plan_prefill(4096, 32768, 64, 128, H200) == p
    with pytest.raises(ValueError, match=r"kernel: 'mqa_logits_wgmma_fold' serves \(H, D\) in \[\(64, 128\)\]"):
        plan_prefill(4096, 32768, 32, 128, H200, kernel=WGMMA_FOLD_SM90.key)


@pytest.mark.parametrize("H,D", [(16, 128), (64, 64), (32, 256)])
def test_everything_else_on_sm90a_stays_generic(H, D):
    assert plan_prefill(100, 1000, H, D, H200).kernel == GENERIC.key


@pytest.mark.parametrize("H", [32, 64])
def test_gfx950_never_gets_the_sm90a_kernel(H):
    assert plan_prefill(100, 1000, H, 128, MI355X).kernel != WGMMA_SM90.key


@pytest.mark.parametrize("M,N", [(1, 1), (17, 76), (128, 32768), (4096, 32768), (1024, 131072), (8192, 8192),
                                 (20000, 300000)])
@pytest.mark.parametrize("H", [32, 64])
def test_persistent_plan_fits_the_sms_and_covers_every_row(M, N, H):
    p = plan_prefill(M, N, H, 128, H200, kernel=WGMMA_SM90.key)
    assert p.grid[1:] == (1, 1) and 1 <= p.grid[0] <= H200.num_cus and p.grid[0] <= p.units
    assert p.row_blocks * p.rows_per_block >= M > (p.row_blocks - 1) * p.rows_per_block
    assert 1 <= p.split <= -(-N // p.tile)


def test_small_m_is_split_to_fill_nearly_every_sm():
    for H in (32, 64):
        p = plan_prefill(128, 32768, H, 128, H200, kernel=WGMMA_SM90.key)
        assert p.split > 1 and 0.95 * H200.num_cus <= p.units


def test_rows_per_block_is_fixed_by_the_heads():
    assert plan_prefill(64, 64, 32, 128, H200, rows_per_block=8, kernel=WGMMA_SM90.key).rows_per_block == 8
    with pytest.raises(ValueError, match="rows_per_block: mqa_logits_wgmma holds exactly 4 rows"):
        plan_prefill(64, 64, 64, 128, H200, rows_per_block=2, kernel=WGMMA_SM90.key)


def test_catalog_declares_the_kernel_and_the_peak_loop_for_sm90a_only():
    k = catalog.KERNEL["mqa_logits_wgmma"]
    assert k.targets == ("sm_90a",) and k.params == "PrefillParams" and k.block == WGMMA_SM90.block
    assert sorted(v["HX_HEADS"] for v in k.variants) == [32, 64]
    assert 48 << 10 < k.smem <= 227 << 10
    fold = catalog.KERNEL["mqa_logits_wgmma_fold"]
    assert (fold.source, fold.symbol, fold.variants, fold.defines) == (
        "sm90a/mqa_logits_wgmma_fold.hip", "hx_mqa_logits_wgmma_fold", ({"HX_HEADS": 64},), ())
    assert fold.block == WGMMA_FOLD_SM90.block == 384  # one load/fill warpgroup + two math warpgroups
    assert k.smem < fold.smem <= 227 << 10  # the fold's extra B rows and partial sums
    peak = catalog.KERNEL["wgmma_peak"]
    assert peak.targets == ("sm_90a",) and peak.params == "PeakParams"


def _sm90a_entries():
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip("no built kernels")
    entries = [e for e in json.loads(DEFAULT_MANIFEST.read_text())["kernels"]
               if e["target"] == "sm_90a" and e["name"] in ("mqa_logits_wgmma", "mqa_logits_wgmma_fold", "wgmma_peak",
                                                             "mqa_topk_wgmma", "mqa_topk_wgmma_fold")]
    if not entries:
        pytest.skip("the manifest has no sm_90a build")
    return entries


# The H = 32 filter build spills a few words ptxas keeps for the appends its math warpgroups make: their regions
# and count starts, read from the floors' table at a unit's start and flush, outside the key loop
# (docs/benchmarks.md, "`fp8_mqa_topk`: the floors' cut on sm_90a": a build whose spills sat inside the loop was 5%
# slower); bounded, so that growth fails. The H = 64 build leaves the appends to its filter warps and spills nothing.
FILTER_SPILL_BYTES = {"mqa_topk_wgmma_fold.HX_HEADS-64": 0, "mqa_topk_wgmma.HX_HEADS-32": 20}


def test_built_sm90a_kernels_do_not_spill_and_carry_their_shared_memory():
    entries = _sm90a_entries()
    assert {e["variant_key"] for e in entries} >= {"mqa_logits_wgmma.HX_HEADS-32", "mqa_logits_wgmma.HX_HEADS-64",
                                                   "mqa_logits_wgmma_fold.HX_HEADS-64", *FILTER_SPILL_BYTES}
    for e in entries:
        r = e["resources"]
        most = FILTER_SPILL_BYTES.get(e["variant_key"], 0)
        assert r["spill_stores"] <= most and r["spill_loads"] <= 2 * most, e["variant_key"]
        if e["name"].startswith(("mqa_logits_wgmma", "mqa_topk_wgmma")):
            assert e["dynamic_smem"] == catalog.KERNEL[e["name"]].smem


# Every hopper.h primitive at least once, so that ptxas checks the PTX of those no shipped kernel uses yet (bulk
# and tensor copies, expect-tx, every wgmma shape), and the turn-taking ones the stage variants plant into hopper.h
# (tools/measure/stage_variants.py TURN_PRIMITIVES, planted here the same way). Assembled, never run.
HOPPER_PROBE = r"""
#include "hx_params.h"
#include "hopper.h"

HX_KERNEL __launch_bounds__(384, 1) void hx_hopper_probe(const HX_GRID_CONSTANT PeakParams p) {
  __shared__ __align__(1024) hx_u8 tile[32 * 1024];
  __shared__ __align__(8) hx_u64 bars[8];
  const hx_u32 tid = hx_thread_x(), lane = hx_lane_reread(), wg = (hx_u32)hx_uniform_i32((hx_i32)(tid / 128));
  const hx_u32 t = hx_smem_u32(tile), b = hx_smem_u32(bars), tx = b + 32;
  const hx_u8* src = (const hx_u8*)p.out;
  const hx_ring<2> ring{b, b + 16};
  if (tid == 0) {
    ring.init(1, 256);
    hx_mbar_init(tx, 1);
    hx_mbar_init_fence();
  }
  hx_barrier();
  if (wg == 0) {
    hx_setmaxnreg_dec<40>();
    if (tid >= 32) return;
    ring.wait_empty(0);
    hx_copy_tile_sw128<16>(t, src, lane);
    hx_copy_tile_sw128_rows<16, 2>(t + 2048, src, 3, p.iters, lane);
    hx_cp_async16(t + 4096 + 16 * lane, src + 16 * lane, 16);
    hx_cp_async16_at<32>(t + 4096, src);
    hx_cp_async4(t + 8192 + 4 * lane, src + 4 * lane, 4);
    hx_cp_async4_at<8, 16>(t + 8192, src);
    hx_cp_async_commit();
    hx_cp_async_wait<0>();
    hx_fence_proxy_async();
    hx_cp_async_arrive(ring.full_at(ring.slot(0)));
    ring.arrive_full(0);
    if (lane == 0) {
      hx_tma_prefetch_map(src);
      ring.arrive_full_expect_tx(1, 3072);
      hx_mbar_expect_tx(tx, 16);
      hx_mbar_arrive_expect_tx(tx, 16);
      hx_bulk_g2s(t + 16384, src, 1024, ring.full_at(1));
      hx_tma_load_2d(t + 17408, src, 0, (hx_i32)lane, ring.full_at(1));
      hx_tma_load_3d(t + 18432, src, 0, 1, (hx_i32)lane, ring.full_at(1));
      hx_tma_load_5d(t + 20480, src, 0, 1, 2, 3, (hx_i32)lane, ring.full_at(1));
      hx_bulk_g2s(t + 19456, src, 16, tx);
    }
    if (hx_mbar_test(tx, 0) && ring.test_empty(1)) hx_mbar_wait(tx, 1);
    return;
  }
  hx_setmaxnreg_inc<232>();
  const hx_u32 w = wg - 1;
  ring.wait_full(0);
  hx_ring_pos<2> at;
  ring.wait_full(at);
  ring.wait_empty(at);
  ring.arrive_full(at);
  float acc64[64], acc68[68], acc128[128];
  const hx_u64 d = hx_wgmma_desc_sw128(t);
  hx_fence_regs(acc64);
  hx_wgmma_fence();
  hx_wgmma_k128(acc64, d, d + 64);
  hx_wgmma_commit();
  hx_wgmma_wait<0>();
  hx_fence_regs(acc64);
  hx_wgmma_fence();
  hx_wgmma_k128(acc68, d, d + 64);
  hx_wgmma_commit();
  hx_wgmma_wait<0>();
  hx_fence_regs(acc68);
  hx_wgmma_fence();
  hx_wgmma_k32(acc128, d, d + 64, 0);
  hx_wgmma_commit();
  hx_wgmma_wait<0>();
  hx_fence_regs(acc128);
  hx_wgmma_fence();
  hx_wgmma_k128(acc64, hx_wgmma_desc_plain(t, 128, 1024), d + 64, 16u);
  hx_wgmma_commit();
  hx_wgmma_wait<0>();
  hx_fence_regs(acc64);
  float s = acc68[67] + acc128[127];
  hx_static_for<64>([&](auto i) { s += acc64[i]; });
  ring.arrive_empty(at);
  at.next();
  ring.arrive_empty(0);
  hx_bar_sync(1, 256);
  hx_bar_arrive(2, 256);
  hx_turn_start(3, w);
  hx_turn_wait(3, w);
  hx_turn_pass(3, w);
  hx_turn_end(3, w);
  hx_turn_wait(5, w, 256);
  float x[4];
  hx_e4m3x4_to_f32((hx_u32)hx_shfl_xor_i32((hx_i32)lane, 1), x);
  const float y[4] = {s, x[1], x[2], hx_shfl_xor(x[3], 2)};
  hx_store_f32_if(at.phase == 0, p.out + tid, hx_bits_to_f32(hx_f32_to_e4m3x4(y)));
}
"""


@pytest.mark.toolchain
def test_every_hopper_primitive_assembles_for_sm90a(tmp_path):
    from hxbuild.compile import compile_job
    from hxbuild.hipindexer_modules import catalog
    from hxbuild.jobs import Job, flags_for, source_hash
    from hxbuild.process import ToolchainError
    from hxbuild.toolchains import find_nvidia
    try:
        tc = find_nvidia()
    except ToolchainError as e:
        pytest.skip(str(e))
    from tools.measure import stage_variants as variants
    from tools.support import mutate
    root = Path(__file__).resolve().parents[1]
    src, work, out = tmp_path / "src", tmp_path / "work", tmp_path / "out"
    shutil.copytree(root / "hsaco_src", src)
    mutate.apply(src, variants.TURN_PRIMITIVES)
    (src / "sm90a" / "hopper_probe.hip").write_text(HOPPER_PROBE)
    (work / "include").mkdir(parents=True)
    header = catalog.header_text()
    (work / "include" / "hx_params.h").write_text(header)
    k = catalog.Kernel("hopper_probe", "sm90a/hopper_probe.hip", "hx_hopper_probe", "PeakParams", block=384,
                       targets=("sm_90a",))
    flags = flags_for("sm_90a", tc.mode, k, {})
    source = src / k.source
    job = Job(k, "sm_90a", {}, k.key, flags, source_hash(source, src, header, flags), source)
    entry = compile_job(job, tc, src, work, out)  # raises on a ptxas error or a serialised wgmma
    assert entry["resources"]["spill_stores"] == 0


def test_sass_mix_takes_the_innermost_loop_with_the_most_mmas():
    from tools.support import sass_mix as mix
    lines = ["        Function : k"]
    code = [(0x00, "MOV R1, R2"), (0x10, "QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], RZ, !UPT"),
            (0x20, "FFMA R3, R4, R5, R3"), (0x30, "@!P0 BRA 0x10"),  # inner loop: 1 QGMMA, 1 FFMA
            (0x40, "LDS R6, [R7]"), (0x50, "@P1 BRA 0x0"),          # outer loop around it
            (0x60, "@!P2 BRA 0x60"), (0x70, "EXIT")]                 # a wait loop with no MMA
    lines += [f"        /*{a:04x}*/                   {t} ;" for a, t in code]
    m = mix.mix(mix.parse("\n".join(lines))["k"])
    assert m["loop"] == ["0x10", "0x30"] and m["mma_shapes"] == ["QGMMA.64x128x32.F32.E4M3.E4M3"]
    assert m["counts"] == {"QGMMA": 1, "FFMA": 1, "BRANCH": 1, "TOTAL": 3}
    assert m["kernel_qgmma"] == 1 and m["kernel_local_memory"] == 0
