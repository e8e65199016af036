"""Argument checks shared by the numpy reference and the device ops.

Both ops take the same arguments in the same order (docs/ops.md), so
one set of checks guards them.  The checks only read ``.shape``, ``.dtype`` and,
where a value matters on the host, numpy arrays: they work on DeviceArrays and
foreign arrays too.  Every error names the argument and says what was expected.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
U8 = np.dtype(np.uint8)
SCALE_BYTES = 4  # one float32 dequant scale per cached token


def _dtype(x) -> np.dtype:
    dt = getattr(x, "dtype", None)
    return dt if type(dt) is not type and isinstance(dt, np.dtype) else np.dtype(dt or np.asarray(x).dtype)


def _shape(x) -> tuple:
    shape = getattr(x, "shape", None)
    if type(shape) is tuple and all(type(s) is int for s in shape):
        return shape
    return tuple(int(s) for s in (shape if shape is not None else np.shape(x)))


def expect(name: str, x, dtype: np.dtype, ndim: int, what: str) -> tuple:
    """Check one array's dtype and rank; return its shape."""
    if x is None:
        raise TypeError(f"{name}: expected {what}, got None")
    dt = _dtype(x)
    if dt != dtype:
        raise TypeError(f"{name}: expected dtype {dtype.name} ({what}), got {dt.name}")
    shape = _shape(x)
    if len(shape) != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array {what}, got shape {shape}")
    return shape


def expect_dim(name: str, axis: str, got: int, want: int, source: str) -> None:
    if got != want:
        raise ValueError(f"{name}: {axis} is {got}, but {source} gives {want}")


@dataclass(frozen=True)
class PrefillShape:
    M: int
    N: int
    H: int
    D: int


def prefill_shape(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke) -> PrefillShape:
    M, H, D = expect("q", q, FP8, 3, "[M, H, D] float8_e4m3fn")
    N, Dk = expect("k", k, FP8, 2, "[N, D] float8_e4m3fn")
    expect_dim("k", "D (last dim)", Dk, D, "q")
    (Ns,) = expect("kv_scale", kv_scale, F32, 1, "[N] float32")
    expect_dim("kv_scale", "length", Ns, N, "k")
    Mw, Hw = expect("weights", weights, F32, 2, "[M, H] float32")
    expect_dim("weights", "rows", Mw, M, "q")
    expect_dim("weights", "H (last dim)", Hw, H, "q")
    for name, x in (("cu_seqlen_ks", cu_seqlen_ks), ("cu_seqlen_ke", cu_seqlen_ke)):
        (Mx,) = expect(name, x, I32, 1, "[M] int32")
        expect_dim(name, "length", Mx, M, "q")
    if H < 1 or D < 1:
        raise ValueError(f"q: H and D must be >= 1, got shape {(M, H, D)}")
    return PrefillShape(M, N, H, D)


@dataclass(frozen=True)
class DecodeShape:
    B: int
    next_n: int
    H: int
    D: int
    num_blocks: int
    block_size: int
    max_blocks: int
    max_model_len: int
    lens_per_row: bool = False  # context_lens is [B, next_n]: each row's own key count


def cache_view(kv_cache, D: int, name: str = "kv_cache", d_from: str = "q's D") -> tuple[int, int]:
    """(num_blocks, block_size) of a [nb, bs, D + 4] or vLLM [nb, bs, 1, D + 4] uint8 cache.

    `name` is the caller's name for the cache argument and `d_from` says where D came from, so a
    mismatch names both arguments."""
    dt = _dtype(kv_cache)
    if dt != U8:
        raise TypeError(f"{name}: expected dtype uint8 (fp8 keys + float32 scales as bytes), got {dt.name}")
    shape = _shape(kv_cache)
    if len(shape) == 4 and shape[2] == 1:
        shape = (shape[0], shape[1], shape[3])
    if len(shape) != 3:
        raise ValueError(
            f"{name}: expected [num_blocks, block_size, D + 4] or [num_blocks, block_size, 1, D + 4], "
            f"got shape {_shape(kv_cache)}")
    if shape[2] != D + SCALE_BYTES:
        raise ValueError(f"{name}: last dim is {shape[2]}, but {d_from} = {D} needs D + 4 = {D + SCALE_BYTES} "
                         f"({name} holds keys of D = {shape[2] - SCALE_BYTES})")
    if shape[1] < 1:
        raise ValueError(f"{name}: block_size must be >= 1, got {shape[1]}")
    return shape[0], shape[1]


def check_preshuffle(block_size: int, D: int) -> None:
    if block_size % 16 or D % 16:
        raise ValueError(
            f"preshuffle: the 16x16 shuffled layout needs block_size % 16 == 0 and D % 16 == 0, "
            f"got block_size={block_size}, D={D}")


def blocks_needed(context_lens: np.ndarray, block_size: int, max_model_len: int) -> np.ndarray:
    """Block-table entries a sequence reads: ceil(min(ctx, max_model_len) / block_size)."""
    n = np.minimum(context_lens.astype(np.int64), max_model_len)
    return (n + block_size - 1) // block_size


