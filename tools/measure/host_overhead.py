"""Python microseconds per fp8_mqa_logits call, without a GPU: a null backend whose launch does nothing.

What an inference stack pays per layer per step on the host, less the driver's own launch cost:
device-resident inputs (DeviceArrays), out= given, the arrays rotated between a few sets as the
benchmark does. Timeit-style: the median over repeats of the mean over a batch of calls.

    python -m tools.measure.host_overhead --arch sm_90a --shapes 128x1024,4096x32768 --heads 64
"""
import ctypes
import statistics
import time

import click
import numpy as np

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


@click.command()
@click.option("--arch", type=click.Choice(sorted(WAVE)), default="sm_90a")
@click.option("--shapes", default="128x1024,4096x32768", help="MxN,MxN,...")
@click.option("--heads", default="64,32")
@click.option("--sets", default=4, help="input sets the calls rotate between")
def main(arch, shapes, heads, sets):
    load_manifest()  # fail early when the kernels are not built
    backend = NullBackend(arch)
    register_backend("null", lambda: backend)
    dev = Device("null:0")
    fp8, f32, i32 = np.dtype("float8_e4m3fn"), np.float32, np.int32
    for shape in shapes.split(","):
        M, N = (int(x) for x in shape.split("x"))
        for H in (int(h) for h in heads.split(",")):
            args = [(DeviceArray.empty((M, H, 128), fp8, dev), DeviceArray.empty((N, 128), fp8, dev),
                     DeviceArray.empty(N, f32, dev), DeviceArray.empty((M, H), f32, dev),
                     DeviceArray.empty(M, i32, dev), DeviceArray.empty(M, i32, dev)) for _ in range(sets)]
            outs = [DeviceArray.empty((M, N), f32, dev) for _ in range(sets)]

            def call(i, args=args, outs=outs):
                j = i % sets
                fp8_mqa_logits(*args[j], out=outs[j])
            n0 = backend.launches
            wall, cpu = us_per_call(call)
            assert backend.launches > n0
            print(f"{arch} M={M} N={N} H={H}: {wall:.2f} us per call, {cpu:.2f} us of CPU "
                  "(medians of 15 batches of 2000 calls)")


if __name__ == "__main__":
    main()
