"""topk_logits against the goal and torch.topk, on a GPU (or, tiny, on the emulator):

    python -m tools.measure.topk_bench                       # the four shapes below, both orders, both paths
    python -m tools.measure.topk_bench --shapes 64x131072 --json

Per shape (rows x N float32, half of each row -inf at random unless --inf-fraction says otherwise; a decode row
has none, top_k 2048): device microseconds per call of
the op's own choice, of each path forced (--paths: the single-block kernel, the split path, the row-wise path,
that path with no row held in the block: rowwise_floor, and the resident path, on the planner's build of its block
or on the 1,024- or 512-thread one: resident_wide, resident_narrow; the cluster path, sm_90a), and
of torch.topk (sorted as asked; when torch with CUDA is importable), by the method of hipindexer.bench.timing
(events around back-to-back calls, median of repeats, input sets rotated past 3x the L2). The goal is
3 x rows x N x 4 bytes at the read ceiling measured in the same run (our streaming read kernel, 4.4 TB/s on
an H200 today) + 10 us, and faster than torch.topk. The outputs are checked against each other first (the
paths bit for bit against the single-block kernel, torch's index sets where it is there).
"""
from __future__ import annotations

import json
import statistics

import click
import numpy as np

import hipindexer
from hipindexer.bench.timing import L2_BYTES, emulated, read_bandwidth, time_batches, time_graph
from hipindexer.runtime import Device, DeviceArray

SHAPES = ((64, 131072), (128, 131072), (128, 32768), (512, 131072))
PATHS = {"op": {}, "single": {"split": False}, "split": {"split": True}, "rowwise": {"rowwise": True},
         "rowwise_floor": {"rowwise": True, "held": False}, "resident": {"resident": True},
         "resident_wide": {"resident": True, "narrow": False}, "resident_narrow": {"resident": True, "narrow": True},
         "cluster": {"cluster": True}}
EMULATOR_SHAPES = ((2, 20000),)
TOP_K = 2048


def _inputs(rows: int, N: int, sets: int, dev, inf_fraction: float = 0.5) -> list[DeviceArray]:
    rng = np.random.default_rng(rows * N)
    out = []
    for _ in range(sets):
        x = rng.standard_normal((rows, N), dtype=np.float32)
        x[rng.random(x.shape) < inf_fraction] = -np.inf
        out.append(DeviceArray.from_numpy(x, dev))
    return out


