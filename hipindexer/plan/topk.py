"""plan_topk: how hipindexer.topk_logits covers a [rows, N] logits array, from host shapes and a Target.

Five paths, all exact and deterministic (hsaco_src/generic/topk_logits.hip, generic/topk_split_*.hip):

- single: one block per row (rows past the grid cap taken in turn), which reads its row once per radix pass and
  once to compact. The choice for short rows (N < SPLIT_MIN_N), where three launches cost more than they save.
- rowwise: one block a row, one launch (hsaco_src/generic/topk_rowwise.hip): no workspace and none of the split
  path's launch latencies, but a row's bytes go through one unit. A row of at most HELD_COLUMNS columns is read once
  and held in the block (registers and shared memory), its floor taken from its held sample and the values that
  reach it kept with no further read; a longer one runs the split path's three steps below, the kept keys in the
  block's shared memory.
  Taken where rowwise_us(...) is below the other path's time, split_us(...) or single_us(...) (rowwise_pays).
- resident: one block a row, one launch (hsaco_src/generic/topk_resident.hip): the row read once into the block's
  shared memory as keys, the radix select's passes and the compaction over them there; no workspace. For rows whose
  keys fit a block (resident_fits); taken where resident_us(...) is below the other paths' times.
- cluster (sm_90a): a cluster of CLUSTER blocks a row, one launch (hsaco_src/sm90a/topk_cluster.hip): the row's
  keys cut among the cluster's blocks, each holding its part in shared memory, the radix passes' counts summed across
  the blocks through distributed shared memory; no workspace. For rows whose parts fit a block (cluster_fits); taken
  for few long rows where cluster_us(...) is below the other paths' times (cluster_pays).
- split: a block a row takes the row's floor from a sample of a `sample_step`-th of its columns (runs of 8), at
  rank `floor_rank`, so that about SAMPLE_MARGIN top_k of a long row's keys reach it; then each row cut into
  `parts` column ranges, parts * rows blocks (in rounds of BLOCKS_PER_CU a unit) reading each range once with 16-byte
  loads and keeping the keys at or above the floor in a workspace; then one block per row selects among the kept
  keys and writes them in order. A row whose kept keys cannot hold its top_k (fewer than top_k above a floor the
  sample set too high, or more than `cap`) falls back to the single-block algorithm inside the last kernel:
  correct, as slow as the single path for that row. More than SPLIT_MAX_ROWS rows go in groups of that many, the
  three launches a group, over one workspace.

The workspace holds, per row of a group, the floor, a count and `cap` kept entries (8 bytes each):
O(min(rows, SPLIT_MAX_ROWS) x cap), independent of N.
"""
from __future__ import annotations

import builtins
from dataclasses import dataclass

from ..catalog import KERNEL
from .target import Target, forced_int

SPLIT_MIN_N = 16384      # shorter rows take the single-block kernel
SPLIT_MAX_ROWS = 1024    # rows of a group of the split path (its workspace's rows): more go in several groups
MIN_PART = 8192          # columns per part at least (unless forced): two tiles of 4096 columns, one loading under the
                         # other's appends
