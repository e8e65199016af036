"""Manifest lookup, code-object loading (sha256-checked, once per device) and kernel launch.

Every kernel takes one parameter struct by value. The ctypes mirror comes from
hipindexer.catalog; its size must equal the manifest's `param_size` (what the
code object itself declared at build time), checked at lookup, before any launch.
"""
import ctypes
import hashlib
import json
import struct
import threading
from pathlib import Path

from .device import Device, as_stream

# The package's own build (build.py --out); another build is loaded by passing its manifest's path.
DEFAULT_MANIFEST = Path(__file__).resolve().parent.parent / "kernels" / "manifest.json"


class KernelLookupError(LookupError):
    """The manifest has no such kernel, no code object for the device's arch, or not exactly one entry for
    the variant asked for; the message lists what it has."""
    pass


class ParamSizeError(RuntimeError):
    """A code object's parameter struct is not the size of the catalog's ctypes mirror: stale kernels or a
    changed catalog (rebuild with python build.py)."""
    pass


class CodeObjectMismatch(RuntimeError):
    """A code object's sha256 differs from the manifest's: the file changed after the build."""
    pass


class Manifest:
    """manifest.json plus where its objects live; `structs` overrides the catalog's mirrors (tests)."""

    def __init__(self, path=None, structs=None):
        self.path = Path(path) if path is not None else DEFAULT_MANIFEST
        if not self.path.is_file():
            raise FileNotFoundError(f"no kernel manifest at {self.path}: build the kernels first (python build.py)")
        self.data = json.loads(self.path.read_text())
        self.root = self.path.parent
        self.entries = self.data.get("kernels", [])
        self._structs = structs or {}

    def targets(self, name=None):
        """The archs with code objects (of kernel `name`, when given), sorted."""
        return sorted({e["target"] for e in self.entries if name is None or e["name"] == name})

    def mirror(self, struct_name):
        """The ctypes class of parameter struct `struct_name` (hipindexer.catalog's, unless overridden)."""
        if struct_name in self._structs:
            return self._structs[struct_name]
        from .. import catalog
        return catalog.STRUCT[struct_name].ctype()

    def find(self, name, arch, variant=None):
        """The entry for (name, variant) on `arch`, with its param size checked against the ctypes mirror."""
        named = [e for e in self.entries if e["name"] == name]
        if not named:
            raise KernelLookupError(f"no kernel {name!r} in {self.path}; it has: "
                                    f"{', '.join(sorted({e['name'] for e in self.entries})) or 'nothing'}")
        here = [e for e in named if e["target"] == arch]
        if not here:
            raise KernelLookupError(f"no code object for {arch}; this package has: {', '.join(self.targets(name))} "
                                    f"(kernel {name!r})")
        if variant is None:
            hits = here if len(here) == 1 else [e for e in here if not e.get("variant")]
        elif isinstance(variant, str):
            hits = [e for e in here if e.get("variant_key") == variant]
        else:
            want = {k: str(v) for k, v in variant.items()}
            hits = [e for e in here if {k: str(v) for k, v in e.get("variant", {}).items()} == want]
        if len(hits) != 1:
            raise KernelLookupError(f"kernel {name!r} on {arch}: variant {variant!r} matches {len(hits)} of: "
                                    f"{', '.join(e.get('variant_key', '?') for e in here)}")
        entry = hits[0]
        mirror = self.mirror(entry["params"])
        if entry["param_size"] != ctypes.sizeof(mirror):
            raise ParamSizeError(
                f"kernel {entry.get('variant_key', name)!r} ({arch}): the code object's {entry['params']} is "
                f"{entry['param_size']} bytes but the ctypes mirror is {ctypes.sizeof(mirror)}; "
                "the kernels are stale or the catalog changed: rebuild (python build.py)")
        return entry, mirror


_manifests = {}
_modules = {}
_kernels = {}
_lock = threading.Lock()


def load_manifest(path=None):
    """The Manifest at `path` (None: the package's own kernels/manifest.json), read once per process;
    FileNotFoundError when there is none (the kernels are not built)."""
    key = str(Path(path).resolve()) if path is not None else str(DEFAULT_MANIFEST)
    if key not in _manifests:
        _manifests[key] = Manifest(path)
    return _manifests[key]


