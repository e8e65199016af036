"""The memory bounds of the top-k ops' workspaces (docs/ops.md, "Top-k"): formulas of the rows alone, never of
the keys, so that a caller can size memory before it knows the context. The ops size their chunks to stay within
them; plan_prefill_chunks budgets with them."""
from __future__ import annotations

SLACK = 1 << 20  # both bounds' constant: room for a chunk of useful width when the rows are few


def prefill_workspace_bound(M: int, top_k: int, parts: int = 1) -> int:
    """The most bytes fp8_mqa_topk's workspace may take for M query rows: 8 * top_k * M * (1 + parts) + 1 MiB
    (parts: key-split parts whose candidates are kept apart; the composed path keeps one chunk, parts = 1)."""
    return 8 * top_k * M * (1 + parts) + SLACK


def workspace_bound(B: int, next_n: int, top_k: int, units: int) -> int:
    """The most bytes fp8_paged_mqa_topk's workspace may take: 8 * top_k * next_n * (2B + units) + 1 MiB, for a
    batch of B sequences of next_n rows on a device of `units` CUs (SMs)."""
    return 8 * top_k * next_n * (2 * B + units) + SLACK
