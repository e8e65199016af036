"""The decode benchmark (`hipindexer bench decode`), by the method of docs/benchmarks.md.

Pinned: D = 128, block_size 64 (16 by option), block-flat on NVIDIA and preshuffled on gfx950 (either by option),
max_model_len = the longest context, every sequence at the stated context unless the row says otherwise (pm30:
+-30%; one_long: one at the context, the rest at context / 32). The cache, the queries, the weights and the
outputs are rotated over enough sets to cover 3x the L2; device time is the median of back-to-back calls
between events and, for short calls on CUDA, of a captured graph's replays; host microseconds per call
are measured with every input already on the device.

Bytes: GB/s counts each sequence's key + scale bytes once (min(context, max_model_len) * (D + 4)); the
logits written are reported beside (the whole output when clean_logits, the valid positions otherwise),
and the fraction of the read ceiling counts both. TFLOP/s counts 2 * H * D per valid (row, key) pair.
"""
from __future__ import annotations

import statistics

import numpy as np

from .. import testing
from ..ops import fp8_paged_mqa_logits, target_of
from ..plan import plan_decode
from ..reference import decode_bounds, per_row_lengths
from ..runtime import DeviceArray
from .timing import L2_BYTES, figure, host_us_per_call, time_batches, time_graph, time_isolated

D, BLOCK_SIZE = 128, 64
DECODE_BENCH_ROWS = (("equal", 64, 131072), ("equal", 64, 32768), ("equal", 16, 131072), ("equal", 16, 32768),
                     ("equal", 1, 131072), ("equal", 4, 8192), ("pm30", 64, 32768), ("one_long", 16, 131072))
EMULATOR_ROWS = (("equal", 2, 512), ("one_long", 4, 2048))  # emulated times are not speeds: sizes only exercise it
NEXT_N = ("1", "2", "4", "6", "8", "ragged")
RAGGED_LIVE = (1, 7, 3, 5, 2, 6, 4, 4)   # ragged: next_n 8, half the rows live on average
GRAPH_BELOW_US = 200.0                     # calls shorter than this are timed by graph replay as well
LENS_FORMS = ("per-sequence", "per-row")   # context_lens as [B] (+ next_n_lens) or [B, next_n] (DeepGEMM's)


def live_lens(next_n: str, B: int) -> tuple[int, np.ndarray | None]:
    if next_n == "ragged":
        return 8, (np.full(B, 4, np.int32) if B == 1 else np.resize(np.array(RAGGED_LIVE, np.int32), B))
    return int(next_n), None