def _module(device, manifest, entry):
    key = (device, str((manifest.root / entry["object"]).resolve()))
    mod = _modules.get(key)
    if mod is None:
        path = manifest.root / entry["object"]
        image = path.read_bytes()
        digest = hashlib.sha256(image).hexdigest()
        if digest != entry["sha256"]:
            raise CodeObjectMismatch(f"{path}: sha256 {digest[:16]}... does not match the manifest's "
                                     f"{entry['sha256'][:16]}...; rebuild (python build.py)")
        device.activate()
        mod = _modules[key] = device._b.module_load(image)
    return mod


def get_kernel(name, variant=None, device=None, manifest=None):
    """The launchable kernel `name` (+ variant) for `device`'s arch; cached per (device, manifest entry).

    name: a catalog key ("mqa_logits_generic", "copy_u32x4", ...). variant: None (the kernel's only code
    object), a dict of variant defines ({"HX_HEADS": 64}) or a variant key ("mqa_logits_wgmma.HX_HEADS-64").
    device: as Device() takes it. manifest: None (the package's build), a path, or a Manifest.
    Before anything loads, the parameter struct's size recorded in the manifest is checked against the
    catalog's ctypes mirror; the code object's bytes are checked against the manifest's sha256 before the
    driver sees them; each object is loaded once per device.

    Raises FileNotFoundError (no manifest: build the kernels), KernelLookupError, ParamSizeError,
    CodeObjectMismatch, and the backend's error when the driver refuses the object.
    """
    device = Device(device)
    manifest = manifest if isinstance(manifest, Manifest) else load_manifest(manifest)
    entry, mirror = manifest.find(name, device.arch, variant)
    key = (device, manifest, entry["variant_key"])  # the objects themselves: a key keeps them alive and unique
    k = _kernels.get(key)
    if k is None:
        with _lock:
            k = _kernels.get(key)
            if k is None:
                k = _kernels[key] = Kernel(device, manifest, entry, mirror)
    return k


def _dim3(d):
    if isinstance(d, int):
        return (d, 1, 1)
    d = tuple(d)
    return d + (1,) * (3 - len(d))


def holds_a_cu_alone(entry: dict, shared_per_cu: int) -> bool:
    """Whether no two blocks of a manifest entry's kernel fit the shared memory of one compute unit holding
    shared_per_cu bytes: its launch's dynamic bytes and its static ones together."""
    shared = int(entry.get("dynamic_smem", 0)) + int(entry.get("resources", {}).get("shared", 0))
    return 2 * shared > shared_per_cu


class Kernel:
    """One code object's function on one device, with a packed parameter buffer per thread.

    launch() only fills the calling thread's buffer and enqueues: no host synchronisation, no device
    allocation (capturable into graphs). The driver copies the buffer during the launch call, so it
    only has to stay unchanged until that call returns; a buffer of its own per thread guarantees that
    when several threads launch the same kernel."""

    def __init__(self, device, manifest, entry, mirror):
        self.device, self.entry, self.mirror = device, entry, mirror
        self.name, self.symbol, self.arch = entry["name"], entry["symbol"], entry["target"]
        self.variant = entry.get("variant", {})
        self.block = entry.get("block")
        self.param_size = entry["param_size"]
        self.dynamic_smem = int(entry.get("dynamic_smem", 0))  # bytes every launch gets by default
        self._module = _module(device, manifest, entry)
        self._fn = device._b.module_function(self._module, self.symbol)
        if self.dynamic_smem:
            device.activate()
            device._b.func_set_max_dynamic_shared(self._fn, self.dynamic_smem)
        self._launch = device._b.launch
        if hasattr(device._b, "launch_overlapping") and \
                holds_a_cu_alone(entry, device._b.shared_per_cu(device.index)):
            # A grid whose blocks each fill an SM takes SMs one block each as they come free; a grid of smaller
            # blocks started during its predecessor's tail piles them onto the SMs that came free first. An op
            # keeps a launch that still loses by starting early in stream order (prepare(overlap=False)).
            self._launch = device._b.launch_overlapping
        self._local = threading.local()

    def _buffer(self):
        """This thread's (parameter struct, launch arguments pointing at it)."""
        try:
            return self._local.buffer
        except AttributeError:
            params = self.mirror()  # zero-filled, so padding bytes stay zero
            self._local.buffer = (params, self.device._b.launch_args(ctypes.addressof(params), self.param_size))
            return self._local.buffer

    @property
    def params(self):
        """The calling thread's parameter struct: what its next launch() sends, less the fields it sets."""
        return self._buffer()[0]

    def launch(self, grid, block=None, params=None, stream=None, shared_mem=None, **fields):
        """Enqueue on `stream` (default: the device's). `params` is an instance of `self.mirror`;
        keyword fields fill this thread's buffer instead (DeviceArrays are taken by pointer).
        shared_mem: dynamic shared bytes (default: the code object's own requirement)."""
        p, args = self._buffer()
        addr = ctypes.addressof(p)
        if params is not None:
            if type(params) is not self.mirror:
                raise TypeError(f"kernel {self.name}: params must be a {self.mirror.__name__}, "
                                f"got {type(params).__name__}")
            ctypes.memmove(addr, ctypes.addressof(params), self.param_size)
        for k, v in fields.items():
            if isinstance(v, (bytes, bytearray, memoryview)):  # blob fields
                f = getattr(self.mirror, k)
                ctypes.memmove(addr + f.offset, bytes(v).ljust(f.size, b"\0")[:f.size], f.size)
            else:
                setattr(p, k, v.ptr if hasattr(v, "ptr") else v)
        block = self.block if block is None else block
        if block is None:
            raise ValueError(f"kernel {self.name}: no block size in the manifest; pass block=")
        s = as_stream(stream, self.device).handle
        self.device.activate()
        smem = self.dynamic_smem if shared_mem is None else shared_mem
        self._launch(self._fn, _dim3(grid), _dim3(block), smem, s, args)

    def global_address(self, name: str) -> tuple:
        """(device address, bytes) of the module-scope variable `name` in this kernel's code object."""
        self.device.activate()
        return self.device._b.module_global(self._module, name)

    def prepare(self, grid, block=None, shared_mem=None, pointers=(), overlap=True, **fields) -> "PreparedLaunch":
        """A launch of this kernel for repeated calls from one thread: `fields` fixed now, the fields named in
        `pointers` (the struct's first ones, in order: 8-byte fields, the last of them may be a byte blob such as a
        tensor map) given per call. overlap=False launches it in plain stream order even where the kernel would
        start during the grid before it (holds_a_cu_alone)."""
        return PreparedLaunch(self, grid, block, shared_mem, pointers, fields, overlap)

    def __repr__(self):
        return f"Kernel({self.entry.get('variant_key', self.name)!r}, {self.arch}, {self.device!r})"


