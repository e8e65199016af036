"""The top-k reference against a brute-force selection: every row's valid keys sorted in python by
(-logit, index) over the per-element float64 logits of hipindexer.testing.

The inputs keep every logit exact in float64 (power-of-two key scales, weights in {+-1/2, +-1, +-2}, keys
drawn from a small pool), so the brute force and the reference agree bit for bit and the pool plants equal
logits at different indices in every row: ties decide the selection, and the lower index must win.
"""
import zlib

import numpy as np
import pytest

from hipindexer import cache, reference, testing

WEIGHTS = np.array([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], np.float32)


def brute_force(logits, valid, top_k):
    """(indices [R, top_k], values [R, top_k] float32) by sorting each row's valid columns in python: the set
    by (-float64 logit, index), its order by (-float32 value returned, index)."""
    R = logits.shape[0]
    idx = np.full((R, top_k), -1, np.int64)
    val = np.full((R, top_k), -np.inf, np.float32)
    for r in range(R):
        cols = sorted((n for n in range(logits.shape[1]) if valid[r, n]), key=lambda n: (-logits[r, n], n))
        cols = sorted(cols[:top_k], key=lambda n: (-np.float32(logits[r, n]), n))
        idx[r, :len(cols)] = cols
        val[r, :len(cols)] = logits[r, cols]
    return idx, val


def exact_prefill(seed, M, N, mode, pool=5, H=4, D=32):
    """Prefill inputs whose logits are exact in float64, with key rows drawn from `pool` distinct ones."""
    rng = np.random.default_rng(seed)
    inp = testing.prefill_inputs(rng, M, N, H, D, mode, power_of_two_scales=True)
    pick = rng.integers(0, pool, N)
    inp.k, inp.kv_scale = inp.k[pick], inp.kv_scale[pick]
    inp.weights = rng.choice(WEIGHTS, (M, H))
    return inp


def exact_decode(case, seed, pool=5):
    """decode_inputs' batch with each sequence's keys redrawn from `pool` distinct rows (power-of-two
    scales) and written through its block table, and weights in WEIGHTS: logits exact in float64."""
    rng = np.random.default_rng(seed)
    inp = testing.decode_inputs(rng, case)
    base_k, base_s = cache.quantize_keys(rng.standard_normal((pool, case.D), dtype=np.float32) * 3, True)
    kv = inp.kv_cache.reshape(inp.kv_cache.shape[0], case.block_size, case.D + 4)
    ctx = np.asarray(inp.context_lens)
    longest = ctx.max(axis=1) if ctx.ndim == 2 else ctx
    inp.keys, inp.scales = [], []
    for b in range(case.B):
        L = int(min(longest[b], inp.max_model_len))
        pick = rng.integers(0, pool, L)
        n = np.arange(L)
        slots = inp.block_tables[b, n // case.block_size].astype(np.int64) * case.block_size + n % case.block_size
        cache.write_cache(kv, base_k[pick], base_s[pick], slots, preshuffle=case.preshuffle)
        inp.keys.append(base_k[pick])
        inp.scales.append(base_s[pick])
    inp.weights = rng.choice(WEIGHTS, inp.weights.shape)
    return inp


PREFILL = [(16, 80, "causal"), (12, 60, "empty"), (16, 80, "misaligned"), (9, 40, "past_end"),
           (40, 120, "multi_req")]


@pytest.mark.parametrize("M,N,mode", PREFILL)
@pytest.mark.parametrize("top_k", [1, 3, 8, 50, 130])
def test_prefill_topk_is_the_brute_force_selection(M, N, mode, top_k):
    inp = exact_prefill([M, N, top_k], M, N, mode)
    ref = testing.naive_mqa_logits(*inp.args())
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, N)
    want_idx, want_val = brute_force(ref, valid, top_k)
    idx, val = reference.fp8_mqa_topk(*inp.args(), top_k, return_values=True)
    assert idx.dtype == np.int32 and val.dtype == np.float32 and idx.shape == val.shape == (M, top_k)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(val, want_val)
    plain = reference.fp8_mqa_topk(*inp.args(), top_k, sorted=True)
    assert isinstance(plain, np.ndarray)
    np.testing.assert_array_equal(plain, want_idx)


