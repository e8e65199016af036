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


# ------------------------------------------------------------------ the top-k gate

TOP_K = 8


@pytest.fixture
def topk_case():
    """Prefill rows with V >= 4 * TOP_K keys, rows with 0 < V < TOP_K and rows with none ("empty" mode),
    the reference's top-k with values, and the float64 logits and A the gate judges them by."""
    inp = testing.prefill_inputs(np.random.default_rng(7), 48, 120, 4, 64, "empty")
    idx, val = reference.fp8_mqa_topk(*inp.args(), TOP_K, return_values=True)
    ref = reference.fp8_mqa_logits(*inp.args(), accumulate=np.float64)
    A = _magnitude(inp)
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, 120)
    V = valid.sum(axis=1)
    assert (V >= 4 * TOP_K).any() and ((V > 0) & (V < TOP_K)).any() and (V == 0).any()
    return inp, idx, val, ref, A, valid


def _row(valid, want):
    V = valid.sum(axis=1)
    return int(np.argmax({"long": V >= 4 * TOP_K, "short": (V > 0) & (V < TOP_K)}[want]))


def topk_gate(case, idx, val, accumulation="fp32", **kw):
    inp = case[0]
    return G.gate_prefill_topk(idx, val, inp, TOP_K, accumulation, **kw)


@pytest.mark.parametrize("accumulation", ["fp32", "fp8_tc"])
def test_topk_gate_passes_the_reference_with_its_exact_sets(topk_case, accumulation):
    inp, idx, val, *_ = topk_case
    for sorted_, values in ((True, val), (False, val), (True, None), (False, None)):
        g = topk_gate(topk_case, idx, values, accumulation, sorted=sorted_)
        assert g and g.recall == 1.0 and g.worst_recall == 1.0 and g.swaps == 0, g
        assert "0 swaps" in g.message


def test_the_references_order_holds_where_float64_logits_round_to_one_float32():
    rng = np.random.default_rng(8)
    ref = rng.standard_normal((4, 20000))
    A, valid = np.abs(ref) + 1.0, np.ones(ref.shape, bool)
    idx, val = reference.topk_logits(ref, 2048)
    assert ((val[:, 1:] == val[:, :-1]) & (ref[np.arange(4)[:, None], idx[:, 1:]] !=
                                           ref[np.arange(4)[:, None], idx[:, :-1]])).any()
    g = G.gate_topk(idx, val, ref, A, valid, "fp32", sorted=True, top_k=2048)
    assert g and g.swaps == 0, g


def test_topk_gate_catches_a_swapped_index(topk_case):
    # A returned key replaced by the row's worst key (its value the reference's: only the selection is wrong).
    inp, idx, val, ref, A, valid = topk_case
    r = _row(valid, "long")
    worst = int(np.argmin(np.where(valid[r], ref[r], np.inf)))
    idx, val = idx.copy(), val.copy()
    dropped = int(idx[r, 3])
    idx[r, 3], val[r, 3] = worst, ref[r, worst]
    for values in (val, None):
        g = topk_gate(topk_case, idx, values)
        assert not g and f"row {r}: left-out key {dropped} beats returned key {worst} (slot 3)" in g.message, \
            g.message


def test_topk_gate_catches_a_left_out_key_that_beats_a_returned_one(topk_case):
    # The best key dropped for the next one below the cut: the least wrong set there is, still outside the bound.
    inp, idx, val, ref, A, valid = topk_case
    r = _row(valid, "long")
    order = np.argsort(-np.where(valid[r], ref[r], -np.inf), kind="stable")
    best, next_ = int(order[0]), int(order[TOP_K])
    assert ref[r, best] - 2.0 ** -12 * A[r, best] > ref[r, next_] + 2.0 ** -12 * A[r, next_]
    idx, val = idx.copy(), val.copy()
    idx[r] = np.append(idx[r, 1:], next_)
    val[r] = np.append(val[r, 1:], ref[r, next_])
    for accumulation in ("fp32", "fp8_tc"):
        g = topk_gate(topk_case, idx, val, accumulation, sorted=True)
        assert not g and f"row {r}: left-out key {best} beats returned key {next_}" in g.message, g.message
        assert "by more than the bound" in g.message


def test_topk_gate_catches_a_duplicate(topk_case, monkeypatch):
    inp, idx, val, ref, A, valid = topk_case
    r = _row(valid, "long")
    idx, val = idx.copy(), val.copy()
    idx[r, 5], val[r, 5] = idx[r, 2], val[r, 2]
    monkeypatch.setattr(G, "CHUNK_ELEMENTS", 1)   # one row a chunk: messages still name the output's rows
    g = topk_gate(topk_case, idx, val)
    assert not g and f"row {r}, slot 5: index {idx[r, 2]} returned twice (slots 2 and 5)" in g.message, g.message


