"""The decode op on a device: the emulated MI355X (tests/test_decode_emu.py runs this file in a child pytest
with -p emu_session, whose HIP is the emulator), or the first GPU (`python -m pytest tests/emu/decode_cases.py`
on a GPU machine, as tools/device/h200_decode.sh does)."""
import numpy as np
import pytest

from hipindexer import fp8_paged_mqa_logits, reference, testing
from hipindexer.ops import ERROR_BLOCK_ID, ERROR_LENGTH
from hipindexer.plan import plan_decode
from hipindexer.gate import gate_decode
from hipindexer.ops import target_of
from hipindexer.runtime import Device, DeviceArray

DEV = Device()  # the emulated MI355X under -p emu_session; a GPU run straight through pytest
NAN_BITS = np.float32(np.nan).view(np.uint32)


def _run(inp, clean=True, errors=None, out=None, **kw):
    R = inp.q.shape[0] * inp.q.shape[1]
    out = out if out is not None else DeviceArray.empty((R, inp.max_model_len), np.float32, DEV).fill(np.nan)
    fp8_paged_mqa_logits(*inp.args(), clean_logits=clean, errors=errors, out=out, device=DEV, **kw)
    return out.numpy()


def _dev(a):
    return DeviceArray.from_numpy(a, DEV)


def _errors():
    return _dev(np.zeros(1, np.int32))


@pytest.mark.parametrize("case", [
    testing.DecodeCase(3, 2, 20, 64, 7, mean_context=300, ragged=True, zero_contexts=1),      # H % 16 != 0
    testing.DecodeCase(2, 8, 16, 256, 16, True, mean_context=200, ragged=True, live_min=1),   # D past 128
    testing.DecodeCase(300, 1, 4, 64, 1, mean_context=20, zero_contexts=7),                   # prefixes in 3 chunks
    testing.DecodeCase(2, 3, 32, 128, 64, True, mean_context=2000, spread="one_long", split_kv=7),
    testing.DecodeCase(4, 4, 8, 64, 5, mean_context=150, max_model_len=90),                   # context past the width
    testing.DecodeCase(3, 2, 8, 128, 32, False, mean_context=100, vllm_view=True, ragged=True, zero_live=1),
], ids=lambda c: c.name)
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "raw"])
def test_logits_pass_the_gate(case, clean):
    inp = testing.decode_inputs(np.random.default_rng(0), case)
    errors = _errors()
    got = _run(inp, clean, errors, split_kv=case.split_kv)
    assert int(errors.numpy()[0]) == 0
    plan = plan_decode(case.B, case.next_n, case.H, case.D, case.block_size, inp.max_model_len, target_of(DEV),
                       preshuffle=case.preshuffle)  # on sm_90a the tensor-core kernel takes H 32, D 128, bs 64
    g = gate_decode(got, inp, clean, plan.accumulation)
    assert g, f"{plan.kernel}: {g.message}"


@pytest.mark.parametrize("split_kv", [None, 1, 2, 7, 64])
def test_every_split_gives_bitwise_the_same_logits(split_kv):
    inp = testing.decode_inputs(np.random.default_rng(1), testing.DecodeCase(3, 2, 16, 64, 16, True, 500, True))
    want = _run(inp)
    np.testing.assert_array_equal(_run(inp, split_kv=split_kv).view(np.uint32), want.view(np.uint32))


def test_the_two_layouts_of_one_cache_give_identical_logits():
    from hipindexer.cache import shuffle_cache
    flat = testing.decode_inputs(np.random.default_rng(2), testing.DecodeCase(2, 3, 16, 64, 64, False, 400, True))
    shuf = testing.DecodeInputs(flat.q, shuffle_cache(flat.kv_cache, 64), flat.weights, flat.context_lens,
                                flat.block_tables, flat.max_model_len, flat.next_n_lens, True)
    np.testing.assert_array_equal(_run(flat).view(np.uint32), _run(shuf).view(np.uint32))


