"""The paged-cache ops on a device: the emulated MI355X (tests/test_cache_emu.py runs this file in a child
pytest with -p emu_session, whose HIP is the emulator), or the first GPU (`python -m pytest
tests/emu/cache_cases.py` on a GPU machine, as tools/device/h200_cache.sh does).

Bitwise agreement with hipindexer.cache's numpy helpers, argument errors named before anything moves,
error flags for untrusted device values, and the end-to-end path of a serving stack: keys quantised into
the cache on the device, gathered for a prefill chunk of three requests, windows built, the prefill op run
on the gathered keys, and the decode op on the same cache, with no numpy round trip in between."""
import ml_dtypes
import numpy as np
import pytest

import hipindexer
from hipindexer import cache, testing
from hipindexer.check import cache as cache_check
from hipindexer.ops import gather_cached_keys, packed_prefill_windows, quantize_and_cache_keys
from hipindexer.ops import ERROR_LENGTH, ERROR_SLOT
from hipindexer.gate import gate_decode, gate_prefill
from hipindexer.ops import target_of
from hipindexer.plan import plan_prefill
from hipindexer.runtime import Device, DeviceArray, Stream

DEV = Device()  # the emulated MI355X under -p emu_session; a GPU run straight through pytest
BF16 = np.dtype(ml_dtypes.bfloat16)


def _dev(a):
    return DeviceArray.from_numpy(np.ascontiguousarray(a), DEV)


def _errors(value=0):
    return _dev(np.array([value], np.int32))


def _passed(outcome):
    assert outcome.status == "passed", f"{outcome.case}: {outcome.message}"


# ------------------------------------------------------------------ bit for bit

@pytest.mark.parametrize("key_type", list(cache_check.KEY_TYPES))
@pytest.mark.parametrize("bs,preshuffle", cache_check.LAYOUTS, ids=lambda v: str(v))
@pytest.mark.parametrize("pow2", [False, True], ids=["amax", "pow2"])
def test_writes_equal_numpys_whole_cache(key_type, bs, preshuffle, pow2):
    _passed(cache_check.write_case(np.random.default_rng(bs), DEV, 777, 64, bs, preshuffle, key_type, pow2))


@pytest.mark.parametrize("key_type", list(cache_check.KEY_TYPES))
@pytest.mark.parametrize("pow2", [False, True], ids=["amax", "pow2"])
def test_rounding_boundaries_through_the_division(key_type, pow2):
    _passed(cache_check.write_case(np.random.default_rng(3), DEV, 0, 128, 16, True, key_type, pow2, "boundary"))


@pytest.mark.parametrize("D", [16, 48, 4112])  # one chunk; three; past 16 * 256, where a thread takes two
def test_writes_at_other_head_dims(D):
    _passed(cache_check.write_case(np.random.default_rng(D), DEV, 37, D, 16, True, "bf16", False))
    _passed(cache_check.write_case(np.random.default_rng(D), DEV, 37, D, 3, False, "f32", True))


@pytest.mark.parametrize("R", [1, 3, 64])
@pytest.mark.parametrize("bs,preshuffle", cache_check.LAYOUTS, ids=lambda v: str(v))
def test_gathers_equal_numpys(R, bs, preshuffle):
    _passed(cache_check.gather_case(np.random.default_rng(R), DEV, R, 128, bs, preshuffle, 51))


@pytest.mark.parametrize("R,spare", [(0, 3), (1, 0), (5, 2), (600, 7)])
def test_windows_equal_numpys(R, spare):
    _passed(cache_check.windows_case(np.random.default_rng(R), DEV, R, spare))


def test_numpy_inputs_int32_slots_and_vllms_4d_cache_view():
    rng = np.random.default_rng(7)
    k = rng.standard_normal((50, 128)).astype(BF16)
    slots = rng.permutation(64 * 4)[:50].astype(np.int32)
    kv = DeviceArray.from_numpy(cache.new_cache(4, 64, 128, fill=9), DEV).reshape(4, 64, 1, 132)
    quantize_and_cache_keys(k, kv, slots)  # the device is the cache's
    want = cache.new_cache(4, 64, 128, fill=9)
    cache.write_cache(want, *cache.quantize_keys(k), slots)
    np.testing.assert_array_equal(kv.numpy().reshape(want.shape), want)
    tables = np.array([[3, 1], [0, 2]], np.int32)
    got_k, got_s = gather_cached_keys(kv, tables, np.array([0, 70, 75], np.int32))
    wk = np.concatenate([cache.gather_keys(want, tables[0], 70, 128)[0], cache.gather_keys(want, tables[1], 5, 128)[0]])
    np.testing.assert_array_equal(got_k.numpy().view(np.uint8), wk.view(np.uint8))
    assert got_s.shape == (75,) and got_k.dtype == np.dtype(ml_dtypes.float8_e4m3fn)


