"""The paged K cache on a device: quantise-and-write by slot, gather for prefill, packed prefill windows.

The device twins of hipindexer.cache's numpy helpers, bit for bit (docs/cache.md):
``quantize_and_cache_keys`` is ``cache.quantize_keys`` + ``cache.write_cache``, ``gather_cached_keys``
is ``cache.gather_keys`` of each request concatenated, ``packed_prefill_windows`` is
``cache.packed_prefill_windows``. Arguments are handled as by the prefill op (hipindexer.ops.launch): numpy
arrays are copied to the device on the op's stream, DeviceArrays and foreign device arrays are used in
place; every shape, dtype and host value is checked before anything is copied or launched; the ops
return without synchronising. Values only the device holds (slots, block ids, lengths) are never
trusted: what is out of range is skipped and reported through ``errors=`` (bits ERROR_BLOCK_ID,
ERROR_SLOT, ERROR_LENGTH of hipindexer.ops.launch).

A call whose arrays are all DeviceArrays keeps its prepared launch under their layouts and the
options, as the prefill op does, so a serving loop pays little Python per call.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..arguments import F32, FP8, I32, SCALE_BYTES, U8, cache_view, check_preshuffle, expect
from ..catalog import KERNEL
from ..runtime import DeviceArray
from ..runtime.device import as_stream
from .launch import (INT32_MAX, adopt, check_errors, check_resident, device_only, kernel_for, prepared, remember,
                     resident_key, resolve_device, upload)

BLOCK = KERNEL["quantize_and_cache"].block  # the writer's threads per block, which tokens_per_block divides
GATHER_BLOCK = KERNEL["gather_cached_keys"].block
WINDOWS_BLOCK = KERNEL["packed_prefill_windows"].block
# k's element type -> the kernel's dtype code (hsaco_src/common/fp8_quant.h: HX_KEY_F32, _F16, _BF16).
KEY_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(ml_dtypes.bfloat16): 2}
SLOT_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))


def tokens_per_block(D: int) -> int:
    """Tokens one block of the writer owns: BLOCK // G, G = min(D / 16, BLOCK) threads per token (one past
    D = 16 * BLOCK, where a thread takes several chunks of its token). The kernel derives the same."""
    return BLOCK // min(D // 16, BLOCK)


def _key_dim(name: str, D: int) -> None:
    if D < 16 or D % 16:
        raise ValueError(f"{name}: D must be a positive multiple of 16 (the kernels move 16-byte chunks), got {D}")


def _cache(kv_cache, D: int | None, device, stream, d_from: str, writable: bool):
    """kv_cache as (array, num_blocks, block_size, D); D None: read off the cache's last dim."""
    ca = device_only("kv_cache", kv_cache, device, stream, "the paged cache, written in place") if writable \
        else adopt("kv_cache", kv_cache, device, stream)
    if D is None:
        shape = tuple(ca.shape)
        if ca.dtype != U8:
            raise TypeError(f"kv_cache: expected dtype uint8 (fp8 keys + float32 scales as bytes), got {ca.dtype.name}")
        if len(shape) not in (3, 4) or (len(shape) == 4 and shape[2] != 1):
            raise ValueError(f"kv_cache: expected [num_blocks, block_size, D + 4] or "
                             f"[num_blocks, block_size, 1, D + 4], got shape {shape}")
        D = shape[-1] - SCALE_BYTES
        _key_dim(f"kv_cache (last dim {shape[-1]} = D + 4)", D)
    nb, bs = cache_view(ca, D, "kv_cache", d_from)
    if writable and ca.readonly:
        raise ValueError("kv_cache: the array is read-only")
    check_resident("kv_cache", ca, align=16)
    return ca, nb, bs, D


def _host(a):
    return a if isinstance(a, np.ndarray) else None


# ------------------------------------------------------------------ quantise and write

WRITE_POINTERS = ("k", "kv_cache", "slots", "errors")


