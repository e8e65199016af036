"""tools/measure/cut_model.py: the fused prefill top-k's floors and cut on the CPU (its floor_of and floors_cut are
checked against the floors launch itself by the emulated case fused_floors_cut_by_the_samples_count_and_spread)."""
import numpy as np

from hipindexer import testing
from tools.measure import cut_model as model


def _monte_carlo(keys, step, r, pool, sigmas, draws, rng):
    """expected_overflow_parts' chance, drawn: the samples at the floor split multinomially, the keys there normal
    about r step, the regions cut by the shares."""
    p = np.asarray(keys, np.float64) / sum(keys)
    s = rng.multinomial(r, p, draws)
    kt = r * step * (1 + rng.standard_normal(draws) / np.sqrt(r))
    sh = model.shares(s, sigmas)
    ends = np.floor(np.cumsum(sh, 1) * (pool / sh.sum(1, keepdims=True)))
    caps = np.diff(np.concatenate([np.zeros((draws, 1)), ends[:, :-1], np.full((draws, 1), pool)], 1), axis=1)
    return float((kt[:, None] * p > caps).any(1).mean())


def test_the_expected_overflow_is_the_chance_a_draw_of_the_sample_gives():
    rng = np.random.default_rng(5)
    for keys, sigmas in (([900, 2600], 0), ([900, 2600], 4), ([1750, 1750], 0)):
        want = _monte_carlo(keys, 16, 224, 4400, sigmas, 400_000, rng)
        got = model.expected_overflow_parts(keys, 16, 224, 4400, sigmas)
        assert abs(got - want) <= 0.1 * want + 2e-4, (keys, sigmas, got, want)


def test_the_square_root_in_the_shares_makes_a_short_sample_rarer():
    # a part holding a quarter of a row's keys at the floor, two parts of 3,072 entries, one key in 32 and in 16
    for step, r in ((32, 112), (16, 224)):
        plain = model.expected_overflow_parts([900, 2700], step, r, 6144, 0)
        spread = model.expected_overflow_parts([900, 2700], step, r, 6144, 4)
        assert 0 < spread < plain / 3, (step, plain, spread)


def test_the_replay_counts_no_overflow_on_random_rows_and_one_where_regions_are_too_small():
    rng = np.random.default_rng(7)
    M, N, H = 256, 8192, 64
    ks, ke = testing.prefill_windows("causal", M, N)
    inp = testing.PrefillInputs(testing.random_fp8(rng, (M, H, 128)), testing.random_fp8(rng, (N, 128)),
                                np.abs(rng.standard_normal(N, dtype=np.float32)) + np.float32(0.5),
                                rng.standard_normal((M, H), dtype=np.float32), ks, ke)
    res = model.model_case(inp, M, N, H, 256, [2], [4], expected=False)
    assert res["parts"] == 3 and res["step 2 sigmas 4"]["part"] == 0 and res["step 2 sigmas 4"]["whole"] == 0
    # regions of 100 entries: a row keeps about 448 keys at the floor, more than its three parts hold
    small = model.model_case(inp, M, N, H, 256, [2], [4], region=100, expected=False)["step 2 sigmas 4"]
    assert small["part"] == M and small["whole"] == 0, small


def test_the_expected_overflow_of_three_parts_is_the_chance_a_draw_gives():
    rng = np.random.default_rng(6)
    for keys, sigmas in (([600, 1200, 1800], 0), ([600, 1200, 1800], 4)):
        want = _monte_carlo(keys, 16, 224, 4400, sigmas, 400_000, rng)
        got = model.expected_overflow_parts(keys, 16, 224, 4400, sigmas)
        assert abs(got - want) <= 0.1 * want + 2e-4, (keys, sigmas, got, want)


def test_a_third_part_of_the_same_room_a_part_makes_an_overflow_rarer():
    # even rows at one key in 32: two parts of 3,072 entries against three of 2,736 (the regions of (4096, 32768))
    two = model.expected_overflow_parts([1792, 1792], 32, 112, 6144, 4)
    three = model.expected_overflow_parts([1195, 1195, 1194], 32, 112, 3 * 2736, 4)
    assert 0 < three < two / 10, (two, three)
