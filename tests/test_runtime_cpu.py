"""Runtime checks that need no GPU: probing, errors, manifest lookup, DLPack/CAI structure, fp8."""
import ctypes
import gc
import json
import sys
import weakref

import ml_dtypes
import numpy as np
import pytest

from hipindexer.runtime import (DeviceArray, Device, KernelLookupError, Manifest, NoDeviceError, ParamSizeError,
                                as_device_array)
from hipindexer.runtime import cuda as rcuda
from hipindexer.runtime import dlpack
from hipindexer.runtime import hip as rhip
from hipindexer.runtime.array import from_capsule
from host_backend import HostBackend, registered


def _no_gpu():
    try:
        Device()
        return False
    except NoDeviceError:
        return True


no_gpu = pytest.mark.skipif(not _no_gpu(), reason="a GPU is present")


@no_gpu
def test_no_device_error_says_what_was_looked_for():
    with pytest.raises(NoDeviceError) as ei:
        Device()
    msg = str(ei.value)
    assert isinstance(ei.value, RuntimeError)
    assert "hip:" in msg and "cuda:" in msg and "libamdhip64" in msg
    assert "not usable" in msg or "0 device" in msg
    with pytest.raises(NoDeviceError, match="cuda:1"):
        Device("cuda:1")


@no_gpu
def test_without_a_gpu_the_gpu_tests_skip_with_one_short_summary_line():
    """NoDeviceError's message names every library looked for (hundreds of characters): as a skip reason it
    would make a long summary line per test."""
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-m", "gpu", "-p", "no:cacheprovider",
                        "tests/test_runtime_gpu.py", "tests/test_decode_gpu.py"], cwd=root, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    skips = [line for line in p.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skips) == 1 and "no GPU" in skips[0] and len(skips[0]) < 160, skips


def test_backends_probe_without_raising():
    for b in (rhip.backend(), rcuda.backend()):
        assert isinstance(b.available(), bool)
        assert isinstance(b.device_count(), int)
        assert b.library_path()


@pytest.mark.parametrize("mod", [rhip, rcuda])
def test_check_accepts_tuples_and_bare_enums(mod):
    enum = rhip._hip.hipError_t if mod is rhip else rcuda._cu.CUresult
    ok, bad = enum(0), enum(1)
    assert mod._check((ok, 42)) == 42
    assert mod._check((ok, 1, 2)) == (1, 2)
    assert mod._check((ok,)) is None
    assert mod._check(ok) is None
    for res in ((bad, 7), bad, (bad,)):
        with pytest.raises(RuntimeError, match=bad.name) as ei:
            mod._check(res, "thing")
        assert "thing failed" in str(ei.value) and "(1)" in str(ei.value)


@pytest.mark.parametrize("spec", ["gpu", "rocm:0", "cuda:x", "hip:-1", "cuda:0:1", 3, ""])
def test_device_spec_errors(spec):
    with pytest.raises(ValueError, match="accepted forms.*'hip:N'.*'cuda:N'"):
        Device(spec)


# -- manifest lookup on temp manifests --
class _Params(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_uint64), ("value", ctypes.c_uint32), ("_pad", ctypes.c_uint32), ("count", ctypes.c_uint64)]


def _manifest(tmp_path, entries):
    p = tmp_path / "manifest.json"
    p.write_text(json.dumps({"schema": 1, "kernels": entries}))
    return Manifest(p, structs={"FillParams": _Params})


def _entry(target, size=24, variant=None, key="fill_u32"):
    return {"name": "fill_u32", "symbol": "hx_fill_u32", "target": target, "variant": variant or {}, "variant_key": key,
            "object": f"{target}/{key}.bin", "sha256": "0" * 64, "params": "FillParams", "param_size": size, "block": 256}


def test_missing_arch_lists_what_the_package_has(tmp_path):
    m = _manifest(tmp_path, [_entry("gfx950"), _entry("sm_90a")])
    with pytest.raises(KernelLookupError, match="no code object for gfx942; this package has: gfx950, sm_90a"):
        m.find("fill_u32", "gfx942")
    with pytest.raises(KernelLookupError, match="no kernel 'nope'.*fill_u32"):
        m.find("nope", "gfx950")
    entry, mirror = m.find("fill_u32", "sm_90a")
    assert entry["target"] == "sm_90a" and mirror is _Params


