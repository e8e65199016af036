"""fp8_mqa_topk against the prefill logits op alone and against the logits op followed by topk_logits (and
torch.topk, when torch with CUDA is importable) over the whole [M, N] array, on one device, by the method of
hipindexer.bench.timing (events around back-to-back calls, median of repeats; one input set per shape):

    python -m tools.measure.prefill_topk_bench [--shapes 4096x32768,2048x65536,1024x131072,128x32768]
        [--heads 64,32] [--million] [--recent KEYS] [--fused-only] [--sample-step S] [--sample-margin F]
        [--wide-rows R] [--leave-out LAUNCHES ...] [--power] [--json]

Causal single request, D = 128, top_k 2048; the top-k op with a workspace made once
(hipindexer.prefill_topk_workspace with H and D, so the op's default path) and out= given, as a serving loop calls
it; its bytes are reported beside the bound, and where the default is the fused path, the composed path is timed
beside it with a workspace of its own, and the rows the fused finish recomputed are counted. TFLOP/s counts 2 H D
multiply-adds per (row, key) in the windows. --million adds (4096, 1048576) at H = 64: one call, timed, and a few
sampled rows judged by the top-k gate against the float64 reference. --stages times each launch of a fused call
replayed alone, --leave-out the call with some of its launches left out: what a launch costs within the op, which
is not what it costs alone; --power the SM clock and the board's power while the op, its filter and the logits op
run back to back.
"""
from __future__ import annotations

import dataclasses
import json
import statistics

import click
import numpy as np

import hipindexer
from hipindexer import gate, testing
from hipindexer.bench.timing import emulated, time_batches
from hipindexer.ops import prefill_topk_fused, target_of
from hipindexer.plan import plan_prefill
from hipindexer.runtime import Device, DeviceArray
from tools.measure import clock_power

D, TOP_K = 128, 2048


def _inputs(rng, M, N, H, recent=0, lift=3.0):
    """Causal windows; keys as random fp8 codes with unit scales (quick at a million keys). recent > 0: the last
    `recent` keys' scales times `lift` and the weights made >= 0, so that every row's best keys are its most recent
    ones (they crowd the last part of the fused filter's key split)."""
    ks, ke = testing.prefill_windows("causal", M, N)
    k = testing.random_fp8(rng, (N, D))
    scale = np.abs(rng.standard_normal(N, dtype=np.float32)) + np.float32(0.5)
    w = rng.standard_normal((M, H), dtype=np.float32)
    if recent:
        scale[N - recent:] *= np.float32(lift)
        w = np.abs(w)
    return testing.PrefillInputs(testing.random_fp8(rng, (M, H, D)), k, scale, w, ks, ke)


def _torch(logits):
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    t = torch.from_dlpack(logits)
    return lambda i: torch.topk(t, TOP_K, dim=1, sorted=False)


LAUNCHES = ("sample", "sample_logits", "floor", "filter", "finish")
FIELD = {"sample_logits": "logits"}  # a launch's name here -> its FusedGroup field


def _fused_call(dev, args, ws, idx, vals, keep, first_group_only=False):
    """A timer of the last fused call planned on workspace `ws`, run by the op's own run_fused over a copy of its
    plan in which the launches not named in `keep` launch nothing (of the first group alone, if asked); None when no
    fused call was planned on `ws` or nothing is kept."""
    hit = [p for p in _plans() if isinstance(p, prefill_topk_fused.FusedPlan) and p.workspace is ws]
    if not hit or not set(keep) & set(LAUNCHES):
        return None
    plan = hit[-1]
    skip = {FIELD.get(n, n): (lambda *a: None) for n in LAUNCHES if n not in keep}
    groups = plan.groups[:1] if first_group_only else plan.groups
    part = dataclasses.replace(plan, groups=[(dataclasses.replace(g, **skip), at) for g, at in groups])
    st = dev.default_stream
    return lambda i: prefill_topk_fused.run_fused(part, st, *args, idx, vals)


