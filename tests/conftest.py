import pytest

# The skip reason of every test that needs a GPU, on a machine without one. NoDeviceError's message lists every
# backend and library looked for (hundreds of characters); `hipindexer info` prints the same.
NO_GPU = "no GPU (hipindexer.runtime.NoDeviceError; `hipindexer info` says what was looked for)"
# Skips the session fixtures below raise: one reason for many tests, so the summary folds them into one line at
# this file instead of a line per test.
_FIXTURE_SKIPS = set()


def _skip(reason: str):
    _FIXTURE_SKIPS.add(f"Skipped: {reason}")
    pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    if rep.skipped and isinstance(rep.longrepr, tuple) and rep.longrepr[2] in _FIXTURE_SKIPS:
        rep.longrepr = (__file__, None, rep.longrepr[2])
    return rep


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they will
def pytest_collection_modifyitems(config, items):
    """Tests marked mutation(set) go last, and the harness's runs of their sets start now, in the background
    (tests/mutation_runs.py), where the gfx950 toolchain is there; without it those tests skip as before."""
    sets, last = [], []
    for item in items:
        mark = item.get_closest_marker("mutation")
        if mark is None:
            continue
        last.append(item)
        sets.append(mark.args[0] if mark.args else item.callspec.params["plant_set"])
    if not last:
        return
    items[:] = [i for i in items if i.get_closest_marker("mutation") is None] + last
    import emu_harness
    if not config.option.collectonly and emu_harness.toolchain_missing() is None:
        import mutation_runs
        mutation_runs.start(sets)


def pytest_sessionfinish(session, exitstatus):
    """Harness runs still going when the session ends (it stopped early, or never read them) end with it."""
    import sys
    if "mutation_runs" in sys.modules:
        sys.modules["mutation_runs"].stop()


@pytest.fixture(scope="session")
def gpu_device():
    """The first GPU (HIP, then CUDA); skips the test when there is none."""
    from hipindexer.runtime import Device, NoDeviceError
    try:
        return Device()
    except NoDeviceError:
        _skip(NO_GPU)


@pytest.fixture(scope="session")
def emu_kernels():
    """gfx950 objects and their emulated twins built for the tests (skips without the toolchain)."""
    import emu_harness
    why = emu_harness.toolchain_missing()
    if why:
        _skip(why)
    try:
        return emu_harness.build_emu_package()
    except RuntimeError as e:  # build.ToolchainError: no gfx950 compiler
        _skip(str(e))


@pytest.fixture
def hopper(request):
    """(backend, device): an sm_90a device over host memory (tests/host_backend.py, a backend of its own per test
    module), with the built kernels' manifest; skips when there is no build."""
    from hipindexer.runtime.module import load_manifest
    from host_backend import HostBackend, registered
    try:
        load_manifest()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    hb = HostBackend(name="host_" + request.module.__name__.rsplit(".", 1)[-1], arch="sm_90a", num_cus=132,
                     wave_size=32)
    with registered(hb) as dev:
        yield hb, dev
