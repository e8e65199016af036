"""The fused prefill top-k's floors and cut, on the CPU: which rows a call would recompute, and how often.

    python -m tools.measure.cut_model --shapes 4096x32768 --heads 64,32 --recent 3072 --steps 16,32 --sigmas 0,4

For each case of tools/measure/prefill_topk_bench.py (the same inputs: its generator, its seed, its order of cases,
so that `--shapes`, `--heads` and `--recent` as given to the bench give the bench's data), the exact logits in numpy
float32, then for each sample step and spread (HX_CUT_SIGMAS):
- `replay`: the kernels' own steps on those logits: the sample of every step-th key, the floor (floor_of), the
  floors' cut (floors_cut), and each row's keys at the floor by part against its region: the rows the finish would
  recompute whole (fewer than top_k at the floor) and those with a part past its region;
- `expected`: for key splits of up to four parts (the tightest regions), the mean number of rows a call has with a
  part past its region, over the sample's chance: the samples at the floor split among the parts binomially
  (multinomially past two) by the row's own keys there, and the keys at the floor spread about r step by a normal
  of sd sqrt(r) step. `--min-parts` models the filter's key split at that many parts or more.

floor_of and floors_cut are the kernels' arithmetic (generic/prefill_topk_floor.hip, common/topk_floor.h) in numpy;
tests/emu/prefill_topk_cases.py checks the floors launch against them, entry for entry. The logits are not the
device's (they are exact fp32 sums, the device's tensor-core sums differ in their last bits), so a row at the edge
may come out either way; the rest is the same arithmetic.
"""
from __future__ import annotations

import json
import math

import click
import numpy as np

from hipindexer.ops import prefill_topk_fused
from hipindexer.plan import TARGETS

BINS = 2048  # HX_FLOOR_BINS
PAD = 8      # HX_CUT_PAD


def order_keys(v):
    """hx_topk_key(v, false) of float32 values: unsigned keys in the values' order, 0 for -inf and NaN."""
    b = np.asarray(v, np.float32).view(np.uint32)
    key = np.where(b & np.uint32(0x80000000), ~b, b | np.uint32(0x80000000)).astype(np.uint32)
    ok = (key - np.uint32(0x00800000)) <= np.uint32(0xFF800000 - 0x00800000)
    return np.where(ok, key, np.uint32(0)).astype(np.uint32)


def key_values(keys):
    """hx_topk_value: the float32 value of nonzero order keys."""
    k = np.asarray(keys, np.uint32)
    return np.where(k & np.uint32(0x80000000), k & np.uint32(0x7FFFFFFF), ~k).astype(np.uint32).view(np.float32)


def floor_of(samples, r):
    """hx_block_floor of a row's sample logits: 0 where at most r are selectable; else the least key of the bin
    (of BINS even in value between the smallest and largest) where the count from the top reaches r."""
    keys = order_keys(samples)
    keys = keys[keys != 0]
    if len(keys) <= r:
        return 0
    vlo = key_values(keys.min())
    span = np.float32(key_values(keys.max()) - vlo)
    per = np.float32(np.float32(BINS) / span * np.float32(0.9999)) if span > 0 else np.float32(0)
    x = (key_values(keys) - vlo) * per
    b = np.where(x < BINS, np.where(x > 0, x, 0).astype(np.int64), BINS - 1)
    from_top = np.cumsum(np.bincount(b, minlength=BINS)[::-1])
    at = BINS - 1 - int(np.searchsorted(from_top, r))
    return int(keys[b == at].min())


def filter_parts(ks, ke, m, N, rows_per_block, tile, parts):
    """hx_filter_split_of and hx_prefill_split: the keys [lo, hi) each part of row m's row block computes."""
    m0 = m - m % rows_per_block
    lo_w = np.clip(ks[m0:m0 + rows_per_block], 0, N).astype(np.int64)
    hi_w = np.maximum(np.minimum(ke[m0:m0 + rows_per_block], N), lo_w).astype(np.int64)
    live = hi_w > lo_w
    ulo, uhi = (int(lo_w[live].min()), int(hi_w[live].max())) if live.any() else (0, 0)
    t0, t1 = ulo // tile, -(-uhi // tile)
    out = []
    for j in range(parts):
        a, b = t0 + j * (t1 - t0) // parts, t0 + (j + 1) * (t1 - t0) // parts
        lo = min(max(ulo, a * tile), uhi)
        out.append((lo, max(min(uhi, b * tile), lo)))
    return out


