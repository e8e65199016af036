"""The device ops and the launch plumbing they share.

launch.py: devices and targets, argument adoption and upload, the prepared-launch cache, the checks of out=,
errors= and tunables, the error bits; prefill.py: ``fp8_mqa_logits``; decode.py: ``fp8_paged_mqa_logits``;
cache.py: the paged cache's writer, gather and prefill windows; topk.py: ``topk_logits``, the exact top-k of a
logits array; paged_topk.py: ``fp8_paged_mqa_topk``, the decode top-k composed of the two, and its workspace;
prefill_topk.py: ``fp8_mqa_topk``, the prefill top-k composed the same way, and its workspace;
kv_map.py: the tensor map of a cache that the sm_90a tensor-copy decode kernel reads through.
"""
from .cache import gather_cached_keys, packed_prefill_windows, quantize_and_cache_keys
from .decode import fp8_paged_mqa_logits
from .launch import ERROR_BLOCK_ID, ERROR_LENGTH, ERROR_SLOT, target_of
from .prefill import fp8_mqa_logits
from .paged_topk import PagedTopkWorkspace, fp8_paged_mqa_topk, paged_topk_workspace, workspace_bound
from .prefill_topk import PrefillTopkWorkspace, fp8_mqa_topk, prefill_topk_workspace, prefill_workspace_bound
from .topk import topk_logits

__all__ = ["ERROR_BLOCK_ID", "ERROR_LENGTH", "ERROR_SLOT", "PagedTopkWorkspace", "PrefillTopkWorkspace",
           "fp8_mqa_logits", "fp8_mqa_topk", "prefill_topk_workspace", "prefill_workspace_bound",
           "fp8_paged_mqa_logits", "fp8_paged_mqa_topk", "gather_cached_keys", "packed_prefill_windows",
           "paged_topk_workspace", "quantize_and_cache_keys", "target_of", "topk_logits", "workspace_bound"]
