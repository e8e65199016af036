"""Chunking a long prefill so each chunk's memory fits a budget."""
from __future__ import annotations

from .bounds import SLACK, prefill_workspace_bound


def plan_prefill_chunks(query_lens, key_lens, budget_bytes: int = 512 << 20, top_k: int | None = None,
                        key_bytes: int = 132, parts: int = 1) -> list[list[tuple[int, int, int]]]:
    """Pack prefill requests into chunks whose memory fits a budget (vLLM style).

    query_lens[r] query rows of request r attend to its key_lens[r] keys. A chunk of M rows and N keys costs:
      top_k None (the logits op): its logits, M * N * 4 bytes;
      top_k given (fp8_mqa_topk, which never holds the logits): its keys, N * key_bytes (a key row and its
        scale: 132 at D = 128), its outputs, M * top_k * 8 (indices and values), and the top-k workspace's
        bound, 8 * top_k * M * (1 + parts) + 1 MiB (prefill_workspace_bound). The keys are then the only term
        that grows with the context. parts: the key-split parts whose candidates that workspace keeps apart, 1
        for the composed path; the fused path (a workspace made with H and D) keeps its filter's split, at least
        3 (prefill_topk_fused.MIN_PARTS) and more for few rows against many keys: pass its workspace's
        layout.parts, or a bound on it.
    Returns chunks, each a list of (request, row_start, row_end): whole requests packed greedily in order, and
    a request too long for the budget on its own cut along its query rows into pieces as long as fit beside
    its keys (at least one row; each piece reuses the same keys). A chunk's N is the sum of its requests'
    key_lens, its M the sum of the rows. Requests with no query rows are left out. Raises ValueError for a
    budget below 4 bytes, lists of different lengths, a negative length, or a top_k below 1.

    >>> plan_prefill_chunks([100, 3000], [100, 3000], budget_bytes=8 << 20)
    [[(0, 0, 100)], [(1, 0, 699)], [(1, 699, 1398)], [(1, 1398, 2097)], [(1, 2097, 2796)], [(1, 2796, 3000)]]
    >>> plan_prefill_chunks([100, 3000], [100, 3000], budget_bytes=8 << 20, top_k=64)
    [[(0, 0, 100), (1, 0, 3000)]]
    """
    if budget_bytes < 4:
        raise ValueError(f"budget_bytes: expected >= 4, got {budget_bytes}")
    if len(query_lens) != len(key_lens):
        raise ValueError(f"query_lens and key_lens: lengths differ ({len(query_lens)} vs {len(key_lens)})")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k: expected None or >= 1, got {top_k}")
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ValueError(f"parts: expected an int >= 1, got {parts!r}")
    if top_k is None:
        cost = lambda m, n: 4 * m * n  # noqa: E731
        rows_beside = lambda n: budget_bytes // (4 * max(n, 1))  # noqa: E731
    else:
        per_row = 8 * top_k + prefill_workspace_bound(1, top_k, parts) - SLACK  # outputs and workspace, a row
        cost = lambda m, n: n * key_bytes + 8 * top_k * m + prefill_workspace_bound(m, top_k, parts)  # noqa: E731
        rows_beside = lambda n: (budget_bytes - n * key_bytes - SLACK) // per_row  # noqa: E731
    chunks, cur, cur_m, cur_n = [], [], 0, 0
    for r, (q, k) in enumerate(zip(query_lens, key_lens)):
        if q < 0 or k < 0:
            raise ValueError(f"request {r}: query and key lengths must be >= 0, got ({q}, {k})")
        if q == 0:
            continue
        if cost(cur_m + q, cur_n + k) <= budget_bytes:
            cur.append((r, 0, q))
            cur_m, cur_n = cur_m + q, cur_n + k
            continue
        if cur:
            chunks.append(cur)
            cur, cur_m, cur_n = [], 0, 0
        if cost(q, k) <= budget_bytes:
            cur, cur_m, cur_n = [(r, 0, q)], q, k
            continue
        rows = max(1, rows_beside(k))
        for a in range(0, q, rows):
            chunks.append([(r, a, min(q, a + rows))])
    if cur:
        chunks.append(cur)
    return chunks
