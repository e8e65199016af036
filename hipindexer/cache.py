"""The paged indexer K cache in numpy: quantise, write, shuffle, gather, block tables, packed prefill windows.

Layout (docs/ops.md, "The paged cache layouts"): each physical block of ``block_size`` tokens holds
``block_size * D`` fp8 key bytes, then ``block_size`` float32 scales.  Keys are
token-major (block-flat) or in the 16x16 preshuffled order, where key byte d of
in-block token t sits at
``(t // 16) * 16 * D + (d // 16) * 256 + (t % 16) * 16 + d % 16``; scales never move.
Arrays are [num_blocks, block_size, D + 4] uint8 (vLLM's [.., block_size, 1, D + 4]
view is accepted wherever a cache is read).

A cache for two requests of 40 and 20 tokens, written by slot and read back:

>>> import numpy as np
>>> from hipindexer import cache
>>> rng = np.random.default_rng(0)
>>> tables, num_blocks = cache.make_block_tables([40, 20], block_size=16, rng=rng)
>>> kv = cache.new_cache(num_blocks, block_size=16, D=64)
>>> k, scale = cache.quantize_keys(rng.standard_normal((40, 64), dtype=np.float32))
>>> n = np.arange(40)
>>> cache.write_cache(kv, k, scale, tables[0, n // 16] * 16 + n % 16)
>>> keys, scales = cache.gather_keys(kv, tables[0], 40, D=64)
>>> bool((keys.view(np.uint8) == k.view(np.uint8)).all() and (scales == scale).all())
True
"""
from __future__ import annotations

import numpy as np

from .arguments import FP8, SCALE_BYTES, cache_view, check_preshuffle

FP8_MAX = 448.0
# Out-of-range block id left in unused block-table entries: a kernel that
# reads an entry it should not sees an address far outside the pool.
BLOCK_SENTINEL = np.iinfo(np.int32).max


