"""The decode top-k sweep behind `hipindexer check topk`: fp8_paged_mqa_topk on a device against the reference
under gate_paged_topk (docs/accuracy.md, "The top-k gate"), a seeded pairwise sample of its matrix.

Every case holds rows of each kind the selection treats apart: V >= 4 top_k keys (the radix passes decide
them), a sequence of fewer keys than top_k, a sequence of none (context 0) and, ragged, dead rows; outputs are
poisoned before the call, and slots and values are always asked for and judged.
"""
from __future__ import annotations

import time

import numpy as np

from .. import reference, testing
from ..gate import gate_paged_topk
from .covering import covering_design
from .sweep import FAIL, NA, PASS, Outcome

# Cheapest value first on each axis (the covering design completes hard items with them). "chunks": the
# workspace's widest chunk (a row in one; the fused path instead, where it serves) or chunks of a few blocks
# (several per row).
TOPK_AXES = {
    "top_k": (7, 512, 2048, 300),
    "next_n": (1, 2, 4),
    "HD": ((16, 64), (32, 128), (64, 128)),
    "block_size": (16, 64),
    "preshuffle": (False, True),
    "ragged": ("off", "on"),
    "lens": ("[B]", "[B, next_n]"),
    "sorted": (False, True),
    "chunks": ("one", "several"),
}
QUICK_TOPK_FMAS = 1 << 31   # emulator: the most multiply-adds one case may take
FULL_TOPK_CASES = 40


def topk_work(cfg: dict) -> int:
    """Multiply-adds of a case at full live rows (B = 3 sequences of about 4 top_k + 2 blocks)."""
    H, D = cfg["HD"]
    return 3 * (4 * cfg["top_k"] + 2 * cfg["block_size"]) * cfg["next_n"] * H * D


def _design(axes: dict, work, full_cases: int, quick: bool, seed: int, max_cases: int | None):
    """A pairwise covering design of `axes` (quick: each case's work(cfg) within QUICK_TOPK_FMAS; else capped at
    full_cases)."""
    fits = (lambda cfg: work(cfg) <= QUICK_TOPK_FMAS) if quick else (lambda cfg: True)
    return covering_design(axes, strength=2, seed=seed, feasible=fits,
                           max_cases=max_cases or (None if quick else full_cases))


def topk_design(quick: bool, seed: int = 0, max_cases: int | None = None):
    """The sampled decode top-k matrix, a pairwise covering design (quick: each case within QUICK_TOPK_FMAS)."""
    return _design(TOPK_AXES, topk_work, FULL_TOPK_CASES, quick, seed, max_cases)


def topk_case_name(cfg: dict) -> str:
    H, D = cfg["HD"]
    return (f"n{cfg['next_n']}_H{H}_D{D}_bs{cfg['block_size']}{'_shuf' if cfg['preshuffle'] else ''}"
            f"_k{cfg['top_k']}{'_ragged' if cfg['ragged'] == 'on' else ''}"
            f"{'_rowlens' if cfg['lens'] == '[B, next_n]' else ''}{'_sorted' if cfg['sorted'] else ''}"
            f"_{'chunks' if cfg['chunks'] == 'several' else 'onechunk'}")


def topk_inputs(rng, cfg: dict, B: int = 4) -> testing.DecodeInputs:
    """B sequences: wide ones of 4 top_k + about two blocks keys, one of fewer than top_k, one of none."""
    H, D = cfg["HD"]
    top_k, bs, n = cfg["top_k"], cfg["block_size"], cfg["next_n"]
    wide = 4 * top_k + 2 * bs + n
    case = testing.DecodeCase(B, n, H, D, bs, cfg["preshuffle"], mean_context=wide, spread="equal",
                              ragged=cfg["ragged"] == "on", live_min=1, key_codes=B * wide > 1 << 16)
    inp = testing.decode_inputs(rng, case)
    ctx = inp.context_lens.copy()
    ctx[B - 2] = max(1, top_k // 2)       # fewer keys than top_k
    ctx[B - 1] = 0                        # none
    nl = inp.next_n_lens
    if cfg["lens"] == "[B, next_n]":
        ctx, nl = reference.per_row_lengths(ctx, n, nl), None
    return testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, ctx, inp.block_tables, inp.max_model_len, nl,
                                cfg["preshuffle"])


def topk_device_case(rng, device, cfg: dict, accumulation: str = "fast", **tunables) -> Outcome:
    t0 = time.perf_counter()
    o = _topk_device_case(rng, device, cfg, accumulation, **tunables)
    o.seconds = round(time.perf_counter() - t0, 3)
    return o


