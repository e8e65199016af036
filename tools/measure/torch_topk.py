"""hipindexer.topk_logits beside torch.topk on the same float32 logits, in one process on one CUDA device (torch
is this script's dependency, never the package's).

    python -m tools.measure.torch_topk [--rows 64x131072,128x32768] [--top-k 2048] [--repeats 10] > topk_torch.json

Each row's second half is -inf (the decode logits of a sequence half as long as max_model_len); the valid half is
standard normal. Both ops read the same torch tensor (hipindexer through __cuda_array_interface__, zero-copy) on
torch's current stream. Time: CUDA events around each call with a 256 MB memset queued before it (L2 flushed),
median of `repeats` after 3 warm-ups. torch.topk runs with sorted=False and sorted=True; hipindexer with the same
`sorted`. The check afterwards: the two index sets agree row by row where no tie straddles the k-th value.
"""
from __future__ import annotations

import json
import statistics
import sys

import click
import torch

import hipindexer


def _time(fn, repeats: int) -> float:
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


@click.command()
@click.option("--rows", default="64x131072,128x131072,128x32768,512x131072")
@click.option("--top-k", "top_k", default=2048)
@click.option("--repeats", default=10)
def main(rows, top_k, repeats):
    torch.manual_seed(0)
    cases = []
    for shape in rows.split(","):
        R, N = (int(x) for x in shape.split("x"))
        x = torch.randn(R, N, device="cuda", dtype=torch.float32)
        x[:, N // 2:] = float("-inf")
        out = torch.empty(R, top_k, device="cuda", dtype=torch.int32)
        for srt in (False, True):
            ours = _time(lambda: hipindexer.topk_logits(x, top_k, sorted=srt, out=out), repeats)
            theirs = _time(lambda: torch.topk(x, top_k, dim=1, sorted=srt), repeats)
            hipindexer.topk_logits(x, top_k, sorted=srt, out=out)
            ref = torch.topk(x, top_k, dim=1, sorted=srt).indices
            torch.cuda.synchronize()
            same = sum(set(out[r].tolist()) == set(ref[r].tolist()) for r in range(R))
            cases.append({"rows": R, "N": N, "top_k": top_k, "sorted": srt, "us": ours, "us_torch": theirs,
                          "speedup": theirs / ours, "rows_same_set": same,
                          "logits_GBps": R * N * 4 / (ours * 1e-6) / 1e9})
            print(f"{R}x{N} top_k {top_k} sorted={srt}: hipindexer {ours:.1f} us, torch.topk {theirs:.1f} us "
                  f"({theirs / ours:.2f}x); same set in {same}/{R} rows", file=sys.stderr, flush=True)
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": cases}, sys.stdout,
              indent=1)


if __name__ == "__main__":
    main()
