#!/usr/bin/env bash
# Build the wheel (it compiles the code objects), check it carries every shipped
# kernel and none of the test-only ones, install it into a fresh venv with no
# kernel compiler on PATH, and check `hipindexer info` sees exactly the shipped kernels.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m pip wheel -q . --no-deps -w "$work/dist"
# The catalog is stdlib-only, so this python needs nothing installed to read it.
python - "$work"/dist/hipindexer-*.whl <<'PY'
import importlib.util, sys, zipfile
spec = importlib.util.spec_from_file_location("catalog", "hipindexer/catalog.py")
catalog = importlib.util.module_from_spec(spec); sys.modules["catalog"] = catalog; spec.loader.exec_module(catalog)
names = zipfile.ZipFile(sys.argv[1]).namelist()
objects = {n.split("/")[-1].split(".")[0] for n in names if n.startswith("hipindexer/kernels/") and n.endswith((".hsaco", ".cubin"))}
shipped = {k.key for k in catalog.KERNELS if not k.test_only}
test_only = {k.key for k in catalog.KERNELS if k.test_only}
assert shipped <= objects, ("shipped kernels missing from the wheel", shipped - objects)
assert not test_only & objects, ("test-only kernels in the wheel", test_only & objects)
stray = [n for n in names if "test-only" in n or "emu-gfx950" in n]
assert not stray, ("test or emulator files in the wheel", stray)
# The package and its metadata only: no build code (build.py, hxbuild/ with the emulator's build), no tools/.
extra = {n.split("/")[0] for n in names} - {"hipindexer"}
assert all(t.endswith(".dist-info") for t in extra), ("more than the package in the wheel", extra)
print("wheel carries", sorted(objects))
PY
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$work"/dist/hipindexer-*.whl
# No /usr/local/bin (nvcc) and no ziglang in the fresh venv: users need no compiler.
env -i HOME="$HOME" PATH="$work/venv/bin:/usr/bin:/bin" bash -ec '
  ! command -v nvcc && ! python -c "import ziglang" 2>/dev/null
  cd /
  hipindexer info --json > info.json.tmp || exit 1
  python - info.json.tmp <<PY
import json, sys
r = json.load(open(sys.argv[1]))
m = r["manifest"]
assert m["present"], m
from hipindexer import catalog
want = {(t, k.key) for k in catalog.KERNELS for t in k.targets if not k.test_only}
got = {(k["target"], k["name"]) for k in m["kernels"]}
assert want == got, (want - got, got - want)
print("wheel ok:", len(m["kernels"]), "kernels for", m["targets"], "installed at", m["path"])
PY
  rm -f info.json.tmp
'
