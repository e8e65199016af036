"""The numpy oracle for both indexer ops; their contract is docs/ops.md.

Same argument names and order as the device ops.  fp8 inputs are dequantised
exactly and accumulated in float32 (or float64 with ``accumulate=np.float64``,
which also returns float64).
Work is cut into row chunks (prefill) or key chunks (decode) whose score tensor
stays under ``budget_bytes``, so the real chunk shapes run on a 24 GiB machine.
ReLU is positive-homogeneous and kv_scale >= 0, so the scale is applied once
after the head reduction, as the kernels do.

``magnitude=True`` computes instead what each logit is made of,
A = kv_scale[n] * sum_h |w[r, h]| * sum_d |q[r, h, d] * k[n, d]| (the same sums over
absolute values, no ReLU needed): the scale of the accumulation error a kernel
may make, which hipindexer.gate bounds per element.
"""
from __future__ import annotations

import numpy as np

from .arguments import F32, check_decode_values, decode_shape, prefill_shape
from .cache import gather_blocks

DEFAULT_BUDGET = 512 << 20


def prefill_bounds(cu_seqlen_ks, cu_seqlen_ke, N: int) -> tuple[np.ndarray, np.ndarray]:
    """Clamped windows [lo, hi) per row, int64; hi == lo for an empty row."""
    lo = np.clip(np.asarray(cu_seqlen_ks, np.int64), 0, N)
    hi = np.clip(np.asarray(cu_seqlen_ke, np.int64), 0, N)
    return lo, np.maximum(hi, lo)


def valid_mask(cu_seqlen_ks, cu_seqlen_ke, N: int) -> np.ndarray:
    """[M, N] bool: True where prefill row m has a logit."""
    lo, hi = prefill_bounds(cu_seqlen_ks, cu_seqlen_ke, N)
    n = np.arange(N)[None, :]
    return (n >= lo[:, None]) & (n < hi[:, None])


def per_row_lengths(context_lens, next_n: int, next_n_lens=None) -> np.ndarray:
    """[B, next_n] int32: the keys each row sees, in the per-row form the decode ops also take (DeepGEMM's
    context_lens): row j < live_b of sequence b sees max(0, ctx_b - live_b + j + 1) keys, other rows none.
    Both forms give the same logits.

    >>> per_row_lengths(np.array([5, 3], np.int32), 2, np.array([2, 1], np.int32)).tolist()
    [[4, 5], [3, 0]]
    """
    ctx = np.asarray(context_lens, np.int64)[:, None]
    live = (np.full(ctx.shape, next_n, np.int64) if next_n_lens is None
            else np.asarray(next_n_lens, np.int64)[:, None])
    j = np.arange(next_n)[None, :]
    return np.where(j < live, np.maximum(ctx - live + j + 1, 0), 0).astype(np.int32)


def decode_bounds(context_lens, next_n: int, max_model_len: int, next_n_lens=None) -> np.ndarray:
    """[B * next_n] int64: row r = b * next_n + j has logits on [0, bound[r]).

    [B] context_lens: live rows (j < live_b) see keys n <= ctx_b - live_b + j and n < max_model_len; other
    rows see none. [B, next_n] context_lens: row j sees keys n < context_lens[b, j] and n < max_model_len.
    """
    if np.ndim(context_lens) == 2:
        return np.clip(np.asarray(context_lens, np.int64), 0, max_model_len).reshape(-1)
    ctx = np.asarray(context_lens, np.int64)[:, None]
    live = (np.full(ctx.shape, next_n, np.int64) if next_n_lens is None
            else np.asarray(next_n_lens, np.int64)[:, None])
    j = np.arange(next_n)[None, :]
    bound = np.clip(ctx - live + j + 1, 0, max_model_len)
    return np.where(j < live, bound, 0).reshape(-1)


def decode_valid_mask(context_lens, next_n: int, max_model_len: int, next_n_lens=None) -> np.ndarray:
    """[B * next_n, max_model_len] bool: True where decode row r has a logit (see decode_bounds)."""
    bound = decode_bounds(context_lens, next_n, max_model_len, next_n_lens)
    return np.arange(max_model_len)[None, :] < bound[:, None]


