"""Launch planning in pure Python, from host shapes and a small description of the target; never a device.

target.py: ``Target``, ``TARGETS`` and the accumulation choices; menu.py: the kernels an op can run and the one
rule both planners pick by; prefill.py: ``plan_prefill``; decode.py: ``plan_decode``; chunks.py:
``plan_prefill_chunks``; topk.py: ``plan_topk``; bounds.py: the top-k ops' workspace bounds.
"""
from .chunks import plan_prefill_chunks
from .decode import DecodePlan, plan_decode
from .prefill import PrefillPlan, plan_prefill
from .target import ACCUMULATIONS, TARGETS, Target, check_accumulation
from .topk import TopkPlan, plan_topk

__all__ = ["ACCUMULATIONS", "DecodePlan", "PrefillPlan", "TARGETS", "Target", "TopkPlan", "check_accumulation",
           "plan_decode", "plan_prefill", "plan_prefill_chunks", "plan_topk"]
