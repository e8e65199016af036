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

from . import reference, testing
from .gate import GateResult, gate, gate_prefill

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
    from .ops import fp8_mqa_logits, target_of
    from .planner import plan_prefill
    from .runtime import DeviceArray
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
    from .ops import fp8_mqa_logits
    from .runtime import DeviceArray
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
