"""The HIP backend (hip.py over hip-python) on the emulated runtime: run only in a
process of its own, by tests/test_emu_hip.py (-p emu_session)."""
import ctypes
from pathlib import Path

import numpy as np
import pytest

from built_kernels import manifest_of_test_kernels
from hipindexer import catalog, testing
from hipindexer.gate import gate_prefill
from hipindexer.runtime import Device, empty, from_numpy, get_kernel
from hipindexer.runtime import info as _info
from hipindexer.runtime.hip import HipError


@pytest.fixture(scope="module")
def dev():
    return Device("emu:gfx950")


def test_this_process_runs_the_package_copy_not_the_checkout():
    """The harness starts this process on a package copy whose kernels/ is the tests' emulated build; the
    checkout's own hipindexer/ (first on sys.path by the checkout's pytest `pythonpath`, unless the harness
    overrides it) must not shadow it."""
    import hipindexer
    assert Path(hipindexer.__file__).resolve().parent != Path(__file__).resolve().parents[2] / "hipindexer"


def test_device_is_an_emulated_mi355x(dev):
    assert dev.arch == "gfx950" and dev.name == "AMD Instinct MI355X (emulated)"
    assert dev.num_cus == 256 and dev.wave_size == 64 and 0 < dev.total_memory <= 288 << 30
    from rocm.bindings import hip
    props = dev._b._props(0)
    assert props.warpSize == 64 and props.multiProcessorCount == 256
    assert props.gcnArchName.split("\0")[0] == "gfx950:sramecc+:xnack-"
    # the runtime's attribute numbers are hip-python's
    A = hip.hipDeviceAttribute_t
    for name, want in [("hipDeviceAttributeWarpSize", 64), ("hipDeviceAttributeMaxThreadsPerBlock", 1024),
                       ("hipDeviceAttributeMaxSharedMemoryPerBlock", 160 * 1024)]:
        err, v = hip.hipDeviceGetAttribute(getattr(A, name), 0)
        assert int(err) == 0 and v == want, name


def test_the_device_has_no_more_memory_than_the_host_and_refuses_an_allocation_past_it(dev):
    """Emulated allocations are host memory, written through as they are made: one past what the host can give
    raises hipErrorOutOfMemory, naming the size, before anything is touched, instead of being OOM-killed."""
    import os
    from rocm.bindings import hip
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < dev.total_memory <= min(288 << 30, host)
    assert dev._b._props(0).totalGlobalMem == dev.total_memory
    err, free, total = hip.hipMemGetInfo()
    assert int(err) == 0 and total == dev.total_memory and 0 < free <= total
    big = dev.total_memory + (1 << 30)
    with pytest.raises(HipError, match=rf"hipErrorOutOfMemory .*hipMalloc\({big} bytes, .* GiB\): more than the "
                                       rf"host can give the emulated device"):
        empty(big, np.uint8, device=dev)
    assert empty(1 << 20, np.uint8, device=dev).numpy().size == 1 << 20  # and the next allocation is served


def test_fill_through_hip_python(dev):
    a = empty(1000, np.uint32)
    get_kernel("fill_u32", device=dev).launch(grid=3, dst=a, value=0xDEADBEEF, count=999)
    x = a.numpy()
    assert (x[:999] == 0xDEADBEEF).all() and x[999] == 0xFFFFFFFF  # fresh device memory is poison


def test_echo_kernarg_bytes_exact(dev):
    """The packed struct reaches the kernel byte for byte and field by field (offsets, padding, the blob)."""
    S = catalog.STRUCT["EchoParams"]
    out = from_numpy(np.zeros(2 * S.size, np.uint8))
    vals = dict(out=out.ptr, a_u8=0xA5, b_i32=-123456789, c_u32=0xFEDCBA98, d_i64=-(1 << 60) + 7,
                e_u64=(1 << 64) - 3, f_f32=1.5, blob=bytes(range(128)), g_f64=-2.25, h_ptr=0x123456789ABC, tail_u8=0x5A)
    packed = S.pack(**vals)
    get_kernel("echo_params", device=dev, manifest=manifest_of_test_kernels()).launch(grid=1, **vals)
    got = out.numpy().tobytes()
    assert got[S.size:] == packed and got[:S.size] == packed


def test_wrong_kernarg_size_is_refused(dev):
    from rocm.bindings import hip
    k = get_kernel("fill_u32", device=dev)
    cfg, _ = dev._b.launch_args(ctypes.addressof(k.params), k.param_size + 8)
    err = hip.hipModuleLaunchKernel(k._fn, 1, 1, 1, 64, 1, 1, 0, 0, None, cfg)
    err = err[0] if isinstance(err, tuple) else err
    assert int(err) == int(hip.hipError_t.hipErrorInvalidValue)
    lib = ctypes.CDLL(dev._b.library_path())
    lib.hxEmuLastErrorMessage.restype = ctypes.c_char_p
    assert b"kernarg buffer of 32 bytes, the kernel's parameter struct is 24" in lib.hxEmuLastErrorMessage()


def test_unknown_code_object_is_refused(dev):
    from hipindexer.runtime.module import DEFAULT_MANIFEST
    image = bytearray((DEFAULT_MANIFEST.parent / "gfx950" / "fill_u32.hsaco").read_bytes())
    image[-1] ^= 1  # a different object: no emulated twin
    with pytest.raises(HipError, match="hipErrorInvalidImage"):
        dev._b.module_load(bytes(image))


@pytest.mark.parametrize("mode", ["causal", "multi_req"])
@pytest.mark.parametrize("H", [32, 64])
def test_logits_tile_through_hip_python(dev, mode, H):
    M, N = 21, 300
    inp = testing.prefill_inputs(np.random.default_rng(H), M=M, N=N, H=H, D=128, mode=mode)
    d = [from_numpy(a) for a in (inp.q.view(np.uint8), inp.k.view(np.uint8), inp.kv_scale, inp.weights,
                                 inp.cu_seqlen_ks, inp.cu_seqlen_ke)]
    out = empty((M, N), np.float32).fill(np.nan)
    get_kernel("logits_tile", device=dev, manifest=manifest_of_test_kernels()).launch(
        grid=((N + 31) // 32, (M + 1) // 2), q=d[0], k=d[1], kv_scale=d[2], weights=d[3], ks=d[4], ke=d[5],
        out=out, out_stride=N, M=M, N=N, H=H, clean=1)
    r = gate_prefill(out.numpy(), inp, True, "fp32")
    assert r, r


def test_info_lists_the_active_emulator(dev):
    rep = _info.collect_info()
    emu = [b for b in rep["backends"] if b["name"] == "emu"][0]
    assert emu["available"] and any(d.get("spec") == "emu:0" and d.get("arch") == "gfx950" for d in rep["devices"])


def test_events_time_the_host_clock(dev):
    from hipindexer.runtime import Event
    a, b = Event(dev).record(), None
    x = empty(1 << 16, np.uint32)
    get_kernel("fill_u32", device=dev).launch(grid=64, dst=x, value=1, count=1 << 16)
    b = Event(dev).record()
    b.synchronize()
    assert 0 <= a.elapsed_ms(b) < 60_000
