"""The paged-cache ops through the emulated MI355X: the ops' behaviour and the end-to-end path
(tests/emu/cache_cases.py) and the quick bitwise sweep (`hipindexer check cache --device emu:gfx950 --quick`)."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "emu"))
import emu_harness as H  # noqa: E402

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
