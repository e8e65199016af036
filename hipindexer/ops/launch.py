"""What every device op shares: devices and targets, argument adoption and upload, the prepared-launch cache,
and the checks of out=, errors= and tunables.

Arguments may be numpy arrays (copied to the device on the op's stream, freed
stream-ordered after the launch), DeviceArrays, or foreign device arrays
(``__cuda_array_interface__`` / ``__dlpack__``, zero-copy).  fp8 arguments may
also arrive as uint8 (the form fp8 takes across interop), read as e4m3fn.
An op checks every argument and plans its launch before anything is copied to
the device, and returns without synchronising.

An inference stack calls an op once per layer per step with the same shapes, so
a call whose arrays are all DeviceArrays keeps its prepared launch (plan, kernel,
packed arguments) under the arrays' layouts and the options; the next call with
the same key packs its pointers and enqueues, nothing else. The cache is per
thread: a prepared launch's parameter struct must not change between one
thread's packing and its launch call.
"""
from __future__ import annotations

import threading

import numpy as np

from ..arguments import F32, FP8, I32, U8
from ..plan import TARGETS, Target
from ..runtime import Device, DeviceArray, as_device_array, get_kernel

_DL_BACKEND = {2: "cuda", 13: "cuda", 10: "hip"}
_targets: dict = {}
_kernels: dict = {}
PREPARED_PER_THREAD = 256  # distinct (layouts, options) a thread keeps; the oldest goes first
INT32_MAX = (1 << 31) - 1

# Bits the kernels OR into errors[0] for values only the device holds.
ERROR_BLOCK_ID = 1      # a block-table entry that is read names no block of the cache
ERROR_SLOT = 2          # a cache writer's slot outside the cache
ERROR_LENGTH = 4        # a negative length, or next_n_lens outside 0..next_n


def kernel_for(device: Device, key: str, variant: dict | None = None):
    """The launchable kernel `key` (+ variant defines) on `device`, looked up once per process."""
    vkey = tuple(sorted(variant.items())) if variant else ()
    k = _kernels.get((device, key, vkey))
    if k is None:
        k = _kernels[(device, key, vkey)] = get_kernel(key, variant=variant, device=device)
    return k


def target_of(device: Device) -> Target:
    """The planner's description of a device (CU count and wave size read once)."""
    t = _targets.get(device)
    if t is None:
        base = TARGETS.get(device.arch)
        t = _targets[device] = Target(device.arch, device.num_cus, device.wave_size,
                                      base.max_grid_y if base else 65535)
    return t


def _device_of(x):
    if isinstance(x, DeviceArray):
        return x.device
    if hasattr(x, "__dlpack_device__") and not isinstance(x, np.ndarray):
        kind, idx = x.__dlpack_device__()
        if kind in _DL_BACKEND:
            return Device(f"{_DL_BACKEND[kind]}:{idx}")
    return None  # numpy, or a CUDA Array Interface object (which names no device): Device() decides


def resolve_device(device, args) -> Device:
    """device=None: the device of the first device-resident argument, else Device()."""
    if device is not None:
        return device if isinstance(device, Device) else Device(device)
    for a in args:
        if a is not None:
            d = _device_of(a)
            if d is not None:
                return d
    return Device()


def adopt(name: str, x, device: Device, stream, fp8: bool = False):
    """Argument `name` as a DeviceArray on `device` or, for host data, as a numpy array not yet copied:
    what the checks read (shape, dtype) without anything having moved. fp8 arguments may be uint8."""
    if type(x) is DeviceArray and x.device is device:
        return x.view(FP8) if fp8 and x.dtype == U8 else x
    if x is None:
        raise TypeError(f"{name}: expected an array, got None")
    if isinstance(x, np.ndarray) or np.isscalar(x) or isinstance(x, (list, tuple)):
        a = np.asarray(x)
    else:
        try:
            a = as_device_array(x, device=device, stream=stream)
        except TypeError as e:
            raise TypeError(f"{name}: {e}") from None
        if a.device is not device:
            raise ValueError(f"{name}: lives on {a.device!r}, but the op runs on {device!r}")
    return a.view(FP8) if fp8 and a.dtype == U8 else a


def upload_fields(call, names) -> None:
    """Copy a checked call's host arrays (its attributes `names`, None skipped) to its device, on its stream."""
    for name in names:
        a = getattr(call, name)
        if a is not None:
            setattr(call, name, upload(a, call.dev, call.st))


def upload(x, device: Device, stream) -> DeviceArray:
    """What adopt() returned, on the device: numpy arrays are copied (on `stream`), DeviceArrays pass."""
    return x if isinstance(x, DeviceArray) else DeviceArray.from_numpy(x, device, stream)


