"""The whole-row path of the decode top-k (hipindexer.ops.paged_topk; docs/ops.md, "The whole-row path"). Where a
call's logits, [B * next_n, max_model_len] float32, fit the workspace bound beside topk_logits' own workspace, the
logits op writes them into the workspace, topk_logits selects each row's top_k among them, and topk_slots
(hsaco_src/generic/topk_slots.hip) maps the selection to cache slots when they are asked for. A few sequences of long
rows run faster so than through the fused kernel's pieces and merge (docs/benchmarks.md, "at small batches").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..catalog import KERNEL
from ..plan.bounds import workspace_bound
from ..plan.target import Target
from ..plan.topk import plan_topk
from ..runtime import DeviceArray
from .decode import launch_decode, plan_and_prepare_decode
from .launch import kernel_for, target_of
from .topk import MAX_BLOCKS, _grid, _stride, launch_topk, prepare_topk

SLOTS_POINTERS = ("indices", "slots", "block_tables")


def whole_width(max_model_len: int) -> int:
    """The row stride of the workspace's logits: max_model_len rounded up to 16 bytes."""
    return -(-max_model_len // 4) * 4


def whole_topk_bytes(R: int, max_model_len: int, top_k: int, target: Target) -> int:
    """The workspace topk_logits takes over R rows of max_model_len logits on `target`, sorted or not: the split
    path's (plan.topk.workspace_bytes) where it would take that path, else none (its other paths keep their work on
    chip)."""
    need = 0
    for sort in (False, True):
        tp = plan_topk(R, max_model_len, top_k, target, max_blocks=MAX_BLOCKS, sorted=sort)
        need = max(need, tp.workspace_bytes if tp.split else 0)
    return need


def whole_workspace_bytes(B: int, next_n: int, top_k: int, max_model_len: int, target: Target) -> int:
    """What a whole-row workspace takes: the logits [B * next_n, whole_width] float32 and the workspace topk_logits
    takes over them (whole_topk_bytes)."""
    R = B * next_n
    return 4 * R * whole_width(max_model_len) + whole_topk_bytes(R, max_model_len, top_k, target)


def whole_fits(B: int, next_n: int, top_k: int, max_model_len: int, target: Target) -> bool:
    """Whether a whole-row workspace stays within the bound (workspace_bound, with the target's units)."""
    return B > 0 and whole_workspace_bytes(B, next_n, top_k, max_model_len, target) <= workspace_bound(
        B, next_n, top_k, target.num_cus)


def whole_pays(B: int, next_n: int, top_k: int, max_model_len: int, target: Target) -> bool:
    """Whether the op takes the whole-row path by default: wherever it fits (whole_fits). At every batch measured
    where it fit, from (1, 8192) to (256, 8192), (96, 16384) and (32, 32768), it was faster than the fused and
    composed paths or level with the faster (docs/benchmarks.md, "at small batches", "the resident path", "the
    whole-row path wherever it fits" and "the whole-row batches timed")."""
    return whole_fits(B, next_n, top_k, max_model_len, target)


def check_whole(whole, fused, chunk) -> None:
    """The `whole` tunable against the call's other path tunables, or ValueError."""
    if whole not in (None, True, False):
        raise ValueError(f"whole: expected None (where it pays), True or False, got {whole!r}")
    if whole and (fused or chunk is not None):
        raise ValueError("whole: True asks for the whole-row path, which takes neither fused=True nor chunk=")


def takes_whole(whole, fused, chunk, B: int, next_n: int, top_k: int, max_model_len: int, target: Target) -> bool:
    """Whether a call (or a workspace) of this batch takes the whole-row path: whole=True wherever it fits (else
    ValueError), whole=None where it pays and no other path is asked for (fused=, chunk=), whole=False never."""
    if whole:
        if B and not whole_fits(B, next_n, top_k, max_model_len, target):
            raise ValueError(f"whole: True, but the logits of B={B} x next_n={next_n} rows of {max_model_len} keys "
                             f"and topk_logits' workspace do not fit the bound of "
                             f"{workspace_bound(B, next_n, top_k, target.num_cus)} bytes")
        return True
    return whole is None and fused is None and chunk is None and whole_pays(B, next_n, top_k, max_model_len, target)


def whole_arrays(device, B: int, next_n: int, top_k: int, max_model_len: int, stream=None) -> tuple:
    """A whole-row workspace's arrays: the logits and topk_logits' workspace (empty where its path needs none)."""
    R = B * next_n
    return (DeviceArray.empty((R, whole_width(max_model_len)), np.float32, device, stream),
            DeviceArray.empty((whole_topk_bytes(R, max_model_len, top_k, target_of(device)),), np.uint8, device,
                              stream))


@dataclass
class WholePlan:
    """A whole-row call's three launches, prepared but for their per-call pointers: the logits op's kernel into the
    workspace (with its tensor-map extras, prepare_decode's), topk_logits' path over those logits (its launch and
    split, prepare_topk's), and the slots."""
    dev: object
    R: int
    top_k: int
    workspace: object  # a whole-row PagedTopkWorkspace
    logits: DeviceArray  # the workspace's logits, [R, max_model_len] of its rows
    decode: object
    decode_extras: object
    topk: object
    topk_split: object
    slots: object


def plan_whole(dev, s, top_k, ws, sorted, return_values, outs, logits_kw) -> WholePlan:
    """The call's view of the workspace's logits and its launches: the logits op's kernel as fp8_paged_mqa_logits
    plans it for that output (-inf past every row's bound), topk_logits' path as it plans it for those logits and
    outs (rows x top_k indices, values with return_values, slots when asked: each the given array or None for new
    ones)."""
    R = s.B * s.next_n
    idx, vals, slots = outs
    logits = ws.w[:R, :s.max_model_len]
    decode, extras = plan_and_prepare_decode(dev, s, _stride(logits, R, s.max_model_len), True, **logits_kw)
    tp = plan_topk(R, s.max_model_len, top_k, target_of(dev), max_blocks=MAX_BLOCKS, sorted=sorted)
    if tp.split and ws.topk.nbytes < tp.workspace_bytes:  # fewer or shorter rows than the workspace's
        tp = plan_topk(R, s.max_model_len, top_k, target_of(dev), max_blocks=MAX_BLOCKS, rowwise=True)
    topk, split = prepare_topk(dev, tp, R, s.max_model_len, top_k, _stride(logits, R, s.max_model_len),
                               _stride(idx, R, top_k), _stride(vals, R, top_k) if return_values else 0, sorted)
    launch = kernel_for(dev, "topk_slots").prepare(
        _grid(-(-R * top_k // KERNEL["topk_slots"].block)), KERNEL["topk_slots"].block, pointers=SLOTS_POINTERS,
        indices_stride=_stride(idx, R, top_k), slots_stride=_stride(slots, R, top_k), num_blocks=s.num_blocks,
        rows=R, top_k=top_k, next_n=s.next_n, max_blocks=s.max_blocks, block_size=s.block_size)
    return WholePlan(dev, R, top_k, ws, logits, decode, extras, topk, split, launch)


def run_whole(plan: WholePlan, st, q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, idx, vals,
              slots) -> None:
    """The logits into the workspace, the selection over them, then the slots: device arrays only."""
    launch_decode(plan.decode, plan.decode_extras, st, q, kv_cache, weights, context_lens, next_n_lens, block_tables,
                  plan.logits, errors)
    launch_topk(plan.topk, plan.dev, st, plan.topk_split, plan.workspace.topk, plan.logits, None, idx, vals)
    if slots is not None:
        plan.slots(st.handle, idx.ptr, slots.ptr, block_tables.ptr)
