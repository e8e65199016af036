"""The first gfx950 kernel end to end on the emulator: hsaco_src/gfx950/logits_tile.hip
against the reference through the gate, and the planted bugs the suite must catch."""
import pytest

from hipindexer import testing

import emu_harness as H
import logits_cases as L

pytestmark = pytest.mark.toolchain


def _lib(plant=None):
    why = H.toolchain_missing()
    if why:
        pytest.skip(why)
    return H.logits_tile_lib(plant)


@pytest.fixture(scope="module")
def tile():
    return _lib()


@pytest.mark.parametrize("case", L.CASES, ids=lambda c: "M{}_N{}_H{}_{}_{}".format(*c[:4], "clean" if c[4] else "dirty"))
def test_logits_tile_matches_reference(tile, case):
    try:
        r = L.run(tile, *case)
    except testing.NotApplicable as e:
        pytest.skip(f"not applicable: {e}")
    assert r, r


@pytest.mark.parametrize("plant", H.logits_tile_plants(), ids=lambda p: p.name)
def test_planted_bug_is_caught(plant):
    hit = L.caught(_lib(plant))
    assert hit is not None, f"plant {plant.name} passed every case: the suite would not catch it"
