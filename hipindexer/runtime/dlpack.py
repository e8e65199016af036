"""DLPack capsules through ctypes: build (export) and read (import) DLManagedTensor[Versioned].

Layouts follow dlpack.h (1.x).

Exports ride on a capsule numpy makes, retargeted at our memory. A capsule can
die while its consumer's exception is pending (a consumer that refuses the
tensor drops the capsule and returns its error), and Python code cannot run
then without losing that exception: ctypes reports and clears any error around
a callback. So the capsule's destructor and the tensor's deleter must be C, and
the package has no C of its own; numpy's are the ones DLPack prescribes (the
deleter frees the managed tensor and drops its owner, a numpy array whose base
holds what we export).
"""
import ctypes
from ctypes import POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p

import ml_dtypes
import numpy as np

KDL_CPU, KDL_CUDA, KDL_ROCM, KDL_CUDA_MANAGED = 1, 2, 10, 13
READ_ONLY = 1


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", _Deleter)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", _Deleter),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


# Capsule names must outlive their capsules: module constants.
NAME, NAME_V, USED, USED_V = b"dltensor", b"dltensor_versioned", b"used_dltensor", b"used_dltensor_versioned"
_USED_P, _USED_V_P = c_char_p(USED), c_char_p(USED_V)

_api = ctypes.pythonapi
_valid = _api["PyCapsule_IsValid"]
_valid.restype, _valid.argtypes = c_int, [ctypes.py_object, c_char_p]
_get = _api["PyCapsule_GetPointer"]
_get.restype, _get.argtypes = c_void_p, [ctypes.py_object, c_char_p]
_set_name = _api["PyCapsule_SetName"]
_set_name.restype, _set_name.argtypes = c_int, [ctypes.py_object, c_char_p]


def _versioned_exports() -> bool:
    try:
        return _valid(np.zeros(1, np.uint8).__dlpack__(max_version=(1, 0)), NAME_V) == 1
    except TypeError:  # numpy < 2.1: legacy capsules only
        return False


VERSIONED = _versioned_exports()
_HOST_BYTE = np.zeros(1, np.uint8)  # what the carrier array points at; numpy never reads it


class _Carrier:
    """The base of the numpy array whose capsule carries an export: it holds the exported object."""

    def __init__(self, keepalive, ndim):
        self.keepalive = keepalive
        # Stride 0 over extent 2 keeps the array non-contiguous, so numpy fills the capsule's strides too.
        self.__array_interface__ = {"version": 3, "typestr": "|u1", "data": (_HOST_BYTE.ctypes.data, False),
                                    "shape": (2,) * ndim, "strides": (0,) * ndim}
# -- dtypes: ml_dtypes types (kind 'V') cross as unsigned ints of their size; the format is metadata --
_FROM_DL = {(10, 8): ml_dtypes.float8_e4m3fn, (11, 8): ml_dtypes.float8_e4m3fnuz,
            (12, 8): ml_dtypes.float8_e5m2, (13, 8): ml_dtypes.float8_e5m2fnuz, (4, 16): ml_dtypes.bfloat16}
_KIND = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


def interop_dtype(dtype):
    dtype = np.dtype(dtype)
    return np.dtype(f"u{dtype.itemsize}") if dtype.kind == "V" else dtype


def to_dl_dtype(dtype):
    d = interop_dtype(dtype)
    if d.kind not in _KIND:
        raise BufferError(f"dtype {dtype} has no DLPack type")
    return _KIND[d.kind], d.itemsize * 8


def from_dl_dtype(code, bits, lanes):
    if lanes != 1:
        raise BufferError(f"DLPack lanes={lanes} unsupported")
    if (code, bits) in _FROM_DL:
        return np.dtype(_FROM_DL[(code, bits)])
    kind = {v: k for k, v in _KIND.items()}.get(code)
    if kind is None:
        raise BufferError(f"DLPack dtype code {code} ({bits} bits) unsupported")
    return np.dtype(bool) if kind == "b" else np.dtype(f"{kind}{bits // 8}")


def make_capsule(ptr, shape, strides_bytes, dtype, dl_device, keepalive, versioned=False, readonly=False):
    """A capsule for a strided tensor at `ptr`; `keepalive` lives until the consumer's deleter call, or until
    the capsule dies unconsumed. versioned=True gives a legacy capsule where numpy makes no versioned ones
    (the spec allows it)."""
    dtype = np.dtype(dtype)
    code, bits = to_dl_dtype(dtype)
    nd = len(shape)
    carrier = np.asarray(_Carrier(keepalive, nd))
    versioned = versioned and VERSIONED
    cap = carrier.__dlpack__(max_version=(1, 0)) if versioned else carrier.__dlpack__()
    if versioned:
        m = DLManagedTensorVersioned.from_address(_get(cap, NAME_V))
        m.flags = READ_ONLY if readonly else 0
    else:
        m = DLManagedTensor.from_address(_get(cap, NAME))
    t = m.dl_tensor
    t.data, t.device, t.byte_offset = ptr or None, DLDevice(*dl_device), 0
    t.dtype = DLDataType(code, bits, 1)
    for i in range(nd):
        t.shape[i], t.strides[i] = shape[i], strides_bytes[i] // dtype.itemsize
    return cap


class CapsuleOwner:
    """Holds a consumed capsule's tensor; dropping it calls the producer's deleter once."""

    def __init__(self, addr, versioned, source=None):
        self.addr, self.versioned, self.source = addr, versioned, source

    def __del__(self):
        addr, self.addr = self.addr, None
        if addr:
            m = (DLManagedTensorVersioned if self.versioned else DLManagedTensor).from_address(addr)
            if m.deleter:
                m.deleter(addr)


def read_capsule(cap):
    """Consume a DLPack capsule -> (ptr, shape, strides_bytes, dtype, (dev_type, dev_id), owner, readonly)."""
    if _valid(cap, NAME_V):
        versioned = True
        addr = _get(cap, NAME_V)
        m = DLManagedTensorVersioned.from_address(addr)
        if m.version.major > 1:
            raise BufferError(f"DLPack {m.version.major}.{m.version.minor} tensors are not supported (max 1.x)")
        readonly = bool(m.flags & READ_ONLY)
    elif _valid(cap, NAME):
        versioned, readonly = False, False
        addr = _get(cap, NAME)
        m = DLManagedTensor.from_address(addr)
    else:
        raise BufferError("not an unconsumed DLPack capsule (its name is not 'dltensor'/'dltensor_versioned')")
    t = m.dl_tensor
    nd = t.ndim
    dtype = from_dl_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    shape = tuple(t.shape[i] for i in range(nd))
    if t.strides:
        strides = tuple(t.strides[i] * dtype.itemsize for i in range(nd))
    else:
        strides = tuple(e * dtype.itemsize for e in _c_elems(shape))
    ptr = (t.data or 0) + t.byte_offset
    _set_name(cap, _USED_V_P if versioned else _USED_P)
    owner = CapsuleOwner(addr, versioned)
    return ptr, shape, strides, dtype, (t.device.device_type, t.device.device_id), owner, readonly


def _c_elems(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(int(n), 1)
    return out[::-1]
