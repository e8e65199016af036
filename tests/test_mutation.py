"""The suite catches planted kernel bugs: tools/mutate.py on the emulated gfx950 build."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.toolchain


@pytest.mark.parametrize("plant_set", ["generic"])
def test_every_plant_is_caught_by_the_emulated_sweep(emu_kernels, plant_set):
    p = subprocess.run([sys.executable, "tools/mutate.py", "--suite", "emu", "--set", plant_set, "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=1800)
    results = json.loads(p.stdout[:p.stdout.rindex("]") + 1])
    clean, planted = results[0], results[1:]
    assert not clean["caught"], clean
    assert planted and all(r["caught"] for r in planted), [r for r in planted if not r["caught"]]
    assert p.returncode == 0, p.stderr[-2000:]
