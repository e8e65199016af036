"""hipindexer.fp8_mqa_topk on a device, against hipindexer.reference.fp8_mqa_topk and the top-k gate.

Every case is a named function of a device in CASES: tests/test_prefill_topk.py runs them on the emulated MI355X
(this file in a child pytest with -p emu_session, where Device() is the emulator) and, marked gpu, on a real GPU.
Outputs are poisoned before each call (indices INT32_MIN, values NaN), so a slot the op leaves unwritten fails;
inputs are fresh random arrays per case. Groups of rows and key chunks are forced small (the tunables rows and
chunk) so that small cases cross several of each; the same cases also run with the planner's.
"""
from __future__ import annotations

import numpy as np
import pytest

import hipindexer
from hipindexer import gate, reference, testing
from hipindexer.ops import prefill_topk_fused, target_of
from hipindexer.plan import plan_prefill
from hipindexer.runtime import Device, DeviceArray

POISON = np.iinfo(np.int32).min
F_KEPT = 1.5  # a floor keeps more than this many times top_k of a row's keys (prefill_topk_fused.SAMPLE_MARGIN)
# The planner's shape, then groups and chunks forced small, with and without the filter, with both step builds;
# then the fused path (its tensor-core filter where the device has one for the shape, else the generic kernel's) in
# groups of 16 rows (fast_path_heads and the cases after it take it in one group).
SHAPES = ({}, {"rows": 16, "chunk": 96, "step_block": 256}, {"rows": 5, "chunk": 37, "filtered": True},
          {"rows": 16, "chunk": 96, "filtered": True, "step_block": 256}, {"fused": True, "rows": 16})


def poisoned(dev, M, top_k, pad=0):
    """(indices, values): fresh [M, top_k] device arrays (views of rows top_k + pad wide) of poison."""
    def one(dtype, fill):
        a = DeviceArray.from_numpy(np.full((M, top_k + pad), fill, dtype), dev)
        return a[:, :top_k] if pad else a
    return one(np.int32, POISON), one(np.float32, np.nan)


def accumulation_of(dev, inp):
    """The class of the logits kernel the op runs: the gate's eps follows it."""
    M, H, D = inp.q.shape
    return plan_prefill(M, inp.k.shape[0], H, D, target_of(dev)).accumulation


def check(dev, inp, top_k, sorted=False, relative=False, pad=0, **kw):
    """One call with values asked for and outputs poisoned, under gate_prefill_topk; the -1 padding exactly
    where the reference pads; unsorted, ascending keys."""
    outs = poisoned(dev, inp.q.shape[0], top_k, pad)
    got = hipindexer.fp8_mqa_topk(*inp.args(), top_k, relative=relative, sorted=sorted, return_values=True,
                                  out=outs, device=dev, **kw)
    assert all(g is o for g, o in zip(got, outs))
    idx, val = (a.numpy() for a in got)
    g = gate.gate_prefill_topk(idx, val, inp, top_k, accumulation_of(dev, inp), sorted=sorted, relative=relative)
    assert g, g.message
    want = reference.fp8_mqa_topk(*inp.args(), top_k)
    assert ((idx == -1) == (want == -1)).all(), "the -1 padding"
    if not sorted:
        step = np.diff(idx.astype(np.int64), axis=1)
        assert (step[idx[:, 1:] >= 0] > 0).all(), "unsorted: ascending keys"
    return idx, val


def inputs(seed, M, N, H=16, D=64, mode="causal"):
    return testing.prefill_inputs(np.random.default_rng(seed), M, N, H, D, mode)


def counts(idx):
    return (idx >= 0).sum(axis=1)


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


@case
def fused_rows_the_sample_misjudges_are_recomputed(dev):
    """Floors set too high (a sample margin of 0.3: most rows keep fewer than top_k keys) and floors of 0 (every
    key kept: long rows overflow their regions): the finish recomputes those rows, and the selection is the same
    as with good floors."""
    inp = inputs(45, M=24, N=900)
    good, good_v = check(dev, inp, 32, fused=True)
    saved = prefill_topk_fused.SAMPLE_MARGIN, prefill_topk_fused.sample_r
    try:
        prefill_topk_fused.SAMPLE_MARGIN = 0.3
        low, low_v = check(dev, inp, 32, fused=True, rows=8)
        prefill_topk_fused.SAMPLE_MARGIN = saved[0]
        prefill_topk_fused.sample_r = lambda top_k: 1 << 20
        none, none_v = check(dev, inp, 32, sorted=True, fused=True)
    finally:
        prefill_topk_fused.SAMPLE_MARGIN, prefill_topk_fused.sample_r = saved
    assert (low == good).all() and np.array_equal(low_v, good_v)
    assert (np.sort(none, axis=1) == np.sort(good, axis=1)).all()


