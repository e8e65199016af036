"""`Device("emu:gfx950")`: the HIP backend (hip.py over hip-python) on the emulated MI355X.

The emulator is a libamdhip64.so built by build.py (target emu-gfx950, not in
wheels) that runs the gfx950 kernel sources lane by lane on the CPU. hip-python
opens exactly one libamdhip64 per process and never lets go of it, so the
emulator must be chosen before the first HIP call and excludes a real GPU in
the same process; `info()` therefore probes it in a child process unless it is
already active here.
"""
import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

from . import hip as _hip

ROOT = Path(__file__).resolve().parent.parent / "kernels" / "emu-gfx950"  # lib/libamdhip64.so, registry.txt
ARCH = "gfx950"


class EmuError(RuntimeError):
    pass


def library_path() -> Path:
    return ROOT / "lib" / "libamdhip64.so"


def _mapped_hip_libraries():
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return set()
    return {p for p in paths if os.path.basename(p).startswith("libamdhip64.so")}


class EmuBackend(_hip.HipBackend):
    """HipBackend whose library is the emulator, redirected on first use rather than at construction."""
    named_streams = {0: "the null stream"}  # the emulator knows no per-thread stream

    def __init__(self):
        self.library = library_path()
        self._error = None
        self._active = False

    def _activate(self):
        if self._active:
            return True
        lib = self.library.resolve() if self.library.is_file() else self.library
        if _hip._hip is None:
            self._error = "hip-python is not installed"
            return False
        if not self.library.is_file():
            self._error = f"emulator not built: {self.library} is missing (run python build.py)"
            return False
        other = {p for p in _mapped_hip_libraries() if Path(p).resolve() != lib}
        if other:
            raise EmuError(f"this process already loaded {', '.join(sorted(other))}; hip-python keeps one HIP "
                           "library per process, so the emulator needs a process of its own")
        os.environ["ROCM_PATH"] = str(ROOT)  # where hip-python looks when nothing else answers
        _hip._redirect_library(lib)
        self._active = True
        return True

    def available(self):
        try:
            return self._activate() and super().available()
        except EmuError as e:
            self._error = str(e)
            return False

    def library_path(self):
        return str(self.library)

    def malloc(self, nbytes, stream):
        try:
            return super().malloc(nbytes, stream)
        except _hip.HipError as e:  # the emulator says why: more than the host can give, with the figures
            lib = ctypes.CDLL(str(self.library.resolve()))
            lib.hxEmuLastErrorMessage.restype = ctypes.c_char_p
            raise _hip.HipError(f"{e}: {lib.hxEmuLastErrorMessage().decode(errors='replace')}") from None

    def bindings_version(self):
        v = super().bindings_version()
        return f"{v} on the CPU emulator" if v else None


_backend = None


def backend():
    global _backend
    if _backend is None:
        _backend = EmuBackend()
    return _backend


def active() -> bool:
    return _backend is not None and _backend._active


_PROBE = """
import ctypes
import json
from hipindexer.runtime import Device
d = Device("emu:gfx950")
print(json.dumps({"arch": d.arch, "name": d.name, "num_cus": d.num_cus, "wave_size": d.wave_size,
                  "total_memory": d.total_memory, "version": d._b.runtime_version()}))
"""


def info(timeout=60):
    """What `hipindexer info` says about the emulator; never raises, never loads it into this process."""
    out = {"name": "emu", "spec": "emu:gfx950", "library": str(library_path()), "built": library_path().is_file()}
    if not out["built"]:
        out.update(available=False, why_not="not built (python build.py builds emu-gfx950 where a host compiler exists)")
        return out
    if active():
        b = backend()
        out.update(available=b.available(), device_count=1 if b.available() else 0)
        return out
    # The child imports this very package (started beside it, which puts it first on sys.path), so it
    # probes this package's emulator, not another hipindexer's.
    here = Path(__file__).resolve().parents[2]
    try:
        p = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout, cwd=here,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(
                               [str(here)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))})
        if p.returncode:
            out.update(available=False, why_not=(p.stderr.strip().splitlines() or ["probe failed"])[-1])
        else:
            dev = json.loads(p.stdout.strip().splitlines()[-1])
            out.update(available=True, device_count=1, version=dev.pop("version"), device=dict(spec="emu:gfx950", **dev),
                       note="runs in a process of its own (one HIP library per process)")
    except Exception as e:
        out.update(available=False, why_not=f"{type(e).__name__}: {e}")
    return out


class LoadCounter:
    """Bytes the emulated kernels loaded from each device allocation while counting (count_loads()).

    What is counted: every load a gfx950 kernel makes through a wave primitive (buffer loads and
    global->LDS loads that are in range, 64-bit gathers), attributed to the device allocation it reads.
    Plain pointer reads in kernel code are not wave primitives and are not counted; nor are copies."""

    def __init__(self, lib):
        self._lib = lib

    def bytes(self, array=None) -> int:
        """Bytes loaded from the allocation holding `array` (a DeviceArray, or any object with `.ptr`);
        None: bytes loaded from memory that is no device allocation."""
        return int(self._lib.hxEmuLoadedBytes(None if array is None else ctypes.c_void_p(array.ptr)))


class count_loads:
    """Context manager: count what the emulated kernels load from each device allocation, from zero.

    >>> with count_loads() as loads:            # doctest: +SKIP
    ...     out = fp8_paged_mqa_logits(..., device="emu:gfx950")
    >>> loads.bytes(kv_cache)                   # doctest: +SKIP

    The emulator must be this process's HIP (Device("emu:gfx950") opened)."""

    def __enter__(self) -> LoadCounter:
        if not active():
            raise EmuError("count_loads: the emulator is not this process's HIP (open Device('emu:gfx950') first)")
        lib = ctypes.CDLL(str(library_path().resolve()))
        lib.hxEmuCountLoads.argtypes = [ctypes.c_int]
        lib.hxEmuLoadedBytes.restype = ctypes.c_ulonglong
        lib.hxEmuLoadedBytes.argtypes = [ctypes.c_void_p]
        lib.hxEmuCountLoads(1)
        self._lib = lib
        return LoadCounter(lib)

    def __exit__(self, *exc):
        self._lib.hxEmuCountLoads(0)  # the counts stay readable until the next count_loads()
        return False
