"""HIP backend over hip-python: every hip-python call of the package lives here.

Handles cross this boundary as plain ints (device pointers, streams, events) so
foreign handles (CuPy, JAX) and our own are interchangeable; modules and
functions stay as hip-python objects. Importing this module never touches
libamdhip64: hip-python resolves symbols lazily on first call.
"""
import ctypes

import numpy as np

try:
    from rocm.bindings import hip as _hip
except ImportError:  # pre-10.x monolithic wheel
    try:
        from hip import hip as _hip
    except ImportError:
        _hip = None


class HipError(RuntimeError):
    pass


def _check(result, what="hip call"):
    """Accept `(err, *outs)` and a bare error enum (hip-python's codegen returns both shapes)."""
    if isinstance(result, tuple):
        err, outs = result[0], result[1:]
    else:
        err, outs = result, ()
    if int(err) != 0:
        # hipGetErrorString is unusable when the library failed to load; the enum always has a name.
        name = getattr(err, "name", None) or f"hipError {int(err)}"
        raise HipError(f"{what} failed: {name} ({int(err)})")
    return outs[0] if len(outs) == 1 else (outs or None)


def _text(x):
    if isinstance(x, (bytes, bytearray)):
        return bytes(x).split(b"\0", 1)[0].decode(errors="replace")
    return str(x).split("\0", 1)[0]


