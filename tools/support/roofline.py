#!/usr/bin/env python3
"""Roofline estimates of paged decode and prefill launches on an MI355X, from a hot loop's instruction mix.
ESTIMATES, not measurements: no MI355X has run this project's kernels.

    python -m tools.support.roofline                 # the calibration on aiter's HIP decode kernel
    python -m tools.support.roofline --json
    python -m tools.support.isa_report               # our built kernels' loops, with their estimated times

The prefill model (prefill_estimate, docs/gfx950.md "The prefill kernel's estimated times") reuses the decode
fit's latency and launch overhead and adds the assumptions of PrefillTerms; it is not fitted.

The decode model, per launch (docs/gfx950.md, "Its ISA, and estimated times"):
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


# ------------------------------------------------------------------ the prefill MFMA kernel (mqa_logits_mfma)
# What the prefill model adds to the decode fit (latency, overhead), none of it fitted: no prefill kernel with
# published MI355X times has an ISA we can compile here, so these stay assumptions until an MI355X runs.
@dataclass(frozen=True)
class PrefillTerms:
    lds_latency_cycles: float = 128.0     # a wave64 ds_read's round trip (issue to data in VGPRs)
    store_ack_cycles: float = 500.0       # a vector store's acknowledgement from the L2 (what vmcnt(0) waits for)
    lds_bytes_per_clk_cu: float = 128.0   # LDS bandwidth of a CU, reads and DMA writes together
    l2_bytes_per_clk_cu: float = 64.0     # what one CU can pull from the L2 per clock


PREFILL_WINDOW_MODES = ("causal", "full")


def wave_timeline(events: list, load_latency: float, terms: PrefillTerms = PrefillTerms()) -> dict:
    """One wave alone running the loop's timeline (isa_report.loop_events) twice in order, the second pass from
    the first's outstanding operations: every event costs its issue, a wait stalls until the operations it
    drains have completed (vector loads after `load_latency`, stores after `store_ack_cycles`, LDS after
    `lds_latency_cycles`; each counter drains in issue order). Returns the second pass's cycles and stalls."""
    from collections import deque
    vm, lgkm = deque(), deque()
    t = 0.0
    out = {}
    for rnd in range(2):
        t0, stall_vm, stall_lds = t, 0.0, 0.0
        for e in events:
            k = e[0]
            if k == "busy":
                t += e[1]
                continue
            if k == "wait":
                for q, n, which in ((vm, e[1], "vm"), (lgkm, e[2], "lds")):
                    while n >= 0 and len(q) > n:
                        done = q.popleft()
                        if done > t:
                            if which == "vm":
                                stall_vm += done - t
                            else:
                                stall_lds += done - t
                            t = done
            elif k == "lds":
                lgkm.append(t + terms.lds_latency_cycles)
            elif k == "load":
                vm.append(t + load_latency)
            elif k == "store":
                vm.append(t + terms.store_ack_cycles)
            t += 4  # the event's own issue slot
        out = {"cycles": t - t0, "vm_stall": stall_vm, "lds_stall": stall_lds}
    return out


def prefill_windows(M: int, N: int, mode: str) -> tuple[list, list]:
    """(ks, ke) per row: "causal" as the bench pins it (one request, row m sees keys [0, N - M + m + 1)),
    "full" every key."""
    if mode == "causal":
        return [0] * M, [N - M + m + 1 for m in range(M)]
    if mode == "full":
        return [0] * M, [N] * M
    raise ValueError(f"mode: expected one of {PREFILL_WINDOW_MODES}, got {mode!r}")


def _split_part(t0: int, t1: int, parts: int, s: int) -> tuple[int, int]:
    n = max(0, t1 - t0)  # hx_split_part (hsaco_src/common/index_math.h)
    return t0 + s * n // parts, t0 + (s + 1) * n // parts


