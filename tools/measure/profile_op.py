"""One call (or a few) of an op on device-resident inputs, for a profiler to capture:

    ncu --clock-control none -k regex:mqa_logits --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        python3 -m tools.measure.profile_op prefill --shape 2048x8192 --heads 64 --kernel mqa_logits_wgmma
    ncu ... python3 -m tools.measure.profile_op decode --shape 64x131072 --heads 64 --next-n 1
    ncu ... python3 -m tools.measure.profile_op topk --shape 64x131072 --top-k 2048
    ncu -k regex:mqa_topk_wgmma ... python3 -m tools.measure.profile_op prefill-topk --shape 4096x32768 --heads 64
    ncu -k regex:paged_topk_merge ... python3 -m tools.measure.profile_op paged-topk --shape 16x131072 --path fused
"""
import click
import numpy as np

from hipindexer import (fp8_mqa_logits, fp8_mqa_topk, fp8_paged_mqa_logits, fp8_paged_mqa_topk, paged_topk_workspace,
                        prefill_topk_workspace, testing, topk_logits)
from hipindexer.runtime import Device, DeviceArray


def _shape(s: str) -> tuple[int, int]:
    a, b = (int(x) for x in s.split("x"))
    return a, b


def _prefill_args(shape: str, heads: int):
    """(M, N, the device, the prefill op's inputs on it) for a causal MxN shape at D = 128."""
    M, N = _shape(shape)
    dev = Device()
    inp = testing.prefill_inputs(np.random.default_rng(0), M, N, heads, 128, "causal")
    return M, N, dev, [DeviceArray.from_numpy(a, dev) for a in inp.args()]


@click.group()
def main():
    pass


@main.command()
@click.option("--shape", default="2048x8192", help="MxN")
@click.option("--heads", default=64)
@click.option("--kernel", default=None)
@click.option("--split", default=None, type=int)
@click.option("--clean/--no-clean", default=True)
@click.option("--calls", default=2)
def prefill(shape, heads, kernel, split, clean, calls):
    M, N, dev, args = _prefill_args(shape, heads)
    out = DeviceArray.empty((M, N), np.float32, dev)
    forced = {k: v for k, v in (("kernel", kernel), ("split", split)) if v}
    for _ in range(calls):
        fp8_mqa_logits(*args, clean_logits=clean, out=out, **forced)
    dev.synchronize()


@main.command()
@click.option("--shape", default="4096x32768", help="MxN, causal")
@click.option("--heads", default=64)
@click.option("--top-k", default=2048)
@click.option("--calls", default=2)
def prefill_topk(shape, heads, top_k, calls):
    M, N, dev, args = _prefill_args(shape, heads)
    ws = prefill_topk_workspace(M, N, top_k, device=dev, H=heads, D=128)
    out = DeviceArray.empty((M, top_k), np.int32, dev)
    for _ in range(calls):
        fp8_mqa_topk(*args, top_k, workspace=ws, out=out, device=dev)
    dev.synchronize()


def _decode_inputs(dev, B, ctx, next_n, heads, block_size):
    """The decode inputs of B sequences at context ctx (D = 128), and the op's arguments with the arrays on dev."""
    case = testing.DecodeCase(B, next_n, heads, 128, block_size, mean_context=ctx, spread="equal", key_codes=True)
    inp = testing.decode_inputs(np.random.default_rng(0), case)
    return inp, [DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a for a in inp.args()]


@main.command()
@click.option("--shape", default="64x131072", help="BxCONTEXT, every sequence at the context")
@click.option("--heads", default=64)
@click.option("--next-n", default=1)
@click.option("--block-size", default=64)
@click.option("--kernel", default=None)
@click.option("--calls", default=2)
def decode(shape, heads, next_n, block_size, kernel, calls):
    B, ctx = _shape(shape)
    dev = Device()
    inp, args = _decode_inputs(dev, B, ctx, next_n, heads, block_size)
    out = DeviceArray.empty((B * next_n, inp.max_model_len), np.float32, dev)
    for _ in range(calls):
        fp8_paged_mqa_logits(*args, clean_logits=True, out=out, device=dev, **({"kernel": kernel} if kernel else {}))
    dev.synchronize()


@main.command()
@click.option("--shape", default="64x131072", help="BxCONTEXT, every sequence at the context")
@click.option("--heads", default=64)
@click.option("--next-n", default=1)
@click.option("--top-k", default=2048)
@click.option("--path", default=None, type=click.Choice(["fused", "whole", "composed"]),
              help="A path forced (default: the op's choice).")
@click.option("--calls", default=2)
def paged_topk(shape, heads, next_n, top_k, path, calls):
    B, ctx = _shape(shape)
    dev = Device()
    inp, args = _decode_inputs(dev, B, ctx, next_n, heads, 64)
    forced = {"fused": dict(fused=True), "whole": dict(whole=True), "composed": dict(fused=False)}.get(path, {})
    ws = paged_topk_workspace(B, next_n, top_k, inp.max_model_len, 64, device=dev, heads=heads, head_dim=128,
                              **forced)
    out = DeviceArray.empty((B * next_n, top_k), np.int32, dev)
    for _ in range(calls):
        fp8_paged_mqa_topk(*args[:6], top_k, workspace=ws, out=out, device=dev)
    dev.synchronize()


@main.command()
@click.option("--shape", default="64x131072", help="ROWSxN float32 logits, half of each row -inf (the bench's)")
@click.option("--top-k", default=2048)
@click.option("--sorted", "sort", is_flag=True)
@click.option("--calls", default=2)
@click.option("--path", default=None, type=click.Choice(["single", "split", "rowwise", "resident"]),
              help="A path forced (default: the op's choice).")
def topk(shape, top_k, sort, calls, path):
    rows, N = _shape(shape)
    dev = Device()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, N), dtype=np.float32)
    x[rng.random(x.shape) < 0.5] = -np.inf
    logits = DeviceArray.from_numpy(x, dev)
    out = DeviceArray.empty((rows, top_k), np.int32, dev)
    for _ in range(calls):
        topk_logits(logits, top_k, sorted=sort, out=out, **({"split": path == "split"} if path in ("single", "split")
                                                            else {path: True} if path else {}))
    dev.synchronize()


if __name__ == "__main__":
    main()
