#!/usr/bin/env python3
"""Mutation harness for the gfx950 logits tile on the CPU emulator: builds
hsaco_src/gfx950/logits_tile.hip once per planted bug (a text substitution on
a copy of hsaco_src/, tests/emu/emu_harness.py's logits_tile_plants) and
prints the first suite case that catches it (exit 1 if a plant survives).

    python -m tools.support.emu_plants
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "emu"))  # the tests' emulator harness and the tile's suite: not a package

import emu_harness as H  # noqa: E402
import logits_cases as L  # noqa: E402


def main() -> int:
    clean = L.caught(H.logits_tile_lib())
    print(f"{'(no plant)':20s} {'FAILS: ' + str(clean) if clean else 'passes all ' + str(len(L.CASES)) + ' cases'}")
    survivors = 0
    for plant in H.logits_tile_plants():
        hit = L.caught(H.logits_tile_lib(plant))
        survivors += hit is None
        print(f"{plant.name:20s} " + (f"caught by {hit[0]}: {hit[1]}" if hit else "NOT CAUGHT"))
    return 1 if survivors or clean else 0


if __name__ == "__main__":
    sys.exit(main())