def test_topk_gate_catches_a_missing_minus_one(topk_case):
    inp, idx, val, ref, A, valid = topk_case
    r = _row(valid, "short")
    V = int(valid[r].sum())
    outside = int(np.argmin(valid[r]))              # a column outside the row's window
    for planted, says in ((outside, f"row {r}, slot {V}: index {outside} where the padding -1 belongs"),
                          (120, f"row {r}, slot {V}: index 120 is neither -1 nor a column in [0, 120)"),
                          (-3, f"row {r}, slot {V}: index -3 is neither -1 nor a column")):
        bad = idx.copy()
        bad[r, V] = planted
        g = topk_gate(topk_case, bad, None)
        assert not g and says in g.message, g.message
    # and the other way round: -1 where the row still has keys to give
    bad = idx.copy()
    bad[r, V - 1] = -1
    g = topk_gate(topk_case, bad, None)
    assert not g and f"row {r}, slot {V - 1}: -1, but the row has {V} valid keys" in g.message, g.message


def test_topk_gate_catches_an_index_outside_its_rows_window(topk_case):
    inp, idx, val, ref, A, valid = topk_case
    r = _row(valid, "long")
    outside = int(np.argmin(valid[r]))
    bad = idx.copy()
    bad[r, 0] = outside
    g = topk_gate(topk_case, bad, None)
    assert not g and f"row {r}, slot 0: index {outside} is not a valid key of the row" in g.message, g.message


def test_topk_gate_catches_a_value_off_by_more_than_the_bound(topk_case):
    inp, idx, val, ref, A, valid = topk_case
    r = _row(valid, "long")
    n = int(idx[r, 4])
    for accumulation, eps in (("fp32", 2.0 ** -20), ("fp8_tc", 2.0 ** -12)):
        bad = val.copy()
        bad[r, 4] = ref[r, n] - 1.5 * eps * A[r, n]
        g = topk_gate(topk_case, idx, bad, accumulation)
        assert not g and f"row {r}, slot 4 (index {n}): |value - ref|" in g.message, g.message
        bad[r, 4] = ref[r, n] - 0.5 * eps * A[r, n]
        assert topk_gate(topk_case, idx, bad, accumulation)
    bad = val.copy()
    bad[r, 4] = np.nan
    assert not topk_gate(topk_case, idx, bad)
    s = _row(valid, "short")
    bad = val.copy()
    bad[s, TOP_K - 1] = 0.0
    g = topk_gate(topk_case, idx, bad)
    assert not g and f"row {s}, slot {TOP_K - 1}: padding slot holds value 0.0, not -inf" in g.message


def test_topk_gate_catches_a_wrong_order_when_sorted(topk_case):
    inp, idx, val, ref, A, valid = topk_case
    r = _row(valid, "long")
    idx, val = idx.copy(), val.copy()
    idx[r, [2, 3]], val[r, [2, 3]] = idx[r, [3, 2]], val[r, [3, 2]]
    assert topk_gate(topk_case, idx, val)                      # the same set, unsorted: fine
    g = topk_gate(topk_case, idx, val, sorted=True)
    assert not g and f"row {r}, slots 2 and 3: out of order" in g.message, g.message
    g = topk_gate(topk_case, idx, None, sorted=True)           # no values: judged against the bound
    assert not g and f"row {r}, slots 2 and 3: out of order" in g.message and "bound" in g.message


def test_topk_gate_sorted_ties_go_by_index_and_exact_tie_swaps_are_counted():
    ref = np.array([[2.0, 1.0, 2.0, 1.0, 0.5]])
    A, valid = np.full_like(ref, 4.0), np.ones_like(ref, bool)
    ok = G.gate_topk([[0, 2, 1]], [[2.0, 2.0, 1.0]], ref, A, valid, "fp32", sorted=True)
    assert ok and ok.swaps == 0 and ok.recall == 1.0
    g = G.gate_topk([[2, 0, 1]], [[2.0, 2.0, 1.0]], ref, A, valid, "fp32", sorted=True)
    assert not g and "slots 0 and 1: out of order" in g.message and "ties by lower index" in g.message
    tie = G.gate_topk([[0, 2, 3]], [[2.0, 2.0, 1.0]], ref, A, valid, "fp32", sorted=True)
    assert tie and tie.swaps == 1 and tie.tie_swaps == 1 and tie.recall == pytest.approx(2 / 3)


def test_topk_gate_checks_shapes_and_top_k(topk_case):
    inp, idx, val, *_ = topk_case
    assert "top_k is 8" in G.gate_prefill_topk(idx[:, :7], None, inp, TOP_K, "fp32").message
    assert "values: shape" in topk_gate(topk_case, idx, val[:, :7]).message
    assert "expected integers" in topk_gate(topk_case, idx.astype(np.float32), None).message
    with pytest.raises(ValueError, match="accumulation"):
        topk_gate(topk_case, idx, val, "bf16")


