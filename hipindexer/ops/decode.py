"""The paged decode op: ``fp8_paged_mqa_logits`` on a device (docs/ops.md).

Arguments are handled as by the prefill op (hipindexer.ops.launch): numpy arrays are
copied to the device on the op's stream, DeviceArrays and foreign device arrays
(``__cuda_array_interface__`` / ``__dlpack__``) are used in place, fp8 may
arrive as uint8. Shapes, dtypes and every host (numpy) value are checked before
anything is copied or launched; values that only the device holds are never
trusted: the kernel skips what is out of range and reports it through
``errors=``. The op returns without synchronising.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arguments import DecodeShape, check_decode_block_tables, check_decode_lengths, decode_shape
from ..plan import check_accumulation, plan_decode
from ..plan.decode import DECODE, DECODE_TUNABLES
from ..runtime import DeviceArray
from ..runtime.device import as_stream
from .claims import claim_pairs
from .kv_map import kv_map_finder
from .launch import (INT32_MAX, adopt, check_errors, check_out, check_resident, check_tunables, kernel_for, prepared,
                     remember, resident_key, resolve_device, target_of, upload_fields)

# The per-call pointers of DecodeParams, in struct order (absent optional arrays pass 0).
DECODE_POINTERS = ("q", "kv_cache", "weights", "context_lens", "next_n_lens", "block_tables", "out", "errors")
DECODE_DEAL_POINTERS = DECODE_POINTERS + ("claims", "kv_map")  # DecodeTmaParams': the map's bytes last


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len, next_n_lens=None,
                         preshuffle=False, split_kv=None, clean_logits=True, accumulation="fast", errors=None,
                         out=None, stream=None, device=None, **tunables) -> DeviceArray:
    """Decode logits [B * next_n, max_model_len] float32 from a paged fp8 K cache on a device; the math is
    hipindexer.reference.fp8_paged_mqa_logits's (docs/ops.md states it).

        row r = b * next_n + j, live_b = next_n_lens[b] (next_n when not given); for j < live_b, column n is
        valid iff n <= context_lens[b] - live_b + j and n < max_model_len (with [B, next_n] context_lens:
        iff n < context_lens[b, j] and n < max_model_len), and there
        logits[r, n] = sum_h max(0, q[b, j, h] . K_b[n]) * scale_b[n] * weights[r, h]

    q: [B, next_n, H, D] fp8 e4m3fn (or uint8); kv_cache: uint8 [num_blocks, block_size, D + 4] (or vLLM's
    [.., block_size, 1, D + 4] view) in the block-flat or, with preshuffle=True, the preshuffled layout;
    weights: [B * next_n, H] float32; context_lens: [B] int32 (this step's tokens included), or [B, next_n]
    int32, each row's own key count (DeepGEMM's form: row j sees the keys n < context_lens[b, j]);
    block_tables: [B, max_blocks] int32; next_n_lens: optional [B] int32 in 0..next_n (not with [B, next_n]
    context_lens). Arrays may be numpy (copied on `stream` after every check passed), DeviceArrays, or
    foreign device arrays (zero-copy).
    split_kv: units per sequence (None: the planner's choice from shapes alone; see plan_decode).
    clean_logits: True writes -inf at every other position of the output; False leaves them unwritten.
    accumulation: "fast" or "fp32" (fp32-class kernels only; docs/accuracy.md).
    errors: an int32 [1] device array whose bits the kernel ORs in for device-held values out of range
    (ERROR_BLOCK_ID: a block id outside [0, num_blocks), whose keys come out -inf and are never read;
    ERROR_LENGTH: a negative length or next_n_lens outside 0..next_n, whose rows come out -inf (a negative
    per-row length: that row only); the bits are hipindexer.ops.launch's).
    out: None (a new array) or a float32 [B * next_n, max_model_len] device array whose row stride may
    exceed max_model_len (the padding stays untouched). stream, device: as for fp8_mqa_logits.
    Tunables: kernel, deal_share, deal_grain (plan_decode).

    Returns the logits DeviceArray without waiting. A call whose arrays are all DeviceArrays reuses the
    launch it prepared for the same layouts and options. Host (numpy) values out of range (a block id
    outside the cache among the entries a row reads, a negative length, next_n_lens above next_n) raise
    ValueError; wrong dtypes TypeError; wrong shapes, strides or alignment ValueError naming the argument;
    all before anything is copied or launched.

    On the CPU emulator of the gfx950 kernels (a source checkout after `python build.py`):

    >>> import numpy as np
    >>> import hipindexer
    >>> from hipindexer import testing
    >>> case = testing.DecodeCase(B=2, next_n=2, H=16, D=64, block_size=16, mean_context=40)
    >>> inp = testing.decode_inputs(np.random.default_rng(0), case)
    >>> logits = hipindexer.fp8_paged_mqa_logits(*inp.args(), device="emu:gfx950")
    >>> logits.shape == (4, inp.max_model_len)
    True
    """
    arrays = (q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, out)
    key = resident_key(arrays, max_model_len, preshuffle, split_kv, clean_logits, accumulation, device,
                       *tunables.items())
    hit = prepared(key)
    if hit is None or (q.ptr | kv_cache.ptr) % 16:  # a misaligned pointer: the full path says which
        return _fp8_paged_mqa_logits(arrays, max_model_len, preshuffle, split_kv, clean_logits, accumulation,
                                     stream, device, tunables, key)
    launch, dev, shape, extras = hit
    st = dev.default_stream if stream is None else as_stream(stream, dev)
    if out is None:
        out = DeviceArray.empty(shape, np.float32, dev, st)
    launch_decode(launch, extras, st, q, kv_cache, weights, context_lens, next_n_lens, block_tables, out, errors)
    return out


def launch_decode(launch, extras, st, q, kv_cache, weights, context_lens, next_n_lens, block_tables, out, errors):
    """A prepared decode launch on device arrays; a tensor-copy kernel also takes the stream's claim pair and the
    cache's map (extras, of prepare_decode)."""
    launch(st.handle, *decode_pointers(extras, st, q, kv_cache, weights, context_lens, next_n_lens, block_tables,
                                       out, errors))


def decode_pointers(extras, st, q, kv_cache, weights, context_lens, next_n_lens, block_tables, out, errors) -> tuple:
    """The per-call values of a prepared decode launch (DECODE_POINTERS' order; with extras, the stream's claim
    pair and the cache's tensor map after them), from device arrays (next_n_lens and errors may be None)."""
    ptrs = (q.ptr, kv_cache.ptr, weights.ptr, context_lens.ptr, 0 if next_n_lens is None else next_n_lens.ptr,
            block_tables.ptr, out.ptr, 0 if errors is None else errors.ptr)
    return ptrs if extras is None else (*ptrs, *extras(st, kv_cache.ptr))


@dataclass
class DecodeCall:
    """A decode call's arguments after every check: its device and stream, the shape, each array adopted
    (a DeviceArray, or a numpy array not yet copied; next_n_lens and errors may be None)."""
    dev: object
    st: object
    s: DecodeShape
    q: object
    kv_cache: object
    weights: object
    context_lens: object
    block_tables: object
    next_n_lens: object
    errors: object

    def upload(self) -> None:
        """Copy the host arrays to the device (on the call's stream), once every check has passed."""
        upload_fields(self, ("q", "kv_cache", "weights", "context_lens", "block_tables", "next_n_lens"))


def check_decode_call(q, kv_cache, weights, context_lens, block_tables, max_model_len, next_n_lens, preshuffle,
                      split_kv, accumulation, errors, stream, device, tunables, known, op="decode",
                      others=()) -> DecodeCall:
    """Every check of a decode call's inputs, before anything is copied: tunables (`known`), accumulation,
    shapes, dtypes, host values, residency and alignment, errors=. `others`: more of the call's arrays
    (e.g. out=) that may name its device. The decode ops share it."""
    check_tunables(op, tunables, known)
    check_accumulation(accumulation)
    dev = resolve_device(device, (q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, *others))
    st = as_stream(stream, dev)
    qa = adopt("q", q, dev, st, fp8=True)
    ca = adopt("kv_cache", kv_cache, dev, st)
    wa = adopt("weights", weights, dev, st)
    cl = adopt("context_lens", context_lens, dev, st)
    bt = adopt("block_tables", block_tables, dev, st)
    nl = None if next_n_lens is None else adopt("next_n_lens", next_n_lens, dev, st)
    s = decode_shape(qa, ca, wa, cl, bt, max_model_len, nl, preshuffle, split_kv)
    if s.max_model_len > INT32_MAX:
        raise ValueError(f"max_model_len: {s.max_model_len} is past int32")
    host = lambda a: a if isinstance(a, np.ndarray) else None  # noqa: E731
    check_decode_lengths(s, host(cl), host(nl))
    if host(cl) is not None and host(bt) is not None:
        check_decode_block_tables(s, cl, bt)
    check_resident("q", qa, align=16)
    check_resident("kv_cache", ca, align=16)
    for name, a in (("weights", wa), ("context_lens", cl), ("block_tables", bt), ("next_n_lens", nl)):
        if a is not None:
            check_resident(name, a)
    ea = check_errors(errors, dev, st)
    return DecodeCall(dev, st, s, qa, ca, wa, cl, bt, nl, ea)


def _fp8_paged_mqa_logits(arrays, max_model_len, preshuffle, split_kv, clean_logits, accumulation, stream, device,
                          tunables, key):
    """The full path: check shapes, host values and options, plan, upload host arrays, prepare the launch
    (kept under `key` when one is given), launch."""
    q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, out = arrays
    c = check_decode_call(q, kv_cache, weights, context_lens, block_tables, max_model_len, next_n_lens, preshuffle,
                          split_kv, accumulation, errors, stream, device, tunables, DECODE_TUNABLES, others=(out,))
    dev, st, s = c.dev, c.st, c.s
    qa, ca, wa, cl, bt, nl, ea = c.q, c.kv_cache, c.weights, c.context_lens, c.block_tables, c.next_n_lens, c.errors
    o = check_out(out, ("B * next_n", s.B * s.next_n), ("max_model_len", s.max_model_len), dev, st)
    extra = {k: v for k, v in tunables.items() if v is not None}
    plan = None if s.B == 0 else plan_decode(s.B, s.next_n, s.H, s.D, s.block_size, s.max_model_len,
                                             target_of(dev), preshuffle=preshuffle, accumulation=accumulation,
                                             split_kv=split_kv, **extra)
    kern = kernel_for(dev, plan.kernel, plan.variant) if plan else None
    if o is None:
        o = DeviceArray.empty((s.B * s.next_n, s.max_model_len), np.float32, dev, st)
    if plan is None:  # an empty batch
        return o
    launch, extras = prepare_decode(dev, kern, plan, s, o.strides[0] // 4 if s.B * s.next_n > 1 else s.max_model_len,
                                    clean_logits, preshuffle)
    remember(key, (launch, dev, (s.B * s.next_n, s.max_model_len), extras))
    c.upload()
    launch_decode(launch, extras, st, c.q, c.kv_cache, c.weights, c.context_lens, c.next_n_lens, c.block_tables, o,
                  ea)
    return o


def plan_and_prepare_decode(dev, s: DecodeShape, out_stride: int, clean_logits: bool, extras=None, **plan_kw):
    """prepare_decode of the kernel plan_decode picks for shape s (its max_model_len the columns written, plan_kw
    plan_decode's options, preshuffle among them) into rows out_stride floats apart."""
    plan = plan_decode(s.B, s.next_n, s.H, s.D, s.block_size, s.max_model_len, target_of(dev), **plan_kw)
    return prepare_decode(dev, kernel_for(dev, plan.kernel, plan.variant), plan, s, out_stride, clean_logits,
                          plan_kw.get("preshuffle", False), extras)


def prepare_decode(dev, kern, plan, s: DecodeShape, out_stride: int, clean_logits: bool, preshuffle: bool,
                   extras=None):
    """(launch, extras) of a planned decode kernel for shape s: the launch, a function of (stream,
    DECODE_POINTERS' pointers[, the claim pair, the cache's tensor map]), and for a kernel that reads the cache
    through a tensor map, f(stream, cache address) -> (the stream's claim pair, 0 where the plan deals nothing,
    and that map's bytes) (launch_decode passes them; `extras` reuses one made for the same kernel and cache
    shape), else None."""
    tma = DECODE.by_key[plan.kernel].kv_map
    deal = dict(deal_share=plan.deal_share, deal_grain=plan.deal_grain) if tma else {}
    launch = kern.prepare(plan.grid, plan.block, pointers=DECODE_DEAL_POINTERS if tma else DECODE_POINTERS,
                          out_stride=out_stride, num_blocks=s.num_blocks, B=s.B, next_n=s.next_n, H=s.H, D=s.D,
                          block_size=s.block_size, max_blocks=s.max_blocks, max_model_len=s.max_model_len,
                          clean=int(bool(clean_logits)), preshuffle=int(bool(preshuffle)),
                          lens_per_row=int(s.lens_per_row), **deal)
    if not tma:
        return launch, None
    if extras is not None:
        return launch, extras
    map_of = kv_map_finder(dev, s.num_blocks, s.block_size, s.D, bool(preshuffle))
    if not plan.deal_share:  # nothing dealt: the kernel never reads the pair, so no stream takes one
        return launch, lambda st, address: (0, map_of(address))
    pair_of = claim_pairs(kern)
    return launch, lambda st, address: (pair_of(st.handle), map_of(address))
