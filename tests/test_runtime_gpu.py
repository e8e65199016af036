"""Runtime on a real GPU: memory, kernels, events, interop, graphs. Skips cleanly without one."""
import ctypes
import os

import ml_dtypes
import numpy as np
import pytest

from built_kernels import manifest_of_test_kernels
from hipindexer.runtime import DeviceArray, Event, Stream, as_device_array, empty, zeros
from hipindexer.runtime.module import DEFAULT_MANIFEST, get_kernel

pytestmark = pytest.mark.gpu
FP8 = ml_dtypes.float8_e4m3fn


@pytest.fixture(scope="module")
def kernels(gpu_device):
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip(f"no built kernels: {DEFAULT_MANIFEST} is missing (run python build.py)")
    return gpu_device


def test_device_properties(gpu_device):
    d = gpu_device
    assert d.backend in ("hip", "cuda") and d.num_cus > 0 and d.total_memory > 1 << 30
    assert d.wave_size == (64 if d.backend == "hip" else 32)
    assert d.arch.startswith("gfx" if d.backend == "hip" else "sm_")
    assert type(d)(f"{d.backend}:{d.index}") is d


def _rand(dtype, n, rng):
    if dtype is FP8:
        bits = np.arange(256, dtype=np.uint8)
        codes = bits[(bits & 0x7F) != 0x7F]  # every pattern but the two NaN codes
        return np.resize(codes, n).view(FP8)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32, np.float64, FP8], ids=str)
def test_round_trip(gpu_device, dtype):
    a = _rand(dtype, 4099, np.random.default_rng(0))
    d = DeviceArray.from_numpy(a)
    assert d.dtype == np.dtype(dtype) and d.nbytes == a.nbytes
    np.testing.assert_array_equal(d.numpy().view(np.uint8), a.view(np.uint8))
    c = d.copy()  # DtoD
    np.testing.assert_array_equal(c.numpy().view(np.uint8), a.view(np.uint8))
    m = DeviceArray.from_numpy(a[:4096].reshape(64, 64))
    np.testing.assert_array_equal(m[3:9, 5:40].numpy().view(np.uint8), a[:4096].reshape(64, 64)[3:9, 5:40].view(np.uint8))


def test_fill_patterns(gpu_device):
    f = empty((7, 33), np.float32)
    for v in (np.nan, -np.inf, 0.0, 1.25):
        got = f.fill(v).numpy()
        np.testing.assert_array_equal(got.view(np.uint32), np.full((7, 33), v, np.float32).view(np.uint32))
    assert (empty(1001, np.uint8).fill(0xAB).numpy() == 0xAB).all()
    assert (empty(1001, np.int32).fill(-2).numpy() == -2).all()
    assert (empty(1001, FP8).fill(448.0).numpy().view(np.uint8) == 0x7E).all()
    base = zeros((6, 40), np.int32)
    padded = base[:, 4:20]  # row stride (160 B) > row (64 B)
    assert padded.strides == (160, 4) and not padded.is_contiguous
    padded.fill(5)
    got = base.numpy()
    assert (got[:, 4:20] == 5).all() and (got[:, :4] == 0).all() and (got[:, 20:] == 0).all()


@pytest.mark.slow
def test_past_4gib(gpu_device):
    n = (4 << 30) + (64 << 20)
    big = empty(n, np.uint8)
    off = (1 << 32) + 12345
    pat = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)
    big[off:off + pat.size].copy_from(pat)
    big[n - 1000:].fill(0x5A)
    np.testing.assert_array_equal(big[off:off + pat.size].numpy(), pat)
    assert (big[n - 1000:].numpy() == 0x5A).all()
    tail = big[n - 4096:].copy()  # DtoD from past 4 GiB
    assert (tail.numpy()[-1000:] == 0x5A).all()
    w = big[(1 << 32):(1 << 32) + 4096].view(np.uint32)
    assert w.ptr == big.ptr + (1 << 32)
    w.fill(0xDEADBEEF)
    assert (w.numpy() == 0xDEADBEEF).all()


