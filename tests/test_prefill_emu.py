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


def test_bench_forces_a_key_split_and_refuses_one_a_shape_cannot_take(emu_kernels):
    p = H.run_cli(emu_kernels, "bench", "prefill", "--device", "emu:gfx950", "--shapes", "8x64", "--heads", "32",
                  "--split", "64", timeout=120)
    assert p.returncode == 2 and "--split 64 at M=8, N=64, H=32: split:" in p.stderr, p.stderr[-3000:]
    p = H.run_cli(emu_kernels, "bench", "prefill", "--device", "emu:gfx950", "--shapes", "8x64", "--heads", "32",
                  "--clean", "true", "--repeats", "1", "--split", "2", "--json", timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert [r["split"] for r in json.loads(p.stdout)["cases"]] == [2], p.stdout[-3000:]


def test_bench_on_the_emulator_runs_tiny_shapes_by_default_with_progress_and_nonzero_ceilings(emu_kernels):
    """The GPU's shapes take the emulator hours: by default it runs tiny ones, says so, prints a progress line
    before and after every row, and its ceilings (fractions of a GB/s) never print as 0."""
    import re
    from hipindexer.bench.prefill import EMULATOR_SHAPES
    p = H.run_cli(emu_kernels, "bench", "prefill", "--device", "emu:gfx950", "--heads", "32", "--clean", "true",
                  "--repeats", "1", timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "tiny shapes unless --shapes" in p.stderr
    n = len(EMULATOR_SHAPES)
    for i, (M, N) in enumerate(EMULATOR_SHAPES):
        assert f"[{i + 1}/{n}] M={M} N={N} H=32 clean=True\n  " in p.stderr, p.stderr
    assert len(re.findall(r"^  [0-9.]+ us, .* TFLOP/s, .* GB/s, host ", p.stderr, re.M)) == n, p.stderr
    ceiling = re.search(r"^bandwidth ceiling \(our copy kernel, read \+ write\): (\S+) GB/s$", p.stdout, re.M)
    assert ceiling and float(ceiling[1]) > 0, p.stdout
    table = [line.split() for line in p.stdout.splitlines() if line[:1].isdigit()]
    assert [(int(r[0]), int(r[1])) for r in table] == list(EMULATOR_SHAPES)
    assert all(float(r[6]) > 0 and float(r[8]) > 0 for r in table), table  # TFLOP/s, GB/s
