"""The kernels one op can run, and the one rule both planners pick by.

A kernel's launch facts (threads per block, variant define, shared memory, accumulation class, the shapes it
serves) live in its catalog entry; a planner's spec adds only how to plan for it, and reads the rest through
``CatalogFacts``. A ``KernelMenu`` holds an op's generic kernel (any shape) and, per arch, its fast paths in
the order they are tried.
"""
from __future__ import annotations

from ..catalog import ACCUMULATION, KERNEL
from .target import check_accumulation


class CatalogFacts:
    """The catalog entry of the spec's `key`, and the launch facts read from it."""

    @property
    def kernel(self):
        return KERNEL[self.key]

    @property
    def block(self) -> int:
        return self.kernel.block

    @property
    def fits(self) -> tuple:
        return self.kernel.fits

    @property
    def variant(self) -> str | None:
        return self.kernel.variant_axis

    @property
    def accumulation(self) -> str:
        """The kernel's accumulation class, as the catalog declares it ("fp32" or "fp8_tc")."""
        return self.kernel.accumulation

    @property
    def eps(self) -> float:
        return ACCUMULATION[self.accumulation]


class KernelMenu:
    """An op's kernels: `generic` serves every shape the op takes; fast paths register per arch."""

    def __init__(self, op: str, generic):
        self.op, self.generic = op, generic
        self.fast: dict[str, list] = {}
        self.by_key = {generic.key: generic}

    def register(self, arch: str, spec) -> None:
        """Add a fast kernel for `arch`, tried after those registered before it."""
        self.fast.setdefault(arch, []).append(spec)
        self.by_key[spec.key] = spec

    def pick(self, arch: str, forced: str | None, accumulation: str, refuses):
        """The forced kernel, or the first fast path of `arch` that serves the shape in the accumulation asked
        for ("fast": any class; "fp32": fp32-class only), else the generic kernel. refuses(spec) says why a
        kernel cannot serve the call's shape (None: it can)."""
        check_accumulation(accumulation)
        fast = self.fast.get(arch, [])
        if forced is not None:
            spec = self.by_key.get(forced)
            if spec is None or (spec is not self.generic and spec not in fast):
                have = [self.generic.key] + [s.key for s in fast]
                raise ValueError(f"kernel: {forced!r} is not a {self.op} kernel for {arch}; choose from {have}")
            why = refuses(spec)
            if why:
                raise ValueError(f"kernel: {forced!r} {why}")
            if accumulation == "fp32" and spec.accumulation != "fp32":
                raise ValueError(f"kernel: {forced!r} accumulates in the {spec.accumulation} class; "
                                 f"accumulation='fp32' takes fp32-class kernels only")
            return spec
        for spec in fast:
            if not refuses(spec) and (accumulation == "fast" or spec.accumulation == "fp32"):
                return spec
        return self.generic
