"""One fp8_mqa_logits call on prepared inputs, for a profiler (ncu -k regex:KERNEL) to capture.

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        python3 tools/profile_prefill.py --shape 2048x8192 --heads 64 --kernel mqa_logits_wgmma
"""
import click
import numpy as np

from hipindexer import fp8_mqa_logits, testing
from hipindexer.runtime import Device, DeviceArray


@click.command()
@click.option("--shape", default="2048x8192")
@click.option("--heads", default=64)
@click.option("--kernel", default=None)
@click.option("--calls", default=2)
def main(shape, heads, kernel, calls):
    M, N = (int(x) for x in shape.split("x"))
    dev = Device()
    inp = testing.prefill_inputs(np.random.default_rng(0), M, N, heads, 128, "causal")
    args = [DeviceArray.from_numpy(a, dev) for a in inp.args()]
    out = DeviceArray.empty((M, N), np.float32, dev)
    for _ in range(calls):
        fp8_mqa_logits(*args, out=out, **({"kernel": kernel} if kernel else {}))
    dev.synchronize()


if __name__ == "__main__":
    main()
