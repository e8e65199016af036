"""The GPU examples of docs/integration.md, run as they are written there: every block fenced
```python gpu NAME is executed here on the first GPU, each needing the framework its NAME starts with
(torch, cupy or jax). Each block checks itself against the numpy reference under hipindexer.gate. A test
skips, with the reason, when there is no GPU or its framework is not importable or has no GPU.

tests/test_docs.py compiles the same blocks and runs the page's emulator blocks.
"""
import importlib
import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

DOC = Path(__file__).resolve().parents[1] / "docs" / "integration.md"
_FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)
# The framework each named block needs, by the name's first word.
NEEDS = {"torch": "torch", "cupy": "cupy", "jax": "jax"}


def _gpu_blocks():
    text = DOC.read_text()
    for m in _FENCE.finditer(text):
        words = m.group(1).split()
        if "gpu" in words:
            line = text.count("\n", 0, m.start()) + 1
            names = [w for w in words if w != "gpu"]
            yield (names[0] if names else f"unnamed:{line}"), line, m.group(2)


BLOCKS = list(_gpu_blocks())


def test_every_gpu_block_of_the_page_is_named_for_its_framework():
    assert len(BLOCKS) >= 5, [name for name, _, _ in BLOCKS]
    for name, line, code in BLOCKS:
        framework = NEEDS.get(name.split("-")[0])
        assert framework, f"docs/integration.md:{line}: a gpu block named {name!r} needs a framework of {NEEDS}"
        assert f"import {framework}" in code, f"docs/integration.md:{line}: {name} does not import {framework}"
    assert len({name for name, _, _ in BLOCKS}) == len(BLOCKS), "two gpu blocks share a name"


def _framework(name: str):
    """The framework's module, or a skip saying why it cannot run here."""
    if name == "jax":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory for the other tests
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # ImportError, or a framework that fails to load its CUDA libraries
        pytest.skip(f"{name} is not importable: {type(e).__name__}: {e}")
    try:
        if name == "torch" and not mod.cuda.is_available():
            pytest.skip("torch has no CUDA device")
        if name == "cupy" and not mod.cuda.is_available():
            pytest.skip("cupy has no device")
        if name == "jax":
            mod.devices("gpu")
    except RuntimeError as e:
        pytest.skip(f"{name} has no GPU: {e}")
    return mod


@pytest.mark.parametrize("name,line,code", BLOCKS, ids=[name for name, _, _ in BLOCKS])
def test_integration_example_runs_on_the_gpu(gpu_device, name, line, code):
    if gpu_device.backend != "cuda":
        pytest.skip("the framework examples use CUDA streams and graphs")
    _framework(NEEDS[name.split("-")[0]])
    # padded so that a traceback names the line of docs/integration.md
    exec(compile("\n" * line + code, str(DOC), "exec"), {"__name__": f"integration_{name.replace('-', '_')}"})
