"""Decode test inputs: context spreads, live rows, the fast random pool, and sub-batches that keep the
reference's rows."""
import numpy as np
import pytest

from hipindexer import reference, testing


@pytest.mark.parametrize("spread", testing.SPREADS)
def test_context_spreads(spread):
    ctx = testing.context_lengths(np.random.default_rng(0), 200, 4096, spread)
    if spread == "equal":
        assert (ctx == 4096).all()
    elif spread == "one_long":
        assert sorted(ctx)[-1] == 4096 and (np.sort(ctx)[:-1] == 128).all()
    else:
        assert ctx.min() >= round(0.7 * 4096) and ctx.max() <= round(1.3 * 4096) and len(set(ctx)) > 50


def test_live_rows_from_live_min_and_forced_dead_sequences():
    case = testing.DecodeCase(40, 6, 4, 64, 16, ragged=True, live_min=2, zero_live=5, mean_context=30)
    nl = testing.decode_inputs(np.random.default_rng(1), case).next_n_lens
    assert (nl == 0).sum() == 5 and nl[nl > 0].min() >= 2 and nl.max() <= 6


def test_the_random_pool_holds_no_nan_code_and_positive_scales():
    case = testing.DecodeCase(3, 2, 4, 64, 16, True, mean_context=500, key_codes=True)
    inp = testing.decode_inputs(np.random.default_rng(2), case)
    raw = inp.kv_cache.reshape(inp.kv_cache.shape[0], -1)
    keys, scales = raw[:, :16 * 64], raw[:, 16 * 64:].copy().view(np.float32)
    assert not ((keys & 0x7F) == 0x7F).any() and (scales > 0).all() and inp.keys == []
    assert np.isfinite(reference.fp8_paged_mqa_logits(*inp.args())[reference.decode_valid_mask(
        inp.context_lens, 2, inp.max_model_len, inp.next_n_lens)]).all()


def test_a_sub_batch_gives_the_same_rows_of_the_reference():
    inp = testing.decode_inputs(np.random.default_rng(3), testing.DecodeCase(5, 3, 4, 64, 16, False, 80, True))
    seqs = np.array([1, 4])
    full = reference.fp8_paged_mqa_logits(*inp.args())
    sub = reference.fp8_paged_mqa_logits(*testing.decode_subset(inp, seqs).args())
    np.testing.assert_array_equal(sub, full[[3, 4, 5, 12, 13, 14]])
