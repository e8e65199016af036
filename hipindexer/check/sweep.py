"""Correctness sweeps: cases, outcomes and their tally.

The reference sweep checks the numpy reference against the per-element float64
formulations of hipindexer.testing; the device sweeps (prefill_device_cases,
bitwise_reruns) check kernels against the reference with the same gate and the
same tally.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from .. import reference, testing
from ..gate import GateResult, gate, gate_decode, gate_prefill

PASS, FAIL, NA = "passed", "failed", "not applicable"


@dataclass
class Outcome:
    op: str
    case: str
    status: str
    message: str
    seconds: float = 0.0
    kernel: str = ""               # the kernel that ran (device sweeps), or "reference"
    err_over_a: float = 0.0        # the gate's figures (hipindexer.gate.GateResult)
    exceptions: int = 0
    worst_exception: float = 0.0

    @classmethod
    def of(cls, op: str, case: str, kernel: str, g: GateResult, note: str = "") -> "Outcome":
        return cls(op, case, PASS if g else FAIL, g.message + note, kernel=kernel, err_over_a=g.err_over_a,
                   exceptions=g.exceptions, worst_exception=g.worst_exception)


def _prefill_case(rng, M, N, H, D, mode, clean) -> Outcome:
    name = f"M{M}_N{N}_H{H}_D{D}_{mode}_{'clean' if clean else 'raw'}"
    try:
        inp = testing.prefill_inputs(rng, M, N, H, D, mode)
    except testing.NotApplicable as e:
        return Outcome("prefill", name, NA, str(e))
    got = reference.fp8_mqa_logits(*inp.args(), clean_logits=clean)
    want = testing.naive_mqa_logits(*inp.args(), clean_logits=clean)
    A = reference.fp8_mqa_logits(*inp.args(), accumulate=np.float64, magnitude=True)
    g = gate(got, want, reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, N), clean, magnitude=A,
             accumulation="fp32")
    return Outcome.of("prefill", name, "reference", g)


def _decode_case(rng, case: testing.DecodeCase, clean) -> Outcome:
    name = f"{case.name}_{'clean' if clean else 'raw'}"
    inp = testing.decode_inputs(rng, case)
    got = reference.fp8_paged_mqa_logits(*inp.args(), clean_logits=clean)
    want = testing.naive_paged_mqa_logits(*inp.args(), clean_logits=clean)
    valid = reference.decode_valid_mask(inp.context_lens, case.next_n, inp.max_model_len, inp.next_n_lens)
    A = reference.fp8_paged_mqa_logits(*inp.args(), accumulate=np.float64, magnitude=True)
    g = gate(got, want, valid, clean, magnitude=A, accumulation="fp32")
    return Outcome.of("decode", name, "reference", g)


def reference_cases(quick: bool = False) -> Iterator[Callable[[np.random.Generator], Outcome]]:
    shapes = [(16, 80), (7, 33)] if quick else [(16, 80), (7, 33), (1, 1), (40, 200)]
    heads = [1, 32] if quick else [1, 32, 64]
    dims = [64] if quick else [64, 128]
    for (M, N), H, D, mode, clean in itertools.product(shapes, heads, dims, testing.PREFILL_MODES, (True, False)):
        yield lambda rng, a=(M, N, H, D, mode, clean): _prefill_case(rng, *a)
    decode = [
        testing.DecodeCase(3, 1, 4, 64, 1, mean_context=30),
        testing.DecodeCase(3, 2, 8, 64, 16, True, mean_context=40, ragged=True),
        testing.DecodeCase(2, 4, 8, 64, 64, False, mean_context=70, max_model_len=50),
        testing.DecodeCase(4, 8, 4, 64, 16, True, mean_context=5, ragged=True, zero_contexts=1),
    ]
    if not quick:
        decode += [testing.DecodeCase(3, 3, 32, 128, 7, mean_context=30, vllm_view=True),
                   testing.DecodeCase(2, 2, 64, 128, 64, True, mean_context=100)]
    for case, clean in itertools.product(decode, (True, False)):
        yield lambda rng, c=case, cl=clean: _decode_case(rng, c, cl)


def tally(outcomes: list[Outcome]) -> dict:
    t = {"run": 0, PASS: 0, FAIL: 0, NA: 0}
    for o in outcomes:
        t[o.status] += 1
        t["run"] += o.status != NA
    return t


# ------------------------------------------------------------------ device sweep (prefill)

PREFILL_SHAPES = ((1, 1), (1, 113), (17, 76), (61, 1024), (128, 1024), (1024, 1024), (1024, 1560),
                  (64, 2048), (64, 8192), (128, 64), (1024, 1000), (4096, 32768), (2048, 65536), (1024, 131072))
QUICK_PREFILL_SHAPES = ((1, 1), (1, 113), (17, 76), (64, 128), (61, 256))
PREFILL_HEADS = (32, 64, 16)
PREFILL_DIMS = (64, 128)
SAMPLE_ABOVE = 1 << 28   # M * N * H * D past which values are checked on sampled rows
SAMPLE_BUDGET = 1 << 34  # sampled rows * N * H * D: the float64 reference's work per sampled case


def sample_rows(rng, M: int, mode: str, count: int = 64) -> np.ndarray:
    """First, last, the rows either side of each request boundary, and `count` random rows."""
    rows = {0, M - 1}
    if mode == "multi_req":
        for b in testing.multi_req_bounds(M):
            rows |= {b - 1, b}
    rows |= set(rng.choice(M, size=min(count, M), replace=False).tolist())
    return np.array(sorted(rows))


def mask_gate(out: np.ndarray, valid: np.ndarray, clean: bool) -> str | None:
    """The -inf / poison pattern of every row (cheap, so checked in full even when values are sampled)."""
    if clean:
        bad = np.isnan(out) | ((out == -np.inf) != ~valid)
        what = "-inf mask or NaN"
    else:
        bad = np.isnan(out) == valid
        what = "poison outside / NaN inside the window"
    if bad.any():
        r, c = np.argwhere(bad)[0]
        return f"{what} wrong at row {r}, col {c} ({int(bad.sum())} positions): {out[r, c]}"
    return None


def prefill_device_case(rng, device, M, N, H, D, mode, clean, **tunables) -> Outcome:
    t0 = time.perf_counter()
    o = _prefill_device_case(rng, device, M, N, H, D, mode, clean, **tunables)
    o.seconds = round(time.perf_counter() - t0, 3)
    return o


def _prefill_device_case(rng, device, M, N, H, D, mode, clean, accumulation="fast", **tunables) -> Outcome:
    from ..ops import fp8_mqa_logits, target_of
    from ..plan import plan_prefill
    from ..runtime import DeviceArray
    name = f"M{M}_N{N}_H{H}_D{D}_{mode}_{'clean' if clean else 'raw'}"
    plan = plan_prefill(M, N, H, D, target_of(device), accumulation=accumulation, **tunables)
    try:
        inp = testing.prefill_inputs(rng, M, N, H, D, mode)
    except testing.NotApplicable as e:
        return Outcome("prefill", name, NA, str(e), kernel=plan.kernel)
    out = DeviceArray.empty((M, N), np.float32, device).fill(np.nan)
    fp8_mqa_logits(*inp.args(), clean_logits=clean, accumulation=accumulation, out=out, device=device, **tunables)
    got = out.numpy()
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, N)
    msg = mask_gate(got, valid, clean)
    if msg:
        return Outcome("prefill", name, FAIL, msg, kernel=plan.kernel)
    if M * N * H * D <= SAMPLE_ABOVE:
        return Outcome.of("prefill", name, plan.kernel, gate_prefill(got, inp, clean, plan.accumulation))
    rows = sample_rows(rng, M, mode, count=max(16, min(64, SAMPLE_BUDGET // (N * H * D))))
    g = gate_prefill(got, inp, clean, plan.accumulation, rows=rows)
    return Outcome.of("prefill", name, plan.kernel, g, f" on {len(rows)} sampled rows")


def prefill_device_cases(quick: bool, heads=PREFILL_HEADS, dims=PREFILL_DIMS, shapes=None):
    shapes = shapes or (QUICK_PREFILL_SHAPES if quick else PREFILL_SHAPES)
    for (M, N), H, D, mode, clean in itertools.product(shapes, heads, dims, testing.PREFILL_MODES, (True, False)):
        yield (M, N, H, D, mode, clean)


def kernel_figures(outcomes: list[Outcome]) -> dict:
    """Per kernel: cases run, the worst |out - ref| / A seen, rows excused as ill-conditioned, their worst
    calc_diff."""
    per = {}
    for o in outcomes:
        if o.status == NA or not o.kernel:
            continue
        f = per.setdefault(o.kernel, {"cases": 0, "max_err_over_a": 0.0, "exceptions": 0, "worst_exception": 0.0})
        f["cases"] += 1
        f["max_err_over_a"] = max(f["max_err_over_a"], o.err_over_a)
        f["exceptions"] += o.exceptions
        f["worst_exception"] = max(f["worst_exception"], o.worst_exception)
    return per


def bitwise_reruns(rng, device, M=2048, N=8192, H=64, D=128, runs=20, **tunables) -> Outcome:
    """The same large case `runs` times: every output must be bitwise identical."""
    from ..ops import fp8_mqa_logits
    from ..runtime import DeviceArray
    inp = testing.prefill_inputs(rng, M, N, H, D, "multi_req")
    first = None
    for i in range(runs):
        out = DeviceArray.empty((M, N), np.float32, device).fill(np.nan)
        got = fp8_mqa_logits(*inp.args(), out=out, device=device, **tunables).numpy()
        if first is None:
            first = got
        elif not np.array_equal(first.view(np.uint32), got.view(np.uint32)):
            n = int((first.view(np.uint32) != got.view(np.uint32)).sum())
            return Outcome("prefill", f"bitwise_M{M}_N{N}_H{H}", FAIL, f"run {i} differs from run 0 in {n} positions")
    return Outcome("prefill", f"bitwise_M{M}_N{N}_H{H}", PASS, f"{runs} runs bitwise identical")


# ------------------------------------------------------------------ device sweep (decode)

# The matrix of the decode op; cheapest value first on each axis (covering.covering_design completes hard
# items with them). "next_n": contexts of exactly next_n tokens; "above": contexts past max_model_len.
DECODE_AXES = {
    "B": (1, 3, 16, 64),
    "next_n": (1, 2, 4, 6, 8),
    "H": (16, 32, 64),
    "D": (64, 128),
    "context": (1, "next_n", 1000, "above", 8192, 32768, 131072),
    "block_size": (16, 64, 1),
    "preshuffle": (False, True),
    "spread": ("equal", "pm30", "one_long"),
    "ragged": ("off", "on", "zeros"),
    "split_kv": (None, 1, 7),
    "clean": (True, False),
    "lens": ("[B]", "[B, next_n]"),  # context_lens' form: per sequence (+ next_n_lens), or per row (DeepGEMM's)
}
ABOVE = (1000, 600)           # "above": contexts around 1000 with max_model_len 600
QUICK_DECODE_FMAS = 1 << 30   # emulator: the most multiply-adds one case may take (about two seconds)
FULL_DECODE_BYTES = 2 << 30   # GPU: the largest cache one case may build on the host
FULL_DECODE_CASES = 40        # GPU: the pairwise design's cap (the rest of its pairs are reported)
DECODE_SAMPLE_SEQS = 3        # sampled checks: values of this many sequences, plus the first, last and longest


def decode_case_of(cfg: dict) -> tuple[testing.DecodeCase, bool]:
    """A point of DECODE_AXES as (DecodeCase, clean_logits). Batches of 3 or more get one padding sequence
    (context 0); ragged 'zeros' forces a quarter of the sequences (at least one, none of a batch of one) to
    next_n_lens 0."""
    B, n, ctx = cfg["B"], cfg["next_n"], cfg["context"]
    mml = None
    if ctx == "next_n":
        ctx = n
    elif ctx == "above":
        ctx, mml = ABOVE
    rg = cfg["ragged"]
    case = testing.DecodeCase(
        B, n, cfg["H"], cfg["D"], cfg["block_size"], cfg["preshuffle"], mean_context=ctx, ragged=rg != "off",
        max_model_len=mml, zero_contexts=1 if B >= 3 else 0, spread=cfg["spread"], live_min=1 if rg == "on" else 0,
        zero_live=max(1, B // 4) if rg == "zeros" and B > 1 else 0, key_codes=B * ctx > (1 << 16),
        split_kv=cfg["split_kv"], lens_per_row=cfg["lens"] == "[B, next_n]")
    return case, cfg["clean"]


def _decode_repair(cfg: dict, block_sizes=DECODE_AXES["block_size"]) -> dict:
    if cfg["preshuffle"] and cfg["block_size"] % 16:
        fits = [bs for bs in block_sizes if bs % 16 == 0]
        cfg = {**cfg, "block_size": fits[0]} if fits else {**cfg, "preshuffle": False}
    return cfg


def _restrict(defaults: tuple, only) -> tuple:
    """An axis cut to the values `only` names (None: all of them), in the axis's order (cheapest first); values
    the axis lacks come after it, ascending."""
    if only is None:
        return defaults
    only = [int(v) for v in only]
    return tuple(v for v in defaults if v in only) + tuple(sorted(v for v in set(only) if v not in defaults))


def decode_work(case: testing.DecodeCase) -> tuple[int, int]:
    """(multiply-adds at full live rows, cache bytes) of a case, from its expected lengths."""
    ctx = min(case.mean_context, case.max_model_len or case.mean_context)
    keys = ctx + (case.B - 1) * max(1, ctx // 32) if case.spread == "one_long" else int(1.3 * ctx) * case.B
    return keys * case.next_n * case.H * case.D, keys * (case.D + 4) + case.B * case.block_size * (case.D + 4)


def decode_design(quick: bool, seed: int = 0, max_cases: int | None = None, max_context: int | None = None,
                  heads=None, dims=None, block_sizes=None):
    """The sampled decode matrix, a pairwise covering design: every pair of values of two axes in some case,
    quick with each case within QUICK_DECODE_FMAS (pairs that cannot be are reported: the longest contexts
    with the largest batches, heads or next_n), otherwise as far as FULL_DECODE_CASES cases allow with
    caches within FULL_DECODE_BYTES. heads, dims, block_sizes: only these values on those axes (the shapes
    one kernel serves); None keeps the axis whole."""
    from .covering import covering_design
    axes = dict(DECODE_AXES)
    axes["H"] = _restrict(axes["H"], heads)
    axes["D"] = _restrict(axes["D"], dims)
    axes["block_size"] = _restrict(axes["block_size"], block_sizes)
    if max_context is not None:
        axes["context"] = tuple(c for c in axes["context"] if not isinstance(c, int) or c <= max_context)
    if quick:
        fits = lambda cfg: decode_work(decode_case_of(cfg)[0])[0] <= QUICK_DECODE_FMAS  # noqa: E731
    else:
        fits = lambda cfg: decode_work(decode_case_of(cfg)[0])[1] <= FULL_DECODE_BYTES  # noqa: E731
    return covering_design(axes, strength=2, seed=seed, feasible=fits,
                           repair=lambda cfg: _decode_repair(cfg, axes["block_size"]),
                           max_cases=max_cases or (None if quick else FULL_DECODE_CASES))


def decode_shape(H: int, D: int, block_size: int, heads=None, dims=None, block_sizes=None,
                 need16: bool = False) -> tuple[int, int, int] | None:
    """(H, D, block_size) of a fixed-shape decode check within the filters: each value kept where allowed,
    else the filter's first (block sizes: a multiple of 16 when need16); None when no block size fits."""
    pick = lambda v, only: v if only is None or v in only else int(only[0])  # noqa: E731
    if block_sizes is not None and block_size not in block_sizes:
        fits = [bs for bs in block_sizes if not need16 or bs % 16 == 0]
        if not fits:
            return None
        block_size = int(fits[0])
    return pick(H, heads), pick(D, dims), block_size


