"""The prefill top-k on a device: ``fp8_mqa_topk`` (docs/ops.md, "Top-k"), composed from the prefill logits kernels
and a step kernel of its own, so that it is correct on every target and never holds a row's logits.

The query rows are taken in groups of `rows`, and each group's keys in chunks: a workspace W of [rows, top_k + C]
float32 holds the group's running candidates' values in its first top_k columns (their keys in the caller's
indices output, ascending) and a chunk's logits after them. Per chunk two launches: the logits kernel on the
chunk's keys into W (the first chunk on the caller's windows, the others on windows the previous step wrote), and
the step (hsaco_src/generic/topk_chunk_step.hip), which (on filtered rows first dropping the chunk's columns at or
below the smallest candidate) selects over the candidates and the chunk, merges the selection into the new
candidates (on the last chunk: the values and, with relative=True, n - cu_seqlen_ks[m]) and writes the next
chunk's windows. Candidates come first in W in key
order, so ties across chunks go to the lower key, as within one.

The workspace stays within prefill_workspace_bound(M, top_k) whatever N: rows and C are chosen so that
rows * (2 top_k + 2 C + 2) words fit it, wide chunks first and then as many rows as fit. Every launch of a call is
prepared once per layout; a call with device-resident arrays and a workspace= only does pointer arithmetic and
launches.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..arguments import F32, I32, PrefillShape, check_top_k
from ..catalog import KERNEL
from ..plan import plan_prefill
from ..plan.bounds import prefill_workspace_bound
from ..plan.prefill import TUNABLES as PREFILL_TUNABLES
from ..runtime import Device, DeviceArray
from ..runtime.device import as_stream
from .launch import INT32_MAX, check_workspace, kernel_for, prepared, remember, resident_key, target_of
from .prefill import check_prefill_call, prepare_prefill
from .prefill_topk_fused import (FUSED_TOP_K, FusedPlan, FusedPrefillTopkWorkspace, check_fused_call, fused_fits,
                                 plan_fused_call, run_fused)
from .topk import MAX_BLOCKS, _stride, _written

PREFILL_TOPK_TUNABLES = PREFILL_TUNABLES + ("rows", "chunk", "filtered", "step_block", "fused")
COMPOSED_ONLY = ("chunk", "filtered", "step_block")
SHAPE_TUNABLES = ("rows", "chunk", "filtered")
STEP_POINTERS = ("w", "cols", "ws", "indices", "values", "rel", "ks", "ke", "chunk_ks", "chunk_ke")
CHUNK_GOAL = 32768   # keys per chunk the planner reaches before it cuts the rows into groups
CHUNK_ALIGN = 256    # a chunk short of the whole row is a multiple of this (whole tiles of every logits kernel)
ROWS_MIN = 256       # a group has at least this many rows (or all of them), however narrow its chunks get
FIRST_CHUNK = 4      # filtered: the first chunk's keys, in top_k (its selection is the filter of every later one)
FILTER_CHUNKS = 8    # rows cut into more chunks than this are filtered
STEP_WIDE_ROWS = 4   # groups of up to this many rows per CU (SM) take the step's 512-thread build


def workspace_bytes(rows: int, top_k: int, chunk: int, filtered: bool) -> int:
    """A workspace of `rows` rows and chunk C: W [rows, top_k + C] float32, filtered the kept columns' chunk
    columns [rows, C] int32, a selection's W-space indices [rows, top_k] int32 and a chunk's windows [2, rows]
    int32."""
    return 4 * rows * (2 * top_k + (2 if filtered else 1) * chunk + 2)


def _widest(rows: int, top_k: int, bound: int, filtered: bool) -> int:
    """The widest chunk for `rows` rows within `bound` bytes (may be < 1: none fits)."""
    return (bound // (4 * rows) - 2 * top_k - 2) // (2 if filtered else 1)


def _as_count(name: str, v, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
    return int(v)


def plan_prefill_topk(M: int, N: int, top_k: int, rows=None, chunk=None, filtered=None) -> tuple[int, int, bool]:
    """(rows, chunk, filtered) of a workspace for up to M query rows against up to N keys (M, N >= 1), within the
    bound: as many rows as fit beside chunks of min(N, CHUNK_GOAL) keys, but at least min(M, ROWS_MIN) (a logits
    launch that fills the device), then chunks as wide as fit, evened out over the row (whole CHUNK_ALIGN tiles).
    Filtered (each chunk's columns that cannot enter the top_k dropped before its selection, at the cost of a
    [rows, C] int32 array of kept columns): when the plan without would cut a row into more than FILTER_CHUNKS
    chunks. `rows`, `chunk` and `filtered` force any of them (ValueError when they leave the bound).

    >>> plan_prefill_topk(4096, 32768, 2048)
    (1024, 16384, False)
    >>> plan_prefill_topk(4096, 1 << 20, 2048)
    (512, 30208, True)
    """
    if filtered is not None and not isinstance(filtered, (bool, np.bool_)):
        raise ValueError(f"filtered: expected a bool or None, got {filtered!r}")
    if filtered is None:
        r, c, _ = plan_prefill_topk(M, N, top_k, rows, chunk, False)
        if len(chunk_starts(N, c, top_k, False)) <= FILTER_CHUNKS:
            return r, c, False
        filtered = True
    bound = prefill_workspace_bound(M, top_k)
    words = 2 if filtered else 1  # per chunk column and row
    if rows is not None:
        rows = min(_as_count("rows", rows, 1), M)
    if chunk is not None:
        chunk = min(_as_count("chunk", chunk, 1), N)
    if rows is None:
        goal = chunk if chunk is not None else min(N, CHUNK_GOAL)
        fit = max(bound // (4 * (2 * top_k + words * goal + 2)), min(M, ROWS_MIN))
        groups = max(1, M // fit)
        rows = -(-M // groups)  # equal groups, none below fit
    widest = _widest(rows, top_k, bound, filtered)
    if chunk is None:
        if widest >= N:
            chunk = N
        else:
            cut = widest - widest % CHUNK_ALIGN if widest >= CHUNK_ALIGN else widest
            chunks = -(-N // max(1, cut))
            even = -(-N // chunks)
            even = -(-even // CHUNK_ALIGN) * CHUNK_ALIGN
            chunk = even if even <= cut else cut
    if chunk < 1 or chunk > widest or top_k + chunk > INT32_MAX:
        raise ValueError(f"rows={rows}, chunk={chunk}: the workspace "
                         f"({workspace_bytes(rows, top_k, max(chunk, 0), filtered)} bytes) must fit the bound of "
                         f"{bound} bytes (M={M}, top_k={top_k}); at {rows} rows a chunk of at most {max(widest, 0)} "
                         f"keys fits")
    return rows, chunk, bool(filtered)


class PrefillTopkWorkspace:
    """The device memory of fp8_mqa_topk calls of up to M query rows at one top_k, on one device: make it once
    (prefill_topk_workspace), before capturing a graph, and pass it as workspace= to every call. `rows` and
    `chunk` are its group of query rows and its key-chunk width, `nbytes` what it holds, `bound` the formula's
    bytes (prefill_workspace_bound) for M."""

    def __init__(self, device: Device, M: int, top_k: int, rows: int, chunk: int, filtered: bool, stream=None):
        self.device, self.M, self.top_k, self.rows, self.chunk, self.filtered = \
            device, M, top_k, rows, chunk, filtered
        self.w = DeviceArray.empty((rows, top_k + chunk), np.float32, device, stream)
        self.ws = DeviceArray.empty((rows, top_k), np.int32, device, stream)
        self.cols = DeviceArray.empty((rows, chunk), np.int32, device, stream) if filtered else None
        self.windows = DeviceArray.empty((2, rows), np.int32, device, stream)  # a chunk's ks, ke
        self.nbytes = sum(a.nbytes for a in (self.w, self.cols, self.ws, self.windows) if a is not None)
        self.bound = prefill_workspace_bound(M, top_k)

    def __repr__(self):
        return (f"PrefillTopkWorkspace(M={self.M}, top_k={self.top_k}, rows={self.rows}, chunk={self.chunk}, "
                f"filtered={self.filtered}, nbytes={self.nbytes}, device={self.device!r})")


def prefill_topk_workspace(M: int, N: int, top_k: int, device=None, stream=None, rows=None, chunk=None,
                           filtered=None, H=None, D=None, fused=None):
    """The workspace of fp8_mqa_topk calls of up to M query rows against up to N keys at this top_k, on `device`
    (None: Device()), allocated on `stream`; make it before capturing a graph.

    With the calls' heads H and head dim D given, and where the fused path serves them (fused=None: a tensor-core
    filter for the device and (H, D), top_k <= 2048; fused=True: any shape, the generic filter where there is no
    fast one), a FusedPrefillTopkWorkspace: calls with it run fused, within prefill_workspace_bound(M, top_k,
    parts), parts its filter's key split at (rows, N). Otherwise a PrefillTopkWorkspace for the composed path,
    whose rows, chunk and filtering are plan_prefill_topk's (forced by `rows`, `chunk`, `filtered`), within
    prefill_workspace_bound(M, top_k).

    >>> import hipindexer
    >>> ws = hipindexer.prefill_topk_workspace(64, 1 << 20, 16, device="emu:gfx950")
    >>> ws.nbytes <= ws.bound, ws.rows, ws.chunk, ws.filtered
    (True, 64, 2048, True)
    """
    top_k = check_top_k(top_k)
    M, N = _as_count("M", M, 1), _as_count("N", N, 1)
    dev = device if isinstance(device, Device) else Device(device)
    if fused not in (None, True, False):
        raise ValueError(f"fused: expected None, True or False, got {fused!r}")
    if fused and (H is None or D is None):
        raise ValueError("fused=True: the workspace needs the calls' H and D")
    if H is not None and D is not None and fused is not False:
        H, D = _as_count("H", H, 1), _as_count("D", D, 16)
        if fused or fused_fits(target_of(dev), H, D, top_k, "fast"):
            if top_k > FUSED_TOP_K:
                raise ValueError(f"fused=True: top_k is at most {FUSED_TOP_K} on the fused path, got {top_k}")
            try:
                return FusedPrefillTopkWorkspace(dev, M, N, H, D, top_k, rows, as_stream(stream, dev))
            except ValueError:
                if fused:
                    raise  # a fused layout past the bound: only asked for, the composed path serves instead
    return PrefillTopkWorkspace(dev, M, top_k, *plan_prefill_topk(M, N, top_k, rows, chunk, filtered),
                                as_stream(stream, dev))


@dataclass
class _Step:
    """A key chunk [c0, c0 + width) of a group of rows: its logits launch and its step, prepared."""
    c0: int
    logits: object
    step: object


@dataclass
class _Plan:
    """A call's groups of rows, each with its chunks' prepared launches, over its workspace."""
    dev: object
    s: PrefillShape
    top_k: int
    workspace: PrefillTopkWorkspace | None
    relative: bool = False
    strides: tuple = (0, 0)                       # the indices' and values' row strides, in elements
    groups: list = field(default_factory=list)    # (r0, steps)


def fp8_mqa_topk(q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, top_k, relative=False, sorted=False,
                 return_values=False, accumulation="fast", workspace=None, out=None, stream=None, device=None,
                 **tunables):
    """Each prefill row's top_k keys by logit, on a device; the selection hipindexer.reference.fp8_mqa_topk makes,
    within the logits kernel's accumulation bound (docs/ops.md, "Top-k"; docs/accuracy.md, "The top-k gate").

    q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, accumulation, stream, device and the logits tunables
    (kernel, rows_per_block, split, reverse_rows) are fp8_mqa_logits', checked by the same code: row m's keys are
    max(ks[m], 0) <= n < min(ke[m], N), every window mode (causal, packed requests, any window) alike.
    top_k: an int in 1..4096.
    Returns indices [M, top_k] int32: the key rows n of k (what a consumer indexing the whole k, e.g. a
    sparse attention over the chunk's packed keys, reads), or with relative=True n - cu_seqlen_ks[m] (the key's
    position in its own request: what a sparse attention over one request's keys reads); a row of V < top_k
    keys ends in -1. Unsorted (the default), a row's keys come in ascending order; sorted=True: descending
    value, equal values by lower n. return_values adds their float32 logits (-inf at -1): the result is then
    (indices, values). Deterministic: the same inputs give the same outputs.
    out: None (new arrays) or device arrays to write: the indices array, or (indices, values) with
    return_values; each [M, top_k] with rows that may be padded.
    workspace: a PrefillTopkWorkspace (prefill_topk_workspace) made for this device and top_k and at least M
    rows; None makes one for the call. Its bytes stay within prefill_workspace_bound(M, top_k) whatever N.
    Tunables rows and chunk: the call's own workspace's group of rows and key-chunk width.

    Composed today: the logits kernel on one key chunk of one group of rows at a time, then a step kernel that
    selects over the running candidates and that chunk. Returns without waiting. Raises before anything is copied or
    launched: what fp8_mqa_logits raises, ValueError for a top_k outside 1..4096, a workspace that does not fit
    the call, or (relative=True, host windows) a relative index int32 cannot hold; TypeError for wrong dtypes or
    options. With device-resident windows such an index is written as -1.

    >>> import numpy as np
    >>> import hipindexer
    >>> from hipindexer import testing
    >>> inp = testing.prefill_inputs(np.random.default_rng(0), M=6, N=40, H=8, D=32, mode="causal")
    >>> idx = hipindexer.fp8_mqa_topk(*inp.args(), top_k=4, device="emu:gfx950")
    >>> idx.shape, (idx.numpy() >= 0).sum(axis=1).tolist()
    ((6, 4), [4, 4, 4, 4, 4, 4])
    """
    outs = out if isinstance(out, tuple) else (out,)
    arrays = (q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke, *outs)
    key = None if workspace is None else resident_key(
        arrays, top_k, relative, sorted, return_values, accumulation, device, id(workspace), len(outs),
        *tunables.items())
    plan = prepared(key)
    if plan is None or plan.workspace is not workspace or (q.ptr | k.ptr) % 16:  # misaligned: _full says which
        return _full(arrays, outs, top_k, relative, sorted, return_values, accumulation, workspace, stream, device,
                     tunables, key)
    st = plan.dev.default_stream if stream is None else as_stream(stream, plan.dev)
    return _run(plan, st, q, k, kv_scale, weights, cu_seqlen_ks, cu_seqlen_ke,
                _outputs(plan, outs, return_values, st))


def _use_fused(workspace, fused, target, s, top_k, accumulation, logits_kw, shape_kw, step_block) -> bool:
    """Which path a call takes: its workspace's, else the fused tunable's, else fused wherever it fits (and no
    logits or composed tunable is forced)."""
    if fused not in (None, True, False):
        raise ValueError(f"fused: expected None, True or False, got {fused!r}")
    composed_kw = [n for n in COMPOSED_ONLY if shape_kw.get(n) is not None] + (["step_block"] if step_block else [])
    if isinstance(workspace, FusedPrefillTopkWorkspace) or fused:
        if fused is False:
            raise ValueError("fused=False: the workspace is a FusedPrefillTopkWorkspace, made for the fused path")
        if composed_kw or logits_kw:
            raise ValueError(f"fused path: {', '.join(composed_kw + list(logits_kw))} belong to the composed path")
        if top_k > FUSED_TOP_K:
            raise ValueError(f"fused=True: top_k is at most {FUSED_TOP_K} on the fused path, got {top_k}")
        return True
    if workspace is not None or fused is False or composed_kw or logits_kw:
        return False
    return fused_fits(target, s.H, s.D, top_k, accumulation)


def _has_out(outs) -> bool:
    return len(outs) > 1 or outs[0] is not None


def _outputs(plan, outs, return_values, st):
    """(indices, values or None): the caller's out= arrays, else new ones."""
    given = list(outs) if _has_out(outs) else [None, None]
    idx = given[0] if given[0] is not None else DeviceArray.empty((plan.s.M, plan.top_k), np.int32, plan.dev, st)
    if not return_values:
        return idx, None
    vals = given[1] if len(given) > 1 and given[1] is not None else \
        DeviceArray.empty((plan.s.M, plan.top_k), np.float32, plan.dev, st)
    return idx, vals


def _check_relative(s: PrefillShape, ks, ke) -> None:
    """Host windows: every relative index n - ks[m] of a key in row m's window must fit int32."""
    if not (isinstance(ks, np.ndarray) and isinstance(ke, np.ndarray)) or s.M == 0:
        return
    lo = np.maximum(ks.astype(np.int64), 0)
    hi = np.minimum(ke.astype(np.int64), s.N)
    top = np.where(hi > lo, hi - 1 - ks.astype(np.int64), 0)
    if top.max() > INT32_MAX:
        m = int(np.argmax(top))
        raise ValueError(f"relative: row {m}'s key {int(hi[m]) - 1} is {int(top[m])} past cu_seqlen_ks[{m}], past "
                         f"int32")


def _full(arrays, outs, top_k, relative, sorted, return_values, accumulation, workspace, stream, device, tunables,
          key):
    """Every check, then the plan (kept under `key`), the upload of host arrays, and the run."""
    top_k = check_top_k(top_k)
    for name, flag in (("relative", relative), ("sorted", sorted), ("return_values", return_values)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name}: expected a bool, got {flag!r}")
    q, k, kv_scale, weights, ks, ke = arrays[:6]
    shape_kw = {n: tunables[n] for n in SHAPE_TUNABLES if tunables.get(n) is not None}  # None: the planner decides
    step_block = tunables.get("step_block")
    if step_block not in (None, 256, 512):
        raise ValueError(f"step_block: expected None, 256 or 512, got {step_block!r}")
    logits_kw = {n: v for n, v in tunables.items() if n not in SHAPE_TUNABLES + ("step_block", "fused")}
    c = check_prefill_call(q, k, kv_scale, weights, ks, ke, accumulation, stream, device, logits_kw,
                           PREFILL_TUNABLES, op="prefill top-k", others=outs)
    dev, st, s = c.dev, c.st, c.s
    asked = 1 + bool(return_values)
    if _has_out(outs) and len(outs) != asked:
        raise ValueError(f"out: expected {asked} arrays (indices{', values' if return_values else ''}), "
                         f"got {len(outs)}")
    named = [("out", I32, "the indices")] + ([("out (values)", F32, "the values")] if return_values else [])
    if _has_out(outs):
        for (name, dtype, what), a in zip(named, outs):
            _written(name, a, dtype, s.M, top_k, what, dev, st)
    if relative:
        _check_relative(s, c.ks, c.ke)
    fused = _use_fused(workspace, tunables.get("fused"), target_of(dev), s, top_k, accumulation, logits_kw,
                       shape_kw, step_block)
    if fused and workspace is None:
        try:
            workspace = FusedPrefillTopkWorkspace(dev, max(s.M, 1), max(s.N, 1), s.H, s.D, top_k,
                                                  shape_kw.get("rows"), st)
        except ValueError:
            if tunables.get("fused"):
                raise
            fused = False  # the sample's keys past the bound (few rows, many keys): the composed path serves
    if fused:
        check_workspace(workspace, FusedPrefillTopkWorkspace, "prefill_topk_workspace", dev)
        check_fused_call(workspace, s, top_k)
        o = (outs[0], outs[1] if return_values and len(outs) > 1 else None) if _has_out(outs) else (None, None)
        plan = plan_fused_call(dev, s, top_k, workspace, relative, sorted, accumulation,
                               (_stride(o[0], s.M, top_k), _stride(o[1], s.M, top_k)))
        remember(key, plan)
        c.upload()
        return _run(plan, st, c.q, c.k, c.kv_scale, c.weights, c.ks, c.ke, _outputs(plan, outs, return_values, st))
    if workspace is None:
        if s.M and s.N:
            workspace = PrefillTopkWorkspace(dev, s.M, top_k, *plan_prefill_topk(s.M, s.N, top_k, **shape_kw), st)
    else:
        check_workspace(workspace, PrefillTopkWorkspace, "prefill_topk_workspace", dev)
        if workspace.top_k != top_k or workspace.M < s.M:
            raise ValueError(f"workspace: made for top_k={workspace.top_k} and M <= {workspace.M}; the call has "
                             f"top_k={top_k}, M={s.M}")
        for n, v in shape_kw.items():
            if v != getattr(workspace, n):
                raise ValueError(f"{n}: the workspace's {n} is {getattr(workspace, n)}, got {v!r}")
    plan = _plan(dev, s, top_k, workspace, relative, sorted, return_values, accumulation, logits_kw, step_block,
                 (outs[0], outs[1] if return_values and len(outs) > 1 else None) if _has_out(outs) else (None, None))
    remember(key, plan)
    c.upload()
    return _run(plan, st, c.q, c.k, c.kv_scale, c.weights, c.ks, c.ke, _outputs(plan, outs, return_values, st))


def chunk_starts(N: int, chunk: int, top_k: int, filtered: bool) -> list[int]:
    """Where a row's key chunks start: every `chunk` keys; filtered, after a first chunk of FIRST_CHUNK top_k keys
    (rounded up to CHUNK_ALIGN, at most `chunk`), whose selection sets the candidates that filter the others."""
    if N <= chunk:
        return [0]
    if not filtered:
        return list(range(0, N, chunk))
    first = min(chunk, -(-FIRST_CHUNK * top_k // CHUNK_ALIGN) * CHUNK_ALIGN)
    return [0] + list(range(first, N, chunk))


def _plan(dev, s, top_k, ws, relative, sorted, return_values, accumulation, logits_kw, step_block, outs) -> _Plan:
    """The groups and chunks of a call and the prepared launches of each. step_block: the step's threads (None:
    512 for groups of up to STEP_WIDE_ROWS rows per CU, else 256). outs: the caller's (indices, values) arrays
    (None: new ones, contiguous), whose strides it fixes."""
    plan = _Plan(dev, s, top_k, ws, bool(relative), (_stride(outs[0], s.M, top_k), _stride(outs[1], s.M, top_k)))
    if s.M == 0 or s.N == 0:
        return plan
    target = target_of(dev)
    w_stride = top_k + ws.chunk
    idx_stride, val_stride = plan.strides
    logits_of = {}

    def logits(r, width):
        if (r, width) not in logits_of:
            p = plan_prefill(r, width, s.H, s.D, target, accumulation=accumulation, **logits_kw)
            logits_of[r, width] = prepare_prefill(kernel_for(dev, p.kernel, p.variant), p,
                                                  PrefillShape(r, width, s.H, s.D), w_stride, True)
        return logits_of[r, width]

    if step_block is None:
        step_block = 512 if min(ws.rows, s.M) <= STEP_WIDE_ROWS * target.num_cus else 256
    step_key = "topk_chunk_step_wide" if step_block == 512 else "topk_chunk_step"
    step = kernel_for(dev, step_key)
    starts = chunk_starts(s.N, min(ws.chunk, s.N), top_k, ws.filtered)
    ends = starts[1:] + [s.N]
    for r0 in range(0, s.M, ws.rows):
        r = min(ws.rows, s.M - r0)
        steps = []
        for i, (c0, c1) in enumerate(zip(starts, ends)):
            last = c1 == s.N
            nxt = (-1, 0) if last else (ends[i], ends[i + 1] - ends[i])
            launch = step.prepare(max(1, min(MAX_BLOCKS, r)), step_block, pointers=STEP_POINTERS, w_stride=w_stride,
                                  cols_stride=ws.chunk if ws.filtered else 0, ws_stride=top_k,
                                  indices_stride=idx_stride, values_stride=val_stride, base=c0, next_key=nxt[0],
                                  rows=r, top_k=top_k, width=c1 - c0, next_width=nxt[1], sorted=int(bool(sorted)),
                                  last=int(last))
            steps.append(_Step(c0, logits(r, c1 - c0), launch))
        plan.groups.append((r0, steps))
    return plan


def _run(plan, st, q, k, kv_scale, weights, ks, ke, outs):
    """The call's launches, in order, on `st`: device arrays only."""
    idx, vals = outs
    result = (idx, vals) if vals is not None else idx
    s, top_k, h = plan.s, plan.top_k, st.handle
    if s.M and not s.N:  # no keys: every row is empty
        idx.fill(-1, st)
        if vals is not None:
            vals.fill(-np.inf, st)
    if not plan.groups:
        return result
    if isinstance(plan, FusedPlan):
        run_fused(plan, st, q, k, kv_scale, weights, ks, ke, idx, vals)
        return result
    ws = plan.workspace
    w, cols, sel = ws.w.ptr, ws.cols.ptr if ws.filtered else 0, ws.ws.ptr
    cks, cke = ws.windows.ptr, ws.windows.ptr + 4 * ws.rows
    qrow, wrow = s.H * s.D, 4 * s.H  # bytes per row of q and of weights
    istr, vstr = 4 * plan.strides[0], 4 * plan.strides[1]
    for r0, steps in plan.groups:
        qg, wg, ksg, keg = q.ptr + r0 * qrow, weights.ptr + r0 * wrow, ks.ptr + 4 * r0, ke.ptr + 4 * r0
        ig, vg = idx.ptr + r0 * istr, 0 if vals is None else vals.ptr + r0 * vstr
        rel = ksg if plan.relative else 0
        for st_ in steps:
            wins = (ksg, keg) if st_.c0 == 0 else (cks, cke)
            st_.logits(h, qg, k.ptr + st_.c0 * s.D, kv_scale.ptr + 4 * st_.c0, wg, *wins, w + 4 * top_k)
            st_.step(h, w, cols, sel, ig, vg, rel, ksg, keg, cks, cke)
    return result