def test_numpy_device_uint8_and_vllm_view_inputs_give_the_same_logits():
    inp = testing.decode_inputs(np.random.default_rng(3), testing.DecodeCase(2, 2, 8, 64, 16, False, 100, True))
    a = _run(inp)
    dev_args = [_dev(x) if isinstance(x, np.ndarray) else x for x in inp.args()]
    b = _run(testing.DecodeInputs(*dev_args))
    raw = testing.DecodeInputs(inp.q.view(np.uint8), inp.kv_cache.reshape(inp.kv_cache.shape[0], 16, 1, 68),
                               *inp.args()[2:])
    c = _run(raw)
    for x in (b, c):
        np.testing.assert_array_equal(a.view(np.uint32), x.view(np.uint32))


def test_out_with_a_wider_row_stride_keeps_its_padding():
    inp = testing.decode_inputs(np.random.default_rng(4), testing.DecodeCase(3, 2, 8, 64, 16, False, 100, True))
    R, N = 6, inp.max_model_len
    wide = DeviceArray.empty((R, N + 13), np.float32, DEV).fill(np.nan)
    _run(inp, out=wide[:, :N])
    got = wide.numpy()
    assert np.isnan(got[:, N:]).all()
    g = gate_decode(got[:, :N], inp, True, "fp32")
    assert g, g.message


def test_clean_false_writes_only_valid_positions():
    inp = testing.decode_inputs(np.random.default_rng(5),
                                testing.DecodeCase(4, 4, 8, 64, 16, False, 90, True, zero_contexts=1, zero_live=1))
    got = _run(inp, clean=False)
    valid = reference.decode_valid_mask(inp.context_lens, 4, inp.max_model_len, inp.next_n_lens)
    assert np.isnan(got[~valid]).all() and not np.isnan(got[valid]).any()


def test_a_batch_of_padding_sequences_is_all_minus_inf():
    case = testing.DecodeCase(5, 2, 8, 64, 16, False, 50, True, zero_contexts=5, max_model_len=77)
    inp = testing.decode_inputs(np.random.default_rng(6), case)
    got = _run(inp)
    assert (got == -np.inf).all()


def test_out_of_range_block_ids_on_the_device_give_minus_inf_and_bit_0():
    case = testing.DecodeCase(3, 2, 8, 64, 4, False, 60, spread="equal")
    inp = testing.decode_inputs(np.random.default_rng(7), case)
    good = _run(inp)
    bt = inp.block_tables.copy()
    bt[0, 3], bt[2, 0] = -1, inp.kv_cache.shape[0]
    errors = _errors()
    got = _run(testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, inp.context_lens, _dev(bt),
                                    inp.max_model_len, None, False), errors=errors)
    assert int(errors.numpy()[0]) == ERROR_BLOCK_ID
    want = good.copy()
    want[0:2, 12:16] = -np.inf
    want[4:6, 0:4] = -np.inf
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_device_context_past_the_tables_width_reads_no_further():
    case = testing.DecodeCase(2, 1, 8, 64, 16, False, 64, spread="equal")
    inp = testing.decode_inputs(np.random.default_rng(8), case)   # 4 blocks each, 5 columns
    ctx = np.array([64, 200], np.int32)                           # sequence 1 now needs 13 columns
    errors = _errors()
    mml = 200
    got = _run(testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, _dev(ctx), inp.block_tables, mml, None,
                                    False), errors=errors)
    assert int(errors.numpy()[0]) == ERROR_BLOCK_ID
    assert (got[1, 5 * 16:] == -np.inf).all()  # keys of the missing columns and of the sentinel's block
    assert np.isfinite(got[1, :64]).all() and (got[0, 64:] == -np.inf).all()