def test_prepared_launches_follow_new_pointers_and_streams():
    rng = np.random.default_rng(8)
    s = Stream(DEV)
    for i in range(3):  # the same layouts: the second and third calls take the prepared launch
        k = rng.standard_normal((20, 64), dtype=np.float32) * (i + 1)
        slots = rng.permutation(32)[:20].astype(np.int64)
        kv = _dev(cache.new_cache(2, 16, 64))
        quantize_and_cache_keys(_dev(k), kv, _dev(slots), stream=s)
        want = cache.new_cache(2, 16, 64)
        cache.write_cache(want, *cache.quantize_keys(k), slots)
        np.testing.assert_array_equal(kv.numpy(stream=s), want)
        out = (DeviceArray.empty((20, 64), np.uint8, DEV), DeviceArray.empty((20,), np.float32, DEV))
        tables = _dev(np.array([[1, 0]], np.int32))
        gk, gs = gather_cached_keys(kv, tables, _dev(np.array([0, 20], np.int32)), out=out, stream=s)
        assert gk is out[0] and gs is out[1]  # out's arrays as given, uint8 included
        wk, ws = cache.gather_keys(want, [1, 0], 20, 64)
        np.testing.assert_array_equal(gk.numpy(stream=s).view(np.uint8), wk.view(np.uint8))
        ks, ke = packed_prefill_windows(_dev(np.array([i + 1], np.int32)), _dev(np.array([5], np.int32)), num_rows=4,
                                        stream=s)
        assert (ks.numpy(stream=s).tolist(), ke.numpy(stream=s).tolist()) == \
            tuple(a.tolist() for a in cache.packed_prefill_windows([i + 1], [5], 4))


# ------------------------------------------------------------------ untrusted device values

def test_bad_device_slots_are_skipped_never_clamped_and_flagged():
    rng = np.random.default_rng(9)
    start = rng.integers(0, 256, (4, 16, 68), dtype=np.uint8)
    for dtype in (np.int64, np.int32):
        slots = np.array([5, -7, 64, 2 ** 31 - 1, -1, 62, -(2 ** 31)], dtype)  # slot 63 stays unwritten
        k = rng.standard_normal((slots.size, 64), dtype=np.float32)
        kv, errors = _dev(start), _errors(ERROR_LENGTH)  # a bit already set stays set: the kernel ORs
        quantize_and_cache_keys(_dev(k), kv, _dev(slots), preshuffle=True, errors=errors)
        keep = (slots >= 0) & (slots < 64)
        want = start.copy()
        cache.write_cache(want, *cache.quantize_keys(k[keep]), slots[keep], preshuffle=True)
        np.testing.assert_array_equal(kv.numpy(), want)  # slots 5 and 62 written, nothing else touched
        assert int(errors.numpy()[0]) == ERROR_SLOT | ERROR_LENGTH


def test_valid_device_slots_set_no_flag():
    errors = _errors()
    quantize_and_cache_keys(_dev(np.ones((3, 16), np.float32)), _dev(cache.new_cache(1, 4, 16)),
                            _dev(np.array([-1, 3, 0], np.int64)), errors=errors)
    assert int(errors.numpy()[0]) == 0


def test_untrusted_values_of_all_three_ops():
    _passed(cache_check.untrusted_case(np.random.default_rng(10), DEV))


def test_device_cu_seq_lens_out_of_order_or_past_the_table_are_flagged():
    kv = _dev(np.random.default_rng(11).integers(0, 256, (4, 16, 20), dtype=np.uint8))
    tables = _dev(np.array([[0, 1], [2, 3]], np.int32))
    for cu, bit in (([0, 40, 50], ERROR_LENGTH),    # request 0 needs 3 blocks, its row has 2
                    ([0, 20, 10], ERROR_LENGTH),    # decreasing
                    ([0, 10, 99], ERROR_LENGTH),    # past out's 60 rows
                    ([0, 32, 60], 0)):
        out = (DeviceArray.empty((60, 16), np.uint8, DEV).fill(7), DeviceArray.empty((60,), np.float32, DEV).fill(0))
        errors = _errors()
        gather_cached_keys(kv, tables, _dev(np.array(cu, np.int32)), out=out, errors=errors)
        assert int(errors.numpy()[0]) == bit, cu


