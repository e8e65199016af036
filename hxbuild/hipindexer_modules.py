"""The hipindexer files the build reads: the catalog and the code-object reader.

They are loaded by path, not through `import hipindexer...`: the package's
__init__ needs numpy and friends, which an isolated wheel build does not have.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hipindexer"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look the module up while defining
    spec.loader.exec_module(mod)
    return mod


catalog = _load("_hx_catalog", PACKAGE / "catalog.py")
codeobj = _load("_hx_codeobj", PACKAGE / "runtime" / "codeobj.py")
