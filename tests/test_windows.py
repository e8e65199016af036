"""The six prefill window modes, spot-checked against their definitions."""
import numpy as np
import pytest

from hipindexer import testing


def test_causal_row_sees_up_to_its_own_position():
    ks, ke = testing.prefill_windows("causal", 4, 10)
    assert list(ks) == [0] * 4 and list(ke) == [7, 8, 9, 10]


def test_cp_two_halves():
    ks, ke = testing.prefill_windows("cp", 8, 64)  # c = 8, i0 = 2, half = 4
    assert list(ke[:4]) == [8, 9, 10, 11] and list(ke[4:]) == [52, 53, 54, 55]
    assert (ks == 0).all()


def test_misaligned_windows():
    ks, ke = testing.prefill_windows("misaligned", 3, 300)
    assert list(ks) == [100, 3, 56] and list(ke) == [200, 103, 156]


def test_empty_rows_cover_negative_and_reversed_ends():
    ks, ke = testing.prefill_windows("empty", 9, 50)
    assert list(ke[::3]) == [-1, -4, -7]
    np.testing.assert_array_equal(ks[1::3], [min(100, 50)] * 3)
    np.testing.assert_array_equal(ke[1::3], [0] * 3)
    np.testing.assert_array_equal(ke[2::3], [3, 6, 9])


def test_past_end_rows():
    ks, ke = testing.prefill_windows("past_end", 4, 10)
    assert list(ks) == [27, 0, 27, 0] and list(ke) == [74, 2, 74, 4]


def test_multi_req_triangles_end_on_the_whole_range():
    M, N = 64, 300
    ks, ke = testing.prefill_windows("multi_req", M, N)
    edges = [0, 3, 37, 47, 64]
    K = N // 4
    for r, (a, e) in enumerate(zip(edges[:-1], edges[1:])):
        assert (ks[a:e] == r * K).all()
        assert ke[e - 1] == (r + 1) * K
        assert (np.diff(ke[a:e]) <= 1).all()


def test_multi_req_not_applicable_without_keys_per_request():
    with pytest.raises(testing.NotApplicable, match="multi_req"):
        testing.prefill_windows("multi_req", 64, 3)


def test_generators_never_emit_fp8_nan_codes():
    rng = np.random.default_rng(0)
    x = testing.random_fp8(rng, (100000,), scale=300.0).view(np.uint8)
    assert not np.isin(x, [0x7F, 0xFF]).any()
    inp = testing.decode_inputs(rng, testing.DecodeCase(3, 2, 4, 64, 16, True, 50))
    assert not np.isin(inp.q.view(np.uint8), [0x7F, 0xFF]).any()


def test_decode_context_lengths_stay_within_thirty_percent():
    ctx = testing.context_lengths(np.random.default_rng(0), 1000, 1000)
    assert ctx.min() >= 700 and ctx.max() <= 1300 and ctx.std() > 100