def _accumulation_of(device, case: testing.DecodeCase, mml: int, accumulation="fast", **tunables) -> tuple[str, str]:
    """(kernel, accumulation class) the op runs a case with: the gate's eps follows the kernel."""
    from ..ops import target_of
    from ..plan import plan_decode
    plan = plan_decode(case.B, case.next_n, case.H, case.D, case.block_size, mml, target_of(device),
                       preshuffle=case.preshuffle, accumulation=accumulation, **tunables)
    return plan.kernel, plan.accumulation


def _errors_array(device):
    from ..runtime import DeviceArray
    return DeviceArray.from_numpy(np.zeros(1, np.int32), device)


def sample_sequences(rng, inp, count: int = DECODE_SAMPLE_SEQS) -> np.ndarray:
    B = inp.q.shape[0]
    longest = inp.context_lens.max(axis=1) if inp.context_lens.ndim == 2 else inp.context_lens
    seqs = {0, B - 1, int(np.argmax(longest))}
    seqs |= set(rng.choice(B, size=min(count, B), replace=False).tolist())
    return np.array(sorted(seqs))


def decode_device_case(rng, device, case: testing.DecodeCase, clean: bool, accumulation: str = "fast",
                       **tunables) -> Outcome:
    t0 = time.perf_counter()
    o = _decode_device_case(rng, device, case, clean, accumulation, **tunables)
    o.seconds = round(time.perf_counter() - t0, 3)
    return o


