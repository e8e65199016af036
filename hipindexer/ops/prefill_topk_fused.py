"""The fused prefill top-k: ``fp8_mqa_topk`` without a row's logits ever in memory (docs/ops.md, "Top-k").

A group of query rows at a time, five launches:
1. prefill_topk_sample gathers every step-th key (sample_step: top_k / 64, at most 32) and zeroes the filter's
   counts;
2. the prefill logits op runs on that sample, into the workspace;
3. prefill_topk_floor takes each row's floor: the r-th largest of its sample logits, r = ceil(SAMPLE_MARGIN top_k
   / step), so that about SAMPLE_MARGIN top_k of the row's keys reach it, give or take a 1 / sqrt(r) share
   (about 9% at r = 112); and cuts the row's entries among the filter's parts, in proportion to the sample's keys at
   the floor in each, s, plus 4 sqrt(s) (the sample's error) and a pad (every filter reads that cut);
4. the filter, a logits kernel built to append each key that reaches its row's floor to the row's region of its
   part of the key split instead of writing a logit (FILTERS: the sm_90a kernels at H = 64 and 32 and gfx950's
   MFMA kernel, D = 128; else the generic kernel), in MIN_PARTS to max_parts() parts: the workspace bound grows
   with the parts, a row's entries hold 1.6 times the keys it is expected to keep, and the finish reads a row's
   parts a thread each;
5. prefill_topk_finish selects each row's top_k from what its regions kept, orders and writes it. A row whose
   floor let fewer than top_k keys in (a sample that misjudged the row: about 4e-8 a row on random data)
   recomputes its logits there in scalar fp32: exact, and slow (milliseconds a row); a part whose keys passed its
   region recomputes that part's keys alone.

The sample's logits share the workspace's bytes with the regions, which are written only after the floors are
taken. Every launch of a group is prepared once per layout; a call with device-resident arrays and a workspace=
does pointer arithmetic and launches.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..catalog import KERNEL
from ..plan import plan_prefill
from ..plan.bounds import prefill_workspace_bound
from ..runtime import DeviceArray
from ..arguments import PrefillShape
from .launch import kernel_for, target_of
from .prefill import prepare_prefill

SAMPLE_STEP = 32      # one key in this many is sampled for the floors, at most (sample_step)
SAMPLE_MARGIN = 1.75  # a floor aims at keeping this many times top_k of a row's keys
REGION_MARGIN = 1.6   # a region holds at least this many times the keys its part is expected to keep
MIN_PARTS = 3         # the filter's key split, at least (where the keys allow it; filter_plan says why)
FUSED_TOP_K = 2048    # the largest top_k of the fused path (the finish's buffer holds 4 top_k entries)
FUSED_MIN_TOP_K = 1024  # the smallest the default takes it for: below, the sample is more than an eighth of the keys
# (target, H, D): (the filter, the logits kernel whose plan it follows)
FILTERS = {("sm_90a", 64, 128): ("mqa_topk_wgmma_fold", "mqa_logits_wgmma_fold"),
           ("sm_90a", 32, 128): ("mqa_topk_wgmma", "mqa_logits_wgmma"),
           ("gfx950", 32, 128): ("mqa_topk_mfma", "mqa_logits_mfma"),
           ("gfx950", 64, 128): ("mqa_topk_mfma", "mqa_logits_mfma")}
GENERIC_FILTER = ("mqa_topk_generic", "mqa_logits_generic")
# The filters that take the floors' cut of a row's entries by the sample (all; a filter left out gets an even cut, a
# test's way to show what the cut saves), and those whose key split is hx_prefill_split_quanta (the others':
# hx_prefill_split).
FILTERS_CUT = {"mqa_topk_generic", "mqa_topk_mfma", "mqa_topk_wgmma", "mqa_topk_wgmma_fold"}
FILTERS_QUANTA = {"mqa_topk_mfma"}
FINISH_BLOCKS = 4096  # the finish's grid at most (its blocks walk the rows)
WIDE_ROWS = 128  # a group of at most this many rows takes the floors build of more threads a row (_wide)
MAX_REGION_ENTRIES = 2 ** 32  # a group's regions, at most: the sm_90a filters index an entry in 32 bits
_ALIGN = 256


def sample_step(top_k: int) -> int:
    """One key in this many is sampled: r stays near 64 SAMPLE_MARGIN (112) whatever top_k, which leaves a row's
    floor letting fewer than top_k keys in a chance of about 4e-8 on random data (a Poisson count of mean 64
    reaching 112), where each such row costs the finish a recompute (docs/ops.md: why not a smaller sample)."""
    return max(1, min(SAMPLE_STEP, top_k // 64))


def sample_r(top_k: int) -> int:
    """The sample rank a floor is taken at."""
    return -(-int(SAMPLE_MARGIN * top_k) // sample_step(top_k))


def max_parts() -> int:
    """The filter's key split, at most: the finish reads a row's parts a thread each (more recompute the row)."""
    return KERNEL["prefill_topk_finish"].block


def filter_plan(target, g: int, N: int, H: int, D: int):
    """The filter's launch plan for g rows against N keys: the logits kernel's, its key split at least MIN_PARTS
    and at most max_parts(). The bound grows with the parts, and so do the regions a row's keys share: at two parts
    they hold 1.7 times the keys a floor aims at, at three 2.3 times, which makes a part that outgrows its region
    (the sample's error; the finish then recomputes the part, milliseconds) about 40 times rarer: by
    tools/measure/cut_model.py about one call in 2,000 at (4096, 32768), against one in 50 at two parts."""
    _, plan_key = filter_kernels(target, H, D)
    p = plan_prefill(g, N, H, D, target, kernel=plan_key)
    if p.split < MIN_PARTS:
        try:
            p = plan_prefill(g, N, H, D, target, kernel=plan_key, split=MIN_PARTS)
        except ValueError:  # too few keys or too much work for the split
            pass
    elif p.split > max_parts():
        p = plan_prefill(g, N, H, D, target, kernel=plan_key, split=max_parts())
    return p


def filter_kernels(target, H: int, D: int) -> tuple[str, str]:
    """(the filter kernel, the logits kernel whose plan it follows) for a target and shape."""
    return FILTERS.get((target.arch, H, D), GENERIC_FILTER)


def fused_fits(target, H: int, D: int, top_k: int, accumulation: str) -> bool:
    """Whether the fused path serves a call by default: a tensor-core filter for the target and shape,
    FUSED_MIN_TOP_K <= top_k <= FUSED_TOP_K, accumulation "fast"."""
    return (FUSED_MIN_TOP_K <= top_k <= FUSED_TOP_K and accumulation == "fast"
            and filter_kernels(target, H, D) != GENERIC_FILTER)


def _up(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


@dataclass(frozen=True)
class FusedLayout:
    """Where a group of `rows` rows keeps what: byte offsets into the workspace and the regions' size."""
    rows: int
    samples: int
    parts: int
    region: int
    sample_k: int
    sample_scale: int
    windows: int
    floors: int
    counts: int
    bases: int
    caps: int
    cand: int
    nbytes: int


def fused_layout(rows: int, N: int, D: int, top_k: int, parts: int, bound: int) -> FusedLayout | None:
    """The layout of a group of `rows` rows against N keys split in `parts`, within `bound` bytes (None: it does
    not fit, its regions would be too small for the keys a part is expected to keep, or they would hold more than
    MAX_REGION_ENTRIES entries)."""
    samples = -(-N // sample_step(top_k))
    off = 0
    sample_k = off
    off += _up(samples * D)
    sample_scale = off
    off += _up(4 * samples)
    windows = off
    off += _up(8 * rows)
    floors = off
    off += _up(4 * rows)
    counts = off
    off += _up(4 * rows * parts)
    bases = off
    off += _up(4 * rows * parts)
    caps = off
    off += _up(4 * rows * parts)
    cand = off
    room = bound - off
    region = min(room // (8 * rows * parts), 8 * top_k) // 16 * 16
    need = REGION_MARGIN * SAMPLE_MARGIN * top_k / parts
    if region < need or 4 * rows * samples > room or rows * parts * region > MAX_REGION_ENTRIES:
        return None
    return FusedLayout(rows, samples, parts, region, sample_k, sample_scale, windows, floors, counts, bases, caps,
                       cand, cand + max(8 * rows * parts * region, 4 * rows * samples))


def plan_fused(target, M: int, N: int, H: int, D: int, top_k: int, rows: int | None = None) -> FusedLayout:
    """The group of rows (as many as fit, halving from M, or `rows`) and its layout within
    prefill_workspace_bound(M, top_k, parts) for the filter's key split; ValueError when none fits."""
    g = M if rows is None else max(1, min(int(rows), M))
    while True:
        parts = filter_plan(target, g, N, H, D).split
        lay = fused_layout(g, N, D, top_k, parts, prefill_workspace_bound(M, top_k, parts))
        if lay is not None or rows is not None or g == 1:
            break
        g = -(-g // 2)
    if lay is None:
        raise ValueError(f"rows={g}: the fused top-k's workspace for {g} rows against N={N} keys does not fit "
                         f"prefill_workspace_bound(M={M}, top_k={top_k}, parts={parts})")
    return lay


class FusedPrefillTopkWorkspace:
    """The device memory of fused fp8_mqa_topk calls of up to M query rows against up to N keys at one top_k and
    (H, D), on one device: make it once (prefill_topk_workspace with H and D), before capturing a graph. `rows` is
    its group of query rows, `nbytes` what it holds, `bound` the formula's bytes for M and its key split."""

    def __init__(self, device, M: int, N: int, H: int, D: int, top_k: int, rows=None, stream=None):
        target = target_of(device)
        self.device, self.M, self.N, self.H, self.D, self.top_k = device, M, N, H, D, top_k
        self.layout = plan_fused(target, M, N, H, D, top_k, rows)
        self.rows = self.layout.rows
        self.buf = DeviceArray.empty((self.layout.nbytes,), np.uint8, device, stream)
        self.nbytes = self.buf.nbytes
        self.bound = prefill_workspace_bound(M, top_k, self.layout.parts)

    def __repr__(self):
        return (f"FusedPrefillTopkWorkspace(M={self.M}, N={self.N}, H={self.H}, D={self.D}, top_k={self.top_k}, "
                f"rows={self.rows}, nbytes={self.nbytes}, device={self.device!r})")


def kept_state(ws: FusedPrefillTopkWorkspace, M: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(counts, caps, floors) of the last call, when it ran in one group of M rows: the keys each row's parts kept
    and their regions' sizes ([M, parts] int64; a negative count is a workspace in a bad state), and the rows'
    floors ([M] uint32), read back after a synchronising copy. A diagnostic, not for the hot path."""
    lay = plan_fused(target_of(ws.device), M, ws.N, ws.H, ws.D, ws.top_k, ws.rows) if M != ws.layout.rows \
        else ws.layout
    buf = ws.buf.numpy()
    counts = buf[lay.counts:lay.counts + 4 * M * lay.parts].view(np.int32).reshape(M, lay.parts).astype(np.int64)
    caps = buf[lay.caps:lay.caps + 4 * M * lay.parts].view(np.uint32).reshape(M, lay.parts).astype(np.int64)
    return counts, caps, buf[lay.floors:lay.floors + 4 * M].view(np.uint32)


def recomputes(ws: FusedPrefillTopkWorkspace, M: int) -> tuple[int, int]:
    """Of the last call's rows, when it ran in one group of rows: (how many the finish recomputed whole, their
    floor having let fewer than top_k keys in; how many it recomputed a part of, the part's keys having passed its
    region), read back from the workspace (kept_state). A diagnostic for benchmarks, not for the hot path."""
    counts, caps, floors = kept_state(ws, M)
    whole = (counts < 0).any(axis=1) | ((counts.sum(axis=1) < ws.top_k) & (floors != 0))
    part = ~whole & (counts > caps).any(axis=1)
    return int(whole.sum()), int(part.sum())


def recomputed_rows(ws: FusedPrefillTopkWorkspace, M: int) -> int:
    """How many of the last call's rows the finish recomputed, whole or a part (recomputes)."""
    return sum(recomputes(ws, M))


@dataclass
class FusedGroup:
    """A group of rows: its first row and its prepared launches."""
    r0: int
    sample: object
    logits: object
    floor: object
    filter: object
    finish: object


@dataclass
class FusedPlan:
    dev: object
    s: PrefillShape
    top_k: int
    workspace: FusedPrefillTopkWorkspace
    strides: tuple = (0, 0)                     # the indices' and values' row strides, in elements
    groups: list = field(default_factory=list)  # (FusedGroup, its workspace addresses)


def check_fused_call(ws: FusedPrefillTopkWorkspace, s: PrefillShape, top_k: int) -> None:
    """ValueError unless the workspace serves the call."""
    if ws.top_k != top_k or ws.M < s.M or ws.N < s.N or (ws.H, ws.D) != (s.H, s.D):
        raise ValueError(f"workspace: made for top_k={ws.top_k}, M <= {ws.M}, N <= {ws.N}, (H, D) = "
                         f"({ws.H}, {ws.D}); the call has top_k={top_k}, M={s.M}, N={s.N}, (H, D) = ({s.H}, {s.D})")


def plan_fused_call(dev, s: PrefillShape, top_k: int, ws: FusedPrefillTopkWorkspace, relative: bool, sorted: bool,
                    accumulation: str, strides: tuple) -> FusedPlan:
    """The groups of a call over its workspace, each with its five launches prepared."""
    check_fused_call(ws, s, top_k)
    plan = FusedPlan(dev, s, top_k, ws, strides)
    if s.M == 0 or s.N == 0:
        return plan
    target = target_of(dev)
    filt_key, _ = filter_kernels(target, s.H, s.D)
    base = ws.buf.ptr
    r = sample_r(top_k)
    for r0 in range(0, s.M, ws.rows):
        g = min(ws.rows, s.M - r0)
        fp = filter_plan(target, g, s.N, s.H, s.D)
        parts = fp.split
        lay = fused_layout(g, s.N, s.D, top_k, parts, ws.layout.nbytes)
        if lay is None:
            raise ValueError(f"workspace: its {ws.layout.nbytes} bytes do not hold a group of {g} rows against "
                             f"N={s.N} keys in {parts} parts at top_k={top_k}")
        at = {k: base + getattr(lay, k)
              for k in ("sample_k", "sample_scale", "windows", "floors", "counts", "bases", "caps", "cand")}
        sks, ske = at["sks"], at["ske"] = at["windows"], at["windows"] + 4 * g
        floor_key = "prefill_topk_floor" + ("_wide" if g <= WIDE_ROWS else "")
        cut = filt_key in FILTERS_CUT and parts <= KERNEL[floor_key].block  # a thread a part
        split = dict(rows_per_block=fp.rows_per_block, tile=fp.tile, quanta=int(filt_key in FILTERS_QUANTA))
        sample_fields = dict(sample_k=at["sample_k"], sample_scale=at["sample_scale"], sample_ks=sks, sample_ke=ske,
                             logits=at["cand"], floors=at["floors"], cand_counts=at["counts"], M=g, N=s.N, D=s.D,
                             step=sample_step(top_k), samples=lay.samples, r=r, parts=parts,
                             cand_base=at["bases"], cand_cap=at["caps"], region=lay.region, cut=int(cut), **split)
        sample_kern = kernel_for(dev, "prefill_topk_sample")
        threads = max(lay.samples * (s.D // 16), g)
        sample = sample_kern.prepare(max(1, min(4096, -(-threads // 256))), 256,
                                     pointers=("k", "kv_scale", "ks", "ke"), **sample_fields)
        sp = plan_prefill(g, lay.samples, s.H, s.D, target, accumulation=accumulation)
        # no -inf fill: the floors read a row's sample logits only within its window
        logits = prepare_prefill(kernel_for(dev, sp.kernel, sp.variant), sp, PrefillShape(g, lay.samples, s.H, s.D),
                                 lay.samples, False)
        floor = kernel_for(dev, floor_key).prepare(max(1, min(FINISH_BLOCKS, g)),
                                                   pointers=("k", "kv_scale", "ks", "ke"), **sample_fields)
        filt = kernel_for(dev, filt_key, fp.variant).prepare(
            fp.grid, fp.block, pointers=("q", "k", "kv_scale", "weights", "ks", "ke"), out=0, out_stride=0, M=g,
            N=s.N, H=s.H, D=s.D, rows_per_block=fp.rows_per_block, split=fp.split, tile=fp.tile, clean=0,
            reverse_rows=int(fp.reverse_rows), cand=at["cand"], cand_counts=at["counts"], floors=at["floors"],
            floor_stride=1, region=lay.region, cand_base=at["bases"], cand_cap=at["caps"])
        finish = kernel_for(dev, "prefill_topk_finish").prepare(
            max(1, min(FINISH_BLOCKS, g)), KERNEL["prefill_topk_finish"].block,
            pointers=("cand", "cand_counts", "floors", "q", "k", "kv_scale", "weights", "ks", "ke", "indices",
                      "values"),
            floor_stride=1, indices_stride=strides[0], values_stride=strides[1], M=g, N=s.N, H=s.H, D=s.D,
            top_k=top_k, parts=parts, region=lay.region, sorted=int(bool(sorted)), relative=int(bool(relative)),
            recompute_all=0, cand_base=at["bases"], cand_cap=at["caps"], **split)
        plan.groups.append((FusedGroup(r0, sample, logits, floor, filt, finish), at))
    return plan


def run_fused(plan: FusedPlan, st, q, k, kv_scale, weights, ks, ke, idx, vals) -> None:
    """The call's launches, in order, on `st`: device arrays only."""
    s, h = plan.s, st.handle
    qrow, wrow = s.H * s.D, 4 * s.H
    istr, vstr = 4 * plan.strides[0], 4 * plan.strides[1]
    for grp, at in plan.groups:
        r0 = grp.r0
        qg, wg, ksg, keg = q.ptr + r0 * qrow, weights.ptr + r0 * wrow, ks.ptr + 4 * r0, ke.ptr + 4 * r0
        grp.sample(h, k.ptr, kv_scale.ptr, ksg, keg)
        grp.logits(h, qg, at["sample_k"], at["sample_scale"], wg, at["sks"], at["ske"], at["cand"])
        grp.floor(h, k.ptr, kv_scale.ptr, ksg, keg)
        grp.filter(h, qg, k.ptr, kv_scale.ptr, wg, ksg, keg)
        grp.finish(h, at["cand"], at["counts"], at["floors"], qg, k.ptr, kv_scale.ptr, wg, ksg, keg,
                   idx.ptr + r0 * istr, 0 if vals is None else vals.ptr + r0 * vstr)
