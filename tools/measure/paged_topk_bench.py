"""fp8_paged_mqa_topk against the decode logits op alone and against the logits op followed by topk_logits over the
whole [rows, max_model_len] array, on one device, by the method of hipindexer.bench.timing (events around
back-to-back calls, median of repeats; one input set):

    python -m tools.measure.paged_topk_bench [--rows 64x131072,64x32768,16x32768,4x8192] [--next-n 1,2] [--json]
        [--stages 6,12] [--merge-groups 0,4,8] [--paths logits,fused] [--pair cluster=false]

H = 64, D = 128, block 64, equal lengths, top_k 2048, clean logits; the top-k op with a workspace made once
(hipindexer.paged_topk_workspace, given the heads: the fused kernel's where it serves and pays) and out= given, as
a serving loop calls it, and beside it each path forced (fused=True, whole=True, fused=False), each also as one CUDA
graph replay of 8 calls where graphs are available. The workspace's bytes are reported beside the bound of
docs/ops.md. --pair gives the pair's topk_logits tunables (name=value, comma-separated; true / false / integers),
so that the pair times the path the whole-row path would take with them.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

import click
import numpy as np

import hipindexer
from hipindexer import testing
from hipindexer.bench.timing import emulated, time_batches, time_graph
from hipindexer.runtime import Device, DeviceArray

H, D, BLOCK, TOP_K = 64, 128, 64, 2048
PATHS = ("logits", "logits_then_topk_logits", "paged_topk", "fused", "whole", "composed")


def sequences_of(rng, B: int, ctx: int, dev):
    """B sequences of ctx keys in a paged cache on dev (block BLOCK, key codes): (inputs, cache, lengths, tables),
    the last three device arrays."""
    base = testing.decode_inputs(rng, testing.DecodeCase(B, 2, H, D, BLOCK, False, mean_context=ctx, spread="equal",
                                                         key_codes=True))
    return (base, *(DeviceArray.from_numpy(a, dev) for a in (base.kv_cache, base.context_lens, base.block_tables)))


def rows_of(rng, B: int, n: int, max_model_len: int, dev):
    """Queries and weights for B sequences of next_n = n on dev, with a logits output and an indices output."""
    return (DeviceArray.from_numpy(testing.random_fp8(rng, (B, n, H, D)), dev),
            DeviceArray.from_numpy(rng.standard_normal((B * n, H), dtype=np.float32), dev),
            DeviceArray.empty((B * n, max_model_len), np.float32, dev),
            DeviceArray.empty((B * n, TOP_K), np.int32, dev))


@dataclass
class Case:
    """One (B, ctx, next_n) of a run on its device: the drawn inputs (base), their cache, lengths and tables, the
    queries and weights, and the logits and indices outputs."""
    B: int
    ctx: int
    n: int
    base: object
    cache: DeviceArray
    lens: DeviceArray
    table: DeviceArray
    q: DeviceArray
    w: DeviceArray
    logits: DeviceArray
    idx: DeviceArray

    @property
    def mml(self) -> int:
        return self.base.max_model_len

    def logits_op(self, lens=None, clean_logits=True, stream=None):
        """The decode logits op over the case (its own lengths, or `lens`) into its logits output."""
        hipindexer.fp8_paged_mqa_logits(self.q, self.cache, self.w, self.lens if lens is None else lens, self.table,
                                        self.mml, None, False, clean_logits=clean_logits, out=self.logits,
                                        device=self.cache.device, stream=stream)

    def topk_op(self, workspace, stream=None, **kw):
        """The decode top-k op over the case into its indices output, in `workspace` (its path), with tunables."""
        hipindexer.fp8_paged_mqa_topk(self.q, self.cache, self.w, self.lens, self.table, self.mml, TOP_K,
                                      workspace=workspace, out=self.idx, device=self.cache.device, stream=stream,
                                      **kw)


def cases_of(rng, rows: str, next_ns: str, dev):
    """The cases of a run, in order: each BxCTX of `rows` (comma-separated) drawn once, then each next_n of
    `next_ns` over it."""
    for shape in rows.split(","):
        B, ctx = (int(x) for x in shape.split("x"))
        base, cache, lens, table = sequences_of(rng, B, ctx, dev)
        for n in (int(x) for x in next_ns.split(",")):
            yield Case(B, ctx, n, base, cache, lens, table, *rows_of(rng, B, n, base.max_model_len, dev))


def _tunable(spec: str) -> tuple:
    """name=value of --pair as (name, True / False / int)."""
    name, _, value = spec.partition("=")
    v = value.strip().lower()
    if v in ("true", "false"):
        return name.strip(), v == "true"
    try:
        return name.strip(), int(v)
    except ValueError:
        raise click.BadParameter(f"expected name=true|false|integer, got {spec!r}", param_hint="--pair") from None


@click.command()
@click.option("--device", "device_name", default=None)
@click.option("--rows", default="64x131072,64x32768,16x32768,4x8192")
@click.option("--next-n", "next_ns", default="1,2")
@click.option("--repeats", default=5)
@click.option("--stages", "stage_list", default="",
              help="sm_90a: also time the fused path at these ring depths (comma-separated, each 6 to 24 in sixes).")
@click.option("--merge-groups", "group_list", default="",
              help="Also time the fused path with its merge in these group sizes (comma-separated; 0: one level).")
@click.option("--paths", default=",".join(PATHS), show_default=True,
              help="The timed paths (comma-separated): the others report nan.")
@click.option("--pair", "pair_spec", default="", help="topk_logits tunables of the pair, name=value,...")
@click.option("--json", "as_json", is_flag=True)
def main(device_name, rows, next_ns, repeats, stage_list, group_list, paths, pair_spec, as_json):
    timed = set(paths.split(","))
    if not timed <= set(PATHS):
        raise click.BadParameter(f"expected some of {', '.join(PATHS)}, got {paths!r}", param_hint="--paths")
    pair_kw = dict(_tunable(kv) for kv in pair_spec.split(",") if kv)
    dev = Device(device_name)
    if emulated(dev):
        rows = "2x256"
    rng = np.random.default_rng(0)
    cases = []
    for c in cases_of(rng, rows, next_ns, dev):
        B, ctx, n, mml = c.B, c.ctx, c.n, c.mml
        logits, idx = c.logits, c.idx
        ws = hipindexer.paged_topk_workspace(B, n, TOP_K, mml, BLOCK, device=dev, heads=H, head_dim=D)
        try:  # the fused path forced, where it serves
            fws = hipindexer.paged_topk_workspace(B, n, TOP_K, mml, BLOCK, device=dev, heads=H, head_dim=D,
                                                  fused=True)
        except ValueError:
            fws = None
        try:  # the whole-row path forced, where it fits
            wws = hipindexer.paged_topk_workspace(B, n, TOP_K, mml, BLOCK, device=dev, whole=True)
        except ValueError:
            wws = None
        cws = hipindexer.paged_topk_workspace(B, n, TOP_K, mml, BLOCK, device=dev, fused=False)

        def alone(i, stream=None):
            c.logits_op(stream=stream)

        def two(i, stream=None):
            alone(i, stream)
            hipindexer.topk_logits(logits, TOP_K, out=idx, device=dev, stream=stream, **pair_kw)

        def topk(i, stream=None):
            c.topk_op(ws, stream)

        def fused(i, stream=None):
            c.topk_op(fws, stream)

        def whole(i, stream=None):
            c.topk_op(wws, stream)

        def composed(i, stream=None):
            c.topk_op(cws, stream)

        def at_stages(st):
            return lambda i: c.topk_op(fws, stages=st)

        def at_group(g):
            return lambda i: c.topk_op(fws, merge_group=g)
        depths = [int(x) for x in stage_list.split(",") if x] if fws else []
        groups = [int(x) for x in group_list.split(",") if x] if fws else []
        paths_of = (("logits", alone), ("logits_then_topk_logits", two), ("paged_topk", topk),
                    ("fused", fused if fws else None), ("whole", whole if wws else None), ("composed", composed))
        us = {k: statistics.median(time_batches(dev, f, repeats)[0]) if f else float("nan")
              for k, f in ((k, f if k in timed else None) for k, f in paths_of)}
        graph = {k: time_graph(dev, lambda i, s, f=f: f(i, s), 8, repeats) if f and k in timed else None
                 for k, f in paths_of}  # one input set: each replay runs the same call 8 times
        us.update({f"graph_{k}": statistics.median(g) for k, g in graph.items() if g})
        us.update({k: statistics.median(time_batches(dev, f, repeats)[0])
                   for k, f in (*((f"fused_stages_{d}", at_stages(d)) for d in depths),
                                *((f"fused_merge_group_{g}", at_group(g)) for g in groups))})
        path = "fused" if ws.fused else "whole" if ws.whole else "composed"
        case = {"B": B, "ctx": ctx, "next_n": n, "H": H, "top_k": TOP_K, "fused": ws.fused, "path": path,
                "pair_tunables": pair_kw,
                **{f"us_{k}": v for k, v in us.items()},
                "paged_topk_over_logits": us["paged_topk"] / us["logits"], "workspace_bytes": ws.nbytes,
                "workspace_bound": ws.bound}
        cases.append(case)
        if not as_json:
            print(f"({B}, {ctx}) next_n {n}: logits {us['logits']:.1f} us, logits + topk_logits "
                  f"{us['logits_then_topk_logits']:.1f} us, fp8_paged_mqa_topk {us['paged_topk']:.1f} us "
                  f"({path}, {case['paged_topk_over_logits']:.2f}x the logits); "
                  f"fused path {us['fused']:.1f} us, whole-row path {us['whole']:.1f} us, composed path "
                  f"{us['composed']:.1f} us; workspace "
                  f"{ws.nbytes} B (bound {case['workspace_bound']} B)" +
                  "".join(f"; fused at {d} stages {us[f'fused_stages_{d}']:.1f} us" for d in depths) +
                  "".join(f"; merge groups of {g} {us[f'fused_merge_group_{g}']:.1f} us" for g in groups) +
                  ("; graph replays: " + ", ".join(f"{k} {v:.1f}" for k, v in us.items() if k.startswith("graph_"))
                   if any(k.startswith("graph_") for k in us) else ""),
                  flush=True)
    if as_json:
        click.echo(json.dumps({"device": repr(dev), "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
