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

from .catalog import ACCUMULATION, KERNEL


@dataclass(frozen=True)
class Target:
    """What the planner knows of a device: its arch, its compute units and wave size, the grid's y limit.

    TARGETS holds the two shipped targets (an H100/H200 and an MI355X); hipindexer.ops.target_of(device)
    builds one from a Device's own CU count.

    >>> Target("sm_90a", num_cus=132, wave_size=32) == TARGETS["sm_90a"]
    True
    """
    arch: str          # "gfx950", "sm_90a"
    num_cus: int       # CUs (AMD) or SMs (NVIDIA)
    wave_size: int     # 64 on CDNA, 32 on NVIDIA
    max_grid_y: int = 65535


TARGETS = {
    "gfx950": Target("gfx950", 256, 64),
    "sm_90a": Target("sm_90a", 132, 32),
}


@dataclass(frozen=True)
class KernelSpec:
    """What the planner must know of a prefill kernel."""
    key: str
    block: int            # threads per block (fixed at build time)
    tile: int             # keys per split unit
    max_rows: int         # most rows one block may hold
    fits: tuple = ()      # ((H, D), ...) it serves; () = any H, any D % 16 == 0
    rows: dict | None = None   # H -> the fixed rows per block of a kernel built per H (None: free)
    variant: str | None = None  # variant define chosen by H, e.g. "HX_HEADS" (None: one object)
    persistent: bool = False    # grid of at most one block per CU walking every (row block, part) unit
    min_part_tiles: int = 1     # the planner's own split keeps >= this many tiles per part (per-part costs)
    unit_cost_tiles: int = 0    # persistent: what starting a unit costs, in tiles of work (timed on the hardware)

    @property
    def accumulation(self) -> str:
        """The kernel's accumulation class, as the catalog declares it ("fp32" or "fp8_tc")."""
        return KERNEL[self.key].accumulation


GENERIC = KernelSpec("mqa_logits_generic", block=256, tile=256, max_rows=64)
# sm_90a fp8 wgmma (hsaco_src/sm90a/mqa_logits_wgmma.hip): 256 (row, head) columns per row block; fp8
# tensor-core accumulation class. A unit costs about one tile of work to start.
WGMMA_SM90 = KernelSpec("mqa_logits_wgmma", block=640, tile=128, max_rows=8, fits=((32, 128), (64, 128)),
                        rows={32: 8, 64: 4}, variant="HX_HEADS", persistent=True, unit_cost_tiles=1)
# The fold kernel (hsaco_src/sm90a/mqa_logits_wgmma_fold.hip): the linear half of 2 relu(x) = x + |x| computed by
# the MMA (H = 64 only), on two math warpgroups that keep every weight in registers: the faster of the two at H = 64. Its error on that term
# grows with |sum_h w_h x_h| over every head rather than with the kept heads' terms: still inside the class.
WGMMA_FOLD_SM90 = replace(WGMMA_SM90, key="mqa_logits_wgmma_fold", block=384, max_rows=4, fits=((64, 128),),
                          rows={64: 4})
# Fast paths register here: arch -> specs, tried in order before the generic kernel.
FAST_PREFILL: dict[str, list[KernelSpec]] = {}
PREFILL_KERNELS = {GENERIC.key: GENERIC}
ACCUMULATIONS = ("fast", "fp32")


def register_prefill(arch: str, spec: KernelSpec) -> None:
    """Add a fast prefill kernel for `arch`, tried after those registered before it."""
    FAST_PREFILL.setdefault(arch, []).append(spec)
    PREFILL_KERNELS[spec.key] = spec


register_prefill("sm_90a", WGMMA_FOLD_SM90)
register_prefill("sm_90a", WGMMA_SM90)
# gfx950 scaled-MFMA kernel (hsaco_src/gfx950/mqa_logits_mfma.hip): 4 waves x 2 rows share each K tile
# (32 keys, staged through LDS); the split cuts the work range at 32-key tiles, >= 8 per part (two
# 128-key LDS chunks: each part reloads its 8 rows of Q and weights, 32-64 KiB).
MFMA_GFX950 = KernelSpec("mqa_logits_mfma", block=256, tile=32, max_rows=8, fits=((32, 128), (64, 128)),
                         rows={32: 8, 64: 8}, variant="HX_HEADS", min_part_tiles=8)
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


def _forced_int(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name}: expected an int in [{lo}, {hi}], got {value!r}")
    return value


def check_accumulation(accumulation) -> None:
    """ValueError unless `accumulation` is "fast" or "fp32"."""
    if accumulation not in ACCUMULATIONS:
        raise ValueError(f"accumulation: expected one of {list(ACCUMULATIONS)}, got {accumulation!r}")


