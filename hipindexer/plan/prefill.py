"""Launch planning in pure Python, from host shapes and a small target description.

The planner never touches a device: it sees (M, N, H, D), a ``Target`` and the
caller's forced tunables, and returns a ``PrefillPlan`` (kernel, grid, block,
rows per block, key split, tile, row order).  Every tunable can be forced; a
forced value that cannot work raises ValueError naming it; None means the
planner decides.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ..catalog import ACCUMULATION
from .menu import CatalogFacts, KernelMenu
from .target import TARGETS, Target, forced_int  # noqa: F401  (TARGETS: the doctests' targets)


@dataclass(frozen=True)
class KernelSpec(CatalogFacts):
    """How to plan for a prefill kernel; its block, variant define, (H, D) and class are its catalog entry's."""
    key: str
    tile: int             # keys per split unit
    max_rows: int         # most rows one block may hold
    rows: dict | None = None   # H -> the fixed rows per block of a kernel built per H (None: free)
    persistent: bool = False    # grid of at most one block per CU walking every (row block, part) unit
    min_part_tiles: int = 1     # the planner's own split keeps >= this many tiles per part (per-part costs)
    unit_cost_tiles: int = 0    # what starting a unit costs, in tiles of work, where the split is priced in rounds
    # H -> the workgroups a CU holds at once: the split is then priced in rounds of that many a CU (None: the split
    # aims at about two a CU)
    blocks_per_cu: dict | None = None

    def refuses(self, H: int, D: int) -> str | None:
        if self.fits and (H, D) not in self.fits:
            return f"serves (H, D) in {list(self.fits)}, not ({H}, {D})"
        return None


GENERIC = KernelSpec("mqa_logits_generic", tile=256, max_rows=64)
# sm_90a fp8 wgmma (hsaco_src/sm90a/mqa_logits_wgmma.hip): 256 (row, head) columns per row block; fp8
# tensor-core accumulation class. A unit costs about one tile of work to start.
WGMMA_SM90 = KernelSpec("mqa_logits_wgmma", tile=128, max_rows=8, rows={32: 8, 64: 4}, persistent=True,
                        unit_cost_tiles=1)
# The fold kernel (hsaco_src/sm90a/mqa_logits_wgmma_fold.hip): the linear half of 2 relu(x) = x + |x| computed by
# the MMA (H = 64 only), on two math warpgroups that keep every weight in registers: the faster of the two at H = 64. Its error on that term
# grows with |sum_h w_h x_h| over every head rather than with the kept heads' terms: still inside the class.
WGMMA_FOLD_SM90 = replace(WGMMA_SM90, key="mqa_logits_wgmma_fold", max_rows=4, rows={64: 4})
# The prefill kernels: per arch, fast paths tried in order before the generic kernel.
PREFILL = KernelMenu("prefill", GENERIC)


def register_prefill(arch: str, spec: KernelSpec) -> None:
    """Add a fast prefill kernel for `arch`, tried after those registered before it."""
    PREFILL.register(arch, spec)


register_prefill("sm_90a", WGMMA_FOLD_SM90)
register_prefill("sm_90a", WGMMA_SM90)
# gfx950 scaled-MFMA kernel (hsaco_src/gfx950/mqa_logits_mfma.hip): 4 waves x 2 rows share each K tile
# (32 keys, staged through LDS); the split cuts the work range at 32-key tiles, >= 8 per part (two
# 128-key LDS chunks: each part reloads its 8 rows of Q and weights, 32-64 KiB). A CU holds three of its
# workgroups at H = 32 (168 VGPRs a lane), two at H = 64; a unit starts with one loaded latency, about four
# tiles at either H (docs/gfx950.md's estimator, not timed on the hardware).
MFMA_GFX950 = KernelSpec("mqa_logits_mfma", tile=32, max_rows=8, rows={32: 8, 64: 8}, min_part_tiles=8,
                         blocks_per_cu={32: 3, 64: 2}, unit_cost_tiles=4)
register_prefill("gfx950", MFMA_GFX950)


@dataclass(frozen=True)
class PrefillPlan:
    """One launch of fp8_mqa_logits: the kernel (catalog key), its grid and block, rows per block, key split
    into `split` parts of whole `tile`-key tiles, the row order, the code object's variant defines and the
    kernel's accumulation class (docs/accuracy.md); `eps` and `units` derive from them."""
    kernel: str
    grid: tuple            # (row blocks, split, 1); persistent kernels: (blocks, 1, 1)
    block: int
    rows_per_block: int
    split: int
    tile: int
    reverse_rows: bool
    row_blocks: int = 0
    variant: dict | None = None   # the code object's variant defines (None: the only one)
    accumulation: str = "fp32"    # the kernel's accumulation class

    @property
    def eps(self) -> float:
        """The gate's per-element bound for this kernel: |out - ref| <= eps * A."""
        return ACCUMULATION[self.accumulation]

    @property
    def units(self) -> int:
        """Work units: (row block, part of the key split) pairs."""
        return self.row_blocks * self.split


def _pick_kernel(arch: str, H: int, D: int, forced: str | None, accumulation: str) -> KernelSpec:
    if D % 16:
        raise ValueError(f"q: D must be a multiple of 16 for every kernel, got D={D}")
    return PREFILL.pick(arch, forced, accumulation, lambda spec: spec.refuses(H, D))


