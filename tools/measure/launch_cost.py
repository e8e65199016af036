#!/usr/bin/env python3
"""Where the host time of one prefill call goes, on a real GPU: the whole op call, the prepared launch,
the backend's launch call, and the bare driver entry point called through ctypes, each in microseconds
per call (median of repeats of 200 back-to-back calls on a small shape, device-resident inputs).

    python -m tools.measure.launch_cost [--device cuda:0] [--heads 64]
"""
from __future__ import annotations

import ctypes
import statistics
import time

import click
import numpy as np

from hipindexer import fp8_mqa_logits, testing  # noqa: E402
from hipindexer.ops import prepared, resident_key  # noqa: E402
from hipindexer.runtime import Device, DeviceArray, get_kernel  # noqa: E402


CALLS, REPEATS = 100, 21
SYNC = None


def per_call(fn) -> float:
    """Host time of a batch of calls, the device drained before each batch: a batch stays far below the
    driver's queue depth, so no call waits for the GPU and the time is the host's alone."""
    calls, repeats = CALLS, REPEATS
    out = []
    for _ in range(repeats):
        SYNC()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) * 1e6 / calls)
    SYNC()
    return statistics.median(out)


@click.command()
@click.option("--device", "spec", default="cuda:0")
@click.option("--heads", default=64)
@click.option("--calls", default=100)
@click.option("--repeats", default=21)
@click.option("--shape", default=(64, 512), type=(int, int))
def main(spec, heads, calls, repeats, shape):
    global CALLS, REPEATS, SYNC
    CALLS, REPEATS = calls, repeats
    dev = Device(spec)
    SYNC = dev.synchronize
    M, N = shape
    inp = testing.prefill_inputs(np.random.default_rng(0), M, N, heads, 128, "causal")
    args = [DeviceArray.from_numpy(a, dev) for a in inp.args()]
    out = DeviceArray.empty((M, N), np.float32, dev)
    fp8_mqa_logits(*args, out=out)
    dev.synchronize()
    key = resident_key((*args, out), True, "fast", None)
    launch, _, _ = prepared(key)
    st = dev.default_stream.handle
    ptrs = [a.ptr for a in args] + [out.ptr]
    b = dev._b
    rows = {"op call": per_call(lambda: fp8_mqa_logits(*args, out=out))}
    dev.synchronize()
    rows["prepared launch"] = per_call(lambda: launch(st, *ptrs))
    fn, grid, block, smem, kargs = launch._fn, launch._grid, launch._block, launch._smem, launch._args
    rows["backend launch"] = per_call(lambda: b.launch(fn, grid, block, smem, st, kargs))
    if dev.backend == "cuda":
        from cuda.bindings import driver as cu
        err, addr, _ = cu.cuGetProcAddress(b"cuLaunchKernel", 12000, cu.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT)
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                                 ctypes.c_void_p, ctypes.c_void_p)
        raw = proto(int(addr))
        f, kp = int(fn), kargs[0]
        g, bl = grid, block
        rows["ctypes cuLaunchKernel"] = per_call(lambda: raw(f, *g, *bl, smem, st, kp, None))
        rows["cuda-bindings cuLaunchKernel"] = per_call(
            lambda: cu.cuLaunchKernel(fn, *g, *bl, smem, st, kp, 0))
        cst = cu.CUstream(st)
        rows["cuda-bindings, CUstream object"] = per_call(
            lambda: cu.cuLaunchKernel(fn, *g, *bl, smem, cst, kp, 0))
        fill = get_kernel("fill_u32", device=dev)
        small = DeviceArray.empty((256,), np.uint32, dev)
        rows["fill_u32 backend launch (tiny kernel)"] = per_call(
            lambda: fill.launch(1, stream=dev.default_stream, dst=small, value=0, count=256))
    for k, v in rows.items():
        print(f"{k:30s} {v:6.2f} us/call")


if __name__ == "__main__":
    main()
