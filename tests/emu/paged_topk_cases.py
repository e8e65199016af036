"""hipindexer.fp8_paged_mqa_topk on a device, against hipindexer.reference.fp8_paged_mqa_topk and the top-k gate.

Every case is a named function of a device in CASES: tests/test_paged_topk.py runs them on the emulated MI355X
(this file in a child pytest with -p emu_session, where Device() is the emulator) and, marked gpu, on a real GPU.
Outputs are poisoned before each call (indices and slots INT32_MIN, values NaN), so a slot the op leaves
unwritten fails; inputs are fresh random arrays per case. Key chunks are forced narrow (the tunable chunk) so
that small cases cross several chunks; the same cases also run in one chunk (whole=False: the composed path, which
these small rows would otherwise leave for the whole-row path).
"""
from __future__ import annotations

import numpy as np
import pytest

import hipindexer
from hipindexer import gate, reference, testing
from hipindexer.ops import ERROR_BLOCK_ID, ERROR_LENGTH, target_of
from hipindexer.plan import plan_decode
from hipindexer.runtime import Device, DeviceArray

POISON = np.iinfo(np.int32).min


def poisoned(dev, rows, top_k, pad=0):
    """(indices, values, slots): fresh [rows, top_k] device arrays (views of rows top_k + pad wide) of poison."""
    def one(dtype, fill):
        a = DeviceArray.from_numpy(np.full((rows, top_k + pad), fill, dtype), dev)
        return a[:, :top_k] if pad else a
    return one(np.int32, POISON), one(np.float32, np.nan), one(np.int32, POISON)


def accumulation_of(dev, inp):
    """The class of the logits kernel the op runs: the gate's eps follows it."""
    B, next_n, H, D = inp.q.shape
    plan = plan_decode(B, next_n, H, D, inp.kv_cache.shape[1], inp.max_model_len, target_of(dev),
                       preshuffle=inp.preshuffle)
    return plan.accumulation


def run(dev, inp, top_k, sorted=False, pad=0, **kw):
    """One call with every output asked for and poisoned: (indices, values, slots) as numpy. On the composed path
    (whole=False) unless the call names its path or brings a workspace: the small rows of these cases would
    otherwise take the whole-row path, which the_whole_row_path checks."""
    if "whole" not in kw and "workspace" not in kw and not kw.get("fused"):
        kw["whole"] = False
    outs = poisoned(dev, inp.q.shape[0] * inp.q.shape[1], top_k, pad)
    got = hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], top_k, next_n_lens=inp.next_n_lens,
                                        preshuffle=inp.preshuffle, sorted=sorted, return_values=True,
                                        return_slots=True, out=outs, device=dev, **kw)
    assert all(g is o for g, o in zip(got, outs))
    return tuple(a.numpy() for a in got)


def check(dev, inp, top_k, sorted=False, **kw):
    """run() under gate_paged_topk, with slots; and the -1 padding exactly where the reference pads."""
    idx, val, slots = run(dev, inp, top_k, sorted, **kw)
    g = gate.gate_paged_topk(idx, val, inp, top_k, accumulation_of(dev, inp), sorted=sorted, slots=slots)
    assert g, g.message
    want = reference.fp8_paged_mqa_topk(*inp.args()[:6], top_k, inp.next_n_lens, inp.preshuffle)
    assert ((idx == -1) == (want == -1)).all(), "the -1 padding"
    if not sorted:  # the unsorted order is the ascending key order (documented as today's order)
        step = np.diff(idx.astype(np.int64), axis=1)
        assert (step[idx[:, 1:] >= 0] > 0).all(), "unsorted: ascending keys"
    return idx, val, slots


def case_inputs(seed, B=3, next_n=2, H=16, D=64, block_size=16, ctx=400, lens_per_row=False, **kw):
    case = testing.DecodeCase(B, next_n, H, D, block_size, mean_context=ctx, lens_per_row=lens_per_row, **kw)
    return testing.decode_inputs(np.random.default_rng(seed), case)


