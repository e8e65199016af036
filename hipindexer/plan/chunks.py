"""Chunking a long prefill so each chunk's logits fit a memory budget."""
from __future__ import annotations


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
