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


def _magnitude(inp):
    return reference.fp8_mqa_logits(*inp.args(), accumulate=np.float64, magnitude=True)


@pytest.fixture
def case():
    inp = testing.prefill_inputs(np.random.default_rng(0), 16, 80, 4, 64, "misaligned")
    ref = testing.naive_mqa_logits(*inp.args(), clean_logits=True)
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, 80)
    return inp, ref, valid


def gate(out, ref, valid, clean, inp=None, accumulation="fp32", **kw):
    A = _magnitude(inp) if inp is not None else np.abs(np.nan_to_num(ref, neginf=0.0, nan=0.0)) * 4
    return G.gate(out, ref, valid, clean, magnitude=A, accumulation=accumulation, **kw)


def test_gate_passes_the_reference(case):
    inp, ref, valid = case
    g = gate(reference.fp8_mqa_logits(*inp.args()), ref, valid, True, inp)
    assert g and 0 < g.err_over_a < 2.0 ** -20 and g.exceptions == 0


def test_gate_catches_a_mask_error(case):
    inp, ref, valid = case
    out = ref.astype(np.float32)
    r, c = np.argwhere(valid)[5]
    out[r, c] = -np.inf
    g = gate(out, ref, valid, True)
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
    g = gate(out, ref, valid, True, inp)
    assert not g and f"row {r}, col" in g.message and "|out - ref|" in g.message


def test_gate_catches_nan_and_writes_outside_the_window_when_not_cleaning(case):
    inp, ref, valid = case
    raw = np.where(valid, ref, np.nan).astype(np.float32)
    assert gate(raw, ref, valid, False)
    out = raw.copy()
    r, c = np.argwhere(~valid)[0]
    out[r, c] = -np.inf
    g = gate(out, ref, valid, False)
    assert not g and "outside the window" in g.message
    out = raw.copy()
    r, c = np.argwhere(valid)[0]
    out[r, c] = np.nan
    g = gate(out, ref, valid, False)
    assert not g and "NaN inside" in g.message


def test_gate_catches_nan_when_cleaning(case):
    inp, ref, valid = case
    out = ref.astype(np.float32)
    out[0, 0] = np.nan
    assert not gate(out, ref, valid, True)


def test_gate_names_global_rows_of_a_sample(case):
    inp, ref, valid = case
    rows = np.array([3, 9])
    out = ref[rows].astype(np.float32)
    out[1, np.argmax(valid[9])] = -np.inf
    g = gate(out, ref[rows], valid[rows], True, rows=rows)
    assert not g and "row 9" in g.message


def test_one_wrong_element_in_a_row_of_65536_keys_fails_the_per_element_bound():
    # A 1% error on one logit moves its row's calc_diff by about 1e-4 / (2 * 65536): invisible per row,
    # far outside eps * A.
    inp = testing.prefill_inputs(np.random.default_rng(5), 2, 65536, 2, 16, "causal")
    ref = reference.fp8_mqa_logits(*inp.args(), accumulate=np.float64)
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, 65536)
    out = ref.astype(np.float32)
    c = int(np.argmax(np.where(valid[1], np.abs(ref[1]), 0)))
    out[1, c] *= 1.01
    assert G.row_calc_diff(np.where(valid, out, 0), np.where(valid, ref, 0)).max() < 1e-7
    for accumulation in ("fp32", "fp8_tc"):
        g = gate(out, ref, valid, True, inp, accumulation=accumulation)
        assert not g and f"row 1, col {c}: |out - ref|" in g.message, g.message
    assert gate(ref.astype(np.float32), ref, valid, True, inp)


def _ill_conditioned(err, small=1e-3):
    """Row 0 well conditioned; row 1's logits are ~1/small times smaller than what they are made of (A = 1)."""
    ref = np.array([[1.0, -2.0, 3.0, 0.5], [small, -small, 2 * small, small]])
    A = np.ones_like(ref) * [[4.0], [1.0]]
    out = (ref + np.array([0, 0, 0, 0, err, -err, err, -err]).reshape(2, 4)).astype(np.float32)
    return out, ref, np.ones_like(ref, bool), A


def test_tensor_core_rows_whose_heads_cancel_are_excused_and_counted():
    out, ref, valid, A = _ill_conditioned(1e-4)   # inside 2^-12 * A, row calc_diff ~5e-3
    g = G.gate(out, ref, valid, True, magnitude=A, accumulation="fp8_tc")
    assert g and g.exceptions == 1 and g.worst_exception > 1e-3 and g.diff < 1e-12, g
    assert "1 ill-conditioned rows excused" in g.message
    g = G.gate(out, ref, valid, True, magnitude=A * [[1.0], [0.01]], accumulation="fp8_tc")
    assert not g and "|out - ref|" in g.message   # the per-element bound still holds on excused rows


def test_fp32_kernels_get_no_ill_conditioned_row_exception():
    out, ref, valid, A = _ill_conditioned(6e-7, 1e-4)   # inside 2^-20 * A, row calc_diff ~2e-5
    g = G.gate(out, ref, valid, True, magnitude=A, accumulation="fp32")
    assert not g and "row 1: calc_diff" in g.message and "no ill-conditioned-row exception" in g.message
    assert G.gate(out, ref, valid, True, magnitude=A, accumulation="fp8_tc").exceptions == 1


def test_a_tensor_core_row_that_misses_with_a_small_condition_fails(monkeypatch):
    # Inside eps = 2^-12 a row can only miss 1e-5 where its condition exceeds about 18, so the condition
    # rule is exercised with a looser class.
    monkeypatch.setitem(G.ACCUMULATION, "fp8_tc", 2.0 ** -6)
    ref = np.array([[1e-3, 2e-3]])
    out = np.array([[1.1e-3, 2e-3]], np.float32)
    g = G.gate(out, ref, np.ones_like(ref, bool), True, magnitude=np.full_like(ref, 1e-2), accumulation="fp8_tc")
    assert not g and "condition 6.3 < 16" in g.message, g.message


def test_an_unknown_accumulation_class_is_refused(case):
    inp, ref, valid = case
    with pytest.raises(ValueError, match="accumulation: expected one of"):
        G.gate(ref, ref, valid, True, magnitude=np.abs(ref), accumulation="bf16")
