"""What floors known before the fused decode top-k runs would save it: the `seeded` build of
tools/measure/stage_variants.py (set sm90a_fused) reads a floor a row, as an order key, from the fused launch's
`out` pointer, and this script passes floors there, taken from the logits op's own output so that a row's
ceil(keep x top_k) best keys reach them (the floor a sample of the keys would estimate, without the sample).

    python -m tools.measure.stage_variants --set sm90a_fused --variants seeded --builds DIR --build-only
    (cd DIR/seeded/pkg && PYTHONPATH=$OLDPWD python -m tools.measure.seeded_floor_probe [--rows 64x131072,...])

(started in the copy's root, so that its hipindexer, not the checkout's, comes first on the path)

Per row shape and next_n, medians of `repeats` batches by the method of hipindexer.bench.timing: the logits op,
the fused path unseeded (out = 0: the shipped kernel's work) and seeded, and the logits op over a sixteenth of each
sequence's keys (what a sample's logits would cost); with --split, the fused kernel alone (its lists then emptied) and the merge
alone (the lists the kernel left restored before each), each from graph replays; with --stages, the seeded path at
other ring depths. The seeded selection is compared with the unseeded one, bit
for bit: floors that every row's top_k reach change nothing but the time. H = 64, D = 128, block 64, equal
lengths, top_k 2048, as tools/measure/paged_topk_bench.py.
"""
from __future__ import annotations

import json
import math
import statistics

import click
import numpy as np

import hipindexer
from hipindexer.bench.timing import time_batches, time_graph
from hipindexer.ops import paged_topk
from hipindexer.runtime import Device, DeviceArray
from tools.measure.paged_topk_bench import BLOCK, D, H, TOP_K, cases_of

_SEEDS = [0]  # the device address the fused launch gets as `out`
_RUN_FUSED = paged_topk.run_fused


def order_keys(x: np.ndarray) -> np.ndarray:
    """hx_topk_key(x, false) of common/topk_select.h: unsigned order is float order (finite values only here)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).copy()
    u[u == 0x80000000] = 0
    return u ^ (((u.view(np.int32) >> 31).view(np.uint32)) | np.uint32(0x80000000))


def floors_of(logits: np.ndarray, r: int) -> np.ndarray:
    """A floor a row (uint32 order keys): one below the key of its r-th largest finite logit, 0 for a row with at
    most r of them (every key enters)."""
    out = np.zeros(logits.shape[0], np.uint32)
    for i, row in enumerate(logits):
        v = row[np.isfinite(row)]
        if v.size > r:
            out[i] = order_keys(np.partition(v, v.size - r)[v.size - r:v.size - r + 1])[0] - np.uint32(1)
    return out


_ONLY = [None]  # None: both launches; "select": the fused kernel, its lists then emptied ("select_keep": left for
#                 the merge); "merge": the merge alone
_LISTS = [None]  # "merge": the lists the select left (seq_nparts), restored before each merge
_UNITS = [0]  # the fused launch's units: a sequence's list of slots is that many words of seq_parts


def run_seeded(plan, st, *args):
    """paged_topk_fused.run_fused with the seeds' address in the fused launch's `out` (which it passes as 0) and,
    for the split times, one of its launches alone: the plan's launches wrapped for the one call."""
    ws, select, merge, first = plan.workspace, plan.select, plan.merge, plan.merge_first
    _UNITS[0] = merge.params.units

    def seeded_select(h, *ptrs):  # ptrs[6]: out
        if _ONLY[0] != "merge":
            select(h, *ptrs[:6], _SEEDS[0], *ptrs[7:])
        if _ONLY[0] == "select":
            ws.seq_nparts.fill(0, st)

    def merge_level(launch, opens):
        def run(h, *ptrs):
            if _ONLY[0] in ("select", "select_keep"):
                return
            if opens and _ONLY[0] == "merge":
                ws.seq_nparts.copy_from(_LISTS[0], st)
            launch(h, *ptrs)
        return run
    plan.select = seeded_select
    plan.merge = merge_level(merge, first is None)
    plan.merge_first = None if first is None else merge_level(first, True)
    try:
        _RUN_FUSED(plan, st, *args)
    finally:
        plan.select, plan.merge, plan.merge_first = select, merge, first


def graph_us(dev, fn, repeats) -> float:
    """Median device microseconds a call of fn(i, stream), 20 calls replayed as one graph (no host time)."""
    t = time_graph(dev, fn, 20, repeats)
    return statistics.median(t if t is not None else time_batches(dev, fn, repeats)[0])


