"""Property tests over window edges and context lengths (reproducible: derandomized)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hipindexer import cache, reference, testing
from hipindexer.gate import gate

I32 = st.integers(-2**31, 2**31 - 1)
EDGE = st.one_of(I32, st.integers(-3, 40), st.sampled_from([-2**31, 2**31 - 1, 0, -1]))
PROPS = settings(deadline=None, derandomize=True, max_examples=60)


@PROPS
@given(st.integers(1, 6), st.integers(1, 33), st.data(), st.booleans())
def test_prefill_windows_anywhere_in_int32(M, N, data, clean):
    ks = np.array(data.draw(st.lists(EDGE, min_size=M, max_size=M)), np.int32)
    ke = np.array(data.draw(st.lists(EDGE, min_size=M, max_size=M)), np.int32)
    rng = np.random.default_rng(M * 100 + N)
    inp = testing.prefill_inputs(rng, M, N, 3, 16)
    args = (inp.q, inp.k, inp.kv_scale, inp.weights, ks, ke)
    valid = reference.valid_mask(ks, ke, N)
    n = np.arange(N)
    np.testing.assert_array_equal(valid, (n >= ks[:, None].astype(np.int64)) & (n < ke[:, None].astype(np.int64)))
    g = gate(reference.fp8_mqa_logits(*args, clean_logits=clean),
             testing.naive_mqa_logits(*args, clean_logits=clean), valid, clean,
             magnitude=reference.fp8_mqa_logits(*args, accumulate=np.float64, magnitude=True), accumulation="fp32")
    assert g, g.message


@PROPS
@given(st.lists(st.integers(0, 70), min_size=1, max_size=4), st.integers(1, 4), st.integers(1, 80),
       st.sampled_from([1, 16, 5]), st.booleans(), st.data())
def test_decode_context_lengths(ctx, next_n, mml, bs, ragged, data):
    B = len(ctx)
    ctx = np.array(ctx, np.int32)
    nn = (np.array(data.draw(st.lists(st.integers(0, next_n), min_size=B, max_size=B)), np.int32)
          if ragged else None)
    rng = np.random.default_rng(int(ctx.sum()) + next_n)
    D, H = 16, 2
    tables, nb = cache.make_block_tables(ctx, bs, rng, max_model_len=mml,
                                         max_blocks=-(-min(int(ctx.max()), mml) // bs) + 1)
    kv = cache.new_cache(max(nb, 1), bs, D)
    for b in range(B):
        L = int(min(ctx[b], mml))
        k, s = cache.quantize_keys(rng.standard_normal((L, D)).astype(np.float32))
        n = np.arange(L)
        cache.write_cache(kv, k, s, tables[b, n // bs].astype(np.int64) * bs + n % bs)
    q = testing.random_fp8(rng, (B, next_n, H, D))
    w = rng.standard_normal((B * next_n, H)).astype(np.float32)
    args = (q, kv, w, ctx, tables, mml, nn)
    valid = reference.decode_valid_mask(ctx, next_n, mml, nn)
    live = np.full(B, next_n) if nn is None else nn
    for b in range(B):
        for j in range(next_n):
            want = np.arange(mml) <= ctx[b] - live[b] + j if j < live[b] else np.zeros(mml, bool)
            np.testing.assert_array_equal(valid[b * next_n + j], want)
    g = gate(reference.fp8_paged_mqa_logits(*args), testing.naive_paged_mqa_logits(*args), valid, True,
             magnitude=reference.fp8_paged_mqa_logits(*args, accumulate=np.float64, magnitude=True),
             accumulation="fp32")
    assert g, g.message
