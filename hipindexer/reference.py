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

The top-k ops (fp8_mqa_topk, fp8_paged_mqa_topk, and topk_logits on a logits
array) select exactly on float64 logits: descending value, ties by lower index.
"""
from __future__ import annotations

import numpy as np

from .arguments import F32, check_decode_values, check_top_k, decode_shape, prefill_shape
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


# ------------------------------------------------------------------ top-k

TOPK_CHUNK_ELEMENTS = 1 << 22   # logits selected at a time: a few float64 copies of a chunk stay small


def _chunk_rows(width: int) -> int:
    return max(1, TOPK_CHUNK_ELEMENTS // max(1, width))


def select_topk(values, valid, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact top-k of every row among its valid positions, sorted: descending value, ties by lower
    column. values: [R, N] float (no NaN where valid); valid: [R, N] bool. Returns (indices int64 [R, top_k],
    values float64 [R, top_k]); a row of V < top_k valid positions ends in V..top_k - 1 with -1 / -inf.
    One chunk's worth of rows: topk_logits and the ops chunk before calling it.

    >>> idx, val = select_topk(np.array([[1.0, 3.0, 3.0, 2.0]]), np.array([[True, True, True, False]]), 2)
    >>> idx.tolist(), val.tolist()
    ([[1, 2]], [[3.0, 3.0]])
    """
    vals = np.asarray(values, np.float64)
    valid = np.asarray(valid, bool)
    R, N = vals.shape
    keep = valid.copy()
    over = valid.sum(axis=1) > top_k
    if over.any():
        # Rows with more valid keys than top_k: the top_k-th largest value t by partition (invalid keys are
        # NaN, which partitions last), then every key above t and the lowest-indexed keys equal to t.
        neg = np.where(valid[over], -vals[over], np.nan)
        t = np.partition(neg, top_k - 1, axis=1)[:, top_k - 1:top_k]
        above = neg < t
        tied = neg == t
        room = top_k - above.sum(axis=1, keepdims=True)
        keep[over] = above | (tied & (np.cumsum(tied, axis=1, dtype=np.int32) <= room))
    count = keep.sum(axis=1)
    width = min(top_k, N)
    # The kept columns in ascending order (a stable sort of a bool array is a linear-time radix sort).
    idx = np.argsort(~keep, axis=1, kind="stable")[:, :width]
    live = np.arange(width)[None, :] < count[:, None]
    picked = np.take_along_axis(vals, idx, axis=1)
    # Descending value; a stable sort keeps equal values in ascending column order.
    order = np.argsort(np.where(live, -picked, np.nan), axis=1, kind="stable")
    idx = np.where(live, np.take_along_axis(idx, order, axis=1), -1)
    picked = np.where(live, np.take_along_axis(picked, order, axis=1), -np.inf)
    if width < top_k:
        idx = np.pad(idx, ((0, 0), (0, top_k - width)), constant_values=-1)
        picked = np.pad(picked, ((0, 0), (0, top_k - width)), constant_values=-np.inf)
    return idx.astype(np.int64), picked


def _as_returned(indices, values) -> tuple[np.ndarray, np.ndarray]:
    """The exact selection with float32 values, ordered by those values (descending, equal values by lower
    index, -1 slots last): two float64 logits that round to one float32 value then come in index order,
    as sorted=True promises of the values returned."""
    v32 = values.astype(np.float32)
    order = np.lexsort((indices, -v32, indices < 0), axis=-1)
    return np.take_along_axis(indices, order, axis=1), np.take_along_axis(v32, order, axis=1)