def quantize_keys(k, power_of_two: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Quantise key rows [N, D] to fp8 e4m3fn with one float32 scale per row.

    scale = amax(|row|) / 448 (rounded up to a power of two on request), a zero
    row gets scale 1; k / scale is rounded to nearest even and saturated at 448.
    Returns (k_fp8 [N, D] float8_e4m3fn, scale [N] float32); k_fp8 * scale approximates k.
    Raises ValueError for an array that is not 2-D or that holds NaN or Inf.

    >>> import numpy as np
    >>> k_fp8, scale = quantize_keys(np.array([[1.0, -896.0], [0.0, 0.0]], np.float32))
    >>> k_fp8.astype(np.float32).tolist(), scale.tolist()
    ([[0.5, -448.0], [0.0, 0.0]], [2.0, 1.0])
    """
    k = np.asarray(k)
    if k.ndim != 2:
        raise ValueError(f"k: expected a 2-D array [N, D], got shape {k.shape}")
    kf = k.astype(np.float32)
    if not np.isfinite(kf).all():
        row = int(np.argwhere(~np.isfinite(kf))[0][0])
        raise ValueError(f"k: row {row} holds NaN or Inf; keys must be finite to quantise")
    amax = np.abs(kf).max(axis=1) if kf.shape[1] else np.zeros(kf.shape[0], np.float32)
    scale = (amax / np.float32(FP8_MAX)).astype(np.float32)
    if power_of_two:
        pos = scale > 0
        scale[pos] = np.exp2(np.ceil(np.log2(scale[pos].astype(np.float64)))).astype(np.float32)
    scale[scale == 0] = 1.0
    # The division can land a hair above 448 (scale was rounded to f32); saturate it.
    x = np.clip(kf / scale[:, None], -FP8_MAX, FP8_MAX)
    return x.astype(FP8), scale


def dequantize_keys(k_fp8, scale) -> np.ndarray:
    """[N, D] float32 keys from fp8 keys [N, D] and their scales [N]: k_fp8 * scale[:, None]."""
    return np.asarray(k_fp8).astype(np.float32) * np.asarray(scale, np.float32)[:, None]


def _blocks(cache: np.ndarray, D: int, d_from: str = "D") -> np.ndarray:
    """The cache as [num_blocks, block bytes], sharing memory with it."""
    if not isinstance(cache, np.ndarray):
        raise TypeError(f"cache: expected a numpy array, got {type(cache).__name__}")
    nb, bs = cache_view(cache, D, "cache", d_from)
    if not cache.flags.c_contiguous:
        raise ValueError("cache: expected a C-contiguous array")
    return cache.reshape(nb, bs * (D + SCALE_BYTES))


def _shuffled_key_order(block_size: int, D: int) -> np.ndarray:
    """pos[t * D + d] = byte offset of key byte d of token t in the shuffled key section."""
    t = np.arange(block_size)[:, None]
    d = np.arange(D)[None, :]
    return ((t // 16) * (16 * D) + (d // 16) * 256 + (t % 16) * 16 + d % 16).reshape(-1)


def shuffle_block_keys(keys: np.ndarray, block_size: int, D: int) -> np.ndarray:
    """[..., block_size * D] token-major key bytes -> the preshuffled order.

    Key byte d of in-block token t moves to (t // 16) * 16 * D + (d // 16) * 256 + (t % 16) * 16 + d % 16.
    Raises ValueError unless block_size and D are multiples of 16.
    """
    check_preshuffle(block_size, D)
    lead = keys.shape[:-1]
    x = keys.reshape(*lead, block_size // 16, 16, D // 16, 16)
    return np.swapaxes(x, -3, -2).reshape(*lead, block_size * D)


def unshuffle_block_keys(keys: np.ndarray, block_size: int, D: int) -> np.ndarray:
    """[..., block_size * D] preshuffled key bytes -> token-major (shuffle_block_keys' inverse)."""
    check_preshuffle(block_size, D)
    lead = keys.shape[:-1]
    x = keys.reshape(*lead, block_size // 16, D // 16, 16, 16)
    return np.swapaxes(x, -3, -2).reshape(*lead, block_size * D)


def new_cache(num_blocks: int, block_size: int, D: int, fill: int = 0) -> np.ndarray:
    """An empty paged cache: [num_blocks, block_size, D + 4] uint8, every byte `fill`."""
    return np.full((num_blocks, block_size, D + SCALE_BYTES), fill, dtype=np.uint8)


def write_cache(cache: np.ndarray, k_fp8, scale, slot_mapping, preshuffle: bool = False) -> None:
    """Write token i's key and scale at slot_mapping[i] = block * block_size + offset (-1 skips).

    cache: [num_blocks, block_size, D + 4] uint8 (or vLLM's [.., block_size, 1, D + 4]), written in place;
    k_fp8: [N, D] float8_e4m3fn; scale: [N] float32; slot_mapping: [N] integers in -1 .. slots - 1.
    preshuffle: write the keys in the 16 x 16 preshuffled order (block_size and D multiples of 16).
    A wrong dtype or a cache that is not a numpy array raises TypeError; a wrong shape, a cache whose
    last dim is not D + 4, a non-contiguous or read-only cache, a slot below -1 or past the cache, a
    repeated slot, or a preshuffled layout the shape cannot take raise ValueError. Nothing is written then.
    """
    k_fp8 = np.asarray(k_fp8)
    if k_fp8.dtype != FP8:
        raise TypeError(f"k_fp8: expected dtype float8_e4m3fn, got {k_fp8.dtype}")
    if k_fp8.ndim != 2:
        raise ValueError(f"k_fp8: expected a 2-D array [N, D], got shape {k_fp8.shape}")
    N, D = k_fp8.shape
    scale = np.asarray(scale)
    if scale.dtype != np.float32:
        raise TypeError(f"scale: expected dtype float32, got {scale.dtype}")
    if scale.shape != (N,):
        raise ValueError(f"scale: expected shape [N={N}] (one per row of k_fp8), got {scale.shape}")
    slots = np.asarray(slot_mapping)
    if slots.dtype.kind not in "iu":
        raise TypeError(f"slot_mapping: expected integers, got {slots.dtype}")
    if slots.shape != (N,):
        raise ValueError(f"slot_mapping: expected shape [N={N}] (one per row of k_fp8), got {slots.shape}")
    flat = _blocks(cache, D, "k_fp8's D (last dim)")
    nb, bs = flat.shape[0], flat.shape[1] // (D + SCALE_BYTES)
    if preshuffle:
        check_preshuffle(bs, D)
    if slots.size and slots.min() < -1:
        raise ValueError(f"slot_mapping: slot {int(slots.min())} is below -1 (-1 skips a token, no other "
                         f"negative slot exists)")
    if slots.size and slots.max() >= nb * bs:  # compared before any cast: a huge unsigned slot must not wrap
        raise ValueError(f"slot_mapping: slot {int(slots.max())} is past the cache's {nb} x {bs} slots")
    keep = slots >= 0
    slots = slots[keep].astype(np.int64)
    if np.unique(slots).size != slots.size:
        raise ValueError("slot_mapping: a slot appears twice")
    if not flat.flags.writeable:
        raise ValueError("cache: the array is read-only")
    block, t = slots // bs, slots % bs
    kbytes = k_fp8[keep].view(np.uint8)
    if preshuffle:
        pos = _shuffled_key_order(bs, D).reshape(bs, D)[t]
    else:
        pos = t[:, None] * D + np.arange(D)[None, :]
    flat[block[:, None], pos] = kbytes
    sbytes = scale[keep].view(np.uint8).reshape(-1, SCALE_BYTES)
    flat[block[:, None], bs * D + SCALE_BYTES * t[:, None] + np.arange(SCALE_BYTES)[None, :]] = sbytes


def _with_block_keys(cache: np.ndarray, D: int, permute) -> np.ndarray:
    """A copy of a block-flat cache whose key bytes went through permute(keys, bs, D); scales untouched."""
    _, bs = cache_view(cache, D, "cache", "D")
    out = np.array(cache, copy=True, order="C")
    flat = _blocks(out, D)
    flat[:, : bs * D] = permute(flat[:, : bs * D], bs, D)
    return out


def shuffle_cache(cache: np.ndarray, D: int) -> np.ndarray:
    """A block-flat cache -> a new preshuffled cache of the same shape (the input is not modified).

    Raises ValueError unless the cache's last dim is D + 4 and block_size and D are multiples of 16.
    """
    return _with_block_keys(cache, D, shuffle_block_keys)


def unshuffle_cache(cache: np.ndarray, D: int) -> np.ndarray:
    """A preshuffled cache -> a new block-flat cache of the same shape (shuffle_cache's inverse)."""
    return _with_block_keys(cache, D, unshuffle_block_keys)


def gather_blocks(cache: np.ndarray, blocks, D: int, preshuffle: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Keys [len(blocks) * bs, D] fp8 and scales [len(blocks) * bs] float32 of the given blocks, in order.

    blocks: physical block ids, not checked (numpy indexing: an id past the cache raises IndexError, a
    negative one counts from the end); gather_keys checks its ids.
    preshuffle: the cache's keys are preshuffled; they come back token-major.
    """
    flat = _blocks(np.ascontiguousarray(cache), D)
    nb, bs = cache_view(cache, D, "cache", "D")
    raw = flat[np.asarray(blocks, np.int64)]
    keys = raw[:, : bs * D]
    if preshuffle:
        keys = unshuffle_block_keys(keys, bs, D)
    scales = np.ascontiguousarray(raw[:, bs * D:]).view(np.float32)
    return np.ascontiguousarray(keys).reshape(-1, D).view(FP8), scales.reshape(-1)


def gather_keys(cache: np.ndarray, block_table_row, n_tokens: int, D: int,
                preshuffle: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One request's first n_tokens keys and scales as the contiguous [N, D] + [N] buffers prefill takes.

    block_table_row: the request's physical block ids, logical block order. Returns (keys [n_tokens, D]
    float8_e4m3fn, scales [n_tokens] float32), the `k` and `kv_scale` of hipindexer.fp8_mqa_logits.
    Raises ValueError when the row has fewer than ceil(n_tokens / block_size) entries or one of those
    is outside [0, num_blocks).
    """
    nb, bs = cache_view(cache, D, "cache", "D")
    need = -(-int(n_tokens) // bs)
    row = np.asarray(block_table_row)
    if row.shape[0] < need:
        raise ValueError(f"block_table_row: {n_tokens} tokens need {need} blocks of {bs}, "
                         f"the row has {row.shape[0]}")
    blocks = row[:need]
    if ((blocks < 0) | (blocks >= nb)).any():
        raise ValueError(f"block_table_row: an entry of the first {need} is outside the cache's {nb} blocks")
    k, s = gather_blocks(cache, blocks, D, preshuffle)
    return np.ascontiguousarray(k[:n_tokens]), np.ascontiguousarray(s[:n_tokens])


def packed_prefill_windows(query_lens, context_lens, num_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The cu_seqlen_ks / cu_seqlen_ke of one prefill chunk whose requests are packed back to back.

    Request r has query_lens[r] query rows, the last ones of its context_lens[r] tokens; its keys sit at
    [K_r, K_r + context_lens[r]) of the chunk's gathered keys, K_r = sum(context_lens[:r]) (what
    gather_keys of each request, concatenated, or hipindexer.gather_cached_keys with
    cu_seq_lens = [0, cumsum(context_lens)] produce). Row j of request r sees its keys up to its own
    position: ks = K_r, ke = K_r + context_lens[r] - query_lens[r] + j + 1 (causal within its own keys).
    Rows are packed in request order; num_rows (default sum(query_lens)) may be larger, and the rows past
    the last request's get the empty window [0, 0). Returns (ks [num_rows], ke [num_rows]) int32, the
    windows of hipindexer.fp8_mqa_logits. Raises ValueError for arrays that are not 1-D integers of one
    length, a negative length, query_lens[r] > context_lens[r], num_rows below sum(query_lens), or more
    keys than int32 counts.

    >>> ks, ke = packed_prefill_windows([2, 3], [5, 3])
    >>> ks.tolist(), ke.tolist()
    ([0, 0, 5, 5, 5], [4, 5, 6, 7, 8])
    """
    q, L = np.asarray(query_lens), np.asarray(context_lens)
    for name, a in (("query_lens", q), ("context_lens", L)):
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise ValueError(f"{name}: expected a 1-D integer array [R], got {a.dtype} {a.shape}")
    if q.shape != L.shape:
        raise ValueError(f"query_lens and context_lens: one entry per request each, got {q.shape[0]} and {L.shape[0]}")
    q, L = q.astype(np.int64), L.astype(np.int64)
    for name, a in (("query_lens", q), ("context_lens", L)):
        if (a < 0).any():
            r = int(np.argmax(a < 0))
            raise ValueError(f"{name}: must be >= 0, got {int(a[r])} for request {r}")
    if (q > L).any():
        r = int(np.argmax(q > L))
        raise ValueError(f"query_lens: request {r} has {int(q[r])} query rows but context_lens {int(L[r])}; "
                         f"its query rows are the last of its context")
    if int(L.sum()) > np.iinfo(np.int32).max:
        raise ValueError(f"context_lens: {int(L.sum())} keys in all, past int32")
    M = int(q.sum())
    rows = M if num_rows is None else int(num_rows)
    if rows < M:
        raise ValueError(f"num_rows: {rows} is fewer than the {M} query rows of the requests")
    key0 = np.cumsum(L) - L
    req = np.repeat(np.arange(q.size), q)
    j = np.arange(M) - np.repeat(np.cumsum(q) - q, q)
    ks, ke = np.zeros(rows, np.int32), np.zeros(rows, np.int32)
    ks[:M] = key0[req]
    ke[:M] = key0[req] + L[req] - q[req] + j + 1
    return ks, ke


def make_block_tables(context_lens, block_size: int, rng: np.random.Generator,
                      max_model_len: int | None = None, max_blocks: int | None = None
                      ) -> tuple[np.ndarray, int]:
    """Block tables over a pool sized to exactly what the batch reads, in random order.

    Returns (block_tables [B, max_blocks] int32, num_blocks).  Sequence b owns
    ceil(min(ctx, max_model_len) / block_size) blocks, taken from a random
    permutation of the pool; every other entry is BLOCK_SENTINEL (int32 max, far outside any pool).
    max_model_len caps the tokens a sequence reads; max_blocks sets the table's width (default: the
    most blocks a sequence needs, at least 1) and raises ValueError when a sequence needs more.
    """
    ctx = np.asarray(context_lens, np.int64)
    live = ctx if max_model_len is None else np.minimum(ctx, max_model_len)
    need = (live + block_size - 1) // block_size
    num_blocks = int(need.sum())
    width = max(int(need.max(initial=0)), 1) if max_blocks is None else max_blocks
    if (need > width).any():
        raise ValueError(f"max_blocks: {width} is fewer than the {int(need.max())} blocks a sequence needs")
    tables = np.full((ctx.shape[0], width), BLOCK_SENTINEL, np.int32)
    pool = rng.permutation(num_blocks).astype(np.int32)
    start = np.concatenate([[0], np.cumsum(need)])
    for b, n in enumerate(need):
        tables[b, :n] = pool[start[b]:start[b] + n]
    return tables, num_blocks