def test_malformed_device_lengths_give_minus_inf_rows_and_bit_2():
    case = testing.DecodeCase(3, 2, 8, 64, 16, False, 50, True, live_min=1, spread="equal")
    inp = testing.decode_inputs(np.random.default_rng(9), case)
    good = _run(inp)
    ctx, nl = inp.context_lens.copy(), inp.next_n_lens.copy()
    ctx[0], nl[2] = -1, 3
    errors = _errors()
    got = _run(testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, _dev(ctx), inp.block_tables,
                                    inp.max_model_len, _dev(nl), False), errors=errors)
    assert int(errors.numpy()[0]) == ERROR_LENGTH
    assert (got[0:2] == -np.inf).all() and (got[4:6] == -np.inf).all()
    np.testing.assert_array_equal(got[2:4].view(np.uint32), good[2:4].view(np.uint32))


@pytest.mark.parametrize("field,value,match", [
    ("block_tables", lambda i: _set(i.block_tables, (1, 0), 10 ** 6), r"block_tables: entry \[1, 0\] = 1000000 is read"),
    ("context_lens", lambda i: _set(i.context_lens, (2,), -3), "context_lens: must be >= 0, got -3 for sequence 2"),
    ("next_n_lens", lambda i: _set(i.next_n_lens, (0,), 3), r"next_n_lens: each entry must be in 0..next_n=2"),
])
def test_host_values_out_of_range_raise_before_anything_runs(field, value, match):
    inp = testing.decode_inputs(np.random.default_rng(10), testing.DecodeCase(3, 2, 8, 64, 16, False, 50, True))
    setattr(inp, field, value(inp))
    out = DeviceArray.empty((6, inp.max_model_len), np.float32, DEV).fill(np.nan)
    with pytest.raises(ValueError, match=match):
        fp8_paged_mqa_logits(*inp.args(), out=out, device=DEV)
    assert np.isnan(out.numpy()).all()


def _set(a, idx, v):
    a = a.copy()
    a[idx] = v
    return a


@pytest.mark.parametrize("arg,bad,exc,match", [
    (0, lambda i: i.q.astype(np.float32), TypeError, "q: expected dtype float8_e4m3fn"),
    (1, lambda i: i.kv_cache[:, :, :60], ValueError, "kv_cache: last dim is 60, but q's D = 64 needs D \\+ 4 = 68"),
    (2, lambda i: i.weights[:3], ValueError, r"weights: rows is 3, but q's B \* next_n gives 6"),
    (3, lambda i: i.context_lens.astype(np.int64), TypeError, "context_lens: expected dtype int32"),
    (4, lambda i: i.block_tables[:2], ValueError, "block_tables: rows is 2, but q gives 3"),
])
def test_bad_shapes_and_dtypes_are_named(arg, bad, exc, match):
    inp = testing.decode_inputs(np.random.default_rng(11), testing.DecodeCase(3, 2, 8, 64, 16, False, 50))
    args = list(inp.args())
    args[arg] = bad(inp)
    with pytest.raises(exc, match=match):
        fp8_paged_mqa_logits(*args, device=DEV)


@pytest.mark.parametrize("kw,exc,match", [
    (dict(split_kv=0), ValueError, "split_kv: expected None or an int >= 1"),
    (dict(kernel="nope"), ValueError, "kernel: 'nope' is not a decode kernel"),
    (dict(tile=4), TypeError, r"unknown tunable\(s\) \['tile'\]"),
    (dict(accumulation="fp16"), ValueError, "accumulation: expected one of"),
    (dict(preshuffle=True), ValueError, "preshuffle: the 16x16 shuffled layout needs block_size % 16 == 0"),
    (dict(errors=np.zeros(1, np.int32)), TypeError, "errors: expected a device array"),
    (dict(out=np.zeros((6, 64), np.float32)), TypeError, "out: expected a device array"),
])
def test_bad_options_are_named(kw, exc, match):
    case = testing.DecodeCase(3, 2, 8, 64, 8, False, 50)
    inp = testing.decode_inputs(np.random.default_rng(12), case)
    args = list(inp.args())[:6]
    with pytest.raises(exc, match=match):
        fp8_paged_mqa_logits(*args, device=DEV, **kw)