def _torch_topk(xs, sorted: bool):
    """(call(i), the first set's index sets) for torch.topk on the same device arrays, or None without torch."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    ts = [torch.from_dlpack(x) for x in xs]

    def call(i):
        return torch.topk(ts[i % len(ts)], TOP_K, dim=1, sorted=sorted)
    return call, np.sort(call(0).indices.cpu().numpy(), axis=1)


def bench_shape(dev, rows: int, N: int, sorted: bool, ceiling: float, repeats: int, paths=("op", "single"),
                inf_fraction: float = 0.5) -> dict:
    nbytes = rows * N * 4
    sets = 1 if emulated(dev) else max(2, -(-3 * L2_BYTES.get(dev.arch, 64 << 20) // nbytes))
    xs = _inputs(rows, N, sets, dev, inf_fraction)
    paths = ("op", "single", *(p for p in paths if p not in ("op", "single")))
    out = {p: DeviceArray.empty((rows, TOP_K), np.int32, dev) for p in paths}
    val = {p: DeviceArray.empty((rows, TOP_K), np.float32, dev) for p in paths}
    row = {"rows": rows, "N": N, "top_k": TOP_K, "sorted": sorted, "inf_fraction": inf_fraction,
           "goal_us": 3 * nbytes / ceiling * 1e6 + 10.0, "read_ceiling_us": nbytes / ceiling * 1e6}
    results = {}
    for path in paths:
        def call(i, kw=PATHS[path], path=path, stream=None):
            return hipindexer.topk_logits(xs[i % sets], TOP_K, sorted=sorted, return_values=True,
                                          out=out[path], values=val[path], stream=stream, **kw)
        times, _, _ = time_batches(dev, call, repeats)
        row[f"{path}_us"] = statistics.median(times)
        graph = time_graph(dev, lambda i, s, call=call: call(i, stream=s), max(8, sets), repeats)
        if graph:
            row[f"{path}_graph_us"] = statistics.median(graph)
        call(0)
        results[path] = (out[path].numpy(), val[path].numpy())
    b = results["single"]
    row["paths_equal"] = all(bool((a[0] == b[0]).all() and (a[1].view(np.uint32) == b[1].view(np.uint32)).all())
                             for a in results.values())
    a = results["op"]
    t = None if emulated(dev) else _torch_topk(xs, sorted)
    if t is not None:
        call, want = t
        times, _, _ = time_batches(dev, call, repeats)
        row["torch_us"] = statistics.median(times)
        got = np.sort(np.where(a[0] >= 0, a[0], -1), axis=1)
        row["torch_sets_equal"] = bool((got == want).all())  # rows hold >= top_k valid values: no padding
    row["meets_goal"] = row["op_us"] <= row["goal_us"] and row["op_us"] < row.get("torch_us", float("inf"))
    return row


@click.command()
@click.option("--device", "device_spec", default=None, help="Device spec (default: the first GPU).")
@click.option("--shapes", default=None, help="ROWSxN,... (default: 64x131072,128x131072,128x32768,512x131072).")
@click.option("--repeats", default=20, show_default=True)
@click.option("--paths", default="op,single", show_default=True, help=f"Paths timed, of {','.join(PATHS)}.")
@click.option("--inf-fraction", default=0.5, show_default=True, help="The share of each row's columns set to -inf.")
@click.option("--orders", type=click.Choice(["both", "sorted", "unsorted"]), default="both", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def main(device_spec, shapes, repeats, paths, inf_fraction, orders, as_json) -> None:
    paths = tuple(p for p in paths.split(",") if p)
    bad = [p for p in paths if p not in PATHS]
    if bad:
        raise click.BadParameter(f"unknown path(s) {bad}; expected some of {list(PATHS)}", param_hint="--paths")
    dev = Device(device_spec) if device_spec else Device()
    if shapes:
        todo = [tuple(int(v) for v in s.split("x")) for s in shapes.split(",")]
    else:
        todo = EMULATOR_SHAPES if emulated(dev) else SHAPES
    ceiling = read_bandwidth(dev)
    sorts = {"both": (True, False), "sorted": (True,), "unsorted": (False,)}[orders]
    rows = [bench_shape(dev, r, n, s, ceiling, 3 if emulated(dev) else repeats, paths, inf_fraction)
            for r, n in todo for s in sorts]
    shown = [p for p in PATHS if f"{p}_us" in rows[0]]
    if as_json:
        click.echo(json.dumps({"device": dev.name, "read_ceiling_GBps": ceiling / 1e9, "rows": rows}, indent=1))
        return
    click.echo(f"{dev.name}: read ceiling {ceiling / 1e12:.2f} TB/s (this run); goal = 3 x bytes / ceiling + 10 us, "
               f"and below torch.topk" + ("  [emulator: times measure the CPU]" if emulated(dev) else ""))
    graphs = all(f"{p}_graph_us" in r for r in rows for p in shown)
    if graphs:  # each path's graph replay beside its back-to-back calls, whose host time a small call may show
        click.echo("each path: back-to-back calls / one graph replay of them, us")
        for r in rows:
            for p in shown:
                r[p + "_us_shown"] = f"{r[p + '_us']:.1f}/{r[p + '_graph_us']:.1f}"
    cell = (lambda r, p: f"{r[p + '_us_shown']:>13}") if graphs else (lambda r, p: f"{r[p + '_us']:10.1f}")
    click.echo(f"{'shape':>12} {'sorted':>6} " + " ".join(f"{p + ' us':>{13 if graphs else 10}}" for p in shown)
               + f" {'torch us':>9} {'goal us':>8} {'1 read us':>9}  verdict")
    for r in rows:
        torch_us = f"{r['torch_us']:9.1f}" if "torch_us" in r else f"{'-':>9}"
        checks = [] if r["paths_equal"] else ["PATHS DIFFER"]
        if r.get("torch_sets_equal") is False:
            checks.append("TORCH SETS DIFFER")
        click.echo(f"{r['rows']:>5}x{r['N']:<6} {str(r['sorted']):>6} " + " ".join(cell(r, p) for p in shown)
                   + f" {torch_us} {r['goal_us']:8.1f} {r['read_ceiling_us']:9.1f}  "
                   f"{'meets' if r['meets_goal'] else 'MISSES'}{' ' + ', '.join(checks) if checks else ''}")


if __name__ == "__main__":
    main()
