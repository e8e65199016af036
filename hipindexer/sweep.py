"""Correctness sweeps: cases, outcomes and their tally.

The reference sweep checks the numpy reference against the per-element float64
formulations of hipindexer.testing; device sweeps (later) check kernels against
the reference with the same gate and the same tally.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from . import reference, testing
from .gate import gate

PASS, FAIL, NA = "passed", "failed", "not applicable"


@dataclass
class Outcome:
    op: str
    case: str
    status: str
    message: str


def _prefill_case(rng, M, N, H, D, mode, clean) -> Outcome:
    name = f"M{M}_N{N}_H{H}_D{D}_{mode}_{'clean' if clean else 'raw'}"
    try:
        inp = testing.prefill_inputs(rng, M, N, H, D, mode)
    except testing.NotApplicable as e:
        return Outcome("prefill", name, NA, e.why)
    got = reference.fp8_mqa_logits(*inp.args(), clean_logits=clean)
    want = testing.naive_mqa_logits(*inp.args(), clean_logits=clean)
    g = gate(got, want, reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, N), clean)
    return Outcome("prefill", name, PASS if g else FAIL, g.message)


def _decode_case(rng, case: testing.DecodeCase, clean) -> Outcome:
    name = f"{case.name}_{'clean' if clean else 'raw'}"
    inp = testing.decode_inputs(rng, case)
    got = reference.fp8_paged_mqa_logits(*inp.args(), clean_logits=clean)
    want = testing.naive_paged_mqa_logits(*inp.args(), clean_logits=clean)
    valid = reference.decode_valid_mask(inp.context_lens, case.next_n, inp.max_model_len, inp.next_n_lens)
    g = gate(got, want, valid, clean)
    return Outcome("decode", name, PASS if g else FAIL, g.message)


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
