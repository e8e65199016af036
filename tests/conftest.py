import pytest


@pytest.fixture(scope="session")
def gpu_device():
    """The first GPU (HIP, then CUDA); skips the test when there is none."""
    from hipindexer.runtime import Device, NoDeviceError
    try:
        return Device()
    except NoDeviceError as e:
        pytest.skip(f"no GPU: {e}")
