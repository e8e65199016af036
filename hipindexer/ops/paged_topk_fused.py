"""The fused path of the decode top-k (hipindexer.ops.paged_topk; docs/ops.md, "the fused path"): which calls it
serves and where it pays, the workspace arrays it needs, and its two launches, prepared once per call shape: the
decode kernel's unit selecting on chip (sm_90a: hsaco_src/sm90a/paged_mqa_topk_wgmma_tma.hip, gfx950:
hsaco_src/gfx950/paged_mqa_topk_mfma.hip), each unit writing the top_k of its piece of every row to slot u + b, then
the merge (hsaco_src/generic/paged_topk_merge.hip), one block a row, which empties each sequence's list of slots (its
last row to finish, counted in seq_done) for the next call.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..catalog import KERNEL
from ..plan import plan_decode
from ..plan.bounds import workspace_bound
from ..plan.decode import DECODE
from ..runtime import DeviceArray
from .decode import DECODE_POINTERS
from .kv_map import kv_map_finder
from .launch import kernel_for, target_of
from .topk import _grid, _stride


@dataclass(frozen=True)
class FusedKernel:
    """A target's fused kernel: the logits kernel whose unit it is (the logits planner must pick that one for the
    call), the most entries one round of its math adds to a row between two meetings (its SLACK), and whether it
    has a stage ring whose depth the `stages` tunable sets."""
    key: str
    logits: str
    slack: int
    ring: bool


FUSED_KERNELS = {"sm_90a": FusedKernel("paged_mqa_topk_wgmma_tma", "paged_mqa_logits_wgmma_tma", 2 * 3 * 64, True),
                 "gfx950": FusedKernel("paged_mqa_topk_mfma", "paged_mqa_logits_mfma", 4 * 64, False)}
FUSED_MAX_NEXT_N, FUSED_MAX_TOP_K = 2, 2048  # a segment's rows on chip; running + one piece in the merge's buffer
# The sm_90a kernel's ring depth by next_n (a multiple of 6): its candidate buffers take the rest, so fewer stages
# mean fewer cuts, and more keep the copies ahead; docs/benchmarks.md ("The fused path") has the depths measured.
FUSED_STAGES = {1: 12, 2: 6}
FUSED_KEYS_PER_TOP_K = 4  # fused_pays: the keys a unit's piece of a row holds, at least, in top_k's
FUSED_LONG_ROW = 16       # ... or a row's keys, in top_k's (its merge then runs in two levels where pieces are many)
FUSED_FEW_SEQUENCES = 8   # ... or this many sequences at most, of rows of at least FUSED_FEW_ROW_KEYS top_k's
FUSED_FEW_ROW_KEYS = 2
FUSED_POINTERS = ("parts", "part_counts", "seq_parts", "seq_nparts")
MERGE_OVERLAPS = False  # whether the merge may start during the select's tail (plan_fused says why not)
MAX_PIECES = 512  # units of a fused launch the merge reads (HX_MAX_PIECES)
# A row's list entries the merge holds in shared memory at once, by target.
MERGE_ENTRIES = {t: KERNEL["paged_topk_merge"].smem_for(t) // 8 for t in KERNEL["paged_topk_merge"].targets}
MERGE_POINTERS = FUSED_POINTERS + ("seq_done", "indices", "values", "slots", "block_tables")


def fused_workspace_bytes(B: int, next_n: int, top_k: int, units: int) -> int:
    """What a fused workspace takes: the pieces ((units + B) x next_n x top_k entries of 8 bytes) and their
    counts, and per sequence its list of units slots and two counters."""
    slots = units + B
    return 8 * slots * next_n * top_k + 4 * slots * next_n + 4 * B * units + 8 * B


def fused_refusal(target, next_n: int, top_k: int, H: int, D: int, block_size: int, preshuffle=False,
                  accumulation="fast", split_kv=None, kernel=None, B=None) -> str | None:
    """Why the fused decode top-k cannot serve a call of this shape on `target` (None: it can): it runs on the
    targets of FUSED_KERNELS, where the logits planner would pick that target's logits kernel for the same call,
    with next_n <= FUSED_MAX_NEXT_N and top_k <= FUSED_MAX_TOP_K, and (given B) with its workspace within
    workspace_bound for the launch's units (its per-sequence lists outgrow the bound's slack only for batches of
    thousands of sequences at a small top_k)."""
    fk = FUSED_KERNELS.get(target.arch)
    if fk is None:
        return f"has no fused kernel on {target.arch}"
    if next_n > FUSED_MAX_NEXT_N:
        return f"takes next_n <= {FUSED_MAX_NEXT_N}, got {next_n}"
    if top_k > FUSED_MAX_TOP_K:
        return f"takes top_k <= {FUSED_MAX_TOP_K}, got {top_k}"
    try:
        lp = plan_decode(1, next_n, H, D, block_size, block_size, target, preshuffle=preshuffle,
                         accumulation=accumulation, kernel=kernel)
    except ValueError as e:
        return str(e)
    if lp.kernel != fk.logits:
        return (f"is the unit of {fk.logits}, and the logits planner picks {lp.kernel} for H={H}, D={D}, "
                f"block_size={block_size}, accumulation={accumulation!r}")
    if split_kv is not None:
        return "balances its units on the device: split_kv must be None"
    units = fused_units(target)
    if B is not None and fused_workspace_bytes(B, next_n, top_k, units) > \
            workspace_bound(B, next_n, top_k, units):
        return f"needs a workspace past the bound for B={B}, next_n={next_n}, top_k={top_k}"
    return None


def fused_units(target) -> int:
    """The most units a fused launch has on `target`: as many as its logits kernel keeps resident (one an SM on
    sm_90a, two a CU on gfx950), at most MAX_PIECES."""
    spec = DECODE.by_key[FUSED_KERNELS[target.arch].logits]
    per_cu = spec.units_per_cu if spec.persistent else max(n for _, n in spec.resident)
    return min(MAX_PIECES, per_cu * target.num_cus)


def check_cap(target, top_k: int, cap) -> int:
    """The `cap` tunable (a row's candidates on chip at most; None: all the kernel's buffer holds) as the kernel
    takes it (0: all), or ValueError: a cap must leave room for top_k and two rounds' entries."""
    if cap is None:
        return 0
    least = top_k + 2 * FUSED_KERNELS[target.arch].slack
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < least:
        raise ValueError(f"cap: expected None or an int >= top_k + {2 * FUSED_KERNELS[target.arch].slack} = "
                         f"{least} (the fused kernel's entries a row on chip), got {cap!r}")
    return int(cap)


