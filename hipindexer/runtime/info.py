"""`collect_info()`: what `hipindexer info --json` reports. Never raises, never prints."""
from . import device as _device
from . import emu as _emu
from .module import DEFAULT_MANIFEST, Manifest


def _backend_info(name):
    out = {"name": name}
    try:
        b = _device.BACKENDS[name]()
        out.update(bindings=b.bindings_version(), library=b.library_path(), available=b.available())
        if out["available"]:
            out["device_count"] = b.device_count()
            try:
                out["version"] = b.runtime_version()
            except Exception as e:
                out["version_error"] = f"{type(e).__name__}: {e}"
        if b.why_unavailable():
            out["why_not"] = b.why_unavailable()
    except Exception as e:
        out.update(available=False, why_not=f"{type(e).__name__}: {e}")
    return out


def _devices(backends):
    devs = []
    for info in backends:
        for i in range(info.get("device_count", 0)):
            try:
                d = _device.Device(f"{info['name']}:{i}")
                devs.append({"spec": f"{d.backend}:{d.index}", "arch": d.arch, "name": d.name, "num_cus": d.num_cus,
                             "wave_size": d.wave_size, "total_memory": d.total_memory})
            except Exception as e:
                devs.append({"spec": f"{info['name']}:{i}", "error": f"{type(e).__name__}: {e}"})
    return devs


def _manifest(path):
    try:
        m = Manifest(path)
    except FileNotFoundError as e:
        return {"path": str(path or DEFAULT_MANIFEST), "present": False, "why_not": str(e)}
    except Exception as e:
        return {"path": str(path or DEFAULT_MANIFEST), "present": False, "why_not": f"{type(e).__name__}: {e}"}
    keys = ("name", "symbol", "target", "variant_key", "variant", "object", "params", "param_size", "block",
            "dynamic_smem", "resources", "compiler_version")
    return {"path": str(m.path), "present": True, "targets": m.targets(),
            "kernels": [{k: e[k] for k in keys if k in e} for e in m.entries]}


def collect_info(manifest_path=None):
    backends = [_backend_info(n) for n in _device.SEARCH_ORDER]
    devices = _devices(backends)
    emu = _emu_info()
    if emu.get("device"):
        devices.append(emu["device"])
    return {"backends": backends + [emu], "devices": devices, "manifest": _manifest(manifest_path),
            "toolchains": None}  # filled by the CLI from build.py's toolchain search


def _emu_info():
    """The gfx950 CPU emulator (Device("emu:gfx950")), probed in a child process unless active here."""
    try:
        out = _emu.info()
        if _emu.active() and out.get("device_count"):
            out["device"] = _devices([{"name": "emu", "device_count": 1}])[0]
        return out
    except Exception as e:
        return {"name": "emu", "available": False, "why_not": f"{type(e).__name__}: {e}"}
