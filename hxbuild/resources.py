"""What a built kernel uses, read from its code object and cross-checked against the compiler's own report.

gfx950: the AMDGPU metadata note (msgpack) gives registers, LDS, scratch and
the kernarg layout; `clang -S` prints the same counts as comments, and the two
must agree. Occupancy is computed from the counts (gfx950_occupancy).
sm_90a: the cubin's .nv.info gives the parameter layout; `ptxas -v` gives
registers, shared memory, stack and spills.
"""

from __future__ import annotations

import re

from .hipindexer_modules import codeobj
from .process import BuildError

_ASM_KEYS = {"NumVgprs": "vgpr", "NumAgprs": "agpr", "TotalNumSgprs": "sgpr", "ScratchSize": "scratch",
             "Occupancy": "occupancy"}


def parse_amdgpu_asm(text: str) -> dict:
    """The resource comments of a gfx950 `clang -S` listing."""
    out = {}
    for key, name in _ASM_KEYS.items():
        m = re.search(rf"^; {key}: (\d+)", text, re.M)
        if m:
            out[name] = int(m.group(1))
    m = re.search(r"^; LDSByteSize: (\d+)", text, re.M)
    if m:
        out["lds"] = int(m.group(1))
    return out


def gfx950_occupancy(vgpr: int, agpr: int, lds: int, block: int, sgpr: int = 0) -> int:
    """Waves per SIMD: 512 unified VGPRs (AGPRs start at the 4-aligned end of
    the VGPRs), granule 8, max 8; SGPRs (the metadata's count, with VCC and
    the other extras) by LLVM's GFX9 steps: up to 80 ten waves, 88 nine, 100
    eight, more seven; LDS 160 KiB per CU in 1280-byte granules."""
    total = (-(-vgpr // 4) * 4 + agpr) if agpr else vgpr
    alloc = max(8, -(-total // 8) * 8)
    waves = min(8, 512 // alloc)
    if sgpr:
        waves = min(waves, 10 if sgpr <= 80 else 9 if sgpr <= 88 else 8 if sgpr <= 100 else 7)
    if lds > 0:
        wgs_per_cu = 163840 // (-(-lds // 1280) * 1280)
        waves_per_wg = -(-block // 64)
        waves = min(waves, -(-wgs_per_cu * waves_per_wg // 4))  # LLVM rounds up: a CU's waves over its 4 SIMDs
    return waves


def amd_resources(obj: bytes, asm: str, symbol: str, block: int) -> tuple[int, dict]:
    """(param struct size, resources) of a gfx950 code object; raises BuildError on anything unexpected."""
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
    res["occupancy"] = gfx950_occupancy(res["vgpr"], res["agpr"], res["lds"], block, res["sgpr"])
    res["asm"] = parse_amdgpu_asm(asm)
    bad = [k for k in ("vgpr", "agpr", "scratch", "occupancy") if res["asm"].get(k) != res[k]]
    if bad:
        raise BuildError(f"{symbol}: code object and -S disagree on {bad}: note {res}, asm {res['asm']}")
    if res["max_flat_workgroup_size"] != block:
        raise BuildError(f"{symbol}: launch bounds {res['max_flat_workgroup_size']} != catalog block {block}")
    return size, res


_PTXAS_FUNC = re.compile(r"Function properties for (\S+)\n(.*?)(?=Function properties for|\Z)", re.S)


def parse_ptxas(text: str, symbol: str) -> dict:
    """`symbol`'s counts in a `ptxas -v` log."""
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
    """(param struct size, resources) of an sm_90a cubin; raises BuildError on anything unexpected."""
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
