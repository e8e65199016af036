"""The paged decode op: ``fp8_paged_mqa_logits`` on a device (DESIGN.md 1.2-1.4).

Arguments are handled as by the prefill op (hipindexer.ops): numpy arrays are
copied to the device on the op's stream, DeviceArrays and foreign device arrays
(``__cuda_array_interface__`` / ``__dlpack__``) are used in place, fp8 may
arrive as uint8. Shapes, dtypes and every host (numpy) value are checked before
anything is copied or launched; values that only the device holds are never
trusted: the kernel skips what is out of range and reports it through
``errors=``. The op returns without synchronising.
"""
from __future__ import annotations

import numpy as np

from .arguments import F32, FP8, I32, U8, check_decode_block_tables, check_decode_lengths, decode_shape
from .decode_plan import DECODE_TUNABLES, plan_decode
from .ops import kernel_for, resolve_device, target_of, to_device
from .runtime import DeviceArray
from .runtime.device import _as_stream

# Bits the kernels OR into errors[0] (DESIGN.md 1.4).
ERROR_BLOCK_ID = 1      # a block-table entry that is read names no block of the cache
ERROR_SLOT = 2          # a cache writer's slot outside the cache (the writers' bit)
ERROR_LENGTH = 4        # a negative context length, or next_n_lens outside 0..next_n
INT32_MAX = (1 << 31) - 1


def _host_or_device(name: str, x, device, stream, fp8: bool = False):
    """numpy stays on the host until the checks pass; device arrays are imported (zero-copy) now."""
    if type(x) is DeviceArray and x.device is device:  # the hot path: nothing to convert
        return x.view(FP8) if fp8 and x.dtype == U8 else x
    if isinstance(x, np.ndarray) or np.isscalar(x) or isinstance(x, (list, tuple)):
        a = np.asarray(x)
        return a.view(FP8) if fp8 and a.dtype == U8 else a
    return to_device(name, x, device, stream, fp8=fp8)


def _device_only(name: str, x, device, stream, what: str) -> DeviceArray:
    if isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a device array ({what}); a numpy array would be a copy, and the "
                        f"result lost")
    return to_device(name, x, device, stream)


def _out(out, R: int, N: int, device, stream) -> DeviceArray:
    if out is None:
        return DeviceArray.empty((R, N), np.float32, device, stream)
    o = _device_only("out", out, device, stream, "the logits")
    if o.dtype != F32 or o.shape != (R, N):
        raise ValueError(f"out: expected a float32 [B * next_n={R}, max_model_len={N}] device array, "
                         f"got {o.dtype.name} {o.shape}")
    if o.readonly:
        raise ValueError("out: the array is read-only")
    if o.strides[1] != 4 or (R > 1 and (o.strides[0] % 4 or o.strides[0] < 4 * N)):
        raise ValueError(f"out: rows must be contiguous with a row stride >= max_model_len floats, "
                         f"got strides {o.strides}")
    return o


def _errors(errors, device, stream) -> DeviceArray | None:
    if errors is None:
        return None
    e = _device_only("errors", errors, device, stream, "int32 [1], flags OR-ed in by the kernel")
    if e.dtype != I32 or e.size < 1 or e.readonly:
        raise ValueError(f"errors: expected a writable int32 [1] device array, got {e.dtype.name} {e.shape}")
    return e


_CHECKED: dict = {}   # shapes, dtypes and options -> (DecodeShape, DecodePlan): what is fixed across steps
_CHECKED_MAX = 1024


