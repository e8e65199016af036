"""Where a small decode call's time goes: the steps of each CTA's chain in the `cta_chain` build of
tools/measure/stage_variants.py (its CTAs write their %globaltimer at entry and exit, their SM and their clock64
at each step into a spare row after the out rows, which this script allocates), beside what any one launch of this
size costs on the same device: a near-empty grid and our streaming read of the same key bytes, each a graph replay.

    python -m tools.measure.stage_variants --set sm90a_decode_tma --builds DIR --variants cta_chain --build-only
    cd DIR/cta_chain/pkg && PYTHONPATH=$PWD:$ROOT python3 -m tools.measure.decode_chain --shapes 1x131072,4x8192

Each call runs alone (the device drained before it), over its own set of inputs rotated to cover 3x the L2, so the
keys come from device memory as in the benchmark. Per step: the median over CTAs and calls of its clock since the
CTA's entry, in us at the clock the CTAs ran at (their clock64 cycles over their %globaltimer time, all CTAs
together); then the call's span (first entry to last exit) and the launch floors.
"""
import statistics

import click
import numpy as np

from hipindexer import fp8_paged_mqa_logits, testing
from hipindexer.bench.timing import L2_BYTES, time_graph
from hipindexer.runtime import Device, DeviceArray, get_kernel

WORDS = 32  # u64 a CTA in the spare row
STEPS = ((4, "setup's barrier"), (5, "the batch's totals"), (20, "the deal"), (13, "page warp 0: its copies about to begin"),
         (16, "page warp 0: the walk begun"), (17, "page warp 0: its chunk read, priced and scanned"),
         (18, "page warp 0: each lane's blocks spanned"), (19, "page warp 0: a sequence of its own taken"),
         (14, "page warp 0: its first sequence found"), (21, "Q warp: begun"), (22, "Q warp: its first piece"),
         (24, "Q warp: its walk entered"), (23, "Q warp: its walk begun"),
         (15, "Q warp: its first sequence found"),
         (6, "first key copy issued (its table entry read)"), (7, "first Q slot ready"),
         (8, "first stage landed (math warpgroup 0)"), (9, "last stage done, math warpgroup 0"),
         (10, "last stage done, math warpgroup 1"), (11, "last stage done, math warpgroup 2"), (12, "exit"))
TWICE = ((25, "totals and deal, first run"), (26, "totals and deal, second run"), (27, "page warp 0: walk 1 begun"),
         (28, "page warp 0: walk 1 done"), (29, "page warp 0: walk 2 begun"), (30, "page warp 0: walk 2 done"))