def fused_pays(target, B: int, max_model_len: int, top_k: int) -> bool:
    """Whether the fused path is the faster where it serves: when a unit's piece of a row holds at least
    FUSED_KEYS_PER_TOP_K x top_k keys (B x max_model_len keys over fused_units), or a row at least FUSED_LONG_ROW x
    top_k, or the sequences are at most FUSED_FEW_SEQUENCES with rows of at least FUSED_FEW_ROW_KEYS x top_k. Each
    unit hands the merge up to top_k entries a row: many thin pieces of short rows leave the merge more to do than
    the composed path's steps cost, while the pieces of a few long rows are merged in two levels (merge_group), and
    a few rows' merge costs less than the composed path's chain of launches (docs/ops.md, "Which path by default";
    the rows measured: docs/benchmarks.md, "The fused path" and "Which path for few sequences")."""
    return B * max_model_len >= FUSED_KEYS_PER_TOP_K * top_k * fused_units(target) or \
        max_model_len >= FUSED_LONG_ROW * top_k or \
        (B <= FUSED_FEW_SEQUENCES and max_model_len >= FUSED_FEW_ROW_KEYS * top_k)


def fused_arrays(device, B: int, next_n: int, top_k: int, units: int, stream=None) -> tuple:
    """A fused workspace's arrays, in FUSED_POINTERS order then seq_done: the pieces, their counts, the sequences'
    lists of slots and their lengths (zero: empty) and rows merged (zero)."""
    slots = units + B
    return (DeviceArray.empty((slots * next_n * top_k,), np.uint64, device, stream),
            DeviceArray.empty((slots * next_n,), np.int32, device, stream),
            DeviceArray.empty((B * units,), np.int32, device, stream),
            DeviceArray.empty((B,), np.int32, device, stream).fill(0, stream),
            DeviceArray.empty((B,), np.int32, device, stream).fill(0, stream))


@dataclass
class FusedPlan:
    """A fused call: the fused launch (on sm_90a the cache's tensor-map finder beside it) and the merge, prepared but
    their per-call pointers."""
    dev: object
    R: int
    top_k: int
    workspace: object  # a fused PagedTopkWorkspace
    select: object
    map_of: object
    merge: object
    merge_first: object = None  # the merge's first level, where a row's list is long (merge_group)


