"""CUDA backend over cuda.bindings.driver: every driver call of the package lives here.

Mirror of hip.py (the same method set, plus tensor_map_u8: tensor maps are a CUDA feature). Only calls whose Python signature is the
same in cuda-bindings 12.x and 13.x are used (no cuCtxCreate, no
cuDeviceComputeCapability). Contexts are the devices' primary contexts, so
CuPy, JAX and torch see the same context and share pointers and streams.
"""
import ctypes
import os

import numpy as np

try:
    from cuda.bindings import driver as _cu
except ImportError:
    try:
        from cuda import cuda as _cu  # cuda-python < 12.6 layout
    except ImportError:
        _cu = None


class CudaError(RuntimeError):
    pass


def _check(result, what="cuda call"):
    """Accept `(err, *outs)` and a bare CUresult."""
    if isinstance(result, tuple):
        err, outs = result[0], result[1:]
    else:
        err, outs = result, ()
    if int(err) != 0:
        name = getattr(err, "name", None) or f"CUresult {int(err)}"
        raise CudaError(f"{what} failed: {name} ({int(err)})")
    return outs[0] if len(outs) == 1 else (outs or None)


def _attr(name):
    return getattr(_cu.CUdevice_attribute, name)


OVERLAP_MODES = ("sole", "all", "0")  # HIPINDEXER_OVERLAP_LAUNCHES (CudaBackend.__init__)


