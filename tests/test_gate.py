"""The gate catches each way a kernel output can be wrong."""
import numpy as np
import pytest

from hipindexer import gate as G
from hipindexer import reference, testing


def test_calc_diff_definition():
    x = np.array([1.0, 2.0, -np.inf])
    assert G.calc_diff(x, x) == 0.0
    assert G.calc_diff(np.zeros(3), np.zeros(3)) == 0.0
    np.testing.assert_allclose(G.calc_diff([1.0, 0.0], [0.0, 1.0]), 1.0)
    np.testing.assert_allclose(G.calc_diff([1.0], [1.1]), 1 - 2 * 1.1 / (1 + 1.21))


@pytest.fixture
def case():
    inp = testing.prefill_inputs(np.random.default_rng(0), 16, 80, 4, 64, "misaligned")
    ref = testing.naive_mqa_logits(*inp.args(), clean_logits=True)
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, 80)
    return inp, ref, valid


def test_gate_passes_the_reference(case):
    inp, ref, valid = case
    assert G.gate(reference.fp8_mqa_logits(*inp.args()), ref, valid, True)


def test_gate_catches_a_mask_error(case):
    inp, ref, valid = case
    out = ref.astype(np.float32)
    r, c = np.argwhere(valid)[5]
    out[r, c] = -np.inf
    g = G.gate(out, ref, valid, True)
    assert not g and f"row {r}, col {c}" in g.message and "-inf mask" in g.message


def test_gate_catches_one_bad_row_that_the_whole_output_hides():
    inp = testing.prefill_inputs(np.random.default_rng(1), 64, 80, 4, 64, "misaligned")
    ref = testing.naive_mqa_logits(*inp.args())
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, 80)
    energy = np.where(valid, ref, 0.0) ** 2
    r = int(np.argmin(np.where(valid.any(1), energy.sum(1), np.inf)))
    out = ref.astype(np.float32)
    out[r, valid[r]] *= 1.03
    assert G.calc_diff(np.where(valid, out, 0), np.where(valid, ref, 0)) < 1e-5
    g = G.gate(out, ref, valid, True)
    assert not g and f"row {r}:" in g.message


def test_gate_catches_nan_and_writes_outside_the_window_when_not_cleaning(case):
    inp, ref, valid = case
    raw = np.where(valid, ref, np.nan).astype(np.float32)
    assert G.gate(raw, ref, valid, False)
    out = raw.copy()
    r, c = np.argwhere(~valid)[0]
    out[r, c] = -np.inf
    g = G.gate(out, ref, valid, False)
    assert not g and "outside the window" in g.message
    out = raw.copy()
    r, c = np.argwhere(valid)[0]
    out[r, c] = np.nan
    g = G.gate(out, ref, valid, False)
    assert not g and "NaN inside" in g.message


def test_gate_catches_nan_when_cleaning(case):
    inp, ref, valid = case
    out = ref.astype(np.float32)
    out[0, 0] = np.nan
    assert not G.gate(out, ref, valid, True)


def test_gate_names_global_rows_of_a_sample(case):
    inp, ref, valid = case
    rows = np.array([3, 9])
    out = ref[rows].astype(np.float32)
    out[1, np.argmax(valid[9])] = -np.inf
    g = G.gate(out, ref[rows], valid[rows], True, rows=rows)
    assert not g and "row 9" in g.message
