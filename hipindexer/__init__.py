"""hipindexer: lightning-indexer kernels (fp8 MQA logits) as precompiled HIP code objects, driven from Python.

    import hipindexer
    dev = hipindexer.Device()                      # first GPU; Device("emu:gfx950") where the emulator is built
    logits = hipindexer.fp8_mqa_logits(q, k, kv_scale, weights, ks, ke, device=dev)
    hipindexer.reference.fp8_mqa_logits(...)       # the same math in numpy

The names that reach the runtime (and with it hip-python and cuda-bindings) and the modules resolve on
first use, so `import hipindexer` stays quick and loads no GPU library.

The repository's docs/ folder holds the ops' contract (docs/ops.md), the accuracy contract
(docs/accuracy.md), the runtime and interop (docs/runtime.md) and the benchmark method
(docs/benchmarks.md); docs/index.md says what is where.
"""
import importlib

from .planner import plan_prefill, plan_prefill_chunks

__version__ = "0.1.0"

_FROM = {"fp8_mqa_logits": ".ops", "fp8_paged_mqa_logits": ".decode", "plan_decode": ".decode_plan",
         "quantize_and_cache_keys": ".cache_ops", "gather_cached_keys": ".cache_ops",
         "packed_prefill_windows": ".cache_ops",
         "Device": ".runtime", "DeviceArray": ".runtime", "Stream": ".runtime", "Event": ".runtime"}
_MODULES = ("cache", "gate", "ops", "reference", "runtime", "testing")

__all__ = ["Device", "DeviceArray", "Event", "Stream", "cache", "fp8_mqa_logits", "fp8_paged_mqa_logits", "gate",
           "gather_cached_keys", "packed_prefill_windows", "plan_decode", "plan_prefill", "plan_prefill_chunks",
           "quantize_and_cache_keys", "reference", "testing"]


def __getattr__(name):
    if name in _FROM:
        value = getattr(importlib.import_module(_FROM[name], __name__), name)
    elif name in _MODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_FROM, *_MODULES})
