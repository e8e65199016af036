"""DeviceArray: shape + numpy dtype + device pointer, with DLPack / CUDA Array Interface both ways.

fp8 (and every other ml_dtypes type, numpy kind 'V') crosses interop boundaries
as an unsigned int of the same size: CAI typestr '|u1', DLPack (kDLUInt, 8).
The real format is explicit metadata: `DeviceArray.format` ('float8_e4m3fn'),
and importers pass `dtype=ml_dtypes.float8_e4m3fn` to reinterpret. No CAI
`descr` trick: consumers would read it as a struct layout.
"""
import functools
import math
import operator
import sys
import threading

import ml_dtypes
import numpy as np

from . import dlpack as _dl
from .device import Device, Stream, as_stream

FP8 = np.dtype(ml_dtypes.float8_e4m3fn)


def _c_strides(shape, itemsize):
    return tuple(e * itemsize for e in _dl._c_elems(shape))


# The streams that memory not yet freed was allocated on. Python finalizes the objects of a collected reference
# cycle in any order, so a stream (ours, or a framework's that its Stream holds) in the same cycle as an allocation
# could be destroyed before the allocation's stream-ordered free, which then crashes inside the driver; held here,
# a stream is reachable, never in such a cycle, until the last of its memory is freed. The lock keeps each stream's
# count whole across threads; nothing under it makes an object the collector tracks, so no finalizer runs there.
_STREAMS_IN_USE: dict = {}
_STREAMS_LOCK = threading.Lock()


class _Allocation:
    """Owns device memory; freed stream-ordered on the stream it was allocated on (never synchronises)."""

    def __init__(self, device, nbytes, stream):
        device.activate()
        self.device, self.nbytes, self.stream = device, nbytes, stream
        self.ptr, self.ordered = device._b.malloc(max(int(nbytes), 1), stream.handle)
        with _STREAMS_LOCK:
            if not stream._allocations:
                _STREAMS_IN_USE[id(stream)] = stream
            stream._allocations += 1

    def __del__(self):
        # At interpreter exit the stream (or the context) may already be gone in whatever order the last
        # collection ran, and a stream-ordered free on a destroyed stream crashes inside the driver; the process
        # is ending, and its memory goes with it.
        if sys.is_finalizing():
            return
        b, st = self.device._b, self.stream
        try:
            b.free(self.ptr, st.handle, self.ordered)
        except Exception:
            try:  # the allocation stream (a foreign one) may be gone: free on the device's own stream
                b.free(self.ptr, self.device.default_stream.handle, self.ordered)
            except Exception:
                pass
        with _STREAMS_LOCK:
            st._allocations -= 1
            last = _STREAMS_IN_USE.pop(id(st), None) if not st._allocations else None  # dropped after the lock
        del last


