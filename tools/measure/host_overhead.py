"""Python microseconds per op call, without a GPU: a null backend whose launch does nothing.

What an inference stack pays per layer per step on the host, less the driver's own launch cost:
device-resident inputs (DeviceArrays), out= given, the arrays rotated between a few sets as the
benchmark does. Timeit-style: the median over repeats of the mean over a batch of calls.

    python -m tools.measure.host_overhead --arch sm_90a --shapes 128x1024,4096x32768 --heads 64
    python -m tools.measure.host_overhead --op topk          # fp8_mqa_topk, top_k 2048, a fused workspace made once
    python -m tools.measure.host_overhead --op topk_composed # ... its composed path (a workspace without H and D)
    python -m tools.measure.host_overhead --op paged_topk    # fp8_paged_mqa_topk: --shapes BxCONTEXT, next_n 1
    python -m tools.measure.host_overhead --op paged_logits  # fp8_paged_mqa_logits: --shapes BxCONTEXT, next_n 1

The composed top-k ops launch two kernels per key chunk, so their cost is reported with the launches per call.
"""
import ctypes
import statistics
import time

import click
import numpy as np

import hipindexer  # noqa: E402
from hipindexer import fp8_mqa_logits  # noqa: E402
from hipindexer.runtime import Device, DeviceArray, register_backend  # noqa: E402
from hipindexer.runtime import cuda as rcuda  # noqa: E402
from hipindexer.runtime.module import load_manifest  # noqa: E402

WAVE = {"sm_90a": 32, "gfx950": 64}
UNITS = {"sm_90a": 132, "gfx950": 256}