def test_an_empty_batch_launches_nothing():
    case = testing.DecodeCase(0, 2, 8, 64, 16, False, 50, max_model_len=40)
    inp = testing.decode_inputs(np.random.default_rng(13), case)
    assert fp8_paged_mqa_logits(*inp.args(), device=DEV).shape == (0, 40)


def test_a_strided_device_array_is_refused_before_anything_is_copied():
    inp = testing.decode_inputs(np.random.default_rng(14), testing.DecodeCase(3, 2, 8, 64, 16, False, 50))
    w = _dev(np.concatenate([inp.weights, inp.weights], axis=1))[:, :8]
    args = list(inp.args())
    args[2] = w
    with pytest.raises(ValueError, match="weights: expected a C-contiguous array"):
        fp8_paged_mqa_logits(*args, device=DEV)


# ------------------------------------------------------------------ the fast kernels' shapes
# H in {32, 64}, D = 128: the gfx950 MFMA kernels when DEV is the emulated MI355X (block sizes that are powers of
# two >= 16 in both layouts, and block_size 1); the generic kernel elsewhere.
FAST_CASES = [
    testing.DecodeCase(3, 8, 64, 128, 64, True, mean_context=700, ragged=True, zero_contexts=1),
    testing.DecodeCase(4, 6, 32, 128, 64, False, mean_context=1500, spread="one_long", split_kv=5),
    testing.DecodeCase(5, 3, 64, 128, 16, False, mean_context=300, ragged=True, live_min=1, max_model_len=250),
    testing.DecodeCase(2, 7, 32, 128, 16, True, mean_context=90, ragged=True, zero_live=1),
    testing.DecodeCase(3, 2, 32, 128, 128, True, mean_context=400, split_kv=64),
    testing.DecodeCase(4, 5, 64, 128, 1, False, mean_context=260, ragged=True, zero_contexts=1, split_kv=3),
    testing.DecodeCase(2, 1, 32, 128, 1, False, mean_context=1, spread="equal"),
    testing.DecodeCase(3, 4, 64, 128, 32, False, mean_context=200, vllm_view=True, ragged=True, live_min=1),
]


def _fast_kernel(case):
    from hipindexer.plan import plan_decode
    from hipindexer.ops import target_of
    return plan_decode(case.B, case.next_n, case.H, case.D, case.block_size, case.max_model_len or 1 << 16,
                       target_of(DEV), preshuffle=case.preshuffle, split_kv=case.split_kv).kernel


@pytest.mark.parametrize("case", FAST_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "raw"])
def test_fast_shapes_pass_the_gate(case, clean):
    if DEV.arch == "gfx950":
        assert _fast_kernel(case).startswith("paged_mqa_logits_mfma")
    inp = testing.decode_inputs(np.random.default_rng(20), case)
    errors = _errors()
    got = _run(inp, clean, errors, split_kv=case.split_kv)
    assert int(errors.numpy()[0]) == 0
    g = gate_decode(got, inp, clean, "fp32")
    assert g, g.message