# ------------------------------------------------------------------ argument errors

def _write_args(**change):
    a = dict(k=np.ones((4, 64), np.float32), kv_cache=_dev(cache.new_cache(2, 16, 64)),
             slot_mapping=np.arange(4, dtype=np.int64))
    a.update(change)
    return a


@pytest.mark.parametrize("change,exc,match", [
    (dict(k=np.ones((4, 64), np.int32)), TypeError, "k: expected dtype float32, float16 or bfloat16"),
    (dict(k=np.ones(64, np.float32)), ValueError, "k: expected a 2-D array"),
    (dict(k=np.ones((4, 24), np.float32)), ValueError, "k: D must be a positive multiple of 16"),
    (dict(kv_cache=cache.new_cache(2, 16, 64)), TypeError, "kv_cache: expected a device array"),
    (dict(kv_cache="c"), TypeError, "kv_cache: expected a device array|kv_cache:"),
    (dict(k=np.ones((4, 128), np.float32)), ValueError, "kv_cache: last dim is 68, but k's D"),
    (dict(slot_mapping=np.arange(4, dtype=np.float32)), TypeError, "slot_mapping: expected dtype int64 or int32"),
    (dict(slot_mapping=np.arange(5)), ValueError, r"slot_mapping: expected shape \[T=4\]"),
    (dict(slot_mapping=np.array([0, -2, 1, 2])), ValueError, "slot_mapping: slot -2 is below -1"),
    (dict(slot_mapping=np.array([0, 32, 1, 2])), ValueError, "slot_mapping: slot 32 is past the cache's 32 slots"),
    (dict(slot_mapping=np.array([0, 3, 1, 3])), ValueError, "slot_mapping: a slot appears twice"),
    (dict(k=np.full((4, 64), np.inf, np.float32)), ValueError, "k: row 0 holds NaN or Inf"),
    (dict(errors=np.zeros(1, np.int32)), TypeError, "errors: expected a device array"),
    (dict(errors="e"), ValueError, "errors: expected a writable int32"),
    (dict(preshuffle=True, kv_cache=_dev(cache.new_cache(2, 8, 64))), ValueError, "preshuffle: the 16x16"),
])
def test_write_argument_errors_name_the_argument_and_write_nothing(change, exc, match):
    a = _write_args(**change)
    before = a["kv_cache"].numpy() if isinstance(a["kv_cache"], DeviceArray) else None
    with pytest.raises(exc, match=match):
        quantize_and_cache_keys(**a)
    if before is not None:
        np.testing.assert_array_equal(a["kv_cache"].numpy(), before)


def test_write_refuses_a_read_only_or_misaligned_device_array():
    kv = _dev(cache.new_cache(2, 16, 64))
    ro = DeviceArray(kv.ptr, kv.shape, kv.dtype, DEV, owner=kv, readonly=True)
    with pytest.raises(ValueError, match="kv_cache: the array is read-only"):
        quantize_and_cache_keys(np.ones((1, 64), np.float32), ro, np.zeros(1, np.int64))
    k = _dev(np.ones((5, 68), np.float32))[:, 4:]
    with pytest.raises(ValueError, match="k: expected a C-contiguous array"):
        quantize_and_cache_keys(k, kv, np.arange(5))
    kk = _dev(np.ones(4 * 64 + 2, np.float16))[2:].reshape(4, 64)
    with pytest.raises(ValueError, match="k: the kernels read 16-byte vectors"):
        quantize_and_cache_keys(kk, kv, np.arange(4))


def _gather_args(**change):
    a = dict(kv_cache=cache.new_cache(3, 16, 64), block_tables=np.array([[0, 1], [2, 2]], np.int32),
             cu_seq_lens=np.array([0, 20, 30], np.int32))
    a.update(change)
    return a