def _stages(dev, args, ws, idx, vals, repeats):
    """Each launch of a fused call's first group replayed alone (after a whole call set its inputs up): us_stage_*."""
    out = {}
    for name in LAUNCHES:  # in order: each leaves the next's input
        f = _fused_call(dev, args, ws, idx, vals, (name,), first_group_only=True)
        if f is not None:
            out[f"us_stage_{name}"] = statistics.median(time_batches(dev, f, repeats)[0])
    return out


def _without(dev, args, ws, idx, vals, left_out):
    """A fused call's launches, every group's in order, but those named in `left_out`: a timer of what the rest
    cost within the op (the workspace as the last whole call left it, so a filter reads that call's floors; the
    result is not the op's). None when no fused call was planned on `ws`."""
    return _fused_call(dev, args, ws, idx, vals, [n for n in LAUNCHES if n not in left_out])


def _plans():
    from hipindexer.ops import launch
    cache = getattr(launch._local, "prepared", None) or {}
    return list(cache.values())


def _case(dev, rng, M, N, H, repeats, sample_rows=4, stages=False, recent=0, fused_only=False, leave_out=(),
          power=False):
    inp = _inputs(rng, M, N, H, recent)
    args = [DeviceArray.from_numpy(a, dev) for a in inp.args()]
    seen = np.minimum(inp.cu_seqlen_ke, N).astype(np.int64) - np.maximum(inp.cu_seqlen_ks, 0)
    flop = 2.0 * H * D * float(np.clip(seen, 0, None).sum())
    ws = hipindexer.prefill_topk_workspace(M, N, TOP_K, device=dev, H=H, D=D)
    is_fused = isinstance(ws, prefill_topk_fused.FusedPrefillTopkWorkspace)
    idx = DeviceArray.empty((M, TOP_K), np.int32, dev)
    vals = DeviceArray.empty((M, TOP_K), np.float32, dev)

    def fused(i):
        hipindexer.fp8_mqa_topk(*args, TOP_K, workspace=ws, out=(idx, vals), return_values=True, device=dev)
    row = {"M": M, "N": N, "H": H, "top_k": TOP_K, "recent": recent, "path": "fused" if is_fused else "composed",
           "workspace_bytes": ws.nbytes, "workspace_bound": ws.bound, "ws_rows": ws.rows,
           "ws_chunk": getattr(ws, "chunk", None), "ws_parts": ws.layout.parts if is_fused else None}
    timers = [("fused", fused)]
    if is_fused and not fused_only:
        cws = hipindexer.prefill_topk_workspace(M, N, TOP_K, device=dev)

        def composed(i):
            hipindexer.fp8_mqa_topk(*args, TOP_K, workspace=cws, out=(idx, vals), return_values=True, device=dev)
        timers.append(("composed", composed))
    logits = None
    if M * N * 4 <= 8 << 30 and not fused_only:
        logits = DeviceArray.empty((M, N), np.float32, dev)
        one = DeviceArray.empty((M, TOP_K), np.int32, dev)

        def alone(i):
            hipindexer.fp8_mqa_logits(*args, clean_logits=True, out=logits, device=dev)

        def two(i):
            alone(i)
            hipindexer.topk_logits(logits, TOP_K, out=one, device=dev)
        timers += [("logits", alone), ("logits_then_topk_logits", two)]
    for name, f in timers:
        row[f"us_{name}"] = statistics.median(time_batches(dev, f, repeats)[0])
    for names in leave_out if is_fused else ():
        f = _without(dev, args, ws, idx, vals, names)
        if f is not None:
            row[f"us_without_{'+'.join(names)}"] = statistics.median(time_batches(dev, f, repeats)[0])
    if power and not emulated(dev):
        runs = {"fused": fused}
        alone_filter = _without(dev, args, ws, idx, vals, ("sample", "sample_logits", "floor", "finish"))
        if alone_filter is not None:
            runs["filter alone"] = alone_filter
        if logits is not None:
            runs["logits"] = alone
        row["power"] = clock_power.under_load(dev, runs)
    if logits is not None:
        tt = None if emulated(dev) else _torch(logits)
        if tt is not None:
            alone(0)
            row["us_torch_topk_after_logits"] = statistics.median(time_batches(dev, tt, repeats)[0])
        row["fused_over_logits"] = row["us_fused"] / row["us_logits"]
        row["fused_over_logits_then_topk"] = row["us_fused"] / row["us_logits_then_topk_logits"]
    row["fused_tflops"] = flop / row["us_fused"] / 1e6
    if logits is not None:
        row["logits_tflops"] = flop / row["us_logits"] / 1e6
    if is_fused and stages:
        row.update(_stages(dev, args, ws, idx, vals, repeats))
    idx.fill(-(1 << 31))  # poisoned: a slot the op leaves unwritten fails the gate
    vals.fill(np.nan)
    fused(0)
    if is_fused and ws.rows >= M:
        row["recomputed_whole"], row["recomputed_parts"] = prefill_topk_fused.recomputes(ws, M)
        row["recomputed_rows"] = row["recomputed_whole"] + row["recomputed_parts"]
    pick = np.linspace(0, M - 1, sample_rows).astype(int)
    sub = testing.PrefillInputs(inp.q[pick], inp.k, inp.kv_scale, inp.weights[pick], inp.cu_seqlen_ks[pick],
                                inp.cu_seqlen_ke[pick])
    accumulation = plan_prefill(M, N, H, D, target_of(dev)).accumulation
    g = gate.gate_prefill_topk(idx.numpy()[pick], vals.numpy()[pick], sub, TOP_K, accumulation)
    row.update(sampled_rows=pick.tolist(), sampled_gate=bool(g), sampled_gate_message=g.message)
    return row