@pytest.mark.parametrize("block_size,preshuffle", [(64, True), (16, False), (1, False)])
def test_fast_shapes_give_bitwise_the_same_logits_for_every_split(block_size, preshuffle):
    case = testing.DecodeCase(3, 3, 32, 128, block_size, preshuffle, mean_context=600, ragged=True, live_min=1)
    inp = testing.decode_inputs(np.random.default_rng(21), case)
    want = _run(inp)
    for split_kv in (1, 2, 7, 40):
        np.testing.assert_array_equal(_run(inp, split_kv=split_kv).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("H,D,block_size", [(32, 128, 16), (64, 128, 1), (64, 128, 64)])
def test_fast_shapes_skip_and_flag_untrusted_device_values(H, D, block_size):
    from hipindexer.check import sweep
    o = sweep.decode_untrusted_values(np.random.default_rng(22), DEV, heads=(H,), dims=(D,),
                                      block_sizes=(block_size,))
    assert o.status == "passed", o.message


@pytest.mark.parametrize("block_size,preshuffle", [(64, True), (64, False), (16, True), (1, False)])
def test_the_keys_are_read_once_for_any_next_n(block_size, preshuffle):
    """The emulator counts the bytes the kernel's loads take from each device allocation: at next_n = 8 the
    kv_cache bytes read equal those at next_n = 1 on the same sequences, and both are every key's 128 bytes
    and 4-byte scale exactly once (nothing past a context is read, nothing twice)."""
    from hipindexer.runtime import emu
    if not emu.active():
        pytest.skip("counts loads on the emulator only")
    case = testing.DecodeCase(5, 8, 64, 128, block_size, preshuffle, mean_context=900, zero_contexts=1)
    inp = testing.decode_inputs(np.random.default_rng(23), case)
    B, H = case.B, case.H
    cache = _dev(inp.kv_cache)
    one = testing.DecodeInputs(inp.q[:, :1].copy(), inp.kv_cache, inp.weights.reshape(B, 8, H)[:, 0].copy(),
                               inp.context_lens, inp.block_tables, inp.max_model_len, None, preshuffle)
    read = {}
    for name, x in (("next_n=1", one), ("next_n=8", inp)):
        on_device = testing.DecodeInputs(x.q, cache, *x.args()[2:])
        with emu.count_loads() as loads:
            got = _run(on_device)
        read[name] = loads.bytes(cache)
        g = gate_decode(got, x, True, "fp32")
        assert g, (name, g.message)
    keys = int(np.minimum(inp.context_lens, inp.max_model_len).sum())
    assert read == {"next_n=1": keys * (128 + 4), "next_n=8": keys * (128 + 4)}, (read, keys)


# ------------------------------------------------------------------ [B, next_n] context_lens (a length per row)
# At the fast shapes: every block size and layout the gfx950 MFMA kernels serve (16 and 64 block-flat and
# preshuffled, block_size 1), H 32 and 64; ragged rows (each sequence's live rows' lengths in a random order),
# padding sequences, contexts past max_model_len.
ROW_CASES = [
    testing.DecodeCase(3, 8, 64, 128, 64, True, mean_context=700, ragged=True, live_min=1, zero_contexts=1,
                       lens_per_row=True),
    testing.DecodeCase(4, 6, 32, 128, 64, False, mean_context=900, spread="one_long", ragged=True, split_kv=5,
                       lens_per_row=True),
    testing.DecodeCase(5, 3, 64, 128, 16, False, mean_context=300, ragged=True, live_min=1, max_model_len=250,
                       lens_per_row=True),
    testing.DecodeCase(3, 7, 32, 128, 16, True, mean_context=200, ragged=True, zero_live=1, max_model_len=150,
                       lens_per_row=True),
    testing.DecodeCase(4, 5, 64, 128, 1, False, mean_context=260, ragged=True, zero_contexts=1, split_kv=3,
                       lens_per_row=True),
    testing.DecodeCase(3, 4, 32, 128, 1, False, mean_context=200, ragged=True, live_min=1, max_model_len=170,
                       lens_per_row=True),
]


@pytest.mark.parametrize("case", ROW_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "raw"])
def test_lengths_per_row_pass_the_gate(case, clean):
    if DEV.arch == "gfx950":
        assert _fast_kernel(case).startswith("paged_mqa_logits_mfma")
    inp = testing.decode_inputs(np.random.default_rng(30), case)
    assert inp.context_lens.shape == (case.B, case.next_n)
    errors = _errors()
    got = _run(inp, clean, errors, split_kv=case.split_kv)
    assert int(errors.numpy()[0]) == 0
    g = gate_decode(got, inp, clean, "fp32")
    assert g, g.message


