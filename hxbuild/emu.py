"""Build the host emulation of gfx950 kernels (target `emu-gfx950`).

Layout under <out>/emu-gfx950/:
    lib/libhxemu.so       the emulator core (fibers, wave scheduler, primitives)
    lib/libamdhip64.so    the emulated HIP runtime hip-python loads through ROCM_PATH
    <variant_key>.so      one per gfx950 kernel: the SAME source compiled for
                          x86-64 with -DHX_EMU, plus a generated entry that
                          unpacks the kernarg bytes into the param struct
    registry.txt          sha256 of each real gfx950 object -> symbol, param
                          size, emulated library (what hipModuleLoadData reads)

Kernel translation units need clang (ext_vector_type, pattern-initialised
locals): ziglang's clang targets the host as well as AMDGPU. The core and the
runtime are plain C and build with the system C compiler. Stdlib only, like
the rest of hxbuild/: build.py imports it as hxbuild.emu, and so do the tests
that build emulated kernels of their own (tests/emu/emu_harness.py). Build
code, not package code: no wheel carries it (the emulator runtime,
hipindexer/runtime/emu.py, only loads what this built).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .jobs import include_closure

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "hsaco_src"
EMU_SRC = SRC / "emu"
TARGET = "emu-gfx950"
CORE_SOURCES = ("core.c", "prims.c", "fp8.c", "fiber.c", "fiber.S")
RUNTIME_SOURCES = ("hip_runtime.c", "sha256.c")
# -ftrivial-auto-var-init=pattern: uninitialised locals read as 0xAA.. / NaN
# floats instead of whatever the previous lane left on a reused stack.
KERNEL_FLAGS = (
    "-x", "c++", "-std=c++17", "-O2", "-fPIC", "-target", "x86_64-linux-gnu", "-ffreestanding",
    "-fno-exceptions", "-fno-rtti", "-fvisibility=hidden", "-ftrivial-auto-var-init=pattern",
    "-DHX_EMU=1", "-Wno-unused-command-line-argument",
)
C_FLAGS = ("-O2", "-fPIC", "-std=gnu11", "-fvisibility=hidden", "-Wall")


class EmuBuildError(RuntimeError):
    pass


def _run(argv, what):
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if p.returncode:
        raise EmuBuildError(f"{what} failed:\n$ {' '.join(map(str, argv))}\n{p.stdout}{p.stderr}")
    return p


def host_clang() -> list[str]:
    """Compiler for kernel TUs: $HX_EMU_CLANG, clang on PATH, else ziglang's."""
    env = os.environ.get("HX_EMU_CLANG")
    if env:
        return env.split()
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "clang"]
    if shutil.which("clang"):
        return ["clang"]
    raise EmuBuildError("no clang for the emu-gfx950 kernels: pip install ziglang (or set HX_EMU_CLANG)")


def host_cc() -> list[str]:
    """C compiler + linker for the core, the runtime and the kernel .so files."""
    env = os.environ.get("HX_EMU_CC")
    if env:
        return env.split()
    for c in ("cc", "gcc", "clang"):
        if shutil.which(c):
            return [c]
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "cc"]
    raise EmuBuildError("no C compiler for the emulator core (looked for $HX_EMU_CC, cc, gcc, clang, ziglang)")


def available() -> bool:
    try:
        host_clang(), host_cc()
        return True
    except EmuBuildError:
        return False


def _digest(paths, extra=b"") -> str:
    h = hashlib.sha256(extra)
    for p in paths:
        h.update(str(Path(p).name).encode() + b"\0" + Path(p).read_bytes() + b"\0")
    return h.hexdigest()


def _stamped(out: Path, digest: str) -> bool:
    stamp = out.with_name(out.name + ".sha256")
    return out.is_file() and stamp.is_file() and stamp.read_text() == digest


def _stamp(out: Path, digest: str) -> None:
    out.with_name(out.name + ".sha256").write_text(digest)


def _library_digest(sources, out: Path, link=(), src: Path = SRC) -> str:
    emu_src = Path(src) / "emu"
    # the library's own folder (a -L of the link) is hashed as a placeholder: a moved build stays current
    return _digest([emu_src / s for s in sources] + sorted(emu_src.glob("*.h")),
                   " ".join(map(str, link)).replace(str(out.parent), "<lib>").encode())


