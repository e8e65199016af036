"""Where each kernel goes: the shipped ones in <out>, the test-only ones in <out>/test-only.

Each tree is complete on its own (objects under <tree>/<target>/ and a
manifest.json), so a wheel that packs <out>/manifest.json and <out>/<target>/
carries nothing of the tests, and the tests name the other manifest when they
ask for a test-only kernel (get_kernel(..., manifest=...)).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .hipindexer_modules import catalog

TEST_ONLY = "test-only"


@dataclass(frozen=True)
class Tree:
    out: Path
    kernels: tuple  # catalog.Kernel, in catalog order


def trees(out: Path) -> list[Tree]:
    return [Tree(out, tuple(k for k in catalog.KERNELS if not k.test_only)),
            Tree(out / TEST_ONLY, tuple(k for k in catalog.KERNELS if k.test_only))]
