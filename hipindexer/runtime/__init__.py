"""The runtime: devices, streams, events, device arrays and kernel launch, over hip-python or
cuda-bindings. It knows code objects and memory, never indexers; it imports no framework."""
from .array import FP8, DeviceArray, as_device_array, empty, from_numpy, zeros
from .device import Device, Event, NoDeviceError, Stream, register_backend
from .module import (CodeObjectMismatch, Kernel, KernelLookupError, Manifest, ParamSizeError, get_kernel,
                     load_manifest)

__all__ = ["FP8", "DeviceArray", "as_device_array", "empty", "from_numpy", "zeros", "Device", "Event",
           "NoDeviceError", "Stream", "register_backend", "CodeObjectMismatch", "Kernel", "KernelLookupError",
           "Manifest", "ParamSizeError", "get_kernel", "load_manifest"]