@pytest.mark.parametrize("change,exc,match", [
    (dict(kv_cache=np.zeros((3, 16, 68), np.int8)), TypeError, "kv_cache: expected dtype uint8"),
    (dict(kv_cache=np.zeros((3, 16, 30), np.uint8)), ValueError, r"kv_cache \(last dim 30 = D \+ 4\)"),
    (dict(block_tables=np.zeros((2, 2), np.int64)), TypeError, "block_tables: expected dtype int32"),
    (dict(cu_seq_lens=np.array([0, 20], np.int32)), ValueError, "cu_seq_lens: length is 2, but block_tables"),
    (dict(cu_seq_lens=np.array([1, 20, 30], np.int32)), ValueError, "cu_seq_lens: must start at 0"),
    (dict(cu_seq_lens=np.array([0, 20, 10], np.int32)), ValueError, "cu_seq_lens: decreases at request 1"),
    (dict(cu_seq_lens=np.array([0, 40, 50], np.int32)), ValueError, "block_tables: request 0 has 40 tokens"),
    (dict(block_tables=np.array([[0, 3], [2, 2]], np.int32)), ValueError, r"block_tables: entry \[0, 1\] = 3"),
    (dict(preshuffle=True, kv_cache=cache.new_cache(3, 8, 64)), ValueError, "preshuffle"),
    (dict(out=np.zeros((30, 64), np.uint8)), TypeError, "out: expected None or a pair"),
    (dict(out=(np.zeros((30, 64), np.uint8), np.zeros(30, np.float32))), TypeError, r"out\[0\]: expected a device"),
    (dict(out=(_dev(np.zeros((30, 32), np.uint8)), _dev(np.zeros(30, np.float32)))), ValueError,
     r"out\[0\]: D \(last dim\) is 32"),
    (dict(out=(_dev(np.zeros((30, 64), np.uint8)), _dev(np.zeros(29, np.float32)))), ValueError,
     r"out\[1\]: length is 29"),
    (dict(out=(_dev(np.zeros((25, 64), np.uint8)), _dev(np.zeros(25, np.float32)))), ValueError,
     "cu_seq_lens: ends at 30 rows, but out has 25"),
    (dict(cu_seq_lens=_dev(np.array([0, 20, 30], np.int32))), ValueError, "out: cu_seq_lens is on the device"),
])
def test_gather_argument_errors_name_the_argument(change, exc, match):
    with pytest.raises(exc, match=match):
        gather_cached_keys(**_gather_args(**change))


@pytest.mark.parametrize("kw,exc,match", [
    (dict(query_lens=np.array([1, -1], np.int32)), ValueError, "query_lens: must be >= 0"),
    (dict(query_lens=np.array([1, 5], np.int32)), ValueError, "query_lens: request 1 has 5 query rows"),
    (dict(num_rows=2), ValueError, "num_rows: 2 is fewer than the 3 query rows"),
    (dict(num_rows=-1), ValueError, "num_rows: expected None or an int"),
    (dict(query_lens=np.array([1, 2], np.int64)), TypeError, "query_lens: expected dtype int32"),
    (dict(context_lens=np.array([4], np.int32)), ValueError, "context_lens: length is 1"),
    (dict(query_lens=_dev(np.array([1, 2], np.int32))), ValueError, "num_rows: query_lens is on the device"),
    (dict(out=(_dev(np.zeros(3, np.int32)), _dev(np.zeros(4, np.int32)))), ValueError, r"out\[1\]: length is 4"),
    (dict(num_rows=5, out=(_dev(np.zeros(3, np.int32)), _dev(np.zeros(3, np.int32)))), ValueError,
     "num_rows: 5, but out has 3 rows"),
])
def test_windows_argument_errors_name_the_argument(kw, exc, match):
    a = dict(query_lens=np.array([1, 2], np.int32), context_lens=np.array([4, 3], np.int32))
    a.update(kw)
    with pytest.raises(exc, match=match):
        packed_prefill_windows(**a)


# ------------------------------------------------------------------ end to end

CONTEXT = np.array([37, 130, 65])   # the requests' tokens so far
QUERIES = np.array([37, 50, 65])    # this prefill chunk's rows: request 1 is past its first 80 tokens
H, D, BS = 32, 128, 16


def _class_of_prefill(M, N):
    """The accumulation class of the kernel the prefill op picks here (the gate's eps)."""
    return plan_prefill(M, N, H, D, target_of(DEV)).accumulation


def _class_of_decode(max_model_len, preshuffle):
    from hipindexer.plan import plan_decode
    return plan_decode(3, 1, H, D, BS, max_model_len, target_of(DEV), preshuffle=preshuffle).accumulation


