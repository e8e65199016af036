"""DeepGEMM's fp8 MQA logits kernels timed on the shapes of `hipindexer bench decode` and `bench prefill`, for a
ratio measured in the same run (tools/device/h200_deepgemm.sh builds DeepGEMM on the device and runs this there; it
needs torch and the built deep_gemm, which the package never does).

next_n above 2, which DeepGEMM's Hopper kernel does not take, runs the way a serving stack runs it today: ceil(next_n / 2)
calls at next_n 2, or every (sequence, row) as a sequence of its own at next_n 1, whichever is faster (`mode`; both
times in `us_modes`).

    python -m tools.measure.deepgemm_bench decode --rows 64x131072,16x32768 --heads 64 --next-n 1,2 > dg_decode.json
    python -m tools.measure.deepgemm_bench prefill --shapes 4096x32768,8192x8192 --heads 64,32 > dg_prefill.json

Inputs follow DeepGEMM's own tests: random fp8 queries and key codes, kv_scale 1, a block table over a shuffled
pool, 2-D context lengths (token j of a sequence of context c sees c - next_n + j + 1 keys); the key codes are
those of hipindexer's benchmark (|x| < 2, never a NaN code) unless `--codes any` asks for any byte, as DeepGEMM's
test draws them. Decode runs with clean_logits=False: at this commit DeepGEMM's paged op refuses clean_logits with
2-D lengths, and takes no other (so its time leaves out the -inf fill ours counts). Prefill runs with
clean_logits=True (its fill kernel counted). Time: CUDA events around each call with a 256 MB memset queued before
it (the L2 flushed, the host's launch cost hidden), median of `--repeats` after 3 warm-ups; decode both with the
schedule kernel a serving step runs (`us`) and without it (`us_kernel`), and at next_n 1 and 2 also as
hipindexer's benchmark times, in back-to-back batches with the schedule kernel (`us_batch`; the cache copied
until the copies hold 3x the L2). GB/s and TFLOP/s are counted as the hipindexer benchmark counts them (key +
scale bytes once per sequence; 2 H D per valid (row, key) pair).
"""
import json
import statistics
import sys
import time

import click
import torch
import deep_gemm

D = 128


def _time(fn, repeats):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        fn()
    out = []
    for _ in range(repeats):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return statistics.median(out)