def _quanta_part(lo: int, hi: int, tile: int, parts: int, s: int) -> tuple[int, int]:
    """Keys [lo, hi)'s part s in whole quanta of tiles (hx_prefill_split_quanta, hsaco_src/common/index_math.h)."""
    t0, t1 = lo // tile, -(-hi // tile)
    q = -(-(t1 - t0) // parts) if t1 > t0 else 0
    ta = min(t0 + s * q, t1)
    tb = min(ta + q, t1)
    wlo = min(max(lo, ta * tile), hi)
    return wlo, max(min(hi, tb * tile), wlo)


def prefill_units(M: int, N: int, ks: list, ke: list, plan) -> list[dict]:
    """The plan's work units in dispatch order (grid x, the row blocks, fastest; reverse_rows maps block x to
    the last row block first), each with its tiles, the -inf fill of each of its rows, and whether the first
    chunk the kernel stages before reading the windows (its part of the whole key range) is the part's own
    ("guessed"), by the kernel's own arithmetic (hx_clamp_window, hx_prefill_split_quanta)."""
    units = []
    for y in range(plan.split):
        for x in range(plan.row_blocks):
            rb = plan.row_blocks - 1 - x if plan.reverse_rows else x
            m0, m1 = rb * plan.rows_per_block, min(M, (rb + 1) * plan.rows_per_block)
            lo, hi = N, 0
            for m in range(m0, m1):
                a = min(max(ks[m], 0), N)
                b = max(min(ke[m], N), a)
                if b > a:
                    lo, hi = min(lo, a), max(hi, b)
            if hi <= lo:
                lo = hi = 0
            wlo, whi = _quanta_part(lo, hi, plan.tile, plan.split, y)
            fl, fh = _split_part(0, lo, plan.split, y), _split_part(hi, N, plan.split, y)
            glo, ghi = _quanta_part(0, N, plan.tile, plan.split, y)
            units.append({"tiles": -(-(whi - wlo) // 32), "fill": (fl[1] - fl[0]) + (fh[1] - fh[0]),
                          "guessed": ghi > glo and whi > wlo and glo == wlo})
    return units


def prefill_tile_cycles(f: dict, blocks: int, load_latency: float, terms: PrefillTerms = PrefillTerms()) -> dict:
    """Cycles per tile of every wave of a CU holding `blocks` workgroups (one wave of each on every SIMD), and
    each term's own figure: the wave's timeline ("wave": its issue, s_nops and waits), the SIMD's shared MFMA
    and VALU pipes, the CU's LDS traffic and its pull from the L2."""
    tl = wave_timeline(f["events"], load_latency, terms)
    per = f["tiles_per_iteration"]
    waves_cu = blocks * f["waves_per_block"]
    terms_c = {
        "wave": tl["cycles"] / per,
        "mfma": blocks * f["mfma_cycles"],
        "valu": blocks * f["valu_cycles"],
        "lds": waves_cu * (f["lds_read_bytes"] + f["dma_bytes"]) / terms.lds_bytes_per_clk_cu,
        "l2": waves_cu * (f["dma_bytes"] + f["store_bytes"] / 2) / terms.l2_bytes_per_clk_cu,
    }
    bound = max(terms_c, key=terms_c.get)
    return {"cycles": terms_c[bound], "bound": bound, "terms": terms_c,
            "vm_stall": tl["vm_stall"] / per, "lds_stall": tl["lds_stall"] / per}


@dataclass
class PrefillEstimate:
    us: float
    bound: str                 # the estimate's largest term
    tflops: float              # 2 H D per valid (row, key) pair over `us`
    loop_us: float             # the simulated launch (unit starts, tiles, the fill, the last round)
    memory_floor_us: float     # HBM bytes at 8 TB/s
    compute_floor_us: float    # the valid pairs' FLOPs at the fp8 dense peak
    mfma_us: float             # the computed tiles' MFMA cycles with every SIMD busy (tile rounding included)
    tile_cycles: float         # per tile at the resident blocks per CU
    tile_bound: str
    start_share: float         # of the units' time: their starts (latencies, -inf fill)
    grid: tuple
    units: int
    tiles_per_unit: tuple      # min, max


def prefill_estimate(f: dict, M: int, N: int, H: int, clean: bool, mode: str = "causal", fit: Fit | None = None,
                     terms: PrefillTerms = PrefillTerms()) -> PrefillEstimate:
    """An estimate of one fp8_mqa_logits launch of mqa_logits_mfma on an MI355X, from its key loop's figures
    (isa_report.PrefillFigures as a dict), the grid plan_prefill picks for gfx950 and the windows of `mode`.

    Units are dispatched in grid order to the first CU with a free workgroup slot (blocks_per_cu of them).
    A unit first waits one loaded latency where its first K chunk, staged before the windows are read, is its
    part's own (its windows', Q's, weights' and first chunk's loads in flight together); otherwise two (its
    windows; then its first K chunk staged again, with its share of the -inf fill issued meanwhile). It then runs
    its tiles at prefill_tile_cycles for the workgroups that CU holds at that moment. The launch is the last unit's
    end, never less than its HBM bytes at 8 TB/s, plus the launch overhead of the decode fit."""
    import heapq
    from hipindexer.plan import TARGETS, plan_prefill
    fit = fit or calibrate()[0]
    plan = plan_prefill(M, N, H, D, TARGETS["gfx950"])
    if plan.kernel != "mqa_logits_mfma":
        raise ValueError(f"plan_prefill picks {plan.kernel} at H={H}, not mqa_logits_mfma")
    ks, ke = prefill_windows(M, N, mode)
    units = prefill_units(M, N, ks, ke, plan)
    slots = f["blocks_per_cu"]
    per_b = {b: prefill_tile_cycles(f, b, fit.latency_cycles, terms) for b in range(1, slots + 1)}
    start = [(1 if u["guessed"] else 2) * fit.latency_cycles + 2 * u["fill"] * f["fill_cycles_per_element"]
             for u in units]
    # per CU: running units as [start cycles left, tiles left, index]; rates change when the CU's count does
    cus = [[] for _ in range(CUS)]
    last = [0.0] * CUS
    pending = list(range(len(units)))[::-1]
    heap, version = [], [0] * CUS

    def next_event(c: int) -> float:
        run = cus[c]
        if not run:
            return math.inf
        tc = per_b[len(run)]["cycles"]
        return last[c] + min(r[0] if r[0] > 0 else r[1] * tc for r in run)

    def advance(c: int, t: float) -> None:
        run = cus[c]
        if run:
            tc = per_b[len(run)]["cycles"]
            dt = t - last[c]
            for r in run:
                d = min(dt, r[0])
                r[0] -= d
                if r[0] < 1e-6:  # rounding leaves a start a hair short; t would then never move past it
                    r[0] = 0.0
                r[1] = max(0.0, r[1] - (dt - d) / tc)
        last[c] = t
        cus[c] = [r for r in run if r[0] > 1e-9 or r[1] > 1e-9]

    for _ in range(slots):  # the first units go out round-robin over the CUs
        for c in range(CUS):
            if pending:
                i = pending.pop()
                cus[c].append([start[i], units[i]["tiles"], i])
    for c in range(CUS):
        heapq.heappush(heap, (next_event(c), c, 0))
    end = 0.0
    while heap:
        t, c, v = heapq.heappop(heap)
        if v != version[c] or t == math.inf:
            continue
        advance(c, t)
        while pending and len(cus[c]) < slots:
            i = pending.pop()
            cus[c].append([start[i], units[i]["tiles"], i])
        end = max(end, t)
        version[c] += 1
        heapq.heappush(heap, (next_event(c), c, version[c]))
    loop_us = end / CLOCK_HZ * 1e6
    valid = sum(max(0, min(e, N) - min(max(s_, 0), N)) for s_, e in zip(ks, ke))
    tiles = sum(u["tiles"] for u in units)
    flops = 2.0 * H * D * valid
    out_bytes = 4 * (M * N if clean else valid)
    hbm = M * H * D + N * (D + 4) + M * H * 4 + 8 * M + out_bytes  # each input read once, the logits written once
    memory_us = hbm / HBM_BYTES_PER_S * 1e6
    compute_us = flops / (FP8_FLOP_PER_CLK_CU * CUS * CLOCK_HZ) * 1e6
    mfma_us = tiles * f["mfma_cycles"] / SIMDS / CLOCK_HZ * 1e6
    full = per_b[slots]
    work = sum(s_ + u["tiles"] * full["cycles"] for s_, u in zip(start, units))
    start_share = sum(start) / work if work else 0.0
    if memory_us >= loop_us:
        bound = "memory"
    elif start_share > 0.5:
        bound = "unit start"
    else:
        bound = full["bound"]
    us = max(loop_us, memory_us) + fit.overhead_us
    return PrefillEstimate(us, bound, flops / us * 1e-6, loop_us, memory_us, compute_us, mfma_us, full["cycles"],
                           full["bound"], start_share, plan.grid, plan.units,
                           (min(u["tiles"] for u in units), max(u["tiles"] for u in units)))


# The prefill rows the table of docs/gfx950.md holds: the bench's causal shapes (docs/benchmarks.md) at H = 64 and
# 32, clean_logits both ways, and the shapes aiter published MI355X figures for.
BENCH_PREFILL_SHAPES = [(4096, 32768), (2048, 65536), (1024, 131072), (8192, 8192), (128, 32768)]
LARGE_PREFILL_SHAPES = BENCH_PREFILL_SHAPES[:3]   # the three 2^27-position chunks
# aiter pull request 5216 (Gluon prefill, MI355X): one causal request, M = 8192, N = 32768, D = 128: H -> TFLOP/s
AITER_GLUON_TFLOPS = {64: 2317.0, 32: 1866.0}
# aiter pull request 5434 (Triton/Gluon, MI355X), H = 32, D = 128, clean_logits: (M, N) -> us. Its windows are
# not stated, so our estimate is given causal and over every key.
AITER_TABLE_US = {(1024, 4096): 32.4, (1024, 16384): 117.6, (1024, 65664): 558.2, (1024, 131072): 1072.3,
                  (2048, 4096): 53.2, (2048, 16384): 223.6, (2048, 65664): 1084.2}
PREFILL_TFLOPS_GOAL_H64 = 2800.0   # 1.2 x aiter's 2317
PREFILL_OVER_AITER_GOAL = 1.2      # H = 32: aiter's time over ours
SMALL_OVER_LARGE_GOAL = 0.8        # (128, 32768) against the large shapes' best rate


def valid_pairs(M: int, N: int, mode: str) -> int:
    ks, ke = prefill_windows(M, N, mode)
    return sum(max(0, min(e, N) - min(max(s_, 0), N)) for s_, e in zip(ks, ke))


def prefill_rows(figures: dict, fit: Fit | None = None, terms: PrefillTerms = PrefillTerms()) -> list[dict]:
    """Our estimates at every row of the table, from the prefill loop figures keyed by variant
    (isa_report.PrefillFigures as dicts; a variant missing from `figures` gives no rows), each with its goal
    and whether the estimate meets it."""
    fit = fit or calibrate()[0]
    rows = []

    def one(src, H, M, N, clean, mode, aiter_us=None):
        f = figures.get(f"mqa_logits_mfma.HX_HEADS-{H}")
        if f is None:
            return None
        e = prefill_estimate(f, M, N, H, clean, mode, fit, terms)
        row = {"source": src, "H": H, "M": M, "N": N, "clean": clean, "windows": mode,
               "estimate_us": round(e.us, 1), "tflops": round(e.tflops), "bound": e.bound, "tile_bound": e.tile_bound,
               "tile_cycles": round(e.tile_cycles, 1), "grid": list(e.grid), "tiles_per_unit": list(e.tiles_per_unit),
               "memory_floor_us": round(e.memory_floor_us, 1), "compute_floor_us": round(e.compute_floor_us, 1),
               "aiter_us": aiter_us, "goal": None, "meets": None}
        if aiter_us is not None:
            row["over_aiter"] = round(aiter_us / e.us, 2)
        rows.append(row)
        return row
    for H in (64, 32):
        for M, N in BENCH_PREFILL_SHAPES:
            for clean in (True, False):
                one("bench", H, M, N, clean, "causal")
        M, N = 8192, 32768
        flops = 2.0 * H * D * valid_pairs(M, N, "causal")
        one("aiter 5216", H, M, N, True, "causal", round(flops / (AITER_GLUON_TFLOPS[H] * 1e12) * 1e6, 1))
    for (M, N), us in AITER_TABLE_US.items():
        for mode in PREFILL_WINDOW_MODES:
            one("aiter 5434", 32, M, N, True, mode, us)
    large = {}
    for r in rows:
        if r["source"] == "bench" and (r["M"], r["N"]) in LARGE_PREFILL_SHAPES:
            key = (r["H"], r["clean"])
            large[key] = max(large.get(key, 0), r["tflops"])
    large_free = {}  # the same best rate with the launch overhead left out of every row
    for r in rows:
        if r["source"] == "bench" and (r["M"], r["N"]) in LARGE_PREFILL_SHAPES:
            key = (r["H"], r["clean"])
            large_free[key] = max(large_free.get(key, 0), _tflops(r, r["estimate_us"] - fit.overhead_us))
    for r in rows:
        if (r["M"], r["N"]) == (128, 32768):  # the small chunk's own goal, at either H
            ref = large[(r["H"], r["clean"])]
            r["of_large_rate"] = round(r["tflops"] / ref, 2)
            r["goal"] = f">= {SMALL_OVER_LARGE_GOAL} x {ref} TFLOP/s"
            r["meets"] = r["of_large_rate"] >= SMALL_OVER_LARGE_GOAL
            # What bounds it: no launch of these units can beat its FLOPs at the peak, plus one loaded latency
            # (every unit of the one round waits for its first keys), plus the launch overhead.
            floor_us = r["compute_floor_us"] + fit.latency_cycles / CLOCK_HZ * 1e6 + fit.overhead_us
            r["fixed_floor_us"] = round(floor_us, 1)
            r["fixed_floor_of_large_rate"] = round(_tflops(r, floor_us) / ref, 2)
            r["launch_free_of_large_rate"] = round(
                _tflops(r, r["estimate_us"] - fit.overhead_us) / large_free[(r["H"], r["clean"])], 2)
        elif r["H"] == 64:
            r["goal"] = f">= {PREFILL_TFLOPS_GOAL_H64:.0f} TFLOP/s"
            r["meets"] = r["tflops"] >= PREFILL_TFLOPS_GOAL_H64
        elif r["aiter_us"] is not None:
            r["goal"] = f"<= {r['aiter_us'] / PREFILL_OVER_AITER_GOAL:.1f} us"
            r["meets"] = r["over_aiter"] >= PREFILL_OVER_AITER_GOAL
    return rows


def _tflops(row: dict, us: float) -> float:
    return 2.0 * row["H"] * D * valid_pairs(row["M"], row["N"], row["windows"]) / us * 1e-6


def format_prefill(rows: list[dict]) -> str:
    lines = [f"{'source':<10} {'H':>2} {'M':>5} {'N':>6} {'clean':>5} {'windows':<7} {'estimate us':>11} "
             f"{'TFLOP/s':>7} {'aiter us':>8}  bound      goal"]
    for r in rows:
        goal = "" if r["goal"] is None else f"{r['goal']}: {'met' if r['meets'] else 'MISSED'}"
        lines.append(f"{r['source']:<10} {r['H']:>2} {r['M']:>5} {r['N']:>6} {str(r['clean']):>5} {r['windows']:<7} "
                     f"{r['estimate_us']:>11} {r['tflops']:>7} {r['aiter_us'] or '-':>8}  {r['bound']:<10} {goal}")
    for r in rows:
        if "fixed_floor_us" in r:
            lines.append(f"H = {r['H']} ({r['M']}, {r['N']}) clean {r['clean']}: {r['of_large_rate']} of the large rate; "
                         f"no kernel beats {r['fixed_floor_us']} us (the peak, one loaded latency, the launch "
                         f"overhead) = {r['fixed_floor_of_large_rate']}; without the launch overhead "
                         f"{r['launch_free_of_large_rate']}")
    return "\n".join(lines)


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
    doc = {"note": "estimates from a roofline model, not measurements", "fit": asdict(fit),
           "prefill_terms": asdict(PrefillTerms()), "calibration_rows_within_30pct": within, "calibration": cal}
    if a.json:
        print(json.dumps(doc, indent=1))
        return 0 if within >= 4 else 1
    print(f"fit: loaded latency {fit.latency_cycles:.0f} cycles ({fit.latency_cycles / CLOCK_HZ * 1e6:.2f} us), "
          f"launch overhead {fit.overhead_us} us; {within} of {len(cal)} aiter rows within 30%")
    print(f"{'B':>3} {'n':>2} {'ctx':>7} {'bs':>3} {'measured':>9} {'estimate':>9} {'ratio':>6}  bound   config (waves, chunk, R, split)")
    for c in cal:
        print(f"{c['B']:>3} {c['next_n']:>2} {c['context']:>7} {c['block_size']:>3} {c['measured_us']:>9} "
              f"{c['estimate_us']:>9} {c['ratio']:>6}  {c['bound']:<7} {c['config']}")
    print("\nour kernels' estimated times: python -m tools.support.isa_report (or hipindexer info --isa)")
    return 0 if within >= 4 else 1


if __name__ == "__main__":
    sys.exit(main())
