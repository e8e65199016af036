"""The gfx950 decode fast path (hsaco_src/gfx950/paged_mqa_logits_mfma.hip, two builds): the planner's choice of
it and of its grid, the emulated sweep at its shapes, the static goals read from its ISA report, and its
planted bugs caught."""
import json
from pathlib import Path

import pytest

from hipindexer.plan import decode as decode_plan
from hipindexer.plan.decode import GENERIC_DECODE, WAVES_PER_SIMD, plan_decode
from hipindexer.plan import TARGETS
from tools.support import isa_lint, isa_report, roofline

import emu_harness as H
import mutation_runs

ROOT = Path(__file__).resolve().parents[1]

PAGED, BS1 = "paged_mqa_logits_mfma", "paged_mqa_logits_mfma_bs1"
GFX = TARGETS["gfx950"]


def test_the_planner_picks_them_for_every_fast_shape_and_only_those():
    for H_ in (32, 64):
        for bs, shuf in [(64, True), (64, False), (16, True), (16, False), (32, False), (128, True)]:
            for acc in ("fast", "fp32"):
                p = plan_decode(4, 6, H_, 128, bs, 32768, GFX, preshuffle=shuf, accumulation=acc)
                assert p.kernel == PAGED and p.variant == {"HX_HEADS": H_} and p.accumulation == "fp32", p
        p = plan_decode(4, 6, H_, 128, 1, 32768, GFX)
        assert p.kernel == BS1 and p.variant == {"HX_HEADS": H_}
        for bs in (2, 7, 48, 100):  # neither a power of two >= 16 nor 1
            assert plan_decode(4, 6, H_, 128, bs, 32768, GFX).kernel == GENERIC_DECODE.key
    for H_, D in [(16, 128), (32, 64), (128, 128), (64, 256)]:
        assert plan_decode(4, 6, H_, D, 64, 32768, GFX).kernel == GENERIC_DECODE.key
    assert plan_decode(4, 6, 64, 128, 64, 32768, TARGETS["sm_90a"]).kernel != PAGED  # sm_90a has its own


