"""The package's top-level names: there after a plain `import hipindexer`, resolved on first use."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PROBE = """
import json, sys
import hipindexer
heavy = sorted(m for m in sys.modules if m.startswith(("rocm", "hip.", "cuda", "hipindexer.runtime")))
maps = open("/proc/self/maps").read()
libs = sorted(lib for lib in ("libamdhip64", "libcuda.so") if lib in maps)
names = {n: type(getattr(hipindexer, n)).__name__ for n in
         ("Device", "DeviceArray", "Stream", "Event", "reference", "cache", "testing", "gate", "fp8_mqa_logits")}
from hipindexer import Device, fp8_mqa_logits
from hipindexer.runtime import Device as RuntimeDevice
print(json.dumps({"heavy": heavy, "libs": libs, "names": names, "same": Device is RuntimeDevice,
                  "listed": sorted(set(hipindexer.__all__) - set(dir(hipindexer)))}))
"""


def test_top_level_names_resolve_on_first_use_and_import_loads_no_gpu_library():
    p = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["heavy"] == [], f"`import hipindexer` imported {got['heavy']}"
    assert got["libs"] == []
    assert got["names"] == {"Device": "type", "DeviceArray": "type", "Stream": "type", "Event": "type",
                            "reference": "module", "cache": "module", "testing": "module", "gate": "module",
                            "fp8_mqa_logits": "function"}
    assert got["same"] and got["listed"] == []


def test_an_unknown_name_is_an_attribute_error():
    import hipindexer
    try:
        hipindexer.no_such_name
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("hipindexer.no_such_name resolved")
