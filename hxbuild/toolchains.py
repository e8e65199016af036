"""The compiler each target is built with, found in a fixed order, and the driver its objects need.

AMD (gfx950): $HIPCC, hipcc on PATH, /opt/rocm/bin/hipcc, then the clang that
PyPI's ziglang carries (its AMDGPU link step needs an lld shim, below).
NVIDIA (sm_90a): $NVCC, nvcc on PATH, /usr/local/cuda/bin/nvcc, then an nvcc
inside PyPI's nvidia-cuda-nvcc; with a CUDA 13 nvcc and a 12.x ptxas from PyPI
at hand, nvcc only emits PTX and the 12.x ptxas assembles it ("nvcc+ptxas").
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .process import ToolchainError, run, version_line

TARGETS = ("gfx950", "sm_90a")
HIPCC_FIXED = ["/opt/rocm/bin/hipcc"]
NVCC_FIXED = ["/usr/local/cuda/bin/nvcc"]


@dataclass
class Toolchain:
    target: str
    mode: str  # "clang" (hipcc/ziglang), "nvcc" (nvcc -cubin), "nvcc+ptxas" (nvcc -ptx, then a 12.x ptxas)
    argv: list  # compiler command prefix
    path: str
    version: str
    env: dict = field(default_factory=dict)
    ptxas: str | None = None
    ptxas_version: str | None = None
    ptx_isa: str | None = None  # highest .version the chosen ptxas accepts

    def describe(self) -> dict:
        """The manifest's record of this toolchain."""
        d = {"mode": self.mode, "compiler": self.path, "compiler_version": self.version}
        if self.ptxas:
            d.update(ptxas=self.ptxas, ptxas_version=self.ptxas_version, ptx_isa=self.ptx_isa)
        d["driver_floor"] = driver_floor(self)
        return d


def find_toolchain(target: str, work: Path) -> Toolchain:
    """The toolchain for `target`; `work` holds the lld shim ziglang's clang needs. Raises ToolchainError."""
    return find_amd(work) if target == "gfx950" else find_nvidia()


def lld_shim(work: Path) -> Path:
    """clang's AMDGPU link step runs `lld -flavor gnu ...`; ziglang ships ld.lld behind `python -m ziglang`."""
    bindir = work / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    script = (
        "#!/bin/sh\n"
        '[ "$1" = "-flavor" ] && shift 2\n'
        f'exec "{sys.executable}" -m ziglang ld.lld "$@"\n'
    )
    for name in ("lld", "ld.lld"):
        p = bindir / name
        if not p.exists() or p.read_text() != script:
            p.write_text(script)
            p.chmod(0o755)
    return bindir


def has_ziglang() -> bool:
    return importlib.util.find_spec("ziglang") is not None


def find_amd(work: Path) -> Toolchain:
    for cand in (os.environ.get("HIPCC"), shutil.which("hipcc"), *HIPCC_FIXED):
        if cand and Path(cand).is_file():
            return Toolchain("gfx950", "clang", [cand], cand, version_line([cand]))
    if has_ziglang():
        env = dict(os.environ)
        env["PATH"] = str(lld_shim(work)) + os.pathsep + env.get("PATH", "")
        argv = [sys.executable, "-m", "ziglang", "clang"]
        ver = version_line(argv, env)
        try:
            from importlib.metadata import version

            ver = f"{ver} (ziglang {version('ziglang')})"
        except Exception:
            pass
        return Toolchain("gfx950", "clang", argv, "python -m ziglang clang", ver, env={"PATH": env["PATH"]})
    raise ToolchainError(
        "no AMD toolchain for gfx950: looked for $HIPCC, hipcc on PATH, /opt/rocm/bin/hipcc "
        "and the ziglang package. Get one with `pip install ziglang==0.17.1` (or install ROCm)."
    )