def plan_fused(dev, s, top_k, ws, sorted, outs, preshuffle, stages, units=None, cap=0, group=None) -> FusedPlan:
    """The fused kernel on its logits kernel's plan for the whole call (a grid of at most fused_units), and the
    merge."""
    R, t = s.B * s.next_n, target_of(dev)
    fk = FUSED_KERNELS[t.arch]
    lp = plan_decode(s.B, s.next_n, s.H, s.D, s.block_size, s.max_model_len, t, preshuffle=preshuffle,
                     kernel=fk.logits)
    grid = min(lp.grid[0], fused_units(t), MAX_PIECES if units is None else int(units))
    if grid > ws.units:
        raise ValueError(f"workspace: holds the pieces of {ws.units} units; this call plans {grid}")
    select = kernel_for(dev, fk.key, lp.variant).prepare(
        (grid, 1, 1), lp.block, pointers=DECODE_POINTERS + FUSED_POINTERS + ("kv_map",), out_stride=0,
        num_blocks=s.num_blocks, B=s.B, next_n=s.next_n, H=s.H, D=s.D, block_size=s.block_size, max_blocks=s.max_blocks,
        max_model_len=s.max_model_len, clean=0, preshuffle=int(bool(preshuffle)), lens_per_row=int(s.lens_per_row),
        top_k=top_k, stages=stages, cap=cap)
    idx, vals, slots = outs
    group = merge_group(t.arch, s.B, top_k, grid, s.max_model_len) if group is None else group
    groups = -(-grid // group) if group else 1
    # The merge's blocks, one or a few a row, each fill an SM, so the runtime would start them during the select's
    # tail, on the SMs the select freed first; MERGE_OVERLAPS=False keeps them in stream order, spread over the
    # device (docs/benchmarks.md, "Launches that overlap").
    merge = kernel_for(dev, "paged_topk_merge")
    merges = [merge.prepare(
        _grid(R * (groups if level else 1)), merge.block, pointers=MERGE_POINTERS,
        overlap=MERGE_OVERLAPS, indices_stride=_stride(idx, R, top_k), values_stride=_stride(vals, R, top_k),
        slots_stride=_stride(slots, R, top_k), B=s.B, next_n=s.next_n, top_k=top_k, units=grid,
        max_blocks=s.max_blocks, block_size=s.block_size, max_model_len=s.max_model_len, sorted=int(bool(sorted)),
        num_blocks=s.num_blocks, group=group if level else 0, groups=groups, stride=group if group and not level else 1)
        for level in ((1, 0) if group else (0,))]
    map_of = kv_map_finder(dev, s.num_blocks, s.block_size, s.D, bool(preshuffle)) \
        if DECODE.by_key[fk.logits].kv_map else None
    return FusedPlan(dev, R, top_k, ws, select, map_of, merges[-1], merges[0] if group else None)


def check_merge_group(arch: str, top_k: int, group) -> int | None:
    """The `merge_group` tunable (None: merge_group's choice; 0: the merge in one level; else the pieces its first
    level takes together, 2 to MERGE_ENTRIES[arch] // top_k, so that a group fits the merge's buffer), or
    ValueError."""
    held = MERGE_ENTRIES[arch]
    most = held // top_k
    if group is None or (not isinstance(group, bool) and isinstance(group, (int, np.integer))
                         and (group == 0 or 2 <= group <= most)):
        return None if group is None else int(group)
    raise ValueError(f"merge_group: expected None, 0 or an int in [2, {most}] ({held} // top_k on {arch}), "
                     f"got {group!r}")


def merge_group(arch: str, B: int, top_k: int, units: int, max_model_len: int | None = None) -> int:
    """The pieces a first level of the merge takes together (0: the merge in one level): as many top_k-entry pieces
    as it holds at once, where the units leave a row's list at least two such groups (units >= 2 group B) and more
    entries than the merge holds (units x top_k / B pieces' worth, and max_model_len keys, both past
    MERGE_ENTRIES[arch]): few long sequences over many units, whose one block a row would otherwise walk a long
    list."""
    held = MERGE_ENTRIES[arch]
    group = held // top_k
    entries = units * top_k // max(B, 1)  # a row's list: its pieces of up to top_k entries, at most its keys
    if max_model_len is not None:
        entries = min(entries, max_model_len)
    return group if units >= 2 * group * B and entries > held else 0


def run_fused(plan: FusedPlan, st, q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, idx, vals,
              slots) -> None:
    """The fused call's launches (two, or three with the merge's first level) on `st`: device arrays only
    (next_n_lens, errors, vals and slots may be None)."""
    ws = plan.workspace
    pieces = (ws.parts.ptr, ws.part_counts.ptr, ws.seq_parts.ptr, ws.seq_nparts.ptr)
    h = st.handle
    plan.select(h, q.ptr, kv_cache.ptr, weights.ptr, context_lens.ptr, 0 if next_n_lens is None else next_n_lens.ptr,
                block_tables.ptr, 0, 0 if errors is None else errors.ptr, *pieces,
                plan.map_of(kv_cache.ptr) if plan.map_of else b"")
    outs = (ws.seq_done.ptr, idx.ptr, 0 if vals is None else vals.ptr, 0 if slots is None else slots.ptr,
            block_tables.ptr)
    if plan.merge_first is not None:
        plan.merge_first(h, *pieces, *outs)
    plan.merge(h, *pieces, *outs)