def check_resident(name: str, a, align: int = 0) -> None:
    """A device-resident argument must be C-contiguous (and `align`-byte aligned where given); host arrays
    are copied contiguous and aligned, so they pass."""
    if not isinstance(a, DeviceArray):
        return
    if not a.is_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous array, got strides {a.strides} for shape {a.shape}")
    if align and a.ptr % align:
        raise ValueError(f"{name}: the kernels read {align}-byte vectors; the data pointer must be {align}-byte aligned")


def check_tunables(op: str, tunables: dict, known) -> None:
    """TypeError for a tunable the op does not take."""
    unknown = sorted(set(tunables) - set(known))
    if unknown:
        raise TypeError(f"unknown tunable(s) {unknown}; the {op} op takes {list(known)}")


def device_only(name: str, x, device: Device, stream, what: str) -> DeviceArray:
    """An argument the op writes (`what` it holds): a device array, never numpy, whose copy would be lost."""
    if isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a device array ({what}); a numpy array would be a copy, and the "
                        f"result lost")
    return adopt(name, x, device, stream)


def check_out(out, rows: tuple[str, int], cols: tuple[str, int], device: Device, stream) -> DeviceArray | None:
    """out= as a DeviceArray of float32 [rows, cols] (a row stride >= cols allowed), or None to allocate.
    rows and cols are (name, size), the names the messages give."""
    if out is None:
        return None
    (rname, R), (cname, N) = rows, cols
    o = device_only("out", out, device, stream, "the logits")
    if o.dtype != F32 or o.shape != (R, N):
        raise ValueError(f"out: expected a float32 [{rname}={R}, {cname}={N}] device array, "
                         f"got {o.dtype.name} {o.shape}")
    if o.readonly:
        raise ValueError("out: the array is read-only")
    if o.strides[1] != 4 or (R > 1 and (o.strides[0] % 4 or o.strides[0] < 4 * N)):
        raise ValueError(f"out: rows must be contiguous with a row stride >= {cname} floats, got strides {o.strides}")
    return o


def check_errors(errors, device: Device, stream) -> DeviceArray | None:
    """errors= as a writable int32 [1] DeviceArray whose bits the kernels OR in (ERROR_*), or None."""
    if errors is None:
        return None
    e = device_only("errors", errors, device, stream, "int32 [1], flags OR-ed in by the kernel")
    if e.dtype != I32 or e.shape != (1,) or e.readonly:
        raise ValueError(f"errors: expected a writable int32 [1] device array, got {e.dtype.name} {e.shape}")
    return e


def check_workspace(workspace, cls, maker: str, device: Device) -> None:
    """workspace= of a top-k op: an instance of `cls` (made by hipindexer.`maker`) living on `device`."""
    if not isinstance(workspace, cls):
        raise TypeError(f"workspace: expected a {cls.__name__} (hipindexer.{maker}), got {type(workspace).__name__}")
    if workspace.device is not device:
        raise ValueError(f"workspace: lives on {workspace.device!r}, but the op runs on {device!r}")


class _NotResident(Exception):
    """An argument that is not a DeviceArray: the call takes the full path."""


def _absent(a):
    if a is None:
        return None
    raise _NotResident


def resident_key(arrays, *options):
    """The prepared-launch key of a call whose arrays are all DeviceArrays (None for an absent optional
    one), else None: host and foreign arrays take the full path every call. Options are keyed with their types
    (a tuple, such as a tunable's (name, value), with its items'): 1 == True, and a call passing 1 for a flag must
    reach the full path's type check, not the launch a call with True prepared."""
    try:
        kinds = tuple(map(type, options))
        if tuple in kinds:
            kinds = tuple(tuple(map(type, o)) if type(o) is tuple else type(o) for o in options)
        return (*[a.layout if type(a) is DeviceArray else _absent(a) for a in arrays], *options, kinds)
    except _NotResident:
        return None


class _PerThread(threading.local):
    def __init__(self):
        self.prepared = {}


_local = _PerThread()


def prepared(key):
    """This thread's prepared launch under `key`, or None (also for no key, or one that does not hash)."""
    try:
        return _local.prepared.get(key)
    except TypeError:  # an unhashable option: the full path checks it
        return None


def remember(key, entry) -> None:
    """Keep `entry` under `key` for this thread (nothing without a key, or with one that does not hash)."""
    cache = _local.prepared
    if key is None:
        return
    if len(cache) >= PREPARED_PER_THREAD:
        del cache[next(iter(cache))]
    try:
        cache[key] = entry
    except TypeError:
        pass
