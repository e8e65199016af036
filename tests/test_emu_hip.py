"""The HIP backend through the emulated runtime: hip.py, hip-python, kernarg
packing and the gfx950 kernel sources together, as on an MI355X.

hip-python loads one libamdhip64 per process, so the cases run in a child
pytest (-p emu_session): tests/emu/emu_hip_cases.py, then the real-GPU runtime
suite tests/test_runtime_gpu.py unchanged on the emulated device. The kernels
are built (incrementally) into build/emu-test/pkg by build.py itself.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "emu"))
import emu_harness as H  # noqa: E402

pytestmark = pytest.mark.toolchain


@pytest.fixture(scope="module")
def built():
    why = H.toolchain_missing()
    if why:
        pytest.skip(why)
    spec = importlib.util.spec_from_file_location("_hx_build_emu_test", ROOT / "build.py")
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build
    spec.loader.exec_module(build)
    try:
        build.find_toolchain("gfx950", H.BUILD / "pkg" / "work")
    except build.ToolchainError as e:
        pytest.skip(str(e))
    pkg = H.BUILD / "pkg"
    rc = build.main(["--target", "gfx950", "--target", "emu-gfx950", "--out", str(pkg / "kernels"),
                     "--work", str(pkg / "work"), "-j", "2", "--quiet"])
    assert rc == 0
    return pkg / "kernels"


def _child(kernels, *files):
    env = {**os.environ, "HX_EMU_ROOT": str(kernels / "emu-gfx950"), "HX_EMU_MANIFEST": str(kernels / "manifest.json"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "emu"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "emu_session", "-p", "no:cacheprovider",
                           "-m", "", *files], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_hip_backend_on_the_emulator(built):
    p = _child(built, "tests/emu/emu_hip_cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]


def test_runtime_gpu_suite_on_the_emulator(built):
    p = _child(built, "tests/test_runtime_gpu.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert " passed" in p.stdout, p.stdout[-3000:]