def _topk_device_case(rng, device, cfg, accumulation, **tunables) -> Outcome:
    from ..ops import fp8_paged_mqa_topk, target_of
    from ..ops.paged_topk_fused import FUSED_KERNELS, fused_refusal
    from ..plan import plan_decode
    from ..runtime import DeviceArray
    name = topk_case_name(cfg)
    inp = topk_inputs(rng, cfg)
    B, n, H, D = inp.q.shape
    top_k, bs = cfg["top_k"], cfg["block_size"]
    plan = plan_decode(B, n, H, D, bs, inp.max_model_len, target_of(device), preshuffle=inp.preshuffle,
                       accumulation=accumulation, **tunables)
    kernel = plan.kernel
    if cfg["chunks"] == "several":  # about three chunks per wide row
        tunables = dict(tunables, chunk=max(bs, -(-inp.max_model_len // (3 * bs)) * bs))
    elif fused_refusal(target_of(device), n, top_k, H, D, bs, inp.preshuffle, accumulation,
                       kernel=tunables.get("kernel")) is None:  # one chunk: the fused path, where it serves
        tunables = dict(tunables, fused=True)
        kernel = FUSED_KERNELS[target_of(device).arch].key
    R = B * n
    outs = (DeviceArray.from_numpy(np.full((R, top_k), np.iinfo(np.int32).min, np.int32), device),
            DeviceArray.empty((R, top_k), np.float32, device).fill(np.nan),
            DeviceArray.from_numpy(np.full((R, top_k), np.iinfo(np.int32).min, np.int32), device))
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), device)
    fp8_paged_mqa_topk(*inp.args()[:6], top_k, next_n_lens=inp.next_n_lens, preshuffle=inp.preshuffle,
                       accumulation=accumulation, sorted=cfg["sorted"], return_values=True, return_slots=True,
                       out=outs, errors=errors, device=device, **tunables)
    idx, val, slots = (a.numpy() for a in outs)
    flags = int(errors.numpy()[0])
    if flags:
        return Outcome("topk", name, FAIL, f"error flags {flags:#x} on valid inputs", kernel=kernel)
    g = gate_paged_topk(idx, val, inp, top_k, plan.accumulation, sorted=cfg["sorted"], slots=slots)
    counts = (idx >= 0).sum(axis=1)
    if g and not ((counts == top_k).any() and (counts == 0).any() and ((counts > 0) & (counts < top_k)).any()):
        return Outcome("topk", name, FAIL, f"rows of every kind expected (V >= top_k, 0 < V < top_k, V = 0), "
                                           f"got counts {sorted(set(counts.tolist()))}", kernel=kernel)
    return Outcome("topk", name, PASS if g else FAIL, g.message, kernel=kernel)


# ------------------------------------------------------------------ the prefill top-k (fp8_mqa_topk)

# Window modes as hipindexer.testing.prefill_windows draws them; "shape": the planner's workspace, or groups of a
# few rows and chunks of a few hundred keys (several of each per case).
PREFILL_TOPK_AXES = {
    "top_k": (7, 512, 2048, 300),
    "HD": ((16, 64), (32, 128), (64, 128)),
    "mode": ("causal", "cp", "misaligned", "empty", "past_end", "multi_req"),
    "sorted": (False, True),
    "relative": (False, True),
    "shape": ("planned", "small"),
}
FULL_PREFILL_TOPK_CASES = 40


def prefill_topk_shape(cfg: dict) -> tuple[int, int]:
    """(M, N): N a multiple of M (the cp mode's need) of at least 16 top_k keys, so that rows see V >= 4 top_k
    keys in the modes of wide windows; "empty" and "past_end" add rows of V = 0 and short ones."""
    M = 48
    return M, -(-(16 * cfg["top_k"] + 2 * M) // M) * M


def prefill_topk_work(cfg: dict) -> int:
    H, D = cfg["HD"]
    M, N = prefill_topk_shape(cfg)
    return M * N * H * D


def prefill_topk_design(quick: bool, seed: int = 0, max_cases: int | None = None):
    """The sampled prefill top-k matrix, a pairwise covering design (quick: each case within QUICK_TOPK_FMAS)."""
    return _design(PREFILL_TOPK_AXES, prefill_topk_work, FULL_PREFILL_TOPK_CASES, quick, seed, max_cases)


def prefill_topk_case_name(cfg: dict) -> str:
    H, D = cfg["HD"]
    return (f"{cfg['mode']}_H{H}_D{D}_k{cfg['top_k']}{'_sorted' if cfg['sorted'] else ''}"
            f"{'_relative' if cfg['relative'] else ''}_{cfg['shape']}")


def prefill_topk_device_case(rng, device, cfg: dict, accumulation: str = "fast") -> Outcome:
    t0 = time.perf_counter()
    o = _prefill_topk_device_case(rng, device, cfg, accumulation)
    o.seconds = round(time.perf_counter() - t0, 3)
    return o


def _prefill_topk_device_case(rng, device, cfg, accumulation) -> Outcome:
    from ..gate import gate_prefill_topk
    from ..ops import fp8_mqa_topk, target_of
    from ..plan import plan_prefill
    from ..runtime import DeviceArray
    name = prefill_topk_case_name(cfg)
    H, D = cfg["HD"]
    M, N = prefill_topk_shape(cfg)
    top_k = cfg["top_k"]
    try:
        inp = testing.prefill_inputs(rng, M, N, H, D, cfg["mode"])
    except testing.NotApplicable as e:
        return Outcome("topk", name, NA, str(e))
    tunables = {} if cfg["shape"] == "planned" else {"rows": 7, "chunk": 4 * top_k + 256}
    plan = plan_prefill(M, N, H, D, target_of(device), accumulation=accumulation)
    outs = (DeviceArray.from_numpy(np.full((M, top_k), np.iinfo(np.int32).min, np.int32), device),
            DeviceArray.empty((M, top_k), np.float32, device).fill(np.nan))
    fp8_mqa_topk(*inp.args(), top_k, relative=cfg["relative"], sorted=cfg["sorted"], return_values=True,
                 accumulation=accumulation, out=outs, device=device, **tunables)
    idx, val = (a.numpy() for a in outs)
    g = gate_prefill_topk(idx, val, inp, top_k, plan.accumulation, sorted=cfg["sorted"], relative=cfg["relative"])
    counts = (idx >= 0).sum(axis=1)
    kinds = (counts == 0).any() if cfg["mode"] in ("empty", "past_end") else (counts == top_k).any()
    if g and not kinds:
        return Outcome("topk", name, FAIL, f"rows of V = 0 (empty modes) or V >= top_k expected, got counts "
                                           f"{sorted(set(counts.tolist()))}", kernel=plan.kernel)
    return Outcome("topk", name, PASS if g else FAIL, g.message, kernel=plan.kernel)
