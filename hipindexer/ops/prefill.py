"""The prefill op: ``fp8_mqa_logits`` on a device (docs/ops.md); arguments as hipindexer.ops.launch says."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arguments import PrefillShape, prefill_shape
from ..plan import check_accumulation, plan_prefill
from ..plan.prefill import TUNABLES
from ..runtime import DeviceArray
from ..runtime.device import as_stream
from .launch import (adopt, check_out, check_resident, check_tunables, kernel_for, prepared, remember, resident_key,
                     resolve_device, target_of, upload_fields)

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


@dataclass
class PrefillCall:
    """A prefill call's arguments after every check: its device and stream, the shape, each array adopted (a
    DeviceArray, or a numpy array not yet copied)."""
    dev: object
    st: object
    s: PrefillShape
    q: object
    k: object
    kv_scale: object
    weights: object
    ks: object
    ke: object

    def upload(self) -> None:
        """Copy the host arrays to the device (on the call's stream), once every check has passed."""
        upload_fields(self, ("q", "k", "kv_scale", "weights", "ks", "ke"))


def check_prefill_call(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, accumulation, stream, device, tunables,
                       known, op="prefill", others=()) -> PrefillCall:
    """Every check of a prefill call's inputs, before anything is copied: tunables (`known`), accumulation,
    shapes, dtypes, residency and alignment. `others`: more of the call's arrays (e.g. out=) that may name its
    device. The prefill ops share it."""
    check_tunables(op, tunables, known)
    check_accumulation(accumulation)
    dev = resolve_device(device, (q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, *others))
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
    return PrefillCall(dev, st, s, qa, ka, sa, wa, ksa, kea)


def _fp8_mqa_logits(arrays, clean_logits, accumulation, stream, device, tunables, key):
    """The full path: check, plan, upload host arrays, prepare the launch (kept under `key` when one is
    given), launch."""
    q, k, kv_scale, weights, ks, ke, out = arrays
    c = check_prefill_call(q, k, kv_scale, weights, ks, ke, accumulation, stream, device, tunables, TUNABLES,
                           others=(out,))
    dev, st, s = c.dev, c.st, c.s
    o = check_out(out, ("M", s.M), ("N", s.N), dev, st)
    plan = plan_prefill(s.M, s.N, s.H, s.D, target_of(dev), accumulation=accumulation, **tunables) \
        if s.M and s.N else None
    kern = kernel_for(dev, plan.kernel, plan.variant) if plan else None
    if o is None:
        o = DeviceArray.empty((s.M, s.N), np.float32, dev, st)
    if plan is None:
        return o
    launch = prepare_prefill(kern, plan, s, o.strides[0] // 4 if s.M > 1 else s.N, clean_logits)
    remember(key, (launch, dev, (s.M, s.N)))
    c.upload()
    launch(st.handle, c.q.ptr, c.k.ptr, c.kv_scale.ptr, c.weights.ptr, c.ks.ptr, c.ke.ptr, o.ptr)
    return o


def prepare_prefill(kern, plan, s, out_stride: int, clean_logits: bool):
    """The launch of a planned prefill kernel for shape s, a function of (stream, PREFILL_POINTERS' pointers)."""
    return kern.prepare(plan.grid, plan.block, pointers=PREFILL_POINTERS, out_stride=out_stride, M=s.M, N=s.N, H=s.H,
                        D=s.D, rows_per_block=plan.rows_per_block, split=plan.split, tile=plan.tile,
                        clean=int(bool(clean_logits)), reverse_rows=int(plan.reverse_rows))