def test_the_prefill_cases_hold_long_short_and_empty_rows_and_ties_at_the_cut():
    """What the parametrised cases above exercise, asserted so that a change of generator cannot lose it."""
    seen = {"V >= 4k": False, "0 < V < k": False, "V = 0": False, "tie at the cut": False}
    for M, N, mode in PREFILL:
        inp = exact_prefill([M, N, 8], M, N, mode)
        ref = testing.naive_mqa_logits(*inp.args())
        V = np.isfinite(ref).sum(axis=1)
        seen["V >= 4k"] |= bool((V >= 32).any())
        seen["0 < V < k"] |= bool(((V > 0) & (V < 8)).any())
        seen["V = 0"] |= bool((V == 0).any())
        for r in np.nonzero(V > 8)[0]:
            row = np.sort(ref[r][np.isfinite(ref[r])])[::-1]
            seen["tie at the cut"] |= bool(row[7] == row[8])   # the 8th and 9th best are equal
    assert all(seen.values()), seen


def test_ties_go_to_the_lower_index():
    logits = np.array([[1.0, 5.0, 5.0, 5.0, 2.0, 5.0], [3.0, 3.0, 3.0, 3.0, 3.0, 3.0]])
    idx, val = reference.topk_logits(logits, 3)
    assert idx.tolist() == [[1, 2, 3], [0, 1, 2]] and val.tolist() == [[5.0] * 3, [3.0] * 3]


def test_the_order_follows_the_float32_values_returned():
    # Two float64 logits that round to one float32 value: the set is chosen in float64, the order (equal
    # values by lower index) by what the caller sees.
    logits = np.array([[1.0, 1.0 + 1e-12, 0.0, 1.0 - 1e-3]])
    idx, val = reference.topk_logits(logits, 2)
    assert idx.tolist() == [[0, 1]] and val.tolist() == [[1.0, 1.0]]
    idx, _ = reference.topk_logits(logits[:, [1, 0, 2, 3]], 1)   # the set still by float64: column 0 is larger
    assert idx.tolist() == [[0]]


DECODE = [
    testing.DecodeCase(3, 2, 4, 32, 16, False, 100, ragged=True, live_min=1, zero_live=1),
    testing.DecodeCase(4, 3, 8, 32, 16, True, 40, ragged=True, live_min=1, zero_contexts=1),
    testing.DecodeCase(3, 1, 2, 32, 1, False, 30),
    testing.DecodeCase(4, 8, 2, 32, 1, False, 6, ragged=True, live_min=2),   # contexts shorter than next_n
    testing.DecodeCase(2, 4, 4, 32, 7, False, 50, max_model_len=33),
    testing.DecodeCase(3, 2, 4, 32, 16, False, 50, ragged=True, lens_per_row=True),
    testing.DecodeCase(2, 2, 4, 32, 16, False, 40, vllm_view=True),
]


def test_the_decode_cases_hold_long_short_and_dead_rows():
    V = np.concatenate([reference.decode_bounds(inp.context_lens, c.next_n, inp.max_model_len, inp.next_n_lens)
                        for c in DECODE for inp in [exact_decode(c, 0)]])
    assert (V >= 64).any() and ((V > 0) & (V < 16)).any() and (V == 0).any()