def _checked(dev, qa, ca, wa, cl, bt, nl, max_model_len, preshuffle, split_kv, accumulation, kernel):
    """decode_shape and plan_decode, remembered for each combination of shapes and options already seen
    (a serving loop calls the op with the same shapes every step)."""
    key = (dev, qa.shape, qa.dtype, ca.shape, ca.dtype, wa.shape, wa.dtype, cl.shape, cl.dtype, bt.shape, bt.dtype,
           None if nl is None else (nl.shape, nl.dtype), max_model_len, bool(preshuffle), split_kv, accumulation,
           kernel)
    try:
        hit = _CHECKED.get(key)
    except TypeError:  # an unhashable option: checked below, never remembered
        key, hit = None, None
    if hit is not None:
        return hit
    s = decode_shape(qa, ca, wa, cl, bt, max_model_len, nl, preshuffle, split_kv)
    if s.max_model_len > INT32_MAX:
        raise ValueError(f"max_model_len: {s.max_model_len} is past int32")
    extra = {} if kernel is None else {"kernel": kernel}
    plan = None if s.B == 0 else plan_decode(s.B, s.next_n, s.H, s.D, s.block_size, s.max_model_len, target_of(dev),
                                             preshuffle=preshuffle, accumulation=accumulation, split_kv=split_kv,
                                             **extra)
    if key is not None:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[key] = (s, plan)
    return s, plan


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len, next_n_lens=None,
                         preshuffle=False, split_kv=None, clean_logits=True, accumulation="fast", errors=None,
                         out=None, stream=None, device=None, **tunables) -> DeviceArray:
    """Decode logits [B * next_n, max_model_len] float32 from a paged fp8 K cache on a GPU (DESIGN.md 1.2);
    see hipindexer.reference for the math.

    kv_cache: uint8 [num_blocks, block_size, D + 4] (or vLLM's [.., block_size, 1, D + 4] view) in the
    block-flat or, with preshuffle=True, the preshuffled layout. split_kv: units per sequence (None: the
    planner's choice from shapes; see hipindexer.decode_plan.plan_decode). errors: an int32 [1] device array
    whose bits the kernel ORs in (ERROR_BLOCK_ID, ERROR_LENGTH) for device values out of range; their keys or
    rows come out -inf. out may have a row stride larger than max_model_len (the padding stays untouched).
    accumulation: "fast" or "fp32" (fp32-class kernels only). Tunable: kernel.
    """
    unknown = sorted(set(tunables) - set(DECODE_TUNABLES))
    if unknown:
        raise TypeError(f"unknown tunable(s) {unknown}; the decode op takes {list(DECODE_TUNABLES)}")
    dev = resolve_device(device, (q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, out))
    st = _as_stream(stream, dev)
    qa = _host_or_device("q", q, dev, st, fp8=True)
    ca = _host_or_device("kv_cache", kv_cache, dev, st)
    wa = _host_or_device("weights", weights, dev, st)
    cl = _host_or_device("context_lens", context_lens, dev, st)
    bt = _host_or_device("block_tables", block_tables, dev, st)
    nl = None if next_n_lens is None else _host_or_device("next_n_lens", next_n_lens, dev, st)
    s, plan = _checked(dev, qa, ca, wa, cl, bt, nl, max_model_len, preshuffle, split_kv, accumulation,
                       tunables.get("kernel"))
    if type(cl) is not DeviceArray or type(bt) is not DeviceArray or (nl is not None and type(nl) is not DeviceArray):
        host = lambda a: a if isinstance(a, np.ndarray) else None  # noqa: E731
        check_decode_lengths(s, host(cl), host(nl))
        if host(cl) is not None and host(bt) is not None:
            check_decode_block_tables(s, cl, bt)
    for name, a in (("q", qa), ("kv_cache", ca), ("weights", wa), ("context_lens", cl), ("block_tables", bt),
                    ("next_n_lens", nl)):  # device arrays as given (a numpy upload is contiguous and aligned)
        if type(a) is DeviceArray and not a.is_contiguous:
            raise ValueError(f"{name}: expected a C-contiguous array, got strides {a.strides} for shape {a.shape}")
        if name in ("q", "kv_cache") and type(a) is DeviceArray and a.ptr % 16:
            raise ValueError(f"{name}: the kernels read 16-byte vectors; the data pointer must be 16-byte aligned")
    o = _out(out, s.B * s.next_n, s.max_model_len, dev, st)
    ea = _errors(errors, dev, st)
    if plan is None:  # an empty batch
        return o
    if type(qa) is not DeviceArray:
        qa = to_device("q", qa, dev, st, fp8=True)
    if type(ca) is not DeviceArray:
        ca = to_device("kv_cache", ca, dev, st)
    if type(wa) is not DeviceArray:
        wa = to_device("weights", wa, dev, st)
    if type(cl) is not DeviceArray:
        cl = to_device("context_lens", cl, dev, st)
    if type(bt) is not DeviceArray:
        bt = to_device("block_tables", bt, dev, st)
    if nl is not None and type(nl) is not DeviceArray:
        nl = to_device("next_n_lens", nl, dev, st)
    kern = kernel_for(dev, plan.kernel, plan.variant)
    p = kern.params
    p.q, p.kv_cache, p.weights, p.context_lens = qa.ptr, ca.ptr, wa.ptr, cl.ptr
    p.next_n_lens = nl.ptr if nl is not None else 0
    p.block_tables, p.out, p.errors = bt.ptr, o.ptr, ea.ptr if ea is not None else 0
    p.out_stride = o.strides[0] // 4 if s.B * s.next_n > 1 else s.max_model_len
    p.num_blocks = s.num_blocks
    p.B, p.next_n, p.H, p.D, p.block_size = s.B, s.next_n, s.H, s.D, s.block_size
    p.max_blocks, p.max_model_len = s.max_blocks, s.max_model_len
    p.clean, p.preshuffle = int(bool(clean_logits)), int(bool(preshuffle))
    kern.launch(plan.grid, plan.block, stream=st)
    return o
