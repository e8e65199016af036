"""tools/support/fp8_tc_model.py: the accumulation model behind the sm_90a kernel's one failing row."""
import numpy as np

from tools.support import fp8_tc_model as model


def test_model_is_exact_when_it_keeps_every_bit():
    rng = np.random.default_rng(1)
    q = rng.integers(-8, 9, (3, 4, 128)).astype(np.float64) / 4
    k = rng.integers(-8, 9, (5, 128)).astype(np.float64) / 8
    np.testing.assert_array_equal(model.tc_dots(q, k, bits=60), np.einsum("mhd,nd->mhn", q, k))


def test_model_truncates_toward_zero_at_few_bits():
    q = np.full((1, 1, 32), 1.0)
    k = np.concatenate([[1.0], np.full(31, 2.0 ** -12)])
    # 31 terms of 2^-12 under a leading 1 keep nothing with 8 bits below it, all of it with 12
    assert model.tc_dots(q, k[None, :], bits=8)[0, 0, 0] == 1.0
    assert model.tc_dots(q, k[None, :], bits=12)[0, 0, 0] == 1.0 + 31 * 2.0 ** -12


def test_fold_model_matches_the_relu_sum_when_the_dots_are_exact():
    # Exact accumulation: only the four-term e4m3 split of sum_h w_h q_h is left, about 2^-16 of its size.
    rng = np.random.default_rng(2)
    q = rng.integers(-8, 9, (3, 64, 128)).astype(np.float64) / 4
    k = rng.integers(-8, 9, (5, 128)).astype(np.float64) / 8
    w = rng.standard_normal((3, 64))
    x = np.einsum("mhd,nd->mhn", q, k)
    exact = (np.maximum(x, 0) * w[:, :, None]).sum(axis=1)
    scale = (np.abs(x) * np.abs(w)[:, :, None]).sum(axis=1)
    got = model.fold_logits(q, k, w, bits=60)
    assert np.all(np.abs(got - exact) <= 1e-4 * scale)


def test_fold_split_terms_are_e4m3_and_shrink_by_sixteen():
    rng = np.random.default_rng(3)
    q = rng.integers(-8, 9, (2, 64, 128)).astype(np.float64)
    w = rng.standard_normal((2, 64))
    t, s = model.fold_terms(q, w)
    assert t.shape == (4, 2, 128) and np.all(np.abs(t) <= 448)
    np.testing.assert_array_equal(s[1:], s[:-1] / 16)
    qe = np.einsum("mh,mhd->md", w.astype(np.float32), q.astype(np.float32)).astype(np.float64)
    assert np.abs((t * s[:, :, None]).sum(axis=0) - qe).max() <= 2.0 ** -15 * np.abs(qe).max()
