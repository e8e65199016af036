"""Each CTA's time in the sm_90a decode kernel, from the `cta_clock` build of tools/measure/stage_variants.py (its
CTAs write their %globaltimer at entry and exit, their clock64 cycles and their SM into a spare row after the out
rows, which this script allocates): whether a call's time is its slowest CTA's or the whole chip's, and the SM
clock each CTA ran at.

    python -m tools.measure.stage_variants --set sm90a_decode_tma --builds DIR --variants cta_clock --build-only
    cd DIR/cta_clock/pkg && PYTHONPATH=$PWD:$ROOT python3 -m tools.measure.cta_times --next-n 1,2,4 --calls 40

Each next_n: `--calls` calls back to back, each into its own out array, then per call the span (first entry to
last exit), the fastest, median and slowest CTA, the start skew and the clock range, and the medians over calls;
then by SM: how closely each SM's median time over the even calls follows its median over the odd ones, the
slowest and fastest SMs, and whether each block ran on the same SM in every call.
"""
import statistics

import click
import numpy as np

from hipindexer import fp8_paged_mqa_logits, testing
from hipindexer.plan.decode import deal_tunables
from hipindexer.runtime import Device, DeviceArray


@click.command()
@click.option("--shape", default="64x131072", help="BxCONTEXT, every sequence at the context")
@click.option("--heads", default=64)
@click.option("--next-n", "next_ns", default="1,2")
@click.option("--calls", default=40)
@click.option("--deal", default=None, help="SHARE[:GRAIN]: the op's deal_share and deal_grain (default: the planner's)")
def main(shape, heads, next_ns, calls, deal):
    B, ctx = (int(x) for x in shape.split("x"))
    dev = Device()
    tunables = deal_tunables(deal)
    for n in (int(x) for x in next_ns.split(",")):
        case = testing.DecodeCase(B, n, heads, 128, 64, mean_context=ctx, spread="equal", key_codes=True)
        inp = testing.decode_inputs(np.random.default_rng(0), case)
        args = [DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a for a in inp.args()]
        outs = [DeviceArray.empty((B * n + 1, inp.max_model_len), np.float32, dev) for _ in range(calls)]
        for o in outs[:3]:  # warm-up
            fp8_paged_mqa_logits(*args, clean_logits=True, out=o[:B * n], device=dev, **tunables)
        for o in outs:
            o[B * n:].fill(0)
        for o in outs:
            fp8_paged_mqa_logits(*args, clean_logits=True, out=o[:B * n], device=dev, **tunables)
        dev.synchronize()
        summary, placed = [], []  # per call: each block's (SM, duration)
        for i, o in enumerate(outs):
            words = o[B * n:].numpy().view(np.uint64).reshape(-1)
            units = int(np.count_nonzero(words[1::4]))  # CTAs that wrote an exit time
            t = words[:4 * units].reshape(units, 4).astype(np.int64)
            start, end, cycles, sm = t[:, 0], t[:, 1], t[:, 2], t[:, 3]
            dur = (end - start) / 1e3
            ghz = cycles / (end - start)
            row = ((end.max() - start.min()) / 1e3, dur.min(), float(np.median(dur)), dur.max(),
                   (start.max() - start.min()) / 1e3, ghz.min(), ghz.max(), float(np.median(ghz)))
            summary.append(row)
            placed.append(list(zip(sm.tolist(), dur.tolist())))
            click.echo(f"next_n {n} call {i:2d}: span {row[0]:6.1f} us; CTA fastest {row[1]:6.1f}, median {row[2]:6.1f}, "
                       f"slowest {row[3]:6.1f} (SM {sm[dur.argmax()]}); start skew {row[4]:4.1f} us; "
                       f"{row[5]:.3f}-{row[6]:.3f} GHz (median {row[7]:.3f})")
        med = [statistics.median(c) for c in zip(*summary)]
        click.echo(f"next_n {n}, medians over {calls} calls: span {med[0]:.1f} us; CTA fastest {med[1]:.1f}, median "
                   f"{med[2]:.1f}, slowest {med[3]:.1f}; clock {min(r[5] for r in summary):.3f}-"
                   f"{max(r[6] for r in summary):.3f} GHz, the median CTA's {med[7]:.3f}")
        by_sm_report(n, placed)


def by_sm_report(n, placed):
    """Whether a CTA's time is its SM's: each SM's median over the even calls against over the odd ones, the
    slowest and fastest SMs, and whether the blocks kept their SMs (placed: per call, each block's (SM, us))."""
    by_sm = [dict(c) for c in placed]
    sms = sorted(set().union(*by_sm))
    half = [np.array([statistics.median([c[s] for c in by_sm[k::2] if s in c] or [np.nan]) for s in sms])
            for k in (0, 1)]
    ok = ~np.isnan(half[0]) & ~np.isnan(half[1])
    r = float(np.corrcoef(half[0][ok], half[1][ok])[0, 1])
    both = (half[0] + half[1]) / 2
    order = np.argsort(both)
    click.echo(f"next_n {n}, by SM ({len(sms)} SMs): even/odd calls' medians correlate {r:.3f}; SM medians "
               f"{np.nanmin(both):.1f}-{np.nanmax(both):.1f} us, spread of one SM between halves "
               f"{float(np.nanmedian(np.abs(half[0] - half[1]))):.2f} us (median)")
    click.echo("  slowest SMs: " + ", ".join(f"{sms[k]} {both[k]:.1f}" for k in order[::-1][:12]))
    click.echo("  fastest SMs: " + ", ".join(f"{sms[k]} {both[k]:.1f}" for k in order[:12]))
    blocks = [[s for s, _ in c] for c in placed]
    same = sum(len(set(col)) == 1 for col in zip(*blocks))
    click.echo(f"  one CTA an SM in every call: {all(len(set(c)) == len(c) for c in blocks)}; blocks on the "
               f"same SM in every call: {same} of {len(blocks[0])}")


if __name__ == "__main__":
    main()
