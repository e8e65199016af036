"""pytest plugin (-p emu_session) for a process whose HIP is the CPU emulator.

Activates Device("emu:gfx950") before any test imports the runtime's kernels
and points the default manifest at $HX_EMU_MANIFEST, so suites written for a
real GPU (tests/test_runtime_gpu.py: its `gpu_device` is Device(), which in
this process resolves to the emulated MI355X) run unchanged.
"""
import os
from pathlib import Path


def pytest_configure(config):
    from hipindexer.runtime import Device, module
    manifest = os.environ.get("HX_EMU_MANIFEST")
    if manifest:
        module.DEFAULT_MANIFEST = Path(manifest)
    Device("emu:gfx950")
