"""hipindexer: lightning-indexer kernels (fp8 MQA logits) as precompiled HIP code objects, driven from Python.

    import hipindexer
    dev = hipindexer.Device()                      # first GPU; Device("emu:gfx950") where the emulator is built
    logits = hipindexer.fp8_mqa_logits(q, k, kv_scale, weights, ks, ke, device=dev)
    hipindexer.reference.fp8_mqa_logits(...)       # the same math in numpy

The names that reach the runtime (and with it hip-python and cuda-bindings) and the modules resolve on
first use, so `import hipindexer` stays quick and loads no GPU library.

The package in layers, each importing only those before it: arguments, reference, cache, testing and gate
(numpy, never a device) and catalog (every kernel and parameter struct); runtime/ (code objects, memory,
streams: it knows no indexer); plan/ (launch planning in pure Python, never a device); ops/ (the device ops);
check/ and bench/ (the sweeps and benchmarks behind `hipindexer check` and `hipindexer bench`); cli.py.

The repository's docs/ folder holds the ops' contract (docs/ops.md), the accuracy contract
(docs/accuracy.md), the runtime and interop (docs/runtime.md) and the benchmark method
(docs/benchmarks.md); docs/index.md says what is where.
"""
import importlib

from .plan import plan_decode, plan_prefill, plan_prefill_chunks

__version__ = "0.1.0"

_FROM = {"fp8_mqa_logits": ".ops", "fp8_paged_mqa_logits": ".ops", "quantize_and_cache_keys": ".ops",
         "gather_cached_keys": ".ops", "packed_prefill_windows": ".ops", "topk_logits": ".ops",
         "fp8_paged_mqa_topk": ".ops", "paged_topk_workspace": ".ops", "PagedTopkWorkspace": ".ops",
         "fp8_mqa_topk": ".ops", "prefill_topk_workspace": ".ops", "PrefillTopkWorkspace": ".ops",
         "Device": ".runtime", "DeviceArray": ".runtime", "Stream": ".runtime", "Event": ".runtime"}
_MODULES = ("bench", "cache", "check", "gate", "ops", "plan", "reference", "runtime", "testing")

__all__ = ["Device", "DeviceArray", "Event", "PagedTopkWorkspace", "PrefillTopkWorkspace", "Stream", "cache",
           "fp8_mqa_logits", "fp8_mqa_topk", "fp8_paged_mqa_logits", "fp8_paged_mqa_topk", "gate",
           "gather_cached_keys", "packed_prefill_windows", "paged_topk_workspace", "plan_decode", "plan_prefill",
           "plan_prefill_chunks", "prefill_topk_workspace", "quantize_and_cache_keys", "reference", "testing",
           "topk_logits"]


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
