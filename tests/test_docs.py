"""The documentation in the repository: docstrings of the public API, the examples of the README, of docs/
and of the docstrings actually run, and nothing points at a file outside the repository.

Fenced ```python blocks of README.md and docs/*.md run, each in a process of its own: on the reference
(numpy only), or, when the block names the "emu:gfx950" device, on the CPU emulator of the gfx950 kernels
(skipped where it cannot be built). A block fenced ```python gpu needs a real GPU or a framework the
tests do not install: it is only compiled.
"""
import doctest
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import emu_harness as H

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------ docstrings

# The entry points a user starts from: their docstrings say shapes, dtypes, semantics and errors, so more
# than a line or two. Every name of hipindexer.__all__ is one too.
MAIN = [
    "hipindexer.reference.fp8_mqa_logits", "hipindexer.reference.fp8_paged_mqa_logits",
    "hipindexer.reference.fp8_mqa_topk", "hipindexer.reference.fp8_paged_mqa_topk",
    "hipindexer.reference.topk_logits", "hipindexer.gate.gate_topk",
    "hipindexer.cache.quantize_keys", "hipindexer.cache.write_cache", "hipindexer.cache.gather_keys",
    "hipindexer.cache.make_block_tables", "hipindexer.cache.packed_prefill_windows",
    "hipindexer.testing.prefill_inputs", "hipindexer.testing.prefill_windows",
    "hipindexer.gate.gate", "hipindexer.plan.Target", "hipindexer.plan.plan_prefill",
    "hipindexer.plan.plan_prefill_chunks", "hipindexer.runtime.get_kernel",
    "hipindexer.runtime.as_device_array", "hipindexer.runtime.Device", "hipindexer.runtime.DeviceArray",
    "hipindexer.runtime.Stream", "hipindexer.runtime.Event",
]
# Modules whose every public function and class (defined there) is public API.
PUBLIC_MODULES = ["hipindexer.reference", "hipindexer.cache", "hipindexer.testing", "hipindexer.gate"]
# Classes whose public methods and properties are public API.
CLASSES = ["hipindexer.runtime.Device", "hipindexer.runtime.DeviceArray", "hipindexer.runtime.Stream",
           "hipindexer.runtime.Event", "hipindexer.runtime.Kernel", "hipindexer.runtime.Manifest",
           "hipindexer.plan.Target", "hipindexer.plan.PrefillPlan", "hipindexer.gate.GateResult",
           "hipindexer.gate.TopkGateResult",
           "hipindexer.testing.PrefillInputs", "hipindexer.testing.DecodeCase", "hipindexer.testing.DecodeInputs"]


def _resolve(dotted: str):
    import importlib
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError:
        return importlib.import_module(dotted)


def _doc(obj) -> str:
    """The object's own docstring: not a base class's, and not the signature a dataclass makes up."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    doc = inspect.cleandoc(doc or "")
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""
    return doc


def _lines(doc: str) -> int:
    return sum(1 for line in doc.splitlines() if line.strip())


def _top_level():
    import hipindexer
    return [f"hipindexer.{n}" for n in hipindexer.__all__]


def _public(module_name: str):
    import importlib
    m = importlib.import_module(module_name)
    for name, obj in vars(m).items():
        if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj)) \
                and obj.__module__ == module_name:
            yield f"{module_name}.{name}"


def _members(cls_name: str):
    cls = _resolve(cls_name)
    for name, obj in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(obj, (classmethod, staticmethod)):
            obj = obj.__func__
        elif isinstance(obj, property):
            if obj.fget.__name__ == "<lambda>":  # ndim, itemsize: named in the class docstring
                continue
            obj = obj.fget
        elif hasattr(obj, "func") and hasattr(obj, "attrname"):  # functools.cached_property
            obj = obj.func
        if inspect.isfunction(obj):
            yield f"{cls_name}.{name}", obj


@pytest.mark.parametrize("name", sorted(set(MAIN + _top_level())))
def test_main_entry_points_have_a_docstring_of_several_lines(name):
    obj = _resolve(name)
    doc = _doc(obj)
    assert _lines(doc) >= 3, f"{name}: the docstring says too little ({_lines(doc)} lines): {doc!r}"


def _public_api():
    names = {n for m in PUBLIC_MODULES for n in _public(m)}
    names |= {f"hipindexer.runtime.{n}" for n in _resolve("hipindexer.runtime").__all__}
    return sorted(names | set(CLASSES) | set(MAIN) | set(_top_level()))


@pytest.mark.parametrize("name", _public_api())
def test_every_public_function_and_class_has_a_docstring(name):
    obj = _resolve(name)
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return  # a constant (FP8)
    assert _doc(obj), f"{name} has no docstring"


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_public_modules_say_what_they_hold(name):
    assert _lines(_doc(_resolve(name))) >= 2, f"{name}: no module docstring to speak of"


def test_public_methods_and_properties_have_docstrings():
    missing = [n for c in CLASSES for n, f in _members(c) if not _doc(f)]
    assert not missing, f"public methods and properties without a docstring: {missing}"


@pytest.mark.parametrize("module", ["hipindexer.reference", "hipindexer.cache", "hipindexer.testing",
                                    "hipindexer.gate", "hipindexer.plan.target",
                                    "hipindexer.plan.prefill", "hipindexer.plan.decode", "hipindexer.plan.chunks",
                                    "hipindexer.plan.topk"])
def test_docstring_examples_run_on_the_reference(module):
    import importlib
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


DEVICE_DOCTESTS = ["hipindexer.ops.prefill", "hipindexer.ops.decode", "hipindexer.ops.cache", "hipindexer.ops.topk",
                   "hipindexer.ops.paged_topk",
                   "hipindexer.runtime.device", "hipindexer.runtime.array"]
_RUN_DOCTESTS = """
import doctest, importlib, sys
failed = attempted = 0
for name in sys.argv[1:]:
    r = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    failed, attempted = failed + r.failed, attempted + r.attempted
