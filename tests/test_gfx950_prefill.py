"""The gfx950 prefill fast path (hsaco_src/gfx950/mqa_logits_mfma.hip): the emulated sweep with it in the
plan, its forced corner cases, the static goals read from its ISA report, and a planted-bug subset."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hipindexer.plan import TARGETS, plan_prefill
from tools.support import isa_lint, isa_report, roofline

import emu_harness as H
import mutation_runs

ROOT = Path(__file__).resolve().parents[1]

KERNEL = "mqa_logits_mfma"


def test_the_planner_picks_it_for_every_fast_shape_and_only_those():
    gfx = TARGETS["gfx950"]
    for h in (32, 64):
        for m, n in [(1, 1), (1, 113), (17, 76), (64, 128), (61, 256), (4096, 32768), (1024, 131072)]:
            p = plan_prefill(m, n, h, 128, gfx)
            assert p.kernel == KERNEL and p.variant == {"HX_HEADS": h} and p.rows_per_block == 8, p
            assert p.grid == (p.row_blocks, p.split, 1) and p.split <= max(1, -(-n // 32) // 8)
    for h, d in [(16, 128), (32, 64), (64, 64), (128, 128)]:
        assert plan_prefill(61, 256, h, d, gfx).kernel == "mqa_logits_generic"
    # a small M still fills the machine through the key split
    p = plan_prefill(64, 32768, 64, 128, gfx)
    assert p.row_blocks * p.split >= 2 * gfx.num_cus


@pytest.mark.toolchain
def test_quick_sweep_with_the_mfma_kernel_passes_on_the_emulator(emu_kernels):
    # --kernel forces it, so a planner change cannot quietly route the sweep elsewhere
    for forced in ([], ["--kernel", KERNEL]):
        p = H.run_cli(emu_kernels, "check", "prefill", "--device", "emu:gfx950", "--quick", "--heads", "32,64",
                      "--dims", "128", "--json", *forced)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        summary = json.loads(p.stdout)["summary"]["prefill"]
        assert summary["failed"] == 0 and summary["run"] >= 100, summary


@pytest.mark.toolchain
def test_forced_chunks_splits_orders_and_strides_on_the_emulator(emu_kernels):
    p = H.run_child_pytest(emu_kernels, "tests/emu/mfma_cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert " passed" in p.stdout and " failed" not in p.stdout


@pytest.fixture(scope="module")
def isa(emu_kernels):
    reports = isa_report.manifest_reports(emu_kernels / "manifest.json", names=(KERNEL, "mqa_topk_mfma"))
    return {r.source: r for r in reports}


@pytest.mark.toolchain
@pytest.mark.parametrize("heads", [32, 64])
def test_static_goals_from_the_isa_report(isa, emu_kernels, heads):
    """No scratch, >= 2 waves/SIMD, <= 256 VGPRs, >= 4 rows per K load, VALU <= MFMA cycles per tile,
    16-byte loads of K, for every variant the planner can pick."""
    r = isa[f"{KERNEL}.HX_HEADS-{heads}"]
    res = r.resources
    assert res["scratch"] == 0 and res["occupancy"] >= 2, res
    assert res["vgpr"] + res.get("agpr", 0) <= 256, res
    assert plan_prefill(1024, 8192, heads, 128, TARGETS["gfx950"]).rows_per_block >= 4
    t = r.per_tile()
    assert t is not None and r.loop.counts["mfma"] > 0
    assert t["valu_cycles"] <= t["mfma_cycles"], t
    widths = r.loop.global_load_widths
    assert widths.get("dwordx4+lds", 0) > 0, widths  # K: global->LDS, 16 bytes a lane
    assert all(k.startswith("dwordx4") or k == "dword+lds" for k in widths), widths  # + kv_scale words


@pytest.mark.toolchain
@pytest.mark.parametrize("heads", [32, 64])
def test_the_fused_top_k_filter_keeps_the_logits_kernels_budget(isa, heads):
    """The fused prefill top-k's filter build of the kernel (mqa_topk_mfma) against the logits build: no scratch,
    as many waves a SIMD, the same MFMA cycles a tile, and VALU cycles a tile within 1.25x, its compare and appends
    counted as if every key of every tile took them (the report counts each block of the loop once)."""
    logits, filt = isa[f"{KERNEL}.HX_HEADS-{heads}"], isa[f"mqa_topk_mfma.HX_HEADS-{heads}"]
    assert filt.resources["scratch"] == 0, filt.resources
    assert filt.resources["occupancy"] == logits.resources["occupancy"] >= 2, (filt.resources, logits.resources)
    f, g = filt.per_tile(), logits.per_tile()
    assert f is not None and g is not None and f["mfma_cycles"] == g["mfma_cycles"], (f, g)
    assert f["valu_cycles"] <= 1.25 * g["valu_cycles"], (heads, f["valu_cycles"], g["valu_cycles"])


@pytest.mark.toolchain
@pytest.mark.parametrize("heads", [32, 64])
def test_prefill_figures_from_the_isa_report(isa, heads):
    """The key loop's figures the estimate reads: H / 32 head tiles x 2 rows x 2 k-steps of 32x32x64 per tile,
    two workgroups resident per CU, and a timeline whose issue adds up to the per-tile figures."""
    f = isa[f"{KERNEL}.HX_HEADS-{heads}"].prefill
    assert f is not None and f.mfma_cycles == heads // 32 * 4 * 64, f
    assert f.blocks_per_cu >= 2 and f.waves_per_simd_resident >= 2, f
    assert f.lds_read_bytes >= 4 * 1024 and f.dma_bytes > 0 and 0 < f.fill_cycles_per_element < 4, f
    busy = sum(e[1] for e in f.events if e[0] == "busy")
    slots = 4 * sum(1 for e in f.events if e[0] != "busy")
    per_tile = f.mfma_cycles + f.valu_cycles + f.nop_wait_states + f.issue_cycles
    assert abs(busy + slots - f.tiles_per_iteration * per_tile) < 1e-6, (busy, slots, per_tile)


@pytest.mark.toolchain
def test_prefill_estimates_of_the_table_rows(isa):
    """Every row of docs/gfx950.md's prefill table from the built kernels' ISA (estimates, not measurements):
    never under its floors, H = 64 slower than H = 32 on the same shape, and the goals the issue sets that the
    model says the kernel meets today still met."""
    from dataclasses import asdict
    rows = roofline.prefill_rows({k: asdict(r.prefill) for k, r in isa.items() if r.prefill is not None})
    assert len(rows) == 2 * (2 * len(roofline.BENCH_PREFILL_SHAPES) + 1) + 2 * len(roofline.AITER_TABLE_US)
    by = {(r["source"], r["H"], r["M"], r["N"], r["clean"], r["windows"]): r for r in rows}
    for r in rows:
        assert r["estimate_us"] >= max(r["memory_floor_us"], r["compute_floor_us"]), r
        if r["H"] == 64:
            twin = by[(r["source"], 32, r["M"], r["N"], r["clean"], r["windows"])]
            assert r["estimate_us"] > twin["estimate_us"], (r, twin)
        if r["source"].startswith("aiter"):
            assert r["meets"], r
    absolute = [r for r in rows if r["H"] == 64 and (r["M"], r["N"]) != (128, 32768)]
    assert all(r["meets"] for r in absolute), [r for r in absolute if not r["meets"]]


@pytest.mark.toolchain
def test_the_small_chunk_is_bound_by_the_launch_and_meets_0_8_without_it(isa):
    """(128, 32768)'s estimate sits within 5% of the time no kernel beats (its FLOPs at the peak, one loaded
    latency, the launch overhead), and with the launch overhead left out it reaches 0.8 of the large rate."""
    from dataclasses import asdict
    rows = roofline.prefill_rows({k: asdict(r.prefill) for k, r in isa.items() if r.prefill is not None})
    small = [r for r in rows if (r["M"], r["N"]) == (128, 32768)]
    assert len(small) == 4
    for r in small:
        assert r["fixed_floor_us"] <= r["estimate_us"] <= 1.05 * r["fixed_floor_us"], r
        assert r["launch_free_of_large_rate"] >= roofline.SMALL_OVER_LARGE_GOAL, r


@pytest.mark.toolchain
@pytest.mark.xfail(strict=True, reason="issue 33's goal for (128, 32768), 0.8 of the large shapes' rate, is met at "
                                       "H = 64 and missed at H = 32 (0.68): no kernel beats 0.70 there, its FLOPs "
                                       "at the peak plus one loaded latency plus the launch overhead; without the "
                                       "launch overhead it is 0.83 (docs/gfx950.md)")
def test_the_small_chunk_reaches_0_8_of_the_large_rate(isa):
    from dataclasses import asdict
    rows = roofline.prefill_rows({k: asdict(r.prefill) for k, r in isa.items() if r.prefill is not None})
    small = [r for r in rows if (r["M"], r["N"]) == (128, 32768)]
    assert small and all(r["meets"] for r in small), small


@pytest.mark.toolchain
def test_h64_valu_is_at_most_0_8_of_the_mfma_cycles_per_tile(isa):
    """Issue 33's static goal (docs/gfx950.md), met by the packed ReLU and the packed weighting."""
    assert isa[f"{KERNEL}.HX_HEADS-64"].prefill.valu_over_mfma() <= 0.8