# ------------------------------------------------------------------ the cases

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _wide(dev, top_k, block_size, lens_per_row, seed):
    """Rows with V >= 4 top_k, in chunks of four blocks, of one top_k plus a block, and in one chunk."""
    inp = case_inputs(seed, B=2, block_size=block_size, ctx=5 * top_k + 3 * block_size, spread="equal",
                      ragged=True, live_min=2, lens_per_row=lens_per_row)
    bound = reference.decode_bounds(inp.context_lens, 2, inp.max_model_len, inp.next_n_lens)
    assert (bound >= 4 * top_k).all()
    for chunk in (4 * block_size, -(-top_k // block_size) * block_size + block_size, None):
        for sorted in (False, True):  # the step's 256-thread build on the narrowest chunks, unsorted
            extra = {"step_block": 256} if chunk == 4 * block_size and not sorted else {}
            check(dev, inp, top_k, sorted, **({} if chunk is None else {"chunk": chunk}), **extra)


for _k, _bs in ((7, 16), (64, 64), (512, 16), (300, 64)):
    for _rows in (False, True):
        def _fn(dev, k=_k, bs=_bs, rows=_rows):
            _wide(dev, k, bs, rows, seed=k + bs + rows)
        _fn.__name__ = f"wide_rows_top{_k}_bs{_bs}_{'rowlens' if _rows else 'seqlens'}"
        case(_fn)


@case
def chunks_too_wide_to_stage(dev):
    """A chunk whose columns with the candidates pass the staged selection's 4096 entries (every column of a
    first chunk passes): the step selects from W itself, in one chunk and in a wide chunk before a narrow one."""
    inp = case_inputs(27, B=2, next_n=1, block_size=64, ctx=4000, spread="equal")
    for chunk in (None, 3712):
        idx, _, _ = check(dev, inp, 512, **({} if chunk is None else {"chunk": chunk}))
        assert ((idx >= 0).sum(axis=1) == 512).all()


@case
def short_empty_and_dead_rows(dev):
    """V < top_k (short contexts), V = 0 (a context of 0, dead ragged rows), next to rows with V >> top_k, in
    both forms of the lengths and with a max_model_len below some contexts."""
    for rows in (False, True):
        inp = case_inputs(21 + rows, B=5, next_n=4, ctx=300, ragged=True, live_min=1, zero_live=1,
                          zero_contexts=1, lens_per_row=rows, max_model_len=340)
        for chunk in (32, None):
            for sorted in (False, True):
                idx, _, _ = check(dev, inp, 280, sorted, **({} if chunk is None else {"chunk": chunk}))
        count = (idx >= 0).sum(axis=1)
        assert (count == 0).any() and (count == 280).any() and ((count > 0) & (count < 280)).any(), count


@case
def ties_across_chunks_go_to_the_lower_key(dev):
    """Every key of the cache the same: every logit of a row ties, so its top_k are its lowest keys, whichever
    chunk they come from; sorted or not, in ascending key order."""
    inp = case_inputs(31, B=2, next_n=3, block_size=16, ctx=700, spread="equal", ragged=True, live_min=1)
    kv = inp.kv_cache.reshape(inp.kv_cache.shape[0], -1).copy()
    bs, D = inp.kv_cache.shape[1], inp.q.shape[3]
    kv[:, :bs * D] = np.tile(kv[0, :D], bs)
    kv[:, bs * D:] = np.tile(np.array([0.5], np.float32).view(np.uint8), bs)
    tied = testing.DecodeInputs(inp.q, kv.reshape(inp.kv_cache.shape), inp.weights, inp.context_lens,
                                inp.block_tables, inp.max_model_len, inp.next_n_lens, False)
    bound = reference.decode_bounds(tied.context_lens, 3, tied.max_model_len, tied.next_n_lens)
    for top_k in (5, 200):
        want = np.where(np.arange(top_k)[None, :] < np.minimum(bound, top_k)[:, None], np.arange(top_k), -1)
        for chunk in (48, 112, None):
            for sorted in (False, True):
                idx, _, _ = check(dev, tied, top_k, sorted, **({} if chunk is None else {"chunk": chunk}))
                assert (idx == want).all(), f"chunk {chunk}, sorted {sorted}: ties not by lower key"


@case
def chunked_equals_whole_row(dev):
    """The chunks' selection is exactly topk_logits' over the whole row of the logits op (the same kernel's
    logits: nothing for the bound to excuse), preshuffled and block-flat, block sizes 16 and 64."""
    for seed, bs, shuf in ((41, 16, False), (42, 64, True)):
        inp = case_inputs(seed, B=3, next_n=2, block_size=bs, ctx=900, ragged=True, live_min=1, preshuffle=shuf)
        logits = hipindexer.fp8_paged_mqa_logits(*inp.args(), device=dev).numpy()
        for top_k in (33, 256):
            want, want_val = reference.topk_logits(logits, top_k, sorted=True)
            for chunk in (2 * bs, 4 * bs, None):
                idx, val, _ = run(dev, inp, top_k, True, **({} if chunk is None else {"chunk": chunk}))
                assert (idx == want).all() and (val.view(np.uint32) == want_val.view(np.uint32)).all(), chunk


@case
def the_same_output_twice(dev):
    """Deterministic: the same inputs give the same bits, order included, in one chunk and in several."""
    inp = case_inputs(51, B=3, ctx=800, ragged=True, live_min=1)
    for chunk in (64, None):
        for sorted in (False, True):
            kw = {} if chunk is None else {"chunk": chunk}
            a, b = run(dev, inp, 90, sorted, **kw), run(dev, inp, 90, sorted, **kw)
            assert all((x.view(np.uint32) == y.view(np.uint32)).all() for x, y in zip(a, b))


@case
def padded_outputs(dev):
    """out= arrays whose rows are padded: the padding is neither read nor written."""
    inp = case_inputs(52, B=2, ctx=500, ragged=True, live_min=1)
    for chunk in (64, None):
        outs = poisoned(dev, 4, 40, pad=9)
        hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 40, next_n_lens=inp.next_n_lens, return_values=True,
                                      return_slots=True, out=outs, device=dev, **({} if chunk is None else
                                                                                  {"chunk": chunk}))
        g = gate.gate_paged_topk(outs[0].numpy(), outs[1].numpy(), inp, 40, accumulation_of(dev, inp),
                                 slots=outs[2].numpy())
        assert g, g.message
        for o in outs:
            base = DeviceArray(o.ptr, (4, 49), o.dtype, dev, owner=o).numpy()
            pad = base[:, 40:]
            assert (np.isnan(pad) if o.dtype == np.float32 else pad == POISON).all()


@case
def a_workspace_reused_within_its_bound(dev):
    """One workspace for several calls of fresh inputs (a smaller batch too), device-resident so that a call
    takes the prepared path; its bytes within 8 * top_k * next_n * (2B + units) + 1 MiB, a formula of the batch
    whatever max_model_len."""
    units = target_of(dev).num_cus
    top_k, B, next_n = 64, 3, 2
    ws = hipindexer.paged_topk_workspace(B, next_n, top_k, 1500, 16, device=dev, chunk=96)
    assert ws.nbytes <= 8 * top_k * next_n * (2 * B + units) + (1 << 20) and ws.chunk == 96
    for seed, b in ((61, 3), (62, 3), (63, 2)):
        inp = case_inputs(seed, B=b, ctx=1000, ragged=True, live_min=1)
        on = testing.DecodeInputs(*[DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a
                                    for a in inp.args()])
        for sorted in (False, True):
            outs = poisoned(dev, b * next_n, top_k)
            for _ in range(2):
                hipindexer.fp8_paged_mqa_topk(*on.args()[:6], top_k, next_n_lens=on.next_n_lens, sorted=sorted,
                                              return_values=True, return_slots=True, workspace=ws, out=outs,
                                              device=dev)
            g = gate.gate_paged_topk(*(o.numpy() for o in outs[:2]), inp, top_k, accumulation_of(dev, inp),
                                     sorted=sorted, slots=outs[2].numpy())
            assert g, g.message
    for B_, n_, k_, bs, mml in ((64, 1, 2048, 64, 1 << 17), (64, 1, 2048, 64, 1 << 20), (1, 8, 512, 16, 1 << 17),
                                (256, 2, 2048, 16, 1 << 17), (8, 4, 1, 16, 1 << 17), (1, 1, 7, 1, 10)):
        w = hipindexer.paged_topk_workspace(B_, n_, k_, mml, bs, device=dev)
        assert w.nbytes <= 8 * k_ * n_ * (2 * B_ + units) + (1 << 20) == w.bound, w
        assert w.whole or (w.chunk % bs == 0 and w.chunk >= bs), w  # a few long rows: the whole-row path's


@case
def untrusted_device_values(dev):
    """Block ids outside the cache and malformed lengths in device memory: their keys and rows never selected,
    bits 0 and 2 in errors=, and every other row exactly the whole-row selection of the logits op's output on
    the same values (both forms of the lengths, in chunks)."""
    for rows in (False, True):
        inp = case_inputs(71 + rows, B=4, ctx=400, spread="equal", ragged=True, live_min=1, lens_per_row=rows)
        bt, ctx = inp.block_tables.copy(), inp.context_lens.copy()
        bt[1, 2], bt[2, 20] = inp.kv_cache.shape[0], -5
        nl = None
        if rows:
            ctx[3, 1] = -7
        else:
            nl = inp.next_n_lens.copy()
            ctx[3] = -7
            nl[0] = 3
        d = lambda a: None if a is None else DeviceArray.from_numpy(a, dev)  # noqa: E731
        bad = testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, d(ctx), d(bt), inp.max_model_len, d(nl), False)
        errors = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
        logits = hipindexer.fp8_paged_mqa_logits(*bad.args(), errors=errors, device=dev).numpy()
        assert int(errors.numpy()[0]) == ERROR_BLOCK_ID | ERROR_LENGTH
        want, _ = reference.topk_logits(logits, 50, sorted=True)
        for chunk in (32, None):
            errors = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
            idx = hipindexer.fp8_paged_mqa_topk(*bad.args()[:6], 50, next_n_lens=bad.next_n_lens, sorted=True,
                                                errors=errors, device=dev,
                                                **({} if chunk is None else {"chunk": chunk})).numpy()
            assert int(errors.numpy()[0]) == ERROR_BLOCK_ID | ERROR_LENGTH, chunk
            assert (idx == want).all(), chunk
        assert not np.isin(np.arange(32, 48), idx[2:4]).any()  # the keys of sequence 1's bad block