@pytest.mark.parametrize("H_", [32, 64])
def test_the_grid_aims_at_resident_waves_per_simd_from_host_shapes(H_):
    spec = decode_plan.DECODE.by_key[PAGED]
    waves = min(WAVES_PER_SIMD, spec.resident_waves_per_simd(H_))
    assert waves >= 2                                             # the occupancy every variant keeps
    want_units = int(waves * 4 * GFX.num_cus / spec.waves)
    per_seq = 131072 // 64 // spec.waves  # units that still give every wave of each a page
    for B in (1, 4, 16, 64):
        p = plan_decode(B, 6, H_, 128, 64, 131072, GFX, preshuffle=True)  # long: the grid is the target
        assert abs(p.units - min(want_units, B * per_seq)) <= B / 2 + 1, (B, p.units, want_units)
        assert p.units == B * p.split_kv and p.grid == (p.units, 1, 1)
    # short contexts: no more units than give each of a unit's waves a page of a max_model_len sequence
    p = plan_decode(2, 2, H_, 128, 64, 1000, GFX)
    assert p.split_kv == -(-(-(-1000 // 64)) // spec.waves)
    assert plan_decode(1024, 1, H_, 128, 64, 131072, GFX).split_kv == 1
    # an explicit split is honoured exactly
    assert plan_decode(3, 2, H_, 128, 64, 1000, GFX, split_kv=7).units == 21


@pytest.mark.toolchain
def test_the_planners_occupancy_figures_match_the_built_code_objects(emu_kernels):
    """resident (units a CU holds) is the smaller of what the VGPRs (clang's occupancy) and the LDS allow."""
    doc = json.loads((emu_kernels / "manifest.json").read_text())
    seen = 0
    for e in doc["kernels"]:
        if e["target"] != "gfx950" or e["name"] not in (PAGED, BS1):
            continue
        spec, H_ = decode_plan.DECODE.by_key[e["name"]], e["variant"]["HX_HEADS"]
        res = e["resources"]
        units = min(res["occupancy"] * 4 // spec.waves, (160 * 1024) // res["lds"])
        assert dict(spec.resident)[H_] == units, (e["variant_key"], res["occupancy"], res["lds"], spec.resident)
        seen += 1
    assert seen == 4


@pytest.mark.toolchain
def test_quick_sweep_at_their_shapes_passes_on_the_emulator(emu_kernels):
    p = H.run_cli(emu_kernels, "check", "decode", "--device", "emu:gfx950", "--quick", "--heads", "32,64", "--dims",
                  "128", "--json", timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(p.stdout)
    summary = doc["summary"]["decode"]
    assert summary["failed"] == 0 and summary["run"] >= 40, summary
    ran = {c["kernel"] for c in doc["cases"] if c["kernel"]}
    assert ran == {PAGED, BS1}, ran
    names = {c["case"] for c in doc["cases"]}
    assert {"layouts_block_flat_vs_preshuffled", "untrusted_device_values_H32_D128_bs16",
            "untrusted_device_values_H64_D128_bs1", "lengths_per_row_H32_D128_bs16",
            "lengths_per_row_H64_D128_bs1"} <= names


@pytest.fixture(scope="module")
def isa(emu_kernels):
    return {r.source: r for r in isa_report.manifest_reports(emu_kernels / "manifest.json", names=(PAGED, BS1))}


@pytest.mark.toolchain
@pytest.mark.parametrize("key", [PAGED, BS1])
@pytest.mark.parametrize("heads", [32, 64])
def test_static_goals_from_the_isa_report(isa, key, heads):
    """No scratch; >= 2 waves per SIMD resident; >= 46 KiB of vector loads in flight per CU at the planned
    occupancy (8 TB/s over 256 CUs with ~1.5 us of loaded latency); each page's keys in 16-byte loads; at
    H = 64, VALU cycles <= MFMA cycles per page once 6 or more rows share it."""
    r = isa[f"{key}.HX_HEADS-{heads}"]
    f = r.decode
    assert r.resources["scratch"] == 0 and f is not None, r.resources
    assert f.waves_per_simd_resident >= 2 and f.waves_per_simd_planned >= 2, f
    assert f.inflight_bytes_per_cu >= 46 * 1024, f
    assert f.key_bytes_per_page == 64 * 128, f                   # 8 x 1 KiB: each key's 128 bytes, 16 a lane
    assert f.row_mfma_cycles == heads // 16 * 4 * 32, f        # H / 16 tiles x 4 groups of 16x16x128
    if heads == 64:
        assert f.valu_over_mfma(6) <= 1 and f.valu_over_mfma(8) <= 1, (f.valu_over_mfma(6), f.valu_over_mfma(8))
    assert f.row_valu_cycles <= f.row_mfma_cycles * 1.0 + 16, f  # the rows' math itself: within a few ops


@pytest.mark.toolchain
def test_isa_lint_is_clean_for_every_build_of_the_unit(emu_kernels):
    """Both builds of the logits kernel and the fused top-k kernel, each with the unit's text (decode_unit.h), so
    the lint sees the 16-byte loads the unit asks for."""
    lint = isa_lint
    logits = ROOT / "hsaco_src" / "gfx950" / "paged_mqa_logits_mfma.hip"
    fused = ROOT / "hsaco_src" / "gfx950" / "paged_mqa_topk_mfma.hip"
    builds = [(logits, g) for g in (0, 1)] + [(fused, 0)]
    for src, gather in builds:
        for heads in (32, 64):
            defines = ["HX_BLOCK=256", f"HX_HEADS={heads}", f"HX_GATHER={gather}"]
            text = lint.source_text(src, defines)
            assert "hx_buffer_load_b128(" in text and ("hx_global_load_b128(k" in text) == bool(gather)
            assert lint.lint(lint.compile_asm(src, defines), text) == [], (src.name, defines)


@pytest.mark.toolchain
@pytest.mark.mutation("gfx950_decode")
def test_every_planted_bug_in_the_decode_kernels_is_caught(emu_kernels):
    """tools/support/mutate.py's "gfx950_decode" set (the decode set's bugs at their place in these kernels, a
    wrong lane half in the head reduction, the preshuffle strides swapped, and the kernels' own) against its
    suite: the first cases of the quick sample at H 32, 64 and D 128 plus the layout, untrusted-value and
    per-row length checks."""
    clean, planted, p = mutation_runs.results("gfx950_decode")
    assert not clean["caught"], clean
    names = {r["plant"] for r in planted}
    assert {"wrong_lane_half_in_head_reduction", "preshuffle_strides_swapped", "next_n_blind_bound",
            "dead_ragged_row_computed", "out_of_range_block_clamped", "per_row_lengths_ignored",
            "row_length_of_another_row"} <= names
    assert all(r["caught"] for r in planted), [r for r in planted if not r["caught"]]
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.toolchain
def test_estimates_of_the_issue_rows_from_the_isa_report(isa):
    """The calibrated roofline's estimates at the issue's rows, from these kernels' ISA figures (estimates, not
    measurements): within the goals at H = 32, B = 64 and 16 and at H = 64, B = 64 (B = 1, next_n = 2 misses
    its 4 us: the model's fixed costs of a one-sequence launch; docs/gfx950.md)."""
    from dataclasses import asdict
    roof = roofline
    rows = roof.goal_estimates({k: asdict(r.decode) for k, r in isa.items()})
    assert len(rows) == 4
    for o in rows:
        if o["B"] > 1:
            assert o["estimate_us"] <= o["goal_us"], o
        assert o["estimate_us"] >= max(o["memory_floor_us"], o["compute_floor_us"]), o