@pytest.mark.parametrize("preshuffle", [False, True], ids=["flat", "shuf"])
def test_end_to_end_write_gather_windows_prefill_then_decode(preshuffle):
    """The device path of a serving stack, checked against the numpy reference at its ends only."""
    rng = np.random.default_rng(12)
    tables, nb = cache.make_block_tables(CONTEXT + 1, BS, rng)  # room for one decode token each
    keys = [rng.standard_normal((n, D)).astype(BF16) * np.float32(rng.uniform(0.1, 10)).astype(BF16) for n in CONTEXT]
    slots = np.concatenate([tables[r, np.arange(n) // BS] * BS + np.arange(n) % BS for r, n in enumerate(CONTEXT)])

    kv = _dev(cache.new_cache(nb, BS, D))
    errors = _errors()
    quantize_and_cache_keys(_dev(np.concatenate(keys)), kv, _dev(slots.astype(np.int64)), preshuffle=preshuffle,
                            power_of_two=True, errors=errors)
    cu = np.concatenate([[0], np.cumsum(CONTEXT)]).astype(np.int32)
    N, M = int(cu[-1]), int(QUERIES.sum())
    out = (DeviceArray.empty((N, D), np.uint8, DEV), DeviceArray.empty((N,), np.float32, DEV))
    k_g, s_g = gather_cached_keys(kv, _dev(tables), _dev(cu), preshuffle=preshuffle, out=out, errors=errors)
    ks, ke = packed_prefill_windows(_dev(QUERIES.astype(np.int32)), _dev(CONTEXT.astype(np.int32)), num_rows=M,
                                    errors=errors)
    q = testing.random_fp8(rng, (M, H, D))
    w = rng.standard_normal((M, H), dtype=np.float32)
    logits = hipindexer.fp8_mqa_logits(_dev(q), k_g, s_g, _dev(w), ks, ke).numpy()

    quantised = [cache.quantize_keys(k, power_of_two=True) for k in keys]
    k_ref = np.concatenate([k for k, _ in quantised])
    s_ref = np.concatenate([s for _, s in quantised])
    ks_ref, ke_ref = cache.packed_prefill_windows(QUERIES, CONTEXT)
    assert int(errors.numpy()[0]) == 0
    np.testing.assert_array_equal(k_g.numpy().view(np.uint8), k_ref.view(np.uint8))
    np.testing.assert_array_equal(s_g.numpy(), s_ref)
    np.testing.assert_array_equal(ks.numpy(), ks_ref)
    np.testing.assert_array_equal(ke.numpy(), ke_ref)
    g = gate_prefill(logits, (q, k_ref, s_ref, w, ks_ref, ke_ref), True, _class_of_prefill(M, N))
    assert g, g.message

    if not hasattr(hipindexer, "fp8_paged_mqa_logits"):
        pytest.skip("the decode half needs hipindexer.fp8_paged_mqa_logits, which this build does not have")
    new = rng.standard_normal((3, D)).astype(BF16)  # one decode token per request, at position CONTEXT[r]
    step_slots = tables[np.arange(3), CONTEXT // BS] * BS + CONTEXT % BS
    quantize_and_cache_keys(_dev(new), kv, _dev(step_slots.astype(np.int32)), preshuffle=preshuffle,
                            power_of_two=True, errors=errors)
    ctx = (CONTEXT + 1).astype(np.int32)
    qd = testing.random_fp8(rng, (3, 1, H, D))
    wd = rng.standard_normal((3, H), dtype=np.float32)
    mml = int(ctx.max())
    dec = hipindexer.fp8_paged_mqa_logits(_dev(qd), kv, _dev(wd), _dev(ctx), _dev(tables), mml,
                                          preshuffle=preshuffle, errors=errors).numpy()
    ref_cache = cache.new_cache(nb, BS, D)
    cache.write_cache(ref_cache, k_ref, s_ref, slots, preshuffle=preshuffle)
    cache.write_cache(ref_cache, *cache.quantize_keys(new, power_of_two=True), step_slots, preshuffle=preshuffle)
    np.testing.assert_array_equal(kv.numpy(), ref_cache)
    assert int(errors.numpy()[0]) == 0
    g = gate_decode(dec, (qd, ref_cache, wd, ctx, tables, mml, None, preshuffle), True, _class_of_decode(mml, preshuffle))
    assert g, g.message