class DeviceArray:
    """An array in device memory: a pointer, a shape, a numpy dtype, byte strides, and its device.

    Make one with DeviceArray.empty or DeviceArray.from_numpy (or the module's empty, zeros, from_numpy),
    or take a framework's array zero-copy with as_device_array. Memory the package allocated is freed
    stream-ordered (no synchronisation) once no array refers to it; views (view, reshape, basic indexing)
    share the memory and keep it alive. An array does not change after it is made: views are new arrays.

    Attributes: ptr (int), shape, dtype (numpy; fp8 is ml_dtypes.float8_e4m3fn), strides (bytes, never
    negative), device, size, nbytes, ndim, itemsize, is_contiguous, readonly, stream (what its data is
    ordered on: the stream it was made on, else the device's default stream), format ("float8_e4m3fn" for
    fp8, whose bytes cross interop as uint8; None otherwise).

    Interop: __cuda_array_interface__ (version 3, with the array's stream) and __dlpack__ /
    __dlpack_device__ export it to CuPy, PyTorch, JAX and any other consumer. fp8 crosses as uint8
    (CAI typestr "|u1", DLPack uint8): the consumer views it as its own fp8 type.

    The constructor wraps memory someone else owns: DeviceArray(ptr, shape, dtype, device, strides=None
    (C order), owner=None (kept alive with the array), stream=None, readonly=False). ValueError for
    negative strides.

    >>> import numpy as np
    >>> from hipindexer import Device, DeviceArray
    >>> dev = Device("emu:gfx950")
    >>> a = DeviceArray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), dev)
    >>> a.shape, a.dtype.name, a.strides
    ((2, 3), 'float32', (12, 4))
    >>> a[1].numpy().tolist(), a[:, 1:].is_contiguous
    ([3.0, 4.0, 5.0], False)
    """

    def __init__(self, ptr, shape, dtype, device, strides=None, owner=None, stream=None, readonly=False):
        self.ptr = int(ptr)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.strides = tuple(int(s) for s in strides) if strides is not None else _c_strides(self.shape, self.dtype.itemsize)
        if any(s < 0 for s in self.strides):
            raise ValueError("negative strides are not supported")
        self.device, self.owner, self._stream, self.readonly = device, owner, stream, readonly
        # Fixed for the array's life and read by every op call: computed once, in plain ints.
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        self.is_contiguous = self.size <= 1 or all(
            n == 1 or s == c for n, s, c in zip(self.shape, self.strides, _c_strides(self.shape, self.dtype.itemsize)))

    # -- construction --
    @classmethod
    def empty(cls, shape, dtype, device=None, stream=None):
        """A new C-contiguous array of `shape` (an int or a tuple) and `dtype` on `device` (as Device()
        takes it), its contents undefined, allocated stream-ordered on `stream` (None: the device's
        default)."""
        device = Device(device)
        stream = as_stream(stream, device)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        alloc = _Allocation(device, nbytes, stream)
        return cls(alloc.ptr, shape, dtype, device, owner=alloc, stream=stream)

    @classmethod
    def from_numpy(cls, a, device=None, stream=None):
        """A device copy of the numpy array `a` (made C-contiguous), queued on `stream`; the host array may
        be changed or dropped once the call returns."""
        a = np.ascontiguousarray(a)
        out = cls.empty(a.shape, a.dtype, device, stream)
        if a.nbytes:
            # pageable host memory: both drivers stage the source before the async call returns
            out.device._b.memcpy_htod(out.ptr, a.ctypes.data, a.nbytes, out.stream.handle)
        return out

    # -- properties --
    @functools.cached_property
    def layout(self) -> str:
        """What an op's checks read of the array, as one string (its hash is computed once): device, dtype,
        shape, strides, read-only. A DeviceArray does not change after construction (views are new
        arrays), so neither does its layout; ops key their prepared launches on it."""
        # The device object's id, not only its name: a key holding this string is kept next to a launch that
        # holds the device, so the id stays that device's.
        return (f"{self.device.backend}:{self.device.index}@{id(self.device):x} {self.dtype.str}{self.dtype.name} "
                f"{self.shape} {self.strides} {'ro' if self.readonly else 'rw'}")

    @property
    def stream(self):
        """The stream the array's data is ordered on: the one it was made on, else the device's default."""
        return self._stream if self._stream is not None else self.device.default_stream

    ndim = property(lambda self: len(self.shape))
    itemsize = property(lambda self: self.dtype.itemsize)

    @property
    def format(self):
        """The element format when it differs from what crosses interop (fp8 -> uint8), else None."""
        return self.dtype.name if self.dtype.kind == "V" else None

    def _span(self):
        """Bytes from ptr to one past the last element."""
        return 0 if self.size == 0 else sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + self.itemsize

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, ptr=0x{self.ptr:x}, device={self.device!r})"

    # -- views --
    def _derive(self, ptr, shape, strides, dtype=None):
        owner = self.owner if self.owner is not None else self
        return DeviceArray(ptr, shape, self.dtype if dtype is None else dtype, self.device, strides, owner,
                           self._stream, self.readonly)

    def view(self, dtype):
        """The same bytes read as `dtype` (e.g. uint8 <-> ml_dtypes.float8_e4m3fn). A different item size
        rescales the last dimension, which must then be contiguous and divide evenly (else ValueError)."""
        dtype = np.dtype(dtype)
        if dtype.itemsize == self.itemsize:
            return self._derive(self.ptr, self.shape, self.strides, dtype)
        if not self.ndim or self.strides[-1] != self.itemsize or (self.shape[-1] * self.itemsize) % dtype.itemsize:
            raise ValueError(f"cannot view {self.dtype} as {dtype}: last dimension must be contiguous and divide evenly")
        shape = self.shape[:-1] + (self.shape[-1] * self.itemsize // dtype.itemsize,)
        return self._derive(self.ptr, shape, self.strides[:-1] + (dtype.itemsize,), dtype)

    def reshape(self, *shape):
        """A view of a contiguous array with another shape (one -1 allowed); ValueError otherwise."""
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        if not self.is_contiguous:
            raise ValueError("reshape needs a contiguous array")
        if -1 in shape:
            known = int(np.prod([n for n in shape if n != -1], dtype=np.int64))
            shape = tuple(self.size // known if n == -1 else n for n in shape)
        if int(np.prod(shape, dtype=np.int64)) != self.size:
            raise ValueError(f"cannot reshape {self.shape} into {shape}")
        return self._derive(self.ptr, shape, None)

    def __getitem__(self, key):
        """Basic indexing: ints and slices with positive steps, one per leading dimension."""
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > self.ndim:
            raise IndexError(f"too many indices for a {self.ndim}-d array")
        ptr, shape, strides = self.ptr, [], []
        for k, n, s in zip(key, self.shape, self.strides):
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step <= 0:
                    raise IndexError("only positive slice steps are supported")
                ptr += start * s if start < n else 0
                shape.append(len(range(start, stop, step)))
                strides.append(s * step)
            else:
                i = operator.index(k)
                if not -n <= i < n:
                    raise IndexError(f"index {i} out of range for size {n}")
                ptr += (i % n) * s
        return self._derive(ptr, tuple(shape) + self.shape[len(key):], tuple(strides) + self.strides[len(key):])

    # -- data movement --
    def numpy(self, stream=None):
        """Copy to host; synchronises `stream` (default: the array's)."""
        stream = as_stream(stream, self.device) if stream is not None else self.stream
        span = self._span()
        buf = np.empty(span, np.uint8)
        if span:
            self.device._b.memcpy_dtoh(buf.ctypes.data, self.ptr, span, stream.handle)
        stream.synchronize()
        out = np.ndarray(self.shape, self.dtype, buffer=buf, strides=self.strides)
        return out if self.is_contiguous else out.copy()

    def copy_from(self, src, stream=None):
        """Write `src` (numpy or a contiguous DeviceArray of the same nbytes) into this contiguous array."""
        if not self.is_contiguous:
            raise ValueError("copy_from needs a contiguous destination")
        stream = as_stream(stream, self.device) if stream is not None else self.stream
        if isinstance(src, DeviceArray):
            if not src.is_contiguous or src.nbytes != self.nbytes:
                raise ValueError("copy_from needs a contiguous source of the same size")
            if self.nbytes:
                self.device._b.memcpy_dtod(self.ptr, src.ptr, self.nbytes, stream.handle)
            return self
        a = np.ascontiguousarray(src, dtype=self.dtype)
        if a.nbytes != self.nbytes:
            raise ValueError(f"size mismatch: {a.nbytes} bytes into {self.nbytes}")
        if a.nbytes:
            self.device._b.memcpy_htod(self.ptr, a.ctypes.data, a.nbytes, stream.handle)
        return self

    def copy(self, stream=None):
        """A new contiguous device array with this one's contents (a device-to-device copy on `stream`)."""
        out = DeviceArray.empty(self.shape, self.dtype, self.device, stream if stream is not None else self._stream)
        return out.copy_from(self, stream)

    def fill(self, value, stream=None):
        """Memset with the element pattern of `value` (D8 when all bytes agree, else D32); no kernel."""
        stream = as_stream(stream, self.device) if stream is not None else self.stream
        unit, word = _memset_pattern(np.array(value).astype(self.dtype).reshape(1).view(np.uint8).tobytes())
        rows = self._derive(self.ptr, self.shape[1:], self.strides[1:]) if self.ndim >= 2 else None
        if self.is_contiguous:
            runs = [(self.ptr, self.nbytes)]
        elif rows is not None and rows.is_contiguous:  # a 2-D view with a padded row stride
            runs = [(self.ptr + i * self.strides[0], rows.nbytes) for i in range(self.shape[0])]
        else:
            raise ValueError("fill needs a contiguous array or contiguous rows")
        b = self.device._b
        for ptr, n in runs:
            if unit == 1:
                b.memset_d8(ptr, word, n, stream.handle)
            else:
                if ptr % 4 or n % 4:
                    raise ValueError("a 4-byte fill pattern needs 4-byte aligned memory and size")
                b.memset_d32(ptr, word, n // 4, stream.handle)
        return self

    # -- export --
    @property
    def __cuda_array_interface__(self):
        handle = self.stream.handle
        return {"version": 3, "shape": self.shape, "typestr": _dl.interop_dtype(self.dtype).str,
                "data": (self.ptr, self.readonly), "strides": None if self.is_contiguous else self.strides,
                "descr": [("", _dl.interop_dtype(self.dtype).str)],
                "stream": handle if handle else 1}  # 0 is forbidden by CAI v3; our null stream is legacy (1)

    def __dlpack_device__(self):
        return tuple(self.device.dlpack_device())

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        dev = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != dev:
            raise BufferError(f"array lives on {dev}, {tuple(dl_device)} requested")
        if copy:
            raise BufferError("DeviceArray.__dlpack__ only shares memory (copy=True unsupported)")
        if dev[0] != _dl.KDL_CPU and stream != -1:
            # consumer stream: None -> legacy default (CUDA 1 / HIP 0); 0 means the same per the spec
            consumer = stream if stream not in (None, 0) else (1 if dev[0] == _dl.KDL_CUDA else 0)
            if consumer != self.stream.handle:
                Stream(self.device, external=consumer).wait(self.stream)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _dl.make_capsule(self.ptr, self.shape, self.strides, self.dtype, dev, self,
                                versioned=versioned, readonly=self.readonly)


def _memset_pattern(pat):
    """(1, byte) when every byte agrees, else (4, word) when the element repeats within 32 bits."""
    if len(set(pat)) == 1:
        return 1, pat[0]
    pat = pat * 2 if len(pat) == 2 else pat
    pat = pat[:4] if len(pat) == 8 and pat[:4] == pat[4:] else pat
    if len(pat) == 4:
        return 4, int.from_bytes(pat, "little")
    raise NotImplementedError(f"fill: no memset for the element pattern {pat.hex()}")


def empty(shape, dtype, device=None, stream=None):
    """DeviceArray.empty: a new array, contents undefined."""
    return DeviceArray.empty(shape, dtype, device, stream)


def zeros(shape, dtype, device=None, stream=None):
    """A new array filled with zeros (a memset queued on `stream`)."""
    return DeviceArray.empty(shape, dtype, device, stream).fill(0)


def from_numpy(a, device=None, stream=None):
    """DeviceArray.from_numpy: a device copy of a numpy array."""
    return DeviceArray.from_numpy(a, device, stream)


def as_device_array(obj, device=None, dtype=None, stream=None):
    """Zero-copy view of a device array from any framework: DeviceArray, `__cuda_array_interface__`
    (its stream is waited on by ours) or `__dlpack__` (our stream is passed to the producer).
    A protocol the object offers but refuses passes to the next one, and where both refuse, to the
    object's bytes as its own framework's uint8 (`obj.view(uint8)`), read back as the dtype its
    `dtype` names: PyTorch's fp8 tensors refuse the CUDA Array Interface, and older releases DLPack.
    `dtype` reinterprets the bytes (e.g. uint8 -> ml_dtypes.float8_e4m3fn).

    device: where the array lives (None: the DLPack producer's device, or Device() for the CUDA Array
    Interface, which names none); stream: the stream the caller will use it on (None: the device's
    default), ordered after the producer's. Raises TypeError for an object that is no device array (a
    host DLPack array included: use DeviceArray.from_numpy) or that refuses every way in, with each
    refusal in the message; ValueError for a dtype the bytes cannot be viewed as.
    """
    arr = obj if isinstance(obj, DeviceArray) else _import(obj, device, stream)
    if dtype is not None and np.dtype(dtype) != arr.dtype:
        arr = arr.view(dtype)
    return arr


def _import(obj, device, stream, bytes_fallback=True):
    refused = []
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        pass
    except Exception as e:
        refused.append(f"__cuda_array_interface__ raised {type(e).__name__}: {e}")
    else:
        return _from_cai(obj, cai, device, stream)
    if hasattr(obj, "__dlpack__"):
        arr = _from_dlpack(obj, device, stream, refused)
        if arr is not None:
            return arr
    if not refused:
        raise TypeError(f"{type(obj).__name__} is not a device array (no __cuda_array_interface__ or __dlpack__)")
    if bytes_fallback:
        arr = _from_bytes(obj, device, stream, refused)
        if arr is not None:
            return arr
    raise TypeError(f"{type(obj).__name__} refuses every way in: {'; '.join(refused)}")


def _from_cai(obj, cai, device, stream):
    if cai.get("mask") is not None:
        raise TypeError("masked CUDA Array Interface arrays are not supported")
    device = Device(device)
    st = as_stream(stream, device)
    theirs = cai.get("stream")
    if theirs is not None and int(theirs) != st.handle:
        st.wait(Stream(device, external=int(theirs)))
    ptr, readonly = cai["data"]
    return DeviceArray(ptr, cai["shape"], np.dtype(cai["typestr"]), device, cai.get("strides"),
                       owner=obj, stream=st, readonly=readonly)


_DL_BACKEND = {_dl.KDL_CUDA: "cuda", _dl.KDL_CUDA_MANAGED: "cuda", _dl.KDL_ROCM: "hip"}


def _from_dlpack(obj, device, stream, refused):
    """The DLPack import, or None (the reason appended to `refused`) when the producer refuses."""
    dev_type, dev_id = obj.__dlpack_device__()
    if dev_type not in _DL_BACKEND:
        hint = " (host memory: use DeviceArray.from_numpy)" if dev_type == _dl.KDL_CPU else ""
        raise TypeError(f"{type(obj).__name__} lives on DLPack device type {dev_type}{hint}")
    device = Device(device if device is not None else f"{_DL_BACKEND[dev_type]}:{dev_id}")
    st = as_stream(stream, device)
    try:
        try:
            cap = obj.__dlpack__(stream=st.handle, max_version=(1, 0))
        except TypeError:  # producers predating DLPack 1.0 keywords
            cap = obj.__dlpack__(stream=st.handle)
    except Exception as e:
        refused.append(f"__dlpack__ raised {type(e).__name__}: {e}")
        return None
    return from_capsule(cap, device, st)


def _from_bytes(obj, device, stream, refused):
    """`obj.view(uint8)` imported and read back as the dtype `obj.dtype` names, or None."""
    view = getattr(obj, "view", None)
    framework = sys.modules.get(type(obj).__module__.partition(".")[0])
    u8 = getattr(framework, "uint8", None)
    if view is None or u8 is None:
        return None
    name = str(getattr(obj, "dtype", "")).rpartition(".")[2]  # "torch.float8_e4m3fn" -> "float8_e4m3fn"
    try:
        dtype = np.dtype(name)  # ml_dtypes registers its names ("float8_e4m3fn") with numpy
    except (TypeError, ValueError):
        refused.append(f"its dtype {name!r} has no numpy equivalent to read its bytes as")
        return None
    try:
        raw = view(u8)
    except Exception as e:
        refused.append(f"view(uint8) raised {type(e).__name__}: {e}")
        return None
    return _import(raw, device, stream, bytes_fallback=False).view(dtype)


def from_capsule(cap, device, stream=None):
    """A DeviceArray over a DLPack capsule's tensor (consumed: the producer's deleter runs when the array
    and its views are gone). BufferError for a used capsule or an unsupported dtype or DLPack version."""
    ptr, shape, strides, dtype, _, owner, readonly = _dl.read_capsule(cap)
    return DeviceArray(ptr, shape, dtype, device, strides, owner=owner, stream=stream, readonly=readonly)