def test_fill_kernel(kernels):
    k = get_kernel("fill_u32", device=kernels)
    n = 1_000_003
    a = zeros(n + 64, np.uint32)
    k.launch((n + k.block - 1) // k.block, dst=a, value=0xC0FFEE, count=n)
    got = a.numpy()
    assert (got[:n] == 0xC0FFEE).all() and (got[n:] == 0).all()
    p = k.mirror(dst=a.ptr, value=7, count=100)
    k.launch(4, params=p, stream=Stream(kernels))  # grid-stride: any grid covers it
    kernels.synchronize()
    assert (a.numpy()[:100] == 7).all() and (a.numpy()[100:n] == 0xC0FFEE).all()


def test_echo_kernel_field_by_field(kernels):
    from hipindexer import catalog
    k = get_kernel("echo_params", device=kernels, manifest=manifest_of_test_kernels())
    spec = catalog.STRUCT["EchoParams"]
    size = ctypes.sizeof(k.mirror)
    out = zeros(2 * size, np.uint8)
    rng = np.random.default_rng(2)
    values = {"out": out.ptr, "a_u8": 0xA5, "b_i32": -123456789, "c_u32": 0xFEDCBA98, "d_i64": -(1 << 62) + 12345,
              "e_u64": (1 << 64) - 3, "f_f32": float(np.float32(-3.140625)), "g_f64": np.pi,
              "h_ptr": 0x1122334455667788, "tail_u8": 0x5C, "blob": rng.integers(0, 256, 128, dtype=np.uint8).tobytes()}
    assert set(values) == {f for f, _ in spec.fields}, "EchoParams changed: update this test"
    k.launch(1, **values)
    sent = bytes(k.params)
    got = out.numpy()
    typed = k.mirror.from_buffer_copy(got[:size].tobytes())
    for name, _ in spec.fields:
        v = getattr(typed, name)
        v = bytes(v) if name == "blob" else v
        assert v == values[name], f"EchoParams.{name}: kernel read {v!r}, host packed {values[name]!r}"
    assert got[size:].tobytes() == sent, "raw struct bytes differ"


def test_event_timing(gpu_device):
    a = empty(1 << 30, np.uint8)
    s = Stream(gpu_device)
    e0, e1 = Event().record(s), Event()
    a.fill(1, stream=s)
    e1.record(s)
    e1.synchronize()
    assert e0.elapsed_ms(e1) > 0


def test_stream_ordering(gpu_device):
    s1, s2 = Stream(gpu_device), Stream(gpu_device)
    a = empty(1 << 26, np.uint32, stream=s1).fill(3)
    s2.wait(s1)
    b = a.copy(stream=s2)
    assert (b.numpy(stream=s2) == 3).all()


# -- interop --
def _cai_only(x):
    return type("CAIOnly", (), {"__cuda_array_interface__": property(lambda s: x.__cuda_array_interface__)})()


def _dlpack_only(x):
    return type("DLOnly", (), {"__dlpack__": lambda s, **kw: x.__dlpack__(**kw),
                               "__dlpack_device__": lambda s: x.__dlpack_device__()})()


@pytest.fixture
def cupy(gpu_device):
    cp = pytest.importorskip("cupy")
    if not cp.cuda.is_available():
        pytest.skip("cupy has no device")
    return cp


@pytest.mark.parametrize("protocol", ["cai", "dlpack"])
def test_cupy_in(cupy, gpu_device, protocol):
    x = cupy.arange(1000, dtype=cupy.float32)
    wrap = _cai_only(x) if protocol == "cai" else _dlpack_only(x)
    d = as_device_array(wrap, device=gpu_device if protocol == "cai" else None)
    assert d.ptr == x.data.ptr and d.shape == (1000,) and d.dtype == np.float32
    d[10:20].fill(-1.0)
    gpu_device.default_stream.synchronize()
    assert float(x[15]) == -1.0 and float(x[20]) == 20.0
    u = cupy.asarray(np.arange(256, dtype=np.uint8))
    f8 = as_device_array(_cai_only(u) if protocol == "cai" else _dlpack_only(u), dtype=FP8)
    assert f8.dtype == FP8 and float(f8.numpy()[0x38]) == 1.0


@pytest.mark.parametrize("protocol", ["cai", "dlpack"])
def test_cupy_out(cupy, gpu_device, protocol):
    d = DeviceArray.from_numpy(np.arange(3000, dtype=np.int32).reshape(30, 100))[2:12, 5:50]
    x = cupy.asarray(d) if protocol == "cai" else cupy.from_dlpack(d)
    assert x.data.ptr == d.ptr and x.shape == d.shape and x.strides == d.strides
    np.testing.assert_array_equal(cupy.asnumpy(x), d.numpy())
    x[0, 0] = -5
    assert d.numpy()[0, 0] == -5
    f8 = DeviceArray.from_numpy(np.arange(256, dtype=np.uint8).view(FP8))
    y = cupy.asarray(f8) if protocol == "cai" else cupy.from_dlpack(f8)
    assert y.dtype == cupy.uint8 and int(y[0x38]) == 0x38


@pytest.fixture
def jax(gpu_device):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory for the other tests
    jax = pytest.importorskip("jax")
    try:
        jax.devices("gpu")
    except RuntimeError:
        pytest.skip("jax has no GPU backend")
    return jax


@pytest.mark.parametrize("protocol", ["cai", "dlpack"])
def test_jax_in(jax, gpu_device, protocol):
    x = jax.numpy.arange(4096, dtype=jax.numpy.float32) * 2
    x.block_until_ready()
    if protocol == "cai" and not hasattr(x, "__cuda_array_interface__"):
        pytest.skip("this jax does not export __cuda_array_interface__")
    d = as_device_array(_cai_only(x) if protocol == "cai" else _dlpack_only(x), device=gpu_device)
    assert d.ptr == x.unsafe_buffer_pointer() and d.shape == (4096,)
    np.testing.assert_array_equal(d.numpy(), np.arange(4096, dtype=np.float32) * 2)


def test_jax_out(jax, gpu_device):
    d = DeviceArray.from_numpy(np.arange(4096, dtype=np.float32))
    gpu_device.default_stream.synchronize()
    y = jax.numpy.from_dlpack(d)
    np.testing.assert_array_equal(np.asarray(y), np.arange(4096, dtype=np.float32))
    assert y.unsafe_buffer_pointer() == d.ptr  # zero-copy


# -- graphs --
def test_graph_capture_on_foreign_stream(cupy, kernels):
    k = get_kernel("fill_u32", device=kernels)
    a = zeros(1 << 20, np.uint32)
    kernels.synchronize()
    cs = cupy.cuda.Stream(non_blocking=True)
    ours = Stream(kernels, external=cs)
    assert ours.handle == cs.ptr
    with cs:
        cs.begin_capture()
        k.launch(64, dst=a, value=0x1234, count=a.size, stream=ours)
        graph = cs.end_capture()
    cs.synchronize()
    assert (a.numpy() == 0).all(), "capture must not execute"
    k.launch(64, dst=a, value=0x9999, count=a.size, stream=ours)  # the cached buffer changes; the graph keeps its copy
    cs.synchronize()
    graph.launch(stream=cs)
    cs.synchronize()
    assert (a.numpy() == 0x1234).all()


def test_graph_capture_driver(kernels):
    if kernels.backend != "cuda":
        pytest.skip("driver graph API exercised on CUDA only")
    from cuda.bindings import driver as cu
    k = get_kernel("fill_u32", device=kernels)
    s = Stream(kernels)
    a = zeros(1 << 16, np.uint32, stream=s)
    s.synchronize()
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    assert int(cu.cuStreamBeginCapture(s.handle, mode)[0]) == 0
    k.launch(16, dst=a, value=77, count=a.size, stream=s)
    err, graph = cu.cuStreamEndCapture(s.handle)
    assert int(err) == 0
    err, gexec = cu.cuGraphInstantiate(graph, 0)
    assert int(err) == 0
    for _ in range(3):
        assert int(cu.cuGraphLaunch(gexec, s.handle)[0]) == 0
    s.synchronize()
    assert (a.numpy(stream=s) == 77).all()
    cu.cuGraphExecDestroy(gexec)
    cu.cuGraphDestroy(graph)