def test_variants(tmp_path):
    m = _manifest(tmp_path, [_entry("sm_90a", variant={"N": 1}, key="fill_u32.N-1"),
                             _entry("sm_90a", variant={"N": 2}, key="fill_u32.N-2")])
    assert m.find("fill_u32", "sm_90a", {"N": 2})[0]["variant_key"] == "fill_u32.N-2"
    assert m.find("fill_u32", "sm_90a", "fill_u32.N-1")[0]["variant"] == {"N": 1}
    with pytest.raises(KernelLookupError, match="fill_u32.N-1, fill_u32.N-2"):
        m.find("fill_u32", "sm_90a")


def test_param_size_mismatch_names_the_kernel(tmp_path):
    m = _manifest(tmp_path, [_entry("sm_90a", size=16)])
    with pytest.raises(ParamSizeError, match="'fill_u32'.*16 bytes.*mirror is 24"):
        m.find("fill_u32", "sm_90a")


def test_catalog_mirrors_resolve(tmp_path):
    from hipindexer import catalog
    p = tmp_path / "manifest.json"
    p.write_text(json.dumps({"kernels": [_entry("sm_90a", size=catalog.STRUCT["FillParams"].size)]}))
    _, mirror = Manifest(p).find("fill_u32", "sm_90a")
    assert ctypes.sizeof(mirror) == catalog.STRUCT["FillParams"].size


# -- DLPack and CAI on host memory (a fake device reporting kDLCPU) --
class _HostStream:
    handle = 0x7  # a made-up stream handle: only reported, never used on the host


class _HostDevice:
    backend, index, default_stream = "host", 0, _HostStream()

    def dlpack_device(self):
        return (dlpack.KDL_CPU, 0)


def _host_view(a):
    return DeviceArray(a.ctypes.data, a.shape, a.dtype, _HostDevice(), a.strides, owner=a)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32, np.float64, np.int64, np.bool_])
def test_dlpack_export_read_by_numpy(dtype):
    a = (np.arange(24) % 2 if dtype is np.bool_ else np.arange(24)).astype(dtype).reshape(4, 6)
    d = _host_view(a)
    b = np.from_dlpack(d)  # numpy asks for a versioned capsule
    assert b.ctypes.data == a.ctypes.data and b.dtype == a.dtype
    np.testing.assert_array_equal(b, a)
    cap = d.__dlpack__(stream=-1)  # legacy capsule
    back = from_capsule(cap, _HostDevice())
    assert back.ptr == a.ctypes.data and back.shape == a.shape and back.strides == a.strides and back.dtype == a.dtype


def test_dlpack_strided_view_and_deleter():
    a = np.arange(40, dtype=np.float32).reshape(5, 8)
    d = _host_view(a)[1:4, 2:7]  # a padded row stride
    assert d.shape == (3, 5) and d.strides == (32, 4) and not d.is_contiguous
    np.testing.assert_array_equal(np.from_dlpack(d), a[1:4, 2:7])
    assert d.__cuda_array_interface__["strides"] == (32, 4)
    alive = weakref.ref(d)
    cap = d.__dlpack__(stream=-1)
    del d
    gc.collect()
    assert alive() is not None, "the capsule holds the export"
    del cap  # never consumed: the capsule's destructor frees the export
    gc.collect()
    assert alive() is None
    d = _host_view(a)[1:4, 2:7]
    alive = weakref.ref(d)
    cap = d.__dlpack__(stream=-1, max_version=(1, 0))
    view = from_capsule(cap, _HostDevice())
    del cap, d
    gc.collect()
    assert alive() is not None, "consumed: alive until our importer drops it"
    assert view.shape == (3, 5) and view.strides == (32, 4)
    del view
    gc.collect()
    assert alive() is None


