"""A backend over host memory, for the runtime's shared layers and the ops' host side without a GPU.

Allocations are host buffers and copies are memmoves (each host-to-device copy is counted). Kernels do
not run: a launch records what a driver receives (function, grid, block, stream, and the parameter bytes,
copied during the call as drivers copy them), and a fill_u32 launch performs its fill so that tests can
read results back.
"""
import contextlib
import ctypes

import numpy as np

from hipindexer.runtime import Device, register_backend
from hipindexer.runtime import cuda as rcuda
from hipindexer.runtime import device as rdevice
from hipindexer.runtime import dlpack


class HostBackend:
    dlpack_device_type = dlpack.KDL_CPU
    named_streams = rcuda.CudaBackend.named_streams

    def __init__(self, name="fakehost", arch="fake_arch", num_cus=4, wave_size=64):
        self.name, self._arch, self._cus, self.wave_size = name, arch, num_cus, wave_size
        self.bufs, self.launches, self.htod, self._globals = {}, [], 0, {}
        self.shared = []  # each launch's dynamic shared memory bytes, beside launches

    available = lambda self: True  # noqa: E731
    device_count = lambda self: 1  # noqa: E731
    why_unavailable = lambda self: None  # noqa: E731
    bindings_version = lambda self: "test"  # noqa: E731
    library_path = lambda self: "none"  # noqa: E731
    activate = lambda self, i: None  # noqa: E731
    arch = lambda self, i: self._arch  # noqa: E731
    device_name = lambda self, i: "host"  # noqa: E731
    num_cus = lambda self, i: self._cus  # noqa: E731
    total_memory = lambda self, i: 1 << 30  # noqa: E731

    def malloc(self, n, stream):
        b = ctypes.create_string_buffer(n)
        self.bufs[ctypes.addressof(b)] = b
        return ctypes.addressof(b), True

    def free(self, ptr, stream, ordered):
        del self.bufs[ptr]

    def memcpy_htod(self, dst, src, n, s):
        self.htod += 1
        ctypes.memmove(dst, src, n)

    def memcpy_dtoh(self, dst, src, n, s):
        ctypes.memmove(dst, src, n)
    memcpy_dtod = memcpy_dtoh

    def memset_d8(self, dst, v, n, s):
        ctypes.memset(dst, v, n)

    def memset_d32(self, dst, v, n, s):
        np.ctypeslib.as_array((ctypes.c_uint32 * n).from_address(dst))[:] = v

    stream_create = lambda self: 0x100  # noqa: E731
    stream_destroy = stream_synchronize = stream_wait_event = lambda self, *a: None  # noqa: E731
    event_create = lambda self, timing=True: 0x200  # noqa: E731
    event_destroy = event_record = event_synchronize = lambda self, *a: None  # noqa: E731
    event_elapsed_ms = lambda self, start, end: 1.0  # noqa: E731
    device_synchronize = lambda self, i: None  # noqa: E731
    module_load = lambda self, image: image  # noqa: E731
    module_function = lambda self, mod, sym: sym  # noqa: E731
    func_set_max_dynamic_shared = lambda self, fn, n: None  # noqa: E731

    def module_global(self, module, name):
        """A module-scope variable as zeroed host memory of its own (the decode kernel's claim pairs: 8 KiB)."""
        buf = self._globals.setdefault((id(module), name), (ctypes.c_uint8 * 8192)())
        return ctypes.addressof(buf), len(buf)

    def tensor_map_u8(self, address, dims, strides, box, swizzle128):
        """A stand-in for a CUDA tensor map: 128 bytes naming its address, so a test can tell maps apart."""
        return int(address).to_bytes(8, "little") * 16

    def launch_args(self, buf_addr, size):
        kp, kp_data = rcuda.CudaBackend.launch_args(self, buf_addr, size)
        return kp, kp_data, size

    def launch(self, fn, grid, block, shmem, stream, args):
        addr = ctypes.c_uint64.from_address(args[0]).value
        sent = ctypes.string_at(addr, args[2])
        if fn == "hx_fill_u32":
            from hipindexer import catalog
            p = catalog.STRUCT["FillParams"].ctype().from_buffer_copy(sent)
            (ctypes.c_uint32 * p.count).from_address(p.dst)[:] = [p.value] * p.count
        self.launches.append((fn, grid, block, stream, sent))
        self.shared.append(shmem)


class OverlappingHostBackend(HostBackend):
    """A HostBackend that can also launch a kernel to overlap the grid before it, as the CUDA backend does: such a
    launch is recorded like any other and its function named in `overlapped`. Its SMs hold Hopper's shared memory."""
    SHARED_PER_SM = 233472  # 228 KiB, what an H100's and an H200's SM hold for all their blocks

    def __init__(self, name="host_overlap", **kw):
        super().__init__(name=name, **({"arch": "sm_90a", "num_cus": 132, "wave_size": 32} | kw))
        self.overlapped = []

    def shared_per_cu(self, index):
        return self.SHARED_PER_SM

    def launch_overlapping(self, fn, grid, block, shmem, stream, args):
        self.launch(fn, grid, block, shmem, stream, args)
        self.overlapped.append(fn)


@contextlib.contextmanager
def registered(backend: HostBackend):
    """`backend` reachable as Device("<its name>:0") inside the block."""
    register_backend(backend.name, lambda: backend)
    try:
        yield Device(f"{backend.name}:0")
    finally:
        rdevice.BACKENDS.pop(backend.name)
        Device._cache.pop((backend.name, 0), None)