@click.command()
@click.option("--device", "device_name", default=None)
@click.option("--shapes", default="4096x32768,2048x65536,1024x131072,128x32768")
@click.option("--heads", default="64,32")
@click.option("--million", is_flag=True, help="Add (4096, 1048576) at H = 64, one call, sampled rows gated.")
@click.option("--repeats", default=5)
@click.option("--stages", is_flag=True, help="Also time each launch of a fused call alone (its first group).")
@click.option("--recent", default=0, help="The last RECENT keys score 3 times higher (weights >= 0): rows whose best "
              "keys crowd one part of the key split, against random rows.")
@click.option("--fused-only", is_flag=True, help="Time the op alone (and --stages): no composed path, no logits op.")
@click.option("--sample-step", default=0, help="An experiment: the floors sample one key in this many (default: the "
              "op's own, sample_step(top_k)); the floor's rank follows, SAMPLE_MARGIN top_k / step.")
@click.option("--sample-margin", default=0.0, help="An experiment: a floor aims at this many times top_k of a row's "
              "keys (default: the op's SAMPLE_MARGIN).")
@click.option("--wide-rows", default=-1, help="An experiment: groups of at most this many rows take the floors "
              "build of more threads a row (default: the op's own, WIDE_ROWS).")
@click.option("--min-parts", default=0, help="An experiment: the filter's key split takes at least this many parts "
              "(default: the op's own, MIN_PARTS).")
@click.option("--bound-parts", default=0, help="An experiment past the op's bound: the fused workspace may take "
              "prefill_workspace_bound(M, top_k, max(parts, this)). With --min-parts 1 and 3, a row block whose "
              "logits plan has one part is filtered in one unit into one region a row as large as three parts' "
              "regions: what the key split's parts cost the filter, their regions' room kept.")
@click.option("--leave-out", multiple=True, help="An experiment, repeatable: the fused call timed again with these of "
              f"its launches left out (comma-separated, of {', '.join(LAUNCHES)}), after a whole call: what the rest "
              "cost within the op. The filter goes only with the finish (a finish after the sample's zeroed counts "
              "would recompute every row, milliseconds each).")
@click.option("--power", is_flag=True, help="Also run the op, its filter alone and (without --fused-only) the logits op "
              "back to back for about 4 s each with nvidia-smi sampling the SM clock, the power and the throttle "
              "reasons beside them (tools/measure/clock_power.py).")
