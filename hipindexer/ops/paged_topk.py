"""The decode top-k on a device: ``fp8_paged_mqa_topk`` (docs/ops.md, "Top-k"). Three paths, each within the
workspace bound:

- whole-row (every target, for a few sequences of long rows whose logits fit the bound): the logits op into the
  workspace, topk_logits over it, the slots mapped from the selection (hipindexer/ops/paged_topk_whole.py).
- fused (sm_90a and gfx950, where the target's fast decode kernel serves the shape, next_n <= 2, top_k <= 2048):
  one launch of that kernel's unit selecting on chip (hsaco_src/sm90a/paged_mqa_topk_wgmma_tma.hip,
  hsaco_src/gfx950/paged_mqa_topk_mfma.hip), each unit writing the top_k of its piece of every row, then one merge
  launch (hsaco_src/generic/paged_topk_merge.hip). Its workspace holds
  the pieces: (units + B) x next_n x top_k entries of 8 bytes, their counts, and per sequence the list of its
  pieces' slots, which the merge empties (its last row to finish, counted in seq_done).
  hipindexer/ops/paged_topk_fused.py has its kernels' plan and launches.
- composed (every target and shape), below.

The composed path takes the keys in chunks of C columns (a multiple of the block size), and a
workspace W of [rows, top_k + C] float32 holds the running candidates' values in its first top_k columns (their
global keys in the indices output, in ascending order) and the chunk's logits after them. Per chunk two launches:
the logits op on that chunk into W (the first chunk on the caller's lengths and table, the others on those the
previous step wrote), and the step (hsaco_src/generic/paged_topk_step.hip), which selects over the candidates and
the chunk, merges the selection into the new candidates (on the last chunk the indices, values and slots asked
for), and writes the next chunk's lengths and block-table columns. Candidates come first in W and stay in key
order, so ties across chunks go to the lower key, as within one.

The workspace's size is bounded by a formula of the batch alone (workspace_bound), whatever max_model_len: C is
the widest chunk that keeps it under the bound. It is allocated by paged_topk_workspace (once, before a graph
is captured) or, without one, by each call.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..arguments import F32, I32, check_top_k
from ..catalog import KERNEL
from ..plan import plan_decode
from ..plan.bounds import workspace_bound
from ..plan.decode import DECODE_TUNABLES
from ..runtime import Device, DeviceArray
from ..runtime.device import as_stream
from .decode import check_decode_call, decode_pointers, plan_and_prepare_decode
from .launch import (INT32_MAX, check_tunables, check_workspace, kernel_for, prepared, remember, resident_key,
                     target_of)
from .paged_topk_fused import (FUSED_KERNELS, FUSED_POINTERS, FUSED_STAGES, FusedPlan, check_cap,
                               check_merge_group, fused_arrays,
                               fused_pays, fused_refusal, fused_units, plan_fused, run_fused)
from .paged_topk_whole import WholePlan, check_whole, plan_whole, run_whole, takes_whole, whole_arrays
from .topk import _grid, _stride, _written

PAGED_TOPK_TUNABLES = DECODE_TUNABLES + ("chunk", "step_block", "fused", "whole", "stages", "units", "cap",
                                         "merge_group")
STEP_POINTERS = ("w", "ws", "indices", "values", "slots", "context_lens", "next_n_lens", "block_tables", "chunk_lens",
                 "chunk_table")
STEP_WIDE_ROWS = 4  # batches of up to this many rows per CU (SM) take the step's 512-thread build


def workspace_bytes(B: int, next_n: int, top_k: int, chunk: int, block_size: int) -> int:
    """What a workspace of chunk C takes: W [rows, top_k + C] float32, the W-space indices [rows, top_k] int32,
    a chunk's lengths [rows] int32 and its block table [B, C / block_size] int32."""
    R = B * next_n
    return 4 * R * (top_k + chunk) + 4 * R * top_k + 4 * R + 4 * B * (chunk // block_size)


def widest_chunk(B: int, next_n: int, top_k: int, block_size: int, units: int) -> int:
    """The widest chunk (a multiple of block_size, 0 when none fits) whose workspace stays within the bound."""
    R = B * next_n
    room = workspace_bound(B, next_n, top_k, units) - 4 * R * (2 * top_k + 1)
    blocks = room // (4 * (R * block_size + B)) if R else INT32_MAX
    return min(blocks, (INT32_MAX - top_k) // block_size) * block_size


class PagedTopkWorkspace:
    """The device memory of fp8_paged_mqa_topk for batches of up to B sequences of next_n rows at one top_k and
    block_size, on one device: make it once (paged_topk_workspace), before capturing a graph, and pass it as
    workspace= to every call. `chunk` is its key-chunk width C (composed path), `width` the longest max_model_len
    it holds a row of (whole-row path), `nbytes` what it holds, `bound` the formula's bytes (workspace_bound) for
    its batch."""

    def __init__(self, device: Device, B: int, next_n: int, top_k: int, block_size: int, chunk: int | None,
                 units: int, stream=None, fused_units: int = 0, whole_len: int = 0):
        self.device, self.B, self.next_n, self.top_k, self.block_size, self.chunk = \
            device, B, next_n, top_k, block_size, chunk
        self.fused, self.units = fused_units > 0, fused_units
        self.whole, self.width = whole_len > 0, whole_len
        R = B * next_n
        if self.whole:  # the logits of every row and topk_logits' workspace (paged_topk_whole.whole_arrays)
            self.w, self.topk = arrays = whole_arrays(device, B, next_n, top_k, whole_len, stream)
        elif self.fused:  # the fused kernel's pieces and the sequences' lists (paged_topk_fused.fused_arrays)
            arrays = fused_arrays(device, B, next_n, top_k, fused_units, stream)
            for name, a in zip(FUSED_POINTERS + ("seq_done",), arrays):
                setattr(self, name, a)
        else:
            self.w = DeviceArray.empty((R, top_k + chunk), np.float32, device, stream)
            self.ws = DeviceArray.empty((R, top_k), np.int32, device, stream)
            self.lens = DeviceArray.empty((B, next_n), np.int32, device, stream)
            self.table = DeviceArray.empty((B, chunk // block_size), np.int32, device, stream)
            arrays = (self.w, self.ws, self.lens, self.table)
        self.nbytes = sum(a.nbytes for a in arrays)
        self.bound = workspace_bound(B, next_n, top_k, fused_units if self.fused else units)

    def __repr__(self):
        form = f"fused, units={self.units}" if self.fused else \
            f"whole, width={self.width}" if self.whole else f"chunk={self.chunk}"
        return (f"PagedTopkWorkspace(B={self.B}, next_n={self.next_n}, top_k={self.top_k}, "
                f"block_size={self.block_size}, {form}, nbytes={self.nbytes}, device={self.device!r})")


def _chunk_of(B, next_n, top_k, block_size, max_model_len, units, chunk) -> int:
    """The chunk width of a workspace: the widest within the bound, no wider than a row needs, or `chunk` (the
    tunable: a multiple of block_size within the bound)."""
    widest = widest_chunk(B, next_n, top_k, block_size, units)
    need = -(-max_model_len // block_size) * block_size
    if chunk is not None:
        if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < block_size \
                or chunk % block_size or chunk > widest:
            raise ValueError(f"chunk: expected a multiple of block_size={block_size} in [{block_size}, {widest}] "
                             f"(the workspace bound's widest), got {chunk!r}")
        return min(int(chunk), need)
    if widest < block_size:
        raise ValueError(f"block_size: {block_size} keys per block do not fit the top-k workspace's bound for "
                         f"B={B}, next_n={next_n}, top_k={top_k} (at most {widest} keys per chunk)")
    return min(widest, need)


def paged_topk_workspace(B: int, next_n: int, top_k: int, max_model_len: int, block_size: int, device=None,
                         stream=None, chunk=None, heads=None, head_dim=128, fused=None,
                         whole=None) -> PagedTopkWorkspace:
    """The workspace of fp8_paged_mqa_topk calls of up to B sequences of next_n rows with this top_k and
    block_size, on `device` (None: Device()). Allocated on `stream`; make it before capturing a graph.

    heads (and head_dim): the queries' H (and D). Given them, where the fused kernel serves that shape
    (fused_refusal: sm_90a or gfx950, H in {32, 64}, D = 128, block_size 16 or 64 on sm_90a and a power of two
    >= 16 on gfx950, next_n <= 2, top_k <= 2048) and pays
    (fused_pays, from B and max_model_len; fused=True: wherever it serves, fused=False: never) the workspace is the
    fused path's, which only calls of that shape (accumulation="fast", no split_kv) may use; else it is the
    composed path's, whose chunk is the widest the bound allows (workspace_bound, with the device's CU or SM
    count), no wider than max_model_len needs; `chunk` forces a narrower one (a multiple of block_size). Before
    either, where the whole-row path pays (whole_pays: the batch's logits and topk_logits' workspace within the
    bound; whole=True: the same, or ValueError; whole=False: never; not with chunk= or fused=) the workspace is the
    whole-row path's, for calls of max_model_len up to the one given. The workspace's `fused` and `whole` say which
    it is.

    >>> import hipindexer
    >>> ws = hipindexer.paged_topk_workspace(4, 2, 64, 100_000, 16, device="emu:gfx950")
    >>> ws.nbytes <= ws.bound, ws.chunk % 16, ws.fused
    (True, 0, False)
    """
    top_k = check_top_k(top_k)
    for name, v, lo in (("B", B, 0), ("next_n", next_n, 1), ("max_model_len", max_model_len, 1),
                        ("block_size", block_size, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
    for name, v in (("heads", heads), ("head_dim", head_dim)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
            raise ValueError(f"{name}: expected None or an int >= 1, got {v!r}")
    dev = device if isinstance(device, Device) else Device(device)
    t = target_of(dev)
    st = as_stream(stream, dev)
    if fused not in (None, True, False):
        raise ValueError(f"fused: expected None, True or False, got {fused!r}")
    check_whole(whole, fused, chunk)
    if takes_whole(whole, fused, chunk, int(B), int(next_n), top_k, int(max_model_len), t):
        return PagedTopkWorkspace(dev, int(B), int(next_n), top_k, int(block_size), None, t.num_cus, st,
                                  whole_len=int(max_model_len))
    why = "needs heads=" if heads is None else \
        fused_refusal(t, int(next_n), top_k, int(heads), int(head_dim), int(block_size), B=int(B))
    if fused and (why or chunk is not None):
        raise ValueError(f"fused: True, but the fused kernel {why or 'takes no chunk='}")
    if why is None and chunk is None and fused is not False and \
            (fused or fused_pays(t, int(B), int(max_model_len), top_k)):
        return PagedTopkWorkspace(dev, int(B), int(next_n), top_k, int(block_size), None, t.num_cus, st,
                                  fused_units(t))
    C = _chunk_of(int(B), int(next_n), top_k, int(block_size), int(max_model_len), t.num_cus, chunk)
    return PagedTopkWorkspace(dev, int(B), int(next_n), top_k, int(block_size), C, t.num_cus, st)


@dataclass
class _Step:
    """One key chunk: its logits launch (of ops.decode.prepare_decode) with the index of its pointer set in the
    plan's `pointer_sets`, and its step, both prepared."""
    logits: object
    pointer_set: int
    step: object


@dataclass
class _Plan:
    """A call's chunks over its workspace, every launch prepared but its per-call pointers."""
    dev: object
    R: int
    top_k: int
    steps: list
    workspace: PagedTopkWorkspace | None
    lens: DeviceArray | None = None   # a chunk's [B, next_n] lengths, written by the step before it
    table: DeviceArray | None = None  # a chunk's [B, C / block_size] block table, likewise
    logits_out: DeviceArray | None = None  # where every chunk's logits go: W past the candidates
    # The logits launches' pointer sets, (first chunk?, the cache's tensor-map finder or None): every chunk's
    # logits land at W's first chunk column, so a call fills in each set once (a chunk's width may plan another
    # kernel, whence more than two).
    pointer_sets: list = field(default_factory=list)


def fp8_paged_mqa_topk(q, kv_cache, weights, context_lens, block_tables, max_model_len, top_k, next_n_lens=None,
                       preshuffle=False, split_kv=None, accumulation="fast", sorted=False, return_values=False,
                       return_slots=False, workspace=None, out=None, errors=None, stream=None, device=None,
                       **tunables):
    """Each decode row's top_k keys by logit, on a device; the selection hipindexer.reference.fp8_paged_mqa_topk
    makes, within the logits kernel's accumulation bound (docs/ops.md, "Top-k"; docs/accuracy.md, "The top-k
    gate").

    q, kv_cache, weights, context_lens ([B] with next_n_lens, or [B, next_n]), block_tables, max_model_len,
    next_n_lens, preshuffle, split_kv, accumulation, errors, stream, device and the tunable kernel are the
    logits op's (fp8_paged_mqa_logits), checked by the same code, with the same rules for values only the device
    holds: keys behind a block id outside the cache, and rows of a malformed length, are never selected, and
    their bits are OR-ed into errors=. top_k: an int in 1..4096.
    Returns indices [B * next_n, top_k] int32: key positions n in the sequence; a row of V < top_k keys ends in
    -1. Unsorted (the default), a row's keys come in ascending order; sorted=True: descending value, equal
    values by lower n. return_values adds their float32 logits (-inf at -1), return_slots their cache slots
    block_tables[b, n // block_size] * block_size + n % block_size (-1 at -1); then the result is the tuple
    (indices, values, slots) of what was asked.
    out: None (new arrays) or device arrays to write: the indices array, or a tuple shaped as the result;
    each [B * next_n, top_k] with rows that may be padded.
    workspace: a PagedTopkWorkspace (paged_topk_workspace) made for this device, top_k, next_n and block size
    and at least B sequences, of the path the call takes; None makes one for the call. Its bytes stay within
    workspace_bound, whatever max_model_len.

    Three paths (docs/ops.md, "Top-k"). Whole-row (every target, where whole_pays: its logits with topk_logits'
    workspace within the bound): the logits op into the workspace, topk_logits over it, and a kernel that maps the
    selection to cache slots. Fused (sm_90a and
    gfx950, where fused_refusal finds nothing against the call's shape: H in {32, 64}, D = 128, the target's fast
    block sizes, next_n <= 2, top_k <= 2048, accumulation="fast", no split_kv):
    the decode kernel's unit selects on chip and a merge kernel joins the units' pieces; the op takes it where
    fused_pays. Composed (everywhere else): the logits kernel on one key chunk at a time, then a step kernel that
    selects over the running candidates and that chunk. Tunables: whole (None: the op's choice; True: the
    whole-row path or ValueError; False: never), fused (None: the op's choice; True: the fused path or ValueError;
    False: the composed path), stages (the sm_90a fused kernel's ring
    depth, 6 to 24 in sixes), units and cap (the fused kernel's units at most, and its candidates a row on chip at
    most: top_k and two rounds' worth or more), merge_group (the pieces a first merge level takes together: None
    the op's choice, 0 one level, 2 to the entries the merge holds // top_k: 24576 on sm_90a, 16384 on gfx950),
    chunk and step_block (the composed path's chunk width, a multiple of the block size, and its step's threads,
    256 or 512). Returns without waiting. Raises before
    anything is copied or launched: what fp8_paged_mqa_logits raises, ValueError for a top_k outside 1..4096, a
    workspace that does not fit the call, or (with return_slots) a cache whose slots int32 cannot hold; TypeError
    for wrong dtypes or options.

    >>> import numpy as np
    >>> import hipindexer
    >>> from hipindexer import testing
    >>> case = testing.DecodeCase(B=2, next_n=2, H=16, D=64, block_size=16, mean_context=40)
    >>> inp = testing.decode_inputs(np.random.default_rng(0), case)
    >>> idx, slots = hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], top_k=8, return_slots=True,
    ...                                            device="emu:gfx950")
    >>> idx.shape, bool(((idx.numpy() < 0) == (slots.numpy() < 0)).all())
    ((4, 8), True)
    """
    outs = out if isinstance(out, tuple) else (out,)
    arrays = (q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, *outs)
    key = None if workspace is None else resident_key(
        arrays, max_model_len, top_k, preshuffle, split_kv, accumulation, sorted, return_values, return_slots,
        device, id(workspace), len(outs), *tunables.items())
    plan = prepared(key)
    if plan is None or plan.workspace is not workspace or (q.ptr | kv_cache.ptr) % 16:  # misaligned: _full says so
        return _full(arrays, outs, max_model_len, top_k, next_n_lens, preshuffle, split_kv, accumulation, sorted,
                     return_values, return_slots, workspace, stream, device, tunables, key)
    st = plan.dev.default_stream if stream is None else as_stream(stream, plan.dev)
    return _run(plan, st, q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors,
                _outputs(plan, outs, return_values, return_slots, st), return_values, return_slots)


def _has_out(outs) -> bool:
    """out= was given: (x,) for an array x, or a tuple (never compared with ==: it may hold numpy arrays)."""
    return len(outs) > 1 or outs[0] is not None


def _fixed_outs(outs, asked, return_values, return_slots) -> tuple:
    """(indices, values, slots): the out= arrays a plan is made for, None for one the op makes each call (and for
    values or slots not asked for)."""
    given = list(outs) if _has_out(outs) else [None] * asked
    return given.pop(0), given.pop(0) if return_values else None, given.pop(0) if return_slots else None


def _outputs(plan, outs, return_values, return_slots, st):
    """(indices, values or None, slots or None): the caller's out= arrays, else new ones."""
    given = list(outs) if _has_out(outs) else []
    got = []
    for want, dtype in ((True, np.int32), (return_values, np.float32), (return_slots, np.int32)):
        if want:
            a = given.pop(0) if given else None
            got.append(DeviceArray.empty((plan.R, plan.top_k), dtype, plan.dev, st) if a is None else a)
        else:
            got.append(None)
    return tuple(got)


def _full(arrays, outs, max_model_len, top_k, next_n_lens, preshuffle, split_kv, accumulation, sorted,
          return_values, return_slots, workspace, stream, device, tunables, key):
    """Every check, then the plan (kept under `key`), the upload of host arrays, and the run."""
    top_k = check_top_k(top_k)
    for name, flag in (("sorted", sorted), ("return_values", return_values), ("return_slots", return_slots)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name}: expected a bool, got {flag!r}")
    q, kv_cache, weights, context_lens, block_tables, _, errors = arrays[:7]
    check_tunables("paged top-k", tunables, PAGED_TOPK_TUNABLES)
    chunk, step_block, fused = tunables.get("chunk"), tunables.get("step_block"), tunables.get("fused")
    whole = tunables.get("whole")
    check_whole(whole, fused, chunk)
    if step_block not in (None, 256, 512):
        raise ValueError(f"step_block: expected None, 256 or 512, got {step_block!r}")
    if fused not in (None, True, False):
        raise ValueError(f"fused: expected None (where it serves), True or False, got {fused!r}")
    stages = tunables.get("stages")
    if stages is not None and (isinstance(stages, bool) or stages not in range(6, 19, 6)):
        raise ValueError(f"stages: expected None or one of 6, 12, 18 (the fused kernel's ring depth), got {stages!r}")
    units_asked = tunables.get("units")
    if units_asked is not None and (isinstance(units_asked, bool) or not isinstance(units_asked, (int, np.integer))
                                    or units_asked < 1):
        raise ValueError(f"units: expected None or an int >= 1 (the fused kernel's units at most), got {units_asked!r}")
    logits_tunables = {k: v for k, v in tunables.items()
                       if k not in ("chunk", "step_block", "fused", "whole", "stages", "units", "cap",
                                    "merge_group")}
    c = check_decode_call(q, kv_cache, weights, context_lens, block_tables, max_model_len, next_n_lens, preshuffle,
                          split_kv, accumulation, errors, stream, device, logits_tunables, DECODE_TUNABLES,
                          others=outs)
    dev, st, s = c.dev, c.st, c.s
    R = s.B * s.next_n
    if return_slots and s.num_blocks * s.block_size - 1 > INT32_MAX:
        raise ValueError(f"return_slots: a cache of {s.num_blocks} blocks of {s.block_size} has slots past int32")
    asked = 1 + bool(return_values) + bool(return_slots)
    if _has_out(outs) and len(outs) != asked:
        raise ValueError(f"out: expected {asked} arrays (indices{', values' if return_values else ''}"
                         f"{', slots' if return_slots else ''}), got {len(outs)}")
    named = [("out", I32, "the indices")] + ([("out (values)", F32, "the values")] if return_values else []) + \
        ([("out (slots)", I32, "the cache slots")] if return_slots else [])
    if _has_out(outs):
        for (name, dtype, what), a in zip(named, outs):
            _written(name, a, dtype, R, top_k, what, dev, st)
    t = target_of(dev)
    units = t.num_cus
    if workspace is not None:
        check_workspace(workspace, PagedTopkWorkspace, "paged_topk_workspace", dev)
    why = fused_refusal(t, s.next_n, top_k, s.H, s.D, s.block_size, preshuffle, accumulation, split_kv,
                        logits_tunables.get("kernel"), B=s.B if workspace is None else workspace.B)
    if workspace is not None:
        made = (workspace.top_k, workspace.next_n, workspace.block_size)
        if made != (top_k, s.next_n, s.block_size) or workspace.B < s.B:
            raise ValueError(f"workspace: made for top_k={made[0]}, next_n={made[1]}, block_size={made[2]} and "
                             f"B <= {workspace.B}; the call has top_k={top_k}, next_n={s.next_n}, "
                             f"block_size={s.block_size}, B={s.B}")
        if workspace.whole and (fused is not None or whole is False or chunk is not None):
            raise ValueError("workspace: made for the whole-row path (paged_topk_workspace's whole=), which this "
                             "call cannot use: it asks for another path (fused=, whole=False or chunk=)")
        if workspace.whole and s.max_model_len > workspace.width:
            raise ValueError(f"workspace: holds rows of up to {workspace.width} keys (the max_model_len it was made "
                             f"for); the call has max_model_len={s.max_model_len}")
        if whole and not workspace.whole:
            raise ValueError("whole: True needs a whole-row workspace (paged_topk_workspace with whole=True) or none")
        if workspace.fused and (why or fused is False or chunk is not None):
            raise ValueError("workspace: made for the fused kernel (paged_topk_workspace with heads=), which this "
                             "call cannot use: " + (f"the fused kernel {why}" if why else
                                                    "it asks for the composed path (fused=False or chunk=)"))
        if not workspace.fused and fused:
            raise ValueError("fused: True needs a fused workspace (paged_topk_workspace with heads=) or none")
        if chunk is not None and chunk != workspace.chunk:
            raise ValueError(f"chunk: the workspace's chunk is {workspace.chunk}, got {chunk!r}")
        use_fused, use_whole = workspace.fused, workspace.whole
    else:
        if fused and why:
            raise ValueError(f"fused: True, but the fused kernel {why}")
        use_whole = takes_whole(whole, fused, chunk, s.B, s.next_n, top_k, s.max_model_len, t)
        use_fused = not use_whole and why is None and chunk is None and \
            (fused or (fused is None and fused_pays(t, s.B, s.max_model_len, top_k)))
        if s.B == 0:
            workspace = None
        elif use_whole:
            workspace = PagedTopkWorkspace(dev, s.B, s.next_n, top_k, s.block_size, None, units, st,
                                           whole_len=s.max_model_len)
        elif use_fused:
            workspace = PagedTopkWorkspace(dev, s.B, s.next_n, top_k, s.block_size, None, units, st, fused_units(t))
        else:
            C = _chunk_of(s.B, s.next_n, top_k, s.block_size, s.max_model_len, units, chunk)
            workspace = PagedTopkWorkspace(dev, s.B, s.next_n, top_k, s.block_size, C, units, st)
    fixed = _fixed_outs(outs, asked, return_values, return_slots)
    logits_kw = dict(preshuffle=preshuffle, split_kv=split_kv, accumulation=accumulation, **logits_tunables)
    if s.B and use_whole:
        plan = plan_whole(dev, s, top_k, workspace, sorted, return_values, fixed, logits_kw)
    elif s.B and use_fused:
        if stages is not None and not FUSED_KERNELS[t.arch].ring:
            raise ValueError(f"stages: the depth of a fused kernel's stage ring; {t.arch}'s has none")
        plan = plan_fused(dev, s, top_k, workspace, sorted, fixed, preshuffle, stages or FUSED_STAGES[s.next_n],
                          units_asked, check_cap(t, top_k, tunables.get("cap")),
                          check_merge_group(t.arch, top_k, tunables.get("merge_group")))
    else:
        if s.B:  # the logits op's kernel choice is refused here, before anything moves
            plan_decode(s.B, s.next_n, s.H, s.D, s.block_size, min(s.max_model_len, workspace.chunk),
                        target_of(dev), **logits_kw)
        plan = _plan(dev, s, top_k, workspace, sorted, fixed, step_block, logits_kw)
    remember(key, plan)
    c.upload()
    return _run(plan, st, c.q, c.kv_cache, c.weights, c.context_lens, c.block_tables, c.next_n_lens, c.errors,
                _outputs(plan, outs, return_values, return_slots, st), return_values, return_slots)


def _plan(dev, s, top_k, ws, sorted, outs, step_block, logits_kw) -> _Plan:
    """The chunks of a call: their widths and every launch prepared, the logits kernel's for each chunk (the first
    on the caller's lengths and table, the others on the workspace's [B, next_n] lengths and [B, C / block_size]
    table) and the step's. step_block: the step's threads (None: 512 for batches of up to STEP_WIDE_ROWS rows per
    CU, else 256). outs: the caller's (indices, values, slots) arrays (None: new ones, contiguous), whose strides
    it fixes. logits_kw: the logits op's options (preshuffle, split_kv, accumulation, kernel)."""
    R, mml = s.B * s.next_n, s.max_model_len
    if s.B == 0:
        return _Plan(dev, 0, top_k, [], ws)
    idx, vals, slots = outs
    C = ws.chunk
    if step_block is None:
        step_block = 512 if R <= STEP_WIDE_ROWS * target_of(dev).num_cus else 256
    step_key = "paged_topk_step_wide" if step_block == 512 else "paged_topk_step"
    kern = kernel_for(dev, step_key)
    w_stride = _stride(ws.w, R, top_k + C)
    fixed = dict(w_stride=w_stride, ws_stride=top_k, indices_stride=_stride(idx, R, top_k),
                 values_stride=_stride(vals, R, top_k), slots_stride=_stride(slots, R, top_k), rows=R, top_k=top_k,
                 next_n=s.next_n, max_blocks=s.max_blocks, block_size=s.block_size, chunk_blocks=C // s.block_size,
                 num_blocks=s.num_blocks,
                 lens_per_row=int(s.lens_per_row), sorted=int(bool(sorted)))
    plan = _Plan(dev, R, top_k, [], ws, ws.lens[:s.B], ws.table[:s.B], ws.w[:R, top_k:])
    later = replace(s, max_blocks=C // s.block_size, lens_per_row=True)  # the workspace's lengths and table
    made, map_of = {}, None  # one finder of the cache's tensor map for every chunk's launch
    for c0 in range(0, mml, C):
        width = min(C, mml - c0)
        last = c0 + width == mml
        if (c0 == 0, width) not in made:
            shape = replace(s if c0 == 0 else later, max_model_len=width)
            made[c0 == 0, width] = plan_and_prepare_decode(dev, shape, w_stride if R > 1 else width, True, map_of,
                                                           **logits_kw)
            map_of = map_of or made[c0 == 0, width][1]
        step = kern.prepare(_grid(R), KERNEL[step_key].block, pointers=STEP_POINTERS, base=c0,
                            next_key=-1 if last else c0 + C, width=width, last=int(last), **fixed)
        launch, finder = made[c0 == 0, width]
        if (c0 == 0, finder) not in plan.pointer_sets:
            plan.pointer_sets.append((c0 == 0, finder))
        plan.steps.append(_Step(launch, plan.pointer_sets.index((c0 == 0, finder)), step))
    return plan


def _run(plan, st, q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, outs, return_values,
         return_slots):
    """The call's launches, in order, on `st`: device arrays only."""
    idx, vals, slots = outs
    result = (idx,) + ((vals,) if return_values else ()) + ((slots,) if return_slots else ())
    if plan.R == 0:
        return result if len(result) > 1 else idx
    ws = plan.workspace
    if isinstance(plan, FusedPlan):
        run_fused(plan, st, q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, idx, vals, slots)
        return result if len(result) > 1 else idx
    if isinstance(plan, WholePlan):
        run_whole(plan, st, q, kv_cache, weights, context_lens, block_tables, next_n_lens, errors, idx, vals, slots)
        return result if len(result) > 1 else idx
    ptrs = (ws.w.ptr, ws.ws.ptr, idx.ptr, 0 if vals is None else vals.ptr, 0 if slots is None else slots.ptr,
            context_lens.ptr, 0 if next_n_lens is None else next_n_lens.ptr, block_tables.ptr, ws.lens.ptr,
            ws.table.ptr)
    out = plan.logits_out
    sets = [decode_pointers(map_of, st, q, kv_cache, weights, context_lens, next_n_lens, block_tables, out, errors)
            if first else decode_pointers(map_of, st, q, kv_cache, weights, plan.lens, None, plan.table, out, errors)
            for first, map_of in plan.pointer_sets]
    h = st.handle
    for step in plan.steps:  # the first chunk on the caller's own lengths and table, cut by its max_model_len
        step.logits(h, *sets[step.pointer_set])
        step.step(h, *ptrs)
    return result if len(result) > 1 else idx