BLOCKS_PER_CU = 4        # gather blocks resident a unit (256 threads of 64 registers on sm_90a)
CAP = 8192               # kept keys per row the workspace holds, at least (4 top_k rounded up to a power of two)
PART_ALIGN = 1024        # part lengths are multiples of this (of 4 at least: every part keeps the row's alignment)
REC_BYTES = 256          # the floor and the count, then the kept entries (hsaco_src/common/topk_split.h)
SAMPLE_STEP = 16         # one column in this many is sampled for a floor, at most (sample_step)
SAMPLE_MARGIN = 1.75     # a floor aims at keeping this many times top_k of a row's keys
HELD_TILES = 4           # tiles of 8,192 columns a row-wise block holds (ROWWISE_HELD_TILES)
HELD_COLUMNS = 32768     # so a row of at most this many columns is held, however its start is aligned
MAX_BLOCKS = 1 << 16     # the op's grid cap (hipindexer.ops.topk.MAX_BLOCKS)
# The paths' times as measured on an H200 (docs/benchmarks.md, "`topk_logits`: the row-wise path" and "rows held in
# the block"), which the planner compares: a row-wise round of blocks costs about HELD_US + ROWWISE_US_PER_32K per
# 32,768 columns where the rows are held, ROWWISE_US + LONG_US_PER_32K per 32,768 columns where they are read the
# long way; the split path about SPLIT_US plus the logits' bytes at SPLIT_BYTES_PER_US, and at least
# SPLIT_US_PER_ROW a row (its last kernel's block a row, at hundreds of rows), and SPLIT_US_PER_LONG per 131,072
# columns a row has past SPLIT_LONG_N (rows of 262,144 columns took 10-12 us more than rows of 131,072 of the same
# bytes: docs/benchmarks.md, "the split path's long rows and the cluster's"); the single-block kernel, on rows
# shorter than SPLIT_MIN_N, SINGLE_US plus the bytes at SINGLE_BYTES_PER_US. LONG_US_PER_32K puts a round of rows of
# 131,072 columns at the 69 us the kernel that holds rows took there (docs/benchmarks.md, "Where the top-k ops
# stand").
ROWWISE_US, HELD_US, ROWWISE_US_PER_32K, LONG_US_PER_32K = 21.0, 14.3, 8.7, 12.0
SPLIT_US, SPLIT_BYTES_PER_US, SPLIT_US_PER_ROW = 30.0, 1.9e6, 0.19
SPLIT_LONG_N, SPLIT_US_PER_LONG = 131072, 10.8
SINGLE_US, SINGLE_BYTES_PER_US = 24.0, 4.8e5
# The resident path by an H100 fit (docs/benchmarks.md, "`topk_logits`: the resident block's passes and
# placement, shorter"): about RESIDENT_US of launch, then per round of a block a unit (two share a unit's issue where
# their shared memory allows) a block's RESIDENT_ROUND_US plus RESIDENT_US_PER_32K per 32,768 columns.
RESIDENT_US, RESIDENT_ROUND_US, RESIDENT_US_PER_32K = 1.1, 3.9, 19.6
# The narrow build (512 threads) where two of its blocks share each unit: about NARROW_US, then per round of two
# blocks a unit NARROW_ROUND_US plus NARROW_US_PER_32K per 32,768 columns (docs/benchmarks.md, "sorted outputs
# sorted in registers, and a 512-thread resident block").
NARROW_US, NARROW_ROUND_US, NARROW_US_PER_32K = 5.4, 1.5, 41.2
UNIT_SHARED_BYTES = {"sm_90a": 233472, "gfx950": 163840}  # shared memory (LDS) a unit holds for its blocks
RESIDENT_STATIC_BYTES = 8448  # a resident block's own shared memory (its counts and sums), beside the dynamic
RESIDENT_MAX_COLUMNS = 65536 - 8  # a resident block's counts of a row's keys are 16-bit
CLUSTER = dict(KERNEL["topk_cluster"].defines)["HX_CLUSTER"]  # the cluster path's blocks a row
# The cluster path by an H200 fit (docs/benchmarks.md, "`topk_logits`: a cluster's counts gathered once"), rows in
# one round (a block a unit): about CLUSTER_US plus CLUSTER_US_PER_32K per 32,768 columns and CLUSTER_US_PER_ROW a
# row; sorted, CLUSTER_SORT_US more than the other paths' sorts take (the cluster's first block sorts the row's whole
# selection), and only while the clusters hold half the units at most (past that the sort took 9 us more). More
# rows than units / CLUSTER run in rounds that cost more than the other paths.
CLUSTER_US, CLUSTER_US_PER_32K, CLUSTER_US_PER_ROW, CLUSTER_SORT_US = 10.6, 2.8, 0.4, 5.0
CLUSTER_STATIC_BYTES = 12624  # a cluster block's own shared memory (its counts, sums and gathered sums)
CLUSTER_MIN_N = 32768  # shorter rows: the resident or held row-wise path was as fast or faster at every row measured


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _parts(rows: int, N: int, slots: int) -> int:
    """The cut with the least time in rounds of `slots` resident blocks: rounds x (a part's share of a row), the
    fewer parts on a tie, parts of at least MIN_PART columns. `slots` parts already reach the least possible,
    rows / slots, so no more are tried (a row of 2^31 columns would otherwise try 262,144 cuts)."""
    return min(range(1, max(1, min(N // MIN_PART, slots)) + 1), key=lambda p: (-(-rows * p // slots) / p, p))


def rowwise_us(rows: int, N: int, units: int) -> float:
    """The row-wise path's time by the H200 fit: whole rounds of a block a unit."""
    if N <= HELD_COLUMNS:
        return -(-rows // units) * (HELD_US + ROWWISE_US_PER_32K * N / 32768)
    return -(-rows // units) * (ROWWISE_US + LONG_US_PER_32K * N / 32768)


def resident_smem(N: int, top_k: int, sorted: bool = True) -> int:
    """Dynamic shared memory of a resident block for rows of up to N columns: the keys' slots (a row's misalignment
    and its columns in whole float4s), and, sorted, room for the bitonic sort of its selection."""
    words = (N + 7) & ~3
    return 4 * words + (8 * _pow2(min(top_k, N)) if sorted else 0)


def resident_fits(N: int, top_k: int, target: Target) -> bool:
    """Whether rows of N columns, sorted or not, fit a resident block on `target` (and its 16-bit counts)."""
    return N < RESIDENT_MAX_COLUMNS and resident_smem(N, top_k) <= KERNEL["topk_resident"].smem_for(target.arch)


def resident_narrow(rows: int, N: int, top_k: int, target: Target) -> bool:
    """Whether rows take the resident path's narrow build (512 threads): where there are more rows than units and
    two of its blocks fit a unit's shared memory, so that each unit runs two rows at once, one block issuing while
    the other waits at a barrier. With a row or less a unit the 1,024-thread block is as fast or faster (it splits
    a row's keys among more threads)."""
    two = 2 * (resident_smem(N, top_k) + RESIDENT_STATIC_BYTES)
    return rows > target.num_cus and two <= UNIT_SHARED_BYTES.get(target.arch, 0)


def resident_us(rows: int, N: int, units: int, narrow: bool = False) -> float:
    """The resident path's time by the H100 fit: a block's instructions set its time, so rows are paid in rounds of
    a block a unit (whether or not a unit holds two of them at once), or with narrow=True of two narrow blocks."""
    if narrow:
        return NARROW_US + -(-rows // (2 * units)) * (NARROW_ROUND_US + NARROW_US_PER_32K * N / 32768)
    return RESIDENT_US + -(-rows // units) * (RESIDENT_ROUND_US + RESIDENT_US_PER_32K * N / 32768)


def cluster_slots(N: int) -> int:
    """Float4 slots of a row of up to N columns each block of a cluster holds (hx_cluster_slots)."""
    return -(-((N + 7) & ~3) // 4 // CLUSTER)


def cluster_smem(N: int, top_k: int, sorted: bool = True) -> int:
    """Dynamic shared memory of a cluster block for rows of up to N columns: its part's key slots, and, sorted, room
    for the bitonic sort of the row's selection (used in the cluster's first block)."""
    return 16 * cluster_slots(N) + (8 * _pow2(min(top_k, N)) if sorted else 0)


def cluster_fits(N: int, top_k: int, target: Target) -> bool:
    """Whether rows of N columns, sorted or not, take the cluster path on `target`: a build for its arch, a block's
    part within its shared memory and its keys within 16-bit counts."""
    k = KERNEL["topk_cluster"]
    return target.arch in k.targets and 4 * cluster_slots(N) < 65536 and cluster_smem(N, top_k) <= k.smem_for(
        target.arch)


def cluster_us(rows: int, N: int, sorted: bool = False) -> float:
    """The cluster path's time by the H200 fit, for rows in one round (rows x CLUSTER <= units); sorted, beside the
    other paths' fitted times (which leave their sorts out), what its sort takes past theirs."""
    return (CLUSTER_US + CLUSTER_US_PER_32K * N / 32768 + CLUSTER_US_PER_ROW * rows
            + (CLUSTER_SORT_US if sorted else 0.0))


def cluster_alone(N: int, top_k: int, sorted: bool, target: Target) -> bool:
    """Whether a cluster block of rows of N columns holds a unit alone (two of them pass its shared memory)."""
    two = 2 * (cluster_smem(N, top_k, sorted) + CLUSTER_STATIC_BYTES)
    return two > UNIT_SHARED_BYTES.get(target.arch, 0)


def cluster_pays(rows: int, N: int, top_k: int, sorted: bool, target: Target) -> bool:
    """Whether the rows take the cluster path by default: at least CLUSTER_MIN_N columns, in one round of a block a
    unit, and faster by the fits than the row-wise, split or single-block path. Sorted, or where a block holds a
    unit alone, the clusters take half the units at most: a cluster's blocks must find room in one group of units
    at once, and past that some waited for a second round (16 rows of 262,144 columns took 69 us against 38 at 8)."""
    half = sorted or cluster_alone(N, top_k, sorted, target)
    units = target.num_cus // 2 if half else target.num_cus
    return (N >= CLUSTER_MIN_N and 0 < rows * CLUSTER <= units and cluster_fits(N, top_k, target)
            and cluster_us(rows, N, sorted) < _others_us(rows, N, target.num_cus))


def split_us(rows: int, N: int) -> float:
    """The split path's time by the H200 fit."""
    return (max(SPLIT_US + 4 * rows * N / SPLIT_BYTES_PER_US, SPLIT_US_PER_ROW * rows)
            + SPLIT_US_PER_LONG * max(0, N - SPLIT_LONG_N) / SPLIT_LONG_N)


def single_us(rows: int, N: int) -> float:
    """The single-block kernel's time by the H200 fit, for rows shorter than SPLIT_MIN_N."""
    return SINGLE_US + 4 * rows * N / SINGLE_BYTES_PER_US


def _others_us(rows: int, N: int, units: int) -> float:
    """The least of the other paths' fitted times: the row-wise path's, and the split path's (N >= SPLIT_MIN_N)
    or the single-block kernel's."""
    other = split_us(rows, N) if N >= SPLIT_MIN_N else single_us(rows, N)
    return min(other, rowwise_us(rows, N, units))


def rowwise_pays(rows: int, N: int, units: int) -> bool:
    """Whether the rows take the row-wise path by default: against the split path for long rows (N >= SPLIT_MIN_N),
    against the single-block kernel for shorter ones."""
    other = split_us(rows, N) if N >= SPLIT_MIN_N else single_us(rows, N)
    return rowwise_us(rows, N, units) < other


def sample_step(top_k: int) -> int:
    """One column (or key) in this many is sampled for a floor: the floor's rank stays near 128 SAMPLE_MARGIN
    whatever top_k, about 7% (1 / sqrt(rank)) from the rank it aims at."""
    return max(1, min(SAMPLE_STEP, top_k // 128))


def floor_rank(top_k: int, margin: float = SAMPLE_MARGIN) -> int:
    """The rank among the sampled keys a floor is taken at: margin top_k of the row's keys are expected to reach
    it."""
    return -(-int(margin * top_k) // sample_step(top_k))


def default_cap(top_k: int) -> int:
    """Kept keys a row's workspace holds unless told: 4 top_k (rounded up to a power of two), at least CAP; the
    floors aim at SAMPLE_MARGIN top_k."""
    return max(CAP, 4 * _pow2(top_k))


def _check_forced(path: str, asked: dict, fits: bool, why: str) -> None:
    """A path forced by its tunable (path=True): ValueError where other tunables were asked for too, or where the rows
    do not fit it (why)."""
    if asked:
        raise ValueError(f"{path}=True: the {path} path takes none of {sorted(asked)}")
    if not fits:
        raise ValueError(f"{path}=True: {why}")


@dataclass(frozen=True)
class TopkPlan:
    """split=False: the single-block kernel on grid_rows blocks, or with rowwise=True the row-wise kernel (floors at
    rank r of a step-th of each row). split=True: kernels 1 and 3 on grid_rows blocks,
    kernel 2 on grid_parts blocks over rows x parts items of part_len columns, over a workspace of workspace_bytes
    (row_bytes per row of a group of group_rows rows, cap kept entries at cand_off); floors at rank r of a step-th of
    each row. The launches cover groups of group_rows rows in turn, the last holding what is left. cluster=True: the
    cluster kernel on grid_rows blocks, CLUSTER a row."""
    split: bool
    grid_rows: int
    parts: int = 0
    part_len: int = 0
    grid_parts: int = 0
    cap: int = 0
    row_bytes: int = 0
    cand_off: int = 0
    workspace_bytes: int = 0
    step: int = 0
    r: int = 0
    group_rows: int = 0
    rowwise: bool = False
    held: int = 0
    resident: bool = False
    narrow: bool = False
    cluster: bool = False


def workspace_layout(top_k: int, cap: int | None = None) -> tuple[int, int]:
    """(row_bytes, cand_off) of one row's workspace (cap: default_cap(top_k)): the same for every top_k of a
    power-of-two class, so one workspace serves the class."""
    cap = default_cap(top_k) if cap is None else cap
    return REC_BYTES + 8 * cap, REC_BYTES


def workspace_bytes(rows: int, top_k: int, cap: int | None = None) -> int:
    """Bytes of the split path's workspace for rows x top_k (what a caller's workspace= must hold): a group's rows,
    at most SPLIT_MAX_ROWS."""
    return min(rows, SPLIT_MAX_ROWS) * workspace_layout(top_k, cap)[0]


def plan_topk(rows: int, N: int, top_k: int, target: Target, split=None, part_columns=None, cap=None,
              group_rows=None, rowwise=None, held=None, resident=None, narrow=None, cluster=None,
              max_blocks: int = MAX_BLOCKS, sorted: bool = False) -> TopkPlan:
    """The path and its cut for rows x N at top_k on `target`, for outputs sorted or not. Tunables (tests,
    measurements): resident (bool: force the resident path, ValueError where rows do not fit a block, or keep it out;
    any other tunable keeps it out), cluster (bool: True forces the cluster path, ValueError with any other tunable
    or where rows do not fit it; False keeps it out, as any other tunable does; cluster_pays(...) unless told),
    narrow (bool: the resident path's 512-thread build or its 1,024-thread one; resident_narrow(...) unless told),
    rowwise (bool:
    force the row-wise path, or keep it out), held (bool: whether the row-wise path holds rows of at most
    HELD_COLUMNS in the block; True unless told), split (bool: force the split path or the single-block kernel),
    part_columns (columns per part, a multiple of 4: forces the split path's cut), cap (kept keys
    per row; a smaller one sends more rows to the fallback), group_rows (rows of a split group, at most
    SPLIT_MAX_ROWS).

    >>> from hipindexer.plan import TARGETS
    >>> plan_topk(128, 32768, 2048, TARGETS["sm_90a"]).rowwise
    True
    >>> p = plan_topk(64, 131072, 2048, TARGETS["sm_90a"])
    >>> p.split, p.parts, p.part_len, p.grid_parts
    (True, 8, 16384, 512)
    >>> plan_topk(64, 8192, 2048, TARGETS["sm_90a"]).split
    False
    """
    for name, flag in dict(split=split, rowwise=rowwise, held=held, resident=resident, narrow=narrow,
                           cluster=cluster).items():
        if flag is not None and not isinstance(flag, bool):
            raise ValueError(f"{name}: expected a bool or None, got {flag!r}")
    split_tunables = {k: v for k, v in dict(split=split, part_columns=part_columns, cap=cap,
                                            group_rows=group_rows).items() if v is not None}
    others = dict(split_tunables, rowwise=rowwise, held=held)
    others = {k: v for k, v in others.items() if v is not None}
    if cluster:
        asked = {k: v for k, v in dict(others, resident=resident, narrow=narrow).items() if v is not None}
        _check_forced("cluster", asked, cluster_fits(N, top_k, target),
                      f"no cluster path for rows of {N} columns at top_k {top_k} on {target.arch} (an sm_90a build "
                      f"whose blocks hold {cluster_smem(N, top_k)} bytes of a row's part and its sort)")
        return TopkPlan(False, CLUSTER * max(1, min(rows, max_blocks // CLUSTER)), cluster=True)
    free = not others and resident is None and narrow is None and cluster is None  # every path the planner's
    if resident:
        _check_forced("resident", others, resident_fits(N, top_k, target),
                      f"rows of {N} columns at top_k {top_k} need {resident_smem(N, top_k)} bytes of shared memory, "
                      f"past the {KERNEL['topk_resident'].smem_for(target.arch)} a resident block has on "
                      f"{target.arch}")
    elif resident is None and not others and resident_fits(N, top_k, target):
        wide = narrow is False or not resident_narrow(rows, N, top_k, target)
        resident = resident_us(rows, N, target.num_cus, not wide) < _others_us(rows, N, target.num_cus)
    if resident:
        if narrow is None:
            narrow = resident_narrow(rows, N, top_k, target)
        return TopkPlan(False, max(1, min(rows, max_blocks)), resident=True, narrow=narrow)
    if free and cluster_pays(rows, N, top_k, sorted, target):
        return TopkPlan(False, CLUSTER * rows, cluster=True)
    if narrow is not None:
        raise ValueError(f"narrow={narrow}: only the resident path has a narrow block (pass resident=True)")
    if rowwise and split_tunables:
        raise ValueError(f"rowwise=True: the row-wise path takes none of {builtins.sorted(split_tunables)}")
    if rowwise is None:
        rowwise = not split_tunables and rowwise_pays(rows, N, target.num_cus)
    if held is not None and not rowwise:
        raise ValueError(f"held={held}: only the row-wise path holds rows (pass rowwise=True)")
    if rowwise:
        return TopkPlan(False, max(1, min(rows, max_blocks)), step=sample_step(top_k), r=floor_rank(top_k),
                        rowwise=True, held=0 if held is False else HELD_TILES)
    if part_columns is not None:
        forced_int("part_columns", part_columns, 4, 1 << 30)
        if part_columns % 4:
            raise ValueError(f"part_columns: expected a multiple of 4, got {part_columns}")
    cap = default_cap(top_k) if cap is None else forced_int("cap", cap, 1, 1 << 20)
    g = SPLIT_MAX_ROWS if group_rows is None else forced_int("group_rows", group_rows, 1, SPLIT_MAX_ROWS)
    if split is None:
        split = part_columns is not None or N >= SPLIT_MIN_N
    if not split:
        return TopkPlan(False, max(1, min(rows, max_blocks)))
    g = max(1, min(rows, g))
    grid_rows = max(1, min(g, max_blocks))
    if part_columns is None:
        parts = _parts(g, N, BLOCKS_PER_CU * target.num_cus)
        part_len = -(-(-(-N // parts)) // PART_ALIGN) * PART_ALIGN
    else:
        part_len = part_columns
    parts = max(1, -(-N // part_len))
    row_bytes, cand_off = workspace_layout(top_k, cap)
    return TopkPlan(True, grid_rows, parts, part_len, max(1, min(g * parts, max_blocks)), cap, row_bytes,
                    cand_off, g * row_bytes, sample_step(top_k), floor_rank(top_k), g)