@case
def fused_rows_kept_past_the_finish_buffer(dev):
    """Floors of 0 on rows of about 6,000 keys, whose regions hold them all: every key is kept, more than the
    finish's buffer holds (4,608 entries), so the finish takes the kept list in slices, cut to top_k between them,
    and recomputes nothing. The selection is the one good floors give."""
    M, N, top_k = 8, 6000, 512
    inp = inputs(47, M=M, N=N)
    good, good_v = check(dev, inp, top_k, fused=True)
    ws = hipindexer.prefill_topk_workspace(M, N, top_k, device=dev, H=16, D=64, fused=True)
    saved = prefill_topk_fused.sample_r
    try:
        prefill_topk_fused.sample_r = lambda top_k: 1 << 20
        idx, val = check(dev, inp, top_k, workspace=ws)
    finally:
        prefill_topk_fused.sample_r = saved
    kept = prefill_topk_fused.kept_state(ws, M)[0].sum(axis=1)
    assert (kept > 4608).all() and prefill_topk_fused.recomputes(ws, M) == (0, 0), (kept, ws.layout)
    assert (idx == good).all() and np.array_equal(val, good_v)


@case
def fused_floors_let_every_random_row_through(dev):
    """Random rows at the fast shapes: every row's floor lets at least top_k of its keys in and no region
    overflows, so the finish recomputes none. A floor that lets too few in stays exact through the recompute, which
    the gate alone would not see; it costs milliseconds a row."""
    for H in (32, 64):
        inp = inputs(30 + H, M=20, N=2100, H=H, D=128)
        ws = hipindexer.prefill_topk_workspace(20, 2100, 512, device=dev, H=H, D=128, fused=True)
        check(dev, inp, 512, workspace=ws)
        assert prefill_topk_fused.recomputed_rows(ws, 20) == 0


@case
def fast_path_heads(dev):
    """H = 32 and 64 with D = 128 (the fast logits kernels' shapes), top_k 512 over rows of V >= 4 top_k and
    fewer; composed and fused (the target's filter build of its fast logits kernel)."""
    for H in (32, 64):
        inp = inputs(20 + H, M=20, N=2100, H=H, D=128)
        for kw in (SHAPES[0], {"rows": 8, "chunk": 768}, {"fused": True}, {"fused": True, "rows": 8}):
            idx, _ = check(dev, inp, 512, sorted=H == 64, **kw)
            assert (counts(idx) == 512).all()
    short = inputs(25, M=9, N=300, H=64, D=128)
    for kw in ({"chunk": 256, "rows": 4}, {"fused": True}):
        idx, _ = check(dev, short, 512, **kw)
        assert (counts(idx) < 512).all()


@case
def fast_path_window_modes(dev):
    """The fused path at the fast shapes (the target's tensor-core filters, H = 32 and 64, D = 128) in every window
    mode, relative indices: the filters' own window tests, rows of V = 0 included."""
    for i, mode in enumerate(("cp", "misaligned", "empty", "past_end", "multi_req")):
        for H in (32, 64):
            idx, _ = check(dev, inputs(40 + i, M=10, N=300, H=H, D=128, mode=mode), 16, relative=True, fused=True)
        if mode in ("empty", "past_end"):
            assert (counts(idx) == 0).any()


@case
def every_window_mode(dev):
    """cp, misaligned, empty (rows of V = 0), past_end and packed requests (multi_req), with relative indices
    counted from each row's own cu_seqlen_ks."""
    for i, mode in enumerate(("cp", "misaligned", "empty", "past_end", "multi_req")):
        inp = inputs(10 + i, M=24, N=240, mode=mode)
        for kw in SHAPES:
            idx, _ = check(dev, inp, 16, relative=True, **kw)
        if mode in ("empty", "past_end"):
            assert (counts(idx) == 0).any()


