"""Covering designs: every value (pair) of the axes in some case, constraints and cost caps respected, the
items no feasible case can hold reported, the same seed giving the same design; and the decode sweep's
own designs."""
import itertools

from hipindexer.check import sweep
from hipindexer.check.covering import covering_design

AXES = {"a": (1, 2, 3), "b": ("x", "y"), "c": (False, True), "d": (10, 20, 30, 40)}


def _pairs(cases):
    return {frozenset(p) for c in cases for p in itertools.combinations(sorted(c.items()), 2)}


def test_a_pairwise_design_covers_every_pair():
    d = covering_design(AXES, strength=2, seed=3)
    want = {frozenset(zip(k, v)) for k in itertools.combinations(AXES, 2)
            for v in itertools.product(*(AXES[a] for a in k))}
    assert want <= _pairs(d.cases) and d.covered == d.items == len(want)
    assert len(d.cases) < len(list(itertools.product(*AXES.values())))


def test_constraints_and_caps_hold_and_what_they_forbid_is_reported():
    repair = lambda c: {**c, "d": 10} if c["c"] else c  # noqa: E731  (c=True only with d=10)
    fits = lambda c: not (c["a"] == 3 and c["b"] == "y")  # noqa: E731
    d = covering_design(AXES, strength=2, seed=0, repair=repair, feasible=fits)
    assert all(fits(c) and (not c["c"] or c["d"] == 10) for c in d.cases)
    bad = [sorted(i.items()) for i in d.infeasible]
    assert [("a", 3), ("b", "y")] in bad and [("c", True), ("d", 20)] in bad
    assert d.covered + len(d.infeasible) == d.items and not d.uncovered


def test_the_same_seed_gives_the_same_design_and_a_cap_reports_what_it_leaves_out():
    assert covering_design(AXES, strength=2, seed=7).cases == covering_design(AXES, strength=2, seed=7).cases
    d = covering_design(AXES, strength=2, seed=7, max_cases=3)
    assert len(d.cases) == 3 and d.uncovered and d.covered + len(d.uncovered) == d.items


def test_the_decode_designs_hold_every_axis_value_within_their_caps():
    for quick in (True, False):
        d = sweep.decode_design(quick)
        for axis, values in sweep.DECODE_AXES.items():
            assert {c[axis] for c in d.cases} >= set(values), (quick, axis)
        for c in d.cases:
            case, _ = sweep.decode_case_of(c)
            assert not case.preshuffle or case.block_size % 16 == 0
            fmas, nbytes = sweep.decode_work(case)
            assert fmas <= sweep.QUICK_DECODE_FMAS if quick else nbytes <= sweep.FULL_DECODE_BYTES
    quick = sweep.decode_design(True)
    assert not quick.uncovered and {tuple(sorted(i)) for i in quick.infeasible} <= {
        ("block_size", "preshuffle"), ("context", "next_n"), ("B", "context"), ("H", "context")}
