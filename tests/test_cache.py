"""Quantisation, the two cache layouts, gather and block tables."""
import numpy as np
import pytest

from hipindexer import cache, reference, testing
from hipindexer.arguments import FP8


def test_quantize_error_is_within_half_an_fp8_step():
    rng = np.random.default_rng(0)
    k = rng.standard_normal((300, 128)).astype(np.float32) * rng.uniform(0.01, 100, (300, 1)).astype(np.float32)
    q, s = cache.quantize_keys(k)
    assert q.dtype == FP8 and s.dtype == np.float32
    back = cache.dequantize_keys(q, s)
    # 3 mantissa bits: relative step 2^-3, so RNE error <= 2^-4 |x|; subnormal step 2^-9.
    bound = np.maximum(np.abs(k) * 2.0**-4, s[:, None] * 2.0**-10) * (1 + 1e-6)
    assert (np.abs(back - k) <= bound).all()
    np.testing.assert_allclose(np.abs(q.astype(np.float32)).max(axis=1), 448.0, rtol=2**-4)


def test_quantize_power_of_two_scales_and_zero_rows():
    rng = np.random.default_rng(1)
    k = rng.standard_normal((50, 64)).astype(np.float32)
    k[7] = 0
    q, s = cache.quantize_keys(k, power_of_two=True)
    assert s[7] == 1.0 and (q[7].astype(np.float32) == 0).all()
    m, e = np.frexp(s)
    assert (m == 0.5).all()
    assert (s >= np.abs(k).max(axis=1) / 448).all()
    assert (np.abs(q.astype(np.float32)) <= 448).all()


def test_quantize_saturates_and_never_emits_nan_codes():
    k = np.array([[448.0, -448.0, 1e-30, 3.0], [1e30, -1e30, 0, 1]], np.float32)
    q, s = cache.quantize_keys(k)
    codes = q.view(np.uint8)
    assert not np.isin(codes, [0x7F, 0xFF]).any()
    assert np.isfinite(q.astype(np.float32)).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_quantize_rejects_non_finite_input(bad):
    k = np.ones((3, 16), np.float32)
    k[2, 5] = bad
    with pytest.raises(ValueError, match="row 2"):
        cache.quantize_keys(k)


@pytest.mark.parametrize("bs,D", [(16, 64), (64, 128), (32, 48)])
def test_shuffle_then_unshuffle_is_the_identity(bs, D):
    rng = np.random.default_rng(bs * D)
    c = rng.integers(0, 256, size=(5, bs, D + 4), dtype=np.uint8)
    s = cache.shuffle_cache(c, D)
    assert not np.array_equal(s, c)
    np.testing.assert_array_equal(s.reshape(5, -1)[:, bs * D:], c.reshape(5, -1)[:, bs * D:])  # scales stay
    np.testing.assert_array_equal(cache.unshuffle_cache(s, D), c)


