"""The fused path of hipindexer.fp8_paged_mqa_topk on a device (gfx950: hsaco_src/gfx950/paged_mqa_topk_mfma.hip,
sm_90a: hsaco_src/sm90a/paged_mqa_topk_wgmma_tma.hip, then generic/paged_topk_merge.hip), against the reference,
the top-k gate and the composed path.

Each case is a named function of a device in CASES: tests/test_paged_topk_fused.py runs them on the emulated MI355X
(this file in a child pytest with -p emu_session) and, marked gpu, on a real GPU. The cases force a few units and
the smallest candidate buffers the kernel takes (the `units` and `cap` tunables), so that small inputs make a unit
cut its rows many times, which a full-size launch only does at long contexts. Outputs are poisoned before every call
(run() of paged_topk_cases).
"""
from __future__ import annotations

import numpy as np
import pytest

import hipindexer
import paged_topk_cases as C
from hipindexer import cache, reference, testing
from hipindexer.ops import ERROR_BLOCK_ID, ERROR_LENGTH, target_of
from hipindexer.ops.paged_topk_fused import FUSED_KERNELS
from hipindexer.runtime import Device, DeviceArray

D = 128
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def tight(dev, top_k, units=2):
    """Tunables that make the fused kernel cut often: few units, and each row's buffer the least it takes."""
    return dict(fused=True, units=units, cap=top_k + 2 * FUSED_KERNELS[target_of(dev).arch].slack)


def fused_inputs(seed, B=5, next_n=1, H=64, bs=64, ctx=3000, preshuffle=False, rows=False, ragged=False, top_k=256):
    """B sequences: wide ones (ctx keys), one of a third of that, one shorter than top_k, one of none."""
    rng = np.random.default_rng(seed)
    inp = testing.decode_inputs(rng, testing.DecodeCase(B, next_n, H, D, bs, preshuffle, mean_context=ctx,
                                                        spread="equal", ragged=ragged, live_min=1, key_codes=True))
    lens = inp.context_lens.copy()
    lens[1], lens[2], lens[3] = ctx // 3, max(1, top_k // 2), 0
    nl = inp.next_n_lens
    if rows:
        lens, nl = reference.per_row_lengths(lens, next_n, nl), None
    return testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, lens, inp.block_tables, inp.max_model_len, nl,
                                preshuffle)


@case
def rows_of_every_kind_pass_the_gate_and_match_the_composed_path(dev):
    """Both head counts, layouts, length forms and next_n, block sizes 16 and 64, top_k from 7 to 700, sorted or
    not, on rows with V >= 4 top_k, V < top_k and V = 0: the gate, and the composed path's selection bit for bit
    (the same logits kernel's values)."""
    for H, bs, shuf, n, rows, ragged, top_k, sorted in ((64, 64, False, 1, False, False, 700, False),
                                                        (64, 16, True, 2, True, True, 300, True),
                                                        (32, 64, True, 1, True, False, 7, True),
                                                        (32, 16, False, 2, False, True, 128, False)):
        inp = fused_inputs(H + bs + n + top_k, next_n=n, H=H, bs=bs, preshuffle=shuf, rows=rows, ragged=ragged,
                           top_k=top_k, ctx=max(3000, 5 * top_k))
        errors = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
        got = C.check(dev, inp, top_k, sorted, errors=errors, **tight(dev, top_k))
        assert int(errors.numpy()[0]) == 0
        count = (got[0] >= 0).sum(axis=1)
        assert (count == top_k).any() and (count == 0).any() and ((count > 0) & (count < top_k)).any(), count
        composed = C.run(dev, inp, top_k, sorted, fused=False)
        for a, b in zip(got, composed):
            assert (a.view(np.uint32) == b.view(np.uint32)).all(), (H, bs, n, top_k)