def shares(s, sigmas=4):
    """A part's share of the row's entries from its s samples at the floor."""
    s = np.asarray(s, np.int64)
    return s + sigmas * np.array([math.isqrt(int(x)) for x in s.ravel()], np.int64).reshape(s.shape) + PAD


def floors_cut(ks, ke, N, logits, floors, step, parts, region, rows_per_block, tile, sigmas=4):
    """(bases, caps) [M, parts]: the cut of each row's parts x region entries from its floor and sample logits
    [M, samples]: a part's entries [pool S_j / all, pool S_(j+1) / all) in float32, S_j the shares before part j;
    floor 0 with every key fitting: each part its keys of the row, the last the rest."""
    M, pool = len(ks), parts * region
    bases, caps = np.zeros((M, parts), np.int64), np.zeros((M, parts), np.int64)
    for m in range(M):
        lo, hi = min(max(int(ks[m]), 0), N), max(min(int(ke[m]), N), 0)
        work = filter_parts(ks, ke, m, N, rows_per_block, tile, parts)
        f = int(floors[m])
        if f:
            i = np.arange(-(-lo // step), -(-hi // step))
            keys = order_keys(logits[m, i])
            at = i[(keys != 0) & (keys >= f)]
            part = np.searchsorted([w[0] for w in work], at * step, side="right") - 1
            share = shares(np.bincount(part, minlength=parts), sigmas)
        else:
            share = np.array([max(min(b, hi) - max(a, lo), 0) for a, b in work])
        total, before = int(share.sum()), np.concatenate([[0], np.cumsum(share)])
        if f == 0 and total <= pool:
            lo_e, hi_e = before[:-1], np.append(before[1:-1], pool)
        elif total:
            per = np.float32(pool) / np.float32(total)
            ends = [pool if x >= total or int(np.float32(x) * per) > pool else int(np.float32(x) * per) for x in before]
            lo_e, hi_e = np.array(ends[:-1]), np.array(ends[1:])
        else:
            lo_e = np.arange(parts) * region
            hi_e = lo_e + region
        bases[m], caps[m] = lo_e, hi_e - lo_e
    return bases, caps


def logits_rows(inp, m0, m1):
    """Rows [m0, m1) of the exact logits, float32: relu(q . k) x weights summed over heads, times the scale."""
    q = inp.q[m0:m1].astype(np.float32)
    s = (q.reshape(-1, q.shape[2]) @ inp.k.astype(np.float32).T) * inp.kv_scale
    np.maximum(s, 0, out=s)
    return np.einsum("rhn,rh->rn", s.reshape(m1 - m0, q.shape[1], -1), inp.weights[m0:m1], optimize=True)


def expected_overflow_parts(keys, step, r, pool, sigmas):
    """The chance a row of a few parts (up to 4), keys[j] of its keys at the floor in part j, has a part past its
    region: the samples at the floor split among the parts multinomially (every split of r enumerated), the keys
    at the floor about r step (a normal of sd sqrt(r) step, integrated on a grid)."""
    k = np.asarray(keys, np.float64)
    parts = len(k)
    if parts > 4:
        raise ValueError(f"keys: at most 4 parts are enumerated, got {parts}")
    p = np.clip(k / k.sum(), 1e-12, 1.0)
    grids = np.meshgrid(*[np.arange(r + 1)] * (parts - 1), indexing="ij")
    s = np.stack([g.ravel() for g in grids], 1)
    rest = r - s.sum(1)
    s = np.concatenate([s[rest >= 0], rest[rest >= 0, None]], 1)
    lg = np.array([math.lgamma(i + 1) for i in range(r + 1)])
    pmf = np.exp(lg[r] - lg[s].sum(1) + (s * np.log(p)).sum(1))
    sh = s + sigmas * np.floor(np.sqrt(s)).astype(np.int64) + PAD
    ends = np.floor(np.cumsum(sh, 1) * (pool / sh.sum(1, keepdims=True)))
    caps = np.diff(np.concatenate([np.zeros((len(s), 1)), ends[:, :-1], np.full((len(s), 1), pool)], 1), axis=1)
    out = 0.0
    for z in np.linspace(-5, 5, 41):
        w = math.exp(-z * z / 2) / math.sqrt(2 * math.pi) * 0.25
        kt = r * step * (1 + z / math.sqrt(r))
        out += w * pmf[(kt * p > caps).any(1)].sum()
    return out


def model_case(inp, M, N, H, top_k, steps, sigmas, region=None, expected=True):
    """The replay and the expectation (unless not `expected`) of one case on sm_90a's plan, for each sample step and
    spread; `region`: the regions' entries, if not the plan's (what if they were smaller)."""
    target = TARGETS["sm_90a"]
    fp = prefill_topk_fused.filter_plan(target, M, N, H, inp.q.shape[2])
    region = region or prefill_topk_fused.plan_fused(target, M, N, H, inp.q.shape[2], top_k).region
    parts, pool = fp.split, region * fp.split
    ks, ke = inp.cu_seqlen_ks, inp.cu_seqlen_ke
    runs = [(st, sg) for st in steps for sg in sigmas]
    expected = expected and parts <= 4
    out = {f"step {st} sigmas {sg}": {"whole": 0, "part": 0, "expected": 0.0 if expected else None}
           for st, sg in runs}
    for b0 in range(0, M, 64):
        L = logits_rows(inp, b0, min(b0 + 64, M))
        for m in range(b0, min(b0 + 64, M)):
            lo, hi = min(max(int(ks[m]), 0), N), max(min(int(ke[m]), N), 0)
            row = L[m - b0]
            work = filter_parts(ks, ke, m, N, fp.rows_per_block, fp.tile, parts)
            for st, sg in runs:
                r = -(-int(prefill_topk_fused.SAMPLE_MARGIN * top_k) // st)
                o = out[f"step {st} sigmas {sg}"]
                i = np.arange(-(-lo // st), -(-hi // st))
                samp = np.full((1, -(-N // st)), -np.inf, np.float32)
                samp[0, i] = row[i * st]  # the sample's logits, exact
                f = floor_of(samp[0, i], r)
                if f == 0:
                    continue
                fv = key_values(f)
                kept = np.array([np.count_nonzero(row[max(a, lo):max(min(b, hi), lo)] >= fv) for a, b in work])
                cap = _cut_row(ks, ke, m, N, samp[0], f, st, parts, region, fp, sg)
                if kept.sum() < top_k:
                    o["whole"] += 1
                elif (kept > cap).any():
                    o["part"] += 1
                if expected:
                    top = np.sort(row[lo:hi])[::-1][int(prefill_topk_fused.SAMPLE_MARGIN * top_k)]
                    kj = [np.count_nonzero(row[max(a, lo):max(min(b, hi), lo)] > top) for a, b in work]
                    if sum(kj):
                        o["expected"] += expected_overflow_parts(kj, st, r, pool, sg)
    return {"M": M, "N": N, "H": H, "parts": parts, "pool": pool, **out}


def _cut_row(ks, ke, m, N, samp, f, step, parts, region, fp, sigmas):
    """Row m's caps as floors_cut makes them (its row block's split)."""
    floors = np.zeros(len(ks), np.int64)
    floors[m] = f
    logits = np.zeros((len(ks), len(samp)), np.float32)
    logits[m] = samp
    m0 = m - m % fp.rows_per_block
    sub = slice(m0, min(m0 + fp.rows_per_block, len(ks)))
    _, caps = floors_cut(ks[sub], ke[sub], N, logits[sub], floors[sub], step, parts, region, fp.rows_per_block,
                         fp.tile, sigmas)
    return caps[m - m0]


@click.command()
@click.option("--shapes", default="4096x32768", help="As the bench's: its cases in its order, for its inputs.")
@click.option("--heads", default="64,32")
@click.option("--recent", default=0, help="As the bench's --recent.")
@click.option("--steps", default="16,32", help="Sample steps to model.")
@click.option("--sigmas", default="0,4", help="HX_CUT_SIGMAS values to model (0: shares of s + 8).")
@click.option("--top-k", default=2048)
@click.option("--min-parts", default=0, help="The filter's key split at least this many parts (default: the op's).")
def main(shapes, heads, recent, steps, sigmas, top_k, min_parts):
    from tools.measure.prefill_topk_bench import _inputs
    if min_parts:
        prefill_topk_fused.MIN_PARTS = min_parts
    rng = np.random.default_rng(0)
    plan = [(int(a), int(b), int(h)) for h in heads.split(",") for a, b in (s.split("x") for s in shapes.split(","))]
    for M, N, H in plan:
        inp = _inputs(rng, M, N, H, recent)
        res = model_case(inp, M, N, H, top_k, [int(x) for x in steps.split(",")],
                         [int(x) for x in sigmas.split(",")])
        click.echo(json.dumps(res))


if __name__ == "__main__":
    main()
