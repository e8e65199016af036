"""A copy of the hipindexer package with a kernel build of its own, for harnesses that run the CLI or a
test suite against kernels other than the checkout's: planted bugs (tools/support/mutate.py), the emulated
tests' build (tests/emu/emu_harness.py).

The runtime finds its code objects next to its own files (hipindexer/kernels/manifest.json) and the
emulator beside them (kernels/emu-gfx950/), so the way to point a process at another build is to run a
package whose kernels/ folder is that build: python started in the copy's root, with the root first on
PYTHONPATH. The shipped package needs no switch for it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hipindexer"


class PackageCopy:
    def __init__(self, root: Path):
        self.root = Path(root)  # holds hipindexer/ (and, by default, the build's work folder)

    @property
    def kernels(self) -> Path:
        return self.root / "hipindexer" / "kernels"

    def refresh(self) -> "PackageCopy":
        """The checkout's package files, copied afresh; the copy's kernels/ is its own build and stays."""
        dst = self.root / "hipindexer"
        if dst.is_dir():
            for p in dst.iterdir():
                if p.name != "kernels":
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        top = lambda d, names: (["kernels"] if Path(d) == PACKAGE else []) + list(ignore(d, names))  # noqa: E731
        shutil.copytree(PACKAGE, dst, ignore=top, dirs_exist_ok=True)
        return self

    def seed(self, kernels: Path = PACKAGE / "kernels") -> "PackageCopy":
        """A copy with no build yet starts from the build in `kernels` (default: the checkout's own), if there
        is one: build.py then recompiles only what is not current there. A cache of objects, never a source:
        whatever build.py finds stale it rebuilds."""
        if not self.kernels.is_dir() and (Path(kernels) / "manifest.json").is_file():
            shutil.copytree(kernels, self.kernels)
        return self

    def build(self, targets, src: Path = ROOT / "hsaco_src", extra=()) -> subprocess.CompletedProcess:
        """build.py for `targets` from `src` into this copy's kernels/."""
        argv = [sys.executable, str(ROOT / "build.py"), "--quiet", "--src", str(src), "--out", str(self.kernels),
                "--work", str(self.root / "work"), *extra]
        for t in targets:
            argv += ["--target", t]
        return subprocess.run(argv, capture_output=True, text=True)

    def env(self, *paths, emulated=False) -> dict:
        """The environment of a python that imports this copy (then `paths`, then the caller's PYTHONPATH).

        `emulated`: one OpenBLAS thread, unless the caller chose a number. The emulator runs a kernel on one
        thread between the references' BLAS calls, and after each call OpenBLAS's idle threads spin, on the cores
        that the emulator and any suite running beside it need."""
        old = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(self.root), *map(str, paths), *([old] if old else [])])}
        if emulated:
            env.setdefault("OPENBLAS_NUM_THREADS", "1")
        return env

    def run(self, argv, *paths, emulated=False, **kw) -> subprocess.CompletedProcess:
        """`python *argv` on this copy. Started in the copy's root: python puts its working folder ahead of
        PYTHONPATH, and a checkout's own hipindexer/ there would win. `emulated`: the process runs kernels on the
        CPU emulator (see env)."""
        return subprocess.run([sys.executable, *map(str, argv)], cwd=self.root, env=self.env(*paths, emulated=emulated),
                              capture_output=True, text=True, **kw)
