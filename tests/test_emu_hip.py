"""The HIP backend through the emulated runtime: hip.py, hip-python, kernarg
packing and the gfx950 kernel sources together, as on an MI355X.

hip-python loads one libamdhip64 per process, so the cases run in a child
pytest (-p emu_session): tests/emu/emu_hip_cases.py, then the real-GPU runtime
suite tests/test_runtime_gpu.py unchanged on the emulated device. The kernels
are built (incrementally) into build/emu-test/pkg by build.py itself.
"""
import pytest

import emu_harness as H

pytestmark = pytest.mark.toolchain


def test_hip_backend_on_the_emulator(emu_kernels):
    p = H.run_child_pytest(emu_kernels, "tests/emu/emu_hip_cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]


def test_runtime_gpu_suite_on_the_emulator(emu_kernels):
    p = H.run_child_pytest(emu_kernels, "tests/test_runtime_gpu.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert " passed" in p.stdout, p.stdout[-3000:]
