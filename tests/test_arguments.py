"""Bad input raises a clear error naming the argument."""
import numpy as np
import pytest

from hipindexer import reference, testing


@pytest.fixture
def prefill():
    return testing.prefill_inputs(np.random.default_rng(0), 8, 40, 4, 64, "causal")


@pytest.fixture
def decode():
    return testing.decode_inputs(np.random.default_rng(0), testing.DecodeCase(2, 2, 4, 64, 16, False, 40))


def _prefill_with(inp, **kw):
    args = dict(q=inp.q, k=inp.k, kv_scale=inp.kv_scale, weights=inp.weights,
                cu_seqlen_ks=inp.cu_seqlen_ks, cu_seqlen_ke=inp.cu_seqlen_ke)
    args.update(kw)
    return reference.fp8_mqa_logits(**args)


@pytest.mark.parametrize("arg,value,exc,match", [
    ("q", lambda i: i.q.astype(np.float32), TypeError, "q: expected dtype float8_e4m3fn"),
    ("q", lambda i: i.q.view(np.uint8), TypeError, "q: expected dtype float8_e4m3fn"),
    ("k", lambda i: i.k.astype(np.float16), TypeError, "k: expected dtype float8_e4m3fn"),
    ("kv_scale", lambda i: i.kv_scale.astype(np.float64), TypeError, "kv_scale: expected dtype float32"),
    ("weights", lambda i: i.weights.astype(np.float16), TypeError, "weights: expected dtype float32"),
    ("cu_seqlen_ks", lambda i: i.cu_seqlen_ks.astype(np.int64), TypeError, "cu_seqlen_ks: expected dtype int32"),
    ("q", lambda i: i.q[0], ValueError, r"q: expected a 3-D array"),
    ("k", lambda i: i.k[None], ValueError, r"k: expected a 2-D array"),
    ("k", lambda i: i.k[:, :32], ValueError, r"k: D \(last dim\) is 32, but q gives 64"),
    ("weights", lambda i: i.weights[:, :3], ValueError, r"weights: H \(last dim\) is 3, but q gives 4"),
    ("weights", lambda i: i.weights[:5], ValueError, r"weights: rows is 5, but q gives 8"),
    ("kv_scale", lambda i: i.kv_scale[:-1], ValueError, r"kv_scale: length is 39, but k gives 40"),
    ("cu_seqlen_ke", lambda i: i.cu_seqlen_ke[:3], ValueError, r"cu_seqlen_ke: length is 3, but q gives 8"),
    ("q", lambda i: None, TypeError, "q: expected"),
])
def test_prefill_bad_input_names_the_argument(prefill, arg, value, exc, match):
    with pytest.raises(exc, match=match):
        _prefill_with(prefill, **{arg: value(prefill)})


def test_prefill_out_of_the_wrong_shape_is_refused(prefill):
    with pytest.raises(ValueError, match=r"out: expected a float32 numpy array of shape \(8, 40\)"):
        _prefill_with(prefill, out=np.zeros((8, 41), np.float32))


def _decode_with(inp, **kw):
    args = dict(q=inp.q, kv_cache=inp.kv_cache, weights=inp.weights, context_lens=inp.context_lens,
                block_tables=inp.block_tables, max_model_len=inp.max_model_len)
    args.update(kw)
    return reference.fp8_paged_mqa_logits(**args)


@pytest.mark.parametrize("kw,exc,match", [
    (lambda i: dict(q=i.q.astype(np.float32)), TypeError, "q: expected dtype float8_e4m3fn"),
    (lambda i: dict(q=i.q[0]), ValueError, r"q: expected a 4-D array"),
    (lambda i: dict(q=np.zeros((2, 9, 4, 64), i.q.dtype), weights=np.zeros((18, 4), np.float32)),
     ValueError, r"q: next_n \(dim 1\) must be in 1..8"),
    (lambda i: dict(kv_cache=i.kv_cache.view(np.int8)), TypeError, "kv_cache: expected dtype uint8"),
    (lambda i: dict(kv_cache=i.kv_cache[..., :-1]), ValueError, r"kv_cache: last dim is 67, but q's D = 64 needs"),
    (lambda i: dict(kv_cache=i.kv_cache[0]), ValueError, r"kv_cache: expected \[num_blocks, block_size, D \+ 4\]"),
    (lambda i: dict(weights=i.weights[:, :2]), ValueError, r"weights: H \(last dim\) is 2, but q gives 4"),
    (lambda i: dict(weights=i.weights[:3]), ValueError, r"weights: rows is 3, but q's B \* next_n gives 4"),
    (lambda i: dict(context_lens=i.context_lens.astype(np.int64)), TypeError, "context_lens: expected dtype int32"),
    (lambda i: dict(context_lens=np.array([-1, 3], np.int32)), ValueError, "context_lens: must be >= 0"),
    (lambda i: dict(block_tables=i.block_tables[:, :1]), ValueError,
     r"block_tables: sequence \d has context \d+ .* needs \d+ blocks of 16, but block_tables has only 1 columns"),
    (lambda i: dict(block_tables=i.block_tables[0]), ValueError, "block_tables: expected a 2-D array"),
    (lambda i: dict(next_n_lens=np.array([3, 0], np.int32)), ValueError,
     r"next_n_lens: each entry must be in 0..next_n=2, got 3 for sequence 0"),
    (lambda i: dict(next_n_lens=np.array([-1, 0], np.int32)), ValueError, r"next_n_lens: .* got -1"),
    (lambda i: dict(next_n_lens=np.array([1], np.int32)), ValueError, r"next_n_lens: length is 1, but q gives 2"),
    (lambda i: dict(context_lens=np.zeros((2, 3), np.int32)), ValueError,
     r"context_lens: next_n \(dim 1\) is 3, but q gives 2"),
    (lambda i: dict(context_lens=np.array([[5, 6], [7, -2]], np.int32)), ValueError,
     r"context_lens: must be >= 0, got -2 for row \[1, 1\]"),
    (lambda i: dict(context_lens=np.zeros((2, 2, 1), np.int32)), ValueError, r"context_lens: expected a 1-D array"),
    (lambda i: dict(context_lens=np.full((2, 2), 5, np.int32), next_n_lens=np.array([1, 1], np.int32)), ValueError,
     r"next_n_lens: not taken with \[B, next_n\] context_lens"),
    (lambda i: dict(max_model_len=0), ValueError, "max_model_len: expected an int >= 1"),
    (lambda i: dict(split_kv=0), ValueError, "split_kv: expected None or an int >= 1"),
])
def test_decode_bad_input_names_the_argument(decode, kw, exc, match):
    with pytest.raises(exc, match=match):
        _decode_with(decode, **kw(decode))


def test_preshuffle_with_an_incompatible_block_size_is_refused():
    inp = testing.decode_inputs(np.random.default_rng(1), testing.DecodeCase(2, 1, 4, 64, 8, False, 20))
    with pytest.raises(ValueError, match=r"preshuffle: .* block_size % 16 == 0 .* got block_size=8"):
        _decode_with(inp, preshuffle=True)