def _decode_device_case(rng, device, case, clean, accumulation, **tunables) -> Outcome:
    from ..ops import fp8_paged_mqa_logits, target_of
    from ..plan import plan_decode
    from ..runtime import DeviceArray
    name = f"{case.name}_{'clean' if clean else 'raw'}"
    inp = testing.decode_inputs(rng, case)
    R, mml = case.B * case.next_n, inp.max_model_len
    plan = plan_decode(case.B, case.next_n, case.H, case.D, case.block_size, mml, target_of(device),
                       preshuffle=case.preshuffle, accumulation=accumulation, split_kv=case.split_kv, **tunables)
    out = DeviceArray.empty((R, mml), np.float32, device).fill(np.nan)
    errors = _errors_array(device)
    fp8_paged_mqa_logits(*inp.args(), split_kv=case.split_kv, clean_logits=clean, accumulation=accumulation,
                         errors=errors, out=out, device=device, **tunables)
    got = out.numpy()
    flags = int(errors.numpy()[0])
    if flags:
        return Outcome("decode", name, FAIL, f"error flags {flags:#x} on valid inputs", kernel=plan.kernel)
    valid = reference.decode_valid_mask(inp.context_lens, case.next_n, mml, inp.next_n_lens)
    msg = mask_gate(got, valid, clean)
    if msg:
        return Outcome("decode", name, FAIL, msg, kernel=plan.kernel)
    if R * mml * case.H * case.D <= SAMPLE_ABOVE:
        return Outcome.of("decode", name, plan.kernel, gate_decode(got, inp, clean, plan.accumulation))
    seqs = sample_sequences(rng, inp)
    rows = (seqs[:, None] * case.next_n + np.arange(case.next_n)[None, :]).reshape(-1)
    g = gate_decode(got[rows], testing.decode_subset(inp, seqs), clean, plan.accumulation)
    return Outcome.of("decode", name, plan.kernel, g, f" on {len(seqs)} sampled sequences")


