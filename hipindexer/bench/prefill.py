"""The prefill benchmark: one row of `hipindexer bench prefill` (docs/benchmarks.md)."""
from __future__ import annotations

import statistics

import numpy as np

from .. import testing
from ..ops import fp8_mqa_logits, target_of
from ..plan import plan_prefill
from ..reference import valid_mask
from ..runtime import DeviceArray
from .timing import L2_BYTES, emulated, host_us_per_call, time_batches

PREFILL_BENCH_SHAPES = ((4096, 32768), (2048, 65536), (1024, 131072), (8192, 8192), (128, 32768))
# Emulated times are not speeds, and the emulator runs a shape above in hours: these sizes only exercise it.
EMULATOR_SHAPES = ((64, 512), (16, 128))


def bench_prefill(device, M: int, N: int, H: int, D: int, clean: bool = True, repeats: int = 10,
                  mode: str = "causal", **tunables) -> dict:
    """Time fp8_mqa_logits at (M, N, H, D) on `device`: one row of `hipindexer bench prefill`.

    Random inputs of window `mode` (never zeros), copied to the device in enough sets that rotating them
    touches at least 3x the L2; the calls are back to back, out= given. Returns the case, the planned
    kernel and its accumulation class, the median and minimum device microseconds per call, TFLOP/s
    (2 H D per valid (m, n) pair), the fewest bytes the call must move, and host microseconds per call.
    """
    rng = np.random.default_rng(0)
    inp = testing.prefill_inputs(rng, M, N, H, D, mode)
    per_set = inp.q.nbytes + inp.k.nbytes + inp.weights.nbytes + 4 * M * N
    sets = max(1, -(-3 * L2_BYTES.get(device.arch, 64 << 20) // per_set))
    args = [tuple(DeviceArray.from_numpy(a, device) for a in inp.args()) for _ in range(sets)]
    outs = [DeviceArray.empty((M, N), np.float32, device) for _ in range(sets)]

    def call(i):
        j = i % sets
        fp8_mqa_logits(*args[j], clean_logits=clean, out=outs[j], device=device, **tunables)
    times, _, _ = time_batches(device, call, repeats)
    us = statistics.median(times)
    pairs = int(valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, N).sum())
    plan = plan_prefill(M, N, H, D, target_of(device), **tunables)
    # Fewest bytes: inputs once, the written logits once (valid pairs, plus the fill when clean).
    nbytes = inp.q.nbytes + inp.k.nbytes + inp.kv_scale.nbytes + inp.weights.nbytes + 8 * M + \
        4 * (M * N if clean else pairs)
    return {"op": "prefill", "M": M, "N": N, "H": H, "D": D, "mode": mode, "clean": clean,
            "kernel": plan.kernel, "accumulation": plan.accumulation, "split": plan.split, "bytes": nbytes,
            "us": us, "us_min": min(times), "tflops": 2 * H * D * pairs / (us * 1e-6) / 1e12,
            "host_us": host_us_per_call(device, call, calls=5 if emulated(device) else 50), "sets": sets}