class NullBackend:
    """A device that allocates addresses, loads nothing and launches nothing."""
    name, dlpack_device_type = "null", 2
    named_streams = {0: "the NULL stream", 1: "CU_STREAM_LEGACY", 2: "CU_STREAM_PER_THREAD"}

    def __init__(self, arch):
        self._arch, self.wave_size, self._next, self.launches = arch, WAVE[arch], 1 << 40, 0

    available = lambda self: True  # noqa: E731
    device_count = lambda self: 1  # noqa: E731
    why_unavailable = lambda self: None  # noqa: E731
    bindings_version = lambda self: "none"  # noqa: E731
    library_path = lambda self: "none"  # noqa: E731
    activate = lambda self, i: None  # noqa: E731
    arch = lambda self, i: self._arch  # noqa: E731
    device_name = lambda self, i: f"null {self._arch}"  # noqa: E731
    num_cus = lambda self, i: UNITS[self._arch]  # noqa: E731
    total_memory = lambda self, i: 1 << 40  # noqa: E731
    device_synchronize = lambda self, i: None  # noqa: E731

    def malloc(self, nbytes, stream):
        ptr, self._next = self._next, self._next + (-(-nbytes // 256) * 256 or 256)
        return ptr, True

    free = memcpy_htod = memcpy_dtoh = memcpy_dtod = memset_d8 = memset_d32 = lambda self, *a: None  # noqa: E731
    stream_create = lambda self: 0x100  # noqa: E731
    event_create = lambda self, timing=True: 0x200  # noqa: E731
    stream_destroy = stream_synchronize = stream_wait_event = lambda self, *a: None  # noqa: E731
    event_destroy = event_record = event_synchronize = lambda self, *a: None  # noqa: E731
    module_load = lambda self, image: image  # noqa: E731
    module_function = lambda self, module, symbol: symbol  # noqa: E731
    func_set_max_dynamic_shared = lambda self, fn, n: None  # noqa: E731
    module_global = lambda self, module, name: (0x1000, 8192)  # noqa: E731  (the decode kernel's claim pairs)
    tensor_map_u8 = lambda self, *a: bytes(128)  # noqa: E731  (the decode TMA kernel's key map)
    launch_args = rcuda.CudaBackend.launch_args

    def launch(self, fn, grid, block, shared_mem, stream, args):
        self.struct_at = ctypes.c_uint64.from_address(args[0]).value  # where a driver reads the parameters
        self.launches += 1


def us_per_call(fn, calls=2000, repeats=15) -> tuple[float, float]:
    """Median over `repeats` batches of `calls` of the microseconds per call: (wall clock, this process's CPU
    time). On a shared machine the CPU time is the steadier estimate of what the call costs."""
    wall, cpu = [], []
    for r in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(calls):
            fn(i)
        wall.append((time.perf_counter() - t0) * 1e6 / calls)
        cpu.append((time.process_time() - c0) * 1e6 / calls)
    return statistics.median(wall), statistics.median(cpu)


def _prefill_call(dev, op, M, N, H, sets):
    fp8, f32, i32 = np.dtype("float8_e4m3fn"), np.float32, np.int32
    args = [(DeviceArray.empty((M, H, 128), fp8, dev), DeviceArray.empty((N, 128), fp8, dev),
             DeviceArray.empty(N, f32, dev), DeviceArray.empty((M, H), f32, dev),
             DeviceArray.empty(M, i32, dev), DeviceArray.empty(M, i32, dev)) for _ in range(sets)]
    if op == "logits":
        outs = [DeviceArray.empty((M, N), f32, dev) for _ in range(sets)]

        def call(i):
            j = i % sets
            fp8_mqa_logits(*args[j], out=outs[j])
        return call
    fused = {} if op == "topk_composed" else dict(H=H, D=128)
    ws = hipindexer.prefill_topk_workspace(M, N, TOP_K, device=dev, **fused)
    outs = [DeviceArray.empty((M, TOP_K), i32, dev) for _ in range(sets)]

    def call(i):
        j = i % sets
        hipindexer.fp8_mqa_topk(*args[j], TOP_K, workspace=ws, out=outs[j])
    return call


def _paged_args(dev, B, ctx, H, sets, block, next_n):
    u8, f32, i32 = np.uint8, np.float32, np.int32
    blocks = -(-ctx // block)
    return blocks, [(DeviceArray.empty((B, next_n, H, 128), np.dtype("float8_e4m3fn"), dev),
                     DeviceArray.empty((B * blocks, block, 132), u8, dev), DeviceArray.empty((B * next_n, H), f32, dev),
                     DeviceArray.empty(B, i32, dev), DeviceArray.empty((B, blocks), i32, dev)) for _ in range(sets)]


def _paged_logits_call(dev, B, ctx, H, sets, block=64, next_n=1):
    blocks, args = _paged_args(dev, B, ctx, H, sets, block, next_n)
    outs = [DeviceArray.empty((B * next_n, blocks * block), np.float32, dev) for _ in range(sets)]

    def call(i):
        j = i % sets
        hipindexer.fp8_paged_mqa_logits(*args[j], blocks * block, clean_logits=True, out=outs[j])
    return call


def _paged_topk_call(dev, B, ctx, H, sets, block=64, next_n=1):
    i32 = np.int32
    blocks, args = _paged_args(dev, B, ctx, H, sets, block, next_n)
    ws = hipindexer.paged_topk_workspace(B, next_n, TOP_K, blocks * block, block, device=dev, heads=H)
    outs = [DeviceArray.empty((B * next_n, TOP_K), i32, dev) for _ in range(sets)]

    def call(i):
        j = i % sets
        hipindexer.fp8_paged_mqa_topk(*args[j], blocks * block, TOP_K, workspace=ws, out=outs[j])
    return call


TOP_K = 2048


@click.command()
@click.option("--arch", type=click.Choice(sorted(WAVE)), default="sm_90a")
@click.option("--op", type=click.Choice(["logits", "topk", "topk_composed", "paged_topk", "paged_logits"]),
              default="logits")
@click.option("--shapes", default=None, help="MxN,... (paged_topk: BxCONTEXT,...); default by op")
@click.option("--heads", default="64,32")
@click.option("--sets", default=4, help="input sets the calls rotate between")
def main(arch, op, shapes, heads, sets):
    load_manifest()  # fail early when the kernels are not built
    backend = NullBackend(arch)
    register_backend("null", lambda: backend)
    dev = Device("null:0")
    shapes = shapes or {"logits": "128x1024,4096x32768", "topk": "4096x32768,1024x131072",
                        "topk_composed": "4096x32768,1024x131072",
                        "paged_topk": "64x131072,16x32768", "paged_logits": "64x131072,16x32768,4x8192"}[op]
    for shape in shapes.split(","):
        a, b = (int(x) for x in shape.split("x"))
        for H in (int(h) for h in heads.split(",")):
            paged = {"paged_topk": _paged_topk_call, "paged_logits": _paged_logits_call}.get(op)
            call = paged(dev, a, b, H, sets) if paged else _prefill_call(dev, op, a, b, H, sets)
            call(0)
            n0 = backend.launches
            call(1)
            per = backend.launches - n0
            assert per > 0
            wall, cpu = us_per_call(call, calls=2000 if op == "logits" else 200)
            name = f"B={a} context={b}" if paged else f"M={a} N={b}"
            print(f"{arch} {op} {name} H={H}: {wall:.2f} us per call, {cpu:.2f} us of CPU, {per} launches "
                  f"(medians of 15 batches)")


if __name__ == "__main__":
    main()