def split_times(dev, ws, fused, repeats) -> tuple[float, float, float, float]:
    """(the whole call, select alone, merge alone, a sequence's entries handed to the merge), each call's device
    time from graph replays, at the current seeds."""
    t_whole = graph_us(dev, fused, repeats)
    _ONLY[0] = "select"
    t_select = graph_us(dev, fused, repeats)
    _ONLY[0] = "select_keep"  # one call whose lists stay for the merge
    fused(0)
    dev.synchronize()
    _LISTS[0] = ws.seq_nparts.copy()
    listed, slots, counts = ws.seq_nparts.numpy(), ws.seq_parts.numpy(), ws.part_counts.numpy()
    B, next_n = ws.B, ws.next_n
    slots = slots[:B * _UNITS[0]].reshape(B, _UNITS[0])  # the workspace holds lists for its own units, maybe more
    entries = sum(int(counts[s * next_n + j]) for b in range(B) for s in slots[b, :listed[b]] for j in range(next_n))
    _ONLY[0] = "merge"
    t_merge = graph_us(dev, fused, repeats)
    _ONLY[0] = None
    fused(0)  # the lists emptied again by a whole call
    dev.synchronize()
    return t_whole, t_select, t_merge, entries / max(B, 1)


@click.command()
@click.option("--device", "device_name", default=None)
@click.option("--rows", default="64x131072,64x32768,16x131072,16x32768")
@click.option("--next-n", "next_ns", default="1,2")
@click.option("--keep", "keeps", default="1.75,1.25", help="Floors at the ceil(keep x top_k)-th logit (comma-separated).")
@click.option("--repeats", default=5)
@click.option("--split", is_flag=True, help="Also time the fused kernel and the merge each alone (graph replays).")
@click.option("--stages", "depths", default="", help="Also time the seeded path at these ring depths.")
@click.option("--json", "as_json", is_flag=True)
def main(device_name, rows, next_ns, keeps, repeats, split, depths, as_json):
    paged_topk.run_fused = run_seeded
    dev = Device(device_name)
    if not as_json:
        print(f"hipindexer from {hipindexer.__file__}", flush=True)
    rng = np.random.default_rng(0)
    cases = []
    for c in cases_of(rng, rows, next_ns, dev):
        B, ctx, n, mml = c.B, c.ctx, c.n, c.mml
        logits, idx = c.logits, c.idx
        short = DeviceArray.from_numpy(np.maximum(c.base.context_lens // 16, 2).astype(np.int32), dev)
        ws = hipindexer.paged_topk_workspace(B, n, TOP_K, mml, BLOCK, device=dev, heads=H, head_dim=D,
                                             fused=True)

        def alone(i):
            c.logits_op()

        def sample(i):
            c.logits_op(short, clean_logits=False)

        def fused(i, stream=None, stages=None):
            c.topk_op(ws, stream=stream, stages=stages)
        alone(0)
        dev.synchronize()
        host = logits.numpy()
        _SEEDS[0] = 0
        fused(0)
        dev.synchronize()
        plain = idx.numpy()
        us = {"logits": statistics.median(time_batches(dev, alone, repeats)[0]),
              "logits_sixteenth": statistics.median(time_batches(dev, sample, repeats)[0]),
              "fused": statistics.median(time_batches(dev, fused, repeats)[0])}
        parts = {}
        if split:
            parts[0] = split_times(dev, ws, fused, repeats)
        same = {}
        for keep in (float(x) for x in keeps.split(",") if x):
            seeds = DeviceArray.from_numpy(floors_of(host, math.ceil(keep * TOP_K)), dev)
            _SEEDS[0] = seeds.ptr
            fused(0)
            dev.synchronize()
            same[keep] = bool(np.array_equal(idx.numpy(), plain))
            us[f"seeded_{keep}"] = statistics.median(time_batches(dev, fused, repeats)[0])
            if split:
                parts[keep] = split_times(dev, ws, fused, repeats)
            for d in (int(x) for x in depths.split(",") if x):
                us[f"seeded_{keep}_stages_{d}"] = statistics.median(
                    time_batches(dev, lambda i: fused(i, stages=d), repeats)[0])
            _SEEDS[0] = 0
            del seeds
        case = {"B": B, "ctx": ctx, "next_n": n, **{f"us_{k}": v for k, v in us.items()},
                **{f"same_{k}": v for k, v in same.items()},
                **{f"split_{k}": dict(zip(("us_graph", "us_select", "us_merge", "entries_a_sequence"), v))
                   for k, v in parts.items()}}
        cases.append(case)
        if not as_json:
            print(f"({B}, {ctx}) next_n {n}: logits {us['logits']:.1f} us, a sixteenth "
                  f"{us['logits_sixteenth']:.1f} us, fused {us['fused']:.1f} us ({us['fused'] / us['logits']:.2f}x)"
                  + "".join(f"; seeded at {k} top_k {us[f'seeded_{k}']:.1f} us "
                            f"({us[f'seeded_{k}'] / us['logits']:.2f}x, {'same' if same[k] else 'DIFFERENT'})"
                            for k in same), flush=True)
            for k, (g, a, m, e) in parts.items():
                print(f"    {'unseeded' if k == 0 else f'seeded at {k}'}, graph replays: whole {g:.1f} us, select "
                      f"alone {a:.1f} us, merge alone {m:.1f} us; {e:.0f} entries a sequence's rows", flush=True)
            print("".join(f"    {k}: {v:.1f} us\n" for k, v in us.items() if "_stages_" in k), end="", flush=True)
    if as_json:
        click.echo(json.dumps({"device": repr(dev), "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
