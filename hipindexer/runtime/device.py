"""Devices, streams and events over a backend (hip.py, cuda.py, or emu.py: the gfx950 CPU emulator).

A backend is any object with the method set of hip.HipBackend; BACKENDS maps a
spec prefix to a factory, so `register_backend("emu", ...)` is all a third one
needs. Everything here deals in int handles.
"""
import numbers
import sys
import threading

from . import cuda as _cuda
from . import emu as _emu
from . import hip as _hip

# "emu" (the gfx950 CPU emulator) is never searched: Device() means a real GPU.
BACKENDS = {"hip": _hip.backend, "cuda": _cuda.backend, "emu": _emu.backend}
SEARCH_ORDER = ["hip", "cuda"]
INDEX_NAMES = {("emu", _emu.ARCH): 0}  # "emu:gfx950" is emu device 0
_ACCEPTED = "None (first GPU, HIP then CUDA), 'hip', 'hip:N', 'cuda', 'cuda:N', 'emu:gfx950'"


class NoDeviceError(RuntimeError):
    """No GPU (Device()), or no such device (Device("cuda:3")); the message says what each backend found."""
    pass


def register_backend(name, factory, search=False):
    """Make Device("name:N") use `factory()`, an object with HipBackend's method set; search=True also lets
    Device() find it (after HIP and CUDA)."""
    BACKENDS[name] = factory
    if search and name not in SEARCH_ORDER:
        SEARCH_ORDER.append(name)


def _describe(name):
    try:
        b = BACKENDS[name]()
        head = f"{name}: {b.bindings_version() or 'bindings not installed'}, library {b.library_path()}"
        if not b.available():
            return f"{head}: not usable ({b.why_unavailable()})"
        n = b.device_count()
        return f"{head}: loaded, {n} device(s)" + (f" ({b.why_unavailable()})" if not n and b.why_unavailable() else "")
    except Exception as e:
        return f"{name}: probe failed ({type(e).__name__}: {e})"


def _parse(spec):
    if spec is None:
        return None, None
    if isinstance(spec, str):
        name, _, idx = spec.strip().lower().partition(":")
        if (name, idx) in INDEX_NAMES:
            return name, INDEX_NAMES[(name, idx)]
        if name in BACKENDS and (idx == "" or idx.isdigit()):
            return name, int(idx) if idx else 0
    raise ValueError(f"unknown device spec {spec!r}; accepted forms: {_ACCEPTED}" +
                     "".join(f", '{n}:N'" for n in BACKENDS if n not in ("hip", "cuda", "emu")))


class _Current(threading.local):
    device = None  # the Device last made current on this thread by us


_tls = _Current()