def _runtime_link(lib_dir: Path) -> tuple:
    return ("-L", str(lib_dir), "-lhxemu", "-ldl", "-lpthread", "-Wl,-rpath,$ORIGIN")


def _c_library(sources, out: Path, link=(), force=False, src: Path = SRC) -> Path:
    emu_src = Path(src) / "emu"
    srcs = [emu_src / s for s in sources]
    digest = _library_digest(sources, out, link, src)
    if not force and _stamped(out, digest):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    cc = host_cc()
    with tempfile.TemporaryDirectory() as tmp:
        objs = []
        for s in srcs:
            o = Path(tmp) / (s.name + ".o")
            _run([*cc, *C_FLAGS, "-I", emu_src, "-c", s, "-o", o], f"compile {s.name}")
            objs.append(o)
        tmp_out = Path(tmp) / out.name
        _run([*cc, "-shared", f"-Wl,-soname,{out.name}", "-o", tmp_out, *objs, *link], f"link {out.name}")
        os.replace(tmp_out, out)
    _stamp(out, digest)
    return out


def build_core(lib_dir: Path, force=False, src: Path = SRC) -> Path:
    return _c_library(CORE_SOURCES, Path(lib_dir) / "libhxemu.so", force=force, src=src)


def build_runtime(lib_dir: Path, force=False, src: Path = SRC) -> Path:
    lib_dir = Path(lib_dir)
    build_core(lib_dir, force, src)
    return _c_library(RUNTIME_SOURCES, lib_dir / "libamdhip64.so", link=_runtime_link(lib_dir), force=force, src=src)


def wrapper_text(source: Path, kernels) -> str:
    """The host entry of each kernel: kernarg bytes -> param struct -> the kernel, for the current lane."""
    lines = [
        "// Generated by hxbuild/emu.py: host entry points of an emulated gfx950 kernel.",
        f'#include "{Path(source).resolve()}"',
        '#include "hx_emu.h"',
    ]
    for symbol, struct, block in kernels:
        lines += [
            f"static void hx_lane_{symbol}(const void* kernarg) {{",
            f"  {struct} p;",
            "  __builtin_memcpy(&p, kernarg, sizeof p);  // the kernarg segment is the param struct, byte for byte",
            f"  {symbol}(p);",
            "}",
            f'extern "C" __attribute__((visibility("default"))) const hx_emu_kernel hx_emu_kernel_{symbol} = '
            f'{{"{symbol}", sizeof({struct}), {int(block)}, hx_lane_{symbol}}};',
        ]
    return "\n".join(lines) + "\n"


def build_kernel(source: Path, kernels, out: Path, lib_dir: Path, defines=(), include_dirs=(), rpath=None,
                 force=False, src: Path = SRC) -> Path:
    """Compile one gfx950 kernel source for the host emulator into a shared library.

    kernels: [(symbol, param struct name, block)]; defines: ["NAME=VALUE", ...];
    rpath: where the .so finds libhxemu.so at run time (default: lib_dir).
    """
    source, out, lib_dir, src = Path(source), Path(out), Path(lib_dir), Path(src)
    core = build_core(lib_dir, force, src)
    includes = [src / "common", src / "emu", src / "gfx950", source.parent, *map(Path, include_dirs)]
    text = wrapper_text(source, kernels)
    # The digest covers what the compile reads, not where it sits: the files the source and hx_emu.h reach
    # (so a header edit rebuilds only the kernels that include it) and the wrapper as if it named the source
    # by name alone (its bytes are among the deps), so a moved copy of the sources -- a planted tree of
    # tools/support/mutate.py, built on the clean build's objects -- rebuilds only what it changed.
    deps = [f for s in (source, src / "emu" / "hx_emu.h") for f in include_closure(s, src, includes)]
    deps += [p for d in include_dirs for p in sorted(Path(d).glob("*.h"))]
    digest = _digest(deps, (wrapper_text(Path(source.name), kernels) + "\0".join(defines) + str(rpath)
                            + core.with_name(core.name + ".sha256").read_text()).encode())
    if not force and _stamped(out, digest):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / f"{out.stem}.emu.cpp"
        wrapper.write_text(text)
        obj = Path(tmp) / "k.o"
        argv = [*host_clang(), *KERNEL_FLAGS, *(f"-D{d}" for d in defines)]
        for inc in includes:
            argv += ["-I", inc]
        _run(argv + ["-c", wrapper, "-o", obj], f"[{TARGET}] compile {source.name}")
        tmp_out = Path(tmp) / out.name
        rp = str(rpath) if rpath is not None else str(lib_dir.resolve())
        _run([*host_cc(), "-shared", "-o", tmp_out, obj, "-L", lib_dir, "-lhxemu", f"-Wl,-rpath,{rp}"],
             f"[{TARGET}] link {out.name}")
        os.replace(tmp_out, out)
    _stamp(out, digest)
    return out


