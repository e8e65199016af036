"""The prefill planner and the chunk planner: pure Python, no device."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipindexer.plan import TARGETS, plan_prefill, plan_prefill_chunks
from hipindexer.plan.prefill import GENERIC

H200, MI355X = TARGETS["sm_90a"], TARGETS["gfx950"]


@settings(deadline=None, derandomize=True, max_examples=200)
@given(st.integers(1, 20000), st.integers(1, 300000), st.sampled_from([H200, MI355X]),
       st.one_of(st.none(), st.integers(1, 64)), st.data())
def test_plan_covers_every_row_once_and_never_over_splits(M, N, target, rpb, data):
    tiles = -(-N // GENERIC.tile)
    split = data.draw(st.one_of(st.none(), st.integers(1, tiles)))
    p = plan_prefill(M, N, 16, 64, target, rows_per_block=rpb, split=split)
    assert p.grid[0] * p.rows_per_block >= M > (p.grid[0] - 1) * p.rows_per_block
    assert 1 <= p.split <= tiles and p.grid[1] == p.split
    if split is not None:
        assert p.split == split
    if rpb is not None:
        assert p.rows_per_block == rpb


def test_small_m_is_filled_by_the_key_split():
    p = plan_prefill(128, 32768, 16, 128, H200)
    assert p.grid[0] * p.grid[1] >= 2 * H200.num_cus
    assert plan_prefill(8192, 8192, 16, 128, H200).split == 1
    fast = plan_prefill(128, 32768, 64, 128, H200, kernel="mqa_logits_wgmma")  # persistent: units, not blocks
    assert 0.95 * H200.num_cus <= fast.units <= H200.num_cus and fast.grid == (fast.units, 1, 1)


@pytest.mark.parametrize("M,N,H,split", [(128, 32768, 64, 4), (128, 32768, 32, 8), (8192, 8192, 64, 1),
                                         (8192, 8192, 32, 1)])
def test_the_persistent_split_takes_few_long_units_over_a_full_last_round(M, N, H, split):
    # Every unit pays a start, so a last round left part empty beats many short units; docs/benchmarks.md
    # ("Planner timings") has the device times behind these splits.
    assert plan_prefill(M, N, H, 128, H200, kernel="mqa_logits_wgmma").split == split


def test_a_persistent_kernel_refuses_more_work_units_than_its_32_bit_index():
    p = plan_prefill(1 << 24, 1 << 20, 64, 128, H200, kernel="mqa_logits_wgmma", split=255)
    assert p.units < (1 << 30)
    with pytest.raises(ValueError, match=r"split: .* counts units in 32 bits"):
        plan_prefill(1 << 24, 1 << 20, 64, 128, H200, kernel="mqa_logits_wgmma", split=256)


def test_causal_long_rows_start_first_past_2048_keys():
    assert plan_prefill(64, 4096, 32, 128, MI355X).reverse_rows
    assert not plan_prefill(64, 1024, 32, 128, MI355X).reverse_rows


@pytest.mark.parametrize("kw,match", [
    (dict(rows_per_block=0), r"rows_per_block: expected an int in \[1, 64\]"),
    (dict(rows_per_block=65), r"rows_per_block"),
    (dict(rows_per_block=2.0), r"rows_per_block"),
    (dict(split=0), r"split: expected an int in \[1, 4\]"),
    (dict(split=5), r"split: expected an int in \[1, 4\]"),
    (dict(reverse_rows=1), r"reverse_rows: expected a bool"),
    (dict(kernel="nope"), r"kernel: 'nope' is not a prefill kernel for sm_90a"),
])
def test_an_invalid_forced_tunable_raises_naming_it(kw, match):
    with pytest.raises(ValueError, match=match):
        plan_prefill(100, 1000, 16, 128, H200, **kw)  # the generic kernel (H=16)


def test_d_must_be_a_multiple_of_16():
    with pytest.raises(ValueError, match="D must be a multiple of 16"):
        plan_prefill(4, 4, 2, 24, H200)


def test_any_h_and_d_falls_back_to_the_generic_kernel():
    for H, D in [(1, 16), (16, 64), (128, 256), (7, 48)]:
        assert plan_prefill(10, 10, H, D, MI355X).kernel == GENERIC.key


def test_chunks_pack_whole_requests_under_the_budget():
    q, k = [100, 200, 50, 4000], [1000, 2000, 500, 40000]
    chunks = plan_prefill_chunks(q, k, budget_bytes=4 * 300 * 3500)
    for ch in chunks:
        M = sum(e - a for _, a, e in ch)
        N = sum(k[r] for r, _, _ in ch)
        assert M * N * 4 <= 4 * 300 * 3500 or len(ch) == 1
    rows = {}
    for ch in chunks:
        for r, a, e in ch:
            rows.setdefault(r, []).append((a, e))
    for r in range(4):  # every row of every request exactly once, in order
        spans = sorted(rows[r])
        assert spans[0][0] == 0 and spans[-1][1] == q[r]
        assert all(b[0] == a[1] for a, b in zip(spans, spans[1:]))


def test_a_request_too_long_for_the_budget_is_cut_along_its_rows():
    chunks = plan_prefill_chunks([4096], [131072], budget_bytes=512 << 20)
    assert [c[0][1:] for c in chunks] == [(0, 1024), (1024, 2048), (2048, 3072), (3072, 4096)]
    assert all(len(c) == 1 for c in chunks)


def test_chunk_planner_rejects_bad_input():
    with pytest.raises(ValueError, match="budget_bytes"):
        plan_prefill_chunks([1], [1], budget_bytes=0)
    with pytest.raises(ValueError, match="lengths differ"):
        plan_prefill_chunks([1, 2], [1])
    with pytest.raises(ValueError, match="request 1"):
        plan_prefill_chunks([1, -2], [1, 1])


@pytest.mark.parametrize("target,H,D,fast,fp32", [
    (H200, 64, 128, "mqa_logits_wgmma_fold", "mqa_logits_generic"),
    (H200, 32, 128, "mqa_logits_wgmma", "mqa_logits_generic"),
    (H200, 16, 128, "mqa_logits_generic", "mqa_logits_generic"),
    (H200, 64, 64, "mqa_logits_generic", "mqa_logits_generic"),
    (MI355X, 64, 128, "mqa_logits_mfma", "mqa_logits_mfma"),
    (MI355X, 32, 128, "mqa_logits_mfma", "mqa_logits_mfma"),
    (MI355X, 48, 128, "mqa_logits_generic", "mqa_logits_generic"),
])
def test_the_default_is_the_fastest_kernel_and_fp32_keeps_to_its_class(target, H, D, fast, fp32):
    p = plan_prefill(256, 4096, H, D, target)
    assert (p.kernel, p.accumulation) == (fast, "fp8_tc" if "wgmma" in fast else "fp32")
    q = plan_prefill(256, 4096, H, D, target, accumulation="fp32")
    assert (q.kernel, q.accumulation, q.eps) == (fp32, "fp32", 2.0 ** -20)


def test_fp32_refuses_a_forced_tensor_core_kernel_and_unknown_classes():
    with pytest.raises(ValueError, match=r"kernel: 'mqa_logits_wgmma' accumulates in the fp8_tc class"):
        plan_prefill(256, 4096, 64, 128, H200, accumulation="fp32", kernel="mqa_logits_wgmma")
    with pytest.raises(ValueError, match=r"accumulation: expected one of \['fast', 'fp32'\], got 'fp16'"):
        plan_prefill(256, 4096, 64, 128, H200, accumulation="fp16")


def test_chunks_for_the_top_k_op_are_sized_by_keys_and_candidates_not_logits():
    """fp8_mqa_topk never holds [M, N] logits: 4096 rows against 131072 keys (four chunks of logits at 512 MiB)
    are one chunk, and so are a million keys; the budget still cuts rows once candidates and keys fill it."""
    assert plan_prefill_chunks([4096], [131072], budget_bytes=512 << 20, top_k=2048) == [[(0, 0, 4096)]]
    assert plan_prefill_chunks([4096], [1 << 20], budget_bytes=512 << 20, top_k=2048) == [[(0, 0, 4096)]]
    q, k = [100, 200, 50, 40000], [1000, 2000, 500, 400000]
    budget = 256 << 20
    chunks = plan_prefill_chunks(q, k, budget_bytes=budget, top_k=2048)
    for ch in chunks:
        M = sum(e - a for _, a, e in ch)
        N = sum(k[r] for r, _, _ in ch)
        assert N * 132 + 24 * 2048 * M + (1 << 20) <= budget
    rows = (budget - 400000 * 132 - (1 << 20)) // (24 * 2048)  # beside the long request's keys
    assert [c[0][1:] for c in chunks[1:]][:2] == [(0, rows), (rows, 2 * rows)]
    with pytest.raises(ValueError, match="top_k"):
        plan_prefill_chunks([1], [1], top_k=0)


def test_chunks_for_the_fused_top_k_budget_its_key_splits_candidates():
    """The fused path's workspace keeps a row's candidates a part of its key split each: parts=3 budgets
    8 top_k M (1 + 3) bytes of it, so the same budget cuts the long request into shorter pieces."""
    q, k = [100, 200, 50, 40000], [1000, 2000, 500, 400000]
    budget = 256 << 20
    chunks = plan_prefill_chunks(q, k, budget_bytes=budget, top_k=2048, parts=3)
    for ch in chunks:
        M = sum(e - a for _, a, e in ch)
        N = sum(k[r] for r, _, _ in ch)
        assert N * 132 + 8 * 2048 * M + 8 * 2048 * M * 4 + (1 << 20) <= budget
    rows = (budget - 400000 * 132 - (1 << 20)) // (40 * 2048)
    assert [c[0][1:] for c in chunks[1:]][:2] == [(0, rows), (rows, 2 * rows)]
    assert plan_prefill_chunks([4096], [131072], budget_bytes=512 << 20, top_k=2048, parts=3) == [[(0, 0, 4096)]]
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="parts"):
            plan_prefill_chunks([1], [1], top_k=8, parts=bad)
