"""The decode op through the emulated MI355X: the op's behaviour (tests/emu/decode_cases.py) and the quick
sampled sweep (`hipindexer check decode --device emu:gfx950 --quick`)."""
import json
import re

import pytest

import emu_harness as H

pytestmark = pytest.mark.toolchain


def test_decode_op_on_the_emulator(emu_kernels):
    p = H.run_child_pytest(emu_kernels, "tests/emu/decode_cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert " passed" in p.stdout


def test_quick_decode_sweep_passes_on_the_emulator(emu_kernels):
    p = H.run_cli(emu_kernels, "check", "decode", "--device", "emu:gfx950", "--quick", "--json", timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(p.stdout)
    summary = doc["summary"]["decode"]
    assert summary["failed"] == 0 and summary["run"] >= 40, summary
    names = {c["case"] for c in doc["cases"]}
    assert {"layouts_block_flat_vs_preshuffled", "untrusted_device_values", "lengths_per_row"} <= names
    # the gfx950 MFMA kernels are in the plan wherever they serve (H 32 / 64, D 128)
    ran = {c["kernel"] for c in doc["cases"]}
    assert {"paged_mqa_logits_generic", "paged_mqa_logits_mfma", "paged_mqa_logits_mfma_bs1"} <= ran, ran
    assert "sample: " in p.stderr and "covering" in p.stderr  # the design is printed
    # ... and what runs beyond it, so that the counts add up to the report's
    line = next(x for x in p.stderr.splitlines() if x.startswith("sample: "))
    m = re.search(r"^sample: (\d+) cases .*; then (\d+) fixed cases beyond the sample \((.*)\): (\d+) cases in all$",
                  line)
    assert m, line
    assert int(m[1]) + int(m[2]) == int(m[4]) == len(doc["cases"]) == summary["run"] + summary["not applicable"]
    assert m[3].startswith("layouts agree 1, untrusted values "), line
    assert f"fixed case {m[2]}/{m[2]}: " in p.stderr  # each announced as it starts


def test_bench_decode_runs_on_the_emulator_and_says_its_times_are_not_speeds(emu_kernels):
    p = H.run_cli(emu_kernels, "bench", "decode", "--device", "emu:gfx950", "--rows", "equal:1x256,one_long:3x512",
                  "--heads", "16", "--next-n", "2,ragged", "--clean", "both", "--lens", "both", "--repeats", "1",
                  "--layout", "block-flat", "--json", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert "not speeds" in doc["note"] and doc["read_GBps"] > 0 and doc["copy_GBps"] > 0
    assert len(doc["cases"]) == 2 * 2 * 2 * 2
    forms = [(c["spread"], c["next_n"], c["clean"], c["lens"]) for c in doc["cases"]]
    assert len(set(forms)) == len(forms) and {f[3] for f in forms} == {"per-sequence", "per-row"}
    r = doc["cases"][0]
    assert r["key_bytes"] == 256 * 132 and r["kernel"] == "paged_mqa_logits_generic" and r["host_us"] > 0
    assert not any(c["preshuffle"] for c in doc["cases"])  # --layout block-flat over gfx950's preshuffled default


def test_bench_decode_times_each_call_alone_on_request_and_lists_its_batches(emu_kernels):
    args = ["bench", "decode", "--device", "emu:gfx950", "--rows", "equal:1x256", "--heads", "16", "--next-n", "1",
            "--clean", "true", "--repeats", "2", "--json"]
    alone = json.loads(H.run_cli(emu_kernels, *args, "--isolated", timeout=600).stdout)["cases"]
    batched = json.loads(H.run_cli(emu_kernels, *args, timeout=600).stdout)["cases"]
    assert len(alone) == len(batched) == 1
    assert alone[0]["us_isolated"] > 0 and batched[0]["us_isolated"] is None
    for r in alone + batched:
        assert len(r["us_batches"]) == 2 and min(r["us_batches"]) == round(r["us_min"], 2)