def _decode_run(device, inp, clean=True, errors=None, **kw) -> np.ndarray:
    from ..ops import fp8_paged_mqa_logits
    from ..runtime import DeviceArray
    out = DeviceArray.empty((inp.q.shape[0] * inp.q.shape[1], inp.max_model_len), np.float32, device).fill(np.nan)
    fp8_paged_mqa_logits(*inp.args(), clean_logits=clean, errors=errors, out=out, device=device, **kw)
    return out.numpy()


def decode_layouts_agree(rng, device, heads=None, dims=None, block_sizes=None, **tunables) -> Outcome:
    """One cache in both layouts: bitwise identical logits (and both pass the gate). The shape stays within
    the filters (heads, dims, block_sizes); the whole batch on one unit and on the planner's grid, so both
    long runs of one sequence's blocks and many unit boundaries are crossed."""
    from ..cache import shuffle_cache
    shape = decode_shape(32, 128, 64, heads, dims, block_sizes, need16=True)
    if shape is None:
        return Outcome("decode", "layouts_block_flat_vs_preshuffled", NA, "no block size of the filter is a "
                       "multiple of 16")
    H, D, bs = shape
    case = testing.DecodeCase(3, 2, H, D, bs, False, mean_context=3000, ragged=True, live_min=1)
    name = "layouts_block_flat_vs_preshuffled"
    flat = testing.decode_inputs(rng, case)
    shuf = testing.DecodeInputs(flat.q, shuffle_cache(flat.kv_cache, case.D), flat.weights, flat.context_lens,
                                flat.block_tables, flat.max_model_len, flat.next_n_lens, True)
    kernel, acc = _accumulation_of(device, case, flat.max_model_len, **tunables)
    for split in (None, 1):
        kw = dict(tunables, split_kv=split) if split else tunables
        a, b = _decode_run(device, flat, **kw), _decode_run(device, shuf, **kw)
        if not np.array_equal(a.view(np.uint32), b.view(np.uint32)):
            n = int((a.view(np.uint32) != b.view(np.uint32)).sum())
            return Outcome("decode", name, FAIL, f"split_kv={split}: {n} positions differ between the two layouts",
                           kernel=kernel)
        g = gate_decode(b, shuf, True, acc)
        if not g:
            return Outcome.of("decode", name, kernel, g, f" (split_kv={split})")
    return Outcome.of("decode", name, kernel, g, f"; bitwise identical, split_kv None and 1 (H={H}, D={D}, "
                                                 f"block_size {bs})")


