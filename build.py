#!/usr/bin/env python3
"""Compile every catalog kernel x target x variant into code objects + manifest.

    python build.py [--target gfx950|sm_90a ...] [--check] [--force] [-j N]
                    [--quiet] [--src DIR] [--out DIR] [--work DIR]

Objects land in <out>/<target>/<variant_key>.<hsaco|cubin> (default out:
hipindexer/kernels), described by <out>/manifest.json. Incremental: an
object is rebuilt only when its source_hash, flags or compiler changed or the
file is missing / differs from its recorded sha256. --check compiles nothing:
it verifies the manifest against the objects and the sources and exits 1
naming every stale kernel. Stdlib only, plus msgpack for the AMDGPU metadata.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
HIPCC_FIXED = ["/opt/rocm/bin/hipcc"]
NVCC_FIXED = ["/usr/local/cuda/bin/nvcc"]
TARGETS = ("gfx950", "sm_90a")
SUFFIX = {"gfx950": "hsaco", "sm_90a": "cubin"}
SCHEMA = 1


def _load(name: str, path: Path):
    # By path, not `import hipindexer...`: the package __init__ may need
    # numpy etc., which an isolated wheel build does not have.
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look the module up while defining
    spec.loader.exec_module(mod)
    return mod


catalog = _load("_hx_catalog", ROOT / "hipindexer" / "catalog.py")
codeobj = _load("_hx_codeobj", ROOT / "hipindexer" / "runtime" / "codeobj.py")
emubuild = _load("_hx_emubuild", ROOT / "hipindexer" / "emubuild.py")
EMU = emubuild.TARGET  # host emulation of the gfx950 objects: development and CI only, never in wheels


class BuildError(RuntimeError):
    pass


class ToolchainError(BuildError):
    pass


def _log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _run(argv, env=None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env)
    except OSError as e:
        raise BuildError(f"cannot run {argv[0]}: {e}") from None


def _first_line(argv, env=None) -> str:
    p = _run(argv + ["--version"], env)
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    return lines[0].strip() if lines else "unknown"


# ---------------------------------------------------------------- toolchains


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
        d = {"mode": self.mode, "compiler": self.path, "compiler_version": self.version}
        if self.ptxas:
            d.update(ptxas=self.ptxas, ptxas_version=self.ptxas_version, ptx_isa=self.ptx_isa)
        d["driver_floor"] = driver_floor(self)
        return d


def _lld_shim(work: Path) -> Path:
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


def _has_ziglang() -> bool:
    return importlib.util.find_spec("ziglang") is not None


def find_amd(work: Path) -> Toolchain:
    for cand in (os.environ.get("HIPCC"), shutil.which("hipcc"), *HIPCC_FIXED):
        if cand and Path(cand).is_file():
            return Toolchain("gfx950", "clang", [cand], cand, _first_line([cand]))
    if _has_ziglang():
        env = dict(os.environ)
        env["PATH"] = str(_lld_shim(work)) + os.pathsep + env.get("PATH", "")
        argv = [sys.executable, "-m", "ziglang", "clang"]
        ver = _first_line(argv, env)
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


def _cuda_release(version_text: str) -> tuple[int, int] | None:
    m = re.search(r"release (\d+)\.(\d+)", version_text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _pypi_cuda_nvcc() -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        d = Path(base) / "cuda_nvcc"
        if d.is_dir():
            return d
    return None


def _ptx_isa_of(ptxas: str) -> str:
    # ptxas names the newest PTX ISA it accepts when given one it does not.
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.ptx"
        src.write_text(".version 99.9\n.target sm_90a\n.address_size 64\n")
        p = _run([ptxas, "-arch=sm_90a", str(src), "-o", str(Path(tmp) / "probe.cubin")])
    m = re.search(r"current version is '(\d+\.\d+)'", p.stdout + p.stderr)
    if not m:
        raise ToolchainError(f"cannot tell which PTX ISA {ptxas} accepts:\n{p.stderr}")
    return m.group(1)


def find_nvidia() -> Toolchain:
    explicit = os.environ.get("NVCC")
    if explicit:
        if not Path(explicit).is_file():
            raise ToolchainError(f"$NVCC={explicit} does not exist")
        return Toolchain("sm_90a", "nvcc", [explicit], explicit, _first_line_nvcc(explicit))
    pypi = _pypi_cuda_nvcc()
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
    ver = _first_line_nvcc(nvcc)
    rel = _cuda_release(ver)
    pypi_ptxas = pypi / "bin" / "ptxas" if pypi else None
    if rel and rel[0] >= 13 and pypi_ptxas and pypi_ptxas.is_file():
        # A CUDA 13 cubin uses a newer ELF ABI that needs an R580+ driver; a
        # 12.x ptxas keeps the R525+ floor. nvcc 13 still does the C++ front
        # end; its PTX (.version 9.x) is relabelled to the ISA the 12.x ptxas
        # accepts, and ptxas rejects anything that version lacks.
        pv = _first_line_nvcc(str(pypi_ptxas))
        prel = _cuda_release(pv)
        if prel and prel[0] == 12:
            return Toolchain(
                "sm_90a", "nvcc+ptxas", [nvcc], nvcc, ver,
                ptxas=str(pypi_ptxas), ptxas_version=pv, ptx_isa=_ptx_isa_of(str(pypi_ptxas)),
            )
    return Toolchain("sm_90a", "nvcc", [nvcc], nvcc, ver)


def _first_line_nvcc(path: str) -> str:
    p = _run([path, "--version"])
    lines = [ln.strip() for ln in p.stdout.splitlines() if "release" in ln]
    return lines[0] if lines else _first_line([path])


def find_toolchain(target: str, work: Path) -> Toolchain:
    return find_amd(work) if target == "gfx950" else find_nvidia()


def driver_floor(tc: Toolchain) -> str:
    if tc.target == "gfx950":
        return "gfx950: AMDHSA code object v5; needs a ROCm runtime with gfx950 support (ROCm 6.4 or newer)."
    rel = _cuda_release(tc.ptxas_version or tc.version)
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


# ----------------------------------------------------------- flags and hashes


def flags_for(target: str, mode: str, kernel, variant: dict) -> list[str]:
    """Compiler flags with <src>/<work> placeholders so hashes survive a move."""
    defines = [f"-DHX_BLOCK={kernel.block}"] + [f"-D{k}={variant[k]}" for k in sorted(variant)]
    defines += [f"-D{k}={v}" for k, v in getattr(kernel, "defines", ())]
    if getattr(kernel, "smem", 0):
        defines.append(f"-DHX_SMEM={kernel.smem}")
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


def _expand(flags: list[str], src: Path, work: Path) -> list[str]:
    return [f.replace("<src>", str(src)).replace("<work>", str(work)) for f in flags]


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def include_closure(source: Path, src_root: Path) -> list[Path]:
    """The source and every quoted include it reaches (hx_params.h is hashed as text)."""
    seen, todo = [], [source.resolve()]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.append(f)
        for name in _INCLUDE.findall(f.read_text()):
            if name == "hx_params.h":
                continue
            for d in (f.parent, src_root / "common", src_root / "emu"):
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
    h.update(b"hx_params.h\0" + header.encode() + b"\0")
    h.update("\0".join(flags).encode())
    return h.hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ compiles


_ASM_KEYS = {"NumVgprs": "vgpr", "NumAgprs": "agpr", "TotalNumSgprs": "sgpr", "ScratchSize": "scratch", "Occupancy": "occupancy"}


def parse_amdgpu_asm(text: str) -> dict:
    out = {}
    for key, name in _ASM_KEYS.items():
        m = re.search(rf"^; {key}: (\d+)", text, re.M)
        if m:
            out[name] = int(m.group(1))
    m = re.search(r"^; LDSByteSize: (\d+)", text, re.M)
    if m:
        out["lds"] = int(m.group(1))
    return out


def gfx950_occupancy(vgpr: int, agpr: int, lds: int, block: int) -> int:
    """Waves per SIMD: 512 unified VGPRs (AGPRs start at the 4-aligned end of
    the VGPRs), granule 8, max 8; LDS 160 KiB per CU in 1280-byte granules."""
    total = (-(-vgpr // 4) * 4 + agpr) if agpr else vgpr
    alloc = max(8, -(-total // 8) * 8)
    waves = min(8, 512 // alloc)
    if lds > 0:
        wgs_per_cu = 163840 // (-(-lds // 1280) * 1280)
        waves_per_wg = -(-block // 64)
        waves = min(waves, -(-wgs_per_cu * waves_per_wg // 4))  # LLVM rounds up: a CU's waves over its 4 SIMDs
    return waves


def amd_resources(obj: bytes, asm: str, symbol: str, block: int) -> tuple[int, dict]:
    elf = codeobj.Elf(obj)
    if elf.machine != codeobj.EM_AMDGPU or elf.abiversion != 3 or (elf.flags & 0xFF) != 0x4F:
        raise BuildError(
            f"{symbol}: not a gfx950 code object v5 (e_machine {elf.machine}, "
            f"abiversion {elf.abiversion}, mach {elf.flags & 0xFF:#x})"
        )
    meta = codeobj.amdgpu_kernel(obj, symbol)
    offset, size = codeobj.amdgpu_param_struct(meta)
    if offset != 0:
        raise BuildError(f"{symbol}: param struct at kernarg offset {offset}, expected 0")
    res = {
        "vgpr": meta[".vgpr_count"],
        "agpr": meta.get(".agpr_count", 0),
        "sgpr": meta[".sgpr_count"],
        "vgpr_spill": meta.get(".vgpr_spill_count", 0),
        "sgpr_spill": meta.get(".sgpr_spill_count", 0),
        "lds": meta[".group_segment_fixed_size"],
        "scratch": meta[".private_segment_fixed_size"],
        "kernarg_size": meta[".kernarg_segment_size"],
        "kernarg_align": meta[".kernarg_segment_align"],
        "max_flat_workgroup_size": meta[".max_flat_workgroup_size"],
        "wavefront_size": meta[".wavefront_size"],
        "args": [{"offset": a[".offset"], "size": a[".size"], "value_kind": a[".value_kind"]} for a in meta[".args"]],
    }
    res["occupancy"] = gfx950_occupancy(res["vgpr"], res["agpr"], res["lds"], block)
    res["asm"] = parse_amdgpu_asm(asm)
    bad = [k for k in ("vgpr", "agpr", "scratch", "occupancy") if res["asm"].get(k) != res[k]]
    if bad:
        raise BuildError(f"{symbol}: code object and -S disagree on {bad}: note {res}, asm {res['asm']}")
    if res["max_flat_workgroup_size"] != block:
        raise BuildError(f"{symbol}: launch bounds {res['max_flat_workgroup_size']} != catalog block {block}")
    return size, res


_PTXAS_FUNC = re.compile(r"Function properties for (\S+)\n(.*?)(?=Function properties for|\Z)", re.S)


def parse_ptxas(text: str, symbol: str) -> dict:
    for name, body in _PTXAS_FUNC.findall(text):
        if name != symbol:
            continue
        num = lambda pat: int(m.group(1)) if (m := re.search(pat, body)) else 0  # noqa: E731
        return {
            "registers": num(r"Used (\d+) registers"),
            "shared": num(r"(\d+) bytes smem"),
            "stack": num(r"(\d+) bytes stack frame"),
            "spill_stores": num(r"(\d+) bytes spill stores"),
            "spill_loads": num(r"(\d+) bytes spill loads"),
            "barriers": num(r"used (\d+) barriers"),
        }
    raise BuildError(f"ptxas -v printed nothing for {symbol}:\n{text}")


def serialised_wgmma(ptxas_out: str) -> str | None:
    """ptxas's note that it serialised a kernel's wgmma (every MMA waits for the one before: a silent
    loss of most of the tensor-core rate), or None."""
    for line in ptxas_out.splitlines():
        if "wgmma" in line and "serialized" in line:
            return line.strip()
    return None


def cuda_resources(obj: bytes, ptxas_out: str, symbol: str) -> tuple[int, dict]:
    note = serialised_wgmma(ptxas_out)
    if note:
        raise BuildError(f"{symbol}: {note}")
    elf = codeobj.Elf(obj)
    if elf.machine != codeobj.EM_CUDA:
        raise BuildError(f"{symbol}: e_machine {elf.machine} is not EM_CUDA")
    params = codeobj.cuda_params(obj, symbol)
    if len(params) != 1:
        raise BuildError(f"{symbol}: expected one by-value param struct, cubin lists {params}")
    res = parse_ptxas(ptxas_out, symbol)
    res["param_offset"] = params[0]["offset"]  # inside the param buffer; >0 for a 64-aligned struct
    res["param_buffer_size"] = codeobj.cuda_param_buffer_size(obj, symbol)
    res["elf_abi"] = [elf.osabi, elf.abiversion]
    return params[0]["size"], res


@dataclass
class Job:
    kernel: object
    target: str
    variant: dict
    key: str
    flags: list
    shash: str
    source: Path


def compile_job(job: Job, tc: Toolchain, src: Path, work: Path, out: Path) -> dict:
    k = job.kernel
    flags = _expand(job.flags, src, work)
    obj_path = out / job.target / f"{job.key}.{SUFFIX[job.target]}"
    obj_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **tc.env}
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        tmp_obj = Path(tmp) / obj_path.name
        if job.target == "gfx950":
            p = _run(tc.argv + flags + [str(job.source), "-o", str(tmp_obj)], env)
            q = _run(tc.argv + flags + ["-S", str(job.source), "-o", str(Path(tmp) / "k.s")], env) if p.returncode == 0 else p
            if p.returncode or q.returncode:
                raise BuildError(f"[gfx950] {job.key}: compile failed:\n{p.stderr or q.stderr}")
            asm_or_log = (Path(tmp) / "k.s").read_text()
        elif tc.mode == "nvcc+ptxas":
            cut = flags.index("|")
            ptx = Path(tmp) / "k.ptx"
            p = _run(tc.argv + flags[:cut] + [str(job.source), "-o", str(ptx)], env)
            if p.returncode:
                raise BuildError(f"[sm_90a] {job.key}: nvcc failed:\n{p.stderr}")
            text = re.sub(r"^\.version \d+\.\d+", f".version {tc.ptx_isa}", ptx.read_text(), count=1, flags=re.M)
            ptx.write_text(text)
            q = _run([tc.ptxas] + flags[cut + 2 :] + [str(ptx), "-o", str(tmp_obj)], env)
            if q.returncode:
                raise BuildError(f"[sm_90a] {job.key}: ptxas failed:\n{q.stderr}")
            asm_or_log = q.stdout + q.stderr
        else:
            p = _run(tc.argv + flags + [str(job.source), "-o", str(tmp_obj)], env)
            if p.returncode:
                raise BuildError(f"[sm_90a] {job.key}: nvcc failed:\n{p.stderr}")
            asm_or_log = p.stdout + p.stderr
        data = tmp_obj.read_bytes()
        if job.target == "gfx950":
            param_size, res = amd_resources(data, asm_or_log, k.symbol, k.block)
        else:
            param_size, res = cuda_resources(data, asm_or_log, k.symbol)
        want = catalog.STRUCT[k.params].size
        if param_size != want:
            raise BuildError(
                f"[{job.target}] {job.key}: code object says {k.params} is {param_size} bytes, "
                f"catalog mirror says {want}"
            )
        os.replace(tmp_obj, obj_path)
    return {
        "name": k.key,
        "symbol": k.symbol,
        "target": job.target,
        "variant": dict(job.variant),
        "variant_key": job.key,
        "object": f"{job.target}/{obj_path.name}",
        "sha256": hashlib.sha256(data).hexdigest(),
        "source": k.source,
        "source_hash": job.shash,
        "compiler": tc.path if tc.mode != "nvcc+ptxas" else f"{tc.path} | {tc.ptxas}",
        "compiler_version": tc.version if tc.mode != "nvcc+ptxas" else f"{tc.version} | ptxas {tc.ptxas_version}",
        "toolchain_mode": tc.mode,
        "flags": job.flags,
        "params": k.params,
        "param_size": param_size,
        "block": k.block,
        "dynamic_smem": getattr(k, "smem", 0),
        "resources": res,
    }


# ---------------------------------------------------------------------- main


def plan(targets, src: Path, header: str, modes: dict) -> list[Job]:
    jobs = []
    for k in catalog.KERNELS:
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


def check(out: Path, src: Path, targets) -> list[str]:
    """Stale or missing kernels, by name; empty when everything is current."""
    mpath = out / "manifest.json"
    if not mpath.is_file():
        return [f"{mpath} is missing: run build.py"]
    manifest = json.loads(mpath.read_text())
    header = catalog.header_text()
    problems = []
    have = {(e["target"], e["variant_key"]): e for e in manifest.get("kernels", [])}
    wanted = set()
    for t in targets:
        mode = manifest.get("toolchains", {}).get(t, {}).get("mode", "clang" if t == "gfx950" else "nvcc")
        for job in plan([t], src, header, {t: mode}):
            wanted.add((t, job.key))
            e = have.get((t, job.key))
            if e is None:
                problems.append(f"[{t}] {job.key}: not in the manifest")
                continue
            obj = out / e["object"]
            if not obj.is_file():
                problems.append(f"[{t}] {job.key}: object {obj} is missing")
            elif _sha256(obj) != e["sha256"]:
                problems.append(f"[{t}] {job.key}: object {obj} does not match its sha256")
            if e["source_hash"] != job.shash:
                problems.append(f"[{t}] {job.key}: sources, params header or flags changed since it was built ({e['source']})")
    for (t, key) in have:
        if t in targets and (t, key) not in wanted:
            problems.append(f"[{t}] {key}: in the manifest but not in the catalog")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="build.py", description=__doc__.splitlines()[0])
    ap.add_argument("--target", action="append", choices=TARGETS + (EMU,),
                    help=f"repeatable; default: all ({EMU} only where a host compiler is found; it needs gfx950)")
    ap.add_argument("--no-emu", action="store_true", help=f"leave {EMU} out of the default targets (wheel builds)")
    ap.add_argument("--check", action="store_true", help="verify manifest vs objects and sources; compile nothing")
    ap.add_argument("--force", action="store_true", help="rebuild everything")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--src", type=Path, default=ROOT / "hsaco_src")
    ap.add_argument("--out", type=Path, default=ROOT / "hipindexer" / "kernels")
    ap.add_argument("--work", type=Path, default=ROOT / "build", help="generated header, lld shim, temporaries")
    a = ap.parse_args(argv)
    emu = EMU in a.target if a.target else not a.no_emu and emubuild.available()
    targets = tuple(t for t in TARGETS if t in (a.target or TARGETS) or (emu and t == "gfx950"))
    src, out, work = a.src.resolve(), a.out.resolve(), a.work.resolve()

    try:
        if a.check:
            problems = check(out, src, targets)
            if emu and not problems:
                problems = emubuild.check_target(out, _gfx950_entries(out))
            for p in problems:
                print(f"stale: {p}", file=sys.stderr)
            if not problems:
                _log(a.quiet, f"manifest {out / 'manifest.json'} is current")
            return 1 if problems else 0
        rc = _build(a, targets, src, out, work)
        if rc == 0 and emu:
            emubuild.build_target(out, src, work, _gfx950_entries(out), a.jobs, lambda m: _log(a.quiet, m), a.force)
        return rc
    except emubuild.EmuBuildError as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 2
    except BuildError as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 2


def _gfx950_entries(out: Path) -> list[dict]:
    return [e for e in json.loads((out / "manifest.json").read_text())["kernels"] if e["target"] == "gfx950"]


def _build(a, targets, src: Path, out: Path, work: Path) -> int:
    header = catalog.header_text()
    (work / "include").mkdir(parents=True, exist_ok=True)
    hpath = work / "include" / "hx_params.h"
    if not hpath.is_file() or hpath.read_text() != header:
        hpath.write_text(header)
    tcs = {t: find_toolchain(t, work) for t in targets}
    for t, tc in tcs.items():
        _log(a.quiet, f"[{t}] {tc.mode}: {tc.path} ({tc.version})" + (f" + {tc.ptxas} ({tc.ptxas_version}, PTX ISA {tc.ptx_isa})" if tc.ptxas else ""))

    mpath = out / "manifest.json"
    old = json.loads(mpath.read_text()) if mpath.is_file() else {}
    old_entries = {(e["target"], e["variant_key"]): e for e in old.get("kernels", [])}
    jobs = plan(targets, src, header, {t: tc.mode for t, tc in tcs.items()})

    def current(job: Job) -> dict | None:
        e = old_entries.get((job.target, job.key))
        if a.force or e is None:
            return None
        obj = out / e["object"]
        tc = tcs[job.target]
        same_tc = e.get("toolchain_mode") == tc.mode and e["compiler_version"].startswith(tc.version)
        if e["source_hash"] == job.shash and e["flags"] == job.flags and same_tc and obj.is_file() and _sha256(obj) == e["sha256"]:
            return e
        return None

    results, todo = {}, []
    for job in jobs:
        e = current(job)
        if e is not None:
            results[(job.target, job.key)] = e
            _log(a.quiet, f"[{job.target}] {job.key}: up to date")
        else:
            todo.append(job)
    errors = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = {pool.submit(compile_job, j, tcs[j.target], src, work, out): j for j in todo}
        for f in concurrent.futures.as_completed(futs):
            j = futs[f]
            try:
                e = f.result()
            except BuildError as err:
                errors.append(str(err))
                continue
            results[(j.target, j.key)] = e
            r = e["resources"]
            summary = (
                f"vgpr {r['vgpr']} agpr {r['agpr']} sgpr {r['sgpr']} lds {r['lds']} scratch {r['scratch']} occupancy {r['occupancy']}"
                if j.target == "gfx950"
                else f"regs {r['registers']} smem {r['shared']} stack {r['stack']} spills {r['spill_stores']}/{r['spill_loads']}"
            )
            _log(a.quiet, f"[{j.target}] {j.key}: built, param_size {e['param_size']}, {summary}")
    if errors:
        raise BuildError("\n".join(errors))

    # Entries for targets not built this time survive, if the catalog still has them.
    known = {(t, catalog.variant_key(k, v)) for k in catalog.KERNELS for t in k.targets for v in k.variants}
    for key, e in old_entries.items():
        if key[0] not in targets and key in known:
            results.setdefault(key, e)
    toolchains = {t: v for t, v in old.get("toolchains", {}).items() if t not in targets}
    toolchains.update({t: tc.describe() for t, tc in tcs.items()})
    order = {(t, catalog.variant_key(k, v)): i for i, (k, t, v) in enumerate((k, t, v) for k in catalog.KERNELS for t in TARGETS for v in k.variants)}
    manifest = {
        "schema": SCHEMA,
        "kernels": sorted(results.values(), key=lambda e: order.get((e["target"], e["variant_key"]), 1 << 30)),
        "toolchains": toolchains,
        "driver_floor": " ".join(toolchains[t]["driver_floor"] for t in TARGETS if t in toolchains),
    }
    out.mkdir(parents=True, exist_ok=True)
    tmp = mpath.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, mpath)
    _log(a.quiet, f"wrote {mpath} ({len(manifest['kernels'])} kernels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
