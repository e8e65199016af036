"""The sm_90a wgmma prefill fast path: planner choice, catalog entry and build resources (CPU only).

Its correctness proof is the device sweep (`hipindexer check prefill --device cuda:0`); here only
what a machine without a GPU can check.
"""
import json

import pytest

from hipindexer import catalog
from hipindexer.planner import GENERIC, TARGETS, WGMMA_FOLD_SM90, WGMMA_SM90, plan_prefill
from hipindexer.runtime.module import DEFAULT_MANIFEST

H200, MI355X = TARGETS["sm_90a"], TARGETS["gfx950"]


@pytest.mark.parametrize("H", [32, 64])
def test_sm90a_h32_h64_d128_take_a_tensor_core_kernel_by_default(H):
    p = plan_prefill(4096, 32768, H, 128, H200, kernel=WGMMA_SM90.key)
    assert p.kernel == WGMMA_SM90.key and p.variant == {"HX_HEADS": H} and p.accumulation == "fp8_tc"
    assert plan_prefill(4096, 32768, H, 128, H200).kernel == (WGMMA_SM90.key if H == 32 else WGMMA_FOLD_SM90.key)
    assert plan_prefill(4096, 32768, H, 128, H200, accumulation="fp32").kernel == GENERIC.key
    assert p.rows_per_block * H == 256 and p.block == 640 and p.tile == 128


def test_the_fold_build_serves_only_h64_d128():
    p = plan_prefill(4096, 32768, 64, 128, H200, kernel=WGMMA_FOLD_SM90.key)
    assert p.kernel == "mqa_logits_wgmma_fold" and p.variant == {"HX_HEADS": 64} and p.rows_per_block == 4
    assert plan_prefill(4096, 32768, 64, 128, H200).kernel == WGMMA_FOLD_SM90.key
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
    assert (fold.source, fold.symbol, fold.variants, fold.defines) == (k.source, k.symbol, ({"HX_HEADS": 64},),
                                                                        (("HX_FOLD", 1), ("HX_MATH_WGS", 2)))
    assert fold.block == WGMMA_FOLD_SM90.block == 384  # one load/fill warpgroup + two math warpgroups
    assert k.smem < fold.smem <= 227 << 10  # the fold's extra B rows and partial sums
    peak = catalog.KERNEL["wgmma_peak"]
    assert peak.targets == ("sm_90a",) and peak.params == "PeakParams"


def _sm90a_entries():
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip("no built kernels")
    entries = [e for e in json.loads(DEFAULT_MANIFEST.read_text())["kernels"]
               if e["target"] == "sm_90a" and e["name"] in ("mqa_logits_wgmma", "mqa_logits_wgmma_fold", "wgmma_peak")]
    if not entries:
        pytest.skip("the manifest has no sm_90a build")
    return entries


def test_built_sm90a_kernels_do_not_spill_and_carry_their_shared_memory():
    entries = _sm90a_entries()
    assert {e["variant_key"] for e in entries} >= {"mqa_logits_wgmma.HX_HEADS-32", "mqa_logits_wgmma.HX_HEADS-64",
                                                   "mqa_logits_wgmma_fold.HX_HEADS-64"}
    for e in entries:
        r = e["resources"]
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, e["variant_key"]
        if e["name"].startswith("mqa_logits_wgmma"):
            assert e["dynamic_smem"] == catalog.KERNEL[e["name"]].smem
