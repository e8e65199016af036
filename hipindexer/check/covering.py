"""Seeded covering designs: a small sample of a large test matrix in which every value of every axis
(strength 1), or every pair of values of two axes (strength 2), appears in some case.

Greedy, in the manner of AETG: take an item not yet covered, draw completions of it at random, keep
the feasible one that covers the most new items. An item no feasible case can hold (a pair the
constraints forbid, or one that would cost more than the caller allows) is reported, never dropped
silently. The same seed gives the same design.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field


@dataclass
class Design:
    cases: list[dict]
    items: int                                         # values (strength 1) or value pairs (2) to cover
    covered: int
    infeasible: list = field(default_factory=list)     # items no feasible case holds
    uncovered: list = field(default_factory=list)      # feasible items left out by max_cases


def _items(case: dict, strength: int) -> set:
    pairs = sorted(case.items(), key=lambda kv: kv[0])
    return {frozenset(c) for c in itertools.combinations(pairs, strength)}


def _key(item) -> str:
    return repr(sorted(item, key=lambda kv: kv[0]))


def covering_design(axes: dict, *, strength: int = 1, seed: int = 0, feasible=lambda case: True,
                    repair=lambda case: case, max_cases: int | None = None, tries: int = 48) -> Design:
    """A seeded covering design over `axes` (name -> values, cheapest value first).

    repair(case) -> case enforces constraints between axes (it may change values, after which the case
    only counts for what it then holds); feasible(case) says whether a case may run at all (a cost cap).
    A target item no random completion can hold is tried once more with every other axis at its first
    (cheapest) value before it is declared infeasible.
    """
    rng = random.Random(seed)
    names = list(axes)
    every = set()
    for combo in itertools.combinations(names, strength):
        for values in itertools.product(*(axes[a] for a in combo)):
            every.add(frozenset(zip(combo, values)))
    uncovered = set(every)
    infeasible, cases = [], []
    while uncovered and (max_cases is None or len(cases) < max_cases):
        target = rng.choice(sorted(uncovered, key=_key))
        best, best_gain = None, 0
        for attempt in range(tries + 1):
            base = {a: (axes[a][0] if attempt == tries else rng.choice(axes[a])) for a in names}
            case = repair({**base, **dict(target)})
            if not feasible(case):
                continue
            held = _items(case, strength)
            if target not in held:
                continue
            gain = len(held & uncovered)
            if gain > best_gain:
                best, best_gain = case, gain
        if best is None:
            infeasible.append(dict(target))
            uncovered.discard(target)
            continue
        cases.append(best)
        uncovered -= _items(best, strength)
    left = [dict(i) for i in sorted(uncovered, key=_key)]
    covered = len(every) - len(infeasible) - len(left)
    return Design(cases, len(every), covered, infeasible, left)