def floors(dev, key_bytes: int, sets: int, repeats: int) -> tuple[float, float]:
    """Graph-replay us of one launch of the streaming read kernel over no bytes (each block writes a word) and over
    key_bytes (rotated over `sets` buffers), at the grid the read ceiling uses."""
    kern = get_kernel("stream_read_u32x4", device=dev)
    grid = dev.num_cus * 8
    out = DeviceArray.empty((grid,), np.uint32, dev)
    n16 = -(-key_bytes // 16)
    srcs = [DeviceArray.empty((n16 * 16,), np.uint8, dev).fill(1) for _ in range(sets)]

    def empty(i, stream=None):
        kern.launch(grid, stream=stream or dev.default_stream, src=srcs[0], out=out, n16=0)

    def read(i, stream=None):
        kern.launch(grid, stream=stream or dev.default_stream, src=srcs[i % sets], out=out, n16=n16)
    e = time_graph(dev, empty, min(200, 20 * sets), repeats)
    r = time_graph(dev, read, min(200, 20 * sets), repeats)
    return statistics.median(e), statistics.median(r)


@click.command()
@click.option("--shapes", default="1x131072,4x8192", help="BxCONTEXT,...: every sequence at the context")
@click.option("--heads", default=64)
@click.option("--next-n", "next_n", default=1)
@click.option("--calls", default=40)
@click.option("--device", default=None, help="cuda:N (default: the first GPU)")
@click.option("--warm", is_flag=True, help="one set of inputs for every call: whatever the L2 holds stays there")
@click.option("--twice", is_flag=True, help="the cta_chain_twice build: also its totals, deal and walk run twice")
def main(shapes, heads, next_n, calls, device, warm, twice):
    steps_named = STEPS + (TWICE if twice else ())
    dev = Device(device)
    for shape in shapes.split(","):
        B, ctx = (int(x) for x in shape.split("x"))
        case = testing.DecodeCase(B, next_n, heads, 128, 64, mean_context=ctx, spread="equal", key_codes=True)
        inp = testing.decode_inputs(np.random.default_rng(0), case)
        key_bytes = int(inp.context_lens.astype(np.int64).sum()) * (128 + 4)
        sets = 1 if warm else max(2, -(-3 * L2_BYTES["sm_90a"] // inp.kv_cache.nbytes))
        caches = [DeviceArray.from_numpy(inp.kv_cache, dev) for _ in range(sets)]
        args = [DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a for a in inp.args()]
        rows = B * next_n
        spare = -(-WORDS * 8 * dev.num_cus // (4 * inp.max_model_len))  # rows after the out rows: a CTA's words each
        outs = [DeviceArray.empty((rows + spare, inp.max_model_len), np.float32, dev) for _ in range(calls)]

        def call(i, o):
            a = list(args)
            a[1] = caches[i % sets]
            fp8_paged_mqa_logits(*a, clean_logits=True, out=o[:rows], device=dev)
        for i in range(max(3, sets)):  # warm-up: every set's cache map made before any call is captured
            call(i, outs[i % calls])
        steps, spans, skews, cyc, ns = [], [], [], 0, 0
        for i, o in enumerate(outs):
            o[rows:].fill(0)
            dev.synchronize()
            call(i, o)
            dev.synchronize()
            w = o[rows:].numpy().view(np.uint64).reshape(-1)
            units = int(np.count_nonzero(w[1::WORDS][: len(w) // WORDS]))
            if units == 0:
                raise click.ClickException("no CTA wrote its steps: run the cta_chain build (see the docstring)")
            t = w[:WORDS * units].reshape(units, WORDS).astype(np.int64)
            spans.append((t[:, 1].max() - t[:, 0].min()) / 1e3)
            skews.append((t[:, 0].max() - t[:, 0].min()) / 1e3)
            cyc += int((t[:, 12] - t[:, 3]).sum())
            ns += int((t[:, 1] - t[:, 0]).sum())
            steps.append({k: t[:, k] - t[:, 3] for k, _ in steps_named})
        ghz = cyc / ns
        click.echo(f"({B}, {ctx}) H={heads} next_n={next_n}{', warm' if warm else ''}: {units} CTAs, {calls} calls alone, clock {ghz:.3f} GHz "
                   f"(CTA cycles over CTA time); span median {statistics.median(spans):.2f} us, start skew median "
                   f"{statistics.median(skews):.2f} us")
        for k, name in steps_named:
            allv = np.concatenate([s[k] for s in steps]) / ghz / 1e3
            lo, med, hi = np.percentile(allv, [5, 50, 95])
            click.echo(f"  {name:40s} {med:6.2f} us after entry (5%-95% of CTAs {lo:5.2f}-{hi:5.2f})")
        graph = time_graph(dev, lambda i, s: fp8_paged_mqa_logits(
            *[caches[i % sets] if j == 1 else a for j, a in enumerate(args)], clean_logits=True,
            out=outs[i % calls][:rows], stream=s, device=dev), min(200, 20 * sets), 10)
        e, r = floors(dev, key_bytes, sets, 10)
        click.echo(f"  graph replay of the op: {statistics.median(graph):.2f} us; one launch of the streaming read over "
                   f"no bytes {e:.2f} us, over the call's {key_bytes / 1e6:.1f} MB of keys {r:.2f} us")


if __name__ == "__main__":
    main()
