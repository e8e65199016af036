import pytest


@pytest.fixture(scope="session")
def gpu_device():
    """The first GPU (HIP, then CUDA); skips the test when there is none."""
    from hipindexer.runtime import Device, NoDeviceError
    try:
        return Device()
    except NoDeviceError as e:
        pytest.skip(f"no GPU: {e}")


@pytest.fixture(scope="session")
def emu_kernels():
    """gfx950 objects and their emulated twins built for the tests (skips without the toolchain)."""
    import emu_harness
    why = emu_harness.toolchain_missing()
    if why:
        pytest.skip(why)
    try:
        return emu_harness.build_emu_package()
    except RuntimeError as e:  # build.ToolchainError: no gfx950 compiler
        pytest.skip(str(e))
