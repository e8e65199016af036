"""How every benchmark times, and the ceilings it measures on the same run (docs/benchmarks.md).

Device time: events around back-to-back calls (or a captured graph's replays),
median of many repeats after warm-up; the benchmarks rotate input sets so the
working set is at least 3x the L2 (L2_BYTES). Host time per call is measured
separately. Ceilings: bandwidth by our copy kernel (read + write bytes) and our
read-only streaming kernel, matrix rate by a peak loop where a target has one.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from ..runtime import DeviceArray, Event, Stream, get_kernel

L2_BYTES = {"sm_90a": 60 << 20, "gfx950": 4 << 20}


def time_device(device, fn, calls: int, repeats: int, warmup: int = 2) -> list[float]:
    """Per-call device microseconds of `fn(i)` over `repeats` timed batches of `calls` back-to-back calls."""
    stream = device.default_stream
    for i in range(warmup):
        fn(i)
    start, end = Event(device), Event(device)
    times = []
    for r in range(repeats):
        start.record(stream)
        for i in range(calls):
            fn(r * calls + i)
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_ms(end) * 1e3 / calls)
    return times


FLUSH_BYTES = 256 << 20


def time_isolated(device, fn, repeats: int, flush_bytes: int = FLUSH_BYTES) -> list[float]:
    """Per-call device microseconds of `fn(i)` timed one call at a time: a memset of `flush_bytes` (the L2 emptied
    of the call's inputs), events around the call alone, and the host waiting for it before the next one. The
    device idles between calls and each call starts cold, so this method and back-to-back batches can rank two
    kernels differently; DeepGEMM's benchmark times this way, and a ratio to it is like for like only when both
    sides are timed by the same method."""
    stream = device.default_stream
    flush = DeviceArray.empty((flush_bytes,), np.uint8, device)
    for i in range(2):
        fn(i)
    start, end = Event(device), Event(device)
    times = []
    for r in range(repeats):
        flush.fill(r & 0x7F, stream)
        start.record(stream)
        fn(r)
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_ms(end) * 1e3)
    return times


def time_batches(device, fn, repeats: int) -> tuple[list[float], int, float]:
    """Time `fn(i)` by the method above: one call to warm up, one timed alone to size the batches (about
    50 ms, at most 50 calls), then `repeats` batches. Returns (per-call device microseconds of each batch,
    calls per batch, seconds of the one call timed alone)."""
    fn(0)
    device.synchronize()
    t0 = time.perf_counter()
    fn(1)
    device.synchronize()
    once = max(time.perf_counter() - t0, 1e-6)
    calls = max(1, min(50, int(0.05 / once)))
    return time_device(device, fn, calls=calls, repeats=repeats), calls, once


def host_us_per_call(device, fn, calls: int = 200) -> float:
    """Microseconds of Python per call, launches queued without waiting."""
    device.synchronize()
    t0 = time.perf_counter()
    for i in range(calls):
        fn(i)
    t1 = time.perf_counter()
    device.synchronize()
    return (t1 - t0) * 1e6 / calls


def figure(x: float, fmt: str = ".0f") -> str:
    """x as `fmt` writes it, or to two significant digits where that would round a nonzero figure to 0: the
    emulator's rates are fractions of a GB/s, and "0 GB/s" would say that nothing moved."""
    s = format(x, fmt)
    return f"{x:.2g}" if x and float(s) == 0 else s


def emulated(device) -> bool:
    """True on the CPU emulator, whose times measure the emulator, not a GPU."""
    return device.backend == "emu"


# On the emulator a ceiling only has to run (its rate is the CPU's): so few bytes, so few times.
EMULATED_CEILING = (1 << 20, 2)


def _ceiling_size(device, nbytes: int, repeats: int) -> tuple[int, int]:
    if emulated(device):
        return min(nbytes, EMULATED_CEILING[0]), min(repeats, EMULATED_CEILING[1])
    return nbytes, repeats


def copy_bandwidth(device, nbytes: int = 2 << 30, repeats: int = 10) -> float:
    """Our copy kernel's (read + write) bytes per second: the bandwidth ceiling (2 GiB moved on a GPU,
    1 MiB on the emulator)."""
    nbytes, repeats = _ceiling_size(device, nbytes, repeats)
    n16 = nbytes // 32
    src = DeviceArray.empty((n16 * 16,), np.uint8, device).fill(1)
    dst = DeviceArray.empty((n16 * 16,), np.uint8, device)
    kern = get_kernel("copy_u32x4", device=device)
    grid = device.num_cus * 8

    def run(_):
        kern.launch(grid, stream=device.default_stream, dst=dst, src=src, n16=n16)
    us = statistics.median(time_device(device, run, calls=5, repeats=repeats))
    return 2 * n16 * 16 / (us * 1e-6)


def read_bandwidth(device, nbytes: int = 2 << 30, repeats: int = 10) -> float:
    """Our read-only streaming kernel's bytes read per second: the read ceiling of a memory-bound kernel (1 MiB
    read on the emulator)."""
    nbytes, repeats = _ceiling_size(device, nbytes, repeats)
    n16 = nbytes // 16
    src = DeviceArray.empty((n16 * 16,), np.uint8, device).fill(1)
    kern = get_kernel("stream_read_u32x4", device=device)
    grid = device.num_cus * 8
    out = DeviceArray.empty((grid,), np.uint32, device)

    def run(_):
        kern.launch(grid, stream=device.default_stream, src=src, out=out, n16=n16)
    us = statistics.median(time_device(device, run, calls=5, repeats=repeats))
    return n16 * 16 / (us * 1e-6)


def time_graph(device, fn, calls: int, repeats: int) -> list[float] | None:
    """Per-call device microseconds of `calls` calls fn(i, stream) captured once into a CUDA graph and
    replayed `repeats` times (events around each replay); None where graphs are not available here
    (not CUDA, or no cuda-bindings)."""
    if device.backend != "cuda":
        return None
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        return None
    s = Stream(device)
    fn(0, s)  # loads everything a launch needs before the capture
    s.synchronize()
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    if int(cu.cuStreamBeginCapture(s.handle, mode)[0]):
        return None
    for i in range(calls):
        fn(i, s)
    err, graph = cu.cuStreamEndCapture(s.handle)
    if int(err):
        return None
    err, gexec = cu.cuGraphInstantiate(graph, 0)
    if int(err):
        cu.cuGraphDestroy(graph)
        return None
    try:
        start, end = Event(device), Event(device)
        cu.cuGraphLaunch(gexec, s.handle)  # warm-up
        times = []
        for _ in range(repeats):
            start.record(s)
            cu.cuGraphLaunch(gexec, s.handle)
            end.record(s)
            end.synchronize()
            times.append(start.elapsed_ms(end) * 1e3 / calls)
        return times
    finally:
        cu.cuGraphExecDestroy(gexec)
        cu.cuGraphDestroy(graph)


PEAK_KERNELS = {"sm_90a": ("wgmma_peak", 2 * 64 * 256 * 32 * 4 * 3)}  # FLOP per loop iteration of one block


def matrix_peak(device, iters: int = 4000, repeats: int = 10) -> float | None:
    """Our fp8 matrix peak loop's FLOP/s (one block per CU), or None where the target has none."""
    key = PEAK_KERNELS.get(device.arch)
    if key is None:
        return None
    name, flop_per_iter = key
    kern = get_kernel(name, device=device)
    grid = device.num_cus
    out = DeviceArray.empty((grid * kern.block,), np.float32, device)

    def run(_):
        kern.launch(grid, stream=device.default_stream, out=out, iters=iters)
    us = statistics.median(time_device(device, run, calls=3, repeats=repeats))
    return flop_per_iter * iters * grid / (us * 1e-6)