def test_shuffled_byte_positions_follow_the_design_formula():
    bs, D = 32, 64
    c = np.zeros((1, bs, D + 4), np.uint8)
    keys = np.arange(bs * D, dtype=np.int64)
    c.reshape(1, -1)[0, : bs * D] = keys % 251
    s = cache.shuffle_cache(c, D).reshape(-1)
    for t in (0, 5, 16, 31):
        for d in (0, 15, 16, 63):
            pos = (t // 16) * 16 * D + (d // 16) * 256 + (t % 16) * 16 + d % 16
            assert s[pos] == (t * D + d) % 251


@pytest.mark.parametrize("preshuffle", [False, True])
def test_gather_inverts_the_writer(preshuffle):
    rng = np.random.default_rng(2)
    bs, D, N = 16, 64, 70
    k, s = cache.quantize_keys(rng.standard_normal((N, D)).astype(np.float32))
    tables, nb = cache.make_block_tables([N], bs, rng)
    c = cache.new_cache(nb + 3, bs, D, fill=0x11)
    n = np.arange(N)
    cache.write_cache(c, k, s, tables[0, n // bs].astype(np.int64) * bs + n % bs, preshuffle=preshuffle)
    gk, gs = cache.gather_keys(c, tables[0], N, D, preshuffle=preshuffle)
    np.testing.assert_array_equal(gk.view(np.uint8), k.view(np.uint8))
    np.testing.assert_array_equal(gs, s)
    assert gk.flags.c_contiguous and gk.shape == (N, D)


def test_writer_skips_minus_one_slots_and_matches_whole_cache_shuffle():
    rng = np.random.default_rng(3)
    bs, D = 16, 32
    k, s = cache.quantize_keys(rng.standard_normal((40, D)).astype(np.float32) + 1)
    slots = rng.permutation(4 * bs)[:40]
    slots[[3, 9]] = -1
    flat = cache.new_cache(4, bs, D)
    shuf = cache.new_cache(4, bs, D)
    cache.write_cache(flat, k, s, slots)
    cache.write_cache(shuf, k, s, slots, preshuffle=True)
    np.testing.assert_array_equal(cache.shuffle_cache(flat, D), shuf)
    gk, gs = cache.gather_blocks(flat, np.arange(4), D)
    kept = slots >= 0
    np.testing.assert_array_equal(gk.view(np.uint8)[slots[kept]], k.view(np.uint8)[kept])
    np.testing.assert_array_equal(gs[slots[kept]], s[kept])
    untouched = np.setdiff1d(np.arange(4 * bs), slots[kept])
    assert untouched.size == 4 * bs - 38
    assert not gk.view(np.uint8)[untouched].any() and not gs[untouched].any()


def test_preshuffled_and_block_flat_caches_give_identical_logits():
    rng = np.random.default_rng(4)
    inp = testing.decode_inputs(rng, testing.DecodeCase(3, 2, 16, 64, 16, False, 60, True))
    flat = reference.fp8_paged_mqa_logits(*inp.args())
    args = list(inp.args())
    args[1] = cache.shuffle_cache(inp.kv_cache, 64)
    args[7] = True
    np.testing.assert_array_equal(reference.fp8_paged_mqa_logits(*args), flat)


def test_block_tables_use_an_exact_pool_in_random_order_with_sentinels():
    rng = np.random.default_rng(5)
    ctx = np.array([0, 17, 64, 100], np.int32)
    tables, nb = cache.make_block_tables(ctx, 16, rng, max_model_len=80)
    need = [0, 2, 4, 5]
    assert nb == sum(need)
    used = np.concatenate([tables[b, :n] for b, n in enumerate(need)])
    assert sorted(used) == list(range(nb))
    assert not np.array_equal(used, np.arange(nb))
    for b, n in enumerate(need):
        assert (tables[b, n:] == cache.BLOCK_SENTINEL).all()


def test_unused_block_table_entries_are_never_read():
    rng = np.random.default_rng(6)
    case = testing.DecodeCase(4, 2, 8, 64, 16, True, 50, True, max_model_len=48)
    inp = testing.decode_inputs(rng, case)
    assert (inp.block_tables == cache.BLOCK_SENTINEL).any()
    reference.fp8_paged_mqa_logits(*inp.args())  # a read sentinel would raise
    bt = inp.block_tables.copy()
    need = -(-np.minimum(inp.context_lens, 48) // 16)
    b = int(np.argmax(need))
    bt[b, need[b] - 1] = cache.BLOCK_SENTINEL
    args = list(inp.args())
    args[4] = bt
    with pytest.raises(ValueError, match=r"block_tables: entry \[%d, %d\]" % (b, need[b] - 1)):
        reference.fp8_paged_mqa_logits(*args)


def test_preshuffle_needs_multiples_of_16():
    with pytest.raises(ValueError, match="preshuffle.*block_size % 16"):
        cache.shuffle_cache(np.zeros((2, 8, 68), np.uint8), 64)
    k, s = cache.quantize_keys(np.ones((2, 24), np.float32))
    with pytest.raises(ValueError, match="preshuffle"):
        cache.write_cache(np.zeros((2, 16, 28), np.uint8), k, s, [0, 1], preshuffle=True)


def _write_case(N=6, D=32, bs=16, nb=2):
    k, s = cache.quantize_keys(np.random.default_rng(5).standard_normal((N, D)).astype(np.float32))
    return cache.new_cache(nb, bs, D), k, s, np.arange(N)


@pytest.mark.parametrize("change,exc,match", [
    (lambda c, k, s, sl: (c, k[0], s, sl), ValueError, r"k_fp8: expected a 2-D array \[N, D\], got shape \(32,\)"),
    (lambda c, k, s, sl: (c, k.astype(np.float32), s, sl), TypeError, "k_fp8: expected dtype float8_e4m3fn"),
    (lambda c, k, s, sl: (c, k, s[:-1], sl), ValueError, r"scale: expected shape \[N=6\]"),
    (lambda c, k, s, sl: (c, k, s[:, None], sl), ValueError, r"scale: expected shape \[N=6\]"),
    (lambda c, k, s, sl: (c, k, s.astype(np.float64), sl), TypeError, "scale: expected dtype float32"),
    (lambda c, k, s, sl: (c, k, s, sl[:-1]), ValueError, r"slot_mapping: expected shape \[N=6\]"),
    (lambda c, k, s, sl: (c, k, s, sl.astype(np.float32)), TypeError, "slot_mapping: expected integers"),
    (lambda c, k, s, sl: (c, k[:, :16], s, sl), ValueError,
     r"cache: last dim is 36, but k_fp8's D \(last dim\) = 16 needs D \+ 4 = 20 \(cache holds keys of D = 32\)"),
    (lambda c, k, s, sl: (c[0], k, s, sl), ValueError, r"cache: expected \[num_blocks, block_size, D \+ 4\]"),
    (lambda c, k, s, sl: (c, k, s, np.array([0, 1, -2, 3, 4, 5])), ValueError,
     "slot_mapping: slot -2 is below -1"),
    (lambda c, k, s, sl: (c, k, s, np.array([0, 1, 2, 3, 4, 2**64 - 1], np.uint64)), ValueError,
     r"slot_mapping: slot 18446744073709551615 is past the cache's 2 x 16 slots"),
    (lambda c, k, s, sl: (c, k, s, sl + 27), ValueError, r"slot_mapping: slot 32 is past the cache's 2 x 16 slots"),
    (lambda c, k, s, sl: (c.tolist(), k, s, sl), TypeError, "cache: expected a numpy array, got list"),
])
def test_write_cache_refuses_bad_input_by_name_and_writes_nothing(change, exc, match):
    c, k, s, sl = change(*_write_case())
    before = np.array(c, copy=True) if isinstance(c, np.ndarray) else None
    with pytest.raises(exc, match=match):
        cache.write_cache(c, k, s, sl)
    if before is not None:
        np.testing.assert_array_equal(c, before)


def test_write_cache_refuses_a_read_only_cache():
    c, k, s, sl = _write_case()
    c.flags.writeable = False
    with pytest.raises(ValueError, match="cache: the array is read-only"):
        cache.write_cache(c, k, s, sl)


def test_cache_readers_name_the_cache_and_D_when_they_disagree():
    c = cache.new_cache(2, 16, 32)
    for call in (lambda: cache.gather_blocks(c, [0], 64), lambda: cache.gather_keys(c, [0], 4, 64),
                 lambda: cache.shuffle_cache(c, 64)):
        with pytest.raises(ValueError, match=r"cache: last dim is 36, but D = 64 needs D \+ 4 = 68 "
                                             r"\(cache holds keys of D = 32\)"):
            call()


def test_packed_windows_are_each_requests_causal_triangle_over_its_own_keys():
    q, L = np.array([3, 0, 5, 2]), np.array([10, 4, 5, 7])
    ks, ke = cache.packed_prefill_windows(q, L, num_rows=12)
    rows = []
    for r in range(4):
        k0 = int(L[:r].sum())
        rows += [(k0, k0 + L[r] - q[r] + j + 1) for j in range(q[r])]  # row j is token L - q + j of the request
    rows += [(0, 0)] * 2  # the padding rows: empty
    assert list(zip(ks.tolist(), ke.tolist())) == rows and ks.dtype == ke.dtype == np.int32


def test_packed_windows_give_each_request_its_own_logits():
    """Three requests gathered back to back with the packed windows: each request's rows equal its own
    single-request causal logits, and keys of the other requests are -inf."""
    rng = np.random.default_rng(5)
    q, L, H, D = np.array([4, 7, 3]), np.array([9, 7, 20]), 8, 32
    keys = [testing.random_fp8(rng, (n, D)) for n in L]
    scales = [rng.uniform(0.5, 2, n).astype(np.float32) for n in L]
    Q = testing.random_fp8(rng, (int(q.sum()), H, D))
    w = rng.standard_normal((int(q.sum()), H)).astype(np.float32)
    ks, ke = cache.packed_prefill_windows(q, L)
    packed = reference.fp8_mqa_logits(Q, np.concatenate(keys), np.concatenate(scales), w, ks, ke)
    row0, key0 = np.cumsum(q) - q, np.cumsum(L) - L
    for r in range(3):
        j = np.arange(q[r])
        own = reference.fp8_mqa_logits(Q[row0[r]:row0[r] + q[r]], keys[r], scales[r], w[row0[r]:row0[r] + q[r]],
                                       np.zeros(q[r], np.int32), (L[r] - q[r] + j + 1).astype(np.int32))
        got = packed[row0[r]:row0[r] + q[r]]
        np.testing.assert_allclose(got[:, key0[r]:key0[r] + L[r]], own, rtol=1e-6, atol=1e-6)  # float32 sums
        assert np.isneginf(np.delete(got, np.s_[key0[r]:key0[r] + L[r]], axis=1)).all()


@pytest.mark.parametrize("args,match", [
    (([1, -1], [3, 3]), "query_lens: must be >= 0, got -1 for request 1"),
    (([1, 1], [3, -3]), "context_lens: must be >= 0"),
    (([4], [3]), "query_lens: request 0 has 4 query rows but context_lens 3"),
    (([1, 2], [3]), "one entry per request each"),
    (([[1]], [[3]]), "query_lens: expected a 1-D integer array"),
    (([1.0], [3]), "query_lens: expected a 1-D integer array"),
    (([1, 2], [3, 3], 2), "num_rows: 2 is fewer than the 3 query rows"),
    (([1, 1], [2 ** 31 - 1, 1]), "past int32"),
])
def test_packed_windows_refuse_bad_lengths_by_name(args, match):
    with pytest.raises(ValueError, match=match):
        cache.packed_prefill_windows(*args)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_quantize_takes_half_precision_keys_as_their_exact_float32_values(dtype):
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    k = (np.random.default_rng(6).standard_normal((20, 64)) * 30).astype(dt)
    a, s = cache.quantize_keys(k)
    b, t = cache.quantize_keys(k.astype(np.float32))
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    np.testing.assert_array_equal(s, t)
