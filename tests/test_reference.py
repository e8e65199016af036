"""The numpy reference against the per-element float64 formulations (hipindexer.testing)."""
import itertools
import zlib

import numpy as np
import pytest

from hipindexer import reference, testing
from hipindexer.gate import gate

PREFILL_SHAPES = [(16, 80), (7, 33), (1, 1)]


@pytest.mark.parametrize("mode", testing.PREFILL_MODES)
@pytest.mark.parametrize("H,D", list(itertools.product([1, 32, 64], [64, 128])))
def test_prefill_reference_matches_per_element_float64(mode, H, D):
    rng = np.random.default_rng([H, D, testing.PREFILL_MODES.index(mode)])
    ran = 0
    for M, N in PREFILL_SHAPES:
        try:
            inp = testing.prefill_inputs(rng, M, N, H, D, mode)
        except testing.NotApplicable:
            assert mode in ("cp", "multi_req")
            continue
        valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, N)
        A = reference.fp8_mqa_logits(*inp.args(), accumulate=np.float64, magnitude=True)
        for clean in (True, False):
            want = testing.naive_mqa_logits(*inp.args(), clean_logits=clean)
            got = reference.fp8_mqa_logits(*inp.args(), clean_logits=clean)
            assert got.dtype == np.float32 and got.shape == (M, N)
            g = gate(got, want, valid, clean, magnitude=A, accumulation="fp32")
            assert g, f"{mode} M={M} N={N} clean={clean}: {g.message}"
            assert g.diff < 1e-6
            got64 = reference.fp8_mqa_logits(*inp.args(), clean_logits=clean, accumulate=np.float64)
            assert got64.dtype == np.float64
            g64 = gate(got64, want, valid, clean, magnitude=A, accumulation="fp32")
            assert g64.diff < 1e-12 and g64.err_over_a < 2.0 ** -40
            ran += 1
    assert ran >= 2


def test_prefill_clean_false_writes_only_valid_positions_of_out():
    rng = np.random.default_rng(1)
    inp = testing.prefill_inputs(rng, 16, 80, 4, 64, "misaligned")
    out = np.full((16, 80), 7.0, np.float32)
    reference.fp8_mqa_logits(*inp.args(), clean_logits=False, out=out)
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, 80)
    assert (out[~valid] == 7.0).all()
    assert (out[valid] != 7.0).mean() > 0.5  # relu-weighted sums are rarely exactly 7


def test_prefill_row_chunks_do_not_change_the_result():
    rng = np.random.default_rng(2)
    inp = testing.prefill_inputs(rng, 40, 200, 8, 64, "multi_req")
    whole = reference.fp8_mqa_logits(*inp.args())
    tiny = reference.fp8_mqa_logits(*inp.args(), budget_bytes=1)  # one row per chunk
    np.testing.assert_array_equal(np.isinf(whole), np.isinf(tiny))
    np.testing.assert_allclose(whole, tiny, rtol=1e-5, atol=1e-4)


def test_prefill_request_boundaries_fall_off_tile_multiples():
    ks, ke = testing.prefill_windows("multi_req", 1024, 1000)
    starts = np.nonzero(np.diff(ks))[0] + 1
    assert list(starts) == [3, 37, 2 * 1024 // 3 + 5]
    assert all(s % 16 for s in starts)


def test_cp_is_not_applicable_when_n_is_not_a_multiple_of_m():
    with pytest.raises(testing.NotApplicable, match="cp"):
        testing.prefill_windows("cp", 7, 33)
    with pytest.raises(testing.NotApplicable, match="cp"):
        testing.prefill_windows("cp", 5, 10)  # M odd


DECODE_CASES = [
    testing.DecodeCase(B, nn, H, D, bs, shuf, mean, ragged, mml, zeros)
    for (B, nn, H, D, bs, shuf, mean, ragged, mml, zeros) in [
        (3, 1, 4, 64, 1, False, 20, False, None, 0),
        (3, 2, 32, 64, 16, False, 40, False, None, 0),
        (3, 2, 32, 64, 16, True, 40, True, None, 0),
        (2, 4, 8, 128, 64, False, 90, False, None, 1),
        (2, 4, 8, 128, 64, True, 90, True, None, 0),
        (4, 8, 4, 64, 16, True, 5, False, None, 1),     # contexts shorter than next_n
        (4, 8, 4, 64, 1, False, 5, True, None, 0),
        (3, 2, 64, 64, 16, True, 60, True, 40, 0),      # contexts past max_model_len
        (3, 1, 1, 64, 64, False, 100, False, 70, 0),
        (2, 3, 4, 64, 7, False, 30, True, None, 0),     # a block size no kernel specialises
    ]] + [
    # [B, next_n] context_lens: each row its own count, ragged rows in a random order
    testing.DecodeCase(3, 2, 32, 64, 16, True, 40, True, lens_per_row=True),
    testing.DecodeCase(4, 8, 4, 64, 1, False, 5, True, zero_contexts=1, lens_per_row=True),
    testing.DecodeCase(3, 4, 8, 64, 16, False, 60, True, max_model_len=40, lens_per_row=True),
]


@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: c.name)
def test_decode_reference_matches_per_element_float64(case):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    inp = testing.decode_inputs(rng, case)
    valid = reference.decode_valid_mask(inp.context_lens, case.next_n, inp.max_model_len, inp.next_n_lens)
    for clean in (True, False):
        want = testing.naive_paged_mqa_logits(*inp.args(), clean_logits=clean)
        got = reference.fp8_paged_mqa_logits(*inp.args(), clean_logits=clean)
        assert got.shape == (case.B * case.next_n, inp.max_model_len)
        A = reference.fp8_paged_mqa_logits(*inp.args(), accumulate=np.float64, magnitude=True)
        g = gate(got, want, valid, clean, magnitude=A, accumulation="fp32")
        assert g, f"{case.name} clean={clean}: {g.message}"
    assert valid.any()