print(f"attempted {attempted} failed {failed}")
sys.exit(1 if failed or not attempted else 0)
"""


@pytest.mark.toolchain
def test_docstring_examples_run_on_the_emulator(emu_kernels):
    """The device examples (ops, Device, Stream, Event, DeviceArray) name Device("emu:gfx950")."""
    p = H._package_copy(emu_kernels).run(["-c", _RUN_DOCTESTS, *DEVICE_DOCTESTS], emulated=True, timeout=600)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]


# ------------------------------------------------------------------ README and docs/ examples

DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)


def _blocks():
    for path in DOC_FILES:
        text = path.read_text()
        for i, m in enumerate(_FENCE.finditer(text)):
            line = text.count("\n", 0, m.start()) + 1
            yield pytest.param(path, m.group(1).split(), m.group(2), id=f"{path.relative_to(ROOT)}:{line}")


def test_the_readme_and_docs_have_examples_and_the_readme_runs_the_op_on_the_emulator():
    blocks = list(_blocks())
    assert len(blocks) >= 6
    readme = (ROOT / "README.md").read_text()
    using_the_op = readme.split("## Using the op", 1)[1].split("\n## ", 1)[0]
    assert 'device="emu:gfx950"' in using_the_op and "Device()" in using_the_op


def test_the_readme_decode_example_checks_real_logits_with_the_gate():
    """A check of rows that are all -inf proves nothing: the example's inputs must give every row live keys
    (numpy only: its statements up to the inputs, on the reference), and it must check them with the gate."""
    import ast
    import numpy as np
    from hipindexer import reference
    readme = (ROOT / "README.md").read_text()
    code = next(m.group(2) for m in _FENCE.finditer(readme) if "fp8_paged_mqa_logits" in m.group(2))
    assert "gate.gate_decode(" in code
    tree = ast.parse(code)
    upto = next(i for i, st in enumerate(tree.body) if isinstance(st, ast.Assign) and
                any(isinstance(t, ast.Name) and t.id == "inp" for t in st.targets))
    setup = [st for st in tree.body[:upto + 1] if "Device(" not in ast.unparse(st)]
    scope = {}
    exec(compile(ast.Module(setup, []), "README.md", "exec"), scope)
    ref = reference.fp8_paged_mqa_logits(*scope["inp"].args())
    assert np.isfinite(ref).any(axis=1).all(), "rows of the README's decode example see no keys"


@pytest.mark.parametrize("path,words,code", list(_blocks()))
def test_doc_examples_run(path, words, code, request):
    compile(code, str(path), "exec")
    if "gpu" in words:
        return  # needs a GPU (or CuPy / PyTorch): compiled only
    if "emu:gfx950" in code:
        pkg = H._package_copy(request.getfixturevalue("emu_kernels"))  # built on first use; skips without it
        p = pkg.run(["-c", code], emulated=True, timeout=600)
    else:
        p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, f"{path.name} example failed:\n{code}\n{p.stdout[-3000:]}{p.stderr[-3000:]}"


# ------------------------------------------------------------------ what the docs say of the ops

def _paragraphs(path):
    return [p for p in path.read_text().split("\n\n") if p.strip()]


def test_no_doc_calls_the_decode_op_in_progress():
    said = [f"{path.relative_to(ROOT)}: {' '.join(p.split())}" for path in DOC_FILES for p in _paragraphs(path)
            if "in progress" in p and ("decode" in p or "paged" in p)]
    assert not said, "\n".join(said)


def test_the_accuracy_table_lists_every_logits_kernel_in_its_class_row():
    from hipindexer import catalog
    text = (ROOT / "docs" / "accuracy.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}
    ops = {"PrefillParams", "DecodeParams", "DecodeTmaParams"}  # the two ops' kernels, not the benches' peak loop
    assert ops <= {k.params for k in catalog.KERNELS}
    missing = [f"{k.key} ({k.accumulation})" for k in catalog.KERNELS
               if k.params in ops and not k.test_only and f"`{k.key}`" not in rows.get(k.accumulation, "")]
    assert not missing, f"docs/accuracy.md's class table leaves out {missing}"


def test_the_ops_page_names_the_decode_kernel_the_planner_picks_on_each_target():
    from hipindexer.plan import TARGETS, plan_decode
    decode = (ROOT / "docs" / "ops.md").read_text().split("## Decode", 1)[1].split("\n## ", 1)[0]
    for arch in ("sm_90a", "gfx950"):
        for H, D, bs in ((64, 128, 64), (32, 128, 16), (64, 128, 1), (16, 64, 16)):
            kernel = plan_decode(4, 2, H, D, bs, 1024, TARGETS[arch]).kernel
            assert f"`{kernel}`" in decode, (arch, H, D, bs, kernel)


def test_the_ops_page_says_how_the_device_ops_arguments_relate_to_the_reference_s():
    """The same arguments up to clean_logits; after it, each op's own, every one named on the page."""
    import hipindexer
    from hipindexer import reference
    intro = _paragraphs(ROOT / "docs" / "ops.md")[2]
    for name in ("fp8_mqa_logits", "fp8_paged_mqa_logits"):
        ref = list(inspect.signature(getattr(reference, name)).parameters)
        dev = list(inspect.signature(getattr(hipindexer, name)).parameters)
        cut = ref.index("clean_logits") + 1
        assert ref[:cut] == dev[:cut], name
        for p in ref[cut:] + dev[cut:]:
            assert p == "tunables" or f"`{p}=`" in intro, f"docs/ops.md does not say {name} takes {p}="