@pytest.mark.toolchain
def test_isa_lint_is_clean_for_both_variants(emu_kernels):
    lint = isa_lint
    src = ROOT / "hsaco_src" / "gfx950" / "mqa_logits_mfma.hip"
    for heads in (32, 64):
        assert lint.lint(lint.compile_asm(src, ["HX_BLOCK=256", f"HX_HEADS={heads}"]), src.read_text()) == []


def test_the_isa_reports_of_one_process_compile_each_kernel_once(monkeypatch):
    compiled = []
    monkeypatch.setattr(isa_report, "_ASM", {})
    monkeypatch.setattr(isa_report, "_compile_asm", lambda e, src: compiled.append(e["variant_key"]) or "")
    manifest = ROOT / "hipindexer" / "kernels" / "manifest.json"
    if not manifest.is_file():
        pytest.skip("no kernel build")
    for _ in range(2):
        isa_report.manifest_reports(manifest, names=("fill_u32", "mqa_logits_mfma"))
    assert sorted(compiled) == sorted(set(compiled)) and "fill_u32" in compiled and len(compiled) >= 3, compiled


@pytest.mark.toolchain
def test_isa_report_reads_any_gfx950_assembly(tmp_path):
    """The report takes plain clang -S output (how another project's kernel is compared)."""
    lint, rep = isa_lint, isa_report
    src = ROOT / "hsaco_src" / "gfx950" / "mqa_logits_mfma.hip"
    asm = tmp_path / "k.s"
    asm.write_text(lint.compile_asm(src, ["HX_BLOCK=256", "HX_HEADS=32"]))
    p = subprocess.run([sys.executable, "-m", "tools.support.isa_report", str(asm), "--tile-mfmas", "4", "--json"],
                       cwd=ROOT, capture_output=True, text=True, check=True)
    (one,) = json.loads(p.stdout)
    assert one["kernel"] == "hx_mqa_logits_mfma" and one["loop"]["counts"]["mfma"] % 4 == 0
    assert one["per_tile"]["mfma_cycles"] == 4 * 64  # 4 MFMAs of 16 passes
    assert rep.classify("v_pk_fma_f32 v[0:1], v[2:3], v[4:5], v[0:1]") == "valu"
    assert rep.classify("buffer_load_dwordx4 v1, s[0:3], 0 offen lds") == "vmem_lds"


@pytest.mark.toolchain
@pytest.mark.mutation("gfx950")
def test_every_planted_bug_in_the_mfma_kernel_is_caught(emu_kernels):
    """tools/support/mutate.py's "gfx950" set (wrong lane half, wrong accumulator-to-head weight, permlane swap
    of the wrong pair, split one tile short, row-block tail overrun, dropped kv_scale, LDS buffers swapped)
    against its default suite (the quick shapes + 128x2048 at H 32, 64, D 128): ~4 min on 2 cores."""
    clean, planted, p = mutation_runs.results("gfx950")
    assert not clean["caught"], clean
    assert len(planted) >= 7 and all(r["caught"] for r in planted), [r for r in planted if not r["caught"]]
    assert p.returncode == 0, p.stderr[-2000:]
