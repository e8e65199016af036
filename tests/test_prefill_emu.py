"""The prefill op through the emulated MI355X: the op's behaviour, the ownership
arithmetic, and the quick correctness sweep (`hipindexer check prefill --device emu:gfx950 --quick`)."""
import json

import pytest

import emu_harness as H

pytestmark = pytest.mark.toolchain


def test_prefill_op_on_the_emulator(emu_kernels):
    p = H.run_child_pytest(emu_kernels, "tests/emu/prefill_cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert " passed" in p.stdout


def test_quick_prefill_sweep_passes_on_the_emulator(emu_kernels):
    p = H.run_cli(emu_kernels, "check", "prefill", "--device", "emu:gfx950", "--quick", "--json")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads(p.stdout)["summary"]["prefill"]
    assert summary["failed"] == 0 and summary["run"] >= 300, summary


def test_bench_on_the_emulator_is_quick_and_says_its_times_are_not_speeds(emu_kernels):
    p = H.run_cli(emu_kernels, "bench", "prefill", "--device", "emu:gfx950", "--shapes", "8x64", "--heads", "32",
                  "--clean", "true", "--repeats", "1", timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "EMULATED" in p.stdout and "not speeds" in p.stdout
