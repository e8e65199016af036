"""The paged-cache ops through the emulated MI355X: the ops' behaviour and the end-to-end path
(tests/emu/cache_cases.py), the quick bitwise sweep (`hipindexer check cache --device emu:gfx950 --quick`)
and the benchmark's emulator run."""
import json

import pytest

import emu_harness as H

pytestmark = pytest.mark.toolchain


def test_cache_ops_on_the_emulator(emu_kernels):
    p = H.run_child_pytest(emu_kernels, "tests/emu/cache_cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert " passed" in p.stdout and "skipped" not in p.stdout  # the decode half of the end-to-end test ran


def test_quick_cache_sweep_passes_on_the_emulator(emu_kernels):
    p = H.run_cli(emu_kernels, "check", "cache", "--device", "emu:gfx950", "--quick", "--json", timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(p.stdout)
    s = doc["summary"]
    assert s["cache_write"]["run"] >= 190 and s["cache_gather"]["run"] == 30 and s["windows"]["run"] == 3, s
    assert all(t["failed"] == 0 for t in s.values()) and s["untrusted"]["passed"] == 1, s
    assert sum(c["case"].endswith("_boundary") for c in doc["cases"]) == 12


def test_bench_cache_on_the_emulator_is_tiny_and_says_its_times_are_not_speeds(emu_kernels):
    p = H.run_cli(emu_kernels, "bench", "cache", "--device", "emu:gfx950", "--repeats", "1", "--json", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["emulated"] and "not speeds" in doc["note"] and doc["copy_GBps"] > 0
    ops = [(c["op"], c["preshuffle"]) for c in doc["cases"]]
    assert ops.count(("write", False)) == 2 and ("gather", True) in ops and ("decode_step", True) in ops
    step = next(c for c in doc["cases"] if c["op"] == "decode_step")
    assert step["tokens"] == 64 and step["bytes"] == 64 * (128 * 2 + 8 + 132) and step["host_us"] > 0