def _output(out, shape, clean_logits: bool, dtype=F32) -> np.ndarray:
    if out is None:
        # Nothing asked to keep: positions a row never owns are -inf when
        # cleaning, NaN (the poison the gate looks for) otherwise.
        return np.full(shape, -np.inf if clean_logits else np.nan, dtype)
    if not isinstance(out, np.ndarray) or out.dtype != dtype or out.shape != shape:
        raise ValueError(f"out: expected a {np.dtype(dtype).name} numpy array of shape {shape}, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
    if clean_logits:
        out[...] = -np.inf
    return out


def _head_sum(q_rows, k_cols, w_rows, acc, magnitude=False) -> np.ndarray:
    """sum_h relu(q[r, h] . k[n]) * w[r, h] -> [r, n], from [r, H, D] and [n, D]; with magnitude,
    sum_h |w[r, h]| * (|q[r, h]| . |k[n]|)."""
    if magnitude:
        q_rows, k_cols, w_rows = np.abs(q_rows), np.abs(k_cols), np.abs(w_rows)
    r, H, D = q_rows.shape
    s = q_rows.reshape(r * H, D) @ k_cols.T
    np.maximum(s, 0, out=s)
    return np.matmul(w_rows.astype(acc)[:, None, :], s.reshape(r, H, -1))[:, 0, :]


def fp8_mqa_logits(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=True,
                   out=None, *, accumulate=np.float32, budget_bytes=DEFAULT_BUDGET,
                   magnitude=False) -> np.ndarray:
    """Prefill logits [M, N] in numpy, in ``accumulate``'s dtype (float32 by default, as the device op).

        logits[m, n] = sum_h max(0, q[m, h, :] . k[n, :]) * kv_scale[n] * weights[m, h]
                       for max(ks[m], 0) <= n < min(ke[m], N)

    q: [M, H, D] float8_e4m3fn, the chunk's query rows. k: [N, D] float8_e4m3fn, the keys.
    kv_scale: [N] float32, each key's dequantisation scale (>= 0). weights: [M, H] float32.
    cu_seqlen_ks, cu_seqlen_ke: [M] int32, row m's key window [ks, ke); ks may be negative, ke may exceed N,
    and ke <= ks gives an empty row. Array-likes are accepted (the arguments are read with np.asarray).
    clean_logits: True writes -inf at every position outside the windows; False leaves those positions as
    `out` held them, or NaN when out is None (the poison hipindexer.gate checks is left alone).
    out: None, or a numpy array of shape [M, N] and ``accumulate``'s dtype, written in place and returned.
    accumulate: np.float32 (what the kernels do) or np.float64 (the gate's reference).
    budget_bytes: the most bytes of head scores one chunk of rows may hold; memory stays bounded on the
    largest chunk shapes.
    magnitude: return instead A[m, n] = kv_scale[n] * sum_h |w[m, h]| * sum_d |q[m, h, d] * k[n, d]|, what
    each logit is made of (the scale of a kernel's accumulation error; docs/accuracy.md).

    Raises TypeError for a missing array or a wrong dtype (fp8 must be float8_e4m3fn here: the device op
    also takes uint8), ValueError for a wrong rank, a dimension that disagrees with another argument (the
    message names both), H or D of 0, or an `out` of the wrong type, shape or dtype.

    >>> import numpy as np
    >>> from hipindexer import reference, testing
    >>> inp = testing.prefill_inputs(np.random.default_rng(0), M=4, N=8, H=2, D=16, mode="causal")
    >>> logits = reference.fp8_mqa_logits(*inp.args())
    >>> logits.shape, logits.dtype.name
    ((4, 8), 'float32')
    >>> [int(np.isfinite(row).sum()) for row in logits]   # causal: row m sees keys 0 .. N - M + m
    [5, 6, 7, 8]
    """
    s = prefill_shape(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke)
    acc = np.dtype(accumulate)
    q, k = np.asarray(q), np.asarray(k)
    kv_scale, weights = np.asarray(kv_scale), np.asarray(weights)
    out = _output(out, (s.M, s.N), clean_logits, acc)
    lo, hi = prefill_bounds(cu_seqlen_ks, cu_seqlen_ke, s.N)
    kf = k.astype(acc)
    rows = max(1, budget_bytes // max(1, s.H * s.N * acc.itemsize))
    for r0 in range(0, s.M, rows):
        r1 = min(s.M, r0 + rows)
        live = hi[r0:r1] > lo[r0:r1]
        if not live.any():
            continue
        c0, c1 = int(lo[r0:r1][live].min()), int(hi[r0:r1][live].max())
        vals = _head_sum(q[r0:r1].astype(acc), kf[c0:c1], weights[r0:r1], acc, magnitude)
        vals *= kv_scale[c0:c1].astype(acc)
        n = np.arange(c0, c1)[None, :]
        ok = (n >= lo[r0:r1, None]) & (n < hi[r0:r1, None])
        block = out[r0:r1, c0:c1]
        block[ok] = vals[ok]
    return out


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                         next_n_lens=None, preshuffle=False, split_kv=None, clean_logits=True,
                         out=None, *, accumulate=np.float32, budget_bytes=DEFAULT_BUDGET,
                         magnitude=False) -> np.ndarray:
    """Decode logits [B * next_n, max_model_len] from a paged cache, in ``accumulate``'s dtype (float32 by
    default, as the device op).

    Row r = b * next_n + j is sequence b's j-th new token. With live_b = next_n_lens[b] (next_n when
    next_n_lens is None), a row j < live_b has logits at the columns n <= context_lens[b] - live_b + j,
    n < max_model_len:

        logits[r, n] = sum_h max(0, q[b, j, h, :] . K_b[n]) * scale_b[n] * weights[r, h]

    where K_b[n] and scale_b[n] are token n % block_size of block block_tables[b, n // block_size].

    q: [B, next_n, H, D] float8_e4m3fn, next_n in 1..8.
    kv_cache: [num_blocks, block_size, D + 4] uint8 (or vLLM's [num_blocks, block_size, 1, D + 4]): each
    block's block_size * D key bytes, then its block_size float32 scales (docs/ops.md, "The paged cache
    layouts"; hipindexer.cache writes it).
    weights: [B * next_n, H] float32. context_lens: [B] int32, each sequence's tokens including this step's;
    or [B, next_n] int32, each row's own key count (DeepGEMM's form: row j sees the keys n < context_lens[b,
    j]; per_row_lengths turns the first form into this one).
    block_tables: [B, max_blocks_per_seq] int32; only the first ceil(min(ctx, max_model_len) / block_size)
    entries of a row are read (ctx: the longest row's count with per-row lengths). max_model_len: int >= 1,
    the width of the output.
    next_n_lens: None or [B] int32 in 0..next_n, the live rows of each sequence (not with [B, next_n]
    context_lens).
    preshuffle: the cache's keys are in the 16 x 16 preshuffled order (block_size and D multiples of 16).
    split_kv: a device tunable (None or an int >= 1); checked, otherwise without effect here.
    clean_logits, out, accumulate, budget_bytes, magnitude: as for fp8_mqa_logits. Rows past a sequence's
    live rows, and columns past a row's last key, are -inf when clean_logits.

    Raises TypeError for a wrong dtype, ValueError for a wrong shape or an inconsistent dimension, next_n
    outside 1..8, a bad max_model_len or split_kv, a preshuffled cache whose block_size or D is not a
    multiple of 16, a negative context length, a next_n_lens entry outside 0..next_n, a block table too
    narrow for a context, and a block-table entry that is read but outside [0, num_blocks).

    >>> import numpy as np
    >>> from hipindexer import reference, testing
    >>> case = testing.DecodeCase(B=2, next_n=2, H=4, D=64, block_size=16, mean_context=40)
    >>> inp = testing.decode_inputs(np.random.default_rng(0), case)
    >>> logits = reference.fp8_paged_mqa_logits(*inp.args())
    >>> logits.shape == (2 * 2, inp.max_model_len)
    True
    """
    s = decode_shape(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                     next_n_lens, preshuffle, split_kv)
    ctx = np.asarray(context_lens)
    nn = None if next_n_lens is None else np.asarray(next_n_lens)
    check_decode_values(s, ctx, np.asarray(block_tables), nn)
    acc = np.dtype(accumulate)
    q, weights, bt = np.asarray(q), np.asarray(weights), np.asarray(block_tables)
    kv_cache = np.ascontiguousarray(kv_cache)
    out = _output(out, (s.B * s.next_n, s.max_model_len), clean_logits, acc)
    bound = decode_bounds(ctx, s.next_n, s.max_model_len, nn).reshape(s.B, s.next_n)
    # Keys per chunk so that live * H * keys scores stay under the budget.
    chunk = max(s.block_size, budget_bytes // max(1, s.next_n * s.H * acc.itemsize))
    chunk -= chunk % s.block_size
    for b in range(s.B):
        seen = np.nonzero(bound[b])[0]
        if seen.size == 0:
            continue
        live = int(seen[-1]) + 1
        qb = q[b, :live].astype(acc)
        wb = weights[b * s.next_n: b * s.next_n + live]
        width = int(bound[b].max())
        for c0 in range(0, width, chunk):
            c1 = min(width, c0 + chunk)
            blocks = bt[b, c0 // s.block_size: -(-c1 // s.block_size)]
            keys, scales = gather_blocks(kv_cache, blocks, s.D, preshuffle)
            keys, scales = keys[: c1 - c0], scales[: c1 - c0]
            vals = _head_sum(qb, keys.astype(acc), wb, acc, magnitude) * scales.astype(acc)
            n = np.arange(c0, c1)[None, :]
            ok = n < bound[b, :live, None]
            rows = out[b * s.next_n: b * s.next_n + live, c0:c1]
            rows[ok] = vals[ok]
    return out
