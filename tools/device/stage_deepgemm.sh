#!/bin/bash
# Stages DeepGEMM's public source for a same-run comparison on the H200 (tools/device/h200_deepgemm.sh): DeepGEMM at the
# snapshot its measurements in docs/ name, with the CUTLASS and fmt headers its submodules pin, as one tarball in
# build/deepgemm/ (ignored by git; carried to the device machine, built there, never part of the package).
#   bash tools/device/stage_deepgemm.sh DEEPGEMM_GIT CUTLASS_GIT FMT_GIT
# Each argument is a git directory (a clone or a bare mirror) holding the pinned commit below.
set -euo pipefail
DG_REV=${DG_REV:-54e2261}
CUTLASS_REV=${CUTLASS_REV:-f3fde58372d33e9a5650ba7b80fc48b3b49d40c8}
FMT_REV=${FMT_REV:-553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28}
[ $# = 3 ] || { echo "usage: $0 DEEPGEMM_GIT CUTLASS_GIT FMT_GIT" >&2; exit 2; }
out=$(cd "$(dirname "$0")/../.." && pwd)/build/deepgemm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/DeepGEMM/third-party/cutlass" "$tmp/DeepGEMM/third-party/fmt" "$out"
git --git-dir="$(git -C "$1" rev-parse --absolute-git-dir)" archive "$DG_REV" | tar -x -C "$tmp/DeepGEMM"
# (a mirror without CUTLASS's large media files reports them missing; only include/ is taken, and checked below)
git --git-dir="$(git -C "$2" rev-parse --absolute-git-dir)" archive "$CUTLASS_REV" include | tar -x -C "$tmp/DeepGEMM/third-party/cutlass" || true
git --git-dir="$(git -C "$3" rev-parse --absolute-git-dir)" archive "$FMT_REV" include | tar -x -C "$tmp/DeepGEMM/third-party/fmt"
for f in third-party/cutlass/include/cute/tensor.hpp third-party/cutlass/include/cutlass/arch/barrier.h \
         third-party/fmt/include/fmt/format.h csrc/python_api.cpp; do
  [ -f "$tmp/DeepGEMM/$f" ] || { echo "$0: $f missing from the staged tree" >&2; exit 1; }
done
echo "DeepGEMM $DG_REV, cutlass $CUTLASS_REV, fmt $FMT_REV" > "$tmp/DeepGEMM/STAGED"
tar -C "$tmp" -czf "$out/deepgemm.tar.gz" DeepGEMM
ls -l "$out/deepgemm.tar.gz"