# ------------------------------------------------------------------ nothing points outside the repository

# Spelled in pieces so that this file does not name them itself.
OUTSIDE = ["DESIGN" + ".md", ".." + "/shared", "GFX950" + ".md"]
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".cfg", ".in", ".sh", ".h", ".hip", ".c", ".S", ".json", ".yml",
                 ".yaml", ""}


def _tracked_text_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [ROOT / f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):  # no git (an unpacked sdist): the source folders
        files = [p for d in ("hipindexer", "hsaco_src", "hxbuild", "tools", "tests", "docs", ".ci")
                 for p in (ROOT / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        files += [ROOT / f for f in ("README.md", "build.py", "setup.py", "pyproject.toml", "MANIFEST.in")]
    return [f for f in files if f.is_file() and f.suffix in TEXT_SUFFIXES and "kernels" not in f.parts]


def test_nothing_in_the_repository_points_at_a_file_outside_it():
    hits = []
    for f in _tracked_text_files():
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for needle in OUTSIDE:
                if needle in line:
                    hits.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)


_DOCS_REF = re.compile(r"docs/([A-Za-z0-9_.-]+\.md)")
_MD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_docs_page_named_and_every_markdown_link_exists():
    missing = []
    for f in _tracked_text_files():
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            continue
        for page in _DOCS_REF.findall(text):
            if not (ROOT / "docs" / page).is_file():
                missing.append(f"{f.relative_to(ROOT)} names docs/{page}")
        if f.suffix == ".md":
            for target in _MD_LINK.findall(text):
                if "://" in target or target.startswith("mailto:"):
                    continue
                if not (f.parent / target).resolve().exists():
                    missing.append(f"{f.relative_to(ROOT)} links {target}")
                elif ROOT not in (f.parent / target).resolve().parents and (f.parent / target).resolve() != ROOT:
                    missing.append(f"{f.relative_to(ROOT)} links {target}, outside the repository")
    assert not missing, "\n".join(missing)