def topk_logits(logits, top_k, sorted=False, lengths=None) -> tuple[np.ndarray, np.ndarray]:
    """The exact top_k of each row of a logits array: (indices int32 [R, top_k], values float32 [R, top_k]).

    logits: [R, N] float. A row's valid positions are those that are not -inf, or, with lengths ([R]
    integers >= 0), the columns [0, lengths[r]) (clipped to N), whatever they hold there. Selection is exact
    in float64: descending value, ties by lower index. A row with V < top_k valid positions returns its V
    indices, then -1 (value -inf) in the trailing slots.
    sorted: the order the caller needs; the reference always returns the sorted order (descending returned
    float32 value, equal values by lower index), which the unsorted contract allows.
    Raises ValueError for a top_k outside 1..4096, a logits array that is not 2-D and float, lengths of the
    wrong shape or negative, and a NaN at a valid position (without lengths: anywhere).

    >>> import numpy as np
    >>> idx, val = topk_logits(np.array([[0.5, -np.inf, 2.0, 0.5], [1.0, -np.inf, -np.inf, -np.inf]]), 2)
    >>> idx.tolist(), val.tolist()
    ([[2, 0], [0, -1]], [[2.0, 0.5], [1.0, -inf]])
    """
    top_k = check_top_k(top_k)
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.dtype.kind != "f":
        raise ValueError(f"logits: expected a 2-D float array [rows, N], got {logits.dtype.name} {logits.shape}")
    R, N = logits.shape
    if lengths is not None:
        lengths = np.asarray(lengths)
        if lengths.shape != (R,) or lengths.dtype.kind not in "iu":
            raise ValueError(f"lengths: expected [{R}] integers (one per row of logits), got "
                             f"{lengths.dtype.name} {lengths.shape}")
        if (lengths < 0).any():
            r = int(np.argmax(lengths < 0))
            raise ValueError(f"lengths: must be >= 0, got {int(lengths[r])} for row {r}")
        bound = np.minimum(lengths.astype(np.int64), N)
    indices = np.empty((R, top_k), np.int32)
    values = np.empty((R, top_k), np.float32)
    step = _chunk_rows(N)
    for r0 in range(0, R, step):
        r1 = min(R, r0 + step)
        chunk = logits[r0:r1]
        if lengths is None:
            valid = chunk != -np.inf
            nan = np.isnan(chunk)
        else:
            valid = np.arange(N)[None, :] < bound[r0:r1, None]
            nan = np.isnan(chunk) & valid
        if nan.any():
            r, c = (int(i) for i in np.argwhere(nan)[0])
            raise ValueError(f"logits: NaN at row {r0 + r}, col {c}, a position counted as valid")
        indices[r0:r1], values[r0:r1] = _as_returned(*select_topk(chunk, valid & ~nan, top_k))
    return indices, values


def _topk_result(indices, values, *extra):
    """A plain array when nothing else was asked for, else the tuple of what was."""
    asked = [x for x in (values, *extra) if x is not None]
    return (indices, *asked) if asked else indices


def fp8_mqa_topk(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, relative=False, sorted=False,
                 return_values=False):
    """Prefill top-k: each row's top_k keys by logit, from logits computed in float64 and selected exactly.

    q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke: as for fp8_mqa_logits (row m's valid keys are
    max(ks[m], 0) <= n < min(ke[m], N)). top_k: an int in 1..4096.
    Returns indices [M, top_k] int32: the key rows n of k, by descending value (the float32 logit returned),
    equal values by lower n (the order sorted=True asks for; the reference gives it either way). A row with
    V < top_k keys ends in -1 slots.
    relative: indices n - cu_seqlen_ks[m] instead (position in the row's own request; -1 stays -1).
    return_values: return (indices, values), values [M, top_k] float32 (-inf at the -1 slots); a plain
    indices array otherwise.
    Memory stays bounded: rows are computed and selected a chunk at a time.
    Raises what fp8_mqa_logits raises, and ValueError for a top_k outside 1..4096 (or a relative index
    that int32 cannot hold).

    >>> import numpy as np
    >>> from hipindexer import testing
    >>> inp = testing.prefill_inputs(np.random.default_rng(0), M=4, N=8, H=2, D=16, mode="causal")
    >>> idx = fp8_mqa_topk(*inp.args(), top_k=6)
    >>> [int((row >= 0).sum()) for row in idx]    # rows see 5, 6, 7, 8 keys
    [5, 6, 6, 6]
    """
    top_k = check_top_k(top_k)
    s = prefill_shape(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke)
    q, k, weights = np.asarray(q), np.asarray(k), np.asarray(weights)
    ks, ke = np.asarray(cu_seqlen_ks), np.asarray(cu_seqlen_ke)
    indices = np.empty((s.M, top_k), np.int64)
    values = np.empty((s.M, top_k), np.float32)
    step = _chunk_rows(s.N)
    for r0 in range(0, s.M, step):
        r1 = min(s.M, r0 + step)
        logits = fp8_mqa_logits(q[r0:r1], k, kv_scale, weights[r0:r1], ks[r0:r1], ke[r0:r1],
                                accumulate=np.float64)
        picked = select_topk(logits, valid_mask(ks[r0:r1], ke[r0:r1], s.N), top_k)
        indices[r0:r1], values[r0:r1] = _as_returned(*picked)
    if relative:
        indices = np.where(indices >= 0, indices - ks.astype(np.int64)[:, None], -1)
        if indices.size and (indices.max() > np.iinfo(np.int32).max):
            raise ValueError(f"relative: index {int(indices.max())} (n - cu_seqlen_ks[m]) does not fit int32")
    return _topk_result(indices.astype(np.int32), values if return_values else None)