@case
def the_whole_row_path(dev):
    """whole=True (the logits op into the workspace, topk_logits over it, the slots from the table): within the gate,
    exactly the composed path's indices, values and slots, over short, empty and dead rows in both forms of the
    lengths, sorted or not, into padded outputs, with block ids outside the cache and malformed lengths in device
    memory (never selected, their bits in errors=), through a workspace reused on the prepared path."""
    for rows in (False, True):
        inp = case_inputs(111 + rows, B=5, next_n=4, ctx=300, ragged=True, live_min=1, zero_live=1,
                          zero_contexts=1, lens_per_row=rows, max_model_len=340)
        for sorted in (False, True):
            idx, val, slots = check(dev, inp, 280, sorted, whole=True, pad=5)
            want = run(dev, inp, 280, sorted, fused=False)
            assert all((a.view(np.uint32) == b.view(np.uint32)).all() for a, b in zip((idx, val, slots), want))
        count = (idx >= 0).sum(axis=1)
        assert (count == 0).any() and (count == 280).any() and ((count > 0) & (count < 280)).any(), count
    inp = case_inputs(113, B=4, ctx=400, spread="equal", ragged=True, live_min=1)
    bt, ctx = inp.block_tables.copy(), inp.context_lens.copy()
    bt[1, 2], bt[2, 20] = inp.kv_cache.shape[0], -5
    ctx[3] = -7
    d = lambda a: None if a is None else DeviceArray.from_numpy(a, dev)  # noqa: E731
    bad = testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, d(ctx), d(bt), inp.max_model_len,
                               d(inp.next_n_lens), False)
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
    logits = hipindexer.fp8_paged_mqa_logits(*bad.args(), errors=errors, device=dev).numpy()
    want, _ = reference.topk_logits(logits, 50, sorted=True)
    errors = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
    outs = poisoned(dev, 8, 50)
    idx, _, slots = hipindexer.fp8_paged_mqa_topk(*bad.args()[:6], 50, next_n_lens=bad.next_n_lens, sorted=True,
                                                  return_values=True, return_slots=True, out=outs, errors=errors,
                                                  device=dev, whole=True)
    idx, slots = idx.numpy(), slots.numpy()
    assert int(errors.numpy()[0]) == ERROR_BLOCK_ID | ERROR_LENGTH and (idx == want).all()
    bs = inp.kv_cache.shape[1]
    table = np.repeat(bt, 2, axis=0)
    picked = np.where(idx >= 0, table[np.arange(8)[:, None], np.maximum(idx, 0) // bs] * bs + idx % bs, -1)
    assert (slots == picked).all() and not np.isin(np.arange(32, 48), idx[2:4]).any()
    ws = hipindexer.paged_topk_workspace(3, 2, 64, 2000, 16, device=dev, whole=True)
    assert ws.whole and ws.nbytes <= ws.bound
    for seed, b in ((114, 3), (115, 2)):
        inp = case_inputs(seed, B=b, ctx=1000, ragged=True, live_min=1)
        on = testing.DecodeInputs(*[DeviceArray.from_numpy(a, dev) if isinstance(a, np.ndarray) else a
                                    for a in inp.args()])
        outs = poisoned(dev, b * 2, 64)
        for _ in range(2):
            hipindexer.fp8_paged_mqa_topk(*on.args()[:6], 64, next_n_lens=on.next_n_lens, return_values=True,
                                          return_slots=True, workspace=ws, out=outs, device=dev)
        g = gate.gate_paged_topk(*(o.numpy() for o in outs[:2]), inp, 64, accumulation_of(dev, inp),
                                 slots=outs[2].numpy())
        assert g, g.message


@case
def no_rows_and_indices_alone(dev):
    inp = case_inputs(81, B=2, ctx=100)
    idx = hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 10, next_n_lens=inp.next_n_lens, device=dev)
    assert isinstance(idx, DeviceArray) and idx.shape == (4, 10) and idx.dtype == np.int32
    empty = testing.DecodeInputs(inp.q[:0], inp.kv_cache, inp.weights[:0], inp.context_lens[:0],
                                 inp.block_tables[:0], inp.max_model_len, None, False)
    got = hipindexer.fp8_paged_mqa_topk(*empty.args()[:6], 10, return_values=True, return_slots=True, device=dev)
    assert [a.shape for a in got] == [(0, 10)] * 3


@case
def bad_arguments_raise_naming_them(dev):
    inp = case_inputs(91, B=2, ctx=100)
    R = 4
    ws = hipindexer.paged_topk_workspace(2, 2, 8, inp.max_model_len, 16, device=dev, whole=False)
    bad = [
        (dict(top_k=0), ValueError, "top_k"), (dict(top_k=4097), ValueError, "top_k"),
        (dict(top_k=True), ValueError, "top_k"),
        (dict(q=inp.q.view(np.int8)), TypeError, "q"),
        (dict(context_lens=np.array([5, -1], np.int32)), ValueError, "context_lens"),
        (dict(block_tables=np.full_like(inp.block_tables, 10 ** 6)), ValueError, "block_tables"),
        (dict(max_model_len=0), ValueError, "max_model_len"),
        (dict(sorted="yes"), TypeError, "sorted"), (dict(return_slots=1), TypeError, "return_slots"),
        (dict(accumulation="exact"), ValueError, "accumulation"),
        (dict(out=np.zeros((R, 8), np.int32)), TypeError, "out"),
        (dict(out=DeviceArray.empty((R, 9), np.int32, dev)), ValueError, "out"),
        (dict(out=DeviceArray.empty((R, 8), np.float32, dev)), TypeError, "out"),
        (dict(out=(DeviceArray.empty((R, 8), np.int32, dev),), return_values=True), ValueError, "out"),
        (dict(errors=DeviceArray.empty((2,), np.int32, dev)), ValueError, "errors"),
        (dict(workspace=ws, top_k=9), ValueError, "workspace"),
        (dict(workspace="ws"), TypeError, "workspace"),
        (dict(workspace=ws, chunk=32), ValueError, "chunk"),
        (dict(chunk=24), ValueError, "chunk"), (dict(chunk=0), ValueError, "chunk"),
        (dict(tile=3), TypeError, "unknown tunable"),
        (dict(kernel="no_such_kernel"), ValueError, ""),
    ]
    for change, error, name in bad:
        args = dict(zip(("q", "kv_cache", "weights", "context_lens", "block_tables", "max_model_len"),
                        inp.args()[:6]), top_k=8, device=dev) | change
        with pytest.raises(error, match=f"^{name}"):
            hipindexer.fp8_paged_mqa_topk(**args)
    small = hipindexer.paged_topk_workspace(1, 2, 8, 100, 16, device=dev)  # for B = 1, the call has B = 2
    with pytest.raises(ValueError, match="^workspace"):
        hipindexer.fp8_paged_mqa_topk(*inp.args()[:6], 8, workspace=small, device=dev)


def _keys_of(values):
    """hx_topk_key of float32 values (finite, not -0)."""
    u = np.asarray(values, np.float32).view(np.uint32)
    return np.where(u & 0x80000000, ~u, u | 0x80000000).astype(np.uint32)


@case
def merge_of_written_pieces(dev):
    """The fused path's merge kernel (hsaco_src/generic/paged_topk_merge.hip) over pieces written here, listed in
    any order: each row gets the top_k of the union of its pieces, ties to the lower position, in ascending
    position or sorted, -1 past the union, values and slots; and every sequence's list is emptied. Unions wider
    than its selection's buffer and than its whole shared buffer (loaded in two rounds), in pieces wider than the
    block and narrower, all keys tied, a sequence with no pieces, a row with none, rows too wide for its bitmap."""
    rng = np.random.default_rng(5)
    # The units each sequence's keys were split over: contiguous pieces of the batch, in order (so slot u + b is
    # one piece's), a unit on a boundary holding two; sequence 2 has no keys.
    B, n, units, bs = 4, 2, 13, 16
    cover = {0: list(range(9)), 1: [8, 9, 10], 2: [], 3: [10, 11, 12]}
    # sequence 0 over all 13 units: a union past the buffer in pieces narrower than the block (its other walk)
    thin = {0: list(range(13)), 1: [12], 2: [], 3: [12]}
    for top_k, mml, by_value, tied, cov in ((5, 1000, False, False, cover), (600, 6000, True, False, cover),
                                            (600, 6000, False, True, cover), (64, 300_000, False, False, cover),
                                            (64, 300_000, True, True, cover), (420, 9000, False, False, thin),
                                            (420, 9000, True, True, thin)):
        _merge_pieces(dev, rng, B, n, units, bs, cov, top_k, mml, by_value, tied)
    # Unions of more entries than the target's shared buffer holds (MERGE_ENTRIES: 16,384 on gfx950, 24,576 on
    # sm_90a), each loaded in two rounds: pieces of up to 2048 entries, and of up to 500 (narrower than the block),
    # enough of them that their least (3/4 top_k each) passes the buffer.
    from hipindexer.ops.paged_topk_fused import MERGE_ENTRIES
    held = MERGE_ENTRIES[target_of(dev).arch]
    for top_k, mml, by_value, wide in ((2048, 200_000, False, 0), (500, 40_000, True, 1)):
        pieces = held // (3 * top_k // 4) + 1  # the other sequence's piece on a boundary unit, as units split them
        cov = {0: list(range(pieces)), 1: [pieces - 1]} if wide == 0 else {0: [0], 1: list(range(pieces))}
        _merge_pieces(dev, rng, 2, 1, pieces, bs, cov, top_k, mml, by_value, False, wide_row=(wide, held))
    # In two levels (paged_topk_fused.merge_group): groups of `group` list entries merged into their first one's
    # slot, a last group of one piece left as it is, then every group-th entry merged.
    for top_k, mml, by_value, tied, group, cov in ((2048, 200_000, True, False, 3, {0: list(range(10)), 1: [9]}),
                                                   (500, 40_000, False, False, 8, {0: [0], 1: list(range(40))}),
                                                   (64, 300_000, True, True, 5, {0: list(range(13)), 1: [12]})):
        _merge_pieces(dev, rng, 2, 1, 40, bs, cov, top_k, mml, by_value, tied, group=group)


def _merge_pieces(dev, rng, B, n, units, bs, cover, top_k, mml, by_value, tied, wide_row=None, group=0):
    """One launch of the merge over pieces of random keys (each of 3/4 top_k to top_k entries; row (3, 1) empty)
    that cover[b] lists for sequence b, checked against the union's exact selection; wide_row, when given, is a
    row whose union must outgrow the kernel's shared buffer and that buffer's entries. group > 0: the merge in two
    levels."""
    from hipindexer.ops.launch import kernel_for
    from hipindexer.ops.paged_topk_fused import MERGE_POINTERS
    slots = units + B
    parts = np.zeros((slots, n, top_k), np.uint64)
    counts = np.full((slots, n), -3, np.int32)  # never read: no list names those slots
    seq_parts = np.full((B, units), -7, np.int32)
    nparts = np.zeros(B, np.int32)
    union = {}
    for b, us in cover.items():
        w = mml // max(1, len(us))
        for q, i in enumerate(rng.permutation(len(us))):
            slot = us[i] + b
            seq_parts[b, q], nparts[b] = slot, q + 1
            for j in range(n):
                c = 0 if (b, j) == (3, 1) else int(rng.integers(3 * top_k // 4, top_k + 1))
                pos = i * w + rng.choice(w, size=min(c, w), replace=False)
                vals = np.full(len(pos), 1.5, np.float32) if tied else rng.standard_normal(len(pos)).astype(np.float32)
                key = _keys_of(vals)
                parts[slot, j, :len(pos)] = (key.astype(np.uint64) << 32) | (~pos.astype(np.uint32)).astype(np.uint64)
                counts[slot, j] = len(pos)
                union.setdefault((b, j), []).extend(zip(key.tolist(), pos.tolist(), vals.tolist()))
    if wide_row is not None:
        row, held = wide_row
        assert len(union[divmod(row, n)]) > held, "the union fits the shared buffer: no second round"
    # a tenth of the ids past the cache's 1000 blocks: their keys' slots are -1 (hx_cache_slot checks the table)
    tables = rng.integers(0, 1100, size=(B, -(-mml // bs)), dtype=np.int32)
    d = lambda a: DeviceArray.from_numpy(np.ascontiguousarray(a), dev)  # noqa: E731
    ws = [d(parts.ravel()), d(counts.ravel()), d(seq_parts.ravel()), d(nparts), d(np.zeros(B, np.int32))]
    outs = poisoned(dev, B * n, top_k)
    bt = d(tables)
    groups = -(-units // group) if group else 1
    for level in ((1, 0) if group else (0,)):
        kernel_for(dev, "paged_topk_merge").prepare(
            3, None, pointers=MERGE_POINTERS, indices_stride=top_k, values_stride=top_k, slots_stride=top_k, B=B,
            next_n=n, top_k=top_k, units=units, max_blocks=tables.shape[1], block_size=bs, max_model_len=mml,
            num_blocks=1000, sorted=int(by_value), group=group if level else 0, groups=groups, stride=group if not level and group else 1,
        )(dev.default_stream.handle, *(a.ptr for a in ws), *(o.ptr for o in outs), bt.ptr)
    idx, val, slot = (o.numpy() for o in outs)
    for r in range(B * n):
        got = sorted(union.get(divmod(r, n), []), key=lambda e: (-e[0], e[1]))[:top_k]
        if not by_value:
            got = sorted(got, key=lambda e: e[1])
        m = len(got)
        want_idx = np.array([e[1] for e in got] + [-1] * (top_k - m), np.int64)
        assert (idx[r] == want_idx).all(), f"top_k {top_k}, sorted {by_value}, tied {tied}, row {r}"
        assert (val[r, :m] == np.array([e[2] for e in got], np.float32)).all() and np.isneginf(val[r, m:]).all()
        b = r // n
        want_slot = [int(tables[b, p // bs]) * bs + p % bs if tables[b, p // bs] < 1000 else -1
                     for p in want_idx[:m]] + [-1] * (top_k - m)
        assert (slot[r] == want_slot).all()
    assert (ws[3].numpy() == 0).all() and (ws[4].numpy() == 0).all(), "the lists are emptied"


# ------------------------------------------------------------------ on this process's device

@pytest.fixture(scope="module")
def dev():
    return Device()


@pytest.mark.parametrize("name", list(CASES))
def test_paged_topk_case(dev, name):
    CASES[name](dev)