def cuda_release(version_text: str) -> tuple[int, int] | None:
    m = re.search(r"release (\d+)\.(\d+)", version_text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def pypi_cuda_nvcc() -> Path | None:
    """The folder of PyPI's nvidia-cuda-nvcc package, if installed."""
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        d = Path(base) / "cuda_nvcc"
        if d.is_dir():
            return d
    return None


def ptx_isa_of(ptxas: str) -> str:
    """The newest PTX ISA `ptxas` accepts: it names it when given one it does not."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.ptx"
        src.write_text(".version 99.9\n.target sm_90a\n.address_size 64\n")
        p = run([ptxas, "-arch=sm_90a", str(src), "-o", str(Path(tmp) / "probe.cubin")])
    m = re.search(r"current version is '(\d+\.\d+)'", p.stdout + p.stderr)
    if not m:
        raise ToolchainError(f"cannot tell which PTX ISA {ptxas} accepts:\n{p.stderr}")
    return m.group(1)


def nvcc_version(path: str) -> str:
    p = run([path, "--version"])
    lines = [ln.strip() for ln in p.stdout.splitlines() if "release" in ln]
    return lines[0] if lines else version_line([path])


def find_nvidia() -> Toolchain:
    explicit = os.environ.get("NVCC")
    if explicit:
        if not Path(explicit).is_file():
            raise ToolchainError(f"$NVCC={explicit} does not exist")
        return Toolchain("sm_90a", "nvcc", [explicit], explicit, nvcc_version(explicit))
    pypi = pypi_cuda_nvcc()
    cands = [shutil.which("nvcc"), *NVCC_FIXED]
    if pypi:
        cands.append(str(pypi / "bin" / "nvcc"))  # older wheels carried the driver too
    nvcc = next((c for c in cands if c and Path(c).is_file()), None)
    if nvcc is None:
        hint = (
            f" (found {pypi}, but PyPI's nvidia-cuda-nvcc-cu12 ships only ptxas, no nvcc front end)"
            if pypi
            else ""
        )
        raise ToolchainError(
            "no NVIDIA toolchain for sm_90a: looked for $NVCC, nvcc on PATH, /usr/local/cuda/bin/nvcc "
            f"and PyPI's nvidia-cuda-nvcc-cu12{hint}. Install a CUDA toolkit (any 12.x or newer nvcc; "
            "with CUDA 13, also `pip install nvidia-cuda-nvcc-cu12` so the cubins are assembled by a 12.x "
            "ptxas) or set $NVCC."
        )
    ver = nvcc_version(nvcc)
    rel = cuda_release(ver)
    pypi_ptxas = pypi / "bin" / "ptxas" if pypi else None
    if rel and rel[0] >= 13 and pypi_ptxas and pypi_ptxas.is_file():
        # A CUDA 13 cubin uses a newer ELF ABI that needs an R580+ driver; a
        # 12.x ptxas keeps the R525+ floor. nvcc 13 still does the C++ front
        # end; its PTX (.version 9.x) is relabelled to the ISA the 12.x ptxas
        # accepts, and ptxas rejects anything that version lacks.
        pv = nvcc_version(str(pypi_ptxas))
        prel = cuda_release(pv)
        if prel and prel[0] == 12:
            return Toolchain(
                "sm_90a", "nvcc+ptxas", [nvcc], nvcc, ver,
                ptxas=str(pypi_ptxas), ptxas_version=pv, ptx_isa=ptx_isa_of(str(pypi_ptxas)),
            )
    return Toolchain("sm_90a", "nvcc", [nvcc], nvcc, ver)


def driver_floor(tc: Toolchain) -> str:
    """The oldest driver that loads what `tc` builds, in words."""
    if tc.target == "gfx950":
        return "gfx950: AMDHSA code object v5; needs a ROCm runtime with gfx950 support (ROCm 6.4 or newer)."
    rel = cuda_release(tc.ptxas_version or tc.version)
    if rel and rel[0] == 12:
        return (
            f"sm_90a: cubins (SASS only, no PTX) assembled by CUDA {rel[0]}.{rel[1]}'s ptxas; under CUDA 12 "
            "minor-version compatibility they load on any driver with CUDA 12.0 support, R525 "
            "(Linux >= 525.60.13) or newer. Only checked on the test host's driver."
        )
    if rel:
        return (
            f"sm_90a: cubins assembled by CUDA {rel[0]}.{rel[1]}; they need a driver for CUDA {rel[0]}.0 "
            "or newer (CUDA 13: R580+)."
        )
    return f"sm_90a: unknown CUDA release ({tc.version})"
