#!/usr/bin/env python3
"""Roofline estimate of a paged decode launch on an MI355X, from a hot loop's instruction mix. ESTIMATES, not
measurements: no MI355X has run this project's kernels.

    python -m tools.support.roofline                 # calibration on aiter's HIP decode kernel, then our kernels' rows
    python -m tools.support.roofline --json

The model, per launch (docs/gfx950.md, "Estimated decode times"):
  a wave runs `iterations` loop iterations (a tile of keys x rows); each costs the wave `mfma` + `valu` cycles of
  issue (one wave's MFMA and VALU work do not overlap each other) and waits `latency` cycles for its loads unless
  they were issued `prefetch` iterations ahead. A SIMD holds `waves` of them: its MFMA pipe and VALU pipe are
  shared (each iteration needs max(mfma, valu) of the busier pipe), and its waves hide each other's latency.
  Per SIMD, iteration time = max(max(mfma, valu), (latency / (1 + prefetch) + mfma + valu) / waves); the
  launch takes the busiest SIMD's iterations at that rate, plus `startup` latencies per workgroup (lengths,
  Q, the first loads), and never less than its HBM bytes at 8 TB/s; plus a fixed launch overhead.
The two free figures (loaded latency, launch overhead) are fitted on aiter's hand-written HIP decode kernel
(aiter pull request 5047, compiled here with the same clang for its ISA figures), against the MI355X times its
authors published; the fit must land within 30% on at least four rows before it estimates ours.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass

# MI355X (docs/gfx950.md)
HBM_BYTES_PER_S = 8e12
CUS = 256
SIMDS = 4 * CUS
CLOCK_HZ = 2.4e9
FP8_FLOP_PER_CLK_CU = 8192
D = 128
KEY_BYTES = D + 4  # key + scale


@dataclass(frozen=True)
class Launch:
    """One decode launch as the model sees it."""
    waves: int               # waves in the grid
    waves_per_group: int     # waves of one workgroup
    iterations: float        # loop iterations of the busiest wave
    mfma: float              # cycles per iteration, per wave
    valu: float
    occupancy: float         # waves a SIMD can hold (registers, LDS)
    prefetch: int            # iterations of loads issued ahead of their use
    chain: int               # loads an iteration waits for one after another (an address from a load)
    startup: float           # latencies a workgroup waits before its loop (lengths, Q and weights, first loads)
    hbm_bytes: float         # bytes from and to HBM
    flops: float             # fp8 FLOPs of the MFMAs (for the compute floor)


@dataclass(frozen=True)
class Fit:
    latency_cycles: float = 3600.0   # loaded HBM latency (1.5 us)
    overhead_us: float = 2.0         # launch and drain


@dataclass
class Estimate:
    us: float
    bound: str                # what the estimate's largest term is
    issue_us: float
    latency_us: float
    memory_us: float
    compute_floor_us: float
    memory_floor_us: float


def estimate(x: Launch, fit: Fit = Fit()) -> Estimate:
    """The launch's time: its busiest SIMD's rounds of resident waves, never less than its HBM traffic."""
    rounds = max(1, math.ceil(x.waves / (SIMDS * x.occupancy)))      # grids larger than what is resident
    w = min(x.occupancy, max(1.0, x.waves / SIMDS))                     # waves sharing a SIMD
    pipe = max(x.mfma, x.valu)                                          # the busier shared pipe, per iteration
    serial = x.chain * fit.latency_cycles / (1 + x.prefetch) + x.mfma + x.valu  # one wave's iteration, alone
    per_round = x.iterations * max(serial, w * pipe) + x.startup * fit.latency_cycles
    latency_us = rounds * per_round / CLOCK_HZ * 1e6
    issue_us = rounds * x.iterations * w * pipe / CLOCK_HZ * 1e6
    memory_us = x.hbm_bytes / HBM_BYTES_PER_S * 1e6
    compute_floor = x.flops / (FP8_FLOP_PER_CLK_CU * CUS * CLOCK_HZ) * 1e6
    bound = "memory" if memory_us >= latency_us else ("issue" if w * pipe >= serial else "latency")
    return Estimate(max(latency_us, memory_us) + fit.overhead_us, bound, issue_us, latency_us, memory_us,
                    compute_floor, memory_us)


# ------------------------------------------------------------------ aiter's HIP decode kernel (calibration)
# Measured times (us, MI355X) from aiter pull request 5047's table: H = 32, D = 128; (B, next_n, context,
# block_size) -> HIP us. block_size 64 is the preshuffled cache.
AITER_HIP_ROWS = [
    (1, 2, 32768, 1, 5.4), (1, 6, 131072, 1, 14.3), (4, 2, 32768, 1, 10.2), (4, 6, 131072, 1, 40.2),
    (16, 2, 32768, 1, 29.2), (16, 6, 32768, 1, 46.9), (16, 6, 131072, 1, 212.7), (64, 2, 131072, 1, 594.0),
    (64, 6, 131072, 1, 982.8), (1, 2, 32768, 64, 4.3), (4, 6, 131072, 64, 27.6), (16, 6, 32768, 64, 32.7),
    (16, 6, 131072, 64, 141.2), (64, 6, 8192, 64, 32.5), (64, 6, 131072, 64, 551.7),
]
# Its tile loop (32 keys x R rows per wave iteration), from its source compiled here with this project's clang
# (gfx950, -O3 -fno-honor-nans) and read by tools/support/isa_report.py: (waves, chunk, block_size, R) ->
# (occupancy, MFMA cycles, VALU cycles) per iteration. No register prefetch of K (prefetch 0).
AITER_HIP_LOOPS = {
    (4, 256, 1, 1): (7, 128, 348), (8, 128, 1, 2): (4, 256, 512), (8, 256, 1, 2): (4, 256, 512),
    (4, 64, 1, 3): (3, 384, 668), (4, 64, 1, 2): (4, 256, 512), (4, 256, 64, 1): (7, 128, 436),
    (4, 64, 64, 3): (3, 384, 756),
}


def aiter_hip_config(B: int, next_n: int, max_model_len: int, cus: int = CUS) -> tuple:
    """Its host heuristic's (waves per block, chunk, rows per block R, split): thresholds on B * max_model_len
    as its pull request states them."""
    tot = B * max_model_len
    R = min(next_n, 1 if tot < 90000 else (2 if tot < 280000 else 3))
    nw = 8 if 80000 <= tot < 280000 else 4
    chunk = (64 if tot >= 400000 else 128) if max_model_len >= 50000 else (256 if tot < 280000 else 64)
    groups = -(-next_n // R)
    split = max(1, min(-(-max_model_len // chunk), -(-2 * cus // (B * groups))))
    return nw, chunk, R, split


def aiter_hip_launch(B: int, next_n: int, ctx: int, block_size: int) -> Launch:
    nw, chunk, R, split = aiter_hip_config(B, next_n, ctx)
    occ, mfma, valu = AITER_HIP_LOOPS[(nw, chunk, block_size, R)]
    groups = -(-next_n // R)
    blocks = B * split * groups
    chunks = -(-ctx // chunk)
    tiles_per_split = -(-chunks // split) * chunk // 32
    iterations = -(-tiles_per_split // nw)
    kv = B * ctx * KEY_BYTES * groups                      # K read once per row group
    table = B * ctx * 4 * (2 if block_size == 1 else 1) * groups
    out = B * next_n * ctx * 4                             # valid positions only (the caller pre-fills -inf)
    # block_size 1: each tile's scale address is a table entry loaded in that tile (two loads in a row); the
    # keys' own entries come one tile ahead. block_size 64: one entry per tile, one tile ahead.
    chain = 2 if block_size == 1 else 1
    return Launch(blocks * nw, nw, iterations, mfma, valu, occ, 0, chain, 2, kv + table + out,
                  2.0 * B * next_n * ctx * 32 * D)


def calibrate(rows=AITER_HIP_ROWS) -> tuple[Fit, list]:
    """The (latency, overhead) that puts the most rows within 30%, then the least mean |log error|."""
    best = None
    for lat in range(1200, 9601, 200):
        for ov in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0):
            fit = Fit(float(lat), ov)
            errs = [estimate(aiter_hip_launch(*r[:4]), fit).us / r[4] for r in rows]
            within = sum(0.7 <= e <= 1.3 for e in errs)
            score = (within, -sum(abs(math.log(e)) for e in errs))
            if best is None or score > best[0]:
                best = (score, fit, errs)
    return best[1], best[2]


# ------------------------------------------------------------------ this project's MFMA decode kernels

def ours_launch(figures: dict, B: int, next_n: int, ctx: int, block_size: int, H: int,
                max_model_len: int | None = None) -> Launch:
    """A launch of paged_mqa_logits_mfma(_bs1) as plan_decode makes it, from its ISA report's page-loop
    figures (tools/support/isa_report.py DecodeFigures as a dict): every live row per 64-key page, K read once."""
    from hipindexer.plan import plan_decode
    from hipindexer.plan import TARGETS
    mml = max_model_len or ctx
    plan = plan_decode(B, next_n, H, D, block_size, mml, TARGETS["gfx950"], preshuffle=block_size % 16 == 0)
    waves_per_unit = plan.block // 64
    pages = B * -(-ctx // 64)
    iterations = -(-pages // (plan.units * waves_per_unit))
    mfma = next_n * figures["row_mfma_cycles"]
    valu = figures["page_valu_cycles"] + next_n * figures["row_valu_cycles"]
    q = plan.units * next_n * H * D                         # each unit stages its sequence's rows (mostly L2)
    hbm = B * ctx * KEY_BYTES + B * next_n * mml * 4 + q    # keys once; every output column (the fill too)
    # a page's keys are loaded while the page before is computed (prefetch 1); its table entries come a page
    # before that (chain 1). A unit starts after its lengths, then its rows' Q with its first page's loads.
    return Launch(plan.units * waves_per_unit, waves_per_unit, iterations, mfma, valu,
                  figures["waves_per_simd_resident"], 1, 1, 3, hbm, 2.0 * B * next_n * ctx * H * D)


# The issue's estimate goals (us) for our kernels: (H, B, next_n, context, block_size, goal).
GOALS = [
    (32, 64, 6, 131072, 64, 205.0), (32, 16, 6, 32768, 64, 15.0), (32, 1, 2, 32768, 64, 4.0),
    (64, 64, 6, 131072, 64, 1.25 * max(165.0, 163.0)),
]


def goal_estimates(figures: dict, fit: Fit | None = None) -> list[dict]:
    """Our estimated times at the issue's goal rows, from page-loop figures keyed by variant (DecodeFigures as
    dicts), with the calibrated fit unless one is given."""
    fit = fit or calibrate()[0]
    out = []
    for H, B, n, ctx, bs, goal in GOALS:
        key = f"paged_mqa_logits_mfma.HX_HEADS-{H}"
        if key not in figures:
            continue
        est = estimate(ours_launch(figures[key], B, n, ctx, bs, H), fit)
        out.append({"H": H, "B": B, "next_n": n, "context": ctx, "block_size": bs, "estimate_us": round(est.us, 1),
                    "goal_us": round(goal, 1), "bound": est.bound, "compute_floor_us": round(est.compute_floor_us, 1),
                    "memory_floor_us": round(est.memory_floor_us, 1)})
    return out


def format_goals(rows: list[dict]) -> str:
    lines = [f"{'H':>3} {'B':>3} {'n':>2} {'ctx':>7} {'bs':>3} {'estimate us':>11} {'goal us':>8}  bound    "
             f"compute/memory floor us"]
    for o in rows:
        lines.append(f"{o['H']:>3} {o['B']:>3} {o['next_n']:>2} {o['context']:>7} {o['block_size']:>3} "
                     f"{o['estimate_us']:>11} {o['goal_us']:>8}  {o['bound']:<8} {o['compute_floor_us']}/"
                     f"{o['memory_floor_us']}")
    return "\n".join(lines)


def our_figures() -> dict:
    """The page-loop figures of each MFMA decode variant, from the ISA report of the built kernels."""
    from tools.support import isa_report as rep  # on use: isa_report imports this module
    out = {}
    for r in rep.manifest_reports():
        if r.decode is not None:
            out[r.source] = asdict(r.decode)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.support.roofline", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    fit, errs = calibrate()
    cal = []
    for r, e in zip(AITER_HIP_ROWS, errs):
        est = estimate(aiter_hip_launch(*r[:4]), fit)
        cal.append({"B": r[0], "next_n": r[1], "context": r[2], "block_size": r[3], "measured_us": r[4],
                    "estimate_us": round(est.us, 1), "ratio": round(e, 2), "bound": est.bound,
                    "config": aiter_hip_config(r[0], r[1], r[2])})
    within = sum(0.7 <= c["ratio"] <= 1.3 for c in cal)
    ours = goal_estimates(our_figures(), fit)
    doc = {"note": "estimates from a roofline model, not measurements", "fit": asdict(fit),
           "calibration_rows_within_30pct": within, "calibration": cal, "ours": ours}
    if a.json:
        print(json.dumps(doc, indent=1))
        return 0 if within >= 4 else 1
    print(f"fit: loaded latency {fit.latency_cycles:.0f} cycles ({fit.latency_cycles / CLOCK_HZ * 1e6:.2f} us), "
          f"launch overhead {fit.overhead_us} us; {within} of {len(cal)} aiter rows within 30%")
    print(f"{'B':>3} {'n':>2} {'ctx':>7} {'bs':>3} {'measured':>9} {'estimate':>9} {'ratio':>6}  bound   config (waves, chunk, R, split)")
    for c in cal:
        print(f"{c['B']:>3} {c['next_n']:>2} {c['context']:>7} {c['block_size']:>3} {c['measured_us']:>9} "
              f"{c['estimate_us']:>9} {c['ratio']:>6}  {c['bound']:<7} {c['config']}")
    print("\nours (ESTIMATES, not measurements):\n" + format_goals(ours))
    return 0 if within >= 4 else 1


if __name__ == "__main__":
    sys.exit(main())