@case
def chunks_too_wide_to_stage(dev):
    """A chunk whose columns with the candidates pass the staged selection's 4096 entries (every column of a
    first chunk passes): the step selects from W itself, in one chunk and in a wide chunk before a narrow one."""
    inp = inputs(26, M=6, N=4000)
    for kw in ({}, {"chunk": 3840}):
        idx, _ = check(dev, inp, 512, **kw)
        assert (counts(idx) == 512).all()


@case
def ties_across_chunks_go_to_the_lower_key(dev):
    """Every key the same: each row's logits tie, so its top_k are its lowest keys, whichever chunk holds
    them."""
    inp = inputs(30, M=12, N=300)
    k = np.broadcast_to(inp.k[:1], inp.k.shape).copy()
    tied = testing.PrefillInputs(inp.q, k, np.full_like(inp.kv_scale, 0.5), inp.weights, inp.cu_seqlen_ks,
                                 inp.cu_seqlen_ke)
    for kw in SHAPES:
        for sorted in (False, True):
            idx, _ = check(dev, tied, 20, sorted, **kw)
            lo = np.maximum(tied.cu_seqlen_ks, 0)[:, None] + np.arange(20)
            assert (idx == np.where(lo < np.minimum(tied.cu_seqlen_ke, 300)[:, None], lo, -1)).all()


@case
def padded_outputs_and_a_reused_workspace(dev):
    """Outputs with padded rows, and one workspace serving calls of fewer rows and other windows: the same
    selection as a call with its own; on both paths."""
    for ws in (hipindexer.prefill_topk_workspace(30, 500, 24, device=dev, rows=8, chunk=64),
               hipindexer.prefill_topk_workspace(30, 500, 24, device=dev, rows=8, H=16, D=64, fused=True)):
        assert ws.nbytes <= ws.bound
        for seed, (M, N) in enumerate(((30, 500), (11, 123), (30, 64))):
            inp = inputs(40 + seed, M, N)
            a, av = check(dev, inp, 24, pad=5, workspace=ws)
            b, bv = check(dev, inp, 24)
            assert (a == b).all() and np.array_equal(av, bv), "deterministic, whatever the workspace's cut"


@case
def no_keys_and_no_rows(dev):
    """N = 0: every row -1 / -inf; M = 0: empty outputs."""
    inp = inputs(50, M=6, N=0)
    idx, val = hipindexer.fp8_mqa_topk(*inp.args(), 8, return_values=True, device=dev)
    assert (idx.numpy() == -1).all() and (val.numpy() == -np.inf).all()
    none = inputs(51, M=0, N=50)
    assert hipindexer.fp8_mqa_topk(*none.args(), 8, device=dev).shape == (0, 8)


# the slowest cases last: the planted suites stop at their first failure, and most plants fail sooner elsewhere
@case
def fused_groups_of_few_rows_on_the_wide_floors(dev):
    """The floors build of more threads a row (prefill_topk_fused.WIDE_ROWS), on random rows and on rows whose
    kept keys outgrow the finish's buffer (floors of 0): the same selections, values and regions as the narrow
    build gives."""
    M, N, top_k = 8, 6000, 512
    inp = inputs(63, M=M, N=N, H=32, D=128)
    saved, kernel_for = (prefill_topk_fused.WIDE_ROWS, prefill_topk_fused.sample_r), prefill_topk_fused.kernel_for
    got, seen = [], []
    try:
        prefill_topk_fused.kernel_for = lambda d, key, *a: (seen.append(key), kernel_for(d, key, *a))[1]
        for wide, r in ((0, None), (M, None), (0, 1 << 20), (M, 1 << 20)):
            prefill_topk_fused.WIDE_ROWS = wide
            prefill_topk_fused.sample_r = saved[1] if r is None else (lambda top_k: r)
            ws = hipindexer.prefill_topk_workspace(M, N, top_k, device=dev, H=32, D=128, fused=True)
            seen.clear()
            idx, val = check(dev, inp, top_k, workspace=ws)
            got.append((idx, val, prefill_topk_fused.kept_state(ws, M)))
            assert [k for k in seen if k.startswith(("prefill_topk_floor", "prefill_topk_finish"))] == [
                "prefill_topk_floor" + "_wide" * bool(wide), "prefill_topk_finish"], seen
    finally:
        prefill_topk_fused.WIDE_ROWS, prefill_topk_fused.sample_r = saved
        prefill_topk_fused.kernel_for = kernel_for
    for a, b in ((0, 1), (2, 3)):
        assert (got[a][0] == got[b][0]).all() and np.array_equal(got[a][1], got[b][1])
        assert all((x == y).all() for x, y in zip(got[a][2], got[b][2])), "counts, regions and floors"
    assert (got[3][2][0].sum(axis=1) > 4608).all(), "floors of 0: more kept than the finish's buffer"


