"""The device ops: the reference's signatures plus out=, stream=, device= and tunables.

Arguments may be numpy arrays (copied to the device on the op's stream, freed
stream-ordered after the launch), DeviceArrays, or foreign device arrays
(``__cuda_array_interface__`` / ``__dlpack__``, zero-copy).  fp8 arguments may
also arrive as uint8 (the form fp8 takes across interop), read as e4m3fn.
Every argument is checked and the launch planned before anything is copied to
the device; the op returns without synchronising.

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

from .arguments import F32, FP8, U8, prefill_shape
from .planner import TARGETS, TUNABLES, Target, check_accumulation, plan_prefill
from .runtime import Device, DeviceArray, as_device_array, get_kernel
from .runtime.device import as_stream

_DL_BACKEND = {2: "cuda", 13: "cuda", 10: "hip"}
_targets: dict = {}
_kernels: dict = {}
PREPARED_PER_THREAD = 256  # distinct (layouts, options) a thread keeps; the oldest goes first


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


class _NotResident(Exception):
    """An argument that is not a DeviceArray: the call takes the full path."""


def _absent(a):
    if a is None:
        return None
    raise _NotResident


def resident_key(arrays, *options):
    """The prepared-launch key of a call whose arrays are all DeviceArrays (None for an absent optional
    one), else None: host and foreign arrays take the full path every call."""
    try:
        return (*[a.layout if type(a) is DeviceArray else _absent(a) for a in arrays], *options)
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


PREFILL_POINTERS = ("q", "k", "kv_scale", "weights", "ks", "ke", "out")


def fp8_mqa_logits(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=True, accumulation="fast",
                   out=None, stream=None, device=None, **tunables) -> DeviceArray:
    """Prefill logits [M, N] float32 on a device; the math is hipindexer.reference.fp8_mqa_logits's.

        logits[m, n] = sum_h max(0, q[m, h, :] . k[n, :]) * kv_scale[n] * weights[m, h]
                       for max(ks[m], 0) <= n < min(ke[m], N)

    q: [M, H, D] fp8 e4m3fn; k: [N, D] fp8 e4m3fn (either may arrive as uint8, the form fp8 takes across
    interop); kv_scale: [N] float32 (>= 0); weights: [M, H] float32; cu_seqlen_ks, cu_seqlen_ke: [M] int32,
    row m's key window [ks, ke) (ks may be negative, ke may exceed N, ke <= ks is an empty row).
    Each array may be a numpy array (copied to the device on `stream`, freed stream-ordered after the
    launch), a hipindexer DeviceArray, or a framework's device array through __cuda_array_interface__ or
    DLPack (zero-copy). Device-resident arrays must be C-contiguous, q and k 16-byte aligned.
    clean_logits: True writes -inf at every position outside the windows; False leaves them unwritten.
    accumulation: "fast" (the fastest kernel, whatever its accumulation class) or "fp32" (fp32-class
    kernels only); docs/accuracy.md says what each class guarantees and costs.
    out: None (a new [M, N] array on the device), or a float32 [M, N] device array, written and returned;
    its row stride may exceed N (the padding columns stay untouched).
    stream: None (the device's default stream), a hipindexer Stream, an object with __cuda_stream__ or
    a CuPy-style .ptr, or an int the driver names (0, and 1, 2 on CUDA); wrap any other handle with
    hipindexer.Stream(device, external=handle).
    device: None (the device of the first device-resident argument that names one, else Device(): the
    first GPU), a Device, or a spec such as "cuda:0", "hip:1", "emu:gfx950".
    Tunables (None = the planner decides; see hipindexer.plan_prefill): kernel, rows_per_block, split,
    reverse_rows.

    Returns a DeviceArray [M, N] float32 (`out` when given) without waiting: the work is queued on the
    stream; DeviceArray.numpy() waits for it. Fast kernels serve H in {32, 64} with D = 128; any other H
    and any D % 16 == 0 runs on the generic kernel. Calls from several threads at once are safe.
    A call whose arrays are all DeviceArrays reuses the launch it prepared for the same layouts and options.

    Raises, before anything is copied or launched: TypeError for a missing array, a wrong dtype, a numpy
    `out`, an unknown tunable or a stream it cannot use; ValueError for a wrong rank, a dimension that
    disagrees with another argument (named in the message), D not a multiple of 16, an `out` of the wrong
    shape, dtype or strides or read-only, a non-contiguous or misaligned device array, an array or a Stream
    of another device, an unknown accumulation, or a tunable the planner refuses. Device() raises
    hipindexer.runtime.NoDeviceError when there is no GPU; a target the package has no code object for
    raises hipindexer.runtime.KernelLookupError.

    On the CPU emulator of the gfx950 kernels (a source checkout after `python build.py`; on a GPU leave
    device= out):

    >>> import numpy as np
    >>> import hipindexer
    >>> from hipindexer import testing
    >>> inp = testing.prefill_inputs(np.random.default_rng(0), M=64, N=256, H=32, D=128, mode="causal")
    >>> logits = hipindexer.fp8_mqa_logits(*inp.args(), device="emu:gfx950")
    >>> logits.shape, logits.dtype.name
    ((64, 256), 'float32')
    >>> bool(hipindexer.gate.gate_prefill(logits.numpy(), inp, clean_logits=True, accumulation="fp32"))
    True
    """
    arrays = (q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, out)
    key = resident_key(arrays, clean_logits, accumulation, device, *tunables.items())
    hit = prepared(key)
    if hit is None or (q.ptr | k.ptr) % 16:  # a misaligned pointer: the full path says which
        return _fp8_mqa_logits(arrays, clean_logits, accumulation, stream, device, tunables, key)
    launch, dev, shape = hit
    st = dev.default_stream if stream is None else as_stream(stream, dev)
    if out is None:
        out = DeviceArray.empty(shape, np.float32, dev, st)
    launch(st.handle, q.ptr, k.ptr, kv_scale.ptr, weights.ptr, cu_seqlen_ks.ptr, cu_seqlen_ke.ptr, out.ptr)
    return out


def _fp8_mqa_logits(arrays, clean_logits, accumulation, stream, device, tunables, key):
    """The full path: check, plan, upload host arrays, prepare the launch (kept under `key` when one is
    given), launch."""
    _check_tunables(tunables)
    check_accumulation(accumulation)
    dev = resolve_device(device, arrays)
    st = as_stream(stream, dev)
    q, k, kv_scale, weights, ks, ke, out = arrays
    qa = adopt("q", q, dev, st, fp8=True)
    ka = adopt("k", k, dev, st, fp8=True)
    sa = adopt("kv_scale", kv_scale, dev, st)
    wa = adopt("weights", weights, dev, st)
    ksa = adopt("cu_seqlen_ks", ks, dev, st)
    kea = adopt("cu_seqlen_ke", ke, dev, st)
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
    launch = kern.prepare(plan.grid, plan.block, pointers=PREFILL_POINTERS,
                          out_stride=o.strides[0] // 4 if s.M > 1 else s.N, M=s.M, N=s.N, H=s.H, D=s.D,
                          rows_per_block=plan.rows_per_block, split=plan.split, tile=plan.tile,
                          clean=int(bool(clean_logits)), reverse_rows=int(plan.reverse_rows))
    remember(key, (launch, dev, (s.M, s.N)))
    qa, ka, sa, wa, ksa, kea = (upload(a, dev, st) for a in (qa, ka, sa, wa, ksa, kea))
    launch(st.handle, qa.ptr, ka.ptr, sa.ptr, wa.ptr, ksa.ptr, kea.ptr, o.ptr)
    return o