@pytest.mark.parametrize("case", DECODE, ids=lambda c: c.name)
@pytest.mark.parametrize("top_k", [1, 5, 16, 90])
def test_decode_topk_is_the_brute_force_selection(case, top_k):
    inp = exact_decode(case, zlib.crc32(f"{case.name}/{top_k}".encode()))
    ref = testing.naive_paged_mqa_logits(*inp.args())
    valid = reference.decode_valid_mask(inp.context_lens, case.next_n, inp.max_model_len, inp.next_n_lens)
    assert valid.any()
    want_idx, want_val = brute_force(ref, valid, top_k)
    idx, val, slots = reference.fp8_paged_mqa_topk(*inp.args()[:6], top_k, *inp.args()[6:], return_values=True,
                                                   return_slots=True)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(val, want_val)
    # Each slot names the cache token that holds key n of its sequence (read back through the layout).
    bs = case.block_size
    for r, s in zip(*np.nonzero(idx >= 0)):
        b, n = r // case.next_n, int(idx[r, s])
        assert slots[r, s] == inp.block_tables[b, n // bs] * bs + n % bs
        key, scale = cache.gather_keys(inp.kv_cache, [slots[r, s] // bs], bs, case.D, case.preshuffle)
        assert key[slots[r, s] % bs].tobytes() == inp.keys[b][n].tobytes()
        assert scale[slots[r, s] % bs] == inp.scales[b][n]
    assert (slots[idx < 0] == -1).all() and slots.dtype == np.int32
    only_slots = reference.fp8_paged_mqa_topk(*inp.args()[:6], top_k, *inp.args()[6:], return_slots=True)
    assert isinstance(only_slots, tuple) and len(only_slots) == 2
    np.testing.assert_array_equal(only_slots[1], slots)


def test_relative_indices_count_from_the_rows_window_start():
    inp = exact_prefill(7, 40, 120, "multi_req")
    absolute = reference.fp8_mqa_topk(*inp.args(), 16)
    rel, val = reference.fp8_mqa_topk(*inp.args(), 16, relative=True, return_values=True)
    ks = inp.cu_seqlen_ks.astype(np.int64)[:, None]
    np.testing.assert_array_equal(rel, np.where(absolute >= 0, absolute - ks, -1))
    assert (rel >= 0).sum() == (absolute >= 0).sum() and (ks > 0).any()
    width = (inp.cu_seqlen_ke - inp.cu_seqlen_ks)[:, None]
    assert ((rel < width) | (rel == -1)).all()   # inside the row's own window


def test_row_chunks_do_not_change_the_selection(monkeypatch):
    inp = exact_prefill(3, 24, 90, "misaligned")
    dec = exact_decode(testing.DecodeCase(5, 2, 4, 32, 16, False, 60, ragged=True), 4)
    whole = reference.fp8_mqa_topk(*inp.args(), 10), reference.fp8_paged_mqa_topk(*dec.args()[:6], 10)
    monkeypatch.setattr(reference, "TOPK_CHUNK_ELEMENTS", 1)   # one row (one sequence) at a time
    np.testing.assert_array_equal(reference.fp8_mqa_topk(*inp.args(), 10), whole[0])
    np.testing.assert_array_equal(reference.fp8_paged_mqa_topk(*dec.args()[:6], 10), whole[1])


def test_topk_logits_takes_the_mask_from_minus_inf_or_from_lengths():
    logits = np.array([[0.0, 4.0, -np.inf, 3.0], [9.0, 8.0, 7.0, np.nan]], np.float32)
    idx, val = reference.topk_logits(logits, 3, lengths=np.array([4, 2]))
    # Row 0 counts its -inf as a (last) valid key; row 1 ends at column 2, so the NaN past it is not read.
    assert idx.tolist() == [[1, 3, 0], [0, 1, -1]]
    assert val.tolist() == [[4.0, 3.0, 0.0], [9.0, 8.0, -np.inf]]
    idx, _ = reference.topk_logits(logits[:1], 5)
    assert idx.tolist() == [[1, 3, 0, -1, -1]]
    with pytest.raises(ValueError, match="NaN at row 1, col 3"):
        reference.topk_logits(logits, 3)
    with pytest.raises(ValueError, match="lengths: must be >= 0"):
        reference.topk_logits(logits, 3, lengths=np.array([1, -1]))
    with pytest.raises(ValueError, match="lengths: expected"):
        reference.topk_logits(logits, 3, lengths=np.array([1]))


@pytest.mark.parametrize("bad", [0, -1, 4097, 2.0, True, "8", None])
def test_top_k_must_be_an_int_in_1_to_4096(bad):
    inp = exact_prefill(0, 4, 8, "causal")
    dec = exact_decode(testing.DecodeCase(1, 1, 2, 32, 16, False, 20), 0)
    for call in (lambda: reference.fp8_mqa_topk(*inp.args(), bad),
                 lambda: reference.fp8_paged_mqa_topk(*dec.args()[:6], bad),
                 lambda: reference.topk_logits(np.zeros((1, 4)), bad)):
        with pytest.raises(ValueError, match=r"top_k: expected an int in 1\.\.4096"):
            call()


def test_top_k_4096_on_a_short_row_pads_with_minus_one():
    inp = exact_prefill(1, 3, 10, "causal")
    idx, val = reference.fp8_mqa_topk(*inp.args(), 4096, return_values=True)
    assert idx.shape == (3, 4096) and ((idx >= 0).sum(axis=1) == [8, 9, 10]).all()
    assert (val[idx < 0] == -np.inf).all() and np.isfinite(val[idx >= 0]).all()