class _RocmHostDevice(_HostDevice):
    default_stream = type("NullStream", (), {"handle": 0})()  # the consumer's default: no cross-stream wait

    def dlpack_device(self):
        return (dlpack.KDL_ROCM, 0)


class _LegacyProducer:
    """A producer from before DLPack 1.0: no max_version, so its consumers take legacy capsules."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


@pytest.mark.parametrize("versioned", [True, False])
def test_a_consumer_that_refuses_the_capsule_raises_its_own_error_and_nothing_leaks(versioned):
    a = np.arange(10, dtype=np.float32)
    d = DeviceArray(a.ctypes.data, a.shape, a.dtype, _RocmHostDevice(), owner=a)
    alive = weakref.ref(d)
    # numpy takes the capsule, then refuses a device tensor: the capsule dies while numpy's error is pending.
    producer = d if versioned else _LegacyProducer(d)
    with pytest.raises((BufferError, RuntimeError), match="(?i)device"):
        np.from_dlpack(producer)
    del d, producer
    gc.collect()
    assert alive() is None, "the refused export is still held"


def test_dlpack_import_calls_producer_deleter():
    a = np.arange(10, dtype=np.int32)
    ref = weakref.ref(a)
    cap = a.__dlpack__()
    del a
    arr = from_capsule(cap, _HostDevice())
    assert arr.shape == (10,) and arr.dtype == np.int32
    assert ctypes.cast(arr.ptr, ctypes.POINTER(ctypes.c_int32))[9] == 9
    with pytest.raises(BufferError):
        from_capsule(cap, _HostDevice())  # consumed once
    assert ref() is not None
    del arr, cap
    gc.collect()
    assert ref() is None


def test_host_arrays_are_refused_for_zero_copy():
    with pytest.raises(TypeError, match="from_numpy"):
        as_device_array(np.zeros(3))
    with pytest.raises(TypeError, match="not a device array"):
        as_device_array([1, 2])


def test_fp8_crosses_as_uint8():
    bits = np.arange(256, dtype=np.uint8)
    d = _host_view(bits).view(ml_dtypes.float8_e4m3fn)
    assert d.dtype == ml_dtypes.float8_e4m3fn and d.format == "float8_e4m3fn"
    cai = d.__cuda_array_interface__
    assert cai["typestr"] == "|u1" and cai["version"] == 3 and cai["data"] == (bits.ctypes.data, False)
    assert cai["strides"] is None and cai["shape"] == (256,) and cai["stream"] == 7
    u = np.from_dlpack(d)  # numpy itself refuses fp8 over DLPack; we send uint8
    assert u.dtype == np.uint8
    np.testing.assert_array_equal(u, bits)
    back = as_device_array(_host_view(bits), dtype=ml_dtypes.float8_e4m3fn)
    assert back.dtype == ml_dtypes.float8_e4m3fn and back.ptr == bits.ctypes.data
    assert back.view(np.uint8).format is None
    host = np.frombuffer(bits.tobytes(), dtype=ml_dtypes.float8_e4m3fn)
    assert float(host[0x38]) == 1.0 and float(host[0x7E]) == 448.0 and np.isnan(float(host[0x7F]))


def test_dl_dtype_map():
    assert dlpack.to_dl_dtype(np.float32) == (2, 32)
    assert dlpack.to_dl_dtype(ml_dtypes.float8_e4m3fn) == (1, 8)
    assert dlpack.to_dl_dtype(ml_dtypes.bfloat16) == (1, 16)
    assert dlpack.from_dl_dtype(10, 8, 1) == ml_dtypes.float8_e4m3fn
    assert dlpack.from_dl_dtype(0, 64, 1) == np.int64 and dlpack.from_dl_dtype(6, 8, 1) == np.bool_


def test_views_and_reshape():
    a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    d = _host_view(a)
    assert d[1].shape == (3, 4) and d[1].ptr == a.ctypes.data + 48
    assert d[-1, 2].ptr == a[-1, 2].ctypes.data
    assert d[:, 1:3].strides == a[:, 1:3].strides
    assert d[::2].shape == (1, 3, 4)
    assert d.reshape(6, -1).shape == (6, 4) and d.reshape(-1).is_contiguous
    assert d.view(np.uint8).shape == (2, 3, 16) and d.view(np.int32).dtype == np.int32
    with pytest.raises(ValueError):
        d[:, 1:3].reshape(-1)
    with pytest.raises(IndexError):
        d[2]
    assert d[0, 0, 0:0].nbytes == 0 and d[0, 0, 0:0]._span() == 0
    big = DeviceArray(1 << 40, (5 << 30,), np.uint8, _HostDevice())  # 64-bit sizes
    assert big.nbytes == 5 << 30 and big[(1 << 32) + 7:].ptr == (1 << 40) + (1 << 32) + 7


def test_memset_patterns():
    from hipindexer.runtime.array import _memset_pattern
    assert _memset_pattern(bytes([7])) == (1, 7)
    assert _memset_pattern(np.float32(np.nan).tobytes()) == (4, 0x7FC00000)
    assert _memset_pattern(np.float32(-np.inf).tobytes()) == (4, 0xFF800000)
    assert _memset_pattern(np.float16(1.0).tobytes()) == (4, 0x3C003C00)
    assert _memset_pattern(np.zeros(1, np.float64).tobytes()) == (1, 0)
    with pytest.raises(NotImplementedError):
        _memset_pattern(np.float64(1.5).tobytes())


def test_launch_config_packing():
    """The HIP `extra` config and the CUDA kernelParams array point at the struct buffer."""
    p = _Params(dst=0x1234, value=7, count=99)
    addr = ctypes.addressof(p)
    cfg, size = rhip.HipBackend().launch_args(addr, ctypes.sizeof(p))
    assert list(cfg[[0, 2, 4]]) == [1, 2, 3] and cfg[1] == addr
    assert ctypes.c_size_t.from_address(int(cfg[3])).value == 24
    kp_addr, kp = rcuda.CudaBackend().launch_args(addr, ctypes.sizeof(p))
    assert ctypes.c_uint64.from_address(kp_addr).value == addr


def test_info_never_raises():
    from hipindexer.runtime.info import collect_info
    info = collect_info()
    assert {b["name"] for b in info["backends"]} >= {"hip", "cuda"}
    assert "toolchains" in info and "manifest" in info
    json.dumps(info)


# -- the shared layers end to end over a host-memory backend (what the GPU run will exercise for real) --
@pytest.fixture
def host_backend():
    """A host-memory backend registered as "fakehost" (removed again after the test)."""
    hb = HostBackend()
    with registered(hb):
        yield hb


def test_shared_layers_over_a_host_backend(tmp_path, host_backend):
    import hashlib

    from hipindexer import catalog
    from hipindexer.runtime import get_kernel
    hb = host_backend
    dev = Device("fakehost:0")
    assert dev is Device("fakehost") and dev.arch == "fake_arch" and dev.dlpack_device() == (1, 0)
    a = np.arange(100, dtype=np.float32).reshape(10, 10)
    d = DeviceArray.from_numpy(a, device=dev)
    np.testing.assert_array_equal(d.numpy(), a)
    np.testing.assert_array_equal(d[2:5, 3:7].numpy(), a[2:5, 3:7])
    d[2:5, 3:7].fill(np.nan)
    assert np.isnan(d.numpy()[2:5, 3:7]).all() and d.numpy()[1, 3] == 13
    np.testing.assert_array_equal(d.copy().numpy().view(np.uint32), d.numpy().view(np.uint32))
    np.testing.assert_array_equal(np.from_dlpack(d), d.numpy())
    obj = tmp_path / "fake_arch" / "fill_u32.bin"
    obj.parent.mkdir()
    obj.write_bytes(b"code")
    e = dict(_entry("fake_arch", size=catalog.STRUCT["FillParams"].size), object="fake_arch/fill_u32.bin",
             sha256=hashlib.sha256(b"code").hexdigest())
    (tmp_path / "manifest.json").write_text(json.dumps({"kernels": [e]}))
    m = Manifest(tmp_path / "manifest.json")
    out = DeviceArray.empty(50, np.uint32, dev)
    k = get_kernel("fill_u32", device=dev, manifest=m)
    assert get_kernel("fill_u32", device=dev, manifest=m) is k
    k.launch(3, dst=out, value=0xABCD, count=50)
    assert (out.numpy() == 0xABCD).all() and hb.launches[-1][:4] == ("hx_fill_u32", (3, 1, 1), (256, 1, 1), 0x100)
    k.launch((2, 1), 64, params=k.mirror(dst=out.ptr, value=9, count=5))
    assert list(out.numpy()[:6]) == [9] * 5 + [0xABCD]
    with pytest.raises(TypeError, match="FillParams"):
        k.launch(1, params=_Params())
    with pytest.raises(TypeError, match=r"external=5\)"):
        k.launch(3, dst=out, value=1, count=50, stream=5)
    from hipindexer.runtime import CodeObjectMismatch
    (obj.parent / "tampered.bin").write_bytes(b"tampered")  # modules are cached per object path
    e["object"] = "fake_arch/tampered.bin"
    (tmp_path / "manifest.json").write_text(json.dumps({"kernels": [e]}))
    m2 = Manifest(tmp_path / "manifest.json")
    with pytest.raises(CodeObjectMismatch, match="sha256"):
        get_kernel("fill_u32", device=dev, manifest=m2)
    del d, out, k
    gc.collect()


def test_streams_are_objects_or_the_named_ints(host_backend):
    from hipindexer.runtime import Event, Stream
    from hipindexer.runtime.device import as_stream
    dev = Device("fakehost:0")
    assert as_stream(None, dev) is dev.default_stream
    own = Stream(dev)
    assert as_stream(own, dev) is own
    for h in (0, 1, 2, np.int64(2)):
        st = as_stream(h, dev)
        assert st.handle == h and not st._owned and as_stream(h, dev) is st  # one wrapper per named handle
    assert as_stream(type("CudaStream", (), {"__cuda_stream__": lambda s: (0, 0x5000)})(), dev).handle == 0x5000
    assert as_stream(type("CupyStream", (), {"ptr": 0x6000})(), dev).handle == 0x6000
    assert Stream(dev, external=0x7000).handle == 0x7000  # a foreign handle, wrapped on purpose
    for bad in (5, 0x7F00DEAD, -1, 3):
        with pytest.raises(TypeError, match=rf"Stream\(device, external={bad}\)"):
            as_stream(bad, dev)
    for bad in (True, "0", 1.0, DeviceArray.empty(4, np.float32, dev)):
        with pytest.raises(TypeError, match="stream: expected"):
            as_stream(bad, dev)
    with pytest.raises(TypeError, match="external=5"):
        Event(dev).record(5)
    with pytest.raises(TypeError, match="external=5"):
        DeviceArray.empty(4, np.float32, dev, stream=5)



class _TorchLikeFp8:
    """What a PyTorch fp8 CUDA tensor offers: a CUDA Array Interface that raises, DLPack that may raise too,
    and view(<its framework's uint8>) giving a tensor of the same bytes that exports."""
    __module__ = "fakeframework"

    def __init__(self, base, dtype="float8_e4m3fn", dlpack_ok=False):
        self.base, self.dtype, self.dlpack_ok = base, f"fakeframework.{dtype}", dlpack_ok

    @property
    def __cuda_array_interface__(self):
        raise TypeError(f"{self.dtype} is not supported by __cuda_array_interface__")

    def __dlpack_device__(self):
        return (dlpack.KDL_CUDA, 0)

    def __dlpack__(self, **kw):
        if not self.dlpack_ok:
            raise BufferError(f"{self.dtype} is not supported by DLPack")
        return self.base.__dlpack__(stream=-1, max_version=kw.get("max_version"))

    def view(self, dtype):
        if dtype is not sys.modules["fakeframework"].uint8:
            raise TypeError("view(): argument 'dtype' must be a fakeframework.dtype")
        return self.base.view(np.uint8)


@pytest.fixture
def fakeframework(monkeypatch):
    import types
    mod = types.ModuleType("fakeframework")
    mod.uint8 = object()
    monkeypatch.setitem(sys.modules, "fakeframework", mod)
    return mod


def test_a_refused_array_interface_falls_back_to_dlpack_then_to_the_bytes(host_backend, fakeframework):
    dev = Device("fakehost:0")
    bits = np.arange(96, dtype=np.uint8).reshape(4, 24)
    base = DeviceArray.from_numpy(bits.view(ml_dtypes.float8_e4m3fn), dev)
    via_dlpack = as_device_array(_TorchLikeFp8(base, dlpack_ok=True), device=dev)
    assert via_dlpack.ptr == base.ptr and via_dlpack.shape == (4, 24) and via_dlpack.dtype == np.uint8
    via_bytes = as_device_array(_TorchLikeFp8(base), device=dev)
    assert via_bytes.ptr == base.ptr and via_bytes.shape == (4, 24) and via_bytes.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(via_bytes.numpy().view(np.uint8), bits)
    other = as_device_array(_TorchLikeFp8(base, dtype="float8_e5m2"), device=dev)
    assert other.dtype == ml_dtypes.float8_e5m2  # read as what it is, so an op names the wrong format
    with pytest.raises(TypeError, match="refuses every way in.*__cuda_array_interface__ raised TypeError.*"
                                        "__dlpack__ raised BufferError.*'float4_zz' has no numpy equivalent"):
        as_device_array(_TorchLikeFp8(base, dtype="float4_zz"), device=dev)


class _TwoDevices(HostBackend):
    """Two devices; records which one the driver has current."""
    current = None
    device_count = lambda self: 2  # noqa: E731

    def activate(self, index):
        self.current = index

    def device_synchronize(self, index):
        self.activate(index)


def test_activate_follows_every_switch_to_another_device():
    hb = _TwoDevices(name="twodev")
    with registered(hb) as d0:
        d0.activate()
        d1 = Device("twodev:1")  # probing a new device makes it current
        d0.activate()
        assert hb.current == 0
        d1.synchronize()  # the backend makes d1 current to wait on it
        d0.activate()
        assert hb.current == 0
    Device._cache.pop(("twodev", 1), None)


def test_a_stream_outlives_the_memory_allocated_on_it_even_in_a_collected_cycle():
    """Python finalizes the objects of a collected reference cycle in any order, and a stream-ordered free on a
    destroyed stream crashes inside a driver: a stream with memory not yet freed on it, ours or a framework's,
    stays reachable until that memory's free, so in a cycle of the stream, its framework's object and the memory,
    the free comes first."""
    from hipindexer.runtime import Stream

    class Recording(HostBackend):
        def __init__(self):
            super().__init__(name="recordhost")
            self.calls, self.next = [], 0x100

        def stream_create(self):
            self.next += 1
            return self.next

        def free(self, ptr, stream, ordered):
            self.calls.append(("free", stream))
            super().free(ptr, stream, ordered)

        def stream_destroy(self, stream):
            self.calls.append(("destroy", stream))

    hb = Recording()

    class FrameworkStream:  # destroys its stream when its object goes, as CuPy's and PyTorch's do
        def __init__(self, handle):
            self.handle = handle

        def __cuda_stream__(self):
            return (0, self.handle)

        def __del__(self):
            hb.calls.append(("framework destroy", self.handle))

    with registered(hb) as dev:
        for foreign in (False, True):
            hb.calls.clear()
            fs = FrameworkStream(0x900) if foreign else None
            s = Stream(dev) if fs is None else Stream(dev, external=fs)
            h = s.handle
            box = [s, fs, DeviceArray.empty(16, np.uint8, dev, stream=s), DeviceArray.empty(8, np.uint8, dev, stream=s)]
            box.append(box)
            del s, fs, box
            gc.collect()
            gc.collect()
            done = ("framework destroy", h) if foreign else ("destroy", h)
            assert hb.calls == [("free", h), ("free", h), done], (foreign, hb.calls)