def quantize_and_cache_keys(k, kv_cache, slot_mapping, preshuffle=False, power_of_two=False, errors=None,
                            stream=None, device=None) -> None:
    """Quantise key rows to fp8 and write them into the paged cache at their slots, on a device.

    Bit for bit what hipindexer.cache.quantize_keys(k, power_of_two) then cache.write_cache(kv_cache, ...,
    slot_mapping, preshuffle) do in numpy: per row scale = amax(|k|) / 448 in float32 (rounded up to a
    power of two when power_of_two, 1 for an all-zero row), k / scale in float32 rounded to nearest even
    and saturated at 448; the row's key bytes and its float32 scale land at slot_mapping[t] =
    block * block_size + offset, in the block-flat layout or, with preshuffle=True, the preshuffled one
    (docs/ops.md). vLLM's indexer_k_quant_and_cache clamps amax at 1e-4 first, so rows whose amax is
    below 1e-4 get a different scale and codes here (the numpy semantics: any nonzero amax is used).

    k: [T, D] float32, float16 or bfloat16 (ml_dtypes.bfloat16), D % 16 == 0; kv_cache: a uint8
    [num_blocks, block_size, D + 4] (or vLLM's [.., block_size, 1, D + 4]) device array, written in place
    (a numpy cache is refused: the write would be lost); slot_mapping: [T] int64 or int32, -1 skips the
    token. preshuffle needs block_size % 16 == 0. errors: an int32 [1] device array; a slot outside
    [-1, num_blocks * block_size) that only the device holds is never written through (no clamping onto
    another block) and sets bit 1 (ERROR_SLOT). stream, device: as for fp8_mqa_logits.

    Returns None; the work is queued on the stream. Raises, before anything is copied or launched:
    TypeError for a wrong dtype or a numpy kv_cache; ValueError for wrong shapes, D not a multiple of 16,
    a cache whose last dim is not D + 4, a read-only, non-contiguous or misaligned device array, a
    preshuffled layout the block size cannot take, and for host (numpy) values: a slot below -1 or past
    the cache, a slot given twice, a key that is NaN or Inf. Device-held keys holding NaN or Inf get an
    unspecified scale and codes. Two tokens with the same device-held slot: one of them wins.

    >>> import numpy as np
    >>> import hipindexer
    >>> from hipindexer import DeviceArray, cache
    >>> dev = hipindexer.Device("emu:gfx950")
    >>> kv = DeviceArray.from_numpy(cache.new_cache(4, 16, 64), dev)
    >>> k = np.random.default_rng(0).standard_normal((5, 64), dtype=np.float32)
    >>> hipindexer.quantize_and_cache_keys(k, kv, np.array([3, 17, -1, 40, 41]), device=dev)
    >>> want = cache.new_cache(4, 16, 64)
    >>> cache.write_cache(want, *cache.quantize_keys(k), np.array([3, 17, -1, 40, 41]))
    >>> bool((kv.numpy() == want).all())
    True
    """
    arrays = (k, kv_cache, slot_mapping, errors)
    key = resident_key(arrays, preshuffle, power_of_two, device)
    hit = prepared(key)
    if hit is None or (k.ptr | kv_cache.ptr) % 16:  # misaligned: the full path says which
        return _quantize_and_cache(arrays, preshuffle, power_of_two, stream, device, key)
    launch, dev = hit
    st = dev.default_stream if stream is None else as_stream(stream, dev)
    launch(st.handle, k.ptr, kv_cache.ptr, slot_mapping.ptr, 0 if errors is None else errors.ptr)


def _check_slots(slots: np.ndarray, num_slots: int) -> None:
    """Host slot values: -1 or a slot of the cache, each at most once."""
    if not slots.size:
        return
    lo, hi = int(slots.min()), int(slots.max())
    if lo < -1:
        raise ValueError(f"slot_mapping: slot {lo} is below -1 (-1 skips a token, no other negative slot exists)")
    if hi >= num_slots:
        raise ValueError(f"slot_mapping: slot {hi} is past the cache's {num_slots} slots")
    kept = slots[slots >= 0]
    if np.unique(kept).size != kept.size:
        raise ValueError("slot_mapping: a slot appears twice")


