"""pytest plugin (-p emu_session) for a process whose HIP is the CPU emulator.

Activates Device("emu:gfx950") before any test imports the runtime's kernels,
so suites written for a real GPU (tests/test_runtime_gpu.py: its `gpu_device`
is Device(), which in this process resolves to the emulated MI355X) run
unchanged. The harness (emu_harness.run_child_pytest) starts this process on a
package copy whose kernels/ is the tests' emulated build, so the runtime's
default manifest already is that build.
"""


def pytest_configure(config):
    from hipindexer.runtime import Device
    Device("emu:gfx950")