@click.option("--json", "as_json", is_flag=True)
def main(device_name, shapes, heads, million, repeats, stages, recent, fused_only, sample_step, sample_margin,
         wide_rows, min_parts, bound_parts, leave_out, power, as_json):
    left = [tuple(n.strip() for n in v.split(",") if n.strip()) for v in leave_out]
    for names in left:
        if not names or not set(names) <= set(LAUNCHES):
            raise click.BadParameter(f"expected launches among {', '.join(LAUNCHES)}, got {','.join(names)!r}",
                                     param_hint="--leave-out")
        if "filter" in names and "finish" not in names:
            raise click.BadParameter(f"{','.join(names)}: the filter is left out only with the finish",
                                     param_hint="--leave-out")
    dev = Device(device_name)
    if min_parts:
        prefill_topk_fused.MIN_PARTS = min_parts  # read by filter_plan
    if bound_parts:
        bound = prefill_topk_fused.prefill_workspace_bound  # read by the workspace plan
        prefill_topk_fused.prefill_workspace_bound = lambda M, top_k, parts=1: bound(M, top_k, max(parts, bound_parts))
    if wide_rows >= 0:
        prefill_topk_fused.WIDE_ROWS = wide_rows
    if sample_step:
        prefill_topk_fused.sample_step = lambda top_k: sample_step  # read by the workspace plan and each call's plan
    if sample_margin:
        prefill_topk_fused.SAMPLE_MARGIN = sample_margin
    if emulated(dev):
        shapes, heads, million = "64x4096", "32", False
    rng = np.random.default_rng(0)
    rows = []
    plan = [(int(a), int(b), int(h)) for h in heads.split(",") for a, b in (s.split("x") for s in shapes.split(","))]
    for M, N, H in plan:
        rows.append(_case(dev, rng, M, N, H, repeats, stages=stages, recent=recent, fused_only=fused_only,
                          leave_out=left, power=power))
        r = rows[-1]
        if not as_json:
            extra = (f", logits {r['us_logits']:.1f} us ({r['logits_tflops']:.0f} TFLOP/s), logits + topk_logits "
                     f"{r['us_logits_then_topk_logits']:.1f} us, fused/logits {r['fused_over_logits']:.3f}, "
                     f"fused/(logits+topk) {r['fused_over_logits_then_topk']:.3f}") if "us_logits" in r else ""
            torch_us = f", torch.topk {r['us_torch_topk_after_logits']:.1f} us" \
                if "us_torch_topk_after_logits" in r else ""
            torch_us += f", composed {r['us_composed']:.1f} us" if "us_composed" in r else ""
            torch_us += (f", rows recomputed whole {r['recomputed_whole']}, a part {r['recomputed_parts']}"
                         if "recomputed_rows" in r else "")
            click.echo(f"H={H} ({M}, {N}): {r['path']} {r['us_fused']:.1f} us ({r['fused_tflops']:.0f} TFLOP/s){extra}"
                       f"{torch_us}; ws rows {r['ws_rows']} chunk {r['ws_chunk']} parts {r['ws_parts']}, "
                       f"{r['workspace_bytes']} B of {r['workspace_bound']} B; gate on sampled rows "
                       f"{r['sampled_gate']}", err=False)
            st = {k[9:]: round(v, 1) for k, v in r.items() if k.startswith("us_stage_")}
            if st:
                click.echo(f"  stages (us): {st}")
            wo = {k[11:]: round(v, 1) for k, v in r.items() if k.startswith("us_without_")}
            if wo:
                click.echo(f"  the op without (us): {wo}")
            for name, p in (r.get("power") or {}).items():
                click.echo(f"  under load, {name}: {p['us']:.1f} us, SM clock {p.get('mhz_median')} MHz "
                           f"({p.get('mhz_low')}-{p.get('mhz_high')}), {p.get('watts_median')} W, throttle "
                           f"{p.get('throttle')}, {p['samples']} samples")
    if million:
        r = _case(dev, rng, 4096, 1 << 20, 64, 3, sample_rows=4)
        rows.append(r)
        if not as_json:
            click.echo(f"H=64 (4096, 1048576): {r['path']} {r['us_fused']:.1f} us ({r['fused_tflops']:.0f} TFLOP/s); "
                       f"workspace {r['workspace_bytes']} B of {r['workspace_bound']} B; gate on rows "
                       f"{r['sampled_rows']}: {r['sampled_gate']} {r['sampled_gate_message']}")
    if as_json:
        click.echo(json.dumps({"device": repr(dev), "cases": rows}, indent=1))


if __name__ == "__main__":
    main()