def _perturbed_topk(ref, A, valid, eps, rng, scale=0.9):
    """Values within scale * eps * A of ref, and the top-k those values select, returned in float32: what a
    kernel of that class may return (float32 rounding adds at most 2^-24 * |ref| <= 2^-24 * A)."""
    noise = rng.uniform(-scale, scale, ref.shape) * eps * np.where(valid, A, 0.0)
    noisy = np.where(valid, np.where(valid, ref, 0.0) + noise, -np.inf)
    return reference.topk_logits(noisy, TOP_K)


def test_a_kernel_within_the_bound_passes_and_its_swaps_are_counted():
    # Logits on a grid finer than the bound, so that near-ties at the cut are everywhere.
    rng = np.random.default_rng(3)
    R, N, eps = 64, 300, 2.0 ** -12
    ref = rng.integers(0, 40, (R, N)) * 1e-4 + rng.normal(0, 1e-6, (R, N))
    A = rng.uniform(0.9, 1.1, (R, N))
    valid = np.arange(N)[None, :] < rng.integers(0, N, R)[:, None]
    idx, vals = _perturbed_topk(ref, A, valid, eps, rng)
    exact, _ = reference.topk_logits(np.where(valid, ref, -np.inf), TOP_K)
    swaps = sum(len(set(a[a >= 0]) - set(b[b >= 0])) for a, b in zip(idx, exact))
    assert swaps > 0
    for values in (vals, None):
        g = G.gate_topk(idx, values, ref, A, valid, "fp8_tc", top_k=TOP_K)
        assert g and g.swaps == swaps and g.recall < 1.0 and f"{swaps} swaps within the bound" in g.message, g
    assert G.gate_topk(idx, vals, ref, A, valid, "fp8_tc", sorted=True)
    assert not G.gate_topk(idx, vals, ref, A, valid, "fp32")   # outside the fp32 class's bound


def test_a_kernel_within_the_bound_passes_on_real_logits_with_tied_keys():
    # Every key drawn from a pool of six, so logits tie exactly and the noise picks among them.
    rng = np.random.default_rng(4)
    inp = testing.prefill_inputs(rng, 24, 90, 4, 64, "misaligned")
    pick = rng.integers(0, 6, 90)
    inp.k, inp.kv_scale = inp.k[pick], inp.kv_scale[pick]
    ref = reference.fp8_mqa_logits(*inp.args(), accumulate=np.float64)
    A = _magnitude(inp)
    valid = reference.valid_mask(inp.cu_seqlen_ks, inp.cu_seqlen_ke, 90)
    for accumulation, eps in (("fp32", 2.0 ** -20), ("fp8_tc", 2.0 ** -12)):
        idx, vals = _perturbed_topk(ref, A, valid, eps, rng)
        g = G.gate_prefill_topk(idx, vals, inp, TOP_K, accumulation, sorted=True)
        assert g and g.swaps > 0 and g.tie_swaps > 0, g


def test_topk_gate_reads_relative_indices_from_each_rows_window_start():
    inp = testing.prefill_inputs(np.random.default_rng(6), 40, 120, 4, 64, "multi_req")
    rel, val = reference.fp8_mqa_topk(*inp.args(), TOP_K, relative=True, return_values=True)
    assert G.gate_prefill_topk(rel, val, inp, TOP_K, "fp32", relative=True)
    g = G.gate_prefill_topk(rel, val, inp, TOP_K, "fp32")   # read as columns: the later requests' are wrong
    r = int(np.argmax(inp.cu_seqlen_ks > 0))
    assert not g and f"row {r}, slot 0: index {rel[r, 0]} is not a valid key" in g.message, g.message


def test_paged_topk_gate_passes_the_reference_and_catches_a_wrong_slot_and_a_dead_row():
    case = testing.DecodeCase(4, 2, 8, 64, 16, True, 60, ragged=True, live_min=1, zero_live=1)
    inp = testing.decode_inputs(np.random.default_rng(5), case)
    idx, val, slots = reference.fp8_paged_mqa_topk(*inp.args()[:6], TOP_K, *inp.args()[6:],
                                                   return_values=True, return_slots=True)
    g = G.gate_paged_topk(idx, val, inp, TOP_K, "fp32", sorted=True, slots=slots)
    assert g and g.swaps == 0 and g.recall == 1.0, g
    r = int(np.argmax(idx[:, 0] >= 0))
    bad = slots.copy()
    bad[r, 1] += 1
    g = G.gate_paged_topk(idx, val, inp, TOP_K, "fp32", slots=bad)
    assert not g and f"row {r}, slot 1: cache slot {bad[r, 1]} for index {idx[r, 1]}" in g.message, g.message
    dead = int(np.argmax(idx[:, 0] < 0))
    bad = idx.copy()
    bad[dead, 0] = 0
    g = G.gate_paged_topk(bad, None, inp, TOP_K, "fp32")
    assert not g and f"row {dead}, slot 0: index 0 where the padding -1 belongs (the row has only 0" in g.message