@pytest.mark.parametrize("ragged", [False, True])
def test_decode_per_row_lengths_give_the_same_logits_as_the_lengths_they_spell(ragged):
    rng = np.random.default_rng(11)
    inp = testing.decode_inputs(rng, testing.DecodeCase(4, 3, 8, 64, 16, False, 50, ragged, zero_contexts=1))
    rows = reference.per_row_lengths(inp.context_lens, 3, inp.next_n_lens)
    assert rows.shape == (4, 3) and rows.dtype == np.int32 and (rows >= 0).all()
    args = list(inp.args())
    one = reference.fp8_paged_mqa_logits(*args)
    args[3], args[6] = rows, None
    np.testing.assert_array_equal(reference.fp8_paged_mqa_logits(*args), one)
    np.testing.assert_array_equal(reference.decode_bounds(rows, 3, inp.max_model_len),
                                  reference.decode_bounds(inp.context_lens, 3, inp.max_model_len, inp.next_n_lens))


def test_decode_per_row_bounds_are_each_rows_own_clipped_to_the_output():
    lens = np.array([[7, 0, 3], [12, 2, 9]], np.int32)
    np.testing.assert_array_equal(reference.decode_bounds(lens, 3, 10).reshape(2, 3), [[7, 0, 3], [10, 2, 9]])


def test_decode_vllm_view_and_plain_view_agree():
    rng = np.random.default_rng(3)
    inp = testing.decode_inputs(rng, testing.DecodeCase(3, 2, 8, 64, 16, True, 50, True))
    plain = reference.fp8_paged_mqa_logits(*inp.args())
    args = list(inp.args())
    args[1] = inp.kv_cache.reshape(inp.kv_cache.shape[0], 16, 1, 68)
    np.testing.assert_array_equal(reference.fp8_paged_mqa_logits(*args), plain)


def test_decode_bound_uses_each_sequences_own_live_count():
    ctx = np.array([10, 10, 0, 3], np.int32)
    live = np.array([4, 1, 2, 0], np.int32)
    bound = reference.decode_bounds(ctx, 4, 100, live).reshape(4, 4)
    np.testing.assert_array_equal(bound[0], [7, 8, 9, 10])
    np.testing.assert_array_equal(bound[1], [10, 0, 0, 0])
    np.testing.assert_array_equal(bound[2], [0, 0, 0, 0])   # context 0
    np.testing.assert_array_equal(bound[3], [0, 0, 0, 0])   # no live rows
    np.testing.assert_array_equal(reference.decode_bounds(ctx, 4, 8, live).reshape(4, 4)[0], [7, 8, 8, 8])


def test_decode_key_chunks_do_not_change_the_result():
    rng = np.random.default_rng(4)
    inp = testing.decode_inputs(rng, testing.DecodeCase(2, 3, 8, 64, 16, False, 200, True))
    whole = reference.fp8_paged_mqa_logits(*inp.args())
    tiny = reference.fp8_paged_mqa_logits(*inp.args(), budget_bytes=1)
    np.testing.assert_array_equal(np.isinf(whole), np.isinf(tiny))
    np.testing.assert_allclose(whole, tiny, rtol=1e-5, atol=1e-4)