class PreparedLaunch:
    """One kernel launch set up for repeated calls: a parameter struct of its own with every field but
    the per-call ones filled, the grid, the block and the shared memory. A call packs the per-call values
    (8-byte pointers, then at most one blob of bytes) with one struct.pack_into and enqueues. The driver copies
    the struct during the launch call, so a prepared launch used by one thread at a time needs no other
    protection."""

    __slots__ = ("_activate", "_args", "_block", "_fn", "_grid", "_launch", "_pack", "_smem", "kernel", "params")

    def __init__(self, kernel, grid, block, shared_mem, pointers, fields, overlap=True):
        mirror = kernel.mirror
        slots = [getattr(mirror, name) for name in pointers]
        named = [name for name, _ in mirror._fields_ if not name.startswith("_pad")]
        words = slots[:-1] if slots and slots[-1].size != 8 else slots  # a last field of another size: a blob
        if (named[:len(pointers)] != list(pointers) or any(f.size != 8 for f in words)
                or [f.offset for f in words] != list(range(0, 8 * len(words), 8))):
            # one pack_into writes every byte up to the last field: a field between two of them would be zeroed
            raise ValueError(f"kernel {kernel.name}: pointers {list(pointers)} must be the struct's first fields, "
                             f"in order, 8-byte ones with nothing between them and at most a blob after them")
        layout, end = "<", 0
        for f in slots:
            layout, end = layout + f"{f.offset - end}x" + ("Q" if f in words else f"{f.size}s"), f.offset + f.size
        self._pack = struct.Struct(layout).pack_into
        self.kernel, self.params = kernel, mirror(**fields)  # unnamed padding stays zero
        self._args = kernel.device._b.launch_args(ctypes.addressof(self.params), kernel.param_size)
        block = kernel.block if block is None else block
        if block is None:
            raise ValueError(f"kernel {kernel.name}: no block size in the manifest; pass block=")
        self._fn, self._grid, self._block = kernel._fn, _dim3(grid), _dim3(block)
        self._smem = kernel.dynamic_smem if shared_mem is None else shared_mem
        self._launch = kernel._launch if overlap else kernel.device._b.launch
        self._activate = kernel.device.activate

    def __call__(self, stream_handle: int, *pointers: int) -> None:
        self._pack(self.params, 0, *pointers)
        self._activate()
        self._launch(self._fn, self._grid, self._block, self._smem, stream_handle, self._args)