# (H, D, block_size) of the untrusted-value checks: the generic kernel's, and on gfx950 each MFMA kernel's.
UNTRUSTED_SHAPES = ((16, 64, 16), (32, 128, 16), (64, 128, 1))


def decode_untrusted_values(rng, device, heads=None, dims=None, block_sizes=None, lens_per_row=False,
                            **tunables) -> Outcome:
    """Device-only values out of range: block ids outside the pool (one past the end, one negative) give
    -inf on their keys and error bit 0; a negative context length and a next_n_lens above next_n give
    -inf rows and bit 2 (lens_per_row: [B, next_n] lengths, one row's negative: that row alone -inf, bit 2);
    every other position is bitwise what the clean inputs give. The shape stays within the filters (heads,
    dims, block_sizes)."""
    from ..ops import ERROR_BLOCK_ID, ERROR_LENGTH
    from ..runtime import DeviceArray
    H, D, bs = decode_shape(16, 64, 16, heads, dims, block_sizes)
    case = testing.DecodeCase(4, 2, H, D, bs, False, mean_context=max(200, 3 * bs), spread="equal", ragged=True,
                              live_min=1, lens_per_row=lens_per_row)
    name = "untrusted_device_values" + ("" if (H, D, bs) == (16, 64, 16) else f"_H{H}_D{D}_bs{bs}") + \
        ("_rowlens" if lens_per_row else "")
    inp = testing.decode_inputs(rng, case)
    nb = inp.kv_cache.shape[0]
    good = _decode_run(device, inp, **tunables)
    bt = inp.block_tables.copy()
    blk = 2 if bs > 1 else 100   # block_size 1: a key well inside the context
    bt[1, blk], bt[2, 0] = nb, -5        # read entries naming no block
    ctx = inp.context_lens.copy()
    dev = lambda a: DeviceArray.from_numpy(a, device)  # noqa: E731  (device values skip the host checks)
    if lens_per_row:
        ctx[3, 1] = -7                    # sequence 3, row 1: negative length (its other row unchanged)
        nl = None
    else:
        nl = inp.next_n_lens.copy()
        ctx[3] = -7                       # sequence 3: negative length
        nl[0] = case.next_n + 1           # sequence 0: more live rows than next_n
    bad_inp = testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, dev(ctx), dev(bt), inp.max_model_len,
                                   None if nl is None else dev(nl), False)
    errors = _errors_array(device)
    got = _decode_run(device, bad_inp, errors=errors, **tunables)
    flags = int(errors.numpy()[0])
    want = good.copy()
    bs, n = case.block_size, case.next_n
    for b, col in ((1, blk), (2, 0)):
        want[b * n:(b + 1) * n, col * bs:(col + 1) * bs] = -np.inf
    if lens_per_row:
        want[3 * n + 1] = -np.inf
    else:
        want[3 * n:4 * n] = -np.inf
        want[0:n] = -np.inf
    if flags != ERROR_BLOCK_ID | ERROR_LENGTH:
        return Outcome("decode", name, FAIL, f"error flags {flags:#x}, expected {ERROR_BLOCK_ID | ERROR_LENGTH:#x}")
    diff = want.view(np.uint32) != got.view(np.uint32)
    if diff.any():
        r, c = np.argwhere(diff)[0]
        return Outcome("decode", name, FAIL, f"{int(diff.sum())} positions differ from the expected output, first "
                                             f"row {r} col {c}: {got[r, c]} (expected {want[r, c]})")
    return Outcome("decode", name, PASS, f"flags {flags:#x}; out-of-range keys and malformed rows -inf, "
                                         f"nothing else changed (H={H}, D={D}, block_size {bs})")


