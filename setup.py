"""Builds the kernel code objects before build_py copies package data, so a
wheel (or a non-editable install) carries hipindexer/kernels/ and needs no
compiler on the user's machine. HIPINDEXER_SKIP_BUILD=1 skips it (editable
installs, docs); HIPINDEXER_TARGETS=gfx950,sm_90a restricts the targets.
A missing toolchain is an error, never a silently empty wheel."""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class build_py_with_kernels(build_py):
    def run(self):
        if os.environ.get("HIPINDEXER_SKIP_BUILD") != "1":
            argv = [sys.executable, str(HERE / "build.py"), "--no-emu"]  # wheels never carry the CPU emulator
            for t in filter(None, os.environ.get("HIPINDEXER_TARGETS", "").split(",")):
                argv += ["--target", t.strip()]
            if subprocess.run(argv, cwd=HERE).returncode != 0:
                raise SystemExit("hipindexer: kernel build failed (see above); set HIPINDEXER_SKIP_BUILD=1 to skip")
        super().run()


setup(cmdclass={"build_py": build_py_with_kernels})
