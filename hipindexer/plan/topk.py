"""plan_topk: how hipindexer.topk_logits covers a [rows, N] logits array, from host shapes and a Target.

Two paths, both exact and deterministic (hsaco_src/generic/topk_logits.hip, generic/topk_split_*.hip):

- single: one block per row (rows past the grid cap taken in turn), which reads its row once per radix pass and
  once to compact. The choice for short rows (N < SPLIT_MIN_N), where three launches cost more than they save, and
  for more than SPLIT_MAX_ROWS rows, where the split path's workspace would grow past what it saves.
- split: each row cut into `parts` column ranges, parts * rows blocks (about BLOCKS_PER_CU per unit) reading each
  range twice with 16-byte loads: a histogram of top digits, then the certain entries and candidates into a
  workspace; then one block per row selects among the candidates and sorts. A row whose candidates (the keys
  sharing the top_k-th key's top 11 bits) pass `cap` falls back to the single-block algorithm inside the last
  kernel: correct, as slow as the single path for that row.

The workspace holds, per row, a 2048-bin histogram, two counts, top_k rounded up to a power of two certain entries
and `cap` candidates (8 bytes each): O(rows x (bins + cap)), independent of N.
"""
from __future__ import annotations

from dataclasses import dataclass

from .target import Target, forced_int

SPLIT_MIN_N = 16384      # shorter rows take the single-block kernel
SPLIT_MAX_ROWS = 1024    # more rows take the single-block kernel: the device is full without splitting rows
MIN_PART = 8192          # columns per part at least (unless forced): each block's fixed cost is a 2048-bin scan
BLOCKS_PER_CU = 4        # rows x parts blocks aimed at per unit (256 threads each)
CAP = 8192               # candidates per row the workspace holds
PART_ALIGN = 1024        # part lengths are multiples of this (of 4 at least: every part keeps the row's alignment)
HIST_BYTES = 2048 * 4    # the histogram, then two u32 counts (hsaco_src/common/topk_split.h)
REC_BYTES = HIST_BYTES + 256
MAX_BLOCKS = 1 << 16     # the op's grid cap (hipindexer.ops.topk.MAX_BLOCKS)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class TopkPlan:
    """split=False: the single-block kernel on grid_rows blocks. split=True: kernels 1 and 2 on grid_parts blocks
    over rows x parts items of part_len columns, kernel 3 on grid_rows blocks, over a workspace of
    workspace_bytes (row_bytes per row, certain entries at cert_off, candidates at cand_off)."""
    split: bool
    grid_rows: int
    parts: int = 0
    part_len: int = 0
    grid_parts: int = 0
    cap: int = 0
    row_bytes: int = 0
    cert_off: int = 0
    cand_off: int = 0
    workspace_bytes: int = 0


def workspace_layout(top_k: int, cap: int = CAP) -> tuple[int, int, int]:
    """(row_bytes, cert_off, cand_off) of one row's workspace: a power-of-two class of top_k, so one workspace
    serves every top_k of its class."""
    cert_off = REC_BYTES
    cand_off = cert_off + 8 * _pow2(top_k)
    return cand_off + 8 * cap, cert_off, cand_off


def workspace_bytes(rows: int, top_k: int, cap: int = CAP) -> int:
    """Bytes of the split path's workspace for rows x top_k (what a caller's workspace= must hold, zeroed)."""
    return rows * workspace_layout(top_k, cap)[0]


def plan_topk(rows: int, N: int, top_k: int, target: Target, split=None, part_columns=None, cap=None,
              max_blocks: int = MAX_BLOCKS) -> TopkPlan:
    """The path and its cut for rows x N at top_k on `target`. Tunables (tests, measurements): split (bool:
    force a path), part_columns (columns per part, a multiple of 4: forces the split path's cut), cap (candidates
    per row; a smaller one sends more rows to the fallback).

    >>> from hipindexer.plan import TARGETS
    >>> p = plan_topk(64, 131072, 2048, TARGETS["sm_90a"])
    >>> p.split, p.parts, p.part_len, p.grid_parts
    (True, 9, 15360, 576)
    >>> plan_topk(64, 8192, 2048, TARGETS["sm_90a"]).split
    False
    """
    if split is not None and not isinstance(split, bool):
        raise ValueError(f"split: expected a bool or None, got {split!r}")
    if part_columns is not None:
        forced_int("part_columns", part_columns, 4, 1 << 30)
        if part_columns % 4:
            raise ValueError(f"part_columns: expected a multiple of 4, got {part_columns}")
    cap = CAP if cap is None else forced_int("cap", cap, 1, 1 << 20)
    grid_rows = max(1, min(rows, max_blocks))
    if split is None:
        split = part_columns is not None or (N >= SPLIT_MIN_N and rows <= SPLIT_MAX_ROWS)
    if not split:
        return TopkPlan(False, grid_rows)
    if part_columns is None:
        parts = max(1, min(-(-BLOCKS_PER_CU * target.num_cus // max(rows, 1)), N // MIN_PART))
        part_len = -(-(-(-N // parts)) // PART_ALIGN) * PART_ALIGN
    else:
        part_len = part_columns
    parts = max(1, -(-N // part_len))
    row_bytes, cert_off, cand_off = workspace_layout(top_k, cap)
    return TopkPlan(True, grid_rows, parts, part_len, max(1, min(rows * parts, max_blocks)), cap, row_bytes,
                    cert_off, cand_off, rows * row_bytes)
