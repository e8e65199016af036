"""Time and peak memory of the numpy reference on the real prefill chunk shapes.

Each shape runs in a fresh subprocess so its peak RSS is its own.
    python -m tools.measure.reference_cost [--shapes 1024x131072,...] [--heads 64] [--json]
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]  # the child imports this module and hipindexer from the checkout

SHAPES = ((4096, 32768), (2048, 65536), (1024, 131072))


def measure(M: int, N: int, H: int, D: int = 128, mode: str = "causal") -> dict:
    """Run the reference once in this process; return seconds and peak RSS."""
    import numpy as np

    from hipindexer import reference, testing
    rng = np.random.default_rng(0)
    inp = testing.prefill_inputs(rng, M, N, H, D, mode)
    t0 = time.perf_counter()
    out = reference.fp8_mqa_logits(*inp.args())
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"M": M, "N": N, "H": H, "D": D, "mode": mode, "seconds": round(secs, 2),
            "peak_rss_bytes": peak, "finite": int(np.isfinite(out).sum())}


def measure_in_subprocess(M: int, N: int, H: int, D: int = 128) -> dict:
    code = f"import json, tools.measure.reference_cost as c; print(json.dumps(c.measure({M}, {N}, {H}, {D})))"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


@click.command()
@click.option("--shapes", default=",".join(f"{m}x{n}" for m, n in SHAPES))
@click.option("--heads", default=64)
@click.option("--json", "as_json", is_flag=True)
def main(shapes: str, heads: int, as_json: bool) -> None:
    rows = []
    for s in shapes.split(","):
        M, N = (int(x) for x in s.split("x"))
        r = measure_in_subprocess(M, N, heads)
        rows.append(r)
        if not as_json:
            click.echo(f"M={M:6d} N={N:7d} H={heads}: {r['seconds']:8.2f} s, "
                       f"peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB")
    if as_json:
        click.echo(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
