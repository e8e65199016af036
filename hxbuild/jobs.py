"""One compile per catalog kernel x target x variant: its flags and the hash that says when to redo it.

The hash covers the source and every quoted include it reaches, the generated
params header and the flags. Flags keep <src> and <work> placeholders, so a
checkout that moves does not rebuild.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .hipindexer_modules import catalog
from .process import BuildError

PARAMS_HEADER = "hx_params.h"  # generated from the catalog into <work>/include


@dataclass
class Job:
    kernel: object  # catalog.Kernel
    target: str
    variant: dict
    key: str  # catalog.variant_key: the object's file stem
    flags: list
    shash: str
    source: Path


def flags_for(target: str, mode: str, kernel, variant: dict) -> list[str]:
    """Compiler flags, with <src>/<work> placeholders; "|" splits nvcc's from ptxas's in nvcc+ptxas mode."""
    defines = [f"-DHX_BLOCK={kernel.block_for(target)}"] + [f"-D{k}={variant[k]}" for k in sorted(variant)]
    defines += [f"-D{k}={v}" for k, v in kernel.defines]
    if kernel.smem_for(target):
        defines.append(f"-DHX_SMEM={kernel.smem_for(target)}")
    incs = ["-I<src>/common", "-I<work>/include"]
    if target == "gfx950":
        return [
            "-x", "hip", "--offload-arch=gfx950", "--cuda-device-only", "-nogpulib", "-nogpuinc",
            "-O3", "-fno-honor-nans", "-std=c++17", "-ffreestanding", "-mcode-object-version=5",
            "--no-gpu-bundle-output", "-fuse-cuid=none", *defines, *incs,
        ]
    if mode == "nvcc+ptxas":
        return [
            "-x", "cu", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
            *defines, *incs, "|", "ptxas", "-arch=sm_90a", "-O3", "-v",
        ]
    return [
        "-x", "cu", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
        "-Xptxas", "-v", *defines, *incs,
    ]


def expand(flags: list[str], src: Path, work: Path) -> list[str]:
    return [f.replace("<src>", str(src)).replace("<work>", str(work)) for f in flags]


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def include_closure(source: Path, src_root: Path, dirs=None) -> list[Path]:
    """The source and every quoted include it reaches (the params header is hashed as text instead), each
    looked for beside the file that includes it, then in `dirs` (default: <src>/common, <src>/emu)."""
    dirs = (src_root / "common", src_root / "emu") if dirs is None else tuple(dirs)
    seen, todo = [], [source.resolve()]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.append(f)
        for name in _INCLUDE.findall(f.read_text()):
            if name == PARAMS_HEADER:
                continue
            for d in (f.parent, *dirs):
                if (d / name).is_file():
                    todo.append((d / name).resolve())
                    break
            else:
                raise BuildError(f"{f}: cannot find included file {name!r}")
    return seen


def source_hash(source: Path, src_root: Path, header: str, flags: list[str]) -> str:
    h = hashlib.sha256()
    root = src_root.resolve()
    for f in sorted(include_closure(source, src_root), key=lambda p: str(p.relative_to(root))):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(PARAMS_HEADER.encode() + b"\0" + header.encode() + b"\0")
    h.update("\0".join(flags).encode())
    return h.hexdigest()


def plan(kernels, targets, src: Path, header: str, modes: dict) -> list[Job]:
    """Every job of `kernels` (catalog.Kernel) for `targets`, in their order; modes: target -> Toolchain.mode."""
    jobs = []
    for k in kernels:
        source = src / k.source
        if not source.is_file():
            raise BuildError(f"{k.key}: source {source} is missing")
        for t in targets:
            if t not in k.targets:
                continue
            for v in k.variants:
                flags = flags_for(t, modes[t], k, v)
                jobs.append(Job(k, t, v, catalog.variant_key(k, v), flags, source_hash(source, src, header, flags), source))
    return jobs