def decode_lengths_per_row(rng, device, heads=None, dims=None, block_sizes=None, **tunables) -> Outcome:
    """[B, next_n] context_lens (DeepGEMM's form): the per-row lengths equivalent to [B] lengths with
    next_n_lens give bitwise the same logits, clean and raw; then each sequence's row lengths in a random
    order over all its rows (zero rows among the others, contexts past max_model_len) pass the gate, clean
    and raw. The shape stays within the filters (heads, dims, block_sizes)."""
    H, D, bs = decode_shape(16, 64, 16, heads, dims, block_sizes)
    ctx = max(300, 3 * bs)
    case = testing.DecodeCase(5, 4, H, D, bs, False, mean_context=ctx, spread="pm30", ragged=True, zero_live=1,
                              zero_contexts=1, max_model_len=ctx)
    name = "lengths_per_row" + ("" if (H, D, bs) == (16, 64, 16) else f"_H{H}_D{D}_bs{bs}")
    flat = testing.decode_inputs(rng, case)
    lens = reference.per_row_lengths(flat.context_lens, case.next_n, flat.next_n_lens)
    rows = testing.DecodeInputs(flat.q, flat.kv_cache, flat.weights, lens, flat.block_tables, flat.max_model_len,
                                None, False)
    kernel, acc = _accumulation_of(device, case, flat.max_model_len, **tunables)
    for clean in (True, False):
        a, b = _decode_run(device, flat, clean, **tunables), _decode_run(device, rows, clean, **tunables)
        if not np.array_equal(a.view(np.uint32), b.view(np.uint32)):
            n = int((a.view(np.uint32) != b.view(np.uint32)).sum())
            return Outcome("decode", name, FAIL, f"clean={clean}: {n} positions differ between [B] lengths and "
                                                 f"their [B, next_n] form", kernel=kernel)
    mixed = np.stack([rng.permutation(r) for r in lens]).astype(np.int32)
    mixed_inp = testing.DecodeInputs(flat.q, flat.kv_cache, flat.weights, mixed, flat.block_tables,
                                     flat.max_model_len, None, False)
    for clean in (True, False):
        g = gate_decode(_decode_run(device, mixed_inp, clean, **tunables), mixed_inp, clean, acc)
        if not g:
            return Outcome.of("decode", name, kernel, g, f" (rows in a random order, clean={clean})")
    return Outcome.of("decode", name, kernel, g, f"; [B] and [B, next_n] forms bitwise identical, rows in a random "
                                                 f"order gated (H={H}, D={D}, block_size {bs})")