class Device:
    """One GPU, or the CPU emulator of the gfx950 kernels. Cached per (backend, index): Device("cuda:0") is
    Device("cuda:0").

    Device(spec=None): None picks the first GPU, HIP before CUDA; "hip", "hip:N", "cuda", "cuda:N" name
    one; "emu:gfx950" is the emulator, in a source checkout after `python build.py` (hip-python loads one
    HIP library per process, so the emulator needs a process without a real HIP GPU in it). Device() does
    not look for the emulator, but in a process that has opened it HIP is the emulator, found as hip:0.
    A Device passes through unchanged.

    Attributes: backend ("hip", "cuda" or "emu"), index, arch ("gfx950", "sm_90a", ...), name, num_cus
    (CUs or SMs), total_memory (bytes), wave_size (64 on AMD, 32 on NVIDIA), named_streams (the ints
    that name a stream on its driver: what stream= accepts as a plain int), default_stream.

    Raises ValueError for a malformed spec and NoDeviceError when there is no such device.

    >>> from hipindexer import Device
    >>> dev = Device("emu:gfx950")
    >>> dev.arch, dev.wave_size, dev is Device("emu:gfx950")
    ('gfx950', 64, True)
    """
    _cache = {}
    _lock = threading.Lock()

    def __new__(cls, spec=None):
        if isinstance(spec, Device):
            return spec
        name, index = _parse(spec)
        with cls._lock:
            if name is None:
                for cand in SEARCH_ORDER:
                    b = BACKENDS[cand]()
                    if b.available() and b.device_count() > 0:
                        name, index = cand, 0
                        break
                else:
                    raise NoDeviceError("no GPU found; looked for: " + "; ".join(_describe(n) for n in SEARCH_ORDER))
            key = (name, index)
            dev = cls._cache.get(key)
            if dev is None:
                b = BACKENDS[name]()
                count = b.device_count() if b.available() else 0
                if index >= count:
                    raise NoDeviceError(f"no device {name}:{index}; looked for: {_describe(name)}")
                dev = object.__new__(cls)
                dev._init(name, index, b)
                cls._cache[key] = dev
            return dev

    def _init(self, name, index, b):
        self.backend, self.index, self._b = name, index, b
        b.activate(index)
        _tls.device = self  # what activate() trusts must follow every switch
        self.arch = b.arch(index)
        self.name = b.device_name(index)
        self.num_cus = b.num_cus(index)
        self.total_memory = b.total_memory(index)
        self.wave_size = b.wave_size
        self.named_streams = dict(getattr(b, "named_streams", {0: "the null stream"}))
        self._default_stream = None
        self._named = {}

    def activate(self):
        """Make this device current on this thread; cheap when it already is (we are the only switcher we track)."""
        if _tls.device is not self:
            self._b.activate(self.index)
            _tls.device = self

    def tensor_map_u8(self, address, dims, strides, box, swizzle128):
        """The 128 bytes of a tensor map over uint8 data at `address` (CUDA only; runtime/cuda.py says how)."""
        f = getattr(self._b, "tensor_map_u8", None)
        if f is None:
            raise NotImplementedError(f"{self!r}: tensor maps are a CUDA feature")
        self.activate()
        return f(address, dims, strides, box, swizzle128)

    @property
    def default_stream(self):
        """The Stream ops, arrays and events use when given none: one stream the package creates for this
        device on first use and keeps (not the driver's null stream)."""
        if self._default_stream is None:
            self._default_stream = Stream(self)
        return self._default_stream

    def named_stream(self, handle: int):
        """The Stream for one of the integers that name a stream on this device's driver (`named_streams`)."""
        st = self._named.get(handle)
        if st is None:
            if handle not in self.named_streams:
                names = ", ".join(f"{k} ({v})" for k, v in sorted(self.named_streams.items()))
                raise TypeError(f"stream: the int {handle} names no stream on {self.backend} (those that do: {names}); "
                                f"pass a Stream, an object with __cuda_stream__, or wrap a handle you own explicitly "
                                f"with hipindexer.Stream(device, external={handle})")
            st = self._named[handle] = Stream(self, external=handle)
        return st

    def dlpack_device(self):
        """(DLPack device type, index): (2, N) on CUDA, (10, N) on HIP and the emulator."""
        return (self._b.dlpack_device_type, self.index)

    def synchronize(self):
        """Wait until every stream of this device has finished its queued work."""
        self.activate()  # the backend makes this device current to wait on it; activate() must know
        self._b.device_synchronize(self.index)

    def __repr__(self):
        return f"Device('{self.backend}:{self.index}', arch={self.arch!r}, name={self.name!r})"

    def __reduce__(self):
        return (Device, (f"{self.backend}:{self.index}",))


def as_stream(stream, device):
    """The Stream that `stream=` names on `device`.

    Accepted: None (the device's default stream), a Stream of this device, an object with
    `__cuda_stream__` (CuPy, PyTorch, cuda.core) or a CuPy-style `.ptr`, and the integers that name a
    stream on every driver of the device's kind (its backend's `named_streams`: 0, 1 and 2 on CUDA).
    Any other int is refused: the driver cannot tell a stale or made-up handle from a stream, and
    launching on one crashes the process. A foreign handle is wrapped on purpose, with
    `Stream(device, external=handle)`.
    """
    if stream is None:
        return device.default_stream
    if isinstance(stream, Stream):
        if stream.device is not device:
            raise ValueError(f"stream: belongs to {stream.device!r}, but the call runs on {device!r}")
        return stream
    if isinstance(stream, numbers.Integral) and not isinstance(stream, bool):
        return device.named_stream(int(stream))
    if hasattr(stream, "__cuda_stream__"):
        return Stream(device, external=stream)
    if hasattr(stream, "ptr") and not hasattr(stream, "__dlpack__"):  # an array's .ptr is its data, not a stream
        return Stream(device, external=stream)
    raise TypeError(f"stream: expected None, a hipindexer Stream, an object with __cuda_stream__ or .ptr, "
                    f"or one of {sorted(device.named_streams)}; got {type(stream).__name__}")