def write_registry(root: Path, rows) -> Path:
    """rows: (sha256 of the real gfx950 object, symbol, param_size, library path relative to root)."""
    path = Path(root) / "registry.txt"
    body = "".join(f"{sha} {sym} {size} {rel}\n" for sha, sym, size, rel in sorted(rows))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(body)
    os.replace(tmp, path)
    return path


def build_target(out: Path, src: Path, work: Path, entries, jobs=1, log=print, force=False) -> Path:
    """Everything under <out>/emu-gfx950 for the gfx950 manifest entries `entries`.

    Each entry's emulated twin gets the defines of its device build (HX_BLOCK,
    variant) and the generated hx_params.h; the registry maps the entry's
    object sha256 to it.
    """
    import concurrent.futures

    root = Path(out) / TARGET
    lib_dir = root / "lib"
    build_runtime(lib_dir, force, src)
    rows = []

    def one(e):
        # the device build's own defines (HX_BLOCK, the variant's, the kernel's fixed ones), from its flags
        defines = [f[2:] for f in e["flags"] if f.startswith("-D")]
        so = root / f"{e['variant_key']}.so"
        build_kernel(Path(src) / e["source"], [(e["symbol"], e["params"], e["block"])], so, lib_dir, defines,
                     [Path(work) / "include"], rpath="$ORIGIN/lib", force=force, src=src)
        return (e["sha256"], e["symbol"], e["param_size"], so.name)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for row in pool.map(one, entries):
            rows.append(row)
            log(f"[{TARGET}] {Path(row[3]).stem}: built")
    write_registry(root, rows)
    return root


def stale_libraries(lib_dir: Path, src: Path = SRC) -> list[str]:
    """The emulator's libraries in lib_dir that are missing or were built from other sources than src's."""
    lib_dir, problems = Path(lib_dir), []
    for lib, sources, link in (("libhxemu.so", CORE_SOURCES, ()),
                               ("libamdhip64.so", RUNTIME_SOURCES, _runtime_link(lib_dir))):
        if not (lib_dir / lib).is_file():
            problems.append(f"lib/{lib} is missing")
        elif not _stamped(lib_dir / lib, _library_digest(sources, lib_dir / lib, link, src)):
            problems.append(f"lib/{lib} is stale: built from other sources than {Path(src) / 'emu'}")
    return problems


def check_target(out: Path, entries, src: Path = SRC) -> list[str]:
    """Problems with <out>/emu-gfx950 against the gfx950 manifest entries; empty when current."""
    root = Path(out) / TARGET
    reg = root / "registry.txt"
    if not reg.is_file():
        return [f"[{TARGET}] {reg} is missing: run build.py"]
    have = {tuple(line.split()[:2]): line.split() for line in reg.read_text().splitlines() if line.strip()}
    problems = [f"[{TARGET}] {p}" for p in stale_libraries(root / "lib", src)]
    for e in entries:
        row = have.get((e["sha256"], e["symbol"]))
        if row is None:
            problems.append(f"[{TARGET}] {e['variant_key']}: no emulated twin of the current gfx950 object")
        elif not (root / row[3]).is_file():
            problems.append(f"[{TARGET}] {e['variant_key']}: {row[3]} is missing")
    return problems
