"""Test inputs: the prefill window modes, random fp8 inputs, decode cases, and
per-element float64 formulations of both ops that share no code with the reference.

Used by the tests, the CLI's checks and the benchmarks.  Generators never emit
the fp8 NaN codes (0x7F, 0xFF).

>>> import numpy as np
>>> from hipindexer import testing
>>> inp = testing.prefill_inputs(np.random.default_rng(0), M=3, N=5, H=2, D=16, mode="causal")
>>> inp.q.shape, inp.k.shape, inp.cu_seqlen_ke.tolist()
((3, 2, 16), (5, 16), [3, 4, 5])
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .arguments import FP8, SCALE_BYTES
from .cache import make_block_tables, quantize_keys, write_cache
from .reference import per_row_lengths

PREFILL_MODES = ("causal", "cp", "misaligned", "empty", "past_end", "multi_req")


class NotApplicable(Exception):
    """A window mode whose preconditions the shape fails; reported by name, never dropped."""

    def __init__(self, mode: str, why: str):
        super().__init__(f"{mode}: {why}")
        self.mode, self.why = mode, why


def multi_req_bounds(M: int) -> list[int]:
    """Request boundaries: those of {3, 37, 2M//3 + 5} inside (0, M), so they miss tile multiples."""
    return sorted({b for b in (3, 37, 2 * M // 3 + 5) if 0 < b < M})


def prefill_windows(mode: str, M: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    """(cu_seqlen_ks, cu_seqlen_ke) int32 [M] for a window mode; ends exclusive.

    Modes (PREFILL_MODES):
      "causal"      one request whose last row sees all N keys;
      "cp"          the two halves of a context-parallel chunk (needs N % M == 0 and M even);
      "misaligned"  windows at odd offsets;
      "empty"       two rows of every three empty (ke negative, or ks > ke = 0);
      "past_end"    even rows' windows start and end past N (so they are empty);
      "multi_req"   several causal requests back to back (boundaries at multi_req_bounds(M)).
    Raises NotApplicable when the shape cannot hold the mode, ValueError for an unknown mode.
    """
    m = np.arange(M, dtype=np.int64)
    if mode == "causal":
        ks, ke = np.zeros(M, np.int64), N - M + m + 1
    elif mode == "cp":
        if M == 0 or N % M or M % 2:
            raise NotApplicable(mode, f"needs N % M == 0 and M even (M={M}, N={N})")
        half, c = M // 2, N // M
        i0 = c // 3
        i = np.arange(half)
        ks = np.zeros(M, np.int64)
        ke = np.concatenate([i0 * half + i, (2 * c - 1 - i0) * half + i])
    elif mode == "misaligned":
        ks = (53 * m + 100) % max(1, N // 2)
        ke = np.minimum(ks + max(1, N // 3), N)
    elif mode == "empty":
        r = m % 3
        ks = np.where(r == 1, min(100, N), 0)
        ke = np.select([r == 0, r == 1], [-1 - (m % 7), 0], np.minimum(m + 1, N))
    elif mode == "past_end":
        even = m % 2 == 0
        ks = np.where(even, N + 17, 0)
        ke = np.where(even, N + 64, np.minimum(m + 1, N))
    elif mode == "multi_req":
        edges = [0] + multi_req_bounds(M) + [M]
        R = len(edges) - 1
        K = N // R
        if K == 0:
            raise NotApplicable(mode, f"leaves a request no keys ({R} requests, N={N})")
        ks, ke = np.zeros(M, np.int64), np.zeros(M, np.int64)
        for r, (a, e) in enumerate(zip(edges[:-1], edges[1:])):
            rows = m[a:e]
            ks[a:e] = r * K
            ke[a:e] = np.maximum(r * K, r * K + K - (e - 1 - rows))
    else:
        raise ValueError(f"mode: expected one of {PREFILL_MODES}, got {mode!r}")
    return ks.astype(np.int32), ke.astype(np.int32)


def random_fp8(rng: np.random.Generator, shape, scale: float = 1.0) -> np.ndarray:
    """Normal values cast to fp8 e4m3fn (round to nearest even); finite, so never a NaN code."""
    x = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    return np.clip(x, -448.0, 448.0).astype(FP8)


@dataclass
class PrefillInputs:
    """The arguments of one fp8_mqa_logits call, as numpy arrays (shapes and dtypes as the op takes them)."""
    q: np.ndarray
    k: np.ndarray
    kv_scale: np.ndarray
    weights: np.ndarray
    cu_seqlen_ks: np.ndarray
    cu_seqlen_ke: np.ndarray

    def args(self) -> tuple:
        """The op's positional arguments: (q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke)."""
        return (self.q, self.k, self.kv_scale, self.weights, self.cu_seqlen_ks, self.cu_seqlen_ke)


def prefill_inputs(rng: np.random.Generator, M: int, N: int, H: int, D: int, mode: str = "causal",
                   power_of_two_scales: bool = False) -> PrefillInputs:
    """Random prefill inputs of shape (M, N, H, D) with the windows of `mode` (see prefill_windows).

    Keys are normal values (times 3) quantised per row by cache.quantize_keys (scales rounded up to powers
    of two on request); q is normal values cast to fp8, weights normal float32. Never zeros, never NaN codes.
    Raises NotApplicable or ValueError as prefill_windows does.
    """
    ks, ke = prefill_windows(mode, M, N)
    k, scale = quantize_keys(rng.standard_normal((N, D), dtype=np.float32) * 3, power_of_two_scales)
    q = random_fp8(rng, (M, H, D))
    w = rng.standard_normal((M, H), dtype=np.float32)
    return PrefillInputs(q, k, scale, w, ks, ke)


@dataclass(frozen=True)
class DecodeCase:
    """The description of a random decode batch that decode_inputs() draws: B sequences of next_n new
    tokens, H heads of D, a paged cache of block_size tokens per block (preshuffled or not), and context
    lengths drawn around mean_context (context_lengths). `name` spells it for reports."""
    B: int
    next_n: int
    H: int
    D: int
    block_size: int
    preshuffle: bool = False
    mean_context: int = 256
    ragged: bool = False          # draw next_n_lens in 0..next_n
    max_model_len: int | None = None  # None: the longest context (rounded up to a block)
    zero_contexts: int = 0        # sequences forced to context 0 (graph-capture padding)
    vllm_view: bool = False       # hand the cache over as [nb, bs, 1, D + 4]
    spread: str = "pm30"          # context lengths: one of SPREADS
    live_min: int = 0             # ragged: next_n_lens drawn in live_min..next_n
    zero_live: int = 0            # sequences forced to next_n_lens 0 (needs ragged)
    key_codes: bool = False       # keys as random fp8 codes written straight into the pool (fast for long contexts)
    split_kv: int | None = None   # the op's split_kv for this case (None: the planner's)
    lens_per_row: bool = False    # context_lens as [B, next_n] (DeepGEMM's form) in place of [B] + next_n_lens;
                                  # ragged: each sequence's live rows' lengths in a random order

    @property
    def name(self) -> str:
        """The case spelled for reports, e.g. B3_n2_H8_D64_bs16_shuf_ctx40_ragged."""
        return (f"B{self.B}_n{self.next_n}_H{self.H}_D{self.D}_bs{self.block_size}"
                f"{'_shuf' if self.preshuffle else ''}_ctx{self.mean_context}"
                f"{'' if self.spread == 'pm30' else '_' + self.spread}"
                f"{'_ragged' if self.ragged else ''}{f'{self.live_min}' if self.live_min else ''}"
                f"{f'_dead{self.zero_live}' if self.zero_live else ''}"
                f"{f'_mml{self.max_model_len}' if self.max_model_len else ''}"
                f"{f'_z{self.zero_contexts}' if self.zero_contexts else ''}"
                f"{f'_split{self.split_kv}' if self.split_kv else ''}"
                f"{'_rowlens' if self.lens_per_row else ''}")


@dataclass
class DecodeInputs:
    """The arguments of one fp8_paged_mqa_logits call (args()), plus each sequence's keys and scales as
    written into the cache (the per-element formulation reads the cache instead)."""
    q: np.ndarray
    kv_cache: np.ndarray
    weights: np.ndarray
    context_lens: np.ndarray
    block_tables: np.ndarray
    max_model_len: int
    next_n_lens: np.ndarray | None
    preshuffle: bool
    keys: list = field(default_factory=list)    # per sequence: fp8 [L, D]
    scales: list = field(default_factory=list)  # per sequence: float32 [L]

    def args(self) -> tuple:
        """The op's positional arguments: (q, kv_cache, weights, context_lens, block_tables, max_model_len,
        next_n_lens, preshuffle)."""
        return (self.q, self.kv_cache, self.weights, self.context_lens, self.block_tables,
                self.max_model_len, self.next_n_lens, self.preshuffle)


SPREADS = ("pm30", "equal", "one_long")


def context_lengths(rng: np.random.Generator, B: int, mean: int, spread: str = "pm30") -> np.ndarray:
    """Context lengths: drawn uniformly within +-30% of a mean (pm30), all equal to it (equal), or one
    sequence at the mean and the rest at mean // 32 (one_long, as a batch with one long request)."""
    if spread == "equal":
        return np.full(B, mean, np.int32)
    if spread == "one_long":
        ctx = np.full(B, max(1, mean // 32), np.int32)
        ctx[rng.integers(B)] = mean
        return ctx
    if spread != "pm30":
        raise ValueError(f"spread: expected one of {SPREADS}, got {spread!r}")
    lo, hi = int(round(0.7 * mean)), int(round(1.3 * mean))
    return rng.integers(lo, hi + 1, size=B).astype(np.int32)


KEY_CODE_MASK = 0xBF  # fp8 codes with exponent field <= 7: |x| < 2, never a NaN code


def _code_cache(rng: np.random.Generator, num_blocks: int, block_size: int, D: int) -> np.ndarray:
    """A pool of random keys (fp8 codes, |x| < 2) and scales in [2^-9, 2^-5), straight into the cache bytes."""
    cache = np.empty((num_blocks, block_size * (D + SCALE_BYTES)), np.uint8)
    cache[:, :block_size * D] = rng.integers(0, 256, size=(num_blocks, block_size * D), dtype=np.uint8)
    cache[:, :block_size * D] &= KEY_CODE_MASK
    scales = np.exp2(rng.uniform(-9, -5, size=(num_blocks, block_size))).astype(np.float32)
    cache[:, block_size * D:] = scales.view(np.uint8).reshape(num_blocks, -1)
    return cache.reshape(num_blocks, block_size, D + SCALE_BYTES)


def decode_inputs(rng: np.random.Generator, case: DecodeCase) -> DecodeInputs:
    """A random decode batch as `case` describes it: block tables over a pool in random order (one spare
    column of sentinels), keys quantised and written by slot, unused slots holding random non-NaN bytes.
    With key_codes the cache holds random fp8 codes instead and the per-sequence keys/scales lists stay
    empty (read them back with cache.gather_keys)."""
    c = case
    ctx = context_lengths(rng, c.B, c.mean_context, c.spread)
    if c.zero_contexts:
        ctx[rng.choice(c.B, size=min(c.zero_contexts, c.B), replace=False)] = 0
    mml = c.max_model_len or max(1, int(ctx.max(initial=1)))
    nn = rng.integers(c.live_min, c.next_n + 1, size=c.B).astype(np.int32) if c.ragged else None
    if nn is not None and c.zero_live:
        nn[rng.choice(c.B, size=min(c.zero_live, c.B), replace=False)] = 0
    # One spare column, so even the longest sequence has a sentinel to over-read.
    width = int(-(-min(int(ctx.max(initial=0)), mml) // c.block_size)) + 1
    tables, num_blocks = make_block_tables(ctx, c.block_size, rng, max_model_len=mml, max_blocks=width)
    keys, scales = [], []
    if c.key_codes:
        cache = _code_cache(rng, max(num_blocks, 1), c.block_size, c.D)  # random in either layout
    else:
        # Token slots past a sequence's end hold random non-NaN codes: read but never used.
        cache = random_fp8(rng, (max(num_blocks, 1), c.block_size, c.D + SCALE_BYTES)).view(np.uint8)
        cache = np.ascontiguousarray(cache)
    for b in range(0 if c.key_codes else c.B):
        L = int(min(ctx[b], mml))
        k, s = quantize_keys(rng.standard_normal((L, c.D), dtype=np.float32) * 3)
        n = np.arange(L)
        slots = tables[b, n // c.block_size].astype(np.int64) * c.block_size + n % c.block_size
        write_cache(cache, k, s, slots, preshuffle=c.preshuffle)
        keys.append(k)
        scales.append(s)
    if c.vllm_view:
        cache = cache.reshape(cache.shape[0], c.block_size, 1, c.D + SCALE_BYTES)
    q = random_fp8(rng, (c.B, c.next_n, c.H, c.D))
    w = rng.standard_normal((c.B * c.next_n, c.H), dtype=np.float32)
    if c.lens_per_row:
        lens = per_row_lengths(ctx, c.next_n, nn)
        if c.ragged:  # rows whose lengths follow no rule: each sequence's live rows in a random order
            for b in range(c.B):
                lens[b, :nn[b]] = rng.permutation(lens[b, :nn[b]])
        return DecodeInputs(q, cache, w, lens, tables, mml, None, c.preshuffle, keys, scales)
    return DecodeInputs(q, cache, w, ctx, tables, mml, nn, c.preshuffle, keys, scales)


def decode_subset(inp: DecodeInputs, seqs) -> DecodeInputs:
    """The same cache with only sequences `seqs` of the batch (their rows of q and weights, in order)."""
    seqs = np.asarray(seqs)
    next_n = inp.q.shape[1]
    rows = (seqs[:, None] * next_n + np.arange(next_n)[None, :]).reshape(-1)
    pick = lambda lst: [lst[b] for b in seqs] if lst else []  # noqa: E731
    return DecodeInputs(inp.q[seqs], inp.kv_cache, inp.weights[rows], inp.context_lens[seqs],
                        inp.block_tables[seqs], inp.max_model_len,
                        None if inp.next_n_lens is None else inp.next_n_lens[seqs], inp.preshuffle,
                        pick(inp.keys), pick(inp.scales))


def naive_mqa_logits(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=True):
    """Prefill, one element at a time in float64: the independent formulation the reference is checked against."""
    M, H, D = q.shape
    N = k.shape[0]
    qd, kd, wd = q.astype(np.float64), k.astype(np.float64), weights.astype(np.float64)
    out = np.full((M, N), -np.inf if clean_logits else np.nan)
    for m in range(M):
        for n in range(max(0, int(cu_seqlen_ks[m])), min(N, int(cu_seqlen_ke[m]))):
            out[m, n] = float(np.maximum(qd[m] @ kd[n], 0.0) @ wd[m]) * float(kv_scale[n])
    return out


def naive_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                           next_n_lens=None, preshuffle=False, clean_logits=True):
    """Decode, one element at a time in float64, reading the cache bytes by the layout formulas of
    docs/ops.md ("The paged cache layouts"): the independent formulation the reference is checked against."""
    B, next_n, H, D = q.shape
    raw = np.ascontiguousarray(kv_cache).reshape(kv_cache.shape[0], -1)
    bs = kv_cache.shape[1]
    out = np.full((B * next_n, max_model_len), -np.inf if clean_logits else np.nan)
    for b in range(B):
        live = next_n if next_n_lens is None else int(next_n_lens[b])
        for j in range(live):
            seen = int(context_lens[b, j]) if np.ndim(context_lens) == 2 else int(context_lens[b]) - live + j + 1
            for n in range(min(seen, max_model_len)):
                blk, t = int(block_tables[b, n // bs]), n % bs
                d = np.arange(D)
                if preshuffle:
                    pos = (t // 16) * 16 * D + (d // 16) * 256 + (t % 16) * 16 + d % 16
                else:
                    pos = t * D + d
                key = raw[blk, pos].view(FP8).astype(np.float64)
                scale = float(raw[blk, bs * D + 4 * t: bs * D + 4 * t + 4].view(np.float32)[0])
                r = b * next_n + j
                out[r, n] = float(np.maximum(q[b, j].astype(np.float64) @ key, 0.0)
                                  @ weights[r].astype(np.float64)) * scale
    return out