def _pick_kernel(arch: str, H: int, D: int, forced: str | None, accumulation: str) -> KernelSpec:
    """The forced kernel, or the first registered fast path that serves (H, D) in the accumulation asked
    for ("fast": any class; "fp32": fp32-class only), else the generic kernel."""
    check_accumulation(accumulation)
    if D % 16:
        raise ValueError(f"q: D must be a multiple of 16 for every kernel, got D={D}")
    if forced is not None:
        spec = PREFILL_KERNELS.get(forced)
        if spec is None or (spec is not GENERIC and spec not in FAST_PREFILL.get(arch, [])):
            have = [GENERIC.key] + [s.key for s in FAST_PREFILL.get(arch, [])]
            raise ValueError(f"kernel: {forced!r} is not a prefill kernel for {arch}; choose from {have}")
        if spec.fits and (H, D) not in spec.fits:
            raise ValueError(f"kernel: {forced!r} serves (H, D) in {list(spec.fits)}, not ({H}, {D})")
        if accumulation == "fp32" and spec.accumulation != "fp32":
            raise ValueError(f"kernel: {forced!r} accumulates in the {spec.accumulation} class; "
                             f"accumulation='fp32' takes fp32-class kernels only")
        return spec
    for spec in FAST_PREFILL.get(arch, []):
        if (H, D) in spec.fits and (accumulation == "fast" or spec.accumulation == "fp32"):
            return spec
    return GENERIC


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
    rows_per_block = _forced_int("rows_per_block", rows_per_block, 1, spec.max_rows)
    if fixed and rows_per_block != fixed:
        raise ValueError(f"rows_per_block: {spec.key} holds exactly {fixed} rows per block at H={H}, "
                         f"got {rows_per_block}")
    row_blocks = -(-M // rows_per_block)
    max_split = tiles if spec.persistent else min(tiles, target.max_grid_y)
    if split is None:
        split = _persistent_split(row_blocks, tiles, target.num_cus, spec.unit_cost_tiles) if spec.persistent else \
            min(max_split, max(1, -(-2 * target.num_cus // row_blocks)),  # ~2 blocks per CU
                max(1, tiles // spec.min_part_tiles))
    split = _forced_int("split", split, 1, max_split)
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


def _persistent_split(row_blocks: int, tiles: int, cus: int, unit_cost: int) -> int:
    """Key split of a persistent kernel: the one whose rounds of units cost least, a round costing its
    longest unit (tiles per part) plus the kernel's cost of starting a unit; ties go to fewer parts. A
    last round left part empty can beat many short units (each pays the start)."""
    best, best_cost = 1, None
    for s in range(1, tiles + 1):
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


def plan_prefill_chunks(query_lens, key_lens, budget_bytes: int = 512 << 20) -> list[list[tuple[int, int, int]]]:
    """Pack prefill requests into chunks whose logits M * N * 4 bytes fit a budget (vLLM style).

    query_lens[r] query rows of request r attend to its key_lens[r] keys.
    Returns chunks, each a list of (request, row_start, row_end): whole
    requests packed greedily in order, and a request too long for the budget
    on its own cut along its query rows into pieces of
    max(1, budget // (4 * key_len)) rows (each piece reuses the same keys).
    A chunk's N is the sum of its requests' key_lens, its M the sum of the rows.
    Requests with no query rows are left out. Raises ValueError for a budget below 4 bytes, lists of
    different lengths, or a negative length.

    >>> plan_prefill_chunks([100, 3000], [100, 3000], budget_bytes=8 << 20)
    [[(0, 0, 100)], [(1, 0, 699)], [(1, 699, 1398)], [(1, 1398, 2097)], [(1, 2097, 2796)], [(1, 2796, 3000)]]
    """
    if budget_bytes < 4:
        raise ValueError(f"budget_bytes: expected >= 4, got {budget_bytes}")
    if len(query_lens) != len(key_lens):
        raise ValueError(f"query_lens and key_lens: lengths differ ({len(query_lens)} vs {len(key_lens)})")
    chunks, cur, cur_m, cur_n = [], [], 0, 0
    for r, (q, k) in enumerate(zip(query_lens, key_lens)):
        if q < 0 or k < 0:
            raise ValueError(f"request {r}: query and key lengths must be >= 0, got ({q}, {k})")
        if q == 0:
            continue
        if (cur_m + q) * (cur_n + k) * 4 <= budget_bytes:
            cur.append((r, 0, q))
            cur_m, cur_n = cur_m + q, cur_n + k
            continue
        if cur:
            chunks.append(cur)
            cur, cur_m, cur_n = [], 0, 0
        if q * k * 4 <= budget_bytes:
            cur, cur_m, cur_n = [(r, 0, q)], q, k
            continue
        rows = max(1, budget_bytes // (4 * max(k, 1)))
        for a in range(0, q, rows):
            chunks.append([(r, a, min(q, a + rows))])
    if cur:
        chunks.append(cur)
    return chunks
