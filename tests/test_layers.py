"""The package's house plan, read off its imports: layers that import only downward, no cycles, the design's walls,
and every dotted name the README, docs/ and the package's own text give resolving to something real."""
import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hipindexer"

# Layer of a module (by its name under hipindexer), lowest first. A module imports only its own layer's modules and
# lower layers'; two layers of one rank (the numpy side and the runtime, the sweeps and the benchmarks) never
# import each other.
LAYERS = {
    "catalog": 0, "arguments": 0,
    "numpy": 1, "runtime": 1,
    "plan": 2,
    "ops": 3,
    "check": 4, "bench": 4,
    "cli": 5,
    "package": 6,
}
NUMPY_SIDE = ("cache", "gate", "reference", "testing")
# Imports the design forbids outright, whatever the layers say: the planner never touches a device, one vendor
# backend never reaches the other.
WALLS = [("plan", "runtime"), ("runtime.hip", "runtime.cuda"), ("runtime.cuda", "runtime.hip")]
FRAMEWORKS = ("torch", "jax", "jaxlib", "cupy", "tensorflow")


def _modules() -> dict[str, Path]:
    """hipindexer's modules by dotted name (a package by its own name), kernels/ left out."""
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(ROOT).with_suffix("")
        if "kernels" in rel.parts:
            continue
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports, at any depth of its code: hipindexer modules resolved (a `from X import y`
    counts X.y where that is a module), other modules by their top-level name."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                mod = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module
            subs = {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in MODULES}
            found.update(subs or {mod})  # `from pkg import module` reaches the module, not the package's names
    return {m if m.startswith("hipindexer") else m.split(".")[0] for m in found}


GRAPH = {name: {m for m in _imports(name, path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _layer(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1:
        return "package"
    if parts[1] in NUMPY_SIDE:
        return "numpy"
    return parts[1]


def test_every_module_has_a_layer():
    assert {_layer(m) for m in MODULES} <= set(LAYERS), {m: _layer(m) for m in MODULES if _layer(m) not in LAYERS}


def test_layers_import_only_downward_and_siblings_never_each_other():
    bad = []
    for name, deps in GRAPH.items():
        a = _layer(name)
        for dep in deps:
            b = _layer(dep)
            if a != b and LAYERS[b] >= LAYERS[a]:
                bad.append(f"{name} ({a}) imports {dep} ({b})")
    assert not bad, "\n".join(bad)


def test_the_design_walls_hold():
    bad = [f"{name} imports {dep}" for name, deps in GRAPH.items() for dep in deps for low, high in WALLS
           if (name + ".").startswith(f"hipindexer.{low}.") and (dep + ".").startswith(f"hipindexer.{high}.")]
    assert not bad, "\n".join(bad)


def test_no_module_imports_a_framework():
    bad = {name: sorted(set(_imports(name, path)) & set(FRAMEWORKS)) for name, path in MODULES.items()}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


def test_the_import_graph_has_no_cycle():
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for d in sorted(GRAPH[n]):
            if state.get(d) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[n] = "done"
    for n in sorted(GRAPH):
        if n not in state:
            visit(n)


def test_the_walk_finds_what_a_planted_cycle_or_upward_import_would_be():
    # The checks above read the graph this parse builds; it must see relative, nested and from-imports.
    assert "hipindexer.ops.launch" in GRAPH["hipindexer.ops.prefill"]
    assert "hipindexer.plan" in GRAPH["hipindexer.ops.prefill"]
    assert "hipindexer.catalog" in GRAPH["hipindexer.runtime.module"]  # imported inside a function
    assert "hipindexer.ops" in GRAPH["hipindexer.check.sweep"]          # likewise


# ------------------------------------------------------------------ dotted names in the text

_DOTTED = re.compile(r"\bhipindexer(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _texts():
    yield ROOT / "README.md"
    yield from sorted(p for p in (ROOT / "docs").rglob("*.md") if "history" not in p.parts)  # records: names as then
    yield from sorted(MODULES.values())


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("path", list(_texts()), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_dotted_name_in_the_text_resolves(path):
    names = {m.group(0).rstrip(".") for m in _DOTTED.finditer(path.read_text())}
    bad = sorted(n for n in names if not _resolves(n))
    assert not bad, f"{path.relative_to(ROOT)} names what does not exist: {bad}"