class HipBackend:
    name = "hip"
    dlpack_device_type = 10  # kDLROCM
    wave_size = 64
    named_streams = {0: "the null stream", 2: "hipStreamPerThread"}

    def __init__(self, library=None):
        self.library = library  # another libamdhip64.so (e.g. a CPU emulator); None = hip-python's search
        self._error = None
        if library is not None and _hip is not None:
            _redirect_library(library)

    # -- probing (never raises) --
    def library_path(self):
        if self.library:
            return str(self.library)
        try:
            from rocm.bindings.util.paths import get_library_path
            return _text(get_library_path("amdhip64"))
        except Exception:
            return "libamdhip64.so"

    def bindings_version(self):
        try:
            import rocm.version as v
            return f"rocm.bindings {v.ROCM_VERSION_NAME} (HIP {v.HIP_VERSION_NAME})"
        except Exception:
            return "hip-python (pre-10.x)" if _hip is not None else None

    def available(self):
        if _hip is None:
            self._error = "hip-python is not installed"
            return False
        if hasattr(_hip, "has_symbol"):
            ok = bool(_hip.has_symbol("hipModuleLaunchKernel"))
            if not ok:
                self._error = (f"hip-python could not load {self.library_path()} (searched: a bundled copy, rocm_sdk, "
                               "$ROCM_PATH/$ROCM_HOME, /opt/rocm/lib, then the loader path)")
            return ok
        try:
            _hip.hipGetDeviceCount()
            return True
        except Exception as e:  # older hip-python raises from the lazy dlopen
            self._error = f"{type(e).__name__}: {e}"
            return False

    def why_unavailable(self):
        return self._error

    def device_count(self):
        if not self.available():
            return 0
        res = _hip.hipGetDeviceCount()
        err = res[0] if isinstance(res, tuple) else res
        if int(err) != 0:
            self._error = f"hipGetDeviceCount: {getattr(err, 'name', int(err))}"
            return 0
        return int(res[1])

    def runtime_version(self):
        return _check(_hip.hipRuntimeGetVersion(), "hipRuntimeGetVersion")

    # -- device info --
    def activate(self, index):
        _check(_hip.hipSetDevice(index), "hipSetDevice")

    def _props(self, index):
        try:  # 10.x: (deviceId) -> (err, props)
            return _check(_hip.hipGetDeviceProperties(index), "hipGetDeviceProperties")
        except TypeError:  # <= 7.x: (props, deviceId) -> (err,)
            props = _hip.hipDeviceProp_t()
            _check(_hip.hipGetDeviceProperties(props, index), "hipGetDeviceProperties")
            return props

    def _attr(self, name, index):
        return int(_check(_hip.hipDeviceGetAttribute(getattr(_hip.hipDeviceAttribute_t, name), index), name))

    def arch(self, index):
        return _text(self._props(index).gcnArchName).split(":", 1)[0]  # "gfx950:sramecc+:xnack-"

    def device_name(self, index):
        return _text(self._props(index).name)

    def num_cus(self, index):
        return self._attr("hipDeviceAttributeMultiprocessorCount", index)

    def total_memory(self, index):
        return int(_check(_hip.hipDeviceTotalMem(index), "hipDeviceTotalMem"))

    def device_synchronize(self, index):
        self.activate(index)
        _check(_hip.hipDeviceSynchronize(), "hipDeviceSynchronize")

    # -- memory: returns (ptr, stream_ordered) --
    def malloc(self, nbytes, stream):
        res = _hip.hipMallocAsync(nbytes, stream)
        if int(res[0]) == 0:
            return int(res[1]), True
        if res[0] != _hip.hipError_t.hipErrorNotSupported:
            _check(res, f"hipMallocAsync({nbytes})")
        return int(_check(_hip.hipMalloc(nbytes), f"hipMalloc({nbytes})")), False

    def free(self, ptr, stream, stream_ordered):
        if stream_ordered:
            _check(_hip.hipFreeAsync(ptr, stream), "hipFreeAsync")
        else:
            _check(_hip.hipFree(ptr), "hipFree")

    def memcpy_htod(self, dst, src_host, nbytes, stream):
        _check(_hip.hipMemcpyHtoDAsync(dst, src_host, nbytes, stream), "hipMemcpyHtoDAsync")

    def memcpy_dtoh(self, dst_host, src, nbytes, stream):
        _check(_hip.hipMemcpyDtoHAsync(dst_host, src, nbytes, stream), "hipMemcpyDtoHAsync")

    def memcpy_dtod(self, dst, src, nbytes, stream):
        _check(_hip.hipMemcpyDtoDAsync(dst, src, nbytes, stream), "hipMemcpyDtoDAsync")

    def memset_d8(self, dst, value, count, stream):
        _check(_hip.hipMemsetD8Async(dst, value, count, stream), "hipMemsetD8Async")

    def memset_d32(self, dst, value, count, stream):
        value = int(value) & 0xFFFFFFFF
        value -= (value >> 31) << 32  # hipMemsetD32Async takes a C int: pass the same 32 bits signed
        _check(_hip.hipMemsetD32Async(dst, value, count, stream), "hipMemsetD32Async")

    # -- streams and events --
    def stream_create(self):
        return int(_check(_hip.hipStreamCreateWithFlags(_hip.hipStreamNonBlocking), "hipStreamCreateWithFlags"))

    def stream_destroy(self, stream):
        _check(_hip.hipStreamDestroy(stream), "hipStreamDestroy")

    def stream_synchronize(self, stream):
        _check(_hip.hipStreamSynchronize(stream), "hipStreamSynchronize")

    def stream_wait_event(self, stream, event):
        _check(_hip.hipStreamWaitEvent(stream, event, 0), "hipStreamWaitEvent")

    def event_create(self, timing=True):
        flags = 0 if timing else _hip.hipEventDisableTiming
        return int(_check(_hip.hipEventCreateWithFlags(flags), "hipEventCreateWithFlags"))

    def event_destroy(self, event):
        _check(_hip.hipEventDestroy(event), "hipEventDestroy")

    def event_record(self, event, stream):
        _check(_hip.hipEventRecord(event, stream), "hipEventRecord")

    def event_synchronize(self, event):
        _check(_hip.hipEventSynchronize(event), "hipEventSynchronize")

    def event_elapsed_ms(self, start, end):
        return float(_check(_hip.hipEventElapsedTime(start, end), "hipEventElapsedTime"))

    # -- modules and launch --
    def module_load(self, image: bytes):
        return _check(_hip.hipModuleLoadData(image), "hipModuleLoadData")

    def module_unload(self, module):
        _check(_hip.hipModuleUnload(module), "hipModuleUnload")

    def module_function(self, module, symbol):
        return _check(_hip.hipModuleGetFunction(module, symbol.encode()), f"hipModuleGetFunction({symbol})")

    def module_global(self, module, name):
        """(address, bytes) of a module-scope variable."""
        ptr, nbytes = _check(_hip.hipModuleGetGlobal(module, name.encode()), f"hipModuleGetGlobal({name})")
        return int(ptr), int(nbytes)

    def func_set_max_dynamic_shared(self, fn, nbytes):
        """Dynamic LDS up to the device limit needs no opt-in on AMD: nothing to do."""
        return None

    def launch_args(self, buf_addr, size):
        """The `extra` config for one by-value struct: [BUFFER_POINTER, &buf, BUFFER_SIZE, &size, END]."""
        size_holder = np.array([size], dtype=np.uint64)
        cfg = np.array([1, buf_addr, 2, size_holder.ctypes.data, 3], dtype=np.uint64)
        return (cfg, size_holder)  # both must outlive every launch

    def launch(self, fn, grid, block, shared_mem, stream, args):
        _check(_hip.hipModuleLaunchKernel(fn, *grid, *block, shared_mem, stream, None, args[0]),
               "hipModuleLaunchKernel")


def _redirect_library(path):
    """Point hip-python at another libamdhip64; hip-python opens exactly one per process."""
    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)  # a later bare-soname dlopen (pre-10.x) resolves to it
    try:
        from rocm.bindings.util import paths
    except ImportError:
        return
    orig = paths.get_library_path
    if getattr(orig, "_hipindexer_redirect", None) not in (None, str(path)):
        raise HipError(f"hip-python already redirected to {orig._hipindexer_redirect}; one HIP library per process")

    def get_library_path(shortname, *a, **k):
        return str(path).encode() if shortname == "amdhip64" else orig(shortname, *a, **k)
    get_library_path._hipindexer_redirect = str(path)
    paths.get_library_path = get_library_path


_backends = {}


def backend(library=None):
    key = str(library) if library else None
    if key not in _backends:
        _backends[key] = HipBackend(library)
    return _backends[key]
