"""The device ops: the reference's signatures plus out=, stream=, device= and tunables.

Arguments may be numpy arrays (copied to the device on the op's stream, freed
stream-ordered after the launch), DeviceArrays, or foreign device arrays
(``__cuda_array_interface__`` / ``__dlpack__``, zero-copy).  fp8 arguments may
also arrive as uint8 (the form fp8 takes across interop), read as e4m3fn.
Every argument is checked and the launch planned before anything is copied to
the device; the op returns without synchronising.
"""
from __future__ import annotations

import numpy as np

from .arguments import F32, FP8, U8, prefill_shape
from .planner import TARGETS, TUNABLES, Target, check_accumulation, plan_prefill
from .runtime import Device, DeviceArray, as_device_array, get_kernel
from .runtime.device import as_stream

_DL_BACKEND = {2: "cuda", 13: "cuda", 10: "hip"}
_targets: dict = {}
_kernels: dict = {}


def kernel_for(device: Device, key: str, variant: dict | None = None):
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


def _check_tunables(tunables: dict, known=TUNABLES) -> None:
    unknown = sorted(set(tunables) - set(known))
    if unknown:
        raise TypeError(f"unknown tunable(s) {unknown}; the prefill op takes {list(known)}")


def _check_out(out, M: int, N: int, device: Device, stream):
    """out= as a DeviceArray of [M, N] float32 rows (a row stride >= N allowed), or None to allocate."""
    if out is None:
        return None
    if isinstance(out, np.ndarray):
        raise TypeError("out: expected a device array (a numpy out would be a copy, and the result lost)")
    o = adopt("out", out, device, stream)
    if o.dtype != F32 or o.ndim != 2 or o.shape != (M, N):
        raise ValueError(f"out: expected a float32 [M={M}, N={N}] device array, got {o.dtype.name} {o.shape}")
    if o.readonly:
        raise ValueError("out: the array is read-only")
    if o.strides[1] != 4 or (M > 1 and (o.strides[0] % 4 or o.strides[0] < 4 * N)):
        raise ValueError(f"out: rows must be contiguous with a row stride >= N floats, got strides {o.strides}")
    return o


def fp8_mqa_logits(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=True, accumulation="fast",
                   out=None, stream=None, device=None, **tunables) -> DeviceArray:
    """Prefill logits [M, N] float32 on a GPU (DESIGN.md 1.1); see hipindexer.reference for the math.

    accumulation: "fast" (the fastest kernel, whatever its accumulation class) or "fp32" (fp32-class
    kernels only). out may have a row stride larger than N (the padding columns stay untouched).
    Tunables (None = the planner decides): kernel, rows_per_block, split, reverse_rows.
    """
    _check_tunables(tunables)
    check_accumulation(accumulation)
    dev = resolve_device(device, (q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, out))
    st = as_stream(stream, dev)
    qa = adopt("q", q, dev, st, fp8=True)
    ka = adopt("k", k, dev, st, fp8=True)
    sa = adopt("kv_scale", kv_scale, dev, st)
    wa = adopt("weights", weights, dev, st)
    ksa = adopt("cu_seqlen_ks", cu_seqlen_ks, dev, st)
    kea = adopt("cu_seqlen_ke", cu_seqlen_ke, dev, st)
    s = prefill_shape(qa, ka, sa, wa, ksa, kea)
    check_resident("q", qa, align=16)
    check_resident("k", ka, align=16)
    for name, a in (("kv_scale", sa), ("weights", wa), ("cu_seqlen_ks", ksa), ("cu_seqlen_ke", kea)):
        check_resident(name, a)
    o = _check_out(out, s.M, s.N, dev, st)
    plan = plan_prefill(s.M, s.N, s.H, s.D, target_of(dev), accumulation=accumulation, **tunables) \
        if s.M and s.N else None
    kern = kernel_for(dev, plan.kernel, plan.variant) if plan else None
    if o is None:
        o = DeviceArray.empty((s.M, s.N), np.float32, dev, st)
    if plan is None:
        return o
    qa, ka, sa, wa, ksa, kea = (upload(a, dev, st) for a in (qa, ka, sa, wa, ksa, kea))
    p = kern.params
    p.q, p.k, p.kv_scale, p.weights = qa.ptr, ka.ptr, sa.ptr, wa.ptr
    p.ks, p.ke, p.out = ksa.ptr, kea.ptr, o.ptr
    p.out_stride = o.strides[0] // 4 if s.M > 1 else s.N
    p.M, p.N, p.H, p.D = s.M, s.N, s.H, s.D
    p.rows_per_block, p.split, p.tile = plan.rows_per_block, plan.split, plan.tile
    p.clean, p.reverse_rows = int(bool(clean_logits)), int(plan.reverse_rows)
    kern.launch(plan.grid, plan.block, stream=st)
    return o
