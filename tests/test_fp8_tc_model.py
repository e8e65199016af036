"""tools/fp8_tc_model.py: the accumulation model behind the sm_90a kernel's one failing row."""
from pathlib import Path

import numpy as np

from by_path import load

ROOT = Path(__file__).resolve().parents[1]
model = load("hx_fp8_tc_model", ROOT / "tools" / "fp8_tc_model.py")


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