class CudaBackend:
    name = "cuda"
    dlpack_device_type = 2  # kDLCUDA
    wave_size = 32
    named_streams = {0: "the NULL stream", 1: "CU_STREAM_LEGACY", 2: "CU_STREAM_PER_THREAD"}

    def __init__(self):
        self._error = None
        self._inited = None
        self._ctx = {}
        self._streams = {}  # stream handle -> its CUstream, made once
        self._configs = {}  # (grid, block, shared bytes, stream handle) -> its CUlaunchConfig
        # Every sm_90a kernel waits for the grid before it (hx_grid_dependency_wait), so any may be launched to
        # start during that grid's tail. HIPINDEXER_OVERLAP_LAUNCHES: "sole" (the default) overlaps the launches of
        # kernels whose blocks each hold an SM alone (launch_overlapping); "all" every launch; "0" none.
        self.overlap_launches = os.environ.get("HIPINDEXER_OVERLAP_LAUNCHES", "sole")
        if self.overlap_launches not in OVERLAP_MODES:
            raise ValueError(f"HIPINDEXER_OVERLAP_LAUNCHES: expected one of {', '.join(OVERLAP_MODES)}, "
                             f"got {self.overlap_launches!r}")

    def library_path(self):
        return "libcuda.so.1 (system search)"

    def bindings_version(self):
        try:
            import cuda.bindings
            return f"cuda-bindings {cuda.bindings.__version__}"
        except Exception:
            return None

    def available(self):
        if self._inited is None:
            if _cu is None:
                self._error, self._inited = "cuda-bindings is not installed", False
                return False
            try:
                res = _cu.cuInit(0)
                err = res[0] if isinstance(res, tuple) else res
                self._inited = int(err) == 0
                if not self._inited:
                    self._error = f"cuInit: {getattr(err, 'name', int(err))}"
            except Exception as e:  # cuda.pathfinder's DynamicLibNotFoundError when there is no driver
                self._error, self._inited = f"{type(e).__name__}: {e}", False
        return self._inited

    def why_unavailable(self):
        return self._error

    def device_count(self):
        return int(_check(_cu.cuDeviceGetCount(), "cuDeviceGetCount")) if self.available() else 0

    def runtime_version(self):
        return int(_check(_cu.cuDriverGetVersion(), "cuDriverGetVersion"))

    # -- device info --
    def _dev(self, index):
        return _check(_cu.cuDeviceGet(index), "cuDeviceGet")

    def activate(self, index):
        ctx = self._ctx.get(index)
        if ctx is None:
            ctx = self._ctx[index] = _check(_cu.cuDevicePrimaryCtxRetain(self._dev(index)), "cuDevicePrimaryCtxRetain")
        _check(_cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def _attr(self, name, index):
        return int(_check(_cu.cuDeviceGetAttribute(_attr(name), self._dev(index)), name))

    def arch(self, index):
        major = self._attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", index)
        minor = self._attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", index)
        # wgmma/setmaxnreg code is built arch-specific ("a"); a 9.0 part runs sm_90a objects
        return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")

    def device_name(self, index):
        raw = _check(_cu.cuDeviceGetName(256, self._dev(index)), "cuDeviceGetName")
        return bytes(raw).split(b"\0", 1)[0].decode(errors="replace")

    def shared_per_cu(self, index):
        """Shared memory bytes one SM holds for all its resident blocks."""
        return self._attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", index)

    def num_cus(self, index):
        return self._attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", index)

    def total_memory(self, index):
        return int(_check(_cu.cuDeviceTotalMem(self._dev(index)), "cuDeviceTotalMem"))

    def device_synchronize(self, index):
        self.activate(index)
        _check(_cu.cuCtxSynchronize(), "cuCtxSynchronize")

    # -- memory: returns (ptr, stream_ordered) --
    def malloc(self, nbytes, stream):
        res = _cu.cuMemAllocAsync(nbytes, stream)
        if int(res[0]) == 0:
            return int(res[1]), True
        if res[0] != _cu.CUresult.CUDA_ERROR_NOT_SUPPORTED:
            _check(res, f"cuMemAllocAsync({nbytes})")
        return int(_check(_cu.cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})")), False

    def free(self, ptr, stream, stream_ordered):
        if stream_ordered:
            _check(_cu.cuMemFreeAsync(ptr, stream), "cuMemFreeAsync")
        else:
            _check(_cu.cuMemFree(ptr), "cuMemFree")

    def memcpy_htod(self, dst, src_host, nbytes, stream):
        _check(_cu.cuMemcpyHtoDAsync(dst, src_host, nbytes, stream), "cuMemcpyHtoDAsync")

    def memcpy_dtoh(self, dst_host, src, nbytes, stream):
        _check(_cu.cuMemcpyDtoHAsync(dst_host, src, nbytes, stream), "cuMemcpyDtoHAsync")

    def memcpy_dtod(self, dst, src, nbytes, stream):
        _check(_cu.cuMemcpyDtoDAsync(dst, src, nbytes, stream), "cuMemcpyDtoDAsync")

    def memset_d8(self, dst, value, count, stream):
        _check(_cu.cuMemsetD8Async(dst, value, count, stream), "cuMemsetD8Async")

    def memset_d32(self, dst, value, count, stream):
        _check(_cu.cuMemsetD32Async(dst, value, count, stream), "cuMemsetD32Async")

    # -- streams and events --
    def stream_create(self):
        return int(_check(_cu.cuStreamCreate(int(_cu.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate"))

    def stream_destroy(self, stream):
        _check(_cu.cuStreamDestroy(stream), "cuStreamDestroy")

    def stream_synchronize(self, stream):
        _check(_cu.cuStreamSynchronize(stream), "cuStreamSynchronize")

    def stream_wait_event(self, stream, event):
        _check(_cu.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")

    def event_create(self, timing=True):
        flags = 0 if timing else int(_cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        return int(_check(_cu.cuEventCreate(flags), "cuEventCreate"))

    def event_destroy(self, event):
        _check(_cu.cuEventDestroy(event), "cuEventDestroy")

    def event_record(self, event, stream):
        _check(_cu.cuEventRecord(event, stream), "cuEventRecord")

    def event_synchronize(self, event):
        _check(_cu.cuEventSynchronize(event), "cuEventSynchronize")

    def event_elapsed_ms(self, start, end):
        fn = getattr(_cu, "cuEventElapsedTime", None) or _cu.cuEventElapsedTime_v2
        return float(_check(fn(start, end), "cuEventElapsedTime"))

    # -- modules and launch --
    def module_load(self, image: bytes):
        return _check(_cu.cuModuleLoadData(image), "cuModuleLoadData")

    def module_unload(self, module):
        _check(_cu.cuModuleUnload(module), "cuModuleUnload")

    def module_function(self, module, symbol):
        return _check(_cu.cuModuleGetFunction(module, symbol.encode()), f"cuModuleGetFunction({symbol})")

    def module_global(self, module, name):
        """(address, bytes) of a module-scope variable."""
        ptr, nbytes = _check(_cu.cuModuleGetGlobal(module, name.encode()), f"cuModuleGetGlobal({name})")
        return int(ptr), int(nbytes)

    def func_set_max_dynamic_shared(self, fn, nbytes):
        """Opt a function in to `nbytes` of dynamic shared memory (needed past 48 KiB)."""
        attr = _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(_cu.cuFuncSetAttribute(fn, attr, int(nbytes)), f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {nbytes})")

    def tensor_map_u8(self, ptr, dims, strides, box, swizzle128):
        """The 128 bytes of a CUtensorMap over uint8 elements (cuTensorMapEncodeTiled): dims and box innermost
        first, strides (bytes) of dims 1.., element strides 1, no interleave, the 128-byte swizzle or none,
        256-byte L2 promotion, no out-of-bounds fill."""
        T = _cu
        sw = T.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if swizzle128 else \
            T.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE
        m = _check(T.cuTensorMapEncodeTiled(
            T.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, len(dims), int(ptr),
            [T.cuuint64_t(int(d)) for d in dims], [T.cuuint64_t(int(x)) for x in strides],
            [T.cuuint32_t(int(b)) for b in box], [T.cuuint32_t(1)] * len(dims),
            T.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
            T.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            T.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
        return ctypes.string_at(m.getPtr(), 128)

    def launch_args(self, buf_addr, size):
        """kernelParams for one by-value struct: a void*[1] whose entry points at the struct bytes."""
        kp = np.array([buf_addr], dtype=np.uint64)
        return (kp.ctypes.data, kp)  # the array must outlive every launch

    def launch_overlapping(self, fn, grid, block, shared_mem, stream, args):
        """launch, started during the tail of the grid before it on the stream (programmatic stream
        serialization) unless overlap_launches is "0"."""
        if self.overlap_launches != "0":
            self._launch_ex(fn, grid, block, shared_mem, stream, args)
        else:
            self.launch(fn, grid, block, shared_mem, stream, args)

    def _launch_ex(self, fn, grid, block, shared_mem, stream, args):
        config = self._configs.get((grid, block, shared_mem, stream))
        if config is None:
            config = self._launch_config(grid, block, shared_mem, stream)
        err = _cu.cuLaunchKernelEx(config, fn, args[0], 0)[0]
        if err:
            _check(err, "cuLaunchKernelEx")

    def launch(self, fn, grid, block, shared_mem, stream, args):
        if self.overlap_launches == "all":
            return self._launch_ex(fn, grid, block, shared_mem, stream, args)
        # The binding wraps an int stream in a new CUstream on every call; a launch takes the one kept here.
        cs = self._streams.get(stream)
        if cs is None:
            cs = self._streams[stream] = _cu.CUstream(stream)
        err = _cu.cuLaunchKernel(fn, *grid, *block, shared_mem, cs, args[0], 0)[0]
        if err:
            _check(err, "cuLaunchKernel")

    def _launch_config(self, grid, block, shared_mem, stream):
        """A CUlaunchConfig with programmatic stream serialization, kept for the next launch of the same
        geometry on the same stream (building one costs more than the launch)."""
        if len(self._configs) >= 4096:
            self._configs.clear()
        attr = _cu.CUlaunchAttribute()
        attr.id = _cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        c = _cu.CUlaunchConfig()
        c.gridDimX, c.gridDimY, c.gridDimZ = grid
        c.blockDimX, c.blockDimY, c.blockDimZ = block
        c.sharedMemBytes, c.hStream = shared_mem, _cu.CUstream(stream)
        c.attrs, c.numAttrs = [attr], 1
        self._configs[(grid, block, shared_mem, stream)] = c
        return c


_backend = None


def backend():
    global _backend
    if _backend is None:
        _backend = CudaBackend()
    return _backend
