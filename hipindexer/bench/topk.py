"""The top-k benchmark: one row of `hipindexer bench topk` (docs/benchmarks.md, "Top-k").

Each row times, in the same run and on one input set, three ways to a row's top_k keys: the top-k op (its
workspace made once, out= given, as a serving loop calls it), the logits op alone (its [rows, N] output given),
and the logits op followed by topk_logits over that output. Decode: fp8_paged_mqa_topk at H heads, block 64,
equal context lengths; prefill: fp8_mqa_topk, causal single request. Rates: TFLOP/s of the top-k op (2 H D per
(row, key) the logits cover) and the read bandwidth topk_logits reaches over the logits it reads. Host
microseconds per call are the top-k op's, every input already on the device.
"""
from __future__ import annotations

import statistics

import numpy as np

from .. import testing
from ..ops import (fp8_mqa_logits, fp8_mqa_topk, fp8_paged_mqa_logits, fp8_paged_mqa_topk, paged_topk_workspace,
                   prefill_topk_workspace, topk_logits)
from ..runtime import DeviceArray
from .timing import emulated, host_us_per_call, time_batches

D, BLOCK_SIZE = 128, 64
DECODE_TOPK_ROWS = ((64, 131072), (64, 32768), (16, 131072), (16, 32768), (4, 8192))
PREFILL_TOPK_SHAPES = ((4096, 32768), (2048, 65536), (1024, 131072), (128, 32768))
# Emulated times are not speeds: these sizes only exercise the paths.
EMULATOR_DECODE_ROWS = ((2, 600),)
EMULATOR_PREFILL_SHAPES = ((16, 600),)


def _three(device, topk_call, logits_call, logits, top_k: int, repeats: int, rows: int, N: int) -> dict:
    """Median device microseconds of the three calls, topk_logits' read rate, and the op's host us per call."""
    idx = DeviceArray.empty((rows, top_k), np.int32, device)

    def two(i):
        logits_call(i)
        topk_logits(logits, top_k, out=idx, device=device)
    us = {name: statistics.median(time_batches(device, f, repeats)[0])
          for name, f in (("topk", topk_call), ("logits", logits_call), ("logits_then_topk_logits", two))}
    read = rows * N * 4
    return {"us": us["topk"], "us_logits": us["logits"], "us_logits_then_topk_logits": us["logits_then_topk_logits"],
            "over_logits": us["topk"] / us["logits"],
            "over_logits_then_topk_logits": us["topk"] / us["logits_then_topk_logits"],
            "topk_logits_read_GBps": read / ((us["logits_then_topk_logits"] - us["logits"]) * 1e-6) / 1e9
            if us["logits_then_topk_logits"] > us["logits"] else None,
            "host_us": host_us_per_call(device, topk_call, calls=3 if emulated(device) else 50)}


def bench_topk_decode(device, B: int, ctx: int, H: int, next_n: int, top_k: int, repeats: int = 10) -> dict:
    """One decode row: B sequences of ctx keys, next_n query rows each."""
    rng = np.random.default_rng(0)
    case = testing.DecodeCase(B, next_n, H, D, BLOCK_SIZE, mean_context=ctx, spread="equal", key_codes=True)
    inp = testing.decode_inputs(rng, case)
    args = [DeviceArray.from_numpy(a, device) if isinstance(a, np.ndarray) else a for a in inp.args()[:5]]
    mml, R = inp.max_model_len, B * next_n
    ws = paged_topk_workspace(B, next_n, top_k, mml, BLOCK_SIZE, device=device, heads=H, head_dim=D)
    idx = DeviceArray.empty((R, top_k), np.int32, device)
    logits = DeviceArray.empty((R, mml), np.float32, device)

    def fused(i):
        fp8_paged_mqa_topk(*args, mml, top_k, workspace=ws, out=idx, device=device)

    def alone(i):
        fp8_paged_mqa_logits(*args, mml, clean_logits=True, out=logits, device=device)
    row = _three(device, fused, alone, logits, top_k, repeats, R, mml)
    keys = float(np.minimum(inp.context_lens, mml).sum()) * next_n
    return {"op": "decode", "B": B, "ctx": ctx, "H": H, "next_n": next_n, "block_size": BLOCK_SIZE, "top_k": top_k,
            "path": "fused" if ws.fused else "whole" if ws.whole else "composed", "workspace_bytes": ws.nbytes,
            "workspace_bound": ws.bound,
            "chunk": ws.chunk,
            "tflops": 2 * H * D * keys / (row["us"] * 1e-6) / 1e12, **row}


def bench_topk_prefill(device, M: int, N: int, H: int, top_k: int, repeats: int = 10) -> dict:
    """One prefill row: M causal query rows against N keys."""
    rng = np.random.default_rng(0)
    inp = testing.prefill_inputs(rng, M, N, H, D, "causal")
    args = [DeviceArray.from_numpy(a, device) for a in inp.args()]
    ws = prefill_topk_workspace(M, N, top_k, device=device, H=H, D=D)  # the op's default path
    idx = DeviceArray.empty((M, top_k), np.int32, device)
    logits = DeviceArray.empty((M, N), np.float32, device)

    def fused(i):
        fp8_mqa_topk(*args, top_k, workspace=ws, out=idx, device=device)

    def alone(i):
        fp8_mqa_logits(*args, clean_logits=True, out=logits, device=device)
    row = _three(device, fused, alone, logits, top_k, repeats, M, N)
    seen = np.minimum(inp.cu_seqlen_ke, N).astype(np.int64) - np.maximum(inp.cu_seqlen_ks, 0)
    return {"op": "prefill", "M": M, "N": N, "H": H, "top_k": top_k, "workspace_bytes": ws.nbytes,
            "workspace_bound": ws.bound, "rows": ws.rows, "chunk": getattr(ws, "chunk", None),
            "filtered": getattr(ws, "filtered", None), "path": "composed" if hasattr(ws, "chunk") else "fused",
            "tflops": 2 * H * D * float(np.clip(seen, 0, None).sum()) / (row["us"] * 1e-6) / 1e12, **row}
