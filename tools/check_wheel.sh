#!/usr/bin/env bash
# Build the wheel (it compiles the code objects), install it into a fresh venv
# with no kernel compiler on PATH, and check `hipindexer info` sees every kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m pip wheel -q . --no-deps -w "$work/dist"
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
want = {(t, k.key) for k in catalog.KERNELS for t in k.targets}
got = {(k["target"], k["name"]) for k in m["kernels"]}
assert want <= got, want - got
print("wheel ok:", len(m["kernels"]), "kernels for", m["targets"], "installed at", m["path"])
PY
  rm -f info.json.tmp
'