def decode_bitwise_reruns(rng, device, runs: int = 20, heads=None, dims=None, block_sizes=None,
                          **tunables) -> Outcome:
    """The same large case `runs` times: every output bitwise identical (shape within the filters)."""
    H, D, bs = decode_shape(64, 128, 64, heads, dims, block_sizes)
    case = testing.DecodeCase(16, 4, H, D, bs, False, mean_context=16384, ragged=True, key_codes=True)
    name = f"bitwise_{case.name}"
    inp = testing.decode_inputs(rng, case)
    from ..runtime import DeviceArray
    args = [DeviceArray.from_numpy(a, device) if isinstance(a, np.ndarray) else a for a in inp.args()]
    dev_inp = testing.DecodeInputs(*args)
    first = None
    for i in range(runs):
        got = _decode_run(device, dev_inp, **tunables)
        if first is None:
            first = got
        elif not np.array_equal(first.view(np.uint32), got.view(np.uint32)):
            n = int((first.view(np.uint32) != got.view(np.uint32)).sum())
            return Outcome("decode", name, FAIL, f"run {i} differs from run 0 in {n} positions")
    return Outcome("decode", name, PASS, f"{runs} runs bitwise identical")


def decode_dealt_tail(rng, device, heads=None, dims=None, block_sizes=None, **tunables) -> Outcome:
    """For a kernel that deals the tail of a batch's work to the units that come free (sm_90a's): a ragged batch
    dealt whole (deal_share 1024) in chunks of one block, so every unit claims many, three calls on fresh
    inputs on one stream, each gated (a claim pair left counted by one call leaves the next call's tail NaN), and
    the last call's bits against the same call dealing nothing. NA where the planner's kernel deals nothing."""
    H, D, bs = decode_shape(64, 128, 64, heads, dims, block_sizes)
    case = testing.DecodeCase(24, 2, H, D, bs, False, mean_context=3000, ragged=True, key_codes=True)
    name = f"dealt_tail_{case.name}"
    from ..ops import target_of
    from ..plan import plan_decode
    try:
        plan = plan_decode(case.B, case.next_n, H, D, bs, 2 * case.mean_context, target_of(device), deal_share=1024,
                           deal_grain=1, **tunables)
    except ValueError as e:
        return Outcome("decode", name, NA, f"the kernel deals nothing here ({e})")
    for i in range(3):
        inp = testing.decode_inputs(rng, case)
        got = _decode_run(device, inp, deal_share=1024, deal_grain=1, **tunables)
        g = gate_decode(got, inp, True, plan.accumulation)
        if not g:
            return Outcome.of("decode", name, plan.kernel, g, f" (call {i + 1} of 3, all the work dealt)")
    static = _decode_run(device, inp, deal_share=0, **tunables)
    if not np.array_equal(got.view(np.uint32), static.view(np.uint32)):
        n = int((got.view(np.uint32) != static.view(np.uint32)).sum())
        return Outcome("decode", name, FAIL, f"{n} positions differ between the dealt call and the undealt one",
                       kernel=plan.kernel)
    return Outcome.of("decode", name, plan.kernel, g, "; three calls dealt whole in one-block chunks gated, the "
                                                      "last bitwise equal to the undealt call")