def _quantize_and_cache(arrays, preshuffle, power_of_two, stream, device, key):
    dev = resolve_device(device, arrays)
    st = as_stream(stream, dev)
    k, kv_cache, slot_mapping, errors = arrays
    ka = adopt("k", k, dev, st)
    if ka.dtype not in KEY_DTYPES:
        raise TypeError(f"k: expected dtype float32, float16 or bfloat16 [T, D], got {ka.dtype.name}")
    if ka.ndim != 2:
        raise ValueError(f"k: expected a 2-D array [T, D], got shape {tuple(ka.shape)}")
    T, D = ka.shape
    _key_dim("k", D)
    ca, nb, bs, _ = _cache(kv_cache, D, dev, st, "k's D (last dim)", writable=True)
    sa = adopt("slot_mapping", slot_mapping, dev, st)
    if sa.dtype not in SLOT_DTYPES:
        raise TypeError(f"slot_mapping: expected dtype int64 or int32 [T], got {sa.dtype.name}")
    if tuple(sa.shape) != (T,):
        raise ValueError(f"slot_mapping: expected shape [T={T}] (one slot per row of k), got {tuple(sa.shape)}")
    if T > INT32_MAX:
        raise ValueError(f"k: {T} rows, past int32")
    if preshuffle:
        check_preshuffle(bs, D)
    if _host(sa) is not None:
        _check_slots(sa, nb * bs)
    if _host(ka) is not None and not np.isfinite(ka.astype(np.float32)).all():
        row = int(np.argwhere(~np.isfinite(ka.astype(np.float32)))[0][0])
        raise ValueError(f"k: row {row} holds NaN or Inf; keys must be finite to quantise")
    check_resident("k", ka, align=16)
    check_resident("slot_mapping", sa)
    ea = check_errors(errors, dev, st)
    if T == 0:
        return None
    tt = tokens_per_block(D)
    launch = kernel_for(dev, "quantize_and_cache").prepare(
        -(-T // tt), BLOCK, pointers=WRITE_POINTERS, num_slots=nb * bs, T=T, D=D, block_size=bs,
        dtype=KEY_DTYPES[ka.dtype], slots64=int(sa.dtype.itemsize == 8), preshuffle=int(bool(preshuffle)),
        power_of_two=int(bool(power_of_two)))
    remember(key, (launch, dev))
    ka, sa = upload(ka, dev, st), upload(sa, dev, st)
    launch(st.handle, ka.ptr, ca.ptr, sa.ptr, 0 if ea is None else ea.ptr)
    return None


# ------------------------------------------------------------------ gather

GATHER_POINTERS = ("kv_cache", "block_tables", "cu_seq_lens", "out_k", "out_scale", "errors")


def gather_cached_keys(kv_cache, block_tables, cu_seq_lens, preshuffle=False, out=None, errors=None, stream=None,
                       device=None) -> tuple[DeviceArray, DeviceArray]:
    """Gather requests' keys and scales out of the paged cache into the contiguous buffers prefill takes.

    Requests r = 0..R-1 are packed back to back: rows cu_seq_lens[r] .. cu_seq_lens[r + 1] - 1 of the
    output are request r's first cu_seq_lens[r + 1] - cu_seq_lens[r] tokens, token i read from physical
    block block_tables[r, i // block_size] at offset i % block_size. Bit for bit the numpy
    hipindexer.cache.gather_keys of each request, concatenated; keys come out token-major from either
    layout (preshuffle=True: the cache is preshuffled). vLLM's cp_gather_indexer_k_quant_cache does this.

    kv_cache: uint8 [num_blocks, block_size, D + 4] (or [.., block_size, 1, D + 4]); block_tables:
    [R, max_blocks] int32; cu_seq_lens: [R + 1] int32, nondecreasing from 0. out: None (new arrays of
    N = cu_seq_lens[R] rows; needs cu_seq_lens on the host) or a pair (k_out [N, D] fp8 or uint8,
    scale_out [N] float32) of device arrays, N >= cu_seq_lens[R]; rows past cu_seq_lens[R] are not
    written. errors: an int32 [1] device array. Device-held values are never trusted: a block id
    outside [0, num_blocks) is never read through, its rows come out zero (key bytes 0, scale 0) and bit 0
    (ERROR_BLOCK_ID) is set; cu_seq_lens that decrease, start below 0 or end past N, or a request longer
    than its block-table row holds, set bit 2 (ERROR_LENGTH).

    Returns (k [N, D] float8_e4m3fn, scale [N] float32) DeviceArrays, or out's arrays as given (a uint8
    k_out stays uint8, which fp8_mqa_logits reads as fp8), without waiting: the `k` and `kv_scale` of
    hipindexer.fp8_mqa_logits. Raises, before anything is copied or
    launched: TypeError for wrong dtypes or a numpy out; ValueError for wrong shapes, a misaligned,
    non-contiguous or read-only device array, a preshuffled layout the block size cannot take, no out
    with device-held cu_seq_lens, and for host (numpy) values: cu_seq_lens not starting at 0, decreasing
    or ending past out, a request needing more blocks than its row has, a block id read that is outside
    the cache.

    >>> import numpy as np
    >>> import hipindexer
    >>> from hipindexer import cache
    >>> rng = np.random.default_rng(0)
    >>> tables, nb = cache.make_block_tables([20, 7], block_size=16, rng=rng)
    >>> kv = cache.new_cache(nb, 16, 64, fill=3)
    >>> k, s = hipindexer.gather_cached_keys(kv, tables, np.array([0, 20, 27], np.int32), device="emu:gfx950")
    >>> k.shape, s.shape, k.dtype.name
    ((27, 64), (27,), 'float8_e4m3fn')
    """
    out_k, out_s = _out_pair(out, "out", "(k_out, scale_out)")
    arrays = (kv_cache, block_tables, cu_seq_lens, out_k, out_s, errors)
    key = resident_key(arrays, preshuffle, device)
    hit = prepared(key)
    if hit is None or (kv_cache.ptr | out_k.ptr) % 16:
        return _gather(arrays, preshuffle, stream, device, key)
    launch, dev = hit
    st = dev.default_stream if stream is None else as_stream(stream, dev)
    launch(st.handle, kv_cache.ptr, block_tables.ptr, cu_seq_lens.ptr, out_k.ptr, out_s.ptr,
           0 if errors is None else errors.ptr)
    return out_k, out_s


def _out_pair(out, name: str, what: str):
    if out is None:
        return None, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{name}: expected None or a pair {what} of device arrays, got {type(out).__name__}")
    return out[0], out[1]


def _check_gather_values(cu: np.ndarray | None, bt: np.ndarray | None, nb: int, bs: int, max_blocks: int,
                         N: int | None) -> None:
    """Host values: cu_seq_lens from 0, nondecreasing, within the output; the block ids each request reads."""
    if cu is None:
        return
    cu = cu.astype(np.int64)
    if cu[0] != 0:
        raise ValueError(f"cu_seq_lens: must start at 0 (requests packed from row 0), got {int(cu[0])}")
    if (np.diff(cu) < 0).any():
        r = int(np.argmax(np.diff(cu) < 0))
        raise ValueError(f"cu_seq_lens: decreases at request {r} ({int(cu[r])} -> {int(cu[r + 1])})")
    if N is not None and cu[-1] > N:
        raise ValueError(f"cu_seq_lens: ends at {int(cu[-1])} rows, but out has {N}")
    need = -(-np.diff(cu) // bs)
    if (need > max_blocks).any():
        r = int(np.argmax(need > max_blocks))
        raise ValueError(f"block_tables: request {r} has {int(cu[r + 1] - cu[r])} tokens and needs {int(need[r])} "
                         f"blocks of {bs}, but block_tables has only {max_blocks} columns")
    if bt is None:
        return
    read = np.arange(max_blocks)[None, :] < need[:, None]
    bad = read & ((bt < 0) | (bt >= nb))
    if bad.any():
        r, j = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"block_tables: entry [{r}, {j}] = {int(bt[r, j])} is read but outside the cache's "
                         f"{nb} blocks")


def _gather(arrays, preshuffle, stream, device, key):
    dev = resolve_device(device, arrays)
    st = as_stream(stream, dev)
    kv_cache, block_tables, cu_seq_lens, out_k, out_s, errors = arrays
    ca, nb, bs, D = _cache(kv_cache, None, dev, st, "its last dim", writable=False)
    bt = adopt("block_tables", block_tables, dev, st)
    R, max_blocks = expect("block_tables", bt, I32, 2, "[R, max_blocks] int32")
    cu = adopt("cu_seq_lens", cu_seq_lens, dev, st)
    (Rc,) = expect("cu_seq_lens", cu, I32, 1, "[R + 1] int32")
    if Rc != R + 1:
        raise ValueError(f"cu_seq_lens: length is {Rc}, but block_tables' {R} rows (requests) need R + 1 = {R + 1}")
    if preshuffle:
        check_preshuffle(bs, D)
    if out_k is None and _host(cu) is None:
        raise ValueError("out: cu_seq_lens is on the device, so the output's length is not known here; pass "
                         "out=(k_out [N, D], scale_out [N])")
    ok, os_ = None, None
    if out_k is not None:
        for nm, o in (("out[0]", out_k), ("out[1]", out_s)):
            if isinstance(o, np.ndarray):
                raise TypeError(f"{nm}: expected a device array (a numpy out would be a copy, and the result lost)")
        given = adopt("out[0]", out_k, dev, st)  # returned as given: uint8 stays uint8
        ok, os_ = (given.view(FP8) if given.dtype == U8 else given), adopt("out[1]", out_s, dev, st)
        (N, Dk) = expect("out[0]", ok, FP8, 2, "[N, D] float8_e4m3fn (or uint8)")
        if Dk != D:
            raise ValueError(f"out[0]: D (last dim) is {Dk}, but kv_cache holds keys of D = {D}")
        (Ns,) = expect("out[1]", os_, F32, 1, "[N] float32")
        if Ns != N:
            raise ValueError(f"out[1]: length is {Ns}, but out[0] has {N} rows")
        for nm, o in (("out[0]", ok), ("out[1]", os_)):
            if o.readonly:
                raise ValueError(f"{nm}: the array is read-only")
        check_resident("out[0]", ok, align=16)
        check_resident("out[1]", os_)
    else:
        N = int(cu[-1])
    _check_gather_values(_host(cu), _host(bt), nb, bs, max_blocks, N)
    check_resident("block_tables", bt)
    check_resident("cu_seq_lens", cu)
    ea = check_errors(errors, dev, st)
    if ok is None:
        ok = given = DeviceArray.empty((N, D), FP8, dev, st)
        os_ = DeviceArray.empty((N,), np.float32, dev, st)
    items = N * (D // 16)
    if items == 0 or R == 0:
        return given, os_
    launch = kernel_for(dev, "gather_cached_keys").prepare(
        -(-items // GATHER_BLOCK), GATHER_BLOCK, pointers=GATHER_POINTERS, num_blocks=nb, N=N, R=R,
        max_blocks=max_blocks, D=D, block_size=bs, preshuffle=int(bool(preshuffle)))
    remember(key, (launch, dev))
    ca, bt, cu = (upload(a, dev, st) for a in (ca, bt, cu))
    launch(st.handle, ca.ptr, bt.ptr, cu.ptr, ok.ptr, os_.ptr, 0 if ea is None else ea.ptr)
    return given, os_


# ------------------------------------------------------------------ packed prefill windows

WINDOW_POINTERS = ("query_lens", "context_lens", "ks", "ke", "errors")


def packed_prefill_windows(query_lens, context_lens, num_rows=None, out=None, errors=None, stream=None,
                           device=None) -> tuple[DeviceArray, DeviceArray]:
    """The cu_seqlen_ks / cu_seqlen_ke of one prefill chunk of requests packed back to back, on a device.

    Bit for bit hipindexer.cache.packed_prefill_windows: request r has query_lens[r] rows, the last of
    its context_lens[r] tokens, whose keys sit at [K_r, K_r + context_lens[r]) of the gathered keys
    (K_r = sum(context_lens[:r]): what gather_cached_keys with cu_seq_lens = [0, cumsum(context_lens)]
    produces); row j of request r gets ks = K_r, ke = K_r + context_lens[r] - query_lens[r] + j + 1.
    Rows past the requests' get the empty window [0, 0). One kernel, no host sync: a captured graph
    replays with new lengths in the same arrays.

    query_lens, context_lens: [R] int32. num_rows: the rows M (default: sum(query_lens), which needs
    query_lens on the host; or out's length). out: None or a pair (ks_out [M], ke_out [M]) of int32
    device arrays. errors: an int32 [1] device array; device-held lengths that are negative, or query_lens
    above context_lens, or windows past int32, set bit 2 (ERROR_LENGTH) and give the request's rows
    empty windows.

    Returns (ks [M], ke [M]) int32 DeviceArrays (out's, when given) without waiting: the cu_seqlen_ks
    and cu_seqlen_ke of hipindexer.fp8_mqa_logits. Raises, before anything is copied or launched:
    TypeError for wrong dtypes or a numpy out; ValueError for wrong shapes, num_rows disagreeing with out
    or below the rows of host query_lens, no way to know M, and host values the numpy helper refuses.

    >>> import numpy as np
    >>> import hipindexer
    >>> ks, ke = hipindexer.packed_prefill_windows(np.array([2, 3], np.int32), np.array([5, 3], np.int32),
    ...                                            device="emu:gfx950")
    >>> ks.numpy().tolist(), ke.numpy().tolist()
    ([0, 0, 5, 5, 5], [4, 5, 6, 7, 8])
    """
    out_ks, out_ke = _out_pair(out, "out", "(ks_out, ke_out)")
    arrays = (query_lens, context_lens, out_ks, out_ke, errors)
    key = resident_key(arrays, num_rows, device)
    hit = prepared(key)
    if hit is None:
        return _windows(arrays, num_rows, stream, device, key)
    launch, dev, M = hit
    st = dev.default_stream if stream is None else as_stream(stream, dev)
    if out_ks is None:
        out_ks, out_ke = DeviceArray.empty((M,), np.int32, dev, st), DeviceArray.empty((M,), np.int32, dev, st)
    launch(st.handle, query_lens.ptr, context_lens.ptr, out_ks.ptr, out_ke.ptr, 0 if errors is None else errors.ptr)
    return out_ks, out_ke


def _windows(arrays, num_rows, stream, device, key):
    from .. import cache
    dev = resolve_device(device, arrays)
    st = as_stream(stream, dev)
    query_lens, context_lens, out_ks, out_ke, errors = arrays
    qa = adopt("query_lens", query_lens, dev, st)
    la = adopt("context_lens", context_lens, dev, st)
    (R,) = expect("query_lens", qa, I32, 1, "[R] int32")
    (Rl,) = expect("context_lens", la, I32, 1, "[R] int32")
    if Rl != R:
        raise ValueError(f"context_lens: length is {Rl}, but query_lens gives {R} requests")
    if num_rows is not None and (isinstance(num_rows, bool) or not isinstance(num_rows, (int, np.integer))
                                 or not 0 <= num_rows <= INT32_MAX):
        raise ValueError(f"num_rows: expected None or an int in [0, 2^31), got {num_rows!r}")
    M = None if num_rows is None else int(num_rows)
    oks = oke = None
    if out_ks is not None:
        for nm, o in (("out[0]", out_ks), ("out[1]", out_ke)):
            if isinstance(o, np.ndarray):
                raise TypeError(f"{nm}: expected a device array (a numpy out would be a copy, and the result lost)")
        oks, oke = adopt("out[0]", out_ks, dev, st), adopt("out[1]", out_ke, dev, st)
        (Mo,) = expect("out[0]", oks, I32, 1, "[M] int32")
        (Me,) = expect("out[1]", oke, I32, 1, "[M] int32")
        if Me != Mo:
            raise ValueError(f"out[1]: length is {Me}, but out[0] has {Mo}")
        if M is not None and M != Mo:
            raise ValueError(f"num_rows: {M}, but out has {Mo} rows")
        for nm, o in (("out[0]", oks), ("out[1]", oke)):
            if o.readonly:
                raise ValueError(f"{nm}: the array is read-only")
            check_resident(nm, o)
        M = Mo
    host_q, host_l = _host(qa), _host(la)
    if host_q is not None and host_l is not None:
        cache.packed_prefill_windows(host_q, host_l, M)  # the host values' checks (the result is the device's)
    elif host_q is not None:
        if (host_q < 0).any():
            raise ValueError(f"query_lens: must be >= 0, got {int(host_q.min())}")
        if M is not None and int(host_q.astype(np.int64).sum()) > M:
            raise ValueError(f"num_rows: {M} is fewer than the {int(host_q.sum())} query rows of the requests")
    elif host_l is not None and (host_l < 0).any():
        raise ValueError(f"context_lens: must be >= 0, got {int(host_l.min())}")
    if M is None:
        if host_q is None:
            raise ValueError("num_rows: query_lens is on the device, so the number of rows is not known here; "
                             "pass num_rows= or out=(ks_out, ke_out)")
        M = int(host_q.astype(np.int64).sum())
        if M > INT32_MAX:
            raise ValueError(f"query_lens: {M} rows in all, past int32")
    check_resident("query_lens", qa)
    check_resident("context_lens", la)
    ea = check_errors(errors, dev, st)
    if oks is None:
        oks, oke = DeviceArray.empty((M,), np.int32, dev, st), DeviceArray.empty((M,), np.int32, dev, st)
    if M == 0:
        return oks, oke
    launch = kernel_for(dev, "packed_prefill_windows").prepare(-(-M // WINDOWS_BLOCK), WINDOWS_BLOCK,
                                                              pointers=WINDOW_POINTERS, M=M, R=R)
    remember(key, (launch, dev, M))
    qa, la = upload(qa, dev, st), upload(la, dev, st)
    launch(st.handle, qa.ptr, la.ptr, oks.ptr, oke.ptr, 0 if ea is None else ea.ptr)
    return oks, oke