def _rows_any_order(rng, inp):
    """inp with each sequence's row lengths drawn at random in 0..its longest row, in any order over all next_n
    rows: zero rows between live ones, rows past max_model_len where the context is."""
    lens = inp.context_lens
    top = lens.max(axis=1, keepdims=True)
    mixed = (rng.random(lens.shape) * (top + 1)).astype(np.int32)
    mixed[:, 0] = top[:, 0]                              # the longest row first: the table covers it
    mixed[rng.random(lens.shape) < 0.2] = 0              # zero rows anywhere
    mixed = np.stack([rng.permutation(r) for r in mixed]).astype(np.int32)
    return testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, mixed, inp.block_tables, inp.max_model_len,
                                None, inp.preshuffle)


@pytest.mark.parametrize("case", ROW_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "raw"])
def test_lengths_per_row_in_any_order_pass_the_gate(case, clean):
    rng = np.random.default_rng(31)
    inp = _rows_any_order(rng, testing.decode_inputs(rng, case))
    errors = _errors()
    got = _run(inp, clean, errors, split_kv=case.split_kv)
    assert int(errors.numpy()[0]) == 0
    g = gate_decode(got, inp, clean, "fp32")
    assert g, g.message


@pytest.mark.parametrize("block_size,preshuffle,H", [(64, True, 32), (64, False, 64), (16, True, 64),
                                                     (16, False, 32), (1, False, 32), (1, False, 64)])
def test_per_row_lengths_of_the_same_rows_give_bitwise_the_same_logits(block_size, preshuffle, H):
    """[B] context_lens with next_n_lens, and reference.per_row_lengths of them as [B, next_n]: bitwise the same
    logits, clean and raw, on the planner's grid and on one unit per sequence."""
    case = testing.DecodeCase(5, 4, H, 128, block_size, preshuffle, mean_context=400, spread="pm30", ragged=True,
                              zero_live=1, zero_contexts=1, max_model_len=420)
    flat = testing.decode_inputs(np.random.default_rng(32), case)
    lens = reference.per_row_lengths(flat.context_lens, case.next_n, flat.next_n_lens)
    rows = testing.DecodeInputs(flat.q, flat.kv_cache, flat.weights, lens, flat.block_tables, flat.max_model_len,
                                None, preshuffle)
    for clean in (True, False):
        for split_kv in (None, 1):
            a, b = _run(flat, clean, split_kv=split_kv), _run(rows, clean, split_kv=split_kv)
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg=f"{clean=} {split_kv=}")
            if not clean:
                assert not np.isnan(a[reference.decode_valid_mask(lens, 4, flat.max_model_len)]).any()


@pytest.mark.parametrize("H,block_size", [(32, 16), (64, 64), (64, 1)])
def test_a_negative_device_row_length_is_that_rows_minus_inf_and_bit_2(H, block_size):
    """Per-row lengths held on the device skip the host's check: a negative row comes out -inf (clean; untouched
    raw), error bit 2 is set once, and every other row is bitwise what it was with that row's length 0 (the
    sequence's longest row, negated, shortens what its other rows' keys are read for: nothing they see)."""
    case = testing.DecodeCase(4, 3, H, 128, block_size, False, mean_context=max(200, 3 * block_size),
                              spread="equal", lens_per_row=True)
    inp = testing.decode_inputs(np.random.default_rng(33), case)
    lens = inp.context_lens.copy()
    lens[1, 2] = -9            # sequence 1's longest row
    lens[2, 0] = -1            # sequence 2's shortest
    zeroed = np.maximum(lens, 0)
    for clean in (True, False):
        good = _run(testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, zeroed, inp.block_tables,
                                         inp.max_model_len, None, False), clean)
        errors = _errors()
        got = _run(testing.DecodeInputs(inp.q, inp.kv_cache, inp.weights, _dev(lens), inp.block_tables,
                                        inp.max_model_len, None, False), clean, errors)
        assert int(errors.numpy()[0]) == ERROR_LENGTH
        for r in (1 * 3 + 2, 2 * 3 + 0):
            assert (got[r] == -np.inf).all() if clean else np.isnan(got[r]).all()
        np.testing.assert_array_equal(got.view(np.uint32), good.view(np.uint32))