def fp8_paged_mqa_topk(q, kv_cache, weights, context_lens, block_tables, max_model_len, top_k,
                       next_n_lens=None, preshuffle=False, sorted=False, return_values=False, return_slots=False):
    """Decode top-k: each row's top_k keys by logit, from logits computed in float64 and selected exactly.

    q, kv_cache, weights, context_lens, block_tables, max_model_len, next_n_lens, preshuffle: as for
    fp8_paged_mqa_logits (row r = b * next_n + j sees the keys decode_bounds gives it). top_k: an int in
    1..4096.
    Returns indices [B * next_n, top_k] int32: key positions n in the sequence, by descending value (the
    float32 logit returned), equal values by lower n (the order sorted=True asks for; the reference gives it
    either way). A row with V < top_k keys
    (a dead row has none) ends in -1 slots.
    return_values: also values [B * next_n, top_k] float32 (-inf at the -1 slots).
    return_slots: also the cache slot of each index, block_tables[b, n // block_size] * block_size +
    n % block_size, int32 (-1 at the -1 slots).
    The result is indices alone when neither is asked for, else the tuple (indices, values, slots) with only
    what was asked. Memory stays bounded: sequences are computed and selected a chunk at a time.
    Raises what fp8_paged_mqa_logits raises (a block id read but outside the cache included), and ValueError
    for a top_k outside 1..4096 (or, with return_slots, a cache whose slots int32 cannot hold).

    >>> import numpy as np
    >>> from hipindexer import testing
    >>> case = testing.DecodeCase(B=2, next_n=2, H=4, D=64, block_size=16, mean_context=40)
    >>> inp = testing.decode_inputs(np.random.default_rng(0), case)
    >>> idx, slots = fp8_paged_mqa_topk(*inp.args()[:6], top_k=16, return_slots=True)
    >>> idx.shape, slots.dtype.name, bool(((idx < 0) == (slots < 0)).all())
    ((4, 16), 'int32', True)
    """
    top_k = check_top_k(top_k)
    s = decode_shape(q, kv_cache, weights, context_lens, block_tables, max_model_len, next_n_lens, preshuffle)
    ctx, bt = np.asarray(context_lens), np.asarray(block_tables)
    nn = None if next_n_lens is None else np.asarray(next_n_lens)
    check_decode_values(s, ctx, bt, nn)
    if return_slots and s.num_blocks * s.block_size - 1 > np.iinfo(np.int32).max:
        raise ValueError(f"return_slots: a cache of {s.num_blocks} blocks of {s.block_size} has slots past int32")
    q, weights = np.asarray(q), np.asarray(weights)
    bound = decode_bounds(ctx, s.next_n, s.max_model_len, nn)
    R = s.B * s.next_n
    indices = np.empty((R, top_k), np.int64)
    values = np.empty((R, top_k), np.float32)
    step = max(1, _chunk_rows(s.max_model_len) // s.next_n)
    for b0 in range(0, s.B, step):
        b1 = min(s.B, b0 + step)
        r0, r1 = b0 * s.next_n, b1 * s.next_n
        logits = fp8_paged_mqa_logits(q[b0:b1], kv_cache, weights[r0:r1], ctx[b0:b1], bt[b0:b1],
                                      s.max_model_len, None if nn is None else nn[b0:b1], preshuffle,
                                      accumulate=np.float64)
        valid = np.arange(s.max_model_len)[None, :] < bound[r0:r1, None]
        indices[r0:r1], values[r0:r1] = _as_returned(*select_topk(logits, valid, top_k))
    slots = None
    if return_slots:
        b = np.arange(R)[:, None] // s.next_n
        n = np.maximum(indices, 0)
        # -1 slots look up column 0, which may not exist when no sequence has keys.
        col = np.minimum(n // s.block_size, max(0, s.max_blocks - 1))
        block = bt[b, col].astype(np.int64) if s.max_blocks else np.zeros_like(n)
        slots = np.where(indices >= 0, block * s.block_size + n % s.block_size, -1).astype(np.int32)
    return _topk_result(indices.astype(np.int32), values if return_values else None, slots)