def decode_shape(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                 next_n_lens=None, preshuffle=False, split_kv=None) -> DecodeShape:
    B, next_n, H, D = expect("q", q, FP8, 4, "[B, next_n, H, D] float8_e4m3fn")
    if not 1 <= next_n <= 8:
        raise ValueError(f"q: next_n (dim 1) must be in 1..8, got {next_n}")
    num_blocks, block_size = cache_view(kv_cache, D)
    Rw, Hw = expect("weights", weights, F32, 2, "[B * next_n, H] float32")
    expect_dim("weights", "rows", Rw, B * next_n, "q's B * next_n")
    expect_dim("weights", "H (last dim)", Hw, H, "q")
    lens_per_row = len(_shape(context_lens)) == 2
    if lens_per_row:
        Bc, Nc = expect("context_lens", context_lens, I32, 2, "[B] or [B, next_n] int32")
        expect_dim("context_lens", "next_n (dim 1)", Nc, next_n, "q")
        if next_n_lens is not None:
            raise ValueError("next_n_lens: not taken with [B, next_n] context_lens, whose rows carry their own "
                             "lengths (a row of length 0 is a dead row)")
    else:
        (Bc,) = expect("context_lens", context_lens, I32, 1, "[B] or [B, next_n] int32")
    expect_dim("context_lens", "length", Bc, B, "q")
    Bt, max_blocks = expect("block_tables", block_tables, I32, 2, "[B, max_blocks_per_seq] int32")
    expect_dim("block_tables", "rows", Bt, B, "q")
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, (int, np.integer)) or max_model_len < 1:
        raise ValueError(f"max_model_len: expected an int >= 1, got {max_model_len!r}")
    if next_n_lens is not None:
        (Bn,) = expect("next_n_lens", next_n_lens, I32, 1, "[B] int32")
        expect_dim("next_n_lens", "length", Bn, B, "q")
    if split_kv is not None and (isinstance(split_kv, bool) or not isinstance(split_kv, (int, np.integer))
                                 or split_kv < 1):
        raise ValueError(f"split_kv: expected None or an int >= 1, got {split_kv!r}")
    if preshuffle:
        check_preshuffle(block_size, D)
    return DecodeShape(B, next_n, H, D, num_blocks, block_size, max_blocks, int(max_model_len), lens_per_row)


MAX_TOP_K = 4096  # the largest top_k the top-k ops serve (2048 for DeepSeek-V3.2 and GLM-5)


def check_top_k(top_k) -> int:
    """top_k as an int in 1..MAX_TOP_K; ValueError naming it otherwise (a bool is not an int here)."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k: expected an int in 1..{MAX_TOP_K}, got {top_k!r}")
    return int(top_k)


def check_decode_values(shape: DecodeShape, context_lens: np.ndarray, block_tables: np.ndarray,
                        next_n_lens: np.ndarray | None) -> None:
    """Host-value checks: context lengths, live counts, and every block-table entry that is read."""
    check_decode_lengths(shape, context_lens, next_n_lens)
    check_decode_block_tables(shape, context_lens, block_tables)


def check_decode_lengths(shape: DecodeShape, context_lens: np.ndarray | None, next_n_lens: np.ndarray | None) -> None:
    """Context lengths >= 0 and live counts in 0..next_n (either may be None: not on the host)."""
    ctx = np.asarray(context_lens) if context_lens is not None else np.zeros(0, np.int32)
    if (ctx < 0).any():
        at = tuple(int(i) for i in np.argwhere(ctx < 0)[0])
        where = f"sequence {at[0]}" if len(at) == 1 else f"row [{at[0]}, {at[1]}]"
        raise ValueError(f"context_lens: must be >= 0, got {int(ctx[at])} for {where}")
    if next_n_lens is not None:
        nl = np.asarray(next_n_lens)
        bad = (nl < 0) | (nl > shape.next_n)
        if bad.any():
            b = int(np.argmax(bad))
            raise ValueError(f"next_n_lens: each entry must be in 0..next_n={shape.next_n}, "
                             f"got {int(nl[b])} for sequence {b}")


def check_decode_block_tables(shape: DecodeShape, context_lens: np.ndarray, block_tables: np.ndarray) -> None:
    """Every block-table entry a sequence reads exists and names a block of the cache (its longest row's,
    with per-row lengths)."""
    ctx = np.asarray(context_lens)
    if ctx.ndim == 2:
        ctx = ctx.max(axis=1, initial=0)
    need = blocks_needed(np.maximum(ctx, 0), shape.block_size, shape.max_model_len)
    if (need > shape.max_blocks).any():
        b = int(np.argmax(need > shape.max_blocks))
        raise ValueError(
            f"block_tables: sequence {b} has context {int(ctx[b])} (max_model_len {shape.max_model_len}) "
            f"and needs {int(need[b])} blocks of {shape.block_size}, but block_tables has only "
            f"{shape.max_blocks} columns")
    bt = np.asarray(block_tables)
    read = np.arange(shape.max_blocks)[None, :] < need[:, None]
    bad = read & ((bt < 0) | (bt >= shape.num_blocks))
    if bad.any():
        b, j = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"block_tables: entry [{b}, {j}] = {int(bt[b, j])} is read but outside "
                         f"the cache's {shape.num_blocks} blocks")