class Stream:
    """A stream of a device: one the package creates and destroys when the Stream is dropped
    (Stream(device)), or a wrapper around a foreign one (Stream(device, external=x), x an int handle, an
    object with `__cuda_stream__` -> (version, handle), or a CuPy stream with `.ptr`), which is never
    destroyed. An external handle is taken as it is: it must name a live stream of that device. A foreign
    stream object is kept alive as long as the wrapper is, and with it by every array allocated on it (its
    memory is freed in order on that stream): a framework that destroys a stream when its object goes
    cannot pull the stream from under a free still to come. A bare int handle carries no such guarantee.

    Work on one stream runs in order; `wait` orders one stream after another without blocking the host.
    A Stream offers `__cuda_stream__`, and int(stream) is its handle, so CuPy, PyTorch and cuda.core take
    it as theirs. device: as Device() takes it (None: the first GPU).

    >>> from hipindexer import Device, Event, Stream
    >>> dev = Device("emu:gfx950")
    >>> s = Stream(dev)
    >>> s.wait(dev.default_stream)           # s's later work runs after what the default stream holds now
    >>> Event(dev).record(s).synchronize()   # the host waits for s's work so far
    """

    def __init__(self, device=None, external=None):
        self.device = Device(device)
        self.device.activate()
        b = self.device._b
        self._foreign = None
        self._allocations = 0  # live allocations made on it (runtime/array.py keeps it reachable meanwhile)
        if external is None:
            self.handle, self._owned = b.stream_create(), True
        else:
            self._foreign = None if isinstance(external, numbers.Integral) else external
            if hasattr(external, "__cuda_stream__"):
                external = external.__cuda_stream__()[1]
            elif hasattr(external, "ptr"):  # CuPy streams
                external = external.ptr
            self.handle, self._owned = int(external), False

    def synchronize(self):
        """Wait until the work queued on this stream so far has finished."""
        self.device._b.stream_synchronize(self.handle)

    def wait(self, other):
        """Order later work on this stream after everything now queued on `other` (a Stream or Event)."""
        ev = other if isinstance(other, Event) else Event(self.device, timing=False).record(other)
        self.device._b.stream_wait_event(self.handle, ev.handle)

    def __cuda_stream__(self):
        return (0, self.handle)

    def __int__(self):
        return self.handle

    def __del__(self):
        if getattr(self, "_owned", False) and not sys.is_finalizing():  # (see _Allocation.__del__)
            try:
                self.device._b.stream_destroy(self.handle)  # returns at once; queued work still completes
            except Exception:
                pass

    def __repr__(self):
        return f"Stream({self.device!r}, handle=0x{self.handle:x}{'' if self._owned else ', foreign'})"


class Event:
    """A point in a stream's work: record(stream) marks what is queued so far, synchronize() waits for it,
    and a.elapsed_ms(b) is the device time between two recorded events (timing=True, the default).
    Streams wait on events (Stream.wait). device: as Device() takes it.

    >>> import numpy as np
    >>> from hipindexer import Device, DeviceArray, Event
    >>> dev = Device("emu:gfx950")
    >>> start = Event(dev).record()
    >>> a = DeviceArray.empty((1024,), np.float32, dev).fill(0)
    >>> end = Event(dev).record()
    >>> end.synchronize()
    >>> start.elapsed_ms(end) >= 0
    True
    """

    def __init__(self, device=None, timing=True):
        self.device = Device(device)
        self.device.activate()
        self.handle = self.device._b.event_create(timing)

    def record(self, stream=None):
        """Record the event on `stream` (anything stream= accepts; None: the device's default); returns self."""
        self.device._b.event_record(self.handle, as_stream(stream, self.device).handle)
        return self

    def synchronize(self):
        """Wait until the work before the event's last record has finished."""
        self.device._b.event_synchronize(self.handle)

    def elapsed_ms(self, other):
        """Milliseconds from this event to `other` (both recorded; `other` completed)."""
        return self.device._b.event_elapsed_ms(self.handle, other.handle)

    def __del__(self):
        if sys.is_finalizing():  # (see _Allocation.__del__)
            return
        try:
            self.device._b.event_destroy(self.handle)
        except Exception:
            pass