def bench_decode_shape(device, spread: str, B: int, ctx: int, heads=(64, 32), next_ns=NEXT_N, cleans=(True,),
                       repeats: int = 10, progress=lambda msg: None, block_size: int = BLOCK_SIZE,
                       lens_forms=LENS_FORMS[:1], preshuffle: bool | None = None, isolated: bool = False,
                       **tunables) -> list[dict]:
    """Every (H, next_n, clean, form of context_lens) row of one (spread, B, context): the cache is built and
    uploaded once; the forms of one row are timed back to back. preshuffle: the cache layout (None: the target's,
    preshuffled on gfx950, block-flat elsewhere). isolated: each row also timed one call at a time
    (timing.time_isolated, `us_isolated`), the method of DeepGEMM's benchmark."""
    rng = np.random.default_rng(0)
    preshuffle = device.arch == "gfx950" if preshuffle is None else preshuffle
    base = testing.decode_inputs(rng, testing.DecodeCase(B, 8, 64, D, block_size, preshuffle, mean_context=ctx,
                                                         spread=spread, key_codes=True))
    mml = base.max_model_len
    key_bytes = int(np.minimum(base.context_lens, mml).astype(np.int64).sum()) * (D + 4)
    out_bytes = B * 8 * mml * 4
    sets = max(1, -(-3 * L2_BYTES.get(device.arch, 64 << 20) // (base.kv_cache.nbytes + out_bytes)))
    caches = [DeviceArray.from_numpy(base.kv_cache, device) for _ in range(sets)]
    outs = [DeviceArray.empty((B * 8, mml), np.float32, device) for _ in range(sets)]
    ctx_d = DeviceArray.from_numpy(base.context_lens, device)
    bt_d = DeviceArray.from_numpy(base.block_tables, device)
    rows = []
    for H in heads:
        for label in next_ns:
            next_n, nl = live_lens(label, B)
            lens_of = {"per-sequence": (ctx_d, None if nl is None else DeviceArray.from_numpy(nl, device)),
                       "per-row": (DeviceArray.from_numpy(per_row_lengths(base.context_lens, next_n, nl), device),
                                   None)}
            qs = [DeviceArray.from_numpy(testing.random_fp8(rng, (B, next_n, H, D)), device) for _ in range(sets)]
            ws = [DeviceArray.from_numpy(rng.standard_normal((B * next_n, H), dtype=np.float32), device)
                  for _ in range(sets)]
            bound = decode_bounds(base.context_lens, next_n, mml, nl)
            pairs = int(bound.sum())
            plan = plan_decode(B, next_n, H, D, block_size, mml, target_of(device), preshuffle=preshuffle,
                               **tunables)
            rows_out = [o[:B * next_n] for o in outs]  # views made once: a serving loop keeps its out arrays
            for clean in cleans:
                # Two forms are timed A B B A and each one's batches pooled: a form timed second in a pair ran
                # measurably slower on the H200 whichever it was, so one order would favour the first.
                timed = {}
                for form in tuple(lens_forms) + tuple(lens_forms[::-1]) if len(lens_forms) > 1 else lens_forms:
                    progress(f"{spread} B={B} ctx={ctx} H={H} next_n={label} clean={clean} lens={form}")
                    lens_d, nl_d = lens_of[form]

                    def call(i, stream=None, clean=clean, qs=qs, ws=ws, lens_d=lens_d, nl_d=nl_d,
                             rows_out=rows_out):
                        j = i % sets
                        fp8_paged_mqa_logits(qs[j], caches[j], ws[j], lens_d, bt_d, mml, nl_d, preshuffle,
                                             clean_logits=clean, out=rows_out[j], stream=stream,
                                             device=device, **tunables)
                    times, calls, once = time_batches(device, call, repeats)
                    t = timed.setdefault(form, {"times": [], "call": call, "calls": calls, "once": once})
                    t["times"] += times
                for form in lens_forms:
                    times, call, calls, once = (timed[form][k] for k in ("times", "call", "calls", "once"))
                    us = statistics.median(times)
                    graph = time_graph(device, call, calls, repeats) if us < GRAPH_BELOW_US else None
                    alone = time_isolated(device, call, max(20, repeats)) if isolated else None
                    logits_bytes = 4 * (B * next_n * mml if clean else pairs)
                    rows.append({
                        "op": "decode", "spread": spread, "B": B, "ctx": ctx, "max_model_len": mml, "H": H, "D": D,
                        "block_size": block_size, "preshuffle": preshuffle, "next_n": label, "clean": clean,
                        "lens": form,
                        "kernel": plan.kernel, "split_kv": plan.split_kv, "units": plan.units,
                        "deal": [plan.deal_share, plan.deal_grain],
                        "us": us, "us_min": min(times), "us_batches": [round(t, 2) for t in times],
                        "us_graph": statistics.median(graph) if graph else None,
                        "us_isolated": statistics.median(alone) if alone else None,
                        "key_bytes": key_bytes, "logits_bytes": logits_bytes,
                        "GBps": key_bytes / (us * 1e-6) / 1e9,
                        "tflops": 2 * H * D * pairs / (us * 1e-6) / 1e12,
                        "host_us": host_us_per_call(device, call, calls=max(5, min(50, int(0.5 / once)))),
                        "sets": sets})
                    r = rows[-1]
                    graph_us = f", graph {r['us_graph']:.1f} us" if r["us_graph"] else ""
                    progress(f"  {r['us']:.1f} us{graph_us}, {figure(r['GBps'])} GB/s of keys, "
                             f"{figure(r['tflops'], '.2f')} TFLOP/s, "
                             f"host {r['host_us']:.1f} us/call")
    return rows