@case
def fused_floors_cut_by_the_samples_count_and_spread(dev):
    """The floors launch alone, on sample logits made here: each row's floor and its parts' regions are those of
    tools/measure/cut_model.py (floor_of, floors_cut: the kernel's arithmetic in numpy), key for key and entry for
    entry; a floor lets in at least r samples (0 where the row has at most r). The rows: long ones whose best
    samples crowd the last part of the key split, random ones, a row with at most r samples (floor 0), an empty
    one, unselectable samples (-inf, NaN). Rows of up to 1,024 samples (a batch a thread) and longer ones: the
    kernel holds the former's keys in registers and loads the latter's on each pass."""
    for N in (3000, 4600):
        _floors_cut_at(dev, N)


def _floors_cut_at(dev, N):
    from hipindexer.ops.launch import kernel_for
    from tools.measure.cut_model import floor_of, floors_cut, order_keys
    rng = np.random.default_rng(61)
    M, step, r, parts, region, rpb, tile = 24, 4, 60, 3, 200, 4, 64
    samples = -(-N // step)
    ks = np.zeros(M, np.int32)
    ke = (N - M + 1 + np.arange(M)).astype(np.int32)
    ke[5], ks[9], ke[9], ke[13], ks[17] = 0, 1000, 2990, 180, 2500
    logits = rng.standard_normal((M, samples)).astype(np.float32)
    n = np.arange(samples) * step
    logits[::2] *= np.where(n >= 4 * N // 5, 3.0, 1.0).astype(np.float32)  # even rows: their best samples crowd the end
    logits[3, 10], logits[3, 11], logits[4, ::7] = -np.inf, np.nan, -np.inf
    d = lambda a: DeviceArray.from_numpy(np.ascontiguousarray(a), dev)  # noqa: E731
    k, scale, ks_d, ke_d, lg = d(np.zeros(64, np.uint8)), d(np.ones(1, np.float32)), d(ks), d(ke), d(logits)
    floors = d(np.full(M, 0xDEADBEEF, np.uint32))
    bases, caps = d(np.full(M * parts, 7, np.uint32)), d(np.full(M * parts, 7, np.uint32))
    kernel_for(dev, "prefill_topk_floor").prepare(
        M, pointers=("k", "kv_scale", "ks", "ke"), sample_k=0, sample_scale=0, sample_ks=0, sample_ke=0,
        logits=lg.ptr, floors=floors.ptr, cand_counts=0, M=M, N=N, D=64, step=step, samples=samples, r=r,
        parts=parts, cand_base=bases.ptr, cand_cap=caps.ptr, region=region, rows_per_block=rpb, tile=tile,
        quanta=0, cut=1)(dev.default_stream.handle, k.ptr, scale.ptr, ks_d.ptr, ke_d.ptr)
    fl = floors.numpy()
    for m in range(M):
        lo, hi = min(max(ks[m], 0), N), max(min(ke[m], N), 0)
        keys = order_keys(logits[m, -(-lo // step):-(-hi // step)]) if hi > lo else np.zeros(0, np.uint32)
        sel = keys[keys != 0]
        assert fl[m] == floor_of(logits[m, -(-lo // step):-(-hi // step)] if hi > lo else [], r), m
        assert fl[m] == 0 if len(sel) <= r else fl[m] in set(sel.tolist()) and (sel >= fl[m]).sum() >= r, m
    want_b, want_c = floors_cut(ks, ke, N, logits, fl, step, parts, region, rpb, tile)
    got_b, got_c = bases.numpy().reshape(M, parts), caps.numpy().reshape(M, parts)
    assert (got_b == want_b).all() and (got_c == want_c).all(), (got_b, want_b, got_c, want_c)
    assert fl[13] == 0 and (fl[[0, 2, 9]] != 0).all()
    assert (want_c[0, 2] > 2 * want_c[0, :2]).all(), "an even row's last part, crowded, gets most of the entries"


@case
def causal_rows_of_every_kind(dev):
    """Causal rows from V < top_k to V >= 4 top_k; sorted or not, absolute or relative, every shape."""
    inp = inputs(1, M=200, N=240)  # row m sees 41 + m keys
    for kw in SHAPES:
        for sorted in (False, True):
            idx, _ = check(dev, inp, 48, sorted, relative=sorted, **kw)
    c = counts(idx)
    assert (c < 48).any() and (c == 48).any() and 240 >= 4 * 48


def crowded(seed, M, N, H, D, hot, lift=3.0):
    """Inputs whose rows all see every key, and whose keys [hot[0], hot[1]) score `lift` times higher (their scales;
    weights >= 0): every row's best keys are those."""
    inp = inputs(seed, M, N, H, D)
    n = np.arange(N)
    scale = (inp.kv_scale * np.where((n >= hot[0]) & (n < hot[1]), lift, 1.0)).astype(np.float32)
    return testing.PrefillInputs(inp.q, inp.k, scale, np.abs(inp.weights), np.zeros(M, np.int32),
                                 np.full(M, N, np.int32))


def part_keys(N, tile, parts, j, quanta):
    """The keys part j of a filter's key split of [0, N) computes (hx_prefill_split_quanta, or hx_prefill_split)."""
    tiles = -(-N // tile)
    t = (j * -(-tiles // parts), (j + 1) * -(-tiles // parts)) if quanta else (j * tiles // parts,
                                                                               (j + 1) * tiles // parts)
    return min(t[0] * tile, N), min(t[1] * tile, N)


@case
def fused_rows_whose_best_keys_crowd_one_part(dev):
    """Rows whose best keys (up to 1024) lie in one part of the filter's key split: at the floor they crowd that
    part, past an even share of the row's entries. The floors cut the entries by the sample, so where the filter
    takes that cut no row is recomputed. With even regions (every filter's, forced) the crowded part overflows and
    the finish recomputes its keys alone. Every filter stays exact; the recomputes are asserted where the shape's
    even region is smaller than what crowds it (both shapes on the emulator, the generic filter's on sm_90a)."""
    N = 8192
    target = target_of(dev)
    crowding = 0
    # the fewest rows (and their top_k) whose parts outgrow an even region on gfx950, for its MFMA filter and for
    # the generic one
    for H, D, M, top_k in ((32, 128, 64, 128), (16, 64, 128, 256)):
        ws = hipindexer.prefill_topk_workspace(M, N, top_k, device=dev, H=H, D=D, fused=True)
        lay = ws.layout
        filt, _ = prefill_topk_fused.filter_kernels(target, H, D)
        fp = prefill_topk_fused.filter_plan(target, M, N, H, D)
        lo, hi = part_keys(N, fp.tile, lay.parts, lay.parts // 2, filt in prefill_topk_fused.FILTERS_QUANTA)
        hot = (lo, min(hi, lo + 1024))
        crowded_past_even = lay.region < min(hot[1] - hot[0], F_KEPT * top_k)
        crowding += crowded_past_even
        inp = crowded(50 + H, M, N, H, D, hot)
        check(dev, inp, top_k, workspace=ws, fused=True)
        if filt in prefill_topk_fused.FILTERS_CUT:
            assert prefill_topk_fused.recomputed_rows(ws, M) == 0
        saved = prefill_topk_fused.FILTERS_CUT
        try:
            prefill_topk_fused.FILTERS_CUT = set()  # a call planned afresh: a new workspace
            ws = hipindexer.prefill_topk_workspace(M, N, top_k, device=dev, H=H, D=D, fused=True)
            check(dev, inp, top_k, workspace=ws, fused=True)
        finally:
            prefill_topk_fused.FILTERS_CUT = saved
        assert prefill_topk_fused.recomputed_rows(ws, M) > 0 or not crowded_past_even
    assert crowding, "no shape crowds a part past an even region"


# ------------------------------------------------------------------ on this process's device

@pytest.fixture(scope="module")
def dev():
    return Device()


@pytest.mark.parametrize("name", list(CASES))
def test_prefill_topk_case(dev, name):
    CASES[name](dev)