# Caches past 4 GiB: the batch's blocks sit above these many blocks of a larger pool.
OFFSET_CASES = ((1, 1 << 25), (64, 1 << 19))


def decode_offset_case(rng, device, block_size: int, base: int, heads=None, dims=None, block_sizes=None,
                       **tunables) -> Outcome:
    """A batch whose blocks sit at the top of a pool of base + its own blocks (64-bit offsets), against the
    reference on the batch's own small pool. Not applicable without the device memory, or for a block size
    the filter (block_sizes) leaves out."""
    from ..runtime import DeviceArray
    name = f"offset_bs{block_size}_above_{base}_blocks"
    if block_sizes is not None and block_size not in block_sizes:
        return Outcome("decode", name, NA, f"block_size {block_size} is outside the filter {list(block_sizes)}")
    H, D, _ = decode_shape(64, 128, block_size, heads, dims)
    case = testing.DecodeCase(2, 2, H, D, block_size, False, mean_context=2000, ragged=True, live_min=1)
    inp = testing.decode_inputs(rng, case)
    nb = inp.kv_cache.shape[0]
    need = (base + nb) * inp.kv_cache[0].nbytes
    if getattr(device, "backend", "") == "emu" or need + (1 << 30) > getattr(device, "total_memory", 0):
        return Outcome("decode", name, NA, f"needs {need / 2**30:.1f} GiB of device memory (and a GPU)")
    pool = DeviceArray.empty((base + nb,) + inp.kv_cache.shape[1:], np.uint8, device)
    pool[base:].copy_from(inp.kv_cache)
    bt = inp.block_tables.astype(np.int64)
    top = testing.DecodeInputs(inp.q, pool, inp.weights, inp.context_lens,
                               np.where(bt < nb, bt + base, bt).astype(np.int32), inp.max_model_len,
                               inp.next_n_lens, False)
    kernel, acc = _accumulation_of(device, case, inp.max_model_len, **tunables)
    got = _decode_run(device, top, **tunables)
    del pool
    g = gate_decode(got, inp, True, acc)
    return Outcome.of("decode", name, kernel, g, f"; pool {need / 2**30:.1f} GiB")