def plan_prefill(M: int, N: int, H: int, D: int, target: Target, *, accumulation: str = "fast",
                 kernel: str | None = None, rows_per_block: int | None = None, split: int | None = None,
                 reverse_rows: bool | None = None) -> PrefillPlan:
    """Plan one fp8_mqa_logits launch (M, N >= 1); pure Python, no device.

    M, N, H, D: the call's query rows, keys, heads and head dim. target: a Target (TARGETS[arch], or
    hipindexer.ops.target_of(device)).
    accumulation: "fast" takes the fastest kernel for (H, D) on the target whatever its accumulation class;
    "fp32" only fp32-class kernels (see hipindexer.catalog.ACCUMULATION and docs/accuracy.md).
    kernel, rows_per_block, split, reverse_rows: None lets the planner decide; a value forces it.

    The kernel, unless forced: the first fast kernel registered for the target that serves (H, D) in the
    class asked for (sm_90a: mqa_logits_wgmma_fold at H = 64 and mqa_logits_wgmma at H = 32, D = 128, under
    "fast" only; gfx950: mqa_logits_mfma at H in {32, 64}, D = 128), else the generic kernel (any H,
    D % 16 == 0). Rows run from the last row block first when N > 2048 (causal rows grow with the row).
    Results are cached: the same arguments return the same plan.

    Raises ValueError naming the argument: D not a multiple of 16, an unknown accumulation, a kernel that is
    not a prefill kernel of the target, does not serve (H, D) or is not fp32-class under "fp32",
    rows_per_block or split outside what the kernel takes, a reverse_rows that is not a bool, or more work
    units than a persistent kernel can count.

    >>> plan_prefill(4096, 32768, 64, 128, TARGETS["sm_90a"]).kernel
    'mqa_logits_wgmma_fold'
    >>> plan_prefill(4096, 32768, 32, 128, TARGETS["sm_90a"]).kernel
    'mqa_logits_wgmma'
    >>> p = plan_prefill(4096, 32768, 64, 128, TARGETS["sm_90a"], accumulation="fp32")
    >>> p.kernel, p.accumulation
    ('mqa_logits_generic', 'fp32')
    """
    return _plan_prefill(M, N, H, D, target, accumulation, kernel, rows_per_block, split, reverse_rows)


MAX_UNITS = 1 << 30  # persistent kernels index (row block, part) units in 32 bits, with the grid's stride on top


@lru_cache(maxsize=256)
def _plan_prefill(M, N, H, D, target, accumulation, kernel, rows_per_block, split, reverse_rows) -> PrefillPlan:
    spec = _pick_kernel(target.arch, H, D, kernel, accumulation)
    tiles = -(-N // spec.tile)
    fixed = spec.rows.get(H) if spec.rows else None
    if rows_per_block is None:
        rows_per_block = fixed or min(4, spec.max_rows)
    rows_per_block = forced_int("rows_per_block", rows_per_block, 1, spec.max_rows)
    if fixed and rows_per_block != fixed:
        raise ValueError(f"rows_per_block: {spec.key} holds exactly {fixed} rows per block at H={H}, "
                         f"got {rows_per_block}")
    row_blocks = -(-M // rows_per_block)
    max_split = tiles if spec.persistent else min(tiles, target.max_grid_y)
    if split is None:
        if spec.persistent:
            split = _persistent_split(row_blocks, tiles, target.num_cus, spec.unit_cost_tiles)
        elif spec.blocks_per_cu:  # rounds of the workgroups the CUs hold at once, priced as a persistent grid's
            split = _persistent_split(row_blocks, tiles, target.num_cus * _blocks_per_cu(spec, H),
                                      spec.unit_cost_tiles, min(max_split, max(1, tiles // spec.min_part_tiles)))
        else:
            split = min(max_split, max(1, -(-_blocks_per_cu(spec, H) * target.num_cus // row_blocks)),
                        max(1, tiles // spec.min_part_tiles))
    split = forced_int("split", split, 1, max_split)
    if reverse_rows is None:
        reverse_rows = N > 2048
    if not isinstance(reverse_rows, bool):
        raise ValueError(f"reverse_rows: expected a bool, got {reverse_rows!r}")
    units = row_blocks * split
    if spec.persistent and units >= MAX_UNITS:
        raise ValueError(f"split: {row_blocks} row blocks x {split} parts = {units} work units; {spec.key} counts "
                         f"units in 32 bits (< {MAX_UNITS})")
    grid = (min(units, target.num_cus), 1, 1) if spec.persistent else (row_blocks, split, 1)
    variant = {spec.variant: H} if spec.variant else None
    return PrefillPlan(spec.key, grid, spec.block, rows_per_block, split, spec.tile, reverse_rows, row_blocks,
                       variant, spec.accumulation)


def _blocks_per_cu(spec: KernelSpec, H: int) -> int:
    """The workgroups a CU holds at once for this kernel at H; two where its spec does not say."""
    return (spec.blocks_per_cu or {}).get(H, 2)


def _persistent_split(row_blocks: int, tiles: int, cus: int, unit_cost: int, most: int | None = None) -> int:
    """Key split of a persistent kernel (cus: the units that run at once): the one whose rounds of units cost
    least, a round costing its longest unit (tiles per part) plus the kernel's cost of starting a unit; ties go
    to fewer parts. A last round left part empty can beat many short units (each pays the start). most: parts at
    most (default: tiles)."""
    best, best_cost = 1, None
    for s in range(1, (most or tiles) + 1):
        units = row_blocks * s
        if units >= MAX_UNITS:
            break
        cost = -(-units // cus) * (-(-tiles // s) + unit_cost)
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
        if units >= 64 * cus:  # past 64 rounds more parts only add starts
            break
    return best


TUNABLES = ("kernel", "rows_per_block", "split", "reverse_rows")