@case
def negative_logits_at_unit_boundaries(dev):
    """Every weight negative, so every logit is at most 0: a column past a unit's own range (its last page's tail,
    block size 16), were it offered with nothing loaded, would enter as 0 and beat every key the unit owns. Units
    whose ranges end mid-page, both layouts: the gate and the composed path's selection."""
    for shuf, n, units in ((False, 1, 3), (True, 2, 5)):
        inp = fused_inputs(90 + n, next_n=n, bs=16, preshuffle=shuf, ctx=2000, top_k=64)
        neg = testing.DecodeInputs(inp.q, inp.kv_cache, -np.abs(inp.weights) - 0.01, inp.context_lens,
                                   inp.block_tables, inp.max_model_len, inp.next_n_lens, shuf)
        got = C.check(dev, neg, 64, True, **tight(dev, 64, units))
        composed = C.run(dev, neg, 64, True, fused=False)
        assert all((a.view(np.uint32) == b.view(np.uint32)).all() for a, b in zip(got, composed))


def ordered_inputs(order, next_n, B=3, ctx=6000, H=64, bs=64):
    """Every key the same positive code vector, its scale rising, falling or the same along the sequence, and
    positive queries and weights: each row's logits rise, fall or tie along its keys. "clustered": the first 8 keys
    far above the rest, which rise within 1% of each other: one radix bin of the keys' range holds them all."""
    rng = np.random.default_rng({"rising": 1, "falling": 2, "tied": 3, "clustered": 4}[order])
    lens = np.full(B, ctx, np.int32)
    tables, num_blocks = cache.make_block_tables(lens, bs, rng, max_model_len=ctx, max_blocks=ctx // bs + 1)
    kv = cache.new_cache(num_blocks, bs, D)
    code = np.full((ctx, D), 0x38, np.uint8).view(testing.random_fp8(rng, (1,)).dtype)  # 1.0
    n = np.arange(ctx)
    scale = {"rising": 1 + n / ctx, "falling": 2 - n / ctx, "tied": np.ones(ctx),
             "clustered": np.where(n < 8, 100.0, 1 + n / ctx / 100)}[order]
    scale = (scale * 2.0 ** -6).astype(np.float32)
    for b in range(B):
        cache.write_cache(kv, code, scale, tables[b, n // bs].astype(np.int64) * bs + n % bs)
    q = (testing.random_fp8(rng, (B, next_n, H, D)).view(np.uint8) & 0x3F).view(code.dtype)
    w = np.abs(rng.standard_normal((B * next_n, H), dtype=np.float32)) + 0.1
    return testing.DecodeInputs(q, kv, w, lens, tables, ctx, None, False)


@case
def key_orders_that_fill_and_starve_the_candidates(dev):
    """Rising logits make every key enter and the buffers cut at every chance, falling ones let none in after the
    first, tied ones make every cut resolve by position (the lowest keys win), clustered ones leave a trim nothing
    to drop: each against its exact selection, at two grids."""
    top_k = 300
    for order in ("rising", "falling", "tied"):
        for n in (1, 2):
            inp = ordered_inputs(order, n)
            bound = reference.decode_bounds(inp.context_lens, n, inp.max_model_len, None)
            first = np.maximum(bound - top_k, 0) if order == "rising" else np.zeros_like(bound)
            want = first[:, None] + np.arange(top_k)[None, :]
            for units, sorted in ((3, False), (6, True)):
                idx, val, slots = C.run(dev, inp, top_k, sorted, **tight(dev, top_k, units))
                expect = want[:, ::-1] if sorted and order == "rising" else want
                assert (idx == expect).all(), f"{order}, next_n {n}, units {units}"
                assert (val > 0).all() and (slots >= 0).all()
                if order == "tied":
                    assert (val == val[:, :1]).all()
    # A trim keeps the whole bin that holds the top_k-th key: here that is every clustered key, so the rows must be
    # cut exactly instead, or they would never shrink (and pass their buffers).
    for n in (1, 2):
        inp = ordered_inputs("clustered", n)
        bound = reference.decode_bounds(inp.context_lens, n, inp.max_model_len, None)
        want = np.concatenate([np.broadcast_to(np.arange(8), (len(bound), 8)),
                               bound[:, None] - (top_k - 8) + np.arange(top_k - 8)[None, :]], axis=1)
        idx, _, _ = C.run(dev, inp, top_k, False, **tight(dev, top_k, 3))
        assert (idx == want).all(), f"clustered, next_n {n}"


@case
def one_sequence_over_many_units_merges_in_two_levels(dev):
    """A sequence spread over more units than one merge block reads at once (paged_topk_fused.merge_group): its
    pieces merged in groups, then the groups, both next_n and sorted or not; the gate and the composed path's bits."""
    from hipindexer.ops.paged_topk_fused import merge_group
    top_k, units = 2048, 20
    for n, sorted in ((1, False), (2, True)):
        rng = np.random.default_rng(60 + n)
        inp = testing.decode_inputs(rng, testing.DecodeCase(1, n, 32, D, 64, False, mean_context=24_000,
                                                            spread="equal", key_codes=True))
        group = merge_group("gfx950", 1, top_k, units, inp.max_model_len)
        assert group > 0 and -(-units // group) > 2
        got = C.check(dev, inp, top_k, sorted, fused=True, units=units)
        composed = C.run(dev, inp, top_k, sorted, fused=False)
        assert all((a.view(np.uint32) == b.view(np.uint32)).all() for a, b in zip(got, composed))


@case
def untrusted_device_values_are_skipped_and_flagged(dev):
    """Block ids outside the cache and malformed lengths in device memory: bits 0 and 2 in errors=, and the
    selection the composed path makes on the same values."""
    for rows in (False, True):
        inp = fused_inputs(71 + rows, B=6, next_n=2, ctx=2500, rows=rows, ragged=True, top_k=100)
        bt, lens = inp.block_tables.copy(), inp.context_lens.copy()
        bt[0, 2], bt[4, 20] = inp.kv_cache.shape[0], -5
        nl = None if rows else inp.next_n_lens.copy()
        if rows:
            lens[5, 1] = -7
        else:
            lens[5] = -7
        d = lambda a: None if a is None else DeviceArray.from_numpy(a, dev)  # noqa: E731
        bad = testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, d(lens), d(bt), inp.max_model_len, d(nl), False)
        got = []
        for kw in (tight(dev, 100), dict(fused=False)):
            errors = DeviceArray.from_numpy(np.zeros(1, np.int32), dev)
            got.append(hipindexer.fp8_paged_mqa_topk(*bad.args()[:6], 100, next_n_lens=bad.next_n_lens, sorted=True,
                                                     errors=errors, device=dev, **kw).numpy())
            assert int(errors.numpy()[0]) == ERROR_BLOCK_ID | ERROR_LENGTH, kw
        assert (got[0] == got[1]).all()
        assert not np.isin(np.arange(128, 192), got[0][0:2]).any()  # the keys of sequence 0's bad block


@case
def the_same_bits_twice_and_at_any_grid(dev):
    """Deterministic: the same inputs give the same bits, order included, whatever the units and buffers."""
    inp = fused_inputs(5, next_n=2, ragged=True, top_k=256)
    ws = hipindexer.paged_topk_workspace(5, 2, 256, inp.max_model_len, 64, device=dev, heads=64, fused=True)
    for sorted in (False, True):
        a = C.run(dev, inp, 256, sorted, workspace=ws)
        for kw in ({}, tight(dev, 256, 1), tight(dev, 256, 7)):
            b = C.run(dev, inp, 256, sorted, workspace=ws, **kw)
            assert all((x.view(np.uint32) == y.view(np.uint32)).all() for x, y in zip(a, b)), kw


def _cut_rows_model(entries: list[int], want: int, passes: int, bits: int) -> tuple[list[int], int]:
    """hx_group_cut_rows for one row, in Python integers: a radix select over the 64-bit entries from the highest
    bit on which their keys differ, `bits` bits a digit, stopping at a digit whose bin is taken whole or after
    `passes` digits; the entries kept (at or above the cut) and the cut. A row of `want` entries or fewer is kept
    whole, cut 0."""
    if len(entries) <= want:
        return entries, 0
    keys = [x >> 32 for x in entries]
    lo, hi = min(keys), max(keys)
    top = 32 + (-1 if lo == hi else (lo ^ hi).bit_length() - 1)
    cut = (lo << 32) >> (top + 1) << (top + 1)
    need = want
    while top >= 0 and passes > 0:
        passes -= 1
        shift = top - (bits - 1) if top >= bits - 1 else 0
        bins, high = 1 << (top - shift + 1), top + 1
        hist = [0] * bins
        for x in entries:
            if high >= 64 or (x >> high) == (cut >> high):
                hist[(x >> shift) & (bins - 1)] += 1
        above = 0
        for b in range(bins - 1, -1, -1):
            if above + hist[b] >= need:
                break
            above += hist[b]
        take = need - above
        cut |= b << shift
        need, top = take, shift - 1
        if take == hist[b]:
            break
    return [x for x in entries if x >= cut], cut


@case
def rows_cut_side_by_side_keep_what_one_row_at_a_time_keeps(dev):
    """hx_group_cut_rows, which the fused decode kernels run on a segment's rows together, at the sm_90a kernel's
    group of 384 threads (hsaco_src/generic/rows_cut_probe.hip): one row and two, rows that need no cut beside rows that do,
    keys that tie and so cut by position, one digit (a trim) and all of them (an exact cut); each row's kept
    entries, their count and its cut as a radix select of that row alone gives them."""
    from built_kernels import manifest_of_test_kernels
    from hipindexer.runtime import get_kernel
    kern = get_kernel("rows_cut_probe", device=dev, manifest=manifest_of_test_kernels())
    rng = np.random.default_rng(31)
    cap = 3000
    for rows, counts, want, passes, kind in [(2, (2900, 2500), 700, 64, "normal"), (2, (2900, 600), 700, 64, "normal"),
                                             (2, (300, 2999), 256, 1, "tied"), (1, (2800,), 1000, 1, "normal"),
                                             (2, (2000, 2000), 1999, 64, "tied"), (1, (1500,), 7, 64, "normal")]:
        host = np.zeros((rows, cap), np.uint64)
        for r, n in enumerate(counts):
            v = rng.standard_normal(n).astype(np.float32)
            if kind == "tied":
                v = np.round(v * 3).astype(np.float32)
            u = v.view(np.uint32)
            key = np.where(u >> 31 == 1, ~u, u | np.uint32(0x80000000)).astype(np.uint64)
            col = rng.permutation(1 << 20)[:n].astype(np.uint64)
            host[r, :n] = (key << np.uint64(32)) | (~col & np.uint64(0xFFFFFFFF))
        entries = DeviceArray.from_numpy(host, dev)
        cnt = DeviceArray.from_numpy(np.array(counts, np.int32), dev)
        cuts = DeviceArray.from_numpy(np.full(rows, 7, np.uint64), dev)
        kern.launch((1, 1, 1), entries=entries, counts=cnt, cuts=cuts, rows=rows, cap=cap, want=want, passes=passes)
        got, got_n, got_cut = entries.numpy(), cnt.numpy(), cuts.numpy()
        for r, n in enumerate(counts):
            kept, cut = _cut_rows_model([int(x) for x in host[r, :n]], want, passes, 11 if rows == 1 else 10)
            where = f"{rows} rows, row {r}, {n} entries, want {want}, {passes} digits, {kind}"
            assert got_n[r] == len(kept), where
            assert int(got_cut[r]) == cut, where
            assert sorted(int(x) for x in got[r, :got_n[r]]) == sorted(kept), where
            if passes == 64 and n > want:
                assert got_n[r] == want, where


# ------------------------------------------------------------------ on this process's device

@pytest.fixture(scope="module")
def dev():
    return Device()


@pytest.mark.parametrize("name", list(CASES))
def test_paged_topk_fused_case(dev, name):
    CASES[name](dev)
