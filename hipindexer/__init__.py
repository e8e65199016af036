"""hipindexer: lightning-indexer kernels (fp8 MQA logits) as precompiled HIP code objects, driven from Python."""
__version__ = "0.1.0"

from .decode import fp8_paged_mqa_logits  # noqa: E402
from .decode_plan import plan_decode  # noqa: E402
from .ops import fp8_mqa_logits  # noqa: E402
from .planner import plan_prefill, plan_prefill_chunks  # noqa: E402

__all__ = ["fp8_mqa_logits", "fp8_paged_mqa_logits", "plan_decode", "plan_prefill", "plan_prefill_chunks"]