def _time_batches(fn, repeats):
    """hipindexer's method (hipindexer.bench.timing.time_batches): events around a batch of back-to-back calls
    fn(i) sized to about 50 ms (at most 50 calls), the median of `repeats` batches after warm-up."""
    fn(0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(1)
    torch.cuda.synchronize()
    calls = max(1, min(50, int(0.05 / max(time.perf_counter() - t0, 1e-6))))
    out = []
    for r in range(max(5, repeats // 4)):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(calls):
            fn(r * calls + i)
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(out)


def _pairs_decode(B, ctx, n):
    return B * sum(ctx - n + j + 1 for j in range(n))


@click.group()
def main():
    pass


@main.command()
@click.option("--rows", default="64x131072,64x32768,16x131072,16x32768")
@click.option("--heads", default="64")
@click.option("--next-n", "next_ns", default="1,2")
@click.option("--block-size", default=64)
@click.option("--repeats", default=20)
@click.option("--codes", type=click.Choice(["finite", "any"]), default="finite",
              help="Key bytes: fp8 codes with |x| < 2 as in hipindexer's benchmark, or any byte (NaN codes included, "
                   "DeepGEMM's own test).")
@click.option("--batch/--no-batch", "method_batch", default=True,
              help="Also time next_n 1 and 2 in back-to-back batches, hipindexer's method (`us_batch`).")
def decode(rows, heads, next_ns, block_size, repeats, codes, method_batch):
    cases = []
    num_sms = deep_gemm.get_num_sms()
    for row in rows.split(","):
        B, ctx = (int(x) for x in row.split("x"))
        blocks = -(-ctx // block_size)
        nb = B * blocks + 1
        kv = torch.randint(0, 256, (nb, block_size, 1, D + 4), dtype=torch.uint8, device="cuda")
        if codes == "finite":  # hipindexer's benchmark keys: fp8 codes with |x| < 2, never a NaN code
            kv.view(nb, -1)[:, :block_size * D].bitwise_and_(0xBF)
        kv.view(nb, -1)[:, block_size * D:].view(torch.float32).fill_(1.0)
        # copies of the cache for back-to-back calls, so that the working set is at least 3x the L2 (60 MB), as in
        # hipindexer's benchmark
        kvs = [kv] + [kv.clone() for _ in range(-(-3 * (60 << 20) // kv.numel()) - 1)]
        table = torch.randperm(nb - 1, device="cuda")[: B * blocks].view(B, blocks).to(torch.int32)
        for H in (int(h) for h in heads.split(",")):
            for n in (int(x) for x in next_ns.split(",")):
                q = torch.randn(B, n, H, D, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
                w = torch.randn(B * n, H, device="cuda", dtype=torch.float32)
                lens = (ctx - n + 1 + torch.arange(n, device="cuda", dtype=torch.int32)).repeat(B, 1).contiguous()

                def call(q, w, lens, table):
                    sched = [None]

                    def step(with_schedule=True, i=0):
                        if with_schedule or sched[0] is None:
                            sched[0] = deep_gemm.get_paged_mqa_logits_metadata(lens, block_size, num_sms)
                        return deep_gemm.fp8_paged_mqa_logits(q, kvs[i % len(kvs)], w, lens, table, sched[0], ctx,
                                                              clean_logits=False)
                    return step

                modes = {}
                if n <= 2:
                    step = call(q, w, lens, table)
                    modes["native"] = (lambda: step(), lambda: step(False))
                    batch = lambda i: step(True, i)
                else:
                    # as a stack runs next_n > 2 on this DeepGEMM: ceil(n / 2) calls at next_n 2 (the last one's
                    # second row a repeat when n is odd), or every (sequence, row) as its own sequence at next_n 1
                    idx = [[min(2 * i, n - 1), min(2 * i + 1, n - 1)] for i in range(-(-n // 2))]
                    w3 = w.view(B, n, H)
                    parts = [call(q[:, j].contiguous(), w3[:, j].reshape(B * 2, H).contiguous(),
                                  lens[:, j].contiguous(), table) for j in idx]
                    modes["fold2"] = (lambda: [s() for s in parts], lambda: [s(False) for s in parts])
                    flat = call(q.reshape(B * n, 1, H, D).contiguous(), w, lens.reshape(B * n, 1).contiguous(),
                                table.repeat_interleave(n, dim=0).contiguous())
                    modes["flatten"] = (lambda: flat(), lambda: flat(False))
                    batch = None
                timed = {m: (_time(f, repeats), _time(g, repeats)) for m, (f, g) in modes.items()}
                mode = min(timed, key=lambda m: timed[m][0])
                us, us_kernel = timed[mode]
                us_batch = _time_batches(batch, repeats) if batch and method_batch else None
                key_bytes = B * ctx * (D + 4)
                cases.append({"op": "decode", "library": "DeepGEMM", "B": B, "ctx": ctx, "H": H, "D": D,
                              "block_size": block_size, "next_n": n, "clean": False, "us": us, "us_kernel": us_kernel,
                              "mode": mode, "us_modes": {m: v[0] for m, v in timed.items()}, "us_batch": us_batch,
                              "codes": codes,
                              "GBps": key_bytes / (us * 1e-6) / 1e9,
                              "tflops": 2 * H * D * _pairs_decode(B, ctx, n) / (us * 1e-6) / 1e12})
                print(f"decode B={B} ctx={ctx} H={H} n={n} ({mode}): {us:.1f} us ({us_kernel:.1f} without the schedule)"
                      + (f", back to back {us_batch:.1f} us" if us_batch else ""),
                      file=sys.stderr, flush=True)
        del kv
    json.dump({"library": "DeepGEMM", "device": torch.cuda.get_device_name(), "cases": cases}, sys.stdout, indent=1)


@main.command()
@click.option("--shapes", default="4096x32768,2048x65536,1024x131072,8192x8192,128x32768")
@click.option("--heads", default="64,32")
@click.option("--repeats", default=10)
def prefill(shapes, heads, repeats):
    cases = []
    for shape in shapes.split(","):
        M, N = (int(x) for x in shape.split("x"))
        k = torch.randn(N, D, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
        ks_ = torch.ones(N, device="cuda", dtype=torch.float32)
        start = torch.zeros(M, device="cuda", dtype=torch.int32)
        end = (N - M + 1 + torch.arange(M, device="cuda", dtype=torch.int32)).contiguous()
        pairs = sum(N - M + i + 1 for i in range(M))
        for H in (int(h) for h in heads.split(",")):
            q = torch.randn(M, H, D, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
            w = torch.randn(M, H, device="cuda", dtype=torch.float32)
            us = _time(lambda: deep_gemm.fp8_mqa_logits(q, (k, ks_), w, start, end, clean_logits=True), repeats)
            cases.append({"op": "prefill", "library": "DeepGEMM", "M": M, "N": N, "H": H, "D": D, "clean": True,
                          "us": us, "tflops": 2 * H * D * pairs / (us * 1e-6) / 1e12})
            print(f"prefill ({M}, {N}) H={H}: {us:.1f} us, {cases[-1]['tflops']:.0f} TFLOP/s", file=sys.stderr,
                  flush=True)
    json.dump({"library": "DeepGEMM", "device": torch.cuda.get_device_name(), "cases": cases}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
